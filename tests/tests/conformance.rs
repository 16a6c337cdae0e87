//! Exactly-once conformance at the edges (issue 17): what a malformed or out-of-spec producer
//! sends, over raw frames against a real broker process, must be answered as Kafka answers it
//! and must never break other clients' guarantees. Each test names the Kafka behaviour it holds
//! Sluice to (`LogValidator`, `TransactionCoordinator`, `UnifiedLog`, `AddPartitionsToTxnManager`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use sluice_client::Connection;
use sluice_protocol::batch::Compression;
use sluice_tests::raw::{self, s};
use sluice_tests::Broker;
use std::time::{Duration, Instant};

const INVALID_RECORD: i16 = 87;

fn values(tag: &str, n: usize) -> Vec<(i64, String)> {
    (0..n).map(|i| (1_000 + i as i64, format!("{tag}-{i}"))).collect()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Runtime::new().unwrap()
}

async fn connect(b: &Broker) -> Connection {
    Connection::connect(&b.bootstrap(), "conformance", 1).await.unwrap()
}

/// Every (offset, value) librdkafka reads from `topic`/`partition`, read_committed.
fn read_all(b: &Broker, topic: &str, partition: i32, want: usize) -> Vec<(i64, String)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", b.bootstrap())
        .set("group.id", "conformance-reader")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Beginning).unwrap();
    consumer.assign(&tpl).unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline && got.len() < want {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            got.push((m.offset(), String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned()));
        }
    }
    // anything beyond what was expected shows up too
    let until = Instant::now() + Duration::from_millis(500);
    while Instant::now() < until {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            got.push((m.offset(), String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned()));
        }
    }
    got
}

/// LogValidator: a batch whose `lastOffsetDelta + 1`, header count and encoded records do not
/// agree is INVALID_RECORD and nothing is written — plain, idempotent and compressed alike; the
/// producer's next real batch is in sequence, and every stored offset has one value.
#[test]
fn batches_whose_header_disagrees_with_their_records_are_refused_and_write_nothing() {
    let b = Broker::start();
    let rt = rt();
    rt.block_on(async {
        let conn = connect(&b).await;
        raw::create_topic(&conn, "bad").await.unwrap();
        let (err, pid, epoch) = raw::init_producer_id(&conn, 4, None, None).await.unwrap();
        assert_eq!(err, 0);
        for compression in [Compression::None, Compression::Lz4] {
            for m in raw::MALFORMATIONS {
                for p in [-1, pid] {
                    let good = raw::batch(p, epoch, 0, false, &values("bad", 3), compression);
                    let (code, _) = raw::produce(&conn, 9, None, "bad", 0, raw::malformed(&good, m)).await.unwrap();
                    assert_eq!(code, INVALID_RECORD, "{m:?} {compression:?} producer {p}");
                }
            }
        }
        let (_, leo, _) = raw::list_offset(&conn, "bad", 0, -1, false).await.unwrap();
        assert_eq!(leo, 0, "nothing was written");
        // the idempotent producer's sequence was not advanced by what was refused
        let (code, base) = raw::produce(
            &conn,
            9,
            None,
            "bad",
            0,
            raw::batch(pid, epoch, 0, false, &values("ok-a", 3), Compression::None),
        )
        .await
        .unwrap();
        assert_eq!((code, base), (0, 0));
        let (code, base) = raw::produce(
            &conn,
            9,
            None,
            "bad",
            0,
            raw::batch(pid, epoch, 3, false, &values("ok-b", 2), Compression::Lz4),
        )
        .await
        .unwrap();
        assert_eq!((code, base), (0, 3), "the next batch is in sequence");
        let (code, base) = raw::produce(
            &conn,
            9,
            None,
            "bad",
            0,
            raw::batch(-1, -1, -1, false, &values("ok-c", 1), Compression::None),
        )
        .await
        .unwrap();
        assert_eq!((code, base), (0, 5));
    });
    let got = read_all(&b, "bad", 0, 6);
    let offsets: Vec<i64> = got.iter().map(|(o, _)| *o).collect();
    assert_eq!(offsets, vec![0, 1, 2, 3, 4, 5], "one value per offset: {got:?}");
    assert!(got.iter().all(|(_, v)| v.starts_with("ok-")), "{got:?}");
}

