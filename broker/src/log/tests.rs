//! Log engine tests: round trips, index boundaries, roll, retention, DeleteRecords, recovery.

use super::batch::testing::{batch, batch_with_producer};
use super::batch::{split_and_validate, BatchHeader};
use super::*;
use crate::log::config::LogConfig;
use proptest::prelude::*;
use std::path::Path;

fn validated(b: Bytes) -> Vec<(BatchHeader, Bytes)> {
    split_and_validate(&b, 1 << 20).unwrap()
}

fn open(dir: &Path, segment_bytes: u64) -> Log {
    Log::open(dir, LogConfig::for_tests(segment_bytes), 0)
        .unwrap()
        .0
}

/// Reads every batch header from `from` to the end.
fn read_all(log: &mut Log, from: i64) -> Vec<BatchHeader> {
    let mut out = vec![];
    let mut next = from;
    loop {
        let bytes = log.read(next, 1 << 20, i64::MAX).unwrap().bytes;
        if bytes.is_empty() {
            return out;
        }
        let mut pos = 0;
        while pos < bytes.len() {
            let h = batch::validate(
                &bytes[pos..pos + BatchHeader::parse(&bytes[pos..]).unwrap().total_len()],
            )
            .unwrap();
            next = h.next_offset();
            pos += h.total_len();
            out.push(h);
        }
    }
}

#[test]
fn appended_batches_read_back_with_dense_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), 1 << 20);
    for i in 0..10 {
        let info = log.append(&validated(batch(3, i * 10)), 0, 0).unwrap();
        assert_eq!(info.base_offset, i * 3);
        assert_eq!(info.last_offset, i * 3 + 2);
    }
    assert_eq!(log.log_end_offset(), 30);
    assert_eq!(log.high_watermark(), 30);
    let headers = read_all(&mut log, 0);
    assert_eq!(headers.len(), 10);
    for (i, h) in headers.iter().enumerate() {
        assert_eq!(h.base_offset, i as i64 * 3);
    }
}

#[test]
fn a_fetch_in_the_middle_of_a_batch_returns_that_whole_batch() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), 1 << 20);
    log.append(&validated(batch(5, 0)), 0, 0).unwrap();
    log.append(&validated(batch(5, 0)), 0, 0).unwrap();
    let bytes = log.read(7, 1 << 20, i64::MAX).unwrap().bytes;
    let h = BatchHeader::parse(&bytes).unwrap();
    assert_eq!(h.base_offset, 5);
    assert_eq!(h.last_offset(), 9);
    // At the log end there is nothing yet, and beyond it is out of range.
    assert!(log.read(10, 1 << 20, i64::MAX).unwrap().bytes.is_empty());
    assert!(matches!(
        log.read(11, 100, i64::MAX),
        Err(LogError::OffsetOutOfRange { .. })
    ));
}

#[test]
fn max_bytes_limits_a_read_but_never_below_one_batch() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), 1 << 20);
    let one = batch(10, 0);
    for _ in 0..4 {
        log.append(&validated(one.clone()), 0, 0).unwrap();
    }
    assert_eq!(log.read(0, 1, i64::MAX).unwrap().bytes.len(), one.len());
    assert_eq!(
        log.read(0, one.len() * 2 + 1, i64::MAX)
            .unwrap()
            .bytes
            .len(),
        one.len() * 2
    );
    // The limit (high watermark for consumers) cuts whole batches.
    assert_eq!(log.read(0, 1 << 20, 20).unwrap().bytes.len(), one.len() * 2);
}

#[test]
fn segments_roll_at_segment_bytes_and_reads_cross_them() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(4, 0);
    let mut log = open(dir.path(), (b.len() * 3) as u64);
    for _ in 0..10 {
        log.append(&validated(b.clone()), 0, 0).unwrap();
    }
    assert_eq!(log.segments().count(), 4);
    let headers = read_all(&mut log, 0);
    assert_eq!(headers.len(), 10);
    assert_eq!(headers.last().unwrap().last_offset(), 39);
    // Every offset resolves to the batch that holds it, at every segment boundary.
    for off in 0..40 {
        let bytes = log.read(off, 1, i64::MAX).unwrap().bytes;
        let h = BatchHeader::parse(&bytes).unwrap();
        assert!(
            h.base_offset <= off && off <= h.last_offset(),
            "offset {off}"
        );
    }
}

