//! What a topic's table looks like: the Kafka columns every table has, the partition spec
//! (hour of timestamp, then Kafka partition), where tables live, and the rows of one Kafka
//! partition gathered into Arrow record batches, one per hour of timestamps.
//!
//! Column ids are fixed (1..=12 for the Kafka columns), so a table written by one broker
//! version reads the same under the next; `value_json` columns take ids after them.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{
    ArrayRef, Int32Array, Int64Array, LargeBinaryArray, ListArray, RecordBatch, StringArray,
    StructArray, TimestampMicrosecondArray,
};
use arrow_buffer::{OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Fields, Schema as ArrowSchema, SchemaRef};
use iceberg::spec::{
    ListType, Literal, NestedField, PartitionKey, PartitionSpec, PrimitiveType, Schema,
    SchemaRef as IcebergSchemaRef, Struct, StructType, Transform, Type, UnboundPartitionSpec,
};

use crate::log::records::Record;

/// The namespace every topic table is in.
pub const NAMESPACE: &str = "strata";

/// The table of a topic: `<warehouse>/strata/<topic>-<topic id>` under the store's root.
pub fn table_key(warehouse: &str, topic: &str, topic_id: &uuid::Uuid) -> String {
    let warehouse = warehouse.trim_matches('/');
    format!("{warehouse}/{NAMESPACE}/{topic}-{topic_id}")
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

    /// The rows as record batches of `arrow` (the table schema's Arrow form), each with the
    /// partition key of its hour; the rows are taken.
    pub fn take_batches(
        &mut self,
        arrow: &SchemaRef,
        spec: &PartitionSpec,
        schema: &IcebergSchemaRef,
    ) -> Result<Vec<(PartitionKey, RecordBatch)>, String> {
        let hours = std::mem::take(&mut self.hours);
        self.bytes = 0;
        self.rows = 0;
        let mut out = Vec::with_capacity(hours.len());
        for (hour, c) in hours {
            let batch = c.into_batch(self.partition, arrow)?;
            let key = PartitionKey::new(
                spec.clone(),
                schema.clone(),
                Struct::from_iter([Some(Literal::int(hour)), Some(Literal::int(self.partition))]),
            );
            out.push((key, batch));
        }
        Ok(out)
    }
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
    fn into_batch(self, partition: i32, arrow: &SchemaRef) -> Result<RecordBatch, String> {
        let n = self.offsets.len();
        let (element, header_fields) = list_fields(arrow, "headers")?;
        let header_values = StructArray::try_new(
            header_fields,
            vec![
                Arc::new(StringArray::from(self.header_keys)) as ArrayRef,
                Arc::new(LargeBinaryArray::from_iter(self.header_values)),
            ],
            None,
        )
        .map_err(|e| e.to_string())?;
        // Starts at 0 and never falls (each record adds its count): what `new` asserts.
        let header_offsets = OffsetBuffer::new(ScalarBuffer::from(self.header_offsets));
        let nulls = (self.headers_valid.iter().any(|v| !v))
            .then(|| arrow_buffer::NullBuffer::from(self.headers_valid));
        let headers = ListArray::try_new(element, header_offsets, Arc::new(header_values), nulls)
            .map_err(|e| e.to_string())?;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from(vec![partition; n])),
            Arc::new(Int64Array::from(self.offsets)),
            Arc::new(TimestampMicrosecondArray::from(self.timestamps).with_timezone("+00:00")),
            Arc::new(Int32Array::from(self.timestamp_types)),
            Arc::new(LargeBinaryArray::from_iter(self.keys)),
            Arc::new(LargeBinaryArray::from_iter(self.values)),
            Arc::new(headers),
            Arc::new(Int64Array::from(self.producer_ids)),
            Arc::new(Int32Array::from(self.producer_epochs)),
        ];
        RecordBatch::try_new(arrow.clone(), columns).map_err(|e| e.to_string())
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
    fn rows_split_by_hour_keep_offset_order_nulls_and_headers() {
        let schema = Arc::new(key_value_schema());
        let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema).unwrap());
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
        let batches = rows.take_batches(&arrow, &spec, &schema).unwrap();
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
