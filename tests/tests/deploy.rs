//! The deployment files under `deploy/` are exercised, not only written: the EC2 systemd unit
//! passes `systemd-analyze verify` against this build's binary and keeps the settings a broker
//! needs, and the example configuration is what `strata serve --check-config` accepts.

use std::path::{Path, PathBuf};
use std::process::Command;

use strata_tests::strata_bin;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

fn check_config(config: &Path) -> std::process::Output {
    Command::new(strata_bin())
        .args(["serve", "--config"])
        .arg(config)
        .arg("--check-config")
        .env("RUST_BACKTRACE", "0")
        .env("STRATA_LOG", "error")
        .output()
        .expect("run strata serve --check-config")
}

#[test]
fn the_ec2_unit_verifies_and_keeps_what_a_broker_needs() {
    let text = std::fs::read_to_string(repo().join("deploy/ec2/strata.service")).unwrap();
    for needed in [
        "ExecStartPre=/usr/local/bin/strata serve --config /etc/strata/strata.toml --check-config",
        "ExecStart=/usr/local/bin/strata serve --config /etc/strata/strata.toml",
        "KillSignal=SIGTERM",
        "Restart=on-failure",
        "LimitNOFILE=1048576",
        "StateDirectory=strata",
        "User=strata",
    ] {
        assert!(text.contains(needed), "the unit lacks {needed}");
    }
    let stop: u64 = (text.lines())
        .find_map(|l| l.strip_prefix("TimeoutStopSec="))
        .and_then(|v| v.trim().parse().ok())
        .expect("TimeoutStopSec in seconds");
    assert!(
        stop >= 120,
        "TimeoutStopSec={stop}: too short for a controlled shutdown"
    );

    // systemd-analyze checks that the commands exist: point them at this build.
    let dir = tempfile::tempdir().unwrap();
    let unit = dir.path().join("strata.service");
    let bin = strata_bin();
    std::fs::write(
        &unit,
        text.replace("/usr/local/bin/strata", &bin.display().to_string()),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
        .expect("systemd-analyze (Debian's systemd package) runs");
    // It reports a line it cannot parse on stderr and still exits 0: both must be clean.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "systemd-analyze verify: {stderr}"
    );

    // And it does catch a broken unit, so the check above can fail.
    let broken = dir.path().join("broken.service");
    std::fs::write(&broken, text.replace("Type=exec", "Type=bogus")).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&broken)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("bogus"));
}

#[test]
fn the_example_configuration_is_accepted_and_broken_ones_are_refused_with_the_cause() {
    let out = check_config(&repo().join("deploy/ec2/strata.toml"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        "configuration ok: node_id=1",
        "data_dir=/var/lib/strata",
        "voters=1@10.0.1.11:9093,2@10.0.2.11:9093,3@10.0.3.11:9093",
        "object_store=s3://my-strata-bucket/cluster-1",
        "rack=us-east-1a",
    ] {
        assert!(stdout.contains(expected), "{expected} not in: {stdout}");
    }

    let dir = tempfile::tempdir().unwrap();
    for (text, cause) in [
        ("node_idd = 3\n", "unknown field `node_idd`"),
        ("node_id = \"one\"\n", "node_id"),
        ("voters = \"1@nowhere\"\n", "not host:port"),
        (
            "admin_security_protocol = \"SSL\"\n",
            "ssl_certificate_location",
        ),
        ("node_id = [\n", "strata.toml"),
    ] {
        let path = dir.path().join("strata.toml");
        std::fs::write(&path, text).unwrap();
        let out = check_config(&path);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "accepted: {text}");
        assert!(stderr.contains(cause), "{text:?}: {stderr}");
    }
}

#[test]
fn the_iam_policy_grants_exactly_the_s3_actions_the_store_issues_on_its_prefix() {
    let text = std::fs::read_to_string(repo().join("deploy/ec2/iam-policy.json")).unwrap();
    let policy: serde_json::Value = serde_json::from_str(&text).expect("the policy is JSON");
    assert_eq!(policy["Version"], "2012-10-17");
    let statements = policy["Statement"].as_array().expect("statements");
    let mut granted = std::collections::BTreeMap::new();
    for s in statements {
        assert_eq!(s["Effect"], "Allow");
        let resource = s["Resource"].as_str().expect("one resource per statement");
        for action in s["Action"].as_array().expect("an action list") {
            let action = action.as_str().unwrap().to_string();
            assert!(!action.contains('*'), "a wildcard action: {action}");
            granted.insert(action, resource.to_string());
        }
    }
    let needed: std::collections::BTreeSet<String> = (strata_objstore::Op::ALL.iter())
        .map(|op| op.s3_action().to_string())
        .collect();
    let given: std::collections::BTreeSet<String> = granted.keys().cloned().collect();
    assert_eq!(
        given, needed,
        "the policy must grant what the store issues, and nothing more"
    );
    // Listing is a bucket action, limited to the cluster's prefix; the rest act on objects
    // under the prefix only.
    assert_eq!(granted["s3:ListBucket"], "arn:aws:s3:::my-strata-bucket");
    let list = statements
        .iter()
        .find(|s| s["Action"][0] == "s3:ListBucket")
        .unwrap();
    assert_eq!(
        list["Condition"]["StringLike"]["s3:prefix"],
        serde_json::json!(["cluster-1", "cluster-1/*"])
    );
    for (action, resource) in &granted {
        if action != "s3:ListBucket" {
            assert_eq!(
                resource, "arn:aws:s3:::my-strata-bucket/cluster-1/*",
                "{action}"
            );
        }
    }
    // The example configuration names the same bucket and prefix.
    let config = std::fs::read_to_string(repo().join("deploy/ec2/strata.toml")).unwrap();
    assert!(config.contains("object_store = \"s3://my-strata-bucket/cluster-1\""));
}
