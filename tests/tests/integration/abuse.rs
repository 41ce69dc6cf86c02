//! Clients that abuse connections rather than send bad bytes: ten thousand idle connections,
//! senders that trickle a frame, a client that pipelines without reading its responses, a
//! decompression bomb, more request bytes than the broker holds at once, one address opening
//! too many connections. Memory stays bounded (resident memory measured and asserted with a
//! generous bound), the abuser is cut off, and everyone else is served and loses nothing.
//! Latency under abuse is measured in benchmarks (docs/benchmarks.md), not asserted here.

// Raises the open-file limit (setrlimit(2)).
#![allow(unsafe_code)]

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use kafka_protocol::records::Compression;
use strata_tests::raw::{error, request_header};
use strata_tests::{
    encode_batch, now_ms, unique_topic, wait_for, Broker, BrokerOpts, KafkaConn, RawRecord,
};

const MIB: u64 = 1 << 20;

fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a local struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
}

fn api_versions_frame() -> Vec<u8> {
    // ApiVersions v0 has an empty body.
    let header = request_header(18, 0, 1, "idle");
    let mut f = (header.len() as u32).to_be_bytes().to_vec();
    f.extend_from_slice(&header);
    f
}

#[test]
fn ten_thousand_idle_connections_cost_little_and_close_when_idle() {
    raise_fd_limit();
    let mut broker = Broker::start(
        BrokerOpts::new()
            .env("STRATA_MAX_CONNECTIONS", 12_000)
            .env("STRATA_MAX_CONNECTIONS_PER_IP", 12_000)
            .env("STRATA_CONNECTIONS_MAX_IDLE_MS", 20_000),
    );
    broker.assert_serves_new_clients();
    let before = broker.rss_bytes();
    let mut conns = Vec::with_capacity(10_000);
    for i in 0..10_000 {
        let mut s = TcpStream::connect(&broker.kafka_addr)
            .unwrap_or_else(|e| panic!("connection {i}: {e}"));
        if i % 10 == 0 {
            // One in ten asks something first, as a client does before going quiet.
            s.write_all(&api_versions_frame()).unwrap();
            let mut len = [0u8; 4];
            s.read_exact(&mut len).unwrap();
            let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
            s.read_exact(&mut body).unwrap();
        }
        conns.push(s);
    }
    wait_for("10000 connections open", Duration::from_secs(30), || {
        broker.metric("strata_connections") >= 10_000.0
    });
    let with_idle = broker.rss_bytes();
    let per_connection = with_idle.saturating_sub(before) / 10_000;
    eprintln!(
        "resident memory: {} MiB before, {} MiB with 10000 idle connections ({} bytes each)",
        before / MIB,
        with_idle / MIB,
        per_connection
    );
    assert!(
        with_idle < before + 512 * MIB,
        "10000 idle connections took {} MiB",
        (with_idle - before) / MIB
    );
    // Everyone else is served while they sit there.
    broker.assert_serves_new_clients();
    // Idle for connections_max_idle_ms: closed by the broker.
    wait_for("idle connections closed", Duration::from_secs(90), || {
        broker.metric_labelled("strata_closed_connections_total", "reason", "idle") >= 10_000.0
    });
    let mut buf = [0u8; 1];
    for s in conns.iter_mut().step_by(97) {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        assert_eq!(
            s.read(&mut buf).ok(),
            Some(0),
            "an idle connection still open"
        );
    }
    broker.assert_serves_new_clients();
}

#[test]
fn slow_senders_are_cut_off_and_cannot_hold_memory() {
    let mut broker = Broker::start(
        BrokerOpts::new()
            .env("STRATA_SOCKET_IO_TIMEOUT_MS", 2_000)
            .env("STRATA_MAX_REQUEST_BYTES", 8 * MIB)
            .env("STRATA_QUEUED_MAX_REQUEST_BYTES", 64 * MIB),
    );
    let topic = unique_topic("loris");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let before = broker.rss_bytes();
    // 50 connections announce 1 MiB frames and send one byte every 100 ms.
    let kafka = broker.kafka_addr.clone();
    let loris = thread::spawn(move || {
        let mut conns: Vec<TcpStream> = (0..50)
            .map(|_| {
                let mut s = TcpStream::connect(&kafka).unwrap();
                s.write_all(&(MIB as u32).to_be_bytes()).unwrap();
                s.set_nonblocking(true).unwrap();
                s
            })
            .collect();
        let until = Instant::now() + Duration::from_secs(8);
        while Instant::now() < until && !conns.is_empty() {
            conns.retain_mut(
                |s| !matches!(s.write(&[0]), Err(e) if e.kind() != ErrorKind::WouldBlock),
            );
            thread::sleep(Duration::from_millis(100));
        }
        conns.len()
    });
    // A well-behaved client meanwhile: every record acknowledged and readable.
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    for i in 0..20 {
        let recs = vec![RawRecord::new(format!("k{i}"), vec![b'v'; 100], now_ms())];
        assert_eq!(
            conn.produce_ok(&topic, 0, encode_batch(&recs, Compression::None, None))
                .unwrap(),
            i
        );
    }
    let still_open = loris.join().unwrap();
    assert_eq!(still_open, 0, "trickling connections still open after 8 s");
    assert!(
        broker.metric_labelled("strata_closed_connections_total", "reason", "read_timeout") >= 50.0,
        "read timeouts: {}",
        broker.metric_labelled("strata_closed_connections_total", "reason", "read_timeout")
    );
    let peak = broker.peak_rss_bytes();
    eprintln!(
        "slow senders: resident {} MiB before, peak {} MiB",
        before / MIB,
        peak / MIB
    );
    assert!(peak < before + 256 * MIB, "peak {} MiB", peak / MIB);
    let got = broker.consume_n(&topic, &[0], 20, Duration::from_secs(30));
    assert_eq!(got.len(), 20);
    broker.assert_serves_new_clients();
}

