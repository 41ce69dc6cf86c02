//! UnregisterBroker (KIP-855: `kafka-cluster unregister`, `Admin.unregisterBroker`,
//! `strata broker remove`): forgets a stopped broker that holds no replica. A metadata voter
//! is refused here, before the quorum is asked: it must leave the voters first.

use std::sync::Arc;

use kafka_protocol::messages::{UnregisterBrokerRequest, UnregisterBrokerResponse};
use strata_metadata::Command;

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::security::Access;
use strata_metadata::acl::AclOperation;

pub async fn handle(
    broker: &Arc<Broker>,
    req: UnregisterBrokerRequest,
    access: &Access,
) -> UnregisterBrokerResponse {
    let outcome = if access.cluster(AclOperation::Alter) {
        unregister(broker, req.broker_id.0).await
    } else {
        Err(super::reply::cluster_denied(AclOperation::Alter))
    };
    match outcome {
        Ok(()) => {
            access.audit(
                "broker_unregistered",
                serde_json::json!({ "broker": req.broker_id.0 }),
            );
            UnregisterBrokerResponse::default()
        }
        Err(e) => {
            tracing::info!(broker = req.broker_id.0, error = %e.message, "unregistration refused");
            UnregisterBrokerResponse::default()
                .with_error_code(e.code.code())
                .with_error_message(Some(str_bytes(e.message)))
        }
    }
}

async fn unregister(broker: &Arc<Broker>, id: i32) -> Result<(), ApiError> {
    let not_registered = || {
        ApiError::new(
            ErrorCode::BrokerIdNotRegistered,
            format!("broker {id} is not registered"),
        )
    };
    let node_id = u64::try_from(id).map_err(|_| not_registered())?;
    if !broker.node.metadata.state().brokers.contains_key(&node_id) {
        return Err(not_registered());
    }
    if broker.node.metadata.status().voters.contains_key(&node_id) {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!(
                "broker {id} is a metadata voter: make it a learner first (strata cluster remove-voter {id})"
            ),
        ));
    }
    broker
        .node
        .apply(Command::UnregisterBroker { node_id })
        .await?;
    tracing::info!(broker = id, "broker unregistered");
    Ok(())
}