#[test]
fn timestamp_lookup_finds_the_first_record_at_or_after() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(10, 0);
    let mut log = open(dir.path(), (b.len() * 2) as u64);
    for i in 0..10 {
        log.append(&validated(batch(10, 1000 + i * 10)), 0, 0)
            .unwrap();
    }
    assert_eq!(log.offset_for_timestamp(0).unwrap(), Some((0, 1000)));
    assert_eq!(log.offset_for_timestamp(1000).unwrap(), Some((0, 1000)));
    assert_eq!(log.offset_for_timestamp(1005).unwrap(), Some((5, 1005)));
    assert_eq!(log.offset_for_timestamp(1055).unwrap(), Some((55, 1055)));
    assert_eq!(log.offset_for_timestamp(1099).unwrap(), Some((99, 1099)));
    assert_eq!(log.offset_for_timestamp(1100).unwrap(), None);
    assert_eq!(log.max_timestamp(), Some((99, 1099)));
}

#[test]
fn delete_records_moves_the_start_and_drops_whole_segments() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(5, 0);
    let mut log = open(dir.path(), (b.len() * 2) as u64);
    for _ in 0..6 {
        log.append(&validated(b.clone()), 0, 0).unwrap();
    }
    assert_eq!(log.segments().count(), 3);
    assert_eq!(log.delete_records_before(12, 0).unwrap(), 12);
    assert_eq!(log.segments().count(), 2);
    assert!(matches!(
        log.read(9, 100, i64::MAX),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    assert_eq!(
        BatchHeader::parse(&log.read(12, 1, i64::MAX).unwrap().bytes)
            .unwrap()
            .base_offset,
        10
    );
    assert!(log.delete_records_before(31, 0).is_err());
    // Deleting everything leaves an empty log that starts at the end.
    assert_eq!(log.delete_records_before(30, 0).unwrap(), 30);
    assert_eq!(log.log_end_offset(), 30);
    assert!(log.read(30, 100, i64::MAX).unwrap().bytes.is_empty());
    drop(log);
    let log = open(dir.path(), 1 << 20);
    assert_eq!(log.log_start_offset(), 30);
    assert_eq!(log.log_end_offset(), 30);
}

#[test]
fn retention_deletes_old_and_excess_segments_only() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(5, 0);
    let mut cfg = LogConfig::for_tests((b.len() * 2) as u64);
    cfg.retention_ms = 1000;
    let mut log = Log::open(dir.path(), cfg, 0).unwrap().0;
    for i in 0..6 {
        log.append(&validated(batch(5, i * 1000)), 0, 0).unwrap();
    }
    // Segments hold timestamps ..1004, ..3004, ..5004 (active). At now=3500 only the first expired.
    assert_eq!(log.enforce_retention(3500, None).unwrap(), 1);
    assert_eq!(log.log_start_offset(), 10);
    // The active segment is never deleted by retention.
    assert_eq!(log.enforce_retention(100_000, None).unwrap(), 1);
    assert_eq!(log.segments().count(), 1);
    assert_eq!(log.log_start_offset(), 20);

    let dir = tempfile::tempdir().unwrap();
    let mut cfg = LogConfig::for_tests((b.len() * 2) as u64);
    cfg.retention_bytes = (b.len() * 3) as i64;
    let mut log = Log::open(dir.path(), cfg, 0).unwrap().0;
    for _ in 0..6 {
        log.append(&validated(b.clone()), 0, 0).unwrap();
    }
    log.enforce_retention(0, None).unwrap();
    assert!(log.segments().size() <= (b.len() * 4) as u64);
    assert_eq!(log.segments().count(), 2);
}

