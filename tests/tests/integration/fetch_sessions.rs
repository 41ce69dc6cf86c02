//! Incremental fetch sessions (KIP-227) over raw frames: a full fetch opens a session, later
//! fetches name only what changed and are answered with only the partitions that have news;
//! bad session metadata gets Kafka's error codes and disturbs no other session.

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::{FetchRequest, FetchResponse};
use kafka_protocol::records::Compression;
use rdkafka::admin::AdminOptions;
use strata_tests::raw::{decode_records, topic_name, FETCH_VERSION};
use strata_tests::{block_on, encode_batch, now_ms, unique_topic, Broker, KafkaConn, RawRecord};

const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
const INVALID_FETCH_SESSION_EPOCH: i16 = 71;
const FETCH_SESSION_TOPIC_ID_ERROR: i16 = 106;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

fn one(tag: &str) -> bytes::Bytes {
    encode_batch(
        &[RawRecord::new(tag, format!("value-{tag}"), now_ms())],
        Compression::None,
        None,
    )
}

/// A fetch of `partitions` of `topic` at `offset` each, with session fields.
fn fetch(topic: &str, partitions: &[(i32, i64)], session_id: i32, epoch: i32) -> FetchRequest {
    let topics = if partitions.is_empty() {
        Vec::new()
    } else {
        vec![FetchTopic::default()
            .with_topic(topic_name(topic))
            .with_partitions(
                partitions
                    .iter()
                    .map(|(p, offset)| {
                        FetchPartition::default()
                            .with_partition(*p)
                            .with_fetch_offset(*offset)
                            .with_partition_max_bytes(1 << 20)
                    })
                    .collect(),
            )]
    };
    FetchRequest::default()
        .with_max_wait_ms(100)
        .with_min_bytes(1)
        .with_max_bytes(16 << 20)
        .with_session_id(session_id)
        .with_session_epoch(epoch)
        .with_topics(topics)
}

fn forget(req: FetchRequest, topic: &str, partitions: &[i32]) -> FetchRequest {
    req.with_forgotten_topics_data(vec![ForgottenTopic::default()
        .with_topic(topic_name(topic))
        .with_partitions(partitions.to_vec())])
}

/// (partition, error, high watermark, records) of every partition in the response.
fn answered(resp: &FetchResponse) -> Vec<(i32, i16, i64, usize)> {
    let mut out: Vec<(i32, i16, i64, usize)> = resp
        .responses
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                let n = p
                    .records
                    .clone()
                    .map_or(0, |r| decode_records(r).expect("records decode").len());
                (p.partition_index, p.error_code, p.high_watermark, n)
            })
        })
        .collect();
    out.sort();
    out
}

#[test]
fn a_session_answers_only_partitions_with_news() {
    let broker = Broker::start_default();
    let topic = unique_topic("sessions");
    broker.create_topic(&topic, 3, &[]).unwrap();
    let mut producer = KafkaConn::connect(&broker.kafka_addr).unwrap();
    producer.produce_ok(&topic, 0, one("a")).unwrap();

    let mut c = KafkaConn::connect(&broker.kafka_addr).unwrap();
    // Full fetch, epoch 0: every partition answered, a session opened.
    let all = [(0, 0), (1, 0), (2, 0)];
    let resp = c
        .request(FETCH_VERSION, &fetch(&topic, &all, 0, 0))
        .unwrap();
    assert_eq!(resp.error_code, 0);
    let id = resp.session_id;
    assert!(id > 0, "no session opened");
    assert_eq!(
        answered(&resp),
        vec![(0, 0, 1, 1), (1, 0, 0, 0), (2, 0, 0, 0)]
    );
    assert_eq!(broker.metric("strata_fetch_sessions"), 1.0);
    assert_eq!(broker.metric("strata_fetch_session_partitions"), 3.0);

    // Epoch 1 moves partition 0 past its record: nothing has news, nothing is answered.
    let resp = c
        .request(FETCH_VERSION, &fetch(&topic, &[(0, 1)], id, 1))
        .unwrap();
    assert_eq!((resp.error_code, resp.session_id), (0, id));
    assert_eq!(answered(&resp), vec![]);

    // A record on partition 1: an incremental fetch naming nothing gets exactly it.
    producer.produce_ok(&topic, 1, one("b")).unwrap();
    let resp = c
        .request(FETCH_VERSION, &fetch(&topic, &[], id, 2))
        .unwrap();
    assert_eq!(answered(&resp), vec![(1, 0, 1, 1)]);

    // The same epoch again (a retry) is refused; the session is not disturbed.
    let resp = c
        .request(FETCH_VERSION, &fetch(&topic, &[], id, 2))
        .unwrap();
    assert_eq!(
        (resp.error_code, resp.session_id),
        (INVALID_FETCH_SESSION_EPOCH, 0)
    );
    assert!(resp.responses.is_empty());

    // The session goes on from another connection; partition 1 is forgotten, a partition
    // never in the session is forgotten too (ignored).
    let mut other = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let req = forget(fetch(&topic, &[], id, 3), &topic, &[1, 7]);
    let resp = other.request(FETCH_VERSION, &req).unwrap();
    assert_eq!((resp.error_code, resp.session_id), (0, id));
    assert_eq!(broker.metric("strata_fetch_session_partitions"), 2.0);
    producer.produce_ok(&topic, 1, one("c")).unwrap();
    producer.produce_ok(&topic, 2, one("d")).unwrap();
    let resp = other
        .request(FETCH_VERSION, &fetch(&topic, &[], id, 4))
        .unwrap();
    assert_eq!(
        answered(&resp),
        vec![(2, 0, 1, 1)],
        "forgotten partition 1 answered"
    );

    // Closing (epoch -1) ends it: the fetch is answered in full, without a session.
    let resp = c
        .request(FETCH_VERSION, &fetch(&topic, &[(0, 1)], id, -1))
        .unwrap();
    assert_eq!((resp.error_code, resp.session_id), (0, 0));
    assert_eq!(answered(&resp), vec![(0, 0, 1, 0)]);
    assert_eq!(broker.metric("strata_fetch_sessions"), 0.0);
    let resp = c
        .request(FETCH_VERSION, &fetch(&topic, &[], id, 5))
        .unwrap();
    assert_eq!(resp.error_code, FETCH_SESSION_ID_NOT_FOUND);
}

