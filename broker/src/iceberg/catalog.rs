//! The catalog of topic tables: namespace `strata`, one table per topic with `iceberg.mode`
//! set, named as the topic, and for a `value_json` topic that met a value not fitting its
//! schema, its dead-letter table `<topic>~dlq`. A table's current metadata file and each
//! partition's next offset are held by the metadata quorum (`TopicInfo::iceberg`,
//! `TopicInfo::iceberg_dlq`), so every broker sees one table and a commit is a compare-and-set
//! through the quorum.
//!
//! Invariants (docs/invariants.md 17):
//! - a commit lands only on the metadata file it was built on: two brokers committing at once
//!   cannot both win, and the loser's commit is rebuilt on the winner's table
//!   ([`iceberg::transaction::Transaction`] retries a [`ErrorKind::CatalogCommitConflicts`]);
//! - a commit's snapshot names, in its summary (`strata.ranges`), the offsets its files hold;
//!   the quorum takes them only where each continues its partition, so an offset enters the
//!   table once (a retried, duplicated or stale translation is refused whole);
//! - a metadata file is deleted only when the quorum definitely refused it, or when a later
//!   one the quorum took no longer names it in its log; a data file never here (after an
//!   unanswered proposal it may be in the table).

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;
use std::sync::Arc;

use async_trait::async_trait;
use iceberg::spec::{FormatVersion, TableMetadataBuilder};
use iceberg::table::Table;
use iceberg::{
    Error, ErrorKind, MetadataLocation, Namespace, NamespaceIdent, Result, TableCommit,
    TableCreation, TableIdent,
};
use strata_metadata::{Command, CommandResult, IcebergRange, TopicInfo};
use strata_objstore::Store;

use super::layout::{self, TableKind, NAMESPACE};
use crate::node::Node;

/// The snapshot summary property naming the offsets a commit covers:
/// `<partition>:<from>-<to>` (to exclusive), comma-separated.
pub const RANGES_PROPERTY: &str = "strata.ranges";

/// A commit's ranges as its summary property.
pub fn ranges_property(ranges: &[IcebergRange]) -> String {
    let parts: Vec<String> = (ranges.iter())
        .map(|r| format!("{}:{}-{}", r.partition, r.from, r.to))
        .collect();
    parts.join(",")
}

/// The snapshot summary property of a dead-letter commit naming the topic table's offsets
/// its rows were sorted against: `<partition>:<next offset>`, comma-separated (a partition
/// the table holds nothing of yet is absent).
pub const TABLE_OFFSETS_PROPERTY: &str = "strata.table-offsets";

/// Table offsets as their summary property.
pub fn offsets_property(offsets: &BTreeMap<i32, i64>) -> String {
    let parts: Vec<String> = offsets.iter().map(|(p, o)| format!("{p}:{o}")).collect();
    parts.join(",")
}

/// The offsets of a summary property; `None` when malformed.
pub fn parse_offsets(value: &str) -> Option<BTreeMap<i32, i64>> {
    (value.split(',').filter(|s| !s.is_empty()))
        .map(|part| {
            let (p, o) = part.split_once(':')?;
            Some((p.parse().ok()?, o.parse().ok()?))
        })
        .collect()
}

/// The ranges of a summary property; `None` when malformed.
pub fn parse_ranges(value: &str) -> Option<Vec<IcebergRange>> {
    (value.split(',').filter(|s| !s.is_empty()))
        .map(|part| {
            let (p, range) = part.split_once(':')?;
            let (from, to) = range.split_once('-')?;
            Some(IcebergRange {
                partition: p.parse().ok()?,
                from: from.parse().ok()?,
                to: to.parse().ok()?,
            })
        })
        .collect()
}

/// Iceberg's table properties for the metadata files a commit leaves behind: the new file
/// names the last [`PREVIOUS_VERSIONS`] in its log, and older ones are deleted.
const DELETE_AFTER_COMMIT: &str = "write.metadata.delete-after-commit.enabled";
const PREVIOUS_VERSIONS_MAX: &str = "write.metadata.previous-versions-max";
const PREVIOUS_VERSIONS: usize = 50;

pub struct TableCatalog {
    node: Arc<Node>,
    store: Store,
    io: iceberg::io::FileIO,
    warehouse: String,
}

impl std::fmt::Debug for TableCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TableCatalog({})", self.store.uri(&self.warehouse))
    }
}

fn not_found(what: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::TableNotFound, format!("no table {what}"))
}