#[test]
fn a_tiered_log_deletes_locally_only_what_is_offloaded_or_wholly_expired() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(5, 0);
    let mut cfg = LogConfig::for_tests((b.len() * 2) as u64);
    cfg.retention_ms = 10_000;
    cfg.local_retention_ms = 1000;
    cfg.remote_storage = true;
    let mut log = Log::open(dir.path(), cfg, 0).unwrap().0;
    for i in 0..8 {
        log.append(&validated(batch(5, i * 1000)), 0, 0).unwrap();
    }
    // Closed segments [0,10) ..1004, [10,20) ..3004, [20,30) ..5004; active [30,40).
    let closed = log.closed_segments();
    assert_eq!(
        closed.iter().map(|s| s.base_offset).collect::<Vec<_>>(),
        vec![0, 10, 20]
    );
    // Nothing offloaded: local retention alone deletes nothing.
    assert_eq!(
        log.enforce_retention(9000, Some(RemoteView::default()))
            .unwrap(),
        0
    );
    // [0,20) committed remotely: both past local retention go; [20,30) stays, not offloaded.
    let remote = RemoteView {
        end: 20,
        bytes: closed[0].size + closed[1].size,
    };
    assert_eq!(log.enforce_retention(9000, Some(remote)).unwrap(), 2);
    assert_eq!(log.log_start_offset(), 20);
    // Whole-log retention deletes it even though it never reached the object store.
    assert_eq!(log.enforce_retention(15_100, Some(remote)).unwrap(), 1);
    assert_eq!(log.log_start_offset(), 30);
    // The bytes stay readable to an uploader holding them after deletion.
    assert!(log.closed_segment(30).unwrap().is_none(), "active");
}

#[test]
fn a_clean_close_reopens_without_rescanning() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(5, 0);
    let mut log = open(dir.path(), (b.len() * 2) as u64);
    for i in 0..5 {
        log.append(&validated(batch(5, 100 - i)), 0, 0).unwrap();
    }
    let max_ts = log.max_timestamp();
    log.close().unwrap();
    drop(log);
    let (mut log, report) =
        Log::open(dir.path(), LogConfig::for_tests((b.len() * 2) as u64), 0).unwrap();
    assert!(report.clean);
    assert_eq!(report.rescanned_segments, 0);
    assert_eq!(log.log_end_offset(), 25);
    // Segment timestamps (for retention and MAX_TIMESTAMP) come back from the time index.
    assert_eq!(log.max_timestamp(), max_ts);
    assert_eq!(max_ts, Some((4, 104)));
    assert_eq!(read_all(&mut log, 0).len(), 5);
}

#[test]
fn a_torn_tail_is_truncated_at_the_last_valid_batch() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(5, 0);
    let mut log = open(dir.path(), 1 << 20);
    for _ in 0..4 {
        log.append(&validated(b.clone()), 0, 0).unwrap();
    }
    drop(log); // no clean close: as after kill -9
    let path = segment::log_path(dir.path(), 0);
    let len = std::fs::metadata(&path).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(len - 7).unwrap();
    let (mut log, report) = Log::open(dir.path(), LogConfig::for_tests(1 << 20), 0).unwrap();
    assert!(!report.clean);
    assert_eq!(report.truncated_bytes, (b.len() - 7) as u64);
    assert_eq!(log.log_end_offset(), 15);
    assert_eq!(read_all(&mut log, 0).len(), 3);
    // The log keeps working after recovery.
    assert_eq!(
        log.append(&validated(b.clone()), 0, 0).unwrap().base_offset,
        15
    );
}

#[test]
fn a_corrupted_batch_truncates_the_log_there_even_across_segments() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(5, 0);
    let mut log = open(dir.path(), (b.len() * 2) as u64);
    for _ in 0..6 {
        log.append(&validated(b.clone()), 0, 0).unwrap();
    }
    drop(log);
    // Flip a byte inside the second batch of the middle segment (base offset 10).
    let path = segment::log_path(dir.path(), 10);
    let mut data = std::fs::read(&path).unwrap();
    let i = b.len() + 40;
    data[i] ^= 0xff;
    std::fs::write(&path, &data).unwrap();
    std::fs::write(dir.path().join(RECOVERY_POINT), "0").unwrap();
    let (mut log, _) =
        Log::open(dir.path(), LogConfig::for_tests((b.len() * 2) as u64), 0).unwrap();
    assert_eq!(log.log_end_offset(), 15);
    assert_eq!(read_all(&mut log, 0).len(), 3);
    assert_eq!(log.segments().count(), 2);
}

