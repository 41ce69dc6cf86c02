//! `strata perf group`, `perf commit`, `perf produce|consume` and `perf txn` against a test
//! broker: the summary line parses and its values are consistent with what was asked (no
//! assertions about speed); `perf standard` with the brokers it starts itself.

use std::collections::BTreeMap;
use std::io::Read;
use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use strata_tests::groups::unique_group;
use strata_tests::{strata_bin, unique_topic, wait_until, Broker};

/// Runs `strata ARGS...` to completion (killed after `limit`); returns its stdout, failing the
/// test with both outputs when it exits unsuccessfully.
fn strata(broker: &Broker, args: &[&str], limit: Duration) -> String {
    let bin = strata_bin();
    let mut child = Command::new(&bin)
        .args(args)
        .args(["-b", &broker.kafka_addr])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let out = thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let mut status = None;
    if !wait_until(limit, || {
        status = child.try_wait().expect("wait for strata");
        status.is_some()
    }) {
        let _ = child.kill();
        let _ = child.wait();
    }
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    match status {
        Some(s) if s.success() => out,
        Some(s) => panic!("strata {args:?} failed ({s})\nstdout:\n{out}\nstderr:\n{err}"),
        None => {
            panic!("strata {args:?} still running after {limit:?}\nstdout:\n{out}\nstderr:\n{err}")
        }
    }
}

/// The `key=value` fields of the summary line starting with `kind`.
fn summary(stdout: &str, kind: &str) -> BTreeMap<String, String> {
    let line = stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some(kind))
        .unwrap_or_else(|| panic!("no `{kind}` line in:\n{stdout}"));
    line.split_whitespace()
        .skip(1)
        .map(|f| {
            let (k, v) = f
                .split_once('=')
                .unwrap_or_else(|| panic!("field `{f}` of `{line}` is not key=value"));
            (k.to_string(), v.to_string())
        })
        .collect()
}

fn num(fields: &BTreeMap<String, String>, key: &str) -> f64 {
    let v = fields
        .get(key)
        .unwrap_or_else(|| panic!("no `{key}` in {fields:?}"));
    v.parse()
        .unwrap_or_else(|_| panic!("`{key}={v}` is not a number"))
}

fn check_group_run(strategy: &str) {
    let broker = Broker::start_default();
    let topic = unique_topic("perf-group");
    // Short timeouts keep the test quick; the broker accepts sessions from 1 s.
    let out = strata(
        &broker,
        &[
            "perf",
            "group",
            "--topic",
            &topic,
            "--members",
            "3",
            "--session-timeout-ms",
            "2000",
            "--heartbeat-interval-ms",
            "300",
            "--assignment-strategy",
            strategy,
            "--phase-timeout-ms",
            "60000",
        ],
        Duration::from_secs(240),
    );
    let f = summary(&out, "group");
    assert_eq!(f["members"], "3");
    assert_eq!(f["partitions"], "4", "default: members + 1");
    assert_eq!(f["strategy"], strategy);
    assert_eq!(f["session_timeout_ms"], "2000");
    assert_eq!(f["heartbeat_interval_ms"], "300");
    for key in ["join_ms", "add_ms", "kill_ms", "kill_rebalance_ms"] {
        assert!(num(&f, key) > 0.0, "{key} in {f:?}");
    }
    assert!(num(&f, "join_ready_ms") <= num(&f, "join_ms"), "{f:?}");
    assert!(num(&f, "add_ready_ms") <= num(&f, "add_ms"), "{f:?}");
    let parts = num(&f, "kill_session_wait_ms") + num(&f, "kill_rebalance_ms");
    assert!((parts - num(&f, "kill_ms")).abs() < 1.0, "{f:?}");
    // A SIGKILLed member sends no LeaveGroup: the coordinator notices only once it has been
    // silent for its session timeout, at least 2000 - 300 ms after the kill.
    assert!(num(&f, "kill_session_wait_ms") >= 1500.0, "{f:?}");
    // A new group: the first generation is 1; each later phase needs at least one rebalance.
    for key in ["join_rebalances", "add_rebalances", "kill_rebalances"] {
        assert!(num(&f, key) >= 1.0, "{key} in {f:?}");
    }
    if strategy == "cooperative-sticky" {
        // Moving a partition to the new member takes a revoking round and an assigning one.
        assert!(num(&f, "add_rebalances") >= 2.0, "{f:?}");
    }
}

#[test]
fn perf_group_times_join_add_and_kill_of_three_eager_members() {
    check_group_run("range");
}

#[test]
fn perf_group_times_join_add_and_kill_of_three_cooperative_members() {
    check_group_run("cooperative-sticky");
}

