//! Dead-letter topics (KIP-1191): a share group with `errors.deadletterqueue.topic.name` has
//! every record it gives up on — rejected by a member, or at the delivery limit — written to
//! that topic, one dead-letter record per source record, with Kafka's `__dlq.errors.*`
//! headers (source topic, partition, offset, group, delivery count, why) and, with
//! `errors.deadletterqueue.copy.record.enable`, the source record's key, value and headers.
//!
//! The topic must pass Kafka's rules, checked at every write (an operator's change applies to
//! the next): a name not starting with `__`, with the cluster's prefix
//! (`errors.deadletterqueue.topic.name.prefix`, `dlq.`), on a topic with
//! `errors.deadletterqueue.group.enable=true` — or missing, when the cluster creates dead-letter
//! topics (`errors.deadletterqueue.auto.create.topics.enable`; created with that flag set).
//! The record goes to the partition `source partition % partitions`, produced (acks=all) to its
//! leader over the inter-broker listener, this broker's own included.
//!
//! Invariants:
//! - a dead letter is never lost silently: it waits in its share partition (DeadLettering,
//!   persisted) until written here or given up on; a failed write is retried with back-off
//!   (1 s doubling to 30 s, 5 attempts, as Kafka's) and every attempt that fails is counted
//!   and logged; one given up on is archived, counted and logged as an error;
//! - nothing waits for a write: acknowledgements, fetches and lock expiry go on, and the
//!   writes run off the housekeeping round;
//! - at least once: a write cut short (a failover, a retry after an answer lost) may be
//!   written again, never not at all.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use strata_metadata::ClusterState;

use super::metrics::GroupLabels;
use super::partition::{DeadLetter, Key, Why};
use crate::error::ErrorCode;
use crate::group::config::{dead_letter_topic_allowed, InForce};
use crate::log::batch::{self, BatchHeader, Header, KeyValue};
use crate::log::records;
use crate::node::Node;
use crate::partition::{Isolation, Partition};
use crate::security::inter_broker::Peers;
use crate::tier::Tier;
use crate::topic_config::DLQ_GROUP_ENABLE;

const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
const MAX_ATTEMPTS: u32 = 5;
/// A produce to the dead-letter topic's leader may take this long (it waits for the ISR).
const CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// Dead-letter records go out in batches of about this size.
const BATCH_BYTES: usize = 512 << 10;
/// Source records are read this much at a time.
const READ_BYTES: usize = 1 << 20;

/// Records given up on, for a share group.
#[derive(Debug)]
pub struct Job {
    pub key: Key,
    pub letter: DeadLetter,
    attempts: u32,
    not_before: Instant,
    /// Copy the source records (off after the topic refused a copy as too large).
    copy: bool,
}

/// Why a write did not happen.
#[derive(Debug)]
pub struct Failure {
    why: String,
    /// The topic refused the records as too large, with the source records copied.
    copy_too_large: bool,
}

/// What became of a job.
pub enum Done {
    /// Written (this many dead-letter records).
    Written(usize),
    /// Given up on after its attempts: archived without a dead-letter record.
    GaveUp,
}

pub struct DeadLetters {
    node: Arc<Node>,
    tier: Arc<Tier>,
    peers: Peers,
    queue: Mutex<VecDeque<Job>>,
    written: Family<GroupLabels, Counter>,
    failed: Family<GroupLabels, Counter>,
    retried: Family<GroupLabels, Counter>,
    pending: Gauge,
}

