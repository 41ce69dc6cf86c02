//! KIP-890: before a partition leader takes a producer's first transactional batch of a
//! transaction (and before a group coordinator takes its first transactional offset commit),
//! it asks the transaction's coordinator about the partition. Part 1 (clients below
//! transaction version 2): is the partition in the producer's ongoing transaction? Part 2
//! (Produce v12+, TxnOffsetCommit v5+): add it, as the client's AddPartitionsToTxn would have;
//! the coordinator refuses an epoch an EndTxn has bumped past. Either way a batch that arrives
//! after its transaction ended (a late retry, a zombie) is refused instead of opening a
//! transaction nobody will ever end, which would hold the partition's last stable offset back
//! for good.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::{AddPartitionsToTxnRequest, ProducerId, TopicName, TransactionalId};
use kafka_protocol::protocol::StrBytes;

use super::messages::Join;
use super::{store, TxnCoordinator};
use crate::error::{ApiError, ErrorCode};
use crate::security::inter_broker;

const CALL_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_RESPONSE: usize = 16 << 20;

impl TxnCoordinator {
    /// Each partition's outcome at the coordinator of `id`, here or on another broker.
    pub async fn join_anywhere(
        &self,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[(String, i32)],
        how: Join,
    ) -> Result<Vec<ErrorCode>, ApiError> {
        super::validate_id(id)?;
        let state = self.node.metadata.state();
        let leader = state
            .partition(store::TOPIC, store::partition_for(id))
            .and_then(|p| p.leader);
        let unavailable = |why: String| ApiError::new(ErrorCode::NotEnoughReplicas, why);
        let leader = match leader {
            Some(l) if l == self.node.config.node_id => {
                return self
                    .join(id, producer_id, producer_epoch, partitions, how)
                    .await
            }
            Some(l) => l,
            None => {
                return Err(unavailable(format!(
                    "the coordinator of {id} is unavailable"
                )))
            }
        };
        let addr = state
            .brokers
            .get(&leader)
            .map(|b| format!("{}:{}", b.host, b.port))
            .ok_or_else(|| unavailable(format!("broker {leader} is not registered")))?;
        let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (t, p) in partitions {
            topics.entry(t).or_default().push(*p);
        }
        let req = AddPartitionsToTxnRequest::default().with_transactions(vec![
            AddPartitionsToTxnTransaction::default()
                .with_transactional_id(TransactionalId(StrBytes::from_string(id.to_string())))
                .with_producer_id(ProducerId(producer_id))
                .with_producer_epoch(producer_epoch)
                .with_verify_only(how == Join::Verify)
                .with_topics(
                    (topics.iter())
                        .map(|(t, ps)| {
                            AddPartitionsToTxnTopic::default()
                                .with_name(TopicName(StrBytes::from_string(t.to_string())))
                                .with_partitions(ps.clone())
                        })
                        .collect(),
                ),
        ]);
        let client_id = format!("strata-txn-join-{}", self.node.config.node_id);
        let mut client = inter_broker::connect(
            &self.node.config,
            &addr,
            &client_id,
            CALL_TIMEOUT,
            MAX_RESPONSE,
        )
        .await
        .map_err(|e| unavailable(format!("coordinator {leader}: {e}")))?;
        let resp = client
            .call(4, &req)
            .await
            .map_err(|e| unavailable(format!("coordinator {leader}: {e}")))?;
        if resp.error_code != 0 {
            return Err(ApiError::new(
                ErrorCode::from_code(resp.error_code),
                "the transaction's coordinator refused the join",
            ));
        }
        let mut outcome: BTreeMap<(String, i32), i16> = BTreeMap::new();
        for r in resp.results_by_transaction {
            for t in r.topic_results {
                for p in t.results_by_partition {
                    outcome.insert(
                        (t.name.0.to_string(), p.partition_index),
                        p.partition_error_code,
                    );
                }
            }
        }
        Ok(partitions
            .iter()
            .map(|tp| {
                outcome
                    .get(tp)
                    .map_or(ErrorCode::UnknownServerError, |c| ErrorCode::from_code(*c))
            })
            .collect())
    }
}
