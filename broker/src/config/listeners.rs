//! Kafka-style listeners: `listeners`, `advertised_listeners`, `listener_security_protocol_map`
//! and `inter_broker_listener_name`, parsed and checked together.
//!
//! Invariants (checked by [`parse`]):
//! - listener names are unique, and so are bound ports (one socket per listener);
//! - every listener has a security protocol (from the map, or its name when it is one);
//! - every advertised listener names a listener, and the inter-broker listener exists;
//! - a listener bound to a wildcard address is advertised explicitly (clients cannot reach
//!   `0.0.0.0`).

use std::collections::BTreeMap;
use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};

use super::error::ConfigError;

/// Kafka's `security.protocol` of a listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub fn parse(s: &str) -> Option<SecurityProtocol> {
        Some(match s.to_ascii_uppercase().as_str() {
            "PLAINTEXT" => SecurityProtocol::Plaintext,
            "SSL" => SecurityProtocol::Ssl,
            "SASL_PLAINTEXT" => SecurityProtocol::SaslPlaintext,
            "SASL_SSL" => SecurityProtocol::SaslSsl,
            _ => return None,
        })
    }

    pub fn tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    pub fn sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }
}

impl fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One listener: where it binds, what it speaks, what clients are told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub name: String,
    pub protocol: SecurityProtocol,
    pub bind: SocketAddr,
    /// `host:port` given to clients in Metadata; `None`: the bound address (known once bound,
    /// when the port is 0).
    pub advertised: Option<(String, u16)>,
}

/// The settings [`parse`] reads.
pub struct Spec<'a> {
    pub listeners: &'a str,
    pub advertised: Option<&'a str>,
    pub protocol_map: Option<&'a str>,
    pub inter_broker: Option<&'a str>,
}

/// The listeners in the order given, and the inter-broker listener's name (the first
/// listener's unless `inter_broker_listener_name` says otherwise).
pub fn parse(spec: &Spec<'_>) -> Result<(Vec<Listener>, String), ConfigError> {
    let bad = |key: &str, why: String| ConfigError::Invalid(format!("{key}: {why}"));
    let map = match spec.protocol_map {
        None => BTreeMap::new(),
        Some(m) => {
            let mut map = BTreeMap::new();
            for part in m.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let (name, proto) = part.split_once(':').ok_or_else(|| {
                    bad(
                        "listener_security_protocol_map",
                        format!("'{part}' is not NAME:PROTOCOL"),
                    )
                })?;
                let proto = SecurityProtocol::parse(proto.trim()).ok_or_else(|| {
                    bad(
                        "listener_security_protocol_map",
                        format!("'{proto}' is not PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"),
                    )
                })?;
                map.insert(name.trim().to_ascii_uppercase(), proto);
            }
            map
        }
    };
    let mut listeners: Vec<Listener> = Vec::new();
    for (name, host, port) in endpoints("listeners", spec.listeners)? {
        let protocol = match map.get(&name) {
            Some(p) => *p,
            None => SecurityProtocol::parse(&name).ok_or_else(|| {
                bad(
                    "listeners",
                    format!("listener {name} has no security protocol: add {name}:PROTOCOL to listener_security_protocol_map"),
                )
            })?,
        };
        let host = if host.is_empty() { "0.0.0.0" } else { &host };
        let bind = (host, port)
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| bad("listeners", format!("cannot resolve {host}:{port}")))?;
        if listeners.iter().any(|l| l.name == name) {
            return Err(bad("listeners", format!("listener {name} is listed twice")));
        }
        if port != 0 && listeners.iter().any(|l| l.bind.port() == port) {
            return Err(bad("listeners", format!("port {port} is used twice")));
        }
        listeners.push(Listener {
            name,
            protocol,
            bind,
            advertised: None,
        });
    }
    if listeners.is_empty() {
        return Err(bad("listeners", "no listener".into()));
    }
    if let Some(advertised) = spec.advertised {
        for (name, host, port) in endpoints("advertised_listeners", advertised)? {
            let Some(l) = listeners.iter_mut().find(|l| l.name == name) else {
                return Err(bad(
                    "advertised_listeners",
                    format!("{name} is not in listeners"),
                ));
            };
            if host.is_empty() {
                return Err(bad("advertised_listeners", format!("{name} has no host")));
            }
            l.advertised = Some((host, port));
        }
    }
    for l in &listeners {
        if l.advertised.is_none() && l.bind.ip().is_unspecified() {
            return Err(bad(
                "advertised_listeners",
                format!(
                    "listener {} binds {}: advertise an address clients can reach",
                    l.name, l.bind
                ),
            ));
        }
    }
    let inter_broker = match spec.inter_broker {
        Some(name) => {
            let name = name.trim().to_ascii_uppercase();
            if !listeners.iter().any(|l| l.name == name) {
                return Err(bad(
                    "inter_broker_listener_name",
                    format!("{name} is not in listeners"),
                ));
            }
            name
        }
        None => listeners[0].name.clone(),
    };
    Ok((listeners, inter_broker))
}