#[test]
fn a_missing_or_garbled_index_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(50, 0);
    let mut cfg = LogConfig::for_tests(1 << 20);
    cfg.index_interval_bytes = 1;
    let mut log = Log::open(dir.path(), cfg.clone(), 0).unwrap().0;
    for _ in 0..20 {
        log.append(&validated(b.clone()), 0, 0).unwrap();
    }
    log.roll(0).unwrap();
    log.close().unwrap();
    drop(log);
    std::fs::remove_file(dir.path().join(format!("{:020}.index", 0))).unwrap();
    let (mut log, _) = Log::open(dir.path(), cfg.clone(), 0).unwrap();
    assert_eq!(log.log_end_offset(), 1000);
    let h = BatchHeader::parse(&log.read(777, 1, i64::MAX).unwrap().bytes).unwrap();
    assert_eq!(h.base_offset, 750);
    log.close().unwrap();
    drop(log);
    std::fs::write(
        dir.path().join(format!("{:020}.index", 0)),
        [0u8, 0, 0, 9, 255, 255, 255, 0],
    )
    .unwrap();
    let (mut log, _) = Log::open(dir.path(), cfg, 0).unwrap();
    let h = BatchHeader::parse(&log.read(777, 1, i64::MAX).unwrap().bytes).unwrap();
    assert_eq!(h.base_offset, 750);
}

#[test]
fn idempotent_retries_are_not_appended_twice_and_state_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), 1 << 20);
    let first = log
        .append(&validated(batch_with_producer(3, 0, 42, 0, 0)), 0, 0)
        .unwrap();
    let retry = log
        .append(&validated(batch_with_producer(3, 0, 42, 0, 0)), 0, 0)
        .unwrap();
    assert!(!first.duplicate);
    assert!(retry.duplicate);
    assert_eq!(retry.base_offset, first.base_offset);
    assert_eq!(log.log_end_offset(), 3);
    assert!(matches!(
        log.append(&validated(batch_with_producer(1, 0, 42, 0, 7)), 0, 0),
        Err(LogError::OutOfOrderSequence {
            expected: 3,
            got: 7,
            ..
        })
    ));
    drop(log); // crash: no snapshot written; state comes from replaying headers
    let mut log = open(dir.path(), 1 << 20);
    assert!(
        log.append(&validated(batch_with_producer(3, 0, 42, 0, 0)), 0, 0)
            .unwrap()
            .duplicate
    );
    assert_eq!(
        log.append(&validated(batch_with_producer(2, 0, 42, 0, 3)), 0, 0)
            .unwrap()
            .base_offset,
        3
    );
    log.close().unwrap();
    drop(log);
    let mut log = open(dir.path(), 1 << 20);
    assert!(
        log.append(&validated(batch_with_producer(2, 0, 42, 0, 3)), 0, 0)
            .unwrap()
            .duplicate
    );
}

#[test]
fn log_append_time_topics_stamp_batches_with_the_broker_clock() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = LogConfig::for_tests(1 << 20);
    cfg.timestamp_type = crate::log::config::TimestampType::LogAppendTime;
    let mut log = Log::open(dir.path(), cfg, 0).unwrap().0;
    let info = log.append(&validated(batch(3, 5)), 0, 777).unwrap();
    assert_eq!(info.log_append_time, 777);
    let h = batch::validate(&log.read(0, 1, i64::MAX).unwrap().bytes).unwrap();
    assert!(h.is_log_append_time());
    assert_eq!(h.max_timestamp, 777);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn any_sequence_of_appends_and_a_crash_reads_back_exactly(
        counts in proptest::collection::vec(1i32..20, 1..40),
        segment_batches in 1usize..6,
        cut in 0usize..200,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let seg_bytes = (batch(10, 0).len() * segment_batches) as u64;
        let mut log = open(dir.path(), seg_bytes.max(1024));
        let mut expected = vec![];
        let mut next = 0i64;
        for &c in &counts {
            let info = log.append(&validated(batch(c, next)), 0, 0).unwrap();
            prop_assert_eq!(info.base_offset, next);
            expected.push((next, c));
            next += c as i64;
        }
        let got: Vec<(i64, i32)> = read_all(&mut log, 0).iter().map(|h| (h.base_offset, h.record_count)).collect();
        prop_assert_eq!(&got, &expected);
        drop(log);
        // Cut `cut` bytes off the active segment, as a crash mid-write would.
        let last = std::fs::read_dir(dir.path()).unwrap()
            .filter_map(|e| e.ok()).map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "log")).max().unwrap();
        let len = std::fs::metadata(&last).unwrap().len();
        let cut = (cut as u64).min(len);
        std::fs::OpenOptions::new().write(true).open(&last).unwrap().set_len(len - cut).unwrap();
        let mut log = open(dir.path(), seg_bytes.max(1024));
        let got: Vec<(i64, i32)> = read_all(&mut log, 0).iter().map(|h| (h.base_offset, h.record_count)).collect();
        prop_assert!(expected.starts_with(&got));
        prop_assert_eq!(log.log_end_offset(), got.last().map(|(b, c)| b + *c as i64).unwrap_or(0));
    }
}

