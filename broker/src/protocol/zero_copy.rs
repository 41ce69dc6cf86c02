//! A response buffer that does not copy record batches.
//!
//! Fetch responses carry batches that are slices of mapped segment files. The `kafka-protocol`
//! encoder writes a bytes field with one `put_slice` of the field's contents; this buffer
//! recognises slices that are exactly one of the registered record `Bytes` (same address, same
//! length) and keeps a reference to them instead of copying. The frame becomes a list of chunks
//! written with vectored I/O.
//!
//! Invariant: message encoding never seeks back or fills gaps (only record-batch encoding
//! does, which is never done into this buffer), so `seek` and `range` only ever touch the
//! chunk being written.

use std::ops::Range;

use bytes::buf::UninitSlice;
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::protocol::buf::ByteBufMut;

/// Below this, copying is cheaper than a separate chunk.
const MIN_ZERO_COPY: usize = 4096;

#[derive(Default)]
pub struct ChunkedBuf {
    chunks: Vec<Bytes>,
    current: BytesMut,
    /// Bytes in `chunks`.
    base: usize,
    registered: Vec<Bytes>,
    /// Registered records before this index were written already: the encoder writes them in
    /// the order they were registered, so the next one is found at once, not by a scan of
    /// all (a response over thousands of partitions would otherwise scan quadratically).
    next: usize,
}

impl ChunkedBuf {
    pub fn with_capacity(n: usize) -> ChunkedBuf {
        ChunkedBuf {
            current: BytesMut::with_capacity(n),
            ..Default::default()
        }
    }

    /// Registers bytes that, when written, are referenced rather than copied.
    pub fn register(&mut self, b: &Bytes) {
        if b.len() >= MIN_ZERO_COPY {
            self.registered.push(b.clone());
        }
    }

    pub fn len(&self) -> usize {
        self.base + self.current.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn into_chunks(mut self) -> Vec<Bytes> {
        if !self.current.is_empty() {
            self.chunks.push(self.current.freeze());
        }
        self.chunks
    }
}

unsafe impl BufMut for ChunkedBuf {
    fn remaining_mut(&self) -> usize {
        self.current.remaining_mut()
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        // SAFETY: forwarded; the caller initialised `cnt` bytes of `chunk_mut`.
        unsafe { self.current.advance_mut(cnt) }
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        self.current.chunk_mut()
    }

    fn put_slice(&mut self, src: &[u8]) {
        if src.len() >= MIN_ZERO_COPY {
            if let Some(i) = self.registered[self.next..]
                .iter()
                .position(|b| b.as_ptr() == src.as_ptr() && b.len() == src.len())
            {
                let b = self.registered[self.next + i].clone();
                self.next += i + 1;
                if !self.current.is_empty() {
                    let head = self.current.split().freeze();
                    self.base += head.len();
                    self.chunks.push(head);
                }
                self.base += b.len();
                self.chunks.push(b);
                return;
            }
        }
        self.current.extend_from_slice(src);
    }
}

impl ByteBufMut for ChunkedBuf {
    fn offset(&self) -> usize {
        self.len()
    }

    fn seek(&mut self, offset: usize) {
        assert!(offset >= self.base, "seek into a zero-copy chunk");
        self.current.resize(offset - self.base, 0);
    }

    fn range(&mut self, r: Range<usize>) -> &mut [u8] {
        assert!(r.start >= self.base, "range into a zero-copy chunk");
        &mut self.current[r.start - self.base..r.end - self.base]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::FetchResponse;
    use kafka_protocol::protocol::Encodable;

    #[test]
    fn registered_records_are_referenced_and_the_frame_matches_a_copying_encode() {
        let records = Bytes::from(vec![7u8; 10_000]);
        let small = Bytes::from(vec![1u8; 10]);
        let resp = FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
            .with_partitions(vec![
                PartitionData::default().with_records(Some(records.clone())),
                PartitionData::default().with_records(Some(small.clone())),
            ])]);
        for version in [4i16, 11, 12, 16] {
            let mut copy = BytesMut::new();
            resp.encode(&mut copy, version).unwrap();
            let mut chunked = ChunkedBuf::default();
            chunked.register(&records);
            chunked.register(&small);
            resp.encode(&mut chunked, version).unwrap();
            let chunks = chunked.into_chunks();
            assert!(
                chunks.iter().any(|c| c.as_ptr() == records.as_ptr()),
                "v{version}: records were copied"
            );
            let joined: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
            assert_eq!(joined, copy.to_vec(), "v{version}");
        }
    }
}
