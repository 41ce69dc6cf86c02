//! What the caches hold: a byte range of an immutable object, keyed by the object's id and the
//! range itself, and the arithmetic that splits a read into blocks.

use std::io::{Read, Write};
use std::ops::Range;

use bytes::Bytes;
use foyer::{Code, Error as FoyerError, ErrorKind as FoyerErrorKind};

/// The largest value accepted when decoding from disk: a corrupt length must not turn into a
/// huge allocation. Matches the largest block size [`crate::CacheConfig`] accepts.
pub(crate) const MAX_BLOCK_SIZE: u64 = 1 << 30;

/// Names bytes `[start, start + len)` of the object with `id`.
///
/// The range is part of the key, not just a block index, so an entry names its bytes without
/// reference to the block size: entries recovered from disk after the block size changed, and a
/// whole-object entry that coincides with block 0 of a small object, can only ever be the right
/// bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct BlockKey {
    pub id: u128,
    pub start: u64,
    pub len: u64,
}

impl BlockKey {
    pub fn range(&self) -> Range<u64> {
        self.start..self.start + self.len
    }
}

const KEY_LEN: usize = 16 + 8 + 8;

// Errors from `Write` must go through `FoyerError::io_error`: foyer serialises into a bounded
// buffer and recognises a full buffer (`WriteZero`) only through that conversion.
impl Code for BlockKey {
    fn encode(&self, writer: &mut impl Write) -> foyer::Result<()> {
        let mut buf = [0u8; KEY_LEN];
        buf[..16].copy_from_slice(&self.id.to_le_bytes());
        buf[16..24].copy_from_slice(&self.start.to_le_bytes());
        buf[24..].copy_from_slice(&self.len.to_le_bytes());
        writer.write_all(&buf).map_err(FoyerError::io_error)
    }

    fn decode(reader: &mut impl Read) -> foyer::Result<Self> {
        let mut buf = [0u8; KEY_LEN];
        reader.read_exact(&mut buf).map_err(FoyerError::io_error)?;
        let u64_at = |at: usize| u64::from_le_bytes(buf[at..at + 8].try_into().expect("8 bytes"));
        Ok(BlockKey {
            id: u128::from_le_bytes(buf[..16].try_into().expect("16 bytes")),
            start: u64_at(16),
            len: u64_at(24),
        })
    }

    fn estimated_size(&self) -> usize {
        KEY_LEN
    }
}

/// The bytes of one block (or of one whole object). `Bytes` so that readers get zero-copy
/// slices of what the cache holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Block(pub Bytes);

impl Code for Block {
    fn encode(&self, writer: &mut impl Write) -> foyer::Result<()> {
        writer
            .write_all(&(self.0.len() as u64).to_le_bytes())
            .map_err(FoyerError::io_error)?;
        writer.write_all(&self.0).map_err(FoyerError::io_error)
    }

    fn decode(reader: &mut impl Read) -> foyer::Result<Self> {
        let mut len = [0u8; 8];
        reader.read_exact(&mut len).map_err(FoyerError::io_error)?;
        let len = u64::from_le_bytes(len);
        if len > MAX_BLOCK_SIZE {
            // OutOfRange: foyer drops the disk entry and reports a miss instead of failing the
            // read.
            return Err(FoyerError::new(
                FoyerErrorKind::OutOfRange,
                format!("cached block of {len} bytes is larger than any block"),
            ));
        }
        let mut data = vec![0u8; len as usize];
        reader.read_exact(&mut data).map_err(FoyerError::io_error)?;
        Ok(Block(Bytes::from(data)))
    }

    fn estimated_size(&self) -> usize {
        8 + self.0.len()
    }
}

/// `range` clamped to an object of `size` bytes; empty (`start == end`) when nothing is left.
pub(crate) fn clamp(range: Range<u64>, size: u64) -> Range<u64> {
    let end = range.end.min(size);
    let start = range.start.min(end);
    start..end
}

/// The key of block `index` of object `id` of `size` bytes: block i covers
/// `[i * block_size, min((i + 1) * block_size, size))`.
pub(crate) fn block_key(id: u128, size: u64, block_size: u64, index: u64) -> BlockKey {
    let start = index * block_size;
    debug_assert!(start < size, "block {index} is past the end of the object");
    BlockKey {
        id,
        start,
        len: block_size.min(size - start),
    }
}

/// Indexes of the blocks that hold the non-empty, in-bounds `range`.
pub(crate) fn blocks_of(range: &Range<u64>, block_size: u64) -> Range<u64> {
    debug_assert!(range.start < range.end);
    range.start / block_size..(range.end - 1) / block_size + 1
}

/// How many blocks an object of `size` bytes has.
pub(crate) fn block_count(size: u64, block_size: u64) -> u64 {
    size.div_ceil(block_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: Code + PartialEq + std::fmt::Debug>(v: &T) {
        let mut buf = Vec::new();
        v.encode(&mut buf).unwrap();
        assert_eq!(buf.len(), v.estimated_size());
        assert_eq!(&T::decode(&mut buf.as_slice()).unwrap(), v);
    }

    #[test]
    fn keys_and_blocks_round_trip() {
        round_trip(&BlockKey {
            id: u128::MAX - 7,
            start: 1 << 40,
            len: 4096,
        });
        round_trip(&Block(Bytes::from_static(b"immutable bytes")));
        round_trip(&Block(Bytes::new()));
    }

    #[test]
    fn a_full_buffer_is_reported_as_a_size_limit() {
        let block = Block(Bytes::from(vec![7u8; 100]));
        let mut small = [0u8; 50];
        let err = block.encode(&mut small.as_mut_slice()).unwrap_err();
        assert_eq!(err.kind(), FoyerErrorKind::BufferSizeLimit);
    }

    #[test]
    fn a_corrupt_length_is_rejected_before_allocating() {
        let mut buf = (MAX_BLOCK_SIZE + 1).to_le_bytes().to_vec();
        buf.extend_from_slice(&[0; 16]);
        let err = Block::decode(&mut buf.as_slice()).unwrap_err();
        assert_eq!(err.kind(), FoyerErrorKind::OutOfRange);
    }

    #[test]
    fn block_math() {
        // 10 blocks of 100 and a last one of 50.
        let size = 1050;
        assert_eq!(block_count(size, 100), 11);
        assert_eq!(block_count(1000, 100), 10);
        assert_eq!(block_count(0, 100), 0);
        assert_eq!(block_key(1, size, 100, 3).range(), 300..400);
        assert_eq!(block_key(1, size, 100, 10).range(), 1000..1050);
        assert_eq!(blocks_of(&(0..1), 100), 0..1);
        assert_eq!(blocks_of(&(99..101), 100), 0..2);
        assert_eq!(blocks_of(&(100..200), 100), 1..2);
        assert_eq!(blocks_of(&(150..1050), 100), 1..11);
        assert_eq!(clamp(0..u64::MAX, size), 0..size);
        assert_eq!(clamp(2000..3000, size), size..size);
        // A reversed range is empty.
        assert_eq!(clamp(Range { start: 20, end: 10 }, size), 10..10);
    }
}
