//! The Kafka wire: length-prefixed frames, request headers, and the versions Strata speaks.
//!
//! Decoding is done by the `kafka-protocol` crate; this module decides what is acceptable before
//! decoding (frame size, API key, version) so that bad input becomes an error or a closed
//! connection, never a panic.

pub mod client;
mod encoded;
mod error;
pub mod fetch_response;
pub mod frame;
pub mod versions;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable};

pub use encoded::Encoded;
pub use error::EncodeError;

/// Why a frame could not become a request.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("frame of {0} bytes is too short for a request header")]
    Short(usize),
    #[error("unknown API key {0}")]
    UnknownApi(i16),
    #[error("{api:?} v{version} is not supported")]
    UnsupportedVersion {
        api: ApiKey,
        version: i16,
        correlation_id: i32,
    },
    #[error("malformed {api:?} v{version} request: {reason}")]
    Malformed {
        api: ApiKey,
        version: i16,
        reason: String,
    },
}

/// A decoded request with its header.
pub struct Request {
    pub api_key: ApiKey,
    pub header: RequestHeader,
    pub body: RequestKind,
    /// The frame's size (without its length prefix): what a produce quota charges.
    pub size: usize,
}

/// Decodes one frame (without its length prefix).
pub fn decode_request(mut frame: Bytes) -> Result<Request, DecodeError> {
    if frame.len() < 8 {
        return Err(DecodeError::Short(frame.len()));
    }
    let size = frame.len();
    let key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let api_key = ApiKey::try_from(key).map_err(|_| DecodeError::UnknownApi(key))?;
    if !versions::is_supported(api_key, version) {
        return Err(DecodeError::UnsupportedVersion {
            api: api_key,
            version,
            correlation_id,
        });
    }
    let malformed = |reason: String| DecodeError::Malformed {
        api: api_key,
        version,
        reason,
    };
    let header = RequestHeader::decode(&mut frame, api_key.request_header_version(version))
        .map_err(|e| malformed(format!("header: {e}")))?;
    let body = RequestKind::decode(api_key, &mut frame, version)
        .map_err(|e| malformed(format!("{e:#}")))?;
    if frame.has_remaining() {
        // Kafka ignores bytes after a well-formed body, and librdkafka 2.12 sends some
        // (three after an all-topics Metadata v12), so refusing them would break real clients.
        tracing::debug!(
            ?api_key,
            version,
            trailing = frame.remaining(),
            "ignoring trailing request bytes"
        );
    }
    Ok(Request {
        size,
        api_key,
        header,
        body,
    })
}

/// A response body: Fetch responses are Strata's own (see [`fetch_response`]), the rest the
/// codec's.
// Moved once per request, as `ResponseKind` alone was: boxing the large variant would add an
// allocation to every response for nothing.
#[allow(clippy::large_enum_variant)]
pub enum Response {
    Kafka(ResponseKind),
    Fetch(fetch_response::FetchResponse),
}

impl Response {
    /// Tells the client to back off for `ms` (a quota's throttle), in the responses whose
    /// version has the field; older versions drop it.
    pub fn set_throttle_time_ms(&mut self, ms: i32) {
        macro_rules! throttled {
            ($body:expr, $($kind:ident),*) => {
                match $body {
                    $(ResponseKind::$kind(r) => r.throttle_time_ms = ms,)*
                    _ => {}
                }
            };
        }
        match self {
            Response::Fetch(r) => r.throttle_time_ms = ms,
            Response::Kafka(body) => throttled!(
                body,
                Produce,
                ListOffsets,
                Metadata,
                OffsetCommit,
                OffsetFetch,
                FindCoordinator,
                JoinGroup,
                Heartbeat,
                LeaveGroup,
                SyncGroup,
                DescribeGroups,
                ListGroups,
                ApiVersions,
                CreateTopics,
                DeleteTopics,
                DeleteRecords,
                InitProducerId,
                OffsetForLeaderEpoch,
                AddPartitionsToTxn,
                AddOffsetsToTxn,
                EndTxn,
                TxnOffsetCommit,
                DescribeAcls,
                CreateAcls,
                DeleteAcls,
                DescribeConfigs,
                DescribeLogDirs,
                AlterReplicaLogDirs,
                CreatePartitions,
                DeleteGroups,
                ElectLeaders,
                AlterConfigs,
                IncrementalAlterConfigs,
                AlterPartitionReassignments,
                ListPartitionReassignments,
                OffsetDelete,
                DescribeClientQuotas,
                AlterClientQuotas,
                DescribeUserScramCredentials,
                AlterUserScramCredentials,
                DescribeCluster,
                DescribeProducers,
                UnregisterBroker,
                DescribeTransactions,
                ListTransactions,
                DescribeTopicPartitions
            ),
        }
    }
}

