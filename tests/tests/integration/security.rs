//! Listeners, TLS and SASL with real clients: librdkafka on every listener type and
//! mechanism, the `strata user` CLI, and hostile or mistaken clients that must be refused
//! without disturbing anyone else.

use std::time::Duration;

use kafka_protocol::messages::{
    ApiVersionsRequest, MetadataRequest, SaslAuthenticateRequest, SaslAuthenticateResponse,
    SaslHandshakeRequest,
};
use kafka_protocol::records::Compression;
use rdkafka::client::OAuthToken;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::ConsumerContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::producer::{BaseRecord, FutureProducer, FutureRecord, Producer, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;
use strata_tests::certs::Certs;
use strata_tests::tokens::TokenIssuer;
use strata_tests::{
    block_on, encode_batch, strata_bin, unique_topic, wait_for, Broker, BrokerOpts, Cluster,
    KafkaConn, RawRecord,
};

pub(crate) const PASSWORD: &str = "alice-s3cret";
const SASL_AUTHENTICATION_FAILED: i16 = 58;
const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
const ILLEGAL_SASL_STATE: i16 = 34;
const UNSUPPORTED_SASL_MECHANISM: i16 = 33;

/// A broker with one listener of each security protocol, every SASL mechanism, and TLS
/// material from `certs`.
fn secured_broker(certs: &Certs) -> Broker {
    Broker::start(secured(certs))
}

fn secured(certs: &Certs) -> BrokerOpts {
    BrokerOpts::new()
            .env(
                "STRATA_LISTENERS",
                "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
            )
            .env("STRATA_SASL_ENABLED_MECHANISMS", "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512")
            .env("STRATA_SSL_CERTIFICATE_LOCATION", certs.server_cert.display())
            .env("STRATA_SSL_KEY_LOCATION", certs.server_key.display())
            .env("STRATA_SSL_CA_LOCATION", certs.ca_cert.display())
            .env("STRATA_AUDIT_LOG", "audit.log")
}

/// A broker started with `opts` whose user alice (password [`PASSWORD`], both SCRAM
/// mechanisms) was created with `strata user create` through its PLAINTEXT listener.
pub(crate) fn with_alice(opts: BrokerOpts) -> Broker {
    let broker = Broker::start(opts);
    let plaintext = broker.listener("PLAINTEXT").to_string();
    strata(&[
        "user",
        "create",
        "alice",
        "--password",
        PASSWORD,
        "-b",
        &plaintext,
    ]);
    broker
}

/// A SASL PLAIN exchange on a raw connection: the handshake (which must be accepted), then the
/// authentication's answer.
pub(crate) fn sasl_plain(
    c: &mut KafkaConn,
    user: &str,
    password: &str,
) -> SaslAuthenticateResponse {
    let hs = c
        .request(
            1,
            &SaslHandshakeRequest::default().with_mechanism("PLAIN".into()),
        )
        .unwrap();
    assert_eq!(hs.error_code, 0);
    let token = format!("\0{user}\0{password}").into_bytes();
    c.request(
        2,
        &SaslAuthenticateRequest::default().with_auth_bytes(token.into()),
    )
    .unwrap()
}

/// Runs the `strata` CLI; its stdout, or a panic with both outputs.
pub(crate) fn strata(args: &[&str]) -> String {
    let out = std::process::Command::new(strata_bin())
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run strata");
    assert!(
        out.status.success(),
        "strata {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// librdkafka settings for one way in: the listener's address and its security settings.
fn client(broker: &Broker, listener: &str, security: &[(&str, &str)]) -> ClientConfig {
    let mut cfg = broker.client_config();
    cfg.set("bootstrap.servers", broker.listener(listener));
    for (k, v) in security {
        cfg.set(*k, *v);
    }
    cfg
}

/// Produces `n` records, then reads them back in a consumer group that commits: the
/// client's whole life on one listener.
fn produce_consume_commit(cfg: &ClientConfig, topic: &str, n: usize) {
    let mut pcfg = cfg.clone();
    pcfg.set("acks", "all").set("linger.ms", "5");
    let producer: ThreadedProducer<DefaultProducerContext> = pcfg.create().expect("producer");
    for i in 0..n {
        let value = format!("v{i}");
        producer
            .send(BaseRecord::to(topic).key("k").payload(&value))
            .map_err(|(e, _)| e)
            .expect("enqueue");
    }
    producer
        .flush(Duration::from_secs(30))
        .expect("all delivered");
    let mut ccfg = cfg.clone();
    ccfg.set("group.id", unique_topic("sec-group"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false");
    let consumer: BaseConsumer = ccfg.create().expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while seen.len() < n {
        assert!(
            std::time::Instant::now() < deadline,
            "{topic}: {} of {n} consumed",
            seen.len()
        );
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                seen.push(String::from_utf8_lossy(m.payload().unwrap_or(b"")).into_owned())
            }
            Some(Err(e)) => eprintln!("{topic}: {e}"),
            None => {}
        }
    }
    let expected: Vec<String> = (0..n).map(|i| format!("v{i}")).collect();
    assert_eq!(seen, expected, "{topic}: in order, each once");
    consumer
        .commit_consumer_state(CommitMode::Sync)
        .expect("commit");
}

#[test]
fn every_listener_and_mechanism_serves_produce_consume_and_a_group() {
    let dir = tempfile::tempdir().unwrap();
    let certs = Certs::generate(dir.path());
    let broker = with_alice(secured(&certs));
    let plaintext = broker.listener("PLAINTEXT").to_string();
    let listed = strata(&["user", "list", "-b", &plaintext]);
    assert!(
        listed.contains("alice\tSCRAM-SHA-256:8192,SCRAM-SHA-512:8192"),
        "{listed}"
    );
    assert!(!listed.contains(PASSWORD));

    let ca = certs.ca_cert.display().to_string();
    let sasl = |protocol: &'static str, mechanism: &'static str| {
        vec![
            ("security.protocol", protocol),
            ("sasl.mechanisms", mechanism),
            ("sasl.username", "alice"),
            ("sasl.password", PASSWORD),
        ]
    };
    let mut cases: Vec<(&str, Vec<(&str, &str)>)> = vec![
        ("PLAINTEXT", vec![]),
        ("SSL", vec![("security.protocol", "ssl")]),
        ("SASL_PLAINTEXT", sasl("sasl_plaintext", "PLAIN")),
        ("SASL_PLAINTEXT", sasl("sasl_plaintext", "SCRAM-SHA-256")),
        ("SASL_SSL", sasl("sasl_ssl", "SCRAM-SHA-512")),
        ("SASL_SSL", sasl("sasl_ssl", "PLAIN")),
    ];
    for (listener, security) in &mut cases {
        if listener.ends_with("SSL") {
            security.push(("ssl.ca.location", &ca));
        }
        let cfg = client(&broker, listener, security);
        let topic = unique_topic(&format!("sec-{}", listener.to_lowercase()));
        produce_consume_commit(&cfg, &topic, 50);

        // Metadata answers with the addresses of the listener the client came in on.
        let consumer: BaseConsumer = cfg.create().expect("consumer");
        let md = consumer
            .fetch_metadata(Some(&topic), Duration::from_secs(10))
            .expect("metadata");
        let addrs: Vec<String> = md
            .brokers()
            .iter()
            .map(|b| format!("{}:{}", b.host(), b.port()))
            .collect();
        assert_eq!(
            addrs,
            vec![broker.listener(listener).to_string()],
            "{listener}"
        );
    }

    // The CLI's own client authenticates too (SCRAM over TLS), for the admin calls.
    let listed = strata(&[
        "user",
        "list",
        "-b",
        broker.listener("SASL_SSL"),
        "-X",
        "security.protocol=SASL_SSL",
        "-X",
        "sasl.mechanism=SCRAM-SHA-256",
        "-X",
        "sasl.username=alice",
        "-X",
        &format!("sasl.password={PASSWORD}"),
        "-X",
        &format!("ssl.ca.location={ca}"),
    ]);
    assert!(listed.contains("alice"), "{listed}");

    // `strata perf connect` opens and authenticates connection after connection.
    let secured = [
        "-X".to_string(),
        "security.protocol=SASL_SSL".to_string(),
        "-X".to_string(),
        "sasl.mechanism=SCRAM-SHA-256".to_string(),
        "-X".to_string(),
        "sasl.username=alice".to_string(),
        "-X".to_string(),
        format!("sasl.password={PASSWORD}"),
        "-X".to_string(),
        format!("ssl.ca.location={ca}"),
    ];
    let mut args = vec!["perf", "connect", "-n", "40", "--concurrency", "2", "-b"];
    args.push(broker.listener("SASL_SSL"));
    args.extend(secured.iter().map(String::as_str));
    let out = strata(&args);
    assert!(
        out.starts_with("connect connections=40 concurrency=2 "),
        "{out}"
    );
    let count = counter(&broker, "strata_sasl_authentications_total{listener=\"SASL_SSL\",mechanism=\"SCRAM-SHA-256\",result=\"ok\"}");
    assert!(count >= 41.0, "{count} authentications counted");

    // Deleting the user ends its logins; the next authentication fails.
    strata(&["user", "delete", "alice", "-b", &plaintext]);
    let cfg = client(
        &broker,
        "SASL_PLAINTEXT",
        &sasl("sasl_plaintext", "SCRAM-SHA-256"),
    );
    assert_authentication_fails(&cfg);
    let out = broker.output();
    assert!(
        !out.contains(PASSWORD),
        "a password reached the broker's log"
    );
}

/// The value of one series on the broker's `/metrics` (`name{labels}`).
fn counter(broker: &Broker, series: &str) -> f64 {
    let metrics = strata_tests::http_get(&broker.admin_addr, "/metrics")
        .unwrap()
        .body;
    (metrics.lines())
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in {metrics}"))
}

/// A client with these settings cannot get metadata: its authentication is refused.
fn assert_authentication_fails(cfg: &ClientConfig) {
    let consumer: BaseConsumer = cfg.create().expect("consumer");
    let err = consumer
        .fetch_metadata(None, Duration::from_secs(5))
        .expect_err("authentication must fail");
    let text = err.to_string();
    assert!(
        text.contains("Authentication") || text.contains("Timed out") || text.contains("transport"),
        "{text}"
    );
}

#[test]
fn wrong_credentials_and_hostile_clients_are_refused_and_nobody_else_notices() {
    let dir = tempfile::tempdir().unwrap();
    let certs = Certs::generate(dir.path());
    let broker = with_alice(secured(&certs));
    let plaintext = broker.listener("PLAINTEXT").to_string();
    let sasl = broker.listener("SASL_PLAINTEXT").to_string();

    // A well-behaved client keeps a connection open through all of it.
    let mut bystander = KafkaConn::connect(&plaintext).unwrap();
    let topic = unique_topic("bystander");
    broker.create_topic(&topic, 1, &[]).unwrap();

    // Wrong password, unknown user, each mechanism, through librdkafka.
    for (user, password, mechanism) in [
        ("alice", "wrong", "SCRAM-SHA-256"),
        ("alice", "wrong", "SCRAM-SHA-512"),
        ("alice", "wrong", "PLAIN"),
        ("mallory", PASSWORD, "SCRAM-SHA-256"),
        ("mallory", PASSWORD, "PLAIN"),
    ] {
        let cfg = client(
            &broker,
            "SASL_PLAINTEXT",
            &[
                ("security.protocol", "sasl_plaintext"),
                ("sasl.mechanisms", mechanism),
                ("sasl.username", user),
                ("sasl.password", password),
            ],
        );
        assert_authentication_fails(&cfg);
    }

    // The same with raw frames, to see the exact error and the connection closing after it.
    let mut c = KafkaConn::connect(&sasl).unwrap();
    let auth = sasl_plain(&mut c, "alice", "wrong");
    assert_eq!(auth.error_code, SASL_AUTHENTICATION_FAILED);
    let message = auth
        .error_message
        .map(|m| m.to_string())
        .unwrap_or_default();
    assert!(
        message.contains("invalid credentials") && !message.contains("wrong"),
        "{message}"
    );
    assert!(
        c.closed_within(Duration::from_secs(5)),
        "closed after a failed authentication"
    );

    // A mechanism not offered: refused with the list, the connection stays for a retry.
    let mut c = KafkaConn::connect(&sasl).unwrap();
    let hs = c
        .request(
            1,
            &SaslHandshakeRequest::default().with_mechanism("GSSAPI".into()),
        )
        .unwrap();
    assert_eq!(hs.error_code, UNSUPPORTED_SASL_MECHANISM);
    let offered: Vec<String> = hs.mechanisms.iter().map(|m| m.to_string()).collect();
    assert_eq!(offered, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]);
    let hs = c
        .request(
            1,
            &SaslHandshakeRequest::default().with_mechanism("PLAIN".into()),
        )
        .unwrap();
    assert_eq!(hs.error_code, 0, "a second try with an offered mechanism");

    // Out of order: authenticate before any handshake.
    let mut c = KafkaConn::connect(&sasl).unwrap();
    let auth = c
        .request(
            1,
            &SaslAuthenticateRequest::default().with_auth_bytes(b"\0alice\0x"[..].into()),
        )
        .unwrap();
    assert_eq!(auth.error_code, ILLEGAL_SASL_STATE);
    assert!(c.closed_within(Duration::from_secs(5)));

    // Any other request before authenticating closes the connection; ApiVersions is allowed.
    let mut c = KafkaConn::connect(&sasl).unwrap();
    c.request(3, &ApiVersionsRequest::default()).unwrap();
    c.send_request(12, &MetadataRequest::default()).unwrap();
    assert!(
        c.closed_within(Duration::from_secs(5)),
        "Metadata before SASL"
    );

    // An oversized SASL token: refused, not buffered.
    let mut c = KafkaConn::connect(&sasl).unwrap();
    c.request(
        1,
        &SaslHandshakeRequest::default().with_mechanism("SCRAM-SHA-256".into()),
    )
    .unwrap();
    let auth = c
        .request(
            1,
            &SaslAuthenticateRequest::default().with_auth_bytes(vec![b'n'; 1 << 20].into()),
        )
        .unwrap();
    assert_eq!(auth.error_code, SASL_AUTHENTICATION_FAILED);

    // SASL on a listener that does not speak it.
    let mut c = KafkaConn::connect(&plaintext).unwrap();
    let hs = c
        .request(
            1,
            &SaslHandshakeRequest::default().with_mechanism("PLAIN".into()),
        )
        .unwrap();
    assert_eq!(hs.error_code, ILLEGAL_SASL_STATE);

    // A plaintext Kafka client on the TLS port, and TLS garbage: closed, nothing else.
    let mut c = KafkaConn::connect(broker.listener("SSL")).unwrap();
    let _ = c.send_request(3, &ApiVersionsRequest::default());
    assert!(c.closed_within(Duration::from_secs(5)), "plaintext on TLS");
    let mut c = KafkaConn::connect(broker.listener("SASL_SSL")).unwrap();
    let _ = c.send_bytes(b"\x16\x03\x01\x00\x05hello, not a ClientHello");
    assert!(c.closed_within(Duration::from_secs(5)), "TLS garbage");

    // A client that does not trust the broker's CA fails its handshake on its side.
    let other = tempfile::tempdir().unwrap();
    let strangers = Certs::generate(other.path());
    let cfg = client(
        &broker,
        "SSL",
        &[
            ("security.protocol", "ssl"),
            ("ssl.ca.location", &strangers.ca_cert.display().to_string()),
        ],
    );
    assert_authentication_fails(&cfg);

    // The bystander saw none of it.
    let md = bystander
        .request(12, &MetadataRequest::default().with_topics(None))
        .expect("the bystander is still served");
    assert!(md
        .topics
        .iter()
        .any(|t| t.name.as_ref().is_some_and(|n| n.as_str() == topic)));
    let batch = encode_batch(&[RawRecord::new("k", "v", 0)], Compression::None, None);
    bystander.produce_ok(&topic, 0, batch).unwrap();

    // Every failure was counted, and no password reached the log.
    let metrics = strata_tests::http_get(&broker.admin_addr, "/metrics")
        .unwrap()
        .body;
    assert!(metrics.contains("strata_sasl_authentications_total{listener=\"SASL_PLAINTEXT\",mechanism=\"SCRAM-SHA-256\",result=\"failed\"}"), "{metrics}");
    assert!(
        metrics.contains("strata_tls_handshakes_total{listener=\"SSL\",result=\"failed\"}"),
        "{metrics}"
    );
    let out = broker.output();
    assert!(
        !out.contains(PASSWORD) && !out.contains("alice\\0wrong"),
        "a secret reached the log"
    );
    // And each refusal is in the audit log, with why, and no secret.
    let audit = std::fs::read_to_string(broker.data_dir().join("audit.log")).unwrap();
    assert!(
        !audit.contains(PASSWORD) && !audit.contains("wrong\""),
        "{audit}"
    );
    let failures: Vec<serde_json::Value> = (audit.lines())
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["event"] == "authentication" && e["result"] == "failure")
        .collect();
    for (mechanism, reason) in [
        ("SCRAM-SHA-256", "invalid credentials"),
        ("SCRAM-SHA-512", "invalid credentials"),
        ("PLAIN", "invalid credentials"),
        ("GSSAPI", "unsupported mechanism"),
        ("none", "SaslAuthenticate before SaslHandshake"),
        ("TLS", ""),
    ] {
        assert!(
            failures.iter().any(|e| e["mechanism"] == mechanism
                && e["reason"].as_str().is_some_and(|r| r.contains(reason))
                && e["client"]
                    .as_str()
                    .is_some_and(|c| c.starts_with("127.0.0.1:"))),
            "no {mechanism} failure ({reason}) in {failures:?}"
        );
    }
}

#[test]
fn a_tls_certificate_rotates_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let certs = Certs::generate(dir.path());
    let broker = secured_broker(&certs);
    let before = certs.served_certificate(broker.listener("SSL"));
    // A new certificate from the same CA, written over the old files.
    certs.reissue_server();
    strata_tests::wait_for(
        "the new certificate to be served",
        Duration::from_secs(30),
        || certs.served_certificate(broker.listener("SSL")) != before,
    );
    let cfg = client(
        &broker,
        "SSL",
        &[
            ("security.protocol", "ssl"),
            ("ssl.ca.location", &certs.ca_cert.display().to_string()),
        ],
    );
    produce_consume_commit(&cfg, &unique_topic("rotated"), 5);
}

