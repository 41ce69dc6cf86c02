//! `value_json` topics: each record's value is a JSON object read against the topic's
//! `iceberg.value.schema` (an Iceberg schema), whose fields are the table's columns after the
//! Kafka ones. A value that is not one JSON object, or does not fit the schema, is not a row
//! of the table: it goes to the dead-letter table with the reason, and never stops the table.
//!
//! Decoding is arrow-json's. Each value is first checked on its own to be exactly one JSON
//! object, so that no value can run into the next when a whole hour of them is decoded at
//! once; only when that fails are they decoded one at a time, to tell the bad from the good.
//!
//! The schema evolves by added optional fields only ([`evolution`]): a table's rows never
//! change meaning, and every data file already written still reads under the new schema.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, LargeBinaryArray, RecordBatch};
use arrow_json::reader::{Decoder, ReaderBuilder};
use arrow_schema::{Fields, Schema as ArrowSchema, SchemaRef};
use iceberg::spec::{NestedFieldRef, PrimitiveType, Schema, StructType, Type};
use iceberg::transaction::AddColumn;

use super::layout;

/// What a dead-letter row's `reason` says at most.
const REASON_BYTES: usize = 1024;

/// The schema `iceberg.value.schema` holds: an Iceberg schema in its JSON form.
pub fn parse_schema(value: &str) -> Result<Schema, String> {
    let schema: Schema =
        serde_json::from_str(value).map_err(|e| format!("not an Iceberg schema: {e}"))?;
    if schema.as_struct().fields().is_empty() {
        return Err("the schema has no fields".into());
    }
    Ok(schema)
}

/// Checks a value of `iceberg.value.schema`.
pub fn check_config(value: &str) -> Result<(), String> {
    check_schema(&parse_schema(value)?)
}

/// Checks a change of `iceberg.value.schema` on a `value_json` topic (see [`evolution`]); a
/// value that does not parse is [`check_config`]'s to refuse.
pub fn check_config_change(old: &str, new: &str) -> Result<(), String> {
    match (parse_schema(old), parse_schema(new)) {
        (Ok(old), Ok(new)) => check_change(&old, &new),
        _ => Ok(()),
    }
}

/// Checks a schema as `iceberg.value.schema` holds it, for `iceberg.mode=value_json`.
pub fn check_schema(value: &Schema) -> Result<(), String> {
    for f in value.as_struct().fields() {
        if layout::KAFKA_COLUMNS.contains(&f.name.as_str()) {
            return Err(format!(
                "field '{}' would be a Kafka column of the table ({}); rename it",
                f.name,
                layout::KAFKA_COLUMNS.join(", ")
            ));
        }
    }
    check_types(value.as_struct())?;
    let table = layout::value_json_schema(value)?;
    let arrow = iceberg::arrow::schema_to_arrow_schema(&table).map_err(|e| e.to_string())?;
    Values::new(&arrow).map(drop)
}

/// Nanosecond timestamps are format v3's; the tables are v2.
fn check_types(s: &StructType) -> Result<(), String> {
    for f in s.fields() {
        check_type(&f.name, &f.field_type)?;
    }
    Ok(())
}

fn check_type(name: &str, t: &Type) -> Result<(), String> {
    match t {
        Type::Primitive(PrimitiveType::TimestampNs | PrimitiveType::TimestamptzNs) => Err(format!(
            "field '{name}': nanosecond timestamps need format v3; use timestamp(tz)"
        )),
        Type::Primitive(_) => Ok(()),
        Type::Struct(s) => check_types(s),
        Type::List(l) => check_type(name, &l.element_field.field_type),
        Type::Map(m) => {
            check_type(name, &m.key_field.field_type)?;
            check_type(name, &m.value_field.field_type)
        }
    }
}

/// The columns to add to `table` (a `value_json` table's current schema) for it to hold
/// `wanted` (the topic's value schema): fields `wanted` has and the table does not, each
/// optional. Anything else (a type changed, a field made required, a new required field, a
/// required field dropped) is refused in words: such a table starts over (rewrite).
pub fn evolution(table: &Schema, wanted: &Schema) -> Result<Vec<AddColumn>, String> {
    let mut adds = Vec::new();
    let values: Vec<NestedFieldRef> = (table.as_struct().fields().iter())
        .filter(|f| !layout::KAFKA_COLUMNS.contains(&f.name.as_str()))
        .cloned()
        .collect();
    diff_struct(&values, wanted.as_struct().fields(), None, &mut adds)?;
    Ok(adds)
}

/// Whether a value schema may follow another one on the same table (see [`evolution`]).
pub fn check_change(old: &Schema, new: &Schema) -> Result<(), String> {
    let table = layout::value_json_schema(old)?;
    evolution(&table, new).map(drop)
}

