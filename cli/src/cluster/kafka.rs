//! The Kafka requests the reassignment commands send, which librdkafka does not offer:
//! Metadata with racks, AlterPartitionReassignments, ListPartitionReassignments,
//! DescribeLogDirs, ListOffsets for the local log start, UnregisterBroker. Spoken with the
//! broker's own client framing (bounded in time and response size).

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};
use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, BrokerId, DescribeLogDirsRequest, FindCoordinatorRequest,
    ListOffsetsRequest, ListPartitionReassignmentsRequest, MetadataRequest, TopicName,
    UnregisterBrokerRequest,
};
use kafka_protocol::protocol::StrBytes;
use strata_broker::protocol::client::{Client, ClientSecurity};

use crate::common::ConnectArgs;

use super::plan;

const TIMEOUT: Duration = Duration::from_secs(30);
const MAX_RESPONSE: usize = 256 << 20;
const CLIENT_ID: &str = "strata-cli";

/// A protocol string from a Rust one.
pub fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// The coordinator of `key` (FindCoordinator `key_type`: 0 a group, 1 a transactional id):
/// its id and a connection to it.
pub async fn coordinator(
    conn: &ConnectArgs,
    key: &str,
    key_type: i8,
) -> anyhow::Result<(i32, Client)> {
    let mut c = connect(conn).await?;
    let resp = c
        .call(
            3,
            &FindCoordinatorRequest::default()
                .with_key(str_bytes(key))
                .with_key_type(key_type),
        )
        .await
        .context("FindCoordinator")?;
    if resp.error_code != 0 {
        bail!("FindCoordinator {key}: error {}", resp.error_code);
    }
    let addr = format!("{}:{}", resp.host.as_str(), resp.port);
    Ok((resp.node_id.0, connect_to(&addr, c.security()).await?))
}

/// A live broker as Metadata lists it.
#[derive(Debug, Clone)]
pub struct BrokerAddr {
    pub id: i32,
    pub addr: String,
    pub rack: Option<String>,
}

/// A partition moving: its replicas (target first, then those leaving) and the sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ongoing {
    pub topic: String,
    pub partition: i32,
    pub replicas: Vec<i32>,
    pub adding: Vec<i32>,
    pub removing: Vec<i32>,
}

/// One partition's answer to a reassignment request.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub topic: String,
    pub partition: i32,
    pub code: i16,
    pub message: Option<String>,
}

/// The cluster as Metadata shows it.
pub struct ClusterView {
    pub brokers: Vec<BrokerAddr>,
    pub partitions: Vec<plan::Partition>,
    /// Leader of each partition (-1: none).
    pub leaders: HashMap<(String, i32), i32>,
}

impl ClusterView {
    pub fn live(&self) -> Vec<plan::Broker> {
        self.brokers
            .iter()
            .map(|b| plan::Broker {
                id: b.id,
                rack: b.rack.clone(),
            })
            .collect()
    }

