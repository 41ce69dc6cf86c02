//! Reads of a partition over both tiers ([`Tier::read`], [`Tier::offset_for_timestamp`]): the
//! local log directly, remote segments through the block cache.
//!
//! A fetch below the local log start finds its segment's index object (one cached entry),
//! the position of the batch holding its offset, and reads whole batches from there: the
//! batch containing the offset first, then as many as fit in the fetch's byte budget. Every
//! batch is checked (CRC-32C, magic, length, offsets inside the segment) before it is served,
//! so a corrupt or truncated object is an error, never data. After each read the cache is
//! asked to read ahead, so a consumer replaying history finds its next blocks in flight.
//!
//! Reads are charged to the cache's "recent" budget when their segment lies within the
//! newest `remote_cache_memory_bytes` of the remote log (consumers just behind the local
//! window) and to the "replay" budget otherwise, so a full-history replay cannot evict what
//! readers near the tail use.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use strata_cache::{ObjectRef, ReadClass};
use strata_metadata::RemoteSegment;
use uuid::Uuid;

use super::index::{RemoteIndex, INTERVAL};
use super::{Tier, TierError};
use crate::log::batch::{self, BatchHeader, HEADER_LEN};
use crate::log::producer_state::ProducerState;
use crate::log::records;
use crate::log::txn_index::{self, AbortedTxn};
use crate::log::Batches;
use crate::partition::{
    Isolation, Offsets, Partition, Read, RemoteLog, RemoteProducers, TimeLookup, TopicPartition,
};

/// What a read returns: whole batches, the partition's offsets as of the read, and for a
/// read_committed read the aborted transactions that overlap the batches.
#[derive(Debug)]
pub struct Records {
    /// The batches; where they lie in a segment file for local reads only.
    pub batches: Batches,
    pub offsets: Offsets,
    pub aborted: Vec<AbortedTxn>,
}

/// A remote segment as the reader addresses it.
struct RemoteSource<'a> {
    tp: &'a TopicPartition,
    topic_id: &'a Uuid,
    segment: &'a RemoteSegment,
    /// The remote segment after this one, where readahead continues past its end.
    next: Option<&'a RemoteSegment>,
}

fn log_object(tp: &TopicPartition, topic_id: &Uuid, segment: &RemoteSegment) -> ObjectRef {
    ObjectRef {
        key: super::segment_key(tp, topic_id, segment.base_offset, &segment.id, "log"),
        id: segment.id.as_u128(),
        size: segment.size_bytes,
    }
}

impl<'a> RemoteSource<'a> {
    /// `segment` of `remote`, with the segment after it.
    pub fn new(
        tp: &'a TopicPartition,
        topic_id: &'a Uuid,
        remote: &'a RemoteLog,
        segment: &'a RemoteSegment,
    ) -> RemoteSource<'a> {
        let next = remote
            .segments
            .iter()
            .find(|s| s.base_offset > segment.base_offset);
        RemoteSource {
            tp,
            topic_id,
            segment,
            next,
        }
    }

    fn log_object(&self) -> ObjectRef {
        log_object(self.tp, self.topic_id, self.segment)
    }

    fn index_object(&self) -> ObjectRef {
        ObjectRef {
            key: super::segment_key(
                self.tp,
                self.topic_id,
                self.segment.base_offset,
                &self.segment.id,
                "index",
            ),
            // Distinct from the log object's id; uuids never differ in just this bit.
            id: self.segment.id.as_u128() ^ (1 << 127),
            size: self.segment.index_size_bytes,
        }
    }
}

/// The whole batches of `bytes` that end below `limit`.
fn below(bytes: Bytes, limit: i64) -> Result<Bytes, TierError> {
    let mut end = 0;
    for batch in records::batches(&bytes) {
        let (h, b) = batch.map_err(|e| TierError::Corrupt(e.to_string()))?;
        if h.last_offset() >= limit {
            break;
        }
        end += b.len();
    }
    Ok(bytes.slice(..end))
}

/// Which cache budget a read of `segment` is charged to (see the module doc).
pub fn read_class(remote: &RemoteLog, segment: &RemoteSegment, recent_bytes: u64) -> ReadClass {
    let newer: u64 = remote
        .segments
        .iter()
        .filter(|s| s.base_offset > segment.base_offset)
        .map(|s| s.size_bytes)
        .sum();
    if newer < recent_bytes {
        ReadClass::Recent
    } else {
        ReadClass::Replay
    }
}

