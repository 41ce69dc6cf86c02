//! The console on the admin port, seen by a browser: headless Chromium (Debian's `chromium`,
//! driven by Playwright from the venv `scripts/test.sh` installs; `tests/console_browser.py`)
//! renders the overview, follows real links to a lagging group's page and on to a topic's, and
//! the figures it shows must be the Kafka APIs' answers (metadata, watermarks, committed
//! offsets). The JSON views behind it are checked directly, with bad input.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rdkafka::admin::TopicReplication;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::Value;
use strata_tests::groups::unique_group;
use strata_tests::{
    repo_root, unique_topic, venv_python, wait_for_some, Broker, BrokerOpts, Cluster,
};

const WAIT: Duration = Duration::from_secs(30);

fn get_json(broker: &Broker, path: &str) -> Value {
    let r = broker.admin_get(path).unwrap();
    assert_eq!(r.status, 200, "GET {path}: {}", r.body);
    serde_json::from_str(&r.body).unwrap_or_else(|e| panic!("GET {path}: {e}: {}", r.body))
}

/// A group view's lag in records, by partition.
fn lag_by_partition(view: &Value) -> BTreeMap<i32, i64> {
    (view["partitions"].as_array().unwrap().iter())
        .map(|p| {
            let partition = p["partition"].as_i64().unwrap() as i32;
            (partition, p["lag_records"].as_i64().unwrap())
        })
        .collect()
}

/// Where the browser's screenshots are kept (test artifacts).
fn artifacts() -> std::path::PathBuf {
    std::env::var("STRATA_TEST_ARTIFACTS")
        .map(Into::into)
        .unwrap_or_else(|_| repo_root().join("target/test-artifacts"))
        .join("console")
}

