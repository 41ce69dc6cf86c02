use std::collections::HashMap;
use std::sync::Arc;

use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse,
    TopicProduceResponse,
};
use kafka_protocol::messages::{BrokerId, ProduceRequest, ProduceResponse};

use kafka_protocol::messages::TopicName;

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::log::AppendInfo;
use crate::partition::{Committing, Partition};
use crate::security::Access;
use crate::txn::messages::Join;
use crate::zones::{Direction, Kind};
use strata_metadata::acl::AclOperation;

/// A produce request after its appends: each partition's outcome, or (acks=all) what it still
/// waits for. [`Appended::respond`] waits and builds the response.
pub struct Appended {
    broker: Arc<Broker>,
    version: i16,
    timeout: std::time::Duration,
    topics: Vec<TopicOutcomes>,
    /// The client's listener: the leaders it is told of are on it (KIP-951).
    listener: Arc<str>,
}

/// One topic of a request: its name as sent and as a string, and each partition's outcome.
type TopicOutcomes = (TopicName, String, Vec<(i32, Outcome)>);

enum Outcome {
    Done(Result<AppendInfo, ApiError>),
    Replicating(Arc<Partition>, Committing),
}

/// The first stage of a produce: appends each partition's batches, in request order. `None`
/// for acks=0, whose client expects no response at all.
///
/// The second stage ([`Appended::respond`]) may run while later requests of the same
/// connection are appended (`server.rs`): the order of appends is the order of requests, and
/// responses are still written in that order.
pub async fn append(
    broker: &Arc<Broker>,
    req: ProduceRequest,
    version: i16,
    listener: Arc<str>,
    access: &Access,
    client_id: &str,
) -> Option<Appended> {
    let sent: usize = (req.topic_data.iter())
        .flat_map(|t| &t.partition_data)
        .map(|p| p.records.as_ref().map_or(0, |r| r.len()))
        .sum();
    // A producer sends no rack: its zone is the one its client id names, if any.
    let zone = crate::zones::client_zone(None, client_id);
    (broker.node.zones).count(Direction::In, Kind::Produce, zone, sent as u64);
    let txn_id = (req.transactional_id.as_ref()).map(|t| t.0.as_str());
    let txn_denied = txn_id.is_some_and(|id| !access.transactional_id(AclOperation::Write, id));
    let refused = if txn_denied {
        HashMap::new()
    } else {
        verify_transactional(broker, &req, version).await
    };
    let acks = req.acks;
    let timeout = std::time::Duration::from_millis(req.timeout_ms.max(0) as u64);
    let mut topics = Vec::with_capacity(req.topic_data.len());
    for topic in req.topic_data {
        let name = topic.name.0.as_str().to_string();
        let info = if acks != 0 && acks != 1 && acks != -1 {
            Err(ApiError::new(
                ErrorCode::InvalidRequiredAcks,
                format!("acks={acks}"),
            ))
        } else if txn_denied {
            Err(ApiError::new(
                ErrorCode::TransactionalIdAuthorizationFailed,
                "WRITE on the transactional id is not authorized",
            ))
        } else if !access.topic(AclOperation::Write, &name) {
            Err(ApiError::new(
                ErrorCode::TopicAuthorizationFailed,
                format!("WRITE on topic '{name}' is not authorized"),
            ))
        } else if name.starts_with("__") {
            Err(ApiError::new(
                ErrorCode::InvalidTopicException,
                format!("'{name}' is an internal topic"),
            ))
        } else {
            match broker
                .node
                .topic_or_create(&name, || access.creates_topic(&name))
                .await
            {
                Ok(Some(_)) => Ok(()),
                Ok(None) => Err(ApiError::new(
                    ErrorCode::UnknownTopicOrPartition,
                    format!("unknown topic '{name}'"),
                )),
                Err(e) => Err(e),
            }
        };
        // Every partition is appended before any waits for its ISR: the acks=all waits of a
        // request overlap, so it waits one replication round, not one per partition.
        let outcomes = (topic.partition_data.iter())
            .map(|p| {
                // Most requests refuse nothing here: no key is built for them.
                let refusal = (!refused.is_empty())
                    .then(|| refused.get(&(name.clone(), p.index)))
                    .flatten();
                let outcome = match (&info, refusal) {
                    (Err(e), _) | (Ok(()), Some(e)) => Outcome::Done(Err(e.clone())),
                    (Ok(()), None) => {
                        append_partition(broker, &name, p.index, p.records.as_ref(), acks)
                    }
                };
                (p.index, outcome)
            })
            .collect();
        topics.push((topic.name, name, outcomes));
    }
    (acks != 0).then(|| Appended {
        broker: broker.clone(),
        version,
        timeout,
        topics,
        listener,
    })
}

