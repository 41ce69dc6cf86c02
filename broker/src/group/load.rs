//! Following the leadership of `__consumer_offsets` (see the invariants in [`super`]): the
//! groups of a partition are rebuilt from its whole log when its leadership arrives here and
//! dropped when it leaves; [`Coordinator::check`] is the one check before serving any group
//! request.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use super::consumer::ConsumerGroup;
use super::consumer_store;
use super::state::Group;
use super::store::{self, GroupMetadata};
use super::{validate_group_id, Coordinator, Entry, Offsets};
use crate::coordination::{drop_keys, read_whole, Item, Loader};
use crate::error::{ApiError, ErrorCode};
use crate::partition::Partition;

/// The coordinator's table rebuilt from `__consumer_offsets` records read in log order: the
/// latest record per key wins and a tombstone deletes.
#[derive(Default)]
struct Rebuild {
    offsets: HashMap<String, Offsets>,
    metadata: HashMap<String, Option<GroupMetadata>>,
    /// KIP-848 consumer groups' records, per group.
    consumer: HashMap<String, BTreeMap<consumer_store::Key, consumer_store::Value>>,
    /// Records of transactions whose markers are not read yet, per producer id.
    pending: HashMap<i64, Vec<store::Entry>>,
}

impl Rebuild {
    fn apply(&mut self, entry: store::Entry) {
        match entry {
            store::Entry::Offset {
                group,
                topic,
                partition,
                value,
            } => {
                let offsets = self.offsets.entry(group).or_default();
                match value {
                    Some(v) => offsets.insert((topic, partition), v),
                    None => offsets.remove(&(topic, partition)),
                };
            }
            store::Entry::Group { group, value } => {
                self.metadata.insert(group, value);
            }
            store::Entry::Consumer { group, key, value } => {
                let records = self.consumer.entry(group).or_default();
                match value {
                    Some(v) => records.insert(key, v),
                    None => records.remove(&key),
                };
            }
            store::Entry::Other => {}
        }
    }

    /// A record of `producer_id`'s transaction: applied when its commit marker is read.
    fn apply_txn(&mut self, producer_id: i64, entry: store::Entry) {
        self.pending.entry(producer_id).or_default().push(entry);
    }

    /// `producer_id`'s marker: its transaction's records apply (commit) or go (abort).
    fn marker(&mut self, producer_id: i64, commit: bool) {
        if let Some(entries) = self.pending.remove(&producer_id) {
            if commit {
                for e in entries {
                    self.apply(e);
                }
            }
        }
    }

    /// The table as of `now` (sessions of loaded members start now) / `wall_ms`.
    fn finish(mut self, now: Instant, wall_ms: i64) -> HashMap<String, Entry> {
        let pending = std::mem::take(&mut self.pending);
        let mut table: HashMap<String, Entry> = self
            .offsets
            .into_iter()
            .filter(|(_, o)| !o.is_empty())
            .map(|(g, offsets)| {
                (
                    g,
                    Entry {
                        offsets,
                        ..Entry::default()
                    },
                )
            })
            .collect();
        for (id, record) in self.metadata {
            let Some(record) = record else { continue };
            let entry = table.entry(id.clone()).or_default();
            entry.last_active_ms = if record.members.is_empty() {
                // Empty since the record was written (KIP-211's clock).
                record.current_state_timestamp.max(0)
            } else {
                wall_ms
            };
            entry.group = Some(Group::from_metadata(&id, record, now));
        }
        for (id, records) in self.consumer {
            // A group's epoch record is its first and its tombstone its last: without one
            // there is no group (deleted, or only some of its records compacted away).
            if !records.contains_key(&consumer_store::Key::GroupEpoch) {
                continue;
            }
            let group = ConsumerGroup::restore(records, now);
            let entry = table.entry(id).or_default();
            if !group.is_empty() {
                entry.last_active_ms = wall_ms;
            }
            entry.consumer = Some(group);
        }
        // Transactions still open: their offsets wait for the marker.
        for (producer_id, entries) in pending {
            for e in entries {
                if let store::Entry::Offset {
                    group,
                    topic,
                    partition,
                    value: Some(v),
                } = e
                {
                    table
                        .entry(group)
                        .or_default()
                        .pending_txn
                        .entry(producer_id)
                        .or_default()
                        .insert((topic, partition), v);
                }
            }
        }
        table
    }
}