#[test]
fn the_console_shows_the_true_figures_and_its_links_lead_to_a_group_and_a_topic() {
    let broker = Broker::start(BrokerOpts::new().env("STRATA_LAG_SAMPLE_INTERVAL_MS", 250));
    let orders = unique_topic("console-orders");
    let audit = unique_topic("console-audit");
    broker
        .create_topic(&orders, 3, &[("retention.ms", "7200000")])
        .unwrap();
    broker.create_topic(&audit, 1, &[]).unwrap();
    broker.produce_to_each(&orders, 3, 20, "a");
    broker.produce_to_each(&audit, 1, 4, "b");

    // A group that read 5 of each partition's 20 records: 15 behind on each.
    let group = unique_group("console-group");
    let consumer: BaseConsumer = broker.group_config(&group).create().unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..3 {
        tpl.add_partition_offset(&orders, p, Offset::Offset(5))
            .unwrap();
    }
    consumer.commit(&tpl, CommitMode::Sync).unwrap();
    let committed = broker.committed(&group, &orders, &[0, 1, 2]).unwrap();
    let kafka_lag: BTreeMap<i32, i64> = (0..3)
        .map(|p| (p, broker.watermarks(&orders, p).1 - committed[&p].unwrap()))
        .collect();
    assert_eq!(kafka_lag.values().sum::<i64>(), 45);

    // The JSON views, against the Kafka APIs.
    let group_view = wait_for_some("the group's lag sampled", WAIT, || {
        let r = broker.admin_get(&format!("/v1/groups/{group}")).ok()?;
        (r.status == 200).then(|| serde_json::from_str::<Value>(&r.body).unwrap())
    });
    assert_eq!(lag_by_partition(&group_view), kafka_lag, "{group_view}");
    let metadata = {
        let c: BaseConsumer = broker.consumer_config().create().unwrap();
        c.fetch_metadata(None, Duration::from_secs(10)).unwrap()
    };
    let overview = get_json(&broker, "/v1/overview");
    assert_eq!(overview["topics"], metadata.topics().len(), "{overview}");
    let partitions: usize = metadata.topics().iter().map(|t| t.partitions().len()).sum();
    assert_eq!(overview["partitions"], partitions, "{overview}");
    assert_eq!(
        overview["brokers"][0]["id"],
        metadata.brokers()[0].id(),
        "{overview}"
    );
    assert_eq!(
        (
            overview["offline"].as_u64(),
            overview["under_replicated"].as_u64()
        ),
        (Some(0), Some(0))
    );
    let page = get_json(&broker, &format!("/v1/topics?q={orders}"));
    assert_eq!(page["total"], 1, "{page}");
    assert_eq!(page["items"][0]["partitions"], 3, "{page}");
    let first = get_json(&broker, "/v1/topics?q=console-&limit=1");
    assert_eq!(
        (
            first["total"].as_u64(),
            first["items"].as_array().unwrap().len()
        ),
        (Some(2), 1)
    );
    let second = get_json(&broker, "/v1/topics?q=console-&limit=1&offset=1");
    // Largest first: the 3-partition topic of 60 records before the 1-partition one of 4.
    for sort in ["size", "partitions"] {
        let sorted = get_json(&broker, &format!("/v1/topics?q=console-&sort={sort}"));
        assert_eq!(
            sorted["items"][0]["name"],
            orders.as_str(),
            "{sort}: {sorted}"
        );
    }
    assert_ne!(first["items"][0]["name"], second["items"][0]["name"]);
    let topic = get_json(&broker, &format!("/v1/topics/{orders}"));
    for p in topic["partitions"].as_array().unwrap() {
        let i = p["partition"].as_i64().unwrap() as i32;
        assert_eq!(p["high_watermark"], broker.watermarks(&orders, i).1, "{p}");
    }
    let retention = (topic["configs"].as_array().unwrap().iter())
        .find(|c| c["name"] == "retention.ms")
        .unwrap();
    assert_eq!(
        (&retention["value"], &retention["source"]),
        (&Value::from("7200000"), &Value::from("topic"))
    );

    // A partition's records, as a consumer reads them: from an offset, from a time, the latest.
    let from5 = get_json(
        &broker,
        &format!("/v1/topics/{orders}/messages?partition=1&offset=5&limit=3"),
    );
    let shown: Vec<(i64, String)> = (from5["records"].as_array().unwrap().iter())
        .map(|r| {
            (
                r["offset"].as_i64().unwrap(),
                r["value"]["text"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        (5..8).map(|i| (i, format!("a-p1-{i}"))).collect::<Vec<_>>(),
        "{from5}"
    );
    assert_eq!(from5["next"], 8);
    let ts = from5["records"][1]["timestamp"].as_i64().unwrap();
    let by_time = get_json(
        &broker,
        &format!("/v1/topics/{orders}/messages?partition=1&timestamp={ts}&limit=1"),
    );
    // The first record at or after that time: offset 6's, or an earlier one of the same ms.
    let found = &by_time["records"][0];
    assert!(
        found["offset"].as_i64().unwrap() <= 6 && found["timestamp"].as_i64().unwrap() >= ts,
        "{by_time}"
    );
    let latest = get_json(
        &broker,
        &format!("/v1/topics/{orders}/messages?partition=0&limit=2"),
    );
    let offsets: Vec<i64> = (latest["records"].as_array().unwrap().iter())
        .map(|r| r["offset"].as_i64().unwrap())
        .collect();
    assert_eq!(offsets, vec![18, 19], "{latest}");

    // Bad input: refused in words, bounded.
    for (path, status) in [
        ("/v1/topics?limit=0", 400),
        ("/v1/topics?limit=100000", 400),
        ("/v1/topics?offset=-3", 400),
        ("/v1/groups?sort=size", 400),
        ("/v1/topics?sort=lag", 400),
        ("/v1/topics/no-such-topic", 404),
        ("/v1/groups/no-such-group", 404),
        ("/v1/topics/%ff%fe", 400),
        ("/v1/topics/no-such-topic/messages", 404),
        ("/v1/topics/console-x/messages?limit=1000", 400),
        ("/v1/topics/console-x/messages?offset=-1", 400),
    ] {
        let r = broker.admin_get(path).unwrap();
        assert_eq!(r.status, status, "{path}: {}", r.body);
        assert!(!r.body.trim().is_empty(), "{path}: an empty answer");
    }
    let long = format!("/v1/topics?q={}", "x".repeat(300));
    assert_eq!(broker.admin_get(&long).unwrap().status, 400);
    let post = strata_tests::http_request(&broker.admin_addr, "POST", "/v1/topics", "").unwrap();
    assert_eq!(post.status, 403, "read-only: {}", post.body);
    let put = strata_tests::http_request(&broker.admin_addr, "PUT", "/v1/topics/x", "").unwrap();
    assert_eq!(put.status, 405);

    // The page itself: from the binary, with a policy that allows only its own files.
    let page = broker.admin_get("/").unwrap();
    assert_eq!(page.status, 200);
    assert!(page
        .header("content-type")
        .is_some_and(|t| t.starts_with("text/html")));
    let csp = page.header("content-security-policy").unwrap_or_default();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("default-src 'none'"),
        "{csp}"
    );
    assert_eq!(broker.admin_get("/groups/x").unwrap().body, page.body);

    // A browser: what it shows is what the Kafka APIs answer.
    let shots = artifacts();
    let out = Command::new(venv_python())
        .arg(repo_root().join("tests/console_browser.py"))
        .arg(format!("http://{}", broker.admin_addr))
        .arg(&shots)
        .arg(&group)
        .output()
        .expect("run the browser");
    assert!(
        out.status.success(),
        "browser: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        seen["errors"],
        Value::Array(vec![]),
        "errors in the browser: {seen}"
    );
    let row = |rows: &Value, first: &str| -> Vec<String> {
        (rows.as_array().unwrap().iter())
            .find(|r| r[0] == first)
            .unwrap_or_else(|| panic!("no row {first} in {rows}"))
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap().to_string())
            .collect()
    };
    let o = &seen["overview"];
    assert_eq!(row(&o["topics"], &orders)[1], "3");
    assert_eq!(row(&o["topics"], &audit)[1], "1");
    assert_eq!(row(&o["groups"], &group)[1], "classic", "{o}");
    assert_eq!(row(&o["groups"], &group)[3], "45", "{o}");
    assert_eq!(o["stats"]["topics"], metadata.topics().len().to_string());
    assert_eq!(o["stats"]["partitions"], partitions.to_string());
    assert_eq!(seen["filtered_topics"], Value::Array(vec![]));
    assert!(seen["group_url"]
        .as_str()
        .unwrap()
        .ends_with(&format!("/groups/{group}")));
    let group_rows = seen["group"].as_array().unwrap();
    assert_eq!(group_rows.len(), 3);
    assert_eq!(seen["group_totals"]["lag (records)"], "45", "{seen}");
    for r in group_rows {
        let p: i32 = r[1].as_str().unwrap().parse().unwrap();
        assert_eq!(r[3].as_str().unwrap(), kafka_lag[&p].to_string(), "{r}");
    }
    assert!(seen["topic_url"]
        .as_str()
        .unwrap()
        .ends_with(&format!("/topics/{orders}")));
    for r in seen["topic"].as_array().unwrap() {
        let p: i32 = r[0].as_str().unwrap().parse().unwrap();
        assert_eq!(
            r[5].as_str().unwrap(),
            broker.watermarks(&orders, p).1.to_string(),
            "{r}"
        );
    }
    assert_eq!(
        row(&seen["topic_configs"], "retention.ms")[1..],
        ["7200000", "topic"]
    );
    // Found by a time typed in: the first record at or after the time of offset 3.
    let from_3 = &seen["messages_from_3"][0];
    let at_time = &seen["messages_at_time"][0];
    assert_eq!(at_time[1], from_3[1], "{seen}");
    let first: i64 = at_time[0].as_str().unwrap().parse().unwrap();
    assert!(first <= 3, "{seen}");
    assert_eq!(seen["change_forms"], 0, "read-only: no change is offered");
    for shot in ["overview.png", "group.png", "topic.png"] {
        assert!(
            shots.join(shot).metadata().is_ok_and(|m| m.len() > 1000),
            "{shot}"
        );
    }
}

/// Three brokers sampling lag every 250 ms, with changes enabled and an audit log, and `extra`
/// settings; its controller elected.
fn console_cluster(extra: &[(&str, &str)]) -> Cluster {
    let own = [
        ("STRATA_LAG_SAMPLE_INTERVAL_MS", "250"),
        ("STRATA_CONSOLE_ACTIONS_ENABLE", "true"),
        ("STRATA_AUDIT_LOG", "audit.log"),
    ];
    let env = [strata_tests::cluster::FAST, &own[..], extra].concat();
    let mut cluster = Cluster::start(3, 3, &env);
    cluster.wait_controller();
    cluster
}

/// What every member of a 3-node cluster answers for `path`, by member.
fn from_each(cluster: &Cluster, path: &str) -> Vec<(u64, Value)> {
    (1..=3)
        .map(|id| (id, get_json(cluster.member(id), path)))
        .collect()
}

#[test]
fn every_broker_of_a_cluster_shows_the_clusters_figures_lag_offsets_and_moves() {
    let store = tempfile::tempdir().unwrap();
    let url = format!("file://{}", store.path().display());
    let mut cluster = console_cluster(&[
        ("STRATA_OBJECT_STORE", url.as_str()),
        ("STRATA_REMOTE_LOG_MANAGER_TASK_INTERVAL_MS", "100"),
        ("STRATA_REPLICA_MOVE_MAX_BYTES_PER_SECOND", "10000"),
    ]);
    // One replica per partition, one partition per broker: whichever broker coordinates the
    // group, two of its partitions live elsewhere.
    let orders = unique_topic("console-c-orders");
    cluster.create_replicated_topic(
        &orders,
        3,
        TopicReplication::Variable(&[&[1], &[2], &[3]]),
        &[
            ("segment.bytes", "1048576"),
            ("remote.storage.enable", "true"),
        ],
    );
    let via = cluster.member(1);
    // 1.2 MB per partition: a closed segment each, offloaded to the object store.
    via.produce_to_each(&orders, 3, 1200, &"x".repeat(1000));
    let group = unique_group("console-c-group");
    let consumer: BaseConsumer = via.group_config(&group).create().unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..3 {
        tpl.add_partition_offset(&orders, p, Offset::Offset(100 * (p as i64 + 1)))
            .unwrap();
    }
    consumer.commit(&tpl, CommitMode::Sync).unwrap();
    let committed = via.committed(&group, &orders, &[0, 1, 2]).unwrap();
    let watermarks: BTreeMap<i32, i64> =
        (0..3).map(|p| (p, via.watermarks(&orders, p).1)).collect();
    let kafka_lag: BTreeMap<i32, i64> = (0..3)
        .map(|p| (p, watermarks[&p] - committed[&p].unwrap()))
        .collect();

    // A move in progress: a 300 kB partition copied to a second broker at 10 kB/s.
    let moving = unique_topic("console-c-moving");
    cluster.create_replicated_topic(&moving, 1, TopicReplication::Variable(&[&[1]]), &[]);
    cluster
        .member(1)
        .produce_to_each(&moving, 1, 300, &"m".repeat(1000));
    let mut conn = strata_tests::KafkaConn::connect(&cluster.member(2).kafka_addr).unwrap();
    let started =
        strata_tests::reassign::alter(&mut conn, &[(&moving, 0, Some(&[1, 2]))], true).unwrap();
    assert_eq!(started[0].code, 0, "{started:?}");

    // Every broker answers the same cluster-wide figures, equal to the Kafka APIs'.
    for (id, view) in wait_for_some("every broker's view of the group", WAIT, || {
        let views: Vec<(u64, Value)> = (1..=3)
            .map(|id| {
                let r = cluster
                    .member(id)
                    .admin_get(&format!("/v1/groups/{group}"))
                    .ok()?;
                (r.status == 200).then(|| (id, serde_json::from_str(&r.body).unwrap()))
            })
            .collect::<Option<_>>()?;
        let complete = views.iter().all(|(_, v): &(u64, Value)| {
            v["partitions"].as_array().is_some_and(|p| {
                p.len() == 3 && p.iter().all(|p| p["lag_seconds"].as_f64() > Some(0.0))
            })
        });
        complete.then_some(views)
    }) {
        assert_eq!(lag_by_partition(&view), kafka_lag, "broker {id}: {view}");
        assert_eq!(
            view["unanswered"],
            Value::Array(vec![]),
            "broker {id}: {view}"
        );
    }
    for (id, topic) in from_each(&cluster, &format!("/v1/topics/{orders}")) {
        for p in topic["partitions"].as_array().unwrap() {
            let i = p["partition"].as_i64().unwrap() as i32;
            assert_eq!(p["high_watermark"], watermarks[&i], "broker {id}: {p}");
            assert_eq!(p["log_start"], 0, "broker {id}: {p}");
            assert!(
                p["local_bytes"].as_u64() > Some(1_000_000),
                "broker {id}: {p}"
            );
        }
    }
    for (id, overview) in from_each(&cluster, "/v1/overview") {
        assert_eq!(
            overview["brokers"].as_array().unwrap().len(),
            3,
            "{overview}"
        );
        assert!(
            overview["groups"].as_u64() >= Some(1),
            "broker {id}: {overview}"
        );
        assert!(
            overview["moving"].as_u64() >= Some(1),
            "broker {id}: {overview}"
        );
        let page = get_json(cluster.member(id), &format!("/v1/groups?q={group}"));
        assert_eq!(
            page["items"][0]["lag_records"],
            kafka_lag.values().sum::<i64>(),
            "{page}"
        );
        let topics = get_json(cluster.member(id), &format!("/v1/topics?q={orders}"));
        assert!(
            topics["items"][0]["local_bytes"].as_u64() > Some(3_000_000),
            "{topics}"
        );
    }
    // The quorum as its leader sees it, and the move with how far its new replica has come.
    for (id, overview) in from_each(&cluster, "/v1/overview") {
        let nodes = overview["quorum"]["nodes"].as_array().unwrap();
        assert_eq!(nodes.len(), 3, "broker {id}: {overview}");
        assert!(nodes
            .iter()
            .all(|n| n["voter"] == true && n["behind"].as_i64() >= Some(0)));
        let m = (overview["moves"].as_array().unwrap().iter())
            .find(|m| m["topic"] == moving.as_str())
            .unwrap_or_else(|| panic!("broker {id}: no move of {moving}: {overview}"));
        assert_eq!(m["adding"], serde_json::json!([2]), "{m}");
        let hw = m["high_watermark"].as_i64().unwrap();
        assert_eq!(hw, 300, "{m}");
        let copied = m["log_ends"]["2"].as_i64().unwrap();
        assert!((-1..=hw).contains(&copied), "{m}");
    }
    let move_view = get_json(cluster.member(3), &format!("/v1/topics/{moving}"));
    assert_eq!(
        move_view["partitions"][0]["adding"],
        serde_json::json!([2]),
        "{move_view}"
    );
    // Offloaded segments: the same remote bytes from every broker (the quorum's).
    let remote = wait_for_some("segments offloaded", WAIT, || {
        let t = get_json(cluster.member(1), &format!("/v1/topics/{orders}"));
        let all = (t["partitions"].as_array().unwrap().iter())
            .all(|p| p["remote_bytes"].as_u64() > Some(0));
        all.then_some(t)
    });
    for (id, t) in from_each(&cluster, &format!("/v1/topics/{orders}")) {
        for (a, b) in remote["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .zip(t["partitions"].as_array().unwrap())
        {
            assert_eq!(a["remote_bytes"], b["remote_bytes"], "broker {id}");
        }
    }
    // A partition's records through any broker: read where it is hosted.
    for id in 1..=3 {
        let m = get_json(
            cluster.member(id),
            &format!("/v1/topics/{orders}/messages?partition=2&offset=7&limit=2"),
        );
        let offsets: Vec<i64> = (m["records"].as_array().unwrap().iter())
            .map(|r| r["offset"].as_i64().unwrap())
            .collect();
        assert_eq!(offsets, vec![7, 8], "broker {id}: {m}");
        let value = m["records"][0]["value"]["text"].as_str().unwrap();
        assert!(value.ends_with("-p2-7"), "broker {id}");
    }

    // The browser, on a broker that coordinates at most one of the group's partitions' hosts.
    // Broker 1's last hour, asked of broker 3: the produce requests it served are in it.
    let history = wait_for_some("a point of broker 1's history", WAIT, || {
        let h = get_json(cluster.member(3), "/v1/brokers/1/history");
        let produced: f64 = (h["points"].as_array().unwrap().iter())
            .map(|p| p["produce_per_s"].as_f64().unwrap())
            .sum();
        (produced > 0.0).then_some(h)
    });
    assert_eq!(history["broker"], 1, "{history}");
    assert_eq!(history["interval_s"], 10, "{history}");
    let shots = artifacts().join("cluster");
    let made = unique_topic("console-c-made");
    let asked = serde_json::json!({
        "create": made, "alter": made, "cancel": moving, "delete": made,
    });
    let out = Command::new(venv_python())
        .arg(repo_root().join("tests/console_browser.py"))
        .arg(format!("http://{}", cluster.member(3).admin_addr))
        .arg(&shots)
        .arg(&group)
        .arg(asked.to_string())
        .env("CHARTS_OF", "1")
        .output()
        .expect("run the browser");
    assert!(
        out.status.success(),
        "browser: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(seen["errors"], Value::Array(vec![]), "{seen}");
    assert_eq!(
        seen["overview"]["brokers"].as_array().unwrap().len(),
        3,
        "{seen}"
    );
    assert_eq!(
        seen["overview"]["quorum"].as_array().unwrap().len(),
        3,
        "{seen}"
    );
    let move_row = (seen["overview"]["moves"].as_array().unwrap().iter())
        .find(|r| r[0].as_str().unwrap().starts_with(moving.as_str()))
        .unwrap_or_else(|| panic!("no move shown: {seen}"));
    assert_eq!(move_row[2], "2", "{move_row}");
    assert!(
        move_row[4].as_str().unwrap().ends_with("/ 300"),
        "{move_row}"
    );
    let charts = seen["charts"].as_array().unwrap();
    assert_eq!(charts.len(), 6, "{seen}");
    assert!(
        charts[1].as_str().unwrap().starts_with("Requests"),
        "{seen}"
    );
    // The changes made through the console's forms: done, as the Kafka APIs then answer, and
    // audited as the caller's by the broker that served them.
    let said = &seen["changes"];
    for (change, word) in [
        ("create", "created"),
        ("alter", "altered"),
        ("cancel", "cancelled"),
        ("delete", "deleted"),
    ] {
        assert!(said[change].as_str().unwrap().contains(word), "{said}");
    }
    assert_eq!(said["delete_enabled_before"], false, "{said}");
    wait_for_some("the move cancelled", WAIT, || {
        (cluster.replicas(&moving) == vec![vec![1]]).then_some(())
    });
    wait_for_some("the made topic deleted", WAIT, || {
        topic_exists(cluster.member(1), &made)
            .is_none()
            .then_some(())
    });
    let events = audit_events(cluster.member(3));
    for event in [
        "topic_created",
        "config_altered",
        "reassignment",
        "topic_deleted",
    ] {
        let e = (events.iter())
            .find(|e| e["event"] == event)
            .unwrap_or_else(|| panic!("no {event} in {events:?}"));
        assert_eq!(e["principal"], "User:ANONYMOUS", "{e}");
    }
    for r in seen["group"].as_array().unwrap() {
        let p: i32 = r[1].as_str().unwrap().parse().unwrap();
        assert_eq!(r[3].as_str().unwrap(), kafka_lag[&p].to_string(), "{r}");
    }

    // A broker that stops answering is named, and its part is missing, never made up.
    cluster.node(3).kill9();
    let topic = get_json(cluster.member(1), &format!("/v1/topics/{orders}"));
    let p2 = &topic["partitions"][2];
    let named = (topic["unanswered"].as_array().unwrap().iter())
        .any(|u| u["broker"] == 3 && !u["error"].as_str().unwrap().is_empty());
    assert!(
        p2["high_watermark"].is_null() && (named || p2["leader"].is_null()),
        "{topic}"
    );
}

/// The audit log's events (one JSON object per line) in a broker's data directory.
fn audit_events(broker: &Broker) -> Vec<Value> {
    std::fs::read_to_string(broker.data_dir().join("audit.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn topic_exists(broker: &Broker, topic: &str) -> Option<usize> {
    let c: BaseConsumer = broker.consumer_config().create().unwrap();
    let md = c.fetch_metadata(None, Duration::from_secs(10)).unwrap();
    let t = md.topics().iter().find(|t| t.name() == topic)?;
    (t.error().is_none()).then(|| t.partitions().len())
}

/// The value of `name` in `topic`'s configs, as Kafka's DescribeConfigs answers it.
fn kafka_config(broker: &Broker, topic: &str, name: &str) -> (String, bool) {
    use rdkafka::admin::{AdminOptions, ResourceSpecifier};
    let admin = broker.admin();
    let got = strata_tests::block_on(
        admin.describe_configs([&ResourceSpecifier::Topic(topic)], &AdminOptions::new()),
    )
    .unwrap();
    let resource = got[0].as_ref().unwrap();
    let entry = resource.get(name).unwrap();
    (entry.value.clone().unwrap_or_default(), entry.is_default)
}

const ACTION: [(&str, &str); 2] = [
    ("X-Strata-Action", "1"),
    ("Content-Type", "application/json"),
];

#[test]
fn changes_are_refused_read_only_and_when_enabled_are_the_kafka_apis_audited() {
    // Read-only, the default: nothing changes, whatever is asked.
    let read_only = Broker::start(BrokerOpts::new());
    let topic = unique_topic("console-made");
    let create = format!(r#"{{"name":"{topic}","partitions":3}}"#);
    let r = strata_tests::http_request_with(
        &read_only.admin_addr,
        "POST",
        "/v1/topics",
        &ACTION,
        &create,
    )
    .unwrap();
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("read-only"), "{}", r.body);
    assert_eq!(topic_exists(&read_only, &topic), None);
    drop(read_only);

    let broker = Broker::start(
        BrokerOpts::new()
            .env("STRATA_CONSOLE_ACTIONS_ENABLE", "true")
            .env("STRATA_AUDIT_LOG", "audit.log"),
    );
    let send = |method: &str, path: &str, headers: &[(&str, &str)], body: &str| {
        strata_tests::http_request_with(&broker.admin_addr, method, path, headers, body).unwrap()
    };
    // What another site, a form or a careless script sends is refused before anything runs.
    let evil = [ACTION[0], ACTION[1], ("Origin", "http://evil.example")];
    let plain = [ACTION[0], ("Content-Type", "text/plain")];
    let huge = format!(r#"{{"name":"{}"}}"#, "x".repeat(70_000));
    for (headers, body, status) in [
        (&ACTION[1..], create.as_str(), 403),
        (&evil[..], create.as_str(), 403),
        (&plain[..], create.as_str(), 415),
        (&ACTION[..], huge.as_str(), 413),
        (&ACTION[..], "{not json", 400),
        (&ACTION[..], r#"{"name":"x","partitions":"three"}"#, 400),
        (&ACTION[..], r#"{"name":"bad name!"}"#, 400),
    ] {
        let r = send("POST", "/v1/topics", headers, body);
        assert_eq!(
            r.status,
            status,
            "{headers:?} {}: {}",
            &body[..body.len().min(60)],
            r.body
        );
        let answer: Value = serde_json::from_str(&r.body).unwrap();
        assert!(!answer["message"].as_str().unwrap().is_empty(), "{answer}");
    }
    assert_eq!(topic_exists(&broker, &topic), None);

    // Create, alter, delete: what the Kafka APIs then answer.
    let r = send("POST", "/v1/topics", &ACTION, &create);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(topic_exists(&broker, &topic), Some(3));
    let again = send("POST", "/v1/topics", &ACTION, &create);
    assert_eq!(again.status, 409, "{}", again.body);
    assert!(again.body.contains("TopicAlreadyExists"), "{}", again.body);
    let configs = format!("/v1/topics/{topic}/configs");
    let r = send(
        "POST",
        &configs,
        &ACTION,
        r#"{"set":{"retention.ms":"3600000"}}"#,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        kafka_config(&broker, &topic, "retention.ms"),
        ("3600000".into(), false)
    );
    let bad = send(
        "POST",
        &configs,
        &ACTION,
        r#"{"set":{"retention.ms":"soon"}}"#,
    );
    assert_eq!(bad.status, 400, "{}", bad.body);
    let r = send("POST", &configs, &ACTION, r#"{"delete":["retention.ms"]}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        kafka_config(&broker, &topic, "retention.ms").1,
        "back to the default"
    );
    let unknown = send(
        "DELETE",
        "/v1/topics/console-no-such-topic",
        &ACTION[..1],
        "",
    );
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    let no_move = send(
        "DELETE",
        &format!("/v1/topics/{topic}/partitions/0/move"),
        &ACTION[..1],
        "",
    );
    assert_eq!(no_move.status, 404, "{}", no_move.body);
    let r = send("DELETE", &format!("/v1/topics/{topic}"), &ACTION[..1], "");
    assert_eq!(r.status, 200, "{}", r.body);
    wait_for_some("the topic gone", WAIT, || {
        topic_exists(&broker, &topic).is_none().then_some(())
    });

    // Each change is in the audit log as the caller's, as from a Kafka client.
    let events = audit_events(&broker);
    for event in ["topic_created", "config_altered", "topic_deleted"] {
        let e = (events.iter())
            .find(|e| e["event"] == event)
            .unwrap_or_else(|| panic!("no {event} in {events:?}"));
        assert_eq!(e["principal"], "User:ANONYMOUS", "{e}");
        assert_eq!(e["client"], "127.0.0.1", "{e}");
    }
    assert_eq!(
        events
            .iter()
            .filter(|e| e["event"] == "topic_created")
            .count(),
        1
    );
}

#[test]
fn over_mtls_the_console_needs_a_certificate_and_changes_are_its_principals() {
    use strata_tests::certs::Certs;
    let dir = tempfile::tempdir().unwrap();
    let certs = Certs::generate(dir.path());
    let broker = Broker::start(
        BrokerOpts::new()
            .env("STRATA_ADMIN_SECURITY_PROTOCOL", "SSL")
            .env(
                "STRATA_SSL_CERTIFICATE_LOCATION",
                certs.server_cert.display(),
            )
            .env("STRATA_SSL_KEY_LOCATION", certs.server_key.display())
            .env("STRATA_SSL_CA_LOCATION", certs.ca_cert.display())
            .env("STRATA_SSL_CLIENT_AUTH", "required")
            .env(
                "STRATA_SSL_PRINCIPAL_MAPPING_RULES",
                "RULE:^CN=([^,]*),O=strata-tests$/$1/L,DEFAULT",
            )
            .env("STRATA_AUTHORIZER_ENABLE", "true")
            // The Kafka port stays PLAINTEXT for the test's own clients.
            .env("STRATA_SUPER_USERS", "User:operator;User:ANONYMOUS")
            .env("STRATA_CONSOLE_ACTIONS_ENABLE", "true")
            .env("STRATA_AUDIT_LOG", "audit.log"),
    );
    let topic = unique_topic("console-tls");
    broker.create_topic(&topic, 1, &[]).unwrap();
    broker.produce_to_each(&topic, 1, 3, "secret");
    let operator = certs.client("operator");
    let viewer = certs.client("viewer");
    let as_ = |who: Option<&(std::path::PathBuf, std::path::PathBuf)>,
               method: &str,
               path: &str,
               headers: &[(&str, &str)],
               body: &str| {
        let client = who.map(|(c, k)| (c.as_path(), k.as_path()));
        certs.https_request(&broker.admin_addr, client, method, path, headers, body)
    };

    // No certificate, no console: the handshake is refused before any request is read.
    assert!(
        as_(None, "GET", "/", &[], "").is_err(),
        "the console without a certificate"
    );
    // With one, the page and its policy; no records while the authorizer is on.
    let (status, page) = as_(Some(&viewer), "GET", "/", &[], "").unwrap();
    assert_eq!(status, 200);
    assert!(page.contains("<main id=\"app\""), "{page}");
    let (status, body) = as_(
        Some(&viewer),
        "GET",
        &format!("/v1/topics/{topic}/messages?partition=0&offset=0"),
        &[],
        "",
    )
    .unwrap();
    assert_eq!(status, 403, "{body}");
    assert!(!body.contains("secret-p0"), "{body}");
    // Granted READ on the topic, the same principal reads its records.
    broker.cli_ok(&[
        "acl",
        "add",
        "--allow-principal",
        "User:viewer",
        "--operation",
        "Read",
        "--topic",
        &topic,
    ]);
    let (status, body) = as_(
        Some(&viewer),
        "GET",
        &format!("/v1/topics/{topic}/messages?partition=0&offset=0"),
        &[],
        "",
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("secret-p0-0"), "{body}");

    // The security view: ACLs and users for a principal that may DESCRIBE the cluster only,
    // never a secret.
    broker.cli_ok(&[
        "user",
        "create",
        "tls-bob",
        "--password",
        "hunter2-never-shown",
    ]);
    let (status, body) = as_(Some(&viewer), "GET", "/v1/security", &[], "").unwrap();
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(v["acls"]["refused"].as_str().is_some(), "{v}");
    assert!(v["users"]["refused"].as_str().is_some(), "{v}");
    assert!(v["acls"]["items"].is_null(), "{v}");
    let (status, body) = as_(Some(&operator), "GET", "/v1/security", &[], "").unwrap();
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["authorizer"], true, "{v}");
    let acl = &v["acls"]["items"][0];
    assert_eq!(
        (&acl["principal"], &acl["operation"], &acl["resource_name"]),
        (
            &Value::from("User:viewer"),
            &Value::from("Read"),
            &Value::from(topic.as_str())
        ),
        "{v}"
    );
    assert_eq!(v["users"]["items"][0]["user"], "tls-bob", "{v}");
    for secret in ["hunter2", "salt", "stored_key", "server_key"] {
        assert!(!body.contains(secret), "{secret} in {body}");
    }
    // An abort is WriteTxnMarkers: CLUSTER_ACTION, which the viewer lacks; audited.
    let (status, body) = as_(
        Some(&viewer),
        "POST",
        &format!("/v1/topics/{topic}/partitions/0/abort-transaction"),
        &ACTION,
        r#"{"producer_id":1,"producer_epoch":0,"coordinator_epoch":0}"#,
    )
    .unwrap();
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("ClusterAuthorizationFailed"), "{body}");
    assert!(
        (audit_events(&broker).iter())
            .any(|e| e["event"] == "transaction_abort_refused" && e["principal"] == "User:viewer"),
        "the refused abort is audited"
    );

    // A change is its certificate's principal's: refused by the authorizer for one without
    // rights, done for the operator, and audited under each name.
    let made = unique_topic("console-tls-made");
    let create = format!(r#"{{"name":"{made}","partitions":1}}"#);
    let (status, body) = as_(Some(&viewer), "POST", "/v1/topics", &ACTION, &create).unwrap();
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("TopicAuthorizationFailed"), "{body}");
    assert_eq!(topic_exists(&broker, &made), None);
    let (status, body) = as_(Some(&operator), "POST", "/v1/topics", &ACTION, &create).unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(topic_exists(&broker, &made), Some(1));
    let events = audit_events(&broker);
    let denied = (events.iter())
        .find(|e| e["event"] == "authorization_denied" && e["principal"] == "User:viewer")
        .unwrap_or_else(|| panic!("no denial of viewer in {events:?}"));
    assert_eq!(denied["client"], "127.0.0.1", "{denied}");
    let created = (events.iter())
        .find(|e| e["event"] == "topic_created" && e["topic"] == made.as_str())
        .unwrap_or_else(|| panic!("no topic_created in {events:?}"));
    assert_eq!(created["principal"], "User:operator", "{created}");
}

/// A share consumer process (`tests/share_consumer.py`, confluent-kafka's ShareConsumer) that
/// stays a member until `stop` exists.
fn share_member(bootstrap: &str, group: &str, topic: &str, stop: &std::path::Path) -> Child {
    Command::new(venv_python())
        .arg(repo_root().join("tests/share_consumer.py"))
        .args(["--bootstrap", bootstrap, "--group", group, "--topic", topic])
        .args(["--idle", "120", "--seconds", "120", "--stop-file"])
        .arg(stop)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the share consumer (python with confluent-kafka)")
}

#[test]
fn a_clusters_transactions_members_and_security_are_shown_and_offsets_reset_and_aborts_made() {
    let mut cluster = console_cluster(&[]);
    let topic = unique_topic("console-x");
    cluster.create_replicated_topic(
        &topic,
        3,
        TopicReplication::Variable(&[&[1], &[2], &[3]]),
        &[],
    );
    let via = cluster.member(1);
    via.produce_to_each(&topic, 3, 10, "v");

    // A transaction left open over the three partitions.
    let txn_id = unique_group("console-txn");
    let producer: BaseProducer = via
        .producer_config()
        .set("transactional.id", &txn_id)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("transaction.timeout.ms", "300000")
        .create()
        .unwrap();
    producer.init_transactions(WAIT).unwrap();
    producer.begin_transaction().unwrap();
    for p in 0..3 {
        producer
            .send(BaseRecord::to(&topic).partition(p).key("k").payload("open"))
            .unwrap();
    }
    producer.flush(WAIT).unwrap();
    for id in 1..=3 {
        let t = wait_for_some("the open transaction on every side", WAIT, || {
            let t = get_json(cluster.member(id), "/v1/transactions");
            (t["open_total"] == 3 && t["coordinated_total"] == 1).then_some(t)
        });
        let c = &t["coordinated"][0];
        assert_eq!(c["transactional_id"], txn_id.as_str(), "broker {id}: {t}");
        assert_eq!(c["state"], "Ongoing", "{c}");
        assert_eq!(c["partitions"].as_array().unwrap().len(), 3, "{c}");
        for o in t["open"].as_array().unwrap() {
            assert_eq!(o["producer_id"], c["producer_id"], "{o}");
            assert_eq!(o["first_offset"], 10, "{o}");
            assert_eq!(o["last_stable"], 10, "{o}");
            assert_eq!(o["high_watermark"], 11, "{o}");
            assert_eq!(o["hanging"], false, "held by its coordinator: {o}");
        }
        assert_eq!(t["unanswered"], Value::Array(vec![]), "{t}");
    }

    // A classic group with a live member and committed offsets.
    let group = unique_group("console-x-group");
    let consumer: BaseConsumer = via.group_config(&group).create().unwrap();
    consumer.subscribe(&[&topic]).unwrap();
    wait_for_some("the member's assignment", WAIT, || {
        let _ = consumer.poll(Duration::from_millis(100));
        (consumer.assignment().unwrap().count() == 3).then_some(())
    });
    let mut tpl = TopicPartitionList::new();
    for p in 0..3 {
        tpl.add_partition_offset(&topic, p, Offset::Offset(5))
            .unwrap();
    }
    consumer.commit(&tpl, CommitMode::Sync).unwrap();
    // The member as Kafka's DescribeGroups answers (librdkafka's group list).
    let listed = consumer.fetch_group_list(Some(&group), WAIT).unwrap();
    let kafka_member = listed.groups()[0].members()[0].id().to_string();
    for id in 1..=3 {
        let g = wait_for_some("the group's member", WAIT, || {
            let g = get_json(cluster.member(id), &format!("/v1/groups/{group}"));
            (g["members"]["members"].as_array().map(Vec::len) == Some(1)).then_some(g)
        });
        let m = &g["members"];
        assert_eq!(m["kind"], "classic", "broker {id}: {g}");
        assert_eq!(m["state"], "Stable", "{m}");
        assert_eq!(m["members"][0]["member_id"], kafka_member.as_str(), "{m}");
        let assigned = &m["members"][0]["assignment"][0];
        assert_eq!(assigned["topic"], topic.as_str(), "{m}");
        assert_eq!(assigned["partitions"], serde_json::json!([0, 1, 2]), "{m}");
    }

    // A share group with a member.
    let share_group = unique_group("console-x-share");
    let stop = std::env::temp_dir().join(format!("{share_group}.stop"));
    let mut member = share_member(&via.kafka_addr, &share_group, &topic, &stop);
    let share = wait_for_some("the share group's member and partitions", WAIT, || {
        let g = cluster
            .member(2)
            .admin_get(&format!("/v1/groups/{share_group}"))
            .ok()?;
        let g: Value = serde_json::from_str(&g.body).ok()?;
        let members = g["members"]["members"].as_array().map(Vec::len);
        (members == Some(1) && g["share_partitions"].as_array()?.len() == 3).then_some(g)
    });
    assert_eq!(share["members"]["kind"], "share", "{share}");
    assert_eq!(share["dead_letter_topic"], Value::Null, "{share}");

    // A SCRAM user and a quota, shown without a secret.
    via.cli_ok(&[
        "user",
        "create",
        "console-alice",
        "--password",
        "not-shown-anywhere",
    ]);
    via.cli_ok(&[
        "quota",
        "alter",
        "--user",
        "console-alice",
        "--add",
        "producer_byte_rate=1048576",
    ]);
    let security = wait_for_some("the user on every broker", WAIT, || {
        let s = get_json(cluster.member(3), "/v1/security?q=console-alice");
        (s["users"]["total"] == 1 && s["quotas"]["total"] == 1).then_some(s)
    });
    assert_eq!(security["authorizer"], false, "{security}");
    assert_eq!(security["acls"]["total"], 0, "{security}");
    let creds = &security["users"]["items"][0]["credentials"][0];
    assert_eq!(creds["mechanism"], "SCRAM-SHA-256", "{security}");
    assert!(creds["iterations"].as_u64() >= Some(4096), "{security}");
    assert_eq!(
        security["quotas"]["items"][0]["values"]["producer_byte_rate"], 1048576.0,
        "{security}"
    );
    let text = security.to_string();
    for secret in ["salt", "stored_key", "server_key", "not-shown"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }

    // The browser, on broker 2: the pages, then an abort through the transactions page.
    let shots = artifacts().join("pages");
    let out = Command::new(venv_python())
        .arg(repo_root().join("tests/console_pages.py"))
        .arg(format!("http://{}", cluster.member(2).admin_addr))
        .arg(&shots)
        .arg(&group)
        .arg(&share_group)
        .arg("abort")
        .output()
        .expect("run the browser");
    assert!(
        out.status.success(),
        "browser: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(seen["errors"], Value::Array(vec![]), "{seen}");
    assert!(seen["transactions_url"]
        .as_str()
        .unwrap()
        .ends_with("/transactions"));
    assert_eq!(seen["transactions"][0][0], txn_id.as_str(), "{seen}");
    assert_eq!(seen["open"].as_array().unwrap().len(), 3, "{seen}");
    assert!(
        seen["aborted"].as_str().unwrap().contains("aborted"),
        "{seen}"
    );
    assert_eq!(seen["open_after"].as_array().unwrap().len(), 2, "{seen}");
    assert!(
        seen["authorizer"].as_str().unwrap().contains("off"),
        "{seen}"
    );
    assert!(
        (seen["users"].as_array().unwrap().iter()).any(|u| u[0] == "console-alice"),
        "{seen}"
    );
    assert!(!seen["security_text"]
        .as_str()
        .unwrap()
        .contains("not-shown"));
    assert_eq!(seen["members"][0][3], format!("{topic}: 0, 1, 2"), "{seen}");
    assert_eq!(seen["reset_form"], 1, "{seen}");
    assert_eq!(
        seen["share_partitions"].as_array().unwrap().len(),
        3,
        "{seen}"
    );
    assert!(
        seen["share_heading"]
            .as_str()
            .unwrap()
            .contains("share group"),
        "{seen}"
    );
    // The aborted partition's records are readable by read_committed consumers now: its last
    // stable offset passed the transaction, and the abort is the caller's in the audit log.
    let aborted = wait_for_some("an aborted partition", WAIT, || {
        (0..3).find(|p| {
            let m = get_json(
                cluster.member(1),
                &format!("/v1/topics/{topic}/messages?partition={p}&offset=0"),
            );
            m["last_stable_offset"].as_i64() > Some(10)
        })
    });
    let events = audit_events(cluster.member(2));
    let e = (events.iter())
        .find(|e| e["event"] == "transaction_aborted")
        .unwrap_or_else(|| panic!("no transaction_aborted in {events:?}"));
    assert_eq!(e["partition"], aborted, "{e}");
    assert_eq!(e["principal"], "User:ANONYMOUS", "{e}");

    // An abort of what is not open, or of nothing, is refused in words.
    let send = |method: &str, path: &str, body: &str| {
        let r = strata_tests::http_request_with(
            &cluster.member(3).admin_addr,
            method,
            path,
            &ACTION,
            body,
        )
        .unwrap();
        let v: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
        (r.status, v)
    };
    let abort = |p: i32| format!("/v1/topics/{topic}/partitions/{p}/abort-transaction");
    let body = r#"{"producer_id":999999,"producer_epoch":0,"coordinator_epoch":0}"#;
    for (path, body, status) in [
        (abort(aborted as i32), body, 409),
        (abort(7), body, 404),
        (abort(0), "{}", 400),
        (
            format!("/v1/topics/no-such-{topic}/partitions/0/abort-transaction"),
            body,
            404,
        ),
    ] {
        let (got, answer) = send("POST", &path, body);
        assert_eq!(got, status, "{path} {body}: {answer}");
        assert!(!answer["message"].as_str().unwrap().is_empty(), "{answer}");
    }
    producer.abort_transaction(WAIT).ok();

    // Offsets are reset only while the group is empty; then to where asked, as Kafka sees it.
    let reset = |body: &str| send("POST", &format!("/v1/groups/{group}/offsets"), body);
    let (status, answer) = reset(&format!(r#"{{"topic":"{topic}","to":"earliest"}}"#));
    assert_eq!(status, 409, "{answer}");
    assert!(answer["message"]
        .as_str()
        .unwrap()
        .contains("active members"));
    drop(consumer);
    let committed = || via.committed(&group, &topic, &[0, 1, 2]).unwrap();
    wait_for_some("the group empty", WAIT, || {
        let (status, answer) = reset(&format!(r#"{{"topic":"{topic}","to":"earliest"}}"#));
        (status == 200).then_some(answer)
    });
    assert!(
        committed().values().all(|o| *o == Some(0)),
        "{:?}",
        committed()
    );
    let (status, answer) = reset(&format!(
        r#"{{"topic":"{topic}","partitions":[1],"to":"offset","value":7}}"#
    ));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(committed()[&1], Some(7));
    let (status, answer) = reset(&format!(
        r#"{{"topic":"{topic}","to":"latest","dry_run":true}}"#
    ));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(committed()[&0], Some(0), "a dry run commits nothing");
    // Past the log: brought to its end. A time after every record: the end too.
    let (status, _) = reset(&format!(
        r#"{{"topic":"{topic}","partitions":[2],"to":"offset","value":1000000}}"#
    ));
    assert_eq!(status, 200);
    let far = 4_000_000_000_000i64;
    let (status, _) = reset(&format!(
        r#"{{"topic":"{topic}","partitions":[0],"to":"timestamp","value":{far}}}"#
    ));
    assert_eq!(status, 200);
    let ends: BTreeMap<i32, i64> = (0..3).map(|p| (p, via.watermarks(&topic, p).1)).collect();
    assert_eq!(committed()[&2], Some(ends[&2]));
    assert_eq!(committed()[&0], Some(ends[&0]));
    for (body, status) in [
        (format!(r#"{{"topic":"{topic}","to":"soon"}}"#), 400),
        (format!(r#"{{"topic":"{topic}","to":"offset"}}"#), 400),
        (
            format!(r#"{{"topic":"{topic}","partitions":[9],"to":"latest"}}"#),
            404,
        ),
        (
            r#"{"topic":"no-such-topic-here","to":"latest"}"#.to_string(),
            404,
        ),
    ] {
        let (got, answer) = reset(&body);
        assert_eq!(got, status, "{body}: {answer}");
    }
    let events = audit_events(cluster.member(3));
    let e = (events.iter())
        .find(|e| e["event"] == "offsets_reset")
        .unwrap_or_else(|| panic!("no offsets_reset in {events:?}"));
    assert_eq!(e["group"], group.as_str(), "{e}");

    // A share group's start offsets: refused while its member runs, then reset.
    let share_reset = |body: &str| send("POST", &format!("/v1/groups/{share_group}/offsets"), body);
    let earliest = format!(r#"{{"topic":"{topic}","to":"earliest"}}"#);
    let (status, answer) = share_reset(&earliest);
    assert_eq!(status, 409, "{answer}");
    std::fs::write(&stop, b"").unwrap();
    let _ = member.wait();
    let _ = std::fs::remove_file(&stop);
    wait_for_some("the share group empty", WAIT, || {
        let (status, answer) = share_reset(&earliest);
        (status == 200).then_some(answer)
    });
    wait_for_some("the share partitions start at 0", WAIT, || {
        let g = get_json(cluster.member(1), &format!("/v1/groups/{share_group}"));
        let starts: Vec<i64> = (g["share_partitions"].as_array()?.iter())
            .map(|p| p["start"].as_i64().unwrap())
            .collect();
        (starts.len() == 3 && starts.iter().all(|s| *s == 0)).then_some(())
    });
}
