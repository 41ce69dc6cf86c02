//! Record bytes sent from the page cache (sendfile) on a plaintext listener and copied through
//! TLS: the same Fetch gets the same response bytes on both, for every Fetch version, batch
//! sizes around every boundary, from the local log and from the remote tier; and a client
//! that stops reading mid-response is closed after `socket_io_timeout_ms`, holding nothing.

use std::io::{Read, Write};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest};
use kafka_protocol::records::Compression;
use strata_tests::certs::Certs;
use strata_tests::{
    encode_batch, now_ms, poll_until, topic_name, unique_topic, Broker, BrokerOpts, KafkaConn,
    RawRecord,
};

use crate::tiered::{tiered_topic, wait_offloaded};

const PAGE_CACHE: &str = "strata_network_sent_from_page_cache_bytes_total";

/// A broker with a plaintext and a TLS listener, tiering quickly.
fn plain_and_tls(certs: &Certs, opts: BrokerOpts) -> Broker {
    Broker::start(
        opts.env(
            "STRATA_LISTENERS",
            "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        )
        .env(
            "STRATA_SSL_CERTIFICATE_LOCATION",
            certs.server_cert.display(),
        )
        .env("STRATA_SSL_KEY_LOCATION", certs.server_key.display()),
    )
}

/// One batch of `count` records whose values make it about `len` bytes long, with keys and
/// headers so that every field is compared.
fn batch_about(len: usize, count: usize, seed: usize) -> Bytes {
    let each = len / count;
    let records: Vec<RawRecord> = (0..count)
        .map(|i| {
            let mut r = RawRecord::new(
                format!("k{seed}-{i}"),
                vec![b'a' + ((seed + i) % 26) as u8; each.saturating_sub(40).max(1)],
                now_ms() + (seed * 100 + i) as i64,
            );
            r.headers = vec![("h".to_string(), format!("{seed}").into_bytes())];
            r
        })
        .collect();
    encode_batch(&records, Compression::None, None)
}

/// Batch lengths around the response's boundaries: where a batch becomes a chunk of its own
/// (4 KiB), where it goes by sendfile (16 KiB), pages, and past a socket buffer.
const LENGTHS: [usize; 9] = [
    300, 4_000, 4_200, 16_300, 16_500, 65_536, 200_000, 600_000, 900_000,
];

/// A Fetch of one partition from `offset`, naming the topic by name and by id.
fn fetch(topic: &str, id: uuid::Uuid, offset: i64, partition_max: i32) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_max_bytes(32 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(topic_name(topic))
            .with_topic_id(id)
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(partition_max)])])
}

