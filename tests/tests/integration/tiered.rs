//! Tiered storage end to end: closed segments offloaded to a file:// store or a real S3 server
//! (moto), local copies deleted past `local.retention.ms`, and librdkafka consumers reading the
//! whole history back, byte for byte, across the remote → local boundary. Faults: the S3 server
//! unreachable mid-run, SIGKILL in the middle of an upload, a corrupted object; and remote
//! retention deleting exactly the expired segments. In a 3-node cluster: only the leader
//! uploads, followers trim behind the remote log, and a new leader resumes with no gap.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    BrokerId, IncrementalAlterConfigsRequest, ListOffsetsRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::admin::TopicReplication;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use strata_tests::cluster::{CLUSTER_TIMEOUT, FAST};
use strata_tests::outage::OutageProxy;
use strata_tests::s3::{MotoServer, REGION};
use strata_tests::{
    now_ms, parse_prometheus, poll_until, strata_bin, unique_topic, wait_for, Broker, BrokerOpts,
    Cluster, ConsumedRecord, KafkaConn, Rng, TrackingProducer,
};

const VALUE_LEN: usize = 1000;
const KAFKA_STORAGE_ERROR: i16 = 56;
const REQUEST_TIMED_OUT: i16 = 7;

fn s3_opts(opts: BrokerOpts, endpoint: &str, bucket: &str) -> BrokerOpts {
    opts.env("STRATA_OBJECT_STORE", format!("s3://{bucket}/tiered"))
        .env("STRATA_OBJECT_STORE_ENDPOINT", endpoint)
        .env("STRATA_OBJECT_STORE_REGION", REGION)
        .env("STRATA_OBJECT_STORE_ALLOW_HTTP", true)
        .env("STRATA_OBJECT_STORE_ACCESS_KEY_ID", "test")
        .env("STRATA_OBJECT_STORE_SECRET_ACCESS_KEY", "test")
}

/// A topic with 1 MiB segments and a 1 s local window: everything closed goes remote.
pub(crate) fn tiered_topic(broker: &Broker, topic: &str, extra: &[(&str, &str)]) {
    let mut configs = vec![
        ("segment.bytes", "1048576"),
        ("local.retention.ms", "1000"),
        ("remote.storage.enable", "true"),
    ];
    configs.extend_from_slice(extra);
    broker.create_topic(topic, 1, &configs).unwrap();
}

fn value(i: usize) -> Vec<u8> {
    let mut v = format!("r{i}:").into_bytes();
    v.extend(Rng::new(i as u64).text(VALUE_LEN));
    v
}

/// Produces records `from..to` (key `k{i}`, timestamp `ts0 + i`) and checks each landed at
/// offset `i`.
fn produce(broker: &Broker, topic: &str, from: usize, to: usize, ts0: i64) {
    let mut cfg = broker.producer_config();
    cfg.set("linger.ms", "5").set("batch.size", "65536");
    let producer = TrackingProducer::new(&cfg);
    for i in from..to {
        producer.send(
            i - from,
            topic,
            Some(0),
            format!("k{i}").as_bytes(),
            &value(i),
            &[],
            Some(ts0 + i as i64),
        );
    }
    producer.flush(Duration::from_secs(120));
    for (n, (_, offset)) in producer.all_delivered(to - from).into_iter().enumerate() {
        assert_eq!(
            offset,
            (from + n) as i64,
            "record {} landed at {offset}",
            from + n
        );
    }
}

/// Reads records `from..to` and checks every one: offset, key, value, timestamp, in order.
fn check_records(broker: &Broker, topic: &str, from: usize, to: usize, ts0: i64) {
    let got = broker.consume_until(
        topic,
        &[(0, Offset::Offset(from as i64))],
        Duration::from_secs(180),
        |r| r.len() >= to - from,
    );
    for (n, r) in got.iter().take(to - from).enumerate() {
        let i = from + n;
        let want = ConsumedRecord {
            partition: 0,
            offset: i as i64,
            timestamp: Some(ts0 + i as i64),
            key: Some(format!("k{i}").into_bytes()),
            value: Some(value(i)),
            headers: vec![],
        };
        assert!(
            *r == want,
            "record {i} differs: got offset {} key {:?}",
            r.offset,
            r.key
                .as_ref()
                .map(|k| String::from_utf8_lossy(k).into_owned())
        );
    }
}

