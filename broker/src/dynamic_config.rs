//! Dynamic broker configs (Kafka's KIP-226, kept in the metadata quorum as KRaft keeps them):
//! the settings of the file, the environment and the flags, overlaid with what
//! IncrementalAlterConfigs stored — the cluster-wide defaults (resource `""`), then this
//! broker's own (resource `"<id>"`), each winning over what comes before, as in Kafka.
//!
//! A name is one of [`Name`]: a Strata setting the catalogue marks dynamic; Kafka's hours or
//! minutes synonym of one kept in milliseconds (the milliseconds name of the same layer wins,
//! as in Kafka); or an inert name, stored and described with no effect — one of Kafka's
//! dynamic configs Strata has no use for ([`kafka_broker_configs::INERT_DYNAMIC`], its value
//! type-checked as Kafka checks it) or a name Kafka does not know either (a plugin's config,
//! which Kafka stores too). Static settings, Strata's or Kafka's, are refused.
//!
//! Invariants:
//! - Only dynamic and inert names are stored: [`check`] refuses the others, and every value
//!   it accepts makes settings the broker would start with.
//! - A stored value is applied only if the settings it makes are still accepted; one that no
//!   longer fits (the file changed since) is skipped with a warning, never half-applied.
//! - [`DynamicConfig::current`] recomputes only when the stored configs changed (an `Arc`
//!   pointer comparison); otherwise it costs a lock and a reference count.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use strata_metadata::ClusterState;

use crate::config::catalogue::{self, Kind, Setting};
use crate::config::{kafka_broker_configs, BrokerConfig};
use crate::topic_config;

type Stored = Arc<BTreeMap<String, BTreeMap<String, String>>>;

pub struct DynamicConfig {
    base: Arc<BrokerConfig>,
    /// This broker's resource name: its id.
    resource: String,
    /// The stored configs last layered, and the settings they made.
    cached: Mutex<Option<(Stored, Arc<BrokerConfig>)>>,
}

impl DynamicConfig {
    pub fn new(base: BrokerConfig) -> DynamicConfig {
        DynamicConfig {
            resource: base.node_id.to_string(),
            base: Arc::new(base),
            cached: Mutex::new(None),
        }
    }

    /// The settings in force with `state`'s dynamic configs.
    pub fn current(&self, state: &ClusterState) -> Arc<BrokerConfig> {
        let stored = &state.broker_configs;
        let mut cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((seen, cfg)) = &*cached {
            if Arc::ptr_eq(seen, stored) {
                return cfg.clone();
            }
        }
        let layers = [stored.get(""), stored.get(&self.resource)];
        let cfg = if layers.iter().all(Option::is_none) {
            self.base.clone()
        } else {
            Arc::new(self.layered(layers.into_iter().flatten()))
        };
        *cached = Some((stored.clone(), cfg.clone()));
        cfg
    }

    fn layered<'a>(
        &self,
        layers: impl Iterator<Item = &'a BTreeMap<String, String>>,
    ) -> BrokerConfig {
        let mut cfg = (*self.base).clone();
        for (name, value) in layers.flatten() {
            match apply(&cfg, name, value) {
                Ok(Some(next)) => cfg = next,
                Ok(None) => {}
                Err(why) => tracing::warn!(
                    config = %name,
                    %value,
                    %why,
                    "a stored dynamic broker config is not applied"
                ),
            }
        }
        cfg
    }
}

/// Checks the dynamic configs `cluster` (cluster-wide) and `own` (this broker's) together
/// over the static settings `base`, as they would be stored: every name a dynamic setting,
/// every value one the broker accepts. The message is returned to the client.
pub fn check(
    base: &BrokerConfig,
    cluster: &BTreeMap<String, String>,
    own: &BTreeMap<String, String>,
) -> Result<(), String> {
    let mut cfg = base.clone();
    for (name, value) in cluster.iter().chain(own) {
        if let Some(next) = apply(&cfg, name, value)? {
            cfg = next;
        }
    }
    Ok(())
}

