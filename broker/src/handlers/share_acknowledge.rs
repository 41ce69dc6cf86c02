//! ShareAcknowledge (KIP-932): a share group member's acknowledgements without a fetch, in its
//! share session with this broker; epoch -1 closes the session after applying them, and what
//! the member still holds goes back.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::share_acknowledge_response::{
    LeaderIdAndEpoch, PartitionData, ShareAcknowledgeTopicResponse,
};
use kafka_protocol::messages::{ShareAcknowledgeRequest, ShareAcknowledgeResponse};
use uuid::Uuid;

use super::reply::str_bytes;
use super::share_fetch::{acknowledge as apply_acks, session_refusal, who, Lookup, WireAcks};
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::security::Access;
use crate::share::session::Tp;

async fn acknowledge(
    broker: &Arc<Broker>,
    req: ShareAcknowledgeRequest,
    access: &Access,
) -> Result<ShareAcknowledgeResponse, ApiError> {
    let (group, member) = who(
        req.group_id.as_ref().map(|g| g.0.as_str()),
        req.member_id.as_ref().map(|m| m.as_str()),
        access,
    )?;
    let mut acks: BTreeMap<Tp, WireAcks> = BTreeMap::new();
    for t in &req.topics {
        for p in &t.partitions {
            acks.entry((t.topic_id, p.partition_index))
                .or_default()
                .extend(
                    p.acknowledgement_batches
                        .iter()
                        .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone())),
                );
        }
    }
    let step = broker
        .shares
        .sessions
        .advance(
            (&group, &member),
            req.share_session_epoch,
            &[],
            &[],
            false,
            broker.node.clock.instant(),
        )
        .map_err(|code| ApiError::new(code, session_refusal(code)))?;
    let lookup = Lookup::new(broker, access);
    let mut by_topic: BTreeMap<Uuid, Vec<PartitionData>> = BTreeMap::new();
    for (tp, wire) in &acks {
        let who = (&group, &*member);
        let result = apply_acks(broker, &lookup, who, *tp, wire, req.is_renew_ack).await;
        let mut d = PartitionData::default().with_partition_index(tp.1);
        if let Err(e) = result {
            if e.code == ErrorCode::NotLeaderOrFollower {
                let (leader_id, leader_epoch) = lookup.leader(*tp);
                d = d.with_current_leader(
                    LeaderIdAndEpoch::default()
                        .with_leader_id(leader_id)
                        .with_leader_epoch(leader_epoch),
                );
            }
            d = d
                .with_error_code(e.code.code())
                .with_error_message(Some(str_bytes(e.message)));
        }
        by_topic.entry(tp.0).or_default().push(d);
    }
    if step.closing {
        broker
            .shares
            .release(&group, &member, &step.partitions)
            .await;
    }
    let lock_ms = broker.shares.limits(&group).lock.as_millis();
    Ok(ShareAcknowledgeResponse::default()
        .with_acquisition_lock_timeout_ms(i32::try_from(lock_ms).unwrap_or(i32::MAX))
        .with_responses(
            by_topic
                .into_iter()
                .map(|(topic_id, partitions)| {
                    ShareAcknowledgeTopicResponse::default()
                        .with_topic_id(topic_id)
                        .with_partitions(partitions)
                })
                .collect(),
        ))
}

pub async fn handle(
    broker: &Arc<Broker>,
    req: ShareAcknowledgeRequest,
    access: &Access,
) -> ShareAcknowledgeResponse {
    acknowledge(broker, req, access).await.unwrap_or_else(|e| {
        ShareAcknowledgeResponse::default()
            .with_error_code(e.code.code())
            .with_error_message(Some(str_bytes(e.message)))
    })
}
