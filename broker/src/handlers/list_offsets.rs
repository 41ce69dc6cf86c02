use std::sync::Arc;

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::security::Access;
use strata_metadata::acl::AclOperation;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
/// KIP-1005: the last offset in the object store.
const LATEST_TIERED: i64 = -5;
/// KIP-1023: the first offset not yet in the object store; followers joining a tiered
/// partition start there.
const EARLIEST_PENDING_UPLOAD: i64 = -6;

pub async fn handle(
    broker: &Arc<Broker>,
    req: ListOffsetsRequest,
    version: i16,
    access: &Access,
) -> ListOffsetsResponse {
    // read_committed consumers (v2+) see up to the last stable offset.
    let committed = req.isolation_level == 1;
    // v10 (KIP-1075): the client's bound on the whole request, remote (object store) lookups
    // included; a partition not answered by then is REQUEST_TIMED_OUT, the others stand.
    let deadline = (version >= 10 && req.timeout_ms > 0).then(|| {
        tokio::time::Instant::now() + std::time::Duration::from_millis(req.timeout_ms as u64)
    });
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let name = t.name.0.as_str().to_string();
        let authorized = access.topic(AclOperation::Describe, &name);
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in t.partitions {
            let resp =
                ListOffsetsPartitionResponse::default().with_partition_index(p.partition_index);
            if !authorized {
                partitions.push(
                    resp.with_error_code(ErrorCode::TopicAuthorizationFailed.code())
                        .with_offset(-1)
                        .with_timestamp(-1),
                );
                continue;
            }
            let found = lookup(
                broker,
                &name,
                p.partition_index,
                p.timestamp,
                p.current_leader_epoch,
                committed,
            );
            let found = match deadline {
                None => found.await,
                Some(at) => tokio::time::timeout_at(at, found)
                    .await
                    .unwrap_or_else(|_| {
                        Err(ApiError::new(
                            ErrorCode::RequestTimedOut,
                            "not found within the request's timeout_ms",
                        ))
                    }),
            };
            partitions.push(match found {
                Ok((offset, timestamp, epoch)) => {
                    let resp = resp.with_offset(offset).with_timestamp(timestamp);
                    // Leader epochs exist from v4; earlier versions must leave the default.
                    if version >= 4 {
                        resp.with_leader_epoch(epoch)
                    } else {
                        resp
                    }
                }
                Err(e) => resp
                    .with_error_code(e.code.code())
                    .with_offset(-1)
                    .with_timestamp(-1),
            });
        }
        topics.push(
            ListOffsetsTopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions),
        );
    }
    ListOffsetsResponse::default().with_topics(topics)
}

async fn lookup(
    broker: &Broker,
    topic: &str,
    partition: i32,
    ts: i64,
    current_leader_epoch: i32,
    committed: bool,
) -> Result<(i64, i64, i32), ApiError> {
    let (found, epoch) = find(
        broker,
        topic,
        partition,
        ts,
        current_leader_epoch,
        committed,
    )
    .await?;
    Ok((found.0, found.1, epoch))
}

/// The offset and timestamp for `ts`, and the leader epoch of that offset (Kafka reports the
/// latest epoch for the log end). A read_committed client's answers stay below the last
/// stable offset, as Kafka's do: LATEST is the LSO, and a record found at or past it is not
/// found.
async fn find(
    broker: &Broker,
    topic: &str,
    partition: i32,
    ts: i64,
    current_leader_epoch: i32,
    committed: bool,
) -> Result<((i64, i64), i32), ApiError> {
    let p = broker
        .node
        .leader_partition(topic, partition, current_leader_epoch)?;
    let o = p.offsets();
    let fetchable = if committed {
        o.last_stable
    } else {
        o.high_watermark
    };
    let target = match ts {
        LATEST => return Ok(((fetchable, -1), p.epoch_for_offset(i64::MAX))),
        EARLIEST => return Ok(((o.log_start, -1), p.epoch_for_offset(o.log_start))),
        EARLIEST_LOCAL => {
            let start = p.local_log_start().max(o.log_start);
            return Ok(((start, -1), p.epoch_for_offset(start)));
        }
        EARLIEST_PENDING_UPLOAD => {
            let start = p.first_pending_upload().max(o.log_start);
            return Ok(((start, -1), p.epoch_for_offset(start)));
        }
        LATEST_TIERED => {
            return Ok(match p.last_tiered() {
                Some(last) => ((last, -1), p.epoch_for_offset(last)),
                None => ((-1, -1), -1),
            })
        }
        // The first record holding the newest timestamp, found as any timestamp is.
        MAX_TIMESTAMP => match p.max_timestamp() {
            Some(newest) => newest,
            None => return Ok(((-1, -1), -1)),
        },
        ts if ts < 0 => {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                format!("timestamp {ts}"),
            ))
        }
        ts => ts,
    };
    let found = broker.tier.offset_for_timestamp(p.clone(), target).await?;
    Ok(match found {
        Some((offset, ts)) if offset < fetchable => ((offset, ts), p.epoch_for_offset(offset)),
        _ => ((-1, -1), -1),
    })
}
