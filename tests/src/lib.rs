//! Test harness for Strata: starts real `strata serve` processes on free ports and drives them
//! with real Kafka clients (librdkafka through `rdkafka`) and hand-made `kafka-protocol` frames.
//!
//! Every test gets its own broker and data dir, so tests run in parallel. Waits are on
//! conditions with deadlines ([`util::wait_until`]), never bare sleeps. A failing test prints
//! the broker's stdout and stderr (see [`Broker`]'s `Drop`).

// The harness waits on real processes in real time.
#![allow(clippy::disallowed_methods)]

pub mod broker;
pub mod capture;
pub mod certs;
pub mod clients;
pub mod cluster;
pub mod groups;
pub mod history;
pub mod http;
pub mod netsplit;
pub mod outage;
pub mod proxy;
pub mod raw;
pub mod reassign;
pub mod s3;
pub mod tokens;
pub mod util;

pub use broker::{strata_bin, Broker, BrokerOpts};
pub use capture::CaptureProxy;
pub use clients::{
    block_on, by_partition, read_to_end, ConsumedRecord, Delivery, TrackingProducer,
};
pub use cluster::Cluster;
pub use http::{http_get, http_request, http_request_with, parse_prometheus, HttpResponse, Sample};
pub use netsplit::NetSplit;
pub use proxy::FaultProxy;
pub use raw::{encode_batch, topic_name, Idempotence, KafkaConn, QuorumAnswer, RawRecord};
pub use util::{
    join_within, now_ms, poll_until, repo_root, unique_topic, venv_python, wait_for, wait_for_some,
    wait_until, Rng, Steady,
};
