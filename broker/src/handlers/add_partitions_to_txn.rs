use std::sync::Arc;

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{AddPartitionsToTxnRequest, AddPartitionsToTxnResponse};

use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::security::Access;
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

/// Each partition's outcome for one transaction: a producer's request (the partitions join
/// its transaction; if one does not exist, none do and the others are OPERATION_NOT_ATTEMPTED)
/// or a partition leader's verify-only check (KIP-890). A producer needs WRITE on the
/// transactional id and on every topic; one refused topic fails the request (the others
/// are OPERATION_NOT_ATTEMPTED).
async fn one(
    broker: &Broker,
    access: &Access,
    id: &str,
    producer_id: i64,
    producer_epoch: i16,
    verify_only: bool,
    wanted: &[(String, i32)],
) -> Vec<ErrorCode> {
    if !verify_only {
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
    if verify_only {
        return match broker
            .txn
            .verify(id, producer_id, producer_epoch, wanted)
            .await
        {
            Ok(codes) => codes,
            Err(e) => vec![e.code; wanted.len()],
        };
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
            false,
            &wanted,
        )
        .await;
        return AddPartitionsToTxnResponse::default()
            .with_results_by_topic_v3_and_below(results(&req.v3_and_below_topics, codes));
    }
    // v4+ is the brokers' batched form (KIP-890).
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
            t.verify_only,
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
