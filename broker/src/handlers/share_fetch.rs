//! ShareFetch (KIP-932): a share group member's acknowledgements (piggybacked) and its next
//! records, in its share session with this broker ([`crate::share`]).
//!
//! In order: the session's epoch is checked and moved on (or the session opened, or closed);
//! what the session no longer names goes back; the acknowledgements are applied per partition
//! (each partition's result in its `AcknowledgeErrorCode`); then, unless the session is closing
//! or the member asked for no records (`MaxRecords` 0: acknowledging only), every partition of
//! the session hands out what it can, whichever tier holds it, waiting up to `MaxWaitMs` for
//! records to arrive or come back when there are none.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::share_fetch_response::{
    AcquiredRecords, LeaderIdAndEpoch, PartitionData, ShareFetchableTopicResponse,
};
use kafka_protocol::messages::{ShareFetchRequest, ShareFetchResponse};
use strata_metadata::acl::AclOperation;
use strata_metadata::ClusterState;
use tokio::sync::Notify;
use uuid::Uuid;

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::partition::{Hosted, Partition};
use crate::security::Access;
use crate::share::partition::{AckBatch, AckType};
use crate::share::session::Tp;
use crate::zones::{Direction, Kind};

/// ShareFetch v2's acquire modes: whole batches even past `MaxRecords` (Kafka's default), or
/// never more than `MaxRecords` records.
const BATCH_OPTIMIZED: i8 = 0;
const RECORD_LIMIT: i8 = 1;

/// A member's acknowledgement batches as the wire carries them: `(first, last, types)`.
pub(super) type WireAcks = Vec<(i64, i64, Vec<i8>)>;

/// Acknowledgement batches read from the wire; `Err` for a type this version does not know.
pub(super) fn ack_batches(wire: &WireAcks, renew_allowed: bool) -> Result<Vec<AckBatch>, ApiError> {
    wire.iter()
        .map(|(first, last, types)| {
            let types = (types.iter())
                .map(|t| AckType::from_wire(*t, renew_allowed))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| {
                    ApiError::new(ErrorCode::InvalidRequest, "unknown acknowledge type")
                })?;
            if types.is_empty() {
                return Err(ApiError::new(
                    ErrorCode::InvalidRequest,
                    "an acknowledgement batch without a type",
                ));
            }
            Ok(AckBatch {
                first: *first,
                last: *last,
                types,
            })
        })
        .collect()
}

/// The group and member a share request names, once READ on the group is authorized, the
/// group id valid and a member named.
pub(super) fn who(
    group: Option<&str>,
    member: Option<&str>,
    access: &Access,
) -> Result<(Arc<str>, Arc<str>), ApiError> {
    let (group, member) = (group.unwrap_or(""), member.unwrap_or(""));
    if !access.group(AclOperation::Read, group) {
        return Err(ApiError::new(
            ErrorCode::GroupAuthorizationFailed,
            "READ on the group is not authorized",
        ));
    }
    crate::group::validate_group_id(group)?;
    if member.is_empty() {
        return Err(ApiError::new(
            ErrorCode::UnknownMemberId,
            "a share request names its member",
        ));
    }
    Ok((Arc::from(group), Arc::from(member)))
}

/// Applies a member's acknowledgements of one partition (RENEW among them only when the
/// request says so: v2's `IsRenewAck`); `Ok` once they are durable.
pub(super) async fn acknowledge(
    broker: &Broker,
    lookup: &Lookup<'_>,
    (group, member): (&Arc<str>, &str),
    tp: Tp,
    wire: &WireAcks,
    renew: bool,
) -> Result<(), ApiError> {
    let batches = ack_batches(wire, renew)?;
    let p = lookup.partition(tp)?;
    broker.shares.acknowledge(group, &p, member, &batches).await
}

/// Partitions by topic id, looked up in one metadata state and one set of hosted partitions.
pub(super) struct Lookup<'a> {
    broker: &'a Arc<Broker>,
    state: Arc<ClusterState>,
    hosted: Arc<Hosted>,
    access: &'a Access,
}

