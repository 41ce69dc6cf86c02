//! `strata perf standard`: the regression guard. Starts its own brokers (this executable's
//! `serve`, in a temporary directory, on ports from `--base-port`), runs the standard rows
//! through this executable's own `perf` commands, and prints and writes (JSON) each row with
//! the floor it is judged against:
//!
//! - `produce` / `consume`: one partition, 1 KiB records, plaintext; the kernel's loopback
//!   receive / send cost per GB is the floor.
//! - `consume_new_group_1` / `consume_new_group_10000`: a new consumer group over one and over
//!   10,000 partitions (same bytes); goal: the second within 1.5× the first per GB.
//!   `consume_resumed_group_1` / `..._10000`: the same read by a group that resumes from
//!   offsets committed for every partition (reset to the earliest before each run).
//! - `produce_tls` / `consume_tls`: the same over TLS (a self-signed certificate made with
//!   `openssl`); goal: plaintext plus at most 1.5× the AES-256-GCM cost `openssl speed`
//!   measures here.
//! - `rf3_produce` / `rf3_e2e`: three brokers, RF=3, acks=all at 5,000 records/s.
//! - `replay_alone` / `replay_during`: with the broker on its own core, a 5,000 records/s
//!   acks=all producer's latency alone and while a consumer replays history from the remote
//!   tier at full speed; goal: p99 within 1.2×. The replaying consumers run at the lowest
//!   CPU priority (`nice`), so that on a machine of two CPUs the row measures the broker's
//!   isolation rather than the two clients' contention for the one client CPU.
//!
//! The broker runs on CPU 0 and the clients on CPU 1 when `taskset` exists and the machine
//! has two CPUs (the JSON says whether). Each row records the exact command it ran.
//! `--broker-exe` runs the brokers from another build (the clients stay this one), so a
//! change is judged A/B on one machine.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use clap::Args;

use super::broker_cpu::metric_value;
use crate::common::emit;

/// Records of a throughput row at full size: 1 GB of 1 KiB records.
const RECORDS: u64 = 1_000_000;
/// The latency rows' rate and length; they send with `linger.ms=0`, so that what they
/// measure is the broker's latency, not librdkafka's 5 ms linger.
const RATE: u64 = 5_000;
const LATENCY_SECONDS: u64 = 30;
/// Partitions of the many-partitions row.
const MANY: u32 = 10_000;

#[derive(Args, Debug)]
pub struct PerfStandardArgs {
    /// Write the JSON result here.
    #[arg(long, default_value = "perf-standard.json")]
    pub out: PathBuf,
    /// A tenth of the records and the latency rows' time, one run per throughput row: a
    /// quick look, not a record.
    #[arg(long)]
    pub quick: bool,
    /// Runs per throughput row; the median is kept.
    #[arg(long, default_value_t = 3)]
    pub repeat: u32,
    /// Only these rows' groups (comma-separated): plain, partitions, tls, rf3, replay.
    #[arg(long, value_delimiter = ',', value_name = "GROUP")]
    pub only: Vec<String>,
    /// Brokers listen from this port up (each takes three: Kafka, admin, raft; the TLS
    /// broker a fourth).
    #[arg(long, default_value_t = 19092)]
    pub base_port: u16,
    /// Where the brokers' data directories go (a new directory under it, removed after).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Run the brokers from this `strata` executable (another build, for an A/B) instead of
    /// this one.
    #[arg(long, value_name = "PATH")]
    pub broker_exe: Option<PathBuf>,
}

/// One row of the result.
#[derive(serde::Serialize)]
struct Row {
    name: &'static str,
    /// The command that made the row (the broker's settings are in `brokers`).
    command: String,
    /// Every `key=value` the command reported, as numbers where they are.
    result: BTreeMap<String, serde_json::Value>,
}

/// The row groups `--only` names.
const GROUPS: [&str; 5] = ["plain", "partitions", "tls", "rf3", "replay"];

