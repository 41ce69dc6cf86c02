//! Iceberg topics end to end, read by an independent reader: pyiceberg (with pyarrow, from the
//! venv `scripts/test.sh` installs; `tests/iceberg_reader.py`) loads the table through the
//! broker's REST catalog and by metadata location straight from a real S3 server (moto), and
//! its rows must equal what a read_committed librdkafka consumer reads: same count, keys,
//! values, headers and timestamps, per partition in offset order. Transactions (an abort among
//! them), tombstones, null keys and null header values; a kill -9 of the broker while rounds
//! run; a topic whose history is only in the remote tier; bad topic configs.

use std::process::Command;
use std::time::{Duration, Instant};

use rdkafka::admin::TopicReplication;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;
use serde_json::Value;
use strata_tests::cluster::{CLUSTER_TIMEOUT, FAST};
use strata_tests::outage::OutageProxy;
use strata_tests::s3::{MotoServer, REGION};
use strata_tests::{
    http_get, read_to_end, repo_root, unique_topic, venv_python, wait_for, Broker, BrokerOpts,
    Cluster, ConsumedRecord,
};

const TIMEOUT: Duration = Duration::from_secs(90);

/// A key_value table translated every half second.
const TABLE: &[(&str, &str)] = &[
    ("iceberg.mode", "key_value"),
    ("iceberg.target.lag.ms", "1000"),
];

fn s3_broker(moto: &MotoServer, bucket: &str) -> BrokerOpts {
    moto.create_bucket(bucket);
    BrokerOpts::new()
        .env("STRATA_OBJECT_STORE", format!("s3://{bucket}/cluster"))
        .env("STRATA_OBJECT_STORE_ENDPOINT", &moto.endpoint)
        .env("STRATA_OBJECT_STORE_REGION", REGION)
        .env("STRATA_OBJECT_STORE_ALLOW_HTTP", true)
        .env("STRATA_OBJECT_STORE_ACCESS_KEY_ID", "test")
        .env("STRATA_OBJECT_STORE_SECRET_ACCESS_KEY", "test")
}

/// pyiceberg's S3 credentials (the catalog hands out the endpoint, never keys).
const S3_KEYS: [&str; 2] = ["s3.access-key-id=test", "s3.secret-access-key=test"];

/// The rows of a table as `tests/iceberg_reader.py` prints them, and the current snapshot's
/// summary properties.
fn read_table(args: &[&str]) -> (Value, Vec<Value>) {
    try_read_table(args).unwrap_or_else(|why| panic!("{why}"))
}