/// Walks the batches of one remote log object from a position, reading through the cache in
/// windows and checking each batch it returns.
struct Cursor<'a> {
    tier: &'a Tier,
    object: ObjectRef,
    segment: &'a RemoteSegment,
    class: ReadClass,
    /// Bytes read so far, starting at object position `start`.
    buf: Bytes,
    start: u64,
    /// Position of the next batch.
    pos: u64,
}

impl<'a> Cursor<'a> {
    /// Makes sure `[pos, pos + len)` is in the buffer (clamped to the object's end).
    async fn ensure(&mut self, len: u64, window: u64) -> Result<(), TierError> {
        let end = (self.pos + len).min(self.object.size);
        if end <= self.start + self.buf.len() as u64 {
            return Ok(());
        }
        let read_to = (self.pos + len.max(window)).min(self.object.size);
        let from = self.start + self.buf.len() as u64;
        let more = self
            .tier
            .cache
            .read(&self.object, from..read_to, self.class)
            .await?;
        if (more.len() as u64) < read_to - from {
            return Err(TierError::Corrupt(format!(
                "{}: read {} bytes at {from}, expected {}",
                self.object.key,
                more.len(),
                read_to - from
            )));
        }
        if self.buf.is_empty() {
            self.buf = more;
            self.start = from;
        } else {
            // Keep only what is at or after the cursor, then append.
            let keep = self.buf.slice((self.pos - self.start) as usize..);
            let mut joined = BytesMut::with_capacity(keep.len() + more.len());
            joined.extend_from_slice(&keep);
            joined.extend_from_slice(&more);
            self.buf = joined.freeze();
            self.start = self.pos;
        }
        Ok(())
    }

    /// An error naming this object (built only when a check fails, not per batch).
    fn corrupt(&self, what: String) -> TierError {
        TierError::Corrupt(format!("{}: {what}", self.object.key))
    }

    /// The next checked batch, or `None` at the end of the object.
    async fn next(&mut self, window: u64) -> Result<Option<(BatchHeader, Bytes)>, TierError> {
        if self.pos >= self.object.size {
            return Ok(None);
        }
        self.ensure(HEADER_LEN as u64, window).await?;
        let at = (self.pos - self.start) as usize;
        let header = BatchHeader::parse(&self.buf[at..])
            .map_err(|e| self.corrupt(format!("batch at {}: {e}", self.pos)))?;
        let len = header.total_len() as u64;
        if self.pos + len > self.object.size {
            return Err(self.corrupt(format!("batch at {} runs past the object", self.pos)));
        }
        self.ensure(len, window).await?;
        let at = (self.pos - self.start) as usize;
        let bytes = self.buf.slice(at..at + len as usize);
        let header = batch::validate(&bytes)
            .map_err(|e| self.corrupt(format!("batch at {}: {e}", self.pos)))?;
        if header.base_offset < self.segment.base_offset
            || header.last_offset() > self.segment.last_offset
        {
            return Err(self.corrupt(format!(
                "batch [{}, {}] outside the segment [{}, {}]",
                header.base_offset,
                header.last_offset(),
                self.segment.base_offset,
                self.segment.last_offset
            )));
        }
        self.pos += len;
        Ok(Some((header, bytes)))
    }
}

impl RemoteProducers for Tier {
    fn producers_before<'a>(
        &'a self,
        p: &'a Partition,
        offset: i64,
    ) -> futures::future::BoxFuture<'a, Option<ProducerState>> {
        Box::pin(async move {
            let remote = p.remote();
            let segment = remote
                .segments
                .iter()
                .find(|s| s.last_offset + 1 == offset)?;
            let src = RemoteSource::new(&p.tp, &p.topic_id, &remote, segment);
            let found = match self.index(&src).await {
                Ok(index) => index.producers().map_err(TierError::Corrupt),
                Err(e) => Err(e),
            };
            match found {
                Ok(state) => state,
                Err(e) => {
                    tracing::warn!(topic = %p.tp.topic, partition = p.tp.partition, offset, error = %e,
                        "cannot read the producer state stored with the remote segment; the replica learns producers from the batches it copies");
                    None
                }
            }
        })
    }
}

impl Tier {
    async fn index(&self, src: &RemoteSource<'_>) -> Result<RemoteIndex, TierError> {
        let bytes = self.cache.read_whole(&src.index_object()).await?;
        RemoteIndex::parse(bytes, src.segment.base_offset, src.segment.size_bytes)
            .map_err(TierError::Corrupt)
    }

