//! Per-partition gauges, read from the hosted partitions when `/metrics` is scraped: offsets,
//! local size and segments, each follower's lag behind a partition led here; and per log
//! directory, whether it failed and how many partitions it holds.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::Partitions;
use crate::metrics::Metrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PartitionLabels {
    topic: String,
    partition: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FollowerLabels {
    topic: String,
    partition: String,
    follower: String,
}

type PartitionGauge = Family<PartitionLabels, Gauge>;

#[derive(Default)]
struct PartitionMetrics {
    log_end_offset: PartitionGauge,
    high_watermark: PartitionGauge,
    log_start_offset: PartitionGauge,
    log_size: PartitionGauge,
    segments: PartitionGauge,
    follower_lag: Family<FollowerLabels, Gauge>,
    log_dir_offline: Family<DirLabels, Gauge>,
    log_dir_partitions: Family<DirLabels, Gauge>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirLabels {
    dir: String,
}

impl PartitionMetrics {
    fn update(&self, partitions: &Partitions) {
        for family in [
            &self.log_end_offset,
            &self.high_watermark,
            &self.log_start_offset,
            &self.log_size,
            &self.segments,
        ] {
            family.clear();
        }
        self.follower_lag.clear();
        let hosted = partitions.hosted();
        for dir in partitions.log_dirs().all() {
            let labels = DirLabels {
                dir: dir.path.display().to_string(),
            };
            let failed = dir.failure().is_some();
            self.log_dir_offline
                .get_or_create(&labels)
                .set(failed as i64);
            let held = (hosted.all().iter())
                .filter(|p| Arc::ptr_eq(&p.placement().dir(), dir))
                .count();
            self.log_dir_partitions
                .get_or_create(&labels)
                .set(held as i64);
        }
        for p in hosted.all() {
            let (o, size, segments) = p.stats();
            let labels = PartitionLabels {
                topic: p.tp.topic.clone(),
                partition: p.tp.partition.to_string(),
            };
            self.log_end_offset.get_or_create(&labels).set(o.log_end);
            self.high_watermark
                .get_or_create(&labels)
                .set(o.high_watermark);
            self.log_start_offset
                .get_or_create(&labels)
                .set(o.log_start);
            self.log_size.get_or_create(&labels).set(size as i64);
            self.segments.get_or_create(&labels).set(segments as i64);
            for (follower, log_end) in p.replication().follower_log_ends() {
                let lag = if log_end < 0 { -1 } else { o.log_end - log_end };
                self.follower_lag
                    .get_or_create(&FollowerLabels {
                        topic: p.tp.topic.clone(),
                        partition: p.tp.partition.to_string(),
                        follower: follower.to_string(),
                    })
                    .set(lag);
            }
        }
    }
}

/// Registers the partition gauges, refreshed from `partitions` at each scrape.
pub fn register(metrics: &Metrics, partitions: &Arc<Partitions>) {
    let m = Arc::new(PartitionMetrics::default());
    metrics.register(|registry| {
        registry.register(
            "partition_log_end_offset",
            "Log end offset",
            m.log_end_offset.clone(),
        );
        registry.register(
            "partition_high_watermark",
            "High watermark",
            m.high_watermark.clone(),
        );
        registry.register(
            "partition_log_start_offset",
            "Log start offset",
            m.log_start_offset.clone(),
        );
        registry.register(
            "partition_size_bytes",
            "Bytes in local segments",
            m.log_size.clone(),
        );
        registry.register(
            "partition_segments",
            "Local segment count",
            m.segments.clone(),
        );
        registry.register(
            "open_segment_files",
            "Segment files held open by the cache of open files (at most max_open_segment_files)",
            crate::log::handles::open_gauge(),
        );
        registry.register(
            "segment_files_lent",
            "Segment file descriptors held by responses being sent from the page cache (sendfile); at most a quarter of max_open_segment_files",
            crate::log::handles::lent_gauge(),
        );
        registry.register(
            "segment_file_reopens",
            "Segment files opened again after the cache of open files evicted them",
            crate::log::handles::reopen_counter(),
        );
        registry.register(
            "follower_lag_records",
            "Per follower of a partition led here: the leader's log end minus the follower's (-1: not seen yet)",
            m.follower_lag.clone(),
        );
        registry.register(
            "log_dir_offline",
            "1 for a log directory that failed I/O: its partitions are offline on this broker until it restarts",
            m.log_dir_offline.clone(),
        );
        registry.register(
            "replica_dir_moves",
            "Moves of replicas between this broker's log directories that ended, by result (moved, stopped, failed)",
            partitions.relocation_metrics.moves.clone(),
        );
        registry.register(
            "replica_dir_move_bytes",
            "Bytes copied by moves of replicas between this broker's log directories",
            partitions.relocation_metrics.bytes.clone(),
        );
        registry.register(
            "log_dir_partitions",
            "Partitions hosted in the log directory",
            m.log_dir_partitions.clone(),
        );
    });
    let partitions = partitions.clone();
    metrics.on_scrape(move || m.update(&partitions));
}
