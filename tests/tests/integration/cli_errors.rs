//! Errors reach people as one line naming the cause and what to do, never a backtrace,
//! whatever `RUST_BACKTRACE` says (`--debug` adds one); a `STRATA_*` variable that names no
//! setting is pointed out rather than silently ignored.

use std::process::{Command, Output};

use strata_tests::{strata_bin, unique_topic, Broker};

fn strata(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(strata_bin())
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run strata")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_failing_command_prints_one_line_whatever_rust_backtrace_says() {
    let broker = Broker::start_default();
    let missing = unique_topic("missing");
    let describe = ["topic", "describe", &missing, "-b", &broker.kafka_addr];
    let out = strata(&describe, &[("RUST_BACKTRACE", "full")]);
    assert!(!out.status.success());
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    assert!(lines[0].starts_with("error: "), "{err}");
    assert!(lines[0].contains(&missing), "names the topic: {err}");

    // --debug: the whole story, backtrace included.
    let mut debug = vec!["--debug"];
    debug.extend(describe);
    let err = stderr(&strata(&debug, &[]));
    assert!(err.contains("acktrace"), "{err}");

    // A port in use: the server says which, why, and the setting that moves it.
    let data = tempfile::tempdir().unwrap();
    let out = strata(
        &[
            "serve",
            "--kafka-addr",
            &broker.kafka_addr,
            "--admin-addr",
            "127.0.0.1:0",
        ]
        .into_iter()
        .chain(["--raft-addr", "127.0.0.1:0", "--data-dir"])
        .chain([data.path().to_str().unwrap()])
        .collect::<Vec<_>>(),
        &[("RUST_BACKTRACE", "1"), ("STRATA_LOG", "error")],
    );
    assert!(!out.status.success());
    let err = stderr(&out);
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: cannot listen for Kafka")
            && last.contains(&broker.kafka_addr)
            && last.contains("--kafka-addr"),
        "{err}"
    );
    assert!(!err.contains("acktrace"), "{err}");
}

#[test]
fn a_strata_variable_that_names_no_setting_is_pointed_out() {
    let out = strata(
        &["serve", "--check-config"],
        &[("STRATA_NUM_PARTITONS", "3"), ("STRATA_LOG", "error")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "STRATA_NUM_PARTITONS names no setting (did you mean STRATA_NUM_PARTITIONS?): ignored"
        ),
        "{text}"
    );
    assert!(text.contains("configuration ok"), "{text}");
}
