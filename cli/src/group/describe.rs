//! `strata group describe`: members with their decoded assignments, and per partition the
//! committed offset, log end and lag (`--watch`: its trend).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context as _};
use clap::Args;
use rdkafka::admin::ResourceSpecifier;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::common::{
    admin_client, admin_options, block_on, current_thread_runtime, emit, fetch_metadata,
    ConnectArgs,
};

use super::assignment::*;
use super::clients::*;
use super::table::render_table;

#[derive(Args, Debug)]
pub struct DescribeArgs {
    #[command(flatten)]
    pub conn: ConnectArgs,
    /// Group id.
    pub group: String,
    /// Sample lag twice, SECONDS apart, and report its trend per partition.
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub watch: Option<u64>,
}

/// One partition's position at one instant.
#[derive(Debug, Clone)]
pub(super) struct PartitionSample {
    committed: Option<i64>,
    low: i64,
    high: i64,
    /// Age in seconds of the first unread record; `None` when it could not be read.
    lag_secs: Option<f64>,
}

impl PartitionSample {
    fn lag(&self) -> i64 {
        partition_lag(self.committed, self.low, self.high)
    }
}

/// Records not yet consumed: log end − committed, or the whole partition without a commit.
pub(super) fn partition_lag(committed: Option<i64>, low: i64, high: i64) -> i64 {
    match committed {
        Some(c) => (high - c).max(0),
        None => (high - low).max(0),
    }
}

pub(super) fn run(args: DescribeArgs) -> anyhow::Result<()> {
    let conn = &args.conn;
    let group = &args.group;
    let consumer = group_consumer(conn, group)?;
    let Some(snapshot) = describe_group(conn, &consumer, group)? else {
        bail!("group `{group}` does not exist");
    };

    // Partitions assigned to each member, decoded from the consumer protocol.
    let mut owners: BTreeMap<Tp, String> = BTreeMap::new();
    let mut member_rows = Vec::new();
    for m in &snapshot.members {
        let assignment = match m.assignment.as_deref() {
            None | Some([]) => "-".to_string(),
            Some(bytes) if snapshot.protocol_type == "consumer" => match decode_assignment(bytes) {
                Ok(a) => {
                    for (topic, partitions) in &a.partitions {
                        for p in partitions {
                            owners.insert((topic.clone(), *p), m.id.clone());
                        }
                    }
                    a.to_string()
                }
                Err(e) => format!("<undecodable: {e}>"),
            },
            Some(bytes) => format!("<{} bytes>", bytes.len()),
        };
        member_rows.push(vec![
            m.id.clone(),
            or_dash(&m.client_id).to_string(),
            or_dash(&m.host).to_string(),
            assignment,
        ]);
    }

    // Offsets committed for any partition of any topic, plus every assigned partition.
    let candidates = candidate_partitions(conn, &consumer, &owners)?;
    let first = sample(conn, &consumer, group, &candidates, args.watch.is_none())?;
    let partitions: Vec<Tp> = first
        .iter()
        .filter(|(tp, s)| s.committed.is_some() || owners.contains_key(*tp))
        .map(|(tp, _)| tp.clone())
        .collect();

    if snapshot.state == "Dead" && snapshot.members.is_empty() && partitions.is_empty() {
        bail!("group `{group}` does not exist");
    }

    let (samples, trends) = match args.watch {
        None => (first, None),
        Some(secs) => {
            eprintln!("sampling again in {secs} s...");
            let started = Instant::now();
            std::thread::sleep(Duration::from_secs(secs));
            let second = sample(conn, &consumer, group, &partitions, true)?;
            let elapsed = started.elapsed().as_secs_f64();
            let trends: BTreeMap<Tp, f64> = partitions
                .iter()
                .filter_map(|tp| {
                    let (a, b) = (first.get(tp)?, second.get(tp)?);
                    Some((tp.clone(), lag_trend(a.lag(), b.lag(), elapsed)))
                })
                .collect();
            (second, Some(trends))
        }
    };

    emit(format_args!(
        "group={group} state={} protocol_type={} protocol={} members={}",
        or_dash(&snapshot.state),
        or_dash(&snapshot.protocol_type),
        or_dash(&snapshot.protocol),
        snapshot.members.len()
    ))?;
    if !member_rows.is_empty() {
        emit(format_args!(""))?;
        for line in render_table(
            &["MEMBER-ID", "CLIENT-ID", "HOST", "ASSIGNMENT"],
            &member_rows,
        ) {
            emit(format_args!("{line}"))?;
        }
    }
    if partitions.is_empty() {
        emit(format_args!(""))?;
        emit(format_args!(
            "no committed offsets and no assigned partitions"
        ))?;
        return Ok(());
    }

    let mut headers = vec![
        "TOPIC",
        "PARTITION",
        "COMMITTED",
        "LOG-END",
        "LAG",
        "LAG-SECONDS",
    ];
    if trends.is_some() {
        headers.extend(["TREND(rec/s)", "STATUS"]);
    }
    headers.push("OWNER");
    let mut rows = Vec::new();
    for tp in &partitions {
        let Some(s) = samples.get(tp) else { continue };
        let mut row = vec![
            tp.0.clone(),
            tp.1.to_string(),
            s.committed.map_or("-".to_string(), |c| c.to_string()),
            s.high.to_string(),
            s.lag().to_string(),
            s.lag_secs.map_or("?".to_string(), |l| format!("{l:.1}")),
        ];
        if let Some(trends) = &trends {
            match trends.get(tp) {
                Some(&t) => {
                    row.push(format!("{t:+.1}"));
                    row.push(lag_status(s.lag(), t).to_string());
                }
                None => row.extend(["?".to_string(), "?".to_string()]),
            }
        }
        row.push(owners.get(tp).cloned().unwrap_or_else(|| "-".to_string()));
        rows.push(row);
    }
    emit(format_args!(""))?;
    for line in render_table(&headers, &rows) {
        emit(format_args!("{line}"))?;
    }

    // Unread data close to deletion by retention.
    let topics: BTreeSet<&str> = partitions.iter().map(|(t, _)| t.as_str()).collect();
    let retention = match topic_retention(conn, &topics) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("warning: cannot read retention.ms of the topics: {e:#}");
            HashMap::new()
        }
    };
    for tp in &partitions {
        let (Some(s), Some(&retention_ms)) = (samples.get(tp), retention.get(&tp.0)) else {
            continue;
        };
        if let Some(lag_secs) = s.lag_secs {
            if near_retention(lag_secs, retention_ms) {
                emit(format_args!(
                    "WARNING {}-{}: unread for {lag_secs:.1} s, over half of retention.ms={retention_ms}: \
                     data about to be deleted unread",
                    tp.0, tp.1
                ))?;
            }
        }
    }
    Ok(())
}

