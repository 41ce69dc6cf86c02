//! What a perf run sets up before it measures: its topics (created when missing) and a group
//! id of its own.

use std::time::Instant;

use anyhow::{bail, Context as _};
use rdkafka::admin::{NewTopic, TopicReplication};
use rdkafka::error::RDKafkaErrorCode;

use crate::common::{
    admin_client, admin_options, block_on, current_thread_runtime, topic_partitions, ConnectArgs,
};

/// The topic's partition count, creating it with `partitions` (or `default`) when missing.
/// An existing topic with a different count than an explicit `partitions` is an error.
pub(super) fn ensure_topic(
    conn: &ConnectArgs,
    topic: &str,
    partitions: Option<i32>,
    default: i32,
) -> anyhow::Result<i32> {
    ensure_topics(conn, &[topic.to_string()], partitions, default)
}

/// [`ensure_topic`] for several topics in one CreateTopics request; returns the partition
/// count of the first (they are created alike).
pub(super) fn ensure_topics(
    conn: &ConnectArgs,
    topics: &[String],
    partitions: Option<i32>,
    default: i32,
) -> anyhow::Result<i32> {
    if partitions.is_some_and(|p| p < 1) {
        bail!("--partitions must be at least 1");
    }
    let admin = admin_client(conn)?;
    let runtime = current_thread_runtime()?;
    let wanted = partitions.unwrap_or(default);
    let new: Vec<NewTopic> = topics
        .iter()
        .map(|t| NewTopic::new(t, wanted, TopicReplication::Fixed(-1)))
        .collect();
    let started = Instant::now();
    let results = block_on(
        &runtime,
        conn,
        "create topics",
        admin.create_topics(&new, &admin_options(conn)),
    )?
    .context("creating topics")?;
    let mut created = 0;
    for result in results {
        match result {
            Ok(_) => created += 1,
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => bail!("cannot create topic `{name}`: {code}"),
        }
    }
    if created > 0 {
        eprintln!(
            "created {created} topic(s) with {wanted} partitions in {} ms",
            started.elapsed().as_millis()
        );
    }
    let mut first = None;
    for topic in topics {
        let have = topic_partitions(conn, admin.inner(), topic)?.len() as i32;
        if partitions.is_some_and(|p| p != have) {
            bail!("topic `{topic}` already exists with {have} partitions, not {wanted}");
        }
        first.get_or_insert(have);
    }
    first.ok_or_else(|| anyhow::anyhow!("no topic named"))
}

/// The topics a run over `count` topics named after `topic` uses: `topic` itself for one,
/// `topic-0` .. `topic-<count-1>` for more.
pub(super) fn topic_names(topic: &str, count: u32) -> anyhow::Result<Vec<String>> {
    match count {
        0 => bail!("--topics must be at least 1"),
        1 => Ok(vec![topic.to_string()]),
        n => Ok((0..n).map(|i| format!("{topic}-{i}")).collect()),
    }
}

/// A group id no one else uses: `<prefix>-<pid>-<unix nanos>`.
pub(super) fn unique_group(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{prefix}-{}-{nanos}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_topic_keeps_its_name_and_several_are_numbered() {
        assert_eq!(topic_names("t", 1).unwrap(), vec!["t"]);
        assert_eq!(topic_names("t", 3).unwrap(), vec!["t-0", "t-1", "t-2"]);
        assert!(topic_names("t", 0).is_err());
    }
}
