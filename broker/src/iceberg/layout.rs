//! What a topic's table looks like: the Kafka columns every table has, the partition spec
//! (hour of timestamp, then Kafka partition), where tables live, and the rows of one Kafka
//! partition gathered into Arrow record batches, one per hour of timestamps.
//!
//! A `key_value` table's column ids are fixed (1..=12), so a table written by one broker
//! version reads the same under the next. A `value_json` table has the Kafka columns but
//! `value` first, then the value schema's fields; its dead-letter table is a `key_value` one
//! plus the `reason`. Rows are always assembled by column name against the table's current
//! schema, so added columns (schema evolution) and the different ids of each table line up.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{
    ArrayRef, BooleanArray, Int32Array, Int64Array, LargeBinaryArray, ListArray, RecordBatch,
    StringArray, StructArray, TimestampMicrosecondArray,
};
use arrow_buffer::{OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Fields, Schema as ArrowSchema, SchemaRef};
use iceberg::spec::{
    ListType, Literal, MapType, NestedField, NestedFieldRef, PartitionKey, PartitionSpec,
    PrimitiveType, Schema, SchemaRef as IcebergSchemaRef, Struct, StructType, Transform, Type,
    UnboundPartitionSpec,
};

use strata_metadata::{IcebergTable, TopicInfo};

use crate::log::records::Record;

/// The namespace every topic table is in.
pub const NAMESPACE: &str = "strata";

/// Which of a topic's tables: its own, or (`value_json`) the dead-letter table of the records
/// whose values do not fit the schema, named `<topic>~dlq` (`~` is in no Kafka topic name).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TableKind {
    Topic,
    Dlq,
}

pub const DLQ_SUFFIX: &str = "~dlq";

/// The table property naming the `iceberg.mode` it was written in.
pub const MODE_PROPERTY: &str = "strata.mode";

impl TableKind {
    /// The table's name in the namespace.
    pub fn name(self, topic: &str) -> String {
        match self {
            TableKind::Topic => topic.to_string(),
            TableKind::Dlq => format!("{topic}{DLQ_SUFFIX}"),
        }
    }

    /// The topic and kind a table name names.
    pub fn of_name(name: &str) -> (&str, TableKind) {
        match name.strip_suffix(DLQ_SUFFIX) {
            Some(topic) => (topic, TableKind::Dlq),
            None => (name, TableKind::Topic),
        }
    }

    /// The table as the quorum holds it.
    pub fn pointer(self, topic: &TopicInfo) -> Option<&IcebergTable> {
        match self {
            TableKind::Topic => topic.iceberg.as_ref(),
            TableKind::Dlq => topic.iceberg_dlq.as_ref(),
        }
    }

    /// Where the table lives: `<warehouse>/strata/<topic>-<topic id>` under the store's root,
    /// and its dead letters beside it at `<topic>-dlq-<topic id>`, neither inside the other
    /// (the topic id keeps the keys of two topics apart; `~` is no character of an object key
    /// every S3 client spells alike).
    pub fn key(self, warehouse: &str, topic: &str, topic_id: &uuid::Uuid) -> String {
        let warehouse = warehouse.trim_matches('/');
        match self {
            TableKind::Topic => format!("{warehouse}/{NAMESPACE}/{topic}-{topic_id}"),
            TableKind::Dlq => format!("{warehouse}/{NAMESPACE}/{topic}-dlq-{topic_id}"),
        }
    }
}

const PARTITION: i32 = 1;
const OFFSET: i32 = 2;
const TIMESTAMP: i32 = 3;
const TIMESTAMP_TYPE: i32 = 4;
const KEY: i32 = 5;
const VALUE: i32 = 6;
const HEADERS: i32 = 7;
const PRODUCER_ID: i32 = 8;
const PRODUCER_EPOCH: i32 = 9;
const HEADER: i32 = 10;
const HEADER_KEY: i32 = 11;
const HEADER_VALUE: i32 = 12;
const REASON: i32 = 13;

/// The Kafka columns of a `value_json` table: a value field may not take one of these names.
pub const KAFKA_COLUMNS: [&str; 8] = [
    "partition",
    "offset",
    "timestamp",
    "timestamp_type",
    "key",
    "headers",
    "producer_id",
    "producer_epoch",
];

/// The first id a value schema's fields are given (ids are assigned afresh when the table is
/// created; these only need to be unique).
const FIRST_VALUE_ID: i32 = 1000;

