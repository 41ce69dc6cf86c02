//! The read endpoints of the Apache Iceberg REST catalog (its OpenAPI spec), under `/iceberg`
//! on the admin port: a reader's catalog URI is `http(s)://<admin address>/iceberg`.
//!
//! - `GET /v1/config`: where the data files are (warehouse, and for S3 the endpoint, region and
//!   addressing); credentials stay the reader's own;
//! - `GET /v1/namespaces`, `GET|HEAD /v1/namespaces/strata`;
//! - `GET /v1/namespaces/strata/tables`, `GET|HEAD /v1/namespaces/strata/tables/<topic>`
//!   (the table's metadata file location and its metadata).
//!
//! Anything else is refused with the spec's error model: tables follow their topics, so a
//! write through the catalog would be a second way to change them.

use std::collections::BTreeMap;

use hyper::StatusCode;
use serde_json::{json, Value};

use super::catalog::TableCatalog;
use super::layout::NAMESPACE;
use super::Iceberg;
use crate::config::BrokerConfig;

/// The path prefix on the admin port.
pub const PREFIX: &str = "/iceberg";

/// What a request under [`PREFIX`] asks for, decided from its method and path alone.
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    Config,
    Namespaces,
    Namespace {
        name: String,
        head: bool,
    },
    Tables {
        namespace: String,
    },
    Table {
        namespace: String,
        name: String,
        head: bool,
    },
    Refused(StatusCode, &'static str, String),
}

impl Request {
    /// `path` is the part after [`PREFIX`].
    pub fn parse(method: &hyper::Method, path: &str) -> Request {
        let read = method == hyper::Method::GET;
        let head = method == hyper::Method::HEAD;
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        match parts.as_slice() {
            ["v1", "config"] if read => Request::Config,
            ["v1", "namespaces"] if read => Request::Namespaces,
            ["v1", "namespaces", ns] if read || head => Request::Namespace {
                name: decode(ns),
                head,
            },
            ["v1", "namespaces", ns, "tables"] if read => Request::Tables {
                namespace: decode(ns),
            },
            ["v1", "namespaces", ns, "tables", t] if read || head => Request::Table {
                namespace: decode(ns),
                name: decode(t),
                head,
            },
            ["v1", "config" | "namespaces", ..] => Request::Refused(
                StatusCode::METHOD_NOT_ALLOWED,
                "NotSupportedException",
                "this catalog is read-only: Strata's tables follow their topics (set \
                 iceberg.mode on a topic)"
                    .into(),
            ),
            _ => Request::Refused(
                StatusCode::NOT_FOUND,
                "NoSuchEndpointException",
                format!("no endpoint {path}"),
            ),
        }
    }
}

