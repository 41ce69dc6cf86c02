//! TLS material made by the test itself (rcgen): a CA, a server certificate for 127.0.0.1 and
//! localhost, and client certificates, as PEM files in a directory.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

/// PEM files of one test's CA and server.
pub struct Certs {
    pub dir: PathBuf,
    pub ca_cert: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    ca_params: CertificateParams,
    ca_key_pem: String,
}

impl Certs {
    /// A fresh CA and a server certificate it signed, in `dir`.
    pub fn generate(dir: &Path) -> Certs {
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "strata test CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = ca_params.self_signed(&ca_key).expect("CA certificate");
        let certs = Certs {
            dir: dir.to_path_buf(),
            ca_cert: dir.join("ca.pem"),
            server_cert: dir.join("server.pem"),
            server_key: dir.join("server.key"),
            ca_params,
            ca_key_pem: ca_key.serialize_pem(),
        };
        std::fs::write(&certs.ca_cert, ca.pem()).expect("write CA");
        certs.reissue_server();
        certs
    }

    fn issuer(&self) -> Issuer<'_, KeyPair> {
        let key = KeyPair::from_pem(&self.ca_key_pem).expect("CA key");
        Issuer::from_params(&self.ca_params, key)
    }

    /// Signs a new server certificate (and key) and writes it over the old one.
    pub fn reissue_server(&self) {
        let key = KeyPair::generate().expect("server key");
        let mut params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
                .expect("server params");
        params
            .distinguished_name
            .push(DnType::CommonName, "strata test broker");
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = params
            .signed_by(&key, &self.issuer())
            .expect("server certificate");
        // Key first: a reload between the two writes sees a mismatch and keeps the old pair.
        write_atomically(&self.server_key, key.serialize_pem().as_bytes());
        write_atomically(&self.server_cert, cert.pem().as_bytes());
    }

    /// A client certificate whose subject is `CN=<common_name>,O=strata-tests`: its PEM
    /// certificate and key paths.
    pub fn client(&self, common_name: &str) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().expect("client key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("client params");
        // Encoded most general first, as CAs issue them; read back (RFC 2253) CN first. (The
        // default name holds a CN already, which would keep its place at the front.)
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::OrganizationName, "strata-tests");
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params
            .signed_by(&key, &self.issuer())
            .expect("client certificate");
        let (cert_path, key_path) = (
            self.dir.join(format!("{common_name}.pem")),
            self.dir.join(format!("{common_name}.key")),
        );
        write_atomically(&cert_path, cert.pem().as_bytes());
        write_atomically(&key_path, key.serialize_pem().as_bytes());
        (cert_path, key_path)
    }

    /// A TLS connection to `addr` trusting our CA (no client certificate), not yet handshaken.
    pub fn tls_client(
        &self,
        addr: &str,
    ) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls::pki_types::CertificateDer::pem_file_iter(&self.ca_cert).expect("CA") {
            roots.add(c.expect("CA pem")).expect("CA root");
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
        let conn = rustls::ClientConnection::new(Arc::new(config), name).expect("client");
        let sock = TcpStream::connect(addr).expect("connect");
        sock.set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .expect("timeout");
        rustls::StreamOwned::new(conn, sock)
    }

    /// `method path` over HTTPS at `addr` (trusting our CA), presenting `client` (a certificate
    /// and key path) when given, with more `headers`: the status and body, or why the
    /// exchange failed (a refused handshake reads as an error, not a status).
    pub fn https_request(
        &self,
        addr: &str,
        client: Option<(&Path, &Path)>,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> std::io::Result<(u16, String)> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(&self.ca_cert).expect("CA") {
            roots.add(c.expect("CA pem")).expect("CA root");
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots);
        let config = match client {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain: Vec<_> = (CertificateDer::pem_file_iter(cert).expect("client cert"))
                    .map(|c| c.expect("client cert pem"))
                    .collect();
                let key = PrivateKeyDer::from_pem_file(key).expect("client key");
                builder
                    .with_client_auth_cert(chain, key)
                    .expect("client auth")
            }
        };
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
        let conn = rustls::ClientConnection::new(Arc::new(config), name).expect("client");
        let sock = TcpStream::connect(addr)?;
        sock.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
        let mut tls = rustls::StreamOwned::new(conn, sock);
        let extra: String = (headers.iter())
            .map(|(k, v)| format!("{k}: {v}\r\n"))
            .collect();
        write!(
            tls,
            "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n{extra}Content-Length: {}\r\n\r\n{body}",
            body.len()
        )?;
        tls.flush()?;
        let mut raw = Vec::new();
        match tls.read_to_end(&mut raw) {
            Ok(_) => {}
            // Servers may close without a close_notify once the answer is sent.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
            Err(e) => return Err(e),
        }
        let text = String::from_utf8_lossy(&raw).into_owned();
        let (head, body) = text
            .split_once("\r\n\r\n")
            .ok_or_else(|| std::io::Error::other(format!("no HTTP answer: {text:?}")))?;
        let status = (head.split_whitespace().nth(1))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("bad status line: {head:?}")))?;
        Ok((status, body.to_string()))
    }

    /// The DER of the certificate a TLS server at `addr` presents (verified against our CA).
    pub fn served_certificate(&self, addr: &str) -> Vec<u8> {
        let mut tls = self.tls_client(addr);
        // A Kafka ApiVersions v0 request drives the handshake to completion.
        let _ = tls.write_all(&[0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 1, 0, 0]);
        let _ = tls.flush();
        let mut len = [0u8; 4];
        let _ = tls.read_exact(&mut len);
        tls.conn
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.to_vec())
            .expect("the server presented a certificate")
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}
