//! Topic configuration under Kafka's names: which keys exist, their broker-wide defaults,
//! validation of values set through CreateTopics / IncrementalAlterConfigs, and the
//! [`LogConfig`] a partition's log runs with, built from them.
//!
//! Every topic key of Kafka 4.0 is accepted with Kafka's validation. Those Strata has no use
//! for ([`NO_OP_KEYS`]: file handling of Kafka's own log layout, replication throttles, the
//! legacy message formats) are stored and described like the others, and documented as having
//! no effect; any other key is refused with INVALID_CONFIG.

use std::collections::BTreeMap;

use crate::config::BrokerConfig;
use crate::log::compression::{self, Codec, Target};
use crate::log::config::{cleanup_policy, LogConfig, TimestampType};

pub use crate::config::catalogue::Kind;

/// The topic key that lets share groups use a topic as their dead-letter topic.
pub const DLQ_GROUP_ENABLE: &str = "errors.deadletterqueue.group.enable";

/// The topic key that pins its partitions' leaders to racks (zones), as Redpanda's
/// `redpanda.leaders.preference`: `none`, or `racks:<rack>[,<rack>..]` in order of preference.
pub const LEADERS_PREFERENCE: &str = "leaders.preference";

/// The topic key that makes the topic an Iceberg table too: `disabled`, `key_value` or
/// `value_json` ([`IcebergMode`]).
pub const ICEBERG_MODE: &str = "iceberg.mode";
/// How far the topic's Iceberg table may lag its log.
pub const ICEBERG_TARGET_LAG_MS: &str = "iceberg.target.lag.ms";
/// `value_json`: the Iceberg schema (JSON) the records' values are read with.
pub const ICEBERG_VALUE_SCHEMA: &str = "iceberg.value.schema";

/// How a topic is written to its Iceberg table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IcebergMode {
    /// Each record as its Kafka fields, key and value as bytes.
    KeyValue,
    /// The Kafka fields, and the value parsed as JSON into typed columns.
    ValueJson,
}

impl IcebergMode {
    /// As the config names it.
    pub fn name(self) -> &'static str {
        match self {
            IcebergMode::KeyValue => "key_value",
            IcebergMode::ValueJson => "value_json",
        }
    }

    /// The mode a validated value names; `None` for `disabled`.
    pub fn parse(value: &str) -> Result<Option<IcebergMode>, String> {
        match value {
            "disabled" => Ok(None),
            "key_value" => Ok(Some(IcebergMode::KeyValue)),
            "value_json" => Ok(Some(IcebergMode::ValueJson)),
            _ => Err("must be disabled, key_value or value_json".into()),
        }
    }

    /// The mode of a topic with these config overrides (`None`: not a table).
    pub fn of(configs: &BTreeMap<String, String>) -> Option<IcebergMode> {
        (configs.get(ICEBERG_MODE)).and_then(|v| IcebergMode::parse(v).ok().flatten())
    }
}

/// The racks `leaders.preference` names, most preferred first (none for `none`). Only a
/// validated value is read here: anything else pins nothing.
pub fn leader_racks(value: &str) -> Vec<&str> {
    match value.trim().strip_prefix("racks:") {
        Some(list) => list_values(list),
        None => Vec::new(),
    }
}

/// The racks a topic with these config overrides pins its leaders to (none: not pinned).
pub fn pinned_racks(configs: &BTreeMap<String, String>) -> Vec<&str> {
    configs
        .get(LEADERS_PREFERENCE)
        .map_or_else(Vec::new, |v| leader_racks(v))
}

pub struct KeyDef {
    pub name: &'static str,
    pub kind: Kind,
    pub doc: &'static str,
}

