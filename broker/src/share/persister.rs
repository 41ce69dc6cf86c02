//! The share partition leader's side of durable share state: reads and writes of a share
//! partition's state go to the share coordinator that keeps its key — this broker's own
//! ([`ShareCoordinator`]) when it leads the state partition, else the leader's, by
//! ReadShareGroupState and WriteShareGroupState (v0) over one cached inter-broker connection
//! per peer.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::{
    read_share_group_state_request as rreq, write_share_group_state_request as wreq,
    ReadShareGroupStateRequest, WriteShareGroupStateRequest,
};
use kafka_protocol::protocol::StrBytes;

use super::coordinator::ShareCoordinator;
use super::partition::Snapshot;
use super::store::{self, StateKey, Stored};
use crate::error::{ApiError, ErrorCode};
use crate::node::Node;
use crate::security::inter_broker::Peers;

/// How long a call to another broker's share coordinator may take (its write waits for an
/// ISR).
const CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// Largest response accepted (a state of at most `group.share.partition.max.record.locks`
/// runs).
const MAX_RESPONSE: usize = 4 << 20;

pub struct Persister {
    node: Arc<Node>,
    pub coordinator: Arc<ShareCoordinator>,
    peers: Peers,
}

/// Where a key's state partition is led.
enum Leader {
    Here,
    Peer(u64),
}

impl Persister {
    pub fn new(node: Arc<Node>, coordinator: Arc<ShareCoordinator>) -> Persister {
        let client_id = format!("strata-share-{}", node.config.node_id);
        Persister {
            node,
            coordinator,
            peers: Peers::new(client_id, CALL_TIMEOUT, MAX_RESPONSE),
        }
    }

    async fn leader(&self, key: &StateKey) -> Result<Leader, ApiError> {
        let p = key.state_partition();
        if self.node.metadata.state().topic(store::TOPIC).is_none() {
            self.coordinator.ensure_topic().await?;
        }
        let state = self.node.metadata.state();
        match state.partition(store::TOPIC, p).and_then(|i| i.leader) {
            Some(l) if l == self.node.config.node_id => Ok(Leader::Here),
            Some(l) => Ok(Leader::Peer(l)),
            None => Err(ApiError::new(
                ErrorCode::CoordinatorNotAvailable,
                format!("{}-{p} has no leader", store::TOPIC),
            )),
        }
    }

    /// What is kept of a share partition (`None`: nothing yet).
    pub async fn read(&self, key: &StateKey) -> Result<Option<Stored>, ApiError> {
        match self.leader(key).await? {
            Leader::Here => self.coordinator.read(key).await,
            Leader::Peer(id) => self.read_remote(id, key).await,
        }
    }

    /// Keeps `snapshot` as the share partition's state; `Ok` once it is durable.
    pub async fn write(
        &self,
        key: &StateKey,
        leader_epoch: i32,
        state_epoch: i32,
        snapshot: Snapshot,
    ) -> Result<(), ApiError> {
        match self.leader(key).await? {
            Leader::Here => {
                (self.coordinator)
                    .write(key, leader_epoch, state_epoch, snapshot)
                    .await
            }
            Leader::Peer(id) => {
                self.write_remote(id, key, leader_epoch, state_epoch, snapshot)
                    .await
            }
        }
    }

    async fn read_remote(&self, peer: u64, key: &StateKey) -> Result<Option<Stored>, ApiError> {
        let req = ReadShareGroupStateRequest::default()
            .with_group_id(StrBytes::from_string(key.group.clone()))
            .with_topics(vec![rreq::ReadStateData::default()
                .with_topic_id(key.topic_id)
                .with_partitions(vec![rreq::PartitionData::default()
                    .with_partition(key.partition)
                    .with_leader_epoch(-1)])]);
        let resp = self.call(peer, &req).await?;
        let r = (resp.results.into_iter())
            .flat_map(|t| t.partitions)
            .find(|p| p.partition == key.partition)
            .ok_or_else(|| ApiError::new(ErrorCode::UnknownServerError, "no answer for the key"))?;
        if r.error_code == ErrorCode::UnknownTopicOrPartition.code() {
            // Kafka's answer for a share partition with no state.
            return Ok(None);
        }
        answer(r.error_code, r.error_message.as_deref())?;
        Ok(Some(Stored {
            snapshot_epoch: 0,
            state_epoch: r.state_epoch,
            leader_epoch: -1,
            write_ms: 0,
            snapshot: Snapshot {
                start: r.start_offset,
                runs: (r.state_batches.iter())
                    .map(|b| {
                        let count = u16::try_from(b.delivery_count).unwrap_or(0);
                        (b.first_offset, b.last_offset, b.delivery_state, count)
                    })
                    .collect(),
            },
        }))
    }

    async fn write_remote(
        &self,
        peer: u64,
        key: &StateKey,
        leader_epoch: i32,
        state_epoch: i32,
        snapshot: Snapshot,
    ) -> Result<(), ApiError> {
        let batches = (snapshot.runs.iter())
            .map(|&(first, last, state, count)| {
                wreq::StateBatch::default()
                    .with_first_offset(first)
                    .with_last_offset(last)
                    .with_delivery_state(state)
                    .with_delivery_count(count.min(i16::MAX as u16) as i16)
            })
            .collect();
        let req = WriteShareGroupStateRequest::default()
            .with_group_id(StrBytes::from_string(key.group.clone()))
            .with_topics(vec![wreq::WriteStateData::default()
                .with_topic_id(key.topic_id)
                .with_partitions(vec![wreq::PartitionData::default()
                    .with_partition(key.partition)
                    .with_state_epoch(state_epoch)
                    .with_leader_epoch(leader_epoch)
                    .with_start_offset(snapshot.start)
                    .with_state_batches(batches)])]);
        let resp = self.call(peer, &req).await?;
        let r = (resp.results.into_iter())
            .flat_map(|t| t.partitions)
            .find(|p| p.partition == key.partition)
            .ok_or_else(|| ApiError::new(ErrorCode::UnknownServerError, "no answer for the key"))?;
        answer(r.error_code, r.error_message.as_deref())
    }

    /// One call to `peer`'s share coordinator.
    async fn call<R: kafka_protocol::protocol::Request>(
        &self,
        peer: u64,
        req: &R,
    ) -> Result<R::Response, ApiError> {
        let addr = (self.node.metadata.state().brokers.get(&peer))
            .map(|b| format!("{}:{}", b.host, b.port));
        (self.peers)
            .call(&self.node.config, peer, addr, 0, req)
            .await
            .map_err(|why| {
                ApiError::new(
                    ErrorCode::CoordinatorNotAvailable,
                    format!("share coordinator {peer}: {why}"),
                )
            })
    }
}

/// A peer's error code as an error of ours.
fn answer(code: i16, message: Option<&str>) -> Result<(), ApiError> {
    if code == 0 {
        return Ok(());
    }
    let code = ErrorCode::from_code(code);
    Err(ApiError::new(
        code,
        message.unwrap_or("share coordinator refused").to_string(),
    ))
}
