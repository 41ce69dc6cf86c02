//! `strata group reset-offsets`: commits new offsets in the group's name without joining it.

use std::collections::HashMap;

use anyhow::{anyhow, bail, Context as _};
use clap::{ArgGroup, Args};
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use crate::common::{check_partition, emit, topic_partitions, ConnectArgs};

use super::clients::*;
use super::table::render_table;

#[derive(Args, Debug)]
#[command(group(
    ArgGroup::new("target")
        .required(true)
        .args(["to_earliest", "to_latest", "to_timestamp", "to_offset"])
))]
pub struct ResetArgs {
    #[command(flatten)]
    pub conn: ConnectArgs,
    /// Group id.
    pub group: String,
    /// Topic whose offsets are reset.
    #[arg(short = 't', long)]
    pub topic: String,
    /// Reset only this partition (default: every partition of the topic).
    #[arg(short = 'P', long)]
    pub partition: Option<i32>,
    /// The earliest offset still in the log.
    #[arg(long)]
    pub to_earliest: bool,
    /// The log end: skip everything not yet consumed.
    #[arg(long)]
    pub to_latest: bool,
    /// The first record with a timestamp >= MS (unix milliseconds); log end if none.
    #[arg(long, value_name = "MS")]
    pub to_timestamp: Option<i64>,
    /// This offset, clamped to the partition's [earliest, log end].
    #[arg(long, value_name = "N")]
    pub to_offset: Option<i64>,
    /// Print the old and new offsets without committing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Where `reset-offsets` moves the committed offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ResetTarget {
    Earliest,
    Latest,
    Timestamp(i64),
    Offset(i64),
}

impl ResetTarget {
    pub(super) fn from_args(args: &ResetArgs) -> anyhow::Result<ResetTarget> {
        Ok(
            match (
                args.to_earliest,
                args.to_latest,
                args.to_timestamp,
                args.to_offset,
            ) {
                (true, false, None, None) => ResetTarget::Earliest,
                (false, true, None, None) => ResetTarget::Latest,
                (false, false, Some(ts), None) => {
                    if ts < 0 {
                        bail!("--to-timestamp must be >= 0");
                    }
                    ResetTarget::Timestamp(ts)
                }
                (false, false, None, Some(o)) => {
                    if o < 0 {
                        bail!("--to-offset must be >= 0");
                    }
                    ResetTarget::Offset(o)
                }
                _ => bail!(
                    "give exactly one of --to-earliest, --to-latest, --to-timestamp, --to-offset"
                ),
            },
        )
    }
}

/// The new offset of a partition with watermarks `[low, high]`; `by_time` is the offset
/// a timestamp resolved to (`None`: no record at or after it).
pub(super) fn reset_offset(target: ResetTarget, low: i64, high: i64, by_time: Option<i64>) -> i64 {
    match target {
        ResetTarget::Earliest => low,
        ResetTarget::Latest => high,
        ResetTarget::Timestamp(_) => by_time.map_or(high, |o| o.clamp(low, high)),
        ResetTarget::Offset(o) => o.clamp(low, high),
    }
}

pub(super) fn is_membership_error(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::UnknownMemberId
            | RDKafkaErrorCode::IllegalGeneration
            | RDKafkaErrorCode::RebalanceInProgress
    )
}