impl<'a> Lookup<'a> {
    pub(super) fn new(broker: &'a Arc<Broker>, access: &'a Access) -> Lookup<'a> {
        Lookup {
            broker,
            state: broker.node.metadata.state(),
            hosted: broker.node.partitions.hosted(),
            access,
        }
    }

    /// The partition, led here and readable by the member; else the error to answer, with the
    /// leader as the metadata state knows it.
    pub(super) fn partition(&self, (topic, index): Tp) -> Result<Arc<Partition>, ApiError> {
        let Some(info) = self.state.topic_by_id(&topic) else {
            return Err(ApiError::new(
                ErrorCode::UnknownTopicId,
                format!("no topic has id {topic}"),
            ));
        };
        if !self.access.topic(AclOperation::Read, &info.name) {
            return Err(ApiError::new(
                ErrorCode::TopicAuthorizationFailed,
                format!("reading {} is not authorized", info.name),
            ));
        }
        let slots = self.hosted.topic(&info.name).unwrap_or_default();
        let at = usize::try_from(index).ok();
        self.broker.node.check_leader(
            &info.name,
            index,
            at.and_then(|x| info.partitions.get(x)).map(|x| &**x),
            at.and_then(|x| slots.get(x)).and_then(Option::as_ref),
            -1,
        )
    }

    /// The partition's leader and epoch, for an answer that sends the member elsewhere.
    pub(super) fn leader(&self, (topic, index): Tp) -> (i32, i32) {
        (self.state.topic_by_id(&topic))
            .and_then(|t| t.partitions.get(usize::try_from(index).ok()?))
            .map_or((-1, -1), |p| {
                (p.leader.map_or(-1, |l| l as i32), p.leader_epoch)
            })
    }
}

/// One partition's answer, built up by the acknowledgement and the fetch.
#[derive(Default)]
struct Answer {
    error: Option<ApiError>,
    ack_error: Option<ApiError>,
    records: Option<bytes::Bytes>,
    acquired: Vec<AcquiredRecords>,
}

async fn fetch(
    broker: &Arc<Broker>,
    req: ShareFetchRequest,
    access: &Access,
) -> Result<ShareFetchResponse, ApiError> {
    let (group, member) = who(
        req.group_id.as_ref().map(|g| g.0.as_str()),
        req.member_id.as_ref().map(|m| m.as_str()),
        access,
    )?;
    let mut named: Vec<Tp> = Vec::new();
    let mut acks: BTreeMap<Tp, WireAcks> = BTreeMap::new();
    for t in &req.topics {
        for p in &t.partitions {
            let tp = (t.topic_id, p.partition_index);
            named.push(tp);
            if !p.acknowledgement_batches.is_empty() {
                acks.entry(tp).or_default().extend(
                    p.acknowledgement_batches
                        .iter()
                        .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone())),
                );
            }
        }
    }
    if !matches!(req.share_acquire_mode, BATCH_OPTIMIZED | RECORD_LIMIT) {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("unknown share acquire mode {}", req.share_acquire_mode),
        ));
    }
    if req.share_session_epoch == 0 && !acks.is_empty() {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "a share session cannot open with acknowledgements",
        ));
    }
    let forgotten: Vec<Tp> = (req.forgotten_topics_data.iter())
        .flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id, *p)))
        .collect();
    let now = broker.node.clock.instant();
    let step = broker
        .shares
        .sessions
        .advance(
            (&group, &member),
            req.share_session_epoch,
            &named,
            &forgotten,
            true,
            now,
        )
        .map_err(|code| ApiError::new(code, session_refusal(code)))?;
    broker.shares.release(&group, &member, &step.dropped).await;
    let lookup = Lookup::new(broker, access);
    let mut answers: BTreeMap<Tp, Answer> = BTreeMap::new();
    for (tp, wire) in &acks {
        let who = (&group, &*member);
        let result = acknowledge(broker, &lookup, who, *tp, wire, req.is_renew_ack).await;
        answers.entry(*tp).or_default().ack_error = result.err();
    }
    if step.closing {
        broker
            .shares
            .release(&group, &member, &step.partitions)
            .await;
    } else if req.max_records > 0 && !req.is_renew_ack {
        // A renewal (v2) only renews: it hands nothing out.
        hand_out(
            broker,
            &req,
            &group,
            &member,
            &step.partitions,
            &lookup,
            &mut answers,
        )
        .await;
    }
    let lock_ms = broker.shares.limits(&group).lock.as_millis();
    Ok(response(&lookup, answers, lock_ms))
}

