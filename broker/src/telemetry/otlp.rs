//! The part of OpenTelemetry's metrics format (OTLP `MetricsData`, protobuf) that clients push
//! with KIP-714: each metric's name and its data points' latest values. Gauges and sums carry
//! one number per point; histograms and summaries are skipped (none of librdkafka's or the
//! Java client's standard client metrics is one). Fields not declared here are skipped by the
//! decoder, as protobuf allows.

use prost::Message;

#[derive(Clone, PartialEq, Message)]
pub struct MetricsData {
    #[prost(message, repeated, tag = "1")]
    pub resource_metrics: Vec<ResourceMetrics>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ResourceMetrics {
    #[prost(message, repeated, tag = "2")]
    pub scope_metrics: Vec<ScopeMetrics>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ScopeMetrics {
    #[prost(message, repeated, tag = "2")]
    pub metrics: Vec<Metric>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Metric {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "5")]
    pub gauge: Option<Points>,
    #[prost(message, optional, tag = "7")]
    pub sum: Option<Points>,
}

/// A Gauge or a Sum: its data points (a Sum's temporality and monotonicity are not needed).
#[derive(Clone, PartialEq, Message)]
pub struct Points {
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<NumberDataPoint>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NumberDataPoint {
    #[prost(message, repeated, tag = "7")]
    pub attributes: Vec<KeyValue>,
    #[prost(fixed64, tag = "3")]
    pub time_unix_nano: u64,
    #[prost(double, optional, tag = "4")]
    pub as_double: Option<f64>,
    #[prost(sfixed64, optional, tag = "6")]
    pub as_int: Option<i64>,
}

#[derive(Clone, PartialEq, Message)]
pub struct KeyValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<AnyValue>,
}

#[derive(Clone, PartialEq, Message)]
pub struct AnyValue {
    #[prost(string, optional, tag = "1")]
    pub string_value: Option<String>,
    #[prost(bool, optional, tag = "2")]
    pub bool_value: Option<bool>,
    #[prost(int64, optional, tag = "3")]
    pub int_value: Option<i64>,
    #[prost(double, optional, tag = "4")]
    pub double_value: Option<f64>,
}

/// One pushed value: the metric's name, its point's attributes as `k=v` pairs joined by
/// commas (sorted, so a series keeps its identity between pushes), and the number.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub attributes: String,
    pub value: f64,
}

/// The numbers in `bytes` (an uncompressed `MetricsData`) whose metric name starts with one
/// of `prefixes` (an empty prefix takes every metric).
pub fn samples(bytes: &[u8], prefixes: &[String]) -> Result<Vec<Sample>, prost::DecodeError> {
    let data = MetricsData::decode(bytes)?;
    let mut out = Vec::new();
    let metrics = (data.resource_metrics.iter())
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .filter(|m| prefixes.iter().any(|p| m.name.starts_with(p.as_str())));
    for m in metrics {
        let points = m.gauge.iter().chain(&m.sum).flat_map(|p| &p.data_points);
        for p in points {
            let Some(value) = p.as_double.or(p.as_int.map(|i| i as f64)) else {
                continue;
            };
            let mut attributes: Vec<String> = (p.attributes.iter())
                .map(|kv| format!("{}={}", kv.key, any_value(kv.value.as_ref())))
                .collect();
            attributes.sort();
            out.push(Sample {
                name: m.name.clone(),
                attributes: attributes.join(","),
                value,
            });
        }
    }
    Ok(out)
}

fn any_value(v: Option<&AnyValue>) -> String {
    match v {
        Some(AnyValue {
            string_value: Some(s),
            ..
        }) => s.clone(),
        Some(AnyValue {
            bool_value: Some(b),
            ..
        }) => b.to_string(),
        Some(AnyValue {
            int_value: Some(i), ..
        }) => i.to_string(),
        Some(AnyValue {
            double_value: Some(d),
            ..
        }) => d.to_string(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(value: f64, node: i64) -> NumberDataPoint {
        NumberDataPoint {
            attributes: vec![KeyValue {
                key: "node.id".into(),
                value: Some(AnyValue {
                    int_value: Some(node),
                    ..AnyValue::default()
                }),
            }],
            time_unix_nano: 1,
            as_double: Some(value),
            as_int: None,
        }
    }

    #[test]
    fn gauges_and_sums_are_read_and_other_metrics_filtered_out() {
        let metric = |name: &str, gauge: bool, p: NumberDataPoint| Metric {
            name: name.into(),
            gauge: gauge.then(|| Points {
                data_points: vec![p.clone()],
            }),
            sum: (!gauge).then(|| Points {
                data_points: vec![p],
            }),
        };
        let data = MetricsData {
            resource_metrics: vec![ResourceMetrics {
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![
                        metric(
                            "org.apache.kafka.producer.record.queue.time.avg",
                            true,
                            point(1.5, 1),
                        ),
                        metric(
                            "org.apache.kafka.producer.connection.creation.total",
                            false,
                            point(3.0, 2),
                        ),
                        metric(
                            "org.apache.kafka.consumer.poll.idle.ratio.avg",
                            true,
                            point(0.5, 1),
                        ),
                    ],
                }],
            }],
        };
        let bytes = data.encode_to_vec();
        let got = samples(&bytes, &["org.apache.kafka.producer.".into()]).unwrap();
        assert_eq!(
            got,
            vec![
                Sample {
                    name: "org.apache.kafka.producer.record.queue.time.avg".into(),
                    attributes: "node.id=1".into(),
                    value: 1.5
                },
                Sample {
                    name: "org.apache.kafka.producer.connection.creation.total".into(),
                    attributes: "node.id=2".into(),
                    value: 3.0
                },
            ]
        );
        assert_eq!(samples(&bytes, &[String::new()]).unwrap().len(), 3);
        assert!(samples(&bytes, &[]).unwrap().is_empty());
    }

    #[test]
    fn garbage_is_a_decode_error_not_a_panic() {
        for bad in [
            &b"\xff\xff\xff\xff"[..],
            b"\x0a\xff\xff\xff\xff\x0f",
            b"\x0a\x05ab",
        ] {
            assert!(samples(bad, &[String::new()]).is_err(), "{bad:?}");
        }
    }
}