pub fn run(args: PerfStandardArgs) -> anyhow::Result<()> {
    if let Some(unknown) = args.only.iter().find(|g| !GROUPS.contains(&g.as_str())) {
        bail!(
            "--only {unknown}: no such group (groups: {})",
            GROUPS.join(", ")
        );
    }
    let exe = std::env::current_exe().context("finding this executable")?;
    let broker_exe = match &args.broker_exe {
        Some(path) => path
            .canonicalize()
            .with_context(|| format!("--broker-exe {}", path.display()))?,
        None => exe.clone(),
    };
    let parent = args.work_dir.clone().unwrap_or_else(std::env::temp_dir);
    let work = parent.join(format!("strata-perf-standard-{}", std::process::id()));
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let scale = if args.quick { 10 } else { 1 };
    let pinned =
        which("taskset") && std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
    let mut run = Run {
        exe,
        broker_exe: broker_exe.clone(),
        work: work.clone(),
        pinned,
        records: RECORDS / scale,
        repeat: if args.quick { 1 } else { args.repeat.max(1) },
        latency_records: RATE * LATENCY_SECONDS / scale,
        next_port: args.base_port,
        rows: Vec::new(),
        goals: Vec::new(),
    };
    let wanted = |group: &str| args.only.is_empty() || args.only.iter().any(|g| g == group);
    let floors = Floors::measure()?;
    eprintln!(
        "floors: loopback receive {:.3} s/GB, send {:.3} s/GB; AES-256-GCM {}",
        floors.receive_s_per_gb,
        floors.send_s_per_gb,
        floors
            .aes_gcm_s_per_gb
            .map_or("not measured (no openssl)".to_string(), |c| format!(
                "{c:.3} s/GB"
            ))
    );
    let result = (|| -> anyhow::Result<()> {
        if wanted("plain") || wanted("partitions") {
            run.plain_and_partitions(wanted("plain"), wanted("partitions"))?;
        }
        if wanted("tls") {
            run.tls(&floors)?;
        }
        if wanted("rf3") {
            run.rf3()?;
        }
        if wanted("replay") {
            run.replay()?;
        }
        Ok(())
    })();
    match &result {
        Ok(()) => {
            let _ = std::fs::remove_dir_all(&work);
        }
        Err(_) => eprintln!("kept {} (the brokers' logs)", work.display()),
    }
    result?;
    for goal in &run.goals {
        emit(format_args!("{goal}"))?;
    }
    let json = serde_json::json!({
        "machine": machine(),
        "broker_exe": broker_exe,
        "pinned": run.pinned,
        "quick": args.quick,
        "floors": floors,
        "rows": run.rows,
        "goals": run.goals,
    });
    std::fs::write(&args.out, serde_json::to_vec_pretty(&json)?)
        .with_context(|| format!("writing {}", args.out.display()))?;
    eprintln!("wrote {}", args.out.display());
    Ok(())
}

struct Run {
    exe: PathBuf,
    broker_exe: PathBuf,
    work: PathBuf,
    pinned: bool,
    records: u64,
    repeat: u32,
    latency_records: u64,
    next_port: u16,
    rows: Vec<Row>,
    goals: Vec<String>,
}

impl Run {
    fn ports(&mut self, n: u16) -> u16 {
        let first = self.next_port;
        self.next_port += n;
        first
    }

    /// `n` brokers of one cluster with these extra `STRATA_*` settings; one broker is pinned
    /// to CPU 0, a cluster shares the CPUs.
    fn brokers(&mut self, n: u16, env: &[(&str, String)]) -> anyhow::Result<Vec<Broker>> {
        let base = self.ports(4 * n);
        let voters: Vec<String> = (0..n)
            .map(|i| format!("{}@127.0.0.1:{}", i + 1, base + 4 * i + 2))
            .collect();
        let mut started = Vec::new();
        for i in 0..n {
            let id = u64::from(i) + 1;
            let dir = self.work.join(format!("node-{id}-{base}"));
            std::fs::create_dir_all(&dir)?;
            let port = base + 4 * i;
            let mut cmd = if n == 1 {
                self.pinned_command(0, &self.broker_exe)
            } else {
                Command::new(&self.broker_exe)
            };
            cmd.arg("serve")
                .args(["--node-id", &id.to_string()])
                .arg("--data-dir")
                .arg(&dir)
                .args(["--kafka-addr", &format!("127.0.0.1:{port}")])
                .args(["--admin-addr", &format!("127.0.0.1:{}", port + 1)])
                .args(["--raft-addr", &format!("127.0.0.1:{}", port + 2)]);
            if n > 1 {
                cmd.args(["--voters", &voters.join(",")]);
            }
            for (k, v) in env {
                cmd.env(k, v.replace("{tls_port}", &(port + 3).to_string()));
            }
            started.push(Broker::spawn(cmd, &dir)?);
        }
        for b in &mut started {
            b.wait_ready()?;
        }
        Ok(started)
    }

