//! The writing half of a connection: response frames out, each whole and in order.
//!
//! On a plaintext socket, record bytes that lie in a segment file ([`Encoded::files`]) are
//! sent from the page cache with sendfile(2) and the frame's other chunks are written around
//! them with vectored writes, so the records a consumer or a follower reads are never copied
//! by the broker (Kafka's `transferTo`). Through TLS every chunk is written to rustls, which
//! has to read the bytes to encrypt them.
//!
//! Invariants:
//! - the bytes on the wire are the frame's chunks in order, whichever way each is sent (the
//!   tests below compare both ways, for every Fetch version and around every size boundary);
//! - a span's descriptor is lent from the read until its frame is written, within the
//!   lending budget of `log/handles.rs`, and the caller bounds the write by
//!   `socket_io_timeout_ms`: a client that stops reading mid-frame holds a file no longer
//!   than it holds any response, and no number of clients holds more than the budget;
//! - a segment file shorter than the span read from it (it cannot be, see `log/segment.rs`)
//!   ends the connection with an error rather than leaving the frame short.

use std::io;
use std::os::fd::AsFd;

use bytes::{Buf, Bytes};
use tokio::io::{AsyncWrite, AsyncWriteExt, Interest};
use tokio::net::tcp::OwnedWriteHalf;

use crate::log::handles::FileSpan;
use crate::protocol::Encoded;
use crate::sys;

/// Chunks per vectored write (Linux takes up to 1,024; more than this is rare in one frame).
const MAX_SLICES: usize = 64;

/// A connection's writing half: the socket's, or the TLS stream's.
pub(super) enum WriteHalf {
    Plain(OwnedWriteHalf),
    Tls(Box<dyn AsyncWrite + Send + Unpin>),
}

impl WriteHalf {
    /// Writes one frame whole; the bytes sent from the page cache.
    pub(super) async fn write_frame(&mut self, frame: Encoded) -> io::Result<u64> {
        match self {
            WriteHalf::Plain(socket) => write_plain(socket, frame).await,
            WriteHalf::Tls(stream) => {
                write_chunks(stream, frame.chunks).await?;
                Ok(0)
            }
        }
    }

    pub(super) async fn shutdown(&mut self) {
        let _ = match self {
            WriteHalf::Plain(socket) => socket.shutdown().await,
            WriteHalf::Tls(stream) => stream.shutdown().await,
        };
    }
}

/// The frame's chunks by vectored writes, its file spans by sendfile (only reads of
/// `handles::MIN_SPAN` bytes or more are lent one, see `log/handles.rs`), the socket corked
/// meanwhile so that the small chunks between spans go out in full segments with the pages
/// after them rather than as packets of their own.
async fn write_plain(socket: &mut OwnedWriteHalf, frame: Encoded) -> io::Result<u64> {
    let Encoded { chunks, files } = frame;
    if files.is_empty() {
        write_chunks(socket, chunks).await?;
        return Ok(0);
    }
    // Without the cork the frame is still whole, only in more packets. A write cut short
    // by the caller's timeout leaves it corked: the connection is closed then.
    let corked = sys::set_cork(socket.as_ref().as_fd(), true).is_ok();
    let written = write_spans(socket, chunks, files).await;
    if corked {
        let _ = sys::set_cork(socket.as_ref().as_fd(), false);
    }
    written
}

async fn write_spans(
    socket: &mut OwnedWriteHalf,
    chunks: Vec<Bytes>,
    files: Vec<(usize, FileSpan)>,
) -> io::Result<u64> {
    let mut chunks = chunks.into_iter();
    let mut next = 0;
    let mut from_files = 0u64;
    for (at, span) in files {
        write_chunks(socket, chunks.by_ref().take(at - next).collect()).await?;
        let chunk = chunks.next();
        debug_assert_eq!(
            chunk.map(|c| c.len()),
            Some(span.len),
            "a span is its chunk"
        );
        send_span(socket, &span).await?;
        from_files += span.len as u64;
        next = at + 1;
    }
    write_chunks(socket, chunks.collect()).await?;
    Ok(from_files)
}