impl From<ResponseKind> for Response {
    fn from(r: ResponseKind) -> Response {
        Response::Kafka(r)
    }
}

/// Encodes a response frame as chunks for vectored writes: record batches in Fetch
/// responses are referenced, not copied.
pub fn encode_response(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &Response,
) -> Result<Encoded, EncodeError> {
    let body = match body {
        Response::Fetch(r) => return r.encode(version, correlation_id),
        Response::Kafka(body) => body,
    };
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let header_version = api_key.response_header_version(version);
    // Produce and Metadata responses can be large (many partitions): sized first, so the
    // buffer is allocated once. The rest are small and encoded into a guess.
    let size = match body {
        ResponseKind::Produce(r) => Some(r.compute_size(version)?),
        ResponseKind::Metadata(r) => Some(r.compute_size(version)?),
        _ => None,
    };
    let capacity = size.map_or(256, |s| {
        4 + header.compute_size(header_version).unwrap_or(0) + s
    });
    let mut buf = BytesMut::with_capacity(capacity);
    buf.put_i32(0);
    header.encode(&mut buf, header_version)?;
    body.encode(&mut buf, version)?;
    let size = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&size.to_be_bytes());
    Ok(Encoded {
        chunks: vec![buf.freeze()],
        files: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::ApiVersionsRequest;

    fn frame(key: i16, version: i16, body: &[u8]) -> Bytes {
        let mut b = BytesMut::new();
        b.extend_from_slice(&key.to_be_bytes());
        b.extend_from_slice(&version.to_be_bytes());
        b.extend_from_slice(&7i32.to_be_bytes());
        b.extend_from_slice(body);
        b.freeze()
    }

    #[test]
    fn garbage_and_unknown_apis_are_errors_not_panics() {
        assert!(matches!(
            decode_request(Bytes::from_static(b"abc")),
            Err(DecodeError::Short(3))
        ));
        assert!(matches!(
            decode_request(frame(999, 0, b"")),
            Err(DecodeError::UnknownApi(999))
        ));
        assert!(matches!(
            decode_request(frame(18, 99, b"")),
            Err(DecodeError::UnsupportedVersion {
                correlation_id: 7,
                ..
            })
        ));
        // A Metadata v1 header followed by a truncated body.
        assert!(matches!(
            decode_request(frame(3, 1, &[0, 0, 0, 0, 0, 5])),
            Err(DecodeError::Malformed { .. })
        ));
    }

    #[test]
    fn a_well_formed_request_round_trips() {
        let mut b = BytesMut::new();
        let header = RequestHeader::default()
            .with_request_api_key(18)
            .with_request_api_version(3)
            .with_correlation_id(11);
        header.encode(&mut b, 2).unwrap();
        ApiVersionsRequest::default().encode(&mut b, 3).unwrap();
        let req = decode_request(b.freeze()).unwrap();
        assert_eq!(req.api_key, ApiKey::ApiVersions);
        assert_eq!(req.header.correlation_id, 11);
    }

    fn default_request(api: ApiKey) -> RequestKind {
        match api {
            ApiKey::Produce => RequestKind::Produce(Default::default()),
            ApiKey::Fetch => RequestKind::Fetch(Default::default()),
            ApiKey::ListOffsets => RequestKind::ListOffsets(Default::default()),
            ApiKey::Metadata => RequestKind::Metadata(Default::default()),
            ApiKey::ApiVersions => RequestKind::ApiVersions(Default::default()),
            ApiKey::CreateTopics => RequestKind::CreateTopics(Default::default()),
            ApiKey::DeleteTopics => RequestKind::DeleteTopics(Default::default()),
            ApiKey::DeleteRecords => RequestKind::DeleteRecords(Default::default()),
            ApiKey::InitProducerId => RequestKind::InitProducerId(Default::default()),
            ApiKey::DescribeConfigs => RequestKind::DescribeConfigs(Default::default()),
            ApiKey::CreatePartitions => RequestKind::CreatePartitions(Default::default()),
            ApiKey::AlterConfigs => RequestKind::AlterConfigs(Default::default()),
            ApiKey::DescribeQuorum => RequestKind::DescribeQuorum(Default::default()),
            ApiKey::DescribeTopicPartitions => {
                RequestKind::DescribeTopicPartitions(Default::default())
            }
            ApiKey::IncrementalAlterConfigs => {
                RequestKind::IncrementalAlterConfigs(Default::default())
            }
            ApiKey::DescribeCluster => RequestKind::DescribeCluster(Default::default()),
            ApiKey::FindCoordinator => RequestKind::FindCoordinator(Default::default()),
            ApiKey::JoinGroup => RequestKind::JoinGroup(Default::default()),
            ApiKey::SyncGroup => RequestKind::SyncGroup(Default::default()),
            ApiKey::Heartbeat => RequestKind::Heartbeat(Default::default()),
            ApiKey::LeaveGroup => RequestKind::LeaveGroup(Default::default()),
            ApiKey::OffsetCommit => RequestKind::OffsetCommit(Default::default()),
            ApiKey::OffsetFetch => RequestKind::OffsetFetch(Default::default()),
            ApiKey::ListGroups => RequestKind::ListGroups(Default::default()),
            ApiKey::DescribeGroups => RequestKind::DescribeGroups(Default::default()),
            ApiKey::DeleteGroups => RequestKind::DeleteGroups(Default::default()),
            ApiKey::OffsetDelete => RequestKind::OffsetDelete(Default::default()),
            ApiKey::OffsetForLeaderEpoch => RequestKind::OffsetForLeaderEpoch(Default::default()),
            ApiKey::ElectLeaders => RequestKind::ElectLeaders(Default::default()),
            ApiKey::DescribeLogDirs => RequestKind::DescribeLogDirs(Default::default()),
            ApiKey::AlterReplicaLogDirs => RequestKind::AlterReplicaLogDirs(Default::default()),
            ApiKey::AlterPartitionReassignments => {
                RequestKind::AlterPartitionReassignments(Default::default())
            }
            ApiKey::ListPartitionReassignments => {
                RequestKind::ListPartitionReassignments(Default::default())
            }
            ApiKey::UnregisterBroker => RequestKind::UnregisterBroker(Default::default()),
            ApiKey::AddPartitionsToTxn => RequestKind::AddPartitionsToTxn(Default::default()),
            ApiKey::AddOffsetsToTxn => RequestKind::AddOffsetsToTxn(Default::default()),
            ApiKey::EndTxn => RequestKind::EndTxn(Default::default()),
            ApiKey::TxnOffsetCommit => RequestKind::TxnOffsetCommit(Default::default()),
            ApiKey::WriteTxnMarkers => RequestKind::WriteTxnMarkers(Default::default()),
            ApiKey::DescribeTransactions => RequestKind::DescribeTransactions(Default::default()),
            ApiKey::ListTransactions => RequestKind::ListTransactions(Default::default()),
            ApiKey::DescribeProducers => RequestKind::DescribeProducers(Default::default()),
            ApiKey::SaslHandshake => RequestKind::SaslHandshake(Default::default()),
            ApiKey::SaslAuthenticate => RequestKind::SaslAuthenticate(Default::default()),
            ApiKey::DescribeUserScramCredentials => {
                RequestKind::DescribeUserScramCredentials(Default::default())
            }
            ApiKey::AlterUserScramCredentials => {
                RequestKind::AlterUserScramCredentials(Default::default())
            }
            ApiKey::CreateAcls => RequestKind::CreateAcls(Default::default()),
            ApiKey::DescribeAcls => RequestKind::DescribeAcls(Default::default()),
            ApiKey::DeleteAcls => RequestKind::DeleteAcls(Default::default()),
            ApiKey::DescribeClientQuotas => RequestKind::DescribeClientQuotas(Default::default()),
            ApiKey::AlterClientQuotas => RequestKind::AlterClientQuotas(Default::default()),
            ApiKey::UpdateFeatures => RequestKind::UpdateFeatures(Default::default()),
            ApiKey::ConsumerGroupHeartbeat => {
                RequestKind::ConsumerGroupHeartbeat(Default::default())
            }
            ApiKey::ConsumerGroupDescribe => RequestKind::ConsumerGroupDescribe(Default::default()),
            ApiKey::ShareGroupHeartbeat => RequestKind::ShareGroupHeartbeat(Default::default()),
            ApiKey::ShareGroupDescribe => RequestKind::ShareGroupDescribe(Default::default()),
            ApiKey::ShareFetch => RequestKind::ShareFetch(Default::default()),
            ApiKey::ShareAcknowledge => RequestKind::ShareAcknowledge(Default::default()),
            ApiKey::DescribeShareGroupOffsets => {
                RequestKind::DescribeShareGroupOffsets(Default::default())
            }
            ApiKey::AlterShareGroupOffsets => {
                RequestKind::AlterShareGroupOffsets(Default::default())
            }
            ApiKey::DeleteShareGroupOffsets => {
                RequestKind::DeleteShareGroupOffsets(Default::default())
            }
            ApiKey::ReadShareGroupState => RequestKind::ReadShareGroupState(Default::default()),
            ApiKey::WriteShareGroupState => RequestKind::WriteShareGroupState(Default::default()),
            ApiKey::AddRaftVoter => RequestKind::AddRaftVoter(Default::default()),
            ApiKey::RemoveRaftVoter => RequestKind::RemoveRaftVoter(Default::default()),
            ApiKey::CreateDelegationToken => RequestKind::CreateDelegationToken(Default::default()),
            ApiKey::RenewDelegationToken => RequestKind::RenewDelegationToken(Default::default()),
            ApiKey::ExpireDelegationToken => RequestKind::ExpireDelegationToken(Default::default()),
            ApiKey::DescribeDelegationToken => {
                RequestKind::DescribeDelegationToken(Default::default())
            }
            ApiKey::ListConfigResources => RequestKind::ListConfigResources(Default::default()),
            ApiKey::GetTelemetrySubscriptions => {
                RequestKind::GetTelemetrySubscriptions(Default::default())
            }
            ApiKey::PushTelemetry => RequestKind::PushTelemetry(Default::default()),
            other => panic!("{other:?} is not supported"),
        }
    }

    /// A default request of every supported API and version, encoded with its header.
    fn canonical_requests() -> Vec<Bytes> {
        let mut out = vec![];
        for a in versions::SUPPORTED {
            let api = &a.key;
            for version in a.min..=a.max {
                let mut body = BytesMut::new();
                default_request(*api)
                    .encode(&mut body, version)
                    .unwrap_or_else(|e| panic!("{api:?} v{version}: {e}"));
                let mut b = BytesMut::new();
                let header = RequestHeader::default()
                    .with_request_api_key(*api as i16)
                    .with_request_api_version(version)
                    .with_correlation_id(1);
                header
                    .encode(&mut b, api.request_header_version(version))
                    .unwrap();
                b.extend_from_slice(&body);
                out.push(b.freeze());
            }
        }
        out
    }

    #[test]
    fn huge_declared_counts_and_lengths_are_errors_not_allocations() {
        // Every position of every supported request, overwritten with the largest i32 (an
        // array count or bytes length of 2^31-1) or the largest unsigned varint (a compact
        // one): each is an error or a request, never an abort. Before the codec was patched
        // (vendor/kafka-protocol), CreateTopics with 2^31-1 topics aborted the process.
        let mut tried = 0;
        for frame in canonical_requests() {
            for at in 8..frame.len() {
                for patch in [
                    &[0x7f, 0xff, 0xff, 0xff][..],
                    &[0xff, 0xff, 0xff, 0xff, 0x0f][..],
                ] {
                    let mut f = frame.to_vec();
                    f.truncate(at);
                    f.extend_from_slice(patch);
                    f.extend_from_slice(&frame[(at + patch.len()).min(frame.len())..]);
                    let _ = decode_request(Bytes::from(f));
                    tried += 1;
                }
            }
        }
        assert!(tried > 1000, "{tried} frames");
        // The frame of the report: CreateTopics v4 whose topic array declares 2^31-1 entries,
        // then a few bytes (it asked for a 189 GB allocation).
        let mut f = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(ApiKey::CreateTopics as i16)
            .with_request_api_version(4)
            .with_correlation_id(1)
            .encode(&mut f, 1)
            .unwrap();
        f.extend_from_slice(&[0x7f, 0xff, 0xff, 0xff, 0, 1, b'x', 0, 0, 0, 1]);
        let e = decode_request(f.freeze()).err().expect("an error");
        assert!(e.to_string().contains("exceeds"), "{e}");
    }

    #[test]
    fn fuzz_regressions_are_errors() {
        for (name, input) in crate::fuzz_regressions("request") {
            assert!(decode_request(Bytes::from(input)).is_err(), "{name}");
        }
    }

    #[test]
    fn random_bytes_never_panic_the_decoder() {
        let mut seed = 0x2545F4914F6CDD1Du64;
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = (seed % 64) as usize;
            let mut v = Vec::with_capacity(len);
            let mut s = seed;
            for _ in 0..len {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
                v.push((s >> 33) as u8);
            }
            // Bias towards real API keys and versions so the body decoders are exercised.
            if v.len() >= 4 {
                v[0] = 0;
                v[1] %= 70;
                v[2] = 0;
                v[3] %= 14;
            }
            let _ = decode_request(Bytes::from(v));
        }
    }
}
