//! `strata serve`: settings, start-up order, background housekeeping and clean shutdown.
//!
//! Start-up: settings → metadata quorum (state rebuilt from its log and snapshot, then caught
//! up with the leader; with several voters this waits for a quorum) → register this broker
//! and heartbeat until unfenced ([`crate::session`]) → open the partitions the state assigns
//! here (recovering logs) → listen. `READY kafka=… admin=… raft=…` on stdout marks the
//! moment clients can connect.
//! Shutdown (SIGTERM/SIGINT): controlled shutdown (ask to be fenced, so leadership moves at
//! once), stop accepting, finish in-flight requests, close every log (flush, indexes,
//! producer state, clean marker), snapshot and stop the quorum.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use strata_metadata::{Metadata, MetadataOptions};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::broker::Broker;
use crate::clock::Clock;
use crate::config::{BrokerConfig, ConfigError};
use crate::loggers::Loggers;
use crate::metrics::Metrics;
use crate::node::Node;
use crate::security::Security;

/// How long start-up waits for the object store's first answer before it carries on without
/// it (a store that hangs would otherwise hold the broker for its whole retry budget).
const STORE_CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// Why `strata serve` could not start, or could not stop cleanly; the binary prints it.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Failed(String),
}

/// Binds a listener; a failure names the address, why, and the setting that moves it.
async fn listen(addr: SocketAddr, what: &str, setting: &str) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr).await.map_err(|e| {
        let fix = match e.kind() {
            std::io::ErrorKind::AddrInUse => {
                format!("another process (another strata?) listens there: stop it, or choose another address with {setting}")
            }
            std::io::ErrorKind::AddrNotAvailable => {
                format!("no interface of this machine has that address: choose another with {setting}")
            }
            std::io::ErrorKind::PermissionDenied => {
                format!("ports below 1024 need privileges: choose another with {setting}")
            }
            _ => format!("choose another address with {setting}"),
        };
        ServeError::Failed(format!("cannot listen for {what} on {addr}: {e}; {fix}"))
    })
}

/// Turns an error into a [`ServeError`] that says what was being done.
fn failed<E: std::fmt::Display>(doing: impl std::fmt::Display) -> impl FnOnce(E) -> ServeError {
    move |e| ServeError::Failed(format!("{doing}: {e}"))
}

#[derive(Args, Debug, Default)]
pub struct ServeArgs {
    /// TOML config file; STRATA_* environment variables and these flags override it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Directory for logs and metadata [default: ./strata-data].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Kafka listener [default: 127.0.0.1:9092]; port 0 picks a free port.
    #[arg(long)]
    pub kafka_addr: Option<SocketAddr>,
    /// Address advertised to clients [default: the bound Kafka address].
    #[arg(long)]
    pub advertised_kafka_addr: Option<SocketAddr>,
    /// Admin HTTP listener for /metrics, /healthz, /readyz [default: 127.0.0.1:9644].
    #[arg(long)]
    pub admin_addr: Option<SocketAddr>,
    /// This broker's id [default: 1].
    #[arg(long)]
    pub node_id: Option<u64>,
    /// Listener for the other nodes (the metadata quorum's raft port) [default: 127.0.0.1:9093].
    #[arg(long)]
    pub raft_addr: Option<SocketAddr>,
    /// Metadata voters, `id@host:port,...` [default: this node alone]. A node not listed
    /// joins as a learner.
    #[arg(long)]
    pub voters: Option<String>,
    /// Object store for closed segments: s3://bucket/prefix, file:///path or memory://
    /// [default: file://<data-dir>/objects].
    #[arg(long)]
    pub object_store: Option<String>,
    /// Check the configuration (file, STRATA_* variables and flags) and exit: 0 and a summary
    /// when `serve` would accept it, else the error (a unit's ExecStartPre, a CI step).
    #[arg(long)]
    pub check_config: bool,
}