#[test]
fn perf_commit_reports_commits_that_reach_the_group() {
    let broker = Broker::start_default();
    let topic = unique_topic("perf-commit");
    let group = unique_group("perf-commit");
    let out = strata(
        &broker,
        &[
            "perf",
            "commit",
            "--group",
            &group,
            "--topic",
            &topic,
            "--clients",
            "2",
            "--seconds",
            "2",
        ],
        Duration::from_secs(120),
    );
    let f = summary(&out, "commit");
    assert_eq!(f["clients"], "2");
    assert_eq!(f["partitions"], "2", "default: one per client");
    assert_eq!(f["mode"], "sync");
    assert_eq!(f["errors"], "0");
    let commits = num(&f, "commits");
    assert!(commits > 0.0, "{f:?}");
    assert!(num(&f, "seconds") >= 2.0, "{f:?}");
    assert!(num(&f, "commits_per_sec") > 0.0, "{f:?}");
    assert!(num(&f, "p50_ms") <= num(&f, "p99_ms"), "{f:?}");
    assert!(num(&f, "p99_ms") <= num(&f, "max_ms"), "{f:?}");

    // The group's committed offsets, read by an independent client: each client committed
    // offsets 1, 2, ... of its own partition, so together they are the number of commits.
    let consumer: BaseConsumer = broker
        .client_config()
        .set("group.id", &group)
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(&topic, 0);
    tpl.add_partition(&topic, 1);
    let committed = consumer
        .committed_offsets(tpl, Duration::from_secs(10))
        .expect("committed offsets");
    let total: i64 = committed
        .elements()
        .iter()
        .map(|e| match e.offset() {
            Offset::Offset(o) => o,
            other => panic!(
                "partition {} has no committed offset: {other:?}",
                e.partition()
            ),
        })
        .sum();
    assert_eq!(total as f64, commits, "{f:?}");
}

#[test]
fn perf_produce_and_group_consume_over_many_topics_report_the_broker_cpu() {
    let broker = Broker::start_default();
    let topic = unique_topic("perf-wide");
    let admin = broker.admin_addr.as_str();
    let out = strata(
        &broker,
        &[
            "perf",
            "produce",
            &topic,
            "--topics",
            "3",
            "--partitions",
            "20",
            "-n",
            "3000",
            "-s",
            "64",
            "--broker-admin",
            admin,
        ],
        Duration::from_secs(120),
    );
    let produced = summary(&out, "produce");
    assert_eq!(num(&produced, "records"), 3000.0);
    assert_eq!(num(&produced, "errors"), 0.0);
    assert!(num(&produced, "broker_cpu_s") >= 0.0);
    assert!(num(&produced, "broker_cpu_s_per_gb") >= 0.0);
    for i in 0..3 {
        assert_eq!(
            (0..20)
                .map(|p| broker.watermarks(&format!("{topic}-{i}"), p).1)
                .sum::<i64>(),
            1000,
            "topic {topic}-{i} holds a third of the records"
        );
    }
    let out = strata(
        &broker,
        &[
            "perf",
            "consume",
            &topic,
            "--topics",
            "3",
            "--group",
            "-n",
            "3000",
            "--broker-admin",
            admin,
        ],
        Duration::from_secs(120),
    );
    let consumed = summary(&out, "consume");
    assert_eq!(num(&consumed, "records"), 3000.0);
    assert_eq!(num(&consumed, "bytes"), 3000.0 * 64.0);
    assert!(num(&consumed, "join_ms") > 0.0);
    assert!(num(&consumed, "broker_cpu_s_per_gb") >= 0.0);
}

#[test]
fn perf_consume_with_a_named_group_resumes_from_its_committed_offsets() {
    let broker = Broker::start_default();
    let topic = unique_topic("perf-resume");
    let group = unique_group("perf-resume");
    let out = strata(
        &broker,
        &[
            "perf",
            "produce",
            &topic,
            "--partitions",
            "2",
            "--partitions-hint",
            "2",
            "-n",
            "200",
            "-s",
            "64",
        ],
        Duration::from_secs(120),
    );
    assert_eq!(num(&summary(&out, "produce"), "records"), 200.0);
    strata(
        &broker,
        &[
            "group",
            "reset-offsets",
            "--topic",
            &topic,
            "--to-offset",
            "60",
            &group,
        ],
        Duration::from_secs(60),
    );
    // 40 records are left after offset 60 in each partition: asked for one more, the run
    // reads exactly those and then reports the shortfall.
    let run = Command::new(strata_bin())
        .args(["perf", "consume", &topic, "--group-id", &group])
        .args(["-n", "81", "--timeout-ms", "3000", "-b", &broker.kafka_addr])
        .stdin(Stdio::null())
        .output()
        .expect("run strata perf consume");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "{stderr}");
    assert!(stderr.contains("consumed only 80 of 81"), "{stderr}");
}