/// Every topic-level key Strata honours.
pub const KEYS: &[KeyDef] = &[
    KeyDef {
        name: "cleanup.policy",
        kind: Kind::List,
        doc: "delete, compact, or compact,delete",
    },
    KeyDef {
        name: "compression.gzip.level",
        kind: Kind::Int,
        doc: "gzip level of compression.type=gzip: -1 (default, 6) or 1..9",
    },
    KeyDef {
        name: "compression.lz4.level",
        kind: Kind::Int,
        doc: "lz4 level of compression.type=lz4: 1..17",
    },
    KeyDef {
        name: "compression.type",
        kind: Kind::Str,
        doc: "producer (batches stored as sent), uncompressed, gzip, snappy, lz4 or zstd \
              (batches under another codec are recompressed at append)",
    },
    KeyDef {
        name: "compression.zstd.level",
        kind: Kind::Int,
        doc: "zstd level of compression.type=zstd: -131072..22",
    },
    KeyDef {
        name: "delete.retention.ms",
        kind: Kind::Long,
        doc: "compacted topics: keep tombstones this long after their timestamp",
    },
    KeyDef {
        name: "flush.messages",
        kind: Kind::Long,
        doc: "fsync after this many records",
    },
    KeyDef {
        name: "flush.ms",
        kind: Kind::Long,
        doc: "fsync when the oldest unflushed record is this old",
    },
    KeyDef {
        name: "index.interval.bytes",
        kind: Kind::Int,
        doc: "bytes between offset index entries",
    },
    KeyDef {
        name: "local.retention.bytes",
        kind: Kind::Long,
        doc: "tiered topics: local bytes kept once offloaded (-2: retention.bytes)",
    },
    KeyDef {
        name: "local.retention.ms",
        kind: Kind::Long,
        doc:
            "tiered topics: how long segments stay on local disk once offloaded (-2: retention.ms)",
    },
    KeyDef {
        name: "max.message.bytes",
        kind: Kind::Int,
        doc: "largest record batch accepted",
    },
    KeyDef {
        name: "message.timestamp.type",
        kind: Kind::Str,
        doc: "CreateTime or LogAppendTime",
    },
    KeyDef {
        name: "min.cleanable.dirty.ratio",
        kind: Kind::Double,
        doc: "compacted topics: clean when this share of the log is dirty",
    },
    KeyDef {
        name: "min.compaction.lag.ms",
        kind: Kind::Long,
        doc: "compacted topics: never clean records younger than this",
    },
    KeyDef {
        name: "min.insync.replicas",
        kind: Kind::Int,
        doc: "replicas that must hold an acks=all write",
    },
    KeyDef {
        name: "remote.storage.enable",
        kind: Kind::Bool,
        doc: "offload closed segments to the object store (delete policy only)",
    },
    KeyDef {
        name: "retention.bytes",
        kind: Kind::Long,
        doc: "size bound of a partition (-1: none)",
    },
    KeyDef {
        name: "retention.ms",
        kind: Kind::Long,
        doc: "age bound of records (-1: none)",
    },
    KeyDef {
        name: "segment.bytes",
        kind: Kind::Int,
        doc: "roll the active segment at this size",
    },
    KeyDef {
        name: "segment.ms",
        kind: Kind::Long,
        doc: "roll the active segment at this age",
    },
    KeyDef {
        name: "unclean.leader.election.enable",
        kind: Kind::Bool,
        doc: "elect leaders outside the ISR",
    },
    KeyDef {
        name: DLQ_GROUP_ENABLE,
        kind: Kind::Bool,
        doc: "whether share groups may write dead letters here (KIP-1191): a group's \
              errors.deadletterqueue.topic.name must name a topic with this true",
    },
    KeyDef {
        name: LEADERS_PREFERENCE,
        kind: Kind::Str,
        doc: "none, or racks:<rack>[,<rack>..]: partitions are led from a replica in the first \
              of these racks (zones) that holds one, where the topic's producers are, so \
              produce bytes stay in their zone (as Redpanda's leader pinning)",
    },
    KeyDef {
        name: ICEBERG_MODE,
        kind: Kind::Str,
        doc: "disabled, key_value or value_json: the topic's committed records are also \
              written to an Apache Iceberg table in the object store (docs/iceberg.md)",
    },
    KeyDef {
        name: ICEBERG_TARGET_LAG_MS,
        kind: Kind::Long,
        doc: "how long a committed record may wait before it is in the Iceberg table",
    },
    KeyDef {
        name: ICEBERG_VALUE_SCHEMA,
        kind: Kind::Str,
        doc: "iceberg.mode=value_json: the Iceberg schema (JSON) of the records' values",
    },
    KeyDef {
        name: "file.delete.delay.ms",
        kind: Kind::Long,
        doc: "no effect: Strata deletes a segment's files once no reader holds them",
    },
    KeyDef {
        name: "follower.replication.throttled.replicas",
        kind: Kind::List,
        doc: "no effect: replication is not throttled per replica",
    },
    KeyDef {
        name: "leader.replication.throttled.replicas",
        kind: Kind::List,
        doc: "no effect: replication is not throttled per replica",
    },
    KeyDef {
        name: "max.compaction.lag.ms",
        kind: Kind::Long,
        doc: "no effect: the cleaner picks logs by min.cleanable.dirty.ratio alone",
    },
    KeyDef {
        name: "message.downconversion.enable",
        kind: Kind::Bool,
        doc: "no effect: batches are served in the format they were written (v2)",
    },
    KeyDef {
        name: "message.format.version",
        kind: Kind::Str,
        doc: "no effect: every batch is written in record batch format v2",
    },
    KeyDef {
        name: "message.timestamp.after.max.ms",
        kind: Kind::Long,
        doc: "no effect: record timestamps ahead of the broker's clock are not refused",
    },
    KeyDef {
        name: "message.timestamp.before.max.ms",
        kind: Kind::Long,
        doc: "no effect: record timestamps behind the broker's clock are not refused",
    },
    KeyDef {
        name: "message.timestamp.difference.max.ms",
        kind: Kind::Long,
        doc: "no effect (deprecated in Kafka for the two keys above)",
    },
    KeyDef {
        name: "preallocate",
        kind: Kind::Bool,
        doc: "no effect: segment files grow as they are written",
    },
    KeyDef {
        name: "remote.log.copy.disable",
        kind: Kind::Bool,
        doc: "no effect: a tiered topic uploads every closed segment",
    },
    KeyDef {
        name: "remote.log.delete.on.disable",
        kind: Kind::Bool,
        doc: "no effect: remote.storage.enable cannot be turned off once on",
    },
    KeyDef {
        name: "segment.index.bytes",
        kind: Kind::Int,
        doc: "no effect: offset indexes grow with their segment",
    },
    KeyDef {
        name: "segment.jitter.ms",
        kind: Kind::Long,
        doc: "no effect: segments roll at segment.ms exactly",
    },
];

