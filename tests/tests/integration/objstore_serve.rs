//! `strata serve` and its object store: the single-node default is a directory under the data
//! dir; an S3 bucket is checked at start, and a missing bucket or wrong credentials stop the
//! broker with the cause and the fix (an unreachable endpoint does not: the broker serves its
//! local log until the store answers); `strata objstore init`
//! creates the bucket and its multipart-abort lifecycle rule.

use std::process::{Command, Stdio};
use std::time::Duration;

use strata_tests::http::{http_get, http_request};
use strata_tests::s3::{MotoServer, REGION};
use strata_tests::{parse_prometheus, strata_bin, wait_until, Broker, BrokerOpts};

fn list_requests(broker: &Broker) -> f64 {
    parse_prometheus(&broker.metrics())
        .into_iter()
        .filter(|s| s.name == "strata_object_store_requests_total" && s.label("op") == Some("list"))
        .map(|s| s.value)
        .sum()
}

fn s3_env(opts: BrokerOpts, moto: &MotoServer, bucket: &str) -> BrokerOpts {
    opts.env("STRATA_OBJECT_STORE", format!("s3://{bucket}/strata"))
        .env("STRATA_OBJECT_STORE_ENDPOINT", &moto.endpoint)
        .env("STRATA_OBJECT_STORE_REGION", REGION)
        .env("STRATA_OBJECT_STORE_ALLOW_HTTP", true)
        .env("STRATA_OBJECT_STORE_ACCESS_KEY_ID", "test")
        .env("STRATA_OBJECT_STORE_SECRET_ACCESS_KEY", "test")
}

#[test]
fn with_no_configuration_the_object_store_is_a_directory_in_the_data_dir() {
    let broker = Broker::start_default();
    assert!(broker.data_dir().join("objects").is_dir());
    assert!(
        list_requests(&broker) >= 1.0,
        "the start-up check is counted"
    );
}

#[test]
fn an_s3_bucket_is_checked_at_start() {
    let moto = MotoServer::start();
    moto.create_bucket("strata-ok");
    let broker = Broker::start(s3_env(BrokerOpts::new(), &moto, "strata-ok"));
    assert!(list_requests(&broker) >= 1.0);
}

/// Runs `strata serve` against `endpoint` (test keys unless `env` overrides them), expects it
/// to exit without becoming ready, and returns its stderr.
fn start_fails(endpoint: &str, url: &str, env: &[(&str, &str)]) -> String {
    let data = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(strata_bin());
    cmd.args([
        "serve",
        "--kafka-addr",
        "127.0.0.1:0",
        "--admin-addr",
        "127.0.0.1:0",
        "--raft-addr",
        "127.0.0.1:0",
    ])
    .arg("--data-dir")
    .arg(data.path())
    .args(["--object-store", url])
    .env("RUST_BACKTRACE", "0")
    .env("STRATA_OBJECT_STORE_ENDPOINT", endpoint)
    .env("STRATA_OBJECT_STORE_REGION", REGION)
    .env("STRATA_OBJECT_STORE_ALLOW_HTTP", "true")
    .env("STRATA_OBJECT_STORE_ACCESS_KEY_ID", "test")
    .env("STRATA_OBJECT_STORE_SECRET_ACCESS_KEY", "test")
    .envs(env.iter().copied())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut status = None;
    let exited = wait_until(Duration::from_secs(60), || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    if !exited {
        let _ = child.kill();
        panic!("strata kept running against {endpoint} {url}");
    }
    let out = child.wait_with_output().unwrap();
    assert!(!status.expect("exited").success());
    assert!(!String::from_utf8_lossy(&out.stdout).contains("READY"));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `strata objstore init` with the test server's settings; its stdout line.
fn objstore_init(moto: &MotoServer, url: &str) -> std::process::Output {
    Command::new(strata_bin())
        .args(["objstore", "init", "--object-store", url])
        .env("RUST_BACKTRACE", "0")
        .env("STRATA_OBJECT_STORE_ENDPOINT", &moto.endpoint)
        .env("STRATA_OBJECT_STORE_REGION", REGION)
        .env("STRATA_OBJECT_STORE_ALLOW_HTTP", "true")
        .env("STRATA_OBJECT_STORE_ACCESS_KEY_ID", "test")
        .env("STRATA_OBJECT_STORE_SECRET_ACCESS_KEY", "test")
        .output()
        .unwrap()
}

#[test]
fn a_missing_bucket_stops_the_broker_until_objstore_init_creates_it() {
    let moto = MotoServer::start();
    let url = "s3://no-such-bucket/strata";
    let stderr = start_fails(&moto.endpoint, url, &[]);
    assert!(
        stderr.contains("no-such-bucket")
            && stderr.contains("does not exist")
            && stderr.contains("strata objstore init"),
        "stderr: {stderr}"
    );

    let out = objstore_init(&moto, url);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        stdout.trim(),
        "bucket=no-such-bucket created=true lifecycle_rule=added"
    );
    // Idempotent: a second run finds both in place.
    let out = objstore_init(&moto, url);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "bucket=no-such-bucket created=false lifecycle_rule=present"
    );
    let lifecycle = http_get(&moto.addr(), "/no-such-bucket?lifecycle").unwrap();
    for part in [
        "<ID>strata-abort-incomplete-multipart</ID>",
        "<Prefix>strata/</Prefix>",
        "<DaysAfterInitiation>1</DaysAfterInitiation>",
    ] {
        assert!(lifecycle.body.contains(part), "{}", lifecycle.body);
    }
    let broker = Broker::start(s3_env(BrokerOpts::new(), &moto, "no-such-bucket"));
    assert!(list_requests(&broker) >= 1.0);
}

