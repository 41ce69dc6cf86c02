//! The admin HTTP endpoint: `/metrics`, `/healthz`, `/readyz`, the operator routes, the JSON
//! views of the cluster ([`views`]) and the console that shows them ([`console`]).

pub mod console;
pub mod http;
pub mod views;
