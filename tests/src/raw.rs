//! Hand-made Kafka frames with `kafka-protocol`, for bad-input and exact-protocol tests.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    fetch_request::{FetchPartition, FetchTopic},
    init_producer_id_request::InitProducerIdRequest,
    list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic},
    produce_request::{PartitionProduceData, TopicProduceData},
    produce_response::PartitionProduceResponse,
    ApiKey, BrokerId, FetchRequest, FetchResponse, ListOffsetsRequest, ProduceRequest,
    ProduceResponse, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
    TimestampType, NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE,
};

/// Produce version used by raw tests (non-flexible, topic names).
pub const PRODUCE_VERSION: i16 = 8;
/// Fetch version used by raw tests (non-flexible, topic names).
pub const FETCH_VERSION: i16 = 11;
/// ListOffsets version used by raw tests.
pub const LIST_OFFSETS_VERSION: i16 = 10;

/// Kafka error codes the tests check.
pub mod error {
    pub const NONE: i16 = 0;
    pub const CORRUPT_MESSAGE: i16 = 2;
    pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    pub const MESSAGE_TOO_LARGE: i16 = 10;
    pub const UNSUPPORTED_VERSION: i16 = 35;
    pub const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
    pub const INVALID_RECORD: i16 = 87;
}

/// One TCP connection speaking raw Kafka frames.
pub struct KafkaConn {
    stream: TcpStream,
    next_correlation_id: i32,
    client_id: &'static str,
}

impl KafkaConn {
    pub fn connect(addr: &str) -> Result<KafkaConn> {
        let stream = TcpStream::connect(addr).with_context(|| format!("connect {addr}"))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        stream.set_write_timeout(Some(Duration::from_secs(30)))?;
        Ok(KafkaConn {
            stream,
            next_correlation_id: 1,
            client_id: "strata-tests-raw",
        })
    }

    /// The client id its requests carry (what client quotas are set on).
    pub fn with_client_id(mut self, client_id: &'static str) -> KafkaConn {
        self.client_id = client_id;
        self
    }

    pub fn set_read_timeout(&self, timeout: Duration) -> Result<()> {
        self.stream.set_read_timeout(Some(timeout))?;
        Ok(())
    }

    /// Writes raw bytes (no length prefix added).
    pub fn send_bytes(&mut self, bytes: &[u8]) -> Result<()> {
        self.stream.write_all(bytes)?;
        self.stream.flush()?;
        Ok(())
    }

    /// Writes a frame: 4-byte big-endian length, then `payload`.
    pub fn send_frame(&mut self, payload: &[u8]) -> Result<()> {
        let mut buf = Vec::with_capacity(payload.len() + 4);
        buf.extend_from_slice(&(payload.len() as i32).to_be_bytes());
        buf.extend_from_slice(payload);
        self.send_bytes(&buf)
    }