fn path(parent: Option<&str>, name: &str) -> String {
    match parent {
        Some(p) => format!("{p}.{name}"),
        None => name.to_string(),
    }
}

fn diff_struct(
    have: &[NestedFieldRef],
    want: &[NestedFieldRef],
    parent: Option<&str>,
    adds: &mut Vec<AddColumn>,
) -> Result<(), String> {
    for w in want {
        let here = path(parent, &w.name);
        match have.iter().find(|h| h.name == w.name) {
            Some(h) => {
                if h.required != w.required {
                    return Err(format!(
                        "field '{here}' was {} and is now {}: only optional fields may be added",
                        if h.required { "required" } else { "optional" },
                        if w.required { "required" } else { "optional" },
                    ));
                }
                diff_type(&h.field_type, &w.field_type, &here, adds)?;
            }
            None if w.required => {
                return Err(format!(
                    "field '{here}' is new and required: rows already written have no value \
                     for it; add it as optional"
                ));
            }
            None => adds.push(match parent {
                Some(p) => AddColumn::builder()
                    .parent(p)
                    .name(w.name.clone())
                    .field_type((*w.field_type).clone())
                    .build(),
                None => AddColumn::optional(&w.name, (*w.field_type).clone()),
            }),
        }
    }
    if let Some(h) = have
        .iter()
        .find(|h| h.required && !want.iter().any(|w| w.name == h.name))
    {
        return Err(format!(
            "required field '{}' is gone from the schema",
            path(parent, &h.name)
        ));
    }
    Ok(())
}

fn diff_type(
    have: &Type,
    want: &Type,
    here: &str,
    adds: &mut Vec<AddColumn>,
) -> Result<(), String> {
    let changed = || Err(format!("field '{here}' changed type from {have} to {want}"));
    match (have, want) {
        (Type::Primitive(h), Type::Primitive(w)) if h == w => Ok(()),
        (Type::Struct(h), Type::Struct(w)) => diff_struct(h.fields(), w.fields(), Some(here), adds),
        (Type::List(h), Type::List(w)) if h.element_field.required == w.element_field.required => {
            // Fields added inside a list's struct name the list as their parent.
            diff_type(
                &h.element_field.field_type,
                &w.element_field.field_type,
                here,
                adds,
            )
        }
        (Type::Map(h), Type::Map(w))
            if h.key_field.field_type == w.key_field.field_type
                && h.value_field.required == w.value_field.required =>
        {
            diff_type(
                &h.value_field.field_type,
                &w.value_field.field_type,
                here,
                adds,
            )
        }
        _ => changed(),
    }
}

/// Decodes values into a `value_json` table's value columns.
pub struct Values {
    /// The value columns of the table's Arrow schema, in its order.
    schema: SchemaRef,
}

/// The values of one hour of rows, decoded.
pub struct Decoded {
    /// The value columns (in the table's order) of the rows that fit, in row order.
    pub columns: Vec<ArrayRef>,
    /// The rows that did not, ascending, with why.
    pub rejected: Vec<(usize, String)>,
}

impl Values {
    /// For the table whose Arrow schema is `table`: its columns other than the Kafka ones.
    pub fn new(table: &ArrowSchema) -> Result<Values, String> {
        let fields: Fields = (table.fields().iter())
            .filter(|f| !layout::KAFKA_COLUMNS.contains(&f.name().as_str()))
            .cloned()
            .collect();
        if fields.is_empty() {
            return Err("the table has no value columns".into());
        }
        let values = Values {
            schema: Arc::new(ArrowSchema::new(fields)),
        };
        values.decoder(1)?;
        Ok(values)
    }

