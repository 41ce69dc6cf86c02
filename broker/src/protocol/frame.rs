//! Length-prefixed frames: a 4-byte big-endian size, then that many bytes.
//!
//! Invariants (docs/invariants.md 7, bad input):
//! - The size is checked against `max_request_bytes` before anything is allocated, so a client
//!   announcing a 2 GiB frame costs nothing but a closed connection, and the buffer grows only
//!   as bytes arrive, so one announcing 100 MiB and sending nothing costs no memory either.
//! - Every frame holds permits of the broker-wide [`RequestBudget`] for all its bytes, taken
//!   at once when its size is known and before its body is read, and kept until the request
//!   it carries is answered. When the budget is spent, reading pauses (the client's bytes
//!   wait in the socket): memory of requests in flight is bounded across all connections, and
//!   a frame is never half-admitted (no frame waits for budget while holding part of it).
//!   Bytes read ahead of their frame's turn are bounded by the read buffer, per connection.
//! - A frame must arrive whole within the read timeout of its first byte (or of the moment
//!   it got its budget, if it waited), so a sender trickling a frame holds a connection and
//!   its budget for at most that long.
//!
//! Frames are split off one read buffer per connection. Once the previous frames are dropped
//! (their batches are in the log), `reserve` reclaims the same allocation, so a steady producer
//! costs no fresh memory (and no page faults) per request.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// Read buffer kept per connection; frames larger than this grow it temporarily.
const READ_BUFFER: usize = 256 * 1024;
/// A frame read in wake-ups of at least this much...
const MIN_LOW_WATER: usize = 64 * 1024;
/// ...and at most this much (the kernel grows the socket's receive buffer to twice it).
const MAX_LOW_WATER: usize = 256 * 1024;

/// Sets the connection's receive low-water mark (see [`FrameReader::with_low_water`]).
pub type SetLowWater = Box<dyn FnMut(usize) -> std::io::Result<()> + Send>;

/// While a large frame arrives, the reader asks the kernel to wake it only once a good part
/// of the rest is queued: a client that sends a 1 MB produce as 64 TLS records of 16 KiB, at
/// its own pace, otherwise wakes the reader, and costs a receive call or five, per record.
struct LowWater {
    set: SetLowWater,
    /// Bytes of the stream that may sit in buffers between the socket and this reader (a TLS
    /// layer's), which the kernel cannot count.
    slack: usize,
    current: usize,
}