impl ServeArgs {
    fn resolve(&self) -> Result<BrokerConfig, ServeError> {
        let mut cfg = BrokerConfig::load(self.config.as_deref(), std::env::vars())?;
        if let Some(v) = &self.data_dir {
            cfg.data_dir = v.clone();
            cfg.static_keys.insert("data_dir".into());
        }
        if let Some(v) = self.kafka_addr {
            cfg.kafka_addr = v;
            cfg.static_keys.insert("kafka_addr".into());
        }
        if let Some(v) = self.advertised_kafka_addr {
            cfg.advertised_kafka_addr = Some(v);
            cfg.static_keys.insert("advertised_kafka_addr".into());
        }
        if let Some(v) = self.admin_addr {
            cfg.admin_addr = v;
            cfg.static_keys.insert("admin_addr".into());
        }
        if let Some(v) = self.node_id {
            cfg.node_id = v;
            cfg.static_keys.insert("node_id".into());
        }
        if let Some(v) = self.raft_addr {
            cfg.raft_addr = v;
            cfg.static_keys.insert("raft_addr".into());
        }
        if let Some(v) = &self.voters {
            cfg.voters = Some(v.clone());
            cfg.static_keys.insert("voters".into());
        }
        if let Some(v) = &self.object_store {
            cfg.object_store = Some(v.clone());
            cfg.static_keys.insert("object_store".into());
        }
        cfg.validate()?;
        // Needs the node id and voters as the flags left them.
        cfg.advertised_raft()?;
        Ok(cfg)
    }
}

