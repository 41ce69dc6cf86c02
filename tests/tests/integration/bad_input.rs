//! Bad input never takes the broker down: each case is followed by a fresh client that still
//! produces and consumes.

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse,
    ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::records::Compression;
use strata_tests::raw::{error, request_header, topic_name};
use strata_tests::{
    encode_batch, now_ms, unique_topic, Broker, BrokerOpts, KafkaConn, RawRecord, Rng,
};

const CLOSE_DEADLINE: Duration = Duration::from_secs(10);

fn records(n: usize, value_len: usize, tag: &str) -> Vec<RawRecord> {
    (0..n)
        .map(|i| {
            RawRecord::new(
                format!("{tag}-{i}"),
                vec![b'a' + (i % 26) as u8; value_len],
                now_ms(),
            )
        })
        .collect()
}

/// A request frame with an arbitrary (possibly unsupported) version: header as the crate
/// encodes it for that version, body encoded at `body_version`.
fn frame_with_version<B: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &B,
    body_version: i16,
) -> Bytes {
    let mut buf = request_header(api as i16, version, correlation_id, "strata-tests-bad");
    body.encode(&mut buf, body_version).unwrap();
    buf.freeze()
}

#[test]
fn random_bytes_as_frames_do_not_stop_the_broker() {
    let mut broker = Broker::start_default();
    let mut rng = Rng::new(42);
    for round in 0..20 {
        let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
        let len = 1 + rng.below(600) as usize;
        let mut payload = rng.bytes(len);
        if round % 2 == 0 && payload.len() >= 8 {
            // A plausible header (Produce v8) in front of garbage, to reach the body decoder.
            payload[..4].copy_from_slice(&[0, 0, 0, 8]);
        }
        conn.send_frame(&payload).unwrap();
        // Whatever the broker answers, it must not hang the connection forever or die.
        let _ = conn.closed_within(Duration::from_millis(300));
        broker.assert_running();
    }
    // Garbage that is not even framed: the first four bytes make a random length.
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let _ = conn.send_bytes(&rng.bytes(64 * 1024));
    let _ = conn.closed_within(Duration::from_millis(300));
    broker.assert_serves_new_clients();
}

#[test]
fn a_two_gib_frame_length_closes_the_connection_and_the_broker_still_serves() {
    let mut broker = Broker::start_default();
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    conn.send_bytes(&0x7fff_ffffu32.to_be_bytes()).unwrap();
    conn.send_bytes(&[0u8; 64]).unwrap();
    assert!(
        conn.closed_within(CLOSE_DEADLINE),
        "connection still open {CLOSE_DEADLINE:?} after announcing a 2 GiB frame"
    );
    // A negative length too.
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    conn.send_bytes(&(-5i32).to_be_bytes()).unwrap();
    assert!(
        conn.closed_within(CLOSE_DEADLINE),
        "connection still open after a negative frame length"
    );
    broker.assert_serves_new_clients();
}

#[test]
fn a_batch_with_a_wrong_crc_is_refused_with_corrupt_message() {
    let mut broker = Broker::start_default();
    let topic = unique_topic("bad-crc");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let good = encode_batch(&records(5, 50, "crc"), Compression::None, None);
    let mut bad = good.to_vec();
    // The last byte of the last value: the batch still parses, only its CRC is wrong.
    let at = bad.len() - 2;
    bad[at] ^= 0x55;
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let p = conn.produce(&topic, 0, Bytes::from(bad)).unwrap();
    assert_eq!(
        p.error_code,
        error::CORRUPT_MESSAGE,
        "produce of a batch with a wrong CRC"
    );
    assert_eq!(
        conn.list_offset(&topic, 0, -1).unwrap().1,
        0,
        "log end after the refused batch"
    );
    // The same connection goes on working.
    assert_eq!(conn.produce_ok(&topic, 0, good).unwrap(), 0);
    broker.assert_serves_new_clients();
}