#[test]
fn a_rolled_segment_is_trusted_after_a_crash_only_once_its_fsync_is_done() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(5, 0);
    let size = (b.len() * 2) as u64;
    let mut log = open(dir.path(), size);
    for _ in 0..3 {
        log.append(&validated(b.clone()), 0, 0).unwrap();
    }
    // Rolled (two segments closed) but not yet fsynced: a crash now rescans them.
    assert_eq!(log.segments_mut().take_unflushed_rolls().len(), 1);
    drop(log);
    let (mut log, report) = Log::open(dir.path(), LogConfig::for_tests(size), 0).unwrap();
    assert_eq!(report.rescanned_segments, 2);
    // Once flushed, only the active segment is rescanned.
    for _ in 0..3 {
        log.append(&validated(b.clone()), 0, 0).unwrap();
    }
    log.flush_rolls().unwrap();
    assert!(log.segments_mut().take_unflushed_rolls().is_empty());
    drop(log);
    let (log, report) = Log::open(dir.path(), LogConfig::for_tests(size), 0).unwrap();
    assert_eq!(report.rescanned_segments, 1);
    assert_eq!(log.log_end_offset(), 30);
}

#[test]
fn an_unclean_open_relearns_epochs_a_lost_checkpoint_write_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), 1 << 20);
    log.assign_epoch(1).unwrap();
    log.append(&validated(batch(2, 0)), 1, 0).unwrap();
    let before = std::fs::read(dir.path().join(leader_epoch::FILE)).unwrap();
    log.assign_epoch(4).unwrap();
    log.append(&validated(batch(3, 0)), 4, 0).unwrap();
    drop(log);
    // The checkpoint write of epoch 4 never reached the disk (it is not fsynced on its own),
    // and the process died: no clean marker, the segment above the recovery point.
    std::fs::write(dir.path().join(leader_epoch::FILE), before).unwrap();
    let (log, report) = Log::open(dir.path(), LogConfig::for_tests(1 << 20), 0).unwrap();
    assert!(!report.clean);
    assert_eq!(log.latest_epoch(), 4);
    assert_eq!(log.end_offset_for_epoch(1), (1, 2));
    assert_eq!(log.epoch_for_offset(2), 4);
}

#[test]
fn logs_outnumbering_the_open_file_cache_append_read_and_recover() {
    // The cache is process-wide: the other tests running now only reopen more often, which
    // must never change what they read.
    handles::set_capacity(2);
    let reopens = handles::reopen_counter().get();
    let dirs: Vec<_> = (0..5).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut logs: Vec<Log> = dirs.iter().map(|d| open(d.path(), 300)).collect();
    // Round-robin over the logs: each append finds its file evicted by the others, and the
    // small segments roll (a sealed segment's file is reopened to be read).
    for round in 0..12 {
        for (i, log) in logs.iter_mut().enumerate() {
            let info = log
                .append(&validated(batch(2, (round * 10 + i) as i64)), 0, 0)
                .unwrap();
            assert_eq!(info.base_offset, round as i64 * 2);
        }
    }
    for log in &mut logs {
        assert!(log.segments().count() > 2, "segments rolled");
        let headers = read_all(log, 0);
        assert_eq!(headers.len(), 12);
        assert_eq!(headers.last().unwrap().next_offset(), 24);
        log.segments.flush(0).unwrap();
    }
    assert!(
        handles::reopen_counter().get() > reopens,
        "evicted files were reopened"
    );
    // A clean close and a reopen (every segment reopened through the cache) keep every batch.
    for log in &mut logs {
        log.close().unwrap();
    }
    drop(logs);
    for d in &dirs {
        let mut log = open(d.path(), 300);
        log.append(&validated(batch(1, 0)), 0, 0).unwrap();
        let headers = read_all(&mut log, 0);
        assert_eq!(headers.len(), 13);
        assert_eq!(log.log_end_offset(), 25);
    }
    handles::set_capacity(4096);
}

