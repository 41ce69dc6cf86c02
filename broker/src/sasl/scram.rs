//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka uses them (KIP-84): both
//! sides of the exchange, and the credential a server stores.
//!
//! Invariants:
//! - the server side keeps only the stored credential (salt, iterations, StoredKey,
//!   ServerKey); the password and the salted password never reach it;
//! - proofs and signatures are compared in constant time;
//! - every message from the peer is parsed from what arrived, bounded by [`MAX_MESSAGE`],
//!   before anything is derived from it; a malformed one is a failure, never a panic.

use aws_lc_rs::{constant_time, digest, hmac, pbkdf2, rand};
use base64::Engine as _;

use super::SaslError;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Longest SCRAM message either side accepts (Kafka's are under 200 bytes).
pub const MAX_MESSAGE: usize = 4096;
/// Kafka's bounds on a credential's iteration count.
pub const MIN_ITERATIONS: u32 = 4096;
pub const MAX_ITERATIONS: u32 = 16384;

/// The two SCRAM mechanisms, by their SASL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    Sha256,
    Sha512,
}

impl Mechanism {
    pub const ALL: [Mechanism; 2] = [Mechanism::Sha256, Mechanism::Sha512];

    pub fn from_name(name: &str) -> Option<Mechanism> {
        match name {
            "SCRAM-SHA-256" => Some(Mechanism::Sha256),
            "SCRAM-SHA-512" => Some(Mechanism::Sha512),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Sha256 => "SCRAM-SHA-256",
            Mechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    /// Kafka's ScramMechanism enum value (DescribeUserScramCredentials, AlterUserScram...).
    pub fn kafka_type(self) -> i8 {
        match self {
            Mechanism::Sha256 => 1,
            Mechanism::Sha512 => 2,
        }
    }

    pub fn from_kafka_type(t: i8) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.kafka_type() == t)
    }

    fn hmac(self) -> hmac::Algorithm {
        match self {
            Mechanism::Sha256 => hmac::HMAC_SHA256,
            Mechanism::Sha512 => hmac::HMAC_SHA512,
        }
    }

    fn digest(self) -> &'static digest::Algorithm {
        match self {
            Mechanism::Sha256 => &digest::SHA256,
            Mechanism::Sha512 => &digest::SHA512,
        }
    }

    fn pbkdf2(self) -> pbkdf2::Algorithm {
        match self {
            Mechanism::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            Mechanism::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }

    /// Bytes of a salted password, key or signature.
    pub fn key_len(self) -> usize {
        self.digest().output_len()
    }

    fn mac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        hmac::sign(&hmac::Key::new(self.hmac(), key), data)
            .as_ref()
            .to_vec()
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        digest::digest(self.digest(), data).as_ref().to_vec()
    }

    /// RFC 5802's SaltedPassword: what AlterUserScramCredentials carries, so the broker never
    /// sees the password.
    pub fn salted_password(self, password: &str, salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut out = vec![0; self.key_len()];
        let iterations = std::num::NonZeroU32::new(iterations.max(1)).expect("at least one");
        pbkdf2::derive(
            self.pbkdf2(),
            iterations,
            salt,
            password.as_bytes(),
            &mut out,
        );
        out
    }

    /// The credential a server stores for `salted_password`.
    pub fn credential(self, salted_password: &[u8], salt: &[u8], iterations: u32) -> Credential {
        let client_key = self.mac(salted_password, b"Client Key");
        Credential {
            salt: salt.to_vec(),
            stored_key: self.hash(&client_key),
            server_key: self.mac(salted_password, b"Server Key"),
            iterations,
        }
    }
}

/// What a server stores per user and mechanism.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: u32,
}

impl Credential {
    /// Whether `password` is this credential's (for PLAIN against SCRAM credentials).
    pub fn matches(&self, mechanism: Mechanism, password: &str) -> bool {
        let salted = mechanism.salted_password(password, &self.salt, self.iterations);
        let client_key = mechanism.mac(&salted, b"Client Key");
        constant_time::verify_slices_are_equal(&mechanism.hash(&client_key), &self.stored_key)
            .is_ok()
    }
}

/// Random bytes: nonces and salts.
pub fn random(len: usize) -> Vec<u8> {
    let mut out = vec![0; len];
    rand::fill(&mut out).expect("the system random source works");
    out
}

