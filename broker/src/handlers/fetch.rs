//! Fetch: whole batches from the requested offsets, zero-copy slices of the segment mappings,
//! or, below the local log start, checked batches from the remote tier's cache.
//! With `min_bytes` unmet the request waits (up to `max_wait_ms`) for an append to any of its
//! partitions to wake it: appends notify, nothing polls.
//!
//! A fetch names every partition it wants (librdkafka sends no fetch sessions), so what it
//! costs per partition is kept to what a partition with nothing new needs: topics are looked
//! up once per request, partitions by index (no allocation, no map lookup), and waiters are
//! registered only by a fetch about to wait, at most once per partition.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};
use tokio::sync::Notify;

use super::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::partition::{Offsets, Partition, Read};

struct Wanted {
    topic: TopicName,
    topic_id: uuid::Uuid,
    partitions: Vec<WantedPartition>,
}

/// One requested partition: where to read, and the partition or why there is none.
struct WantedPartition {
    index: i32,
    offset: i64,
    max_bytes: usize,
    partition: Option<Arc<Partition>>,
    error: Option<ApiError>,
}

pub async fn handle(broker: &Arc<Broker>, req: FetchRequest, version: i16) -> FetchResponse {
    // A follower sets its broker id (v15+: in the replica state); consumers send -1.
    let replica_id = if version >= 15 {
        req.replica_state.replica_id.0
    } else {
        req.replica_id.0
    };
    let replica = u64::try_from(replica_id).ok();
    let state = broker.node.metadata.state();
    let hosted = broker.node.partitions.hosted();
    let mut wanted = Vec::with_capacity(req.topics.len());
    for t in &req.topics {
        // v13+ names topics by id only.
        let info = if version >= 13 {
            state.topic_by_id(&t.topic_id)
        } else {
            state.topic(t.topic.0.as_str())
        };
        let missing = if version >= 13 {
            ErrorCode::UnknownTopicId
        } else {
            ErrorCode::UnknownTopicOrPartition
        };
        let name = info.map_or(t.topic.0.as_str(), |i| i.name.as_str());
        // Looked up once per topic; each partition is then an index.
        let slots = info.and_then(|i| hosted.topic(&i.name)).unwrap_or_default();
        let partitions = t
            .partitions
            .iter()
            .map(|p| {
                let result = match info {
                    None => Err(ApiError::new(
                        missing,
                        format!("unknown {name}-{}", p.partition),
                    )),
                    Some(i) => {
                        let index = usize::try_from(p.partition).ok();
                        broker.node.check_leader(
                            name,
                            p.partition,
                            index.and_then(|x| i.partitions.get(x)).map(|x| &**x),
                            index.and_then(|x| slots.get(x)).and_then(Option::as_ref),
                            p.current_leader_epoch,
                        )
                    }
                };
                let (partition, error) = match result {
                    Ok(part) => (Some(part), None),
                    Err(e) => (None, Some(e)),
                };
                WantedPartition {
                    index: p.partition,
                    offset: p.fetch_offset,
                    max_bytes: p.partition_max_bytes.max(0) as usize,
                    partition,
                    error,
                }
            })
            .collect();
        wanted.push(Wanted {
            topic: TopicName(str_bytes(name.to_string())),
            topic_id: t.topic_id,
            partitions,
        });
    }
    drop(state);
    drop(hosted);

    let deadline = Instant::now() + Duration::from_millis(req.max_wait_ms.max(0) as u64);
    let min_bytes = req.min_bytes.max(0) as usize;
    let max_bytes = if req.max_bytes <= 0 {
        usize::MAX
    } else {
        req.max_bytes as usize
    };
    let notify = Arc::new(Notify::new());
    // Whether every partition holds `notify` in its waiter list since the last wake-up.
    let mut watching = false;
    loop {
        let (resp, bytes, errors) = read_all(broker, &wanted, max_bytes, replica).await;
        if bytes >= min_bytes || errors || Instant::now() >= deadline {
            broker.node.metrics.fetched(bytes as u64);
            return resp.with_session_id(0);
        }
        if !watching {
            // Only a fetch about to wait registers, and then reads once more, so an append
            // between the read above and the registration is not missed.
            for w in &wanted {
                for wp in &w.partitions {
                    if let Some(p) = &wp.partition {
                        p.watch(&notify);
                    }
                }
            }
            watching = true;
            continue;
        }
        if tokio::time::timeout_at(deadline.into(), notify.notified())
            .await
            .is_err()
        {
            let (resp, bytes, _) = read_all(broker, &wanted, max_bytes, replica).await;
            broker.node.metrics.fetched(bytes as u64);
            return resp.with_session_id(0);
        }
        // The partition that woke us dropped its registration; the others keep theirs.
        watching = false;
    }
}

