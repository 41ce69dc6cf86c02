//! Several `strata serve` processes forming one cluster on loopback.
//!
//! Every member gets fixed Kafka, admin and raft ports (picked free at creation), so a killed
//! and restarted member comes back on the addresses its peers and clients know. The first
//! `voters` members are the metadata voters; the others join as learners.

use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::broker::{Broker, BrokerOpts};
use crate::netsplit::NetSplit;
use crate::util::{wait_for, wait_for_some};

/// A free loopback port: bound, then released for the broker to take. Picked at random
/// below Linux's ephemeral range (32768–60999), where the port-0 listeners of other tests
/// never land, and never handed out twice by this process (tests run in parallel threads).
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Mutex;
    static SEED: AtomicU64 = AtomicU64::new(0);
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut rng = crate::util::Rng::new(
        SEED.fetch_add(1, Ordering::Relaxed)
            ^ (u64::from(std::process::id()) << 20)
            ^ crate::util::now_ms() as u64,
    );
    loop {
        let port = 20000 + rng.below(12000) as u16;
        let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
        if given.contains(&port) {
            continue;
        }
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.push(port);
            return port;
        }
    }
}

/// A cluster of real broker processes.
pub struct Cluster {
    /// Member `i` has node id `i + 1`.
    pub nodes: Vec<Broker>,
    kafka: Vec<String>,
    /// What a member added later is started with.
    voter_list: String,
    env: Vec<(String, String)>,
}

/// Failure detection and ISR shrinks in seconds rather than Kafka's defaults, so fault tests
/// do not wait out production timeouts: 200 ms heartbeats, a 1.5 s session, 2 s of lag.
pub const FAST: &[(&str, &str)] = &[
    ("STRATA_BROKER_HEARTBEAT_INTERVAL_MS", "200"),
    ("STRATA_BROKER_SESSION_TIMEOUT_MS", "1500"),
    ("STRATA_REPLICA_LAG_TIME_MAX_MS", "2000"),
];

/// How long a cluster may take to agree on something after a change.
pub const CLUSTER_TIMEOUT: Duration = Duration::from_secs(30);

impl Cluster {
    /// Starts `n` members, the first `voters` of them voters, all with `env` (`STRATA_*`
    /// settings), launched together and then waited for.
    pub fn start(n: usize, voters: usize, env: &[(&str, &str)]) -> Cluster {
        Self::start_with(n, voters, env, None, None, &[])
    }

    /// Like [`Cluster::start_splittable`], member `i` in zone `zones[i]` (its `rack`): one
    /// member per zone, as a cluster spread over a region's availability zones.
    pub fn start_in_zones(zones: &[&str], env: &[(&str, &str)]) -> (Cluster, NetSplit) {
        let split = NetSplit::new(zones.len());
        let cluster = Self::start_with(zones.len(), zones.len(), env, None, Some(&split), zones);
        (cluster, split)
    }

    /// Like [`Cluster::start`] with every member a voter, but the members reach each other
    /// (raft and replication) only through a [`NetSplit`], which can cut them apart. Clients
    /// bootstrap through the proxies too, and are never cut off.
    pub fn start_splittable(n: usize, env: &[(&str, &str)]) -> (Cluster, NetSplit) {
        let split = NetSplit::new(n);
        let cluster = Self::start_with(n, n, env, None, Some(&split), &[]);
        (cluster, split)
    }

    /// Like [`Cluster::start`], but member `first` starts alone and is seen waiting for a
    /// quorum before the others are launched: members may start in any order.
    pub fn start_first(n: usize, voters: usize, env: &[(&str, &str)], first: u64) -> Cluster {
        Self::start_with(n, voters, env, Some(first), None, &[])
    }

