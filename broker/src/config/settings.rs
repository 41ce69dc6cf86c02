//! Every broker setting, declared once: its key, type and default, its Kafka name and type, whether
//! it may change at run time, the default as people read it, its bounds and its meaning. From
//! this one table come the [`BrokerConfig`] struct and its `Default`, the catalogue
//! DescribeConfigs and IncrementalAlterConfigs read ([`SETTINGS`]), the bounds
//! [`BrokerConfig::validate`] checks, and the settings table of the README (a test fails when the
//! README's table is not the one this table renders; `STRATA_BLESS=1` rewrites it).
//!
//! A new setting is one entry here; rules between settings (one bounded by another, a value
//! from a list) stay in `validate`.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// DescribeConfigs `config_type` (v3+), as Kafka's `ConfigDef.Type` numbers them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Bool,
    Str,
    Int,
    Short,
    Long,
    Double,
    /// Comma-separated values; IncrementalAlterConfigs may APPEND to and SUBTRACT from it.
    List,
    /// A secret: DescribeConfigs never returns its value.
    Password,
}

impl Kind {
    pub fn code(self) -> i8 {
        match self {
            Kind::Bool => 1,
            Kind::Str => 2,
            Kind::Int => 3,
            Kind::Short => 4,
            Kind::Long => 5,
            Kind::Double => 6,
            Kind::List => 7,
            Kind::Password => 9,
        }
    }
}

pub struct Setting {
    /// The key in `strata.toml` (and, upper-cased after `STRATA_`, in the environment).
    pub key: &'static str,
    /// The Kafka name: what DescribeConfigs lists and IncrementalAlterConfigs accepts.
    pub name: &'static str,
    pub kind: Kind,
    /// May change at run time through IncrementalAlterConfigs, cluster-wide (resource `""`)
    /// or for one broker; the others are read at start only.
    pub dynamic: bool,
    /// The default as people read it (the README's column): a value in backticks, or words
    /// for a default that depends on other settings.
    pub shown_default: &'static str,
    /// What [`BrokerConfig::validate`] accepts of a number.
    pub bounds: Bounds,
    /// The meaning, in the README's words (DescribeConfigs' documentation).
    pub doc: &'static str,
}

/// The closed range a numeric setting must be in.
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct Bounds {
    pub min: f64,
    pub max: f64,
}

/// No bound beyond the type's.
pub const ANY: Bounds = between(f64::NEG_INFINITY, f64::INFINITY);

pub const fn at_least(min: f64) -> Bounds {
    between(min, f64::INFINITY)
}

pub const fn at_most(max: f64) -> Bounds {
    between(f64::NEG_INFINITY, max)
}

pub const fn between(min: f64, max: f64) -> Bounds {
    Bounds { min, max }
}

impl Bounds {
    /// `None` when `value` is within; else what is wrong with it, in words.
    pub fn check(&self, value: f64) -> Option<String> {
        if (self.min..=self.max).contains(&value) {
            return None;
        }
        Some(match (self.min.is_finite(), self.max.is_finite()) {
            (true, true) => format!("must be between {} and {}", self.min, self.max),
            (true, false) => format!("must be at least {}", self.min),
            _ => format!("must be at most {}", self.max),
        })
    }

    /// The bounds as the README shows them after a meaning (empty when there are none).
    pub fn shown(&self) -> String {
        match (self.min.is_finite(), self.max.is_finite()) {
            (true, true) => format!(" ({} to {})", self.min, self.max),
            (true, false) => format!(" (≥ {})", self.min),
            (false, true) => format!(" (≤ {})", self.max),
            (false, false) => String::new(),
        }
    }
}

