//! The admin HTTP endpoint (`/metrics`, `/healthz`, `/readyz`) and the broker's metrics.

pub mod http;
pub mod metrics;
