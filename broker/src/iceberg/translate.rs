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

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use iceberg::spec::{DataFile, DataFileFormat};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::partitioning::fanout_writer::FanoutWriter;
use iceberg::writer::partitioning::PartitioningWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use strata_metadata::{IcebergRange, TopicInfo};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use uuid::Uuid;

use super::catalog::{self, TableCatalog};
use super::error::IcebergError;
use super::layout::{self, BatchFacts, Rows};
use super::metrics::{self, IcebergMetrics};
use crate::log::batch::BatchHeader;
use crate::log::records;
use crate::log::txn_index::AbortedTxn;
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
        if topic.iceberg.is_none() {
            let schema = match mode {
                IcebergMode::KeyValue => layout::key_value_schema(),
                IcebergMode::ValueJson => {
                    return Err(IcebergError::Unsupported("value_json".into()));
                }
            };
            // Another broker may create it first: then this one is refused and reads theirs.
            if let Err(e) = self.catalog.create(&topic, schema).await {
                tracing::debug!(topic = %topic.name, error = %e, "table not created here");
            }
            let state = self.node.metadata.state();
            topic = (state.topic_by_id(&topic.topic_id).cloned()).ok_or(IcebergError::Gone)?;
        }
        let table = (self.catalog.load(&topic).await?).ok_or(IcebergError::Gone)?;
        let next_offsets = (topic.iceberg.as_ref())
            .map(|t| t.next_offsets.clone())
            .unwrap_or_default();
        let location = table.metadata_location().map(str::to_string);
        let began = self.node.clock.instant();
        let mut files = Vec::new();
        let mut ranges = Vec::new();
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
                .translate_partition(&table, &topic, &p, read_from, end, &mut budget)
                .await?;
            round.more |= to < end;
            advanced.push((p.clone(), to, to >= end));
            files.extend(written);
            ranges.push(IcebergRange {
                partition: p.tp.partition,
                from: committed.unwrap_or(read_from),
                to,
            });
        }
        if files.is_empty() {
            // Nothing to write: the cursors move on, the table stays as it is.
            for (p, to, caught_up) in advanced {
                self.set_cursor(&topic, &p, location.clone(), to, caught_up.then_some(began));
            }
            return Ok(round);
        }
        match self.commit(&table, &topic, files, &ranges).await {
            Ok(table) => {
                self.metrics.commit(&topic.name, "ok");
                let location = table.metadata_location().map(str::to_string);
                for (p, to, caught_up) in advanced {
                    self.set_cursor(&topic, &p, location.clone(), to, caught_up.then_some(began));
                }
                self.expire(&topic, table).await;
                Ok(round)
            }
            Err(e) => {
                let result = match e.kind() {
                    iceberg::ErrorKind::DataInvalid => "offsets_moved",
                    iceberg::ErrorKind::CatalogCommitConflicts => "conflict",
                    _ => "failed",
                };
                self.metrics.commit(&topic.name, result);
                // Read again from where the quorum says the table ends.
                let mut cursors = self.cursors();
                for r in &ranges {
                    cursors.remove(&(topic.topic_id, r.partition));
                }
                Err(IcebergError::Iceberg(e))
            }
        }
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
    /// data files; returns them and the offset reading stopped at.
    async fn translate_partition(
        &self,
        table: &Table,
        topic: &TopicInfo,
        p: &Arc<Partition>,
        from: i64,
        end: i64,
        budget: &mut usize,
    ) -> Result<(Vec<DataFile>, i64), IcebergError> {
        let metadata = table.metadata();
        let schema = metadata.current_schema().clone();
        let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema)?);
        let spec = metadata.default_partition_spec().as_ref().clone();
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .build();
        let names = DefaultFileNameGenerator::new(
            format!(
                "{}-{}-{}",
                p.tp.partition,
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
        let mut writer = FanoutWriter::new(DataFileWriterBuilder::new(rolling));
        let labels = metrics::topic(&topic.name);
        let mut rows = Rows::new(p.tp.partition);
        let mut offset = from;
        let (mut records, mut bytes) = (0u64, 0u64);
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
            for item in records::batches(&data) {
                let (h, batch) = item.map_err(|e| IcebergError::Read(e.to_string()))?;
                if h.base_offset >= end {
                    offset = end;
                    break 'read;
                }
                if h.next_offset() <= offset {
                    continue;
                }
                if !h.is_control() && !aborted(&h, &read.aborted) {
                    let (n, b) = push_batch(&mut rows, &h, &batch, offset)?;
                    records += n;
                    bytes += b;
                }
                offset = h.next_offset();
                if rows.bytes() >= FLUSH_BYTES {
                    flush(&mut rows, &mut writer, &arrow, &spec, &schema).await?;
                }
            }
        }
        flush(&mut rows, &mut writer, &arrow, &spec, &schema).await?;
        let files = writer.close().await?;
        self.metrics.records.get_or_create(&labels).inc_by(records);
        self.metrics.bytes.get_or_create(&labels).inc_by(bytes);
        (self.metrics.data_files.get_or_create(&labels)).inc_by(files.len() as u64);
        let file_bytes: u64 = files.iter().map(|f| f.file_size_in_bytes()).sum();
        (self.metrics.data_file_bytes.get_or_create(&labels)).inc_by(file_bytes);
        Ok((files, offset.min(end)))
    }

    async fn commit(
        &self,
        table: &Table,
        topic: &TopicInfo,
        files: Vec<DataFile>,
        ranges: &[IcebergRange],
    ) -> iceberg::Result<Table> {
        let properties = HashMap::from([
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
    /// at most every [`EXPIRE_EVERY`] or that age. A failure only waits for the next time.
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
            Ok(tx) => tx.commit(self.catalog.as_ref()).await.map(drop),
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            tracing::info!(topic = %topic.name, error = %e, "snapshots not expired this time");
        }
    }
}

