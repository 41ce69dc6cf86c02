use std::sync::Arc;

use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse, ProducerId};

use crate::broker::Broker;
use crate::error::ErrorCode;
use crate::security::Access;
use strata_metadata::acl::AclOperation;

/// Commits or aborts the producer's ongoing transaction ([`crate::txn`]); from v5 on under
/// transaction version 2 (KIP-890 part 2), bumping the epoch, and answering the producer id
/// and epoch the client goes on with. Needs WRITE on the transactional id.
pub async fn handle(
    broker: &Arc<Broker>,
    req: EndTxnRequest,
    version: i16,
    access: &Access,
) -> EndTxnResponse {
    let refused = EndTxnResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    if !access.transactional_id(AclOperation::Write, &req.transactional_id) {
        return refused.with_error_code(ErrorCode::TransactionalIdAuthorizationFailed.code());
    }
    let result = broker
        .txn
        .end_txn(
            req.transactional_id.0.as_str(),
            req.producer_id.0,
            req.producer_epoch,
            req.committed,
            version >= 5,
        )
        .await;
    match result {
        Ok((producer_id, epoch)) => EndTxnResponse::default()
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(epoch),
        Err(e) => refused.with_error_code(e.code.code()),
    }
}
