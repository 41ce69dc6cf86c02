//! The admin HTTP listener: health, readiness, Prometheus metrics and the process's usage.

use std::time::Duration;

use strata_tests::{
    parse_prometheus, unique_topic, wait_for_some, Broker, Sample, TrackingProducer,
};

#[test]
fn healthz_and_readyz_answer_200() {
    let broker = Broker::start_default();
    for path in ["/healthz", "/readyz"] {
        let r = broker.admin_get(path).unwrap();
        assert_eq!(r.status, 200, "GET {path}: {}", r.body);
    }
    let r = broker.admin_get("/metrics").unwrap();
    assert_eq!(r.status, 200);
    // The process's usage without a scrape: what `strata perf --broker-admin` reads.
    let r = broker.admin_get("/v1/process").unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let usage: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert!(
        usage["cpu_seconds"].as_f64().is_some_and(|c| c > 0.0),
        "{usage}"
    );
    assert!(
        usage["open_fds"].as_u64().is_some_and(|n| n >= 3),
        "{usage}"
    );
    assert!(usage["resident_bytes"].as_u64().is_some(), "{usage}");
}

fn request_count(samples: &[Sample], api: &str) -> f64 {
    samples
        .iter()
        .filter(|s| {
            s.name.contains("request")
                && !s.name.contains("duration")
                && !s.name.contains("bad")
                && s.labels.iter().any(|(_, v)| v.eq_ignore_ascii_case(api))
        })
        .map(|s| s.value)
        .sum()
}

#[test]
fn metrics_count_requests_per_api_and_expose_log_end_offsets_per_partition() {
    let broker = Broker::start_default();
    let topic = unique_topic("metrics");
    broker.create_topic(&topic, 2, &[]).unwrap();
    let producer = TrackingProducer::new(&broker.producer_config());
    for i in 0..30 {
        let p = if i < 20 { 0 } else { 1 };
        producer.send(
            i,
            &topic,
            Some(p),
            format!("k{i}").as_bytes(),
            b"v",
            &[],
            None,
        );
    }
    producer.flush(Duration::from_secs(30));
    producer.all_delivered(30);
    broker.consume_n(&topic, &[0, 1], 30, Duration::from_secs(30));

    let samples = wait_for_some(
        "metrics to show the produced records",
        Duration::from_secs(10),
        || {
            let samples = parse_prometheus(&broker.metrics());
            let leo = |p: &str| {
                samples
                    .iter()
                    .find(|s| {
                        s.name.contains("log_end_offset")
                            && s.label("topic") == Some(topic.as_str())
                            && s.label("partition") == Some(p)
                    })
                    .map(|s| s.value)
            };
            (leo("0") == Some(20.0) && leo("1") == Some(10.0)).then_some(samples)
        },
    );
    for api in [
        "Produce",
        "Fetch",
        "Metadata",
        "ApiVersions",
        "CreateTopics",
    ] {
        let n = request_count(&samples, api);
        assert!(
            n >= 1.0,
            "no request counter for {api} in /metrics (sum {n})"
        );
    }
}