/// The high watermarks of `partitions` partitions of `topic`, summed: records plus the
/// transaction markers written among them.
fn offsets_used(broker: &Broker, topic: &str, partitions: i32) -> i64 {
    let consumer: BaseConsumer = broker.client_config().create().expect("consumer");
    (0..partitions)
        .map(|p| {
            consumer
                .fetch_watermarks(topic, p, Duration::from_secs(10))
                .expect("watermarks")
                .1
        })
        .sum()
}

/// The summary of `strata perf txn TOPIC ARGS` (space-separated).
fn perf_txn(broker: &Broker, topic: &str, args: &str) -> BTreeMap<String, String> {
    let args: Vec<&str> = ["perf", "txn", topic]
        .into_iter()
        .chain(args.split_whitespace())
        .collect();
    summary(&strata(broker, &args, Duration::from_secs(120)), "txn")
}

#[test]
fn perf_txn_commits_transactions_and_measures_them_against_the_plain_producer() {
    let broker = Broker::start_default();
    let topic = unique_topic("perf-txn");
    let f = perf_txn(
        &broker,
        &topic,
        "-n 1000 --records-per-txn 100 --partitions 2",
    );
    assert_eq!(f["mode"], "transactional");
    assert_eq!(
        (
            &f["records"][..],
            &f["transactions"][..],
            &f["partitions"][..]
        ),
        ("1000", "10", "2")
    );
    assert_eq!(f["errors"], "0");
    assert!(num(&f, "commit_p50_ms") > 0.0, "{f:?}");
    assert!(
        num(&f, "commit_p50_ms") <= num(&f, "commit_p99_ms"),
        "{f:?}"
    );
    assert!(
        num(&f, "commit_p99_ms") <= num(&f, "commit_max_ms"),
        "{f:?}"
    );
    // Each transaction ended with a commit marker in both of its partitions.
    assert_eq!(offsets_used(&broker, &topic, 2), 1000 + 10 * 2);

    let plain = unique_topic("perf-txn-plain");
    let f = perf_txn(
        &broker,
        &plain,
        "-n 1000 --records-per-txn 100 --partitions 2 --plain",
    );
    assert_eq!((&f["mode"][..], &f["records"][..]), ("plain", "1000"));
    assert_eq!(
        f["commit_p50_ms"], "0.000",
        "no commits without transactions"
    );
    assert_eq!(offsets_used(&broker, &plain, 2), 1000, "no markers");

    // A read_committed consumer at the tail sees every record of the paced transactions.
    let e2e = unique_topic("perf-txn-e2e");
    let paced = "-n 200 --records-per-txn 10 --rate 50 --e2e --timeout-ms 1000";
    let f = perf_txn(&broker, &e2e, paced);
    assert_eq!(f["e2e_records"], "200");
    assert!(num(&f, "e2e_p50_ms") <= num(&f, "e2e_max_ms"), "{f:?}");
    // Paced: never faster than --rate (20 transactions due over 0.38 s at least).
    assert!(num(&f, "txns_per_sec") <= 53.0, "{f:?}");

    let bad = Command::new(strata_bin())
        .args(["perf", "txn", &topic, "-n", "10", "--records-per-txn", "0"])
        .args(["-b", &broker.kafka_addr])
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("--records-per-txn must be at least 1"),
        "{err}"
    );
}

#[test]
fn perf_standard_runs_its_rows_against_brokers_it_starts_and_writes_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("standard.json");
    let base = strata_tests::cluster::free_port().to_string();
    let run = Command::new(strata_bin())
        .args([
            "perf",
            "standard",
            "--quick",
            "--only",
            "plain",
            "--base-port",
            &base,
        ])
        .arg("--out")
        .arg(&out)
        .arg("--work-dir")
        .arg(dir.path())
        .output()
        .expect("run strata perf standard");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&out).expect("the result")).expect("JSON");
    let rows = json["rows"].as_array().expect("rows");
    let names: Vec<&str> = rows.iter().filter_map(|r| r["name"].as_str()).collect();
    assert_eq!(names, ["produce", "consume"]);
    for row in rows {
        let result = &row["result"];
        assert_eq!(result["records"].as_f64(), Some(100_000.0), "{row}");
        assert!(result["broker_cpu_s_per_gb"].as_f64().is_some(), "{row}");
        assert!(row["command"].as_str().unwrap().starts_with("strata perf "));
    }
    assert!(json["floors"]["receive_s_per_gb"].as_f64().is_some());
    assert!(json["machine"]["cpus"].as_u64().is_some());
    // The brokers and their data are gone with the run.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("strata-perf-standard")
        })
        .collect();
    assert!(left.is_empty(), "work directory left behind");

    let bad = Command::new(strata_bin())
        .args(["perf", "standard", "--only", "plain,bogus"])
        .output()
        .expect("run strata perf standard");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--only bogus: no such group"));
}