/// The keys of [`KEYS`] that Kafka defines and Strata accepts, stores and describes, but
/// that change nothing here (each one's doc says why).
pub const NO_OP_KEYS: &[&str] = &[
    "file.delete.delay.ms",
    "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas",
    "max.compaction.lag.ms",
    "message.downconversion.enable",
    "message.format.version",
    "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms",
    "message.timestamp.difference.max.ms",
    "preallocate",
    "remote.log.copy.disable",
    "remote.log.delete.on.disable",
    "segment.index.bytes",
    "segment.jitter.ms",
];

pub fn key(name: &str) -> Option<&'static KeyDef> {
    KEYS.iter().find(|k| k.name == name)
}

/// The broker setting (its key in [`crate::config::catalogue`]) that holds a topic key's
/// default: DescribeConfigs lists it among the key's synonyms, and a dynamic change of it
/// reaches every topic without an override.
pub fn broker_setting(name: &str) -> Option<&'static str> {
    Some(match name {
        "cleanup.policy" => "log_cleanup_policy",
        "compression.type" => "compression_type",
        "compression.gzip.level" => "compression_gzip_level",
        "compression.lz4.level" => "compression_lz4_level",
        "compression.zstd.level" => "compression_zstd_level",
        "delete.retention.ms" => "log_cleaner_delete_retention_ms",
        "min.cleanable.dirty.ratio" => "log_cleaner_min_cleanable_ratio",
        "min.compaction.lag.ms" => "log_cleaner_min_compaction_lag_ms",
        "flush.messages" => "log_flush_messages",
        "flush.ms" => "log_flush_ms",
        ICEBERG_TARGET_LAG_MS => "iceberg_target_lag_ms",
        "index.interval.bytes" => "log_index_interval_bytes",
        "local.retention.bytes" => "log_local_retention_bytes",
        "local.retention.ms" => "log_local_retention_ms",
        "max.message.bytes" => "message_max_bytes",
        "min.insync.replicas" => "min_insync_replicas",
        "message.timestamp.type" => "log_message_timestamp_type",
        "remote.storage.enable" => "remote_storage_enable",
        "retention.bytes" => "log_retention_bytes",
        "retention.ms" => "log_retention_ms",
        "segment.bytes" => "log_segment_bytes",
        "segment.ms" => "log_segment_ms",
        _ => return None,
    })
}

