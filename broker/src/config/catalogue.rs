//! Every broker setting under the name Kafka gives it (or, for a setting Kafka lacks, the
//! setting's own key with dots), its type, whether it may change while the broker runs, and
//! the documentation DescribeConfigs returns.
//!
//! Invariant (checked by a test): every key of [`super::BrokerConfig`] is listed exactly once,
//! and no two settings share a name.

use super::BrokerConfig;

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
    pub doc: &'static str,
}

macro_rules! settings {
    ($($key:ident $name:literal $kind:ident $dynamic:ident $doc:literal,)*) => {
        &[$(Setting {
            key: stringify!($key),
            name: $name,
            kind: Kind::$kind,
            dynamic: settings!(@$dynamic),
            doc: $doc,
        },)*]
    };
    (@dynamic) => { true };
    (@static) => { false };
}

pub const SETTINGS: &[Setting] = settings![
    node_id "node.id" Int static "This broker's id.",
    data_dir "data.dir" Str static "Directory of the metadata quorum, the default object store, the remote read cache, and of the partition logs when log.dirs is unset.",
    log_dirs "log.dirs" List static "Directories the partition logs are spread over, one per disk (JBOD); unset: data.dir.",
    kafka_addr "kafka.addr" Str static "The Kafka listener when `listeners` is unset.",
    advertised_kafka_addr "advertised.kafka.addr" Str static "Address given to clients in Metadata when `listeners` is unset (default: the bound address).",
    listeners "listeners" List static "Kafka listeners, NAME://host:port,...",
    advertised_listeners "advertised.listeners" List static "What Metadata tells clients of each listener, NAME://host:port,...",
    listener_security_protocol_map "listener.security.protocol.map" List static "NAME:PROTOCOL,... for listeners not named after their protocol.",
    inter_broker_listener_name "inter.broker.listener.name" Str static "The listener other brokers reach this one on (default: the first).",
    sasl_enabled_mechanisms "sasl.enabled.mechanisms" List static "Mechanisms offered on SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER.",
    sasl_oauthbearer_jwks_endpoint_url "sasl.oauthbearer.jwks.endpoint.url" Str static "OAUTHBEARER: the JSON Web Key Set tokens are verified with (file:///path or https://...).",
    sasl_oauthbearer_jwks_endpoint_refresh_ms "sasl.oauthbearer.jwks.endpoint.refresh.ms" Long static "How often the key set is read again.",
    sasl_oauthbearer_expected_issuer "sasl.oauthbearer.expected.issuer" Str static "The iss tokens must carry (unset: any).",
    sasl_oauthbearer_expected_audience "sasl.oauthbearer.expected.audience" List static "Audiences a token's aud must name one of (unset: any).",
    sasl_oauthbearer_sub_claim_name "sasl.oauthbearer.sub.claim.name" Str static "The claim naming the principal.",
    sasl_oauthbearer_clock_skew_seconds "sasl.oauthbearer.clock.skew.seconds" Int static "Leeway on exp and nbf.",
    sasl_plain_users_file "sasl.plain.users.file" Str static "PLAIN's users, user:password per line; unset, PLAIN checks SCRAM credentials.",
    connections_max_reauth_ms "connections.max.reauth.ms" Long static "SASL sessions end after this and the client re-authenticates (KIP-368); 0: never.",
    ssl_certificate_location "ssl.certificate.location" Str static "PEM certificate chain of TLS listeners (reloaded when it changes).",
    ssl_key_location "ssl.key.location" Str static "PEM private key of TLS listeners (reloaded when it changes).",
    ssl_ca_location "ssl.ca.location" Str static "PEM CA certificates that sign client certificates.",
    ssl_client_auth "ssl.client.auth" Str static "Client certificates on SSL listeners: none, requested or required.",
    ssl_principal_mapping_rules "ssl.principal.mapping.rules" Str static "Rules from a client certificate's subject to its principal name.",
    ssl_enabled_protocols "ssl.enabled.protocols" List static "TLS versions spoken: TLSv1.2, TLSv1.3.",
    sasl_mechanism_inter_broker_protocol "sasl.mechanism.inter.broker.protocol" Str static "How brokers authenticate to each other on a SASL inter-broker listener.",
    inter_broker_sasl_username "inter.broker.sasl.username" Str static "The user brokers authenticate to each other as.",
    inter_broker_sasl_password "inter.broker.sasl.password" Password static "That user's password.",
    raft_security_protocol "raft.security.protocol" Str static "The raft port: PLAINTEXT, or SSL for mutual TLS.",
    authorizer_enable "authorizer.enable" Bool static "Check every request against the ACLs.",
    super_users "super.users" Str static "Principals allowed everything, User:a;User:b.",
    allow_everyone_if_no_acl_found "allow.everyone.if.no.acl.found" Bool static "With the authorizer: a resource no ACL names is open to all (else to super users only).",
    audit_log "audit.log" Str static "The audit log: a file (relative: in log.dirs) or stdout; unset: off.",
    quota_window_num "quota.window.num" Int static "Client quotas allow a burst of this many windows minus one.",
    quota_window_size_seconds "quota.window.size.seconds" Int static "The window of client quotas, in seconds.",
    admin_addr "admin.addr" Str static "The admin HTTP listener: /metrics, /healthz, /readyz, /v1/...",
    admin_security_protocol "admin.security.protocol" Str static "The admin port: PLAINTEXT, or SSL for HTTPS.",
    raft_addr "raft.addr" Str static "Listener for the other nodes (the metadata quorum).",
    advertised_raft_addr "advertised.raft.addr" Str static "host:port a learner gives the quorum for its raft port.",
    voters "controller.quorum.voters" List static "Metadata voters, id@host:port,...; unset: this node alone.",
    broker_session_timeout_ms "broker.session.timeout.ms" Long static "A broker silent this long is fenced and its partitions move.",
    broker_heartbeat_interval_ms "broker.heartbeat.interval.ms" Long static "How often a broker heartbeats to the controller.",
    replica_lag_time_max_ms "replica.lag.time.max.ms" Long static "A follower not caught up with its leader this long leaves the ISR.",
    auto_leader_rebalance_enable "auto.leader.rebalance.enable" Bool static "The controller hands leadership back to preferred replicas.",
    leader_imbalance_check_interval_ms "leader.imbalance.check.interval.ms" Long static "How often the controller checks leader imbalance.",
    auto_balance_enable "auto.balance.enable" Bool static "The controller balances replicas and leaders on its own.",
    auto_balance_interval_ms "auto.balance.interval.ms" Long static "How often the automatic balancer plans.",
    auto_balance_broker_down_ms "auto.balance.broker.down.ms" Long static "A broker fenced this long counts as gone: its replicas are re-created elsewhere.",
    leader_imbalance_per_broker_percentage "leader.imbalance.per.broker.percentage" Int static "Share of a broker's preferred partitions led elsewhere that triggers a rebalance.",
    rack "broker.rack" Str static "Rack id reported in Metadata; replicas span racks.",
    cluster_id "cluster.id" Str static "Cluster id reported to clients.",
    auto_create_topics_enable "auto.create.topics.enable" Bool static "Create unknown topics on Metadata and Produce.",
    num_partitions "num.partitions" Int static "Partitions of auto-created topics and of CreateTopics with -1.",
    max_partitions_per_topic "max.partitions.per.topic" Int static "Most partitions one topic may have.",
    default_replication_factor "default.replication.factor" Short static "Replication factor when not given.",
    max_request_bytes "socket.request.max.bytes" Int static "Largest request frame; a larger one closes the connection.",
    max_connections "max.connections" Int static "Concurrent Kafka connections.",
    max_connections_per_ip "max.connections.per.ip" Int static "Concurrent Kafka connections from one client address.",
    connections_max_idle_ms "connections.max.idle.ms" Long static "A connection idle this long is closed.",
    queued_max_request_bytes "queued.max.request.bytes" Long static "Bytes of requests held at once across all connections.",
    socket_io_timeout_ms "socket.io.timeout.ms" Long static "A request must arrive whole, and a response be written whole, within this.",
    log_segment_bytes "log.segment.bytes" Int dynamic "Default segment.bytes of topics.",
    log_segment_ms "log.roll.ms" Long dynamic "Default segment.ms of topics.",
    log_retention_ms "log.retention.ms" Long dynamic "Default retention.ms of topics (-1: keep forever).",
    log_retention_bytes "log.retention.bytes" Long dynamic "Default retention.bytes of topics (-1: no bound).",
    log_flush_messages "log.flush.interval.messages" Long dynamic "Default flush.messages of topics.",
    log_flush_ms "log.flush.interval.ms" Long dynamic "Default flush.ms of topics.",
    log_index_interval_bytes "log.index.interval.bytes" Int dynamic "Default index.interval.bytes of topics.",
    min_insync_replicas "min.insync.replicas" Int dynamic "Default min.insync.replicas of topics: the ISR size below which acks=all produce is refused.",
    log_retention_check_interval_ms "log.retention.check.interval.ms" Long static "How often retention (and offset expiry) runs.",
    offsets_retention_minutes "offsets.retention.minutes" Int static "Committed offsets of a group empty this long are deleted (-1: never).",
    offsets_topic_replication_factor "offsets.topic.replication.factor" Short static "Replicas of __consumer_offsets partitions (every broker of a smaller cluster).",
    transaction_state_log_replication_factor "transaction.state.log.replication.factor" Short static "Replicas of __transaction_state partitions (every broker of a smaller cluster).",
    transaction_state_log_min_isr "transaction.state.log.min.isr" Int static "In-sync replicas a __transaction_state write needs.",
    transaction_max_timeout_ms "transaction.max.timeout.ms" Int static "The longest transaction.timeout.ms a producer may ask for.",
    transaction_abort_timed_out_transaction_cleanup_interval_ms "transaction.abort.timed.out.transaction.cleanup.interval.ms" Int static "How often transactions past their timeout are aborted.",
    group_initial_rebalance_delay_ms "group.initial.rebalance.delay.ms" Int static "The first rebalance of an empty group waits this long for more members (Kafka's default 3000).",
    group_consumer_session_timeout_ms "group.consumer.session.timeout.ms" Int static "A consumer-protocol (KIP-848) member silent this long leaves its group.",
    group_consumer_heartbeat_interval_ms "group.consumer.heartbeat.interval.ms" Int static "How often consumer-protocol (KIP-848) members heartbeat.",
    lag_sample_interval_ms "lag.sample.interval.ms" Long static "How often consumer lag is sampled.",
    lag_window_ms "lag.window.ms" Long static "Window of the consumer lag trend.",
    client_telemetry_metrics "client.telemetry.metrics" List static "Client telemetry (KIP-714): prefixes of the metrics clients are asked to push (*: all; empty: none).",
    client_telemetry_interval_ms "client.telemetry.interval.ms" Long static "How often clients push their metrics (KIP-714).",
    telemetry_max_bytes "telemetry.max.bytes" Int static "The largest client telemetry push accepted (KIP-714).",
    message_max_bytes "message.max.bytes" Int dynamic "Default max.message.bytes of topics.",
    compression_type "compression.type" Str dynamic "Default compression.type of topics: producer, uncompressed, gzip, snappy, lz4, zstd.",
    compression_gzip_level "compression.gzip.level" Int dynamic "Default compression.gzip.level (-1 or 1..9).",
    compression_lz4_level "compression.lz4.level" Int dynamic "Default compression.lz4.level (1..17).",
    compression_zstd_level "compression.zstd.level" Int dynamic "Default compression.zstd.level (-131072..22).",
    log_message_timestamp_type "log.message.timestamp.type" Str dynamic "Default message.timestamp.type of topics: CreateTime or LogAppendTime.",
    log_cleanup_policy "log.cleanup.policy" List dynamic "Default cleanup.policy of topics: delete, compact or both.",
    log_cleaner_enable "log.cleaner.enable" Bool static "Run the log cleaner (compaction).",
    log_cleaner_backoff_ms "log.cleaner.backoff.ms" Long static "Pause between cleaner passes when no log is dirty enough.",
    log_cleaner_dedupe_buffer_size "log.cleaner.dedupe.buffer.size" Long dynamic "Memory for one clean's key map; bounds the dirty log one pass takes.",
    log_cleaner_io_max_bytes_per_second "log.cleaner.io.max.bytes.per.second" Long dynamic "Cleaner reads plus writes per second (0: unbounded).",
    log_cleaner_delete_retention_ms "log.cleaner.delete.retention.ms" Long dynamic "Default delete.retention.ms of topics.",
    log_cleaner_min_cleanable_ratio "log.cleaner.min.cleanable.ratio" Double dynamic "Default min.cleanable.dirty.ratio of topics.",
    log_cleaner_min_compaction_lag_ms "log.cleaner.min.compaction.lag.ms" Long dynamic "Default min.compaction.lag.ms of topics.",
    object_store "object.store" Str static "Where closed segments go: s3://bucket/prefix, file:///path or memory://.",
    object_store_endpoint "object.store.endpoint" Str static "S3-compatible endpoint (MinIO); AWS S3 when unset.",
    object_store_region "object.store.region" Str static "Bucket region.",
    object_store_access_key_id "object.store.access.key.id" Str static "Static S3 access key id; unset: the AWS credential chain.",
    object_store_secret_access_key "object.store.secret.access.key" Password static "Static S3 secret key.",
    object_store_allow_http "object.store.allow.http" Bool static "Allow an http:// endpoint.",
    object_store_virtual_hosted_style "object.store.virtual.hosted.style" Bool static "bucket.host/key addressing instead of path style.",
    object_store_request_timeout_ms "object.store.request.timeout.ms" Long static "Bound on one object store request.",
    object_store_max_retries "object.store.max.retries" Int static "Retries of a failed object store request.",
    object_store_retry_timeout_ms "object.store.retry.timeout.ms" Long static "No retry starts after this long.",
    remote_storage_enable "log.remote.storage.enable" Bool static "Default remote.storage.enable of topics.",
    log_local_retention_ms "log.local.retention.ms" Long dynamic "Default local.retention.ms of topics (-2: as retention.ms).",
    log_local_retention_bytes "log.local.retention.bytes" Long dynamic "Default local.retention.bytes of topics (-2: as retention.bytes).",
    remote_log_manager_task_interval_ms "remote.log.manager.task.interval.ms" Long static "How often segments are offloaded and remote retention runs.",
    remote_log_upload_concurrency "remote.log.upload.concurrency" Int static "Segments uploaded at once.",
    remote_log_upload_max_bytes_per_second "remote.log.manager.copy.max.bytes.per.second" Long dynamic "Upload bandwidth bound (0: none).",
    replica_move_max_bytes_per_second "replica.move.max.bytes.per.second" Long dynamic "Bytes per second all replicas being added to this broker may fetch together (0: no bound).",
    replica_alter_log_dirs_io_max_bytes_per_second "replica.alter.log.dirs.io.max.bytes.per.second" Long dynamic "Bytes per second replicas moving between this broker's log directories are copied at, together (0: no bound).",
    max_incremental_fetch_session_cache_slots "max.incremental.fetch.session.cache.slots" Int static "Incremental fetch sessions kept at once.",
    max_open_segment_files "max.open.segment.files" Int static "Segment files held open at once (0: half the open-file limit).",
    remote_log_orphan_grace_ms "remote.log.orphan.grace.ms" Long static "Objects no record names are deleted once this old.",
    remote_cache_block_bytes "remote.cache.block.bytes" Long static "Block size of the remote read cache.",
    remote_cache_memory_bytes "remote.cache.memory.bytes" Long static "RAM of the cache for reads near the tail of the remote log.",
    remote_cache_disk_bytes "remote.cache.disk.bytes" Long static "Disk of the cache for reads near the tail of the remote log.",
    remote_cache_replay_memory_bytes "remote.cache.replay.memory.bytes" Long static "RAM of the cache for history replays.",
    remote_cache_replay_disk_bytes "remote.cache.replay.disk.bytes" Long static "Disk of the cache for history replays.",
    remote_cache_readahead_blocks "remote.cache.readahead.blocks" Int static "Blocks read ahead after each remote read.",
    remote_fetch_max_concurrent_gets "remote.fetch.max.concurrent.gets" Int static "GETs in flight for remote reads.",
    remote_io_threads "remote.io.threads" Int static "Threads of the tier's runtime.",
];

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
