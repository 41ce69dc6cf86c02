//! The lag of partitions this broker does not host. A group's coordinator samples the lag of
//! every offset the group committed, wherever the partition lives: a partition hosted here is
//! read from its replica, any other is asked of its leader as a Kafka client would ask —
//! ListOffsets for the log start and the high watermark, and a Fetch of one batch at the first
//! unconsumed offset for its timestamp, only when that offset moved since the last sample.
//! One call of each kind per leader per sample, whatever the number of groups; the leaders are
//! asked at once, each call bounded by [`CALL_TIMEOUT`]. A leader that does not answer leaves
//! its partitions' last figures in place ([`Answers::unanswered`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, ListOffsetsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::log::records::timestamp_at;
use crate::node::Node;
use crate::security::inter_broker::Peers;

/// One call to a leader; a sample waits at most about twice this (offsets, then timestamps).
const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest answer accepted from a leader (a Fetch of one batch per partition).
const MAX_RESPONSE: usize = 8 << 20;
/// What a timestamp Fetch asks for in all; partitions past it wait for the next sample.
const FETCH_MAX_BYTES: i32 = 4 << 20;
const LIST_OFFSETS_VERSION: i16 = 8;
const FETCH_VERSION: i16 = 12;
/// Kafka's ListOffsets special timestamps.
pub const EARLIEST: i64 = -2;
pub const LATEST: i64 = -1;

pub type Tp = (String, i32);

/// A partition's log start and high watermark, as its leader answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offsets {
    pub log_start: i64,
    pub high_watermark: i64,
}

/// What the leaders answered for one sample.
#[derive(Default)]
pub struct Answers {
    pub offsets: HashMap<Tp, Offsets>,
    /// Partitions whose leader was asked and did not answer (or has none registered).
    pub unanswered: BTreeSet<Tp>,
}

pub struct Leaders {
    peers: Peers,
}

impl Leaders {
    pub fn new(node_id: u64) -> Leaders {
        Leaders {
            peers: Peers::new(format!("strata-lag-{node_id}"), CALL_TIMEOUT, MAX_RESPONSE),
        }
    }

    /// The log start and high watermark of `tps`, from their leaders. A partition with no
    /// leader (offline, or its topic gone) is in neither map.
    pub async fn offsets(&self, node: &Node, tps: &BTreeSet<Tp>) -> Answers {
        let mut answers = Answers::default();
        let by_leader = by_leader(node, tps.iter().map(|tp| (tp.clone(), ())));
        let calls = by_leader.into_iter().map(|(leader, tps)| async move {
            let tps: Vec<Tp> = tps.into_iter().map(|(tp, ())| tp).collect();
            let earliest = self.list_offsets(node, leader, &tps, EARLIEST).await;
            let latest = self.list_offsets(node, leader, &tps, LATEST).await;
            (leader, tps, earliest, latest)
        });
        for (leader, tps, earliest, latest) in futures::future::join_all(calls).await {
            match (earliest, latest) {
                (Ok(earliest), Ok(latest)) => {
                    for (tp, log_start) in earliest {
                        if let Some(&high_watermark) = latest.get(&tp) {
                            let o = Offsets {
                                log_start,
                                high_watermark,
                            };
                            answers.offsets.insert(tp, o);
                        }
                    }
                }
                (Err(why), _) | (_, Err(why)) => {
                    tracing::debug!(leader, %why, "lag: the leader did not answer ListOffsets");
                    answers.unanswered.extend(tps);
                }
            }
        }
        answers
    }

    /// The timestamp of the record at each `(partition, offset)`, from their leaders; those
    /// not readable now are missing. A Fetch names a partition once, so where groups lag at
    /// several offsets of one partition each leader is asked once per offset, in layers.
    pub async fn timestamps(
        &self,
        node: &Node,
        at: &BTreeSet<(Tp, i64)>,
    ) -> HashMap<(Tp, i64), i64> {
        let by_leader = by_leader(node, at.iter().map(|(tp, o)| (tp.clone(), *o)));
        let calls = by_leader.into_iter().map(|(leader, wanted)| async move {
            let mut layers: Vec<Vec<(Tp, i64)>> = Vec::new();
            let mut depth: HashMap<Tp, usize> = HashMap::new();
            for (tp, offset) in wanted {
                let d = depth.entry(tp.clone()).or_default();
                if layers.len() <= *d {
                    layers.push(Vec::new());
                }
                layers[*d].push((tp, offset));
                *d += 1;
            }
            let mut found = Vec::new();
            for layer in layers {
                found.extend(self.fetch_first(node, leader, layer).await);
            }
            found
        });
        let mut out = HashMap::new();
        for found in futures::future::join_all(calls).await {
            out.extend(found);
        }
        out
    }

