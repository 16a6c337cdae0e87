//! WriteTxnMarkers against a real broker process: markers are durable control batches that
//! librdkafka's read_committed consumer skips; the producer and coordinator epoch checks fence
//! zombies; bad targets get Kafka's codes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use sluice_client::Connection;
use sluice_tests::Broker;
use std::time::{Duration, Instant};

async fn markers(
    conn: &Connection,
    pid: i64,
    epoch: i16,
    coordinator_epoch: i32,
    commit: bool,
    parts: &[i32],
) -> Vec<i16> {
    let mut t = write_txn_markers_request::WritableTxnMarkerTopic::default();
    t.name = TopicName(StrBytes::from_static_str("m"));
    t.partition_indexes = parts.to_vec();
    let mut m = write_txn_markers_request::WritableTxnMarker::default();
    m.producer_id = ProducerId(pid);
    m.producer_epoch = epoch;
    m.coordinator_epoch = coordinator_epoch;
    m.transaction_result = commit;
    m.topics = vec![t];
    let mut r = WriteTxnMarkersRequest::default();
    r.markers = vec![m];
    match conn.call(ApiKey::WriteTxnMarkers, 1, RequestKind::WriteTxnMarkers(r)).await.unwrap() {
        ResponseKind::WriteTxnMarkers(resp) => {
            resp.markers[0].topics[0].partitions.iter().map(|p| p.error_code).collect()
        }
        other => panic!("{other:?}"),
    }
}

async fn producer_epoch(conn: &Connection) -> (i64, i16) {
    let mut t = describe_producers_request::TopicRequest::default();
    t.name = TopicName(StrBytes::from_static_str("m"));
    t.partition_indexes = vec![0];
    let mut r = DescribeProducersRequest::default();
    r.topics = vec![t];
    match conn.call(ApiKey::DescribeProducers, 0, RequestKind::DescribeProducers(r)).await.unwrap() {
        ResponseKind::DescribeProducers(d) => {
            let p = &d.topics[0].partitions[0].active_producers[0];
            (p.producer_id.0, p.producer_epoch as i16)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn markers_are_written_checked_and_skipped_by_read_committed_consumers() {
    let b = Broker::start_with(&["--num-partitions", "2"]);
    let producer: BaseProducer =
        ClientConfig::new().set("bootstrap.servers", b.bootstrap()).set("enable.idempotence", "true").create().unwrap();
    for i in 0..10 {
        producer.send(BaseRecord::<(), str>::to("m").partition(0).payload(&format!("v{i}"))).unwrap();
    }
    producer.flush(Duration::from_secs(10)).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let conn = Connection::connect(&b.bootstrap(), "markers", 1).await.unwrap();
        let (pid, epoch) = producer_epoch(&conn).await;
        assert_eq!(
            markers(&conn, pid, epoch, 3, false, &[0, 7]).await,
            vec![0, ResponseError::UnknownTopicOrPartition.code()]
        );
        // an older coordinator epoch is fenced
        assert_eq!(
            markers(&conn, pid, epoch, 2, true, &[0]).await,
            vec![ResponseError::TransactionCoordinatorFenced.code()]
        );
        // an operator abort with a bumped epoch fences the producer's old epoch
        assert_eq!(markers(&conn, pid, epoch + 1, 3, false, &[0]).await, vec![0]);
        assert_eq!(markers(&conn, pid, epoch, 3, false, &[0]).await, vec![ResponseError::InvalidProducerEpoch.code()]);
        assert_eq!(producer_epoch(&conn).await, (pid, epoch + 1));
    });
    // two markers took offsets 10 and 11; a read_committed librdkafka consumer skips them
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", b.bootstrap())
        .set("group.id", "markers")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset("m", 0, Offset::Beginning).unwrap();
    consumer.assign(&tpl).unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.len() < 10 && Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            got.push((m.offset(), String::from_utf8_lossy(m.payload().unwrap()).into_owned()));
        }
    }
    assert_eq!(got, (0..10).map(|i| (i, format!("v{i}"))).collect::<Vec<_>>());
    let (_, high) = consumer.fetch_watermarks("m", 0, Duration::from_secs(5)).unwrap();
    assert_eq!(high, 12, "the markers occupy offsets");
    // the fenced producer's next send fails
    producer.send(BaseRecord::<(), str>::to("m").partition(0).payload("zombie")).unwrap();
    let _ = producer.flush(Duration::from_secs(5));
    let (_, high) = consumer.fetch_watermarks("m", 0, Duration::from_secs(5)).unwrap();
    assert_eq!(high, 12, "a producer fenced by an operator abort writes nothing more");
}
