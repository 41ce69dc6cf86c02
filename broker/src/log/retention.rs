//! What leaves a log from its start: DeleteRecords, and retention by time and size (local
//! retention for a tiered log, which never deletes what is not offloaded yet).

use super::index::write_checkpoint;
use super::{Log, LogError, RemoteView, LOG_START};

impl Log {
    /// DeleteRecords: moves the log start to `offset` (≤ high watermark) and drops segments
    /// wholly below it. Returns the new log start.
    pub fn delete_records_before(&mut self, offset: i64, now_ms: i64) -> Result<i64, LogError> {
        if self.config.compact && !self.config.delete {
            return Err(LogError::PolicyViolation(
                "DeleteRecords is not allowed on a topic with cleanup.policy=compact",
            ));
        }
        if offset < 0 || offset > self.high_watermark {
            return Err(LogError::OffsetOutOfRange {
                offset,
                start: self.log_start_offset,
                end: self.high_watermark,
            });
        }
        if offset > self.log_start_offset {
            self.log_start_offset = offset;
            write_checkpoint(&self.dir.join(LOG_START), offset)?;
            self.delete_segments_below_start(now_ms)?;
        }
        self.debug_check();
        Ok(self.log_start_offset)
    }

    fn delete_segments_below_start(&mut self, now_ms: i64) -> Result<usize, LogError> {
        if self.log_start_offset >= self.log_end_offset() && !self.active().is_empty() {
            self.roll(now_ms)?;
        }
        let doomed: Vec<i64> = self
            .segments
            .map
            .iter()
            .take(self.segments.map.len() - 1)
            .filter(|(_, s)| s.next_offset() <= self.log_start_offset)
            .map(|(b, _)| *b)
            .collect();
        for base in &doomed {
            if let Some(seg) = self.segments.map.remove(base) {
                seg.delete()?;
            }
        }
        Ok(doomed.len())
    }

    /// Deletes closed segments past retention, unless the cleanup policy lacks `delete`.
    /// Returns how many segments were deleted.
    ///
    /// Without a remote copy (`remote` is `None`), `retention.ms/bytes` bound the local log.
    /// With one, a segment goes when the whole log's retention expires it (it may never have
    /// been offloaded: the store was down), or when it is committed remotely and past
    /// `local.retention.ms/bytes` (docs/invariants.md 4). The remote part of the whole log
    /// is expired by the tier, which moves the start of this log with it.
    pub fn enforce_retention(
        &mut self,
        now_ms: i64,
        remote: Option<RemoteView>,
    ) -> Result<usize, LogError> {
        if !self.config.delete {
            return Ok(0);
        }
        let mut new_start = self.log_start_offset;
        let closed: Vec<(bool, i64, u64, i64)> = self
            .segments
            .map
            .values()
            .take(self.segments.map.len() - 1)
            .map(|s| (s.is_empty(), s.max_timestamp(), s.size(), s.next_offset()))
            .collect();
        let local_size = self.segments.size() as i64;
        // The whole log's size: remote bytes plus what is only here.
        let mut total = match remote {
            None => local_size,
            Some(r) => {
                r.bytes as i64
                    + self
                        .segments
                        .map
                        .values()
                        .filter(|s| s.next_offset() > r.end)
                        .map(|s| s.size() as i64)
                        .sum::<i64>()
            }
        };
        let mut local = local_size;
        let c = &self.config;
        for (empty, max_ts, seg_size, next) in closed {
            // Only committed records expire: a segment the high watermark has not passed may
            // still be needed by a follower catching up (Kafka's rule), and the log start
            // never passes the high watermark.
            if next > self.high_watermark {
                break;
            }
            let seg_size = seg_size as i64;
            let offloaded = remote.is_some_and(|r| next <= r.end);
            let past = |ms: i64| ms >= 0 && (empty || (max_ts >= 0 && now_ms - max_ts > ms));
            let whole_expired = !offloaded
                && (past(c.retention_ms)
                    || (c.retention_bytes >= 0 && total - seg_size >= c.retention_bytes));
            let local_expired = offloaded
                && (past(c.local_retention_ms)
                    || (c.local_retention_bytes >= 0
                        && local - seg_size >= c.local_retention_bytes));
            if !(whole_expired || local_expired) {
                break;
            }
            if !offloaded {
                total -= seg_size;
            }
            local -= seg_size;
            new_start = new_start.max(next);
        }
        if new_start > self.log_start_offset {
            self.log_start_offset = new_start;
            write_checkpoint(&self.dir.join(LOG_START), new_start)?;
            let deleted = self.delete_segments_below_start(now_ms)?;
            self.debug_check();
            return Ok(deleted);
        }
        Ok(0)
    }
}
