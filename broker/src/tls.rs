//! TLS with rustls over aws-lc-rs (the one crypto stack of the build): server and client
//! configurations from PEM files named as librdkafka names them, and the server's
//! configuration reloaded when its files change, so certificates rotate without a restart.
//!
//! Invariants:
//! - TLS 1.2 is the oldest version spoken; TLS 1.3 is preferred whenever both sides speak it;
//! - a reload that fails (a half-written file, a key that does not match) keeps the
//!   configuration in use and says why; connections are never left without one;
//! - a handshake in progress keeps the configuration it started with; new connections get the
//!   newest.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::SystemTime;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig, SupportedProtocolVersion};

/// Why TLS material could not be used. Names files, never their contents.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {why}")]
    File { path: PathBuf, why: String },
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// Whether a server asks for client certificates (Kafka's `ssl.client.auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    None,
    Requested,
    Required,
}

impl ClientAuth {
    pub fn parse(s: &str) -> Option<ClientAuth> {
        match s {
            "none" => Some(ClientAuth::None),
            "requested" => Some(ClientAuth::Requested),
            "required" => Some(ClientAuth::Required),
            _ => None,
        }
    }
}

/// The PEM files of one side and how it authenticates the other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// Own certificate chain and key (a client without them presents no certificate).
    pub certificate: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// Certificates that sign the peer's: clients' for a server, the server's for a client.
    pub ca: Option<PathBuf>,
    pub client_auth: ClientAuth,
    /// Oldest TLS version accepted: 2 for TLS 1.2, 3 for TLS 1.3.
    pub min_version: u8,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn versions(min: u8) -> &'static [&'static SupportedProtocolVersion] {
    static BOTH: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13, &rustls::version::TLS12];
    static ONLY_13: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13];
    if min >= 3 {
        ONLY_13
    } else {
        BOTH
    }
}

fn file_error(path: &Path, why: impl ToString) -> TlsError {
    TlsError::File {
        path: path.to_path_buf(),
        why: why.to_string(),
    }
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, e))?;
    if certs.is_empty() {
        return Err(file_error(path, "no PEM certificate in it"));
    }
    Ok(certs)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| file_error(path, e))
}

fn roots(path: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(path)? {
        roots.add(cert).map_err(|e| file_error(path, e))?;
    }
    Ok(Arc::new(roots))
}

fn own_identity(
    files: &TlsFiles,
) -> Result<Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>, TlsError> {
    match (&files.certificate, &files.key) {
        (Some(cert), Some(key)) => Ok(Some((certificates(cert)?, private_key(key)?))),
        (None, None) => Ok(None),
        _ => Err(TlsError::Config(
            "ssl_certificate_location and ssl_key_location go together".into(),
        )),
    }
}

/// A server configuration from `files`.
pub fn server_config(files: &TlsFiles) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions(files.min_version))
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match (files.client_auth, &files.ca) {
        (ClientAuth::None, _) => builder.with_no_client_auth(),
        (_, None) => {
            return Err(TlsError::Config(
                "ssl_client_auth needs ssl_ca_location (the CA that signs client certificates)"
                    .into(),
            ))
        }
        (auth, Some(ca)) => {
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots(ca)?, provider);
            let verifier = if auth == ClientAuth::Requested {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            builder.with_client_cert_verifier(
                verifier
                    .build()
                    .map_err(|e| TlsError::Config(e.to_string()))?,
            )
        }
    };
    let Some((certs, key)) = own_identity(files)? else {
        return Err(TlsError::Config(
            "a TLS listener needs ssl_certificate_location and ssl_key_location".into(),
        ));
    };
    let config = builder
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Config(format!("certificate and key: {e}")))?;
    Ok(Arc::new(config))
}

/// A client configuration from `files`: the server is verified against `ca` (required), and
/// the client presents its certificate when it has one.
pub fn client_config(files: &TlsFiles) -> Result<Arc<ClientConfig>, TlsError> {
    let ca = files.ca.as_ref().ok_or_else(|| {
        TlsError::Config("a TLS client needs ssl.ca.location (the CA of the brokers)".into())
    })?;
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(versions(files.min_version))
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots(ca)?);
    let config = match own_identity(files)? {
        Some((certs, key)) => builder
            .with_client_auth_cert(certs, key)
            .map_err(|e| TlsError::Config(format!("client certificate and key: {e}")))?,
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// The name a client checks the server's certificate against: the host it dialled.
pub fn server_name(addr: &str) -> Result<ServerName<'static>, TlsError> {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string())
        .map_err(|e| TlsError::Config(format!("server name {host}: {e}")))
}

/// Server configurations that follow their files: [`Self::reload_if_changed`] rebuilds them
/// when any of the files changed since they were built. There are two: one that verifies
/// client certificates as `client_auth` says (SSL listeners), one that asks for none (SASL_SSL
/// listeners, whose clients authenticate with SASL, as Kafka's `ssl.client.auth` applies to
/// SASL_SSL only when set for that listener).
pub struct ReloadingServer {
    files: TlsFiles,
    current: RwLock<Current>,
}