/// What a config name set on a broker resource is.
pub enum Name {
    /// A Strata setting that may change while the broker runs.
    Setting(&'static Setting),
    /// Kafka's name for a Strata setting in another unit: the value times `unit_ms`.
    Synonym {
        setting: &'static Setting,
        unit_ms: i64,
    },
    /// Read by the controller from the cluster-wide resource alone (Kafka's
    /// `unclean.leader.election.enable`, the default of topics without their own), stored and
    /// described like an inert name.
    Controller(Kind),
    /// Stored and described, no effect: one of Kafka's dynamic configs (with its type) or a
    /// name Kafka does not know either.
    Inert(Option<Kind>),
}

const UNCLEAN: &str = "unclean.leader.election.enable";

impl Name {
    /// The value type, as DescribeConfigs reports it and APPEND/SUBTRACT need it.
    pub fn kind(&self) -> Option<Kind> {
        match self {
            Name::Setting(s) => Some(s.kind),
            Name::Synonym { .. } => Some(Kind::Int),
            Name::Controller(kind) => Some(*kind),
            Name::Inert(kind) => *kind,
        }
    }

    /// Stored for others to read, with no effect on this broker's settings.
    pub fn stored_only(&self) -> bool {
        matches!(self, Name::Controller(_) | Name::Inert(_))
    }

    /// What DescribeConfigs says of a name stored only.
    pub fn doc(&self) -> &'static str {
        match self {
            Name::Controller(_) => "Default unclean.leader.election.enable of topics, read by the controller from the cluster-wide value.",
            _ => "A Kafka broker config with no effect in Strata: stored and described as set.",
        }
    }
}

/// Kafka's synonyms of Strata's milliseconds settings, and their units.
const SYNONYMS: &[(&str, &str, i64)] = &[
    ("log.retention.hours", "log.retention.ms", 3_600_000),
    ("log.retention.minutes", "log.retention.ms", 60_000),
    ("log.roll.hours", "log.roll.ms", 3_600_000),
];

/// Kafka's names for the setting named `name` in other units.
pub fn synonyms_of(name: &str) -> impl Iterator<Item = &'static str> + '_ {
    (SYNONYMS.iter())
        .filter(move |(_, of, _)| *of == name)
        .map(|(synonym, _, _)| *synonym)
}

/// The setting a synonym in another unit stands for.
pub fn synonym_setting(name: &str) -> Option<&'static Setting> {
    let (_, of, _) = SYNONYMS.iter().find(|(n, _, _)| *n == name)?;
    catalogue::by_name(of)
}

/// What `name` (a Kafka name) is on a broker resource, or why it cannot change at run time.
pub fn name(name: &str) -> Result<Name, String> {
    if let Some(s) = catalogue::by_name(name) {
        return match s.dynamic {
            true => Ok(Name::Setting(s)),
            false => Err(format!(
                "'{name}' cannot change while the broker runs; set it in the config file"
            )),
        };
    }
    if let Some((_, ms, unit_ms)) = SYNONYMS.iter().find(|(n, _, _)| *n == name) {
        let setting = catalogue::by_name(ms).expect("a synonym names a catalogued setting");
        return Ok(Name::Synonym {
            setting,
            unit_ms: *unit_ms,
        });
    }
    if name == UNCLEAN {
        return Ok(Name::Controller(Kind::Bool));
    }
    if let Some((_, kind)) = (kafka_broker_configs::INERT_DYNAMIC.iter()).find(|(n, _)| *n == name)
    {
        return Ok(Name::Inert(Some(*kind)));
    }
    if kafka_broker_configs::STATIC.contains(&name) {
        return Err(format!(
            "'{name}' cannot be updated dynamically (a Kafka config Strata has no use for)"
        ));
    }
    Ok(Name::Inert(None))
}