    /// Reads one frame's payload; `Ok(None)` if the peer closed the connection.
    pub fn read_frame(&mut self) -> Result<Option<Bytes>> {
        let mut len = [0u8; 4];
        match self.stream.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if is_closed(&e) => return Ok(None),
            Err(e) => return Err(e).context("read frame length"),
        }
        let len = i32::from_be_bytes(len);
        ensure!(len >= 0, "negative response frame length {len}");
        let mut buf = vec![0u8; len as usize];
        self.stream
            .read_exact(&mut buf)
            .context("read frame body")?;
        Ok(Some(Bytes::from(buf)))
    }

    /// Waits up to `timeout` for the broker to close the connection, discarding anything it
    /// sends; true if it closed (EOF or reset), false if still open at the deadline.
    pub fn closed_within(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut buf = [0u8; 4096];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let _ = self
                .stream
                .set_read_timeout(Some(left.max(Duration::from_millis(1))));
            match self.stream.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) if is_closed(&e) => return true,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return false
                }
                Err(_) => return true,
            }
        }
    }

    pub fn shutdown(&self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }

    /// Half-closes: no more bytes from this side, the peer's still readable.
    pub fn shutdown_write(&self) {
        let _ = self.stream.shutdown(Shutdown::Write);
    }

    /// Encodes a request frame for API `R` at `version`; returns (correlation id, frame payload).
    pub fn encode_request<R: Request>(&mut self, version: i16, req: &R) -> Result<(i32, BytesMut)> {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id += 1;
        let mut buf = request_header(R::KEY, version, correlation_id, self.client_id);
        req.encode(&mut buf, version)?;
        Ok((correlation_id, buf))
    }

    /// Sends a request without waiting for its response; returns the correlation id.
    pub fn send_request<R: Request>(&mut self, version: i16, req: &R) -> Result<i32> {
        let (id, buf) = self.encode_request(version, req)?;
        self.send_frame(&buf)?;
        Ok(id)
    }

    /// Reads the response to a request sent with [`send_request`].
    pub fn recv_response<R: Request>(
        &mut self,
        version: i16,
        correlation_id: i32,
    ) -> Result<R::Response> {
        let api = ApiKey::try_from(R::KEY).map_err(|_| anyhow::anyhow!("api key {}", R::KEY))?;
        let Some(mut frame) = self.read_frame()? else {
            bail!("connection closed by the broker before the {api:?} v{version} response");
        };
        let header = ResponseHeader::decode(&mut frame, api.response_header_version(version))?;
        ensure!(
            header.correlation_id == correlation_id,
            "correlation id {} in response, expected {correlation_id}",
            header.correlation_id
        );
        let resp = <R::Response as Decodable>::decode(&mut frame, version)
            .with_context(|| format!("decode {api:?} v{version} response"))?;
        Ok(resp)
    }

    /// Sends a request and reads its response.
    pub fn request<R: Request>(&mut self, version: i16, req: &R) -> Result<R::Response> {
        let id = self.send_request(version, req)?;
        self.recv_response::<R>(version, id)
    }

    /// Produces `records` (one or more encoded batches) to one partition with acks=all.
    pub fn produce(
        &mut self,
        topic: &str,
        partition: i32,
        records: Bytes,
    ) -> Result<PartitionProduceResponse> {
        let req = Self::produce_request(topic, partition, records, 10_000);
        let resp = self.request(PRODUCE_VERSION, &req)?;
        Self::partition_response(resp, topic, partition)
    }

    /// An acks=all Produce request of `records` to one partition.
    pub fn produce_request(
        topic: &str,
        partition: i32,
        records: Bytes,
        timeout_ms: i32,
    ) -> ProduceRequest {
        ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(timeout_ms)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(topic_name(topic))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(records))])])
    }

    /// Sends Produce requests without waiting: several in flight on one connection. Answers
    /// come with [`KafkaConn::produce_answer`], in order.
    pub fn send_produce(&mut self, req: &ProduceRequest) -> Result<i32> {
        self.send_request(PRODUCE_VERSION, req)
    }

    /// The answer for one partition to a Produce request sent with [`KafkaConn::send_produce`].
    pub fn produce_answer(
        &mut self,
        correlation_id: i32,
        topic: &str,
        partition: i32,
    ) -> Result<PartitionProduceResponse> {
        let resp = self.recv_response::<ProduceRequest>(PRODUCE_VERSION, correlation_id)?;
        Self::partition_response(resp, topic, partition)
    }

    fn partition_response(
        resp: ProduceResponse,
        topic: &str,
        partition: i32,
    ) -> Result<PartitionProduceResponse> {
        let part = resp
            .responses
            .into_iter()
            .find(|t| t.name.0.as_str() == topic)
            .context("no response for the topic")?
            .partition_responses
            .into_iter()
            .find(|p| p.index == partition)
            .context("no response for the partition")?;
        Ok(part)
    }

    /// Like [`produce`] but fails unless the broker accepted the batch; returns its base offset.
    pub fn produce_ok(&mut self, topic: &str, partition: i32, records: Bytes) -> Result<i64> {
        let p = self.produce(topic, partition, records)?;
        ensure!(
            p.error_code == error::NONE,
            "produce to {topic}-{partition} failed with error {} ({:?})",
            p.error_code,
            p.error_message
        );
        Ok(p.base_offset)
    }

    /// ListOffsets for one partition at `timestamp` (-1 latest, -2 earliest); returns
    /// (error code, offset, timestamp).
    pub fn list_offset(
        &mut self,
        topic: &str,
        partition: i32,
        timestamp: i64,
    ) -> Result<(i16, i64, i64)> {
        let id = self.send_list_offset(topic, partition, timestamp)?;
        self.list_offset_answer(id)
    }

    /// Sends a ListOffsets request for one partition without waiting; its answer comes with
    /// [`KafkaConn::list_offset_answer`], after those of the requests sent before it.
    pub fn send_list_offset(&mut self, topic: &str, partition: i32, timestamp: i64) -> Result<i32> {
        let req = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_timeout_ms(30_000)
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(partition)
                    .with_timestamp(timestamp)])]);
        self.send_request(LIST_OFFSETS_VERSION, &req)
    }

    /// The (error code, offset, timestamp) answer to [`KafkaConn::send_list_offset`].
    pub fn list_offset_answer(&mut self, correlation_id: i32) -> Result<(i16, i64, i64)> {
        let resp =
            self.recv_response::<ListOffsetsRequest>(LIST_OFFSETS_VERSION, correlation_id)?;
        let p = resp
            .topics
            .into_iter()
            .next()
            .context("no topic in ListOffsets response")?
            .partitions
            .into_iter()
            .next()
            .context("no partition in ListOffsets response")?;
        Ok((p.error_code, p.offset, p.timestamp))
    }

    /// A Fetch request for one partition.
    pub fn fetch_request(
        topic: &str,
        partition: i32,
        offset: i64,
        max_wait_ms: i32,
        min_bytes: i32,
    ) -> FetchRequest {
        FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(max_wait_ms)
            .with_min_bytes(min_bytes)
            .with_max_bytes(16 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic(topic_name(topic))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(partition)
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(8 << 20)])])
    }

    /// Fetches one partition; returns the response.
    pub fn fetch(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_wait_ms: i32,
    ) -> Result<FetchResponse> {
        let req = Self::fetch_request(topic, partition, offset, max_wait_ms, 1);
        self.request(FETCH_VERSION, &req)
    }

    /// InitProducerId for an idempotent (non-transactional) producer: (producer id, epoch).
    /// The id of `topic`, from Metadata v12.
    pub fn topic_id(&mut self, topic: &str) -> Result<uuid::Uuid> {
        let req = kafka_protocol::messages::MetadataRequest::default().with_topics(Some(vec![
            kafka_protocol::messages::metadata_request::MetadataRequestTopic::default()
                .with_name(Some(topic_name(topic))),
        ]));
        let resp = self.request(12, &req)?;
        ensure!(
            resp.topics.first().is_some_and(|t| t.error_code == 0),
            "no topic {topic}"
        );
        Ok(resp.topics[0].topic_id)
    }

    pub fn init_producer_id(&mut self) -> Result<(i64, i16)> {
        let req = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000);
        let resp = self.request(1, &req)?;
        ensure!(
            resp.error_code == 0,
            "InitProducerId failed with error {}",
            resp.error_code
        );
        Ok((resp.producer_id.0, resp.producer_epoch))
    }
}