fn metric_with(broker: &Broker, name: &str, label: &str, value: &str) -> f64 {
    parse_prometheus(&broker.metrics())
        .into_iter()
        .filter(|s| s.name == name && s.label(label) == Some(value))
        .map(|s| s.value)
        .sum()
}

fn local_segments(broker: &Broker, topic: &str) -> usize {
    files_with(&broker.data_dir().join(format!("{topic}-0")), ".log").len()
}

fn files_with(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_with(&p, suffix));
        } else if p.to_string_lossy().ends_with(suffix) {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// Waits until every closed segment is committed remotely and the local copies past the 1 s
/// local window are gone (at most the active segment and one just closed remain).
pub(crate) fn wait_offloaded(broker: &Broker, topic: &str, min_uploads: f64) {
    let state = || {
        (
            broker.metric("strata_tier_upload_lag_segments"),
            broker.metric("strata_tier_uploaded_segments_total"),
            local_segments(broker, topic),
        )
    };
    poll_until(
        Duration::from_secs(120),
        || {
            let (lag, uploaded, local) = state();
            (lag == 0.0 && uploaded >= min_uploads && local <= 2).then_some(())
        },
        || {
            format!("closed segments not offloaded and deleted locally: (lag, uploaded, local segments) = {:?}", state())
        },
    );
}

fn fetch_error(conn: &mut KafkaConn, topic: &str, offset: i64) -> (i16, usize) {
    let resp = conn.fetch(topic, 0, offset, 100).unwrap();
    let p = &resp.responses[0].partitions[0];
    (p.error_code, p.records.as_ref().map_or(0, |r| r.len()))
}

fn offset_for_time(broker: &Broker, topic: &str, ts: i64) -> i64 {
    let consumer: BaseConsumer = broker.consumer_config().create().unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Offset(ts))
        .unwrap();
    let found = consumer
        .offsets_for_times(tpl, Duration::from_secs(30))
        .unwrap();
    match found.elements()[0].offset() {
        Offset::Offset(o) => o,
        other => panic!("offsets_for_times({ts}) gave {other:?}"),
    }
}