/// The `key_value` schema: Kafka's fields of a record, key and value as bytes.
pub fn key_value_schema() -> Schema {
    let header = StructType::new(vec![
        NestedField::required(HEADER_KEY, "key", Type::Primitive(PrimitiveType::String)).into(),
        NestedField::optional(
            HEADER_VALUE,
            "value",
            Type::Primitive(PrimitiveType::Binary),
        )
        .into(),
    ]);
    let headers =
        ListType::new(NestedField::list_element(HEADER, Type::Struct(header), true).into());
    let p = |t| Type::Primitive(t);
    Schema::builder()
        .with_schema_id(0)
        .with_fields(vec![
            NestedField::required(PARTITION, "partition", p(PrimitiveType::Int)).into(),
            NestedField::required(OFFSET, "offset", p(PrimitiveType::Long)).into(),
            NestedField::required(TIMESTAMP, "timestamp", p(PrimitiveType::Timestamptz)).into(),
            NestedField::required(TIMESTAMP_TYPE, "timestamp_type", p(PrimitiveType::Int)).into(),
            NestedField::optional(KEY, "key", p(PrimitiveType::Binary)).into(),
            NestedField::optional(VALUE, "value", p(PrimitiveType::Binary)).into(),
            NestedField::optional(HEADERS, "headers", Type::List(headers)).into(),
            NestedField::optional(PRODUCER_ID, "producer_id", p(PrimitiveType::Long)).into(),
            NestedField::optional(PRODUCER_EPOCH, "producer_epoch", p(PrimitiveType::Int)).into(),
        ])
        .build()
        .expect("the key_value schema is valid")
}

/// The `value_json` schema: the Kafka columns but `value`, then the fields of `value` (the
/// topic's `iceberg.value.schema`).
pub fn value_json_schema(value: &Schema) -> Result<Schema, String> {
    let mut fields: Vec<NestedFieldRef> = (key_value_schema().as_struct().fields().iter())
        .filter(|f| f.id != VALUE)
        .cloned()
        .collect();
    let mut next = FIRST_VALUE_ID;
    fields.extend(renumber(value.as_struct().fields(), &mut next));
    Schema::builder()
        .with_schema_id(0)
        .with_fields(fields)
        .build()
        .map_err(|e| e.to_string())
}

/// The dead-letter table's schema: `key_value`'s and why the value was refused.
pub fn dlq_schema() -> Schema {
    let mut fields = key_value_schema().as_struct().fields().to_vec();
    fields.push(
        NestedField::required(REASON, "reason", Type::Primitive(PrimitiveType::String)).into(),
    );
    Schema::builder()
        .with_schema_id(0)
        .with_fields(fields)
        .build()
        .expect("the dead-letter schema is valid")
}

/// `fields` with fresh ids from `next` on, nested fields included.
fn renumber(fields: &[NestedFieldRef], next: &mut i32) -> Vec<NestedFieldRef> {
    (fields.iter())
        .map(|f| {
            let id = *next;
            *next += 1;
            let field_type = renumber_type(&f.field_type, next);
            let mut field = (**f).clone();
            field.id = id;
            field.field_type = Box::new(field_type);
            Arc::new(field)
        })
        .collect()
}

fn renumber_type(t: &Type, next: &mut i32) -> Type {
    let one =
        |f: &NestedFieldRef, next: &mut i32| renumber(std::slice::from_ref(f), next).remove(0);
    match t {
        Type::Primitive(_) => t.clone(),
        Type::Struct(s) => Type::Struct(StructType::new(renumber(s.fields(), next))),
        Type::List(l) => Type::List(ListType::new(one(&l.element_field, next))),
        Type::Map(m) => Type::Map(MapType::new(
            one(&m.key_field, next),
            one(&m.value_field, next),
        )),
    }
}

/// Hour of timestamp, then Kafka partition: a query for a time range reads the files of its
/// hours, and each file holds one partition's rows in offset order.
pub fn partition_spec() -> UnboundPartitionSpec {
    UnboundPartitionSpec::builder()
        .with_spec_id(0)
        .add_partition_field(TIMESTAMP, "timestamp_hour", Transform::Hour)
        .and_then(|b| b.add_partition_field(PARTITION, "partition", Transform::Identity))
        .expect("the partition spec is valid")
        .build()
}

/// Kafka's timestamp type ids, as the `timestamp_type` column holds them.
pub const CREATE_TIME: i32 = 0;
pub const LOG_APPEND_TIME: i32 = 1;

const MICROS_PER_HOUR: i64 = 3_600_000_000;