    fn pinned_command(&self, cpu: u32, program: &Path) -> Command {
        pinned_command(self.pinned, cpu, program)
    }

    /// Runs `strata <args>` on the client CPU (any CPU beside a cluster) and returns the `key=value` pairs of the last
    /// line it printed.
    fn perf(
        &self,
        args: &[String],
    ) -> anyhow::Result<(String, BTreeMap<String, serde_json::Value>)> {
        let shown = format!("strata {}", args.join(" "));
        eprintln!("running: {shown}");
        let out = self
            .pinned_command(1, &self.exe)
            .args(args)
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .with_context(|| format!("running {shown}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
            bail!("{shown} failed ({}): {}", out.status, tail.join(" | "));
        }
        let line = stdout.lines().last().unwrap_or_default();
        eprintln!("  {line}");
        Ok((shown, fields(line)))
    }

    /// A latency row: one run.
    fn row(&mut self, name: &'static str, args: &[String]) -> anyhow::Result<f64> {
        let (command, result) = self.perf(args)?;
        let per_gb = number(&result, "broker_cpu_s_per_gb").unwrap_or(f64::NAN);
        self.rows.push(Row {
            name,
            command,
            result,
        });
        Ok(per_gb)
    }

    /// A throughput row: `repeat` runs, the one with the median broker CPU per GB kept, and
    /// every run's figure beside it (`broker_cpu_s_per_gb_runs`): on a shared VM one run of a
    /// few seconds varies by half.
    fn throughput_row(&mut self, name: &'static str, args: &[String]) -> anyhow::Result<f64> {
        self.throughput_row_after(name, None, args)
    }

    /// A throughput row whose every run follows `prepare` (a `strata` command, not measured).
    fn throughput_row_after(
        &mut self,
        name: &'static str,
        prepare: Option<&[String]>,
        args: &[String],
    ) -> anyhow::Result<f64> {
        let mut runs = Vec::new();
        for _ in 0..self.repeat {
            if let Some(prepare) = prepare {
                self.perf(prepare)?;
            }
            write_back();
            runs.push(self.perf(args)?);
        }
        let cost = |r: &BTreeMap<String, serde_json::Value>| {
            number(r, "broker_cpu_s_per_gb").unwrap_or(f64::NAN)
        };
        let all: Vec<f64> = runs.iter().map(|(_, r)| cost(r)).collect();
        runs.sort_by(|a, b| cost(&a.1).total_cmp(&cost(&b.1)));
        let (command, mut result) = runs.swap_remove(runs.len() / 2);
        let per_gb = cost(&result);
        result.insert("broker_cpu_s_per_gb_runs".into(), serde_json::json!(all));
        self.rows.push(Row {
            name,
            command,
            result,
        });
        Ok(per_gb)
    }

    fn p99(&self, name: &str) -> f64 {
        self.rows
            .iter()
            .find(|r| r.name == name)
            .and_then(|r| number(&r.result, "p99_ms"))
            .unwrap_or(f64::NAN)
    }

    fn goal(&mut self, what: String, met: bool) {
        let line = format!("{} {what}", if met { "met:" } else { "MISSED:" });
        eprintln!("{line}");
        self.goals.push(line);
    }

    fn plain_and_partitions(&mut self, plain: bool, partitions: bool) -> anyhow::Result<()> {
        let env = [("STRATA_MAX_PARTITIONS_PER_TOPIC", MANY.to_string())];
        let brokers = self.brokers(1, &env)?;
        let (b, admin) = (brokers[0].kafka.clone(), brokers[0].admin.clone());
        let n = self.records.to_string();
        let common = |cmd: &str, topic: &str| -> Vec<String> {
            [
                "perf",
                cmd,
                topic,
                "-b",
                &b,
                "-n",
                &n,
                "--broker-admin",
                &admin,
            ]
            .map(String::from)
            .to_vec()
        };
        if plain {
            let mut produce = common("produce", "one");
            produce.extend(["--partitions", "1", "-s", "1024"].map(String::from));
            self.throughput_row("produce", &produce)?;
            self.throughput_row("consume", &common("consume", "one"))?;
        }
        if partitions {
            if !plain {
                let mut produce = common("produce", "one");
                produce.extend(["--partitions", "1", "-s", "1024"].map(String::from));
                self.perf(&produce)?;
            }
            let mut produce = common("produce", "many");
            produce.extend(
                [
                    "--partitions",
                    &MANY.to_string(),
                    "--partitions-hint",
                    &MANY.to_string(),
                ]
                .map(String::from),
            );
            // Creating 10,000 partitions' files behind the gigabyte before took over
            // librdkafka's 15 s default on this VM's disk: clean pages first, and a longer
            // bound.
            produce.extend(["-s", "1024", "--request-timeout-ms", "120000"].map(String::from));
            write_back();
            self.perf(&produce)?;
            let mut one = common("consume", "one");
            one.push("--group".into());
            let one = self.throughput_row("consume_new_group_1", &one)?;
            let mut many = common("consume", "many");
            many.extend(["--group", "--timeout-ms", "60000"].map(String::from));
            let many = self.throughput_row("consume_new_group_10000", &many)?;
            self.goal(
                format!(
                    "a new group over {MANY} partitions costs {:.2}x one over 1 per GB (goal <= 1.5x)",
                    many / one
                ),
                many <= 1.5 * one,
            );
            // A group that resumes: offsets committed for every partition, fetched on join.
            let mut resumed = |name: &'static str, topic: &str| -> anyhow::Result<f64> {
                let group = format!("resumed-{topic}");
                let reset = [
                    "group",
                    "reset-offsets",
                    "-b",
                    &b,
                    "--topic",
                    topic,
                    "--to-earliest",
                    &group,
                ]
                .map(String::from);
                let mut consume = common("consume", topic);
                consume.extend(["--group-id", &group, "--timeout-ms", "60000"].map(String::from));
                self.throughput_row_after(name, Some(&reset), &consume)
            };
            let one = resumed("consume_resumed_group_1", "one")?;
            let many = resumed("consume_resumed_group_10000", "many")?;
            self.goal(
                format!(
                    "a resumed group over {MANY} partitions costs {:.2}x one over 1 per GB (goal <= 1.5x)",
                    many / one
                ),
                many <= 1.5 * one,
            );
        }
        Ok(())
    }