#[test]
fn a_client_that_never_reads_its_responses_is_cut_off() {
    let mut broker = Broker::start(BrokerOpts::new().env("STRATA_SOCKET_IO_TIMEOUT_MS", 2_000));
    let topic = unique_topic("no-reader");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let recs: Vec<RawRecord> = (0..60)
        .map(|i| RawRecord::new(format!("k{i}"), vec![b'x'; 16 * 1024], now_ms()))
        .collect();
    conn.produce_ok(&topic, 0, encode_batch(&recs, Compression::None, None))
        .unwrap();
    let before = broker.rss_bytes();
    assert_eq!(
        broker.metric_labelled("strata_closed_connections_total", "reason", "write_timeout"),
        0.0
    );
    // 1 MiB fetch responses requested over and over, never read.
    let mut flood = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let (_, payload) = flood
        .encode_request(
            strata_tests::raw::FETCH_VERSION,
            &strata_tests::raw::fetch_from_start(&topic, -1),
        )
        .unwrap();
    let mut frame = (payload.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&payload);
    let mut stream = TcpStream::connect(&broker.kafka_addr).unwrap();
    stream.set_nonblocking(true).unwrap();
    let mut sent = 0usize;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut closed = false;
    'flood: while Instant::now() < deadline {
        let mut at = 0;
        while at < frame.len() {
            match stream.write(&frame[at..]) {
                Ok(n) => at += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if broker.metric_labelled(
                        "strata_closed_connections_total",
                        "reason",
                        "write_timeout",
                    ) >= 1.0
                    {
                        closed = true;
                        break 'flood;
                    }
                    thread::sleep(Duration::from_millis(20));
                }
                // The broker closing with our requests unread resets the connection.
                Err(_) => {
                    closed = true;
                    break 'flood;
                }
            }
        }
        sent += 1;
    }
    assert!(
        closed,
        "the non-reading client was not cut off ({sent} requests sent)"
    );
    let after = broker.rss_bytes();
    eprintln!(
        "non-reader: {sent} fetch requests sent; resident {} MiB before, {} MiB after",
        before / MIB,
        after / MIB
    );
    assert!(after < before + 256 * MIB);
    // Others carry on.
    assert_eq!(
        conn.produce_ok(&topic, 0, encode_batch(&recs[..1], Compression::None, None))
            .unwrap(),
        60
    );
    broker.assert_serves_new_clients();
}