/// `cfg` with `name` at `value` (`None`: an inert name, nothing changes), checked as the
/// topic key its setting is the default of would be, then as at start.
fn apply(cfg: &BrokerConfig, name: &str, value: &str) -> Result<Option<BrokerConfig>, String> {
    let (s, value) = match self::name(name)? {
        Name::Setting(s) => (s, value.to_string()),
        Name::Synonym { setting, unit_ms } => {
            let n: i64 = (value.trim().parse())
                .map_err(|_| format!("invalid value '{value}' for {name}: not a number"))?;
            // Kafka: any negative retention in hours or minutes means unlimited.
            let ms = if n < 0 { -1 } else { n.saturating_mul(unit_ms) };
            (setting, ms.to_string())
        }
        Name::Controller(kind) => {
            check_type(Some(kind), value)
                .map_err(|why| format!("invalid value '{value}' for {name}: {why}"))?;
            return Ok(None);
        }
        Name::Inert(kind) => {
            check_type(kind, value)
                .map_err(|why| format!("invalid value '{value}' for {name}: {why}"))?;
            return Ok(None);
        }
    };
    let topic_key =
        (topic_config::KEYS.iter()).find(|k| topic_config::broker_setting(k.name) == Some(s.key));
    if let Some(k) = topic_key {
        topic_config::validate(k.name, &value).map_err(|why| why.replace(k.name, name))?;
    }
    cfg.overlay([(s.key, value.as_str())])
        .map(Some)
        .map_err(|e| format!("invalid value '{value}' for {name}: {e}"))
}

