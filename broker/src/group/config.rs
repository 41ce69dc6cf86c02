//! Group configs (KIP-848's GROUP config resource): the per-group overrides Kafka names, each
//! defaulting to a broker setting, checked by Kafka's bounds before they are stored in the
//! metadata quorum (settable before the group exists, as in Kafka), read by the share
//! partitions of the group.
//!
//! Only configs Strata acts on are listed: a name not here is refused (INVALID_CONFIG), never
//! stored and ignored.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::config::catalogue::Kind;
use crate::config::BrokerConfig;

/// One group config: its Kafka name, type, meaning, the broker setting it overrides and the
/// check of a value.
pub struct GroupConfig {
    pub name: &'static str,
    pub kind: Kind,
    pub doc: &'static str,
    /// The value in force without an override.
    pub default: fn(&BrokerConfig) -> String,
    /// Why a value is refused, given the broker settings in force.
    pub check: fn(&str, &BrokerConfig) -> Result<(), String>,
}

fn int_between(v: &str, lo: i64, hi: i64) -> Result<(), String> {
    match v.parse::<i64>() {
        Ok(n) if (lo..=hi).contains(&n) => Ok(()),
        Ok(_) => Err(format!("must be between {lo} and {hi}")),
        Err(_) => Err("must be an integer".into()),
    }
}

pub const GROUP_CONFIGS: &[GroupConfig] = &[
    GroupConfig {
        name: "share.record.lock.duration.ms",
        kind: Kind::Int,
        doc: "How long a share group's member holds a record it was handed before it goes back",
        default: |c| c.group_share_record_lock_duration_ms.to_string(),
        check: |v, _| int_between(v, 15_000, 3_600_000),
    },
    GroupConfig {
        name: "share.delivery.count.limit",
        kind: Kind::Int,
        doc: "Deliveries of a record after which it is archived as a dead letter",
        default: |c| c.group_share_delivery_count_limit.to_string(),
        check: |v, _| int_between(v, 2, 10),
    },
    GroupConfig {
        name: "share.partition.max.record.locks",
        kind: Kind::Int,
        doc: "Records of a share partition in flight (handed out and not yet done with) at most",
        default: |c| c.group_share_partition_max_record_locks.to_string(),
        check: |v, _| int_between(v, 100, 10_000),
    },
    GroupConfig {
        name: "share.auto.offset.reset",
        kind: Kind::Str,
        doc: "Where a share partition with no state starts: latest, earliest, or by_duration:<ISO-8601 duration> (the first record at most that old)",
        default: |_| "latest".into(),
        check: |v, _| Reset::parse(v).map(|_| ()),
    },
    GroupConfig {
        name: "share.isolation.level",
        kind: Kind::Str,
        doc: "read_uncommitted hands out records up to the high watermark; read_committed up to the last stable offset, never an aborted transaction's",
        default: |_| "read_uncommitted".into(),
        check: |v, _| match v {
            "read_uncommitted" | "read_committed" => Ok(()),
            _ => Err("must be read_uncommitted or read_committed".into()),
        },
    },
    GroupConfig {
        name: DLQ_TOPIC,
        kind: Kind::Str,
        doc: "The share group's dead-letter topic (KIP-1191): records it rejects or gives up on at the delivery limit are written there; empty for none",
        default: |_| String::new(),
        check: |v, broker| dead_letter_topic_allowed(v, &broker.errors_deadletterqueue_topic_name_prefix),
    },
    GroupConfig {
        name: DLQ_COPY_RECORD,
        kind: Kind::Bool,
        doc: "Whether a dead-letter record carries the key, value and headers of the record it stands for (else only the __dlq.errors.* headers)",
        default: |_| "false".into(),
        check: |v, _| match v {
            "true" | "false" => Ok(()),
            _ => Err("must be true or false".into()),
        },
    },
];

pub const DLQ_TOPIC: &str = "errors.deadletterqueue.topic.name";
pub const DLQ_COPY_RECORD: &str = "errors.deadletterqueue.copy.record.enable";