/// Produces `n` records into a tiered topic, waits for the offload, and reads everything back
/// from offset 0; then checks timestamp lookups and the operator's view.
fn offload_and_replay(broker: &Broker, topic: &str, n: usize) -> i64 {
    tiered_topic(broker, topic, &[]);
    let ts0 = now_ms() - 3_600_000;
    produce(broker, topic, 0, n, ts0);
    let segments = (n / 1024) as f64; // ≈ 1 KiB records in 1 MiB segments
    wait_offloaded(broker, topic, segments * 0.9);
    assert_eq!(broker.watermarks(topic, 0), (0, n as i64));

    // Every record, in order, from the remote tier into the local one.
    check_records(broker, topic, 0, n, ts0);
    assert!(broker.metric("strata_tier_remote_fetch_bytes_total") > 0.9 * segments * 1e6);
    // A timestamp inside the remote range finds its exact record.
    for i in [0, 12_345 % n, n - 10] {
        assert_eq!(offset_for_time(broker, topic, ts0 + i as i64), i as i64);
    }
    // The operator's view: the whole log, the local tail, the remote part.
    let out = std::process::Command::new(strata_bin())
        .args([
            "topic",
            "describe",
            topic,
            "-b",
            &broker.kafka_addr,
            "--admin-addr",
            &broker.admin_addr,
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let tier = text
        .lines()
        .find(|l| l.starts_with("tier partition=0"))
        .unwrap_or_else(|| panic!("no tier line in:\n{text}"));
    assert!(tier.contains(&format!("tiered=true log=[0,{n})")), "{tier}");
    assert!(tier.contains("remote=[0,"), "{tier}");
    assert!(tier.contains("upload_lag_segments=0"), "{tier}");

    // KIP-1005 as a tiered Kafka answers: EARLIEST_LOCAL (-4) is the first offset on local
    // disk, LATEST_TIERED (-5) the last one in the object store; MAX_TIMESTAMP (-3) the
    // newest record.
    let range = |name: &str| -> (i64, i64) {
        let at = tier
            .find(&format!(" {name}=["))
            .unwrap_or_else(|| panic!("{name} in {tier}"));
        let rest = &tier[at + name.len() + 3..];
        let (a, b) = rest[..rest.find(')').unwrap()].split_once(',').unwrap();
        (a.parse().unwrap(), b.parse().unwrap())
    };
    let (local_start, _) = range("local");
    let (_, remote_end) = range("remote");
    assert!(local_start > 0 && remote_end > 0, "{tier}");
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    assert_eq!(
        conn.list_offset(topic, 0, -4).unwrap(),
        (0, local_start, -1)
    );
    assert_eq!(
        conn.list_offset(topic, 0, -5).unwrap(),
        (0, remote_end - 1, -1)
    );
    assert_eq!(
        conn.list_offset(topic, 0, -3).unwrap(),
        (0, n as i64 - 1, ts0 + n as i64 - 1)
    );
    ts0
}

#[test]
fn offloaded_history_reads_back_identically_and_survives_an_empty_cache() {
    let mut broker = Broker::start(BrokerOpts::new().quick_tiering());
    let topic = unique_topic("tiered");
    let n = 200_000; // ≈ 206 MB, ≈ 195 closed segments
    let ts0 = offload_and_replay(&broker, &topic, n);
    let objects = broker.data_dir().join("objects");
    assert!(files_with(&objects, ".log").len() >= 180);
    assert_eq!(
        files_with(&objects, ".log").len(),
        files_with(&objects, ".index").len()
    );

    // No cache and no local copy of the offloaded range: still the same history.
    broker.terminate();
    std::fs::remove_dir_all(broker.data_dir().join("cache")).unwrap();
    broker.restart();
    check_records(&broker, &topic, 20_000, 26_000, ts0);
    assert_eq!(offset_for_time(&broker, &topic, ts0 + 3), 3);
    assert!(metric_with(&broker, "strata_cache_block_lookups_total", "tier", "miss") > 0.0);

    // The object store's own GET rate, as `strata perf get` measures it.
    let out = std::process::Command::new(strata_bin())
        .args(["perf", "get", "--object-store"])
        .arg(format!("file://{}", objects.display()))
        .args(["--bytes", "4194304"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.starts_with("get concurrency=8 range_bytes=1048576 gets="),
        "{text}"
    );
    let bytes: u64 = text
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("bytes="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!((4 << 20..6 << 20).contains(&bytes), "{text}");
}

#[test]
fn offloaded_history_reads_back_identically_from_s3() {
    let moto = MotoServer::start();
    moto.create_bucket("tiered");
    let broker = Broker::start(s3_opts(
        BrokerOpts::new().quick_tiering(),
        &moto.endpoint,
        "tiered",
    ));
    offload_and_replay(&broker, &unique_topic("tiered-s3"), 40_000);
}

#[test]
fn an_unreachable_s3_server_stalls_uploads_but_not_producers() {
    let moto = MotoServer::start();
    moto.create_bucket("tiered");
    let proxy = OutageProxy::start(moto.endpoint.trim_start_matches("http://"));
    let broker = Broker::start(
        s3_opts(BrokerOpts::new().quick_tiering(), &proxy.endpoint, "tiered")
            .env("STRATA_OBJECT_STORE_MAX_RETRIES", 1)
            .env("STRATA_OBJECT_STORE_REQUEST_TIMEOUT_MS", 2000)
            .env("STRATA_OBJECT_STORE_RETRY_TIMEOUT_MS", 3000),
    );
    let topic = unique_topic("outage");
    tiered_topic(&broker, &topic, &[]);
    let ts0 = now_ms();
    produce(&broker, &topic, 0, 6_000, ts0);
    wait_offloaded(&broker, &topic, 5.0);

    proxy.down();
    // Producers are untouched; closed segments pile up locally, uploads fail and retry.
    produce(&broker, &topic, 6_000, 12_000, ts0);
    wait_for(
        "failed uploads while the store is down",
        Duration::from_secs(60),
        || {
            broker.metric("strata_tier_upload_errors_total") > 0.0
                && broker.metric("strata_tier_upload_lag_segments") >= 4.0
        },
    );
    assert!(
        local_segments(&broker, &topic) >= 5,
        "unoffloaded segments stay on disk"
    );
    // A read of the remote range is a retriable error, not a hang or wrong data.
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    assert_eq!(fetch_error(&mut conn, &topic, 0), (KAFKA_STORAGE_ERROR, 0));
    // The local range is served as usual.
    assert_eq!(fetch_error(&mut conn, &topic, 11_990).0, 0);

    // A store that accepts and never answers: ListOffsets v10's timeout_ms bounds a lookup
    // in the remote range (REQUEST_TIMED_OUT, well before the store's own timeouts), and the
    // local range is answered as usual (KIP-1075).
    proxy.up();
    wait_offloaded(&broker, &topic, 10.0);
    proxy.stall();
    let list = |conn: &mut KafkaConn, timestamp: i64| {
        let req = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_timeout_ms(300)
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(TopicName(topic.clone().into()))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_timestamp(timestamp)])]);
        let started = Instant::now();
        let resp = conn.request(10, &req).unwrap();
        let p = &resp.topics[0].partitions[0];
        (p.error_code, p.offset, started.elapsed())
    };
    let (code, offset, took) = list(&mut conn, ts0 + 10);
    assert_eq!((code, offset), (REQUEST_TIMED_OUT, -1), "after {took:?}");
    assert!(
        took < Duration::from_millis(1500),
        "bounded by timeout_ms: {took:?}"
    );
    assert_eq!(list(&mut conn, -1).0, 0, "the log end is local");

    proxy.up();
    check_records(&broker, &topic, 0, 12_000, ts0);
    assert_eq!(offset_for_time(&broker, &topic, ts0 + 10), 10);
}

