//! Running reassignments and following them: `strata cluster reassign --plan|--status|--cancel`,
//! and the executor `cluster balance` and `broker drain` share.
//!
//! A plan runs at most `--max-concurrent` moves at once: the next is submitted when one
//! completes. While moves run, a progress line goes to stderr every second — partitions done,
//! bytes copied by the new replicas, bytes left (their offset lag at the leader's bytes per
//! offset) and an ETA from the copy rate — and each completed move is printed to stdout.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use serde::Deserialize;
use strata_broker::protocol::client::Client;

use super::kafka::{self, ClusterView, Ongoing, Pool};
use super::plan::Move;
use crate::common::emit;

/// Kafka's reassignment JSON (`kafka-reassign-partitions --reassignment-json-file`).
#[derive(Deserialize)]
struct PlanFile {
    version: i32,
    partitions: Vec<PlanEntry>,
}

#[derive(Deserialize)]
struct PlanEntry {
    topic: String,
    partition: i32,
    replicas: Vec<i32>,
    #[serde(default)]
    log_dirs: Option<Vec<String>>,
}

/// Reads a plan in Kafka's format; refuses what this command does not do (log dirs other
/// than `any`: placing a replica in a given directory is AlterReplicaLogDirs, once the replica
/// is on its broker).
pub fn read_plan(text: &str, view: &ClusterView) -> anyhow::Result<Vec<Move>> {
    let file: PlanFile =
        serde_json::from_str(text).context("the plan is not Kafka's reassignment JSON")?;
    if file.version != 1 {
        bail!("plan version {} (only version 1 exists)", file.version);
    }
    let mut seen = std::collections::HashSet::new();
    let mut moves = Vec::with_capacity(file.partitions.len());
    for e in file.partitions {
        if !seen.insert((e.topic.clone(), e.partition)) {
            bail!("{}-{} appears twice in the plan", e.topic, e.partition);
        }
        if let Some(dirs) = &e.log_dirs {
            if dirs.iter().any(|d| d != "any") {
                bail!(
                    "{}-{}: log_dirs other than \"any\" are not applied by this command; once the replica is on its broker, move it between that broker's log directories with AlterReplicaLogDirs (kafka-python's alter_replica_log_dirs, Admin.alterReplicaLogDirs)",
                    e.topic,
                    e.partition
                );
            }
        }
        let from = view
            .partitions
            .iter()
            .find(|p| p.topic == e.topic && p.partition == e.partition)
            .map(|p| p.replicas.clone())
            .unwrap_or_default();
        moves.push(Move {
            topic: e.topic,
            partition: e.partition,
            from,
            to: e.replicas,
        });
    }
    Ok(moves)
}

/// Writes `moves` as Kafka's reassignment JSON (what `--dry-run` prints, and what
/// `--plan` reads back).
pub fn plan_json(moves: &[Move]) -> String {
    let partitions: Vec<serde_json::Value> = moves
        .iter()
        .map(|m| {
            serde_json::json!({
                "topic": m.topic,
                "partition": m.partition,
                "replicas": m.to,
                "log_dirs": vec!["any"; m.to.len()],
            })
        })
        .collect();
    serde_json::json!({"version": 1, "partitions": partitions}).to_string()
}

/// What one move's new replicas have copied, as last seen.
#[derive(Default, Clone, Copy)]
struct Copy {
    bytes: i64,
    /// Offsets the new replicas still lack (summed), -1 while unknown.
    lag: i64,
}

/// The moves in flight and what is known of their progress.
struct Progress {
    started: Instant,
    total: usize,
    done: usize,
    failed: usize,
    copied_done: i64,
    /// Bytes per offset of each moving partition, from its leader (learned once).
    bytes_per_offset: HashMap<(String, i32), f64>,
    last: Option<(Instant, i64)>,
    rate: f64,
}

impl Progress {
    fn line(&mut self, active: &[(Move, Copy)]) -> String {
        let copied: i64 = self.copied_done + active.iter().map(|(_, c)| c.bytes).sum::<i64>();
        let left: f64 = active
            .iter()
            .filter(|(_, c)| c.lag > 0)
            .map(|(m, c)| {
                c.lag as f64
                    * self
                        .bytes_per_offset
                        .get(&(m.topic.clone(), m.partition))
                        .copied()
                        .unwrap_or(0.0)
            })
            .sum();
        let now = Instant::now();
        if let Some((at, before)) = self.last {
            let dt = now.duration_since(at).as_secs_f64();
            if dt > 0.0 {
                let r = (copied - before).max(0) as f64 / dt;
                self.rate = if self.rate == 0.0 {
                    r
                } else {
                    0.7 * self.rate + 0.3 * r
                };
            }
        }
        self.last = Some((now, copied));
        let eta = if left <= 0.0 {
            "-".to_string()
        } else if self.rate > 0.0 {
            format!("{:.0}s", left / self.rate)
        } else {
            "?".to_string()
        };
        format!(
            "reassign: {}/{} partitions done, {} moving, {} copied, {} left, {} MiB/s, ETA {eta}, {:.0}s elapsed",
            self.done,
            self.total,
            active.len(),
            mib(copied as f64),
            mib(left),
            format_args!("{:.1}", self.rate / (1024.0 * 1024.0)),
            self.started.elapsed().as_secs_f64()
        )
    }
}

