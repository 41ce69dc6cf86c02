//! The container deliverables run for real, driven by `testcontainers` (the image) and the local `docker compose` (the quick
//! start) against images built
//! here (no registry is reachable: `scripts/docker-base.sh` starts the engine and makes the
//! base image and the S3 test server image, which `scripts/test.sh` runs first):
//! - the image (`deploy/docker`) is a complete single node with no configuration, runs as a
//!   non-root user, turns healthy, and stops cleanly on SIGTERM;
//! - the compose quick start (`deploy/compose`, MinIO swapped for the S3 test server) forms a
//!   three-voter cluster whose bucket `strata objstore init` made, serves a librdkafka
//!   producer and consumer on the published ports, elects new leaders when a broker is
//!   SIGKILLed, and `down -v` leaves no container or volume behind.
//!
//! Both tests build the image `strata:test` from this build's binary (`STRATA_BIN`).

use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::ClientConfig;
use strata_tests::cluster::free_port;
use strata_tests::{poll_until, repo_root, strata_bin, unique_topic, wait_for, TrackingProducer};
use testcontainers::core::{ExecCommand, IntoContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{GenericImage, ImageExt};

const IMAGE: &str = "strata";
const TAG: &str = "test";

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker")
        .args(args)
        .output()
        .expect("run docker");
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A compose project driven through the local `docker compose`, as a user runs it: `up`
/// waits for every service's health check; dropping it runs `down -v`.
struct Compose {
    files: Vec<std::path::PathBuf>,
    project: String,
    env: Vec<(String, String)>,
    up: bool,
}

impl Compose {
    fn new(files: &[std::path::PathBuf], project: &str) -> Compose {
        Compose {
            files: files.to_vec(),
            project: project.to_string(),
            env: Vec::new(),
            up: false,
        }
    }

    fn with_env(mut self, key: &str, value: impl Into<String>) -> Compose {
        self.env.push((key.to_string(), value.into()));
        self
    }

    fn run(&self, args: &[&str]) -> std::io::Result<std::process::Output> {
        let mut cmd = Command::new("docker");
        cmd.arg("compose").args(["--project-name", &self.project]);
        for f in &self.files {
            cmd.arg("--file").arg(f);
        }
        cmd.args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()
    }

    fn up(&mut self) {
        let out = self
            .run(&["up", "--detach", "--wait"])
            .expect("run docker compose");
        self.up = true;
        assert!(
            out.status.success(),
            "docker compose up: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The container id of `service`.
    fn service(&self, service: &str) -> String {
        let out = self
            .run(&["ps", "--all", "--quiet", service])
            .expect("run docker compose");
        let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(!id.is_empty(), "no container for service {service}");
        id
    }
}

impl Drop for Compose {
    fn drop(&mut self) {
        if self.up {
            let _ = self.run(&["down", "--volumes", "--remove-orphans"]);
        }
    }
}

/// Builds `strata:test` once per test binary with the deploy script users run.
fn image() -> String {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let info = Command::new("docker").arg("info").output();
        assert!(
            info.is_ok_and(|o| o.status.success()),
            "no Docker engine: run scripts/docker-base.sh (as root) first"
        );
        let out = Command::new("bash")
            .arg(repo_root().join("deploy/docker/build.sh"))
            .arg("--binary")
            .arg(strata_bin())
            .args(["--tag", &format!("{IMAGE}:{TAG}")])
            .output()
            .expect("run deploy/docker/build.sh");
        assert!(
            out.status.success(),
            "deploy/docker/build.sh: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
    format!("{IMAGE}:{TAG}")
}

fn client(bootstrap: &str) -> ClientConfig {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", bootstrap)
        .set("broker.address.family", "v4")
        .set("reconnect.backoff.max.ms", "500");
    cfg
}

/// Produces `n` records with acks=all and reads back all `before + n` from offset 0.
fn produce_and_consume(bootstrap: &str, topic: &str, before: usize, n: usize) {
    let mut cfg = client(bootstrap);
    cfg.set("acks", "all").set("message.timeout.ms", "60000");
    let producer = TrackingProducer::new(&cfg);
    for i in 0..n {
        producer.send(i, topic, None, b"k", format!("v{i}").as_bytes(), &[], None);
    }
    producer.flush(Duration::from_secs(60));
    let delivered = producer.all_delivered(n);
    let partitions: std::collections::BTreeSet<i32> = delivered.iter().map(|d| d.0).collect();

    let mut cfg = client(bootstrap);
    cfg.set("group.id", unique_topic("containers"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false");
    let consumer: BaseConsumer = cfg.create().expect("consumer");
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in partitions {
        tpl.add_partition_offset(topic, p, rdkafka::Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let mut got = 0;
    wait_for("every record consumed", Duration::from_secs(60), || {
        while let Some(m) = consumer.poll(Duration::from_millis(100)) {
            m.expect("consume");
            got += 1;
        }
        got >= before + n
    });
    assert_eq!(got, before + n);
}

/// Leader of `topic`-0 as the cluster reports it (None while there is none).
/// Every partition's leader, replicas and in-sync replicas, for a failure's report.
fn describe(bootstrap: &str, topic: &str) -> String {
    let Ok(consumer) = client(bootstrap).create::<BaseConsumer>() else {
        return "no client".into();
    };
    match consumer.fetch_metadata(Some(topic), Duration::from_secs(5)) {
        Ok(md) => md
            .topics()
            .iter()
            .flat_map(|t| t.partitions())
            .map(|p| {
                format!(
                    "[p{} leader={} replicas={:?} isr={:?} error={:?}]",
                    p.id(),
                    p.leader(),
                    p.replicas(),
                    p.isr(),
                    p.error()
                )
            })
            .collect(),
        Err(e) => format!("metadata: {e}"),
    }
}

fn leader(bootstrap: &str, topic: &str) -> Option<i32> {
    let consumer: BaseConsumer = client(bootstrap).create().ok()?;
    let md = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(5))
        .ok()?;
    let p = md.topics().first()?.partitions().first()?;
    (p.error().is_none() && p.leader() >= 0).then_some(p.leader())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_is_a_single_node_that_runs_unprivileged_turns_healthy_and_stops_cleanly() {
    let image = image();
    let port = free_port();
    let (name, tag) = image.split_once(':').unwrap();
    let node = GenericImage::new(name, tag)
        .with_wait_for(WaitFor::message_on_stdout("READY"))
        .with_mapped_port(port, 9092.tcp())
        .with_env_var("STRATA_ADVERTISED_KAFKA_ADDR", format!("127.0.0.1:{port}"))
        .start()
        .await
        .expect("start the image");

    let mut id = node.exec(ExecCommand::new(["id", "-u"])).await.unwrap();
    let uid = String::from_utf8(id.stdout_to_vec().await.unwrap()).unwrap();
    assert_eq!(uid.trim(), "10001", "the broker runs as the strata user");

    let bootstrap = format!("127.0.0.1:{port}");
    let topic = unique_topic("image");
    tokio::task::spawn_blocking(move || produce_and_consume(&bootstrap, &topic, 0, 500))
        .await
        .unwrap();

    // The HEALTHCHECK (`strata health`, /readyz) turns the container healthy.
    let id = node.id().to_string();
    tokio::task::spawn_blocking(move || {
        wait_for(
            "the container to turn healthy",
            Duration::from_secs(60),
            || docker(&["inspect", "-f", "{{.State.Health.Status}}", &id]) == "healthy",
        )
    })
    .await
    .unwrap();

    // SIGTERM (docker stop) is the controlled shutdown, ending with a clean close.
    node.stop_with_timeout(Some(120)).await.unwrap();
    assert_eq!(node.exit_code().await.unwrap(), Some(0));
    let log = String::from_utf8(node.stdout_to_vec().await.unwrap()).unwrap()
        + &String::from_utf8(node.stderr_to_vec().await.unwrap()).unwrap();
    assert!(log.contains("stopped cleanly"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compose_quick_start_serves_clients_and_survives_a_killed_broker() {
    let image = image();
    let compose_dir = repo_root().join("deploy/compose");
    let project = unique_topic("strata-compose").to_lowercase();
    let ports = [free_port(), free_port(), free_port()];
    let mut compose = Compose::new(
        &[
            compose_dir.join("compose.yaml"),
            compose_dir.join("compose.test.yaml"),
        ],
        &project,
    )
    .with_env("STRATA_IMAGE", image)
    .with_env("STRATA_PORT_1", ports[0].to_string())
    .with_env("STRATA_PORT_2", ports[1].to_string())
    .with_env("STRATA_PORT_3", ports[2].to_string())
    .with_env("STRATA_ADMIN_PORT", free_port().to_string());
    // Waits for every broker's health check.
    tokio::task::block_in_place(|| compose.up());

    // The bucket service made the bucket before any broker started.
    let bucket = compose.service("bucket");
    let bucket_log = docker(&["logs", &bucket]);
    assert!(
        bucket_log.contains("bucket=strata created=true lifecycle_rule=added"),
        "{bucket_log}"
    );

    let bootstrap = format!("127.0.0.1:{}", ports[0]);
    let topic = unique_topic("compose");
    let victim = {
        let (bootstrap, topic) = (bootstrap.clone(), topic.clone());
        tokio::task::spawn_blocking(move || {
            produce_and_consume(&bootstrap, &topic, 0, 1000);
            let brokers = client(&bootstrap)
                .create::<BaseConsumer>()
                .unwrap()
                .fetch_metadata(None, Duration::from_secs(10))
                .unwrap()
                .brokers()
                .len();
            assert_eq!(brokers, 3, "three brokers registered");
            leader(&bootstrap, &topic).expect("a leader")
        })
        .await
        .unwrap()
    };

    // SIGKILL the leader's container: the others elect a new leader and keep every record.
    let service = format!("strata-{victim}");
    let id = compose.service(&service);
    docker(&["kill", "--signal", "KILL", &id]);
    // Bootstrap from a survivor (the victim may be the one on the first port).
    let survivor = (1..=3).find(|n| *n != victim).unwrap();
    let bootstrap = format!("127.0.0.1:{}", ports[survivor as usize - 1]);
    let brokers: Vec<String> = (1..=3)
        .map(|n| {
            let service = format!("strata-{n}");
            compose.service(&service)
        })
        .collect();
    tokio::task::spawn_blocking(move || {
        let new = poll_until(
            Duration::from_secs(60),
            || leader(&bootstrap, &topic).filter(|l| *l != victim),
            || {
                let logs: Vec<String> = brokers
                    .iter()
                    .map(|id| {
                        // A container's stderr comes back on docker's stderr.
                        let out = Command::new("docker")
                            .args(["logs", id])
                            .output()
                            .expect("run docker");
                        let all = String::from_utf8_lossy(&out.stdout).to_string()
                            + &String::from_utf8_lossy(&out.stderr);
                        // The quorum's retries to the dead voter would hide the rest.
                        all.lines()
                            .filter(|l| !l.contains("openraft") && !l.contains("group::load"))
                            .collect::<Vec<_>>()
                            .join("\n")
                    })
                    .collect();
                format!(
                    "no new leader 60 s after broker {victim} was killed; the topic: {}\n\
                     the brokers' logs:\n{}",
                    describe(&bootstrap, &topic),
                    logs.join("\n-----\n")
                )
            },
        );
        assert_ne!(new, victim);
        produce_and_consume(&bootstrap, &topic, 1000, 200);
    })
    .await
    .unwrap();

    // `docker compose down -v` (on drop) leaves nothing of the project running or stored.
    tokio::task::block_in_place(|| drop(compose));
    let label = format!("label=com.docker.compose.project={project}");
    tokio::task::spawn_blocking(move || {
        wait_for(
            "compose down to remove everything",
            Duration::from_secs(120),
            || {
                docker(&["ps", "-aq", "--filter", &label]).is_empty()
                    && docker(&["volume", "ls", "-q", "--filter", &label]).is_empty()
            },
        )
    })
    .await
    .unwrap();
}

/// A stand-in for the EC2 instance metadata service that speaks only IMDSv2: a token from
/// `PUT /latest/api/token`, then reads carrying it; a read without it is refused (and
/// counted). `tags/instance/strata-node-id` is served when `node_id` is set.
struct FakeImds {
    addr: String,
    tokenless_reads: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl FakeImds {
    fn start(node_id: Option<&str>) -> FakeImds {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let tokenless_reads = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = tokenless_reads.clone();
        let node_id = node_id.map(str::to_string);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut request = String::new();
                let _ = reader.read_line(&mut request);
                let mut headers = Vec::new();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                        break;
                    }
                    headers.push(line.trim().to_ascii_lowercase());
                }
                let mut parts = request.split_whitespace();
                let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
                let has = |h: &str| headers.iter().any(|l| l.starts_with(h));
                let (status, body) = match (method, path) {
                    ("PUT", "/latest/api/token")
                        if has("x-aws-ec2-metadata-token-ttl-seconds:") =>
                    {
                        ("200 OK", "imds-token".to_string())
                    }
                    ("GET", _) if !has("x-aws-ec2-metadata-token: imds-token") => {
                        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        ("401 Unauthorized", String::new())
                    }
                    ("GET", p) => match p.strip_prefix("/latest/meta-data/") {
                        Some("placement/availability-zone") => ("200 OK", "us-east-1b".into()),
                        Some("placement/region") => ("200 OK", "us-east-1".into()),
                        Some("local-ipv4") => ("200 OK", "10.0.2.11".into()),
                        Some("tags/instance/strata-node-id") if node_id.is_some() => {
                            ("200 OK", node_id.clone().unwrap())
                        }
                        _ => ("404 Not Found", String::new()),
                    },
                    _ => ("400 Bad Request", String::new()),
                };
                let _ = write!(
                    conn,
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        FakeImds {
            addr,
            tokenless_reads,
        }
    }
}

/// Runs deploy/ec2/user-data.sh on a stand-in instance (`strata-ec2-test`, made by
/// scripts/docker-base.sh) with the release served from this build, then prints what it
/// installed.
fn run_user_data(imds: &FakeImds) -> std::process::Output {
    let repo = repo_root();
    Command::new("docker")
        .args(["run", "--rm", "--network", "host"])
        .arg("-v")
        .arg(format!(
            "{}:/user-data.sh:ro",
            repo.join("deploy/ec2/user-data.sh").display()
        ))
        .arg("-v")
        .arg(format!("{}:/release/strata:ro", strata_bin().display()))
        .arg("-v")
        .arg(format!(
            "{}:/release/strata.service:ro",
            repo.join("deploy/ec2/strata.service").display()
        ))
        .args(["-e", &format!("IMDS=http://{}", imds.addr)])
        .args(["-e", "RELEASE=file:///release"])
        .args(["strata-ec2-test:latest", "bash", "-c"])
        .arg(
            "bash /user-data.sh && cat /etc/strata/strata.toml /var/log/systemctl.log \
             && id -un strata && cmp /release/strata.service /etc/systemd/system/strata.service \
             && echo unit-installed",
        )
        .output()
        .expect("docker run")
}

#[test]
fn the_ec2_user_data_configures_a_node_from_imdsv2_and_starts_it() {
    let imds = FakeImds::start(Some("2"));
    let out = run_user_data(&imds);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "user-data failed: {}{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        "node_id = 2\n",
        "rack = \"us-east-1b\"\n",
        "advertised_listeners = \"PLAINTEXT://10.0.2.11:9092\"\n",
        "object_store_region = \"us-east-1\"\n",
        "voters = \"1@10.0.1.11:9093,2@10.0.2.11:9093,3@10.0.3.11:9093\"\n",
        "transaction_state_log_min_isr = 2\n",
        "systemctl daemon-reload\nsystemctl enable strata\nsystemctl restart strata\n",
        "strata\n",
        "unit-installed",
    ] {
        assert!(stdout.contains(expected), "{expected:?} not in:\n{stdout}");
    }
    assert_eq!(
        imds.tokenless_reads
            .load(std::sync::atomic::Ordering::SeqCst),
        0,
        "every metadata read is IMDSv2"
    );

    // Without the tag (and no NODE_ID) it stops before installing, saying what to do.
    let imds = FakeImds::start(None);
    let out = run_user_data(&imds);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("no node id") && stderr.contains("strata-node-id"),
        "{stderr}"
    );
}
