//! Iceberg topics: a topic with `iceberg.mode` set is also an Apache Iceberg table (format v2,
//! Parquet data files) in the object store, under `iceberg.warehouse`, that query engines read
//! directly, through the REST catalog on the admin port ([`rest`]) or by metadata location.
//!
//! - [`layout`]: the table's columns, partition spec and location; records as Arrow rows;
//! - [`translate`]: the rounds that read committed records through the tier's read path and
//!   write and commit data files;
//! - [`catalog`]: the tables as the metadata quorum holds them, and the compare-and-set commit;
//! - [`storage`]: the Iceberg crate's file I/O over the broker's object store client;
//! - [`rest`]: the Iceberg REST catalog's read endpoints.
//!
//! Invariants (docs/invariants.md 12): the table holds a partition's records of committed
//! transactions and plain records only (no control record, no aborted one), each offset at
//! most once, in offset order within a data file, and every offset below the partition's
//! table offset that was readable when translated; see [`catalog`] for how commits keep it.

pub mod catalog;
pub mod layout;
pub mod metrics;
pub mod rest;
pub mod storage;
pub mod translate;

use std::sync::Arc;

use strata_objstore::Store;

use crate::node::Node;
use crate::tier::Tier;

#[derive(Debug, thiserror::Error)]
pub enum IcebergError {
    #[error("iceberg: {0}")]
    Iceberg(#[from] iceberg::Error),
    #[error("reading the log: {0}")]
    Read(String),
    #[error("{0}")]
    Io(String),
    #[error("iceberg.mode={0} is not supported yet")]
    Unsupported(String),
    #[error("the topic or its table is gone")]
    Gone,
}

/// The catalog and the translator of one broker.
pub struct Iceberg {
    pub catalog: Arc<catalog::TableCatalog>,
    pub translator: Arc<translate::Translator>,
    pub metrics: Arc<metrics::IcebergMetrics>,
}

impl Iceberg {
    pub fn new(node: Arc<Node>, tier: Arc<Tier>, store: Store) -> Result<Iceberg, IcebergError> {
        let metrics = Arc::new(metrics::IcebergMetrics::default());
        let m = metrics.clone();
        node.metrics.register(|registry| m.register(registry));
        let catalog = Arc::new(catalog::TableCatalog::new(node.clone(), store));
        let translator = Arc::new(translate::Translator::new(
            node,
            tier,
            catalog.clone(),
            metrics.clone(),
        )?);
        Ok(Iceberg {
            catalog,
            translator,
            metrics,
        })
    }
}
