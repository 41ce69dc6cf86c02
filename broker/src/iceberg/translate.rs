//! The translator: on each broker, for each topic with `iceberg.mode` set, a round every half
//! `iceberg.target.lag.ms` reads the partitions it leads from where their table ends up to
//! the last stable offset the round began at — through the one read path of both tiers, as a
//! read_committed consumer would — and writes Parquet data files of their records, then
//! commits them to the topic's table in one snapshot that names the offsets it covers.
//!
//! Rounds run on the translator's own threads (nice 10, as the tier's), read at most
//! [`ROUND_BYTES`] of log per topic, and hold at most one partition's open data files (one
//! per hour of timestamps, each closed at `iceberg.target.file.bytes`) plus [`FLUSH_BYTES`] of
//! rows: memory is bounded whatever the backlog, and produce and fetch never wait on them.
//!
//! A round that met only control records and aborted transactions commits nothing: its
//! partitions' cursors move on in memory, and the next commit's ranges start where the table
//! ends, covering them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_array::{Array, BooleanArray, LargeBinaryArray, StringArray};
use bytes::Bytes;
use iceberg::spec::{DataFile, DataFileFormat, PartitionSpec};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::partitioning::fanout_writer::FanoutWriter;
use iceberg::writer::partitioning::PartitioningWriter as _;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use strata_metadata::{IcebergRange, TopicInfo};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use uuid::Uuid;

use super::catalog::{self, TableCatalog};
use super::error::IcebergError;
use super::layout::{self, BatchFacts, Hour, Named, Rows, TableKind};
use super::metrics::{self, IcebergMetrics};
use super::value;
use crate::log::batch::BatchHeader;
use crate::log::records;
use crate::log::txn_index::AbortedFilter;
use crate::node::Node;
use crate::partition::Isolation;
use crate::partition::Partition;
use crate::schedule::BackgroundRuntime;
use crate::tier::Tier;
use crate::topic_config::{self, IcebergMode};

/// Log bytes one round reads per topic at most; a backlog takes more rounds, back to back.
pub const ROUND_BYTES: usize = 512 << 20;
/// Rows gathered before they are handed to the data file writers.
pub const FLUSH_BYTES: usize = 8 << 20;
/// Bytes asked of the log per read.
const READ_BYTES: usize = 4 << 20;
/// How often expired snapshots are looked for, per topic, at most (less often when
/// `iceberg.snapshot.max.age.ms` is shorter: that often).
const EXPIRE_EVERY: Duration = Duration::from_secs(300);

/// Where translation of one partition led here stands.
#[derive(Clone, Debug)]
struct Cursor {
    /// The table's metadata file when the cursor was set: the cursor holds only while the
    /// table is that one (any commit, a rewrite, moves it on).
    table: Option<String>,
    /// Offsets from the table's end up to here held nothing to write (control records,
    /// aborted transactions): reading goes on from here.
    read_to: i64,
    /// When a round began that then reached its last stable offset: the table holds every
    /// record committed before.
    caught_up: Instant,
}

pub struct Translator {
    node: Arc<Node>,
    tier: Arc<Tier>,
    catalog: Arc<TableCatalog>,
    metrics: Arc<IcebergMetrics>,
    runtime: BackgroundRuntime,
    cursors: Mutex<HashMap<(Uuid, i32), Cursor>>,
    /// When each topic's snapshots were last looked at for expiry here.
    expired: Mutex<HashMap<Uuid, Instant>>,
    /// Why each topic's last round here failed, until one succeeds.
    errors: Mutex<HashMap<Uuid, String>>,
}

/// What one round did.
#[derive(Debug, Default)]
struct Round {
    /// Stopped at [`ROUND_BYTES`] with more to read.
    more: bool,
}

impl Translator {
    pub fn new(
        node: Arc<Node>,
        tier: Arc<Tier>,
        catalog: Arc<TableCatalog>,
        metrics: Arc<IcebergMetrics>,
    ) -> Result<Translator, IcebergError> {
        let runtime = BackgroundRuntime::new("strata-iceberg", 1)
            .map_err(|e| IcebergError::Io(format!("cannot start the translator's thread: {e}")))?;
        Ok(Translator {
            node,
            tier,
            catalog,
            metrics,
            runtime,
            cursors: Mutex::new(HashMap::new()),
            expired: Mutex::new(HashMap::new()),
            errors: Mutex::new(HashMap::new()),
        })
    }