    /// The value columns' names, in the table's order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.schema.fields().iter().map(|f| f.name().as_str())
    }

    fn decoder(&self, rows: usize) -> Result<Decoder, String> {
        (ReaderBuilder::new(self.schema.clone()))
            .with_batch_size(rows.max(1))
            .build_decoder()
            .map_err(|e| e.to_string())
    }

    /// Decodes `values` (a null value, a tombstone, reads as `{}`: a row of nulls when the
    /// schema allows it).
    pub fn decode(&self, values: &LargeBinaryArray) -> Result<Decoded, String> {
        let mut rejected = Vec::new();
        let mut text = Vec::with_capacity(values.value_data().len() + values.len());
        let mut kept = Vec::with_capacity(values.len());
        for i in 0..values.len() {
            let value = self.value(values, i);
            match one_object(value) {
                Ok(()) => {
                    text.extend_from_slice(value);
                    text.push(b'\n');
                    kept.push(i);
                }
                Err(why) => rejected.push((i, why)),
            }
        }
        let columns = match self.decode_text(&text, kept.len()) {
            Ok(batch) => batch.columns().to_vec(),
            Err(_) => {
                // One at a time: which of them does not fit, and why.
                let mut good = Vec::with_capacity(kept.len());
                for &i in &kept {
                    match self.decode_text(self.value(values, i), 1) {
                        Ok(batch) => good.push(batch),
                        Err(why) => rejected.push((i, reason(values.is_null(i), &why))),
                    }
                }
                rejected.sort_by_key(|(i, _)| *i);
                arrow_select::concat::concat_batches(&self.schema, &good)
                    .map_err(|e| e.to_string())?
                    .columns()
                    .to_vec()
            }
        };
        Ok(Decoded { columns, rejected })
    }

    fn value<'a>(&self, values: &'a LargeBinaryArray, i: usize) -> &'a [u8] {
        match values.is_null(i) {
            true => b"{}",
            false => values.value(i),
        }
    }

    /// `rows` JSON objects, each checked whole on its own, as one record batch.
    fn decode_text(&self, text: &[u8], rows: usize) -> Result<RecordBatch, String> {
        if rows == 0 {
            return Ok(RecordBatch::new_empty(self.schema.clone()));
        }
        let mut decoder = self.decoder(rows)?;
        let mut rest = text;
        while !rest.is_empty() {
            let read = decoder.decode(rest).map_err(|e| e.to_string())?;
            if read == 0 {
                break;
            }
            rest = &rest[read..];
        }
        let batch = (decoder.flush().map_err(|e| e.to_string())?)
            .unwrap_or_else(|| RecordBatch::new_empty(self.schema.clone()));
        match batch.num_rows() == rows {
            true => Ok(batch),
            false => Err(format!("{} rows decoded of {rows}", batch.num_rows())),
        }
    }
}

/// Whether `value` is exactly one JSON object (serde_json bounds its nesting).
fn one_object(value: &[u8]) -> Result<(), String> {
    serde_json::from_slice::<serde::de::IgnoredAny>(value)
        .map_err(|e| clip(format!("not JSON: {e}")))?;
    match value.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => Ok(()),
        _ => Err("not a JSON object".into()),
    }
}

fn reason(tombstone: bool, why: &str) -> String {
    let why = why.strip_prefix("Json error: ").unwrap_or(why);
    // arrow-json names a missing required field by its whole Arrow definition.
    let missing = (why
        .strip_prefix("Encountered unmasked nulls in non-nullable StructArray child: Field { \""))
    .and_then(|rest| rest.split_once('"'))
    .map(|(name, _)| format!("required field '{name}' is missing or null"));
    let why = missing.as_deref().unwrap_or(why);
    clip(match tombstone {
        true => format!("a tombstone (null value), and the schema has required fields: {why}"),
        false => format!("does not fit the schema: {why}"),
    })
}