/// A span's bytes from the page cache to the socket.
async fn send_span(socket: &OwnedWriteHalf, span: &FileSpan) -> io::Result<()> {
    let stream = socket.as_ref();
    let mut sent = 0;
    while sent < span.len {
        let n = stream
            .async_io(Interest::WRITABLE, || {
                sys::sendfile(
                    stream.as_fd(),
                    &span.file,
                    span.offset + sent as u64,
                    span.len - sent,
                )
            })
            .await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "a segment file ended before the bytes read from it",
            ));
        }
        sent += n;
    }
    Ok(())
}

/// Writes chunks with vectored writes, resuming after partial writes.
async fn write_chunks<W: AsyncWrite + Unpin>(
    writer: &mut W,
    mut chunks: Vec<Bytes>,
) -> io::Result<()> {
    let mut first = 0;
    while first < chunks.len() {
        let slices: Vec<io::IoSlice<'_>> = chunks[first..]
            .iter()
            .take(MAX_SLICES)
            .map(|c| io::IoSlice::new(c))
            .collect();
        let mut n = writer.write_vectored(&slices).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        while n > 0 {
            let len = chunks[first].len();
            if n >= len {
                n -= len;
                first += 1;
            } else {
                chunks[first].advance(n);
                n = 0;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use kafka_protocol::protocol::StrBytes;
    use tokio::io::AsyncReadExt;
    use tokio::net::{TcpListener, TcpStream};

    use super::*;
    use crate::log::batch::{build, split_and_validate};
    use crate::log::config::LogConfig;
    use crate::log::handles::MIN_SPAN;
    use crate::log::{Batches, Log};
    use crate::protocol::fetch_response::{FetchResponse, Partition, Topic};

    /// A batch of one record whose whole length is `len` (searched: varint lengths grow).
    fn batch_of_len(len: usize) -> Bytes {
        let overhead = build(&[(None, Some(&[][..]))], 0).len();
        (len.saturating_sub(overhead + 8)..=len.saturating_sub(overhead))
            .map(|v| build(&[(None, Some(&vec![b'v'; v][..]))], 0))
            .find(|b| b.len() == len)
            .unwrap_or_else(|| panic!("no batch of {len} bytes"))
    }

    /// Batch lengths around every size boundary: where a batch gets a chunk of its own
    /// (4,096), where it is sent from the page cache ([`MIN_SPAN`]), pages, varint
    /// lengths, and more than a socket buffer holds.
    const LENGTHS: [usize; 12] = [
        100,
        4095,
        4096,
        4097,
        MIN_SPAN - 1,
        MIN_SPAN,
        MIN_SPAN + 1,
        65_536,
        70_001,
        1 << 20,
        (1 << 20) + 3,
        3 << 20,
    ];

    /// A log holding one batch of each length, and a read of each, plus one read of them all.
    fn reads(dir: &std::path::Path) -> Vec<Batches> {
        let config = LogConfig {
            max_message_bytes: 4 << 20,
            ..LogConfig::for_tests(64 << 20)
        };
        let mut log = Log::open(dir, config, 0).unwrap().0;
        for len in LENGTHS {
            let b = batch_of_len(len);
            log.append(&split_and_validate(&b, 4 << 20).unwrap(), 0, 0)
                .unwrap();
        }
        let mut out: Vec<Batches> = (0..LENGTHS.len() as i64)
            .map(|offset| log.read(offset, 1, i64::MAX).unwrap())
            .collect();
        out.push(log.read(0, 64 << 20, i64::MAX).unwrap());
        for (read, len) in out.iter().zip(LENGTHS) {
            assert_eq!(read.bytes.len(), len);
            let lent = (len >= MIN_SPAN).then_some(len);
            assert_eq!(read.file.as_ref().map(|f| f.len), lent, "{len}-byte read");
        }
        out
    }

    fn response(reads: &[Batches]) -> FetchResponse {
        let partitions = (reads.iter().enumerate())
            .map(|(i, read)| Partition {
                index: i as i32,
                error_code: 0,
                high_watermark: 99,
                last_stable_offset: 99,
                log_start_offset: 0,
                aborted: None,
                records: read.bytes.clone(),
                file: read.file.clone(),
                preferred_read_replica: -1,
            })
            .collect();
        FetchResponse {
            topics: vec![Topic {
                name: StrBytes::from_static_str("t"),
                topic_id: uuid::Uuid::from_u128(7),
                partitions,
            }],
            ..Default::default()
        }
    }

    /// A connected pair: the broker's writing half and the client's socket.
    async fn pair() -> (OwnedWriteHalf, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap());
        let (client, accepted) = tokio::join!(client, listener.accept());
        (accepted.unwrap().0.into_split().1, client.unwrap())
    }

    /// The frame as the client reads it, the reader starting after `delay` (so that the
    /// socket fills and sendfile sends part of a span at a time), and the bytes sent from
    /// the page cache.
    async fn through_socket(frame: Encoded, delay: Duration) -> (Vec<u8>, u64) {
        let (socket, mut client) = pair().await;
        let len = frame.frame_len();
        let mut out = WriteHalf::Plain(socket);
        let writer = tokio::spawn(async move { out.write_frame(frame).await.unwrap() });
        tokio::time::sleep(delay).await;
        let mut got = vec![0; len];
        client.read_exact(&mut got).await.unwrap();
        (got, writer.await.unwrap())
    }

    /// The frame as the copy path (TLS) writes it.
    async fn copied(frame: Encoded) -> Vec<u8> {
        let (writer, mut reader) = tokio::io::duplex(64 * 1024);
        let len = frame.frame_len();
        let mut out = WriteHalf::Tls(Box::new(writer));
        let writer = tokio::spawn(async move { out.write_frame(frame).await.unwrap() });
        let mut got = vec![0; len];
        reader.read_exact(&mut got).await.unwrap();
        assert_eq!(
            writer.await.unwrap(),
            0,
            "nothing from the page cache through TLS"
        );
        got
    }

    #[tokio::test]
    async fn sendfile_and_copy_write_the_same_bytes_for_every_fetch_version() {
        let dir = tempfile::tempdir().unwrap();
        let reads = reads(dir.path());
        let r = response(&reads);
        let spans: u64 = (reads.iter())
            .map(|read| read.bytes.len())
            .filter(|&len| len >= MIN_SPAN)
            .sum::<usize>() as u64;
        for version in 4..=17 {
            let joined: Vec<u8> = (r.encode(version, 3).unwrap().chunks.iter())
                .flat_map(|c| c.iter().copied())
                .collect();
            let (sent, from_files) =
                through_socket(r.encode(version, 3).unwrap(), Duration::ZERO).await;
            assert!(
                sent == joined,
                "v{version}: sendfile differs from the frame"
            );
            assert_eq!(from_files, spans, "v{version}");
            let copied = copied(r.encode(version, 3).unwrap()).await;
            assert!(copied == joined, "v{version}: the copy path differs");
        }
        // A reader that starts late: the socket fills, spans go out in parts.
        let joined: Vec<u8> = (r.encode(17, 3).unwrap().chunks.iter())
            .flat_map(|c| c.iter().copied())
            .collect();
        let (sent, _) = through_socket(r.encode(17, 3).unwrap(), Duration::from_millis(100)).await;
        assert!(sent == joined, "a slow reader gets the same bytes");
    }

    #[tokio::test]
    async fn a_client_that_stops_reading_holds_no_file_past_the_write_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let reads = reads(dir.path());
        let big = reads.last().unwrap();
        let file = big.file.as_ref().unwrap().file.clone();
        let before = Arc::strong_count(&file);
        let (socket, client) = pair().await;
        let mut out = WriteHalf::Plain(socket);
        let frame = response(std::slice::from_ref(big)).encode(12, 1).unwrap();
        assert!(
            Arc::strong_count(&file) > before,
            "the frame holds the file"
        );
        let write = tokio::time::timeout(Duration::from_millis(200), out.write_frame(frame));
        assert!(
            write.await.is_err(),
            "a client that never reads cannot take 8 MB"
        );
        assert_eq!(
            Arc::strong_count(&file),
            before,
            "the file is let go with the frame"
        );
        drop(client);
    }

    #[tokio::test]
    async fn a_file_shorter_than_its_span_is_an_error_not_a_short_frame() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), vec![1u8; MIN_SPAN]).unwrap();
        let file = Arc::new(std::fs::File::open(dir.path().join("f")).unwrap());
        let len = MIN_SPAN + 10;
        let frame = Encoded {
            chunks: vec![Bytes::from_static(b"head"), Bytes::from(vec![1u8; len])],
            files: vec![(1, FileSpan::unleased(file, 0, len))],
        };
        let (socket, _client) = pair().await;
        let err = WriteHalf::Plain(socket)
            .write_frame(frame)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    }
}