/// A record timestamp (ms) in microseconds, clamped to what an `int` hour can name: a
/// producer may send any 64-bit timestamp, and the row's hour must be the one its partition
/// value says.
fn micros(ms: i64) -> i64 {
    let bound = i64::from(i32::MAX) * MICROS_PER_HOUR;
    ms.saturating_mul(1000).clamp(-bound, bound)
}

/// One record's batch-level facts.
#[derive(Clone, Copy, Debug)]
pub struct BatchFacts {
    pub timestamp_type: i32,
    /// `None` when the batch names no producer (-1).
    pub producer: Option<(i64, i16)>,
}

/// Rows of one Kafka partition, by hour of timestamp, in offset order within each hour.
pub struct Rows {
    partition: i32,
    hours: BTreeMap<i32, Columns>,
    bytes: usize,
    rows: usize,
}

#[derive(Default)]
struct Columns {
    offsets: Vec<i64>,
    timestamps: Vec<i64>,
    timestamp_types: Vec<i32>,
    keys: Vec<Option<Vec<u8>>>,
    values: Vec<Option<Vec<u8>>>,
    header_offsets: Vec<i32>,
    header_keys: Vec<String>,
    header_values: Vec<Option<Vec<u8>>>,
    headers_valid: Vec<bool>,
    producer_ids: Vec<Option<i64>>,
    producer_epochs: Vec<Option<i32>>,
}

impl Rows {
    pub fn new(partition: i32) -> Rows {
        Rows {
            partition,
            hours: BTreeMap::new(),
            bytes: 0,
            rows: 0,
        }
    }

    /// About the memory the rows hold.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn len(&self) -> usize {
        self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Adds a record. A header whose key is not UTF-8 (Kafka's clients only send strings,
    /// but the wire allows any bytes) is kept with its key's bytes replaced lossily; headers
    /// that do not parse (a hostile producer's, under a valid CRC) make the row's `headers`
    /// null rather than stop the table. Returns whether the headers were kept.
    pub fn push(&mut self, r: &Record<'_>, facts: BatchFacts) -> bool {
        let headers = crate::log::records::headers(r.headers);
        let us = micros(r.timestamp);
        let hour = i32::try_from(us.div_euclid(MICROS_PER_HOUR)).unwrap_or(i32::MAX);
        let c = self.hours.entry(hour).or_default();
        if c.header_offsets.is_empty() {
            c.header_offsets.push(0);
        }
        let mut size = 64 + r.key.map_or(0, <[u8]>::len) + r.value.map_or(0, <[u8]>::len);
        for (k, v) in headers.iter().flatten() {
            c.header_keys.push(String::from_utf8_lossy(k).into_owned());
            c.header_values.push(v.map(<[u8]>::to_vec));
            size += 16 + k.len() + v.map_or(0, <[u8]>::len);
        }
        // Rows are flushed every few MiB, far below i32 offsets.
        c.header_offsets
            .push(i32::try_from(c.header_keys.len()).unwrap_or(i32::MAX));
        c.headers_valid.push(headers.is_some());
        c.offsets.push(r.offset);
        c.timestamps.push(us);
        c.timestamp_types.push(facts.timestamp_type);
        c.keys.push(r.key.map(<[u8]>::to_vec));
        c.values.push(r.value.map(<[u8]>::to_vec));
        c.producer_ids.push(facts.producer.map(|(id, _)| id));
        c.producer_epochs
            .push(facts.producer.map(|(_, e)| i32::from(e)));
        self.bytes += size;
        self.rows += 1;
        headers.is_some()
    }

    /// The rows by hour, in hour order; the rows are taken.
    pub fn take_hours(&mut self) -> Vec<Hour> {
        let hours = std::mem::take(&mut self.hours);
        self.bytes = 0;
        self.rows = 0;
        (hours.into_iter())
            .map(|(hour, columns)| Hour {
                hour,
                partition: self.partition,
                columns,
            })
            .collect()
    }
}

/// One hour of one Kafka partition's rows, in offset order.
pub struct Hour {
    hour: i32,
    partition: i32,
    columns: Columns,
}

/// Columns by name.
pub type Named = Vec<(String, ArrayRef)>;

impl Hour {
    pub fn len(&self) -> usize {
        self.columns.offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.columns.offsets.is_empty()
    }

    pub fn offsets(&self) -> &[i64] {
        &self.columns.offsets
    }

    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// The partition key of the hour's rows in a table of `spec` and `schema`.
    pub fn key(&self, spec: &PartitionSpec, schema: &IcebergSchemaRef) -> PartitionKey {
        PartitionKey::new(
            spec.clone(),
            schema.clone(),
            Struct::from_iter([
                Some(Literal::int(self.hour)),
                Some(Literal::int(self.partition)),
            ]),
        )
    }

