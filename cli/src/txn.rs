//! `strata txn list|describe|abort|find-hanging|abort-hanging`: transactions, with Kafka's
//! admin APIs (KIP-664), spoken with the broker's own client framing (librdkafka offers
//! none of them).
//!
//! - `list` — every transactional id of every coordinator (ListTransactions to each broker),
//!   with its producer, state, partitions and the age of its open transaction;
//! - `describe ID` — one id at its coordinator (FindCoordinator, DescribeTransactions);
//! - `abort ID` — ends the id's open transaction as its coordinator would on timeout: a
//!   producer initialisation (InitProducerId) bumps the epoch, which aborts the transaction
//!   and fences the producer that opened it (Kafka's `kafka-transactions.sh
//!   forceTerminateTransaction`);
//! - `find-hanging` — partitions holding a transaction open (DescribeProducers) that no
//!   coordinator lists as ongoing, the transactions that hold the last stable offset back
//!   for good;
//! - `abort-hanging` — writes an abort marker for one of those at the partition's leader
//!   (WriteTxnMarkers), as `kafka-transactions.sh abort` does.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};
use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeTransactionsRequest, InitProducerIdRequest,
    ListTransactionsRequest, ProducerId, TopicName, TransactionalId, WriteTxnMarkersRequest,
};
use strata_broker::protocol::client::Client;

use crate::cluster;
use crate::cluster::kafka::{self, str_bytes};
use crate::common::{emit, ConnectArgs};

#[derive(Subcommand, Debug)]
pub enum TxnCommand {
    /// List transactional ids with their state, producer and open transaction.
    List(ListArgs),
    /// Show one transactional id: producer, state, timeout, partitions, age.
    Describe(IdArgs),
    /// Abort an id's open transaction and fence its producer (it must initialise again).
    Abort(IdArgs),
    /// Find transactions open in partitions that no coordinator knows of.
    FindHanging(HangingArgs),
    /// Write an abort marker for a hanging transaction at its partition's leader.
    AbortHanging(AbortHangingArgs),
}

impl TxnCommand {
    pub fn conn(&self) -> &ConnectArgs {
        match self {
            TxnCommand::List(a) => &a.conn,
            TxnCommand::Describe(a) | TxnCommand::Abort(a) => &a.conn,
            TxnCommand::FindHanging(a) => &a.conn,
            TxnCommand::AbortHanging(a) => &a.conn,
        }
    }
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Only ids in this state (Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit,
    /// CompleteAbort); repeatable.
    #[arg(long = "state")]
    pub states: Vec<String>,
    /// Only transactions open for at least this long.
    #[arg(long, value_name = "MS")]
    pub min_age_ms: Option<i64>,
    #[command(flatten)]
    pub conn: ConnectArgs,
}

#[derive(Args, Debug)]
pub struct IdArgs {
    /// The transactional id.
    pub transactional_id: String,
    #[command(flatten)]
    pub conn: ConnectArgs,
}

#[derive(Args, Debug)]
pub struct HangingArgs {
    /// Only this topic's partitions (default: every topic).
    #[arg(long)]
    pub topic: Option<String>,
    #[command(flatten)]
    pub conn: ConnectArgs,
}

#[derive(Args, Debug)]
pub struct AbortHangingArgs {
    #[arg(long)]
    pub topic: String,
    #[arg(long)]
    pub partition: i32,
    #[arg(long)]
    pub producer_id: i64,
    #[command(flatten)]
    pub conn: ConnectArgs,
}

pub fn run(cmd: TxnCommand) -> anyhow::Result<()> {
    cluster::block(async {
        match cmd {
            TxnCommand::List(a) => list(a).await,
            TxnCommand::Describe(a) => describe(a).await,
            TxnCommand::Abort(a) => abort(a).await,
            TxnCommand::FindHanging(a) => find_hanging(a).await.map(|_| ()),
            TxnCommand::AbortHanging(a) => abort_hanging(a).await,
        }
    })
}

/// A transactional id as DescribeTransactions shows it.
struct Described {
    id: String,
    coordinator: i32,
    state: String,
    producer_id: i64,
    epoch: i16,
    timeout_ms: i32,
    start_ms: i64,
    partitions: Vec<(String, i32)>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn line(d: &Described) -> String {
    let age = if d.start_ms >= 0 {
        (now_ms() - d.start_ms).max(0).to_string()
    } else {
        "-".into()
    };
    let partitions: Vec<String> = d
        .partitions
        .iter()
        .map(|(t, p)| format!("{t}-{p}"))
        .collect();
    format!(
        "transactional_id={} coordinator={} state={} producer_id={} producer_epoch={} timeout_ms={} age_ms={age} partitions={}",
        d.id,
        d.coordinator,
        d.state,
        d.producer_id,
        d.epoch,
        d.timeout_ms,
        if partitions.is_empty() { "-".to_string() } else { partitions.join(",") }
    )
}

/// DescribeTransactions of `ids` at one coordinator.
async fn describe_at(
    c: &mut Client,
    coordinator: i32,
    ids: &[String],
) -> anyhow::Result<Vec<Described>> {
    let req = DescribeTransactionsRequest::default().with_transactional_ids(
        ids.iter()
            .map(|id| TransactionalId(str_bytes(id)))
            .collect(),
    );
    let resp = c.call(0, &req).await.context("DescribeTransactions")?;
    let mut out = Vec::new();
    for s in resp.transaction_states {
        if s.error_code != 0 {
            bail!(
                "DescribeTransactions {}: error {}",
                s.transactional_id.0.as_str(),
                s.error_code
            );
        }
        out.push(Described {
            id: s.transactional_id.0.to_string(),
            coordinator,
            state: s.transaction_state.to_string(),
            producer_id: s.producer_id.0,
            epoch: s.producer_epoch,
            timeout_ms: s.transaction_timeout_ms,
            start_ms: s.transaction_start_time_ms,
            partitions: s
                .topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| (t.topic.0.to_string(), *p)))
                .collect(),
        });
    }
    Ok(out)
}

