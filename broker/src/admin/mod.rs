//! The admin HTTP endpoint: `/metrics`, `/healthz`, `/readyz` and the operator routes.

pub mod http;
