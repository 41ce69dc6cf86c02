//! Client telemetry (KIP-714): librdkafka asks for a subscription and pushes its metrics;
//! the chosen ones appear on `/metrics` per client. Bad pushes get Kafka's codes.

use std::time::Duration;

use kafka_protocol::messages::{GetTelemetrySubscriptionsRequest, PushTelemetryRequest};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use strata_tests::{unique_topic, wait_for, Broker, BrokerOpts, KafkaConn};

fn broker() -> Broker {
    Broker::start(
        BrokerOpts::new()
            .env("STRATA_CLIENT_TELEMETRY_METRICS", "org.apache.kafka.")
            .env("STRATA_CLIENT_TELEMETRY_INTERVAL_MS", 1000),
    )
}

#[test]
fn librdkafka_pushes_its_metrics_and_they_appear_per_client() {
    let broker = broker();
    let topic = unique_topic("telemetry");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let mut cfg = broker.producer_config();
    cfg.set("client.id", "telemetry-app")
        .set("enable.metrics.push", "true");
    let producer: BaseProducer = cfg.create().unwrap();
    let series = |broker: &Broker| {
        broker
            .metrics()
            .lines()
            .filter(|l| {
                l.starts_with("strata_client_telemetry{")
                    && l.contains("client_id=\"telemetry-app\"")
            })
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    wait_for(
        "the producer's pushed metrics on /metrics",
        Duration::from_secs(60),
        || {
            let _ = producer.send(BaseRecord::<(), _>::to(&topic).payload("x"));
            producer.poll(Duration::from_millis(200));
            !series(&broker).is_empty()
        },
    );
    let lines = series(&broker);
    eprintln!("{} series, e.g. {}", lines.len(), lines[0]);
    assert!(
        lines
            .iter()
            .all(|l| l.contains("metric=\"org.apache.kafka.")),
        "only the chosen metrics: {lines:?}"
    );
    producer.flush(Duration::from_secs(10)).unwrap();
}

#[test]
fn bad_pushes_get_kafkas_error_codes() {
    const UNSUPPORTED_COMPRESSION_TYPE: i16 = 76;
    const INVALID_RECORD: i16 = 87;
    const THROTTLING_QUOTA_EXCEEDED: i16 = 89;
    const UNKNOWN_SUBSCRIPTION_ID: i16 = 117;
    const TELEMETRY_TOO_LARGE: i16 = 118;
    let mut broker = broker();
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let sub = conn
        .request(0, &GetTelemetrySubscriptionsRequest::default())
        .unwrap();
    assert_eq!(sub.error_code, 0);
    assert!(!sub.client_instance_id.is_nil(), "an instance id is given");
    assert_eq!(sub.push_interval_ms, 1000);
    assert_eq!(
        sub.requested_metrics
            .iter()
            .map(|m| m.as_str())
            .collect::<Vec<_>>(),
        ["org.apache.kafka."]
    );
    let mut push = |subscription_id: i32, compression: i8, metrics: Vec<u8>| {
        let req = PushTelemetryRequest::default()
            .with_client_instance_id(sub.client_instance_id)
            .with_subscription_id(subscription_id)
            .with_compression_type(compression)
            .with_metrics(metrics.into());
        conn.request(0, &req).unwrap().error_code
    };
    let id = sub.subscription_id;
    assert_eq!(push(id + 1, 0, vec![]), UNKNOWN_SUBSCRIPTION_ID);
    assert_eq!(push(id, 0, vec![0; 2 << 20]), TELEMETRY_TOO_LARGE);
    assert_eq!(push(id, 7, vec![]), UNSUPPORTED_COMPRESSION_TYPE);
    // Garbage that claims a huge field: refused, nothing allocated for it. Pushed once half
    // an interval has passed (sooner is THROTTLING_QUOTA_EXCEEDED).
    let mut code = THROTTLING_QUOTA_EXCEEDED;
    wait_for(
        "the interval to let a push in",
        Duration::from_secs(10),
        || {
            code = push(id, 0, b"\x0a\xff\xff\xff\xff\x0f".to_vec());
            code != THROTTLING_QUOTA_EXCEEDED
        },
    );
    assert_eq!(code, INVALID_RECORD);
    broker.assert_running();
}
