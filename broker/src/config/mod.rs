//! Broker settings: plain data with defaults, read from a TOML file, then `STRATA_*`
//! environment variables, then command-line flags (each overriding the one before).
//!
//! Keys are flat (`log_segment_bytes`, not `[log] segment_bytes`) so that every key has exactly
//! one environment variable: `STRATA_` + the key in upper case.

pub mod catalogue;
mod error;
pub mod kafka_broker_configs;
pub mod listeners;
mod settings;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use error::ConfigError;
pub use settings::BrokerConfig;

/// An optional number from the file (a number) or a `STRATA_*` variable (the loader takes an
/// optional key's value as a string: it cannot tell an optional number from an optional name).
fn number_or_numeric_string<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Number(u64),
        Text(String),
    }
    match Option::<Raw>::deserialize(d)? {
        None => Ok(None),
        Some(Raw::Number(n)) => Ok(Some(n)),
        Some(Raw::Text(t)) => t
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| serde::de::Error::custom(format!("'{t}' is not a whole number"))),
    }
}

/// Keys whose default is "unset" (absent from the defaults' TOML table).
fn optional_keys() -> Vec<String> {
    match serde_json::to_value(BrokerConfig::default()) {
        Ok(serde_json::Value::Object(map)) => (map.into_iter())
            .filter(|(_, v)| v.is_null())
            .map(|(k, _)| k)
            .collect(),
        _ => Vec::new(),
    }
}

/// A setting's value given as text, typed as the setting's default is (`known`: the
/// defaults' table). An optional key is always a string (an address, a path, a name).
/// `None`: no such key; `Err`: the text is not a value of the key's type.
fn typed_value(
    known: &toml::Table,
    key: &str,
    value: String,
) -> Option<Result<toml::Value, String>> {
    let is_string = match known.get(key) {
        Some(v) => v.is_str(),
        None if optional_keys().iter().any(|k| k == key) => true,
        None => return None,
    };
    Some(if is_string {
        Ok(toml::Value::String(value))
    } else {
        format!("v = {value}")
            .parse::<toml::Table>()
            .ok()
            .and_then(|mut t| t.remove("v"))
            .ok_or(value)
    })
}

/// `STRATA_*` variables that are not broker settings: read by the CLI (`strata topic …`),
/// by logging, or by the project's own scripts and tests, which pass them to the brokers they
/// start.
const NOT_SETTINGS: &[&str] = &[
    "STRATA_LOG",
    "STRATA_BOOTSTRAP",
    "STRATA_USER_PASSWORD",
    "STRATA_ADMIN_SSL_CERTIFICATE_LOCATION",
    "STRATA_ADMIN_SSL_KEY_LOCATION",
    "STRATA_ADMIN_SSL_CA_LOCATION",
    "STRATA_BIN",
    "STRATA_FUZZ_CORPUS",
    "STRATA_MOTO_SERVER",
    "STRATA_VENV",
    "STRATA_VENV_PYTHON",
];

/// The variable of the setting nearest to `key` (the part after `STRATA_`), if one is close
/// enough to be the one meant.
fn nearest_variable<'a>(keys: impl Iterator<Item = &'a str>, key: &str) -> Option<String> {
    let (distance, nearest) = keys.map(|k| (strsim::levenshtein(key, k), k)).min()?;
    (distance <= 2.max(key.len() / 5)).then(|| format!("STRATA_{}", nearest.to_ascii_uppercase()))
}

/// `host:port` with a host (a name or an address) and a port number.
fn is_host_port(addr: &str) -> bool {
    addr.rsplit_once(':')
        .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
}