struct Current {
    verifying: Arc<ServerConfig>,
    plain: Arc<ServerConfig>,
    stamps: Vec<Option<SystemTime>>,
}

impl ReloadingServer {
    pub fn load(files: TlsFiles) -> Result<ReloadingServer, TlsError> {
        let stamps = stamps(&files);
        let (verifying, plain) = Self::build(&files)?;
        Ok(ReloadingServer {
            files,
            current: RwLock::new(Current {
                verifying,
                plain,
                stamps,
            }),
        })
    }

    fn build(files: &TlsFiles) -> Result<(Arc<ServerConfig>, Arc<ServerConfig>), TlsError> {
        let plain = server_config(&TlsFiles {
            client_auth: ClientAuth::None,
            ..files.clone()
        })?;
        let verifying = match files.client_auth {
            ClientAuth::None => plain.clone(),
            _ => server_config(files)?,
        };
        Ok((verifying, plain))
    }

    /// The configuration for a new connection: verifying client certificates or not.
    pub fn config(&self, client_certificates: bool) -> Arc<ServerConfig> {
        let current = self.current.read().unwrap_or_else(PoisonError::into_inner);
        if client_certificates {
            current.verifying.clone()
        } else {
            current.plain.clone()
        }
    }

    /// Rebuilds the configuration if a file changed: `Ok(true)` when it did, `Err` (the old
    /// one stays) when the new files do not make one.
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let stamps = stamps(&self.files);
        if self
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .stamps
            == stamps
        {
            return Ok(false);
        }
        let result = Self::build(&self.files);
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        // Seen either way: a broken file is reported once, not at every check.
        current.stamps = stamps;
        (current.verifying, current.plain) = result?;
        Ok(true)
    }
}

fn stamps(files: &TlsFiles) -> Vec<Option<SystemTime>> {
    [&files.certificate, &files.key, &files.ca]
        .into_iter()
        .map(|p| {
            p.as_ref()
                .and_then(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CA-signed server certificate and key for 127.0.0.1, as PEM.
    fn issue(ca: &rcgen::Issuer<'_, rcgen::KeyPair>) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        (
            params.signed_by(&key, ca).unwrap().pem(),
            key.serialize_pem(),
        )
    }

    #[test]
    fn a_server_configuration_follows_its_files_and_keeps_the_last_good_one() {
        let dir = tempfile::tempdir().unwrap();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let ca = rcgen::Issuer::new(ca_params, ca_key);
        let files = TlsFiles {
            certificate: Some(dir.path().join("server.pem")),
            key: Some(dir.path().join("server.key")),
            ca: Some(dir.path().join("ca.pem")),
            client_auth: ClientAuth::Requested,
            min_version: 2,
        };
        let write = |(cert, key): (String, String)| {
            std::fs::write(files.certificate.as_ref().unwrap(), cert).unwrap();
            std::fs::write(files.key.as_ref().unwrap(), key).unwrap();
        };
        std::fs::write(files.ca.as_ref().unwrap(), ca_cert.pem()).unwrap();
        write(issue(&ca));
        let server = ReloadingServer::load(files.clone()).unwrap();
        let first = server.config(true);
        assert!(
            !Arc::ptr_eq(&first, &server.config(false)),
            "SASL_SSL asks for no certificate"
        );
        assert!(!server.reload_if_changed().unwrap(), "nothing changed");

        // Modification times have a granularity: wait until a rewrite shows as a change.
        let touched = |s: &ReloadingServer| stamps(&s.files) != s.current.read().unwrap().stamps;
        let rewrite = |pem: (String, String)| {
            while {
                write(pem.clone());
                !touched(&server)
            } {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        };
        rewrite(("not a certificate".into(), "nor a key".into()));
        let err = server.reload_if_changed().unwrap_err().to_string();
        assert!(err.contains("server.pem"), "{err}");
        assert!(
            Arc::ptr_eq(&first, &server.config(true)),
            "the old configuration stays"
        );
        assert!(
            !server.reload_if_changed().unwrap(),
            "a broken file is reported once"
        );

        rewrite(issue(&ca));
        assert!(server.reload_if_changed().unwrap());
        assert!(
            !Arc::ptr_eq(&first, &server.config(true)),
            "new connections get the new one"
        );

        let client = TlsFiles {
            ca: None,
            client_auth: ClientAuth::None,
            ..files.clone()
        };
        assert!(
            client_config(&client).is_err(),
            "a client must name the CA it trusts"
        );
        let mismatched = TlsFiles { key: None, ..files };
        assert!(server_config(&mismatched).is_err());
        assert_eq!(server_name("[::1]:9092").unwrap().to_str(), "::1");
    }
}
