//! A group's members and what each is assigned, for the console's group page: the description
//! a Kafka admin client gets from the group's coordinator — DescribeGroups for a classic group
//! (its consumer-protocol assignment decoded), ConsumerGroupDescribe for a KIP-848 consumer
//! group, ShareGroupDescribe for a share group — submitted through the same handlers
//! (`handlers::administer`), so authorized as on the Kafka port.

use std::sync::Arc;

use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerProtocolAssignment, DescribeGroupsRequest, GroupId,
    RequestKind, ResponseKind, ShareGroupDescribeRequest,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use serde_json::{json, Value};

use crate::broker::Broker;
use crate::security::Access;

/// The DescribeGroups version submitted (with instance ids).
const DESCRIBE_GROUPS_VERSION: i16 = 5;
/// The newest ConsumerProtocolAssignment version decoded; a newer one is read as this.
const ASSIGNMENT_VERSION: i16 = 3;

/// `group`'s kind, state and members when this broker coordinates it, as `access` may see
/// them; `None` when it does not coordinate it.
pub async fn local(broker: &Arc<Broker>, group: &str, access: &Access) -> Option<Value> {
    let listed = (broker.groups.list().into_iter()).find(|g| g.id == group)?;
    let id = || GroupId(StrBytes::from_string(group.to_string()));
    let (request, version) = match listed.kind {
        "share" => (
            RequestKind::ShareGroupDescribe(
                ShareGroupDescribeRequest::default().with_group_ids(vec![id()]),
            ),
            1,
        ),
        "consumer" => (
            RequestKind::ConsumerGroupDescribe(
                ConsumerGroupDescribeRequest::default().with_group_ids(vec![id()]),
            ),
            0,
        ),
        _ => (
            RequestKind::DescribeGroups(DescribeGroupsRequest::default().with_groups(vec![id()])),
            DESCRIBE_GROUPS_VERSION,
        ),
    };
    let response = crate::handlers::administer(broker, request, version, access).await?;
    let refused = |code: i16, message: &Option<StrBytes>| {
        json!({
            "kind": listed.kind,
            "refused": message.as_ref().map_or_else(
                || format!("{:?}", crate::error::ErrorCode::from_code(code)),
                |m| m.to_string(),
            ),
        })
    };
    // One member as shown, whichever API described it.
    let member = |id: &str, instance: Option<&str>, client: &str, host: &str, assigned| {
        let assignment: Vec<Value> = (Vec::into_iter(assigned))
            .map(|(topic, partitions): (String, Vec<i32>)| {
                json!({ "topic": topic, "partitions": partitions })
            })
            .collect();
        json!({
            "member_id": id,
            "instance_id": instance,
            "client_id": client,
            "host": host,
            "assignment": assignment,
        })
    };
    let (state, extra, members) = match response {
        ResponseKind::DescribeGroups(r) => {
            let g = r.groups.into_iter().next()?;
            if g.error_code != 0 {
                return Some(refused(g.error_code, &g.error_message));
            }
            let consumer = g.protocol_type.as_str() == "consumer";
            let members: Vec<Value> = (g.members.iter())
                .map(|m| {
                    let assigned = match consumer {
                        true => assignment(&m.member_assignment),
                        false => Vec::new(),
                    };
                    let instance = m.group_instance_id.as_ref().map(|i| i.as_str());
                    member(
                        &m.member_id,
                        instance,
                        &m.client_id,
                        &m.client_host,
                        assigned,
                    )
                })
                .collect();
            let protocol = ("protocol", json!(g.protocol_data.as_str()));
            (g.group_state.to_string(), protocol, members)
        }
        ResponseKind::ConsumerGroupDescribe(r) => {
            let g = r.groups.into_iter().next()?;
            if g.error_code != 0 {
                return Some(refused(g.error_code, &g.error_message));
            }
            let members: Vec<Value> = (g.members.iter())
                .map(|m| {
                    let instance = m.instance_id.as_ref().map(|i| i.as_str());
                    let assigned = topics_of(&m.assignment.topic_partitions, |t| {
                        (&t.topic_name.0, &t.partitions)
                    });
                    member(
                        &m.member_id,
                        instance,
                        &m.client_id,
                        &m.client_host,
                        assigned,
                    )
                })
                .collect();
            (
                g.group_state.to_string(),
                ("epoch", json!(g.group_epoch)),
                members,
            )
        }
        ResponseKind::ShareGroupDescribe(r) => {
            let g = r.groups.into_iter().next()?;
            if g.error_code != 0 {
                return Some(refused(g.error_code, &g.error_message));
            }
            let members: Vec<Value> = (g.members.iter())
                .map(|m| {
                    let assigned = topics_of(&m.assignment.topic_partitions, |t| {
                        (&t.topic_name.0, &t.partitions)
                    });
                    member(&m.member_id, None, &m.client_id, &m.client_host, assigned)
                })
                .collect();
            (
                g.group_state.to_string(),
                ("epoch", json!(g.group_epoch)),
                members,
            )
        }
        _ => return None,
    };
    let mut out = json!({ "kind": listed.kind, "state": state, "members": members });
    out[extra.0] = extra.1;
    Some(out)
}

/// A KIP-848 or KIP-932 assignment's topics and partitions.
fn topics_of<T>(
    tps: &[T],
    parts: impl Fn(&T) -> (&StrBytes, &Vec<i32>),
) -> Vec<(String, Vec<i32>)> {
    (tps.iter())
        .map(|t| {
            let (topic, partitions) = parts(t);
            (topic.to_string(), partitions.clone())
        })
        .collect()
}

/// A classic consumer's assignment (ConsumerProtocolAssignment) as topics and partitions;
/// nothing for bytes that are not one (a client's own protocol).
fn assignment(bytes: &[u8]) -> Vec<(String, Vec<i32>)> {
    let mut buf = bytes;
    let Some(version) = (buf.len() >= 2).then(|| i16::from_be_bytes([buf[0], buf[1]])) else {
        return Vec::new();
    };
    buf = &buf[2..];
    let mut b = bytes::Bytes::copy_from_slice(buf);
    match ConsumerProtocolAssignment::decode(&mut b, version.clamp(0, ASSIGNMENT_VERSION)) {
        Ok(a) => (a.assigned_partitions.into_iter())
            .map(|t| (t.topic.0.to_string(), t.partitions))
            .collect(),
        Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_classic_assignment_is_decoded_and_garbage_is_nothing() {
        // ConsumerProtocolAssignment v0: t01 → [0, 1, 2], empty user data (as Kafka writes it).
        let bytes = hex("00000000000100037430310000000300000000000000010000000200000000");
        assert_eq!(assignment(&bytes), vec![("t01".to_string(), vec![0, 1, 2])]);
        for bad in [
            &b""[..],
            &b"\x00"[..],
            &b"\x00\x00\x7f\xff\xff\xff"[..],
            &b"\xff\xff\x00"[..],
        ] {
            assert!(assignment(bad).is_empty());
        }
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }
}