fn is_closed(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::UnexpectedEof
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::BrokenPipe
    )
}

/// A request header as clients encode it, for any API key and version (including ones the
/// broker does not know: header v1, the non-flexible layout).
pub fn request_header(
    api: i16,
    version: i16,
    correlation_id: i32,
    client_id: &'static str,
) -> BytesMut {
    let header_version = ApiKey::try_from(api)
        .map(|k| k.request_header_version(version))
        .unwrap_or(1);
    let mut buf = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(api)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str(client_id)))
        .encode(&mut buf, header_version)
        .expect("a request header encodes");
    buf
}

pub fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

/// A Fetch of partition 0 of `topic` from offset 0, up to 1 MiB, answered at once; a
/// follower's when `replica_id` is a broker id, a consumer's when it is -1.
pub fn fetch_from_start(topic: &str, replica_id: i32) -> kafka_protocol::messages::FetchRequest {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{BrokerId, FetchRequest};
    FetchRequest::default()
        .with_replica_id(BrokerId(replica_id))
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(topic_name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20)])])
}

/// A record for [`encode_batch`]: key, value, headers, timestamp.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawRecord {
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Vec<u8>)>,
    pub timestamp: i64,
}

impl RawRecord {
    pub fn new(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>, timestamp: i64) -> Self {
        RawRecord {
            key: Some(key.into()),
            value: Some(value.into()),
            headers: Vec::new(),
            timestamp,
        }
    }
}

/// Producer identity for idempotent batches.
#[derive(Clone, Copy, Debug)]
pub struct Idempotence {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
}

