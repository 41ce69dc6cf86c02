//! `strata perf commit`: how many offset commits one group coordinator sustains.
//!
//! C clients (librdkafka consumers, one thread each) join group G subscribed to topic T
//! (created with P partitions, default C, when missing). Once the group is stable, each
//! commits one partition (client i: partition i mod P) with an increasing offset as fast as
//! it can for S seconds: `commit(tpl, CommitMode::Sync)`, so each client has exactly one
//! OffsetCommit in flight (`mode=sync`). Reported: commits per second across all clients and
//! the latency of each commit call. At the end the committed offsets are read back
//! (OffsetFetch) and checked against the last acknowledged commit of each partition.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use clap::Args;
use hdrhistogram::Histogram;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use super::member::group_position;
use super::report::{with_progress, IntervalRate};
use super::setup::ensure_topic;
use crate::common::{emit, latency_histogram, per_sec, percentile_fields, ConnectArgs};
use crate::group::describe_group;

#[derive(Args, Debug)]
pub struct PerfCommitArgs {
    #[command(flatten)]
    pub conn: ConnectArgs,
    /// Group the clients join and commit in (it should have no other members).
    #[arg(short = 'g', long)]
    pub group: String,
    /// Topic whose offsets are committed (created with --partitions partitions if missing).
    #[arg(short = 't', long)]
    pub topic: String,
    /// Committing clients, each with one synchronous commit in flight.
    #[arg(short = 'c', long, default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub clients: u32,
    /// How long to commit for.
    #[arg(short = 's', long, default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub seconds: u64,
    /// Partitions of the topic when it is created (default: one per client).
    #[arg(short = 'p', long)]
    pub partitions: Option<i32>,
    /// Give up when the clients have not formed a stable group after this long.
    #[arg(long, default_value_t = 60_000, value_name = "MS")]
    pub join_timeout_ms: u64,
}

/// What one client did.
struct ClientResult {
    partition: i32,
    /// Last offset the broker acknowledged, if any.
    last_acked: Option<i64>,
    histogram: Histogram<u64>,
    errors: u64,
    first_error: Option<String>,
}

fn create_clients(args: &PerfCommitArgs) -> anyhow::Result<Vec<BaseConsumer>> {
    (0..args.clients)
        .map(|i| {
            let client_id = format!("strata-perf-commit-{i}");
            let consumer: BaseConsumer = args
                .conn
                .client_config(&[
                    ("group.id", args.group.as_str()),
                    ("client.id", client_id.as_str()),
                    ("enable.auto.commit", "false"),
                    ("enable.auto.offset.store", "false"),
                    ("auto.offset.reset", "latest"),
                    ("allow.auto.create.topics", "false"),
                ])
                .create()
                .context("creating consumer")?;
            consumer
                .subscribe(&[&args.topic])
                .with_context(|| format!("subscribing to `{}`", args.topic))?;
            Ok(consumer)
        })
        .collect()
}

/// Polls the clients until they all hold the same generation and the coordinator reports
/// the group Stable with exactly them as members.
fn wait_for_stable_group(args: &PerfCommitArgs, clients: &[BaseConsumer]) -> anyhow::Result<()> {
    let conn = &args.conn;
    let admin: BaseConsumer = conn
        .client_config(&[("allow.auto.create.topics", "false")])
        .create()
        .context("creating the DescribeGroups client")?;
    let start = Instant::now();
    let deadline = start + Duration::from_millis(args.join_timeout_ms);
    let mut next_progress = start + Duration::from_secs(1);
    loop {
        for c in clients {
            if let Some(Err(e)) = c.poll(Duration::from_millis(10)) {
                eprintln!("perf commit: consumer error while joining: {e}");
            }
        }
        let positions: Vec<_> = clients
            .iter()
            .filter_map(|c| group_position(c.client()))
            .filter(|p| p.generation > 0 && !p.member_id.is_empty())
            .collect();
        let same_generation = positions.len() == clients.len()
            && positions
                .iter()
                .all(|p| p.generation == positions[0].generation);
        let mut state = String::from("?");
        if same_generation || Instant::now() >= next_progress {
            if let Some(snapshot) = describe_group(conn, &admin, &args.group)? {
                let mut ours: Vec<&str> = positions.iter().map(|p| p.member_id.as_str()).collect();
                let mut theirs: Vec<&str> =
                    snapshot.members.iter().map(|m| m.id.as_str()).collect();
                ours.sort_unstable();
                theirs.sort_unstable();
                if same_generation && snapshot.state == "Stable" && ours == theirs {
                    eprintln!(
                        "perf commit: {} clients in a stable group (generation {}) after {:.1} s",
                        clients.len(),
                        positions[0].generation,
                        start.elapsed().as_secs_f64()
                    );
                    return Ok(());
                }
                state = snapshot.state;
            }
        }
        let now = Instant::now();
        if now >= deadline {
            bail!(
                "the {} clients did not form a stable group within {} ms ({} joined; \
                 coordinator: {state}); does group `{}` have other members?",
                clients.len(),
                args.join_timeout_ms,
                positions.len(),
                args.group
            );
        }
        if now >= next_progress {
            eprintln!(
                "perf commit: joining {:.1}s: {}/{} clients have a generation, coordinator={state}",
                start.elapsed().as_secs_f64(),
                positions.len(),
                clients.len()
            );
            next_progress = now + Duration::from_secs(1);
        }
    }
}