#[test]
fn a_client_certificate_names_the_principal_and_others_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let certs = Certs::generate(dir.path());
    let broker = Broker::start(
        secured(&certs)
            .env("STRATA_SSL_CLIENT_AUTH", "required")
            .env(
                "STRATA_SSL_PRINCIPAL_MAPPING_RULES",
                "RULE:^CN=([^,]*),O=strata-tests$/$1/L,DEFAULT",
            ),
    );
    let ca = certs.ca_cert.display().to_string();
    let (cert, key) = certs.client("Alice");
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    let mtls = client(
        &broker,
        "SSL",
        &[
            ("security.protocol", "ssl"),
            ("ssl.ca.location", &ca),
            ("ssl.certificate.location", &cert),
            ("ssl.key.location", &key),
        ],
    );
    produce_consume_commit(&mtls, &unique_topic("mtls"), 20);
    strata_tests::wait_for("the principal in the log", Duration::from_secs(10), || {
        broker.output().contains("principal=User:alice")
    });

    // Without a certificate, and with one another CA signed: no handshake.
    let without = client(
        &broker,
        "SSL",
        &[("security.protocol", "ssl"), ("ssl.ca.location", &ca)],
    );
    assert_authentication_fails(&without);
    let other = tempfile::tempdir().unwrap();
    let strangers = Certs::generate(other.path());
    let (cert, key) = strangers.client("mallory");
    let untrusted = client(
        &broker,
        "SSL",
        &[
            ("security.protocol", "ssl"),
            ("ssl.ca.location", &ca),
            ("ssl.certificate.location", &cert.display().to_string()),
            ("ssl.key.location", &key.display().to_string()),
        ],
    );
    assert_authentication_fails(&untrusted);
    let metrics = strata_tests::http_get(&broker.admin_addr, "/metrics")
        .unwrap()
        .body;
    assert!(
        metrics.contains("strata_tls_handshakes_total{listener=\"SSL\",result=\"failed\"}"),
        "{metrics}"
    );
    // The SASL_SSL listener asks for the certificate too, but its principal comes from SASL.
    assert!(!broker.output().contains("principal=User:mallory"));
}

