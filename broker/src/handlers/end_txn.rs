use std::sync::Arc;

use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse};

use crate::broker::Broker;

/// Commits or aborts the producer's ongoing transaction ([`crate::txn`]).
pub async fn handle(broker: &Arc<Broker>, req: EndTxnRequest) -> EndTxnResponse {
    let result = broker
        .txn
        .end_txn(
            req.transactional_id.0.as_str(),
            req.producer_id.0,
            req.producer_epoch,
            req.committed,
        )
        .await;
    EndTxnResponse::default().with_error_code(result.err().map_or(0, |e| e.code.code()))
}