impl BrokerConfig {
    /// File (if any) then `STRATA_*` variables from `env`. Flags are applied by the caller.
    pub fn load(
        file: Option<&Path>,
        env: impl Iterator<Item = (String, String)>,
    ) -> Result<BrokerConfig, ConfigError> {
        let mut table = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_path_buf(),
                    source,
                })?;
                text.parse::<toml::Table>()
                    .map_err(|e| ConfigError::Invalid(format!("{}: {e}", path.display())))?
            }
            None => toml::Table::new(),
        };
        let known = toml::Table::try_from(BrokerConfig::default())
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        let optional = optional_keys();
        let mut unknown_env = Vec::new();
        for (name, value) in env {
            let Some(key) = name.strip_prefix("STRATA_") else {
                continue;
            };
            let lower = key.to_ascii_lowercase();
            if !known.contains_key(&lower)
                && !optional.contains(&lower)
                && !NOT_SETTINGS.contains(&name.as_str())
            {
                let near = known.keys().chain(&optional).map(String::as_str);
                unknown_env.push((name.clone(), nearest_variable(near, &lower)));
            }
            let key = key.to_ascii_lowercase();
            // Empty unsets an optional key: how a container overrides an image's default
            // (the image advertises 127.0.0.1:9092; compose and Kubernetes use listeners).
            if value.is_empty() && !known.contains_key(&key) && optional.contains(&key) {
                table.remove(&key);
                continue;
            }
            match typed_value(&known, &key, value) {
                Some(Ok(parsed)) => table.insert(key, parsed),
                Some(Err(value)) => {
                    return Err(ConfigError::Invalid(format!("{name}={value}: not a value")))
                }
                None => continue,
            };
        }
        let static_keys = table.keys().cloned().collect();
        let mut cfg: BrokerConfig = table
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Invalid(e.to_string()))?;
        cfg.static_keys = static_keys;
        cfg.unknown_env = unknown_env;
        cfg.validate()?;
        Ok(cfg)
    }

    /// These settings with `changes` (key → value as text, as an environment variable gives
    /// it) applied and the result checked as at start: how dynamic configs are layered.
    pub fn overlay<'a>(
        &self,
        changes: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<BrokerConfig, ConfigError> {
        let mut table =
            toml::Table::try_from(self).map_err(|e| ConfigError::Invalid(e.to_string()))?;
        let known = toml::Table::try_from(BrokerConfig::default())
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        for (key, value) in changes {
            match typed_value(&known, key, value.to_string()) {
                Some(Ok(parsed)) => table.insert(key.to_string(), parsed),
                Some(Err(value)) => {
                    return Err(ConfigError::Invalid(format!("{key}={value}: not a value")))
                }
                None => return Err(ConfigError::Invalid(format!("unknown setting '{key}'"))),
            };
        }
        let mut cfg: BrokerConfig = table
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Invalid(e.to_string()))?;
        cfg.static_keys = self.static_keys.clone();
        cfg.validate()?;
        Ok(cfg)
    }

    /// The directories partition logs live in: `log_dirs`, else `data_dir`.
    pub fn log_dirs(&self) -> Vec<PathBuf> {
        match &self.log_dirs {
            Some(dirs) => (dirs.split(',').map(str::trim))
                .filter(|d| !d.is_empty())
                .map(PathBuf::from)
                .collect(),
            None => vec![self.data_dir.clone()],
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check_bounds()?;
        if self.group_consumer_heartbeat_interval_ms >= self.group_consumer_session_timeout_ms {
            return Err(ConfigError::Invalid(
                "group_consumer_heartbeat_interval_ms must be below group_consumer_session_timeout_ms".into(),
            ));
        }
        let dirs = self.log_dirs();
        if dirs.is_empty() {
            return Err(ConfigError::Invalid(
                "log_dirs names no directory (unset it to use data_dir)".into(),
            ));
        }
        for (i, a) in dirs.iter().enumerate() {
            if let Some(b) = dirs[..i]
                .iter()
                .find(|b| b.starts_with(a) || a.starts_with(b))
            {
                return Err(ConfigError::Invalid(format!(
                    "log_dirs: {} and {} overlap; each log directory must be its own",
                    b.display(),
                    a.display()
                )));
            }
        }
        self.voter_map()?;
        Selector::from_config(self.replica_selector_class.as_deref())
            .map_err(ConfigError::Invalid)?;
        let (listeners, inter_broker) = self.listeners()?;
        // Replica fetches, transaction markers and KIP-890 checks go out on the inter-broker
        // listener: refuse at start what would make them fail later.
        let protocol = (listeners.iter())
            .find(|l| l.name == inter_broker)
            .map(|l| l.protocol);
        if protocol.is_some_and(|p| p.sasl())
            && (self.inter_broker_sasl_username.is_none()
                || self.inter_broker_sasl_password.is_none())
        {
            return Err(ConfigError::Invalid(format!(
                "inter_broker_listener_name {inter_broker} is a SASL listener: set inter_broker_sasl_username and inter_broker_sasl_password (a user every broker knows)"
            )));
        }
        if self.admin_tls()?
            && (self.ssl_certificate_location.is_none() || self.ssl_key_location.is_none())
        {
            return Err(ConfigError::Invalid(
                "admin_security_protocol = SSL needs ssl_certificate_location and ssl_key_location"
                    .into(),
            ));
        }
        use crate::log::compression::{check_level, Codec};
        Codec::parse(&self.compression_type).map_err(|why| {
            ConfigError::Invalid(format!(
                "compression_type '{}': {why}",
                self.compression_type
            ))
        })?;
        for (codec, key, level) in [
            (
                Codec::Gzip,
                "compression_gzip_level",
                self.compression_gzip_level,
            ),
            (
                Codec::Lz4,
                "compression_lz4_level",
                self.compression_lz4_level,
            ),
            (
                Codec::Zstd,
                "compression_zstd_level",
                self.compression_zstd_level,
            ),
        ] {
            check_level(codec, level.into())
                .map_err(|why| ConfigError::Invalid(format!("{key} = {level}: {why}")))?;
        }
        if !["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
            .contains(&self.sasl_mechanism_inter_broker_protocol.as_str())
        {
            return Err(ConfigError::Invalid(
                "sasl_mechanism_inter_broker_protocol must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512".into(),
            ));
        }
        let raft_tls = match self.raft_security_protocol.as_str() {
            "PLAINTEXT" => false,
            "SSL" => true,
            other => {
                return Err(ConfigError::Invalid(format!(
                    "raft_security_protocol {other}: PLAINTEXT or SSL"
                )))
            }
        };
        if (raft_tls || protocol.is_some_and(|p| p.tls())) && self.ssl_ca_location.is_none() {
            return Err(ConfigError::Invalid(
                "brokers speaking TLS to each other (a TLS inter-broker listener, raft_security_protocol = SSL) verify each other against ssl_ca_location: set it".into(),
            ));
        }
        if raft_tls && (self.ssl_certificate_location.is_none() || self.ssl_key_location.is_none())
        {
            return Err(ConfigError::Invalid(
                "raft_security_protocol = SSL needs ssl_certificate_location and ssl_key_location"
                    .into(),
            ));
        }
        self.ssl_min_version()?;
        if listeners.iter().any(|l| l.protocol.tls())
            && (self.ssl_certificate_location.is_none() || self.ssl_key_location.is_none())
        {
            return Err(ConfigError::Invalid(
                "a TLS listener (SSL, SASL_SSL) needs ssl_certificate_location and ssl_key_location".into(),
            ));
        }
        if !["none", "requested", "required"].contains(&self.ssl_client_auth.as_str()) {
            return Err(ConfigError::Invalid(
                "ssl_client_auth must be none, requested or required".into(),
            ));
        }
        if self.ssl_client_auth != "none" && self.ssl_ca_location.is_none() {
            return Err(ConfigError::Invalid(
                "ssl_client_auth needs ssl_ca_location (the CA that signs client certificates)"
                    .into(),
            ));
        }
        if self.group_share_heartbeat_interval_ms >= self.group_share_session_timeout_ms {
            return Err(ConfigError::Invalid(
                "group_share_heartbeat_interval_ms must be below group_share_session_timeout_ms"
                    .into(),
            ));
        }
        if self.broker_heartbeat_interval_ms * 2 > self.broker_session_timeout_ms {
            return Err(ConfigError::Invalid(
                "broker_heartbeat_interval_ms must be at most half of broker_session_timeout_ms"
                    .into(),
            ));
        }
        if self.queued_max_request_bytes < self.max_request_bytes as u64 {
            return Err(ConfigError::Invalid(
                "queued_max_request_bytes must be at least max_request_bytes (a largest request must fit)".into(),
            ));
        }
        if self.num_partitions > self.max_partitions_per_topic {
            return Err(ConfigError::Invalid(
                "num_partitions must be at most max_partitions_per_topic".into(),
            ));
        }
        if self.lag_window_ms < self.lag_sample_interval_ms {
            return Err(ConfigError::Invalid(
                "lag_window_ms must be ≥ lag_sample_interval_ms (a trend needs two samples)".into(),
            ));
        }
        if !["CreateTime", "LogAppendTime"].contains(&self.log_message_timestamp_type.as_str()) {
            return Err(ConfigError::Invalid(
                "log_message_timestamp_type must be CreateTime or LogAppendTime".into(),
            ));
        }
        if crate::log::config::cleanup_policy(&self.log_cleanup_policy).is_none() {
            return Err(ConfigError::Invalid(
                "log_cleanup_policy must be delete, compact or compact,delete".into(),
            ));
        }
        Ok(())
    }

    /// Each numeric setting within the bounds its entry in the settings table gives.
    fn check_bounds(&self) -> Result<(), ConfigError> {
        let json = serde_json::to_value(self).unwrap_or_default();
        for s in catalogue::SETTINGS {
            let Some(value) = json.get(s.key).and_then(|v| v.as_f64()) else {
                continue;
            };
            if let Some(why) = s.bounds.check(value) {
                return Err(ConfigError::Invalid(format!("{} = {value}: {why}", s.key)));
            }
        }
        Ok(())
    }

    /// The raft address this node gives when it joins as a learner; `None`: the address it
    /// binds (known once bound, for port 0), or its `voters` entry when it is a voter.
    pub fn advertised_raft(&self) -> Result<Option<String>, ConfigError> {
        let voters = self.voter_map()?;
        let bad = |why: String| ConfigError::Invalid(format!("advertised_raft_addr: {why}"));
        match &self.advertised_raft_addr {
            // One template for every node (a StatefulSet): a voter may name itself as its
            // voters entry does, and is reached there either way.
            Some(addr) if voters.get(&self.node_id).is_some_and(|v| v != addr) => {
                Err(bad(format!(
                    "'{addr}' differs from node {}'s voters entry {}, where the quorum reaches it",
                    self.node_id, voters[&self.node_id]
                )))
            }
            Some(addr) if is_host_port(addr) => Ok(Some(addr.clone())),
            Some(addr) => Err(bad(format!("'{addr}' is not host:port"))),
            None if !voters.contains_key(&self.node_id) && self.raft_addr.ip().is_unspecified() => {
                Err(bad(format!(
                    "raft_addr {} binds every interface, which the voters cannot call back: set \
                     advertised_raft_addr to this node's name or address",
                    self.raft_addr
                )))
            }
            None => Ok(None),
        }
    }

    /// `group_initial_rebalance_delay_ms` as set, else Kafka's default of 3 s, on a node
    /// alone as in a cluster: clients and their test suites expect members starting together
    /// (static ones, cooperative ones) to form one generation. (Kafka's quick-start
    /// `server.properties` sets 0; an operator may too, trading that for a first consumer
    /// assigned at once.)
    pub fn group_initial_rebalance_delay(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.group_initial_rebalance_delay_ms.unwrap_or(3000))
    }

    /// The metadata voters by node id: `voters` parsed, or this node alone on `raft_addr`.
    pub fn voter_map(&self) -> Result<BTreeMap<u64, String>, ConfigError> {
        let Some(spec) = &self.voters else {
            return Ok(BTreeMap::from([(self.node_id, self.raft_addr.to_string())]));
        };
        let bad = |why: String| {
            ConfigError::Invalid(format!(
                "voters '{spec}': {why} (expected id@host:port,id@host:port,...)"
            ))
        };
        let mut voters = BTreeMap::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (id, addr) = part
                .split_once('@')
                .ok_or_else(|| bad(format!("'{part}' has no '@'")))?;
            let id: u64 = id
                .parse()
                .map_err(|_| bad(format!("'{id}' is not a node id")))?;
            if !is_host_port(addr) {
                return Err(bad(format!("'{addr}' is not host:port")));
            }
            if voters.insert(id, addr.to_string()).is_some() {
                return Err(bad(format!("node {id} is listed twice")));
            }
        }
        if voters.is_empty() {
            return Err(bad("no voters".to_string()));
        }
        if voters.len() % 2 == 0 {
            return Err(bad(format!(
                "{} voters: use an odd number (1, 3 or 5); an even one tolerates no more failures than one fewer",
                voters.len()
            )));
        }
        Ok(voters)
    }

    /// The object store settings, with the single-node default under the data dir.
    pub fn object_store_config(&self) -> Result<strata_objstore::StoreConfig, ConfigError> {
        let url = match &self.object_store {
            Some(url) => url.clone(),
            None => {
                let dir = std::path::absolute(self.data_dir.join("objects")).map_err(|e| {
                    ConfigError::Invalid(format!("data_dir {}: {e}", self.data_dir.display()))
                })?;
                format!("file://{}", dir.display())
            }
        };
        Ok(strata_objstore::StoreConfig {
            endpoint: self.object_store_endpoint.clone(),
            region: self.object_store_region.clone(),
            access_key_id: self.object_store_access_key_id.clone(),
            secret_access_key: self.object_store_secret_access_key.clone(),
            allow_http: self.object_store_allow_http,
            virtual_hosted_style: self.object_store_virtual_hosted_style,
            request_timeout: std::time::Duration::from_millis(self.object_store_request_timeout_ms),
            max_retries: self.object_store_max_retries,
            retry_timeout: std::time::Duration::from_millis(self.object_store_retry_timeout_ms),
            ..strata_objstore::StoreConfig::new(url)
        })
    }

    /// The Kafka listeners and the inter-broker one's name: `listeners` when set, else one
    /// PLAINTEXT listener on `kafka_addr` advertised as `advertised_kafka_addr`.
    pub fn listeners(&self) -> Result<(Vec<listeners::Listener>, String), ConfigError> {
        let Some(spec) = &self.listeners else {
            if self.advertised_listeners.is_some() || self.inter_broker_listener_name.is_some() {
                return Err(ConfigError::Invalid(
                    "advertised_listeners and inter_broker_listener_name need listeners".into(),
                ));
            }
            let listener = listeners::Listener {
                name: "PLAINTEXT".into(),
                protocol: listeners::SecurityProtocol::Plaintext,
                bind: self.kafka_addr,
                advertised: self
                    .advertised_kafka_addr
                    .map(|a| (a.ip().to_string(), a.port())),
            };
            return Ok((vec![listener], "PLAINTEXT".into()));
        };
        if self.advertised_kafka_addr.is_some() {
            return Err(ConfigError::Invalid(
                "advertised_kafka_addr goes with kafka_addr: with listeners, use advertised_listeners".into(),
            ));
        }
        listeners::parse(&listeners::Spec {
            listeners: spec,
            advertised: self.advertised_listeners.as_deref(),
            protocol_map: self.listener_security_protocol_map.as_deref(),
            inter_broker: self.inter_broker_listener_name.as_deref(),
        })
    }

    /// The oldest TLS version of `ssl_enabled_protocols`: 2 (TLS 1.2) or 3 (TLS 1.3).
    /// Whether the admin HTTP port speaks TLS (`admin_security_protocol`).
    pub fn admin_tls(&self) -> Result<bool, ConfigError> {
        match self.admin_security_protocol.as_str() {
            "PLAINTEXT" => Ok(false),
            "SSL" => Ok(true),
            other => Err(ConfigError::Invalid(format!(
                "admin_security_protocol {other}: PLAINTEXT or SSL"
            ))),
        }
    }

    pub fn ssl_min_version(&self) -> Result<u8, ConfigError> {
        let mut min = None;
        for p in self.ssl_enabled_protocols.split(',').map(str::trim) {
            let v = match p {
                "TLSv1.2" => 2,
                "TLSv1.3" => 3,
                "" => continue,
                other => {
                    return Err(ConfigError::Invalid(format!(
                        "ssl_enabled_protocols: {other} is not TLSv1.2 or TLSv1.3 (older versions are not spoken)"
                    )))
                }
            };
            min = Some(min.map_or(v, |m: u8| m.min(v)));
        }
        min.ok_or_else(|| ConfigError::Invalid("ssl_enabled_protocols is empty".into()))
    }
}