#[test]
fn a_batch_over_max_message_bytes_is_refused_with_message_too_large() {
    let mut broker = Broker::start_default();
    let topic = unique_topic("too-large");
    broker
        .create_topic(&topic, 1, &[("max.message.bytes", "2048")])
        .unwrap();
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let big = encode_batch(&records(2, 3000, "big"), Compression::None, None);
    let p = conn.produce(&topic, 0, big).unwrap();
    assert_eq!(
        p.error_code,
        error::MESSAGE_TOO_LARGE,
        "produce of a {}-byte batch to a topic with max.message.bytes=2048",
        6000
    );
    assert_eq!(
        conn.list_offset(&topic, 0, -1).unwrap().1,
        0,
        "log end after the refused batch"
    );
    let small = encode_batch(&records(2, 100, "small"), Compression::None, None);
    assert_eq!(conn.produce_ok(&topic, 0, small).unwrap(), 0);
    broker.assert_serves_new_clients();
}

#[test]
fn a_batch_over_the_broker_message_max_bytes_is_refused_with_message_too_large() {
    let mut broker = Broker::start(BrokerOpts::new().env("STRATA_MESSAGE_MAX_BYTES", 4096));
    let topic = unique_topic("too-large-broker");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let p = conn
        .produce(
            &topic,
            0,
            encode_batch(&records(4, 2000, "big"), Compression::None, None),
        )
        .unwrap();
    assert_eq!(
        p.error_code,
        error::MESSAGE_TOO_LARGE,
        "8000-byte batch with STRATA_MESSAGE_MAX_BYTES=4096"
    );
    assert_eq!(
        conn.produce_ok(
            &topic,
            0,
            encode_batch(&records(2, 100, "ok"), Compression::None, None)
        )
        .unwrap(),
        0
    );
    broker.assert_serves_new_clients();
}

#[test]
fn produce_to_a_missing_topic_with_auto_create_off_is_unknown_topic_or_partition() {
    let mut broker =
        Broker::start(BrokerOpts::new().env("STRATA_AUTO_CREATE_TOPICS_ENABLE", "false"));
    let topic = unique_topic("missing");
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let p = conn
        .produce(
            &topic,
            0,
            encode_batch(&records(1, 10, "m"), Compression::None, None),
        )
        .unwrap();
    assert_eq!(
        p.error_code,
        error::UNKNOWN_TOPIC_OR_PARTITION,
        "produce to a missing topic"
    );

    // Metadata asking for auto-creation does not create it either.
    let req = MetadataRequest::default()
        .with_topics(Some(vec![
            kafka_protocol::messages::metadata_request::MetadataRequestTopic::default()
                .with_name(Some(topic_name(&topic))),
        ]))
        .with_allow_auto_topic_creation(true);
    for _ in 0..2 {
        let resp: MetadataResponse = conn.request(9, &req).unwrap();
        let t = resp.topics.first().expect("topic in metadata response");
        assert_eq!(
            t.error_code,
            error::UNKNOWN_TOPIC_OR_PARTITION,
            "metadata for a missing topic with auto-create off"
        );
    }
    // Topics created explicitly still work.
    let topic2 = unique_topic("explicit");
    broker.create_topic(&topic2, 1, &[]).unwrap();
    assert_eq!(
        conn.produce_ok(
            &topic2,
            0,
            encode_batch(&records(1, 10, "e"), Compression::None, None)
        )
        .unwrap(),
        0
    );
    broker.assert_running();
}