fn clip(mut s: String) -> String {
    if s.len() > REASON_BYTES {
        let mut end = REASON_BYTES;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use arrow_array::{Int64Array, StringArray, StructArray};

    use super::*;

    fn schema(json: &str) -> Schema {
        serde_json::from_str(json).unwrap()
    }

    const ORDERS: &str = r#"{"type":"struct","schema-id":0,"fields":[
        {"id":1,"name":"id","required":true,"type":"long"},
        {"id":2,"name":"customer","required":false,"type":"string"},
        {"id":3,"name":"amount","required":false,"type":"decimal(10,2)"},
        {"id":4,"name":"at","required":false,"type":"timestamptz"},
        {"id":5,"name":"address","required":false,"type":{"type":"struct","fields":[
            {"id":6,"name":"city","required":false,"type":"string"}]}},
        {"id":7,"name":"tags","required":false,"type":{"type":"list","element-id":8,
            "element":"string","element-required":false}}]}"#;

    fn values_of(value_schema: &Schema) -> Values {
        let table = layout::value_json_schema(value_schema).unwrap();
        let arrow = iceberg::arrow::schema_to_arrow_schema(&table).unwrap();
        Values::new(&arrow).unwrap()
    }

    #[test]
    fn values_that_fit_are_rows_and_the_rest_are_refused_with_why() {
        let values = values_of(&schema(ORDERS));
        let input = LargeBinaryArray::from(vec![
            Some(br#"{"id": 1, "customer": "ann", "amount": "12.50", "at": "2026-12-07T10:00:00Z", "address": {"city": "Oslo"}, "tags": ["a", "b"]}"#.as_slice()),
            Some(br#"{"id": "x"}"#.as_slice()),
            Some(br#"{"customer": "no id"}"#.as_slice()),
            Some(br#"{"id": 4, "extra": {"ignored": true}}"#.as_slice()),
            Some(br#"{"id": 5"#.as_slice()),
            // Would complete the row before it if values ran together.
            Some(br#"}"#.as_slice()),
            Some(br#"[1, 2]"#.as_slice()),
            None,
            Some(br#"{"id": 9} {"id": 10}"#.as_slice()),
            Some(b"\xff".as_slice()),
        ]);
        let decoded = values.decode(&input).unwrap();
        let rejected: Vec<usize> = decoded.rejected.iter().map(|(i, _)| *i).collect();
        assert_eq!(
            rejected,
            vec![1, 2, 4, 5, 6, 7, 8, 9],
            "{:?}",
            decoded.rejected
        );
        let why = |i| &decoded.rejected.iter().find(|(r, _)| *r == i).unwrap().1;
        assert!(why(1).starts_with("does not fit the schema"), "{}", why(1));
        assert_eq!(
            why(2),
            "does not fit the schema: required field 'id' is missing or null"
        );
        assert!(why(4).starts_with("not JSON"), "{}", why(4));
        assert_eq!(why(6), "not a JSON object");
        assert!(why(7).starts_with("a tombstone"), "{}", why(7));
        let ids = (decoded.columns[0].as_any().downcast_ref::<Int64Array>()).unwrap();
        assert_eq!(ids.values(), &[1, 4]);
        let customers = (decoded.columns[1].as_any().downcast_ref::<StringArray>()).unwrap();
        assert_eq!(customers.value(0), "ann");
        assert!(customers.is_null(1));
        let address = (decoded.columns[4].as_any().downcast_ref::<StructArray>()).unwrap();
        assert!(!address.is_null(0) && address.is_null(1));
    }

    #[test]
    fn a_tombstone_is_a_row_of_nulls_when_every_field_is_optional() {
        let s = schema(
            r#"{"type":"struct","fields":[{"id":1,"name":"n","required":false,"type":"int"}]}"#,
        );
        let decoded = values_of(&s)
            .decode(&LargeBinaryArray::from(vec![None::<&[u8]>]))
            .unwrap();
        assert!(decoded.rejected.is_empty());
        assert!(decoded.columns[0].is_null(0));
    }

    #[test]
    fn schemas_with_kafka_column_names_or_v3_types_are_refused() {
        let bad = [
            (
                r#"{"id":1,"name":"offset","required":false,"type":"long"}"#,
                "Kafka column",
            ),
            (
                r#"{"id":1,"name":"t","required":false,"type":"timestamp_ns"}"#,
                "format v3",
            ),
        ];
        for (field, why) in bad {
            let s = schema(&format!(r#"{{"type":"struct","fields":[{field}]}}"#));
            let e = check_schema(&s).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
        check_schema(&schema(ORDERS)).unwrap();
    }

    #[test]
    fn the_schema_evolves_by_added_optional_fields_only() {
        let old = schema(ORDERS);
        let table = layout::value_json_schema(&old).unwrap();
        assert!(evolution(&table, &old).unwrap().is_empty());
        let added = ORDERS.replace(
            r#"{"id":6,"name":"city","required":false,"type":"string"}"#,
            r#"{"id":6,"name":"city","required":false,"type":"string"},
               {"id":9,"name":"zip","required":false,"type":"string"}"#,
        );
        let added = added.replace(
            r#"{"id":1,"name":"id","required":true,"type":"long"},"#,
            r#"{"id":1,"name":"id","required":true,"type":"long"},
               {"id":10,"name":"channel","required":false,"type":"string"},"#,
        );
        assert_eq!(evolution(&table, &schema(&added)).unwrap().len(), 2);
        check_change(&old, &schema(&added)).unwrap();
        let refused = [
            (
                r#""name":"id","required":true,"type":"long""#,
                r#""name":"id","required":true,"type":"string""#,
                "changed type",
            ),
            (
                r#""name":"customer","required":false"#,
                r#""name":"customer","required":true"#,
                "now required",
            ),
            (
                r#"{"id":1,"name":"id","required":true,"type":"long"},"#,
                "",
                "gone",
            ),
            (r#""name":"tags""#, r#""name":"labels""#, "__never__"),
        ];
        for (from, to, why) in refused {
            let changed = ORDERS.replace(from, to);
            match check_change(&old, &schema(&changed)) {
                Err(e) => assert!(e.contains(why), "{e}"),
                // Renaming an optional field is adding one (the old column stays, null).
                Ok(()) => assert_eq!(why, "__never__"),
            }
        }
        let required = ORDERS.replace(
            r#"{"id":1,"name":"id","required":true,"type":"long"},"#,
            r#"{"id":1,"name":"id","required":true,"type":"long"},
               {"id":10,"name":"must","required":true,"type":"string"},"#,
        );
        let e = check_change(&old, &schema(&required)).unwrap_err();
        assert!(e.contains("new and required"), "{e}");
    }
}