/// Kafka's class names for the two selectors it ships.
const RACK_AWARE: &str = "org.apache.kafka.common.replica.RackAwareReplicaSelector";
const LEADER: &str = "org.apache.kafka.common.replica.LeaderSelector";

/// Which replica a consumer is sent to (`replica_selector_class`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Selector {
    /// Consumers read from leaders (Kafka's default, and `LeaderSelector`).
    Leader,
    /// A consumer in another zone than the leader reads from an in-sync replica in its own.
    RackAware,
}

impl Selector {
    /// The selector `replica_selector_class` names (unset: leaders).
    pub fn from_config(class: Option<&str>) -> Result<Selector, String> {
        match class.map(str::trim) {
            None | Some("") | Some(LEADER) => Ok(Selector::Leader),
            Some(RACK_AWARE) => Ok(Selector::RackAware),
            Some(other) => Err(format!(
                "replica_selector_class {other:?} is not a selector Strata has: use {RACK_AWARE} or {LEADER}"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn only_kafka_selector_names_are_accepted() {
        assert_eq!(Selector::from_config(None), Ok(Selector::Leader));
        assert_eq!(Selector::from_config(Some(LEADER)), Ok(Selector::Leader));
        assert_eq!(
            Selector::from_config(Some(RACK_AWARE)),
            Ok(Selector::RackAware)
        );
        assert!(Selector::from_config(Some("com.example.Mine")).is_err());
    }

    #[test]
    fn environment_overrides_the_file_and_defaults_fill_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("strata.toml");
        std::fs::write(&file, "num_partitions = 3\nkafka_addr = \"127.0.0.1:1\"\n").unwrap();
        let env = vec![
            ("STRATA_NUM_PARTITIONS".to_string(), "5".to_string()),
            ("STRATA_RACK".to_string(), "a".to_string()),
            ("HOME".to_string(), "/".to_string()),
        ];
        let cfg = BrokerConfig::load(Some(&file), env.into_iter()).unwrap();
        assert_eq!(cfg.num_partitions, 5);
        assert_eq!(cfg.kafka_addr.port(), 1);
        assert_eq!(cfg.rack.as_deref(), Some("a"));
        assert_eq!(cfg.log_segment_bytes, 1 << 30);
    }

    #[test]
    fn unknown_keys_and_bad_values_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("strata.toml");
        std::fs::write(&file, "no_such_key = 1\n").unwrap();
        let err = BrokerConfig::load(Some(&file), std::iter::empty()).unwrap_err();
        assert!(err.to_string().contains("no_such_key"), "{err}");
        // An empty variable unsets an optional key, whatever the file said.
        let file_dir = tempfile::tempdir().unwrap();
        let file = file_dir.path().join("strata.toml");
        std::fs::write(&file, "advertised_kafka_addr = \"127.0.0.1:9092\"\n").unwrap();
        let env = vec![("STRATA_ADVERTISED_KAFKA_ADDR".to_string(), String::new())];
        let cfg = BrokerConfig::load(Some(&file), env.into_iter()).unwrap();
        assert_eq!(cfg.advertised_kafka_addr, None);

        // Every optional key has its variable (STRATA_VOTERS was once silently ignored).
        let env = vec![
            ("STRATA_VOTERS".to_string(), "1@a:9093".to_string()),
            ("STRATA_RACK".to_string(), "z".to_string()),
        ];
        let cfg = BrokerConfig::load(None, env.into_iter()).unwrap();
        assert_eq!(cfg.voters.as_deref(), Some("1@a:9093"));
        assert_eq!(cfg.rack.as_deref(), Some("z"));

        let env = vec![("STRATA_NUM_PARTITIONS".to_string(), "lots".to_string())];
        assert!(BrokerConfig::load(None, env.into_iter()).is_err());
        let env = vec![("STRATA_NUM_PARTITIONS".to_string(), "0".to_string())];
        assert!(BrokerConfig::load(None, env.into_iter()).is_err());
        let env = vec![("STRATA_LAG_WINDOW_MS".to_string(), "1000".to_string())];
        let err = BrokerConfig::load(None, env.into_iter()).unwrap_err();
        assert!(err.to_string().contains("lag_window_ms"), "{err}");
    }

    #[test]
    fn the_initial_rebalance_delay_is_kafkas_unless_set() {
        let alone = BrokerConfig::load(None, std::iter::empty()).unwrap();
        assert_eq!(
            alone.group_initial_rebalance_delay(),
            Duration::from_secs(3)
        );
        let cluster = BrokerConfig {
            voters: Some("1@a:9093,2@b:9093,3@c:9093".into()),
            ..BrokerConfig::default()
        };
        assert_eq!(
            cluster.group_initial_rebalance_delay(),
            Duration::from_secs(3)
        );

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("strata.toml");
        std::fs::write(&file, "group_initial_rebalance_delay_ms = 700\n").unwrap();
        let cfg = BrokerConfig::load(Some(&file), std::iter::empty()).unwrap();
        assert_eq!(
            cfg.group_initial_rebalance_delay(),
            Duration::from_millis(700)
        );
        let env = |v: &str| {
            vec![(
                "STRATA_GROUP_INITIAL_REBALANCE_DELAY_MS".to_string(),
                v.to_string(),
            )]
        };
        let cfg = BrokerConfig::load(Some(&file), env("2500").into_iter()).unwrap();
        assert_eq!(
            cfg.group_initial_rebalance_delay(),
            Duration::from_millis(2500)
        );
        let err = BrokerConfig::load(None, env("soon").into_iter()).unwrap_err();
        assert!(
            err.to_string().contains("'soon' is not a whole number"),
            "{err}"
        );
        // Empty unsets it: back to the default.
        let cfg = BrokerConfig::load(Some(&file), env("").into_iter()).unwrap();
        assert_eq!(cfg.group_initial_rebalance_delay(), Duration::from_secs(3));
    }

    #[test]
    fn a_secured_inter_broker_link_needs_its_credentials_and_ca() {
        let secured = |inter: &str| BrokerConfig {
            listeners: Some("PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0".into()),
            inter_broker_listener_name: Some(inter.into()),
            ssl_certificate_location: Some("cert.pem".into()),
            ssl_key_location: Some("key.pem".into()),
            ..BrokerConfig::default()
        };
        assert!(secured("PLAINTEXT").validate().is_ok());
        let err = secured("SASL_SSL").validate().unwrap_err();
        assert!(
            err.to_string().contains("inter_broker_sasl_username"),
            "{err}"
        );
        let with_user = BrokerConfig {
            inter_broker_sasl_username: Some("broker".into()),
            inter_broker_sasl_password: Some("secret".into()),
            ..secured("SASL_SSL")
        };
        let err = with_user.validate().unwrap_err();
        assert!(err.to_string().contains("ssl_ca_location"), "{err}");
        let complete = BrokerConfig {
            ssl_ca_location: Some("ca.pem".into()),
            ..with_user.clone()
        };
        assert!(complete.validate().is_ok());
        let bad_mechanism = BrokerConfig {
            sasl_mechanism_inter_broker_protocol: "GSSAPI".into(),
            ..complete.clone()
        };
        assert!(bad_mechanism.validate().is_err());
        for (raft, ok) in [("SSL", true), ("PLAINTEXT", true), ("TLS", false)] {
            let cfg = BrokerConfig {
                raft_security_protocol: raft.into(),
                ..complete.clone()
            };
            assert_eq!(cfg.validate().is_ok(), ok, "raft_security_protocol {raft}");
        }
        let raft_without_certificate = BrokerConfig {
            raft_security_protocol: "SSL".into(),
            ssl_ca_location: Some("ca.pem".into()),
            ..BrokerConfig::default()
        };
        assert!(raft_without_certificate.validate().is_err());
    }

    #[test]
    fn voters_parse_kafka_style_and_bad_lists_are_refused() {
        let cfg = BrokerConfig {
            voters: Some("1@127.0.0.1:9093, 2@node-b:9193,3@[::1]:9293".into()),
            ..BrokerConfig::default()
        };
        let voters = cfg.voter_map().expect("valid");
        assert_eq!(voters.len(), 3);
        assert_eq!(voters[&2], "node-b:9193");
        assert_eq!(voters[&3], "[::1]:9293");
        let alone = BrokerConfig::default().voter_map().expect("default");
        assert_eq!(alone, BTreeMap::from([(1, "127.0.0.1:9093".to_string())]));
        for bad in [
            "",
            "1@a:1,1@b:2,3@c:3",
            "1@a:1,2@b:2",
            "x@a:1",
            "1-a:1",
            "1@a",
            "1@:5",
        ] {
            let cfg = BrokerConfig {
                voters: Some(bad.into()),
                ..BrokerConfig::default()
            };
            assert!(cfg.validate().is_err(), "'{bad}' must be refused");
        }
        let cfg = BrokerConfig {
            broker_heartbeat_interval_ms: 2000,
            ..BrokerConfig::default()
        };
        assert!(
            cfg.validate().is_err(),
            "heartbeat above half the session timeout"
        );
    }

    #[test]
    fn a_learner_advertises_a_raft_address_the_voters_can_call() {
        let learner = |raft: &str, advertised: Option<&str>| BrokerConfig {
            node_id: 4,
            voters: Some("1@a:9093,2@b:9093,3@c:9093".into()),
            raft_addr: raft.parse().unwrap(),
            advertised_raft_addr: advertised.map(str::to_string),
            ..BrokerConfig::default()
        };
        let name = "strata-4.strata.ns.svc.cluster.local:9093";
        let cfg = learner("0.0.0.0:9093", Some(name));
        assert_eq!(cfg.advertised_raft().unwrap().as_deref(), Some(name));
        assert_eq!(
            learner("10.0.0.4:9093", None).advertised_raft().unwrap(),
            None
        );
        let voter = BrokerConfig {
            node_id: 1,
            ..learner("0.0.0.0:9093", Some("a:9093"))
        };
        assert!(
            voter.advertised_raft().is_ok(),
            "a voter naming itself as voters does"
        );
        for (cfg, cause) in [
            (learner("0.0.0.0:9093", None), "binds every interface"),
            (learner("0.0.0.0:9093", Some("no-port")), "not host:port"),
            (
                BrokerConfig {
                    node_id: 1,
                    ..learner("0.0.0.0:9093", Some(name))
                },
                "differs from node 1's voters entry a:9093",
            ),
        ] {
            let err = cfg.advertised_raft().unwrap_err().to_string();
            assert!(err.contains(cause), "{err}");
        }
    }
}