    fn cursors(&self) -> std::sync::MutexGuard<'_, HashMap<(Uuid, i32), Cursor>> {
        self.cursors.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The partitions of `topic` this broker leads.
    fn led(&self, topic: &TopicInfo) -> Vec<Arc<Partition>> {
        let me = self.node.config.node_id;
        (topic.partitions.iter().enumerate())
            .filter(|(_, info)| info.leader == Some(me))
            .filter_map(|(i, _)| self.node.partitions.get(&topic.name, i as i32))
            .collect()
    }

    /// Why the topic's last round here failed, if it did.
    pub fn last_error(&self, topic: &TopicInfo) -> Option<String> {
        let errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        errors.get(&topic.topic_id).cloned()
    }

    fn set_error(&self, topic: Uuid, error: Option<String>) {
        let mut errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        match error {
            Some(e) => errors.insert(topic, e),
            None => errors.remove(&topic),
        };
    }

    /// `(last stable offset, lag in seconds)` of a partition led here, `None` otherwise.
    pub fn partition_lag(&self, topic: &TopicInfo, partition: i32) -> Option<(i64, u64)> {
        let me = self.node.config.node_id;
        let info = topic.partitions.get(usize::try_from(partition).ok()?)?;
        if info.leader != Some(me) {
            return None;
        }
        let p = self.node.partitions.get(&topic.name, partition)?;
        let lso = p.published_offsets().last_stable;
        let c = self.cursors().get(&(topic.topic_id, partition)).cloned()?;
        let now = self.node.clock.instant();
        let lag = if c.read_to >= lso {
            0
        } else {
            now.saturating_duration_since(c.caught_up).as_secs()
        };
        Some((lso, lag))
    }

    /// Sets the topic's lag gauge from its led partitions, and whether any has records the
    /// table may not hold yet.
    fn observe(&self, topic: &TopicInfo, led: &[Arc<Partition>]) -> bool {
        let now = self.node.clock.instant();
        let mut cursors = self.cursors();
        let mut lag = Duration::ZERO;
        let mut pending = false;
        for p in led {
            let lso = p.published_offsets().last_stable;
            let c = cursors
                .entry((topic.topic_id, p.tp.partition))
                .or_insert(Cursor {
                    table: None,
                    read_to: -1,
                    caught_up: now,
                });
            if c.read_to < lso {
                pending = true;
                lag = lag.max(now.saturating_duration_since(c.caught_up));
            }
        }
        (self
            .metrics
            .lag_seconds
            .get_or_create(&metrics::topic(&topic.name)))
        .set(i64::try_from(lag.as_secs()).unwrap_or(i64::MAX));
        pending
    }