fn aborted(h: &BatchHeader, aborted: &[AbortedTxn]) -> bool {
    h.is_transactional()
        && aborted.iter().any(|a| {
            a.producer_id == h.producer_id
                && a.first_offset <= h.base_offset
                && h.base_offset < a.last_offset
        })
}

/// The records of one data batch at or past `from`, as rows; their count and bytes.
fn push_batch(
    rows: &mut Rows,
    h: &BatchHeader,
    batch: &Bytes,
    from: i64,
) -> Result<(u64, u64), IcebergError> {
    let section = records::section(batch, h).map_err(|e| IcebergError::Read(e.to_string()))?;
    let facts = BatchFacts {
        timestamp_type: if h.is_log_append_time() {
            layout::LOG_APPEND_TIME
        } else {
            layout::CREATE_TIME
        },
        producer: (h.producer_id >= 0).then_some((h.producer_id, h.producer_epoch)),
    };
    let (mut n, mut b) = (0u64, 0u64);
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
        n += 1;
        b += (r.key.map_or(0, <[u8]>::len) + r.value.map_or(0, <[u8]>::len)) as u64
            + r.headers.len() as u64;
    })
    .map_err(|e| IcebergError::Read(e.to_string()))?;
    Ok((n, b))
}

async fn flush<W>(
    rows: &mut Rows,
    writer: &mut W,
    arrow: &arrow_schema::SchemaRef,
    spec: &iceberg::spec::PartitionSpec,
    schema: &iceberg::spec::SchemaRef,
) -> Result<(), IcebergError>
where
    W: PartitioningWriter,
{
    if rows.is_empty() {
        return Ok(());
    }
    for (key, batch) in rows
        .take_batches(arrow, spec, schema)
        .map_err(IcebergError::Read)?
    {
        writer.write(key, batch).await?;
    }
    Ok(())
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
            match h.await {
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