/// Whether `name` may be a dead-letter topic under the cluster's `prefix`, in Kafka's order
/// of rules: a topic name, not an internal one (`__`), with the prefix unless it is empty.
/// Empty names no topic, and is allowed.
pub fn dead_letter_topic_allowed(name: &str, prefix: &str) -> Result<(), String> {
    if name.is_empty() {
        return Ok(());
    }
    if name.starts_with("__") {
        return Err(format!("dead-letter topic {name} cannot start with __"));
    }
    crate::node::validate_topic_name(name).map_err(|e| e.message)?;
    if !prefix.is_empty() && !name.starts_with(prefix) {
        return Err(format!(
            "dead-letter topic {name} does not start with the cluster's prefix {prefix} (errors.deadletterqueue.topic.name.prefix)"
        ));
    }
    Ok(())
}

pub fn by_name(name: &str) -> Option<&'static GroupConfig> {
    GROUP_CONFIGS.iter().find(|c| c.name == name)
}

/// Where a share partition with no state starts (`share.auto.offset.reset`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reset {
    Earliest,
    Latest,
    /// The first record whose timestamp is at most this old.
    ByDuration(Duration),
}

impl Reset {
    pub fn parse(v: &str) -> Result<Reset, String> {
        match v {
            "latest" => Ok(Reset::Latest),
            "earliest" => Ok(Reset::Earliest),
            _ => match v.strip_prefix("by_duration:") {
                Some(d) => iso_duration(d).map(Reset::ByDuration).ok_or_else(|| {
                    format!("'{d}' is not an ISO-8601 duration such as P1DT2H (days to seconds)")
                }),
                None => Err("must be latest, earliest or by_duration:<duration>".into()),
            },
        }
    }
}

/// An ISO-8601 duration of days, hours, minutes and seconds (`PnDTnHnMn.nS`), as Java's
/// `Duration.parse` takes it; no years or months, which have no fixed length.
fn iso_duration(s: &str) -> Option<Duration> {
    let rest = s.strip_prefix('P').or_else(|| s.strip_prefix('p'))?;
    let (days, time) = match rest.split_once(['T', 't']) {
        Some((d, t)) => (d, Some(t)),
        None => (rest, None),
    };
    let mut secs = 0f64;
    let mut any = false;
    let mut take = |part: &str, units: &[(char, f64)]| -> Option<()> {
        let mut num = String::new();
        for ch in part.chars() {
            if ch.is_ascii_digit() || ch == '.' {
                num.push(ch);
                continue;
            }
            let (_, scale) = units.iter().find(|(u, _)| u.eq_ignore_ascii_case(&ch))?;
            let n: f64 = num.parse().ok()?;
            if !n.is_finite() {
                return None;
            }
            secs += n * scale;
            num.clear();
            any = true;
        }
        num.is_empty().then_some(())
    };
    take(days, &[('D', 86_400.0)])?;
    if let Some(t) = time {
        if t.is_empty() {
            return None;
        }
        take(t, &[('H', 3_600.0), ('M', 60.0), ('S', 1.0)])?;
    }
    (any && (0.0..1e12).contains(&secs)).then(|| Duration::from_secs_f64(secs))
}

/// A group's configs in force: its overrides over the broker's settings.
pub struct InForce<'a> {
    pub broker: &'a BrokerConfig,
    pub overrides: Option<&'a BTreeMap<String, String>>,
}