impl DeadLetters {
    pub fn new(node: Arc<Node>, tier: Arc<Tier>) -> DeadLetters {
        let d = DeadLetters {
            peers: Peers::new(
                format!("strata-dlq-{}", node.config.node_id),
                CALL_TIMEOUT,
                1 << 20,
            ),
            node,
            tier,
            queue: Mutex::default(),
            written: Family::default(),
            failed: Family::default(),
            retried: Family::default(),
            pending: Gauge::default(),
        };
        let (w, f, r, p) = (
            d.written.clone(),
            d.failed.clone(),
            d.retried.clone(),
            d.pending.clone(),
        );
        d.node.metrics.register(|reg| {
            reg.register(
                "share_dlq_records_written",
                "Dead-letter records a share group wrote to its dead-letter topic (KIP-1191)",
                w,
            );
            reg.register(
                "share_dlq_records_failed",
                "Dead letters of a share group given up on after every attempt to write them (archived without a dead-letter record)",
                f,
            );
            reg.register(
                "share_dlq_write_retries",
                "Writes of a share group's dead letters that failed and will be tried again",
                r,
            );
            reg.register(
                "share_dlq_pending",
                "Dead letters waiting to be written to dead-letter topics (records)",
                p,
            );
        });
        d
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Job>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `letters` of share partition `key` for their write, now.
    pub fn enqueue(&self, key: &Key, letters: Vec<DeadLetter>, now: Instant) {
        let mut q = self.lock();
        for letter in letters {
            self.pending.inc_by(letter.last - letter.first + 1);
            q.push_back(Job {
                key: key.clone(),
                letter,
                attempts: 0,
                not_before: now,
                copy: true,
            });
        }
    }

    /// The jobs due by `now`, taken off the queue.
    pub fn due(&self, now: Instant) -> Vec<Job> {
        let mut q = self.lock();
        let (due, later): (Vec<Job>, Vec<Job>) = q.drain(..).partition(|j| j.not_before <= now);
        q.extend(later);
        due
    }

    /// A job dropped unwritten: this broker no longer leads its share partition (the new
    /// leader writes it from the persisted state).
    pub fn drop_job(&self, job: &Job) {
        self.pending.dec_by(job.letter.last - job.letter.first + 1);
    }

    /// Settles a job after an attempt: done (written or given up on), or queued again.
    pub fn settle(
        &self,
        mut job: Job,
        result: Result<usize, Failure>,
        now: Instant,
    ) -> Option<Done> {
        let n = job.letter.last - job.letter.first + 1;
        let labels = GroupLabels {
            group: job.key.0.to_string(),
        };
        let e = match result {
            Ok(written) => {
                self.pending.dec_by(n);
                self.written.get_or_create(&labels).inc_by(written as u64);
                return Some(Done::Written(written));
            }
            Err(e) => e,
        };
        job.attempts += 1;
        if e.copy_too_large && job.copy {
            // Written again at once without the source records: the coordinates are still
            // worth having.
            job.copy = false;
            job.attempts -= 1;
        } else if job.attempts >= MAX_ATTEMPTS {
            self.pending.dec_by(n);
            self.failed.get_or_create(&labels).inc_by(n as u64);
            tracing::error!(group = %job.key.0, topic_id = %job.key.1, partition = job.key.2,
                first = job.letter.first, last = job.letter.last, attempts = job.attempts,
                error = %e.why, "dead letters given up on: archived without a dead-letter record");
            return Some(Done::GaveUp);
        }
        self.retried.get_or_create(&labels).inc();
        let backoff = (FIRST_BACKOFF * 2u32.pow(job.attempts.saturating_sub(1))).min(MAX_BACKOFF);
        tracing::warn!(group = %job.key.0, topic_id = %job.key.1, partition = job.key.2,
            first = job.letter.first, last = job.letter.last, attempts = job.attempts,
            error = %e.why, retry_in = ?backoff, "cannot write dead letters yet");
        job.not_before = now + backoff;
        self.lock().push_back(job);
        None
    }

    /// Writes a job's dead-letter records; `p` is its source partition, led here.
    pub async fn write(&self, job: &Job, p: Arc<Partition>) -> Result<usize, Failure> {
        let fail = |why: String| Failure {
            why,
            copy_too_large: false,
        };
        let group = &*job.key.0;
        let (topic, copy) = self.topic_for(group).await.map_err(fail)?;
        let state = self.node.metadata.state();
        let info = state
            .topic(&topic)
            .ok_or_else(|| fail(format!("dead-letter topic {topic} not in the metadata yet")))?;
        let partitions = i32::try_from(info.partitions.len())
            .unwrap_or(i32::MAX)
            .max(1);
        let index = p.tp.partition % partitions;
        let leader = (info.partitions.get(index as usize))
            .and_then(|x| x.leader)
            .ok_or_else(|| fail(format!("{topic}-{index} has no leader")))?;
        let copy = copy && job.copy;
        let sources = match copy {
            true => self.sources(&p, &job.letter).await.map_err(fail)?,
            false => Vec::new(),
        };
        let batches = dead_letter_batches(
            group,
            &p.tp.topic,
            p.tp.partition,
            &job.letter,
            &sources,
            self.node.clock.now_ms(),
        );
        let addr = (state.brokers.get(&leader)).map(|b| format!("{}:{}", b.host, b.port));
        let mut written = 0;
        for (count, batch) in batches {
            let req = ProduceRequest::default()
                .with_acks(-1)
                .with_timeout_ms(CALL_TIMEOUT.as_millis() as i32 - 1_000)
                .with_topic_data(vec![TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_string(topic.clone())))
                    .with_partition_data(vec![PartitionProduceData::default()
                        .with_index(index)
                        .with_records(Some(batch))])]);
            let resp = (self.peers)
                .call(&self.node.config, leader, addr.clone(), 9, &req)
                .await
                .map_err(|e| fail(format!("broker {leader}: {e}")))?;
            let code = (resp.responses.iter())
                .flat_map(|t| &t.partition_responses)
                .map(|r| r.error_code)
                .next()
                .unwrap_or(ErrorCode::UnknownServerError.code());
            if code != 0 {
                let code = ErrorCode::from_code(code);
                return Err(Failure {
                    why: format!("{topic}-{index} refused the dead letters: {code:?}"),
                    copy_too_large: copy
                        && matches!(
                            code,
                            ErrorCode::MessageTooLarge | ErrorCode::RecordListTooLarge
                        ),
                });
            }
            written += count;
        }
        Ok(written)
    }

    /// The group's dead-letter topic and whether to copy records, once it passes Kafka's rules
    /// (created when missing and the cluster creates dead-letter topics).
    async fn topic_for(&self, group: &str) -> Result<(String, bool), String> {
        let settings = self.node.settings();
        let state = self.node.metadata.state();
        let configs = InForce {
            broker: &settings,
            overrides: state.group_config(group),
        };
        let Some(topic) = configs.dead_letter_topic() else {
            return Err(format!("share group {group} names no dead-letter topic"));
        };
        let copy = configs.copy_dead_letters();
        check_topic(
            &state,
            &topic,
            &settings.errors_deadletterqueue_topic_name_prefix,
        )?;
        if state.topic(&topic).is_none() {
            if !settings.errors_deadletterqueue_auto_create_topics_enable {
                return Err(format!(
                    "dead-letter topic {topic} does not exist and errors.deadletterqueue.auto.create.topics.enable is false"
                ));
            }
            let configs = [
                (DLQ_GROUP_ENABLE.to_string(), "true".to_string()),
                // Dead letters carry the time they were written, whatever the cluster default.
                (
                    "message.timestamp.type".to_string(),
                    "CreateTime".to_string(),
                ),
            ];
            match (self.node)
                .create_topic(&topic, -1, -1, None, configs.into_iter().collect(), false)
                .await
            {
                Ok(_) => tracing::info!(%topic, group, "created the dead-letter topic"),
                Err(e) if e.code == ErrorCode::TopicAlreadyExists => {}
                Err(e) => {
                    return Err(format!(
                        "cannot create dead-letter topic {topic}: {}",
                        e.message
                    ))
                }
            }
        }
        Ok((topic, copy))
    }

    /// The source records of `letter`, read from `p` whichever tier holds them: (offset, key,
    /// value, headers) of each; offsets the log no longer has are missing.
    async fn sources(
        &self,
        p: &Arc<Partition>,
        letter: &DeadLetter,
    ) -> Result<Vec<Source>, String> {
        let mut out = Vec::new();
        let mut next = letter.first;
        while next <= letter.last {
            let read = (self
                .tier
                .read(p.clone(), next, READ_BYTES, Isolation::HighWatermark))
            .await
            .map_err(|e| format!("reading the source records: {e}"))?;
            if read.batches.bytes.is_empty() {
                break;
            }
            let before = next;
            for item in records::batches(&read.batches.bytes) {
                let Ok((h, b)) = item else { break };
                next = next.max(h.next_offset());
                if h.is_control() || h.last_offset() < letter.first {
                    continue;
                }
                collect(&b, &h, letter, &mut out)?;
            }
            if next == before {
                break;
            }
        }
        Ok(out)
    }
}

