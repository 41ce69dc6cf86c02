//! `strata serve` and its object store: the single-node default is a directory under the data
//! dir; an S3 bucket is checked at start, and a missing one stops the broker with a clear error.

use std::process::{Command, Stdio};
use std::time::Duration;

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

#[test]
fn a_missing_bucket_stops_the_broker_with_a_clear_error() {
    let moto = MotoServer::start();
    let data = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(strata_bin());
    cmd.args([
        "serve",
        "--kafka-addr",
        "127.0.0.1:0",
        "--admin-addr",
        "127.0.0.1:0",
    ])
    .arg("--data-dir")
    .arg(data.path())
    .args(["--object-store", "s3://no-such-bucket/strata"])
    .env("STRATA_OBJECT_STORE_ENDPOINT", &moto.endpoint)
    .env("STRATA_OBJECT_STORE_REGION", REGION)
    .env("STRATA_OBJECT_STORE_ALLOW_HTTP", "true")
    .env("STRATA_OBJECT_STORE_ACCESS_KEY_ID", "test")
    .env("STRATA_OBJECT_STORE_SECRET_ACCESS_KEY", "test")
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
        panic!("strata kept running with a missing bucket");
    }
    let status = status.expect("exited");
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!status.success());
    assert!(
        stderr.contains("no-such-bucket") && stderr.contains("does not exist"),
        "stderr: {stderr}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("READY"));
}