    /// One round over `topic`'s partitions led here.
    async fn round(
        self: Arc<Self>,
        topic: TopicInfo,
        mode: IcebergMode,
    ) -> Result<Round, IcebergError> {
        let mut topic = topic;
        let wanted = match mode {
            IcebergMode::KeyValue => None,
            IcebergMode::ValueJson => {
                let config = (topic.configs.get(topic_config::ICEBERG_VALUE_SCHEMA))
                    .ok_or_else(|| IcebergError::Refused("no iceberg.value.schema".into()))?;
                Some(value::parse_schema(config).map_err(IcebergError::Refused)?)
            }
        };
        if topic.iceberg.is_none() {
            let schema = match &wanted {
                None => layout::key_value_schema(),
                Some(value) => layout::value_json_schema(value).map_err(IcebergError::Refused)?,
            };
            // Another broker may create it first: then this one is refused and reads theirs.
            let created = self
                .catalog
                .create(&topic, TableKind::Topic, schema, mode.name());
            if let Err(e) = created.await {
                tracing::debug!(topic = %topic.name, error = %e, "table not created here");
            }
            topic = self.refresh(&topic)?;
        }
        let mut table =
            (self.catalog.load(&topic, TableKind::Topic).await?).ok_or(IcebergError::Gone)?;
        check_mode(&table, &topic, mode)?;
        if let Some(wanted) = &wanted {
            table = self.evolve(table, &topic, wanted).await?;
        }
        let next_offsets = (topic.iceberg.as_ref())
            .map(|t| t.next_offsets.clone())
            .unwrap_or_default();
        let location = table.metadata_location().map(str::to_string);
        let began = self.node.clock.instant();
        let mut files = Vec::new();
        let mut ranges = Vec::new();
        let mut dead = DeadLetters::new(&topic, wanted.is_some());
        let mut budget = ROUND_BYTES;
        let mut round = Round::default();
        let mut advanced = Vec::new();
        for p in self.led(&topic) {
            if budget == 0 {
                round.more = true;
                break;
            }
            let committed = next_offsets.get(&p.tp.partition).copied();
            let cursor = self
                .cursors()
                .get(&(topic.topic_id, p.tp.partition))
                .cloned();
            let offsets = p.published_offsets();
            let read_from = match cursor {
                Some(c) if c.table == location && c.read_to >= 0 => c.read_to,
                _ => committed.unwrap_or(offsets.log_start),
            }
            // Records retention deleted before they were translated are gone for the table too.
            .max(offsets.log_start);
            let end = offsets.last_stable;
            if read_from >= end {
                self.set_cursor(&topic, &p, location.clone(), read_from, Some(began));
                continue;
            }
            let (written, to) = self
                .translate_partition(&table, &topic, &p, read_from, end, &mut budget, &mut dead)
                .await?;
            dead.partition_done(p.tp.partition, committed, read_from, to);
            round.more |= to < end;
            advanced.push((p.clone(), to, to >= end));
            files.extend(written);
            ranges.push(IcebergRange {
                partition: p.tp.partition,
                from: committed.unwrap_or(read_from),
                to,
            });
        }
        // Dead letters first: the table's offsets move past a refused record only once it is
        // in the dead-letter table.
        if let Some(dlq) = dead.table.take() {
            let properties = HashMap::from([(
                catalog::TABLE_OFFSETS_PROPERTY.to_string(),
                catalog::offsets_property(&dead.table_offsets),
            )]);
            match self
                .commit(&dlq, &topic, dead.files, &dead.ranges, properties)
                .await
            {
                Ok(_) => self.metrics.commit(&topic.name, "ok"),
                Err(e) => return Err(self.failed(&topic, &ranges, e)),
            }
        }
        if files.is_empty() {
            // Nothing to write: the cursors move on, the table stays as it is.
            for (p, to, caught_up) in advanced {
                self.set_cursor(&topic, &p, location.clone(), to, caught_up.then_some(began));
            }
            return Ok(round);
        }
        match self
            .commit(&table, &topic, files, &ranges, HashMap::new())
            .await
        {
            Ok(table) => {
                self.metrics.commit(&topic.name, "ok");
                let location = table.metadata_location().map(str::to_string);
                for (p, to, caught_up) in advanced {
                    self.set_cursor(&topic, &p, location.clone(), to, caught_up.then_some(began));
                }
                self.expire(&topic, table).await;
                Ok(round)
            }
            Err(e) => Err(self.failed(&topic, &ranges, e)),
        }
    }

    /// The topic as the quorum has it now.
    fn refresh(&self, topic: &TopicInfo) -> Result<TopicInfo, IcebergError> {
        let state = self.node.metadata.state();
        (state.topic_by_id(&topic.topic_id).cloned()).ok_or(IcebergError::Gone)
    }

    /// Counts a failed commit; its partitions are read again from where the quorum says the
    /// table ends.
    fn failed(
        &self,
        topic: &TopicInfo,
        ranges: &[IcebergRange],
        e: iceberg::Error,
    ) -> IcebergError {
        let result = match e.kind() {
            iceberg::ErrorKind::DataInvalid => "offsets_moved",
            iceberg::ErrorKind::CatalogCommitConflicts => "conflict",
            _ => "failed",
        };
        self.metrics.commit(&topic.name, result);
        let mut cursors = self.cursors();
        for r in ranges {
            cursors.remove(&(topic.topic_id, r.partition));
        }
        IcebergError::Iceberg(e)
    }

