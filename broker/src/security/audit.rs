//! The audit log (`audit_log`): one JSON line per authentication, successful or not, per
//! refused authorization, per change of ACLs or users, and per administrative operation
//! (topics, partitions, configs, records, reassignments, elections, groups, brokers), each with
//! who did it and from where.
//!
//! Invariants:
//! - no secret is ever written: every field comes from an explicit list at the call site
//!   (names, resources, reasons), never from a request body, token or credential;
//! - one event is one `write` of one line, so lines from concurrent connections never
//!   interleave; a failed write is counted and logged, and never fails the request.

use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use serde_json::{json, Map, Value};

use super::error::SecurityError;
use crate::clock::Clock;
use crate::config::BrokerConfig;

/// Where the audit events go, if anywhere.
pub struct AuditLog {
    out: Option<Mutex<Box<dyn Write + Send>>>,
    clock: Clock,
}

impl AuditLog {
    /// `audit_log`: unset (off), `stdout`, or a file (relative to `data_dir`), appended to.
    pub fn open(cfg: &BrokerConfig, clock: Clock) -> Result<AuditLog, SecurityError> {
        let out: Option<Box<dyn Write + Send>> = match cfg.audit_log.as_deref() {
            None | Some("") => None,
            Some("stdout") => Some(Box::new(std::io::stdout())),
            Some(path) => {
                let path = cfg.data_dir.join(Path::new(path));
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).map_err(|e| {
                        SecurityError::Config(format!("audit_log {}: {e}", path.display()))
                    })?;
                }
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .map_err(|e| {
                        SecurityError::Config(format!("audit_log {}: {e}", path.display()))
                    })?;
                Some(Box::new(file))
            }
        };
        Ok(AuditLog {
            out: out.map(Mutex::new),
            clock,
        })
    }

    /// A log that writes nothing.
    pub fn off() -> AuditLog {
        AuditLog {
            out: None,
            clock: Clock::system(),
        }
    }

    /// Writes `{"time_ms":…,"event":event,…fields}`; `fields` is a JSON object.
    pub fn record(&self, event: &str, fields: Value) {
        let Some(out) = &self.out else { return };
        let mut line = Map::new();
        line.insert("time_ms".into(), json!(self.clock.now_ms()));
        line.insert("event".into(), json!(event));
        if let Value::Object(fields) = fields {
            line.extend(fields);
        }
        let mut bytes = Value::Object(line).to_string().into_bytes();
        bytes.push(b'\n');
        let mut out = out.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = out.write_all(&bytes).and_then(|()| out.flush()) {
            tracing::error!(error = %e, event, "cannot write to the audit log");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_json_lines_in_the_data_dir() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = BrokerConfig {
            data_dir: dir.path().to_path_buf(),
            audit_log: Some("audit/audit.log".into()),
            ..BrokerConfig::default()
        };
        let log = AuditLog::open(&cfg, Clock::manual(1_700_000_000_000)).unwrap();
        log.record(
            "topic_created",
            json!({"principal": "User:a", "topic": "t"}),
        );
        log.record(
            "authentication",
            json!({"result": "failure", "reason": "bad \"quote\"\n"}),
        );
        let text = std::fs::read_to_string(dir.path().join("audit/audit.log")).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0]["event"], "topic_created");
        assert_eq!(lines[0]["topic"], "t");
        assert_eq!(lines[0]["time_ms"], 1_700_000_000_000i64);
        assert_eq!(lines[1]["reason"], "bad \"quote\"\n");
        AuditLog::off().record("ignored", json!({}));
    }
}