#[test]
fn bad_session_metadata_gets_kafka_errors_and_disturbs_no_other_session() {
    let broker = Broker::start_default();
    let topic = unique_topic("sessions-bad");
    let doomed = unique_topic("sessions-doomed");
    broker.create_topic(&topic, 2, &[]).unwrap();
    broker.create_topic(&doomed, 1, &[]).unwrap();
    let mut c = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let mine = c
        .request(FETCH_VERSION, &fetch(&topic, &[(0, 0), (1, 0)], 0, 0))
        .unwrap()
        .session_id;
    let theirs = c
        .request(FETCH_VERSION, &fetch(&doomed, &[(0, 0)], 0, 0))
        .unwrap()
        .session_id;
    assert!(mine > 0 && theirs > 0 && mine != theirs);

    // A full fetch naming more partitions than the cluster has is answered, without a session.
    let many: Vec<(i32, i64)> = (0..5000).map(|p| (p, 0)).collect();
    let resp = c
        .request(FETCH_VERSION, &fetch(&topic, &many, 0, 0))
        .unwrap();
    assert_eq!((resp.error_code, resp.session_id), (0, 0));
    assert_eq!(answered(&resp).len(), 5000);

    // An id the broker never gave.
    let unknown = if mine == 1 { 2 } else { 1 };
    let unknown = if unknown == theirs { 3 } else { unknown };
    let resp = c
        .request(FETCH_VERSION, &fetch(&topic, &[], unknown, 1))
        .unwrap();
    assert_eq!(
        (resp.error_code, resp.session_id),
        (FETCH_SESSION_ID_NOT_FOUND, 0)
    );
    // Epochs out of order: ahead, then a negative one other than -1.
    for epoch in [5, -7] {
        let resp = c
            .request(FETCH_VERSION, &fetch(&topic, &[], mine, epoch))
            .unwrap();
        assert_eq!(
            resp.error_code, INVALID_FETCH_SESSION_EPOCH,
            "epoch {epoch}"
        );
    }
    // A session of topic names cannot go on naming topics by id (fetch v13+).
    let resp = c.request(13, &fetch(&topic, &[], mine, 1)).unwrap();
    assert_eq!(resp.error_code, FETCH_SESSION_TOPIC_ID_ERROR);
    assert_eq!(broker.metric("strata_fetch_session_errors_total"), 4.0);

    // The session whose topic is deleted answers that partition with an error; the
    // other session is untouched and the broker serves on.
    let admin = broker.admin();
    let deleted = block_on(admin.delete_topics(&[doomed.as_str()], &AdminOptions::new()))
        .expect("delete topics");
    assert!(deleted.iter().all(|r| r.is_ok()), "{deleted:?}");
    let mut gone = Vec::new();
    for epoch in 1..=50 {
        let resp = c
            .request(FETCH_VERSION, &fetch(&doomed, &[], theirs, epoch))
            .unwrap();
        assert_eq!(resp.error_code, 0);
        gone = answered(&resp);
        if !gone.is_empty() {
            break;
        }
    }
    assert_eq!(gone, vec![(0, UNKNOWN_TOPIC_OR_PARTITION, -1, 0)]);

    let mut producer = KafkaConn::connect(&broker.kafka_addr).unwrap();
    producer.produce_ok(&topic, 1, one("after")).unwrap();
    let resp = c
        .request(FETCH_VERSION, &fetch(&topic, &[], mine, 1))
        .unwrap();
    assert_eq!((resp.error_code, resp.session_id), (0, mine));
    assert_eq!(answered(&resp), vec![(1, 0, 1, 1)]);
}

#[test]
fn a_full_cache_answers_in_full_without_a_session() {
    let broker = Broker::start(
        strata_tests::BrokerOpts::new().env("STRATA_MAX_INCREMENTAL_FETCH_SESSION_CACHE_SLOTS", 1),
    );
    let topic = unique_topic("sessions-full");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let mut c = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let first = c
        .request(FETCH_VERSION, &fetch(&topic, &[(0, 0)], 0, 0))
        .unwrap();
    assert!(first.session_id > 0);
    // The one slot holds a young consumer session: a second consumer gets none, but its fetch
    // is answered.
    let second = c
        .request(FETCH_VERSION, &fetch(&topic, &[(0, 0)], 0, 0))
        .unwrap();
    assert_eq!((second.error_code, second.session_id), (0, 0));
    assert_eq!(answered(&second), vec![(0, 0, 0, 0)]);
    assert_eq!(broker.metric("strata_fetch_sessions"), 1.0);
    // The first session still works.
    let resp = c
        .request(FETCH_VERSION, &fetch(&topic, &[], first.session_id, 1))
        .unwrap();
    assert_eq!((resp.error_code, resp.session_id), (0, first.session_id));
}