/// A librdkafka context that hands librdkafka a fixed bearer token.
struct Bearer(String);

impl ClientContext for Bearer {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(
        &self,
        _config: Option<&str>,
    ) -> Result<OAuthToken, Box<dyn std::error::Error>> {
        Ok(OAuthToken {
            token: self.0.clone(),
            principal_name: "from-the-token".into(),
            lifetime_ms: strata_tests::now_ms() + 60_000,
        })
    }
}

impl ConsumerContext for Bearer {}

#[test]
fn oauthbearer_tokens_signed_by_a_known_key_authenticate_and_no_others() {
    let dir = tempfile::tempdir().unwrap();
    let issuer = TokenIssuer::new(dir.path(), "idp");
    let broker = Broker::start(
        BrokerOpts::new()
            .env(
                "STRATA_LISTENERS",
                "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            )
            .env(
                "STRATA_SASL_ENABLED_MECHANISMS",
                "OAUTHBEARER,SCRAM-SHA-256",
            )
            .env(
                "STRATA_SASL_OAUTHBEARER_JWKS_ENDPOINT_URL",
                format!("file://{}", issuer.jwks.display()),
            )
            .env(
                "STRATA_SASL_OAUTHBEARER_EXPECTED_ISSUER",
                strata_tests::tokens::ISSUER,
            )
            .env(
                "STRATA_SASL_OAUTHBEARER_EXPECTED_AUDIENCE",
                strata_tests::tokens::AUDIENCE,
            )
            .env("STRATA_CONNECTIONS_MAX_REAUTH_MS", "600000"),
    );
    let mut cfg = client(
        &broker,
        "SASL_PLAINTEXT",
        &[
            ("security.protocol", "sasl_plaintext"),
            ("sasl.mechanisms", "OAUTHBEARER"),
        ],
    );
    cfg.set("group.id", unique_topic("oauth"));
    let topic = unique_topic("oauth");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let with_token = |token: String| -> BaseConsumer<Bearer> {
        let c: BaseConsumer<Bearer> = cfg.create_with_context(Bearer(token)).expect("consumer");
        // librdkafka asks the context for its token while it is polled.
        let _ = c.poll(Duration::from_millis(200));
        c
    };

    // A valid token: metadata, then the records another client wrote.
    let plain = KafkaConn::connect(broker.listener("PLAINTEXT"));
    let batch = encode_batch(&[RawRecord::new("k", "v", 0)], Compression::None, None);
    plain.unwrap().produce_ok(&topic, 0, batch).unwrap();
    let consumer = with_token(issuer.token("alice", 300, serde_json::json!({})));
    let md = consumer
        .fetch_metadata(Some(&topic), Duration::from_secs(10))
        .expect("metadata with a valid token");
    assert_eq!(md.topics()[0].partitions().len(), 1);
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(&topic, 0, rdkafka::Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let got =
        strata_tests::wait_for_some("a record over OAUTHBEARER", Duration::from_secs(30), || {
            match consumer.poll(Duration::from_millis(200)) {
                Some(Ok(m)) => Some(m.payload().map(<[u8]>::to_vec)),
                _ => None,
            }
        });
    assert_eq!(got.as_deref(), Some(&b"v"[..]));
    strata_tests::wait_for(
        "the token's subject as principal",
        Duration::from_secs(10),
        || {
            broker
                .output()
                .contains("principal=User:alice mechanism=\"OAUTHBEARER\"")
        },
    );

    // Expired, another issuer's key, a wrong audience, an unsigned one: refused.
    let stranger = TokenIssuer::new(dir.path(), "stranger");
    let unsigned = {
        let good = issuer.token("mallory", 300, serde_json::json!({}));
        let mut parts: Vec<&str> = good.split('.').collect();
        parts[2] = "";
        let none = base64_url(r#"{"alg":"none"}"#);
        parts[0] = &none;
        parts.join(".")
    };
    for bad in [
        issuer.token("alice", -120, serde_json::json!({})),
        stranger.token("alice", 300, serde_json::json!({})),
        issuer.token("alice", 300, serde_json::json!({"aud": "another-service"})),
        unsigned,
    ] {
        let c = with_token(bad);
        assert!(c.fetch_metadata(None, Duration::from_secs(3)).is_err());
    }
    let count = counter(&broker, "strata_sasl_authentications_total{listener=\"SASL_PLAINTEXT\",mechanism=\"OAUTHBEARER\",result=\"failed\"}");
    assert!(count >= 4.0, "{count} failures counted");
    assert!(
        !broker.output().contains("mallory"),
        "a refused token named nobody"
    );
}

fn base64_url(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s)
}

#[test]
fn a_sasl_session_ends_with_connections_max_reauth_ms_unless_the_client_reauthenticates() {
    let dir = tempfile::tempdir().unwrap();
    let certs = Certs::generate(dir.path());
    let broker = with_alice(secured(&certs).env("STRATA_CONNECTIONS_MAX_REAUTH_MS", "1500"));
    let sasl = broker.listener("SASL_PLAINTEXT").to_string();
    let plain_auth = |c: &mut KafkaConn| sasl_plain(c, "alice", PASSWORD);

    // The session lifetime is announced; within it requests are served, and a
    // re-authentication on the same connection (same principal) renews it.
    let mut c = KafkaConn::connect(&sasl).unwrap();
    let auth = plain_auth(&mut c);
    assert_eq!((auth.error_code, auth.session_lifetime_ms), (0, 1500));
    c.request(12, &MetadataRequest::default().with_topics(None))
        .unwrap();
    let renewed = std::time::Instant::now();
    let auth = plain_auth(&mut c);
    assert_eq!(auth.error_code, 0, "re-authentication");
    c.request(12, &MetadataRequest::default().with_topics(None))
        .unwrap();
    // Past the session without re-authenticating: the next request closes the connection.
    strata_tests::wait_for("the session to end", Duration::from_secs(5), || {
        renewed.elapsed() > Duration::from_millis(1600)
    });
    c.send_request(12, &MetadataRequest::default().with_topics(None))
        .unwrap();
    assert!(
        c.closed_within(Duration::from_secs(5)),
        "served past its session"
    );

    // librdkafka re-authenticates on its own (KIP-368) and keeps consuming across sessions.
    let cfg = client(
        &broker,
        "SASL_PLAINTEXT",
        &[
            ("security.protocol", "sasl_plaintext"),
            ("sasl.mechanisms", "SCRAM-SHA-256"),
            ("sasl.username", "alice"),
            ("sasl.password", PASSWORD),
        ],
    );
    let topic = unique_topic("reauth");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let consumer: BaseConsumer = cfg
        .clone()
        .set("group.id", unique_topic("reauth"))
        .create()
        .expect("consumer");
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(&topic, 0, rdkafka::Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let producer: ThreadedProducer<DefaultProducerContext> = cfg.create().expect("producer");
    let started = std::time::Instant::now();
    let mut seen = 0;
    let mut sent = 0;
    while started.elapsed() < Duration::from_secs(6) || seen < sent {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{seen} of {sent}"
        );
        if started.elapsed() < Duration::from_secs(6) && sent <= seen {
            let value = format!("v{sent}");
            producer
                .send(BaseRecord::<str, str>::to(&topic).payload(&value))
                .map_err(|(e, _)| e)
                .unwrap();
            sent += 1;
        }
        if let Some(Ok(_)) = consumer.poll(Duration::from_millis(100)) {
            seen += 1;
        }
    }
    let count = counter(&broker, "strata_sasl_authentications_total{listener=\"SASL_PLAINTEXT\",mechanism=\"SCRAM-SHA-256\",result=\"ok\"}");
    // Sessions of 1.5 s over 6 s of fetching: each of the two clients authenticated several
    // times, and never by being cut off (the one connection closed is the raw one above).
    assert!(
        count >= 6.0,
        "{count} authentications: the clients did not re-authenticate"
    );
    let closed = counter(
        &broker,
        "strata_closed_connections_total{reason=\"unauthenticated\"}",
    );
    assert_eq!(
        closed, 1.0,
        "librdkafka was cut off instead of re-authenticating"
    );
}

/// Runs the `strata` CLI expecting it to fail; its stderr.
fn strata_refused(args: &[&str]) -> String {
    let out = std::process::Command::new(strata_bin())
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run strata");
    assert!(
        !out.status.success(),
        "strata {args:?} should have failed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `-X` flags for the CLI to authenticate as `user` with SCRAM-SHA-256.
fn scram_flags(user: &str, password: &str) -> Vec<String> {
    [
        "security.protocol=SASL_PLAINTEXT".to_string(),
        "sasl.mechanism=SCRAM-SHA-256".to_string(),
        format!("sasl.username={user}"),
        format!("sasl.password={password}"),
    ]
    .into_iter()
    .flat_map(|x| ["-X".to_string(), x])
    .collect()
}

/// The first consumer error within 20 s: what the client was refused.
fn consumer_refusal(cfg: &ClientConfig, group: &str, topic: &str) -> RDKafkaErrorCode {
    let mut ccfg = cfg.clone();
    ccfg.set("group.id", group)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false");
    let consumer: BaseConsumer = ccfg.create().expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Err(e)) => {
                if let Some(code) = e.rdkafka_error_code() {
                    return code;
                }
            }
            Some(Ok(m)) => panic!("{group} read {topic} at offset {}", m.offset()),
            None => {}
        }
    }
    panic!("{group} on {topic}: no error within 20 s");
}

/// What one record produced to `topic` comes to: its offset or the broker's refusal.
fn produce_one(cfg: &ClientConfig, topic: &str) -> Result<i64, Option<RDKafkaErrorCode>> {
    let mut pcfg = cfg.clone();
    pcfg.set("message.timeout.ms", "10000");
    let producer: FutureProducer = pcfg.create().expect("producer");
    let record = FutureRecord::to(topic).key("k").payload("v");
    match block_on(producer.send(record, Duration::from_secs(10))) {
        Ok(delivery) => Ok(delivery.offset),
        Err((e, _)) => Err(e.rdkafka_error_code()),
    }
}

#[test]
fn acls_let_a_principal_do_what_it_is_granted_on_every_broker_and_nothing_else() {
    // Brokers reach each other on the PLAINTEXT listener as User:ANONYMOUS, a super user
    // until brokers authenticate to each other; clients come in on SASL_PLAINTEXT.
    let env = [
        (
            "STRATA_LISTENERS",
            "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        ),
        ("STRATA_SASL_ENABLED_MECHANISMS", "SCRAM-SHA-256"),
        ("STRATA_AUTHORIZER_ENABLE", "true"),
        ("STRATA_SUPER_USERS", "User:admin;User:ANONYMOUS"),
        ("STRATA_DEFAULT_REPLICATION_FACTOR", "3"),
        ("STRATA_AUDIT_LOG", "audit.log"),
    ];
    let env: Vec<(&str, &str)> = env
        .iter()
        .chain(strata_tests::cluster::FAST)
        .copied()
        .collect();
    let cluster = Cluster::start(3, 3, &env);
    let sasl = |node: usize| cluster.nodes[node].listener("SASL_PLAINTEXT").to_string();
    let admin_plaintext = cluster.nodes[0].listener("PLAINTEXT").to_string();
    for user in ["admin", "alice"] {
        strata(&[
            "user",
            "create",
            user,
            "--password",
            PASSWORD,
            "-b",
            &admin_plaintext,
        ]);
    }
    let admin: Vec<String> = scram_flags("admin", PASSWORD);
    let alice: Vec<String> = scram_flags("alice", PASSWORD);
    let as_user = |flags: &[String], node: usize, args: &[&str]| -> Vec<String> {
        let mut all: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        all.extend(["-b".to_string(), sasl(node)]);
        all.extend(flags.iter().cloned());
        all
    };
    let run = |args: Vec<String>| strata(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let refused =
        |args: Vec<String>| strata_refused(&args.iter().map(String::as_str).collect::<Vec<_>>());

    let orders = unique_topic("orders");
    let secret = unique_topic("secret");
    let logs_app = format!("logs-{}", unique_topic("app"));
    let logs_private = format!("logs-private-{}", unique_topic("p"));
    for t in [&orders, &secret, &logs_app, &logs_private] {
        run(as_user(
            &admin,
            0,
            &["topic", "create", t, "--partitions", "2"],
        ));
    }
    // The admin (a super user) writes what alice will read.
    let admin_cfg = |node: usize| {
        let mut cfg = cluster.nodes[node].client_config();
        cfg.set("bootstrap.servers", sasl(node))
            .set("security.protocol", "SASL_PLAINTEXT")
            .set("sasl.mechanism", "SCRAM-SHA-256")
            .set("sasl.username", "admin")
            .set("sasl.password", PASSWORD);
        cfg
    };
    for t in [&logs_app, &logs_private] {
        produce_one(&admin_cfg(0), t).expect("the admin writes anywhere");
    }
    // And has a group of its own, which alice will not see.
    produce_consume_commit(&admin_cfg(0), &secret, 3);

    // Granted through broker 1: write one topic, read one group and a topic prefix, except
    // one topic of it.
    let grants: [&[&str]; 4] = [
        &[
            "acl",
            "add",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Write",
            "--topic",
            &orders,
        ],
        &[
            "acl",
            "add",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Read",
            "--group",
            "g1",
        ],
        &[
            "acl",
            "add",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Read",
            "--topic",
            "logs-",
            "--resource-pattern-type",
            "prefixed",
        ],
        &[
            "acl",
            "add",
            "--deny-principal",
            "User:alice",
            "--operation",
            "Read",
            "--topic",
            &logs_private,
        ],
    ];
    for g in grants {
        run(as_user(&admin, 0, g));
    }
    let listed = run(as_user(
        &admin,
        1,
        &["acl", "list", "--principal", "User:alice"],
    ));
    assert_eq!(listed.lines().count(), 4, "{listed}");
    assert!(
        listed.contains(&format!(
            "Topic\t{orders}\tLiteral\tUser:alice\t*\tWrite\tAllow"
        )) && listed.contains("Topic\tlogs-\tPrefixed\tUser:alice\t*\tRead\tAllow")
            && listed.contains("Group\tg1\tLiteral\tUser:alice\t*\tRead\tAllow"),
        "{listed}"
    );
    let matching = run(as_user(
        &admin,
        2,
        &[
            "acl",
            "list",
            "--topic",
            &logs_private,
            "--resource-pattern-type",
            "match",
        ],
    ));
    assert_eq!(
        matching.lines().count(),
        2,
        "the prefix and the deny apply: {matching}"
    );

    // Alice, on brokers 2 and 3 (the ACLs were made through broker 1).
    let alice_cfg = |node: usize| {
        let mut cfg = admin_cfg(node);
        cfg.set("sasl.username", "alice");
        cfg
    };
    wait_for(
        "alice's grants on every broker",
        Duration::from_secs(10),
        || (0..3).all(|n| produce_one(&alice_cfg(n), &orders).is_ok()),
    );
    assert_eq!(
        produce_one(&alice_cfg(1), &secret),
        Err(Some(RDKafkaErrorCode::TopicAuthorizationFailed))
    );
    assert_eq!(
        produce_one(&alice_cfg(2), &logs_app),
        Err(Some(RDKafkaErrorCode::TopicAuthorizationFailed)),
        "READ does not grant WRITE"
    );
    // Metadata lists what she may describe: WRITE and READ imply DESCRIBE; the denied READ
    // does not deny DESCRIBE.
    let consumer: BaseConsumer = alice_cfg(1).create().unwrap();
    let md = consumer
        .fetch_metadata(None, Duration::from_secs(10))
        .unwrap();
    let mut seen: Vec<&str> = md.topics().iter().map(|t| t.name()).collect();
    seen.sort();
    let mut expected = vec![orders.as_str(), logs_app.as_str(), logs_private.as_str()];
    expected.sort();
    assert_eq!(
        seen, expected,
        "no other topic (not {secret}, not internal ones)"
    );
    let md = consumer
        .fetch_metadata(Some(&secret), Duration::from_secs(10))
        .unwrap();
    assert_eq!(
        md.topics()[0].error().map(RDKafkaErrorCode::from),
        Some(RDKafkaErrorCode::TopicAuthorizationFailed)
    );
    // She reads the prefix in her group, except the denied topic; no other group.
    let mut ccfg = alice_cfg(2);
    ccfg.set("group.id", "g1")
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false");
    let reader: BaseConsumer = ccfg.create().unwrap();
    reader.subscribe(&[&logs_app]).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "alice read nothing of {logs_app}"
        );
        match reader.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                assert_eq!(m.payload(), Some(&b"v"[..]));
                break;
            }
            Some(Err(e)) => eprintln!("{logs_app}: {e}"),
            None => {}
        }
    }
    reader
        .commit_consumer_state(CommitMode::Sync)
        .expect("commit in g1");
    drop(reader);
    assert_eq!(
        consumer_refusal(&alice_cfg(1), "g1", &logs_private),
        RDKafkaErrorCode::TopicAuthorizationFailed,
        "deny beats the prefixed allow"
    );
    assert_eq!(
        consumer_refusal(&alice_cfg(1), "g2", &logs_app),
        RDKafkaErrorCode::GroupAuthorizationFailed
    );

    // Nothing administrative.
    let t = unique_topic("alice-made");
    for (args, expect) in [
        (vec!["topic", "create", t.as_str()], "authorization"),
        (vec!["topic", "delete", orders.as_str()], "authorization"),
        (
            vec![
                "topic",
                "alter",
                orders.as_str(),
                "--config",
                "retention.ms=1000",
            ],
            "authorization",
        ),
        (vec!["acl", "list"], "error 31"),
        (
            vec![
                "acl",
                "add",
                "--allow-principal",
                "User:alice",
                "--operation",
                "All",
                "--cluster",
            ],
            "error 31",
        ),
        (
            vec!["user", "create", "mallory", "--password", "x"],
            "error 31",
        ),
        (vec!["group", "delete", "g1"], "authorization"),
        (
            vec![
                "quota",
                "alter",
                "--user",
                "alice",
                "--delete",
                "producer_byte_rate",
            ],
            "error 31",
        ),
        (vec!["quota", "describe"], "error 31"),
    ] {
        let err = refused(as_user(&alice, 1, &args));
        assert!(
            err.to_lowercase().contains(expect),
            "strata {args:?}: {err}"
        );
    }
    // The admin sets alice's quota; she cannot lift it.
    run(as_user(
        &admin,
        0,
        &[
            "quota",
            "alter",
            "--user",
            "alice",
            "--add",
            "producer_byte_rate=1048576",
        ],
    ));
    let groups = run(as_user(&alice, 2, &["group", "list"]));
    let listed: Vec<&str> = groups.lines().skip(1).collect();
    assert!(
        listed.len() == 1 && listed[0].starts_with("g1 "),
        "only her group is listed, not the admin's: {groups}"
    );
    assert!(
        counter(
            &cluster.nodes[1],
            "strata_authorization_denials_total{resource_type=\"cluster\",operation=\"alter\"}"
        ) >= 1.0
    );

    // A revocation applies on every broker.
    let removed = run(as_user(
        &admin,
        0,
        &[
            "acl",
            "remove",
            "--topic",
            &orders,
            "--principal",
            "User:alice",
        ],
    ));
    assert_eq!(removed.lines().count(), 1, "{removed}");
    // The audit log of each broker says who did what from where, and never a password.
    let mut wrong = alice_cfg(2);
    wrong.set("sasl.password", "not-her-password");
    assert!(produce_one(&wrong, &orders).is_err());
    let audit = |node: usize| -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(cluster.nodes[node].data_dir().join("audit.log"))
            .unwrap_or_default();
        assert!(
            !text.contains(PASSWORD) && !text.contains("not-her-password"),
            "{text}"
        );
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let has = |events: &[serde_json::Value], pred: &dyn Fn(&serde_json::Value) -> bool| {
        events.iter().any(pred)
    };
    let first = audit(0);
    assert!(has(&first, &|e| e["event"] == "authentication"
        && e["result"] == "success"
        && e["principal"] == "User:admin"
        && e["mechanism"] == "SCRAM-SHA-256"));
    assert!(has(&first, &|e| e["event"] == "acl_created"
        && e["principal"] == "User:admin"
        && e["acl"]["principal"] == "User:alice"
        && e["client"] == "127.0.0.1"));
    assert!(has(&first, &|e| e["event"] == "quota_altered"
        && e["principal"] == "User:admin"
        && e["entity"]["user"] == "alice"
        && e["set"]["producer_byte_rate"] == 1048576.0));
    // CreateTopics goes to the controller, whichever broker that is.
    let everywhere: Vec<serde_json::Value> = (0..3).flat_map(audit).collect();
    assert!(has(&everywhere, &|e| e["event"] == "topic_created"
        && e["topic"] == orders.as_str()
        && e["principal"] == "User:admin"));
    let second = audit(1);
    assert!(has(&second, &|e| e["event"] == "authorization_denied"
        && e["principal"] == "User:alice"
        && e["operation"] == "Alter"
        && e["resource_type"] == "Cluster"));
    let third = audit(2);
    assert!(
        has(&third, &|e| e["event"] == "authentication"
            && e["result"] == "failure"
            && e["principal"].is_null()
            && e["reason"].as_str().is_some_and(|r| !r.is_empty())),
        "{third:?}"
    );

    wait_for(
        "the revocation on every broker",
        Duration::from_secs(10),
        || {
            (0..3).all(|n| {
                produce_one(&alice_cfg(n), &orders)
                    == Err(Some(RDKafkaErrorCode::TopicAuthorizationFailed))
            })
        },
    );
}