/// Broker-wide default of a key, as Kafka's DescribeConfigs shows it. The same value as
/// [`broker_setting`]'s (a test checks), read from its field: this runs per topic on every
/// metadata change, where serializing the settings would not do.
pub fn default_value(cfg: &BrokerConfig, name: &str) -> String {
    match name {
        "cleanup.policy" => cfg.log_cleanup_policy.clone(),
        "compression.type" => cfg.compression_type.clone(),
        "compression.gzip.level" => cfg.compression_gzip_level.to_string(),
        "compression.lz4.level" => cfg.compression_lz4_level.to_string(),
        "compression.zstd.level" => cfg.compression_zstd_level.to_string(),
        "delete.retention.ms" => cfg.log_cleaner_delete_retention_ms.to_string(),
        "min.cleanable.dirty.ratio" => cfg.log_cleaner_min_cleanable_ratio.to_string(),
        "min.compaction.lag.ms" => cfg.log_cleaner_min_compaction_lag_ms.to_string(),
        "flush.messages" => cfg.log_flush_messages.to_string(),
        "flush.ms" => cfg.log_flush_ms.to_string(),
        "index.interval.bytes" => cfg.log_index_interval_bytes.to_string(),
        "local.retention.bytes" => cfg.log_local_retention_bytes.to_string(),
        "local.retention.ms" => cfg.log_local_retention_ms.to_string(),
        "max.message.bytes" => cfg.message_max_bytes.to_string(),
        "message.timestamp.type" => cfg.log_message_timestamp_type.clone(),
        "min.insync.replicas" => cfg.min_insync_replicas.to_string(),
        "remote.storage.enable" => cfg.remote_storage_enable.to_string(),
        "retention.bytes" => cfg.log_retention_bytes.to_string(),
        "retention.ms" => cfg.log_retention_ms.to_string(),
        "segment.bytes" => cfg.log_segment_bytes.to_string(),
        "segment.ms" => cfg.log_segment_ms.to_string(),
        "unclean.leader.election.enable" | DLQ_GROUP_ENABLE => "false".into(),
        LEADERS_PREFERENCE => "none".into(),
        ICEBERG_MODE => "disabled".into(),
        ICEBERG_TARGET_LAG_MS => cfg.iceberg_target_lag_ms.to_string(),
        // Kafka's defaults of the keys that have no effect here.
        "file.delete.delay.ms" => "60000".into(),
        "max.compaction.lag.ms"
        | "message.timestamp.after.max.ms"
        | "message.timestamp.before.max.ms"
        | "message.timestamp.difference.max.ms" => i64::MAX.to_string(),
        "message.downconversion.enable" => "true".into(),
        "message.format.version" => "3.0-IV1".into(),
        "preallocate" | "remote.log.copy.disable" | "remote.log.delete.on.disable" => {
            "false".into()
        }
        "segment.index.bytes" => "10485760".into(),
        "segment.jitter.ms" => "0".into(),
        _ => String::new(),
    }
}

