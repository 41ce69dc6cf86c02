//! One pass of a fetch over its partitions: each read once, through the one read over both
//! tiers ([`crate::tier::Tier::read`]), within the response's byte budget, a follower's
//! position reported on the way
//! ([`crate::replication::isr::IsrProposals::follower_fetched`]), and the answer built with
//! what each partition said for the session.

use std::sync::Arc;

use super::plan::{Wanted, WantedPartition};
use super::redirect::Redirect;
use crate::broker::Broker;
use crate::error::ErrorCode;
use crate::fetch_session::Answer;
use crate::log::Batches;
use crate::partition::{Isolation, Partition};
use crate::protocol::fetch_response::{self as wire, FetchResponse};

/// Whether a fetch from `offset` has nothing to read: a consumer at the high watermark (at
/// the last stable offset if it reads committed), a follower at the log end (read from the
/// published offsets; a write racing this check is seen by the read after the fetch
/// registers to wait, or wakes it).
fn caught_up(p: &Partition, offset: i64, isolation: Isolation) -> bool {
    let o = p.published_offsets();
    offset == isolation.end(&o) && offset >= o.log_start
}

/// One pass's answer.
pub(super) struct Reply {
    pub(super) response: FetchResponse,
    /// Record bytes in it.
    pub(super) bytes: usize,
    /// Whether a partition had an error (which answers the fetch at once).
    pub(super) errors: bool,
    /// What each partition in the response said, by its place in the wanted list (for the
    /// session).
    pub(super) answers: Vec<(usize, usize, Answer)>,
    /// Partitions with records to read that the response left out for its size.
    pub(super) behind: Vec<(usize, usize)>,
    /// Whether a partition sent its consumer to another replica (which answers at once).
    pub(super) redirected: bool,
    /// A follower's fetch: whether a partition's high watermark passed what its session last
    /// told the follower (which answers at once: consumers reading from followers wait for it).
    pub(super) newer_high_watermark: bool,
}

/// How a fetch reads: the same for each of its passes.
pub(super) struct Pass {
    pub(super) max_bytes: usize,
    /// A follower's fetch: its broker id.
    pub(super) replica: Option<u64>,
    pub(super) isolation: Isolation,
    /// Answers only the partitions with news.
    pub(super) incremental: bool,
    /// Keeps no record of what each partition was told (there is no session to tell).
    pub(super) sessionless: bool,
    /// A consumer in another zone: partitions with an in-sync replica in its zone send it there.
    pub(super) redirect: Option<Redirect>,
}