impl Coordinator {
    /// Creates `__consumer_offsets` if it does not exist yet, compacted like Kafka's: the latest
    /// record per key (a group's offset for one partition, or its metadata) is all that is kept.
    /// A topic made by an older Strata (delete policy, no retention) is switched to compaction.
    pub async fn ensure_offsets_topic(&self) -> Result<(), ApiError> {
        let mut configs = BTreeMap::new();
        configs.insert("cleanup.policy".to_string(), "compact".to_string());
        configs.insert("segment.bytes".to_string(), (100 * 1024 * 1024).to_string());
        if let Some(topic) = self.node.metadata.state().topic(store::TOPIC) {
            if topic.configs.get("cleanup.policy").map(String::as_str) != Some("compact") {
                self.node
                    .apply(strata_metadata::Command::AlterTopicConfig {
                        name: store::TOPIC.to_string(),
                        set: configs,
                        delete: vec!["retention.ms".to_string()],
                    })
                    .await?;
                self.node.sync_partitions()?;
                tracing::info!("switched {} to cleanup.policy=compact", store::TOPIC);
            }
            return Ok(());
        }
        match self
            .node
            .create_internal_topic(store::TOPIC, store::PARTITIONS, configs)
            .await
        {
            Ok(()) => {
                tracing::info!("created {}", store::TOPIC);
                // Coordinate the new partitions led here at once, not at the next metadata
                // change.
                self.follow_leadership().await;
                Ok(())
            }
            Err(e) if e.code == ErrorCode::TopicAlreadyExists => Ok(()),
            Err(e) => Err(ApiError::new(ErrorCode::CoordinatorNotAvailable, e.message)),
        }
    }

    /// Whether this broker coordinates `group_id` now; the one check before serving any
    /// group request (see the module invariants and [`crate::coordination`]).
    pub async fn check(&self, group_id: &str) -> Result<(), ApiError> {
        validate_group_id(group_id)?;
        let p = store::partition_for(group_id);
        self.coordination
            .check(&self.node, p, "group", group_id)
            .await
            .map(|_| ())
    }

    /// Follows the leadership of `__consumer_offsets`: loads the groups of every partition
    /// this broker has come to lead (at a new leader epoch) and drops those of partitions it
    /// no longer leads. Cheap when nothing changed; a failed load is retried on the next call.
    pub async fn follow_leadership(&self) {
        self.coordination.follow(&self.node, &Load(self)).await;
    }
}

/// The group coordinator as [`crate::coordination`] loads it.
struct Load<'a>(&'a Coordinator);

impl Loader for Load<'_> {
    const WHAT: &'static str = "groups";
    type Table = Rebuild;

    /// Rebuilds committed offsets and groups from one partition of `__consumer_offsets`, read
    /// whole: per key the latest record wins and a tombstone deletes; transactional commits
    /// count once their commit marker is read.
    fn read(&self, part: &Partition) -> Result<(usize, Rebuild), ApiError> {
        let mut rebuild = Rebuild::default();
        let count = read_whole(part, |item| match item {
            Item::Marker {
                producer_id,
                commit,
            } => {
                rebuild.marker(producer_id, commit);
                true
            }
            Item::Record {
                key,
                value,
                transactional,
            } => match (store::decode(key, value), transactional) {
                (Some(entry), Some(producer_id)) => {
                    rebuild.apply_txn(producer_id, entry);
                    true
                }
                (Some(entry), None) => {
                    rebuild.apply(entry);
                    true
                }
                (None, _) => false,
            },
        })?;
        Ok((count, rebuild))
    }

    fn adopt(&self, _partition: i32, _leader_epoch: i32, rebuild: Rebuild) -> String {
        let clock = &self.0.node.clock;
        let table = rebuild.finish(clock.instant(), clock.now_ms());
        let stable = (table.values())
            .filter(|e| {
                e.group.as_ref().is_some_and(|g| !g.is_empty())
                    || e.consumer.as_ref().is_some_and(|g| !g.is_empty())
            })
            .count();
        let groups = table.len();
        self.0.lock().extend(table);
        format!("{groups} groups, {stable} with members")
    }

    fn drop_partition(&self, partition: i32) -> usize {
        drop_keys(&mut self.0.lock(), partition, store::partition_for)
    }
}

#[cfg(test)]
mod tests {
    use super::super::listing::{describe, list};
    use super::super::membership::heartbeat;
    use super::super::state::GroupState;
    use super::super::store::CommittedOffset;
    use super::*;
    use bytes::Bytes;

    fn offset(group: &str, partition: i32, value: Option<i64>) -> store::Entry {
        store::Entry::Offset {
            group: group.into(),
            topic: "t".into(),
            partition,
            value: value.map(|offset| CommittedOffset {
                offset,
                leader_epoch: -1,
                metadata: String::new(),
                commit_timestamp: 1,
            }),
        }
    }