/// Kafka with tiered storage starts and serves its local log while the remote store is down;
/// so does Strata, whether the store refuses connections or accepts them and never answers.
/// Uploads wait on local disk and drain once the store is back; then the whole history reads
/// back from offset 0.
#[test]
fn a_broker_restarted_while_the_object_store_is_unreachable_serves_its_local_log() {
    let moto = MotoServer::start();
    moto.create_bucket("tiered");
    let proxy = OutageProxy::start(moto.endpoint.trim_start_matches("http://"));
    let mut broker = Broker::start(
        s3_opts(BrokerOpts::new().quick_tiering(), &proxy.endpoint, "tiered")
            .env("STRATA_OBJECT_STORE_MAX_RETRIES", 1)
            .env("STRATA_OBJECT_STORE_REQUEST_TIMEOUT_MS", 2000)
            .env("STRATA_OBJECT_STORE_RETRY_TIMEOUT_MS", 3000),
    );
    let topic = unique_topic("outage-restart");
    tiered_topic(&broker, &topic, &[]);
    let ts0 = now_ms();
    produce(&broker, &topic, 0, 4_000, ts0);
    wait_offloaded(&broker, &topic, 2.0);

    let mut end = 4_000;
    for (outage, how) in [(0, "refused"), (1, "hanging")] {
        match outage {
            0 => proxy.down(),
            _ => proxy.stall(),
        }
        broker.kill9();
        let started = Instant::now();
        broker.restart();
        let ready = started.elapsed();
        eprintln!("object store {how}: ready {ready:?} after the restart");
        // The local log takes writes and serves them; closed segments wait for the store.
        produce(&broker, &topic, end, end + 4_000, ts0);
        check_records(&broker, &topic, end, end + 4_000, ts0);
        end += 4_000;
        let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
        let (code, _) = fetch_error(&mut conn, &topic, 0);
        assert!(
            code == KAFKA_STORAGE_ERROR || code == REQUEST_TIMED_OUT,
            "a remote-only offset while the store is {how}: a retriable error, got {code}"
        );
        wait_for(
            "uploads waiting and the store seen unreachable",
            Duration::from_secs(60),
            || {
                broker.metric("strata_tier_upload_lag_segments") >= 2.0
                    && broker.metric("strata_object_store_reachable") == 0.0
            },
        );
        assert!(broker.metric("strata_object_store_reachable") == 0.0);

        let back = Instant::now();
        proxy.up();
        wait_offloaded(&broker, &topic, 1.0);
        eprintln!(
            "object store {how}: the upload backlog drained {:?} after it came back",
            back.elapsed()
        );
        assert_eq!(broker.metric("strata_object_store_reachable"), 1.0);
    }
    check_records(&broker, &topic, 0, end, ts0);
}

