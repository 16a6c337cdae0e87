//! Transaction version 2 (KIP-890 part 2) over the raw protocol, as a Java 4.x client speaks it:
//! the feature is advertised and finalized; Produce v12 adds partitions implicitly; EndTxn v5
//! hands out a new epoch per transaction, so a delayed EndTxn or batch of a finished transaction
//! is fenced instead of landing on the next one (Jepsen's KAFKA-17754).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use sluice_client::Connection;
use sluice_protocol::batch::{BatchBuilder, NewRecord};
use sluice_tests::Broker;
use std::time::{Duration, Instant};

const TXN: &str = "tv2-app";

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

async fn produce(conn: &Connection, pid: i64, epoch: i16, seq: i32, partition: i32, value: &str) -> i16 {
    let batch = BatchBuilder {
        producer_id: pid,
        producer_epoch: epoch,
        base_sequence: seq,
        transactional: true,
        ..Default::default()
    }
    .build(&[NewRecord { timestamp: 1, value: Some(bytes::Bytes::from(value.to_string())), ..Default::default() }])
    .unwrap();
    let mut p = produce_request::PartitionProduceData::default();
    p.index = partition;
    p.records = Some(batch);
    let mut t = produce_request::TopicProduceData::default();
    t.name = TopicName(s("v2"));
    t.partition_data = vec![p];
    let mut r = ProduceRequest::default();
    r.transactional_id = Some(TransactionalId(s(TXN)));
    r.acks = -1;
    r.timeout_ms = 10_000;
    r.topic_data = vec![t];
    match conn.call(ApiKey::Produce, 12, RequestKind::Produce(r)).await.unwrap() {
        ResponseKind::Produce(resp) => resp.responses[0].partition_responses[0].error_code,
        other => panic!("{other:?}"),
    }
}

async fn end_txn(conn: &Connection, pid: i64, epoch: i16, commit: bool) -> (i16, i64, i16) {
    let mut r = EndTxnRequest::default();
    r.transactional_id = TransactionalId(s(TXN));
    r.producer_id = ProducerId(pid);
    r.producer_epoch = epoch;
    r.committed = commit;
    match conn.call(ApiKey::EndTxn, 5, RequestKind::EndTxn(r)).await.unwrap() {
        ResponseKind::EndTxn(resp) => (resp.error_code, resp.producer_id.0, resp.producer_epoch),
        other => panic!("{other:?}"),
    }
}

async fn describe(conn: &Connection) -> (String, usize) {
    let mut r = DescribeTransactionsRequest::default();
    r.transactional_ids = vec![TransactionalId(s(TXN))];
    match conn.call(ApiKey::DescribeTransactions, 0, RequestKind::DescribeTransactions(r)).await.unwrap() {
        ResponseKind::DescribeTransactions(d) => {
            let t = &d.transaction_states[0];
            (t.transaction_state.to_string(), t.topics.iter().map(|x| x.partitions.len()).sum())
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn transaction_version_2_fences_delayed_requests_of_finished_transactions() {
    let b = Broker::start_with(&["--num-partitions", "2"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let conn = Connection::connect(&b.bootstrap(), "tv2", 1).await.unwrap();
        match conn.call(ApiKey::ApiVersions, 3, RequestKind::ApiVersions(ApiVersionsRequest::default())).await.unwrap()
        {
            ResponseKind::ApiVersions(v) => {
                let f = v.finalized_features.iter().find(|f| &*f.name == "transaction.version").expect("feature");
                assert_eq!(f.max_version_level, 2);
            }
            other => panic!("{other:?}"),
        }
        // create the topic (auto-create through Metadata)
        let mut m = MetadataRequest::default();
        let mut mt = metadata_request::MetadataRequestTopic::default();
        mt.name = Some(TopicName(s("v2")));
        m.topics = Some(vec![mt]);
        m.allow_auto_topic_creation = true;
        conn.call(ApiKey::Metadata, 12, RequestKind::Metadata(m)).await.unwrap();
        let mut fc = FindCoordinatorRequest::default();
        fc.key_type = 1;
        fc.coordinator_keys = vec![s(TXN)];
        match conn.call(ApiKey::FindCoordinator, 4, RequestKind::FindCoordinator(fc)).await.unwrap() {
            ResponseKind::FindCoordinator(f) => assert_eq!(f.coordinators[0].error_code, 0),
            other => panic!("{other:?}"),
        }
        let mut init = InitProducerIdRequest::default();
        init.transactional_id = Some(TransactionalId(s(TXN)));
        init.transaction_timeout_ms = 60_000;
        init.producer_id = ProducerId(-1);
        init.producer_epoch = -1;
        let (pid, e0) = match conn.call(ApiKey::InitProducerId, 4, RequestKind::InitProducerId(init)).await.unwrap() {
            ResponseKind::InitProducerId(r) => {
                assert_eq!(r.error_code, 0);
                (r.producer_id.0, r.producer_epoch)
            }
            other => panic!("{other:?}"),
        };

        // transaction 1: no AddPartitionsToTxn, the batches add their partitions
        assert_eq!(produce(&conn, pid, e0, 0, 0, "t1-a").await, 0);
        assert_eq!(produce(&conn, pid, e0, 0, 1, "t1-b").await, 0);
        assert_eq!(describe(&conn).await, ("Ongoing".to_string(), 2));
        let (err, pid1, e1) = end_txn(&conn, pid, e0, true).await;
        assert_eq!((err, pid1, e1), (0, pid, e0 + 1), "EndTxn v5 hands out the next epoch");
        // a retry of that EndTxn gets the same outcome and epoch
        assert_eq!(end_txn(&conn, pid, e0, true).await, (0, pid, e0 + 1));

        // transaction 2 on the new epoch, sequences from 0
        assert_eq!(produce(&conn, pid, e1, 0, 0, "t2-a").await, 0);
        // a delayed EndTxn of transaction 1 cannot commit transaction 2 ...
        let (err, _, _) = end_txn(&conn, pid, e0, true).await;
        assert_ne!(err, 0);
        assert_eq!(describe(&conn).await.0, "Ongoing");
        // ... and a delayed batch of transaction 1 cannot land in it
        assert_eq!(produce(&conn, pid, e0, 1, 1, "t1-late").await, ResponseError::InvalidProducerEpoch.code());
        let (err, _, e2) = end_txn(&conn, pid, e1, false).await;
        assert_eq!((err, e2), (0, e1 + 1));
        assert_eq!(describe(&conn).await, ("CompleteAbort".to_string(), 0));
    });
    // read_committed (librdkafka) sees transaction 1 only
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", b.bootstrap())
        .set("group.id", "tv2-reader")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset("v2", 0, Offset::Beginning).unwrap();
    tpl.add_partition_offset("v2", 1, Offset::Beginning).unwrap();
    consumer.assign(&tpl).unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            got.push(String::from_utf8_lossy(m.payload().unwrap()).into_owned());
        }
    }
    got.sort();
    assert_eq!(got, vec!["t1-a", "t1-b"]);
}