    /// The `key_value` columns of the rows `keep` selects (all with `None`), nested types as
    /// the table whose Arrow schema is `arrow` has them (their field ids are that table's).
    pub fn columns(
        &self,
        arrow: &ArrowSchema,
        keep: Option<&BooleanArray>,
    ) -> Result<Named, String> {
        let columns = self.columns.arrays(self.partition, arrow)?;
        match keep {
            None => Ok(columns),
            Some(keep) => (columns.into_iter())
                .map(|(name, c)| {
                    Ok((
                        name,
                        arrow_select::filter::filter(&c, keep).map_err(|e| e.to_string())?,
                    ))
                })
                .collect(),
        }
    }
}

/// A record batch of the table whose Arrow schema is `arrow`, its columns taken by name from
/// `columns`: a column the table has and the rows do not (one added to the schema later than
/// these rows were decoded) is null.
pub fn assemble(arrow: &SchemaRef, mut columns: Named, rows: usize) -> Result<RecordBatch, String> {
    let arrays = (arrow.fields().iter())
        .map(|f| match columns.iter().position(|(n, _)| n == f.name()) {
            Some(i) => Ok(columns.swap_remove(i).1),
            None if f.is_nullable() => Ok(arrow_array::new_null_array(f.data_type(), rows)),
            None => Err(format!("no values for required column {}", f.name())),
        })
        .collect::<Result<Vec<_>, String>>()?;
    let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(rows));
    RecordBatch::try_new_with_options(arrow.clone(), arrays, &options).map_err(|e| e.to_string())
}

/// The element field of a list column of `arrow`'s schema, and its struct's fields.
fn list_fields(arrow: &ArrowSchema, name: &str) -> Result<(Arc<Field>, Fields), String> {
    let field = arrow.field_with_name(name).map_err(|e| e.to_string())?;
    let DataType::List(element) = field.data_type() else {
        return Err(format!("column {name} is not a list"));
    };
    let DataType::Struct(fields) = element.data_type() else {
        return Err(format!("column {name} holds no struct"));
    };
    Ok((element.clone(), fields.clone()))
}

impl Columns {
    /// Every `key_value` column, by name.
    fn arrays(&self, partition: i32, arrow: &ArrowSchema) -> Result<Named, String> {
        let n = self.offsets.len();
        let (element, header_fields) = list_fields(arrow, "headers")?;
        let header_values = StructArray::try_new(
            header_fields,
            vec![
                Arc::new(StringArray::from_iter_values(&self.header_keys)) as ArrayRef,
                Arc::new(LargeBinaryArray::from_iter(
                    self.header_values.iter().map(Option::as_deref),
                )),
            ],
            None,
        )
        .map_err(|e| e.to_string())?;
        // Starts at 0 and never falls (each record adds its count): what `new` asserts.
        let header_offsets = OffsetBuffer::new(ScalarBuffer::from(self.header_offsets.clone()));
        let nulls = (self.headers_valid.iter().any(|v| !v))
            .then(|| arrow_buffer::NullBuffer::from(self.headers_valid.clone()));
        let headers = ListArray::try_new(element, header_offsets, Arc::new(header_values), nulls)
            .map_err(|e| e.to_string())?;
        let bytes = |v: &[Option<Vec<u8>>]| {
            Arc::new(LargeBinaryArray::from_iter(v.iter().map(Option::as_deref))) as ArrayRef
        };
        let columns: [(&str, ArrayRef); 9] = [
            ("partition", Arc::new(Int32Array::from(vec![partition; n]))),
            ("offset", Arc::new(Int64Array::from(self.offsets.clone()))),
            (
                "timestamp",
                Arc::new(
                    TimestampMicrosecondArray::from(self.timestamps.clone())
                        .with_timezone("+00:00"),
                ),
            ),
            (
                "timestamp_type",
                Arc::new(Int32Array::from(self.timestamp_types.clone())),
            ),
            ("key", bytes(&self.keys)),
            ("value", bytes(&self.values)),
            ("headers", Arc::new(headers)),
            (
                "producer_id",
                Arc::new(Int64Array::from(self.producer_ids.clone())),
            ),
            (
                "producer_epoch",
                Arc::new(Int32Array::from(self.producer_epochs.clone())),
            ),
        ];
        Ok(columns
            .into_iter()
            .map(|(n, c)| (n.to_string(), c))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use arrow_array::Array;

    use super::*;

    fn record<'a>(
        offset: i64,
        timestamp: i64,
        key: Option<&'a [u8]>,
        headers: &'a [u8],
    ) -> Record<'a> {
        Record {
            offset,
            timestamp,
            key,
            value: Some(b"v"),
            headers,
            raw: &[],
        }
    }