#[test]
fn sigkill_in_the_middle_of_an_upload_leaves_no_orphan_and_loses_nothing() {
    let mut broker = Broker::start(
        BrokerOpts::new()
            .quick_tiering()
            // 1 MiB segments at 1 MiB/s: each upload spends a second between its two objects.
            .env("STRATA_REMOTE_LOG_UPLOAD_MAX_BYTES_PER_SECOND", 1 << 20)
            .env("STRATA_REMOTE_LOG_ORPHAN_GRACE_MS", 0),
    );
    let topic = unique_topic("upload-crash");
    tiered_topic(&broker, &topic, &[]);
    let ts0 = now_ms();
    produce(&broker, &topic, 0, 8_000, ts0);
    let objects = broker.data_dir().join("objects");
    let half_written = || {
        files_with(&objects, ".log")
            .iter()
            .any(|l| !l.with_extension("index").exists())
    };
    wait_for(
        "a log object without its index",
        Duration::from_secs(30),
        half_written,
    );
    broker.kill9();
    assert!(
        half_written(),
        "killed between the two objects of an upload"
    );

    broker.restart();
    wait_offloaded(&broker, &topic, 5.0);
    wait_for("the orphan swept", Duration::from_secs(30), || {
        !half_written() && broker.metric("strata_tier_orphans_deleted_total") >= 1.0
    });
    // Exactly one object pair per committed segment.
    let committed = broker.metric("strata_tier_remote_log_segments");
    assert_eq!(files_with(&objects, ".log").len() as f64, committed);
    check_records(&broker, &topic, 0, 8_000, ts0);
}