    /// Adds to the table the optional columns the topic's value schema gained since.
    async fn evolve(
        &self,
        table: Table,
        topic: &TopicInfo,
        wanted: &iceberg::spec::Schema,
    ) -> Result<Table, IcebergError> {
        let adds = value::evolution(table.metadata().current_schema(), wanted).map_err(|e| {
            IcebergError::Refused(format!(
                "iceberg.value.schema does not fit the table's schema: {e}; `strata iceberg \
                 rewrite {}` starts the table over in the new schema",
                topic.name
            ))
        })?;
        if adds.is_empty() {
            return Ok(table);
        }
        tracing::info!(topic = %topic.name, columns = adds.len(), "Iceberg table: adding the value schema's new columns");
        let tx = Transaction::new(&table);
        let action = adds
            .into_iter()
            .fold(tx.update_schema(), |a, c| a.add_column(c));
        Ok(action.apply(tx)?.commit(self.catalog.as_ref()).await?)
    }

    /// The dead-letter table, created the first time a value is refused.
    async fn dead_letter_table(
        &self,
        topic: &TopicInfo,
        dead: &mut DeadLetters,
    ) -> Result<(), IcebergError> {
        if dead.table.is_some() {
            return Ok(());
        }
        let mut now = self.refresh(topic)?;
        if now.iceberg_dlq.is_none() {
            let created = self.catalog.create(
                &now,
                TableKind::Dlq,
                layout::dlq_schema(),
                IcebergMode::KeyValue.name(),
            );
            if let Err(e) = created.await {
                tracing::debug!(topic = %topic.name, error = %e, "dead-letter table not created here");
            }
            now = self.refresh(topic)?;
        }
        let table = (self.catalog.load(&now, TableKind::Dlq).await?).ok_or(IcebergError::Gone)?;
        // Its offsets as the round began stay the filter: rows of partitions led here enter
        // it only from this broker.
        dead.table = Some(table);
        Ok(())
    }

    fn set_cursor(
        &self,
        topic: &TopicInfo,
        p: &Partition,
        table: Option<String>,
        read_to: i64,
        caught_up: Option<Instant>,
    ) {
        let mut cursors = self.cursors();
        let now = self.node.clock.instant();
        let c = cursors
            .entry((topic.topic_id, p.tp.partition))
            .or_insert(Cursor {
                table: None,
                read_to,
                caught_up: now,
            });
        c.table = table;
        c.read_to = read_to;
        if let Some(t) = caught_up {
            c.caught_up = t;
        }
    }