/// Every transactional id of every broker (each lists those it coordinates), described.
async fn everything(
    conn: &ConnectArgs,
    states: &[String],
    min_age_ms: Option<i64>,
) -> anyhow::Result<Vec<Described>> {
    let mut c = kafka::connect(conn).await?;
    let view = kafka::cluster(&mut c).await?;
    let mut pool = kafka::Pool::like(&c);
    let mut out = Vec::new();
    for b in &view.brokers {
        let client = pool.get(&view, b.id).await?;
        let req = ListTransactionsRequest::default()
            .with_state_filters(states.iter().map(|s| str_bytes(s)).collect())
            .with_duration_filter(min_age_ms.unwrap_or(-1));
        let resp = client
            .call(1, &req)
            .await
            .with_context(|| format!("ListTransactions at broker {}", b.id))?;
        if resp.error_code != 0 {
            bail!(
                "ListTransactions at broker {}: error {}",
                b.id,
                resp.error_code
            );
        }
        if !resp.unknown_state_filters.is_empty() {
            bail!("unknown states: {:?}", resp.unknown_state_filters);
        }
        let ids: Vec<String> = (resp.transaction_states.iter())
            .map(|s| s.transactional_id.0.to_string())
            .collect();
        if !ids.is_empty() {
            out.extend(describe_at(client, b.id, &ids).await?);
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

async fn list(a: ListArgs) -> anyhow::Result<()> {
    let all = everything(&a.conn, &a.states, a.min_age_ms).await?;
    for d in &all {
        emit(format_args!("{}", line(d)))?;
    }
    eprintln!("txn list: {} transactional ids", all.len());
    Ok(())
}

/// The coordinator of `id` and a connection to it.
async fn coordinator(conn: &ConnectArgs, id: &str) -> anyhow::Result<(i32, Client)> {
    kafka::coordinator(conn, id, 1).await
}

async fn describe(a: IdArgs) -> anyhow::Result<()> {
    let (id, mut c) = coordinator(&a.conn, &a.transactional_id).await?;
    for d in describe_at(&mut c, id, std::slice::from_ref(&a.transactional_id)).await? {
        emit(format_args!("{}", line(&d)))?;
    }
    Ok(())
}

async fn abort(a: IdArgs) -> anyhow::Result<()> {
    let (coordinator_id, mut c) = coordinator(&a.conn, &a.transactional_id).await?;
    let before = describe_at(
        &mut c,
        coordinator_id,
        std::slice::from_ref(&a.transactional_id),
    )
    .await?
    .pop()
    .context("no such transactional id")?;
    if before.state != "Ongoing" {
        bail!(
            "{} has no open transaction (state {})",
            a.transactional_id,
            before.state
        );
    }
    eprintln!(
        "txn abort: aborting {} (producer {} epoch {}, {} partitions) and fencing its producer",
        a.transactional_id,
        before.producer_id,
        before.epoch,
        before.partitions.len()
    );
    let resp = c
        .call(
            3,
            &InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(str_bytes(&a.transactional_id))))
                .with_transaction_timeout_ms(before.timeout_ms)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        )
        .await
        .context("InitProducerId")?;
    if resp.error_code != 0 {
        bail!(
            "InitProducerId {}: error {}",
            a.transactional_id,
            resp.error_code
        );
    }
    emit(format_args!(
        "aborted transactional_id={} producer_id={} producer_epoch={}",
        a.transactional_id, resp.producer_id.0, resp.producer_epoch
    ))
}

/// A transaction a partition holds open.
struct Hanging {
    topic: String,
    partition: i32,
    leader: i32,
    producer_id: i64,
    epoch: i32,
    coordinator_epoch: i32,
    start_offset: i64,
}

/// Transactions open in partitions (DescribeProducers at each leader) whose producer no
/// coordinator lists as ongoing.
async fn find_hanging(a: HangingArgs) -> anyhow::Result<Vec<Hanging>> {
    let ongoing: BTreeSet<i64> = everything(
        &a.conn,
        &[
            "Ongoing".to_string(),
            "PrepareCommit".to_string(),
            "PrepareAbort".to_string(),
        ],
        None,
    )
    .await?
    .into_iter()
    .map(|d| d.producer_id)
    .collect();
    let mut c = kafka::connect(&a.conn).await?;
    let view = kafka::cluster(&mut c).await?;
    let mut by_leader: BTreeMap<i32, Vec<(String, i32)>> = BTreeMap::new();
    for p in &view.partitions {
        if a.topic.as_ref().is_some_and(|t| *t != p.topic) {
            continue;
        }
        let leader = view
            .leaders
            .get(&(p.topic.clone(), p.partition))
            .copied()
            .unwrap_or(-1);
        if leader >= 0 {
            by_leader
                .entry(leader)
                .or_default()
                .push((p.topic.clone(), p.partition));
        }
    }
    let mut pool = kafka::Pool::like(&c);
    let mut found = Vec::new();
    for (leader, partitions) in by_leader {
        let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (t, p) in &partitions {
            topics.entry(t).or_default().push(*p);
        }
        let req = DescribeProducersRequest::default().with_topics(
            topics
                .iter()
                .map(|(t, ps)| {
                    TopicRequest::default()
                        .with_name(TopicName(str_bytes(t)))
                        .with_partition_indexes(ps.clone())
                })
                .collect(),
        );
        let client = pool.get(&view, leader).await?;
        let resp = client
            .call(0, &req)
            .await
            .with_context(|| format!("DescribeProducers at broker {leader}"))?;
        for t in resp.topics {
            for p in t.partitions {
                for s in p.active_producers {
                    if s.current_txn_start_offset >= 0 && !ongoing.contains(&s.producer_id.0) {
                        found.push(Hanging {
                            topic: t.name.0.to_string(),
                            partition: p.partition_index,
                            leader,
                            producer_id: s.producer_id.0,
                            epoch: s.producer_epoch,
                            coordinator_epoch: s.coordinator_epoch,
                            start_offset: s.current_txn_start_offset,
                        });
                    }
                }
            }
        }
    }
    for h in &found {
        emit(format_args!(
            "hanging topic={} partition={} leader={} producer_id={} producer_epoch={} coordinator_epoch={} start_offset={}",
            h.topic, h.partition, h.leader, h.producer_id, h.epoch, h.coordinator_epoch, h.start_offset
        ))?;
    }
    eprintln!("txn find-hanging: {} hanging transactions", found.len());
    Ok(found)
}

async fn abort_hanging(a: AbortHangingArgs) -> anyhow::Result<()> {
    let hanging = find_hanging(HangingArgs {
        topic: Some(a.topic.clone()),
        conn: a.conn.clone(),
    })
    .await?;
    let Some(h) = hanging
        .into_iter()
        .find(|h| h.partition == a.partition && h.producer_id == a.producer_id)
    else {
        bail!(
            "producer {} has no hanging transaction in {}-{}",
            a.producer_id,
            a.topic,
            a.partition
        );
    };
    let mut c = kafka::connect(&a.conn).await?;
    let view = kafka::cluster(&mut c).await?;
    let mut pool = kafka::Pool::like(&c);
    let client = pool.get(&view, h.leader).await?;
    let req = WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
        .with_producer_id(ProducerId(h.producer_id))
        .with_producer_epoch(h.epoch as i16)
        .with_transaction_result(false)
        .with_coordinator_epoch(h.coordinator_epoch)
        .with_topics(vec![WritableTxnMarkerTopic::default()
            .with_name(TopicName(str_bytes(&h.topic)))
            .with_partition_indexes(vec![h.partition])])]);
    let resp = client.call(1, &req).await.context("WriteTxnMarkers")?;
    let code = (resp.markers.iter())
        .flat_map(|m| &m.topics)
        .flat_map(|t| &t.partitions)
        .map(|p| p.error_code)
        .next()
        .unwrap_or(-1);
    if code != 0 {
        bail!("WriteTxnMarkers: error {code}");
    }
    emit(format_args!(
        "aborted topic={} partition={} producer_id={} start_offset={}",
        h.topic, h.partition, h.producer_id, h.start_offset
    ))
}