/// Every partition of the session hands out what it can; with nothing handed out, waits for
/// an append or a record coming back, up to the request's `MaxWaitMs`.
async fn hand_out(
    broker: &Arc<Broker>,
    req: &ShareFetchRequest,
    group: &Arc<str>,
    member: &Arc<str>,
    partitions: &[Tp],
    lookup: &Lookup<'_>,
    answers: &mut BTreeMap<Tp, Answer>,
) {
    let wait = Duration::from_millis(u64::try_from(req.max_wait_ms).unwrap_or(0));
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        // Registered before the partitions are looked at, so nothing that happens in between
        // is missed.
        let woken = Arc::new(Notify::new());
        let released = broker.shares.released();
        tokio::pin!(released);
        released.as_mut().enable();
        let mut records_left = i64::from(req.max_records.max(1));
        let mut bytes_left = usize::try_from(req.max_bytes.max(1)).unwrap_or(usize::MAX);
        let mut handed_any = false;
        // Round robin by session epoch, as Kafka rotates: the records a request may carry
        // go to other partitions first each time, so none waits behind the others.
        let start = usize::try_from(req.share_session_epoch).unwrap_or(0) % partitions.len().max(1);
        let (later, first) = partitions.split_at(start);
        for tp in first.iter().chain(later) {
            let p = match lookup.partition(*tp) {
                Ok(p) => p,
                Err(e) => {
                    answers.entry(*tp).or_default().error = Some(e);
                    continue;
                }
            };
            if records_left <= 0 || bytes_left == 0 {
                continue;
            }
            p.waiters().watch(&woken);
            let whole_batches = req.share_acquire_mode == BATCH_OPTIMIZED;
            let handed = broker
                .shares
                .fetch(group, member, p, (records_left, whole_batches), bytes_left)
                .await;
            match handed {
                Ok(Some(h)) => {
                    records_left -= h.acquired.iter().map(|a| a.last - a.first + 1).sum::<i64>();
                    bytes_left = bytes_left.saturating_sub(h.records.len());
                    let a = answers.entry(*tp).or_default();
                    a.acquired = (h.acquired.iter())
                        .map(|a| {
                            AcquiredRecords::default()
                                .with_first_offset(a.first)
                                .with_last_offset(a.last)
                                .with_delivery_count(a.deliveries as i16)
                        })
                        .collect();
                    a.records = Some(h.records);
                    handed_any = true;
                }
                Ok(None) => {}
                Err(e) => {
                    answers.entry(*tp).or_default().error = Some(e);
                }
            }
        }
        if handed_any || tokio::time::Instant::now() >= deadline {
            return;
        }
        tokio::select! {
            _ = woken.notified() => {}
            _ = released => {}
            _ = tokio::time::sleep_until(deadline) => return,
        }
    }
}

/// The answer; `lock_ms` the group's acquisition lock duration.
fn response(
    lookup: &Lookup<'_>,
    answers: BTreeMap<Tp, Answer>,
    lock_ms: u128,
) -> ShareFetchResponse {
    let mut by_topic: BTreeMap<Uuid, Vec<PartitionData>> = BTreeMap::new();
    for (tp, a) in answers {
        let mut d = PartitionData::default().with_partition_index(tp.1);
        if let Some(e) = a.error {
            if matches!(
                e.code,
                ErrorCode::NotLeaderOrFollower | ErrorCode::FencedLeaderEpoch
            ) {
                let (leader_id, leader_epoch) = lookup.leader(tp);
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
        if let Some(e) = a.ack_error {
            d = d
                .with_acknowledge_error_code(e.code.code())
                .with_acknowledge_error_message(Some(str_bytes(e.message)));
        }
        // Never null: librdkafka reads a null record set (size -1) as a malformed response and
        // drops all of it, records acquired for other partitions included.
        d = (d.with_records(Some(a.records.unwrap_or_default()))).with_acquired_records(a.acquired);
        by_topic.entry(tp.0).or_default().push(d);
    }
    ShareFetchResponse::default()
        .with_acquisition_lock_timeout_ms(i32::try_from(lock_ms).unwrap_or(i32::MAX))
        .with_responses(
            by_topic
                .into_iter()
                .map(|(topic_id, partitions)| {
                    ShareFetchableTopicResponse::default()
                        .with_topic_id(topic_id)
                        .with_partitions(partitions)
                })
                .collect(),
        )
}

pub(super) fn session_refusal(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::ShareSessionNotFound => "no share session here: open one with epoch 0",
        ErrorCode::InvalidShareSessionEpoch => "not the share session's epoch",
        ErrorCode::ShareSessionLimitReached => "this broker holds as many share sessions as it may",
        _ => "share session refused",
    }
}

pub async fn handle(
    broker: &Arc<Broker>,
    req: ShareFetchRequest,
    access: &Access,
    client_id: &str,
) -> ShareFetchResponse {
    let response = fetch(broker, req, access).await.unwrap_or_else(|e| {
        ShareFetchResponse::default()
            .with_error_code(e.code.code())
            .with_error_message(Some(str_bytes(e.message)))
    });
    let sent: usize = (response.responses.iter())
        .flat_map(|t| &t.partitions)
        .map(|p| p.records.as_ref().map_or(0, |r| r.len()))
        .sum();
    // A share consumer names no rack in its fetch: its zone is the one its client id names.
    let zone = crate::zones::client_zone(None, client_id);
    (broker.node.zones).count(Direction::Out, Kind::Fetch, zone, sent as u64);
    response
}