    fn start_with(
        n: usize,
        voters: usize,
        env: &[(&str, &str)],
        first: Option<u64>,
        split: Option<&NetSplit>,
        zones: &[&str],
    ) -> Cluster {
        assert!(voters >= 1 && voters <= n);
        let addrs: Vec<(String, String, String)> = (0..n)
            .map(|_| {
                (
                    format!("127.0.0.1:{}", free_port()),
                    format!("127.0.0.1:{}", free_port()),
                    format!("127.0.0.1:{}", free_port()),
                )
            })
            .collect();
        if let Some(split) = split {
            for (i, (kafka, _, raft)) in addrs.iter().enumerate() {
                split.route(i as u64 + 1, kafka, raft);
            }
        }
        // The addresses members and clients know: the proxies' when split.
        let known = |i: usize| match split {
            Some(s) => s.proxied[i].clone(),
            None => (addrs[i].0.clone(), addrs[i].2.clone()),
        };
        let voter_list = (0..voters)
            .map(|i| format!("{}@{}", i + 1, known(i).1))
            .collect::<Vec<_>>()
            .join(",");
        let opts = |i: usize| {
            let (kafka, admin, raft) = &addrs[i];
            let mut opts = BrokerOpts::new().member(i as u64 + 1, kafka, admin, raft, &voter_list);
            if split.is_some() {
                opts = opts.advertised_kafka_addr(&known(i).0);
            }
            for (k, v) in env {
                opts = opts.env(k, v);
            }
            if let Some(zone) = zones.get(i) {
                opts = opts.env("STRATA_RACK", zone);
            }
            opts
        };
        let mut slots: Vec<Option<Broker>> = (0..n).map(|_| None).collect();
        if let Some(first) = first {
            let i = first as usize - 1;
            let alone = Broker::launch(opts(i));
            wait_for(
                "the first member to wait for a quorum",
                CLUSTER_TIMEOUT,
                || alone.output().contains("waiting for a quorum"),
            );
            slots[i] = Some(alone);
        }
        for (i, slot) in slots.iter_mut().enumerate() {
            if slot.is_none() {
                *slot = Some(Broker::launch(opts(i)));
            }
        }
        let mut nodes: Vec<Broker> = slots.into_iter().flatten().collect();
        for n in &mut nodes {
            n.wait_ready();
        }
        Cluster {
            kafka: (0..n).map(|i| known(i).0).collect(),
            nodes,
            voter_list,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    /// Starts one more member (the next node id) as a learner with the cluster's settings,
    /// as an operator adds a broker, and waits until it is ready; returns its node id.
    pub fn add_member(&mut self) -> u64 {
        self.add_member_with(&format!("127.0.0.1:{}", free_port()), &[])
    }

    /// [`Cluster::add_member`] with its raft port bound at `raft` and `env` on top of the
    /// cluster's settings.
    pub fn add_member_with(&mut self, raft: &str, env: &[(&str, String)]) -> u64 {
        let id = self.nodes.len() as u64 + 1;
        let kafka = format!("127.0.0.1:{}", free_port());
        let admin = format!("127.0.0.1:{}", free_port());
        let mut opts = BrokerOpts::new().member(id, &kafka, &admin, raft, &self.voter_list);
        for (k, v) in &self.env {
            opts = opts.env(k, v);
        }
        for (k, v) in env {
            opts = opts.env(k, v);
        }
        let mut broker = Broker::launch(opts);
        broker.wait_ready();
        self.nodes.push(broker);
        self.kafka.push(kafka);
        id
    }

    /// Every member's Kafka address, comma-separated: a bootstrap list.
    pub fn bootstrap(&self) -> String {
        self.kafka.join(",")
    }

    /// Member with node id `id`.
    pub fn node(&mut self, id: u64) -> &mut Broker {
        &mut self.nodes[id as usize - 1]
    }

    /// Member with node id `id`, shared (to read from while polling).
    pub fn member(&self, id: u64) -> &Broker {
        &self.nodes[id as usize - 1]
    }

    /// The controller as the running members agree on it: every running member reporting
    /// itself active (`strata_active_controller`) must be the same one, and exactly one.
    pub fn controller(&mut self) -> Option<u64> {
        let mut active = Vec::new();
        for n in &mut self.nodes {
            if n.is_running() && n.metric("strata_active_controller") == 1.0 {
                active.push(n.node_id());
            }
        }
        (active.len() == 1).then(|| active[0])
    }

    /// Waits until exactly one running member is the active controller, and returns it.
    pub fn wait_controller(&mut self) -> u64 {
        wait_for_some("exactly one active controller", CLUSTER_TIMEOUT, || {
            self.controller()
        })
    }

    /// `config` (one of a member's client configs) bootstrapping from every member.
    pub fn with_bootstrap(&self, mut config: ClientConfig) -> ClientConfig {
        config.set("bootstrap.servers", self.bootstrap());
        config
    }

    /// A member's producer config (acks=all) bootstrapping from every member.
    pub fn producer_config(&mut self) -> ClientConfig {
        let base = self.any_running().producer_config();
        self.with_bootstrap(base)
    }

    /// A member's assign-only consumer config bootstrapping from every member.
    pub fn consumer_config(&mut self) -> ClientConfig {
        let base = self.any_running().consumer_config();
        self.with_bootstrap(base)
    }

    /// A running member, to take client configs from.
    pub fn any_running(&mut self) -> &mut Broker {
        self.nodes
            .iter_mut()
            .find_map(|n| n.is_running().then_some(n))
            .expect("a running member")
    }

    /// The leader of every partition of `topic`, as a client sees it in Metadata (`None`:
    /// offline or unknown).
    pub fn leaders(&mut self, topic: &str) -> Vec<Option<u64>> {
        let base = self.any_running().client_config();
        let config = self.with_bootstrap(base);
        let consumer: BaseConsumer = config.create().expect("metadata client");
        let Ok(md) = consumer.fetch_metadata(Some(topic), Duration::from_secs(5)) else {
            return Vec::new();
        };
        let Some(t) = md.topics().iter().find(|t| t.name() == topic) else {
            return Vec::new();
        };
        let mut parts: Vec<_> = t.partitions().iter().collect();
        parts.sort_by_key(|p| p.id());
        parts
            .iter()
            .map(|p| (p.error().is_none() && p.leader() >= 0).then(|| p.leader() as u64))
            .collect()
    }

    /// The replicas of every partition of `topic`, as a client sees them in Metadata.
    pub fn replicas(&mut self, topic: &str) -> Vec<Vec<u64>> {
        let base = self.any_running().client_config();
        let config = self.with_bootstrap(base);
        let consumer: BaseConsumer = config.create().expect("metadata client");
        let Ok(md) = consumer.fetch_metadata(Some(topic), Duration::from_secs(5)) else {
            return Vec::new();
        };
        let Some(t) = md.topics().iter().find(|t| t.name() == topic) else {
            return Vec::new();
        };
        let mut parts: Vec<_> = t.partitions().iter().collect();
        parts.sort_by_key(|p| p.id());
        parts
            .iter()
            .map(|p| p.replicas().iter().map(|r| *r as u64).collect())
            .collect()
    }

    /// Creates `topic` with `replication` (a factor, or explicit replica lists) and topic
    /// `configs` (`min.insync.replicas`, ...), through a running member, then waits until
    /// every running member sees all its partitions healthy (full ISR).
    pub fn create_replicated_topic(
        &mut self,
        topic: &str,
        partitions: i32,
        replication: rdkafka::admin::TopicReplication<'_>,
        configs: &[(&str, &str)],
    ) {
        use rdkafka::admin::{AdminOptions, NewTopic};
        let admin = self.any_running().admin();
        let mut t = NewTopic::new(topic, partitions, replication);
        for (k, v) in configs {
            t = t.set(k, v);
        }
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
        crate::block_on(admin.create_topics([&t], &opts)).expect("CreateTopics")[0]
            .clone()
            .expect("topic created");
        self.wait_topic_healthy(topic);
    }

    /// The state (`offline`, `under_replicated`) of partition 0 of `topic` in member `via`'s
    /// `/v1/cluster` view, with its leader; `None` when it is healthy (not listed) or the
    /// member does not answer.
    pub fn unhealthy(&mut self, via: u64, topic: &str) -> Option<(String, Option<u64>)> {
        let body = self.node(via).admin_get("/v1/cluster").ok()?.body;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        let p = v["unhealthy"]
            .as_array()?
            .iter()
            .find(|p| p["topic"] == topic && p["partition"] == 0)?
            .clone();
        Some((p["state"].as_str()?.to_string(), p["leader"].as_u64()))
    }

    /// Waits until every running member sees every partition of `topic` healthy (full ISR).
    pub fn wait_topic_healthy(&mut self, topic: &str) {
        let t = topic.to_string();
        self.wait_all("a full ISR everywhere", move |v| {
            v["unhealthy"]
                .as_array()
                .is_some_and(|u| u.iter().all(|p| p["topic"] != t.as_str()))
        });
    }

    /// Waits until every running member sees `pred` hold on its `/v1/cluster` view.
    pub fn wait_all(&mut self, what: &str, pred: impl Fn(&serde_json::Value) -> bool) {
        wait_for(what, CLUSTER_TIMEOUT, || {
            self.nodes.iter_mut().all(|n| {
                !n.is_running()
                    || n.admin_get("/v1/cluster")
                        .ok()
                        .and_then(|r| serde_json::from_str::<serde_json::Value>(&r.body).ok())
                        .is_some_and(|v| pred(&v))
            })
        });
    }
}