/// The producer of a partition's transactional batches, `None` when it has none. All of
/// them must be one producer's; bytes that do not parse are left to the append's validation.
fn txn_producer(records: &bytes::Bytes) -> Result<Option<(i64, i16)>, ApiError> {
    let mut producer = None;
    for (h, _) in crate::log::records::batches(records).map_while(Result::ok) {
        if !h.is_transactional() {
            continue;
        }
        match producer {
            None => producer = Some((h.producer_id, h.producer_epoch)),
            Some(p) if p == (h.producer_id, h.producer_epoch) => {}
            Some(_) => {
                return Err(ApiError::new(
                    ErrorCode::InvalidRecord,
                    "transactional batches of more than one producer",
                ))
            }
        }
    }
    Ok(producer)
}

/// The partitions refused before their append on transactional grounds. Transactional
/// batches need the request's transactional id; the first of a transaction in a partition
/// (the producer has none open there at this epoch) is taken only if the transaction's
/// coordinator says the partition is in it (KIP-890 part 1) or, from v12 on (a transaction
/// version 2 client, which sends no AddPartitionsToTxn), adds it (part 2, see `crate::txn`).
async fn verify_transactional(
    broker: &Broker,
    req: &ProduceRequest,
    version: i16,
) -> HashMap<(String, i32), ApiError> {
    let mut refused = HashMap::new();
    let id = (req.transactional_id.as_ref())
        .map(|t| t.0.as_str())
        .filter(|t| !t.is_empty());
    let mut needed = Vec::new();
    let mut producer = None;
    for topic in &req.topic_data {
        let name = topic.name.0.as_str();
        for p in &topic.partition_data {
            let Some(records) = &p.records else { continue };
            let key = (name.to_string(), p.index);
            match (txn_producer(records), id) {
                (Ok(None), _) => {}
                (Err(e), _) => {
                    refused.insert(key, e);
                }
                (Ok(Some(_)), None) => {
                    refused.insert(
                        key,
                        ApiError::new(
                            ErrorCode::InvalidRecord,
                            "transactional records need the request's transactional id",
                        ),
                    );
                }
                (Ok(Some((pid, epoch))), Some(_)) => {
                    let open = (broker.node.leader_partition(name, p.index, -1))
                        .map(|part| part.has_ongoing_txn(pid, epoch));
                    if matches!(open, Ok(false)) {
                        needed.push(key);
                        producer = Some((pid, epoch));
                    }
                }
            }
        }
    }
    let (Some(id), Some((pid, epoch))) = (id, producer) else {
        return refused;
    };
    let how = if version >= 12 {
        Join::Add
    } else {
        Join::Verify
    };
    match broker.txn.join_anywhere(id, pid, epoch, &needed, how).await {
        Ok(codes) => {
            for (key, code) in needed.into_iter().zip(codes) {
                let code = match code {
                    ErrorCode::None => continue,
                    ErrorCode::ProducerFenced => ErrorCode::InvalidProducerEpoch,
                    c => c,
                };
                refused.insert(
                    key,
                    ApiError::new(
                        code,
                        "the partition is not in the producer's ongoing transaction",
                    ),
                );
            }
        }
        Err(e) => {
            for key in needed {
                refused.insert(key, e.clone());
            }
        }
    }
    refused
}

/// Appends one partition's batches: the outcome, or for acks=all what to wait for.
fn append_partition(
    broker: &Broker,
    name: &str,
    partition: i32,
    records: Option<&bytes::Bytes>,
    acks: i16,
) -> Outcome {
    let appended = (|| {
        let p = broker.node.leader_partition(name, partition, -1)?;
        let records =
            records.ok_or_else(|| ApiError::new(ErrorCode::InvalidRecord, "null records"))?;
        let (info, committing) = p.produce_append(records, acks, |info| {
            if !info.duplicate {
                broker.node.metrics.produced(name, info.records, info.bytes);
                broker.node.metrics.recompressed(info.recompressed);
            }
        })?;
        Ok((p, info, committing))
    })();
    match appended {
        Ok((p, _, Some(c))) => Outcome::Replicating(p, c),
        Ok((_, info, None)) => Outcome::Done(Ok(info)),
        Err(e) => Outcome::Done(Err(e)),
    }
}

