//! Dynamic broker configs (Kafka's KIP-226, kept in the metadata quorum as KRaft keeps them):
//! the settings of the file, the environment and the flags, overlaid with what
//! IncrementalAlterConfigs stored — the cluster-wide defaults (resource `""`), then this
//! broker's own (resource `"<id>"`), each winning over what comes before, as in Kafka.
//!
//! Invariants:
//! - Only settings the catalogue marks dynamic are stored: [`check`] refuses the others, and
//!   every value it accepts makes settings the broker would start with.
//! - A stored value is applied only if the settings it makes are still accepted; one that no
//!   longer fits (the file changed since) is skipped with a warning, never half-applied.
//! - [`DynamicConfig::current`] recomputes only when the stored configs changed (an `Arc`
//!   pointer comparison); otherwise it costs a lock and a reference count.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use strata_metadata::ClusterState;

use crate::config::catalogue::{self, Setting};
use crate::config::BrokerConfig;
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
                Ok(next) => cfg = next,
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
        cfg = apply(&cfg, name, value)?;
    }
    Ok(())
}

/// The dynamic setting named `name` (a Kafka name), or why it cannot change at run time.
pub fn setting(name: &str) -> Result<&'static Setting, String> {
    match catalogue::by_name(name) {
        None => Err(format!("unknown broker config '{name}'")),
        Some(s) if !s.dynamic => Err(format!(
            "'{name}' cannot change while the broker runs; set it in the config file"
        )),
        Some(s) => Ok(s),
    }
}

/// `cfg` with the dynamic setting `name` at `value`, checked as the topic key it is the
/// default of would be, then as at start.
fn apply(cfg: &BrokerConfig, name: &str, value: &str) -> Result<BrokerConfig, String> {
    let s = setting(name)?;
    let topic_key =
        (topic_config::KEYS.iter()).find(|k| topic_config::broker_setting(k.name) == Some(s.key));
    if let Some(k) = topic_key {
        topic_config::validate(k.name, value).map_err(|why| why.replace(k.name, name))?;
    }
    cfg.overlay([(s.key, value)])
        .map_err(|e| format!("invalid value '{value}' for {name}: {e}"))
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
        let err = ok(&[("no.such.config", "1")]).unwrap_err();
        assert!(err.contains("unknown broker config"), "{err}");
        let err = ok(&[("log.retention.ms", "-5")]).unwrap_err();
        assert!(err.contains("log.retention.ms"), "{err}");
        let err = ok(&[("compression.type", "brotli")]).unwrap_err();
        assert!(err.contains("brotli"), "{err}");
        let err = ok(&[("compression.zstd.level", "99")]).unwrap_err();
        assert!(err.contains("compression.zstd.level"), "{err}");
        let err = ok(&[("log.cleaner.io.max.bytes.per.second", "fast")]).unwrap_err();
        assert!(err.contains("fast"), "{err}");
    }
}