fn nonce() -> String {
    B64.encode(random(24))
}

/// `key=value` attributes of a SCRAM message, in order.
fn attributes(msg: &str) -> Result<Vec<(char, &str)>, SaslError> {
    msg.split(',')
        .map(|part| {
            let mut chars = part.chars();
            match (chars.next(), chars.next()) {
                (Some(k), Some('=')) if k.is_ascii_alphabetic() => Ok((k, &part[2..])),
                _ => Err(SaslError::Malformed("a SCRAM attribute is not k=value")),
            }
        })
        .collect()
}

fn text(bytes: &[u8]) -> Result<&str, SaslError> {
    if bytes.len() > MAX_MESSAGE {
        return Err(SaslError::Malformed("SCRAM message too long"));
    }
    std::str::from_utf8(bytes).map_err(|_| SaslError::Malformed("SCRAM message is not UTF-8"))
}

/// RFC 5802 saslname: `=2C` is `,` and `=3D` is `=`; any other `=` is malformed.
fn decode_name(name: &str) -> Result<String, SaslError> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(SaslError::Malformed("bad escape in a SCRAM user name")),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

fn encode_name(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

/// The server's side of one exchange: client-first → server-first, client-final →
/// server-final.
pub struct Server {
    mechanism: Mechanism,
    state: ServerState,
}

enum ServerState {
    Start,
    SentFirst(Box<SentFirst>),
    Done,
}

/// What the server keeps between its first message and the client's final one.
struct SentFirst {
    user: String,
    credential: Credential,
    gs2_header: String,
    client_first_bare: String,
    server_first: String,
    client_nonce: String,
    nonce: String,
}

/// What the server side needs from its credential store.
pub trait Credentials {
    fn scram(&self, user: &str, mechanism: Mechanism) -> Option<Credential>;
}

/// A server step's outcome.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Send this and wait for the next client message.
    Continue(Vec<u8>),
    /// Authenticated as this user; send the final message.
    Done { user: String, response: Vec<u8> },
}

impl Server {
    pub fn new(mechanism: Mechanism) -> Server {
        Server {
            mechanism,
            state: ServerState::Start,
        }
    }

    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    pub fn step(&mut self, msg: &[u8], store: &dyn Credentials) -> Result<Step, SaslError> {
        let msg = text(msg)?;
        match std::mem::replace(&mut self.state, ServerState::Done) {
            ServerState::Start => self.first(msg, store),
            ServerState::SentFirst(sent) => {
                let SentFirst {
                    user,
                    credential,
                    gs2_header,
                    client_first_bare,
                    server_first,
                    client_nonce,
                    nonce,
                } = *sent;
                let attrs = attributes(msg)?;
                let (Some(('c', channel)), Some(('r', r))) =
                    (attrs.first().copied(), attrs.get(1).copied())
                else {
                    return Err(SaslError::Malformed("client-final must start c=,r="));
                };
                let Some(&('p', proof)) = attrs.last() else {
                    return Err(SaslError::Malformed("client-final has no proof"));
                };
                // No channel binding: `c` repeats the client's first gs2 header.
                let binding = B64
                    .decode(channel)
                    .map_err(|_| SaslError::Malformed("channel binding is not base64"))?;
                if binding != gs2_header.as_bytes() {
                    return Err(SaslError::Malformed(
                        "channel binding differs from gs2 header",
                    ));
                }
                // librdkafka before 2.6.1 echoes its own nonce and then the server's, which
                // already begins with it (librdkafka#4895); Kafka 3.8.1 accepts that form too.
                // Both carry this exchange's fresh server nonce, which is what defeats replay.
                let buggy_echo = r.strip_prefix(client_nonce.as_str()) == Some(nonce.as_str());
                if r != nonce && !buggy_echo {
                    return Err(SaslError::Failed("nonce mismatch"));
                }
                let proof = B64
                    .decode(proof)
                    .map_err(|_| SaslError::Malformed("proof is not base64"))?;
                let without_proof = &msg[..msg.rfind(",p=").expect("p is the last attribute")];
                let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
                let m = self.mechanism;
                let signature = m.mac(&credential.stored_key, auth_message.as_bytes());
                if proof.len() != signature.len() {
                    return Err(SaslError::Failed("invalid credentials"));
                }
                let client_key: Vec<u8> =
                    proof.iter().zip(&signature).map(|(a, b)| a ^ b).collect();
                constant_time::verify_slices_are_equal(
                    &m.hash(&client_key),
                    &credential.stored_key,
                )
                .map_err(|_| SaslError::Failed("invalid credentials"))?;
                let server_signature = m.mac(&credential.server_key, auth_message.as_bytes());
                Ok(Step::Done {
                    user,
                    response: format!("v={}", B64.encode(server_signature)).into_bytes(),
                })
            }
            ServerState::Done => Err(SaslError::Malformed("the SCRAM exchange is over")),
        }
    }