/// Commits `partition` with increasing offsets until `end`.
fn commit_loop(
    consumer: &BaseConsumer,
    topic: &str,
    partition: i32,
    end: Instant,
    done: &AtomicU64,
) -> anyhow::Result<ClientResult> {
    let mut result = ClientResult {
        partition,
        last_acked: None,
        histogram: latency_histogram()?,
        errors: 0,
        first_error: None,
    };
    let mut offset: i64 = 0;
    while Instant::now() < end {
        offset += 1;
        let mut tpl = TopicPartitionList::with_capacity(1);
        tpl.add_partition_offset(topic, partition, Offset::Offset(offset))
            .with_context(|| format!("partition {partition}"))?;
        let sent = Instant::now();
        match consumer.commit(&tpl, CommitMode::Sync) {
            Ok(()) => {
                let micros = u64::try_from(sent.elapsed().as_micros()).unwrap_or(u64::MAX);
                result.histogram.saturating_record(micros.max(1));
                result.last_acked = Some(offset);
                done.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                result.errors += 1;
                result.first_error.get_or_insert_with(|| e.to_string());
            }
        }
        // Serves rebalance events; nothing is consumed.
        let _ = consumer.poll(Duration::ZERO);
    }
    Ok(result)
}

/// Reads back the committed offsets and checks each partition committed by a single client
/// holds that client's last acknowledged offset.
fn verify(
    conn: &ConnectArgs,
    consumer: &BaseConsumer,
    topic: &str,
    results: &[ClientResult],
) -> anyhow::Result<()> {
    let mut by_partition: BTreeMap<i32, Vec<Option<i64>>> = BTreeMap::new();
    for r in results {
        by_partition
            .entry(r.partition)
            .or_default()
            .push(r.last_acked);
    }
    let mut tpl = TopicPartitionList::new();
    for p in by_partition.keys() {
        tpl.add_partition(topic, *p);
    }
    let committed = consumer
        .committed_offsets(tpl, conn.request_timeout())
        .context("reading back the committed offsets")?;
    for (p, acked) in by_partition {
        let [Some(expected)] = acked[..] else {
            continue;
        };
        let found = committed
            .find_partition(topic, p)
            .map(|e| e.offset())
            .ok_or_else(|| anyhow!("no committed offset returned for partition {p}"))?;
        if found != Offset::Offset(expected) {
            bail!("partition {p}: committed offset is {found:?}, the last acknowledged commit was {expected}");
        }
    }
    Ok(())
}

pub(super) fn run(args: PerfCommitArgs) -> anyhow::Result<()> {
    let conn = &args.conn;
    let partitions = ensure_topic(conn, &args.topic, args.partitions, args.clients as i32)?;
    let clients = create_clients(&args)?;
    wait_for_stable_group(&args, &clients)?;

    let done = AtomicU64::new(0);
    let mut interval = IntervalRate::new();
    let start = Instant::now();
    let end = start + Duration::from_secs(args.seconds);
    let results = with_progress(
        || {
            let n = done.load(Ordering::Relaxed);
            format!(
                "perf commit: commits={n} rate={:.0} commits/s",
                interval.rate(n)
            )
        },
        || {
            std::thread::scope(|scope| {
                let handles: Vec<_> = clients
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        let partition = (i as i32) % partitions;
                        let (topic, done) = (&args.topic, &done);
                        scope.spawn(move || commit_loop(c, topic, partition, end, done))
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join()
                            .unwrap_or_else(|_| Err(anyhow!("commit thread panicked")))
                    })
                    .collect::<anyhow::Result<Vec<_>>>()
            })
        },
    )?;
    let seconds = start.elapsed().as_secs_f64();

    let mut histogram = latency_histogram()?;
    for r in &results {
        histogram.add(&r.histogram).context("merging histograms")?;
    }
    let commits = histogram.len();
    let errors: u64 = results.iter().map(|r| r.errors).sum();
    emit(format_args!(
        "commit clients={} partitions={partitions} mode=sync commits={commits} errors={errors} \
         seconds={seconds:.2} commits_per_sec={:.0} {}",
        args.clients,
        per_sec(commits, seconds),
        percentile_fields(&histogram),
    ))?;
    if let Some(e) = results.iter().find_map(|r| r.first_error.as_ref()) {
        bail!("{errors} commit(s) failed; first error: {e}");
    }
    if commits == 0 {
        bail!("no commit succeeded in {seconds:.2} s");
    }
    verify(conn, &clients[0], &args.topic, &results)
}