/// Sends a request frame over TLS and reads its response frame.
fn tls_exchange(
    tls: &mut rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>,
    payload: &[u8],
) -> Vec<u8> {
    let mut frame = (payload.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(payload);
    tls.write_all(&frame).unwrap();
    tls.flush().unwrap();
    let mut len = [0u8; 4];
    tls.read_exact(&mut len).unwrap();
    let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
    tls.read_exact(&mut body).unwrap();
    body
}

#[test]
fn plaintext_sendfile_and_tls_copies_answer_every_fetch_version_with_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let certs = Certs::generate(dir.path());
    let broker = plain_and_tls(&certs, BrokerOpts::new().quick_tiering());
    let topic = unique_topic("zero-copy");
    tiered_topic(&broker, &topic, &[]);
    let mut plain = KafkaConn::connect(broker.listener("PLAINTEXT")).unwrap();
    // Three rounds of every length: ~6 MB in 1 MiB segments, most of them offloaded.
    let mut bases = Vec::new();
    for round in 0..3 {
        for (k, len) in LENGTHS.into_iter().enumerate() {
            let count = 1 + (k % 4) * 3;
            let b = batch_about(len, count, round * 100 + k);
            bases.push(plain.produce_ok(&topic, 0, b).unwrap());
        }
    }
    wait_offloaded(&broker, &topic, 3.0);
    let id = plain.topic_id(&topic).unwrap();
    let local_start = poll_until(
        Duration::from_secs(30),
        || {
            let r = plain.fetch(&topic, 0, 0, 0).ok()?;
            let p = &r.responses[0].partitions[0];
            (p.error_code == 0).then_some(p.log_start_offset)
        },
        || "the partition did not answer".to_string(),
    );
    assert_eq!(local_start, 0, "remote history is readable from 0");

    // Every batch's base offset (remote and local ones), and some inside batches.
    let mut offsets: Vec<i64> = bases.clone();
    offsets.extend(bases.iter().step_by(4).map(|b| b + 1));
    let caps = [1, 20_000, 8 << 20];
    let mut tls = certs.tls_client(broker.listener("SSL"));
    // Through TLS alone: nothing from the page cache.
    for &offset in &offsets {
        let (_, payload) = plain
            .encode_request(12, &fetch(&topic, id, offset, 1))
            .unwrap();
        assert!(tls_exchange(&mut tls, &payload).len() > 100);
    }
    assert_eq!(broker.metric(PAGE_CACHE), 0.0, "TLS reads copy");
    for version in 4..=17 {
        for &offset in &offsets {
            for &cap in &caps {
                let (_, payload) = plain
                    .encode_request(version, &fetch(&topic, id, offset, cap))
                    .unwrap();
                let copied = tls_exchange(&mut tls, &payload);
                plain.send_frame(&payload).unwrap();
                let sent = plain.read_frame().unwrap().expect("a response");
                assert!(
                    sent[..] == copied[..],
                    "Fetch v{version} from {offset} (partition max {cap}): plaintext and TLS \
                     differ ({} vs {} bytes)",
                    sent.len(),
                    copied.len()
                );
            }
        }
    }
    assert!(
        broker.metric(PAGE_CACHE) > 1e6,
        "local reads went out by sendfile"
    );
    // And the records are the ones produced (the comparison above is not of two empties).
    let all = strata_tests::raw::decode_records(
        plain
            .fetch(&topic, 0, *bases.last().unwrap(), 0)
            .unwrap()
            .responses[0]
            .partitions[0]
            .records
            .clone()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(all[0].offset, *bases.last().unwrap());
    assert_eq!(all[0].key.as_deref(), Some(&b"k208-0"[..]));
}

#[test]
fn a_client_that_stops_reading_mid_sendfile_is_closed_and_holds_no_descriptor() {
    let dir = tempfile::tempdir().unwrap();
    let certs = Certs::generate(dir.path());
    let broker = plain_and_tls(
        &certs,
        BrokerOpts::new().env("STRATA_SOCKET_IO_TIMEOUT_MS", 1000),
    );
    let topic = unique_topic("stalled");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let mut conn = KafkaConn::connect(broker.listener("PLAINTEXT")).unwrap();
    for k in 0..24 {
        conn.produce_ok(&topic, 0, batch_about(900_000, 9, k))
            .unwrap();
    }
    let descriptors = || {
        std::fs::read_dir(format!("/proc/{}/fd", broker.pid()))
            .unwrap()
            .count()
    };
    let closed = || {
        strata_tests::parse_prometheus(&broker.metrics())
            .into_iter()
            .filter(|s| s.label("reason") == Some("write_timeout"))
            .map(|s| s.value)
            .sum::<f64>()
    };
    let before = descriptors();
    // 20 MB asked for and never read: the socket fills mid-sendfile.
    let mut stalled = KafkaConn::connect(broker.listener("PLAINTEXT")).unwrap();
    let (_, payload) = stalled
        .encode_request(12, &fetch(&topic, uuid::Uuid::nil(), 0, 32 << 20))
        .unwrap();
    stalled.send_frame(&payload).unwrap();
    poll_until(
        Duration::from_secs(20),
        || (closed() >= 1.0).then_some(()),
        || "the stalled client was not closed for its write timeout".to_string(),
    );
    poll_until(
        Duration::from_secs(10),
        || (descriptors() <= before).then_some(()),
        || format!("descriptors {} after, {before} before", descriptors()),
    );
    // Everyone else was served meanwhile and is still.
    let r = conn.fetch(&topic, 0, 0, 0).unwrap();
    assert_eq!(r.responses[0].partitions[0].error_code, 0);
    assert!(stalled.closed_within(Duration::from_secs(10)));
}