/// One pass over the requested partitions. An incremental fetch answers only the partitions
/// with news for its client. A follower's position is reported to the leader's bookkeeping on
/// the first pass only (`report` is `Some`): the passes after a wait read from the same
/// offsets, and at 10,000 partitions reporting each pass was most of an idle leader's CPU. On
/// that pass, `Some(false)` reports only the partitions the request names.
pub(super) async fn read_all(
    broker: &Arc<Broker>,
    wanted: &[Wanted],
    pass: &Pass,
    report: Option<bool>,
) -> Reply {
    let Pass {
        max_bytes,
        replica,
        isolation,
        incremental,
        sessionless,
        ref redirect,
    } = *pass;
    let mut total = 0usize;
    let mut errors = false;
    let mut redirected = false;
    let mut newer_high_watermark = false;
    let mut answers = Vec::new();
    let mut behind = Vec::new();
    let mut topics = Vec::with_capacity(if incremental { 0 } else { wanted.len() });
    for (w_at, w) in wanted.iter().enumerate() {
        let mut partitions = Vec::with_capacity(if incremental { 0 } else { w.partitions.len() });
        for (
            p_at,
            WantedPartition {
                index,
                asked,
                named,
                partition: part,
                error: err,
                ..
            },
        ) in w.partitions.iter().enumerate()
        {
            let report = report.is_some_and(|all| all || *named);
            let offset = asked.fetch_offset;
            let partition_max = asked.max_bytes.max(0) as usize;
            if let (Some(p), Some(follower), true) = (part, replica, report) {
                broker.isr.follower_fetched(p, follower, offset);
            }
            let preferred = match (part, err, redirect) {
                (Some(p), None, Some(r)) => r.preferred(p, offset),
                _ => None,
            };
            let result = match (part, err) {
                (_, Some(e)) => Err(e.code),
                (Some(p), None) if preferred.is_some() => {
                    // Sent away: no records, as Kafka's leader answers.
                    redirected = true;
                    Ok((Batches::default(), p.published_offsets(), Vec::new()))
                }
                (Some(p), None) if caught_up(p, offset, isolation) => {
                    // Nothing new: answered from the published offsets, without the log lock.
                    Ok((Batches::default(), p.published_offsets(), Vec::new()))
                }
                (Some(p), None) => {
                    // After the first non-empty partition, stay within the request's max_bytes.
                    let budget = if total == 0 {
                        partition_max
                    } else {
                        partition_max.min(max_bytes.saturating_sub(total))
                    };
                    if budget == 0 && total > 0 {
                        // The response is full: this partition is answered from its published
                        // offsets (a consumer reading 10,000 partitions from the beginning
                        // names thousands of these per fetch; each took the log lock).
                        behind.push((w_at, p_at));
                        Ok((Batches::default(), p.published_offsets(), Vec::new()))
                    } else {
                        let read = broker
                            .tier
                            .read(p.clone(), offset, budget.max(1), isolation);
                        match read.await {
                            Ok(r) => Ok((r.batches, r.offsets, r.aborted)),
                            Err(e) => Err(crate::error::ApiError::from(e).code),
                        }
                    }
                }
                (None, None) => Err(ErrorCode::UnknownTopicOrPartition),
            };
            let answer = match &result {
                Ok((records, offsets, _)) => Answer {
                    records: records.bytes.len(),
                    high_watermark: offsets.high_watermark,
                    last_stable: offsets.last_stable,
                    log_start: offsets.log_start,
                    error: false,
                    redirected: preferred.is_some(),
                },
                Err(_) => Answer {
                    records: 0,
                    high_watermark: -1,
                    last_stable: -1,
                    log_start: -1,
                    error: true,
                    redirected: false,
                },
            };
            if incremental && !answer.is_news(asked) {
                continue;
            }
            if replica.is_some() && incremental && answer.high_watermark > asked.high_watermark {
                newer_high_watermark = true;
            }
            if !sessionless {
                answers.push((w_at, p_at, answer));
            }
            partitions.push(match result {
                Ok((records, offsets, aborted)) => {
                    total += records.bytes.len();
                    wire::Partition {
                        index: *index,
                        error_code: 0,
                        high_watermark: offsets.high_watermark,
                        last_stable_offset: offsets.last_stable,
                        log_start_offset: offsets.log_start,
                        aborted: (isolation == Isolation::Committed).then(|| {
                            aborted
                                .iter()
                                .map(|a| (a.producer_id, a.first_offset))
                                .collect()
                        }),
                        records: records.bytes,
                        file: records.file,
                        preferred_read_replica: preferred.map_or(-1, |id| id as i32),
                    }
                }
                Err(code) => {
                    errors = true;
                    wire::Partition {
                        index: *index,
                        error_code: code.code(),
                        high_watermark: -1,
                        last_stable_offset: -1,
                        log_start_offset: -1,
                        aborted: None,
                        records: bytes::Bytes::new(),
                        file: None,
                        preferred_read_replica: -1,
                    }
                }
            });
        }
        if partitions.is_empty() && incremental {
            continue;
        }
        topics.push(wire::Topic {
            name: w.topic.clone(),
            topic_id: w.topic_id,
            partitions,
        });
    }
    Reply {
        response: FetchResponse {
            throttle_time_ms: 0,
            error_code: 0,
            session_id: 0,
            topics,
        },
        bytes: total,
        errors,
        answers,
        behind,
        redirected,
        newer_high_watermark,
    }
}