    async fn cursor<'a>(
        &'a self,
        src: &RemoteSource<'a>,
        pos: u64,
        class: ReadClass,
    ) -> Cursor<'a> {
        Cursor {
            tier: self,
            object: src.log_object(),
            segment: src.segment,
            class,
            buf: Bytes::new(),
            start: pos,
            pos,
        }
    }

    /// One partition's batches from `offset`, whichever tier holds them: the one read of a
    /// partition, for consumers (Fetch, share groups) and followers alike. A local read takes
    /// the log's lock and returns slices of its mapped segments; a read below the local log
    /// start reads the remote segment holding the offset on the tier's low-priority threads
    /// ([`Tier::spawn`]), cached by how recent the segment is. A read_committed read (see
    /// [`Isolation`]) stops below the last stable offset and lists the aborted transactions
    /// among what it returns (remotely, from the segment's index object, which lists every one
    /// that overlaps it). Always at least one whole batch when there is one to read.
    pub async fn read(
        self: &Arc<Self>,
        p: Arc<Partition>,
        offset: i64,
        max_bytes: usize,
        isolation: Isolation,
    ) -> Result<Records, TierError> {
        if isolation == Isolation::LogEnd {
            // A follower starts at the leader's local log start: never a remote read.
            let (read, offsets) = p.read_replica(offset, max_bytes)?;
            return Ok(Records {
                batches: read,
                offsets,
                aborted: Vec::new(),
            });
        }
        let committed = isolation == Isolation::Committed;
        let (segment, offsets) = match p.read(offset, max_bytes, committed)? {
            (Read::Local(read, aborted), offsets) => {
                return Ok(Records {
                    batches: read,
                    offsets,
                    aborted,
                })
            }
            (Read::Remote(segment), offsets) => (segment, offsets),
        };
        let tier = self.clone();
        let last_stable = committed.then_some(offsets.last_stable);
        let (bytes, aborted) = self
            .spawn(async move {
                let remote = p.remote();
                let class = read_class(&remote, &segment, tier.recent_bytes);
                let src = RemoteSource::new(&p.tp, &p.topic_id, &remote, &segment);
                let bytes = tier.read_segment(&src, offset, max_bytes, class).await?;
                let Some(last_stable) = last_stable else {
                    return Ok((bytes, Vec::new()));
                };
                let bytes = below(bytes, last_stable)?;
                let Some(upper) = records::end_offset(&bytes) else {
                    return Ok((bytes, Vec::new()));
                };
                let index = tier.index(&src).await?;
                let aborted = (index.aborted().iter())
                    .filter(|a| txn_index::overlaps(a, offset, upper))
                    .copied()
                    .collect();
                Ok::<_, TierError>((bytes, aborted))
            })
            .await
            .map_err(|e| TierError::Task(e.to_string()))??;
        Ok(Records {
            batches: Batches { bytes, file: None },
            offsets,
            aborted,
        })
    }

    /// ListOffsets by timestamp over both tiers: the first record with a timestamp ≥ `ts` at
    /// or after the log start, as `(offset, timestamp)`. A remote segment is searched on the
    /// tier's threads, as a remote fetch is read.
    pub async fn offset_for_timestamp(
        self: &Arc<Self>,
        p: Arc<Partition>,
        ts: i64,
    ) -> Result<Option<(i64, i64)>, TierError> {
        let segment = match p.offset_for_timestamp(ts)? {
            TimeLookup::Local(found) => return Ok(found),
            TimeLookup::Remote(segment) => segment,
        };
        let floor = p.offsets().log_start;
        let tier = self.clone();
        self.spawn(async move {
            let src = RemoteSource {
                tp: &p.tp,
                topic_id: &p.topic_id,
                segment: &segment,
                next: None,
            };
            tier.find_timestamp(&src, ts, floor).await
        })
        .await
        .map_err(|e| TierError::Task(e.to_string()))?
    }

    /// Whole batches of a remote segment from the one holding `offset`, up to `max_bytes` (at
    /// least one batch).
    async fn read_segment(
        &self,
        src: &RemoteSource<'_>,
        offset: i64,
        max_bytes: usize,
        class: ReadClass,
    ) -> Result<Bytes, TierError> {
        let result = self.read_checked(src, offset, max_bytes, class).await;
        match &result {
            Ok(bytes) => self.metrics.read(bytes.len() as u64),
            Err(e) => {
                self.metrics.read_failed(e.kind());
                if matches!(e, TierError::Corrupt(_)) {
                    tracing::error!(topic = %src.tp.topic, partition = src.tp.partition,
                        segment = src.segment.base_offset, error = %e, "corrupt remote segment: not served");
                }
            }
        }
        result
    }

    async fn read_checked(
        &self,
        src: &RemoteSource<'_>,
        offset: i64,
        max_bytes: usize,
        class: ReadClass,
    ) -> Result<Bytes, TierError> {
        let index = self.index(src).await?;
        let start = index.position_for_offset(offset);
        let window = max_bytes as u64 + INTERVAL;
        let mut cursor = self.cursor(src, start, class).await;
        let mut batches: Vec<Bytes> = Vec::new();
        let mut first = None;
        let mut end = start;
        let mut total = 0usize;
        loop {
            let at = cursor.pos;
            let Some((header, bytes)) = cursor.next(window).await? else {
                break;
            };
            if header.last_offset() < offset {
                continue;
            }
            if !batches.is_empty() && total + bytes.len() > max_bytes {
                break;
            }
            first.get_or_insert(at);
            end = cursor.pos;
            total += bytes.len();
            batches.push(bytes);
            if total >= max_bytes {
                break;
            }
        }
        self.cache.prefetch(&src.log_object(), end, class);
        if let Some(next) = src.next {
            // Near the end of the object, the replay continues in the next one.
            if src.segment.size_bytes - end < self.readahead_bytes {
                self.cache
                    .prefetch(&log_object(src.tp, src.topic_id, next), 0, class);
            }
        }
        let Some(first) = first else {
            return Ok(Bytes::new());
        };
        // The batches are one run of the object: a slice of the cursor's buffer when it still
        // holds all of them (the usual case), else one copy.
        if cursor.start <= first {
            let from = (first - cursor.start) as usize;
            return Ok(cursor.buf.slice(from..from + (end - first) as usize));
        }
        let mut out = BytesMut::with_capacity(total);
        for b in &batches {
            out.extend_from_slice(b);
        }
        Ok(out.freeze())
    }

    /// The first record with a timestamp ≥ `ts` at or after `floor` in a remote segment.
    async fn find_timestamp(
        &self,
        src: &RemoteSource<'_>,
        ts: i64,
        floor: i64,
    ) -> Result<Option<(i64, i64)>, TierError> {
        let index = self.index(src).await?;
        let mut cursor = self
            .cursor(src, index.position_for_timestamp(ts), ReadClass::Replay)
            .await;
        while let Some((header, bytes)) = cursor.next(INTERVAL).await? {
            if header.max_timestamp < ts || header.last_offset() < floor {
                continue;
            }
            if header.is_log_append_time() {
                return Ok(Some((header.base_offset.max(floor), header.max_timestamp)));
            }
            let found = crate::log::records::first(&bytes, &header, |r| {
                r.timestamp >= ts && r.offset >= floor
            })
            .map_err(|e| TierError::Corrupt(format!("cannot decode batch: {e}")))?;
            if found.is_some() {
                return Ok(found);
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_metadata::RemoteSegmentState;

    fn segment(base: i64, size: u64) -> RemoteSegment {
        RemoteSegment {
            id: Uuid::new_v4(),
            base_offset: base,
            last_offset: base + 99,
            size_bytes: size,
            index_size_bytes: 60,
            max_timestamp: 0,
            leader_epoch: 0,
            crc32c: 0,
            state: RemoteSegmentState::Committed,
        }
    }

    #[test]
    fn only_the_newest_bytes_of_the_remote_log_count_as_recent() {
        let remote = RemoteLog {
            segments: (0..10).map(|i| segment(i * 100, 1000)).collect(),
            floor: 0,
            end: 1000,
        };
        // 2500 recent bytes: the last segment and the two before it (≤ 2000 newer bytes).
        let classes: Vec<ReadClass> = remote
            .segments
            .iter()
            .map(|s| read_class(&remote, s, 2500))
            .collect();
        assert_eq!(classes[..7], [ReadClass::Replay; 7]);
        assert_eq!(classes[7..], [ReadClass::Recent; 3]);
        let tp = TopicPartition {
            topic: "t".into(),
            partition: 0,
        };
        let topic_id = Uuid::nil();
        let src = RemoteSource::new(&tp, &topic_id, &remote, &remote.segments[3]);
        assert_eq!(src.next.map(|s| s.base_offset), Some(400));
    }
}