    pub fn addr(&self, id: i32) -> Option<&str> {
        self.brokers
            .iter()
            .find(|b| b.id == id)
            .map(|b| b.addr.as_str())
    }
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// Connects to the first reachable broker of the bootstrap list, secured as the `-X`
/// properties say (`security.protocol`, `sasl.*`, `ssl.*`).
pub async fn connect(conn: &ConnectArgs) -> anyhow::Result<Client> {
    let security = conn.client_security()?;
    let mut last = None;
    for addr in conn
        .bootstrap_server
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
    {
        match connect_to(addr, &security).await {
            Ok(c) => return Ok(c),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| anyhow!("no bootstrap server given")))
}

/// Connects to `addr`, secured as `security` says.
pub async fn connect_to(addr: &str, security: &ClientSecurity) -> anyhow::Result<Client> {
    Client::connect_secure(addr, CLIENT_ID, TIMEOUT, MAX_RESPONSE, security)
        .await
        .with_context(|| format!("connecting to {addr}"))
}

/// Brokers (with racks), every partition's replicas and leaders.
pub async fn cluster(c: &mut Client) -> anyhow::Result<ClusterView> {
    let resp = c
        .call(12, &MetadataRequest::default().with_topics(None))
        .await
        .context("Metadata")?;
    let brokers = resp
        .brokers
        .iter()
        .map(|b| BrokerAddr {
            id: b.node_id.0,
            addr: format!("{}:{}", b.host.as_str(), b.port),
            rack: b.rack.as_ref().map(|r| r.as_str().to_string()),
        })
        .collect();
    let mut partitions = Vec::new();
    let mut leaders = HashMap::new();
    for t in resp.topics {
        let Some(topic) = t.name.map(|n| n.0.as_str().to_string()) else {
            continue;
        };
        for p in t.partitions {
            leaders.insert((topic.clone(), p.partition_index), p.leader_id.0);
            partitions.push(plan::Partition {
                topic: topic.clone(),
                partition: p.partition_index,
                replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
                pinned: false,
            });
        }
    }
    partitions.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    let pinned = pinned_topics(c, partitions.iter().map(|p| p.topic.as_str())).await?;
    for p in &mut partitions {
        p.pinned = pinned.contains(&p.topic);
    }
    Ok(ClusterView {
        brokers,
        partitions,
        leaders,
    })
}

/// The topics among `topics` whose leaders are pinned to racks (`leaders.preference` set to
/// `racks:..`): plans leave their leaders where the pins put them.
async fn pinned_topics<'a>(
    c: &mut Client,
    topics: impl Iterator<Item = &'a str>,
) -> anyhow::Result<std::collections::HashSet<String>> {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::DescribeConfigsRequest;
    use strata_broker::topic_config::{leader_racks, LEADERS_PREFERENCE};
    let mut names: Vec<&str> = topics.collect();
    names.dedup();
    if names.is_empty() {
        return Ok(Default::default());
    }
    let key = StrBytes::from_static_str(LEADERS_PREFERENCE);
    let resources = (names.iter())
        .map(|t| {
            DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_string(t.to_string()))
                .with_configuration_keys(Some(vec![key.clone()]))
        })
        .collect();
    let resp = c
        .call(
            4,
            &DescribeConfigsRequest::default().with_resources(resources),
        )
        .await
        .context("DescribeConfigs")?;
    Ok((resp.results.into_iter())
        .filter(|r| r.error_code == 0)
        .filter(|r| {
            (r.configs.iter()).any(|e| {
                e.name == key
                    && e.value
                        .as_ref()
                        .is_some_and(|v| !leader_racks(v).is_empty())
            })
        })
        .map(|r| r.resource_name.as_str().to_string())
        .collect())
}

/// AlterPartitionReassignments: each `(topic, partition, target)`; `None` cancels.
pub async fn alter(
    c: &mut Client,
    moves: &[(String, i32, Option<Vec<i32>>)],
) -> anyhow::Result<Vec<Outcome>> {
    let mut topics: Vec<ReassignableTopic> = Vec::new();
    for (topic, partition, target) in moves {
        let p = ReassignablePartition::default()
            .with_partition_index(*partition)
            .with_replicas(
                target
                    .as_ref()
                    .map(|t| t.iter().map(|b| BrokerId(*b)).collect()),
            );
        match topics.iter_mut().find(|t| t.name.0.as_str() == topic) {
            Some(t) => t.partitions.push(p),
            None => topics.push(
                ReassignableTopic::default()
                    .with_name(name(topic))
                    .with_partitions(vec![p]),
            ),
        }
    }
    let req = AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(TIMEOUT.as_millis() as i32)
        .with_allow_replication_factor_change(true)
        .with_topics(topics);
    let resp = c
        .call(1, &req)
        .await
        .context("AlterPartitionReassignments")?;
    if resp.error_code != 0 {
        bail!(
            "reassignment refused (error {}): {}",
            resp.error_code,
            resp.error_message.as_deref().unwrap_or("")
        );
    }
    Ok(resp
        .responses
        .into_iter()
        .flat_map(|t| {
            let topic = t.name.0.as_str().to_string();
            t.partitions.into_iter().map(move |p| Outcome {
                topic: topic.clone(),
                partition: p.partition_index,
                code: p.error_code,
                message: p.error_message.map(|m| m.as_str().to_string()),
            })
        })
        .collect())
}