/// One source record: offset, key, value, headers as encoded.
struct Source {
    offset: i64,
    key: Option<Bytes>,
    value: Option<Bytes>,
    headers: Bytes,
}

fn collect(
    batch: &Bytes,
    h: &BatchHeader,
    letter: &DeadLetter,
    out: &mut Vec<Source>,
) -> Result<(), String> {
    let section = records::section(batch, h).map_err(|e| e.to_string())?;
    records::for_each(&section, h, |r| {
        if (letter.first..=letter.last).contains(&r.offset) {
            out.push(Source {
                offset: r.offset,
                key: r.key.map(Bytes::copy_from_slice),
                value: r.value.map(Bytes::copy_from_slice),
                headers: Bytes::copy_from_slice(r.headers),
            });
        }
    })
    .map_err(|e| e.to_string())
}

/// Kafka's rules for a dead-letter topic that is named, in Kafka's order: not internal, on a
/// topic that allows it if it exists, with the cluster's prefix.
fn check_topic(state: &ClusterState, topic: &str, prefix: &str) -> Result<(), String> {
    if topic.starts_with("__") {
        return dead_letter_topic_allowed(topic, prefix);
    }
    if let Some(t) = state.topic(topic) {
        if t.configs.get(DLQ_GROUP_ENABLE).map(String::as_str) != Some("true") {
            return Err(format!(
                "dead-letter topic {topic} does not have {DLQ_GROUP_ENABLE}=true"
            ));
        }
    }
    dead_letter_topic_allowed(topic, prefix)
}