    fn first(&mut self, msg: &str, store: &dyn Credentials) -> Result<Step, SaslError> {
        // gs2-header: "n,," or "n,a=authzid," (no channel binding); then the bare message.
        let mut parts = msg.splitn(3, ',');
        let (Some(cb), Some(authzid), Some(bare)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(SaslError::Malformed("client-first has no gs2 header"));
        };
        if cb != "n" && cb != "y" {
            return Err(SaslError::Malformed("channel binding is not supported"));
        }
        let attrs = attributes(bare)?;
        let (Some(('n', name)), Some(('r', client_nonce))) =
            (attrs.first().copied(), attrs.get(1).copied())
        else {
            return Err(SaslError::Malformed("client-first must start n=,r="));
        };
        if attrs[2..]
            .iter()
            .any(|(k, v)| *k == 't' || v.contains("tokenauth"))
        {
            return Err(SaslError::Failed("delegation tokens are not supported"));
        }
        let gs2_header = format!("{cb},{authzid},");
        let user = decode_name(name)?;
        if let Some(authzid) = authzid.strip_prefix("a=") {
            if decode_name(authzid)? != user {
                return Err(SaslError::Failed("authorization id differs from the user"));
            }
        }
        if client_nonce.is_empty() {
            return Err(SaslError::Malformed("empty client nonce"));
        }
        let credential = store
            .scram(&user, self.mechanism)
            .ok_or(SaslError::Failed("invalid credentials"))?;
        let nonce = format!("{client_nonce}{}", nonce());
        let server_first = format!(
            "r={nonce},s={},i={}",
            B64.encode(&credential.salt),
            credential.iterations
        );
        let response = server_first.clone().into_bytes();
        self.state = ServerState::SentFirst(Box::new(SentFirst {
            user,
            credential,
            gs2_header,
            client_first_bare: bare.to_string(),
            server_first,
            client_nonce: client_nonce.to_string(),
            nonce,
        }));
        Ok(Step::Continue(response))
    }
}

/// The client's side: for the broker's own connections and the CLI.
pub struct Client {
    mechanism: Mechanism,
    password: String,
    client_first_bare: String,
    nonce: String,
    server_signature: Option<Vec<u8>>,
}

impl Client {
    /// The client and its first message.
    pub fn start(mechanism: Mechanism, user: &str, password: &str) -> (Client, Vec<u8>) {
        let nonce = nonce();
        let client_first_bare = format!("n={},r={nonce}", encode_name(user));
        let first = format!("n,,{client_first_bare}").into_bytes();
        let client = Client {
            mechanism,
            password: password.to_string(),
            client_first_bare,
            nonce,
            server_signature: None,
        };
        (client, first)
    }

    /// The final message, answering the server's first.
    pub fn respond(&mut self, server_first: &[u8]) -> Result<Vec<u8>, SaslError> {
        self.respond_echoing(server_first, |nonce| nonce.to_string())
    }