/// Every reassignment in progress.
pub async fn ongoing(c: &mut Client) -> anyhow::Result<Vec<Ongoing>> {
    let req = ListPartitionReassignmentsRequest::default()
        .with_timeout_ms(TIMEOUT.as_millis() as i32)
        .with_topics(None);
    let resp = c
        .call(0, &req)
        .await
        .context("ListPartitionReassignments")?;
    let ids = |v: &[BrokerId]| v.iter().map(|b| b.0).collect::<Vec<i32>>();
    let mut out = Vec::new();
    for t in resp.topics {
        for p in t.partitions {
            out.push(Ongoing {
                topic: t.name.0.as_str().to_string(),
                partition: p.partition_index,
                replicas: ids(&p.replicas),
                adding: ids(&p.adding_replicas),
                removing: ids(&p.removing_replicas),
            });
        }
    }
    Ok(out)
}

/// A broker's replicas: `(topic, partition)` → (local bytes, offset lag).
pub async fn log_dirs(c: &mut Client) -> anyhow::Result<HashMap<(String, i32), (i64, i64)>> {
    let resp = c
        .call(4, &DescribeLogDirsRequest::default().with_topics(None))
        .await
        .context("DescribeLogDirs")?;
    let mut out = HashMap::new();
    for dir in resp.results {
        for t in dir.topics {
            for p in t.partitions {
                out.insert(
                    (t.name.0.as_str().to_string(), p.partition_index),
                    (p.partition_size, p.offset_lag),
                );
            }
        }
    }
    Ok(out)
}

/// The leader's local log start and high watermark of a partition (ListOffsets
/// EARLIEST_LOCAL and LATEST), asked of the leader.
pub async fn local_span(c: &mut Client, topic: &str, partition: i32) -> anyhow::Result<(i64, i64)> {
    let mut out = [0i64; 2];
    for (i, ts) in [-4i64, -1].into_iter().enumerate() {
        let req = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(name(topic))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(partition)
                    .with_timestamp(ts)])]);
        let resp = c.call(7, &req).await.context("ListOffsets")?;
        let p = resp
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .ok_or_else(|| anyhow!("empty ListOffsets answer"))?;
        if p.error_code != 0 {
            bail!("ListOffsets {topic}-{partition}: error {}", p.error_code);
        }
        out[i] = p.offset;
    }
    Ok((out[0], out[1]))
}

/// UnregisterBroker (KIP-855).
pub async fn unregister(c: &mut Client, broker: i32) -> anyhow::Result<()> {
    let resp = c
        .call(
            0,
            &UnregisterBrokerRequest::default().with_broker_id(BrokerId(broker)),
        )
        .await
        .context("UnregisterBroker")?;
    if resp.error_code != 0 {
        bail!(
            "broker {broker} not removed (error {}): {}",
            resp.error_code,
            resp.error_message.as_deref().unwrap_or("")
        );
    }
    Ok(())
}

/// Connections to brokers by id, opened on first use, secured like the first connection.
pub struct Pool {
    clients: HashMap<i32, Client>,
    security: ClientSecurity,
}

impl Pool {
    /// A pool whose connections are secured as `c`'s is.
    pub fn like(c: &Client) -> Pool {
        Pool {
            clients: HashMap::new(),
            security: c.security().clone(),
        }
    }

    pub async fn get(&mut self, view: &ClusterView, id: i32) -> anyhow::Result<&mut Client> {
        use std::collections::hash_map::Entry;
        match self.clients.entry(id) {
            Entry::Occupied(e) => Ok(e.into_mut()),
            Entry::Vacant(e) => {
                let addr = view
                    .addr(id)
                    .ok_or_else(|| anyhow!("broker {id} is not live"))?
                    .to_string();
                let c = connect_to(&addr, &self.security)
                    .await
                    .with_context(|| format!("broker {id}"))?;
                Ok(e.insert(c))
            }
        }
    }

    /// Forgets a connection that failed, so the next use reconnects.
    pub fn drop_broker(&mut self, id: i32) {
        self.clients.remove(&id);
    }
}
