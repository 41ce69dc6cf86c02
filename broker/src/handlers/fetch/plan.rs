//! What a fetch reads: per topic, its partitions looked up once in one metadata state and one
//! set of hosted partitions, each checked (authorized, led here at the epoch asked, or for a
//! consumer of Fetch v11+ followed here by a replica in the ISR).

use std::sync::Arc;

use kafka_protocol::messages::FetchRequest;
use kafka_protocol::protocol::StrBytes;
use strata_metadata::acl::AclOperation;
use strata_metadata::ClusterState;

use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::fetch_session::{Cached, TopicKey};
use crate::handlers::reply::str_bytes;
use crate::partition::{Hosted, Partition};
use crate::security::Access;

/// The partitions of one topic a fetch reads.
pub(super) struct Wanted {
    pub(super) key: TopicKey,
    pub(super) topic: StrBytes,
    pub(super) topic_id: uuid::Uuid,
    pub(super) partitions: Vec<WantedPartition>,
}

/// One requested partition: what was asked (and, in a session, last answered), and the
/// partition or why there is none.
pub(super) struct WantedPartition {
    pub(super) index: i32,
    pub(super) asked: Cached,
    /// Named by this request (every partition of a full fetch; in an incremental fetch, those
    /// whose position or size changed).
    pub(super) named: bool,
    /// Its place in the fetch's session (incremental fetches).
    pub(super) place: Option<usize>,
    pub(super) partition: Option<Arc<Partition>>,
    pub(super) error: Option<ApiError>,
}

/// The partitions a full fetch reads: those it names.
pub(super) fn full(resolver: &Resolver<'_>, req: &FetchRequest, version: i16) -> Vec<Wanted> {
    req.topics
        .iter()
        .map(|t| {
            let asked = t.partitions.iter().map(|p| {
                let c = Cached::asked(
                    p.fetch_offset,
                    p.partition_max_bytes,
                    p.current_leader_epoch,
                );
                (p.partition, c, true, None)
            });
            resolver.topic(TopicKey::of(version, &t.topic, t.topic_id), asked)
        })
        .collect()
}

/// Looks partitions up in one metadata state and one set of hosted partitions.
pub(super) struct Resolver<'a> {
    pub(super) broker: &'a Arc<Broker>,
    pub(super) state: Arc<ClusterState>,
    pub(super) hosted: Arc<Hosted>,
    pub(super) access: &'a Access,
    /// A follower's fetch: `Some(allowed)`, decided once for the request.
    pub(super) replica_allowed: Option<bool>,
    /// A consumer that may read from followers (KIP-392: Fetch v11+).
    followers_serve: bool,
}

impl<'a> Resolver<'a> {
    pub(super) fn new(
        broker: &'a Arc<Broker>,
        access: &'a Access,
        replica: bool,
        followers_serve: bool,
    ) -> Resolver<'a> {
        Resolver {
            broker,
            state: broker.node.metadata.state(),
            hosted: broker.node.partitions.hosted(),
            access,
            replica_allowed: replica.then(|| access.cluster(AclOperation::ClusterAction)),
            followers_serve,
        }
    }

    /// Whether the fetch may read topic `name` (an unknown topic too: whether it exists is
    /// told only to whoever may read it).
    fn may_read(&self, name: &str) -> bool {
        match self.replica_allowed {
            Some(allowed) => allowed,
            None => self.access.topic(AclOperation::Read, name),
        }
    }

    /// One topic's partitions, each checked: this broker leads it at the epoch asked.
    pub(super) fn topic(
        &self,
        key: TopicKey,
        asked: impl Iterator<Item = (i32, Cached, bool, Option<usize>)>,
    ) -> Wanted {
        let (info, missing) = match &key {
            TopicKey::Id(id) => (self.state.topic_by_id(id), ErrorCode::UnknownTopicId),
            TopicKey::Name(n) => (
                self.state.topic(n.0.as_str()),
                ErrorCode::UnknownTopicOrPartition,
            ),
        };
        let name = match (&key, info) {
            (_, Some(i)) => i.name.as_str(),
            (TopicKey::Name(n), None) => n.0.as_str(),
            (TopicKey::Id(_), None) => "",
        };
        // Looked up once per topic; each partition is then an index.
        let slots = info
            .and_then(|i| self.hosted.topic(&i.name))
            .unwrap_or_default();
        let authorized = matches!((&key, info), (TopicKey::Id(_), None)) || self.may_read(name);
        let partitions = asked
            .map(|(index, asked, named, place)| {
                let result = match info {
                    _ if !authorized => Err(ApiError::new(
                        ErrorCode::TopicAuthorizationFailed,
                        format!("reading {name} is not authorized"),
                    )),
                    None => Err(ApiError::new(missing, format!("unknown {name}-{index}"))),
                    Some(i) => {
                        let at = usize::try_from(index).ok();
                        let info = at.and_then(|x| i.partitions.get(x)).map(|x| &**x);
                        let hosted = at.and_then(|x| slots.get(x)).and_then(Option::as_ref);
                        let epoch = asked.current_leader_epoch;
                        let node = &self.broker.node;
                        match self.followers_serve {
                            true => node.check_replica(name, index, info, hosted, epoch),
                            false => node.check_leader(name, index, info, hosted, epoch),
                        }
                    }
                };
                let (partition, error) = match result {
                    Ok(part) => (Some(part), None),
                    Err(e) => (None, Some(e)),
                };
                WantedPartition {
                    index,
                    asked,
                    named,
                    place,
                    partition,
                    error,
                }
            })
            .collect();
        let topic_id = match (&key, info) {
            (TopicKey::Id(id), _) => *id,
            (_, Some(i)) => i.topic_id,
            _ => uuid::Uuid::nil(),
        };
        let topic = str_bytes(name.to_string());
        Wanted {
            key,
            topic,
            topic_id,
            partitions,
        }
    }
}
