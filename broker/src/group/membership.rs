//! Membership under the classic protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the
//! session and rebalance deadlines ([`Coordinator::tick`]). The state machine itself is
//! [`super::state`]; this drives it and stores what it asks to be stored.

use std::collections::HashMap;
use std::time::Instant;

use bytes::Bytes;

use super::persist::store_error;
use super::state::{Group, GroupState, JoinRequest, JoinResult, Reply, SyncResult};
use super::{Coordinator, Entry};
use crate::error::ErrorCode;

impl Coordinator {
    pub fn join(&self, group_id: &str, req: JoinRequest) -> Reply<JoinResult> {
        let mut groups = self.lock();
        let entry = groups.entry(group_id.to_string()).or_default();
        if entry.consumer.as_ref().is_some_and(|g| !g.is_empty())
            || entry.share.as_ref().is_some_and(|g| !g.is_empty())
        {
            return Reply::Now(JoinResult::error(
                ErrorCode::InconsistentGroupProtocol,
                &req.member_id,
            ));
        }
        let group = entry.group.get_or_insert_with(|| Group::new(group_id));
        if group.state == GroupState::Dead {
            *group = Group::new(group_id);
        }
        group.initial_rebalance_delay = self.node.config.group_initial_rebalance_delay();
        let reply = group.join(req, self.node.clock.instant());
        // A join is activity: a group that only handed out a member id is not expired before
        // the member comes back with it.
        entry.last_active_ms = self.node.clock.now_ms();
        self.store_if_asked(group_id, entry);
        reply
    }

    /// SyncGroup; the leader's is answered only after the generation's record is appended.
    pub fn sync(
        &self,
        group_id: &str,
        member_id: &str,
        generation: i32,
        instance_id: Option<&str>,
        assignments: Vec<(String, Bytes)>,
    ) -> Reply<SyncResult> {
        let mut groups = self.lock();
        let Some(group) = groups.get_mut(group_id).and_then(|e| e.group.as_mut()) else {
            return Reply::Now(SyncResult {
                error: ErrorCode::UnknownMemberId,
                assignment: Bytes::new(),
                protocol_type: None,
                protocol: None,
            });
        };
        if let Err(code) = check_instance(group, member_id, instance_id) {
            return Reply::Now(SyncResult {
                error: code,
                assignment: Bytes::new(),
                protocol_type: None,
                protocol: None,
            });
        }
        let now_ms = self.node.clock.now_ms();
        group.sync(
            member_id,
            generation,
            assignments,
            self.node.clock.instant(),
            now_ms,
            |record| {
                let generation = record.generation;
                self.store_group(group_id, &record).map_err(|e| {
                    tracing::error!(group = group_id, generation, error = %e, "cannot persist the group's assignment; rebalancing");
                    store_error(e.code)
                })
            },
        )
    }

    pub fn heartbeat(
        &self,
        group_id: &str,
        member_id: &str,
        generation: i32,
        instance_id: Option<&str>,
    ) -> ErrorCode {
        heartbeat(
            &mut self.lock(),
            group_id,
            member_id,
            generation,
            instance_id,
            self.node.clock.instant(),
        )
    }

    /// Removes members, by member id or (for static members) by instance id.
    pub fn leave(&self, group_id: &str, members: &[(String, Option<String>)]) -> Vec<ErrorCode> {
        let mut groups = self.lock();
        let Some(entry) = groups.get_mut(group_id) else {
            return members.iter().map(|_| ErrorCode::UnknownMemberId).collect();
        };
        let Some(group) = entry.group.as_mut() else {
            return members.iter().map(|_| ErrorCode::UnknownMemberId).collect();
        };
        let now = self.node.clock.instant();
        let codes = members
            .iter()
            .map(|(member_id, instance)| {
                let id = match instance {
                    Some(i) => match group.instance_member(i) {
                        Some(id) if member_id.is_empty() || *member_id == id => id,
                        Some(_) => return ErrorCode::FencedInstanceId,
                        None => return ErrorCode::UnknownMemberId,
                    },
                    None => member_id.clone(),
                };
                group.leave(&id, now)
            })
            .collect();
        self.store_if_asked(group_id, entry);
        codes
    }