/// `NAME://host:port,...` as (upper-case name, host without brackets, port).
fn endpoints(key: &str, spec: &str) -> Result<Vec<(String, String, u16)>, ConfigError> {
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = |why: &str| {
            ConfigError::Invalid(format!("{key}: '{part}' {why} (expected NAME://host:port)"))
        };
        let (name, addr) = part.split_once("://").ok_or_else(|| bad("has no '://'"))?;
        let (host, port) = addr.rsplit_once(':').ok_or_else(|| bad("has no port"))?;
        let port: u16 = port.parse().map_err(|_| bad("has a bad port"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(bad("has a bad listener name"));
        }
        out.push((name.to_ascii_uppercase(), host.to_string(), port));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec<'a>(listeners: &'a str) -> Spec<'a> {
        Spec {
            listeners,
            advertised: None,
            protocol_map: None,
            inter_broker: None,
        }
    }

    #[test]
    fn kafka_style_listeners_parse_with_protocols_and_advertised_addresses() {
        let (ls, inter) = parse(&Spec {
            listeners: "INTERNAL://127.0.0.1:9092, external://0.0.0.0:9094,SSL://[::1]:9095",
            advertised: Some("EXTERNAL://broker-1.example.com:19094"),
            protocol_map: Some("INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL"),
            inter_broker: Some("internal"),
        })
        .expect("valid");
        assert_eq!(inter, "INTERNAL");
        assert_eq!(ls.len(), 3);
        assert_eq!(ls[0].protocol, SecurityProtocol::Plaintext);
        assert_eq!(ls[1].name, "EXTERNAL");
        assert_eq!(ls[1].protocol, SecurityProtocol::SaslSsl);
        assert_eq!(
            ls[1].advertised,
            Some(("broker-1.example.com".to_string(), 19094))
        );
        assert_eq!(ls[2].protocol, SecurityProtocol::Ssl);
        assert_eq!(ls[2].bind, "[::1]:9095".parse().unwrap());
        let (_, inter) = parse(&spec("SASL_SSL://127.0.0.1:1,PLAINTEXT://127.0.0.1:2")).unwrap();
        assert_eq!(inter, "SASL_SSL", "the first listener by default");
    }

    #[test]
    fn inconsistent_listeners_are_refused_with_the_key_named() {
        for (s, key) in [
            ("", "listeners"),
            ("PLAINTEXT:127.0.0.1:1", "listeners"),
            ("PLAINTEXT://127.0.0.1", "listeners"),
            ("PLAINTEXT://127.0.0.1:x", "listeners"),
            ("CUSTOM://127.0.0.1:1", "listeners"),
            (
                "PLAINTEXT://127.0.0.1:1,PLAINTEXT://127.0.0.1:2",
                "listeners",
            ),
            ("PLAINTEXT://127.0.0.1:1,SSL://127.0.0.1:1", "listeners"),
            ("PLAINTEXT://0.0.0.0:1", "advertised_listeners"),
            ("PLAINTEXT://:1", "advertised_listeners"),
        ] {
            let err = parse(&spec(s)).expect_err(s).to_string();
            assert!(
                err.starts_with(&format!("invalid configuration: {key}")),
                "{s}: {err}"
            );
        }
        let err = parse(&Spec {
            advertised: Some("SSL://h:1"),
            ..spec("PLAINTEXT://127.0.0.1:1")
        })
        .unwrap_err();
        assert!(err.to_string().contains("SSL is not in listeners"), "{err}");
        let err = parse(&Spec {
            inter_broker: Some("SSL"),
            ..spec("PLAINTEXT://127.0.0.1:1")
        })
        .unwrap_err();
        assert!(
            err.to_string().contains("inter_broker_listener_name"),
            "{err}"
        );
        let err = parse(&Spec {
            protocol_map: Some("A:TLS"),
            ..spec("A://127.0.0.1:1")
        })
        .unwrap_err();
        assert!(err.to_string().contains("'TLS' is not"), "{err}");
    }
}
