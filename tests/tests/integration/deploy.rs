//! The deployment files under `deploy/` are exercised, not only written: the EC2 systemd unit
//! passes `systemd-analyze verify` against this build's binary and keeps the settings a broker
//! needs, and the example configuration is what `strata serve --check-config` accepts.

use std::path::Path;
use std::process::Command;

use strata_tests::{repo_root, strata_bin, venv_python};

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
    let text = std::fs::read_to_string(repo_root().join("deploy/ec2/strata.service")).unwrap();
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
    let out = check_config(&repo_root().join("deploy/ec2/strata.toml"));
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
    let text = std::fs::read_to_string(repo_root().join("deploy/ec2/iam-policy.json")).unwrap();
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
    let config = std::fs::read_to_string(repo_root().join("deploy/ec2/strata.toml")).unwrap();
    assert!(config.contains("object_store = \"s3://my-strata-bucket/cluster-1\""));
}

fn promtool(args: &[&str], dir: &Path) -> std::process::Output {
    Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("promtool (Debian's prometheus package) runs")
}

#[test]
fn the_alert_rules_pass_promtool_and_every_alert_has_unit_tests() {
    let monitoring = repo_root().join("deploy/monitoring");
    let check = promtool(&["check", "rules", "alerts.yml"], &monitoring);
    assert!(
        check.status.success(),
        "promtool check rules: {}",
        String::from_utf8_lossy(&check.stderr)
    );
    let test = promtool(&["test", "rules", "alerts.test.yml"], &monitoring);
    assert!(
        test.status.success(),
        "promtool test rules: {}{}",
        String::from_utf8_lossy(&test.stdout),
        String::from_utf8_lossy(&test.stderr)
    );

    // Every alert is named by a test case (each has firing and quiet cases in the file).
    let rules = std::fs::read_to_string(monitoring.join("alerts.yml")).unwrap();
    let tests = std::fs::read_to_string(monitoring.join("alerts.test.yml")).unwrap();
    let alerts: Vec<&str> = (rules.lines())
        .filter_map(|l| l.trim().strip_prefix("- alert:"))
        .map(str::trim)
        .collect();
    assert!(alerts.len() >= 10, "{alerts:?}");
    for alert in &alerts {
        assert!(
            tests.contains(&format!("alertname: {alert}")),
            "{alert} has no promtool test"
        );
    }

    // The unit tests can fail: a disk alert moved from 80 % to 90 % breaks them.
    let dir = tempfile::tempdir().unwrap();
    assert!(rules.contains("> 0.8"), "the disk alert's threshold");
    std::fs::write(
        dir.path().join("alerts.yml"),
        rules.replace("> 0.8", "> 0.9"),
    )
    .unwrap();
    std::fs::write(dir.path().join("alerts.test.yml"), &tests).unwrap();
    let test = promtool(&["test", "rules", "alerts.test.yml"], dir.path());
    assert!(!test.status.success(), "a wrong threshold passed the tests");
}

/// Every `expr` string anywhere in a Grafana dashboard.
fn exprs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("expr", serde_json::Value::String(e)) => out.push(e.clone()),
                    _ => exprs(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| exprs(v, out)),
        _ => {}
    }
}

/// The `strata_*` names a query mentions.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("strata_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

#[test]
fn the_dashboard_and_alerts_query_only_metrics_a_running_broker_exports() {
    let broker = strata_tests::Broker::start_default();
    let text = broker.metrics();
    // Families by their `# TYPE` line (present even before a first sample), as Prometheus
    // names their series.
    let mut exported = std::collections::BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').unwrap();
        match kind {
            "counter" => {
                exported.insert(format!("{name}_total"));
            }
            "histogram" => {
                for suffix in ["_bucket", "_sum", "_count"] {
                    exported.insert(format!("{name}{suffix}"));
                }
            }
            _ => {
                exported.insert(name.to_string());
            }
        }
    }
    assert!(exported.contains("strata_log_dir_available_bytes"));

    let monitoring = repo_root().join("deploy/monitoring");
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(monitoring.join("grafana/strata.json")).unwrap(),
    )
    .expect("the dashboard is JSON");
    let mut queries = Vec::new();
    exprs(&dashboard, &mut queries);
    assert!(queries.len() >= 20, "{} queries", queries.len());
    // The alert rules whole: their expressions, and the metrics their descriptions name.
    queries.push(std::fs::read_to_string(monitoring.join("alerts.yml")).unwrap());
    let mut unknown = std::collections::BTreeSet::new();
    for q in &queries {
        for name in metric_names(q) {
            if !exported.contains(&name) {
                unknown.insert(name);
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "queried but not exported by /metrics: {unknown:?}"
    );
    // The lag page: records, seconds and the trend.
    let all = queries.join("\n");
    for lag in [
        "strata_consumer_lag_records",
        "strata_consumer_lag_seconds",
        "strata_consumer_lag_trend_records_per_second",
    ] {
        assert!(all.contains(lag), "the dashboard lacks {lag}");
    }
}

#[test]
fn the_kubernetes_manifests_validate_offline_and_keep_their_invariants() {
    // scripts/test.sh installs kubernetes-validate into its venv and names that python.
    let python = venv_python();
    let checker = repo_root().join("scripts/check-kubernetes.py");
    let out = Command::new(&python)
        .arg(&checker)
        .output()
        .expect("run scripts/check-kubernetes.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("ok: "),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The checker fails a StatefulSet whose pods would wait for each other forever.
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(repo_root().join("deploy/kubernetes")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
    }
    let sts = dir.path().join("statefulset.yaml");
    let text = std::fs::read_to_string(&sts).unwrap();
    assert!(text.contains("podManagementPolicy: Parallel"));
    std::fs::write(
        &sts,
        text.replace(
            "podManagementPolicy: Parallel",
            "podManagementPolicy: OrderedReady",
        ),
    )
    .unwrap();
    let out = Command::new(&python)
        .arg(&checker)
        .arg(dir.path())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(said.contains("FAIL podManagementPolicy"), "{said}");
}