#[test]
fn a_decompression_bomb_in_a_compacted_topic_is_refused_in_bounded_memory() {
    let mut broker = Broker::start_default();
    let topic = unique_topic("bomb");
    broker
        .create_topic(&topic, 1, &[("cleanup.policy", "compact")])
        .unwrap();
    // 200 MiB of zeros in one keyed record: a few hundred KiB of gzip.
    let bomb = encode_batch(
        &[RawRecord::new("k", vec![0u8; 200 << 20], now_ms())],
        Compression::Gzip,
        None,
    );
    assert!(bomb.len() < 1 << 20, "bomb of {} bytes", bomb.len());
    let before = broker.rss_bytes();
    let peak_before = broker.peak_rss_bytes();
    // Four at once, on four connections.
    let addr = broker.kafka_addr.clone();
    let codes: Vec<i16> = (0..4)
        .map(|_| {
            let (addr, topic, bomb) = (addr.clone(), topic.clone(), bomb.clone());
            thread::spawn(move || {
                let mut c = KafkaConn::connect(&addr).unwrap();
                c.produce(&topic, 0, bomb).unwrap().error_code
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    assert!(
        codes.iter().all(|c| *c == error::INVALID_RECORD),
        "codes for the bombs: {codes:?}"
    );
    let peak = broker.peak_rss_bytes();
    eprintln!(
        "decompression bombs: resident {} MiB before (peak {} MiB), peak {} MiB after",
        before / MIB,
        peak_before / MIB,
        peak / MIB
    );
    assert!(
        peak < before.max(peak_before) + 512 * MIB,
        "four 200 MiB bombs raised the peak to {} MiB",
        peak / MIB
    );
    // Nothing of them is in the log; a real keyed batch goes in at offset 0.
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let ok = encode_batch(
        &[RawRecord::new("k", b"v".to_vec(), now_ms())],
        Compression::Gzip,
        None,
    );
    assert_eq!(conn.produce_ok(&topic, 0, ok).unwrap(), 0);
    broker.assert_serves_new_clients();
}

#[test]
fn more_request_bytes_than_the_budget_pause_reading_and_lose_nothing() {
    let mut broker = Broker::start(
        BrokerOpts::new()
            .env("STRATA_MAX_REQUEST_BYTES", MIB)
            .env("STRATA_QUEUED_MAX_REQUEST_BYTES", MIB)
            .env("STRATA_SOCKET_IO_TIMEOUT_MS", 3_000),
    );
    let topic = unique_topic("budget");
    broker.create_topic(&topic, 1, &[]).unwrap();
    // A frame announced at 700 KiB that never completes holds 70% of the 1 MiB budget until
    // its read times out: every 600 KiB request behind it has to wait.
    let mut stuck = TcpStream::connect(&broker.kafka_addr).unwrap();
    stuck.write_all(&(700u32 << 10).to_be_bytes()).unwrap();
    stuck.write_all(&[0u8; 10]).unwrap();
    // Three connections each pipeline ten 600 KiB produce requests before reading an answer:
    // 18 MiB sent at once into a 1 MiB budget.
    let addr = broker.kafka_addr.clone();
    let workers: Vec<_> = (0..3)
        .map(|w| {
            let (addr, topic) = (addr.clone(), topic.clone());
            thread::spawn(move || {
                let mut c = KafkaConn::connect(&addr).unwrap();
                let mut ids = Vec::new();
                for i in 0..10 {
                    let recs: Vec<RawRecord> = (0..6)
                        .map(|r| {
                            RawRecord::new(
                                format!("w{w}-{i}-{r}"),
                                vec![b'a'; 100 * 1024],
                                now_ms(),
                            )
                        })
                        .collect();
                    let req = KafkaConn::produce_request(
                        &topic,
                        0,
                        encode_batch(&recs, Compression::None, None),
                        30_000,
                    );
                    ids.push(c.send_produce(&req).unwrap());
                }
                ids.iter()
                    .map(|id| c.produce_answer(*id, &topic, 0).unwrap().error_code)
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    for w in workers {
        let codes = w.join().unwrap();
        assert!(codes.iter().all(|c| *c == error::NONE), "{codes:?}");
    }
    assert!(
        broker.metric("strata_request_budget_waits_total") > 0.0,
        "no request waited for the budget"
    );
    assert!(
        broker.metric_labelled("strata_closed_connections_total", "reason", "read_timeout") >= 1.0,
        "the incomplete frame was not cut off"
    );
    let got = broker.consume_n(&topic, &[0], 180, Duration::from_secs(60));
    assert_eq!(got.len(), 180);
    let mut keys: Vec<_> = got.iter().map(|r| r.key.clone().unwrap()).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 180, "every record exactly once");
    drop(stuck);
    broker.assert_serves_new_clients();
}

#[test]
fn one_address_cannot_open_more_than_max_connections_per_ip() {
    let broker = Broker::start(BrokerOpts::new().env("STRATA_MAX_CONNECTIONS_PER_IP", 5));
    let mut held: Vec<KafkaConn> = (0..5)
        .map(|_| KafkaConn::connect(&broker.kafka_addr).unwrap())
        .collect();
    wait_for("5 connections open", Duration::from_secs(10), || {
        broker.metric("strata_connections") >= 5.0
    });
    let mut sixth = KafkaConn::connect(&broker.kafka_addr).unwrap();
    assert!(
        sixth.closed_within(Duration::from_secs(10)),
        "a sixth connection from one address stayed open"
    );
    assert_eq!(
        broker.metric_labelled(
            "strata_rejected_connections_total",
            "reason",
            "max_connections_per_ip"
        ),
        1.0
    );
    // One closes: there is room again.
    held.pop();
    wait_for("a slot freed", Duration::from_secs(10), || {
        broker.metric("strata_connections") <= 4.0
    });
    let mut again = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let _: kafka_protocol::messages::ApiVersionsResponse = again
        .request(0, &kafka_protocol::messages::ApiVersionsRequest::default())
        .unwrap();
    drop(held);
}