#[test]
fn acl_requests_without_an_authorizer_answer_security_disabled() {
    let broker = Broker::start(BrokerOpts::new());
    let err = strata_refused(&["acl", "list", "-b", &broker.kafka_addr]);
    assert!(
        err.contains("error 54") && err.contains("authorizer"),
        "{err}"
    );
    let err = strata_refused(&[
        "acl",
        "add",
        "--allow-principal",
        "User:a",
        "--operation",
        "Read",
        "--topic",
        "t",
        "-b",
        &broker.kafka_addr,
    ]);
    assert!(err.contains("error 54"), "{err}");
}

const BROKER_PASSWORD: &str = "broker-s3cret-between-us";

/// librdkafka settings for the inter-broker user on node `node`'s SASL_SSL listener.
fn broker_user(cluster: &Cluster, certs: &Certs, node: usize) -> ClientConfig {
    let mut cfg = cluster.nodes[node].client_config();
    cfg.set(
        "bootstrap.servers",
        cluster.nodes[node].listener("SASL_SSL"),
    )
    .set("security.protocol", "SASL_SSL")
    .set("ssl.ca.location", certs.ca_cert.display().to_string())
    .set("sasl.mechanism", "SCRAM-SHA-256")
    .set("sasl.username", "broker")
    .set("sasl.password", BROKER_PASSWORD);
    cfg
}

