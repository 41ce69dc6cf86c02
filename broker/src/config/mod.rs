//! Broker settings: plain data with defaults, read from a TOML file, then `STRATA_*`
//! environment variables, then command-line flags (each overriding the one before).
//!
//! Keys are flat (`log_segment_bytes`, not `[log] segment_bytes`) so that every key has exactly
//! one environment variable: `STRATA_` + the key in upper case.

pub mod catalogue;
mod error;
pub mod kafka_broker_configs;
pub mod listeners;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use error::ConfigError;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct BrokerConfig {
    pub node_id: u64,
    pub data_dir: PathBuf,
    /// Kafka's `log.dirs`: the directories partition logs are spread over, comma-separated
    /// (one per disk, JBOD). Unset: `data_dir` alone.
    pub log_dirs: Option<String>,
    pub kafka_addr: SocketAddr,
    /// Address given to clients in Metadata; defaults to the bound Kafka address.
    pub advertised_kafka_addr: Option<SocketAddr>,
    /// Kafka's `listeners`, `NAME://host:port,...` (see `listeners.rs`); when set it replaces
    /// `kafka_addr` and `advertised_kafka_addr`.
    pub listeners: Option<String>,
    pub advertised_listeners: Option<String>,
    /// `NAME:PROTOCOL,...`; a listener named after a protocol needs no entry.
    pub listener_security_protocol_map: Option<String>,
    /// The listener other brokers connect to (default: the first).
    pub inter_broker_listener_name: Option<String>,
    /// Mechanisms offered on SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER.
    pub sasl_enabled_mechanisms: String,
    /// OAUTHBEARER: the JSON Web Key Set tokens are verified with (`file:///path`, a path, or
    /// `https://...`), re-read every `sasl_oauthbearer_jwks_endpoint_refresh_ms`; the issuer
    /// and audiences tokens must name (unset: any), the claim naming the principal, and the
    /// clock skew allowed on `exp`/`nbf`.
    pub sasl_oauthbearer_jwks_endpoint_url: Option<String>,
    pub sasl_oauthbearer_jwks_endpoint_refresh_ms: u64,
    pub sasl_oauthbearer_expected_issuer: Option<String>,
    pub sasl_oauthbearer_expected_audience: Option<String>,
    pub sasl_oauthbearer_sub_claim_name: String,
    pub sasl_oauthbearer_clock_skew_seconds: i64,
    /// PLAIN's users, `user:password` per line (development); unset, PLAIN checks the
    /// password against the user's SCRAM credentials.
    pub sasl_plain_users_file: Option<PathBuf>,
    /// A SASL session lasts this long; a client must re-authenticate on its connection
    /// before it ends (KIP-368). 0: sessions last as long as the connection.
    pub connections_max_reauth_ms: u64,
    /// PEM files of TLS listeners: certificate chain, private key, and the CA that signs
    /// client certificates (for `ssl_client_auth`).
    pub ssl_certificate_location: Option<PathBuf>,
    pub ssl_key_location: Option<PathBuf>,
    pub ssl_ca_location: Option<PathBuf>,
    /// Client certificates: none, requested or required (mTLS).
    pub ssl_client_auth: String,
    /// Kafka's `ssl.principal.mapping.rules`: a client certificate's subject (RFC 2253) to its
    /// principal name, `RULE:pattern/replacement/[LU]` entries and `DEFAULT`.
    pub ssl_principal_mapping_rules: String,
    /// TLS versions spoken: `TLSv1.2,TLSv1.3` or `TLSv1.3` (1.3 is preferred when both are).
    pub ssl_enabled_protocols: String,
    /// How this broker authenticates to the others when the inter-broker listener is a SASL
    /// one: Kafka's `sasl.mechanism.inter.broker.protocol` (PLAIN, SCRAM-SHA-256,
    /// SCRAM-SHA-512) and the credentials of a user every broker knows (list it in
    /// `super_users`). On a TLS inter-broker listener the broker presents its own certificate
    /// and verifies the others' against `ssl_ca_location`.
    pub sasl_mechanism_inter_broker_protocol: String,
    pub inter_broker_sasl_username: Option<String>,
    pub inter_broker_sasl_password: Option<String>,
    /// The raft port (metadata quorum): `PLAINTEXT`, or `SSL` for mutual TLS, every node
    /// presenting its certificate and accepting only peers whose certificate `ssl_ca_location`
    /// signed.
    pub raft_security_protocol: String,
    /// ACLs decide what each principal may do (Kafka's `authorizer.class.name` set); off,
    /// every authenticated principal may do everything.
    pub authorizer_enable: bool,
    /// Principals allowed everything whatever the ACLs say, `User:a;User:b` as Kafka lists them.
    pub super_users: String,
    /// With the authorizer on: a resource no ACL names is open to everyone (true) or to super
    /// users only (false, Kafka's default).
    pub allow_everyone_if_no_acl_found: bool,
    /// The audit log: unset (off), `stdout`, or a file (relative paths are in `data_dir`).
    pub audit_log: Option<String>,
    /// Client quotas allow a burst of `quota_window_num − 1` windows of
    /// `quota_window_size_seconds` of the quota (Kafka's `quota.window.num` and
    /// `quota.window.size.seconds`, 10 s by default), then hold the client to its rate; one
    /// response's throttle is at most `quota_window_num` windows.
    pub quota_window_num: u32,
    pub quota_window_size_seconds: u32,
    pub admin_addr: SocketAddr,
    /// The admin HTTP port: `PLAINTEXT`, or `SSL` for HTTPS with the broker's certificate,
    /// asking for client certificates as `ssl_client_auth` says (as on an SSL listener).
    pub admin_security_protocol: String,
    /// Listener for the other nodes of the cluster: the metadata quorum's raft port.
    pub raft_addr: SocketAddr,
    /// `host:port` the other nodes reach this node's raft port at, when it is not a voter (a
    /// voter is reached at its `voters` entry, which this may repeat). Unset: `raft_addr`. A
    /// learner is known by this address for the life of the cluster, so where its IP changes
    /// (a Kubernetes pod) it must be a name.
    pub advertised_raft_addr: Option<String>,
    /// The metadata voters, `id@host:port,...` (Kafka's `controller.quorum.voters`). Unset:
    /// this node alone. A node not listed joins the quorum as a learner through them.
    pub voters: Option<String>,
    /// A broker that has not heartbeated to the controller for this long is fenced: it leads
    /// nothing and leaves the ISRs (Kafka's `broker.session.timeout.ms`).
    pub broker_session_timeout_ms: u64,
    /// How often a broker heartbeats to the controller.
    pub broker_heartbeat_interval_ms: u64,
    /// A follower not caught up with its leader for this long leaves the ISR.
    pub replica_lag_time_max_ms: u64,
    /// The controller hands leadership back to preferred replicas (Kafka's
    /// `auto.leader.rebalance.enable`), every `leader_imbalance_check_interval_ms`, for brokers
    /// leading fewer than `100 − leader_imbalance_per_broker_percentage` % of the partitions
    /// they are preferred for.
    pub auto_leader_rebalance_enable: bool,
    pub leader_imbalance_check_interval_ms: u64,
    /// The controller's automatic balancer (see `node/balancer.rs`): spreads replicas and
    /// leaders over live brokers, and moves the replicas of a broker fenced for
    /// `auto_balance_broker_down_ms`; every `auto_balance_interval_ms`.
    pub auto_balance_enable: bool,
    pub auto_balance_interval_ms: u64,
    pub auto_balance_broker_down_ms: u64,
    pub leader_imbalance_per_broker_percentage: u32,
    pub rack: Option<String>,
    pub cluster_id: String,
    pub auto_create_topics_enable: bool,
    pub num_partitions: u32,
    /// Most partitions one topic may have (CreateTopics and CreatePartitions beyond it get
    /// INVALID_PARTITIONS).
    pub max_partitions_per_topic: u32,
    pub default_replication_factor: u16,
    /// `socket.request.max.bytes`: frames above this close the connection.
    pub max_request_bytes: u32,
    pub max_connections: usize,
    /// Kafka connections open at once from one client IP address (`max.connections.per.ip`).
    pub max_connections_per_ip: usize,
    /// A connection with no request in flight and no bytes received for this long is closed
    /// (`connections.max.idle.ms`).
    pub connections_max_idle_ms: u64,
    /// Bytes of request frames held at once across all connections (`queued.max.request.bytes`):
    /// when reached, the broker stops reading requests until earlier ones are answered.
    pub queued_max_request_bytes: u64,
    /// A request frame must arrive whole, and a response be written whole, within this of
    /// its first byte; a connection that does not manage it is closed.
    pub socket_io_timeout_ms: u64,
    pub log_segment_bytes: u64,
    pub log_segment_ms: i64,
    pub log_retention_ms: i64,
    pub log_retention_bytes: i64,
    pub log_flush_messages: i64,
    pub log_flush_ms: i64,
    pub log_index_interval_bytes: u64,
    /// Default `min.insync.replicas` of topics.
    pub min_insync_replicas: i32,
    pub log_retention_check_interval_ms: u64,
    /// Committed offsets of a group empty for this long are deleted (-1: never).
    pub offsets_retention_minutes: i64,
    /// Replicas of each `__consumer_offsets` partition (Kafka's
    /// `offsets.topic.replication.factor`); a cluster with fewer brokers uses them all.
    pub offsets_topic_replication_factor: u16,
    /// Replicas of each `__transaction_state` partition (Kafka's
    /// `transaction.state.log.replication.factor`); a cluster with fewer brokers uses them all.
    pub transaction_state_log_replication_factor: u16,
    /// `min.insync.replicas` of `__transaction_state` (capped by its replication factor).
    pub transaction_state_log_min_isr: u16,
    /// The longest `transaction.timeout.ms` a producer may ask for.
    pub transaction_max_timeout_ms: u64,
    /// How often the coordinator aborts transactions past their timeout.
    pub transaction_abort_timed_out_transaction_cleanup_interval_ms: u64,
    /// The first rebalance of an empty group waits this long for more members to join. Unset:
    /// Kafka's default, 3000; see [`BrokerConfig::group_initial_rebalance_delay`].
    #[serde(deserialize_with = "number_or_numeric_string")]
    pub group_initial_rebalance_delay_ms: Option<u64>,
    /// KIP-848 consumer groups: a member not heard from for this long leaves its group.
    pub group_consumer_session_timeout_ms: u64,
    /// KIP-848 consumer groups: how often members are told to heartbeat.
    pub group_consumer_heartbeat_interval_ms: u64,
    /// How often consumer lag is sampled.
    pub lag_sample_interval_ms: u64,
    /// The window over which the lag trend (least-squares slope) is computed.
    pub lag_window_ms: u64,
    /// Client telemetry (KIP-714): prefixes of the metric names clients are asked to push
    /// (`*`: all); empty, the default, asks for none.
    pub client_telemetry_metrics: String,
    /// How often clients push their metrics (Kafka's `interval.ms` of a client-metrics
    /// subscription).
    pub client_telemetry_interval_ms: u64,
    /// The largest push accepted, compressed or not (Kafka's `telemetry.max.bytes`).
    pub telemetry_max_bytes: u32,
    pub message_max_bytes: u32,
    /// Default `compression.type` of topics: `producer` (batches stored as sent) or the
    /// codec every batch is stored under (uncompressed, gzip, snappy, lz4, zstd).
    pub compression_type: String,
    /// Default `compression.gzip.level` (-1: the library's default, or 1..=9).
    pub compression_gzip_level: i32,
    /// Default `compression.lz4.level` (1..=17).
    pub compression_lz4_level: i32,
    /// Default `compression.zstd.level` (-131072..=22).
    pub compression_zstd_level: i32,
    pub log_message_timestamp_type: String,
    /// Default `cleanup.policy` of topics.
    pub log_cleanup_policy: String,
    pub log_cleaner_enable: bool,
    /// Pause between cleaner passes when no log is dirty enough.
    pub log_cleaner_backoff_ms: u64,
    /// Memory for the key → offset map of one clean; bounds how much dirty log one pass takes.
    pub log_cleaner_dedupe_buffer_size: u64,
    /// Bytes read plus written per second by the cleaner (0: unbounded).
    pub log_cleaner_io_max_bytes_per_second: u64,
    pub log_cleaner_delete_retention_ms: i64,
    pub log_cleaner_min_cleanable_ratio: f64,
    pub log_cleaner_min_compaction_lag_ms: i64,
    /// Where closed segments go: `s3://bucket/prefix`, `file:///path` or `memory://`
    /// (default: `file://<data_dir>/objects`, so the tier is always on).
    pub object_store: Option<String>,
    /// S3-compatible endpoint (MinIO), e.g. `http://127.0.0.1:9000`.
    pub object_store_endpoint: Option<String>,
    pub object_store_region: Option<String>,
    /// Static S3 keys; when unset, the AWS_* environment, web identity (EKS IRSA), ECS/EKS
    /// container credentials, then EC2 instance metadata (IMDSv2).
    pub object_store_access_key_id: Option<String>,
    pub object_store_secret_access_key: Option<String>,
    pub object_store_allow_http: bool,
    pub object_store_virtual_hosted_style: bool,
    pub object_store_request_timeout_ms: u64,
    pub object_store_max_retries: usize,
    pub object_store_retry_timeout_ms: u64,
    /// Topic default of `remote.storage.enable`: the tier is on unless a topic opts out.
    pub remote_storage_enable: bool,
    /// Topic defaults of `local.retention.ms/bytes` (-2: same as retention).
    pub log_local_retention_ms: i64,
    pub log_local_retention_bytes: i64,
    /// How often the tier looks for segments to offload and remote segments to expire.
    pub remote_log_manager_task_interval_ms: u64,
    /// Segments uploaded at once (across partitions; one partition uploads in order).
    pub remote_log_upload_concurrency: usize,
    /// Upload bandwidth bound (0: none).
    pub remote_log_upload_max_bytes_per_second: u64,
    /// Bytes per second all replicas being added to this broker by reassignments may fetch
    /// together (0: no bound); in-sync replicas are never held back by it.
    pub replica_move_max_bytes_per_second: u64,
    /// Bytes per second a replica moving between this broker's log directories
    /// (AlterReplicaLogDirs) is copied at, all moves together (0: no bound).
    pub replica_alter_log_dirs_io_max_bytes_per_second: u64,
    /// Incremental fetch sessions (KIP-227) the broker keeps at once (0: none; every fetch is
    /// answered in full).
    pub max_incremental_fetch_session_cache_slots: usize,
    /// Segment files held open at once (see `log/handles.rs`); a segment past it is reopened
    /// when next used. 0: half the open-file limit `strata serve` runs with.
    pub max_open_segment_files: usize,
    /// An object no remote-segment record names is deleted once it is this old (a crash
    /// mid-upload leaves such objects).
    pub remote_log_orphan_grace_ms: u64,
    /// Block cache of remote reads (see the `cache/` crate): block size, the budgets of
    /// reads near the tail ("recent") and of history replays ("replay"), and readahead.
    pub remote_cache_block_bytes: u64,
    pub remote_cache_memory_bytes: u64,
    pub remote_cache_disk_bytes: u64,
    pub remote_cache_replay_memory_bytes: u64,
    pub remote_cache_replay_disk_bytes: u64,
    pub remote_cache_readahead_blocks: usize,
    pub remote_fetch_max_concurrent_gets: usize,
    /// Threads of the tier's runtime (uploads, remote reads, cache), run at nice 10.
    pub remote_io_threads: usize,
    /// The keys set by the file, the environment or a flag (the rest are defaults): what
    /// DescribeConfigs reports as STATIC_BROKER_CONFIG.
    #[serde(skip)]
    pub static_keys: BTreeSet<String>,
    /// `STRATA_*` variables of the environment that name no setting (a typo would otherwise
    /// turn a feature off without a word), each with the nearest setting's variable if one is
    /// close: `serve` warns of them at start and `--check-config` lists them.
    #[serde(skip)]
    pub unknown_env: Vec<(String, Option<String>)>,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            node_id: 1,
            data_dir: PathBuf::from("./strata-data"),
            log_dirs: None,
            kafka_addr: "127.0.0.1:9092".parse().expect("literal"),
            advertised_kafka_addr: None,
            listeners: None,
            advertised_listeners: None,
            listener_security_protocol_map: None,
            inter_broker_listener_name: None,
            sasl_enabled_mechanisms: "SCRAM-SHA-256,SCRAM-SHA-512".into(),
            sasl_plain_users_file: None,
            sasl_oauthbearer_jwks_endpoint_url: None,
            sasl_oauthbearer_jwks_endpoint_refresh_ms: 3_600_000,
            sasl_oauthbearer_expected_issuer: None,
            sasl_oauthbearer_expected_audience: None,
            sasl_oauthbearer_sub_claim_name: "sub".into(),
            sasl_oauthbearer_clock_skew_seconds: 30,
            connections_max_reauth_ms: 0,
            sasl_mechanism_inter_broker_protocol: "SCRAM-SHA-256".into(),
            inter_broker_sasl_username: None,
            inter_broker_sasl_password: None,
            raft_security_protocol: "PLAINTEXT".into(),
            authorizer_enable: false,
            super_users: String::new(),
            allow_everyone_if_no_acl_found: false,
            audit_log: None,
            quota_window_num: 11,
            quota_window_size_seconds: 1,
            ssl_certificate_location: None,
            ssl_key_location: None,
            ssl_ca_location: None,
            ssl_client_auth: "none".into(),
            ssl_principal_mapping_rules: "DEFAULT".into(),
            ssl_enabled_protocols: "TLSv1.2,TLSv1.3".into(),
            admin_addr: "127.0.0.1:9644".parse().expect("literal"),
            admin_security_protocol: "PLAINTEXT".into(),
            raft_addr: "127.0.0.1:9093".parse().expect("literal"),
            advertised_raft_addr: None,
            voters: None,
            broker_session_timeout_ms: 3000,
            broker_heartbeat_interval_ms: 500,
            replica_lag_time_max_ms: 10_000,
            auto_leader_rebalance_enable: true,
            leader_imbalance_check_interval_ms: 300_000,
            auto_balance_enable: false,
            auto_balance_interval_ms: 30_000,
            auto_balance_broker_down_ms: 600_000,
            leader_imbalance_per_broker_percentage: 10,
            rack: None,
            cluster_id: "strata".into(),
            auto_create_topics_enable: true,
            num_partitions: 1,
            max_partitions_per_topic: 10_000,
            default_replication_factor: 1,
            max_request_bytes: 100 * 1024 * 1024,
            max_connections: 10_000,
            max_connections_per_ip: 1000,
            connections_max_idle_ms: 600_000,
            queued_max_request_bytes: 512 << 20,
            socket_io_timeout_ms: 60_000,
            log_segment_bytes: 1 << 30,
            log_segment_ms: 7 * 24 * 3600 * 1000,
            log_retention_ms: 7 * 24 * 3600 * 1000,
            log_retention_bytes: -1,
            log_flush_messages: i64::MAX,
            log_flush_ms: i64::MAX,
            log_index_interval_bytes: 4096,
            min_insync_replicas: 1,
            log_retention_check_interval_ms: 30_000,
            offsets_retention_minutes: 7 * 24 * 60,
            offsets_topic_replication_factor: 3,
            transaction_state_log_replication_factor: 3,
            transaction_state_log_min_isr: 2,
            transaction_max_timeout_ms: 900_000,
            transaction_abort_timed_out_transaction_cleanup_interval_ms: 10_000,
            group_initial_rebalance_delay_ms: None,
            group_consumer_session_timeout_ms: 45_000,
            group_consumer_heartbeat_interval_ms: 5_000,
            lag_sample_interval_ms: 5_000,
            lag_window_ms: 60_000,
            client_telemetry_metrics: String::new(),
            client_telemetry_interval_ms: 300_000,
            telemetry_max_bytes: 1_048_576,
            message_max_bytes: 1_048_588,
            compression_type: "producer".into(),
            compression_gzip_level: -1,
            compression_lz4_level: 9,
            compression_zstd_level: 3,
            log_message_timestamp_type: "CreateTime".into(),
            log_cleanup_policy: "delete".into(),
            log_cleaner_enable: true,
            log_cleaner_backoff_ms: 15_000,
            log_cleaner_dedupe_buffer_size: 128 << 20,
            log_cleaner_io_max_bytes_per_second: 0,
            log_cleaner_delete_retention_ms: 86_400_000,
            log_cleaner_min_cleanable_ratio: 0.5,
            log_cleaner_min_compaction_lag_ms: 0,
            object_store: None,
            object_store_endpoint: None,
            object_store_region: None,
            object_store_access_key_id: None,
            object_store_secret_access_key: None,
            object_store_allow_http: false,
            object_store_virtual_hosted_style: false,
            object_store_request_timeout_ms: 30_000,
            object_store_max_retries: 5,
            object_store_retry_timeout_ms: 60_000,
            remote_storage_enable: true,
            log_local_retention_ms: -2,
            log_local_retention_bytes: -2,
            remote_log_manager_task_interval_ms: 1_000,
            remote_log_upload_concurrency: 4,
            remote_log_upload_max_bytes_per_second: 0,
            replica_move_max_bytes_per_second: 0,
            replica_alter_log_dirs_io_max_bytes_per_second: 0,
            max_incremental_fetch_session_cache_slots: 1000,
            max_open_segment_files: 0,
            remote_log_orphan_grace_ms: 600_000,
            remote_cache_block_bytes: 1 << 20,
            remote_cache_memory_bytes: 256 << 20,
            remote_cache_disk_bytes: 2 << 30,
            remote_cache_replay_memory_bytes: 64 << 20,
            remote_cache_replay_disk_bytes: 2 << 30,
            remote_cache_readahead_blocks: 8,
            remote_fetch_max_concurrent_gets: 16,
            remote_io_threads: 2,
            static_keys: BTreeSet::new(),
            unknown_env: Vec::new(),
        }
    }
}

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
        if self.group_consumer_heartbeat_interval_ms == 0
            || self.group_consumer_heartbeat_interval_ms >= self.group_consumer_session_timeout_ms
        {
            return Err(ConfigError::Invalid(
                "group_consumer_heartbeat_interval_ms must be ≥ 1 and below group_consumer_session_timeout_ms".into(),
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
        if self.node_id > i32::MAX as u64 {
            return Err(ConfigError::Invalid(
                "node_id must be at most 2147483647 (Kafka broker ids are 32-bit)".into(),
            ));
        }
        self.voter_map()?;
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
        if self.quota_window_num < 2 || self.quota_window_size_seconds == 0 {
            return Err(ConfigError::Invalid(
                "quota_window_num must be at least 2 and quota_window_size_seconds at least 1"
                    .into(),
            ));
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
        if self.sasl_oauthbearer_jwks_endpoint_refresh_ms == 0
            || self.sasl_oauthbearer_clock_skew_seconds < 0
        {
            return Err(ConfigError::Invalid(
                "sasl_oauthbearer_jwks_endpoint_refresh_ms must be ≥ 1 and sasl_oauthbearer_clock_skew_seconds ≥ 0".into(),
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
        if self.broker_heartbeat_interval_ms == 0
            || self.broker_heartbeat_interval_ms * 2 > self.broker_session_timeout_ms
        {
            return Err(ConfigError::Invalid(
                "broker_heartbeat_interval_ms must be ≥ 1 and at most half of broker_session_timeout_ms".into(),
            ));
        }
        if self.queued_max_request_bytes < self.max_request_bytes as u64 {
            return Err(ConfigError::Invalid(
                "queued_max_request_bytes must be at least max_request_bytes (a largest request must fit)".into(),
            ));
        }
        if self.max_connections_per_ip == 0
            || self.connections_max_idle_ms == 0
            || self.socket_io_timeout_ms == 0
        {
            return Err(ConfigError::Invalid(
                "max_connections_per_ip, connections_max_idle_ms and socket_io_timeout_ms must be ≥ 1".into(),
            ));
        }
        if self.num_partitions == 0 || self.num_partitions > self.max_partitions_per_topic {
            return Err(ConfigError::Invalid(
                "num_partitions must be between 1 and max_partitions_per_topic".into(),
            ));
        }
        if self.leader_imbalance_check_interval_ms == 0
            || self.leader_imbalance_per_broker_percentage > 100
        {
            return Err(ConfigError::Invalid(
                "leader_imbalance_check_interval_ms must be ≥ 1 and leader_imbalance_per_broker_percentage at most 100".into(),
            ));
        }
        if self.offsets_topic_replication_factor == 0 {
            return Err(ConfigError::Invalid(
                "offsets_topic_replication_factor must be ≥ 1".into(),
            ));
        }
        if self.transaction_state_log_replication_factor == 0
            || self.transaction_state_log_min_isr == 0
            || self.transaction_max_timeout_ms == 0
            || self.transaction_max_timeout_ms > i32::MAX as u64
            || self.transaction_abort_timed_out_transaction_cleanup_interval_ms == 0
        {
            return Err(ConfigError::Invalid(
                "transaction_state_log_replication_factor, transaction_state_log_min_isr and transaction_abort_timed_out_transaction_cleanup_interval_ms must be ≥ 1, transaction_max_timeout_ms 1 to 2^31-1".into(),
            ));
        }
        if self.log_segment_bytes < 1024 || self.log_segment_bytes > i32::MAX as u64 {
            return Err(ConfigError::Invalid(
                "log_segment_bytes must be between 1024 and 2147483647".into(),
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
        if self.remote_cache_block_bytes < 4096 || self.remote_log_upload_concurrency == 0 {
            return Err(ConfigError::Invalid(
                "remote_cache_block_bytes must be ≥ 4096 and remote_log_upload_concurrency ≥ 1"
                    .into(),
            ));
        }
        if !(0.0..=1.0).contains(&self.log_cleaner_min_cleanable_ratio) {
            return Err(ConfigError::Invalid(
                "log_cleaner_min_cleanable_ratio must be between 0 and 1".into(),
            ));
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

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
