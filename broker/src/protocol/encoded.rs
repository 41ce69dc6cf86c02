//! A response frame as the writer takes it: chunks, some of them also file spans.

use bytes::Bytes;

use crate::log::handles::FileSpan;

/// A response frame, encoded: its chunks in order, length prefix included, and which of them
/// are record bytes that also lie in a segment file (by chunk index, ascending), for a socket
/// that can be sent them from the page cache.
#[derive(Debug, Default)]
pub struct Encoded {
    pub chunks: Vec<Bytes>,
    pub files: Vec<(usize, FileSpan)>,
}

impl Encoded {
    /// The frame's length, prefix included.
    pub fn frame_len(&self) -> usize {
        self.chunks.iter().map(Bytes::len).sum()
    }
}
