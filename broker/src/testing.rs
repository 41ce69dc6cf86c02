//! A real single-node broker core for unit tests: the metadata quorum (raft over loopback, in a
//! temporary directory), this broker registered and unfenced, and a [`Node`] on the clock the
//! test hands in, so a test drives a subsystem (the group coordinator, the transaction
//! coordinator) through timeouts by moving a manual clock instead of sleeping.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use strata_metadata::{Endpoint, Metadata, MetadataOptions};
use tempfile::TempDir;
use tokio::net::TcpListener;

use crate::clock::Clock;
use crate::config::BrokerConfig;
use crate::metrics::Metrics;
use crate::node::Node;

/// The node, and the directory it lives in (removed when dropped).
pub struct TestNode {
    pub node: Arc<Node>,
    _dir: TempDir,
}

/// Opens a one-node cluster on `clock` with `cfg` (its `data_dir` and `node_id` are set here)
/// and waits until this broker is registered and unfenced.
pub async fn single_node(clock: Clock, cfg: BrokerConfig) -> TestNode {
    let dir = tempfile::tempdir().expect("temporary directory");
    let cfg = BrokerConfig {
        node_id: 1,
        data_dir: dir.path().to_path_buf(),
        ..cfg
    };
    let metadata = Metadata::open(MetadataOptions {
        node_id: 1,
        dir: dir.path().join("metadata"),
        listener: TcpListener::bind("127.0.0.1:0").await.expect("bind"),
        voters: BTreeMap::from([(1, "127.0.0.1:0".to_string())]),
        advertised: None,
        session_timeout: Duration::from_secs(30),
        leader_balance: None,
        tls: None,
    })
    .await
    .expect("open the metadata quorum");
    let endpoints = vec![Endpoint {
        name: "PLAINTEXT".into(),
        host: "127.0.0.1".into(),
        port: 9092,
    }];
    let node = Arc::new(Node::new(
        cfg,
        endpoints,
        "PLAINTEXT".into(),
        None,
        metadata,
        Metrics::new(),
        clock,
    ));
    let epoch = crate::session::register(&node).await.expect("register");
    crate::session::wait_unfenced(&node, epoch)
        .await
        .expect("unfenced");
    TestNode { node, _dir: dir }
}