pub(super) fn or_dash(s: &str) -> &str {
    if s.is_empty() {
        "-"
    } else {
        s
    }
}

/// Every partition of every non-internal topic, plus assigned partitions (whose topic may
/// be missing from metadata, e.g. deleted).
pub(super) fn candidate_partitions(
    conn: &ConnectArgs,
    consumer: &BaseConsumer,
    owners: &BTreeMap<Tp, String>,
) -> anyhow::Result<Vec<Tp>> {
    let metadata = fetch_metadata(conn, consumer.client(), None)?;
    let mut all: BTreeSet<Tp> = owners.keys().cloned().collect();
    for t in metadata.topics() {
        if t.error().is_some() || t.name().starts_with("__") {
            continue;
        }
        for p in t.partitions() {
            all.insert((t.name().to_string(), p.id()));
        }
    }
    Ok(all.into_iter().collect())
}

/// Committed offsets and watermarks of `partitions`, and (if `with_lag_secs`) the age of
/// each partition's first unread record.
pub(super) fn sample(
    conn: &ConnectArgs,
    consumer: &BaseConsumer,
    group: &str,
    partitions: &[Tp],
    with_lag_secs: bool,
) -> anyhow::Result<BTreeMap<Tp, PartitionSample>> {
    let mut out = BTreeMap::new();
    if partitions.is_empty() {
        return Ok(out);
    }
    let committed = committed_offsets(conn, consumer, group, partitions)?;
    let mut unread = Vec::new();
    for tp in partitions {
        let (low, high) = consumer
            .fetch_watermarks(&tp.0, tp.1, conn.request_timeout())
            .map_err(|e| anyhow!("watermarks of {}-{}: {e}", tp.0, tp.1))?;
        let committed = committed.get(tp).copied();
        let start = committed.unwrap_or(low);
        let lag_secs = if start >= high {
            Some(0.0)
        } else {
            unread.push((tp.clone(), start));
            None
        };
        out.insert(
            tp.clone(),
            PartitionSample {
                committed,
                low,
                high,
                lag_secs,
            },
        );
    }
    if with_lag_secs && !unread.is_empty() {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        for (tp, ts) in first_unread_timestamps(conn, &unread)? {
            if let Some(s) = out.get_mut(&tp) {
                s.lag_secs = Some(((now_ms - ts).max(0)) as f64 / 1000.0);
            }
        }
    }
    Ok(out)
}

/// Timestamps (unix ms) of the record at each given offset, read by a group-less consumer;
/// partitions that yield nothing within the request timeout are left out.
pub(super) fn first_unread_timestamps(
    conn: &ConnectArgs,
    positions: &[(Tp, i64)],
) -> anyhow::Result<HashMap<Tp, i64>> {
    let reader = reader_consumer(conn)?;
    let mut tpl = TopicPartitionList::with_capacity(positions.len());
    for ((t, p), offset) in positions {
        tpl.add_partition_offset(t, *p, Offset::Offset(*offset))
            .with_context(|| format!("{t}-{p}"))?;
    }
    reader.assign(&tpl).context("assigning partitions")?;
    let mut found = HashMap::new();
    let deadline = Instant::now() + conn.request_timeout();
    while found.len() < positions.len() && Instant::now() < deadline {
        match reader.poll(Duration::from_millis(100)) {
            Some(Ok(msg)) => {
                let tp = (msg.topic().to_string(), msg.partition());
                if found.contains_key(&tp) {
                    continue;
                }
                if let Some(ts) = msg.timestamp().to_millis() {
                    found.insert(tp.clone(), ts);
                    // One record is all we need from this partition.
                    let mut done = TopicPartitionList::new();
                    done.add_partition(&tp.0, tp.1);
                    let _ = reader.pause(&done);
                }
            }
            Some(Err(KafkaError::PartitionEOF(_))) | None => {}
            Some(Err(e)) => eprintln!("warning: reading first unread record: {e}"),
        }
    }
    for (tp, _) in positions {
        if !found.contains_key(tp) {
            eprintln!(
                "warning: no record read from {}-{} within {} ms; lag seconds unknown",
                tp.0,
                tp.1,
                conn.request_timeout().as_millis()
            );
        }
    }
    Ok(found)
}