impl Appended {
    /// Whether the response waits for replication (an acks=all append to some partition).
    pub fn waits(&self) -> bool {
        (self.topics.iter())
            .flat_map(|(_, _, outcomes)| outcomes)
            .any(|(_, o)| matches!(o, Outcome::Replicating(..)))
    }

    /// The second stage: waits for the ISR where acks=all asked, then the response.
    ///
    /// A partition refused because this broker does not lead it (any more) carries the
    /// current leader and epoch, and the response the leaders' addresses (KIP-951, v10+): the
    /// client redirects at once instead of waiting for a metadata refresh, which is what a
    /// leadership move (a reassignment, a balance, a failover) otherwise costs every producer.
    pub async fn respond(self) -> ProduceResponse {
        let Appended {
            broker,
            version,
            timeout,
            topics,
            listener,
        } = self;
        let mut shape = Vec::with_capacity(topics.len());
        let mut waits = Vec::new();
        for (topic_name, name, outcomes) in topics {
            let mut indexes = Vec::with_capacity(outcomes.len());
            for (index, outcome) in outcomes {
                indexes.push(index);
                waits.push(async move {
                    match outcome {
                        Outcome::Done(r) => r,
                        Outcome::Replicating(p, c) => p.committed(c, timeout).await,
                    }
                });
            }
            shape.push((topic_name, name, indexes));
        }
        let mut results = futures::future::join_all(waits).await.into_iter();
        let mut leaders_named: Vec<u64> = Vec::new();
        let mut responses = Vec::with_capacity(shape.len());
        for (topic_name, name, indexes) in shape {
            let mut partitions = Vec::with_capacity(indexes.len());
            for index in indexes {
                let result = results
                    .next()
                    .expect("one result per partition")
                    .map(|info| (info.base_offset, info.log_append_time, info.log_start));
                let resp = PartitionProduceResponse::default().with_index(index);
                partitions.push(match result {
                Ok((base_offset, log_append_time, log_start)) => resp
                    .with_base_offset(base_offset)
                    .with_log_append_time_ms(log_append_time)
                    .with_log_start_offset(log_start),
                Err(e) => {
                    broker.node.metrics.produce_error(e.code);
                    tracing::debug!(topic = %name, partition = index, error = %e, "produce refused");
                    let moved = matches!(
                        e.code,
                        ErrorCode::NotLeaderOrFollower | ErrorCode::FencedLeaderEpoch
                    );
                    // From v8 (KIP-467); older clients have the message only.
                    let record_errors = (e.record_errors.into_iter())
                        .filter(|_| version >= 8)
                        .map(|(index, why)| {
                            BatchIndexAndErrorMessage::default()
                                .with_batch_index(index)
                                .with_batch_index_error_message(Some(str_bytes(why)))
                        })
                        .collect();
                    let resp = resp
                        .with_error_code(e.code.code())
                        .with_base_offset(-1)
                        .with_log_append_time_ms(-1)
                        .with_log_start_offset(-1)
                        .with_error_message(Some(str_bytes(e.message)))
                        .with_record_errors(record_errors);
                    match broker.node.metadata.state().partition(&name, index) {
                        Some(info) if moved && version >= 10 => {
                            if let Some(l) = info.leader {
                                if !leaders_named.contains(&l) {
                                    leaders_named.push(l);
                                }
                            }
                            resp.with_current_leader(
                                LeaderIdAndEpoch::default()
                                    .with_leader_id(BrokerId(info.leader.map_or(-1, |l| l as i32)))
                                    .with_leader_epoch(info.leader_epoch),
                            )
                        }
                        _ => resp,
                    }
                }
            });
            }
            responses.push(
                TopicProduceResponse::default()
                    .with_name(topic_name)
                    .with_partition_responses(partitions),
            );
        }
        let state = broker.node.metadata.state();
        let node_endpoints = leaders_named
            .iter()
            .filter_map(|id| state.brokers.get(id))
            .filter(|b| !b.fenced)
            .filter_map(|b| {
                let (host, port) = b.endpoint(&listener)?;
                Some(
                    NodeEndpoint::default()
                        .with_node_id(BrokerId(b.node_id as i32))
                        .with_host(str_bytes(host))
                        .with_port(i32::from(port))
                        .with_rack(b.rack.clone().map(str_bytes)),
                )
            })
            .collect();
        ProduceResponse::default()
            .with_responses(responses)
            .with_node_endpoints(node_endpoints)
    }
}
