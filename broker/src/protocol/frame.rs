//! Length-prefixed frames: a 4-byte big-endian size, then that many bytes.
//!
//! The size is checked against `max_request_bytes` before anything is allocated, so a client
//! announcing a 2 GiB frame costs nothing but a closed connection.

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame size {size} is outside 0..={max}")]
    BadSize { size: i64, max: u32 },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Reads the next frame; `Ok(None)` on a clean end of stream between frames.
pub async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    max: u32,
) -> Result<Option<Bytes>, FrameError> {
    let mut len = [0u8; 4];
    match reader.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let size = i32::from_be_bytes(len);
    if size < 0 || size as u32 > max {
        return Err(FrameError::BadSize {
            size: size as i64,
            max,
        });
    }
    let mut buf = BytesMut::zeroed(size as usize);
    reader.read_exact(&mut buf).await?;
    Ok(Some(buf.freeze()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_are_read_whole_and_oversized_ones_refused() {
        let mut data: &[u8] = &[0, 0, 0, 3, 1, 2, 3, 0x7f, 0xff, 0xff, 0xff];
        assert_eq!(
            read_frame(&mut data, 100).await.unwrap().unwrap().as_ref(),
            &[1, 2, 3]
        );
        assert!(matches!(
            read_frame(&mut data, 100).await,
            Err(FrameError::BadSize { .. })
        ));
        let mut empty: &[u8] = &[];
        assert!(read_frame(&mut empty, 100).await.unwrap().is_none());
        let mut negative: &[u8] = &[0xff, 0xff, 0xff, 0xff];
        assert!(read_frame(&mut negative, 100).await.is_err());
        let mut cut: &[u8] = &[0, 0, 0, 9, 1];
        assert!(read_frame(&mut cut, 100).await.is_err());
    }
}