/// `retention.ms` of each topic that has a finite one.
pub(super) fn topic_retention(
    conn: &ConnectArgs,
    topics: &BTreeSet<&str>,
) -> anyhow::Result<HashMap<String, i64>> {
    let admin = admin_client(conn)?;
    let specs: Vec<ResourceSpecifier<'_>> =
        topics.iter().map(|t| ResourceSpecifier::Topic(t)).collect();
    let results = block_on(
        &current_thread_runtime()?,
        conn,
        "describe configs",
        admin.describe_configs(specs.iter(), &admin_options(conn)),
    )??;
    let mut out = HashMap::new();
    for (topic, result) in topics.iter().zip(results) {
        let resource = result.map_err(|code| anyhow!("topic `{topic}`: {code}"))?;
        let retention = resource
            .entries
            .iter()
            .find(|e| e.name == "retention.ms")
            .and_then(|e| e.value.as_deref())
            .and_then(|v| v.parse::<i64>().ok());
        if let Some(ms) = retention.filter(|ms| *ms >= 0) {
            out.insert(topic.to_string(), ms);
        }
    }
    Ok(out)
}

/// Whether data unread for `lag_secs` has outlived half of `retention_ms` (negative: none).
pub(super) fn near_retention(lag_secs: f64, retention_ms: i64) -> bool {
    retention_ms >= 0 && lag_secs * 1000.0 > retention_ms as f64 / 2.0
}

/// Change of lag in records per second between two samples `secs` apart.
pub(super) fn lag_trend(lag_before: i64, lag_after: i64, secs: f64) -> f64 {
    if secs <= 0.0 {
        0.0
    } else {
        (lag_after - lag_before) as f64 / secs
    }
}

/// Seconds until a lag shrinking at `trend` (records/s, negative) reaches zero.
pub(super) fn drain_secs(lag: i64, trend: f64) -> Option<f64> {
    if trend < 0.0 && lag > 0 {
        Some(lag as f64 / -trend)
    } else {
        None
    }
}

/// Human reading of a lag and its trend.
pub(super) fn lag_status(lag: i64, trend: f64) -> String {
    if trend > 0.0 {
        "falling behind".to_string()
    } else if let Some(secs) = drain_secs(lag, trend) {
        format!("draining, caught up in ~{}", format_duration(secs))
    } else if lag == 0 {
        "caught up".to_string()
    } else {
        "stalled".to_string()
    }
}

/// `45s`, `12m05s`, `3h02m`, `2d04h`.
pub(super) fn format_duration(secs: f64) -> String {
    let s = secs.round().max(0.0) as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_math() {
        assert_eq!(partition_lag(Some(40), 0, 100), 60);
        assert_eq!(partition_lag(None, 10, 100), 90);
        assert_eq!(partition_lag(Some(120), 0, 100), 0);
        assert_eq!(lag_trend(100, 160, 2.0), 30.0);
        assert_eq!(lag_trend(100, 40, 3.0), -20.0);
        assert_eq!(lag_trend(100, 40, 0.0), 0.0);
        assert_eq!(drain_secs(40, -20.0), Some(2.0));
        assert_eq!(drain_secs(40, 0.0), None);
        assert_eq!(drain_secs(40, 5.0), None);
        assert_eq!(drain_secs(0, -5.0), None);
        assert_eq!(lag_status(10, 1.5), "falling behind");
        assert_eq!(lag_status(600, -2.0), "draining, caught up in ~5m00s");
        assert_eq!(lag_status(0, 0.0), "caught up");
        assert_eq!(lag_status(5, 0.0), "stalled");
    }

    #[test]
    fn durations_and_retention() {
        assert_eq!(format_duration(0.4), "0s");
        assert_eq!(format_duration(59.4), "59s");
        assert_eq!(format_duration(725.0), "12m05s");
        assert_eq!(format_duration(3.0 * 3600.0 + 120.0), "3h02m");
        assert_eq!(format_duration(2.0 * 86_400.0 + 4.0 * 3600.0), "2d04h");
        assert!(near_retention(31.0, 60_000));
        assert!(!near_retention(30.0, 60_000));
        assert!(!near_retention(1e9, -1));
    }
}