pub fn run(args: ServeArgs) -> Result<(), ServeError> {
    let loggers = Loggers::install(
        &std::env::var("STRATA_LOG").unwrap_or_else(|_| "info,openraft=warn".into()),
    );
    let cfg = args.resolve()?;
    let unknown_env: Vec<String> = (cfg.unknown_env.iter())
        .map(|(name, near)| match near {
            Some(near) => format!("{name} names no setting (did you mean {near}?): ignored"),
            None => format!("{name} names no setting: ignored"),
        })
        .collect();
    if args.check_config {
        for line in &unknown_env {
            println!("warning: {line}");
        }
        println!(
            "configuration ok: node_id={} data_dir={} listeners={} admin={} raft={} voters={} object_store={} rack={}",
            cfg.node_id,
            cfg.data_dir.display(),
            cfg.listeners.as_deref().unwrap_or("(kafka_addr)"),
            cfg.admin_addr,
            cfg.raft_addr,
            cfg.voters.as_deref().unwrap_or("(this node alone)"),
            cfg.object_store.as_deref().unwrap_or("(file://<data_dir>/objects)"),
            cfg.rack.as_deref().unwrap_or("(none)"),
        );
        return Ok(());
    }
    for line in &unknown_env {
        tracing::warn!("{line}");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("strata")
        .build()
        .map_err(failed("cannot start the runtime"))?;
    let result = runtime.block_on(serve(cfg, loggers));
    // After a clean stop nothing is left; after a fail-stop, tasks still blocked in a file
    // or socket call must not keep the process alive.
    runtime.shutdown_timeout(Duration::from_secs(5));
    result
}

async fn serve(cfg: BrokerConfig, loggers: Loggers) -> Result<(), ServeError> {
    // One broker per data dir and per log dir: a second process would interleave writes into
    // the same logs. The locks are released by the kernel when the process exits, however it
    // exits.
    let mut locks = Vec::new();
    for dir in std::iter::once(cfg.data_dir.clone()).chain(cfg.log_dirs()) {
        if locks.iter().any(|(d, _)| *d == dir) {
            continue;
        }
        std::fs::create_dir_all(&dir)
            .map_err(failed(format!("cannot create directory {}", dir.display())))?;
        let lock = std::fs::File::create(dir.join(".lock")).map_err(failed(format!(
            "cannot create the lock of {}",
            dir.display()
        )))?;
        if lock.try_lock().is_err() {
            return Err(ServeError::Failed(format!(
                "directory {} is in use by another strata process",
                dir.display()
            )));
        }
        locks.push((dir, lock));
    }
    let (listeners, inter_broker_listener) = cfg.listeners()?;
    let mut kafka = Vec::with_capacity(listeners.len());
    for listener in listeners {
        let what = format!("Kafka ({})", listener.name);
        let socket = listen(
            listener.bind,
            &what,
            "--kafka-addr or listeners (STRATA_KAFKA_ADDR, STRATA_LISTENERS)",
        )
        .await?;
        kafka.push((socket, listener));
    }
    let admin = listen(
        cfg.admin_addr,
        "admin HTTP",
        "--admin-addr (STRATA_ADMIN_ADDR)",
    )
    .await?;
    let raft = listen(
        cfg.raft_addr,
        "the other nodes",
        "--raft-addr (STRATA_RAFT_ADDR)",
    )
    .await?;
    let (admin_addr, raft_addr) =
        (|| Ok::<_, std::io::Error>((admin.local_addr()?, raft.local_addr()?)))()
            .map_err(failed("cannot read the listeners' addresses"))?;
    let mut bound = Vec::with_capacity(kafka.len());
    let mut endpoints = Vec::with_capacity(kafka.len());
    for (socket, listener) in &kafka {
        let addr = socket
            .local_addr()
            .map_err(failed("cannot read the listeners' addresses"))?;
        let (host, port) = listener
            .advertised
            .clone()
            .unwrap_or_else(|| (addr.ip().to_string(), addr.port()));
        bound.push(format!("{}@{addr}", listener.name));
        endpoints.push(strata_metadata::Endpoint {
            name: listener.name.clone(),
            host,
            port,
        });
    }
    let kafka_addr = kafka[0]
        .0
        .local_addr()
        .map_err(failed("cannot read the listeners' addresses"))?;

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let ready = Arc::new(AtomicBool::new(false));
    let metrics = Metrics::new();
    count_panics(metrics.panic_counter());
    metrics.register_log_dirs(&cfg.log_dirs());
    let fd_limit = raise_fd_limit(cfg.max_connections);
    crate::log::handles::set_capacity(match cfg.max_open_segment_files {
        0 => (fd_limit / 2).max(64),
        n => n,
    });
    tracing::info!(
        files = crate::log::handles::capacity(),
        fd_limit,
        "segment files held open at most"
    );
    // The object store is checked before anything else starts: a wrong bucket, endpoint or
    // credentials stop the broker with a clear message rather than failing every upload later.
    // A store that cannot be reached (connections refused, no answer, server errors) does not:
    // the broker starts and serves its local log, closed segments wait on local disk and
    // upload once the store answers again (as Kafka with tiered storage does), and reads of
    // remote-only offsets get a retriable error meanwhile.
    let store_config = cfg.object_store_config()?;
    let objects = strata_objstore::Store::open(&store_config)
        .map_err(failed(format!("object store {}", store_config.url)))?;
    let tier = crate::tier::Tier::open(&cfg, objects.clone(), &metrics)
        .await
        .map_err(failed("cannot open the remote read cache"))?;
    // On the tier's threads, like every other request to the store: the HTTP client's pooled
    // connections are driven by the runtime that opened them, and must not be the Kafka one's.
    let check = objects.clone();
    let checked = tier.spawn(async move { check.check().await });
    match tokio::time::timeout(STORE_CHECK_TIMEOUT, checked).await {
        Ok(joined) => match joined.map_err(failed("object store check"))? {
            Ok(()) => tracing::info!(store = %objects, "object store reachable"),
            Err(e) if e.is_retriable() => tracing::warn!(
                store = %objects, error = %e,
                "object store unreachable: serving the local log; closed segments stay on local disk until it answers"
            ),
            Err(e) => return Err(failed(format!("object store {objects}"))(e)),
        },
        Err(_) => tracing::warn!(
            store = %objects, seconds = STORE_CHECK_TIMEOUT.as_secs(),
            "object store did not answer: serving the local log; closed segments stay on local disk until it answers"
        ),
    }
    let request_budget =
        crate::protocol::frame::RequestBudget::new(cfg.queued_max_request_bytes as usize);
    metrics.register_request_budget(request_budget.clone());
    let metadata = Metadata::open(MetadataOptions {
        node_id: cfg.node_id,
        dir: cfg.data_dir.join("metadata"),
        listener: raft,
        voters: cfg.voter_map()?,
        advertised: cfg.advertised_raft()?,
        session_timeout: Duration::from_millis(cfg.broker_session_timeout_ms),
        leader_balance: cfg
            .auto_leader_rebalance_enable
            .then(|| strata_metadata::LeaderBalance {
                interval: Duration::from_millis(cfg.leader_imbalance_check_interval_ms),
                per_broker_percentage: cfg.leader_imbalance_per_broker_percentage,
            }),
        tls: crate::security::inter_broker::raft_tls(&cfg),
    })
    .await
    .map_err(failed("cannot start the metadata quorum"))?;
    // The admin port as the others reach it: bound to every interface, it is reached at the
    // inter-broker listener's advertised host.
    let admin_endpoint = match admin_addr.ip().is_unspecified() {
        false => admin_addr.to_string(),
        true => (endpoints.iter())
            .find(|e| e.name == inter_broker_listener)
            .map(|e| format!("{}:{}", e.host, admin_addr.port()))
            .unwrap_or_else(|| admin_addr.to_string()),
    };
    let node = Arc::new(Node::new(
        cfg.clone(),
        endpoints,
        inter_broker_listener,
        Some(admin_endpoint),
        metadata.clone(),
        metrics,
        Clock::system(),
    ));
    let store = objects.clone();
    (node.zones).follow_object_store(&node.metrics, move || {
        let m = store.metrics();
        (m.read_bytes(), m.written_bytes())
    });
    let security = Security::new(node.clone())
        .await
        .map_err(failed("security"))?;
    let tier = Arc::new(tier);
    #[cfg(feature = "iceberg")]
    let iceberg = crate::iceberg::Iceberg::new(node.clone(), tier.clone(), objects.clone())
        .map_err(failed("Iceberg tables"))?;
    let broker = Arc::new(Broker::new(
        node.clone(),
        tier,
        #[cfg(feature = "iceberg")]
        Arc::new(iceberg),
        security.clone(),
        loggers,
    ));
    let admin_task = tokio::spawn(crate::admin::http::serve(
        admin,
        broker.clone(),
        ready.clone(),
        shutdown_rx.clone(),
    ));

    let epoch = crate::session::register(&node)
        .await
        .map_err(failed("cannot register with the controller"))?;
    crate::session::wait_unfenced(&node, epoch)
        .await
        .map_err(failed("cannot join the cluster"))?;
    let opened = crate::clock::Stopwatch::start();
    node.sync_partitions()
        .map_err(failed("cannot open partitions"))?;
    tracing::info!(
        partitions = node.partitions.hosted().all().len(),
        ms = opened.elapsed().as_millis() as u64,
        "partitions opened"
    );
    broker.fetchers.sync();

    // Groups of the `__consumer_offsets` partitions led here, transactional ids of the
    // `__transaction_state` ones; later moves follow metadata.
    broker.groups.follow_leadership().await;
    broker.txn.follow_leadership().await;
    broker
        .shares
        .persister
        .coordinator
        .follow_leadership()
        .await;
    let cleaner =
        crate::cleaner::Cleaner::start(node.clone()).map_err(failed("start the log cleaner"))?;
    let follower = tokio::spawn(follow_metadata(broker.clone(), shutdown_rx.clone()));
    let session = tokio::spawn(crate::session::run(
        node.clone(),
        epoch,
        shutdown_rx.clone(),
    ));
    let housekeeper = tokio::spawn(
        crate::housekeeping::scheduler(&broker)
            .run(crate::housekeeping::RESOLUTION, shutdown_rx.clone()),
    );
    let offloader = tokio::spawn(crate::tier::offload::run(
        node.clone(),
        broker.tier.clone(),
        shutdown_rx.clone(),
    ));
    #[cfg(feature = "iceberg")]
    let translator = tokio::spawn(crate::iceberg::translate::run(
        broker.iceberg.translator.clone(),
        shutdown_rx.clone(),
    ));
    let server = tokio::spawn(crate::server::serve(
        kafka,
        broker.clone(),
        request_budget,
        shutdown_rx.clone(),
    ));
    ready.store(true, Ordering::Release);
    let listeners = bound.join(",");
    tracing::info!(%listeners, %admin_addr, %raft_addr, data_dir = %cfg.data_dir.display(), "strata is ready");
    {
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "READY kafka={kafka_addr} admin={admin_addr} raft={raft_addr} listeners={listeners}"
        )
        .and_then(|()| out.flush())
        .map_err(failed("cannot write READY to stdout"))?;
    }

    tokio::select! {
        () = wait_for_signal() => {}
        e = metadata.failed() => {
            // Fail-stop: without its raft core this node can neither vote nor learn of any
            // metadata change, and a controlled shutdown needs the quorum. Every acknowledged
            // record and entry is already on disk; a supervisor restarts the broker from it.
            ready.store(false, Ordering::Release);
            tracing::error!(error = %e, "the metadata quorum member stopped on an error: exiting now");
            return Err(ServeError::Failed(format!(
                "the metadata quorum member stopped ({e}); restart the broker"
            )));
        }
    }
    tracing::info!("shutting down: moving leadership away, then finishing in-flight requests");
    ready.store(false, Ordering::Release);
    let _ = shutdown_tx.send(true);
    // Controlled shutdown runs first, while connections still drain.
    let _ = session.await;
    let drained = tokio::time::timeout(Duration::from_secs(30), server).await;
    if drained.is_err() {
        tracing::warn!("connections did not finish within 30 s; closing logs anyway");
    }
    let _ = follower.await;
    broker.fetchers.stop();
    let _ = housekeeper.await;
    let _ = offloader.await;
    #[cfg(feature = "iceberg")]
    let _ = translator.await;
    tokio::task::spawn_blocking(move || cleaner.stop())
        .await
        .map_err(failed("stop the log cleaner"))?;
    node.partitions.close_all();
    if let Err(e) = broker.tier.cache.close().await {
        tracing::warn!(error = %e, "closing the remote read cache failed");
    }
    if let Err(e) = metadata.snapshot().await {
        tracing::warn!(error = %e, "metadata snapshot at shutdown failed");
    }
    metadata
        .shutdown()
        .await
        .map_err(failed("metadata shutdown"))?;
    let _ = admin_task.await;
    drop(locks);
    tracing::info!("stopped cleanly");
    Ok(())
}