    fn tls(&mut self, floors: &Floors) -> anyhow::Result<()> {
        let Some(cipher) = floors.aes_gcm_s_per_gb else {
            eprintln!("tls rows skipped: no openssl to make a certificate and measure the cipher");
            return Ok(());
        };
        let certs = self.work.join("certs");
        std::fs::create_dir_all(&certs)?;
        let (cert, key) = (certs.join("cert.pem"), certs.join("key.pem"));
        let status = Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
            ])
            .args(["-nodes", "-days", "2", "-subj", "/CN=localhost"])
            .args(["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .context("running openssl req")?;
        if !status.success() {
            bail!("openssl req could not make a certificate ({status})");
        }
        let env = [
            (
                "STRATA_LISTENERS",
                "PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls_port}".to_string(),
            ),
            (
                "STRATA_SSL_CERTIFICATE_LOCATION",
                cert.display().to_string(),
            ),
            ("STRATA_SSL_KEY_LOCATION", key.display().to_string()),
        ];
        // The plaintext listener keeps the port `--kafka-addr` names.
        let port = self.next_port;
        let env: Vec<(&str, String)> = env
            .iter()
            .map(|(k, v)| (*k, v.replace("{plain}", &port.to_string())))
            .collect();
        let brokers = self.brokers(1, &env)?;
        let tls = format!("127.0.0.1:{}", port + 3);
        let admin = brokers[0].admin.clone();
        let n = self.records.to_string();
        let ca = format!("ssl.ca.location={}", cert.display());
        let args = |cmd: &str| -> Vec<String> {
            [
                "perf",
                cmd,
                "secure",
                "-b",
                &tls,
                "-n",
                &n,
                "--broker-admin",
                &admin,
                "-X",
                "security.protocol=SSL",
                "-X",
                &ca,
            ]
            .map(String::from)
            .to_vec()
        };
        let mut produce = args("produce");
        produce.extend(["--partitions", "1", "-s", "1024"].map(String::from));
        let produce = self.throughput_row("produce_tls", &produce)?;
        let consume = self.throughput_row("consume_tls", &args("consume"))?;
        for (name, tls_cost, plain_row) in [
            ("produce", produce, "produce"),
            ("consume", consume, "consume"),
        ] {
            let Some(plain) = self
                .rows
                .iter()
                .find(|r| r.name == plain_row)
                .and_then(|r| number(&r.result, "broker_cpu_s_per_gb"))
            else {
                continue;
            };
            self.goal(
                format!(
                    "{name} over TLS costs plaintext + {:.3} s/GB, {:.2}x the cipher's {cipher:.3} (goal <= 1.5x)",
                    tls_cost - plain,
                    (tls_cost - plain) / cipher
                ),
                tls_cost - plain <= 1.5 * cipher,
            );
        }
        Ok(())
    }

    /// `strata topic create NAME` with one partition and `extra` arguments.
    fn create_topic(&self, bootstrap: &str, name: &str, extra: &[&str]) -> anyhow::Result<()> {
        let out = Command::new(&self.exe)
            .args([
                "topic",
                "create",
                name,
                "-b",
                bootstrap,
                "--partitions",
                "1",
            ])
            .args(extra)
            .output()
            .with_context(|| format!("creating topic {name}"))?;
        if !out.status.success() {
            bail!(
                "creating topic {name} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    fn rf3(&mut self) -> anyhow::Result<()> {
        let brokers = self.brokers(3, &[])?;
        let b: Vec<String> = brokers.iter().map(|b| b.kafka.clone()).collect();
        let b = b.join(",");
        let (n, rate) = (self.latency_records.to_string(), RATE.to_string());
        self.create_topic(
            &b,
            "rf3",
            &[
                "--replication-factor",
                "3",
                "--config",
                "min.insync.replicas=2",
            ],
        )?;
        let args = |cmd: &str| -> Vec<String> {
            [
                "perf",
                cmd,
                "rf3",
                "-b",
                &b,
                "-n",
                &n,
                "-s",
                "1024",
                "--rate",
                &rate,
                "--acks",
                "all",
                "--linger-ms",
                "0",
            ]
            .map(String::from)
            .to_vec()
        };
        self.row("rf3_produce", &args("produce"))?;
        self.row("rf3_e2e", &args("e2e"))?;
        Ok(())
    }

    fn replay(&mut self) -> anyhow::Result<()> {
        // The remote tier in the broker's own directory (file://), quick offloads, one local
        // segment kept: the history is read back from the remote tier.
        let env = [
            (
                "STRATA_REMOTE_LOG_MANAGER_TASK_INTERVAL_MS",
                "200".to_string(),
            ),
            ("STRATA_LOG_RETENTION_CHECK_INTERVAL_MS", "200".to_string()),
        ];
        let brokers = self.brokers(1, &env)?;
        let (b, admin) = (brokers[0].kafka.clone(), brokers[0].admin.clone());
        self.create_topic(
            &b,
            "history",
            &[
                "--config",
                "segment.bytes=67108864",
                "--config",
                "local.retention.ms=1000",
                "--config",
                "remote.storage.enable=true",
            ],
        )?;
        let n = self.records.to_string();
        self.perf(
            &[
                "perf", "produce", "history", "-b", &b, "-n", &n, "-s", "1024",
            ]
            .map(String::from),
        )?;
        wait_offloaded(&admin, Duration::from_secs(300))?;
        let latency = self.latency_records.to_string();
        let rate = RATE.to_string();
        let live = |topic: &str| -> Vec<String> {
            [
                "perf",
                "produce",
                topic,
                "-b",
                &b,
                "-n",
                &latency,
                "-s",
                "1024",
                "--rate",
                &rate,
                "--acks",
                "all",
                "--linger-ms",
                "0",
                "--partitions",
                "1",
            ]
            .map(String::from)
            .to_vec()
        };
        // The offsets topic first, so creating it is in neither measurement.
        let _ = self.perf(
            &["perf", "consume", "history", "-b", &b, "-n", "1", "--group"].map(String::from),
        );
        self.row("replay_alone", &live("live-alone"))?;
        let replay_cmd: Vec<String> = [
            "perf",
            "consume",
            "history",
            "-b",
            &b,
            "-n",
            &n,
            "--timeout-ms",
            "60000",
        ]
        .map(String::from)
        .to_vec();
        // Replays back to back for the whole latency run (the first from a cold cache): a
        // replay of the history alone is over in seconds.
        let stop = Arc::new(AtomicBool::new(false));
        let replays = {
            let (stop, args, exe, pinned, niced) = (
                stop.clone(),
                replay_cmd.clone(),
                self.exe.clone(),
                self.pinned,
                which("nice"),
            );
            std::thread::spawn(move || -> anyhow::Result<Vec<String>> {
                let mut lines = Vec::new();
                while !stop.load(Ordering::Acquire) {
                    let mut child = background_command(niced, pinned, 1, &exe)
                        .args(&args)
                        .stdout(Stdio::piped())
                        .stderr(Stdio::null())
                        .spawn()
                        .context("starting a replay")?;
                    while child.try_wait()?.is_none() {
                        if stop.load(Ordering::Acquire) {
                            let _ = child.kill();
                        }
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    let mut out = String::new();
                    if let Some(mut stdout) = child.stdout.take() {
                        let _ = stdout.read_to_string(&mut out);
                    }
                    if let Some(line) = out.lines().last() {
                        lines.push(line.to_string());
                    }
                }
                Ok(lines)
            })
        };
        let during = self.row("replay_during", &live("live-replay"));
        stop.store(true, Ordering::Release);
        let replayed = replays
            .join()
            .map_err(|_| anyhow!("the replay thread panicked"))??;
        during?;
        let first = replayed.first().map(String::as_str).unwrap_or_default();
        let mut result = fields(first);
        result.insert("complete_replays".into(), (replayed.len() as u64).into());
        self.rows.push(Row {
            name: "replay_consumer",
            command: format!("strata {} (back to back)", replay_cmd.join(" ")),
            result,
        });
        let (alone, with) = (self.p99("replay_alone"), self.p99("replay_during"));
        self.goal(
            format!(
                "a {RATE}/s acks=all producer's p99 during a full-speed remote replay is {:.2}x alone ({with} vs {alone} ms; goal <= 1.2x)",
                with / alone
            ),
            with <= 1.2 * alone,
        );
        Ok(())
    }
}

/// `program`, pinned to `cpu` when `pinned`.
fn pinned_command(pinned: bool, cpu: u32, program: &Path) -> Command {
    if pinned {
        let mut c = Command::new("taskset");
        c.args(["-c", &cpu.to_string()]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// Writes dirty pages back (`sync`) before a measured run: a run after one that left a
/// gigabyte dirty paid for its writeback (throttled in the broker's own writes), up to three
/// times the cost.
fn write_back() {
    let _ = Command::new("sync").status();
}

/// `program` pinned like [`pinned_command`], at the lowest CPU priority when `niced` (`nice`
/// exists): load that must not delay the client being measured beside it.
fn background_command(niced: bool, pinned: bool, cpu: u32, program: &Path) -> Command {
    if !niced {
        return pinned_command(pinned, cpu, program);
    }
    let mut c = Command::new("nice");
    c.args(["-n", "19"]);
    if pinned {
        c.args(["taskset", "-c", &cpu.to_string()]);
    }
    c.arg(program);
    c
}

/// Waits until the broker has no segment waiting for upload and its local log holds only
/// the active segment (the history is in the remote tier only).
fn wait_offloaded(admin: &str, within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let text = crate::common::admin_request(admin, "GET", "/metrics")?;
        let lag = metric_value(&text, "strata_tier_upload_lag_segments");
        let uploaded = metric_value(&text, "strata_tier_uploaded_segments_total").unwrap_or(0.0);
        if lag == Some(0.0) && uploaded > 0.0 {
            // Local retention (1 s, checked every 200 ms) removes the uploaded segments.
            std::thread::sleep(Duration::from_secs(2));
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the history was not offloaded within {within:?} (upload lag {lag:?})");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// A broker process of the run, stopped (SIGTERM, then SIGKILL) when dropped.
struct Broker {
    child: Child,
    kafka: String,
    admin: String,
    ready: Option<std::sync::mpsc::Receiver<String>>,
    log: PathBuf,
}

impl Broker {
    fn spawn(mut cmd: Command, dir: &Path) -> anyhow::Result<Broker> {
        let log_path = dir.join("strata.log");
        let log = std::fs::File::create(&log_path)?;
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .context("starting strata serve")?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.starts_with("READY ") {
                    let _ = tx.send(line);
                }
            }
        });
        Ok(Broker {
            child,
            kafka: String::new(),
            admin: String::new(),
            ready: Some(rx),
            log: log_path,
        })
    }

    fn wait_ready(&mut self) -> anyhow::Result<()> {
        let rx = self.ready.take().ok_or_else(|| anyhow!("waited twice"))?;
        let deadline = Instant::now() + Duration::from_secs(120);
        let line = loop {
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(line) => break line,
                Err(_) if Instant::now() > deadline => {
                    bail!(
                        "a broker did not print READY within 120 s (its log: {})",
                        self.log.display()
                    )
                }
                Err(_) => {
                    if let Ok(Some(status)) = self.child.try_wait() {
                        bail!(
                            "a broker exited ({status}) before READY (its log: {})",
                            self.log.display()
                        )
                    }
                }
            }
        };
        let f = fields(&line);
        let text = |k: &str| {
            f.get(k)
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string()
        };
        self.kafka = text("kafka");
        self.admin = text("admin");
        Ok(())
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        // The run's data goes with its work directory: nothing a clean stop would keep.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the run is judged against.
#[derive(serde::Serialize)]
struct Floors {
    /// CPU seconds per GB the kernel spends receiving / sending over loopback TCP.
    receive_s_per_gb: f64,
    send_s_per_gb: f64,
    /// CPU seconds per GB of AES-256-GCM in 16 KiB blocks (`openssl speed`).
    aes_gcm_s_per_gb: Option<f64>,
}

impl Floors {
    fn measure() -> anyhow::Result<Floors> {
        let (receive_s_per_gb, send_s_per_gb) = loopback_floor(1 << 30)?;
        Ok(Floors {
            receive_s_per_gb,
            send_s_per_gb,
            aes_gcm_s_per_gb: aes_gcm_floor(),
        })
    }
}

/// Sends `bytes` over a loopback TCP connection in 1 MiB writes; each side's thread CPU
/// seconds per GB.
fn loopback_floor(bytes: u64) -> anyhow::Result<(f64, f64)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let sender = std::thread::spawn(move || -> anyhow::Result<f64> {
        let mut s = TcpStream::connect(addr)?;
        let chunk = vec![7u8; 1 << 20];
        let before = thread_cpu_seconds()?;
        let mut sent = 0;
        while sent < bytes {
            s.write_all(&chunk)?;
            sent += chunk.len() as u64;
        }
        Ok(thread_cpu_seconds()? - before)
    });
    let (mut conn, _) = listener.accept()?;
    let mut buf = vec![0u8; 1 << 20];
    let before = thread_cpu_seconds()?;
    let mut received = 0u64;
    while received < bytes {
        let n = conn.read(&mut buf)?;
        if n == 0 {
            break;
        }
        received += n as u64;
    }
    let receive = thread_cpu_seconds()? - before;
    let send = sender
        .join()
        .map_err(|_| anyhow!("the sender panicked"))??;
    let gb = bytes as f64 / 1e9;
    Ok((receive / gb, send / gb))
}

/// This thread's CPU seconds.
fn thread_cpu_seconds() -> anyhow::Result<f64> {
    strata_broker::metrics::thread_cpu_seconds()
        .ok_or_else(|| anyhow!("cannot read this thread's CPU time from /proc"))
}

/// `openssl speed -evp aes-256-gcm` at 16 KiB, as CPU seconds per GB; `None` without openssl.
fn aes_gcm_floor() -> Option<f64> {
    let out = Command::new("openssl")
        .args([
            "speed",
            "-evp",
            "aes-256-gcm",
            "-bytes",
            "16384",
            "-seconds",
            "2",
        ])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    parse_openssl_speed(&String::from_utf8_lossy(&out.stdout))
}

/// The last figure of the AES-256-GCM line: thousands of bytes per second.
fn parse_openssl_speed(text: &str) -> Option<f64> {
    let line = text
        .lines()
        .rev()
        .find(|l| l.to_ascii_lowercase().starts_with("aes-256-gcm"))?;
    let k = line.split_whitespace().last()?.strip_suffix('k')?;
    let bytes_per_sec = k.parse::<f64>().ok()? * 1000.0;
    (bytes_per_sec > 0.0).then(|| 1e9 / bytes_per_sec)
}

/// `key=value` pairs of a perf summary line, numbers as numbers.
fn fields(line: &str) -> BTreeMap<String, serde_json::Value> {
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| {
            let value = v
                .parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
                .map_or_else(
                    || serde_json::Value::String(v.to_string()),
                    serde_json::Value::Number,
                );
            (k.to_string(), value)
        })
        .collect()
}

fn number(fields: &BTreeMap<String, serde_json::Value>, key: &str) -> Option<f64> {
    fields.get(key)?.as_f64()
}

fn which(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// The machine, for the record: CPU model, CPUs, memory, kernel.
fn machine() -> serde_json::Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo.lines().find_map(|l| {
        l.strip_prefix("model name")?
            .split_once(':')
            .map(|(_, m)| m.trim().to_string())
    });
    let mem_kb = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("MemTotal:")?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse::<u64>()
                .ok()
        });
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    serde_json::json!({
        "cpu": model,
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "memory_gib": mem_kb.map(|kb| kb / (1 << 20)),
        "kernel": kernel.trim(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openssl_speed_output_gives_seconds_per_gb() {
        let text = "version: 3.0.17\nbuilt on: ...\nThe 'numbers' are in 1000s of bytes per second processed.\n\
                    type          16384 bytes\nAES-256-GCM    2500000.00k\n";
        let s = parse_openssl_speed(text).unwrap();
        assert!((s - 0.4).abs() < 1e-9, "{s}");
        assert_eq!(parse_openssl_speed("nothing here"), None);
        assert_eq!(parse_openssl_speed("AES-256-GCM 0.00k"), None);
    }

    #[test]
    fn summary_lines_become_fields() {
        let f = fields("produce records=10 mb_per_sec=812.5 p99_ms=1.2 errors=0 name=x");
        assert_eq!(number(&f, "records"), Some(10.0));
        assert_eq!(number(&f, "mb_per_sec"), Some(812.5));
        assert_eq!(f["name"], serde_json::Value::String("x".into()));
        assert!(!f.contains_key("produce"));
    }
}