fn mib(bytes: f64) -> String {
    format!("{:.1} MiB", bytes / (1024.0 * 1024.0))
}

/// Runs `moves` at most `max_concurrent` at a time, until every one completed (or was
/// refused). Returns the number refused. Moves that only reorder replicas complete at once.
pub async fn execute(
    c: &mut Client,
    bootstrap_view: &ClusterView,
    moves: Vec<Move>,
    max_concurrent: usize,
    wait: bool,
) -> anyhow::Result<usize> {
    let mut pending: VecDeque<Move> = moves.into_iter().collect();
    let mut progress = Progress {
        started: Instant::now(),
        total: pending.len(),
        done: 0,
        failed: 0,
        copied_done: 0,
        bytes_per_offset: HashMap::new(),
        last: None,
        rate: 0.0,
    };
    let mut active: Vec<(Move, Copy)> = Vec::new();
    let mut pool = Pool::like(c);
    let mut last_line = Instant::now() - Duration::from_secs(1);
    loop {
        // Top up to the cap.
        let room = max_concurrent.max(1).saturating_sub(active.len());
        if room > 0 && !pending.is_empty() {
            let wave: Vec<Move> = (0..room).filter_map(|_| pending.pop_front()).collect();
            let request: Vec<(String, i32, Option<Vec<i32>>)> = wave
                .iter()
                .map(|m| (m.topic.clone(), m.partition, Some(m.to.clone())))
                .collect();
            let outcomes = kafka::alter(c, &request).await?;
            for m in wave {
                let outcome = outcomes
                    .iter()
                    .find(|o| o.topic == m.topic && o.partition == m.partition);
                match outcome {
                    Some(o) if o.code == 0 => {
                        emit(format_args!(
                            "started topic={} partition={} from={} to={}",
                            m.topic,
                            m.partition,
                            list(&m.from),
                            list(&m.to)
                        ))?;
                        active.push((m, Copy { bytes: 0, lag: -1 }));
                    }
                    other => {
                        progress.failed += 1;
                        let (code, message) = other.map_or((-1, "no answer".to_string()), |o| {
                            (o.code, o.message.clone().unwrap_or_default())
                        });
                        emit(format_args!(
                            "refused topic={} partition={} to={} error={code} message={message:?}",
                            m.topic,
                            m.partition,
                            list(&m.to)
                        ))?;
                    }
                }
            }
        }
        if !wait {
            return Ok(progress.failed);
        }
        // Which are still moving, and how far their new replicas have got.
        let ongoing = kafka::ongoing(c).await?;
        let view = kafka::cluster(c).await.unwrap_or_else(|_| ClusterView {
            brokers: bootstrap_view.brokers.clone(),
            partitions: Vec::new(),
            leaders: HashMap::new(),
        });
        let mut still = Vec::with_capacity(active.len());
        for (m, copy) in active.drain(..) {
            match ongoing
                .iter()
                .find(|o| o.topic == m.topic && o.partition == m.partition)
            {
                Some(o) => {
                    let copy = observe(&mut pool, &view, o, &mut progress)
                        .await
                        .unwrap_or(copy);
                    still.push((m, copy));
                }
                None => {
                    progress.done += 1;
                    progress.copied_done += copy.bytes;
                    emit(format_args!(
                        "completed topic={} partition={} replicas={} after={:.1}s",
                        m.topic,
                        m.partition,
                        list(&m.to),
                        progress.started.elapsed().as_secs_f64()
                    ))?;
                }
            }
        }
        active = still;
        if active.is_empty() && pending.is_empty() {
            eprintln!("{}", progress.line(&active));
            return Ok(progress.failed);
        }
        if last_line.elapsed() >= Duration::from_secs(1) {
            eprintln!("{}", progress.line(&active));
            last_line = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The new replicas' bytes and lag for one moving partition (DescribeLogDirs on each), and
/// the partition's bytes per offset from its leader the first time it is seen.
async fn observe(
    pool: &mut Pool,
    view: &ClusterView,
    o: &Ongoing,
    progress: &mut Progress,
) -> anyhow::Result<Copy> {
    let key = (o.topic.clone(), o.partition);
    if !progress.bytes_per_offset.contains_key(&key) {
        if let Some(&leader) = view.leaders.get(&key) {
            if leader >= 0 {
                let c = pool.get(view, leader).await?;
                let (start, end) = kafka::local_span(c, &o.topic, o.partition).await?;
                let dirs = kafka::log_dirs(c).await?;
                if let Some((size, _)) = dirs.get(&key) {
                    if end > start {
                        progress
                            .bytes_per_offset
                            .insert(key.clone(), *size as f64 / (end - start) as f64);
                    }
                }
            }
        }
    }
    let mut copy = Copy { bytes: 0, lag: 0 };
    for b in &o.adding {
        let dirs = match pool.get(view, *b).await {
            Ok(c) => kafka::log_dirs(c).await,
            Err(e) => Err(e),
        };
        match dirs {
            Ok(dirs) => {
                let (size, lag) = dirs.get(&key).copied().unwrap_or((0, -1));
                copy.bytes += size;
                if lag < 0 || copy.lag < 0 {
                    copy.lag = -1;
                } else {
                    copy.lag += lag;
                }
            }
            Err(_) => {
                pool.drop_broker(*b);
                copy.lag = -1;
            }
        }
    }
    Ok(copy)
}

pub fn list(v: &[i32]) -> String {
    v.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

/// `--status`: one line per move in progress with its new replicas' progress.
pub async fn status(c: &mut Client) -> anyhow::Result<bool> {
    let ongoing = kafka::ongoing(c).await?;
    let view = kafka::cluster(c).await?;
    let mut pool = Pool::like(c);
    let mut progress = Progress {
        started: Instant::now(),
        total: ongoing.len(),
        done: 0,
        failed: 0,
        copied_done: 0,
        bytes_per_offset: HashMap::new(),
        last: None,
        rate: 0.0,
    };
    for o in &ongoing {
        let copy = observe(&mut pool, &view, o, &mut progress)
            .await
            .unwrap_or(Copy { bytes: 0, lag: -1 });
        emit(format_args!(
            "moving topic={} partition={} replicas={} adding={} removing={} copied_bytes={} lag_offsets={}",
            o.topic,
            o.partition,
            list(&o.replicas),
            list(&o.adding),
            list(&o.removing),
            copy.bytes,
            copy.lag
        ))?;
    }
    emit(format_args!("reassignments in_progress={}", ongoing.len()))?;
    Ok(ongoing.is_empty())
}

/// `--cancel`: cancels every move in progress (or those of `only`).
pub async fn cancel(c: &mut Client, only: Option<&[Move]>) -> anyhow::Result<usize> {
    let ongoing = kafka::ongoing(c).await?;
    let targets: Vec<(String, i32, Option<Vec<i32>>)> = ongoing
        .iter()
        .filter(|o| {
            only.is_none_or(|moves| {
                moves
                    .iter()
                    .any(|m| m.topic == o.topic && m.partition == o.partition)
            })
        })
        .map(|o| (o.topic.clone(), o.partition, None))
        .collect();
    if targets.is_empty() {
        emit(format_args!("cancelled 0 reassignments: none in progress"))?;
        return Ok(0);
    }
    let mut failed = 0;
    for o in kafka::alter(c, &targets).await? {
        if o.code == 0 {
            emit(format_args!(
                "cancelled topic={} partition={}",
                o.topic, o.partition
            ))?;
        } else {
            failed += 1;
            emit(format_args!(
                "not_cancelled topic={} partition={} error={} message={:?}",
                o.topic,
                o.partition,
                o.code,
                o.message.unwrap_or_default()
            ))?;
        }
    }
    Ok(failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::plan;

    fn view() -> ClusterView {
        ClusterView {
            brokers: vec![],
            partitions: vec![plan::Partition {
                topic: "t".into(),
                partition: 0,
                replicas: vec![1, 2],
                pinned: false,
            }],
            leaders: HashMap::new(),
        }
    }

    #[test]
    fn kafkas_plan_format_reads_back_what_dry_run_writes() {
        let text = r#"{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[3,2],"log_dirs":["any","any"]},{"topic":"u","partition":4,"replicas":[1]}]}"#;
        let moves = read_plan(text, &view()).unwrap();
        assert_eq!(moves.len(), 2);
        assert_eq!(
            (moves[0].from.clone(), moves[0].to.clone()),
            (vec![1, 2], vec![3, 2])
        );
        assert!(
            moves[1].from.is_empty(),
            "unknown to the cluster: the broker says so"
        );
        let again = read_plan(&plan_json(&moves), &view()).unwrap();
        assert_eq!(again, moves);
    }

    #[test]
    fn bad_plans_are_refused_before_anything_is_sent() {
        for (text, why) in [
            ("not json", "reassignment JSON"),
            (r#"{"version":2,"partitions":[]}"#, "version 2"),
            (
                r#"{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1]},{"topic":"t","partition":0,"replicas":[2]}]}"#,
                "twice",
            ),
            (
                r#"{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":["/data"]}]}"#,
                "AlterReplicaLogDirs",
            ),
        ] {
            let err = format!("{:#}", read_plan(text, &view()).unwrap_err());
            assert!(err.contains(why), "{text}: {err}");
        }
    }
}