#[test]
fn objstore_init_keeps_the_lifecycle_rules_already_there() {
    let moto = MotoServer::start();
    moto.create_bucket("shared");
    let theirs = "<LifecycleConfiguration><Rule><ID>expire-tmp</ID><Filter><Prefix>tmp/</Prefix></Filter><Status>Enabled</Status><Expiration><Days>7</Days></Expiration></Rule></LifecycleConfiguration>";
    let put = http_request(&moto.addr(), "PUT", "/shared?lifecycle", theirs).unwrap();
    assert_eq!(put.status, 200, "{}", put.body);

    let out = objstore_init(&moto, "s3://shared/cluster-1");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "bucket=shared created=false lifecycle_rule=added",
        "{out:?}"
    );
    let lifecycle = http_get(&moto.addr(), "/shared?lifecycle").unwrap().body;
    assert!(
        lifecycle.contains("expire-tmp")
            && lifecycle.contains("strata-abort-incomplete-multipart")
            && lifecycle.contains("<Prefix>cluster-1/</Prefix>"),
        "{lifecycle}"
    );
}

#[test]
fn wrong_credentials_stop_the_broker_naming_the_fix_and_an_unreachable_endpoint_does_not() {
    let moto = MotoServer::start_authenticating();
    let stderr = start_fails(&moto.endpoint, "s3://any/strata", &[]);
    assert!(
        stderr.contains("access denied") && stderr.contains("check credentials"),
        "stderr: {stderr}"
    );

    // Nothing listens there: the broker starts all the same, says so, and serves.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let broker = Broker::start(
        BrokerOpts::new()
            .env("STRATA_OBJECT_STORE", "s3://any/strata")
            .env("STRATA_OBJECT_STORE_ENDPOINT", &endpoint)
            .env("STRATA_OBJECT_STORE_REGION", REGION)
            .env("STRATA_OBJECT_STORE_ALLOW_HTTP", "true")
            .env("STRATA_OBJECT_STORE_ACCESS_KEY_ID", "test")
            .env("STRATA_OBJECT_STORE_SECRET_ACCESS_KEY", "test")
            .env("STRATA_OBJECT_STORE_RETRY_TIMEOUT_MS", "1000"),
    );
    assert!(
        broker
            .output()
            .contains("object store unreachable: serving the local log"),
        "{}",
        broker.output()
    );
    assert_eq!(broker.metric("strata_object_store_reachable"), 0.0);
    broker.create_topic("local", 1, &[]).unwrap();
}
