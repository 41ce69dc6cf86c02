//! Minimal HTTP/1.0 requests over a plain TcpStream, for the admin endpoints and the S3 test
//! server.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::Broker;

/// A response: status code and body.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    /// The status line and headers, as sent.
    pub head: String,
    pub body: String,
}

impl HttpResponse {
    /// A header's value (the name in any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        (self.head.lines().skip(1))
            .filter_map(|l| l.split_once(':'))
            .find(|(n, _)| n.trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    }
}

/// `GET path` on `addr` with HTTP/1.0, reading until the server closes.
pub fn http_get(addr: &str, path: &str) -> Result<HttpResponse> {
    http_request(addr, "GET", path, "")
}

/// `method path` with `body` on `addr` with HTTP/1.0, reading until the server closes.
pub fn http_request(addr: &str, method: &str, path: &str, body: &str) -> Result<HttpResponse> {
    http_request_with(addr, method, path, &[], body)
}

/// [`http_request`] with more headers (`name`, `value`).
pub fn http_request_with(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<HttpResponse> {
    let mut stream = TcpStream::connect(addr).with_context(|| format!("connect {addr}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(40)))?;
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    let extra: String = (headers.iter())
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    write!(
        stream,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\nAccept: */*\r\n{extra}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .with_context(|| format!("read response to {method} {path}"))?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        bail!("malformed HTTP response to {method} {path}: {text:?}");
    };
    let status_line = head.lines().next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("bad status line {status_line:?}"))?;
    Ok(HttpResponse {
        status,
        head: head.to_string(),
        body: body.to_string(),
    })
}

/// One sample line of Prometheus text: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses the sample lines of a Prometheus text exposition (comments skipped).
pub fn parse_prometheus(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, labels, rest) = match line.find('{') {
            Some(open) => {
                let Some(close) = line.rfind('}') else {
                    continue;
                };
                (
                    &line[..open],
                    parse_labels(&line[open + 1..close]),
                    &line[close + 1..],
                )
            }
            None => match line.split_once(char::is_whitespace) {
                Some((n, r)) => (n, Vec::new(), r),
                None => continue,
            },
        };
        let Some(value) = rest.split_whitespace().next().and_then(|v| v.parse().ok()) else {
            continue;
        };
        out.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    out
}

fn parse_labels(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while matches!(chars.peek(), Some(',') | Some(' ')) {
            chars.next();
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() {
            break;
        }
        if chars.next() != Some('"') {
            break;
        }
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    if let Some(n) = chars.next() {
                        value.push(if n == 'n' { '\n' } else { n });
                    }
                }
                '"' => break,
                c => value.push(c),
            }
        }
        out.push((key.trim().to_string(), value));
    }
    out
}

impl Broker {
    /// GET on the admin listener.
    pub fn admin_get(&self, path: &str) -> Result<HttpResponse> {
        http_get(&self.admin_addr, path)
    }

    /// The text of `/metrics` (panics unless 200).
    pub fn metrics(&self) -> String {
        let resp = self.admin_get("/metrics").expect("GET /metrics");
        assert_eq!(resp.status, 200, "GET /metrics: {}", resp.body);
        resp.body
    }

    /// The sum of every sample of metric `name` (all label sets).
    pub fn metric(&self, name: &str) -> f64 {
        parse_prometheus(&self.metrics())
            .into_iter()
            .filter(|s| s.name == name)
            .map(|s| s.value)
            .sum()
    }

    /// The sum of the samples of metric `name` whose label `key` is `value`.
    pub fn metric_labelled(&self, name: &str, key: &str, value: &str) -> f64 {
        parse_prometheus(&self.metrics())
            .into_iter()
            .filter(|s| s.name == name && s.label(key) == Some(value))
            .map(|s| s.value)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_lines_are_parsed_with_labels() {
        let text = "# HELP x y\n# TYPE a counter\na_total{api=\"Produce\",v=\"a\\\"b\"} 3\nb 1.5\n";
        let s = parse_prometheus(text);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].name, "a_total");
        assert_eq!(s[0].label("api"), Some("Produce"));
        assert_eq!(s[0].label("v"), Some("a\"b"));
        assert_eq!(s[0].value, 3.0);
        assert_eq!(s[1].name, "b");
        assert_eq!(s[1].value, 1.5);
    }
}