#[test]
fn a_mapping_unread_for_a_whole_sweep_is_released_and_mapped_again_when_read() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), 1 << 20);
    log.append(&validated(batch(3, 0)), 0, 0).unwrap();
    assert_eq!(read_all(&mut log, 0).len(), 1);
    let active = |log: &Log| log.segments.map.values().next_back().unwrap().is_mapped();
    log.segments_mut().release_idle_maps();
    assert!(active(&log), "read since the last sweep: kept");
    log.segments_mut().release_idle_maps();
    assert!(!active(&log), "unread for a whole sweep: released");
    log.append(&validated(batch(3, 0)), 0, 0).unwrap();
    let headers = read_all(&mut log, 0);
    assert_eq!(headers.len(), 2);
    assert!(active(&log));
}

mod transactions {
    use super::*;
    use crate::log::batch::testing::transactional;
    use crate::log::control::Marker;

    fn abort(pid: i64, first: i64, last: i64, lso: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: pid,
            first_offset: first,
            last_offset: last,
            last_stable_offset: lso,
        }
    }

    /// Open transactions as `(producer id, first offset)`.
    fn ongoing(log: &Log) -> Vec<(i64, i64)> {
        (log.producer_views().into_iter())
            .filter_map(|v| Some((v.producer_id, v.txn_first_offset?)))
            .collect()
    }

    fn offsets(bytes: &Bytes) -> Vec<i64> {
        records::batches(bytes)
            .map(|b| b.unwrap().0.base_offset)
            .collect()
    }

    /// Producer 1 writes 0-2 and aborts at 6; producer 2 writes plain 3; producer 3 writes
    /// 4-5 and commits at 7.
    fn two_transactions(log: &mut Log) {
        log.append(&validated(transactional(3, 0, 1, 0, 0)), 0, 0)
            .unwrap();
        log.append(&validated(batch_with_producer(1, 0, 2, 0, 0)), 0, 0)
            .unwrap();
        log.append(&validated(transactional(2, 0, 3, 0, 0)), 0, 0)
            .unwrap();
        assert_eq!(log.last_stable_offset(), 0, "producer 1's is open from 0");
        assert_eq!(log.append_marker(Marker::Abort, 1, 0, 5, 0, 0).unwrap(), 6);
        assert_eq!(log.last_stable_offset(), 4, "producer 3's is open from 4");
        assert_eq!(log.append_marker(Marker::Commit, 3, 0, 5, 0, 0).unwrap(), 7);
    }

    #[test]
    fn the_last_stable_offset_stops_at_the_oldest_open_transaction_and_aborts_are_listed() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), 1 << 20);
        log.append(&validated(transactional(3, 0, 1, 0, 0)), 0, 0)
            .unwrap();
        let (bytes, aborted) = committed(log.read_committed(0, 1 << 20).unwrap());
        assert!(
            bytes.is_empty() && aborted.is_empty(),
            "nothing is stable yet"
        );
        log.append(&validated(batch_with_producer(1, 0, 2, 0, 0)), 0, 0)
            .unwrap();
        log.append(&validated(transactional(2, 0, 3, 0, 0)), 0, 0)
            .unwrap();
        log.append_marker(Marker::Abort, 1, 0, 5, 0, 0).unwrap();
        let (bytes, aborted) = committed(log.read_committed(0, 1 << 20).unwrap());
        assert_eq!(
            offsets(&bytes),
            vec![0, 3],
            "up to producer 3's open transaction"
        );
        assert_eq!(aborted, vec![abort(1, 0, 6, 4)]);
        log.append_marker(Marker::Commit, 3, 0, 5, 0, 0).unwrap();
        assert_eq!(log.last_stable_offset(), 8);
        assert_eq!(log.high_watermark(), 8);
        let (bytes, aborted) = committed(log.read_committed(0, 1 << 20).unwrap());
        assert_eq!(offsets(&bytes), vec![0, 3, 4, 6, 7]);
        assert_eq!(aborted, vec![abort(1, 0, 6, 4)]);
        // From past the aborted transaction, it is not listed.
        let (bytes, aborted) = committed(log.read_committed(7, 1 << 20).unwrap());
        assert_eq!(offsets(&bytes), vec![7]);
        assert!(aborted.is_empty());
        assert_eq!(ongoing(&log), vec![]);
    }

    #[test]
    fn what_breaks_the_transaction_rules_is_refused_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), 1 << 20);
        log.append(&validated(transactional(2, 0, 1, 3, 0)), 0, 0)
            .unwrap();
        assert!(matches!(
            log.append(&validated(batch_with_producer(1, 0, 1, 3, 2)), 0, 0),
            Err(LogError::InvalidTxnState { producer_id: 1, .. })
        ));
        let control = control::marker_batch(Marker::Commit, 1, 3, 0, 0);
        assert!(matches!(
            log.append(&validated(control), 0, 0),
            Err(LogError::Batch(BatchError::Invalid(_)))
        ));
        let mut plain_txn = bytes::BytesMut::from(&transactional(1, 0, 1, 3, 2)[..]);
        plain_txn[batch::field::PRODUCER_ID..batch::field::PRODUCER_ID + 8]
            .copy_from_slice(&(-1i64).to_be_bytes());
        let crc = batch::compute_crc(&plain_txn);
        plain_txn[batch::field::CRC..batch::field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
        assert!(matches!(
            log.append(&validated(plain_txn.freeze()), 0, 0),
            Err(LogError::Batch(BatchError::Invalid(_)))
        ));
        assert!(matches!(
            log.append_marker(Marker::Commit, 1, 2, 0, 0, 0),
            Err(LogError::ProducerFenced {
                current: 3,
                got: 2,
                ..
            })
        ));
        log.append_marker(Marker::Abort, 1, 3, 4, 0, 0).unwrap();
        assert!(matches!(
            log.append_marker(Marker::Abort, 1, 3, 3, 0, 0),
            Err(LogError::CoordinatorFenced {
                current: 4,
                got: 3,
                ..
            })
        ));
        assert_eq!(log.log_end_offset(), 3, "two records and one marker");
        assert_eq!(log.last_stable_offset(), 3);
        // A marker of a bumped epoch (the coordinator aborting a timed-out transaction) moves
        // the producer there: its old epoch is fenced after.
        log.append(&validated(transactional(1, 0, 1, 3, 2)), 0, 0)
            .unwrap();
        log.append_marker(Marker::Abort, 1, 4, 4, 0, 0).unwrap();
        assert!(matches!(
            log.append(&validated(transactional(1, 0, 1, 3, 3)), 0, 0),
            Err(LogError::ProducerFenced {
                current: 4,
                got: 3,
                ..
            })
        ));
    }

    #[test]
    fn transactions_and_aborts_survive_a_clean_close_and_a_crash() {
        for crash in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            // Small segments: the markers land in other segments than their data.
            let size = (transactional(3, 0, 1, 0, 0).len() + 10) as u64;
            let mut log = open(dir.path(), size);
            two_transactions(&mut log);
            log.append(&validated(transactional(1, 0, 9, 0, 0)), 0, 0)
                .unwrap();
            assert!(log.segments().count() > 3);
            let expected = committed(log.read_committed(0, 1 << 20).unwrap());
            assert_eq!(log.last_stable_offset(), 8);
            if crash {
                // Nothing flushed: every segment is rescanned, from the previous snapshot
                // or from the start.
                drop(log);
            } else {
                log.close().unwrap();
                drop(log);
            }
            let (mut log, report) = Log::open(dir.path(), LogConfig::for_tests(size), 0).unwrap();
            assert_eq!(report.clean, !crash);
            assert_eq!(
                log.last_stable_offset(),
                8,
                "producer 9's transaction is open"
            );
            assert_eq!(ongoing(&log), vec![(9, 8)]);
            assert_eq!(committed(log.read_committed(0, 1 << 20).unwrap()), expected);
            log.append_marker(Marker::Abort, 9, 0, 5, 0, 0).unwrap();
            let (_, aborted) = committed(log.read_committed(8, 1 << 20).unwrap());
            assert_eq!(aborted, vec![abort(9, 8, 9, 10)]);
        }
    }

    #[test]
    fn a_follower_copying_the_leader_learns_the_same_transactions_and_a_truncation_reopens_one() {
        let (ld, fd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut leader = open(ld.path(), 1 << 20);
        two_transactions(&mut leader);
        let mut follower = open(fd.path(), 1 << 20);
        follower.set_replicated(true, false);
        let bytes = leader.read_replica(0, 1 << 20).unwrap().bytes;
        follower.append_replicated(&validated(bytes), 0).unwrap();
        follower.set_high_watermark(8);
        assert_eq!(follower.last_stable_offset(), 8);
        assert_eq!(
            committed(follower.read_committed(0, 1 << 20).unwrap()),
            committed(leader.read_committed(0, 1 << 20).unwrap())
        );
        // The commit at 7 is cut: producer 3's transaction is open again from 4.
        follower.truncate_to(7, 0).unwrap();
        assert_eq!(follower.last_stable_offset(), 4);
        assert_eq!(ongoing(&follower), vec![(3, 4)]);
        // The abort at 6 is cut too: both are open, and no abort is listed.
        follower.truncate_to(6, 0).unwrap();
        assert_eq!(follower.last_stable_offset(), 0);
        follower.set_high_watermark(6);
        assert_eq!(
            committed(follower.read_committed(0, 1 << 20).unwrap()).1,
            vec![]
        );
    }
}

