//! Kafka's generated-message encoding as `__consumer_offsets` records use it: classic
//! (i16 string and i32 bytes/array lengths) and flexible (compact lengths, tagged fields).
//! The reader never trusts a declared length beyond the bytes present.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Reads Kafka's generated-message encoding: classic (i16 string and i32 bytes/array lengths)
/// or, for flexible versions, compact (unsigned varint length + 1) with tagged fields.
pub(super) struct Reader {
    buf: Bytes,
    pub(super) flexible: bool,
}

impl Reader {
    /// A reader of `buf`, classic until told it is flexible.
    pub(super) fn classic(buf: Bytes) -> Reader {
        Reader {
            buf,
            flexible: false,
        }
    }

    pub(super) fn remaining(&self) -> usize {
        self.buf.remaining()
    }

    pub(super) fn i8(&mut self) -> Option<i8> {
        (self.buf.remaining() >= 1).then(|| self.buf.get_i8())
    }

    pub(super) fn uuid(&mut self) -> Option<uuid::Uuid> {
        let b = self.take(16)?;
        uuid::Uuid::from_slice(&b).ok()
    }

    pub(super) fn i16(&mut self) -> Option<i16> {
        (self.buf.remaining() >= 2).then(|| self.buf.get_i16())
    }

    pub(super) fn i32(&mut self) -> Option<i32> {
        (self.buf.remaining() >= 4).then(|| self.buf.get_i32())
    }

    pub(super) fn i64(&mut self) -> Option<i64> {
        (self.buf.remaining() >= 8).then(|| self.buf.get_i64())
    }

    fn uvarint(&mut self) -> Option<u32> {
        let mut v: u32 = 0;
        for shift in (0..35).step_by(7) {
            if !self.buf.has_remaining() {
                return None;
            }
            let b = self.buf.get_u8();
            v |= u32::from(b & 0x7f).checked_shl(shift)?;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    /// Length of a string (`wide`: of bytes or an array); `Some(None)` for null.
    fn len(&mut self, wide: bool) -> Option<Option<usize>> {
        let n = if self.flexible {
            i64::from(self.uvarint()?) - 1
        } else if wide {
            i64::from(self.i32()?)
        } else {
            i64::from(self.i16()?)
        };
        Some(usize::try_from(n).ok())
    }

    fn take(&mut self, n: usize) -> Option<Bytes> {
        (self.buf.remaining() >= n).then(|| self.buf.split_to(n))
    }

    pub(super) fn nullable_string(&mut self) -> Option<Option<String>> {
        match self.len(false)? {
            None => Some(None),
            Some(n) => Some(Some(String::from_utf8(self.take(n)?.to_vec()).ok()?)),
        }
    }

    pub(super) fn string(&mut self) -> Option<String> {
        self.nullable_string()?
    }

    pub(super) fn bytes(&mut self) -> Option<Bytes> {
        let n = self.len(true)??;
        self.take(n)
    }

    pub(super) fn array_len(&mut self) -> Option<usize> {
        self.len(true)?
    }

    /// Skips a tagged-field section (flexible versions only).
    pub(super) fn tagged_fields(&mut self) -> Option<()> {
        if self.flexible {
            for _ in 0..self.uvarint()? {
                self.uvarint()?;
                let size = self.uvarint()? as usize;
                self.take(size)?;
            }
        }
        Some(())
    }
}

/// A classic (non-flexible) string: an i16 length and the bytes.
pub(super) fn put_str(b: &mut BytesMut, s: &str) {
    b.put_i16(s.len() as i16);
    b.put_slice(s.as_bytes());
}

/// Kafka's flexible (compact) encoding.
pub(super) struct Writer(pub(super) BytesMut);

impl Writer {
    pub(super) fn uvarint(&mut self, mut v: u32) {
        while v >= 0x80 {
            self.0.put_u8((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.put_u8(v as u8);
    }

    pub(super) fn len(&mut self, n: usize) {
        self.uvarint(n as u32 + 1);
    }

    pub(super) fn string(&mut self, s: &str) {
        self.len(s.len());
        self.0.put_slice(s.as_bytes());
    }

    pub(super) fn nullable(&mut self, s: Option<&str>) {
        match s {
            Some(s) => self.string(s),
            None => self.uvarint(0),
        }
    }

    pub(super) fn no_tags(&mut self) {
        self.uvarint(0);
    }
}
