//! The admin HTTP endpoint: `/metrics`, `/healthz`, `/readyz`, the operator routes, the JSON
//! views of the cluster ([`views`], [`transactions`], [`security_view`]), built from every
//! broker's part ([`peers`]), the changes the console makes ([`actions`], [`offsets`],
//! [`transactions`]), and the console that shows them ([`console`]).

pub mod actions;
pub mod console;
pub mod http;
pub mod members;
pub mod offsets;
pub mod peers;
pub mod security_view;
pub mod transactions;
pub mod views;
