use std::sync::Arc;

use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse};

use crate::broker::Broker;
use crate::error::ErrorCode;
use crate::security::Access;
use strata_metadata::acl::AclOperation;

/// Commits or aborts the producer's ongoing transaction ([`crate::txn`]).
/// Needs WRITE on the transactional id.
pub async fn handle(broker: &Arc<Broker>, req: EndTxnRequest, access: &Access) -> EndTxnResponse {
    if !access.transactional_id(AclOperation::Write, &req.transactional_id) {
        return EndTxnResponse::default()
            .with_error_code(ErrorCode::TransactionalIdAuthorizationFailed.code());
    }
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
