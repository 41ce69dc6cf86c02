use std::sync::Arc;

use kafka_protocol::messages::list_transactions_response::TransactionState;
use kafka_protocol::messages::{
    ListTransactionsRequest, ListTransactionsResponse, ProducerId, TransactionalId,
};

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::security::Access;
use crate::txn::state::TxnState;
use strata_metadata::acl::{AclOperation, ResourceType};

const STATES: [TxnState; 7] = [
    TxnState::Empty,
    TxnState::Ongoing,
    TxnState::PrepareCommit,
    TxnState::PrepareAbort,
    TxnState::CompleteCommit,
    TxnState::CompleteAbort,
    TxnState::Dead,
];

/// KIP-664: the transactional ids this broker coordinates, filtered by state, producer id
/// and (v1) how long their transaction has been open.
pub fn handle(
    broker: &Arc<Broker>,
    req: ListTransactionsRequest,
    version: i16,
    access: &Access,
) -> ListTransactionsResponse {
    let unknown: Vec<_> = (req.state_filters.iter())
        .filter(|f| !STATES.iter().any(|s| s.name() == f.as_str()))
        .cloned()
        .collect();
    let now = broker.node.clock.now_ms();
    let min_duration = if version >= 1 {
        req.duration_filter
    } else {
        -1
    };
    let mut views = broker.txn.list();
    views.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
    let states = views
        .into_iter()
        .filter(|v| {
            access.sees(
                AclOperation::Describe,
                ResourceType::TransactionalId,
                &v.transactional_id,
            )
        })
        .filter(|v| {
            let m = &v.metadata;
            (req.state_filters.is_empty()
                || req
                    .state_filters
                    .iter()
                    .any(|f| f.as_str() == m.state.name()))
                && (req.producer_id_filters.is_empty()
                    || req.producer_id_filters.iter().any(|p| p.0 == m.producer_id))
                && (min_duration < 0 || (m.start_ms >= 0 && now - m.start_ms >= min_duration))
        })
        .map(|v| {
            TransactionState::default()
                .with_transactional_id(TransactionalId(str_bytes(v.transactional_id)))
                .with_producer_id(ProducerId(v.metadata.producer_id))
                .with_transaction_state(str_bytes(v.metadata.state.name().to_string()))
        })
        .collect();
    ListTransactionsResponse::default()
        .with_unknown_state_filters(unknown)
        .with_transaction_states(states)
}
