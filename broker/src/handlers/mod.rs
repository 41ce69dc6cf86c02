//! One module per Kafka API. Each takes the decoded request and returns the response body;
//! errors are per topic/partition wherever the protocol allows, so one bad partition never
//! fails the others.

mod add_offsets_to_txn;
mod add_partitions_to_txn;
mod alter_client_quotas;
mod alter_configs;
mod alter_partition_reassignments;
mod alter_replica_log_dirs;
mod alter_share_group_offsets;
mod alter_user_scram_credentials;
mod api_versions;
mod consumer_group_describe;
mod consumer_group_heartbeat;
mod create_acls;
mod create_partitions;
mod create_topics;
mod delegation_tokens;
mod delete_acls;
mod delete_groups;
mod delete_records;
mod delete_share_group_offsets;
mod delete_topics;
mod describe_acls;
mod describe_client_quotas;
mod describe_cluster;
mod describe_configs;
mod describe_groups;
mod describe_log_dirs;
mod describe_producers;
mod describe_quorum;
mod describe_share_group_offsets;
mod describe_topic_partitions;
mod describe_transactions;
mod describe_user_scram_credentials;
mod elect_leaders;
mod end_txn;
mod fetch;
mod find_coordinator;
mod get_telemetry_subscriptions;
mod heartbeat;
mod incremental_alter_configs;
mod init_producer_id;
mod join_group;
mod leave_group;
mod list_config_resources;
mod list_groups;
mod list_offsets;
mod list_partition_reassignments;
mod list_transactions;
mod metadata;
mod offset_commit;
mod offset_delete;
mod offset_fetch;
mod offset_for_leader_epoch;
mod produce;
mod push_telemetry;
mod raft_voters;
mod reply;
mod sasl_authenticate;
mod sasl_handshake;
mod share_acknowledge;
mod share_fetch;
mod share_group_describe;
mod share_group_heartbeat;
mod share_group_state;
mod sync_group;
mod txn_offset_commit;
mod unregister_broker;
mod update_features;
mod write_txn_markers;

use std::sync::Arc;

use kafka_protocol::messages::{RequestKind, ResponseKind};

use crate::broker::Broker;
use crate::protocol::{Request, Response};
use crate::security::Connection;

pub use api_versions::unsupported_version_response;
pub use produce::Appended;

/// What handling a request gave.
pub enum Handled {
    /// The response; `None` when none is sent (Produce with acks=0).
    Now(Option<Response>),
    /// A produce appended with acks=all: its response once the ISR holds the records
    /// ([`Appended::respond`]). The connection may handle its next produce meanwhile (see
    /// `server.rs`).
    Replicating(Appended),
    /// The response, after which the connection closes (a failed authentication).
    ThenClose(Response),
}

/// The administrative requests the admin port submits for a caller of its own — its actions'
/// (`admin/actions.rs`) and the group descriptions its group view shows (`admin/views.rs`):
/// handled by the same code as on the Kafka port, so validated, authorized and audited alike.
/// `None` for any other request.
pub async fn administer(
    broker: &Arc<Broker>,
    body: RequestKind,
    version: i16,
    access: &crate::security::Access,
) -> Option<ResponseKind> {
    Some(match body {
        RequestKind::CreateTopics(r) => {
            ResponseKind::CreateTopics(create_topics::handle(broker, r, version, access).await)
        }
        RequestKind::DeleteTopics(r) => {
            ResponseKind::DeleteTopics(delete_topics::handle(broker, r, version, access).await)
        }
        RequestKind::IncrementalAlterConfigs(r) => ResponseKind::IncrementalAlterConfigs(
            incremental_alter_configs::handle(broker, r, access).await,
        ),
        RequestKind::AlterPartitionReassignments(r) => ResponseKind::AlterPartitionReassignments(
            alter_partition_reassignments::handle(broker, r, version, access).await,
        ),
        RequestKind::DescribeGroups(r) => {
            ResponseKind::DescribeGroups(describe_groups::handle(broker, r, version, access).await)
        }
        RequestKind::ConsumerGroupDescribe(r) => ResponseKind::ConsumerGroupDescribe(
            consumer_group_describe::handle(broker, r, access).await,
        ),
        RequestKind::ShareGroupDescribe(r) => {
            ResponseKind::ShareGroupDescribe(share_group_describe::handle(broker, r, access).await)
        }
        _ => return None,
    })
}

