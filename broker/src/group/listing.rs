//! ListGroups, DescribeGroups and DeleteGroups. Listing and describing read the in-memory
//! table only, so they are plain functions over it.

use std::collections::HashMap;

use bytes::Bytes;

use super::state::GroupState;
use super::{Coordinator, Entry, GroupView};
use crate::error::ErrorCode;

impl Coordinator {
    /// (group id, protocol type, state) of every group with members or offsets.
    pub fn list(&self) -> Vec<Listed> {
        list(&self.lock())
    }

    pub fn describe(&self, group_id: &str) -> GroupView {
        describe(&self.lock(), group_id)
    }

    /// DeleteGroups: only a group without members; its offsets and its records are
    /// tombstoned.
    pub fn delete(&self, group_id: &str) -> ErrorCode {
        let mut groups = self.lock();
        let Some(entry) = groups.get(group_id) else {
            return ErrorCode::GroupIdNotFound;
        };
        if entry.group.as_ref().is_some_and(|g| !g.is_empty())
            || entry.consumer.as_ref().is_some_and(|g| !g.is_empty())
            || entry.share.as_ref().is_some_and(|g| !g.is_empty())
        {
            return ErrorCode::NonEmptyGroup;
        }
        if let Err(e) = self.tombstone_group(group_id, entry) {
            return e.code;
        }
        groups.remove(group_id);
        ErrorCode::None
    }
}

/// A group as ListGroups shows it.
#[derive(Debug, PartialEq)]
pub struct Listed {
    pub id: String,
    pub protocol_type: String,
    pub state: &'static str,
    /// "consumer" for KIP-848's groups, "share" for KIP-932's, "classic" for the others.
    pub kind: &'static str,
}

/// Every group with members or offsets.
pub(super) fn list(groups: &HashMap<String, Entry>) -> Vec<Listed> {
    let listed = |id: &String, protocol_type: String, state, kind| Listed {
        id: id.clone(),
        protocol_type,
        state,
        kind,
    };
    let mut out: Vec<_> = groups
        .iter()
        .map(|(id, e)| match (&e.group, &e.consumer) {
            _ if e.share.is_some() => {
                let state = e.share.as_ref().map_or("Empty", |g| g.state());
                listed(id, "share".into(), state, "share")
            }
            (_, Some(cg)) if !cg.is_empty() => {
                listed(id, "consumer".into(), cg.state(), "consumer")
            }
            (Some(g), _) => listed(
                id,
                g.protocol_type.clone().unwrap_or_default(),
                g.state.name(),
                "classic",
            ),
            (None, _) => listed(id, String::new(), GroupState::Empty.name(), "classic"),
        })
        .filter(|g| g.state != GroupState::Dead.name())
        .collect();
    out.sort_by(|a, b| a.id.cmp(&b.id));
    out
}

pub(super) fn describe(groups: &HashMap<String, Entry>, group_id: &str) -> GroupView {
    match groups.get(group_id).and_then(|e| e.group.as_ref()) {
        None if groups.contains_key(group_id) => GroupView {
            state: "Empty",
            protocol_type: String::new(),
            protocol: String::new(),
            members: vec![],
        },
        None => GroupView {
            state: "Dead",
            protocol_type: String::new(),
            protocol: String::new(),
            members: vec![],
        },
        Some(g) => {
            let protocol = g.protocol.clone().unwrap_or_default();
            // Mid-rebalance, Kafka lists the members without metadata or assignment.
            let stable = g.state == GroupState::Stable;
            let members = g
                .members
                .values()
                .map(|m| {
                    let (meta, assignment) = if stable {
                        (m.metadata_for(&protocol), m.assignment.clone())
                    } else {
                        (Bytes::new(), Bytes::new())
                    };
                    (
                        m.id.clone(),
                        m.instance_id.clone(),
                        m.client_id.clone(),
                        m.client_host.clone(),
                        meta,
                        assignment,
                    )
                })
                .collect();
            GroupView {
                state: g.state.name(),
                protocol_type: g.protocol_type.clone().unwrap_or_default(),
                protocol,
                members,
            }
        }
    }
}