    /// Writes the records of `p` from `from` up to `end` (or until the budget is spent) as
    /// data files (and refused values, to `dead`); returns them and the offset reading
    /// stopped at.
    #[allow(clippy::too_many_arguments)]
    async fn translate_partition(
        &self,
        table: &Table,
        topic: &TopicInfo,
        p: &Arc<Partition>,
        from: i64,
        end: i64,
        budget: &mut usize,
        dead: &mut DeadLetters,
    ) -> Result<(Vec<DataFile>, i64), IcebergError> {
        let mut files = self.files(table, p.tp.partition)?;
        dead.start_partition(p.tp.partition);
        let values = match dead.enabled {
            true => Some(value::Values::new(&files.arrow).map_err(IcebergError::Refused)?),
            false => None,
        };
        let labels = metrics::topic(&topic.name);
        let mut rows = Rows::new(p.tp.partition);
        let mut offset = from;
        let mut bytes = 0u64;
        'read: while offset < end && *budget > 0 {
            let read = (self
                .tier
                .read(p.clone(), offset, READ_BYTES, Isolation::Committed))
            .await
            .map_err(|e| IcebergError::Read(e.to_string()))?;
            let data = read.batches.bytes;
            if data.is_empty() {
                break;
            }
            *budget = budget.saturating_sub(data.len());
            let mut aborted = AbortedFilter::new(read.aborted);
            for item in records::batches(&data) {
                let (h, batch) = item.map_err(|e| IcebergError::Read(e.to_string()))?;
                if h.base_offset >= end {
                    offset = end;
                    break 'read;
                }
                // Every batch in order through the filter: a control batch ends its
                // producer's aborted transaction even where it is skipped.
                let was_aborted = aborted.is_aborted(&h);
                if h.next_offset() <= offset {
                    continue;
                }
                if !was_aborted && !h.is_control() {
                    bytes += push_batch(&mut rows, &h, &batch, offset)?;
                }
                offset = h.next_offset();
                if rows.bytes() >= FLUSH_BYTES {
                    self.flush(&mut rows, &mut files, values.as_ref(), topic, dead)
                        .await?;
                }
            }
        }
        self.flush(&mut rows, &mut files, values.as_ref(), topic, dead)
            .await?;
        let records = files.rows;
        let files = files.writer.close().await?;
        let (refused, dead_files) = dead.close_partition().await?;
        self.metrics.records.get_or_create(&labels).inc_by(records);
        self.metrics.bytes.get_or_create(&labels).inc_by(bytes);
        (self.metrics.invalid_records.get_or_create(&labels)).inc_by(refused);
        let written = files.iter().chain(&dead_files);
        (self.metrics.data_files.get_or_create(&labels)).inc_by(written.clone().count() as u64);
        let file_bytes: u64 = written.map(|f| f.file_size_in_bytes()).sum();
        (self.metrics.data_file_bytes.get_or_create(&labels)).inc_by(file_bytes);
        dead.files.extend(dead_files);
        Ok((files, offset.min(end)))
    }

    /// Open data files of `table` for one partition's rows.
    fn files(&self, table: &Table, partition: i32) -> Result<TableFiles, IcebergError> {
        let metadata = table.metadata();
        let schema = metadata.current_schema().clone();
        let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema)?);
        let spec = metadata.default_partition_spec().as_ref().clone();
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .build();
        let names = DefaultFileNameGenerator::new(
            format!(
                "{partition}-{}-{}",
                self.node.config.node_id,
                Uuid::new_v4()
            ),
            None,
            DataFileFormat::Parquet,
        );
        let rolling = RollingFileWriterBuilder::new(
            ParquetWriterBuilder::new(props, schema.clone()),
            usize::try_from(self.node.config.iceberg_target_file_bytes).unwrap_or(usize::MAX),
            table.file_io().clone(),
            DefaultLocationGenerator::new(metadata)?,
            names,
        );
        Ok(TableFiles {
            writer: FanoutWriter::new(DataFileWriterBuilder::new(rolling)),
            arrow,
            spec,
            schema,
            rows: 0,
        })
    }

    /// Hands the rows gathered to the data files: every row to the table (`key_value`), or
    /// (`value_json`) those whose values fit the schema to the table and the rest to the
    /// dead-letter table.
    async fn flush(
        &self,
        rows: &mut Rows,
        files: &mut TableFiles,
        values: Option<&value::Values>,
        topic: &TopicInfo,
        dead: &mut DeadLetters,
    ) -> Result<(), IcebergError> {
        for hour in rows.take_hours() {
            let n = hour.len();
            let mut columns = hour
                .columns(&files.arrow, None)
                .map_err(IcebergError::Read)?;
            let Some(values) = values else {
                files.write(&hour, columns, n).await?;
                continue;
            };
            let raw = (columns.iter())
                .find(|(name, _)| name == "value")
                .and_then(|(_, c)| c.as_any().downcast_ref::<LargeBinaryArray>().cloned())
                .ok_or_else(|| IcebergError::Read("no value column".into()))?;
            let decoded = values.decode(&raw).map_err(IcebergError::Read)?;
            let kept = n - decoded.rejected.len();
            if !decoded.rejected.is_empty() {
                let mut keep = vec![true; n];
                for (i, _) in &decoded.rejected {
                    keep[*i] = false;
                }
                let keep = BooleanArray::from(keep);
                columns = hour
                    .columns(&files.arrow, Some(&keep))
                    .map_err(IcebergError::Read)?;
                let offsets = hour.offsets();
                let refused: Vec<(usize, String)> = (decoded.rejected.into_iter())
                    .filter(|(i, _)| offsets[*i] >= dead.from)
                    .collect();
                if !refused.is_empty() {
                    self.dead_letter_table(topic, dead).await?;
                    if let (None, Some(table)) = (&dead.open, &dead.table) {
                        dead.open = Some(self.files(table, hour.partition())?);
                    }
                    dead.write(&hour, refused).await?;
                }
            }
            // The raw bytes are no column here (and a value field may be named `value`).
            columns.retain(|(name, _)| name != "value");
            columns.extend(values.names().map(str::to_string).zip(decoded.columns));
            files.write(&hour, columns, kept).await?;
        }
        Ok(())
    }

    async fn commit(
        &self,
        table: &Table,
        topic: &TopicInfo,
        files: Vec<DataFile>,
        ranges: &[IcebergRange],
        mut properties: HashMap<String, String>,
    ) -> iceberg::Result<Table> {
        properties.extend([
            (
                catalog::RANGES_PROPERTY.to_string(),
                catalog::ranges_property(ranges),
            ),
            (
                "strata.broker".to_string(),
                self.node.config.node_id.to_string(),
            ),
        ]);
        let tx = Transaction::new(table);
        let append = (tx.fast_append())
            // File names are new (a uuid each): the check would read every manifest.
            .with_check_duplicate(false)
            .add_data_files(files)
            .set_snapshot_properties(properties);
        let tx = append.apply(tx)?;
        tracing::debug!(topic = %topic.name, ?ranges, "committing to the Iceberg table");
        tx.commit(self.catalog.as_ref()).await
    }

    /// Expires snapshots older than `iceberg.snapshot.max.age.ms` (never the current one),
    /// at most every [`EXPIRE_EVERY`] or that age, and deletes their manifest lists. A failure
    /// only waits for the next time.
    async fn expire(&self, topic: &TopicInfo, table: Table) {
        let now = self.node.clock.instant();
        let max_age_ms = self.node.config.iceberg_snapshot_max_age_ms;
        let every = EXPIRE_EVERY.min(Duration::from_millis(max_age_ms));
        {
            let mut expired = self.expired.lock().unwrap_or_else(|p| p.into_inner());
            let last = expired.entry(topic.topic_id).or_insert(now);
            if now.saturating_duration_since(*last) < every {
                return;
            }
            *last = now;
        }
        let max_age = i64::try_from(max_age_ms).unwrap_or(i64::MAX);
        let cutoff = self.node.clock.now_ms().saturating_sub(max_age);
        let oldest = table.metadata().snapshots().map(|s| s.timestamp_ms()).min();
        if oldest.is_none_or(|o| o >= cutoff) {
            return;
        }
        let tx = Transaction::new(&table);
        let result = (tx
            .expire_snapshots()
            .expire_older_than_ms(cutoff)
            .retain_last(1))
        .apply(tx);
        let result = match result {
            Ok(tx) => tx.commit(self.catalog.as_ref()).await,
            Err(e) => Err(e),
        };
        match result {
            Ok(expired) => {
                // A snapshot's manifest list is its own (fast appends share manifests, and
                // every data file stays in the table): the expired ones' are garbage now.
                let kept = expired.metadata();
                for s in table.metadata().snapshots() {
                    if kept.snapshot_by_id(s.snapshot_id()).is_none() {
                        self.catalog.forget_file(s.manifest_list().to_string());
                    }
                }
            }
            Err(e) => {
                tracing::info!(topic = %topic.name, error = %e, "snapshots not expired this time")
            }
        }
    }
}