/// Checks one `key=value` a client wants to set. The message is returned to the client.
pub fn validate(name: &str, value: &str) -> Result<(), String> {
    let def = key(name).ok_or_else(|| format!("unknown or unsupported topic config '{name}'"))?;
    let bad = |why: &str| Err(format!("invalid value '{value}' for {name}: {why}"));
    match def.kind {
        Kind::Long => {
            let Ok(v) = value.parse::<i64>() else {
                return bad("not a number");
            };
            let min = match name {
                "local.retention.ms" | "local.retention.bytes" => -2,
                // Kafka sets no bound: a negative size means none.
                "retention.bytes" => i64::MIN,
                "file.delete.delay.ms"
                | "segment.jitter.ms"
                | "message.timestamp.after.max.ms"
                | "message.timestamp.before.max.ms"
                | "message.timestamp.difference.max.ms" => 0,
                "max.compaction.lag.ms" => 1,
                _ => -1,
            };
            if v < min {
                return bad(&format!("must be ≥ {min}"));
            }
            if matches!(name, "flush.messages" | "flush.ms" | "segment.ms") && v < 1 {
                return bad("must be ≥ 1");
            }
            if name == ICEBERG_TARGET_LAG_MS && v < 1000 {
                return bad("must be ≥ 1000");
            }
        }
        Kind::Int => {
            let Ok(v) = value.parse::<i32>() else {
                return bad("not a 32-bit number");
            };
            let codec = match name {
                "compression.gzip.level" => Some(Codec::Gzip),
                "compression.lz4.level" => Some(Codec::Lz4),
                "compression.zstd.level" => Some(Codec::Zstd),
                _ => None,
            };
            if let Some(codec) = codec {
                return compression::check_level(codec, v.into()).or_else(|why| bad(&why));
            }
            let min = match name {
                "segment.bytes" => 1024,
                "segment.index.bytes" => 4,
                "max.message.bytes" => 0,
                _ => 1,
            };
            if v < min {
                return bad(&format!("must be ≥ {min}"));
            }
        }
        Kind::Bool => {
            if value != "true" && value != "false" {
                return bad("must be true or false");
            }
        }
        Kind::Double => match value.parse::<f64>() {
            Ok(v) if (0.0..=1.0).contains(&v) => {}
            _ => return bad("must be a number between 0 and 1"),
        },
        // No topic key is a short or a password.
        Kind::Str | Kind::List | Kind::Short | Kind::Password => {
            let ok = match name {
                "cleanup.policy" => cleanup_policy(value).is_some(),
                "compression.type" => {
                    return Codec::parse(value).map(drop).or_else(|why| bad(&why));
                }
                "message.timestamp.type" => value == "CreateTime" || value == "LogAppendTime",
                "message.format.version" => is_format_version(value),
                ICEBERG_MODE => {
                    return match IcebergMode::parse(value) {
                        Err(why) => bad(&why),
                        Ok(Some(_)) if !cfg!(feature = "iceberg") => bad(NO_ICEBERG),
                        Ok(_) => Ok(()),
                    };
                }
                #[cfg(feature = "iceberg")]
                ICEBERG_VALUE_SCHEMA => {
                    return crate::iceberg::value::check_config(value).or_else(|w| bad(&w));
                }
                #[cfg(not(feature = "iceberg"))]
                ICEBERG_VALUE_SCHEMA => return bad(NO_ICEBERG),
                LEADERS_PREFERENCE => {
                    value == "none"
                        || value
                            .strip_prefix("racks:")
                            .is_some_and(|l| !list_values(l).is_empty())
                }
                "leader.replication.throttled.replicas"
                | "follower.replication.throttled.replicas" => is_throttled_replicas(value),
                _ => true,
            };
            if !ok {
                return bad("not supported");
            }
        }
    }
    Ok(())
}

/// The Iceberg schema of `iceberg.value.schema` (the JSON of the Iceberg spec's schema
/// object). Field ids are the schema's own; the Kafka columns are added around them, so a value
/// column may not take one of their names.
/// Why `iceberg.*` keys are refused by a broker built without the `iceberg` feature.
#[cfg_attr(feature = "iceberg", allow(dead_code))]
const NO_ICEBERG: &str = "this build of Strata has no Iceberg tables (the `iceberg` feature)";