    #[test]
    fn a_topic_has_two_tables_side_by_side_named_apart() {
        let id = uuid::Uuid::nil();
        assert_eq!(TableKind::Dlq.name("orders"), "orders~dlq");
        assert_eq!(TableKind::of_name("orders~dlq"), ("orders", TableKind::Dlq));
        assert_eq!(TableKind::of_name("orders"), ("orders", TableKind::Topic));
        let (table, dlq) = (
            TableKind::Topic.key("/wh/", "orders", &id),
            TableKind::Dlq.key("wh", "orders", &id),
        );
        assert_eq!(table, format!("wh/strata/orders-{id}"));
        // Every S3 client spells the key alike, and neither table is inside the other.
        assert_eq!(dlq, format!("wh/strata/orders-dlq-{id}"));
        assert!(!dlq.starts_with(&format!("{table}/")));
    }

    #[test]
    fn rows_split_by_hour_keep_offset_order_nulls_and_headers() {
        let schema = Arc::new(key_value_schema());
        let arrow = iceberg::arrow::schema_to_arrow_schema(&schema).unwrap();
        let spec = partition_spec().bind(schema.clone()).unwrap();
        let facts = BatchFacts {
            timestamp_type: CREATE_TIME,
            producer: Some((7, 1)),
        };
        // One header "h" with a null value (count 1, key len 1, "h", value len -1), zig-zag.
        let one_header = [2u8, 2, b'h', 1];
        let hour = 3_600_000;
        let mut rows = Rows::new(4);
        assert!(rows.push(&record(10, 5 * hour + 1, Some(b"k"), &one_header), facts));
        assert!(rows.push(&record(11, 6 * hour, None, &[0]), facts));
        assert!(rows.push(&record(12, 5 * hour + 2, Some(b""), &[0]), facts));
        // A timestamp past what an int hour can name is clamped, not wrapped.
        assert!(rows.push(&record(13, i64::MAX, None, &[0]), facts));
        // Headers that do not parse: the row is kept, its headers null.
        assert!(!rows.push(&record(14, 6 * hour + 5, None, &[9]), facts));
        assert_eq!(rows.len(), 5);
        let arrow = Arc::new(arrow);
        let batches: Vec<(PartitionKey, RecordBatch)> = (rows.take_hours().into_iter())
            .map(|h| {
                let n = h.len();
                let batch = assemble(&arrow, h.columns(&arrow, None).unwrap(), n).unwrap();
                (h.key(&spec, &schema), batch)
            })
            .collect();
        assert!(rows.is_empty());
        let hours: Vec<i32> = (batches.iter())
            .map(|(k, _)| match k.data().fields()[0] {
                Some(Literal::Primitive(iceberg::spec::PrimitiveLiteral::Int(h))) => h,
                ref other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(hours, vec![5, 6, i32::MAX]);
        let (_, first) = &batches[0];
        let offsets = first
            .column(1)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(offsets.values(), &[10, 12]);
        let keys = first
            .column(4)
            .as_any()
            .downcast_ref::<LargeBinaryArray>()
            .unwrap();
        assert_eq!(keys.value(0), b"k");
        assert!(
            !keys.is_null(1) && keys.value(1).is_empty(),
            "empty stays empty"
        );
        let headers = first
            .column(6)
            .as_any()
            .downcast_ref::<ListArray>()
            .unwrap();
        assert_eq!(headers.value_length(0), 1);
        assert_eq!(headers.value_length(1), 0);
        let header = headers.value(0);
        let header = header.as_any().downcast_ref::<StructArray>().unwrap();
        assert!(
            header.column(1).is_null(0),
            "a null header value stays null"
        );
        let (_, second) = &batches[1];
        let keys = second
            .column(4)
            .as_any()
            .downcast_ref::<LargeBinaryArray>()
            .unwrap();
        assert!(keys.is_null(0), "a null key stays null");
        let producers = second
            .column(7)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(producers.value(0), 7);
        let headers = second
            .column(6)
            .as_any()
            .downcast_ref::<ListArray>()
            .unwrap();
        assert!(!headers.is_null(0) && headers.is_null(1));
    }
}