/// Checks a value of an inert name against its type, as Kafka's `ConfigDef` parses it.
fn check_type(kind: Option<Kind>, value: &str) -> Result<(), &'static str> {
    let v = value.trim();
    let ok = match kind {
        Some(Kind::Bool) => v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("false"),
        Some(Kind::Int) => v.parse::<i32>().is_ok(),
        Some(Kind::Short) => v.parse::<i16>().is_ok(),
        Some(Kind::Long) => v.parse::<i64>().is_ok(),
        Some(Kind::Double) => v.parse::<f64>().is_ok(),
        Some(Kind::Str | Kind::List | Kind::Password) | None => true,
    };
    match (ok, kind) {
        (true, _) => Ok(()),
        (false, Some(Kind::Bool)) => Err("not true or false"),
        (false, _) => Err("not a number of its type"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        (pairs.iter())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn own_configs_win_over_cluster_wide_ones_which_win_over_the_file() {
        let base = BrokerConfig {
            log_retention_ms: 1000,
            log_retention_bytes: 5000,
            ..BrokerConfig::default()
        };
        let dynamic = DynamicConfig::new(base);
        let mut state = ClusterState::default();
        assert_eq!(dynamic.current(&state).log_retention_ms, 1000);
        let mut stored = BTreeMap::new();
        stored.insert(
            String::new(),
            map(&[("log.retention.ms", "2000"), ("message.max.bytes", "7000")]),
        );
        stored.insert("1".into(), map(&[("log.retention.ms", "3000")]));
        stored.insert("2".into(), map(&[("log.retention.ms", "4000")]));
        state.broker_configs = Arc::new(stored);
        let cfg = dynamic.current(&state);
        assert_eq!(cfg.log_retention_ms, 3000, "broker 1's own");
        assert_eq!(cfg.message_max_bytes, 7000, "cluster-wide");
        assert_eq!(cfg.log_retention_bytes, 5000, "the file's");
        assert!(Arc::ptr_eq(&cfg, &dynamic.current(&state)), "cached");
    }

    #[test]
    fn a_stored_value_that_no_longer_fits_is_skipped() {
        let dynamic = DynamicConfig::new(BrokerConfig::default());
        let mut state = ClusterState::default();
        let stored = map(&[("log.retention.ms", "soon"), ("log.retention.bytes", "10")]);
        state.broker_configs = Arc::new(BTreeMap::from([(String::new(), stored)]));
        let cfg = dynamic.current(&state);
        assert_eq!(
            cfg.log_retention_ms,
            BrokerConfig::default().log_retention_ms
        );
        assert_eq!(cfg.log_retention_bytes, 10);
    }

    #[test]
    fn only_dynamic_settings_with_good_values_pass() {
        let base = BrokerConfig::default();
        let none = BTreeMap::new();
        let ok = |pairs: &[(&str, &str)]| check(&base, &map(pairs), &none);
        assert!(ok(&[
            ("log.retention.ms", "60000"),
            ("log.cleanup.policy", "compact")
        ])
        .is_ok());
        assert!(ok(&[("replica.move.max.bytes.per.second", "1048576")]).is_ok());
        let err = ok(&[("num.partitions", "3")]).unwrap_err();
        assert!(err.contains("cannot change while the broker runs"), "{err}");
        let err = ok(&[("broker.id", "3")]).unwrap_err();
        assert!(err.contains("cannot be updated dynamically"), "{err}");
        let err = ok(&[("log.retention.ms", "-5")]).unwrap_err();
        assert!(err.contains("log.retention.ms"), "{err}");
        let err = ok(&[("compression.type", "brotli")]).unwrap_err();
        assert!(err.contains("brotli"), "{err}");
        let err = ok(&[("compression.zstd.level", "99")]).unwrap_err();
        assert!(err.contains("compression.zstd.level"), "{err}");
        let err = ok(&[("log.cleaner.io.max.bytes.per.second", "fast")]).unwrap_err();
        assert!(err.contains("fast"), "{err}");
    }

    #[test]
    fn kafka_configs_without_a_setting_are_stored_type_checked_and_change_nothing() {
        let base = BrokerConfig::default();
        let none = BTreeMap::new();
        let ok = |pairs: &[(&str, &str)]| check(&base, &map(pairs), &none);
        for good in [
            ("num.io.threads", "16"),
            ("log.cleaner.threads", "2"),
            ("log.preallocate", "TRUE"),
            ("metric.reporters", "a.B,c.D"),
            ("unclean.leader.election.enable", "true"),
            ("my.plugin.setting", "anything"),
            ("listener.name.internal.ssl.keystore.location", "/k"),
        ] {
            assert!(ok(&[good]).is_ok(), "{good:?}");
        }
        for (bad, why) in [
            (("num.io.threads", "many"), "not a number"),
            (("log.preallocate", "yes"), "not true or false"),
            (("unclean.leader.election.enable", "1"), "not true or false"),
            (("log.retention.hours", "soon"), "not a number"),
        ] {
            let err = ok(&[bad]).unwrap_err();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
        let dynamic = DynamicConfig::new(base.clone());
        let mut state = ClusterState::default();
        let stored = map(&[("num.io.threads", "16"), ("my.plugin.setting", "x")]);
        state.broker_configs = Arc::new(BTreeMap::from([(String::new(), stored)]));
        assert!(Arc::ptr_eq(
            &dynamic.current(&state),
            &dynamic.current(&state)
        ));
        assert_eq!(
            catalogue::values(&dynamic.current(&state)),
            catalogue::values(&base),
            "inert names change no setting"
        );
    }

    #[test]
    fn hours_and_minutes_are_synonyms_the_milliseconds_of_the_same_layer_beat() {
        let dynamic = DynamicConfig::new(BrokerConfig::default());
        let mut state = ClusterState::default();
        let layer =
            |pairs: &[(&str, &str)]| Arc::new(BTreeMap::from([(String::new(), map(pairs))]));
        state.broker_configs = layer(&[("log.retention.hours", "2")]);
        assert_eq!(dynamic.current(&state).log_retention_ms, 7_200_000);
        state.broker_configs =
            layer(&[("log.retention.hours", "2"), ("log.retention.minutes", "3")]);
        assert_eq!(dynamic.current(&state).log_retention_ms, 180_000);
        state.broker_configs =
            layer(&[("log.retention.minutes", "3"), ("log.retention.ms", "5000")]);
        assert_eq!(dynamic.current(&state).log_retention_ms, 5000);
        state.broker_configs = layer(&[("log.retention.hours", "-7")]);
        assert_eq!(
            dynamic.current(&state).log_retention_ms,
            -1,
            "negative: forever"
        );
        state.broker_configs = layer(&[("log.roll.hours", "1")]);
        assert_eq!(dynamic.current(&state).log_segment_ms, 3_600_000);
    }
}
