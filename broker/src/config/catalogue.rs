//! The settings table ([`SETTINGS`], declared in `settings.rs`) as DescribeConfigs and the
//! README read it: a setting by its Kafka name, every value as Kafka shows it, the README's
//! table.
//!
//! Invariants (checked by tests): no two settings share a name; a default shown as a value is
//! the value `Default` gives; the README's settings table is [`readme_table`]'s.

use super::BrokerConfig;

pub use super::settings::{Kind, Setting, SETTINGS};

pub fn by_name(name: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.name == name)
}

/// Every setting's value in `cfg` by key, as DescribeConfigs shows it (`None`: unset).
pub fn values(cfg: &BrokerConfig) -> std::collections::BTreeMap<&'static str, Option<String>> {
    let json = serde_json::to_value(cfg).unwrap_or_default();
    SETTINGS
        .iter()
        .map(|s| {
            let value = match json.get(s.key) {
                Some(serde_json::Value::String(v)) => Some(v.clone()),
                // Unset: show what is in force.
                None | Some(serde_json::Value::Null)
                    if s.key == "group_initial_rebalance_delay_ms" =>
                {
                    Some(cfg.group_initial_rebalance_delay().as_millis().to_string())
                }
                // Unset, the partition logs are in data_dir.
                None | Some(serde_json::Value::Null) if s.key == "log_dirs" => Some(
                    (cfg.log_dirs().iter())
                        .map(|d| d.display().to_string())
                        .collect::<Vec<_>>()
                        .join(","),
                ),
                None | Some(serde_json::Value::Null) => None,
                Some(v) => Some(v.to_string()),
            };
            (s.key, value)
        })
        .collect()
}

/// The README's settings table, rendered from [`SETTINGS`].
pub fn readme_table() -> String {
    let mut t = String::from("| key | Kafka name | default | meaning |\n|---|---|---|---|\n");
    for s in SETTINGS {
        let dynamic = if s.dynamic { " (dynamic)" } else { "" };
        let doc = s.doc.replace('|', "\\|");
        t += &format!(
            "| `{}` | `{}`{dynamic} | {} | {doc}{} |\n",
            s.key,
            s.name,
            s.shown_default,
            s.bounds.shown()
        );
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn every_setting_is_listed_once_under_one_name() {
        let json = serde_json::to_value(BrokerConfig::default()).unwrap();
        let keys: BTreeSet<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        let listed: BTreeSet<&str> = SETTINGS.iter().map(|s| s.key).collect();
        assert_eq!(listed.len(), SETTINGS.len(), "a key listed twice");
        assert_eq!(listed, keys);
        let names: BTreeSet<&str> = SETTINGS.iter().map(|s| s.name).collect();
        assert_eq!(names.len(), SETTINGS.len(), "a name given twice");
    }

    #[test]
    fn a_default_shown_as_a_value_is_the_default() {
        let v = values(&BrokerConfig::default());
        let json = serde_json::to_value(BrokerConfig::default()).unwrap();
        for s in SETTINGS {
            let shown = s.shown_default;
            let Some(value) = shown.strip_prefix('`').and_then(|r| r.strip_suffix('`')) else {
                continue;
            };
            if value.contains('`') || value.contains(' ') {
                continue;
            }
            // Unset settings show what they fall back to (`data_dir`, ...), not a value.
            if json[s.key].is_null() {
                continue;
            }
            if let Some(Some(actual)) = v.get(s.key) {
                assert_eq!(actual, value, "{}: the README shows {shown}", s.key);
            }
        }
    }

    #[test]
    fn bounds_are_checked_and_named() {
        let mut cfg = BrokerConfig {
            quota_window_num: 1,
            ..BrokerConfig::default()
        };
        let err = cfg.validate().unwrap_err().to_string();
        assert!(
            err.contains("quota_window_num = 1: must be at least 2"),
            "{err}"
        );
        cfg.quota_window_num = 2;
        cfg.log_cleaner_min_cleanable_ratio = 1.5;
        let err = cfg.validate().unwrap_err().to_string();
        assert!(err.contains("must be between 0 and 1"), "{err}");
        cfg.log_cleaner_min_cleanable_ratio = 1.0;
        cfg.node_id = 1 << 31;
        let err = cfg.validate().unwrap_err().to_string();
        assert!(
            err.contains("node_id = 2147483648: must be at most 2147483647"),
            "{err}"
        );
    }

    /// The README's table is the one the settings table renders; `STRATA_BLESS=1` rewrites it.
    #[test]
    fn the_readme_lists_every_setting_as_declared() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
        let readme = std::fs::read_to_string(&path).unwrap();
        let start = readme
            .find("| key | Kafka name | default | meaning |")
            .unwrap();
        let end = start + readme[start..].find("\n\n").unwrap() + 1;
        let table = readme_table();
        if readme[start..end] == table {
            return;
        }
        if std::env::var_os("STRATA_BLESS").is_some() {
            let updated = format!("{}{table}{}", &readme[..start], &readme[end..]);
            std::fs::write(&path, updated).unwrap();
            return;
        }
        panic!("README's settings table differs from config/settings.rs: run the test with STRATA_BLESS=1");
    }

    #[test]
    fn values_are_shown_as_kafka_strings() {
        let cfg = BrokerConfig::default();
        let v = values(&cfg);
        assert_eq!(v["log_retention_ms"].as_deref(), Some("604800000"));
        assert_eq!(v["log_cleaner_min_cleanable_ratio"].as_deref(), Some("0.5"));
        assert_eq!(v["auto_create_topics_enable"].as_deref(), Some("true"));
        assert_eq!(v["data_dir"].as_deref(), Some("./strata-data"));
        assert_eq!(v["log_dirs"].as_deref(), Some("./strata-data"));
        assert_eq!(v["rack"], None);
        assert_eq!(
            v["group_initial_rebalance_delay_ms"].as_deref(),
            Some("3000")
        );
    }
}