/// Handles one request of connection `conn`.
pub async fn handle(broker: &Arc<Broker>, req: Request, conn: &mut Connection) -> Handled {
    let v = req.header.request_api_version;
    let listener = conn.listener.clone();
    let access = conn.access(&broker.security);
    let client_id = (req.header.client_id.as_ref()).map_or("", |c| c.as_str());
    let body = match req.body {
        RequestKind::ApiVersions(r) => ResponseKind::ApiVersions(api_versions::handle(r, v)),
        RequestKind::SaslHandshake(r) => {
            ResponseKind::SaslHandshake(sasl_handshake::handle(broker, r, conn))
        }
        RequestKind::SaslAuthenticate(r) => {
            let (body, close) = sasl_authenticate::handle(broker, r, conn);
            let body: Response = ResponseKind::SaslAuthenticate(body).into();
            return if close {
                Handled::ThenClose(body)
            } else {
                Handled::Now(Some(body))
            };
        }
        RequestKind::DescribeUserScramCredentials(r) => ResponseKind::DescribeUserScramCredentials(
            describe_user_scram_credentials::handle(broker, r, &access),
        ),
        RequestKind::AlterUserScramCredentials(r) => ResponseKind::AlterUserScramCredentials(
            alter_user_scram_credentials::handle(broker, r, &access).await,
        ),
        RequestKind::CreateAcls(r) => {
            ResponseKind::CreateAcls(create_acls::handle(broker, r, &access).await)
        }
        RequestKind::DescribeAcls(r) => {
            ResponseKind::DescribeAcls(describe_acls::handle(broker, r, &access))
        }
        RequestKind::DeleteAcls(r) => {
            ResponseKind::DeleteAcls(delete_acls::handle(broker, r, &access).await)
        }
        RequestKind::DescribeClientQuotas(r) => {
            ResponseKind::DescribeClientQuotas(describe_client_quotas::handle(broker, r, &access))
        }
        RequestKind::AlterClientQuotas(r) => {
            ResponseKind::AlterClientQuotas(alter_client_quotas::handle(broker, r, &access).await)
        }
        RequestKind::Metadata(r) => {
            ResponseKind::Metadata(metadata::handle(broker, r, v, &listener, &access).await)
        }
        RequestKind::CreateDelegationToken(r) => {
            ResponseKind::CreateDelegationToken(delegation_tokens::create(r, conn))
        }
        RequestKind::RenewDelegationToken(r) => {
            ResponseKind::RenewDelegationToken(delegation_tokens::renew(r, conn))
        }
        RequestKind::ExpireDelegationToken(r) => {
            ResponseKind::ExpireDelegationToken(delegation_tokens::expire(r, conn))
        }
        RequestKind::DescribeDelegationToken(r) => {
            ResponseKind::DescribeDelegationToken(delegation_tokens::describe(r, conn))
        }
        RequestKind::UpdateFeatures(r) => {
            ResponseKind::UpdateFeatures(update_features::handle(r, v, &access))
        }
        RequestKind::AddRaftVoter(r) => {
            ResponseKind::AddRaftVoter(raft_voters::add(broker, r, &access).await)
        }
        RequestKind::RemoveRaftVoter(r) => {
            ResponseKind::RemoveRaftVoter(raft_voters::remove(broker, r, &access).await)
        }
        RequestKind::DescribeQuorum(r) => {
            ResponseKind::DescribeQuorum(describe_quorum::handle(broker, r, v, &access).await)
        }
        RequestKind::DescribeTopicPartitions(r) => ResponseKind::DescribeTopicPartitions(
            describe_topic_partitions::handle(broker, r, &listener, &access),
        ),
        RequestKind::Produce(r) => {
            return match produce::append(broker, r, v, listener, &access, client_id).await {
                None => Handled::Now(None),
                Some(appended) if appended.waits() => Handled::Replicating(appended),
                Some(appended) => {
                    let body = ResponseKind::Produce(appended.respond().await);
                    Handled::Now(Some(body.into()))
                }
            };
        }
        RequestKind::Fetch(r) => {
            let body = Response::Fetch(fetch::handle(broker, r, v, &access, client_id).await);
            return Handled::Now(Some(body));
        }
        RequestKind::ListOffsets(r) => {
            ResponseKind::ListOffsets(list_offsets::handle(broker, r, v, &access).await)
        }
        RequestKind::OffsetForLeaderEpoch(r) => {
            ResponseKind::OffsetForLeaderEpoch(offset_for_leader_epoch::handle(broker, r, &access))
        }
        RequestKind::CreateTopics(r) => {
            ResponseKind::CreateTopics(create_topics::handle(broker, r, v, &access).await)
        }
        RequestKind::DeleteTopics(r) => {
            ResponseKind::DeleteTopics(delete_topics::handle(broker, r, v, &access).await)
        }
        RequestKind::CreatePartitions(r) => {
            ResponseKind::CreatePartitions(create_partitions::handle(broker, r, &access).await)
        }
        RequestKind::DescribeConfigs(r) => {
            ResponseKind::DescribeConfigs(describe_configs::handle(broker, r, v, &access))
        }
        RequestKind::AlterConfigs(r) => {
            ResponseKind::AlterConfigs(alter_configs::handle(broker, r, &access).await)
        }
        RequestKind::IncrementalAlterConfigs(r) => ResponseKind::IncrementalAlterConfigs(
            incremental_alter_configs::handle(broker, r, &access).await,
        ),
        RequestKind::DeleteRecords(r) => {
            ResponseKind::DeleteRecords(delete_records::handle(broker, r, &access).await)
        }
        RequestKind::ElectLeaders(r) => {
            ResponseKind::ElectLeaders(elect_leaders::handle(broker, r, v, &access).await)
        }
        RequestKind::ListConfigResources(r) => {
            ResponseKind::ListConfigResources(list_config_resources::handle(r, &access))
        }
        RequestKind::GetTelemetrySubscriptions(r) => ResponseKind::GetTelemetrySubscriptions(
            get_telemetry_subscriptions::handle(broker, r, client_id),
        ),
        RequestKind::PushTelemetry(r) => {
            ResponseKind::PushTelemetry(push_telemetry::handle(broker, r))
        }
        RequestKind::DescribeCluster(r) => ResponseKind::DescribeCluster(describe_cluster::handle(
            broker, r, v, &listener, &access,
        )),
        RequestKind::InitProducerId(r) => {
            ResponseKind::InitProducerId(init_producer_id::handle(broker, r, &access).await)
        }
        RequestKind::FindCoordinator(r) => ResponseKind::FindCoordinator(
            find_coordinator::handle(broker, r, v, &listener, &access).await,
        ),
        RequestKind::JoinGroup(r) => ResponseKind::JoinGroup(
            join_group::handle(broker, r, v, client_id, &conn.client_host, &access).await,
        ),
        RequestKind::ConsumerGroupHeartbeat(r) => ResponseKind::ConsumerGroupHeartbeat(
            consumer_group_heartbeat::handle(broker, r, client_id, &conn.client_host, &access)
                .await,
        ),
        RequestKind::ShareGroupHeartbeat(r) => ResponseKind::ShareGroupHeartbeat(
            share_group_heartbeat::handle(broker, r, client_id, &conn.client_host, &access).await,
        ),
        RequestKind::ShareGroupDescribe(r) => {
            ResponseKind::ShareGroupDescribe(share_group_describe::handle(broker, r, &access).await)
        }
        RequestKind::ShareFetch(r) => {
            ResponseKind::ShareFetch(share_fetch::handle(broker, r, &access, client_id).await)
        }
        RequestKind::DescribeShareGroupOffsets(r) => ResponseKind::DescribeShareGroupOffsets(
            describe_share_group_offsets::handle(broker, r, &access).await,
        ),
        RequestKind::AlterShareGroupOffsets(r) => ResponseKind::AlterShareGroupOffsets(
            alter_share_group_offsets::handle(broker, r, &access).await,
        ),
        RequestKind::DeleteShareGroupOffsets(r) => ResponseKind::DeleteShareGroupOffsets(
            delete_share_group_offsets::handle(broker, r, &access).await,
        ),
        RequestKind::ShareAcknowledge(r) => {
            ResponseKind::ShareAcknowledge(share_acknowledge::handle(broker, r, &access).await)
        }
        RequestKind::ReadShareGroupState(r) => {
            ResponseKind::ReadShareGroupState(share_group_state::read(broker, r, &access).await)
        }
        RequestKind::WriteShareGroupState(r) => {
            ResponseKind::WriteShareGroupState(share_group_state::write(broker, r, &access).await)
        }
        RequestKind::ConsumerGroupDescribe(r) => ResponseKind::ConsumerGroupDescribe(
            consumer_group_describe::handle(broker, r, &access).await,
        ),
        RequestKind::SyncGroup(r) => {
            ResponseKind::SyncGroup(sync_group::handle(broker, r, v, &access).await)
        }
        RequestKind::Heartbeat(r) => {
            ResponseKind::Heartbeat(heartbeat::handle(broker, r, &access).await)
        }
        RequestKind::LeaveGroup(r) => {
            ResponseKind::LeaveGroup(leave_group::handle(broker, r, v, &access).await)
        }
        RequestKind::OffsetCommit(r) => {
            ResponseKind::OffsetCommit(offset_commit::handle(broker, r, v, &access).await)
        }
        RequestKind::OffsetFetch(r) => {
            ResponseKind::OffsetFetch(offset_fetch::handle(broker, r, v, &access).await)
        }
        RequestKind::ListGroups(r) => {
            ResponseKind::ListGroups(list_groups::handle(broker, r, v, &access))
        }
        RequestKind::DescribeGroups(r) => {
            ResponseKind::DescribeGroups(describe_groups::handle(broker, r, v, &access).await)
        }
        RequestKind::DeleteGroups(r) => {
            ResponseKind::DeleteGroups(delete_groups::handle(broker, r, &access).await)
        }
        RequestKind::OffsetDelete(r) => {
            ResponseKind::OffsetDelete(offset_delete::handle(broker, r, &access).await)
        }
        RequestKind::UnregisterBroker(r) => {
            ResponseKind::UnregisterBroker(unregister_broker::handle(broker, r, &access).await)
        }
        RequestKind::DescribeLogDirs(r) => {
            ResponseKind::DescribeLogDirs(describe_log_dirs::handle(broker, r, &access))
        }
        RequestKind::AlterReplicaLogDirs(r) => {
            ResponseKind::AlterReplicaLogDirs(alter_replica_log_dirs::handle(broker, r, &access))
        }
        RequestKind::AlterPartitionReassignments(r) => ResponseKind::AlterPartitionReassignments(
            alter_partition_reassignments::handle(broker, r, v, &access).await,
        ),
        RequestKind::ListPartitionReassignments(r) => ResponseKind::ListPartitionReassignments(
            list_partition_reassignments::handle(broker, r, &access),
        ),
        // The protocol layer only lets through the APIs listed in `protocol::versions`.
        RequestKind::AddPartitionsToTxn(r) => ResponseKind::AddPartitionsToTxn(
            add_partitions_to_txn::handle(broker, r, v, &access).await,
        ),
        RequestKind::AddOffsetsToTxn(r) => {
            ResponseKind::AddOffsetsToTxn(add_offsets_to_txn::handle(broker, r, &access).await)
        }
        RequestKind::EndTxn(r) => {
            ResponseKind::EndTxn(end_txn::handle(broker, r, v, &access).await)
        }
        RequestKind::TxnOffsetCommit(r) => {
            ResponseKind::TxnOffsetCommit(txn_offset_commit::handle(broker, r, v, &access).await)
        }
        RequestKind::WriteTxnMarkers(r) => {
            ResponseKind::WriteTxnMarkers(write_txn_markers::handle(broker, r, &access).await)
        }
        RequestKind::DescribeTransactions(r) => ResponseKind::DescribeTransactions(
            describe_transactions::handle(broker, r, &access).await,
        ),
        RequestKind::ListTransactions(r) => {
            ResponseKind::ListTransactions(list_transactions::handle(broker, r, v, &access))
        }
        RequestKind::DescribeProducers(r) => {
            ResponseKind::DescribeProducers(describe_producers::handle(broker, r, &access))
        }
        _ => return Handled::Now(None),
    };
    Handled::Now(Some(body.into()))
}