/// The records of one data batch at or past `from`, as rows; their bytes.
fn push_batch(
    rows: &mut Rows,
    h: &BatchHeader,
    batch: &Bytes,
    from: i64,
) -> Result<u64, IcebergError> {
    let section = records::section(batch, h).map_err(|e| IcebergError::Read(e.to_string()))?;
    let facts = BatchFacts {
        timestamp_type: if h.is_log_append_time() {
            layout::LOG_APPEND_TIME
        } else {
            layout::CREATE_TIME
        },
        producer: (h.producer_id >= 0).then_some((h.producer_id, h.producer_epoch)),
    };
    let mut b = 0u64;
    records::for_each(&section, h, |r| {
        if r.offset < from {
            return;
        }
        if !rows.push(&r, facts) {
            tracing::warn!(
                offset = r.offset,
                "a record's headers do not parse: its row has none"
            );
        }
        b += (r.key.map_or(0, <[u8]>::len) + r.value.map_or(0, <[u8]>::len)) as u64
            + r.headers.len() as u64;
    })
    .map_err(|e| IcebergError::Read(e.to_string()))?;
    Ok(b)
}

type Writer = FanoutWriter<
    DataFileWriterBuilder<ParquetWriterBuilder, DefaultLocationGenerator, DefaultFileNameGenerator>,