/// Kafka's `MetadataVersionValidator`: a release (`2.8`, `3.0`) with an optional
/// inter-broker version (`3.0-IV1`), or the old formats' `0.10.2`.
fn is_format_version(value: &str) -> bool {
    let (release, iv) = value.split_once("-IV").unwrap_or((value, "0"));
    let parts: Vec<&str> = release.split('.').collect();
    (2..=4).contains(&parts.len())
        && parts
            .iter()
            .chain([&iv])
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// Kafka's `ThrottledReplicaListValidator`: `*`, or `partition:broker` pairs.
fn is_throttled_replicas(value: &str) -> bool {
    let values = list_values(value);
    values == ["*"]
        || values.iter().all(|v| {
            v.split_once(':')
                .is_some_and(|(p, b)| p.parse::<u32>().is_ok() && b.parse::<u32>().is_ok())
        })
}

/// A LIST key's values (`compact,delete`): trimmed, empty ones dropped.
pub fn list_values(value: &str) -> Vec<&str> {
    (value.split(',').map(str::trim))
        .filter(|v| !v.is_empty())
        .collect()
}

/// IncrementalAlterConfigs APPEND (`subtract` false) or SUBTRACT on a LIST key's `current`
/// value: values appended once, in order; subtracted wherever they are.
pub fn list_change(current: &str, change: &str, subtract: bool) -> String {
    let mut values = list_values(current);
    for v in list_values(change) {
        if subtract {
            values.retain(|x| *x != v);
        } else if !values.contains(&v) {
            values.push(v);
        }
    }
    values.join(",")
}

/// Checks an alter of a topic's keys from `current` to `merged`, beyond each set alone: the
/// value schema of a `value_json` topic only gains optional fields, since its table keeps
/// every row written. (To start a table over in a schema that does not follow: delete
/// `iceberg.mode`, set the schema, set the mode again and rewrite the table.)
pub fn validate_change(
    current: &BTreeMap<String, String>,
    merged: &BTreeMap<String, String>,
) -> Result<(), String> {
    let json = |c: &BTreeMap<String, String>| IcebergMode::of(c) == Some(IcebergMode::ValueJson);
    let (Some(old), Some(new)) = (
        current.get(ICEBERG_VALUE_SCHEMA),
        merged.get(ICEBERG_VALUE_SCHEMA),
    ) else {
        return Ok(());
    };
    if old == new || !json(current) || !json(merged) {
        return Ok(());
    }
    #[cfg(not(feature = "iceberg"))]
    return Err(NO_ICEBERG.into());
    #[cfg(feature = "iceberg")]
    crate::iceberg::value::check_config_change(old, new).map_err(|e| {
        format!(
            "{ICEBERG_VALUE_SCHEMA} may only gain optional fields: {e} (to start the table \
             over: delete {ICEBERG_MODE}, set the schema, set the mode and `strata iceberg \
             rewrite` the topic)"
        )
    })
}

/// Checks the keys of one topic together (after a create or an alter), as Kafka does.
pub fn validate_combination(
    cfg: &BrokerConfig,
    overrides: &BTreeMap<String, String>,
) -> Result<(), String> {
    let get = |name: &str| {
        overrides
            .get(name)
            .cloned()
            .unwrap_or_else(|| default_value(cfg, name))
    };
    let (compact, _) = cleanup_policy(&get("cleanup.policy")).unwrap_or((false, true));
    if compact && overrides.get("remote.storage.enable").map(String::as_str) == Some("true") {
        return Err(
            "remote.storage.enable=true is not supported with cleanup.policy compact".into(),
        );
    }
    if IcebergMode::of(overrides) == Some(IcebergMode::ValueJson)
        && !overrides.contains_key(ICEBERG_VALUE_SCHEMA)
    {
        return Err(format!(
            "{ICEBERG_MODE}=value_json needs {ICEBERG_VALUE_SCHEMA} (an Iceberg schema as JSON)"
        ));
    }
    for (local, total) in [
        ("local.retention.ms", "retention.ms"),
        ("local.retention.bytes", "retention.bytes"),
    ] {
        let (l, t) = (
            get(local).parse::<i64>().unwrap_or(-2),
            get(total).parse::<i64>().unwrap_or(-1),
        );
        if t >= 0 && (l == -1 || l > t) {
            return Err(format!(
                "{local}={l} must not exceed {total}={t} (-2 means the same)"
            ));
        }
    }
    Ok(())
}

/// The effective value of every key: topic overrides, else broker defaults.
pub fn effective(
    cfg: &BrokerConfig,
    overrides: &BTreeMap<String, String>,
) -> BTreeMap<String, (String, bool)> {
    KEYS.iter()
        .map(|k| match overrides.get(k.name) {
            Some(v) => (k.name.to_string(), (v.clone(), false)),
            None => (k.name.to_string(), (default_value(cfg, k.name), true)),
        })
        .collect()
}

pub fn log_config(cfg: &BrokerConfig, overrides: &BTreeMap<String, String>) -> LogConfig {
    let get = |name: &str| {
        overrides
            .get(name)
            .cloned()
            .unwrap_or_else(|| default_value(cfg, name))
    };
    let num = |name: &str, fallback: i64| get(name).parse::<i64>().unwrap_or(fallback);
    let (compact, delete) = cleanup_policy(&get("cleanup.policy")).unwrap_or((false, true));
    LogConfig {
        segment_bytes: num("segment.bytes", 1 << 30).max(1024) as u64,
        segment_ms: num("segment.ms", i64::MAX),
        retention_ms: num("retention.ms", -1),
        retention_bytes: num("retention.bytes", -1),
        flush_messages: num("flush.messages", i64::MAX),
        flush_ms: num("flush.ms", i64::MAX),
        index_interval_bytes: num("index.interval.bytes", 4096).max(1) as u64,
        max_message_bytes: num("max.message.bytes", 1_048_588).max(0) as usize,
        timestamp_type: if get("message.timestamp.type") == "LogAppendTime" {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        },
        compact,
        delete,
        delete_retention_ms: num("delete.retention.ms", 86_400_000),
        min_cleanable_dirty_ratio: get("min.cleanable.dirty.ratio")
            .parse::<f64>()
            .unwrap_or(0.5),
        min_compaction_lag_ms: num("min.compaction.lag.ms", 0).max(0),
        remote_storage: !compact && get("remote.storage.enable") == "true",
        local_retention_ms: local_retention(num("local.retention.ms", -2), num("retention.ms", -1)),
        local_retention_bytes: local_retention(
            num("local.retention.bytes", -2),
            num("retention.bytes", -1),
        ),
        min_insync_replicas: usize::try_from(num("min.insync.replicas", 1)).unwrap_or(1),
        compression: Codec::parse(&get("compression.type"))
            .ok()
            .flatten()
            .map(|codec| {
                let level = codec.level_key().map_or(0, |(key, _, default)| {
                    get(key).parse::<i32>().unwrap_or(default)
                });
                Target { codec, level }
            }),
    }
}

/// Kafka's -2 ("as retention") resolved, and the local bound never looser than the total.
fn local_retention(local: i64, total: i64) -> i64 {
    match (local, total) {
        (-2, t) => t,
        (l, -1) => l,
        (-1, t) => t,
        (l, t) => l.min(t),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafkas_other_topic_keys_are_accepted_with_kafkas_validation() {
        for (name, good, bad) in [
            ("file.delete.delay.ms", "0", "-1"),
            ("max.compaction.lag.ms", "1", "0"),
            ("segment.jitter.ms", "0", "-1"),
            ("segment.index.bytes", "4", "3"),
            ("preallocate", "true", "yes"),
            ("message.downconversion.enable", "false", "1"),
            ("message.format.version", "3.0-IV1", "three"),
            ("message.format.version", "0.10.2", "3."),
            ("message.timestamp.before.max.ms", "0", "-1"),
            ("message.timestamp.after.max.ms", "3600000", "soon"),
            (
                "message.timestamp.difference.max.ms",
                "9223372036854775807",
                "-5",
            ),
            ("leader.replication.throttled.replicas", "*", "0:x"),
            (
                "follower.replication.throttled.replicas",
                "0:1,1:2",
                "*,0:1",
            ),
            ("remote.log.copy.disable", "false", ""),
            ("remote.log.delete.on.disable", "true", "no"),
        ] {
            assert_eq!(validate(name, good), Ok(()), "{name}={good}");
            assert!(validate(name, bad).is_err(), "{name}={bad} must be refused");
        }
        for name in NO_OP_KEYS {
            assert!(
                key(name).is_some_and(|k| k.doc.starts_with("no effect")),
                "{name}"
            );
        }
        assert!(validate("no.such.key", "1").is_err());
        // An empty list is valid for a LIST key; an empty cleanup.policy keeps everything.
        assert_eq!(validate("cleanup.policy", ""), Ok(()));
        assert_eq!(
            validate("leader.replication.throttled.replicas", ""),
            Ok(())
        );
        let cfg = BrokerConfig::default();
        let none: BTreeMap<String, String> = [("cleanup.policy".into(), String::new())].into();
        let log = log_config(&cfg, &none);
        assert!(!log.compact && !log.delete);
        // retention.bytes has no lower bound in Kafka: any negative size means none.
        assert_eq!(validate("retention.bytes", "-7"), Ok(()));
    }

    #[test]
    fn iceberg_keys_are_checked_alone_and_together() {
        for (name, good, bad) in [
            (ICEBERG_MODE, "key_value", "parquet"),
            (ICEBERG_MODE, "value_json", "KEY_VALUE"),
            (ICEBERG_TARGET_LAG_MS, "1000", "999"),
            (
                ICEBERG_VALUE_SCHEMA,
                r#"{"type":"struct","schema-id":0,"fields":[{"id":1,"name":"a","required":false,"type":"long"}]}"#,
                r#"{"type":"struct","schema-id":0,"fields":[]}"#,
            ),
            (
                ICEBERG_VALUE_SCHEMA,
                r#"{"type":"struct","fields":[{"id":1,"name":"at","required":true,"type":"date"}]}"#,
                r#"{"type":"struct","fields":[{"id":1,"name":"key","required":true,"type":"string"}]}"#,
            ),
        ] {
            assert_eq!(validate(name, good), Ok(()), "{name}={good}");
            assert!(validate(name, bad).is_err(), "{name}={bad}");
        }
        let cfg = BrokerConfig::default();
        let json = BTreeMap::from([(ICEBERG_MODE.to_string(), "value_json".to_string())]);
        assert!(validate_combination(&cfg, &json).is_err());
        assert_eq!(IcebergMode::of(&json), Some(IcebergMode::ValueJson));
        assert_eq!(IcebergMode::of(&BTreeMap::new()), None);
    }

    #[test]
    fn defaults_are_the_values_of_their_broker_settings() {
        let cfg = BrokerConfig {
            log_retention_ms: 123,
            log_cleanup_policy: "compact".into(),
            ..BrokerConfig::default()
        };
        let values = crate::config::catalogue::values(&cfg);
        for k in KEYS {
            match broker_setting(k.name) {
                Some(setting) => assert_eq!(
                    values[setting].as_deref(),
                    Some(default_value(&cfg, k.name).as_str()),
                    "{}",
                    k.name
                ),
                None => assert!(
                    matches!(
                        k.name,
                        "unclean.leader.election.enable"
                            | DLQ_GROUP_ENABLE
                            | LEADERS_PREFERENCE
                            | ICEBERG_MODE
                            | ICEBERG_VALUE_SCHEMA
                    ) || NO_OP_KEYS.contains(&k.name),
                    "{} has no broker setting",
                    k.name
                ),
            }
        }
    }

    #[test]
    fn overrides_win_over_broker_defaults() {
        let cfg = BrokerConfig::default();
        let mut o = BTreeMap::new();
        o.insert("segment.bytes".to_string(), "1048576".to_string());
        let lc = log_config(&cfg, &o);
        assert_eq!(lc.segment_bytes, 1 << 20);
        assert_eq!(lc.retention_ms, 7 * 24 * 3600 * 1000);
        let eff = effective(&cfg, &o);
        assert_eq!(eff["segment.bytes"], ("1048576".to_string(), false));
        assert!(eff["retention.ms"].1);
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused_with_a_reason() {
        assert!(validate("retention.ms", "100").is_ok());
        assert!(validate("retention.ms", "soon")
            .unwrap_err()
            .contains("not a number"));
        assert!(validate("segment.bytes", "10").is_err());
        assert!(validate("cleanup.policy", "compact").is_ok());
        assert!(validate("cleanup.policy", "compact,delete").is_ok());
        assert!(validate("cleanup.policy", "shred").is_err());
        assert!(validate("min.cleanable.dirty.ratio", "0.1").is_ok());
        assert!(validate("min.cleanable.dirty.ratio", "2").is_err());
        assert!(validate("no.such.key", "1")
            .unwrap_err()
            .contains("unknown"));
        assert!(validate("message.timestamp.type", "LogAppendTime").is_ok());
        assert!(validate("local.retention.ms", "-2").is_ok());
        assert!(validate("retention.ms", "-2").is_err());
        assert!(validate("remote.storage.enable", "yes").is_err());
        assert!(validate(LEADERS_PREFERENCE, "none").is_ok());
        assert!(validate(LEADERS_PREFERENCE, "racks:us-east-1a, us-east-1b").is_ok());
        assert!(validate(LEADERS_PREFERENCE, "racks:").is_err());
        assert!(validate(LEADERS_PREFERENCE, "us-east-1a").is_err());
        assert_eq!(leader_racks("racks:a, b,"), ["a", "b"]);
        assert!(leader_racks("none").is_empty());
    }

    #[test]
    fn local_retention_follows_retention_and_never_exceeds_it() {
        let cfg = BrokerConfig::default();
        let with = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        let lc = log_config(&cfg, &with(&[]));
        assert!(lc.remote_storage, "the tier is on by default");
        assert_eq!(
            lc.local_retention_ms, lc.retention_ms,
            "-2 means retention.ms"
        );
        let lc = log_config(&cfg, &with(&[("local.retention.ms", "1000")]));
        assert_eq!(lc.local_retention_ms, 1000);
        let lc = log_config(&cfg, &with(&[("cleanup.policy", "compact")]));
        assert!(!lc.remote_storage, "compacted logs are not tiered");
        assert!(validate_combination(
            &cfg,
            &with(&[
                ("cleanup.policy", "compact"),
                ("remote.storage.enable", "true")
            ])
        )
        .is_err());
        assert!(validate_combination(
            &cfg,
            &with(&[("retention.ms", "1000"), ("local.retention.ms", "5000")])
        )
        .is_err());
        assert!(validate_combination(&cfg, &with(&[("local.retention.ms", "1000")])).is_ok());
    }
}