/// The text of `__dlq.errors.message`: Kafka's.
fn message(why: Why) -> &'static str {
    match why {
        Why::Rejected => "Offset rejected by client.",
        Why::DeliveryLimit => "Offset delivery count exceeded the threshold.",
    }
}

/// The dead-letter records of `letter` in batches of about [`BATCH_BYTES`], each with its
/// record count: one per source offset, the source record's when it is among `sources`.
fn dead_letter_batches(
    group: &str,
    topic: &str,
    partition: i32,
    letter: &DeadLetter,
    sources: &[Source],
    now_ms: i64,
) -> Vec<(usize, Bytes)> {
    let partition = partition.to_string();
    let deliveries = letter.deliveries.to_string();
    let offsets: Vec<String> = (letter.first..=letter.last)
        .map(|o| o.to_string())
        .collect();
    let originals: Vec<Vec<Header<'_>>> = (sources.iter())
        .map(|s| records::headers(&s.headers).unwrap_or_default())
        .collect();
    let mut out = Vec::new();
    let mut batch: Vec<(KeyValue<'_>, Vec<Header<'_>>)> = Vec::new();
    let mut size = 0;
    for (i, offset) in (letter.first..=letter.last).enumerate() {
        let found = sources.binary_search_by_key(&offset, |s| s.offset).ok();
        let mut headers: Vec<Header<'_>> = found.map(|f| originals[f].clone()).unwrap_or_default();
        headers.extend([
            (&b"__dlq.errors.topic"[..], Some(topic.as_bytes())),
            (&b"__dlq.errors.partition"[..], Some(partition.as_bytes())),
            (&b"__dlq.errors.offset"[..], Some(offsets[i].as_bytes())),
            (&b"__dlq.errors.group"[..], Some(group.as_bytes())),
            (
                &b"__dlq.errors.delivery.count"[..],
                Some(deliveries.as_bytes()),
            ),
            (
                &b"__dlq.errors.message"[..],
                Some(message(letter.why).as_bytes()),
            ),
        ]);
        let kv: KeyValue<'_> = match found {
            Some(f) => (sources[f].key.as_deref(), sources[f].value.as_deref()),
            None => (None, None),
        };
        size += kv.0.map_or(0, <[u8]>::len) + kv.1.map_or(0, <[u8]>::len);
        size += headers
            .iter()
            .map(|(k, v)| k.len() + v.map_or(0, <[u8]>::len))
            .sum::<usize>();
        batch.push((kv, headers));
        if size >= BATCH_BYTES {
            out.push((batch.len(), batch::build_with_headers(&batch, now_ms)));
            batch.clear();
            size = 0;
        }
    }
    if !batch.is_empty() {
        out.push((batch.len(), batch::build_with_headers(&batch, now_ms)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    type Decoded = (Option<Vec<u8>>, Option<Vec<u8>>, Vec<(String, String)>);

    fn decoded(b: &Bytes) -> Vec<Decoded> {
        let h = BatchHeader::parse(b).unwrap();
        let section = records::section(b, &h).unwrap();
        let mut out = Vec::new();
        records::for_each(&section, &h, |r| {
            let headers = (records::headers(r.headers).unwrap().into_iter())
                .map(|(k, v)| {
                    let s = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
                    (s(k), v.map(s).unwrap_or_default())
                })
                .collect();
            out.push((
                r.key.map(<[u8]>::to_vec),
                r.value.map(<[u8]>::to_vec),
                headers,
            ));
        })
        .unwrap();
        out
    }

    #[test]
    fn a_dead_letter_record_carries_kafkas_headers_and_the_source_record_when_copied() {
        let letter = DeadLetter {
            first: 40,
            last: 41,
            deliveries: 5,
            why: Why::DeliveryLimit,
        };
        let original = batch::build_with_headers(
            &[((None, None), vec![(&b"trace"[..], Some(&b"t1"[..]))])],
            0,
        );
        let h = BatchHeader::parse(&original).unwrap();
        let section = records::section(&original, &h).unwrap();
        let mut raw = Bytes::new();
        records::for_each(&section, &h, |r| raw = Bytes::copy_from_slice(r.headers)).unwrap();
        let sources = vec![Source {
            offset: 41,
            key: Some(Bytes::from_static(b"k")),
            value: Some(Bytes::from_static(b"v")),
            headers: raw,
        }];
        let batches = dead_letter_batches("g", "orders", 2, &letter, &sources, 1_000);
        assert_eq!(batches.len(), 1);
        assert_eq!(batches[0].0, 2);
        let got = decoded(&batches[0].1);
        let dlq = |offset: &str| {
            vec![
                ("__dlq.errors.topic".to_string(), "orders".to_string()),
                ("__dlq.errors.partition".into(), "2".into()),
                ("__dlq.errors.offset".into(), offset.into()),
                ("__dlq.errors.group".into(), "g".into()),
                ("__dlq.errors.delivery.count".into(), "5".into()),
                (
                    "__dlq.errors.message".into(),
                    "Offset delivery count exceeded the threshold.".into(),
                ),
            ]
        };
        // Offset 40 is not among the sources (copy off, or gone from the log): headers only.
        assert_eq!(got[0], (None, None, dlq("40")));
        let mut with_original = vec![("trace".to_string(), "t1".to_string())];
        with_original.extend(dlq("41"));
        assert_eq!(
            got[1],
            (Some(b"k".to_vec()), Some(b"v".to_vec()), with_original)
        );
    }

    #[test]
    fn large_ranges_go_out_in_several_batches() {
        let letter = DeadLetter {
            first: 0,
            last: 99,
            deliveries: 1,
            why: Why::Rejected,
        };
        let value = Bytes::from(vec![7u8; 20_000]);
        let sources: Vec<Source> = (0..100)
            .map(|o| Source {
                offset: o,
                key: None,
                value: Some(value.clone()),
                headers: Bytes::from_static(&[0]),
            })
            .collect();
        let batches = dead_letter_batches("g", "t", 0, &letter, &sources, 0);
        assert!(batches.len() > 1);
        assert_eq!(batches.iter().map(|(n, _)| n).sum::<usize>(), 100);
        for (n, b) in &batches {
            assert_eq!(decoded(b).len(), *n);
        }
    }
}
