//! Broker-side recompression (topic `compression.type`): the CPU cost of rewriting one
//! produced batch under the topic's codec, per uncompressed byte:
//! `cargo bench -p strata-broker --bench recompress`.
//!
//! One batch holds 4,000 records of ~150 bytes shaped like application events (JSON-ish text
//! with repeating field names and varying values): ~616 KB uncompressed. Criterion's
//! throughput is in uncompressed bytes, so seconds of CPU per GB is 1 / (GB/s). Results:
//! docs/benchmarks.md.

use bytes::{Bytes, BytesMut};
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use strata_broker::log::batch;
use strata_broker::log::compression::{recompress, Codec, Target};

const RECORDS: i64 = 4_000;

fn batch(compression: Compression) -> Bytes {
    let records: Vec<Record> = (0..RECORDS)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: 1,
            producer_epoch: 0,
            timestamp_type: TimestampType::Creation,
            offset: i,
            sequence: i as i32,
            timestamp: 1_700_000_000_000 + i,
            key: Some(Bytes::from(format!("user-{:05}", (i * 7919) % 20_000))),
            value: Some(Bytes::from(format!(
                r#"{{"event":"{}","user":"user-{:05}","session":"{:016x}","amount":{}.{:02},"items":{},"region":"{}","ts":{}}}"#,
                ["click", "view", "purchase", "refund"][(i % 4) as usize],
                (i * 7919) % 20_000,
                (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
                (i * 13) % 1000,
                i % 100,
                i % 9,
                ["eu-west-1", "us-east-1", "ap-south-1"][(i % 3) as usize],
                1_700_000_000_000 + i,
            ))),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression,
    };
    RecordBatchEncoder::encode(&mut buf, &records, &options).expect("encode");
    buf.freeze()
}

fn recompression(c: &mut Criterion) {
    let uncompressed_len = batch(Compression::None).len() as u64;
    let mut group = c.benchmark_group("recompress");
    group.throughput(Throughput::Bytes(uncompressed_len));
    group.sample_size(20);
    let cases = [
        ("none", Compression::None, Codec::Gzip, -1),
        ("none", Compression::None, Codec::Gzip, 1),
        ("none", Compression::None, Codec::Snappy, 0),
        ("none", Compression::None, Codec::Lz4, 9),
        ("none", Compression::None, Codec::Lz4, 1),
        ("none", Compression::None, Codec::Zstd, 3),
        ("lz4", Compression::Lz4, Codec::Zstd, 3),
        ("zstd", Compression::Zstd, Codec::Lz4, 9),
        ("snappy", Compression::Snappy, Codec::Gzip, -1),
        ("lz4", Compression::Lz4, Codec::Uncompressed, 0),
    ];
    for (from, source, codec, level) in cases {
        let sent = batch(source);
        let header = batch::validate(&sent).expect("valid batch");
        let target = Target { codec, level };
        let stored = recompress(&sent, &header, target)
            .unwrap()
            .expect("rewritten");
        eprintln!(
            "{from} → {codec:?} level {level}: {} bytes sent, {} stored ({} uncompressed)",
            sent.len(),
            stored.len(),
            uncompressed_len
        );
        group.bench_function(format!("{from}_to_{codec:?}_{level}"), |b| {
            b.iter(|| recompress(black_box(&sent), &header, target).unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, recompression);
criterion_main!(benches);