/// One partition's batches from `offset`, from whichever tier holds them. A remote read runs
/// on the tier's low-priority threads ([`crate::tier::Tier::spawn`]).
async fn read(
    broker: &Arc<Broker>,
    p: Arc<Partition>,
    offset: i64,
    max_bytes: usize,
    replica: Option<u64>,
) -> Result<(bytes::Bytes, Offsets), ApiError> {
    if let Some(follower) = replica {
        crate::replication::follower_fetched(&broker.node, &p, follower, offset);
        return Ok(p.read_replica(offset, max_bytes)?);
    }
    match p.read(offset, max_bytes)? {
        (Read::Local(bytes), offsets) => Ok((bytes, offsets)),
        (Read::Remote(segment), offsets) => Ok((
            broker
                .tier
                .read_partition(p, segment, offset, max_bytes)
                .await?,
            offsets,
        )),
    }
}

/// Whether a fetch from `offset` has nothing to read: a consumer at the high watermark, a
/// follower at the log end (read from the published offsets; a write racing this check is
/// seen by the read after the fetch registers to wait, or wakes it).
fn caught_up(p: &Partition, offset: i64, replica: Option<u64>) -> bool {
    let o = p.published_offsets();
    let end = match replica {
        None => o.high_watermark,
        Some(_) => o.log_end,
    };
    offset == end && offset >= o.log_start
}

/// One pass over the requested partitions. Returns the response, the bytes in it, and whether
/// any partition had an error (which answers the fetch at once).
async fn read_all(
    broker: &Arc<Broker>,
    wanted: &[Wanted],
    max_bytes: usize,
    replica: Option<u64>,
) -> (FetchResponse, usize, bool) {
    let mut total = 0usize;
    let mut errors = false;
    let mut topics = Vec::with_capacity(wanted.len());
    for w in wanted {
        let mut partitions = Vec::with_capacity(w.partitions.len());
        for WantedPartition {
            index,
            offset,
            max_bytes: partition_max,
            partition: part,
            error: err,
        } in &w.partitions
        {
            let mut data = PartitionData::default()
                .with_partition_index(*index)
                .with_high_watermark(-1)
                .with_last_stable_offset(-1)
                .with_log_start_offset(-1);
            let result = match (part, err) {
                (_, Some(e)) => Err(e.clone()),
                (Some(p), None) if caught_up(p, *offset, replica) => {
                    // Nothing new: answered from the published offsets, without the log lock.
                    if let Some(follower) = replica {
                        crate::replication::follower_fetched(&broker.node, p, follower, *offset);
                    }
                    Ok((bytes::Bytes::new(), p.published_offsets()))
                }
                (Some(p), None) => {
                    // After the first non-empty partition, stay within the request's max_bytes.
                    let budget = if total == 0 {
                        *partition_max
                    } else {
                        (*partition_max).min(max_bytes.saturating_sub(total))
                    };
                    if budget == 0 && total > 0 {
                        let o = p.offsets();
                        Ok((bytes::Bytes::new(), o))
                    } else {
                        read(broker, p.clone(), *offset, budget.max(1), replica).await
                    }
                }
                (None, None) => Err(ApiError::new(
                    ErrorCode::UnknownTopicOrPartition,
                    "unknown partition",
                )),
            };
            match result {
                Ok((records, offsets)) => {
                    total += records.len();
                    data = data
                        .with_high_watermark(offsets.high_watermark)
                        .with_last_stable_offset(offsets.high_watermark)
                        .with_log_start_offset(offsets.log_start)
                        .with_records(Some(records));
                }
                Err(e) => {
                    errors = true;
                    data = data
                        .with_error_code(e.code.code())
                        .with_records(Some(bytes::Bytes::new()));
                }
            }
            partitions.push(data);
        }
        topics.push(
            FetchableTopicResponse::default()
                .with_topic(w.topic.clone())
                .with_topic_id(w.topic_id)
                .with_partitions(partitions),
        );
    }
    (
        FetchResponse::default().with_responses(topics),
        total,
        errors,
    )
}