impl TableCatalog {
    pub fn new(node: Arc<Node>, store: Store) -> TableCatalog {
        let warehouse = node.config.iceberg_warehouse.trim_matches('/').to_string();
        TableCatalog {
            node,
            io: super::storage::file_io(store.clone()),
            store,
            warehouse,
        }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The URI of the warehouse (what a reader's catalog config names).
    pub fn warehouse_uri(&self) -> String {
        self.store.uri(&self.warehouse)
    }

    pub fn namespace() -> NamespaceIdent {
        NamespaceIdent::new(NAMESPACE.to_string())
    }

    pub fn ident(topic: &str, kind: TableKind) -> TableIdent {
        TableIdent::new(Self::namespace(), kind.name(topic))
    }

    /// The topic and kind a table identifier names, when that table exists.
    fn topic_of(&self, ident: &TableIdent) -> Option<(TopicInfo, TableKind)> {
        if ident.namespace() != &Self::namespace() {
            return None;
        }
        self.table(ident.name())
    }

    /// The topic of the table named and which of its tables, if that table exists.
    pub fn table(&self, name: &str) -> Option<(TopicInfo, TableKind)> {
        let (topic, kind) = TableKind::of_name(name);
        let state = self.node.metadata.state();
        let topic = state.topic(topic)?;
        kind.pointer(topic).is_some().then(|| (topic.clone(), kind))
    }

    /// The names of the tables.
    pub fn tables(&self) -> Vec<String> {
        let state = self.node.metadata.state();
        let mut names = Vec::new();
        for t in state.topics.values() {
            for kind in [TableKind::Topic, TableKind::Dlq] {
                if kind.pointer(t).is_some() {
                    names.push(kind.name(&t.name));
                }
            }
        }
        names
    }

    /// The table as its current metadata file says, `None` before the table exists.
    pub async fn load(&self, topic: &TopicInfo, kind: TableKind) -> Result<Option<Table>> {
        let Some(t) = kind.pointer(topic) else {
            return Ok(None);
        };
        let metadata = iceberg::spec::TableMetadata::read_from(&self.io, &t.location).await?;
        Table::builder()
            .file_io(self.io.clone())
            .metadata_location(t.location.clone())
            .metadata(metadata)
            .identifier(Self::ident(&topic.name, kind))
            // Tasks the crate spawns run where the caller runs (the translator's thread, or
            // the admin server's); a table lives for one round or request, so no cache.
            .runtime(iceberg::Runtime::try_current()?)
            .disable_cache()
            .build()
            .map(Some)
    }

    /// Creates the table (format v2, the `schema`, the partition spec of
    /// [`layout::partition_spec`]) unless the quorum already names one. `mode` (the topic's
    /// `iceberg.mode`) is kept in its properties: a table written in one mode is not continued
    /// in another.
    pub async fn create(
        &self,
        topic: &TopicInfo,
        kind: TableKind,
        schema: iceberg::spec::Schema,
        mode: &str,
    ) -> Result<()> {
        let key = kind.key(&self.warehouse, &topic.name, &topic.topic_id);
        let creation = TableCreation::builder()
            .name(kind.name(&topic.name))
            .location(self.store.uri(&key))
            .schema(schema)
            .partition_spec(layout::partition_spec())
            .properties([
                ("write.format.default".to_string(), "parquet".to_string()),
                (
                    "write.parquet.compression-codec".to_string(),
                    "zstd".to_string(),
                ),
                ("strata.topic-id".to_string(), topic.topic_id.to_string()),
                (DELETE_AFTER_COMMIT.to_string(), "true".to_string()),
                (
                    PREVIOUS_VERSIONS_MAX.to_string(),
                    PREVIOUS_VERSIONS.to_string(),
                ),
                (layout::MODE_PROPERTY.to_string(), mode.to_string()),
            ])
            .format_version(FormatVersion::V2)
            .build();
        let metadata = TableMetadataBuilder::from_table_creation(creation)?
            .build()?
            .metadata;
        let location = MetadataLocation::new_with_metadata(self.store.uri(&key), &metadata);
        metadata.write_to(&self.io, &location).await?;
        let location = location.to_string();
        let none = BTreeMap::new();
        (self.propose(
            topic.topic_id,
            kind,
            &none,
            None,
            Some(location.clone()),
            Vec::new(),
        ))
        .await
        .map_err(|(e, refused)| {
            if refused {
                self.forget_file(location.clone());
            }
            e
        })
    }

    /// Deletes every object under the table's location.
    pub async fn delete_files(&self, topic: &TopicInfo, kind: TableKind) -> Result<()> {
        let key = kind.key(&self.warehouse, &topic.name, &topic.topic_id);
        self.io
            .delete_prefix(self.store.uri(&format!("{key}/")))
            .await
    }

    /// Forgets the table (its files stay where they are), from the metadata file `expected`.
    pub async fn forget(&self, topic: &TopicInfo, kind: TableKind, expected: String) -> Result<()> {
        (self
            .propose(
                topic.topic_id,
                kind,
                &BTreeMap::new(),
                Some(expected),
                None,
                Vec::new(),
            )
            .await)
            .map_err(|(e, _)| e)
    }

    /// One quorum compare-and-set; on error, whether the quorum definitely refused it.
    async fn propose(
        &self,
        topic_id: uuid::Uuid,
        kind: TableKind,
        table_offsets: &BTreeMap<i32, i64>,
        expected: Option<String>,
        location: Option<String>,
        ranges: Vec<IcebergRange>,
    ) -> std::result::Result<(), (Error, bool)> {
        let cmd = Command::CommitIcebergTable {
            topic_id,
            dlq: kind == TableKind::Dlq,
            table_offsets: table_offsets.clone(),
            expected,
            location,
            ranges,
        };
        match self.node.metadata.propose(cmd).await {
            Ok(CommandResult::Ok) => Ok(()),
            Ok(CommandResult::IcebergConflict { current }) => Err((
                Error::new(
                    ErrorKind::CatalogCommitConflicts,
                    format!("the table moved on to {current:?} meanwhile"),
                )
                .with_retryable(true),
                true,
            )),
            Ok(CommandResult::IcebergOffsetsMoved { partition, next }) => Err((
                Error::new(
                    ErrorKind::DataInvalid,
                    format!(
                        "partition {partition} of the table continues at {next:?}: these \
                         offsets were translated elsewhere"
                    ),
                ),
                true,
            )),
            Ok(other) => Err((
                Error::new(ErrorKind::Unexpected, format!("{other:?}")),
                true,
            )),
            // Maybe applied, maybe not: the table is reloaded before anything is retried.
            Err(e) => Err((
                Error::new(ErrorKind::Unexpected, format!("metadata quorum: {e}"))
                    .with_retryable(true),
                false,
            )),
        }
    }

    /// Deletes a file no table names (any more) in the background; a failure leaves it.
    pub fn forget_file(&self, location: String) {
        let io = self.io.clone();
        tokio::spawn(async move {
            if let Err(e) = io.delete(&location).await {
                tracing::debug!(%location, error = %e, "unreferenced table file not deleted");
            }
        });
    }
}

/// Of the metadata files `older`, those `log` (a new metadata file's) no longer names.
fn unnamed(mut older: Vec<String>, log: &[iceberg::spec::MetadataLog]) -> Vec<String> {
    older.retain(|f| !log.iter().any(|l| &l.metadata_file == f));
    older
}

fn unsupported(what: &str) -> Error {
    Error::new(
        ErrorKind::FeatureUnsupported,
        format!("{what}: Strata's tables follow their topics (set iceberg.mode on a topic)"),
    )
}

#[async_trait]
impl iceberg::Catalog for TableCatalog {
    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> Result<Vec<NamespaceIdent>> {
        Ok(match parent {
            None => vec![Self::namespace()],
            Some(_) => Vec::new(),
        })
    }

    async fn create_namespace(
        &self,
        _: &NamespaceIdent,
        _: HashMap<String, String>,
    ) -> Result<Namespace> {
        Err(unsupported("creating a namespace"))
    }

    async fn get_namespace(&self, namespace: &NamespaceIdent) -> Result<Namespace> {
        if namespace == &Self::namespace() {
            return Ok(Namespace::new(namespace.clone()));
        }
        Err(Error::new(
            ErrorKind::NamespaceNotFound,
            format!("no namespace {namespace:?}"),
        ))
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        Ok(namespace == &Self::namespace())
    }

    async fn update_namespace(&self, _: &NamespaceIdent, _: HashMap<String, String>) -> Result<()> {
        Err(unsupported("changing a namespace"))
    }

    async fn drop_namespace(&self, _: &NamespaceIdent) -> Result<()> {
        Err(unsupported("dropping a namespace"))
    }

    async fn list_tables(&self, namespace: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        self.get_namespace(namespace).await?;
        let names = self.tables().into_iter();
        Ok(names
            .map(|t| TableIdent::new(Self::namespace(), t))
            .collect())
    }

    async fn create_table(&self, _: &NamespaceIdent, _: TableCreation) -> Result<Table> {
        Err(unsupported("creating a table"))
    }

    async fn load_table(&self, ident: &TableIdent) -> Result<Table> {
        let (topic, kind) = self.topic_of(ident).ok_or_else(|| not_found(ident))?;
        self.load(&topic, kind)
            .await?
            .ok_or_else(|| not_found(ident))
    }

    async fn drop_table(&self, _: &TableIdent) -> Result<()> {
        Err(unsupported("dropping a table"))
    }

    async fn purge_table(&self, _: &TableIdent) -> Result<()> {
        Err(unsupported("purging a table"))
    }

    async fn table_exists(&self, ident: &TableIdent) -> Result<bool> {
        Ok(self.topic_of(ident).is_some())
    }

    async fn rename_table(&self, _: &TableIdent, _: &TableIdent) -> Result<()> {
        Err(unsupported("renaming a table"))
    }

    async fn register_table(&self, _: &TableIdent, _: String) -> Result<Table> {
        Err(unsupported("registering a table"))
    }

    /// Applies the commit to the table as the quorum names it now, writes the new metadata
    /// file and moves the quorum's pointer to it if it still names the one applied to.
    async fn update_table(&self, commit: TableCommit) -> Result<Table> {
        let ident = commit.identifier().clone();
        let (topic, kind) = self.topic_of(&ident).ok_or_else(|| not_found(&ident))?;
        let current = (self.load(&topic, kind).await?).ok_or_else(|| not_found(&ident))?;
        let before = current.metadata().current_snapshot_id();
        let expected = current.metadata_location_result()?.to_string();
        let mut older: Vec<String> = (current.metadata().metadata_log().iter())
            .map(|l| l.metadata_file.clone())
            .collect();
        older.push(expected.clone());
        // Built on an older snapshot than the current one: the transaction rebuilds it.
        let staged = commit.apply(current).map_err(|e| match e.kind() {
            ErrorKind::CatalogCommitConflicts => e.with_retryable(true),
            _ => e,
        })?;
        let malformed = |p| Error::new(ErrorKind::DataInvalid, format!("malformed {p} property"));
        let (mut ranges, mut table_offsets) = (Vec::new(), BTreeMap::new());
        match staged.metadata().current_snapshot() {
            Some(s) if Some(s.snapshot_id()) != before => {
                let summary = &s.summary().additional_properties;
                if let Some(v) = summary.get(RANGES_PROPERTY) {
                    ranges = parse_ranges(v).ok_or_else(|| malformed(RANGES_PROPERTY))?;
                }
                if let Some(v) = summary.get(TABLE_OFFSETS_PROPERTY) {
                    table_offsets =
                        parse_offsets(v).ok_or_else(|| malformed(TABLE_OFFSETS_PROPERTY))?;
                }
            }
            _ => {}
        }
        let location = staged.metadata_location_result()?.to_string();
        (staged.metadata())
            .write_to(&self.io, &MetadataLocation::from_str(&location)?)
            .await?;
        match (self.propose(
            topic.topic_id,
            kind,
            &table_offsets,
            Some(expected),
            Some(location.clone()),
            ranges,
        ))
        .await
        {
            Ok(()) => {
                // The metadata files the new one's log no longer names (it keeps the last
                // `write.metadata.previous-versions-max`) are garbage from now on.
                let older = unnamed(older, staged.metadata().metadata_log());
                let delete = (staged.metadata().properties())
                    .get(DELETE_AFTER_COMMIT)
                    .is_some_and(|v| v == "true");
                if delete {
                    for f in older {
                        self.forget_file(f);
                    }
                }
                Ok(staged)
            }
            Err((e, refused)) => {
                if refused {
                    self.forget_file(location);
                }
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_files_dropped_from_the_log_are_the_ones_deleted() {
        let log = |files: &[&str]| -> Vec<iceberg::spec::MetadataLog> {
            (files.iter())
                .map(|f| iceberg::spec::MetadataLog {
                    metadata_file: f.to_string(),
                    timestamp_ms: 0,
                })
                .collect()
        };
        let older = vec!["m1".to_string(), "m2".into(), "m3".into()];
        // The new file's log keeps the last two: m1 is garbage, m3 (the one replaced) is not.
        assert_eq!(unnamed(older.clone(), &log(&["m2", "m3"])), vec!["m1"]);
        assert!(unnamed(older, &log(&["m1", "m2", "m3"])).is_empty());
    }

    #[test]
    fn ranges_round_trip_through_the_summary_property() {
        let ranges = vec![
            IcebergRange {
                partition: 0,
                from: 0,
                to: 10,
            },
            IcebergRange {
                partition: 7,
                from: 1 << 40,
                to: (1 << 40) + 3,
            },
        ];
        let v = ranges_property(&ranges);
        assert_eq!(v, "0:0-10,7:1099511627776-1099511627779");
        assert_eq!(parse_ranges(&v).unwrap(), ranges);
        assert_eq!(parse_ranges("").unwrap(), vec![]);
        for bad in ["0:1", "x:1-2", "0:1-y", "0-1:2"] {
            assert_eq!(parse_ranges(bad), None, "{bad}");
        }
        let offsets = BTreeMap::from([(0, 12), (3, 1 << 40)]);
        let v = offsets_property(&offsets);
        assert_eq!(v, "0:12,3:1099511627776");
        assert_eq!(parse_offsets(&v), Some(offsets));
        assert_eq!(parse_offsets(""), Some(BTreeMap::new()));
        for bad in ["0", "0:x", "y:1", "0:1:2"] {
            assert_eq!(parse_offsets(bad), None, "{bad}");
        }
    }
}