    /// Session expiry and rebalance deadlines; called every 100 ms.
    pub fn tick(&self) {
        let now = self.node.clock.instant();
        self.expire_consumer_members(now);
        self.expire_share_members(now);
        let wall = self.node.clock.now_ms();
        for (id, entry) in self.lock().iter_mut() {
            if entry.group.as_ref().is_some_and(|g| !g.is_empty()) {
                entry.last_active_ms = wall;
            }
            if let Some(g) = entry.group.as_mut() {
                for member in g.tick(now) {
                    tracing::info!(group = %id, member, "member expired after its session timeout");
                }
            }
            self.store_if_asked(id, entry);
        }
    }
}

/// A static member's instance id must still belong to the member id it came with.
fn check_instance(
    group: &Group,
    member_id: &str,
    instance_id: Option<&str>,
) -> Result<(), ErrorCode> {
    match instance_id.and_then(|i| group.instance_member(i)) {
        Some(current) if current != member_id => Err(ErrorCode::FencedInstanceId),
        _ => Ok(()),
    }
}

pub(super) fn heartbeat(
    groups: &mut HashMap<String, Entry>,
    group_id: &str,
    member_id: &str,
    generation: i32,
    instance_id: Option<&str>,
    now: Instant,
) -> ErrorCode {
    let Some(group) = groups.get_mut(group_id).and_then(|e| e.group.as_mut()) else {
        return ErrorCode::UnknownMemberId;
    };
    if let Err(code) = check_instance(group, member_id, instance_id) {
        return code;
    }
    group.heartbeat(member_id, generation, now)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::Clock;
    use crate::config::BrokerConfig;
    use crate::group::state::JoinRequest;

    async fn answer<T>(reply: Reply<T>) -> T {
        match reply {
            Reply::Now(r) => r,
            Reply::Later(rx) => rx.await.expect("answered"),
        }
    }

    /// The coordinator on a real one-node cluster, with time only moving when the test moves
    /// it: a session timeout is checked to the millisecond, without sleeping.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_member_that_stops_heartbeating_leaves_once_the_clock_passes_its_session_timeout() {
        let clock = Clock::manual(1_700_000_000_000);
        let cfg = BrokerConfig {
            group_initial_rebalance_delay_ms: Some(0),
            ..BrokerConfig::default()
        };
        let t = crate::testing::single_node(clock.clone(), cfg).await;
        let groups = Coordinator::new(t.node.clone());
        groups.ensure_offsets_topic().await.expect("offsets topic");
        t.node.sync_partitions().expect("open partitions");
        groups.follow_leadership().await;
        groups.check("g").await.expect("coordinating g");

        let joined = answer(groups.join(
            "g",
            JoinRequest {
                member_id: String::new(),
                instance_id: None,
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                session_timeout: Duration::from_secs(10),
                rebalance_timeout: Duration::from_secs(30),
                protocol_type: "consumer".into(),
                protocols: vec![("range".into(), Bytes::new())],
                require_known_member_id: false,
            },
        ))
        .await;
        assert_eq!(joined.error, ErrorCode::None);
        let me = joined.member_id;
        let assignment = vec![(me.clone(), Bytes::from_static(b"all"))];
        let synced = answer(groups.sync("g", &me, joined.generation, None, assignment)).await;
        assert_eq!(synced.error, ErrorCode::None);
        assert_eq!(groups.describe("g").state, "Stable");

        // Heartbeats keep it: each restarts the 10 s.
        clock.advance(Duration::from_secs(9));
        assert_eq!(
            groups.heartbeat("g", &me, joined.generation, None),
            ErrorCode::None
        );
        clock.advance(Duration::from_secs(9));
        groups.tick();
        assert_eq!(
            groups.describe("g").members.len(),
            1,
            "9 s since its heartbeat"
        );
        clock.advance(Duration::from_millis(1_001));
        groups.tick();
        let view = groups.describe("g");
        assert_eq!((view.state, view.members.len()), ("Empty", 0));
        assert_eq!(
            groups.heartbeat("g", &me, joined.generation, None),
            ErrorCode::UnknownMemberId
        );
    }
}