>;

/// One table's open data files for one partition's rows in a round.
struct TableFiles {
    writer: Writer,
    arrow: arrow_schema::SchemaRef,
    spec: PartitionSpec,
    schema: iceberg::spec::SchemaRef,
    /// Rows written.
    rows: u64,
}

impl TableFiles {
    async fn write(
        &mut self,
        hour: &Hour,
        columns: Named,
        rows: usize,
    ) -> Result<(), IcebergError> {
        if rows == 0 {
            return Ok(());
        }
        let batch = layout::assemble(&self.arrow, columns, rows).map_err(IcebergError::Read)?;
        self.writer
            .write(hour.key(&self.spec, &self.schema), batch)
            .await?;
        self.rows += rows as u64;
        Ok(())
    }
}

/// A round's dead letters (`value_json`): the records whose values do not fit the schema, for
/// the topic's dead-letter table. Each partition's are filtered by that table's own offsets:
/// a round that wrote them and then failed to commit the topic table reads them again, and
/// they are not written twice.
struct DeadLetters {
    /// `value_json`: values are decoded, and may be refused.
    enabled: bool,
    /// The dead-letter table's offsets when the round began.
    next_offsets: BTreeMap<i32, i64>,
    /// The table, once this round refused a value.
    table: Option<Table>,
    /// The partition being translated: the first offset not in the table yet, and its open
    /// files there.
    from: i64,
    open: Option<TableFiles>,
    /// Whether the partition last closed had rows here.
    wrote: bool,
    /// The files, offset ranges and topic table offsets of the commit.
    files: Vec<DataFile>,
    ranges: Vec<IcebergRange>,
    table_offsets: BTreeMap<i32, i64>,
}

impl DeadLetters {
    fn new(topic: &TopicInfo, enabled: bool) -> DeadLetters {
        DeadLetters {
            enabled,
            next_offsets: (topic.iceberg_dlq.as_ref())
                .map(|t| t.next_offsets.clone())
                .unwrap_or_default(),
            table: None,
            from: i64::MIN,
            open: None,
            wrote: false,
            files: Vec::new(),
            ranges: Vec::new(),
            table_offsets: BTreeMap::new(),
        }
    }

    fn start_partition(&mut self, partition: i32) {
        self.from = self
            .next_offsets
            .get(&partition)
            .copied()
            .unwrap_or(i64::MIN);
        self.open = None;
    }

    /// The refused rows of `hour` (with why) into the open files.
    async fn write(
        &mut self,
        hour: &Hour,
        refused: Vec<(usize, String)>,
    ) -> Result<(), IcebergError> {
        let files = (self.open.as_mut())
            .ok_or_else(|| IcebergError::Read("no dead-letter files open".into()))?;
        let mut keep = vec![false; hour.len()];
        for (i, _) in &refused {
            keep[*i] = true;
        }
        let mut columns = (hour.columns(&files.arrow, Some(&BooleanArray::from(keep))))
            .map_err(IcebergError::Read)?;
        let n = refused.len();
        let reasons = StringArray::from_iter_values(refused.into_iter().map(|(_, why)| why));
        columns.push(("reason".to_string(), Arc::new(reasons)));
        files.write(hour, columns, n).await
    }

    /// Closes the partition's files: the rows written and the files.
    async fn close_partition(&mut self) -> Result<(u64, Vec<DataFile>), IcebergError> {
        let (rows, files) = match self.open.take() {
            None => (0, Vec::new()),
            Some(files) => (files.rows, files.writer.close().await?),
        };
        self.wrote = rows > 0;
        Ok((rows, files))
    }

