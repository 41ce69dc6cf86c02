//! The admin HTTP endpoint: `/metrics`, `/healthz`, `/readyz`, the operator routes, the JSON
//! views of the cluster ([`views`]), built from every broker's part ([`peers`]), and the
//! console that shows them ([`console`]).

pub mod actions;
pub mod console;
pub mod http;
pub mod peers;
pub mod views;