/// Transaction verification wants the coordinator's exact epoch (Kafka:
/// `handleVerifyPartitionsInTransaction`, answered INVALID_PRODUCER_EPOCH to the producer). A
/// batch with a higher epoch would make the partition refuse the transaction's marker and hang
/// it for ever.
#[test]
fn a_transactional_batch_with_a_higher_epoch_than_the_coordinators_is_refused() {
    let b = Broker::start();
    rt().block_on(async {
        let conn = connect(&b).await;
        raw::create_topic(&conn, "hi").await.unwrap();
        let txn = "hi-epoch";
        let (err, pid, e0) = raw::init_producer_id(&conn, 3, Some(txn), None).await.unwrap();
        assert_eq!(err, 0);
        assert_eq!(raw::add_partitions(&conn, txn, pid, e0, "hi", &[0]).await.unwrap(), 0);
        let bad = raw::batch(pid, e0 + 5, 0, true, &values("future", 1), Compression::None);
        let (code, _) = raw::produce(&conn, 9, Some(txn), "hi", 0, bad).await.unwrap();
        assert_eq!(code, ResponseError::InvalidProducerEpoch.code());
        let (_, leo, _) = raw::list_offset(&conn, "hi", 0, -1, false).await.unwrap();
        assert_eq!(leo, 0, "nothing written");
        let good = raw::batch(pid, e0, 0, true, &values("now", 1), Compression::None);
        assert_eq!(raw::produce(&conn, 9, Some(txn), "hi", 0, good).await.unwrap(), (0, 0));
        assert_eq!(raw::end_txn(&conn, 3, txn, pid, e0, true).await.unwrap().0, 0);
        assert_eq!(raw::describe_txn(&conn, txn).await.unwrap().0, "CompleteCommit");
        // the commit marker landed: the LSO is the high watermark
        let (_, lso, _) = raw::list_offset(&conn, "hi", 0, -1, true).await.unwrap();
        assert_eq!(lso, 2);
        // and the next instance is not locked out
        let (err, _, e1) = raw::init_producer_id(&conn, 3, Some(txn), None).await.unwrap();
        assert_eq!((err, e1), (0, e0 + 1));
    });
}

/// A partition that refuses a marker because a newer coordinator wrote to it must never let
/// this coordinator call the transaction complete: its data would stay open behind the LSO
/// while the coordinator reported CompleteCommit.
#[test]
fn a_refused_marker_never_completes_the_transaction() {
    let b = Broker::start_with(&["--num-partitions", "2"]);
    rt().block_on(async {
        let conn = connect(&b).await;
        raw::create_topic(&conn, "fence").await.unwrap();
        let txn = "fenced-marker";
        let (_, pid, e0) = raw::init_producer_id(&conn, 3, Some(txn), None).await.unwrap();
        // a stray marker from a "coordinator" with a far newer epoch on partition 1
        let mut t = write_txn_markers_request::WritableTxnMarkerTopic::default();
        t.name = TopicName(s("fence"));
        t.partition_indexes = vec![1];
        let mut m = write_txn_markers_request::WritableTxnMarker::default();
        m.producer_id = ProducerId(pid);
        m.producer_epoch = e0;
        m.transaction_result = false;
        m.coordinator_epoch = 1_000;
        m.topics = vec![t];
        let mut req = WriteTxnMarkersRequest::default();
        req.markers = vec![m];
        conn.call(ApiKey::WriteTxnMarkers, 1, RequestKind::WriteTxnMarkers(req)).await.unwrap();
        assert_eq!(raw::add_partitions(&conn, txn, pid, e0, "fence", &[0, 1]).await.unwrap(), 0);
        for p in [0, 1] {
            let batch = raw::batch(pid, e0, 0, true, &values("txn", 1), Compression::None);
            assert_eq!(raw::produce(&conn, 9, Some(txn), "fence", p, batch).await.unwrap().0, 0);
        }
        let (err, _, _) = raw::end_txn(&conn, 3, txn, pid, e0, true).await.unwrap();
        assert_ne!(err, 0, "the commit cannot be confirmed");
        let (state, _, _) = raw::describe_txn(&conn, txn).await.unwrap();
        assert_eq!(state, "PrepareCommit", "not called complete while partition 1 holds it open");
    });
}