#[test]
fn api_versions_v99_answers_unsupported_version_in_the_v0_format() {
    let mut broker = Broker::start_default();
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let body = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("strata-tests"))
        .with_client_software_version(StrBytes::from_static_str("1"));
    conn.send_frame(&frame_with_version(ApiKey::ApiVersions, 99, 77, &body, 3))
        .unwrap();
    let mut frame = conn
        .read_frame()
        .unwrap()
        .expect("the broker closed the connection instead of answering ApiVersions v99");
    let header = ResponseHeader::decode(&mut frame, 0).unwrap();
    assert_eq!(header.correlation_id, 77);
    let resp = ApiVersionsResponse::decode(&mut frame, 0).expect("ApiVersions v0 response body");
    assert_eq!(
        resp.error_code,
        error::UNSUPPORTED_VERSION,
        "error code of ApiVersions v99"
    );
    let av = resp
        .api_keys
        .iter()
        .find(|k| k.api_key == ApiKey::ApiVersions as i16)
        .expect("the UNSUPPORTED_VERSION response lists the ApiVersions range, so clients can fall back");
    assert!(
        av.min_version == 0 && av.max_version >= 3,
        "ApiVersions range {}..={}",
        av.min_version,
        av.max_version
    );

    // A client falls back to v0 on the same connection.
    let resp: ApiVersionsResponse = conn.request(0, &ApiVersionsRequest::default()).unwrap();
    assert_eq!(resp.error_code, 0);
    assert!(resp
        .api_keys
        .iter()
        .any(|k| k.api_key == ApiKey::Produce as i16));
    broker.assert_serves_new_clients();
}

#[test]
fn metadata_v99_closes_the_connection_and_the_broker_still_serves() {
    let mut broker = Broker::start_default();
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let body = MetadataRequest::default().with_topics(None);
    conn.send_frame(&frame_with_version(ApiKey::Metadata, 99, 5, &body, 12))
        .unwrap();
    assert!(
        conn.closed_within(CLOSE_DEADLINE),
        "connection still open after Metadata v99"
    );
    broker.assert_serves_new_clients();
}

#[test]
fn a_segment_truncated_mid_batch_recovers_every_batch_before_the_cut() {
    let mut broker = Broker::start_default();
    let topic = unique_topic("truncated");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let batches: Vec<Vec<RawRecord>> = (0..10).map(|b| records(5, 100, &format!("b{b}"))).collect();
    for (b, recs) in batches.iter().enumerate() {
        let off = conn
            .produce_ok(&topic, 0, encode_batch(recs, Compression::None, None))
            .unwrap();
        assert_eq!(off, b as i64 * 5);
    }
    drop(conn);
    broker.terminate();

    let log = broker
        .data_dir()
        .join(format!("{topic}-0"))
        .join("00000000000000000000.log");
    let len = std::fs::metadata(&log)
        .unwrap_or_else(|e| panic!("segment file {}: {e}", log.display()))
        .len();
    let f = std::fs::OpenOptions::new().write(true).open(&log).unwrap();
    f.set_len(len - 7).unwrap();
    f.sync_all().unwrap();
    drop(f);

    broker.restart();
    let (low, high) = broker.watermarks(&topic, 0);
    assert_eq!(
        (low, high),
        (0, 45),
        "watermarks after losing the tail of the last batch"
    );
    let got = broker.consume_n(&topic, &[0], 45, Duration::from_secs(30));
    for (i, r) in got.iter().enumerate() {
        let want = &batches[i / 5][i % 5];
        assert_eq!(r.offset, i as i64);
        assert_eq!(r.key.as_ref(), want.key.as_ref(), "key at offset {i}");
        assert_eq!(r.value.as_ref(), want.value.as_ref(), "value at offset {i}");
    }
    // New writes go after the last whole batch.
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let off = conn
        .produce_ok(
            &topic,
            0,
            encode_batch(&records(3, 10, "new"), Compression::None, None),
        )
        .unwrap();
    assert_eq!(off, 45, "base offset of the first batch after recovery");
    let got = broker.consume_n(&topic, &[0], 48, Duration::from_secs(30));
    assert_eq!(got[45].key.as_deref(), Some(&b"new-0"[..]));
    broker.assert_serves_new_clients();
}