    /// `partition → offset` from one ListOffsets call to `leader` at `timestamp` (EARLIEST,
    /// LATEST, or a time in ms: the first offset stamped at or after it, -1 for none).
    pub async fn list_offsets(
        &self,
        node: &Node,
        leader: u64,
        tps: &[Tp],
        timestamp: i64,
    ) -> Result<HashMap<Tp, i64>, String> {
        let mut topics: BTreeMap<&str, Vec<ListOffsetsPartition>> = BTreeMap::new();
        for (topic, partition) in tps {
            topics.entry(topic).or_default().push(
                ListOffsetsPartition::default()
                    .with_partition_index(*partition)
                    .with_timestamp(timestamp),
            );
        }
        let req = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_isolation_level(0)
            .with_topics(
                (topics.into_iter())
                    .map(|(t, ps)| {
                        ListOffsetsTopic::default()
                            .with_name(name(t))
                            .with_partitions(ps)
                    })
                    .collect(),
            );
        let resp = self.call(node, leader, LIST_OFFSETS_VERSION, &req).await?;
        let mut out = HashMap::new();
        for t in resp.topics {
            for p in t.partitions.into_iter().filter(|p| p.error_code == 0) {
                out.insert((t.name.0.to_string(), p.partition_index), p.offset);
            }
        }
        Ok(out)
    }

    /// The timestamp of the record at each wanted offset: one Fetch of the batch holding it.
    async fn fetch_first(
        &self,
        node: &Node,
        leader: u64,
        wanted: Vec<(Tp, i64)>,
    ) -> Vec<((Tp, i64), i64)> {
        let mut topics: BTreeMap<&str, Vec<FetchPartition>> = BTreeMap::new();
        for ((topic, partition), offset) in &wanted {
            topics.entry(topic).or_default().push(
                FetchPartition::default()
                    .with_partition(*partition)
                    .with_fetch_offset(*offset)
                    // One batch each: the first batch comes whole whatever this says.
                    .with_partition_max_bytes(1),
            );
        }
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(0)
            .with_max_bytes(FETCH_MAX_BYTES)
            .with_isolation_level(0)
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(
                (topics.into_iter())
                    .map(|(t, ps)| {
                        FetchTopic::default()
                            .with_topic(name(t))
                            .with_partitions(ps)
                    })
                    .collect(),
            );
        let resp = match self.call(node, leader, FETCH_VERSION, &req).await {
            Ok(resp) => resp,
            Err(why) => {
                tracing::debug!(leader, %why, "lag: the leader did not answer a Fetch");
                return Vec::new();
            }
        };
        let offsets: HashMap<&Tp, i64> = wanted.iter().map(|(tp, o)| (tp, *o)).collect();
        let mut out = Vec::new();
        for t in resp.responses {
            for p in t.partitions.into_iter().filter(|p| p.error_code == 0) {
                let tp = (t.topic.0.to_string(), p.partition_index);
                let (Some(&offset), Some(records)) = (offsets.get(&tp), p.records) else {
                    continue;
                };
                if let Some(ts) = timestamp_at(&records, offset) {
                    out.push(((tp, offset), ts));
                }
            }
        }
        out
    }

    /// `req` to broker `leader`'s Kafka port, as this broker (the admin port's offset resets
    /// send OffsetCommit to a group's coordinator, the leader of its offsets partition).
    pub async fn call<R: kafka_protocol::protocol::Request>(
        &self,
        node: &Node,
        leader: u64,
        version: i16,
        req: &R,
    ) -> Result<R::Response, String> {
        let addr =
            (node.metadata.state().brokers.get(&leader)).map(|b| format!("{}:{}", b.host, b.port));
        (self.peers)
            .call(&node.config, leader, addr, version, req)
            .await
            .map_err(|e| format!("broker {leader}: {e}"))
    }
}

fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}

/// `items` by the broker leading their partition; partitions led here or by nobody are left
/// out.
fn by_leader<T>(node: &Node, items: impl Iterator<Item = (Tp, T)>) -> BTreeMap<u64, Vec<(Tp, T)>> {
    let state = node.metadata.state();
    let me = node.config.node_id;
    let mut out: BTreeMap<u64, Vec<(Tp, T)>> = BTreeMap::new();
    for ((topic, partition), item) in items {
        let leader = (state.topic(&topic))
            .and_then(|t| t.partitions.get(usize::try_from(partition).ok()?))
            .and_then(|p| p.leader)
            .filter(|&l| l != me);
        if let Some(leader) = leader {
            out.entry(leader)
                .or_default()
                .push(((topic, partition), item));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn a_timestamp_is_read_from_the_first_batch_of_an_answer() {
        use crate::log::batch::testing::batch;
        // Records 0..10 stamped 1000 + 0..9 ms, then a second batch the answer may carry.
        let mut answer = batch(10, 1_000).to_vec();
        answer.extend_from_slice(&batch(5, 9_000));
        let answer = Bytes::from(answer);
        assert_eq!(timestamp_at(&answer, 0), Some(1_000));
        assert_eq!(timestamp_at(&answer, 4), Some(1_004));
        // A cut or empty answer reads as nothing, never as a wrong time.
        assert_eq!(timestamp_at(&answer.slice(..30), 0), None);
        assert_eq!(timestamp_at(&Bytes::new(), 0), None);
    }
}
