//! Metrics of Iceberg translation, by topic (only topics with `iceberg.mode` set have series):
//! records and bytes translated, records refused (`value_json`: to the dead-letter table),
//! data files, commits by outcome, failed rounds, and each topic's lag behind its log.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TopicLabels {
    pub topic: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CommitLabels {
    pub topic: String,
    /// `ok`, `conflict` (rebuilt and retried past the transaction's own retries),
    /// `offsets_moved` (another broker translated them), `failed`.
    pub result: String,
}

pub struct IcebergMetrics {
    pub records: Family<TopicLabels, Counter>,
    pub bytes: Family<TopicLabels, Counter>,
    pub invalid_records: Family<TopicLabels, Counter>,
    pub data_files: Family<TopicLabels, Counter>,
    pub data_file_bytes: Family<TopicLabels, Counter>,
    pub commits: Family<CommitLabels, Counter>,
    pub failed_rounds: Family<TopicLabels, Counter>,
    pub lag_seconds: Family<TopicLabels, Gauge>,
    pub round_seconds: Histogram,
}

impl Default for IcebergMetrics {
    fn default() -> Self {
        IcebergMetrics {
            records: Family::default(),
            bytes: Family::default(),
            invalid_records: Family::default(),
            data_files: Family::default(),
            data_file_bytes: Family::default(),
            commits: Family::default(),
            failed_rounds: Family::default(),
            lag_seconds: Family::default(),
            round_seconds: Histogram::new(exponential_buckets(0.01, 2.0, 16)),
        }
    }
}

pub fn topic(name: &str) -> TopicLabels {
    TopicLabels {
        topic: name.to_string(),
    }
}

impl IcebergMetrics {
    pub fn commit(&self, topic: &str, result: &str) {
        let labels = CommitLabels {
            topic: topic.to_string(),
            result: result.to_string(),
        };
        self.commits.get_or_create(&labels).inc();
    }

    /// Drops the series of a topic no longer translated here.
    pub fn forget(&self, name: &str) {
        let t = topic(name);
        self.records.remove(&t);
        self.bytes.remove(&t);
        self.invalid_records.remove(&t);
        self.data_files.remove(&t);
        self.data_file_bytes.remove(&t);
        self.lag_seconds.remove(&t);
        self.failed_rounds.remove(&t);
    }

    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("iceberg");
        r.register(
            "translated_records",
            "Records written to Iceberg data files",
            self.records.clone(),
        );
        r.register(
            "translated_bytes",
            "Key, value and header bytes of the records written to Iceberg data files",
            self.bytes.clone(),
        );
        r.register(
            "invalid_records",
            "Records of value_json topics whose value does not fit the schema, written to the dead-letter table instead",
            self.invalid_records.clone(),
        );
        r.register(
            "data_files",
            "Parquet data files written",
            self.data_files.clone(),
        );
        r.register(
            "data_file_bytes",
            "Bytes of the Parquet data files written",
            self.data_file_bytes.clone(),
        );
        r.register(
            "commits",
            "Table commits by result (ok, conflict, offsets_moved, failed)",
            self.commits.clone(),
        );
        r.register(
            "failed_rounds",
            "Translation rounds that failed (object store, quorum, a table deleted by hand); the next starts over from the table",
            self.failed_rounds.clone(),
        );
        r.register(
            "lag_seconds",
            "How long ago the table last held every committed record of the partitions led here (0: it holds them all now)",
            self.lag_seconds.clone(),
        );
        r.register(
            "round_seconds",
            "Time of one translation round of one topic (read, write files, commit)",
            self.round_seconds.clone(),
        );
    }
}