/// Kafka 4.x: EndTxn v5 abort with no partition added (Empty, CompleteCommit, CompleteAbort)
/// goes through PrepareAbort and answers the bumped epoch — the Java 4.x client sends it after
/// `beginTransaction(); send(); abortTransaction()` when the batch has not left yet. And only a
/// rotation consumes a producer id: the next id handed out follows the first one.
#[test]
fn end_txn_v5_aborts_with_nothing_added_and_consumes_no_producer_ids() {
    let b = Broker::start_with(&["--num-partitions", "2"]);
    rt().block_on(async {
        let conn = connect(&b).await;
        raw::create_topic(&conn, "empty").await.unwrap();
        let txn = "empty-abort";
        let (err, pid, e0) = raw::init_producer_id(&conn, 4, Some(txn), None).await.unwrap();
        assert_eq!(err, 0);
        let (err, pid1, e1) = raw::end_txn(&conn, 5, txn, pid, e0, false).await.unwrap();
        assert_eq!((err, pid1, e1), (0, pid, e0 + 1), "Empty: aborted, epoch bumped");
        assert_eq!(raw::end_txn(&conn, 5, txn, pid, e0, false).await.unwrap(), (0, pid, e1), "a retry");
        assert_eq!(raw::end_txn(&conn, 5, txn, pid, e1, true).await.unwrap().0, ResponseError::InvalidTxnState.code());
        // CompleteCommit, then an abort with nothing added
        let batch = raw::batch(pid, e1, 0, true, &values("c", 1), Compression::None);
        assert_eq!(raw::produce(&conn, 12, Some(txn), "empty", 0, batch).await.unwrap().0, 0);
        let (err, _, e2) = raw::end_txn(&conn, 5, txn, pid, e1, true).await.unwrap();
        assert_eq!((err, e2), (0, e1 + 1));
        let (err, _, e3) = raw::end_txn(&conn, 5, txn, pid, e2, false).await.unwrap();
        assert_eq!((err, e3), (0, e2 + 1), "CompleteCommit: aborted, epoch bumped");
        assert_eq!(raw::describe_txn(&conn, txn).await.unwrap(), ("CompleteAbort".into(), pid, e3));
        raw::abort_empty(&conn, txn, pid, e3, 20).await.unwrap();
        let (err, other, _) = raw::init_producer_id(&conn, 4, Some("another-id"), None).await.unwrap();
        assert_eq!((err, other), (0, pid + 1), "no producer id was used by the epoch bumps");
    });
}