/// Counts every panic on `/metrics` (`strata_panics_total`) before the default hook prints it.
/// A panic unwinds to the request, connection or task it happened in; the build never sets
/// `panic = "abort"`, so no panic ends the process.
fn count_panics(counter: prometheus_client::metrics::counter::Counter) {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        counter.inc();
        previous(info);
    }));
}

/// Each connection and each open segment file is a file descriptor: raise the soft limit to the
/// hard one, as Go's runtime does for every server and Kafka's packaging does with
/// `LimitNOFILE`; warn when `max_connections` cannot fit. Returns the limit in force.
fn raise_fd_limit(max_connections: usize) -> usize {
    let Some((mut soft, hard)) = crate::sys::open_file_limit() else {
        return 1024;
    };
    if soft < hard && crate::sys::set_open_file_limit(hard, hard).is_ok() {
        tracing::info!(from = soft, to = hard, "raised the open-file limit");
        soft = hard;
    }
    if soft < max_connections as u64 {
        tracing::warn!(
            limit = soft,
            max_connections,
            "the open-file limit is below max_connections: connections past it will be refused"
        );
    }
    // RLIM_INFINITY is u64::MAX: no limit worth more than a million descriptors.
    soft.min(1 << 20) as usize
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers; stop with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {},
        _ = int.recv() => {},
    }
}

/// Applies metadata changes (from this node's own writes or, later, from other controllers)
/// to the local partitions.
async fn follow_metadata(broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    let mut changes = broker.node.metadata.subscribe();
    loop {
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { return },
            _ = shutdown.changed() => return,
        }
        if let Err(e) = broker.node.sync_partitions() {
            tracing::error!(error = %e, "cannot apply metadata change to local partitions");
        }
        broker.fetchers.sync();
        broker.groups.follow_leadership().await;
        broker.txn.follow_leadership().await;
    }
}