#[test]
fn a_corrupt_object_is_an_error_never_data() {
    let mut broker = Broker::start(BrokerOpts::new().quick_tiering());
    let topic = unique_topic("corrupt");
    tiered_topic(&broker, &topic, &[]);
    let ts0 = now_ms();
    produce(&broker, &topic, 0, 5_000, ts0);
    wait_offloaded(&broker, &topic, 3.0);
    broker.terminate();
    // Flip one byte in the middle of the first segment's log object; drop the cache.
    let objects = broker.data_dir().join("objects");
    let first = files_with(&objects, ".log")
        .into_iter()
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("00000000000000000000-")
        })
        .expect("first segment object");
    let mut bytes = std::fs::read(&first).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x55;
    std::fs::write(&first, &bytes).unwrap();
    std::fs::remove_dir_all(broker.data_dir().join("cache")).unwrap();
    broker.restart();

    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    // A fetch whose batches reach the damaged one fails as a whole.
    assert_eq!(fetch_error(&mut conn, &topic, 0), (KAFKA_STORAGE_ERROR, 0));
    assert!(
        metric_with(
            &broker,
            "strata_tier_remote_fetch_errors_total",
            "kind",
            "corrupt"
        ) >= 1.0
    );
    // The next segment is intact and served.
    let (code, len) = fetch_error(&mut conn, &topic, 1_500);
    assert_eq!(code, 0);
    assert!(len > 0);
    // A consumer from 0 never sees a wrong record: whatever it gets before the damage is right.
    let consumer =
        broker.assigned_consumer(&broker.consumer_config(), &topic, &[(0, Offset::Beginning)]);
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while std::time::Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            let r = ConsumedRecord::from_message(&m);
            assert_eq!(
                r.value,
                Some(value(r.offset as usize)),
                "offset {}",
                r.offset
            );
        }
    }
}

#[test]
fn remote_retention_deletes_exactly_the_expired_segments() {
    let broker = Broker::start(BrokerOpts::new().quick_tiering());
    let topic = unique_topic("remote-retention");
    // segment.ms rolls the segment holding the old records once producing pauses, so old and
    // new records never share a segment.
    tiered_topic(&broker, &topic, &[("segment.ms", "500")]);
    let old = now_ms() - 2 * 3_600_000;
    produce(&broker, &topic, 0, 3_500, old);
    let dir = broker.data_dir().join(format!("{topic}-0"));
    wait_for(
        "the old records' last segment rolled and offloaded",
        Duration::from_secs(60),
        || files_with(&dir, ".log") == [dir.join("00000000000000003500.log")],
    );
    let fresh = now_ms() - 3_500;
    produce(&broker, &topic, 3_500, 7_000, fresh);
    wait_offloaded(&broker, &topic, 6.0);
    let objects = broker.data_dir().join("objects");
    let before = files_with(&objects, ".log").len();
    assert_eq!(broker.watermarks(&topic, 0).0, 0);

    // Retention of one hour: the old segments expire, the new ones stay.
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_string(topic.clone()))
            .with_configs(vec![AlterableConfig::default()
                .with_name(StrBytes::from_static_str("retention.ms"))
                .with_config_operation(0)
                .with_value(Some(StrBytes::from_static_str("3600000")))]),
    ]);
    let resp = conn.request(1, &req).unwrap();
    assert_eq!(
        resp.responses[0].error_code, 0,
        "{:?}",
        resp.responses[0].error_message
    );
    wait_for(
        "ListOffsets earliest at the first new record",
        Duration::from_secs(30),
        || broker.watermarks(&topic, 0).0 == 3_500,
    );
    wait_for("expired objects deleted", Duration::from_secs(30), || {
        broker.metric("strata_tier_expired_segments_total") >= 1.0
            && files_with(&objects, ".log").len() < before
    });
    // Every remaining object starts at or after the new log start.
    for obj in files_with(&objects, ".log") {
        let name = obj.file_name().unwrap().to_string_lossy().into_owned();
        let base: i64 = name[..20].parse().unwrap();
        assert!(base >= 3_500, "{name} should have expired");
    }
    check_records(&broker, &topic, 3_500, 7_000, fresh);
    // Below the new start is out of range.
    let (code, _) = fetch_error(&mut conn, &topic, 100);
    assert_eq!(code, 1, "OFFSET_OUT_OF_RANGE");
}

/// One partition's tier view from a member's `/v1/partitions`.
fn tier_view(broker: &Broker, topic: &str) -> Option<serde_json::Value> {
    let body = broker
        .admin_get(&format!("/v1/partitions?topic={topic}"))
        .ok()?
        .body;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v.as_array()?.first().cloned()
}