#[test]
fn a_segment_is_offloaded_only_below_the_last_stable_offset_with_every_abort_that_overlaps_it() {
    use crate::log::batch::testing::transactional;
    use crate::log::control::Marker;
    let dir = tempfile::tempdir().unwrap();
    let size = (transactional(3, 0, 1, 0, 0).len() + 10) as u64;
    let mut log = open(dir.path(), size);
    // Producer 1's transaction starts in the first segment and aborts two segments later.
    log.append(&validated(transactional(3, 0, 1, 0, 0)), 0, 0)
        .unwrap();
    log.append(&validated(batch(3, 0)), 0, 0).unwrap();
    log.append(&validated(batch(3, 0)), 0, 0).unwrap();
    assert!(log.segments().count() >= 3);
    assert!(
        log.closed_segments().is_empty(),
        "the open transaction holds every segment back"
    );
    let marker = log.append_marker(Marker::Abort, 1, 0, 0, 0, 0).unwrap();
    log.roll(0).unwrap();
    let closed = log.closed_segments();
    assert_eq!(closed.first().map(|c| c.base_offset), Some(0));
    let (_, aborted) = log.closed_segment(0).unwrap().unwrap();
    assert_eq!(
        aborted,
        vec![AbortedTxn {
            producer_id: 1,
            first_offset: 0,
            last_offset: marker,
            last_stable_offset: marker + 1,
        }],
        "the marker is in a later segment"
    );
    let (_, middle) = log.closed_segment(closed[1].base_offset).unwrap().unwrap();
    assert_eq!(middle, aborted, "it spans the middle segment too");
}