impl LowWater {
    /// The frame needs `missing` more bytes (`first_read`: for this fill of the buffer). The
    /// mark may ask for up to what it lacks beyond the slack; it is set at the first read and
    /// then only lowered, each time to half of what it may ask (a TLS stream hands over 16 KiB
    /// per read: a call per read would cost more than the wake-ups saved), and back to 1 once
    /// less than `MIN_LOW_WATER` is left.
    fn expect(&mut self, missing: usize, first_read: bool) -> std::io::Result<()> {
        let room = missing.saturating_sub(self.slack).min(MAX_LOW_WATER);
        if self.current <= room && (self.current > 1 || !first_read) {
            return Ok(());
        }
        let want = if first_read { room } else { room / 2 };
        let want = if want >= MIN_LOW_WATER { want } else { 1 };
        if want != self.current {
            (self.set)(want)?;
            self.current = want;
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame size {size} is outside 0..={max}")]
    BadSize { size: i64, max: u32 },
    #[error("connection closed in the middle of a frame")]
    Truncated,
    #[error(
        "a frame of {size} bytes did not arrive whole within {timeout:?} ({received} received)"
    )]
    TimedOut {
        size: usize,
        received: usize,
        timeout: Duration,
    },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Bytes of request frames the broker holds at once, across all connections (Kafka's
/// `queued.max.request.bytes`).
#[derive(Clone)]
pub struct RequestBudget {
    permits: Arc<Semaphore>,
    total: usize,
}

impl RequestBudget {
    pub fn new(bytes: usize) -> RequestBudget {
        let total = bytes.min(Semaphore::MAX_PERMITS);
        RequestBudget {
            permits: Arc::new(Semaphore::new(total)),
            total,
        }
    }

    /// Bytes held by frames now.
    pub fn in_use(&self) -> usize {
        self.total - self.permits.available_permits()
    }
}

/// One frame (without its length prefix) and its share of the request budget.
pub struct Frame {
    pub bytes: Bytes,
    /// Released when the request is answered (dropped with the frame's owner).
    pub budget: OwnedSemaphorePermit,
    /// Whether this frame had to wait for budget.
    pub waited: bool,
}

pub struct FrameReader<R> {
    reader: R,
    buf: BytesMut,
    max: u32,
    budget: RequestBudget,
    read_timeout: Duration,
    /// When the first byte of the frame being read arrived.
    started: Option<Instant>,
    low_water: Option<LowWater>,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(
        reader: R,
        max: u32,
        budget: RequestBudget,
        read_timeout: Duration,
    ) -> FrameReader<R> {
        FrameReader {
            reader,
            buf: BytesMut::new(),
            max: max.min(budget.total.min(u32::MAX as usize) as u32),
            budget,
            read_timeout,
            started: None,
            low_water: None,
        }
    }

    /// Reads large frames in few wake-ups: `set` changes the socket's receive low-water mark,
    /// and `slack` is what may be buffered between the socket and this reader. The mark never
    /// asks for more than the frame still lacks beyond `slack`, so it cannot hold back bytes
    /// the frame needs; between frames it is 1. Where `set` fails, it is not used again.
    pub fn with_low_water(mut self, set: SetLowWater, slack: usize) -> FrameReader<R> {
        self.low_water = Some(LowWater {
            set,
            slack,
            current: 1,
        });
        self
    }

    /// Whether part of a frame has arrived (the connection is not idle).
    pub fn in_frame(&self) -> bool {
        !self.buf.is_empty()
    }

    /// Reads until `buf` holds at least `n` bytes. `false` on end of stream.
    async fn fill(&mut self, n: usize) -> Result<bool, FrameError> {
        let mut first_read = true;
        while self.buf.len() < n {
            if let Some(low_water) = &mut self.low_water {
                if let Err(e) = low_water.expect(n - self.buf.len(), first_read) {
                    tracing::debug!(error = %e, "cannot set the receive low-water mark");
                    self.low_water = None;
                }
            }
            // Grow by what is still missing, but at most 1 MiB at a time: memory follows the
            // bytes a client actually sends, not the size it announces.
            if self.buf.capacity() == self.buf.len() {
                self.buf
                    .reserve((n - self.buf.len()).clamp(READ_BUFFER, 4 * READ_BUFFER));
            }
            // Before its first byte a frame has no deadline: waiting for one is idleness.
            let read = match self.started {
                Some(started) => tokio::time::timeout_at(
                    started + self.read_timeout,
                    self.reader.read_buf(&mut self.buf),
                )
                .await
                .ok(),
                None => Some(self.reader.read_buf(&mut self.buf).await),
            };
            let Some(read) = read else {
                return Err(FrameError::TimedOut {
                    size: n,
                    received: self.buf.len(),
                    timeout: self.read_timeout,
                });
            };
            if read? == 0 {
                return Ok(false);
            }
            self.started.get_or_insert_with(Instant::now);
            first_read = false;
        }
        Ok(true)
    }

    /// The next frame; `Ok(None)` on a clean end of stream between frames. Cancel-safe: bytes
    /// read stay buffered for the next call, and a frame's start time is kept.
    pub async fn next(&mut self) -> Result<Option<Frame>, FrameError> {
        if self.buf.is_empty() {
            self.started = None;
        } else {
            // Bytes of this frame were read along with the previous one.
            self.started.get_or_insert_with(Instant::now);
        }
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
        let (budget, waited) = match self
            .budget
            .permits
            .clone()
            .try_acquire_many_owned(total as u32)
        {
            Ok(p) => (p, false),
            Err(_) => {
                // Paused: no more of this connection is read until the budget frees up. The
                // wait does not count against the frame's deadline: under load, a client
                // whose request waits its turn is not at fault.
                let p = self
                    .budget
                    .permits
                    .clone()
                    .acquire_many_owned(total as u32)
                    .await
                    .expect("the request budget is never closed");
                self.started = Some(Instant::now());
                (p, true)
            }
        };
        if !self.fill(total).await? {
            return Err(FrameError::Truncated);
        }
        let mut frame = self.buf.split_to(total);
        frame.advance(4);
        self.started = None;
        Ok(Some(Frame {
            bytes: frame.freeze(),
            budget,
            waited,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(data: &[u8], max: u32) -> FrameReader<&[u8]> {
        FrameReader::new(
            data,
            max,
            RequestBudget::new(1 << 30),
            Duration::from_secs(5),
        )
    }

    async fn frames(data: &[u8], max: u32) -> Vec<Result<Option<Bytes>, FrameError>> {
        let mut r = reader(data, max);
        let mut out = vec![];
        loop {
            let f = r.next().await.map(|f| f.map(|f| f.bytes));
            let stop = !matches!(f, Ok(Some(_)));
            out.push(f);
            if stop {
                return out;
            }
        }
    }

    /// A client sends a 1 MiB frame in 16 KiB pieces at its own pace, then waits for the
    /// answer; a tiny frame follows once it has one.
    #[tokio::test]
    async fn a_large_frame_is_read_in_few_wake_ups_and_never_held_back() {
        use std::os::fd::AsRawFd;
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let len = 1usize << 20;
        let (next_tx, next_rx) = tokio::sync::oneshot::channel::<()>();
        let client = tokio::spawn(async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            let mut bytes = (len as u32).to_be_bytes().to_vec();
            bytes.extend((0..len).map(|i| (i % 251) as u8));
            for piece in bytes.chunks(16 * 1024) {
                s.write_all(piece).await.unwrap();
                tokio::time::sleep(Duration::from_micros(100)).await;
            }
            next_rx.await.unwrap();
            s.write_all(&[0, 0, 0, 1, 42]).await.unwrap();
            s
        });
        let (socket, _) = listener.accept().await.unwrap();
        let fd = socket.as_raw_fd();
        let marks = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = marks.clone();
        let set: SetLowWater = Box::new(move |bytes| {
            seen.lock().unwrap().push(bytes);
            crate::sys::set_receive_low_water(fd, bytes)
        });
        let mut r = FrameReader::new(
            socket,
            2 << 20,
            RequestBudget::new(1 << 30),
            Duration::from_secs(30),
        )
        .with_low_water(set, 0);
        // Generous deadlines: a mark asking for more than the frame lacks would hold it until
        // the 30 s read timeout.
        let within = Duration::from_secs(10);
        let frame = tokio::time::timeout(within, r.next()).await.unwrap();
        let frame = frame.unwrap().unwrap();
        assert_eq!(frame.bytes.len(), len);
        assert!(frame
            .bytes
            .iter()
            .enumerate()
            .all(|(i, b)| *b == (i % 251) as u8));
        next_tx.send(()).unwrap();
        let small = tokio::time::timeout(within, r.next()).await.unwrap();
        assert_eq!(&small.unwrap().unwrap().bytes[..], &[42]);
        let marks = marks.lock().unwrap().clone();
        assert!(marks.iter().any(|&m| m >= MIN_LOW_WATER), "{marks:?}");
        assert!(marks.iter().all(|&m| m <= MAX_LOW_WATER), "{marks:?}");
        assert_eq!(
            marks.last(),
            Some(&1),
            "back to 1 between frames: {marks:?}"
        );
        assert!(marks.len() <= 8, "a call per read: {marks:?}");
        drop(client.await.unwrap());
    }

    #[tokio::test]
    async fn the_mark_leaves_the_slack_unasked() {
        let marks = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = marks.clone();
        let mut data = (600_000u32).to_be_bytes().to_vec();
        data.resize(4 + 600_000, 7);
        /// Hands over at most 4 KiB per read.
        struct Trickle<'a>(&'a [u8]);
        impl AsyncRead for Trickle<'_> {
            fn poll_read(
                mut self: std::pin::Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
                buf: &mut tokio::io::ReadBuf<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                let n = self.0.len().min(4096).min(buf.remaining());
                buf.put_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                std::task::Poll::Ready(Ok(()))
            }
        }
        let mut r = FrameReader::new(
            Trickle(&data),
            1 << 20,
            RequestBudget::new(1 << 30),
            Duration::from_secs(5),
        )
        .with_low_water(
            Box::new(move |bytes| {
                seen.lock().unwrap().push(bytes);
                Ok(())
            }),
            500_000,
        );
        assert_eq!(r.next().await.unwrap().unwrap().bytes.len(), 600_000);
        // 595,908 lacking after the first read, 500,000 of slack: 95,908 asked; after the
        // next read less may be asked than that, and half of it is below the minimum.
        let marks = marks.lock().unwrap().clone();
        assert_eq!(marks, [95_908, 1]);
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

    #[tokio::test]
    async fn frames_hold_the_budget_until_dropped_and_reading_pauses_when_it_is_spent() {
        let budget = RequestBudget::new(100);
        let mut data = vec![];
        for _ in 0..2 {
            data.extend_from_slice(&56u32.to_be_bytes());
            data.extend_from_slice(&[7u8; 56]);
        }
        let mut r = FrameReader::new(&data[..], 100, budget.clone(), Duration::from_secs(5));
        let first = r.next().await.unwrap().unwrap();
        assert_eq!(budget.in_use(), 60);
        // The second frame needs 60 of the 40 left: the read waits until the first is dropped.
        let pending = r.next();
        tokio::pin!(pending);
        let early = tokio::time::timeout(Duration::from_millis(50), &mut pending).await;
        assert!(early.is_err(), "read on with the budget spent");
        drop(first);
        let second = pending.await.unwrap().unwrap();
        assert!(second.waited);
        assert_eq!(budget.in_use(), 60);
        drop(second);
        assert_eq!(budget.in_use(), 0);
        // A frame larger than the whole budget is refused like an oversized one.
        let mut r = FrameReader::new(&[0u8, 0, 0, 200][..], 1000, budget, Duration::from_secs(5));
        assert!(matches!(
            r.next().await,
            Err(FrameError::BadSize { max: 100, .. })
        ));
    }

    #[tokio::test]
    async fn a_trickling_frame_times_out() {
        let (mut client, server) = tokio::io::duplex(64);
        let mut r = FrameReader::new(
            server,
            1000,
            RequestBudget::new(1 << 20),
            Duration::from_millis(300),
        );
        let feeder = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            client.write_all(&[0, 0, 0, 100]).await.unwrap();
            for _ in 0..99 {
                tokio::time::sleep(Duration::from_millis(20)).await;
                if client.write_all(&[1]).await.is_err() {
                    return;
                }
            }
        });
        let e = r.next().await.err().expect("timed out");
        assert!(matches!(e, FrameError::TimedOut { size: 104, .. }), "{e}");
        feeder.abort();
    }
}