    fn record(generation: i32, members: &[(&str, &'static [u8])], ts: i64) -> GroupMetadata {
        GroupMetadata {
            protocol_type: "consumer".into(),
            generation,
            protocol: (!members.is_empty()).then(|| "range".to_string()),
            leader: members.first().map(|(m, _)| m.to_string()),
            current_state_timestamp: ts,
            members: members
                .iter()
                .map(|(m, a)| store::MemberMetadata {
                    member_id: m.to_string(),
                    group_instance_id: None,
                    client_id: format!("client-{m}"),
                    client_host: "/127.0.0.1".into(),
                    rebalance_timeout: 30_000,
                    session_timeout: 6_000,
                    subscription: Bytes::from_static(b"sub"),
                    assignment: Bytes::from_static(a),
                })
                .collect(),
        }
    }

    fn group(id: &str, value: Option<GroupMetadata>) -> store::Entry {
        store::Entry::Group {
            group: id.into(),
            value,
        }
    }

    #[test]
    fn loading_replays_records_in_order_and_tombstones_delete() {
        let mut r = Rebuild::default();
        for e in [
            // g1: two generations; the later one wins.
            offset("g1", 0, Some(5)),
            group("g1", Some(record(1, &[("m1", b"a1")], 10))),
            group("g1", Some(record(2, &[("m1", b"a1"), ("m2", b"a2")], 20))),
            offset("g1", 0, Some(9)),
            // g2: deleted (offsets and metadata tombstoned).
            group("g2", Some(record(3, &[("x", b"")], 10))),
            offset("g2", 0, Some(1)),
            offset("g2", 0, None),
            group("g2", None),
            // g3: deleted, then re-created and emptied at generation 7.
            group("g3", Some(record(4, &[("y", b"")], 10))),
            group("g3", None),
            group("g3", Some(record(7, &[], 1_234))),
            offset("g3", 1, Some(3)),
            // g4: simple commits only; g5: a stable group that later became empty.
            offset("g4", 2, Some(8)),
            group("g5", Some(record(1, &[("z", b"")], 10))),
            group("g5", Some(record(2, &[], 50))),
            store::Entry::Other,
        ] {
            r.apply(e);
        }
        let now = crate::clock::Clock::manual(0).instant();
        let table = r.finish(now, 99_000);
        let mut ids: Vec<&String> = table.keys().collect();
        ids.sort();
        assert_eq!(ids, ["g1", "g3", "g4", "g5"]);

        let g1 = &table["g1"];
        let g = g1.group.as_ref().unwrap();
        assert_eq!((g.state, g.generation), (GroupState::Stable, 2));
        assert_eq!(g.leader.as_deref(), Some("m1"));
        assert_eq!(g.members.len(), 2);
        assert_eq!(g.members["m2"].assignment, Bytes::from_static(b"a2"));
        assert_eq!(g1.offsets[&("t".to_string(), 0)].offset, 9);
        assert_eq!(g1.last_active_ms, 99_000, "a stable group is active now");

        let g3 = &table["g3"];
        let g = g3.group.as_ref().unwrap();
        assert_eq!((g.state, g.generation), (GroupState::Empty, 7));
        assert_eq!(
            g3.last_active_ms, 1_234,
            "empty since its record was written"
        );
        assert_eq!(g3.offsets.len(), 1);

        assert!(table["g4"].group.is_none());
        let g = table["g5"].group.as_ref().unwrap();
        assert_eq!((g.state, g.generation), (GroupState::Empty, 2));
        assert!(table["g5"].offsets.is_empty());
    }

    #[test]
    fn loaded_groups_are_listed_and_described_as_they_were() {
        let mut r = Rebuild::default();
        r.apply(group(
            "g1",
            Some(record(4, &[("m1", b"a1"), ("m2", b"a2")], 10)),
        ));
        r.apply(group("g2", Some(record(9, &[], 10))));
        let now = crate::clock::Clock::manual(0).instant();
        let mut table = r.finish(now, 0);
        let listed: Vec<_> = (list(&table).into_iter())
            .map(|g| (g.id, g.protocol_type, g.state, g.kind))
            .collect();
        assert_eq!(
            listed,
            vec![
                (
                    "g1".to_string(),
                    "consumer".to_string(),
                    "Stable",
                    "classic"
                ),
                ("g2".to_string(), "consumer".to_string(), "Empty", "classic"),
            ]
        );
        let view = describe(&table, "g1");
        assert_eq!(
            (
                view.state,
                view.protocol_type.as_str(),
                view.protocol.as_str()
            ),
            ("Stable", "consumer", "range")
        );
        let members: Vec<(String, String, Bytes, Bytes)> = view
            .members
            .into_iter()
            .map(|(id, _, client, _, meta, assignment)| (id, client, meta, assignment))
            .collect();
        assert_eq!(
            members,
            vec![
                (
                    "m1".to_string(),
                    "client-m1".to_string(),
                    Bytes::from_static(b"sub"),
                    Bytes::from_static(b"a1")
                ),
                (
                    "m2".to_string(),
                    "client-m2".to_string(),
                    Bytes::from_static(b"sub"),
                    Bytes::from_static(b"a2")
                ),
            ]
        );
        assert_eq!(
            heartbeat(&mut table, "g1", "m2", 4, None, now),
            ErrorCode::None
        );
        assert_eq!(
            heartbeat(&mut table, "g1", "m2", 3, None, now),
            ErrorCode::IllegalGeneration
        );
        assert_eq!(describe(&table, "g2").state, "Empty");
    }
}