/// Partition leaders of `topic` as `cfg`'s client sees them.
fn secured_leaders(cfg: &ClientConfig, topic: &str) -> Vec<i32> {
    let consumer: BaseConsumer = cfg.create().unwrap();
    let md = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .unwrap();
    let mut parts: Vec<_> = md.topics()[0].partitions().iter().collect();
    parts.sort_by_key(|p| p.id());
    parts.iter().map(|p| p.leader()).collect()
}

#[test]
fn brokers_secured_between_themselves_replicate_fail_over_reassign_and_keep_intruders_out() {
    let dir = tempfile::tempdir().unwrap();
    let certs = Certs::generate(dir.path());
    let path = |p: &std::path::Path| p.display().to_string();
    let (cert, key, ca) = (
        path(&certs.server_cert),
        path(&certs.server_key),
        path(&certs.ca_cert),
    );
    // Brokers reach each other on SASL_SSL as the inter-broker user and over mutual TLS on
    // raft; the SASL_PLAINTEXT listener is for the raw-frame intruder below.
    let env: Vec<(&str, &str)> = [
        (
            "STRATA_LISTENERS",
            "SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        ),
        ("STRATA_SASL_ENABLED_MECHANISMS", "SCRAM-SHA-256,PLAIN"),
        ("STRATA_INTER_BROKER_SASL_USERNAME", "broker"),
        ("STRATA_INTER_BROKER_SASL_PASSWORD", BROKER_PASSWORD),
        ("STRATA_RAFT_SECURITY_PROTOCOL", "SSL"),
        ("STRATA_SSL_CERTIFICATE_LOCATION", &cert),
        ("STRATA_SSL_KEY_LOCATION", &key),
        ("STRATA_SSL_CA_LOCATION", &ca),
        ("STRATA_AUTHORIZER_ENABLE", "true"),
        ("STRATA_SUPER_USERS", "User:broker"),
        ("STRATA_DEFAULT_REPLICATION_FACTOR", "3"),
    ]
    .into_iter()
    .chain(strata_tests::cluster::FAST.iter().copied())
    .collect();
    let mut cluster = Cluster::start(3, 3, &env);
    let run = |args: Vec<&str>, cluster: &Cluster, node: usize| {
        let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        all.extend([
            "-b".to_string(),
            cluster.nodes[node].listener("SASL_SSL").to_string(),
        ]);
        for x in [
            "security.protocol=SASL_SSL".to_string(),
            format!("ssl.ca.location={ca}"),
            "sasl.mechanism=SCRAM-SHA-256".to_string(),
            "sasl.username=broker".to_string(),
            format!("sasl.password={BROKER_PASSWORD}"),
        ] {
            all.extend(["-X".to_string(), x]);
        }
        strata(&all.iter().map(String::as_str).collect::<Vec<_>>())
    };

    // Replication: RF=3, acks=all, every replica in sync.
    let topic = unique_topic("secured");
    run(
        vec!["topic", "create", &topic, "--partitions", "2"],
        &cluster,
        0,
    );
    produce_consume_commit(&broker_user(&cluster, &certs, 1), &topic, 50);
    cluster.wait_topic_healthy(&topic);

    // Failover: SIGKILL partition 0's leader; the others elect a new one and serve.
    let leader = secured_leaders(&broker_user(&cluster, &certs, 0), &topic)[0] as u64;
    cluster.node(leader).kill9();
    let survivor = (1..=3).find(|n| *n != leader).unwrap() as usize - 1;
    wait_for(
        "a new leader of partition 0",
        Duration::from_secs(30),
        || {
            let l = secured_leaders(&broker_user(&cluster, &certs, survivor), &topic)[0];
            l >= 0 && l as u64 != leader
        },
    );
    let after = unique_topic("after-failover");
    run(
        vec![
            "topic",
            "create",
            &after,
            "--partitions",
            "1",
            "--replication-factor",
            "2",
        ],
        &cluster,
        survivor,
    );
    produce_consume_commit(&broker_user(&cluster, &certs, survivor), &after, 20);
    cluster.node(leader).restart();
    cluster.wait_topic_healthy(&topic);

    // A reassignment: a single replica moves to another broker, copied over the secured link.
    let moved = unique_topic("moved");
    run(
        vec![
            "topic",
            "create",
            &moved,
            "--partitions",
            "1",
            "--replication-factor",
            "1",
        ],
        &cluster,
        0,
    );
    produce_consume_commit(&broker_user(&cluster, &certs, 0), &moved, 30);
    let from = secured_leaders(&broker_user(&cluster, &certs, 0), &moved)[0];
    let to = if from == 3 { 1 } else { from + 1 };
    let plan = dir.path().join("plan.json");
    std::fs::write(
        &plan,
        format!(r#"{{"version":1,"partitions":[{{"topic":"{moved}","partition":0,"replicas":[{to}]}}]}}"#),
    )
    .unwrap();
    let out = run(
        vec!["cluster", "reassign", "--plan", &plan.display().to_string()],
        &cluster,
        0,
    );
    assert!(out.contains(&format!("replicas={to}")), "{out}");
    assert_eq!(
        secured_leaders(&broker_user(&cluster, &certs, 0), &moved)[0],
        to
    );

    // Intruders. The raft port speaks only TLS with a certificate of the cluster's CA: plain
    // bytes and a foreign CA's certificate are both refused before any raft message.
    let raft = cluster.nodes[0].raft_addr.clone();
    let mut plain = std::net::TcpStream::connect(&raft).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    use std::io::{Read, Write};
    let vote = br#"{"quorum":null,"request":{"Vote":{}}}"#;
    let _ = plain.write_all(&(vote.len() as u32).to_be_bytes());
    let _ = plain.write_all(vote);
    // The answer, if any, is a TLS alert (record type 21), never a raft frame.
    let mut buf = [0u8; 64];
    match plain.read(&mut buf) {
        Ok(0) | Err(_) => {}
        Ok(_) => assert_eq!(buf[0], 21, "a plaintext raft peer got {buf:?}"),
    }
    // A would-be fourth broker with the right configuration but a foreign CA's certificate
    // (and the inter-broker password) cannot join: it never registers.
    let foreign_dir = dir.path().join("foreign");
    std::fs::create_dir_all(&foreign_dir).unwrap();
    let foreign = Certs::generate(&foreign_dir);
    let voters = (0..3)
        .map(|i| format!("{}@{}", i + 1, cluster.nodes[i].raft_addr))
        .collect::<Vec<_>>()
        .join(",");
    let any = "127.0.0.1:0";
    let mut opts = BrokerOpts::new().member(4, any, any, any, &voters);
    for (k, v) in &env {
        opts = opts.env(k, v);
    }
    let opts = opts
        .env(
            "STRATA_SSL_CERTIFICATE_LOCATION",
            foreign.server_cert.display(),
        )
        .env("STRATA_SSL_KEY_LOCATION", foreign.server_key.display())
        .env("STRATA_SSL_CA_LOCATION", foreign.ca_cert.display());
    let refusals = |cluster: &Cluster| -> usize {
        (0..3)
            .map(|i| {
                let out = cluster.nodes[i].output();
                out.matches("raft port: connection refused (TLS)").count()
            })
            .sum()
    };
    let before = refusals(&cluster);
    let intruder = Broker::launch(opts);
    wait_for(
        "the raft port to refuse the intruder",
        Duration::from_secs(30),
        || refusals(&cluster) > before,
    );
    assert!(
        !intruder.output().contains("READY"),
        "the intruder got in: {}",
        intruder.output()
    );
    let view = cluster.nodes[0].admin_get("/v1/cluster").unwrap().body;
    let v: serde_json::Value = serde_json::from_str(&view).unwrap();
    assert!(
        v["brokers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["id"] != 4),
        "the intruder registered: {view}"
    );
    drop(intruder);

    // A user who authenticates, but is not a broker, cannot fetch as a replica.
    run(
        vec!["user", "create", "alice", "--password", PASSWORD],
        &cluster,
        0,
    );
    let mut c = KafkaConn::connect(cluster.nodes[0].listener("SASL_PLAINTEXT")).unwrap();
    let auth = sasl_plain(&mut c, "alice", PASSWORD);
    assert_eq!(auth.error_code, 0, "{:?}", auth.error_message);
    let fetch = strata_tests::raw::fetch_from_start(&topic, 2);
    let resp = c.request(12, &fetch).unwrap();
    assert_eq!(
        resp.responses[0].partitions[0].error_code, TOPIC_AUTHORIZATION_FAILED,
        "a non-broker's replica fetch must be refused"
    );
}

#[test]
fn the_admin_port_speaks_https_only_and_asks_operators_for_a_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let certs = Certs::generate(dir.path());
    let broker = Broker::start(
        BrokerOpts::new()
            .env("STRATA_ADMIN_SECURITY_PROTOCOL", "SSL")
            .env(
                "STRATA_SSL_CERTIFICATE_LOCATION",
                certs.server_cert.display(),
            )
            .env("STRATA_SSL_KEY_LOCATION", certs.server_key.display())
            .env("STRATA_SSL_CA_LOCATION", certs.ca_cert.display())
            .env("STRATA_SSL_CLIENT_AUTH", "required"),
    );
    let https = format!("https://{}", broker.admin_addr);
    let (cert, key) = certs.client("operator");
    let status = |client: Option<(&std::path::Path, &std::path::Path)>, addr: &str| {
        let mut cmd = std::process::Command::new(strata_bin());
        cmd.args(["cluster", "status", "--admin-addr", addr])
            .env("RUST_BACKTRACE", "0")
            .env("STRATA_ADMIN_SSL_CA_LOCATION", &certs.ca_cert);
        if let Some((cert, key)) = client {
            cmd.env("STRATA_ADMIN_SSL_CERTIFICATE_LOCATION", cert)
                .env("STRATA_ADMIN_SSL_KEY_LOCATION", key);
        }
        cmd.output().expect("run strata cluster status")
    };
    // An operator with a certificate the CA signed sees the cluster over HTTPS.
    let out = status(Some((&cert, &key)), &https);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("controller"));
    // Without a certificate the handshake fails; in plain HTTP nothing is answered.
    let out = status(None, &https);
    assert!(!out.status.success(), "served without a client certificate");
    let out = status(Some((&cert, &key)), &broker.admin_addr);
    assert!(!out.status.success(), "served plain HTTP on the TLS port");
    assert!(strata_tests::http_get(&broker.admin_addr, "/metrics").is_err());
}

/// Delegation tokens are not issued: every token request gets Kafka's answer for a cluster
/// without a token secret — not allowed on an unauthenticated connection, disabled on an
/// authenticated one.
#[test]
fn delegation_token_requests_get_kafkas_answers_for_tokens_disabled() {
    use kafka_protocol::messages::{
        CreateDelegationTokenRequest, DescribeDelegationTokenRequest, ExpireDelegationTokenRequest,
        RenewDelegationTokenRequest,
    };
    const NOT_ALLOWED: i16 = 64;
    const DISABLED: i16 = 61;
    let broker = with_alice(
        BrokerOpts::new()
            .env(
                "STRATA_LISTENERS",
                "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            )
            .env("STRATA_SASL_ENABLED_MECHANISMS", "PLAIN,SCRAM-SHA-256"),
    );
    let codes = |c: &mut KafkaConn| {
        [
            c.request(3, &CreateDelegationTokenRequest::default())
                .unwrap()
                .error_code,
            c.request(2, &RenewDelegationTokenRequest::default())
                .unwrap()
                .error_code,
            c.request(2, &ExpireDelegationTokenRequest::default())
                .unwrap()
                .error_code,
            c.request(3, &DescribeDelegationTokenRequest::default())
                .unwrap()
                .error_code,
        ]
    };
    let mut plain = KafkaConn::connect(broker.listener("PLAINTEXT")).unwrap();
    assert_eq!(codes(&mut plain), [NOT_ALLOWED; 4]);
    let mut sasl = KafkaConn::connect(broker.listener("SASL_PLAINTEXT")).unwrap();
    assert_eq!(sasl_plain(&mut sasl, "alice", PASSWORD).error_code, 0);
    assert_eq!(codes(&mut sasl), [DISABLED; 4]);
    // The broker serves on after them.
    assert_eq!(codes(&mut plain), [NOT_ALLOWED; 4]);
}

/// ListClientMetricsResources (ListConfigResources v0) needs DESCRIBE_CONFIGS on the cluster.
#[test]
fn listing_client_metrics_resources_needs_describe_configs_on_the_cluster() {
    use kafka_protocol::messages::ListConfigResourcesRequest;
    const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
    let broker = with_alice(
        BrokerOpts::new()
            .env(
                "STRATA_LISTENERS",
                "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            )
            .env("STRATA_SASL_ENABLED_MECHANISMS", "PLAIN")
            .env("STRATA_AUTHORIZER_ENABLE", "true")
            .env("STRATA_SUPER_USERS", "User:ANONYMOUS"),
    );
    let list = |c: &mut KafkaConn| {
        let r = c
            .request(0, &ListConfigResourcesRequest::default())
            .unwrap();
        (r.error_code, r.config_resources.len())
    };
    let mut sasl = KafkaConn::connect(broker.listener("SASL_PLAINTEXT")).unwrap();
    assert_eq!(sasl_plain(&mut sasl, "alice", PASSWORD).error_code, 0);
    assert_eq!(list(&mut sasl), (CLUSTER_AUTHORIZATION_FAILED, 0));
    let mut plain = KafkaConn::connect(broker.listener("PLAINTEXT")).unwrap();
    assert_eq!(list(&mut plain), (0, 0), "a super user");
}
