use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::{
    DescribeTransactionsRequest, DescribeTransactionsResponse, ProducerId, TopicName,
};

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::security::Access;
use strata_metadata::acl::AclOperation;

/// KIP-664: the state of transactional ids this broker coordinates.
pub async fn handle(
    broker: &Arc<Broker>,
    req: DescribeTransactionsRequest,
    access: &Access,
) -> DescribeTransactionsResponse {
    let mut states = Vec::with_capacity(req.transactional_ids.len());
    for id in req.transactional_ids {
        let s = TransactionState::default().with_transactional_id(id.clone());
        let described = if access.transactional_id(AclOperation::Describe, &id) {
            broker.txn.describe(id.0.as_str()).await
        } else {
            Err(ApiError::new(
                ErrorCode::TransactionalIdAuthorizationFailed,
                "DESCRIBE on the transactional id is not authorized",
            ))
        };
        states.push(match described {
            Err(e) => s
                .with_error_code(e.code.code())
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
                .with_transaction_start_time_ms(-1),
            Ok(view) => {
                let m = view.metadata;
                let mut topics: BTreeMap<String, Vec<i32>> = BTreeMap::new();
                for (t, p) in &m.partitions {
                    topics.entry(t.clone()).or_default().push(*p);
                }
                s.with_transaction_state(str_bytes(m.state.name().to_string()))
                    .with_transaction_timeout_ms(m.timeout_ms)
                    .with_transaction_start_time_ms(m.start_ms)
                    .with_producer_id(ProducerId(m.producer_id))
                    .with_producer_epoch(m.producer_epoch)
                    .with_topics(
                        topics
                            .into_iter()
                            .map(|(t, ps)| {
                                TopicData::default()
                                    .with_topic(TopicName(str_bytes(t)))
                                    .with_partitions(ps)
                            })
                            .collect(),
                    )
            }
        });
    }
    DescribeTransactionsResponse::default().with_transaction_states(states)
}