impl InForce<'_> {
    /// The value of `name` and whether the group overrides it.
    pub fn get(&self, c: &GroupConfig) -> (String, bool) {
        match self.overrides.and_then(|o| o.get(c.name)) {
            Some(v) => (v.clone(), true),
            None => ((c.default)(self.broker), false),
        }
    }

    fn int(&self, name: &str) -> Option<u64> {
        by_name(name).and_then(|c| self.get(c).0.parse().ok())
    }

    pub fn lock_duration(&self) -> Duration {
        let ms = self.int("share.record.lock.duration.ms");
        Duration::from_millis(ms.unwrap_or(self.broker.group_share_record_lock_duration_ms))
    }

    pub fn delivery_limit(&self) -> u16 {
        let n = self.int("share.delivery.count.limit");
        let n = n.unwrap_or(u64::from(self.broker.group_share_delivery_count_limit));
        u16::try_from(n).unwrap_or(u16::MAX)
    }

    pub fn max_record_locks(&self) -> i64 {
        let n = self.int("share.partition.max.record.locks");
        let n = n.unwrap_or(u64::from(
            self.broker.group_share_partition_max_record_locks,
        ));
        i64::try_from(n).unwrap_or(i64::MAX)
    }

    pub fn auto_offset_reset(&self) -> Reset {
        let v = by_name("share.auto.offset.reset").map(|c| self.get(c).0);
        v.and_then(|v| Reset::parse(&v).ok())
            .unwrap_or(Reset::Latest)
    }

    /// The group's dead-letter topic, if it names one.
    pub fn dead_letter_topic(&self) -> Option<String> {
        let v = by_name(DLQ_TOPIC).map(|c| self.get(c).0)?;
        let v = v.trim();
        (!v.is_empty()).then(|| v.to_string())
    }

    /// Whether dead-letter records carry the original record.
    pub fn copy_dead_letters(&self) -> bool {
        by_name(DLQ_COPY_RECORD).is_some_and(|c| self.get(c).0 == "true")
    }

    pub fn read_committed(&self) -> bool {
        let v = by_name("share.isolation.level").map(|c| self.get(c).0);
        v.as_deref() == Some("read_committed")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_passes_its_own_check() {
        let cfg = BrokerConfig::default();
        for c in GROUP_CONFIGS {
            assert_eq!((c.check)(&(c.default)(&cfg), &cfg), Ok(()), "{}", c.name);
        }
    }

    #[test]
    fn values_are_held_to_kafkas_bounds() {
        let cfg = BrokerConfig::default();
        let check = |name: &str, v: &str| (by_name(name).unwrap().check)(v, &cfg);
        assert!(check("share.record.lock.duration.ms", "14999").is_err());
        assert!(check("share.record.lock.duration.ms", "15000").is_ok());
        assert!(check("share.delivery.count.limit", "1").is_err());
        assert!(check("share.delivery.count.limit", "11").is_err());
        assert!(check("share.delivery.count.limit", "x").is_err());
        assert!(check("share.partition.max.record.locks", "99").is_err());
        assert!(check("share.isolation.level", "read_committed").is_ok());
        assert!(check("share.isolation.level", "serializable").is_err());
        assert!(by_name("share.unknown").is_none());
        // Kafka's dead-letter topic rules, under the default prefix `dlq.`.
        assert!(check(DLQ_TOPIC, "dlq.orders").is_ok());
        assert!(check(DLQ_TOPIC, "").is_ok(), "none");
        assert!(check(DLQ_TOPIC, "__dlq.orders").is_err());
        assert!(
            check(DLQ_TOPIC, "orders.dead").is_err(),
            "without the prefix"
        );
        assert!(check(DLQ_TOPIC, "dlq.bad/name").is_err());
        assert!(dead_letter_topic_allowed("orders.dead", "").is_ok());
        assert!(check(DLQ_COPY_RECORD, "yes").is_err());
    }

    #[test]
    fn offset_resets_read_kafkas_forms() {
        assert_eq!(Reset::parse("latest"), Ok(Reset::Latest));
        assert_eq!(Reset::parse("earliest"), Ok(Reset::Earliest));
        let d = |s: u64| Ok(Reset::ByDuration(Duration::from_secs(s)));
        assert_eq!(Reset::parse("by_duration:P1D"), d(86_400));
        assert_eq!(Reset::parse("by_duration:PT1H30M"), d(5_400));
        assert_eq!(Reset::parse("by_duration:P2DT3S"), d(172_803));
        assert_eq!(
            Reset::parse("by_duration:PT0.5S"),
            Ok(Reset::ByDuration(Duration::from_millis(500)))
        );
        for bad in [
            "by_duration:",
            "by_duration:P",
            "by_duration:PT",
            "by_duration:1D",
            "by_duration:P1Y",
            "by_duration:PT1X",
            "by_duration:P-1D",
            "none",
        ] {
            assert!(Reset::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn overrides_win_over_the_broker() {
        let cfg = BrokerConfig::default();
        let mut o = BTreeMap::new();
        o.insert("share.delivery.count.limit".to_string(), "3".to_string());
        o.insert(
            "share.auto.offset.reset".to_string(),
            "earliest".to_string(),
        );
        let f = InForce {
            broker: &cfg,
            overrides: Some(&o),
        };
        assert_eq!(f.delivery_limit(), 3);
        assert_eq!(f.auto_offset_reset(), Reset::Earliest);
        assert_eq!(f.lock_duration(), Duration::from_millis(30_000));
        assert!(!f.read_committed());
    }
}
