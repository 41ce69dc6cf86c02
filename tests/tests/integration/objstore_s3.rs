//! The object store against a real S3 HTTP server (moto): objects round-trip whole, in ranges
//! and in multipart uploads; a missing bucket and an unreachable server are told apart from
//! other failures, and an outage is a retriable error within the configured retry budget.

use std::time::Duration;

use bytes::Bytes;
use strata_objstore::{ObjStoreError, Store, StoreConfig};
use strata_tests::block_on;
use strata_tests::s3::MotoServer;

fn payload(len: usize) -> Bytes {
    (0..len)
        .map(|i| (i * 7 % 251) as u8)
        .collect::<Vec<u8>>()
        .into()
}

fn small_parts(cfg: StoreConfig) -> StoreConfig {
    StoreConfig {
        multipart_threshold: 6 << 20,
        part_size: 5 << 20,
        ..cfg
    }
}

#[test]
fn objects_round_trip_through_s3_whole_ranged_and_multipart() {
    let moto = MotoServer::start();
    moto.create_bucket("strata");
    let store = Store::open(&small_parts(moto.store_config("strata", "cluster-a"))).unwrap();
    block_on(async {
        store.check().await.expect("bucket reachable");
        let small = payload(100_000);
        store.put("t-1/0/a.log", small.clone()).await.unwrap();
        assert_eq!(store.get("t-1/0/a.log").await.unwrap(), small);
        assert_eq!(
            store.get_range("t-1/0/a.log", 4096..8192).await.unwrap(),
            small.slice(4096..8192)
        );
        // 13 MiB in three parts of at most 5 MiB.
        let big = payload(13 << 20);
        store.put("t-1/0/b.log", big.clone()).await.unwrap();
        assert_eq!(store.head("t-1/0/b.log").await.unwrap().size, 13 << 20);
        assert_eq!(store.get("t-1/0/b.log").await.unwrap(), big);
        let listed: Vec<(String, u64)> = store
            .list("t-1/0")
            .await
            .unwrap()
            .into_iter()
            .map(|o| (o.key, o.size))
            .collect();
        assert_eq!(
            listed,
            vec![
                ("t-1/0/a.log".to_string(), 100_000),
                ("t-1/0/b.log".to_string(), 13 << 20)
            ]
        );
        store.delete("t-1/0/a.log").await.unwrap();
        assert!(matches!(
            store.get("t-1/0/a.log").await,
            Err(ObjStoreError::NotFound { .. })
        ));
        let m = store.metrics();
        assert_eq!(m.requests("put_part"), 3);
        assert_eq!(m.written_bytes(), 100_000 + (13 << 20));
    });
}

#[test]
fn a_missing_bucket_is_named_as_such() {
    let moto = MotoServer::start();
    let store = Store::open(&moto.store_config("no-such-bucket", "")).unwrap();
    let err = block_on(store.check()).unwrap_err();
    assert!(
        matches!(err, ObjStoreError::BucketNotFound { ref bucket } if bucket == "no-such-bucket"),
        "{err:?}"
    );
    assert!(err.to_string().contains("does not exist"), "{err}");
}

#[test]
fn an_unreachable_server_is_a_retriable_error_within_the_retry_budget() {
    let mut moto = MotoServer::start();
    moto.create_bucket("strata");
    let cfg = StoreConfig {
        retry_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_secs(1),
        ..moto.store_config("strata", "")
    };
    let store = Store::open(&cfg).unwrap();
    block_on(store.put("k", payload(10))).unwrap();
    moto.stop();
    let started = std::time::Instant::now();
    let err = block_on(store.get("k")).unwrap_err();
    assert!(err.is_retriable(), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "gave up after {:?}, far past its retry budget",
        started.elapsed()
    );
}
