//! ElectLeaders (`kafka-leader-election.sh`, `Admin.electLeaders`). A preferred election
//! (type 0) hands each partition back to its first replica where that replica is live and in
//! the ISR; an unclean election (type 1) makes a live replica lead an offline partition
//! whatever the topic's `unclean.leader.election.enable`, as Kafka's does, and is counted in
//! `strata_unclean_leader_elections`. Any broker takes the request: the command goes through
//! the metadata quorum.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse, TopicName};
use strata_metadata::{ClusterState, Command, CommandResult};

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::ErrorCode;
use crate::security::Access;
use strata_metadata::acl::AclOperation;

const PREFERRED: i8 = 0;
const UNCLEAN: i8 = 1;

/// One partition's outcome so far: `None` while an election is to be made.
type Outcome = Option<(ErrorCode, String)>;

pub async fn handle(
    broker: &Arc<Broker>,
    req: ElectLeadersRequest,
    version: i16,
    access: &Access,
) -> ElectLeadersResponse {
    if !access.cluster(AclOperation::Alter) {
        return ElectLeadersResponse::default()
            .with_error_code(ErrorCode::ClusterAuthorizationFailed.code());
    }
    // v0 has no type: preferred.
    let kind = if version == 0 {
        PREFERRED
    } else {
        req.election_type
    };
    if kind != PREFERRED && kind != UNCLEAN {
        return ElectLeadersResponse::default().with_error_code(ErrorCode::InvalidRequest.code());
    }
    access.audit(
        "leaders_elected",
        serde_json::json!({
            "election": if kind == PREFERRED { "preferred" } else { "unclean" },
            "all": req.topic_partitions.is_none(),
        }),
    );
    let state = broker.node.metadata.state();
    let all = req.topic_partitions.is_none();
    let wanted: Vec<(String, i32)> = match req.topic_partitions {
        Some(tps) => tps
            .into_iter()
            .flat_map(|t| {
                let name = t.topic.0.as_str().to_string();
                t.partitions.into_iter().map(move |p| (name.clone(), p))
            })
            .collect(),
        None => state
            .topics
            .values()
            .flat_map(|t| (0..t.partitions.len() as i32).map(|p| (t.name.clone(), p)))
            .collect(),
    };
    let mut outcomes: Vec<(String, i32, Outcome)> = wanted
        .into_iter()
        .map(|(t, p)| {
            let outcome = eligibility(&state, &t, p, kind);
            (t, p, outcome)
        })
        .collect();

    let candidates: Vec<(uuid::Uuid, i32)> = outcomes
        .iter()
        .filter(|(_, _, o)| o.is_none())
        .filter_map(|(t, p, _)| state.topic(t).map(|info| (info.topic_id, *p)))
        .collect();
    let mut refused: Option<(ErrorCode, String)> = None;
    if kind == PREFERRED && !candidates.is_empty() {
        if let Err(e) = broker
            .node
            .apply(Command::ElectPreferredLeaders {
                partitions: candidates,
            })
            .await
        {
            refused = Some((e.code, e.message));
        }
    } else {
        for (topic_id, partition) in candidates {
            match broker
                .node
                .apply(Command::ElectUncleanLeader {
                    topic_id,
                    partition,
                })
                .await
            {
                Ok(CommandResult::Ok) => {
                    tracing::warn!(%topic_id, partition, "UNCLEAN leader election requested through ElectLeaders: records only the old ISR held are lost")
                }
                Ok(_) => {}
                Err(e) => refused = Some((e.code, e.message)),
            }
        }
    }

    // What the elections did, as the state now says.
    let after = broker.node.metadata.state();
    for (t, p, outcome) in &mut outcomes {
        if outcome.is_some() {
            continue;
        }
        let done = after.partition(t, *p).is_some_and(|info| match kind {
            PREFERRED => info.leader.is_some() && info.leader == info.replicas.first().copied(),
            _ => info.leader.is_some(),
        });
        *outcome = if done {
            Some((ErrorCode::None, String::new()))
        } else {
            Some(refused.clone().unwrap_or_else(|| not_available(kind)))
        };
    }

    let mut by_topic: BTreeMap<String, Vec<PartitionResult>> = BTreeMap::new();
    for (t, p, outcome) in outcomes {
        let (code, message) = outcome.unwrap_or_else(|| not_available(kind));
        // Asked for every partition: only those an election was tried for are reported.
        if all && code == ErrorCode::ElectionNotNeeded {
            continue;
        }
        by_topic.entry(t).or_default().push(
            PartitionResult::default()
                .with_partition_id(p)
                .with_error_code(code.code())
                .with_error_message((code != ErrorCode::None).then(|| str_bytes(message))),
        );
    }
    ElectLeadersResponse::default().with_replica_election_results(
        by_topic
            .into_iter()
            .map(|(t, partition_result)| {
                ReplicaElectionResult::default()
                    .with_topic(TopicName(str_bytes(t)))
                    .with_partition_result(partition_result)
            })
            .collect(),
    )
}

fn not_available(kind: i8) -> (ErrorCode, String) {
    if kind == PREFERRED {
        (
            ErrorCode::PreferredLeaderNotAvailable,
            "the preferred replica is not live and in the ISR".to_string(),
        )
    } else {
        (
            ErrorCode::EligibleLeadersNotAvailable,
            "no live replica".to_string(),
        )
    }
}

/// Why no election is made for the partition, or `None` when one is to be made.
fn eligibility(state: &ClusterState, topic: &str, p: i32, kind: i8) -> Outcome {
    let Some(info) = state.partition(topic, p) else {
        return Some((
            ErrorCode::UnknownTopicOrPartition,
            format!("{topic}-{p} does not exist"),
        ));
    };
    match kind {
        PREFERRED if info.leader.is_some() && info.leader == info.replicas.first().copied() => {
            Some((
                ErrorCode::ElectionNotNeeded,
                "the preferred replica leads".to_string(),
            ))
        }
        PREFERRED if !info.preferred_leader_electable(&state.brokers) => Some(not_available(kind)),
        UNCLEAN if info.leader.is_some() => Some((
            ErrorCode::ElectionNotNeeded,
            "the partition has a leader".to_string(),
        )),
        UNCLEAN
            if !info
                .replicas
                .iter()
                .any(|r| state.brokers.get(r).is_some_and(|b| !b.fenced)) =>
        {
            Some(not_available(kind))
        }
        _ => None,
    }
}
