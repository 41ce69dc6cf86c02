//! What operators see of the tables (`/v1/iceberg[/<topic>]` on the admin port, read by
//! `strata iceberg` and `strata topic describe`), and the one change they make: a rewrite.
//!
//! Lag is this broker's view: the partitions it leads. In a cluster each broker answers for
//! its own; the table's offsets are the quorum's and the same everywhere.

use serde::{Deserialize, Serialize};
use strata_metadata::TopicInfo;

use super::layout::TableKind;
use super::Iceberg;
use crate::topic_config::{IcebergMode, ICEBERG_MODE};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TableStatus {
    pub topic: String,
    /// `key_value` or `value_json`; `disabled` for a topic that still has a table.
    pub mode: String,
    /// The current metadata file; `None` before the first round created the table.
    pub metadata_location: Option<String>,
    pub snapshot: Option<SnapshotStatus>,
    pub partitions: Vec<PartitionStatus>,
    /// The most any partition led here lags (seconds): how long ago the table last held
    /// every committed record of it.
    pub lag_seconds: Option<u64>,
    /// Why the table's metadata could not be read (a table deleted by hand), or why the last
    /// round here failed.
    pub error: Option<String>,
    /// `value_json`: the dead-letter table (`<topic>~dlq`), once a value was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letters: Option<DeadLetterStatus>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DeadLetterStatus {
    pub table: String,
    pub metadata_location: String,
    pub total_records: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SnapshotStatus {
    pub id: i64,
    pub timestamp_ms: i64,
    pub total_records: Option<u64>,
    pub total_data_files: Option<u64>,
    pub total_files_size: Option<u64>,
    pub snapshots: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PartitionStatus {
    pub partition: i32,
    /// The offset after the last one the table holds.
    pub table_offset: Option<i64>,
    /// Led here: the last stable offset and the lag.
    pub last_stable_offset: Option<i64>,
    pub lag_seconds: Option<u64>,
}

fn mode_name(topic: &TopicInfo) -> String {
    let mode = topic
        .configs
        .get(ICEBERG_MODE)
        .map_or("disabled", String::as_str);
    mode.to_string()
}

/// Topics with `iceberg.mode` set or a table.
pub fn tables(iceberg: &Iceberg) -> Vec<TopicInfo> {
    let state = iceberg.node().metadata.state();
    (state.topics.values())
        .filter(|t| IcebergMode::of(&t.configs).is_some() || t.iceberg.is_some())
        .map(|t| (**t).clone())
        .collect()
}

pub async fn status(iceberg: &Iceberg, topic: &TopicInfo) -> TableStatus {
    let next = topic.iceberg.as_ref().map(|t| &t.next_offsets);
    let mut lag_seconds = None;
    let partitions = (0..topic.partitions.len() as i32)
        .map(|p| {
            let led = iceberg.translator.partition_lag(topic, p);
            if let Some((_, lag)) = led {
                lag_seconds = Some(lag_seconds.unwrap_or(0).max(lag));
            }
            PartitionStatus {
                partition: p,
                table_offset: next.and_then(|n| n.get(&p).copied()),
                last_stable_offset: led.map(|(lso, _)| lso),
                lag_seconds: led.map(|(_, lag)| lag),
            }
        })
        .collect();
    let mut out = TableStatus {
        topic: topic.name.clone(),
        mode: mode_name(topic),
        metadata_location: topic.iceberg.as_ref().map(|t| t.location.clone()),
        snapshot: None,
        partitions,
        lag_seconds,
        error: iceberg.translator.last_error(topic),
        dead_letters: None,
    };
    if let Some(dlq) = &topic.iceberg_dlq {
        let total_records = match iceberg.catalog.load(topic, TableKind::Dlq).await {
            Ok(Some(t)) => (t.metadata().current_snapshot()).and_then(|s| {
                s.summary()
                    .additional_properties
                    .get("total-records")?
                    .parse()
                    .ok()
            }),
            _ => None,
        };
        out.dead_letters = Some(DeadLetterStatus {
            table: TableKind::Dlq.name(&topic.name),
            metadata_location: dlq.location.clone(),
            total_records,
        });
    }
    match iceberg.catalog.load(topic, TableKind::Topic).await {
        Ok(Some(table)) => {
            if let Some(mode) = IcebergMode::of(&topic.configs) {
                if let Err(e) = super::translate::check_mode(&table, topic, mode) {
                    out.error = Some(e.to_string());
                }
            }
            let metadata = table.metadata();
            out.snapshot = metadata.current_snapshot().map(|s| {
                let summary = &s.summary().additional_properties;
                let num = |k: &str| summary.get(k).and_then(|v| v.parse().ok());
                SnapshotStatus {
                    id: s.snapshot_id(),
                    timestamp_ms: s.timestamp_ms(),
                    total_records: num("total-records"),
                    total_data_files: num("total-data-files"),
                    total_files_size: num("total-files-size"),
                    snapshots: metadata.snapshots().len(),
                }
            });
        }
        Ok(None) => {}
        Err(e) => {
            out.error = Some(format!(
                "the table's metadata cannot be read ({e}): `strata iceberg rewrite {}` starts \
                 it over",
                topic.name
            ))
        }
    }
    out
}
