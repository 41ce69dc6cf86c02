//! PushTelemetry (KIP-714): a client's metrics, kept for `/metrics` (see `telemetry/`).

use kafka_protocol::messages::{PushTelemetryRequest, PushTelemetryResponse};

use crate::broker::Broker;
use crate::telemetry::Push;

pub fn handle(broker: &Broker, req: PushTelemetryRequest) -> PushTelemetryResponse {
    let push = Push {
        client_instance_id: req.client_instance_id,
        subscription_id: req.subscription_id,
        terminating: req.terminating,
        compression_type: req.compression_type,
        metrics: &req.metrics,
    };
    let code = match broker.telemetry.push(&push, broker.node.clock.instant()) {
        Ok(()) => 0,
        Err(code) => {
            tracing::debug!(?code, "client telemetry push refused");
            code.code()
        }
    };
    PushTelemetryResponse::default().with_error_code(code)
}