/// Encodes `records` as ONE v2 record batch (relative offsets 0..n).
pub fn encode_batch(
    records: &[RawRecord],
    compression: Compression,
    idem: Option<Idempotence>,
) -> Bytes {
    assert!(!records.is_empty());
    let recs: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut headers = kafka_protocol::indexmap::IndexMap::new();
            for (k, v) in &r.headers {
                headers.insert(
                    StrBytes::from_string(k.clone()),
                    Some(Bytes::from(v.clone())),
                );
            }
            Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
                producer_id: idem.map_or(NO_PRODUCER_ID, |p| p.producer_id),
                producer_epoch: idem.map_or(NO_PRODUCER_EPOCH, |p| p.producer_epoch),
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                // The encoder batches records whose offset - sequence is constant and derives
                // the base sequence from the first; -1 (no sequence) + i keeps it at -1.
                sequence: idem
                    .map_or(NO_SEQUENCE, |p| p.base_sequence)
                    .wrapping_add(i as i32),
                timestamp: r.timestamp,
                key: r.key.clone().map(Bytes::from),
                value: r.value.clone().map(Bytes::from),
                headers,
            }
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        recs.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .expect("encode record batch");
    let bytes = buf.freeze();
    let infos =
        RecordBatchDecoder::decode_batch_info(&mut bytes.clone()).expect("decode own batch");
    assert_eq!(infos.len(), 1, "records must encode as one batch");
    bytes
}

/// A record read back from a raw fetch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchedRecord {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
}

/// Decodes the record batches of a fetch response partition (uncompressed only).
pub fn decode_records(mut records: Bytes) -> Result<Vec<FetchedRecord>> {
    let mut out = Vec::new();
    let sets = RecordBatchDecoder::decode_all(&mut records)?;
    for set in sets {
        for r in set.records {
            out.push(FetchedRecord {
                offset: r.offset,
                timestamp: r.timestamp,
                key: r.key.map(|b| b.to_vec()),
                value: r.value.map(|b| b.to_vec()),
            });
        }
    }
    Ok(out)
}

/// One node of a DescribeQuorum answer: (id, log end offset, last fetch, last caught up).
pub type QuorumReplica = (i32, i64, i64, i64);

/// A DescribeQuorum (v2) answer for `__cluster_metadata`-0, in a form tests compare.
#[derive(Debug)]
pub struct QuorumAnswer {
    pub error_code: i16,
    pub leader: i32,
    pub epoch: i32,
    pub high_watermark: i64,
    pub voters: Vec<QuorumReplica>,
    pub observers: Vec<QuorumReplica>,
    /// (node id, host, port) of each voter's controller listener.
    pub nodes: Vec<(i32, String, u16)>,
}

impl KafkaConn {
    /// DescribeQuorum v2 for `topic`-`partition` (Kafka's quorum is `__cluster_metadata`-0).
    pub fn describe_quorum(&mut self, topic: &str, partition: i32) -> Result<QuorumAnswer> {
        use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
        use kafka_protocol::messages::DescribeQuorumRequest;
        let req = DescribeQuorumRequest::default().with_topics(vec![TopicData::default()
            .with_topic_name(topic_name(topic))
            .with_partitions(vec![
                PartitionData::default().with_partition_index(partition)
            ])]);
        let resp = self.request(2, &req)?;
        ensure!(
            resp.error_code == 0,
            "DescribeQuorum error {}",
            resp.error_code
        );
        let p = resp
            .topics
            .into_iter()
            .next()
            .and_then(|t| t.partitions.into_iter().next())
            .context("no partition in DescribeQuorum response")?;
        let replicas =
            |v: Vec<kafka_protocol::messages::describe_quorum_response::ReplicaState>| {
                v.into_iter()
                    .map(|r| {
                        (
                            r.replica_id.0,
                            r.log_end_offset,
                            r.last_fetch_timestamp,
                            r.last_caught_up_timestamp,
                        )
                    })
                    .collect()
            };
        Ok(QuorumAnswer {
            error_code: p.error_code,
            leader: p.leader_id.0,
            epoch: p.leader_epoch,
            high_watermark: p.high_watermark,
            voters: replicas(p.current_voters),
            observers: replicas(p.observers),
            nodes: (resp.nodes.into_iter())
                .flat_map(|n| {
                    (n.listeners.into_iter())
                        .map(move |l| (n.node_id.0, l.host.to_string(), l.port))
                })
                .collect(),
        })
    }
}
