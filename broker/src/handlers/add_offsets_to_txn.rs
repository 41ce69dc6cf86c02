use std::sync::Arc;

use kafka_protocol::messages::{AddOffsetsToTxnRequest, AddOffsetsToTxnResponse};

use crate::broker::Broker;
use crate::error::ErrorCode;
use crate::group::{store, validate_group_id};
use crate::security::Access;
use strata_metadata::acl::AclOperation;

/// The group's `__consumer_offsets` partition joins the transaction, so its marker makes the
/// offsets the producer commits there (TxnOffsetCommit) visible or drops them.
/// Needs WRITE on the transactional id and READ on the group.
pub async fn handle(
    broker: &Arc<Broker>,
    req: AddOffsetsToTxnRequest,
    access: &Access,
) -> AddOffsetsToTxnResponse {
    let group = req.group_id.0.as_str();
    if !access.transactional_id(AclOperation::Write, &req.transactional_id) {
        return AddOffsetsToTxnResponse::default()
            .with_error_code(ErrorCode::TransactionalIdAuthorizationFailed.code());
    }
    if !access.group(AclOperation::Read, group) {
        return AddOffsetsToTxnResponse::default()
            .with_error_code(ErrorCode::GroupAuthorizationFailed.code());
    }
    let result = async {
        validate_group_id(group)?;
        broker.groups.ensure_offsets_topic().await?;
        let partition = (store::TOPIC.to_string(), store::partition_for(group));
        broker
            .txn
            .add_partitions(
                req.transactional_id.0.as_str(),
                req.producer_id.0,
                req.producer_epoch,
                &[partition],
            )
            .await
    }
    .await;
    let code = result.err().map_or(0, |e| e.code.code());
    AddOffsetsToTxnResponse::default().with_error_code(code)
}
