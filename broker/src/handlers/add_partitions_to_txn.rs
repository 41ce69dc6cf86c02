use std::sync::Arc;

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{AddPartitionsToTxnRequest, AddPartitionsToTxnResponse};

use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::security::Access;
use crate::txn::messages::Join;
use strata_metadata::acl::AclOperation;

/// The partitions of a request, as `(topic, partition)`.
fn partitions(topics: &[AddPartitionsToTxnTopic]) -> Vec<(String, i32)> {
    topics
        .iter()
        .flat_map(|t| {
            let name = t.name.0.to_string();
            t.partitions.iter().map(move |p| (name.clone(), *p))
        })
        .collect()
}

/// Who asks, and what.
#[derive(Clone, Copy)]
enum Caller {
    /// A producer (v0–v3): the partitions join its transaction.
    Producer,
    /// A broker (v4+, KIP-890), already authorized for the cluster: a partition leader or
    /// group coordinator verifying or adding on behalf of a producer it has authorized.
    Broker(Join),
}

/// Each partition's outcome for one transaction. If one partition does not exist, none join
/// and the others are OPERATION_NOT_ATTEMPTED. A producer needs WRITE on the transactional id
/// and on every topic; one refused topic fails the request (the others are
/// OPERATION_NOT_ATTEMPTED).
async fn one(
    broker: &Broker,
    access: &Access,
    id: &str,
    producer_id: i64,
    producer_epoch: i16,
    caller: Caller,
    wanted: &[(String, i32)],
) -> Vec<ErrorCode> {
    if let Caller::Producer = caller {
        if !access.transactional_id(AclOperation::Write, id) {
            return vec![ErrorCode::TransactionalIdAuthorizationFailed; wanted.len()];
        }
        let refused: Vec<bool> = (wanted.iter())
            .map(|(t, _)| !access.topic(AclOperation::Write, t))
            .collect();
        if refused.contains(&true) {
            return (refused.into_iter())
                .map(|r| {
                    if r {
                        ErrorCode::TopicAuthorizationFailed
                    } else {
                        ErrorCode::OperationNotAttempted
                    }
                })
                .collect();
        }
    }
    if let Caller::Broker(Join::Verify) = caller {
        return (broker
            .txn
            .join(id, producer_id, producer_epoch, wanted, Join::Verify)
            .await)
            .unwrap_or_else(|e| vec![e.code; wanted.len()]);
    }
    let state = broker.node.metadata.state();
    let exists = |(t, p): &(String, i32)| {
        state
            .topic(t)
            .is_some_and(|info| *p >= 0 && (*p as usize) < info.partitions.len())
    };
    if !wanted.iter().all(exists) {
        return wanted
            .iter()
            .map(|tp| {
                if exists(tp) {
                    ErrorCode::OperationNotAttempted
                } else {
                    ErrorCode::UnknownTopicOrPartition
                }
            })
            .collect();
    }
    if let Caller::Broker(how) = caller {
        return (broker
            .txn
            .join(id, producer_id, producer_epoch, wanted, how)
            .await)
            .unwrap_or_else(|e| vec![e.code; wanted.len()]);
    }
    let result: Result<(), ApiError> = broker
        .txn
        .add_partitions(id, producer_id, producer_epoch, wanted)
        .await;
    match result {
        Ok(()) => vec![ErrorCode::None; wanted.len()],
        Err(e) => vec![e.code; wanted.len()],
    }
}

fn results(
    topics: &[AddPartitionsToTxnTopic],
    codes: Vec<ErrorCode>,
) -> Vec<AddPartitionsToTxnTopicResult> {
    let mut codes = codes.into_iter();
    topics
        .iter()
        .map(|t| {
            AddPartitionsToTxnTopicResult::default()
                .with_name(t.name.clone())
                .with_results_by_partition(
                    t.partitions
                        .iter()
                        .map(|p| {
                            AddPartitionsToTxnPartitionResult::default()
                                .with_partition_index(*p)
                                .with_partition_error_code(
                                    codes.next().unwrap_or(ErrorCode::UnknownServerError).code(),
                                )
                        })
                        .collect(),
                )
        })
        .collect()
}

pub async fn handle(
    broker: &Arc<Broker>,
    req: AddPartitionsToTxnRequest,
    version: i16,
    access: &Access,
) -> AddPartitionsToTxnResponse {
    if version <= 3 {
        let wanted = partitions(&req.v3_and_below_topics);
        let codes = one(
            broker,
            access,
            req.v3_and_below_transactional_id.0.as_str(),
            req.v3_and_below_producer_id.0,
            req.v3_and_below_producer_epoch,
            Caller::Producer,
            &wanted,
        )
        .await;
        return AddPartitionsToTxnResponse::default()
            .with_results_by_topic_v3_and_below(results(&req.v3_and_below_topics, codes));
    }
    // v4+ is the brokers' batched form (KIP-890); v5 only says the caller knows
    // TRANSACTION_ABORTABLE, which this coordinator does not answer.
    if !access.cluster(AclOperation::ClusterAction) {
        return AddPartitionsToTxnResponse::default()
            .with_error_code(ErrorCode::ClusterAuthorizationFailed.code());
    }
    let mut out = Vec::with_capacity(req.transactions.len());
    for t in &req.transactions {
        let wanted = partitions(&t.topics);
        let codes = one(
            broker,
            access,
            t.transactional_id.0.as_str(),
            t.producer_id.0,
            t.producer_epoch,
            Caller::Broker(if t.verify_only {
                Join::Verify
            } else {
                Join::Add
            }),
            &wanted,
        )
        .await;
        out.push(
            AddPartitionsToTxnResult::default()
                .with_transactional_id(t.transactional_id.clone())
                .with_topic_results(results(&t.topics, codes)),
        );
    }
    AddPartitionsToTxnResponse::default().with_results_by_transaction(out)
}