    /// [`Client::respond`], echoing `echo(server nonce)` as the nonce (tests of clients that
    /// echo it wrongly).
    fn respond_echoing(
        &mut self,
        server_first: &[u8],
        echo: impl Fn(&str) -> String,
    ) -> Result<Vec<u8>, SaslError> {
        let server_first = text(server_first)?;
        let attrs = attributes(server_first)?;
        let (Some(('r', nonce)), Some(('s', salt)), Some(('i', iterations))) = (
            attrs.first().copied(),
            attrs.get(1).copied(),
            attrs.get(2).copied(),
        ) else {
            return Err(SaslError::Malformed("server-first must be r=,s=,i="));
        };
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err(SaslError::Failed("the server's nonce does not extend ours"));
        }
        let salt = B64
            .decode(salt)
            .map_err(|_| SaslError::Malformed("salt is not base64"))?;
        let iterations: u32 = iterations
            .parse()
            .ok()
            .filter(|i| (1..=MAX_ITERATIONS * 64).contains(i))
            .ok_or(SaslError::Malformed("bad iteration count"))?;
        let m = self.mechanism;
        let salted = m.salted_password(&self.password, &salt, iterations);
        let client_key = m.mac(&salted, b"Client Key");
        let stored_key = m.hash(&client_key);
        let without_proof = format!("c=biws,r={}", echo(nonce));
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let signature = m.mac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(a, b)| a ^ b)
            .collect();
        let server_key = m.mac(&salted, b"Server Key");
        self.server_signature = Some(m.mac(&server_key, auth_message.as_bytes()));
        Ok(format!("{without_proof},p={}", B64.encode(proof)).into_bytes())
    }

    /// Checks the server's final message: the server knew the credential too.
    pub fn finish(&self, server_final: &[u8]) -> Result<(), SaslError> {
        let msg = text(server_final)?;
        if let Some(e) = msg.strip_prefix("e=") {
            return Err(SaslError::Refused(e.to_string()));
        }
        let v = msg
            .strip_prefix("v=")
            .ok_or(SaslError::Malformed("server-final is not v="))?;
        let v = B64
            .decode(v)
            .map_err(|_| SaslError::Malformed("server signature is not base64"))?;
        let expected = self
            .server_signature
            .as_ref()
            .ok_or(SaslError::Malformed("server-final before server-first"))?;
        constant_time::verify_slices_are_equal(&v, expected)
            .map_err(|_| SaslError::Failed("the server's signature is wrong"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct One(String, Mechanism, Credential);

    impl Credentials for One {
        fn scram(&self, user: &str, mechanism: Mechanism) -> Option<Credential> {
            (user == self.0 && mechanism == self.1).then(|| self.2.clone())
        }
    }

    fn store(user: &str, mechanism: Mechanism, password: &str) -> One {
        let salt = random(16);
        let salted = mechanism.salted_password(password, &salt, MIN_ITERATIONS);
        One(
            user.into(),
            mechanism,
            mechanism.credential(&salted, &salt, MIN_ITERATIONS),
        )
    }

    fn exchange(
        store: &One,
        m: Mechanism,
        user: &str,
        password: &str,
    ) -> Result<String, SaslError> {
        let (mut client, first) = Client::start(m, user, password);
        let mut server = Server::new(m);
        let Step::Continue(server_first) = server.step(&first, store)? else {
            panic!("the first step continues")
        };
        let last = client.respond(&server_first)?;
        match server.step(&last, store)? {
            Step::Done { user, response } => {
                client.finish(&response)?;
                Ok(user)
            }
            Step::Continue(_) => panic!("two steps"),
        }
    }

    #[test]
    fn both_mechanisms_authenticate_the_right_password_and_only_it() {
        for m in Mechanism::ALL {
            let s = store("al,i=ce", m, "s3cret");
            assert_eq!(exchange(&s, m, "al,i=ce", "s3cret").unwrap(), "al,i=ce");
            assert_eq!(
                exchange(&s, m, "al,i=ce", "wrong").unwrap_err(),
                SaslError::Failed("invalid credentials")
            );
            assert_eq!(
                exchange(&s, m, "bob", "s3cret").unwrap_err(),
                SaslError::Failed("invalid credentials")
            );
            assert!(s.2.matches(m, "s3cret") && !s.2.matches(m, "s3cre"));
        }
        let s = store("alice", Mechanism::Sha256, "pw");
        assert!(exchange(&s, Mechanism::Sha512, "alice", "pw").is_err());
    }

    #[test]
    fn malformed_and_out_of_order_messages_fail_without_panicking() {
        let s = store("alice", Mechanism::Sha256, "pw");
        for bad in [
            &b""[..],
            b"n,,",
            b"p=x,,n=alice,r=1",
            b"n,,r=1,n=alice",
            b"n,,n=al=ice,r=1",
            b"n,,n=alice,r=",
            b"n,,n=alice,r=1,tokenauth=true",
            b"n,a=bob,n=alice,r=1",
            b"\xff\xfe",
        ] {
            let mut server = Server::new(Mechanism::Sha256);
            assert!(
                server.step(bad, &s).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let mut server = Server::new(Mechanism::Sha256);
        assert!(server.step(&vec![b'a'; MAX_MESSAGE + 1], &s).is_err());
        let (_, first) = Client::start(Mechanism::Sha256, "alice", "pw");
        let Step::Continue(server_first) = server_step(&s, &first) else {
            panic!()
        };
        let nonce = String::from_utf8(server_first).unwrap();
        let nonce = &nonce[2..nonce.find(',').unwrap()];
        for bad in [
            format!("c=biws,r={nonce}"),
            format!("c=biws,r={nonce}x,p=AAAA"),
            format!("c=!!,r={nonce},p=AAAA"),
            format!("c=biws,r={nonce},p=AAAA"),
            format!("r={nonce},c=biws,p=AAAA"),
        ] {
            let mut server = Server::new(Mechanism::Sha256);
            server.step(&first, &s).unwrap();
            assert!(server.step(bad.as_bytes(), &s).is_err(), "{bad}");
            assert!(server.step(b"again", &s).is_err(), "over after a failure");
        }
    }

    #[test]
    fn librdkafkas_doubled_nonce_is_accepted_and_nothing_else_like_it() {
        let s = store("alice", Mechanism::Sha256, "pw");
        // A client that echoes `cnonce + server nonce`, as librdkafka before 2.6.1 does.
        let run = |echo: &dyn Fn(&str, &str) -> String| {
            let (mut client, first) = Client::start(Mechanism::Sha256, "alice", "pw");
            let mut server = Server::new(Mechanism::Sha256);
            let Step::Continue(server_first) = server.step(&first, &s).unwrap() else {
                panic!()
            };
            let ours = client.nonce.clone();
            let last = client
                .respond_echoing(&server_first, |r| echo(&ours, r))
                .unwrap();
            server.step(&last, &s)
        };
        let r = run(&|c, r| format!("{c}{r}"));
        assert!(r.is_ok(), "librdkafka form: {r:?}");
        assert!(run(&|_, r| r.to_string()).is_ok(), "RFC 5802's form");
        assert!(run(&|c, r| format!("{r}{c}")).is_err());
        assert!(
            run(&|c, _| format!("{c}{c}")).is_err(),
            "the server's nonce must be there"
        );
    }

    proptest::proptest! {
        /// Whatever a client sends, first or second, the server answers or refuses; it never
        /// panics, and only the right proof authenticates.
        #[test]
        fn arbitrary_messages_never_panic_or_authenticate(
            first in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            last in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            prefix in proptest::bool::ANY,
        ) {
            let s = store("alice", Mechanism::Sha256, "pw");
            let mut server = Server::new(Mechanism::Sha256);
            // Half the time a well-formed first message, so the second one is reached.
            let first = if prefix { Client::start(Mechanism::Sha256, "alice", "x").1 } else { first };
            if server.step(&first, &s).is_ok() {
                let authenticated = matches!(server.step(&last, &s), Ok(Step::Done { .. }));
                proptest::prop_assert!(!authenticated, "arbitrary bytes authenticated");
            }
        }
    }

    fn server_step(s: &One, msg: &[u8]) -> Step {
        Server::new(Mechanism::Sha256).step(msg, s).unwrap()
    }

    #[test]
    fn a_client_refuses_a_server_that_does_not_know_the_credential() {
        let (mut client, _) = Client::start(Mechanism::Sha256, "alice", "pw");
        assert!(
            client.respond(b"r=other,s=AAAA,i=4096").is_err(),
            "foreign nonce"
        );
        let ours = client.nonce.clone();
        let last = client
            .respond(format!("r={ours}x,s=AAAA,i=4096").as_bytes())
            .unwrap();
        assert!(last.starts_with(b"c=biws,r="));
        assert!(client.finish(b"v=AAAA").is_err());
        assert_eq!(
            client.finish(b"e=invalid-proof"),
            Err(SaslError::Refused("invalid-proof".into()))
        );
    }
}
