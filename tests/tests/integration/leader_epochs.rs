//! Leader epochs: every leader change bumps the partition's epoch, appends carry it, and
//! OffsetForLeaderEpoch answers where each epoch ends (KIP-320), across restarts and a lost
//! checkpoint file. ListOffsets reports the epoch of the offset it returns.

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::{
    BrokerId, ListOffsetsRequest, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
};
use kafka_protocol::records::Compression;
use strata_tests::raw::topic_name;
use strata_tests::{encode_batch, now_ms, unique_topic, Broker, KafkaConn, RawRecord};

const NOT_LEADER_OR_FOLLOWER: i16 = 6;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const FENCED_LEADER_EPOCH: i16 = 74;
const UNKNOWN_LEADER_EPOCH: i16 = 75;

fn produce(broker: &Broker, topic: &str, n: i64) -> i64 {
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let recs: Vec<RawRecord> = (0..n)
        .map(|i| RawRecord::new(format!("k{i}"), format!("v{i}"), now_ms()))
        .collect();
    conn.produce_ok(topic, 0, encode_batch(&recs, Compression::None, None))
        .unwrap()
}

/// (error, epoch, end offset) for `epoch`, asking with `current` as the client's epoch.
fn end_of(broker: &Broker, topic: &str, current: i32, epoch: i32) -> (i16, i32, i64) {
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let req = OffsetForLeaderEpochRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![OffsetForLeaderTopic::default()
            .with_topic(topic_name(topic))
            .with_partitions(vec![OffsetForLeaderPartition::default()
                .with_partition(0)
                .with_current_leader_epoch(current)
                .with_leader_epoch(epoch)])]);
    let resp: OffsetForLeaderEpochResponse = conn.request(4, &req).unwrap();
    let p = &resp.topics[0].partitions[0];
    (p.error_code, p.leader_epoch, p.end_offset)
}

/// (offset, leader epoch) ListOffsets v8 answers for `timestamp`.
fn list_offset(broker: &Broker, topic: &str, timestamp: i64) -> (i64, i32) {
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_current_leader_epoch(-1)
                .with_timestamp(timestamp)])]);
    let resp = conn.request(8, &req).unwrap();
    let p = &resp.topics[0].partitions[0];
    assert_eq!(p.error_code, 0);
    (p.offset, p.leader_epoch)
}

fn current_epoch(broker: &Broker, topic: &str) -> i32 {
    // LATEST reports the newest epoch in the log; the partition's current epoch is one it
    // wrote in right after a produce.
    list_offset(broker, topic, -1).1
}

#[test]
fn epochs_end_where_the_next_leader_began_and_survive_restarts() {
    let mut broker = Broker::start_default();
    let topic = unique_topic("epochs");
    broker.create_topic(&topic, 1, &[]).unwrap();
    assert_eq!(produce(&broker, &topic, 10), 0);
    let first = current_epoch(&broker, &topic);
    assert!(first >= 0);

    // A restart is a leader change: the broker is fenced, then leads again in a newer epoch.
    broker.restart();
    assert_eq!(produce(&broker, &topic, 5), 10);
    let second = current_epoch(&broker, &topic);
    assert!(
        second > first,
        "epoch {second} after a restart, was {first}"
    );

    assert_eq!(end_of(&broker, &topic, -1, first), (0, first, 10));
    assert_eq!(end_of(&broker, &topic, -1, second), (0, second, 15));
    // An epoch between the two wrote nothing: it ends where the next one began.
    if second > first + 1 {
        assert_eq!(end_of(&broker, &topic, -1, first + 1), (0, first, 10));
    }
    assert_eq!(
        end_of(&broker, &topic, -1, second + 5),
        (0, -1, -1),
        "newer than any"
    );
    assert_eq!(
        list_offset(&broker, &topic, -2),
        (0, first),
        "EARLIEST's epoch"
    );
    assert_eq!(
        list_offset(&broker, &topic, -1),
        (15, second),
        "LATEST's epoch"
    );

    // The client's view of the epoch is checked first.
    assert_eq!(
        end_of(&broker, &topic, second - 1, first).0,
        FENCED_LEADER_EPOCH
    );
    assert_eq!(
        end_of(&broker, &topic, second + 1, first).0,
        UNKNOWN_LEADER_EPOCH
    );
    assert_eq!(
        end_of(&broker, "no-such-topic", -1, 0).0,
        UNKNOWN_TOPIC_OR_PARTITION
    );

    // A lost checkpoint is rebuilt from the batches themselves (killed, so no clean close
    // rewrites it).
    broker.kill9();
    let dir = broker.data_dir().join(format!("{topic}-0"));
    std::fs::remove_file(dir.join("leader-epoch-checkpoint")).unwrap();
    broker.restart();
    let third = current_epoch(&broker, &topic);
    assert_eq!(end_of(&broker, &topic, -1, first), (0, first, 10));
    assert_eq!(end_of(&broker, &topic, -1, second), (0, second, 15));
    assert_eq!(produce(&broker, &topic, 1), 15);
    let newest = current_epoch(&broker, &topic);
    assert!(newest > second && newest >= third);
    assert_eq!(end_of(&broker, &topic, -1, second), (0, second, 15));
    assert_eq!(end_of(&broker, &topic, -1, newest), (0, newest, 16));
}

#[test]
fn a_broker_that_does_not_lead_the_partition_says_so() {
    let mut cluster = strata_tests::Cluster::start(2, 1, &[]);
    cluster.wait_controller();
    let topic = unique_topic("elsewhere");
    cluster.node(1).create_topic(&topic, 2, &[]).unwrap();
    let leaders = cluster.leaders(&topic);
    let p0 = leaders[0].expect("partition 0 has a leader");
    let other = if p0 == 1 { 2 } else { 1 };
    let broker = cluster.node(other);
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let req = OffsetForLeaderEpochRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![OffsetForLeaderTopic::default()
            .with_topic(topic_name(&topic))
            .with_partitions(vec![OffsetForLeaderPartition::default()
                .with_partition(0)
                .with_current_leader_epoch(-1)
                .with_leader_epoch(0)])]);
    let resp: OffsetForLeaderEpochResponse = conn.request(4, &req).unwrap();
    assert_eq!(
        resp.topics[0].partitions[0].error_code,
        NOT_LEADER_OR_FOLLOWER
    );
}