pub(super) fn run(args: ResetArgs) -> anyhow::Result<()> {
    let conn = &args.conn;
    let group = &args.group;
    let target = ResetTarget::from_args(&args)?;
    let consumer = group_consumer(conn, group)?;

    match describe_group(conn, &consumer, group)? {
        Some(snapshot) if !snapshot.members.is_empty() => {
            return Err(active_members_error(group));
        }
        Some(_) => {}
        None => eprintln!("note: group {group} does not exist yet; committing creates it"),
    }

    let all = topic_partitions(conn, consumer.client(), &args.topic)?;
    let chosen = match args.partition {
        Some(p) => {
            check_partition(&args.topic, &all, p)?;
            vec![p]
        }
        None => all,
    };
    let tps: Vec<Tp> = chosen.iter().map(|p| (args.topic.clone(), *p)).collect();
    let old = committed_offsets(conn, &consumer, group, &tps)?;

    let by_time: HashMap<i32, i64> = match target {
        ResetTarget::Timestamp(ts) => {
            let mut tpl = TopicPartitionList::with_capacity(chosen.len());
            for p in &chosen {
                tpl.add_partition_offset(&args.topic, *p, Offset::Offset(ts))
                    .with_context(|| format!("partition {p}"))?;
            }
            let resolved = consumer
                .offsets_for_times(tpl, conn.request_timeout())
                .map_err(|e| anyhow!("resolving --to-timestamp to offsets: {e}"))?;
            let mut out = HashMap::new();
            for elem in resolved.elements() {
                if let Err(e) = elem.error() {
                    bail!(
                        "resolving --to-timestamp for partition {}: {e}",
                        elem.partition()
                    );
                }
                if let Offset::Offset(o) = elem.offset() {
                    out.insert(elem.partition(), o);
                }
            }
            out
        }
        _ => HashMap::new(),
    };

    let mut tpl = TopicPartitionList::with_capacity(chosen.len());
    let mut rows = Vec::new();
    for (t, p) in &tps {
        let (low, high) = consumer
            .fetch_watermarks(t, *p, conn.request_timeout())
            .map_err(|e| anyhow!("watermarks of {t}-{p}: {e}"))?;
        let new = reset_offset(target, low, high, by_time.get(p).copied());
        if let ResetTarget::Offset(o) = target {
            if o != new {
                eprintln!("note: {t}-{p}: offset {o} outside [{low}, {high}], using {new}");
            }
        }
        tpl.add_partition_offset(t, *p, Offset::Offset(new))
            .with_context(|| format!("{t}-{p}"))?;
        rows.push(vec![
            t.clone(),
            p.to_string(),
            old.get(&(t.clone(), *p))
                .map_or("-".to_string(), |o| o.to_string()),
            new.to_string(),
        ]);
    }
    for line in render_table(&["TOPIC", "PARTITION", "OLD", "NEW"], &rows) {
        emit(format_args!("{line}"))?;
    }
    if args.dry_run {
        emit(format_args!("dry run: nothing committed"))?;
        return Ok(());
    }

    if let Err(e) = consumer.commit(&tpl, CommitMode::Sync) {
        if e.rdkafka_error_code().is_some_and(is_membership_error) {
            return Err(active_members_error(group));
        }
        bail!("committing offsets for group `{group}`: {e}");
    }
    // Confirm: a partition-level refusal does not always surface as the commit's error.
    let now = committed_offsets(conn, &consumer, group, &tps)?;
    for elem in tpl.elements() {
        let tp = (elem.topic().to_string(), elem.partition());
        let want = elem.offset().to_raw();
        if now.get(&tp).copied() != want {
            bail!(
                "offset of {}-{} for group `{group}` is {:?} after commit, expected {:?}",
                tp.0,
                tp.1,
                now.get(&tp),
                want
            );
        }
    }
    emit(format_args!(
        "committed {} offset(s) for group {group}",
        tpl.count()
    ))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::delete::delete_error;
    use super::*;

    #[test]
    fn reset_offset_targets() {
        assert_eq!(reset_offset(ResetTarget::Earliest, 5, 50, None), 5);
        assert_eq!(reset_offset(ResetTarget::Latest, 5, 50, None), 50);
        assert_eq!(reset_offset(ResetTarget::Offset(20), 5, 50, None), 20);
        assert_eq!(reset_offset(ResetTarget::Offset(2), 5, 50, None), 5);
        assert_eq!(reset_offset(ResetTarget::Offset(99), 5, 50, None), 50);
        assert_eq!(reset_offset(ResetTarget::Timestamp(1), 5, 50, Some(7)), 7);
        assert_eq!(reset_offset(ResetTarget::Timestamp(1), 5, 50, None), 50);
    }

    #[test]
    fn membership_errors_are_recognised() {
        assert!(is_membership_error(RDKafkaErrorCode::UnknownMemberId));
        assert!(is_membership_error(RDKafkaErrorCode::IllegalGeneration));
        assert!(is_membership_error(RDKafkaErrorCode::RebalanceInProgress));
        assert!(!is_membership_error(RDKafkaErrorCode::NotCoordinator));
        assert_eq!(
            delete_error(RDKafkaErrorCode::NonEmptyGroup),
            "group has active members; stop them first"
        );
    }
}
