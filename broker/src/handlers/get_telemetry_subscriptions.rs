//! GetTelemetrySubscriptions (KIP-714): which metrics the client is to push, and how often
//! (see `telemetry/`). Any client may ask, as in Kafka.

use kafka_protocol::messages::{
    GetTelemetrySubscriptionsRequest, GetTelemetrySubscriptionsResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::broker::Broker;
use crate::telemetry::ACCEPTED_COMPRESSION;

pub fn handle(
    broker: &Broker,
    req: GetTelemetrySubscriptionsRequest,
    client_id: &str,
) -> GetTelemetrySubscriptionsResponse {
    let s = (broker.telemetry).subscribe(
        req.client_instance_id,
        client_id,
        broker.node.clock.instant(),
    );
    GetTelemetrySubscriptionsResponse::default()
        .with_client_instance_id(s.client_instance_id)
        .with_subscription_id(s.subscription_id)
        .with_accepted_compression_types(ACCEPTED_COMPRESSION.to_vec())
        .with_push_interval_ms(s.push_interval_ms)
        .with_telemetry_max_bytes(s.telemetry_max_bytes)
        .with_delta_temporality(false)
        .with_requested_metrics(
            (s.requested_metrics.into_iter())
                .map(StrBytes::from_string)
                .collect(),
        )
}