#[test]
fn in_a_cluster_only_the_leader_uploads_and_a_new_leader_resumes_with_no_gap() {
    let store = tempfile::tempdir().unwrap();
    let url = format!("file://{}", store.path().display());
    let tier = [
        ("STRATA_OBJECT_STORE", url.as_str()),
        // Uploads slower than produce: the remote log trails the log end.
        ("STRATA_REMOTE_LOG_UPLOAD_MAX_BYTES_PER_SECOND", "3000000"),
        ("STRATA_REMOTE_LOG_MANAGER_TASK_INTERVAL_MS", "100"),
        ("STRATA_LOG_RETENTION_CHECK_INTERVAL_MS", "100"),
        ("STRATA_REMOTE_CACHE_MEMORY_BYTES", "8388608"),
        ("STRATA_REMOTE_CACHE_DISK_BYTES", "33554432"),
        ("STRATA_REMOTE_CACHE_REPLAY_MEMORY_BYTES", "8388608"),
        ("STRATA_REMOTE_CACHE_REPLAY_DISK_BYTES", "33554432"),
    ];
    let env = [FAST, &tier[..]].concat();
    let mut cluster = Cluster::start(3, 3, &env);
    cluster.wait_controller();
    let topic = unique_topic("tier-rf3");
    // Broker 1 leads; 2 is next in line.
    cluster.create_replicated_topic(
        &topic,
        1,
        TopicReplication::Variable(&[&[1, 2, 3]]),
        &[
            ("min.insync.replicas", "2"),
            ("segment.bytes", "1048576"),
            ("segment.ms", "100"),
            ("local.retention.ms", "1000"),
            ("remote.storage.enable", "true"),
        ],
    );
    assert_eq!(cluster.leaders(&topic)[0], Some(1));
    let ts0 = now_ms() - 3_600_000;

    // Records flow all along, through the failover: an idempotent acks=all producer, record
    // `i` at offset `i`, at most MAX of them.
    const MAX: usize = 14_000;
    let stop = Arc::new(AtomicBool::new(false));
    let mut cfg = cluster.producer_config();
    cfg.set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .set("batch.size", "65536")
        .set("message.timeout.ms", "120000");
    let producer = Arc::new(TrackingProducer::new(&cfg));
    let sent = Arc::new(AtomicUsize::new(0));
    let producing = {
        let (stop, producer, sent, topic) =
            (stop.clone(), producer.clone(), sent.clone(), topic.clone());
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) && i < MAX {
                let key = format!("k{i}");
                producer.send(
                    i,
                    &topic,
                    Some(0),
                    key.as_bytes(),
                    &value(i),
                    &[],
                    Some(ts0 + i as i64),
                );
                i += 1;
                sent.store(i, Ordering::Relaxed);
                if i % 20 == 0 {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        })
    };

    // The leader uploads; the followers trim their copies only below what is committed.
    let remote_end = |cluster: &Cluster, id: u64| {
        tier_view(cluster.member(id), &topic).and_then(|v| v["remote_end"].as_i64())
    };
    wait_for("the first uploads", CLUSTER_TIMEOUT, || {
        remote_end(&cluster, 1).is_some_and(|e| e >= 1000)
    });
    for f in [2, 3] {
        poll_until(
            Duration::from_secs(60),
            || {
                let v = tier_view(cluster.member(f), &topic)?;
                let (local, end) = (v["local_start"].as_i64()?, v["remote_end"].as_i64()?);
                assert!(
                    local <= end,
                    "follower {f} deleted records not offloaded: {v}"
                );
                (local > 0).then_some(())
            },
            || {
                format!(
                    "follower {f} trims: {:?}",
                    tier_view(cluster.member(f), &topic)
                )
            },
        );
        assert_eq!(
            cluster
                .member(f)
                .metric("strata_tier_uploaded_segments_total"),
            0.0,
            "follower {f} uploaded"
        );
    }

    // Broker 2 restarts and catches up in large fetches: its time-based rolls (segment.ms)
    // now run on another schedule than the leader's, so it cuts segments at other offsets.
    // Once the remote end lies inside one of its segments, the leader dies.
    cluster.node(2).kill9();
    let before = sent.load(Ordering::Relaxed);
    wait_for(
        "records produced while broker 2 is down",
        CLUSTER_TIMEOUT,
        || {
            let now = sent.load(Ordering::Relaxed);
            now >= before + 1000 || now >= MAX
        },
    );
    cluster.node(2).restart();
    cluster.wait_topic_healthy(&topic);
    let bases_of = |cluster: &Cluster, id: u64| -> Vec<i64> {
        files_with(
            &cluster.member(id).data_dir().join(format!("{topic}-0")),
            ".log",
        )
        .iter()
        .map(|p| p.file_stem().unwrap().to_str().unwrap().parse().unwrap())
        .collect()
    };
    let straddles =
        |bases: &[i64], end: i64| bases.first().is_some_and(|b| *b < end) && !bases.contains(&end);
    wait_for(
        "the remote end inside one of broker 2's segments",
        CLUSTER_TIMEOUT,
        || remote_end(&cluster, 1).is_some_and(|e| straddles(&bases_of(&cluster, 2), e)),
    );
    assert!(
        cluster
            .member(1)
            .metric("strata_tier_uploaded_segments_total")
            > 0.0
    );
    cluster.node(1).kill9();
    // Until 2 is elected (a session timeout away) it only follows: its segments as they stand
    // are what it starts from as leader.
    let at_failover = bases_of(&cluster, 2);
    let end = remote_end(&cluster, 3).unwrap();
    wait_for("broker 2 to lead", CLUSTER_TIMEOUT, || {
        cluster.leaders(&topic)[0] == Some(2)
    });
    assert!(
        straddles(&at_failover, end),
        "the new leader's segments {at_failover:?} straddle the remote end {end}"
    );
    let resumed_at = sent.load(Ordering::Relaxed);
    wait_for("records past the failover", CLUSTER_TIMEOUT, || {
        producer.acked_count() >= (resumed_at + 2000).min(MAX)
    });
    stop.store(true, Ordering::Relaxed);
    producing.join().unwrap();
    producer.flush(Duration::from_secs(60));
    let n = sent.load(Ordering::Relaxed);
    let delivered = producer.all_delivered(n);
    for (i, (_, offset)) in delivered.iter().enumerate() {
        assert_eq!(*offset, i as i64, "record {i}'s offset");
    }

    // The new leader uploads from where the remote log ends, with no gap.
    poll_until(
        Duration::from_secs(120),
        || {
            let v = tier_view(cluster.member(2), &topic)?;
            (v["remote_end"].as_i64()? >= n as i64 - 3000 && v["upload_lag_segments"] == 0)
                .then_some(())
        },
        || {
            format!(
                "offload on the new leader: {:?}",
                tier_view(cluster.member(2), &topic)
            )
        },
    );
    assert!(
        cluster
            .member(2)
            .metric("strata_tier_uploaded_segments_total")
            > 0.0
    );

    // The whole history, remote and local, exactly once and in order.
    assert_eq!(cluster.member(2).watermarks(&topic, 0), (0, n as i64));
    check_records(cluster.member(2), &topic, 0, n, ts0);

    // The old leader returns as a follower and trims behind the remote log too.
    cluster.node(1).restart();
    cluster.wait_topic_healthy(&topic);
    poll_until(
        Duration::from_secs(60),
        || {
            let v = tier_view(cluster.member(1), &topic)?;
            let (local, end) = (v["local_start"].as_i64()?, v["remote_end"].as_i64()?);
            (local >= 1000 && local <= end).then_some(())
        },
        || {
            format!(
                "old leader trims: {:?}",
                tier_view(cluster.member(1), &topic)
            )
        },
    );
}
