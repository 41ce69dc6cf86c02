use std::sync::Arc;

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use crate::broker::Broker;
use crate::error::ErrorCode;
use crate::security::Access;
use strata_metadata::acl::{AclOperation, ResourceType};

/// Idempotent producers get a fresh id (epoch 0), or, re-initialising with their current id and
/// epoch (KIP-360), the same id with the next epoch. A transactional id is its coordinator's
/// to answer ([`crate::txn::TxnCoordinator::init_producer`]).
///
/// A transactional producer needs WRITE on its transactional id; an idempotent one
/// IDEMPOTENT_WRITE on the cluster or WRITE on some topic (Kafka 3's rule, KIP-679).
pub async fn handle(
    broker: &Arc<Broker>,
    req: InitProducerIdRequest,
    access: &Access,
) -> InitProducerIdResponse {
    let resp = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let txn_id = req.transactional_id.as_ref().filter(|t| !t.0.is_empty());
    let refused = match txn_id {
        Some(id) => (!access.transactional_id(AclOperation::Write, id))
            .then_some(ErrorCode::TransactionalIdAuthorizationFailed),
        None => (!(access.on_some(AclOperation::Write, ResourceType::Topic)
            || access.cluster(AclOperation::IdempotentWrite)))
        .then_some(ErrorCode::ClusterAuthorizationFailed),
    };
    if let Some(code) = refused {
        return resp.with_error_code(code.code());
    }
    if let Some(id) = txn_id {
        return match broker
            .txn
            .init_producer(
                id.0.as_str(),
                req.transaction_timeout_ms,
                (req.producer_id.0, req.producer_epoch),
            )
            .await
        {
            Ok((pid, epoch)) => resp
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch),
            Err(e) => resp.with_error_code(e.code.code()),
        };
    }
    if req.producer_id.0 >= 0 && req.producer_epoch >= 0 && req.producer_epoch < i16::MAX - 1 {
        return resp
            .with_producer_id(req.producer_id)
            .with_producer_epoch(req.producer_epoch + 1);
    }
    match broker.node.next_producer_id().await {
        Ok(id) => resp.with_producer_id(ProducerId(id)).with_producer_epoch(0),
        Err(e) => resp.with_error_code(e.code.code()),
    }
}
