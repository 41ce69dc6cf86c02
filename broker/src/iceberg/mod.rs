//! Iceberg topics: a topic with `iceberg.mode` set is also an Apache Iceberg table (format v2,
//! Parquet data files) in the object store, under `iceberg.warehouse`, that query engines read
//! directly, through the REST catalog on the admin port ([`rest`]) or by metadata location.
//!
//! - [`layout`]: the table's columns, partition spec and location; records as Arrow rows;
//! - [`translate`]: the rounds that read committed records through the tier's read path and
//!   write and commit data files;
//! - [`value`]: `value_json` values decoded into typed columns, the dead letters sorted out,
//!   and how the value schema may evolve;
//! - [`catalog`]: the tables as the metadata quorum holds them, and the compare-and-set commit;
//! - [`storage`]: the Iceberg crate's file I/O over the broker's object store client;
//! - [`rest`]: the Iceberg REST catalog's read endpoints.
//!
//! Invariants (docs/invariants.md 17): the table holds a partition's records of committed
//! transactions and plain records only (no control record, no aborted one), each offset at
//! most once, in offset order within a data file, and every offset below the partition's
//! table offset that was readable when translated; see [`catalog`] for how commits keep it.

pub mod catalog;
pub mod error;
pub mod layout;
pub mod metrics;
pub mod rest;
pub mod status;
pub mod storage;
pub mod translate;
pub mod value;

use std::sync::Arc;

use strata_objstore::Store;

use crate::node::Node;
use crate::tier::Tier;
pub use error::IcebergError;
use layout::TableKind;

/// The catalog and the translator of one broker.
pub struct Iceberg {
    node: Arc<Node>,
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
            node.clone(),
            tier,
            catalog.clone(),
            metrics.clone(),
        )?);
        Ok(Iceberg {
            node,
            catalog,
            translator,
            metrics,
        })
    }
}

impl Iceberg {
    pub fn node(&self) -> &Arc<Node> {
        &self.node
    }

    /// Starts the topic's table over: its files are deleted and the quorum forgets it, so the
    /// next round creates it again and translates every record the tiers still hold. For a
    /// table deleted by hand, or to rebuild one from the whole history.
    pub async fn rewrite(&self, topic: &str) -> Result<(), IcebergError> {
        let state = self.node.metadata.state();
        let info = (state.topic(topic).cloned())
            .ok_or_else(|| IcebergError::Refused(format!("no topic {topic}")))?;
        if crate::topic_config::IcebergMode::of(&info.configs).is_none() {
            return Err(IcebergError::Refused(format!(
                "topic {topic} has no iceberg.mode set: nothing would write its table again"
            )));
        }
        for kind in [TableKind::Topic, TableKind::Dlq] {
            self.catalog.delete_files(&info, kind).await?;
            self.forget(topic, kind).await?;
        }
        tracing::info!(topic, "Iceberg table rewrite: the table starts over");
        Ok(())
    }

    /// Makes the quorum forget one of the topic's tables, whatever it names now.
    async fn forget(&self, topic: &str, kind: TableKind) -> Result<(), IcebergError> {
        // A round may commit meanwhile: forget whatever the table is now.
        for _ in 0..10 {
            let state = self.node.metadata.state();
            let Some(info) = state.topic(topic) else {
                return Err(IcebergError::Gone);
            };
            let Some(t) = kind.pointer(info) else {
                return Ok(());
            };
            match self.catalog.forget(info, kind, t.location.clone()).await {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == iceberg::ErrorKind::CatalogCommitConflicts => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(IcebergError::Refused(
            "the table kept changing; try again".into(),
        ))
    }
}