#[test]
fn a_sole_leader_whose_partition_gains_replicas_keeps_its_high_watermark() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), 1 << 20);
    log.append(&validated(batch(5, 0)), 0, 0).unwrap();
    assert_eq!(
        log.high_watermark(),
        5,
        "a lone replica commits what it appends"
    );
    log.set_replicated(true, true);
    assert_eq!(
        log.high_watermark(),
        5,
        "still committed: it was the only replica"
    );
    // Opened after a restart, the log cannot know what its ISR committed.
    let reopened_dir = tempfile::tempdir().unwrap();
    let mut reopened = open(reopened_dir.path(), 1 << 20);
    reopened.append(&validated(batch(5, 0)), 0, 0).unwrap();
    reopened.set_replicated(true, false);
    assert_eq!(reopened.high_watermark(), 0);
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "invariant 1")]
fn a_high_watermark_moved_back_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), 1 << 20);
    log.set_replicated(true, false);
    log.append(&validated(batch(5, 0)), 0, 0).unwrap();
    log.set_high_watermark(4);
    log.set_high_watermark(2);
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "invariant 1")]
fn a_high_watermark_past_the_log_end_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), 1 << 20);
    log.append(&validated(batch(5, 0)), 0, 0).unwrap();
    log.high_watermark = 9;
    log.debug_check();
}

#[test]
fn a_log_is_never_opened_in_a_log_directory_that_vanished() {
    let disk = tempfile::tempdir().unwrap();
    let log_dir = disk.path().join("disk2");
    std::fs::create_dir(&log_dir).unwrap();
    drop(open(&log_dir.join("t-0"), 1 << 20));
    std::fs::remove_dir_all(&log_dir).unwrap();
    assert!(Log::open(&log_dir.join("t-1"), LogConfig::for_tests(1 << 20), 0).is_err());
    assert!(!log_dir.exists(), "the vanished directory stays gone");
    // An existing partition directory opens as before.
    std::fs::create_dir_all(log_dir.join("t-0")).unwrap();
    drop(open(&log_dir.join("t-0"), 1 << 20));
}