/// [`read_table`], or why pyiceberg could not read it (a table being rewritten is not there
/// for a moment).
fn try_read_table(args: &[&str]) -> Result<(Value, Vec<Value>), String> {
    let out = Command::new(venv_python())
        .arg(repo_root().join("tests/iceberg_reader.py"))
        .arg("--summary")
        .args(args)
        .output()
        .expect("run pyiceberg");
    if !out.status.success() {
        return Err(format!(
            "pyiceberg {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap());
    let summary = lines.next().expect("summary line")["summary"].clone();
    Ok((summary, lines.collect()))
}

fn rest_rows(broker: &Broker, topic: &str) -> (Value, Vec<Value>) {
    try_rest_rows(broker, topic).unwrap_or_else(|why| panic!("{why}"))
}

fn try_rest_rows(broker: &Broker, topic: &str) -> Result<(Value, Vec<Value>), String> {
    let uri = format!("http://{}/iceberg", broker.admin_addr);
    let mut args = vec!["rest", uri.as_str(), topic];
    args.extend(S3_KEYS);
    try_read_table(&args)
}

/// The table as the REST catalog's load-table answer names it: (metadata location, metadata).
fn load_table(broker: &Broker, topic: &str) -> Value {
    let path = format!("/iceberg/v1/namespaces/strata/tables/{topic}");
    let resp = http_get(&broker.admin_addr, &path).expect("GET table");
    assert_eq!(resp.status, 200, "{path}: {}", resp.body);
    serde_json::from_str(&resp.body).unwrap()
}

fn hex(b: &Option<Vec<u8>>) -> Value {
    match b {
        None => Value::Null,
        Some(b) => Value::String(b.iter().map(|x| format!("{x:02x}")).collect()),
    }
}

/// A consumed record in the reader's row shape (the columns a consumer can see).
fn as_row(r: &ConsumedRecord) -> Value {
    let headers: Vec<Value> = (r.headers.iter())
        .map(|(k, v)| serde_json::json!([k, hex(v)]))
        .collect();
    serde_json::json!({
        "partition": r.partition,
        "offset": r.offset,
        "timestamp_ms": r.timestamp,
        "key": hex(&r.key),
        "value": hex(&r.value),
        "headers": headers,
    })
}

/// A table row cut down to [`as_row`]'s columns.
fn seen(row: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for k in [
        "partition",
        "offset",
        "timestamp_ms",
        "key",
        "value",
        "headers",
    ] {
        out.insert(k.into(), row[k].clone());
    }
    Value::Object(out)
}

/// Everything a read_committed consumer reads of `topic`'s partitions, up to their ends, by
/// partition and offset.
fn read_committed(broker: &Broker, topic: &str, partitions: i32) -> Vec<ConsumedRecord> {
    let cfg = broker.consumer_config();
    let mut out = read_to_end(&cfg, topic, partitions, "read_committed", TIMEOUT);
    out.sort_by_key(|r| (r.partition, r.offset));
    out
}

/// Waits until the table holds `expected` rows, then checks they are exactly the consumer's.
fn assert_table_equals(broker: &Broker, topic: &str, expected: &[ConsumedRecord]) -> Vec<Value> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        // A table being written again from the start is missing until its first round.
        let rows = match try_rest_rows(broker, topic) {
            Ok((_, rows)) => Some(rows),
            Err(why) if Instant::now() > deadline => panic!("{why}"),
            Err(_) => None,
        };
        let done = |rows: &Vec<Value>| rows.len() >= expected.len() || Instant::now() > deadline;
        if let Some(rows) = rows.filter(done) {
            let got: Vec<Value> = rows.iter().map(seen).collect();
            let want: Vec<Value> = expected.iter().map(as_row).collect();
            if got != want {
                let first = (got.iter().zip(&want)).position(|(g, w)| g != w);
                panic!(
                    "{topic}: table has {} rows, a read_committed consumer {}; first difference at {first:?}: {:?} vs {:?}",
                    got.len(),
                    want.len(),
                    first.map(|i| &got[i]),
                    first.map(|i| &want[i]),
                );
            }
            return rows;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn produce(
    p: &BaseProducer,
    topic: &str,
    partition: i32,
    key: Option<&str>,
    value: Option<&str>,
    headers: OwnedHeaders,
) {
    let mut record = BaseRecord::<str, str>::to(topic)
        .partition(partition)
        .headers(headers);
    if let Some(k) = key {
        record = record.key(k);
    }
    if let Some(v) = value {
        record = record.payload(v);
    }
    p.send(record).map_err(|(e, _)| e).expect("send");
}

fn txn_producer(broker: &Broker, id: &str) -> BaseProducer {
    let mut cfg: ClientConfig = broker.producer_config();
    cfg.set("transactional.id", id)
        .set("enable.idempotence", "true")
        .set("max.in.flight.requests.per.connection", "5");
    let p: BaseProducer = cfg.create().unwrap();
    p.init_transactions(TIMEOUT).unwrap();
    p
}

#[test]
fn a_key_value_table_holds_exactly_what_a_read_committed_consumer_reads() {
    let moto = MotoServer::start();
    let broker = Broker::start(s3_broker(&moto, "ice-kv"));
    let topic = unique_topic("ice-kv");
    broker.create_topic(&topic, 3, TABLE).unwrap();
    let plain: BaseProducer = broker.producer_config().create().unwrap();
    for i in 0..300 {
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "n",
                value: Some(&format!("{i}")),
            })
            .insert(Header::<&str> {
                key: "none",
                value: None,
            });
        let key = (i % 7 != 0).then(|| format!("k{i}"));
        // Every 11th a tombstone: a null value stays null in the table.
        let value = (i % 11 != 0).then(|| format!("v{i}"));
        produce(
            &plain,
            &topic,
            i % 3,
            key.as_deref(),
            value.as_deref(),
            headers,
        );
    }
    plain.flush(TIMEOUT).unwrap();
    let txn = txn_producer(&broker, &unique_topic("ice-txn"));
    for (commit, tag) in [(true, "kept"), (false, "aborted"), (true, "kept-again")] {
        txn.begin_transaction().unwrap();
        for i in 0..50 {
            let v = format!("{tag}-{i}");
            produce(&txn, &topic, i % 3, Some(&v), Some(&v), OwnedHeaders::new());
        }
        // Delivered first: librdkafka's abort does not wait for them.
        txn.flush(TIMEOUT).unwrap();
        if commit {
            txn.commit_transaction(TIMEOUT).unwrap();
        } else {
            txn.abort_transaction(TIMEOUT).unwrap();
        }
    }
    let expected = read_committed(&broker, &topic, 3);
    assert_eq!(expected.len(), 400);
    let rows = assert_table_equals(&broker, &topic, &expected);
    assert!(
        !rows.iter().any(|r| r["value"]
            .as_str()
            .is_some_and(|v| v.starts_with("61626f72"))),
        "an aborted record is in the table"
    );
    // Transactional rows carry their producer; plain ones (no idempotence) none.
    let txn_rows = rows.iter().filter(|r| !r["producer_id"].is_null()).count();
    assert_eq!(txn_rows, 100);
    assert!(rows.iter().all(|r| r["timestamp_type"] == 0));

    // The same rows by metadata location, from the bucket alone.
    let table = load_table(&broker, &topic);
    let location = table["metadata-location"].as_str().unwrap().to_string();
    assert!(
        location.starts_with("s3://ice-kv/cluster/iceberg/strata/"),
        "{location}"
    );
    let endpoint = format!("s3.endpoint={}", moto.endpoint);
    let region = format!("s3.region={REGION}");
    let mut args = vec![
        "static",
        location.as_str(),
        endpoint.as_str(),
        region.as_str(),
    ];
    args.extend(S3_KEYS);
    let (summary, by_location) = read_table(&args);
    assert_eq!(by_location, rows);
    // The snapshot names the offsets its files hold.
    let ranges = summary["strata.ranges"].as_str().unwrap_or_default();
    assert!(!ranges.is_empty(), "{summary}");

    // More records later land in a later snapshot; the table never repeats one.
    for i in 0..30 {
        produce(
            &plain,
            &topic,
            i % 3,
            Some("late"),
            Some(&format!("late-{i}")),
            OwnedHeaders::new(),
        );
    }
    plain.flush(TIMEOUT).unwrap();
    let expected = read_committed(&broker, &topic, 3);
    assert_table_equals(&broker, &topic, &expected);
}

#[test]
fn invalid_iceberg_configs_are_refused() {
    let broker = Broker::start(BrokerOpts::new());
    for (key, value) in [
        ("iceberg.mode", "parquet"),
        ("iceberg.target.lag.ms", "10"),
        ("iceberg.value.schema", "{not json"),
        // A value field would shadow a Kafka column; a v3-only type.
        (
            "iceberg.value.schema",
            r#"{"type":"struct","fields":[{"id":1,"name":"offset","required":false,"type":"long"}]}"#,
        ),
        (
            "iceberg.value.schema",
            r#"{"type":"struct","fields":[{"id":1,"name":"t","required":false,"type":"timestamp_ns"}]}"#,
        ),
        (
            "iceberg.value.schema",
            r#"{"type":"struct","schema-id":0,"fields":[]}"#,
        ),
    ] {
        let err = broker
            .create_topic(&unique_topic("ice-bad"), 1, &[(key, value)])
            .unwrap_err();
        assert!(
            format!("{err:#}").contains("InvalidConfig"),
            "{key}={value}: {err:#}"
        );
    }
    // value_json without a schema to read values with.
    let err = broker
        .create_topic(
            &unique_topic("ice-bad"),
            1,
            &[("iceberg.mode", "value_json")],
        )
        .unwrap_err();
    assert!(format!("{err:#}").contains("InvalidConfig"), "{err:#}");
    // An unknown table through the catalog: the spec's error model.
    let resp = http_get(
        &broker.admin_addr,
        "/iceberg/v1/namespaces/strata/tables/nope",
    )
    .unwrap();
    assert_eq!(resp.status, 404, "{}", resp.body);
    assert!(resp.body.contains("NoSuchTableException"), "{}", resp.body);
    let resp = http_get(&broker.admin_addr, "/iceberg/v1/namespaces/other/tables").unwrap();
    assert_eq!(resp.status, 404, "{}", resp.body);
}

#[test]
fn kill_9_while_rounds_run_neither_duplicates_nor_skips_an_offset() {
    let moto = MotoServer::start();
    let mut broker = Broker::start(s3_broker(&moto, "ice-kill"));
    let topic = unique_topic("ice-kill");
    broker.create_topic(&topic, 2, TABLE).unwrap();
    let mut rng = strata_tests::Rng::new(7);
    for wave in 0..4 {
        let p: BaseProducer = broker.producer_config().create().unwrap();
        for i in 0..3000 {
            let v = format!("w{wave}-{i}-{}", String::from_utf8_lossy(&rng.text(200)));
            produce(
                &p,
                &topic,
                i % 2,
                Some(&v[..8]),
                Some(&v),
                OwnedHeaders::new(),
            );
            if i % 1000 == 999 {
                p.flush(TIMEOUT).unwrap();
            }
        }
        p.flush(TIMEOUT).unwrap();
        drop(p);
        // Rounds run every half second: somewhere in a read, a file upload or a commit.
        std::thread::sleep(Duration::from_millis(200 + rng.below(900)));
        broker.kill9();
        broker.restart();
    }
    let expected = read_committed(&broker, &topic, 2);
    assert_eq!(expected.len(), 12_000);
    assert_table_equals(&broker, &topic, &expected);
}

#[test]
fn history_only_in_the_remote_tier_is_translated_when_a_topic_becomes_a_table() {
    let moto = MotoServer::start();
    let broker = Broker::start(s3_broker(&moto, "ice-backfill").quick_tiering());
    let topic = unique_topic("ice-backfill");
    super::tiered::tiered_topic(&broker, &topic, &[]);
    let p: BaseProducer = broker.producer_config().create().unwrap();
    let mut rng = strata_tests::Rng::new(11);
    for i in 0..4000 {
        let v = format!("{i}:{}", String::from_utf8_lossy(&rng.text(1000)));
        produce(
            &p,
            &topic,
            0,
            Some(&format!("k{i}")),
            Some(&v),
            OwnedHeaders::new(),
        );
    }
    p.flush(TIMEOUT).unwrap();
    super::tiered::wait_offloaded(&broker, &topic, 3.0);
    let parts = http_get(&broker.admin_addr, &format!("/v1/partitions?topic={topic}")).unwrap();
    let parts: Value = serde_json::from_str(&parts.body).unwrap();
    let local_start = parts[0]["local_start"].as_i64().unwrap();
    assert!(
        local_start > 1000,
        "the history is not remote only: {parts}"
    );
    broker.cli_ok(&[
        "topic",
        "alter",
        &topic,
        "-c",
        "iceberg.mode=key_value",
        "-c",
        "iceberg.target.lag.ms=1000",
    ]);
    let expected = read_committed(&broker, &topic, 1);
    assert_eq!(expected.len(), 4000);
    assert_table_equals(&broker, &topic, &expected);
}

/// The table as a REST catalog on a cluster member and a read_committed consumer agree.
fn assert_cluster_table(
    cluster: &mut Cluster,
    via: u64,
    topic: &str,
    partitions: i32,
    want: usize,
) {
    let expected = read_committed(cluster.member(via), topic, partitions);
    assert_eq!(expected.len(), want);
    assert_table_equals(cluster.member(via), topic, &expected);
}

#[test]
fn three_brokers_commit_one_table_and_a_new_leader_continues_it_exactly() {
    let moto = MotoServer::start();
    moto.create_bucket("ice-rf3");
    let store = [
        ("STRATA_OBJECT_STORE", "s3://ice-rf3/cluster".to_string()),
        ("STRATA_OBJECT_STORE_ENDPOINT", moto.endpoint.clone()),
        ("STRATA_OBJECT_STORE_REGION", REGION.to_string()),
        ("STRATA_OBJECT_STORE_ALLOW_HTTP", "true".to_string()),
        ("STRATA_OBJECT_STORE_ACCESS_KEY_ID", "test".to_string()),
        ("STRATA_OBJECT_STORE_SECRET_ACCESS_KEY", "test".to_string()),
    ];
    let store: Vec<(&str, &str)> = store.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let env = [FAST, &store[..]].concat();
    let mut cluster = Cluster::start(3, 3, &env);
    cluster.wait_controller();
    let topic = unique_topic("ice-rf3");
    // Each broker leads one partition: three translators commit to one table at once.
    cluster.create_replicated_topic(
        &topic,
        3,
        TopicReplication::Variable(&[&[1, 2, 3], &[2, 3, 1], &[3, 1, 2]]),
        &[
            ("min.insync.replicas", "2"),
            ("iceberg.mode", "key_value"),
            ("iceberg.target.lag.ms", "1000"),
        ],
    );
    plain_wave(&cluster.producer_config(), &topic, 3, "first", 900);
    assert_cluster_table(&mut cluster, 2, &topic, 3, 900);

    // Partition 0's leader dies mid-stream; broker 2 takes it over and continues its table
    // offsets where the quorum says they end.
    cluster.node(1).kill9();
    wait_for("a new leader of partition 0", CLUSTER_TIMEOUT, || {
        cluster.leaders(&topic)[0].is_some_and(|l| l != 1)
    });
    plain_wave(&cluster.producer_config(), &topic, 3, "second", 900);
    assert_cluster_table(&mut cluster, 3, &topic, 3, 1800);

    cluster.node(1).restart();
    cluster.wait_topic_healthy(&topic);
    plain_wave(&cluster.producer_config(), &topic, 3, "third", 900);
    assert_cluster_table(&mut cluster, 1, &topic, 3, 2700);
}

/// `strata iceberg ARGS` against the broker's admin port: stdout, or stderr on failure.
fn iceberg_cli(broker: &Broker, args: &[&str]) -> Result<String, String> {
    let out = Command::new(strata_tests::strata_bin())
        .arg("iceberg")
        .args(args)
        .args(["--admin-addr", &broker.admin_addr])
        .output()
        .expect("run strata iceberg");
    match out.status.success() {
        true => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}

/// `n` records `tag-i` (key and value), round robin over `partitions`, flushed.
fn plain_wave(cfg: &ClientConfig, topic: &str, partitions: i32, tag: &str, n: i32) {
    let p: BaseProducer = cfg.create().unwrap();
    for i in 0..n {
        let v = format!("{tag}-{i}");
        produce(
            &p,
            topic,
            i % partitions,
            Some(&v),
            Some(&v),
            OwnedHeaders::new(),
        );
    }
    p.flush(TIMEOUT).unwrap();
}

#[test]
fn operators_see_the_table_and_a_table_deleted_by_hand_is_reported_then_rewritten() {
    let moto = MotoServer::start();
    let broker = Broker::start(s3_broker(&moto, "ice-ops"));
    let topic = unique_topic("ice-ops");
    broker.create_topic(&topic, 2, TABLE).unwrap();
    plain_wave(&broker.producer_config(), &topic, 2, "a", 500);
    let expected = read_committed(&broker, &topic, 2);
    assert_table_equals(&broker, &topic, &expected);
    let list = iceberg_cli(&broker, &["list"]).unwrap();
    assert!(
        list.contains(&format!("topic={topic} mode=key_value table=yes"))
            && list.contains("records=500"),
        "{list}"
    );
    let describe = iceberg_cli(&broker, &["describe", &topic]).unwrap();
    assert!(
        describe.contains("partition=0 table_offset=250 last_stable_offset=250 lag_s=0"),
        "{describe}"
    );
    let topic_describe = broker.cli_ok(&[
        "topic",
        "describe",
        &topic,
        "--admin-addr",
        &broker.admin_addr,
    ]);
    assert!(
        topic_describe.contains(&format!("iceberg topic={topic}")),
        "{topic_describe}"
    );

    // The table's objects deleted behind the broker's back: rounds fail and say so.
    let store = strata_objstore::Store::open(&moto.store_config("ice-ops", "cluster")).unwrap();
    strata_tests::block_on(async {
        for o in store.list("iceberg/").await.unwrap() {
            store.delete(&o.key).await.unwrap();
        }
    });
    plain_wave(&broker.producer_config(), &topic, 2, "b", 100);
    wait_for("the damaged table reported", TIMEOUT, || {
        let out = iceberg_cli(&broker, &["describe", &topic]).unwrap();
        out.contains("error=")
            && out.contains("strata iceberg rewrite")
            && broker.metric("strata_iceberg_failed_rounds_total") > 0.0
    });
    let out = iceberg_cli(&broker, &["rewrite", &topic]).unwrap();
    assert!(out.contains("starts over"), "{out}");
    // Written again from the whole history, exactly once.
    let expected = read_committed(&broker, &topic, 2);
    assert_eq!(expected.len(), 600);
    assert_table_equals(&broker, &topic, &expected);
    // A rewrite of a topic that is no table is refused in words.
    let other = unique_topic("ice-plain");
    broker.create_topic(&other, 1, &[]).unwrap();
    let refused = iceberg_cli(&broker, &["rewrite", &other]).unwrap_err();
    assert!(refused.contains("no iceberg.mode"), "{refused}");
}

#[test]
fn an_object_store_outage_delays_the_table_and_duplicates_nothing() {
    let moto = MotoServer::start();
    moto.create_bucket("ice-outage");
    let proxy = OutageProxy::start(moto.endpoint.trim_start_matches("http://"));
    let broker = Broker::start(
        BrokerOpts::new()
            .env("STRATA_OBJECT_STORE", "s3://ice-outage/cluster")
            .env("STRATA_OBJECT_STORE_ENDPOINT", &proxy.endpoint)
            .env("STRATA_OBJECT_STORE_REGION", REGION)
            .env("STRATA_OBJECT_STORE_ALLOW_HTTP", true)
            .env("STRATA_OBJECT_STORE_ACCESS_KEY_ID", "test")
            .env("STRATA_OBJECT_STORE_SECRET_ACCESS_KEY", "test")
            .env("STRATA_OBJECT_STORE_MAX_RETRIES", 1)
            .env("STRATA_OBJECT_STORE_REQUEST_TIMEOUT_MS", 1000)
            .env("STRATA_OBJECT_STORE_RETRY_TIMEOUT_MS", 2000),
    );
    let topic = unique_topic("ice-outage");
    broker.create_topic(&topic, 2, TABLE).unwrap();
    plain_wave(&broker.producer_config(), &topic, 2, "before", 400);
    assert_table_equals(&broker, &topic, &read_committed(&broker, &topic, 2));
    proxy.down();
    plain_wave(&broker.producer_config(), &topic, 2, "during", 400);
    wait_for("rounds failing on the store", TIMEOUT, || {
        broker.metric("strata_iceberg_failed_rounds_total") >= 2.0
    });
    proxy.up();
    let expected = read_committed(&broker, &topic, 2);
    assert_eq!(expected.len(), 800);
    assert_table_equals(&broker, &topic, &expected);
}

#[test]
fn old_snapshots_are_expired_and_the_table_still_reads_whole() {
    let moto = MotoServer::start();
    let broker = Broker::start(
        s3_broker(&moto, "ice-expire").env("STRATA_ICEBERG_SNAPSHOT_MAX_AGE_MS", 2000),
    );
    let topic = unique_topic("ice-expire");
    broker.create_topic(&topic, 1, TABLE).unwrap();
    let snapshots = || {
        iceberg_cli(&broker, &["describe", &topic])
            .unwrap()
            .lines()
            .find_map(|l| {
                l.strip_prefix("snapshots=")
                    .map(|n| n.parse::<usize>().unwrap())
            })
    };
    // A commit per wave, waves a second apart: without expiry, one snapshot each.
    for wave in 0..8 {
        plain_wave(
            &broker.producer_config(),
            &topic,
            1,
            &format!("w{wave}"),
            50,
        );
        let expected = read_committed(&broker, &topic, 1);
        assert_table_equals(&broker, &topic, &expected);
        std::thread::sleep(Duration::from_millis(700));
    }
    let kept = snapshots().unwrap();
    assert!(kept < 8, "{kept} snapshots kept of 8 commits");
    let expected = read_committed(&broker, &topic, 1);
    assert_eq!(expected.len(), 400);
    assert_table_equals(&broker, &topic, &expected);
    // The expired snapshots' manifest lists are deleted: one left per snapshot kept.
    let store = strata_objstore::Store::open(&moto.store_config("ice-expire", "cluster")).unwrap();
    wait_for("expired manifest lists deleted", TIMEOUT, || {
        let lists = strata_tests::block_on(store.list("iceberg/")).unwrap();
        let lists = lists
            .iter()
            .filter(|o| o.key.contains("/metadata/snap-"))
            .count();
        lists == snapshots().unwrap()
    });
}

/// A `value_json` table's value schema: one required field, the rest optional, one nested.
const ORDERS: &str = r#"{"type":"struct","fields":[{"id":1,"name":"id","required":true,"type":"long"},{"id":2,"name":"customer","required":false,"type":"string"},{"id":3,"name":"amount","required":false,"type":"double"},{"id":4,"name":"at","required":false,"type":"timestamptz"},{"id":5,"name":"address","required":false,"type":{"type":"struct","fields":[{"id":6,"name":"city","required":false,"type":"string"}]}}]}"#;

/// A value_json table of [`ORDERS`] translated every half second.
const ORDERS_TABLE: &[(&str, &str)] = &[
    ("iceberg.mode", "value_json"),
    ("iceberg.target.lag.ms", "1000"),
    ("iceberg.value.schema", ORDERS),
];

/// [`ORDERS`] with optional top-level `channel` and `value` (a value field may be named as
/// the `key_value` column a `value_json` table has not) and an optional `address.zip`.
fn orders_evolved() -> String {
    ORDERS
        .replace(
            r#"{"id":2,"name":"customer""#,
            r#"{"id":7,"name":"channel","required":false,"type":"string"},{"id":9,"name":"value","required":false,"type":"int"},{"id":2,"name":"customer""#,
        )
        .replace(
            r#"{"id":6,"name":"city","required":false,"type":"string"}"#,
            r#"{"id":6,"name":"city","required":false,"type":"string"},{"id":8,"name":"zip","required":false,"type":"string"}"#,
        )
}

/// Values that are no row of [`ORDERS`]: `None` a tombstone (`id` is required).
const BAD_VALUES: &[Option<&str>] = &[
    Some("not json {"),
    Some(r#"{"id": "seven"}"#),
    Some(r#"{"customer": "no id"}"#),
    None,
    Some("[1, 2, 3]"),
    Some(r#"{"id": 1"#),
    Some(r#"{"id": 99999999999999999999999}"#),
    Some(r#"{"id": 5, "amount": "lots"}"#),
    Some(r#"{"id": 6} {"id": 7}"#),
];

/// The good order `i`.
fn order(i: i64) -> String {
    format!(
        r#"{{"id": {i}, "customer": "c{}", "amount": {}, "at": "2026-12-07T10:{:02}:00Z", "address": {{"city": "Oslo"}}, "unknown": [1]}}"#,
        i % 5,
        i as f64 * 1.5,
        i % 60
    )
}

/// `good` orders with the bad values spread among them, over 2 partitions, each with a
/// header; returns how many bad ones.
fn produce_orders(broker: &Broker, topic: &str, first: i64, good: i64) -> usize {
    let p: BaseProducer = broker.producer_config().create().unwrap();
    let mut bad = 0;
    for i in first..first + good {
        let headers = || {
            OwnedHeaders::new().insert(Header {
                key: "n",
                value: Some(&format!("{i}")),
            })
        };
        let key = format!("k{i}");
        produce(
            &p,
            topic,
            (i % 2) as i32,
            Some(&key),
            Some(&order(i)),
            headers(),
        );
        if i % 7 == 3 {
            let value = BAD_VALUES[bad % BAD_VALUES.len()];
            produce(&p, topic, (i % 2) as i32, Some(&key), value, headers());
            bad += 1;
        }
    }
    p.flush(TIMEOUT).unwrap();
    bad
}

/// The consumer's records split into those whose value is an order and the rest.
fn sort_orders(records: Vec<ConsumedRecord>) -> (Vec<ConsumedRecord>, Vec<ConsumedRecord>) {
    records.into_iter().partition(|r| {
        let v = r.value.as_deref().map(String::from_utf8_lossy);
        v.is_some_and(|v| (0..100_000).any(|i| v == order(i)))
    })
}

/// Waits until `table` (the topic's or its `~dlq`) holds `n` rows; returns them.
fn rows_when(broker: &Broker, table: &str, n: usize) -> Vec<Value> {
    let mut rows = Vec::new();
    wait_for(&format!("{n} rows in {table}"), TIMEOUT, || {
        let exists = http_get(
            &broker.admin_addr,
            &format!("/iceberg/v1/namespaces/strata/tables/{table}"),
        )
        .is_ok_and(|r| r.status == 200);
        if exists {
            rows = rest_rows(broker, table).1;
        }
        rows.len() >= n
    });
    assert_eq!(rows.len(), n, "{table}: {rows:?}");
    rows
}

/// The table's rows are the orders' fields, typed, with their Kafka columns.
fn assert_orders(rows: &[Value], orders: &[ConsumedRecord]) {
    for (row, r) in rows.iter().zip(orders) {
        let order: Value = serde_json::from_slice(r.value.as_deref().unwrap()).unwrap();
        assert_eq!(
            (&row["partition"], &row["offset"], &row["key"]),
            (
                &Value::from(r.partition),
                &Value::from(r.offset),
                &hex(&r.key)
            ),
            "{row}"
        );
        assert_eq!(row["id"], order["id"], "{row}");
        assert_eq!(row["customer"], order["customer"], "{row}");
        assert_eq!(row["amount"].as_f64(), order["amount"].as_f64(), "{row}");
        assert_eq!(row["address"]["city"], "Oslo", "{row}");
        assert!(
            row.get("value").is_none(),
            "a value_json table has no value column"
        );
        let at = row["at"].as_str().unwrap();
        let minute = order["at"].as_str().unwrap()[14..16].to_string();
        assert!(
            at.starts_with(&format!("2026-12-07 10:{minute}:00")),
            "{at}"
        );
    }
}

#[test]
fn a_value_json_table_has_typed_columns_its_dead_letters_and_gains_columns() {
    let moto = MotoServer::start();
    let broker = Broker::start(s3_broker(&moto, "ice-json"));
    let topic = unique_topic("ice-json");
    broker.create_topic(&topic, 2, ORDERS_TABLE).unwrap();
    let bad = produce_orders(&broker, &topic, 0, 60);
    let (orders, dead) = sort_orders(read_committed(&broker, &topic, 2));
    assert_eq!((orders.len(), dead.len()), (60, bad));
    let rows = rows_when(&broker, &topic, orders.len());
    assert_orders(&rows, &orders);

    // The dead letters: each refused record whole (key, value, headers), with why.
    let dlq = format!("{topic}~dlq");
    let dead_rows = rows_when(&broker, &dlq, dead.len());
    let got: Vec<Value> = dead_rows.iter().map(seen).collect();
    let want: Vec<Value> = dead.iter().map(as_row).collect();
    assert_eq!(got, want);
    let reasons: Vec<&str> = dead_rows
        .iter()
        .map(|r| r["reason"].as_str().unwrap())
        .collect();
    assert!(reasons.contains(&"not a JSON object"), "{reasons:?}");
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("required field 'id' is missing or null")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.starts_with("a tombstone")),
        "{reasons:?}"
    );
    assert_eq!(
        broker.metric("strata_iceberg_invalid_records_total"),
        bad as f64
    );

    // A typed column filters rows in the reader (pyiceberg prunes with the files' statistics).
    let uri = format!("http://{}/iceberg", broker.admin_addr);
    let mut args = vec![
        "--filter",
        "amount > 60.0 and customer == 'c1'",
        "rest",
        &uri,
        &topic,
    ];
    args.extend(S3_KEYS);
    let (_, filtered) = read_table(&args);
    let ids: Vec<i64> = filtered.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    let want: Vec<i64> = (0..60)
        .filter(|i| *i as f64 * 1.5 > 60.0 && i % 5 == 1)
        .collect();
    assert_eq!(
        ids.iter()
            .copied()
            .collect::<std::collections::BTreeSet<_>>(),
        want.into_iter().collect()
    );

    // The schema gains optional columns: new rows have them, rows already written read null.
    let refused = broker.cli(&[
        "topic",
        "alter",
        &topic,
        "-c",
        &format!(
            "iceberg.value.schema={}",
            ORDERS.replace(r#""type":"long""#, r#""type":"string""#)
        ),
    ]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && err.contains("may only gain optional fields"),
        "{err}"
    );
    let evolved = orders_evolved();
    broker.cli_ok(&[
        "topic",
        "alter",
        &topic,
        "-c",
        &format!("iceberg.value.schema={evolved}"),
    ]);
    let p: BaseProducer = broker.producer_config().create().unwrap();
    for i in 1000..1010 {
        let v = format!(
            r#"{{"id": {i}, "channel": "web", "value": {i}, "address": {{"city": "Bergen", "zip": "50{i}"}}}}"#
        );
        produce(&p, &topic, 0, Some("new"), Some(&v), OwnedHeaders::new());
    }
    p.flush(TIMEOUT).unwrap();
    let rows = rows_when(&broker, &topic, orders.len() + 10);
    let (old, new): (Vec<&Value>, Vec<&Value>) =
        rows.iter().partition(|r| r["id"].as_i64() < Some(1000));
    assert!(old
        .iter()
        .all(|r| r["channel"].is_null() && r["value"].is_null() && r["address"]["zip"].is_null()));
    assert!(
        new.iter().all(|r| r["channel"] == "web"
            && r["value"] == r["id"]
            && r["address"]["zip"]
                .as_str()
                .is_some_and(|z| z.starts_with("50"))),
        "{new:?}"
    );
    let describe = iceberg_cli(&broker, &["describe", &topic]).unwrap();
    assert!(
        describe.contains(&format!("dead_letters table={dlq} records={bad}")),
        "{describe}"
    );
}

#[test]
fn kill_9_while_value_json_rounds_run_keeps_both_tables_exact() {
    let moto = MotoServer::start();
    let mut broker = Broker::start(s3_broker(&moto, "ice-json-kill"));
    let topic = unique_topic("ice-json-kill");
    broker.create_topic(&topic, 2, ORDERS_TABLE).unwrap();
    let mut rng = strata_tests::Rng::new(11);
    for wave in 0..4 {
        produce_orders(&broker, &topic, wave * 700, 700);
        std::thread::sleep(Duration::from_millis(200 + rng.below(900)));
        broker.kill9();
        broker.restart();
    }
    let (orders, dead) = sort_orders(read_committed(&broker, &topic, 2));
    assert_orders(&rows_when(&broker, &topic, orders.len()), &orders);
    let dead_rows = rows_when(&broker, &format!("{topic}~dlq"), dead.len());
    let got: Vec<Value> = dead_rows.iter().map(seen).collect();
    assert_eq!(got, dead.iter().map(as_row).collect::<Vec<_>>());

    // A table written as value_json is not continued as key_value: reported, then rewritten.
    broker.cli_ok(&["topic", "alter", &topic, "-c", "iceberg.mode=key_value"]);
    wait_for("the mode change reported", TIMEOUT, || {
        let out = iceberg_cli(&broker, &["describe", &topic]).unwrap();
        out.contains("written with iceberg.mode=value_json") && out.contains("rewrite")
    });
    iceberg_cli(&broker, &["rewrite", &topic]).unwrap();
    let expected = read_committed(&broker, &topic, 2);
    assert_table_equals(&broker, &topic, &expected);
    let gone = http_get(
        &broker.admin_addr,
        &format!("/iceberg/v1/namespaces/strata/tables/{topic}~dlq"),
    )
    .unwrap();
    assert_eq!(
        gone.status, 404,
        "the dead letters start over with their table"
    );
}