/// Percent-decoding of one path segment; a malformed escape is kept as it is (and then names
/// no namespace or table).
fn decode(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn error(status: StatusCode, kind: &str, message: impl Into<String>) -> (StatusCode, String) {
    let body = json!({
        "error": { "message": message.into(), "type": kind, "code": status.as_u16() }
    });
    (status, body.to_string())
}

/// What a reader needs to reach the data files, beside its own credentials.
pub fn config(cfg: &BrokerConfig, catalog: &TableCatalog) -> Value {
    let mut overrides = BTreeMap::new();
    overrides.insert("warehouse".to_string(), catalog.warehouse_uri());
    if let Some(e) = &cfg.object_store_endpoint {
        overrides.insert("s3.endpoint".to_string(), e.clone());
    }
    if let Some(r) = &cfg.object_store_region {
        overrides.insert("s3.region".to_string(), r.clone());
    }
    // Java's and pyiceberg's names for the same choice.
    let path_style = !cfg.object_store_virtual_hosted_style;
    overrides.insert("s3.path-style-access".to_string(), path_style.to_string());
    overrides.insert(
        "s3.force-virtual-addressing".to_string(),
        (!path_style).to_string(),
    );
    json!({ "defaults": {}, "overrides": overrides })
}

fn namespace_ok(ns: &str) -> bool {
    ns == NAMESPACE
}

/// Answers a parsed request: status and JSON body (empty for HEAD).
pub async fn respond(
    request: Request,
    cfg: &BrokerConfig,
    iceberg: &Iceberg,
) -> (StatusCode, String) {
    let catalog = &iceberg.catalog;
    let no_namespace = |ns: &str| {
        error(
            StatusCode::NOT_FOUND,
            "NoSuchNamespaceException",
            format!("no namespace {ns}: Strata's tables are in namespace {NAMESPACE}"),
        )
    };
    match request {
        Request::Config => (StatusCode::OK, config(cfg, catalog).to_string()),
        Request::Namespaces => (
            StatusCode::OK,
            json!({ "namespaces": [[NAMESPACE]] }).to_string(),
        ),
        Request::Namespace { name, head } => match (namespace_ok(&name), head) {
            (false, _) => no_namespace(&name),
            (true, true) => (StatusCode::NO_CONTENT, String::new()),
            (true, false) => (
                StatusCode::OK,
                json!({ "namespace": [NAMESPACE], "properties": {} }).to_string(),
            ),
        },
        Request::Tables { namespace } => {
            if !namespace_ok(&namespace) {
                return no_namespace(&namespace);
            }
            let identifiers: Vec<Value> = (catalog.tables().into_iter())
                .map(|name| json!({ "namespace": [NAMESPACE], "name": name }))
                .collect();
            (
                StatusCode::OK,
                json!({ "identifiers": identifiers }).to_string(),
            )
        }
        Request::Table {
            namespace,
            name,
            head,
        } => {
            if !namespace_ok(&namespace) {
                return no_namespace(&namespace);
            }
            let no_table = || {
                error(
                    StatusCode::NOT_FOUND,
                    "NoSuchTableException",
                    format!("no table {NAMESPACE}.{name}: no topic of that name has iceberg.mode set and a table yet"),
                )
            };
            let Some((topic, kind)) = catalog.table(&name) else {
                return no_table();
            };
            if head {
                return (StatusCode::NO_CONTENT, String::new());
            }
            match catalog.load(&topic, kind).await {
                Ok(Some(table)) => {
                    let body = json!({
                        "metadata-location": table.metadata_location(),
                        "metadata": table.metadata(),
                        "config": {},
                    });
                    (StatusCode::OK, body.to_string())
                }
                Ok(None) => no_table(),
                Err(e) => error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "ServiceUnavailableException",
                    format!("the table's metadata could not be read: {e}"),
                ),
            }
        }
        Request::Refused(status, kind, message) => error(status, kind, message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(method: &str, path: &str) -> Request {
        Request::parse(&method.parse().unwrap(), path)
    }

    #[test]
    fn requests_are_decided_from_method_and_path() {
        assert_eq!(parse("GET", "/v1/config"), Request::Config);
        assert_eq!(parse("GET", "/v1/namespaces"), Request::Namespaces);
        assert_eq!(
            parse("HEAD", "/v1/namespaces/strata"),
            Request::Namespace {
                name: "strata".into(),
                head: true
            }
        );
        assert_eq!(
            parse("GET", "/v1/namespaces/strata/tables/my%2Etopic"),
            Request::Table {
                namespace: "strata".into(),
                name: "my.topic".into(),
                head: false
            }
        );
        for (method, path, status) in [
            ("POST", "/v1/namespaces", StatusCode::METHOD_NOT_ALLOWED),
            (
                "DELETE",
                "/v1/namespaces/strata/tables/t",
                StatusCode::METHOD_NOT_ALLOWED,
            ),
            (
                "POST",
                "/v1/namespaces/strata/tables/t",
                StatusCode::METHOD_NOT_ALLOWED,
            ),
            ("GET", "/v2/config", StatusCode::NOT_FOUND),
            (
                "GET",
                "/v1/namespaces/strata/tables/t/x",
                StatusCode::METHOD_NOT_ALLOWED,
            ),
            ("GET", "", StatusCode::NOT_FOUND),
        ] {
            match parse(method, path) {
                Request::Refused(s, ..) => assert_eq!(s, status, "{method} {path}"),
                other => panic!("{method} {path}: {other:?}"),
            }
        }
    }

    #[test]
    fn path_segments_are_percent_decoded_and_bad_escapes_kept() {
        assert_eq!(decode("a%20b"), "a b");
        assert_eq!(decode("%"), "%");
        assert_eq!(decode("ab%2"), "ab%2");
        assert_eq!(decode("%zz"), "%zz");
        assert_eq!(decode("%ff"), "\u{fffd}");
    }
}