macro_rules! settings {
    ($(
        $(#[$attr:meta])*
        $key:ident: $ty:ty = $default:expr,
            $name:literal, $kind:ident, $dynamic:ident, $shown:literal, $bounds:expr,
            $doc:literal;
    )*) => {
        /// The broker's settings (see the module head: each is declared once, in the table
        /// below).
        #[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
        #[serde(default, deny_unknown_fields)]
        pub struct BrokerConfig {
            $(
                #[doc = $doc]
                $(#[$attr])*
                pub $key: $ty,
            )*
            /// The keys set by the file, the environment or a flag (the rest are defaults):
            /// what DescribeConfigs reports as STATIC_BROKER_CONFIG.
            #[serde(skip)]
            pub static_keys: BTreeSet<String>,
            /// `STRATA_*` variables of the environment that name no setting (a typo would
            /// otherwise turn a feature off without a word), each with the nearest setting's
            /// variable if one is close: `serve` warns of them at start and `--check-config`
            /// lists them.
            #[serde(skip)]
            pub unknown_env: Vec<(String, Option<String>)>,
        }

        impl Default for BrokerConfig {
            fn default() -> Self {
                BrokerConfig {
                    $($key: $default,)*
                    static_keys: BTreeSet::new(),
                    unknown_env: Vec::new(),
                }
            }
        }

        /// Every setting, in the order of the table.
        pub const SETTINGS: &[Setting] = &[$(Setting {
            key: stringify!($key),
            name: $name,
            kind: Kind::$kind,
            dynamic: settings!(@$dynamic),
            shown_default: $shown,
            bounds: $bounds,
            doc: $doc,
        },)*];
    };
    (@dynamic) => { true };
    (@static) => { false };
}

settings! {
    node_id: u64 = 1,
        "node.id", Int, static, "`1`", at_most(2147483647.0),
        "broker id";
    data_dir: PathBuf = PathBuf::from("./strata-data"),
        "data.dir", Str, static, "`./strata-data`", ANY,
        "the metadata quorum (`metadata/`), the default object store (`objects/`), the remote read cache (`cache/`), and the partition logs (`<topic>-<n>/`) when `log_dirs` is unset";
    log_dirs: Option<String> = None,
        "log.dirs", List, static, "`data_dir`", ANY,
        "directories the partition logs are spread over, comma-separated, one per disk (JBOD): a new partition goes to the directory holding the fewest; see \"Several log directories\"";
    kafka_addr: SocketAddr = "127.0.0.1:9092".parse().expect("literal"),
        "kafka.addr", Str, static, "`127.0.0.1:9092`", ANY,
        "Kafka listener";
    advertised_kafka_addr: Option<SocketAddr> = None,
        "advertised.kafka.addr", Str, static, "the bound address", ANY,
        "address given to clients in Metadata (must be set when binding `0.0.0.0`)";
    listeners: Option<String> = None,
        "listeners", List, static, "one `PLAINTEXT` listener on `kafka_addr`", ANY,
        "Kafka listeners, `NAME://host:port,...` (e.g. `PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9094`); when set, `kafka_addr` and `advertised_kafka_addr` are not used";
    advertised_listeners: Option<String> = None,
        "advertised.listeners", List, static, "each listener's bound address", ANY,
        "`NAME://host:port,...`: what Metadata tells clients of each listener (required for a listener bound to `0.0.0.0`)";
    listener_security_protocol_map: Option<String> = None,
        "listener.security.protocol.map", List, static, "names that are protocols map to themselves", ANY,
        "`NAME:PROTOCOL,...` for listeners with other names (`INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL`)";
    inter_broker_listener_name: Option<String> = None,
        "inter.broker.listener.name", Str, static, "the first listener", ANY,
        "the listener other brokers reach this one on (registered with the controller), with its protocol";
    sasl_enabled_mechanisms: String = "SCRAM-SHA-256,SCRAM-SHA-512".into(),
        "sasl.enabled.mechanisms", List, static, "`SCRAM-SHA-256,SCRAM-SHA-512`", ANY,
        "mechanisms offered on SASL listeners: `PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`, `OAUTHBEARER`";
    sasl_oauthbearer_jwks_endpoint_url: Option<String> = None,
        "sasl.oauthbearer.jwks.endpoint.url", Str, static, "none", ANY,
        "OAUTHBEARER: the JSON Web Key Set tokens are verified with, `file:///path` or `https://...` (required with OAUTHBEARER)";
    sasl_oauthbearer_jwks_endpoint_refresh_ms: u64 = 3_600_000,
        "sasl.oauthbearer.jwks.endpoint.refresh.ms", Long, static, "`3600000`", at_least(1.0),
        "how often the key set is read again (a failed read keeps the keys in use)";
    sasl_oauthbearer_expected_issuer: Option<String> = None,
        "sasl.oauthbearer.expected.issuer", Str, static, "any", ANY,
        "the `iss` tokens must carry";
    sasl_oauthbearer_expected_audience: Option<String> = None,
        "sasl.oauthbearer.expected.audience", List, static, "any", ANY,
        "audiences, comma-separated: a token's `aud` must name one";
    sasl_oauthbearer_sub_claim_name: String = "sub".into(),
        "sasl.oauthbearer.sub.claim.name", Str, static, "`sub`", ANY,
        "the claim naming the principal";
    sasl_oauthbearer_clock_skew_seconds: i64 = 30,
        "sasl.oauthbearer.clock.skew.seconds", Int, static, "`30`", at_least(0.0),
        "leeway on `exp` and `nbf`";
    sasl_plain_users_file: Option<PathBuf> = None,
        "sasl.plain.users.file", Str, static, "none", ANY,
        "PLAIN's users, `user:password` per line; unset, PLAIN checks the user's SCRAM credentials";
    connections_max_reauth_ms: u64 = 0,
        "connections.max.reauth.ms", Long, static, "`0`", ANY,
        "SASL sessions end after this and the client must re-authenticate (KIP-368); 0: they last as long as the connection";
    ssl_certificate_location: Option<PathBuf> = None,
        "ssl.certificate.location", Str, static, "none", ANY,
        "PEM certificate chain of TLS listeners (reloaded when it changes)";
    ssl_key_location: Option<PathBuf> = None,
        "ssl.key.location", Str, static, "none", ANY,
        "PEM private key of TLS listeners (reloaded when it changes)";
    ssl_ca_location: Option<PathBuf> = None,
        "ssl.ca.location", Str, static, "none", ANY,
        "PEM CA certificates that sign client certificates (for `ssl_client_auth`)";
    ssl_client_auth: String = "none".into(),
        "ssl.client.auth", Str, static, "`none`", ANY,
        "`none`, `requested` or `required`: whether clients of `SSL` listeners present a certificate the CA signed (mTLS; `SASL_SSL` clients authenticate with SASL and are not asked)";
    ssl_principal_mapping_rules: String = "DEFAULT".into(),
        "ssl.principal.mapping.rules", Str, static, "`DEFAULT`", ANY,
        "Kafka's rules from a client certificate's subject (`CN=alice,OU=eng,O=Example`, RFC 2253 as Java writes it) to its principal name: `RULE:^CN=([^,]*),.*$/$1/L,DEFAULT` (first match wins; `L`/`U` change case; no match refuses the connection)";
    ssl_enabled_protocols: String = "TLSv1.2,TLSv1.3".into(),
        "ssl.enabled.protocols", List, static, "`TLSv1.2,TLSv1.3`", ANY,
        "TLS versions spoken (`TLSv1.3` alone refuses 1.2); 1.3 is chosen whenever the client speaks it";
    sasl_mechanism_inter_broker_protocol: String = "SCRAM-SHA-256".into(),
        "sasl.mechanism.inter.broker.protocol", Str, static, "`SCRAM-SHA-256`", ANY,
        "how brokers authenticate to each other on a SASL inter-broker listener: `PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`";
    inter_broker_sasl_username: Option<String> = None,
        "inter.broker.sasl.username", Str, static, "none", ANY,
        "the user brokers authenticate as; every broker accepts it from its own configuration (required with a SASL inter-broker listener)";
    inter_broker_sasl_password: Option<String> = None,
        "inter.broker.sasl.password", Password, static, "none", ANY,
        "its password (never logged)";
    raft_security_protocol: String = "PLAINTEXT".into(),
        "raft.security.protocol", Str, static, "`PLAINTEXT`", ANY,
        "the raft port: `PLAINTEXT`, or `SSL` for mutual TLS with `ssl_certificate_location`, `ssl_key_location`, `ssl_ca_location`";
    authorizer_enable: bool = false,
        "authorizer.enable", Bool, static, "`false`", ANY,
        "check every request against the ACLs";
    super_users: String = String::new(),
        "super.users", Str, static, "none", ANY,
        "principals allowed everything, `User:a;User:b`";
    allow_everyone_if_no_acl_found: bool = false,
        "allow.everyone.if.no.acl.found", Bool, static, "`false`", ANY,
        "with the authorizer: a resource no ACL names is open to all (else to super users only)";
    audit_log: Option<String> = None,
        "audit.log", Str, static, "none (off)", ANY,
        "the audit log: a file (relative: in `data_dir`) or `stdout`; JSON lines";
    quota_window_num: u32 = 11,
        "quota.window.num", Int, static, "`11`", at_least(2.0),
        "client quotas allow a burst of `quota_window_num − 1` windows of the quota; one throttle lasts at most `quota_window_num` windows";
    quota_window_size_seconds: u32 = 1,
        "quota.window.size.seconds", Int, static, "`1`", at_least(1.0),
        "the window of client quotas, in seconds";
    admin_addr: SocketAddr = "127.0.0.1:9644".parse().expect("literal"),
        "admin.addr", Str, static, "`127.0.0.1:9644`", ANY,
        "the console (`/`), `/metrics`, `/healthz`, `/readyz` and the JSON endpoints of `docs/admin-api.json` (`/v1/overview`, `/v1/topics`, `/v1/groups`, `/v1/cluster`, `/v1/partitions`, `/v1/process`, ...)";
    admin_security_protocol: String = "PLAINTEXT".into(),
        "admin.security.protocol", Str, static, "`PLAINTEXT`", ANY,
        "`SSL`: the admin port speaks HTTPS only, with the broker's certificate, asking for client certificates as `ssl_client_auth` says";
    console_actions_enable: bool = false,
        "console.actions.enable", Bool, static, "`false` (read-only)", ANY,
        "let the console and the admin port's action endpoints change the cluster (create and delete topics, alter topic configs, cancel moves, reset group offsets, abort transactions), as the caller's principal (its client certificate's, else `User:ANONYMOUS`), authorized and audited as the Kafka APIs are";
    raft_addr: SocketAddr = "127.0.0.1:9093".parse().expect("literal"),
        "raft.addr", Str, static, "`127.0.0.1:9093`", ANY,
        "listener for the other nodes (metadata quorum)";
    advertised_raft_addr: Option<String> = None,
        "advertised.raft.addr", Str, static, "(`raft_addr`)", ANY,
        "`host:port` a learner (a node not in `voters`) gives the quorum for its raft port; a name where its IP changes (Kubernetes); required when `raft_addr` binds `0.0.0.0`";
    voters: Option<String> = None,
        "controller.quorum.voters", List, static, "this node alone", ANY,
        "metadata voters, `id@host:port,...` (an odd number); a node not listed joins as a learner";
    broker_session_timeout_ms: u64 = 3000,
        "broker.session.timeout.ms", Long, static, "`3000`", ANY,
        "a broker silent this long is fenced and its partitions move";
    broker_heartbeat_interval_ms: u64 = 500,
        "broker.heartbeat.interval.ms", Long, static, "`500`", at_least(1.0),
        "how often a broker heartbeats to the controller";
    replica_lag_time_max_ms: u64 = 10_000,
        "replica.lag.time.max.ms", Long, static, "`10000`", ANY,
        "a follower not caught up with its leader this long leaves the ISR";
    auto_leader_rebalance_enable: bool = true,
        "auto.leader.rebalance.enable", Bool, static, "`true`", ANY,
        "the controller hands leadership back to preferred replicas";
    leader_imbalance_check_interval_ms: u64 = 300_000,
        "leader.imbalance.check.interval.ms", Long, static, "`300000`", at_least(1.0),
        "how often it checks";
    auto_balance_enable: bool = false,
        "auto.balance.enable", Bool, static, "`false`", ANY,
        "the controller balances replicas and leaders on its own (as `strata cluster balance`), and moves the replicas of a broker down for `auto_balance_broker_down_ms`";
    auto_balance_interval_ms: u64 = 30_000,
        "auto.balance.interval.ms", Long, static, "`30000`", ANY,
        "how often it plans (one plan at a time, at most 10 moves per round)";
    auto_balance_broker_down_ms: u64 = 600_000,
        "auto.balance.broker.down.ms", Long, static, "`600000`", ANY,
        "a broker fenced this long counts as gone: its replicas are re-created elsewhere";
    leader_imbalance_per_broker_percentage: u32 = 10,
        "leader.imbalance.per.broker.percentage", Int, static, "`10`", at_most(100.0),
        "share of a broker's preferred partitions led elsewhere that triggers it";
    rack: Option<String> = None,
        "broker.rack", Str, static, "none", ANY,
        "rack id reported in Metadata; replicas of new partitions span racks when every broker sets one";
    replica_selector_class: Option<String> = None,
        "replica.selector.class", Str, static, "none", ANY,
        "`org.apache.kafka.common.replica.RackAwareReplicaSelector`: a consumer that names its rack (`client.rack`, or `strata_az=<zone>` in its client id) is sent to an in-sync replica in its zone (KIP-392); none: consumers read from leaders";
    cluster_id: String = "strata".into(),
        "cluster.id", Str, static, "`strata`", ANY,
        "cluster id reported to clients";
    auto_create_topics_enable: bool = true,
        "auto.create.topics.enable", Bool, static, "`true`", ANY,
        "create unknown topics on Metadata/Produce";
    num_partitions: u32 = 1,
        "num.partitions", Int, static, "`1`", at_least(1.0),
        "partitions of auto-created topics and of CreateTopics with `-1`";
    max_partitions_per_topic: u32 = 10_000,
        "max.partitions.per.topic", Int, static, "`10000`", ANY,
        "most partitions a topic may have; CreateTopics/CreatePartitions beyond it get `INVALID_PARTITIONS`";
    default_replication_factor: u16 = 1,
        "default.replication.factor", Short, static, "`1`", ANY,
        "replication factor when not given";
    max_request_bytes: u32 = 100 * 1024 * 1024,
        "socket.request.max.bytes", Int, static, "`104857600`", ANY,
        "largest request frame; larger frames close the connection";
    max_connections: usize = 10_000,
        "max.connections", Int, static, "`10000`", ANY,
        "concurrent Kafka connections";
    max_connections_per_ip: usize = 1000,
        "max.connections.per.ip", Int, static, "`1000`", at_least(1.0),
        "concurrent Kafka connections from one client address; more are closed at once";
    connections_max_idle_ms: u64 = 600_000,
        "connections.max.idle.ms", Long, static, "`600000`", at_least(1.0),
        "a connection with no request in flight and nothing received this long is closed";
    queued_max_request_bytes: u64 = 512 << 20,
        "queued.max.request.bytes", Long, static, "`536870912`", ANY,
        "bytes of requests held at once across all connections; past it the broker pauses reading (at least `max_request_bytes`)";
    socket_io_timeout_ms: u64 = 60_000,
        "socket.io.timeout.ms", Long, static, "`60000`", at_least(1.0),
        "a request must arrive whole, and a response be written whole, within this; else the connection is closed";
    log_segment_bytes: u64 = 1 << 30,
        "log.segment.bytes", Int, dynamic, "`1073741824`", between(1024.0, 2147483647.0),
        "default `segment.bytes`";
    log_segment_ms: i64 = 7 * 24 * 3600 * 1000,
        "log.roll.ms", Long, dynamic, "`604800000`", ANY,
        "default `segment.ms`";
    log_retention_ms: i64 = 7 * 24 * 3600 * 1000,
        "log.retention.ms", Long, dynamic, "`604800000`", ANY,
        "default `retention.ms` (-1: keep forever)";
    log_retention_bytes: i64 = -1,
        "log.retention.bytes", Long, dynamic, "`-1`", ANY,
        "default `retention.bytes`";
    log_flush_messages: i64 = i64::MAX,
        "log.flush.interval.messages", Long, dynamic, "`9223372036854775807`", ANY,
        "default `flush.messages` (see durability below)";
    log_flush_ms: i64 = i64::MAX,
        "log.flush.interval.ms", Long, dynamic, "`9223372036854775807`", ANY,
        "default `flush.ms`";
    log_index_interval_bytes: u64 = 4096,
        "log.index.interval.bytes", Int, dynamic, "`4096`", ANY,
        "default `index.interval.bytes`";
    min_insync_replicas: i32 = 1,
        "min.insync.replicas", Int, dynamic, "`1`", ANY,
        "default `min.insync.replicas`";
    log_retention_check_interval_ms: u64 = 30_000,
        "log.retention.check.interval.ms", Long, static, "`30000`", ANY,
        "how often retention (and offset expiry) runs";
    offsets_retention_minutes: i64 = 7 * 24 * 60,
        "offsets.retention.minutes", Int, static, "`10080`", ANY,
        "committed offsets of a group empty this long are deleted (-1: never)";
    offsets_topic_replication_factor: u16 = 3,
        "offsets.topic.replication.factor", Short, static, "`3`", at_least(1.0),
        "replicas of `__consumer_offsets` partitions (every broker of a smaller cluster)";
    transaction_state_log_replication_factor: u16 = 3,
        "transaction.state.log.replication.factor", Short, static, "`3`", at_least(1.0),
        "replicas of `__transaction_state` partitions (every broker of a smaller cluster)";
    transaction_state_log_min_isr: u16 = 2,
        "transaction.state.log.min.isr", Int, static, "`2`", at_least(1.0),
        "in-sync replicas a `__transaction_state` write needs (capped by the partition's replicas)";
    transaction_max_timeout_ms: u64 = 900_000,
        "transaction.max.timeout.ms", Int, static, "`900000`", between(1.0, 2147483647.0),
        "the longest `transaction.timeout.ms` a producer may ask for (`INVALID_TRANSACTION_TIMEOUT` beyond)";
    transaction_abort_timed_out_transaction_cleanup_interval_ms: u64 = 10_000,
        "transaction.abort.timed.out.transaction.cleanup.interval.ms", Int, static, "`10000`", at_least(1.0),
        "how often transactions past their timeout are aborted";
    #[serde(deserialize_with = "super::number_or_numeric_string")]
    group_initial_rebalance_delay_ms: Option<u64> = None,
        "group.initial.rebalance.delay.ms", Int, static, "`3000`", ANY,
        "the first rebalance of an empty group waits this long (and as long again after each newcomer, up to the rebalance timeout) so members starting together form one generation (0, Kafka's quick-start value, assigns a first consumer at once)";
    group_consumer_session_timeout_ms: u64 = 45_000,
        "group.consumer.session.timeout.ms", Int, static, "`45000`", ANY,
        "a consumer-protocol (KIP-848) member not heard from this long leaves its group";
    group_consumer_heartbeat_interval_ms: u64 = 5_000,
        "group.consumer.heartbeat.interval.ms", Int, static, "`5000`", at_least(1.0),
        "how often consumer-protocol members are told to heartbeat (must be below the session timeout)";
    group_share_session_timeout_ms: u64 = 45_000,
        "group.share.session.timeout.ms", Int, static, "`45000`", at_least(1.0),
        "a share group (KIP-932) member not heard from this long leaves its group";
    group_share_heartbeat_interval_ms: u64 = 5_000,
        "group.share.heartbeat.interval.ms", Int, static, "`5000`", at_least(1.0),
        "how often share group members heartbeat";
    group_share_record_lock_duration_ms: u64 = 30_000,
        "group.share.record.lock.duration.ms", Int, static, "`30000`", between(15000.0, 3600000.0),
        "how long a share group member holds the records it was handed; unacknowledged then, they go back to the group";
    group_share_delivery_count_limit: u32 = 5,
        "group.share.delivery.count.limit", Int, static, "`5`", between(2.0, 10.0),
        "deliveries after which a record no member acknowledged is archived as a dead letter instead of handed out again";
    group_share_partition_max_record_locks: u32 = 2000,
        "group.share.partition.max.record.locks", Int, static, "`2000`", between(100.0, 10000.0),
        "records of one share partition in flight (handed out, not yet acknowledged) past which no new record is handed out";
    errors_deadletterqueue_topic_name_prefix: String = "dlq.".into(),
        "errors.deadletterqueue.topic.name.prefix", Str, dynamic, "`dlq.`", ANY,
        "the prefix every share group's dead-letter topic (KIP-1191) must have; empty: any name not starting with `__`";
    errors_deadletterqueue_auto_create_topics_enable: bool = false,
        "errors.deadletterqueue.auto.create.topics.enable", Bool, dynamic, "`false`", ANY,
        "create a share group's dead-letter topic at its first dead letter if it does not exist (with `errors.deadletterqueue.group.enable=true`)";
    group_share_max_share_sessions: u32 = 2000,
        "group.share.max.share.sessions", Int, static, "`2000`", at_least(1.0),
        "share sessions a broker keeps; a new one past it replaces one idle for a lock duration, else is refused with SHARE_SESSION_LIMIT_REACHED";
    lag_sample_interval_ms: u64 = 5_000,
        "lag.sample.interval.ms", Long, static, "`5000`", ANY,
        "how often consumer lag (`strata_consumer_lag_*` on `/metrics`) is sampled";
    lag_window_ms: u64 = 60_000,
        "lag.window.ms", Long, static, "`60000`", ANY,
        "window of the lag trend (least-squares slope of the samples in it); at least `lag_sample_interval_ms`";
    client_telemetry_metrics: String = String::new(),
        "client.telemetry.metrics", List, static, "empty", ANY,
        "client telemetry (KIP-714): prefixes of the metric names clients push (`org.apache.kafka.producer.,org.apache.kafka.consumer.`; `*` for all), shown on `/metrics` as `strata_client_telemetry{client_id,client_instance_id,metric,attributes}` (at most 100 clients × 100 series); empty asks clients for nothing. One subscription for every client, where Kafka uses CLIENT_METRICS resources";
    client_telemetry_interval_ms: u64 = 300_000,
        "client.telemetry.interval.ms", Long, static, "`300000`", ANY,
        "how often clients push (Kafka's `interval.ms` of a subscription)";
    telemetry_max_bytes: u32 = 1_048_576,
        "telemetry.max.bytes", Int, static, "`1048576`", ANY,
        "the largest push accepted, compressed or not";
    message_max_bytes: u32 = 1_048_588,
        "message.max.bytes", Int, dynamic, "`1048588`", ANY,
        "default `max.message.bytes`";
    compression_type: String = "producer".into(),
        "compression.type", Str, dynamic, "`producer`", ANY,
        "default `compression.type`: `producer` stores batches as sent; `uncompressed`, `gzip`, `snappy`, `lz4` or `zstd` recompresses at append every batch under another codec";
    compression_gzip_level: i32 = -1,
        "compression.gzip.level", Int, dynamic, "`-1`", ANY,
        "default `compression.gzip.level` of topics (-1 or 1..9)";
    compression_lz4_level: i32 = 9,
        "compression.lz4.level", Int, dynamic, "`9`", ANY,
        "default `compression.lz4.level` of topics (1..17)";
    compression_zstd_level: i32 = 3,
        "compression.zstd.level", Int, dynamic, "`3`", ANY,
        "default `compression.zstd.level` of topics (-131072..22)";
    log_message_timestamp_type: String = "CreateTime".into(),
        "log.message.timestamp.type", Str, dynamic, "`CreateTime`", ANY,
        "default `message.timestamp.type`";
    log_cleanup_policy: String = "delete".into(),
        "log.cleanup.policy", List, dynamic, "`delete`", ANY,
        "default `cleanup.policy`";
    log_cleaner_enable: bool = true,
        "log.cleaner.enable", Bool, static, "`true`", ANY,
        "run the log cleaner (compaction of `cleanup.policy=compact` topics)";
    log_cleaner_backoff_ms: u64 = 15_000,
        "log.cleaner.backoff.ms", Long, static, "`15000`", ANY,
        "pause between cleaner passes when no log is dirty enough";
    log_cleaner_dedupe_buffer_size: u64 = 128 << 20,
        "log.cleaner.dedupe.buffer.size", Long, dynamic, "`134217728`", ANY,
        "memory for one clean's key map (32 bytes a key); bounds the dirty log one pass takes";
    log_cleaner_io_max_bytes_per_second: u64 = 0,
        "log.cleaner.io.max.bytes.per.second", Long, dynamic, "`0`", ANY,
        "cleaner reads plus writes per second (0: unbounded)";
    log_cleaner_delete_retention_ms: i64 = 86_400_000,
        "log.cleaner.delete.retention.ms", Long, dynamic, "`86400000`", ANY,
        "default `delete.retention.ms`";
    log_cleaner_min_cleanable_ratio: f64 = 0.5,
        "log.cleaner.min.cleanable.ratio", Double, dynamic, "`0.5`", between(0.0, 1.0),
        "default `min.cleanable.dirty.ratio`";
    log_cleaner_min_compaction_lag_ms: i64 = 0,
        "log.cleaner.min.compaction.lag.ms", Long, dynamic, "`0`", ANY,
        "default `min.compaction.lag.ms`";
    object_store: Option<String> = None,
        "object.store", Str, static, "`file://<data_dir>/objects`", ANY,
        "`s3://bucket/prefix`, `file:///path` or `memory://`";
    object_store_endpoint: Option<String> = None,
        "object.store.endpoint", Str, static, "none", ANY,
        "S3-compatible endpoint (MinIO); AWS S3 when unset";
    object_store_region: Option<String> = None,
        "object.store.region", Str, static, "`AWS_REGION`, else `us-east-1`", ANY,
        "bucket region";
    object_store_access_key_id: Option<String> = None,
        "object.store.access.key.id", Str, static, "none", ANY,
        "static S3 access key id; unset: `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/`AWS_SESSION_TOKEN`, else web identity (EKS IRSA: `AWS_WEB_IDENTITY_TOKEN_FILE`, `AWS_ROLE_ARN`), ECS container credentials, EKS Pod Identity, else EC2 instance metadata (IMDSv2)";
    object_store_secret_access_key: Option<String> = None,
        "object.store.secret.access.key", Password, static, "none", ANY,
        "the static S3 secret key of `object_store_access_key_id`";
    object_store_allow_http: bool = false,
        "object.store.allow.http", Bool, static, "`false`", ANY,
        "allow an `http://` endpoint";
    object_store_virtual_hosted_style: bool = false,
        "object.store.virtual.hosted.style", Bool, static, "`false`", ANY,
        "`bucket.host/key` addressing instead of path style";
    object_store_request_timeout_ms: u64 = 30_000,
        "object.store.request.timeout.ms", Long, static, "`30000`", ANY,
        "bound on one request";
    object_store_max_retries: usize = 5,
        "object.store.max.retries", Int, static, "`5`", ANY,
        "retries of a failed request, jittered exponential backoff";
    object_store_retry_timeout_ms: u64 = 60_000,
        "object.store.retry.timeout.ms", Long, static, "`60000`", ANY,
        "no retry starts after this long";
    remote_storage_enable: bool = true,
        "log.remote.storage.enable", Bool, static, "`true`", ANY,
        "default `remote.storage.enable` (compacted topics are never tiered)";
    log_local_retention_ms: i64 = -2,
        "log.local.retention.ms", Long, dynamic, "`-2`", ANY,
        "default `local.retention.ms` (-2: as `retention.ms`)";
    log_local_retention_bytes: i64 = -2,
        "log.local.retention.bytes", Long, dynamic, "`-2`", ANY,
        "default `local.retention.bytes` (-2: as `retention.bytes`)";
    remote_log_manager_task_interval_ms: u64 = 1_000,
        "remote.log.manager.task.interval.ms", Long, static, "`1000`", ANY,
        "how often segments are offloaded and remote retention runs";
    remote_log_upload_concurrency: usize = 4,
        "remote.log.upload.concurrency", Int, static, "`4`", at_least(1.0),
        "segments uploaded at once (a partition's in order)";
    remote_log_upload_max_bytes_per_second: u64 = 0,
        "remote.log.manager.copy.max.bytes.per.second", Long, dynamic, "`0`", ANY,
        "upload bandwidth bound (0: none)";
    iceberg_warehouse: String = "iceberg".into(),
        "iceberg.warehouse", Str, static, "`iceberg`", ANY,
        "object store key prefix of the Iceberg tables of topics with `iceberg.mode` set: `<prefix>/strata/<topic>-<topic id>/`";
    iceberg_target_lag_ms: i64 = 60_000,
        "iceberg.target.lag.ms", Long, dynamic, "`60000`", at_least(1000.0),
        "default `iceberg.target.lag.ms`";
    iceberg_target_file_bytes: u64 = 128 << 20,
        "iceberg.target.file.bytes", Long, static, "`134217728`", at_least(1048576.0),
        "Parquet data files are closed at about this size (one open file per hour of timestamps a round meets, each held in memory until closed)";
    iceberg_snapshot_max_age_ms: u64 = 86_400_000,
        "iceberg.snapshot.max.age.ms", Long, static, "`86400000`", at_least(1000.0),
        "table snapshots older than this are expired (the current one never)";
    replica_move_max_bytes_per_second: u64 = 0,
        "replica.move.max.bytes.per.second", Long, dynamic, "`0`", ANY,
        "bytes per second all replicas being added to this broker may fetch together (0: no bound); in-sync replication is never held back by it";
    replica_alter_log_dirs_io_max_bytes_per_second: u64 = 0,
        "replica.alter.log.dirs.io.max.bytes.per.second", Long, dynamic, "`0`", ANY,
        "bytes per second replicas moving between this broker's log directories (AlterReplicaLogDirs) are copied at, all together (0: no bound)";
    max_incremental_fetch_session_cache_slots: usize = 1000,
        "max.incremental.fetch.session.cache.slots", Int, static, "`1000`", ANY,
        "incremental fetch sessions (KIP-227) kept at once, for consumers that use them (kafka-python, the Java client) and followers; followers' sessions outrank consumers' when the cache is full (0: none, every fetch answered in full)";
    max_open_segment_files: usize = 0,
        "max.open.segment.files", Int, static, "`0`", ANY,
        "segment files held open at once; a segment past it is reopened when next used (`strata_segment_file_reopens_total`). 0: half the open-file limit, which `strata serve` raises to the hard limit at start";
    remote_log_orphan_grace_ms: u64 = 600_000,
        "remote.log.orphan.grace.ms", Long, static, "`600000`", ANY,
        "objects no record names are deleted once this old (crash mid-upload)";
    remote_cache_block_bytes: u64 = 1 << 20,
        "remote.cache.block.bytes", Long, static, "`1048576`", at_least(4096.0),
        "block size of the remote read cache (one GET each)";
    remote_cache_memory_bytes: u64 = 256 << 20,
        "remote.cache.memory.bytes", Long, static, "`268435456`", ANY,
        "RAM of the cache for reads near the tail of the remote log";
    remote_cache_disk_bytes: u64 = 2 << 30,
        "remote.cache.disk.bytes", Long, static, "`2147483648`", ANY,
        "disk (`<data_dir>/cache`) of the cache for reads near the tail of the remote log";
    remote_cache_replay_memory_bytes: u64 = 64 << 20,
        "remote.cache.replay.memory.bytes", Long, static, "`67108864`", ANY,
        "RAM of the cache for older history, so a replay cannot evict the recent blocks";
    remote_cache_replay_disk_bytes: u64 = 2 << 30,
        "remote.cache.replay.disk.bytes", Long, static, "`2147483648`", ANY,
        "disk of the cache for older history";
    remote_cache_readahead_blocks: usize = 8,
        "remote.cache.readahead.blocks", Int, static, "`8`", ANY,
        "blocks read ahead after each remote read";
    remote_fetch_max_concurrent_gets: usize = 16,
        "remote.fetch.max.concurrent.gets", Int, static, "`16`", ANY,
        "GETs in flight for remote reads";
    remote_io_threads: usize = 2,
        "remote.io.threads", Int, static, "`2`", ANY,
        "threads of the tier's runtime (uploads, remote reads, the cache), run at nice 10";
}