/// Kafka keeps `logStart ≤ LSO ≤ HW`: after DeleteRecords removes the first batch of an open
/// transaction, ListOffsets(latest, read_committed) answers an offset Fetch serves.
#[test]
fn the_lso_never_falls_below_the_log_start() {
    let b = Broker::start();
    rt().block_on(async {
        let conn = connect(&b).await;
        raw::create_topic(&conn, "lso").await.unwrap();
        let txn = "open-txn";
        let (_, pid, e0) = raw::init_producer_id(&conn, 3, Some(txn), None).await.unwrap();
        assert_eq!(raw::add_partitions(&conn, txn, pid, e0, "lso", &[0]).await.unwrap(), 0);
        let open = raw::batch(pid, e0, 0, true, &values("open", 1), Compression::None);
        assert_eq!(raw::produce(&conn, 9, Some(txn), "lso", 0, open).await.unwrap(), (0, 0));
        for i in 0..2 {
            let plain = raw::batch(-1, -1, -1, false, &values(&format!("plain{i}"), 1), Compression::None);
            raw::produce(&conn, 9, None, "lso", 0, plain).await.unwrap();
        }
        assert_eq!(raw::list_offset(&conn, "lso", 0, -1, true).await.unwrap().1, 0);
        let mut p = delete_records_request::DeleteRecordsPartition::default();
        p.partition_index = 0;
        p.offset = 2;
        let mut t = delete_records_request::DeleteRecordsTopic::default();
        t.name = TopicName(s("lso"));
        t.partitions = vec![p];
        let mut req = DeleteRecordsRequest::default();
        req.topics = vec![t];
        req.timeout_ms = 5_000;
        match conn.call(ApiKey::DeleteRecords, 2, RequestKind::DeleteRecords(req)).await.unwrap() {
            ResponseKind::DeleteRecords(r) => assert_eq!(r.topics[0].partitions[0].low_watermark, 2),
            other => panic!("{other:?}"),
        }
        let (_, lso, _) = raw::list_offset(&conn, "lso", 0, -1, true).await.unwrap();
        assert_eq!(lso, 2, "clamped to the log start");
        // a read_committed fetch at that offset is served (empty: the transaction is open)
        let mut fp = fetch_request::FetchPartition::default();
        fp.partition = 0;
        fp.fetch_offset = lso;
        fp.partition_max_bytes = 1 << 20;
        let mut ft = fetch_request::FetchTopic::default();
        ft.topic = TopicName(s("lso"));
        ft.partitions = vec![fp];
        let mut f = FetchRequest::default();
        f.replica_id = BrokerId(-1);
        f.max_wait_ms = 10;
        f.max_bytes = 1 << 20;
        f.isolation_level = 1;
        f.topics = vec![ft];
        match conn.call(ApiKey::Fetch, 11, RequestKind::Fetch(f)).await.unwrap() {
            ResponseKind::Fetch(r) => {
                let p = &r.responses[0].partitions[0];
                assert_eq!(p.error_code, 0);
                assert_eq!(p.last_stable_offset, 2);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(raw::end_txn(&conn, 3, txn, pid, e0, true).await.unwrap().0, 0);
        assert_eq!(raw::list_offset(&conn, "lso", 0, -1, true).await.unwrap().1, 4);
    });
}

/// Produce v12's implicit add with an old epoch is INVALID_PRODUCER_EPOCH on every partition
/// (Kafka's `AddPartitionsToTxnManager` turns the coordinator's PRODUCER_FENCED into it),
/// whether or not the partition has seen the producer's newer epoch.
#[test]
fn produce_v12_with_an_old_epoch_is_invalid_producer_epoch_everywhere() {
    let b = Broker::start_with(&["--num-partitions", "2"]);
    rt().block_on(async {
        let conn = connect(&b).await;
        raw::create_topic(&conn, "v12").await.unwrap();
        let txn = "old-epoch";
        let (_, pid, e0) = raw::init_producer_id(&conn, 4, Some(txn), None).await.unwrap();
        let batch = raw::batch(pid, e0, 0, true, &values("t1", 1), Compression::None);
        assert_eq!(raw::produce(&conn, 12, Some(txn), "v12", 0, batch).await.unwrap().0, 0);
        let (_, _, e1) = raw::end_txn(&conn, 5, txn, pid, e0, true).await.unwrap();
        let batch = raw::batch(pid, e1, 0, true, &values("t2", 1), Compression::None);
        assert_eq!(raw::produce(&conn, 12, Some(txn), "v12", 0, batch).await.unwrap().0, 0);
        for p in [0, 1] {
            let late = raw::batch(pid, e0, 1, true, &values("late", 1), Compression::None);
            let (code, _) = raw::produce(&conn, 12, Some(txn), "v12", p, late).await.unwrap();
            assert_eq!(code, ResponseError::InvalidProducerEpoch.code(), "partition {p}");
        }
    });
}

/// ListOffsets MAX_TIMESTAMP answers only an offset the isolation level may read (Kafka's
/// `fetchOffsetForTimestamp` filters by the last fetchable offset): read_committed never learns
/// the offset of an open transaction.
#[test]
fn max_timestamp_does_not_reveal_an_open_transaction() {
    const MAX_TIMESTAMP: i64 = -3;
    let b = Broker::start();
    rt().block_on(async {
        let conn = connect(&b).await;
        raw::create_topic(&conn, "maxts").await.unwrap();
        let plain = raw::batch(-1, -1, -1, false, &[(1_000, "old".into())], Compression::None);
        raw::produce(&conn, 9, None, "maxts", 0, plain).await.unwrap();
        let txn = "max-ts";
        let (_, pid, e0) = raw::init_producer_id(&conn, 3, Some(txn), None).await.unwrap();
        assert_eq!(raw::add_partitions(&conn, txn, pid, e0, "maxts", &[0]).await.unwrap(), 0);
        // the newest timestamp, a minute ahead (within Kafka 4.x's message.timestamp.after.max.ms)
        let newest =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64 + 60_000;
        let open = raw::batch(pid, e0, 0, true, &[(newest, "new".into())], Compression::None);
        assert_eq!(raw::produce(&conn, 9, Some(txn), "maxts", 0, open).await.unwrap(), (0, 1));
        assert_eq!(raw::list_offset(&conn, "maxts", 0, MAX_TIMESTAMP, false).await.unwrap(), (0, 1, newest));
        assert_eq!(raw::list_offset(&conn, "maxts", 0, MAX_TIMESTAMP, true).await.unwrap(), (0, -1, -1));
        assert_eq!(raw::end_txn(&conn, 3, txn, pid, e0, true).await.unwrap().0, 0);
        assert_eq!(raw::list_offset(&conn, "maxts", 0, MAX_TIMESTAMP, true).await.unwrap(), (0, 1, newest));
    });
}

/// The transaction-state log keeps what each id needs (Kafka compacts `__transaction_state`):
/// 2,000 transactions of one id leave a small log, and a restart reloads the id's state.
#[test]
fn the_transaction_log_is_compacted_and_reloads_after_a_restart() {
    let mut b = Broker::start_with(&[
        "--transaction-state-log-num-partitions",
        "1",
        "--transaction-abort-timed-out-transaction-cleanup-interval-ms",
        "200",
    ]);
    let txn = "compact-me";
    let shard = b.data_dir.join("__transaction_state-0");
    let (pid, e) = rt().block_on(async {
        let conn = connect(&b).await;
        let (err, pid, e) = raw::init_producer_id(&conn, 4, Some(txn), None).await.unwrap();
        assert_eq!(err, 0);
        (pid, raw::abort_empty(&conn, txn, pid, e, 2_000).await.unwrap())
    });
    // 4,000 records (PrepareAbort, CompleteAbort, ~330 bytes each with their batch) are ~1.3 MB
    // uncompacted; compaction runs once 1,000 records were appended beyond twice the live ids,
    // so at most ~1,000 records plus the live one remain
    std::thread::sleep(Duration::from_millis(600));
    let bytes = sluice_tests::segment_file_bytes(&shard);
    assert!(bytes <= 400_000, "the transaction log holds {bytes} bytes for one id");
    b.kill9();
    b.spawn();
    rt().block_on(async {
        let conn = connect(&b).await;
        assert_eq!(raw::describe_txn(&conn, txn).await.unwrap(), ("CompleteAbort".into(), pid, e));
        let (err, _, next) = raw::end_txn(&conn, 5, txn, pid, e, false).await.unwrap();
        assert_eq!((err, next), (0, e + 1), "the reloaded state carries on");
    });
}

/// The heartbeat interval a KIP-848 member of `group` is told to keep.
async fn heartbeat_interval(conn: &Connection, group: &str) -> i32 {
    let mut req = ConsumerGroupHeartbeatRequest::default();
    req.group_id = GroupId(s(group));
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    req.member_id = s(&format!("member-{group}-{nanos}"));
    req.member_epoch = 0;
    req.rebalance_timeout_ms = 30_000;
    req.subscribed_topic_names = Some(vec![TopicName(s("hb"))]);
    req.topic_partitions = Some(vec![]);
    match conn.call(ApiKey::ConsumerGroupHeartbeat, 1, RequestKind::ConsumerGroupHeartbeat(req)).await.unwrap() {
        ResponseKind::ConsumerGroupHeartbeat(r) => {
            assert_eq!(r.error_code, 0, "{:?}", r.error_message);
            r.heartbeat_interval_ms
        }
        other => panic!("{other:?}"),
    }
}

/// Dynamic configs (issue 24 item 6), as Kafka keeps them: a log config set at the cluster
/// default ("") is every topic's default at once (DYNAMIC_DEFAULT_BROKER_CONFIG), a broker's own
/// wins over it (DYNAMIC_BROKER_CONFIG), a per-broker-only config is refused at the default
/// level; a group config (KIP-848) sets the heartbeat interval its members are told; all of it
/// survives a kill -9.
#[test]
fn dynamic_broker_and_group_configs_apply_at_once_and_persist() {
    const TOPIC: i8 = 2;
    const BROKER: i8 = 4;
    const GROUP: i8 = 32;
    let mut b = Broker::start();
    rt().block_on(async {
        let conn = connect(&b).await;
        raw::create_topic(&conn, "hb").await.unwrap();
        assert_eq!(raw::config_of(&conn, TOPIC, "hb", "retention.ms").await, ("604800000".into(), 5));
        assert_eq!(raw::set_configs(&conn, BROKER, "", &[("log.retention.ms", "111")]).await, 0);
        assert_eq!(raw::config_of(&conn, TOPIC, "hb", "retention.ms").await, ("111".into(), 3));
        assert_eq!(raw::set_configs(&conn, BROKER, "1", &[("log.retention.ms", "222")]).await, 0);
        assert_eq!(raw::config_of(&conn, TOPIC, "hb", "retention.ms").await, ("222".into(), 2));
        assert_eq!(raw::config_of(&conn, BROKER, "", "log.retention.ms").await, ("111".into(), 3));
        let refused = raw::set_configs(&conn, BROKER, "", &[("sasl.kerberos.min.time.before.relogin", "58000")]).await;
        assert_eq!(refused, ResponseError::InvalidConfig.code(), "per-broker only");
        assert_eq!(
            raw::set_configs(&conn, BROKER, "7", &[("log.retention.ms", "1")]).await,
            ResponseError::InvalidRequest.code()
        );
        assert_eq!(heartbeat_interval(&conn, "plain").await, 5000);
        assert_eq!(raw::set_configs(&conn, GROUP, "tuned", &[("consumer.heartbeat.interval.ms", "7000")]).await, 0);
        assert_eq!(heartbeat_interval(&conn, "tuned").await, 7000);
        assert_eq!(raw::config_of(&conn, GROUP, "tuned", "consumer.heartbeat.interval.ms").await, ("7000".into(), 8));
    });
    b.kill9();
    b.spawn();
    rt().block_on(async {
        let conn = connect(&b).await;
        assert_eq!(raw::config_of(&conn, TOPIC, "hb", "retention.ms").await, ("222".into(), 2));
        assert_eq!(heartbeat_interval(&conn, "tuned").await, 7000);
    });
}