    /// The partition's range in the commit when it had rows: from where the table ends (or
    /// reading began) to where reading stopped; sorted from the topic table at `committed`.
    fn partition_done(&mut self, partition: i32, committed: Option<i64>, read_from: i64, to: i64) {
        if !std::mem::take(&mut self.wrote) {
            return;
        }
        let from = self
            .next_offsets
            .get(&partition)
            .copied()
            .unwrap_or(read_from);
        self.ranges.push(IcebergRange {
            partition,
            from,
            to,
        });
        if let Some(c) = committed {
            self.table_offsets.insert(partition, c);
        }
    }
}

/// A table written in one mode is not continued in another: it starts over (rewrite).
pub fn check_mode(table: &Table, topic: &TopicInfo, mode: IcebergMode) -> Result<(), IcebergError> {
    let written = (table.metadata().properties().get(layout::MODE_PROPERTY))
        .map_or(IcebergMode::KeyValue.name(), String::as_str);
    if written == mode.name() {
        return Ok(());
    }
    Err(IcebergError::Refused(format!(
        "the table was written with iceberg.mode={written} and the topic now has {}: `strata \
         iceberg rewrite {}` starts it over in the new mode",
        mode.name(),
        topic.name
    )))
}

/// Runs rounds until shutdown: each second it looks at the topics with `iceberg.mode` set
/// and starts a round for each one due (at most one per topic at a time).
pub async fn run(translator: Arc<Translator>, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut rounds: HashMap<Uuid, (String, JoinHandle<Result<Round, IcebergError>>)> =
        HashMap::new();
    let mut last: HashMap<Uuid, Instant> = HashMap::new();
    let mut more: HashSet<Uuid> = HashSet::new();
    let mut seen: HashSet<String> = HashSet::new();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => break,
        }
        let finished: Vec<Uuid> = (rounds.iter())
            .filter(|(_, (_, h))| h.is_finished())
            .map(|(id, _)| *id)
            .collect();
        for id in finished {
            let Some((name, h)) = rounds.remove(&id) else {
                continue;
            };
            more.remove(&id);
            let result = h.await;
            if let Ok(r) = &result {
                translator.set_error(id, r.as_ref().err().map(|e| e.to_string()));
            }
            match result {
                Ok(Ok(r)) if r.more => {
                    more.insert(id);
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    (translator
                        .metrics
                        .failed_rounds
                        .get_or_create(&metrics::topic(&name)))
                    .inc();
                    tracing::warn!(topic = %name, error = %e, "Iceberg translation round failed; the next round starts over from the table");
                }
                Err(e) => tracing::error!(error = %e, "Iceberg translation round panicked"),
            }
        }
        let state = translator.node.metadata.state();
        let now = translator.node.clock.instant();
        let mut live = HashSet::new();
        for topic in state.topics.values() {
            let Some(mode) = IcebergMode::of(&topic.configs) else {
                continue;
            };
            let led = translator.led(topic);
            if led.is_empty() {
                continue;
            }
            live.insert(topic.name.clone());
            let pending = translator.observe(topic, &led);
            if rounds.contains_key(&topic.topic_id) || (!pending && topic.iceberg.is_some()) {
                continue;
            }
            let lag = (topic.configs.get(topic_config::ICEBERG_TARGET_LAG_MS))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(translator.node.settings().iceberg_target_lag_ms.max(1000) as u64);
            let due = more.contains(&topic.topic_id)
                || last.get(&topic.topic_id).is_none_or(|t| {
                    now.saturating_duration_since(*t) >= Duration::from_millis(lag / 2)
                });
            if !due {
                continue;
            }
            last.insert(topic.topic_id, now);
            let (topic_id, name) = (topic.topic_id, topic.name.clone());
            let t = translator.clone();
            let topic = (**topic).clone();
            let started = crate::clock::Stopwatch::start();
            let seconds = translator.metrics.round_seconds.clone();
            let handle = translator.runtime.handle().spawn(async move {
                let r = t.round(topic, mode).await;
                seconds.observe(started.elapsed().as_secs_f64());
                r
            });
            rounds.insert(topic_id, (name, handle));
        }
        for gone in seen.difference(&live) {
            translator.metrics.forget(gone);
        }
        seen = live;
    }
    for (_, (_, h)) in rounds {
        h.abort();
    }
}
