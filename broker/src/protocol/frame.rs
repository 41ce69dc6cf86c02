//! Length-prefixed frames: a 4-byte big-endian size, then that many bytes.
//!
//! The size is checked against `max_request_bytes` before anything is allocated, so a client
//! announcing a 2 GiB frame costs nothing but a closed connection, and the buffer grows only
//! as bytes arrive, so one announcing 100 MiB and sending nothing costs nothing either.
//!
//! Frames are split off one read buffer per connection. Once the previous frames are dropped
//! (their batches are in the log), `reserve` reclaims the same allocation, so a steady producer
//! costs no fresh memory (and no page faults) per request.

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Read buffer kept per connection; frames larger than this grow it temporarily.
const READ_BUFFER: usize = 256 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame size {size} is outside 0..={max}")]
    BadSize { size: i64, max: u32 },
    #[error("connection closed in the middle of a frame")]
    Truncated,
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

pub struct FrameReader<R> {
    reader: R,
    buf: BytesMut,
    max: u32,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(reader: R, max: u32) -> FrameReader<R> {
        FrameReader {
            reader,
            buf: BytesMut::with_capacity(READ_BUFFER),
            max,
        }
    }

    /// Reads until `buf` holds at least `n` bytes. `false` on end of stream.
    async fn fill(&mut self, n: usize) -> Result<bool, FrameError> {
        while self.buf.len() < n {
            // Grow by what is still missing, but at most 1 MiB at a time: memory follows the
            // bytes a client actually sends, not the size it announces.
            if self.buf.capacity() == self.buf.len() {
                self.buf
                    .reserve((n - self.buf.len()).clamp(READ_BUFFER, 4 * READ_BUFFER));
            }
            if self.reader.read_buf(&mut self.buf).await? == 0 {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The next frame; `Ok(None)` on a clean end of stream between frames.
    pub async fn next(&mut self) -> Result<Option<Bytes>, FrameError> {
        if !self.fill(4).await? {
            return if self.buf.is_empty() {
                Ok(None)
            } else {
                Err(FrameError::Truncated)
            };
        }
        let size = i32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
        if size < 0 || size as u32 > self.max {
            return Err(FrameError::BadSize {
                size: size as i64,
                max: self.max,
            });
        }
        let total = 4 + size as usize;
        if !self.fill(total).await? {
            return Err(FrameError::Truncated);
        }
        let mut frame = self.buf.split_to(total);
        frame.advance(4);
        Ok(Some(frame.freeze()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn frames(data: &[u8], max: u32) -> Vec<Result<Option<Bytes>, FrameError>> {
        let mut r = FrameReader::new(data, max);
        let mut out = vec![];
        loop {
            let f = r.next().await;
            let stop = !matches!(f, Ok(Some(_)));
            out.push(f);
            if stop {
                return out;
            }
        }
    }

    #[tokio::test]
    async fn frames_are_read_whole_and_oversized_ones_refused() {
        let got = frames(
            &[0, 0, 0, 3, 1, 2, 3, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff],
            100,
        )
        .await;
        assert_eq!(
            got[0].as_ref().unwrap().as_ref().unwrap().as_ref(),
            &[1, 2, 3]
        );
        assert!(got[1].as_ref().unwrap().as_ref().unwrap().is_empty());
        assert!(matches!(got[2], Err(FrameError::BadSize { .. })));
        assert!(frames(&[], 100).await[0].as_ref().unwrap().is_none());
        assert!(matches!(
            frames(&[0xff, 0xff, 0xff, 0xff], 100).await[0],
            Err(FrameError::BadSize { .. })
        ));
        assert!(matches!(
            frames(&[0, 0, 0, 9, 1], 100).await[0],
            Err(FrameError::Truncated)
        ));
        assert!(matches!(
            frames(&[0, 0], 100).await[0],
            Err(FrameError::Truncated)
        ));
    }

    #[tokio::test]
    async fn frames_larger_than_the_buffer_and_many_small_ones_round_trip() {
        let mut data = vec![];
        let big = vec![9u8; READ_BUFFER * 3];
        data.extend_from_slice(&(big.len() as u32).to_be_bytes());
        data.extend_from_slice(&big);
        for i in 0..1000u32 {
            data.extend_from_slice(&4u32.to_be_bytes());
            data.extend_from_slice(&i.to_be_bytes());
        }
        let got = frames(&data, u32::MAX / 2).await;
        assert_eq!(got[0].as_ref().unwrap().as_ref().unwrap().len(), big.len());
        for i in 0..1000u32 {
            assert_eq!(
                got[1 + i as usize]
                    .as_ref()
                    .unwrap()
                    .as_ref()
                    .unwrap()
                    .as_ref(),
                &i.to_be_bytes()
            );
        }
    }
}
