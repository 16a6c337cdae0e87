//! Bad input against a real broker process over raw sockets: garbage, truncated and oversized
//! frames, unknown API keys and versions, hostile lengths, batches with a bad CRC or bad
//! lengths. Each gets the right Kafka error or a closed connection; the broker never dies,
//! other connections carry on, and nothing stored changes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use rand::{Rng, SeedableRng};
use sluice_protocol::api::{decode_response, encode_request};
use sluice_protocol::batch::{BatchBuilder, NewRecord};
use sluice_tests::Broker;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

fn connect(b: &Broker) -> TcpStream {
    let s = TcpStream::connect(b.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn request(key: ApiKey, version: i16, correlation_id: i32, body: RequestKind) -> Vec<u8> {
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("bad-input-test")));
    encode_request(&header, &body).unwrap().to_vec()
}

fn read_frame(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let mut buf = vec![0u8; i32::from_be_bytes(len) as usize];
    s.read_exact(&mut buf).ok()?;
    Some(buf)
}

/// The broker closed this connection (EOF or reset) rather than answering.
fn assert_closed(s: &mut TcpStream) {
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => panic!("expected the connection to close, got {n} bytes"),
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Err(e) => panic!("expected the connection to close, got {e}"),
    }
}

fn call(b: &Broker, key: ApiKey, version: i16, body: RequestKind) -> ResponseKind {
    let mut s = connect(b);
    s.write_all(&request(key, version, 1, body)).unwrap();
    let frame = read_frame(&mut s).expect("a response");
    let (cid, resp) = decode_response(key, version, Bytes::from(frame)).unwrap();
    assert_eq!(cid, 1);
    resp
}

fn alive(b: &Broker) {
    match call(b, ApiKey::ApiVersions, 3, RequestKind::ApiVersions(ApiVersionsRequest::default())) {
        ResponseKind::ApiVersions(r) => assert_eq!(r.error_code, 0),
        other => panic!("{other:?}"),
    }
}

fn produce_body(topic: &str, records: Vec<u8>) -> RequestKind {
    let mut p = produce_request::PartitionProduceData::default();
    p.index = 0;
    p.records = Some(Bytes::from(records));
    let mut t = produce_request::TopicProduceData::default();
    t.name = TopicName(StrBytes::from_string(topic.to_string()));
    t.partition_data = vec![p];
    let mut r = ProduceRequest::default();
    r.acks = -1;
    r.timeout_ms = 5000;
    r.topic_data = vec![t];
    RequestKind::Produce(r)
}

/// Create `topic` the way clients do: a Metadata request that allows auto-creation.
fn ensure_topic(b: &Broker, topic: &str) {
    let mut t = metadata_request::MetadataRequestTopic::default();
    t.name = Some(TopicName(StrBytes::from_string(topic.to_string())));
    let mut r = MetadataRequest::default();
    r.topics = Some(vec![t]);
    r.allow_auto_topic_creation = true;
    match call(b, ApiKey::Metadata, 9, RequestKind::Metadata(r)) {
        ResponseKind::Metadata(m) => assert_eq!(m.topics[0].error_code, 0),
        other => panic!("{other:?}"),
    }
}

fn produce_code(b: &Broker, topic: &str, records: Vec<u8>) -> (i16, i64) {
    match call(b, ApiKey::Produce, 9, produce_body(topic, records)) {
        ResponseKind::Produce(r) => {
            let p = &r.responses[0].partition_responses[0];
            (p.error_code, p.base_offset)
        }
        other => panic!("{other:?}"),
    }
}

fn good_batch(n: usize) -> Vec<u8> {
    let recs: Vec<NewRecord> = (0..n)
        .map(|i| NewRecord {
            timestamp: 1000 + i as i64,
            value: Some(Bytes::from(format!("v{i}"))),
            ..Default::default()
        })
        .collect();
    BatchBuilder::default().build(&recs).unwrap().to_vec()
}

fn latest_offset(b: &Broker, topic: &str) -> i64 {
    let mut p = list_offsets_request::ListOffsetsPartition::default();
    p.timestamp = -1;
    let mut t = list_offsets_request::ListOffsetsTopic::default();
    t.name = TopicName(StrBytes::from_string(topic.to_string()));
    t.partitions = vec![p];
    let mut r = ListOffsetsRequest::default();
    r.topics = vec![t];
    match call(b, ApiKey::ListOffsets, 5, RequestKind::ListOffsets(r)) {
        ResponseKind::ListOffsets(r) => r.topics[0].partitions[0].offset,
        other => panic!("{other:?}"),
    }
}

#[test]
fn malformed_frames_close_only_their_connection() {
    let b = Broker::start();
    let bystander = {
        let mut s = connect(&b);
        s.write_all(&request(ApiKey::ApiVersions, 0, 7, RequestKind::ApiVersions(Default::default()))).unwrap();
        assert!(read_frame(&mut s).is_some());
        s
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("oversized length", 0x7fff_ffffi32.to_be_bytes().to_vec()),
        ("negative length", (-5i32).to_be_bytes().to_vec()),
        ("unknown api key", {
            let mut f = 8i32.to_be_bytes().to_vec();
            f.extend_from_slice(&[0x03, 0xe7, 0, 0, 0, 0, 0, 1]);
            f
        }),
        ("header too short", {
            let mut f = 3i32.to_be_bytes().to_vec();
            f.extend_from_slice(&[0, 18, 0]);
            f
        }),
        ("unsupported metadata version", {
            let mut r = request(ApiKey::Metadata, 9, 1, RequestKind::Metadata(Default::default()));
            r[6..8].copy_from_slice(&99i16.to_be_bytes());
            r
        }),
        ("produce v2 (old message format)", {
            let mut r = request(ApiKey::Produce, 9, 1, produce_body("x", good_batch(1)));
            r[6..8].copy_from_slice(&2i16.to_be_bytes());
            r
        }),
        ("hostile array length", {
            let mut body = vec![0, 3, 0, 1, 0, 0, 0, 1, 0xff, 0xff];
            body.extend_from_slice(&0x7fff_ffffi32.to_be_bytes());
            let mut f = (body.len() as i32).to_be_bytes().to_vec();
            f.extend_from_slice(&body);
            f
        }),
        ("truncated body", {
            let full = request(ApiKey::Metadata, 9, 1, RequestKind::Metadata(Default::default()));
            let mut f = ((full.len() - 4 - 3) as i32).to_be_bytes().to_vec();
            f.extend_from_slice(&full[4..full.len() - 3]);
            f
        }),
    ];
    for (name, bytes) in cases {
        let mut s = connect(&b);
        s.write_all(&bytes).unwrap();
        assert_closed(&mut s);
        alive(&b);
        eprintln!("ok: {name}");
    }
    // a frame that never completes just waits; closing it changes nothing
    {
        let mut s = connect(&b);
        s.write_all(&100i32.to_be_bytes()).unwrap();
        s.write_all(&[0, 18, 0, 3]).unwrap();
    }
    alive(&b);
    // the bystander connection still works
    let mut s = bystander;
    s.write_all(&request(ApiKey::ApiVersions, 0, 8, RequestKind::ApiVersions(Default::default()))).unwrap();
    assert!(read_frame(&mut s).is_some());
}

#[test]
fn unknown_api_versions_version_gets_a_v0_answer() {
    let b = Broker::start();
    let mut s = connect(&b);
    s.write_all(&request(ApiKey::ApiVersions, 3, 5, RequestKind::ApiVersions(Default::default()))).unwrap();
    assert!(read_frame(&mut s).is_some());
    // the same request with a version number from the future
    let mut req = request(ApiKey::ApiVersions, 3, 6, RequestKind::ApiVersions(Default::default()));
    req[6..8].copy_from_slice(&77i16.to_be_bytes());
    s.write_all(&req).unwrap();
    let frame = read_frame(&mut s).unwrap();
    let (cid, resp) = decode_response(ApiKey::ApiVersions, 0, Bytes::from(frame)).unwrap();
    assert_eq!(cid, 6);
    match resp {
        ResponseKind::ApiVersions(r) => {
            assert_eq!(r.error_code, 35, "UNSUPPORTED_VERSION");
            let av = r.api_keys.iter().find(|k| k.api_key == 18).unwrap();
            assert_eq!((av.min_version, av.max_version), (0, 3));
        }
        other => panic!("{other:?}"),
    }
    // and the connection stays usable
    s.write_all(&request(ApiKey::ApiVersions, 0, 9, RequestKind::ApiVersions(Default::default()))).unwrap();
    assert!(read_frame(&mut s).is_some());
}

#[test]
fn invalid_batches_are_refused_and_nothing_is_stored() {
    let b = Broker::start();
    assert_eq!(produce_code(&b, "bad", good_batch(3)).0, 3, "UNKNOWN_TOPIC_OR_PARTITION before it exists");
    ensure_topic(&b, "bad");
    assert_eq!(produce_code(&b, "bad", good_batch(3)), (0, 0));
    let before = latest_offset(&b, "bad");
    assert_eq!(before, 3);

    let mut bad_crc = good_batch(2);
    let last = bad_crc.len() - 1;
    bad_crc[last] ^= 0x55;
    assert_eq!(produce_code(&b, "bad", bad_crc).0, 2, "CORRUPT_MESSAGE");

    let mut bad_len = good_batch(2);
    bad_len[8..12].copy_from_slice(&10_000i32.to_be_bytes());
    assert_eq!(produce_code(&b, "bad", bad_len).0, 2, "CORRUPT_MESSAGE for a length past the end");

    let mut short_len = good_batch(2);
    short_len[8..12].copy_from_slice(&20i32.to_be_bytes());
    assert_eq!(produce_code(&b, "bad", short_len).0, 2);

    let mut magic1 = good_batch(1);
    magic1[16] = 1;
    assert_ne!(produce_code(&b, "bad", magic1).0, 0);

    // a good batch followed by a bad one: the whole partition is refused (one batch only)
    let mut two = good_batch(1);
    let mut tail = good_batch(1);
    tail[30] ^= 1;
    two.extend_from_slice(&tail);
    assert_eq!(produce_code(&b, "bad", two).0, 87, "INVALID_RECORD: exactly one batch per partition");

    assert_eq!(produce_code(&b, "bad", vec![]).0, 2, "empty records");
    assert_eq!(produce_code(&b, "bad", vec![1, 2, 3]).0, 2, "three bytes");

    // transactional batches need the transaction coordinator: refused, not stored
    let txn =
        BatchBuilder { producer_id: 5, producer_epoch: 0, base_sequence: 0, transactional: true, ..Default::default() }
            .build(&[NewRecord { timestamp: 1, ..Default::default() }])
            .unwrap()
            .to_vec();
    assert_eq!(produce_code(&b, "bad", txn).0, 48, "INVALID_TXN_STATE");

    assert_eq!(latest_offset(&b, "bad"), before, "nothing stored");
    assert_eq!(produce_code(&b, "bad", good_batch(1)), (0, 3), "good batches still work");
}

fn init_producer_id() -> RequestKind {
    let mut r = InitProducerIdRequest::default();
    r.transactional_id = None;
    r.transaction_timeout_ms = 60_000;
    r.producer_id = ProducerId(-1);
    r.producer_epoch = -1;
    RequestKind::InitProducerId(r)
}

fn idem_batch(pid: i64, epoch: i16, seq: i32, n: usize) -> Vec<u8> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    idem_batch_at(pid, epoch, seq, n, now)
}

fn idem_batch_at(pid: i64, epoch: i16, seq: i32, n: usize, timestamp: i64) -> Vec<u8> {
    let recs: Vec<NewRecord> = (0..n)
        .map(|i| NewRecord {
            timestamp,
            value: Some(Bytes::from(format!("s{}", seq as usize + i))),
            ..Default::default()
        })
        .collect();
    BatchBuilder { producer_id: pid, producer_epoch: epoch, base_sequence: seq, ..Default::default() }
        .build(&recs)
        .unwrap()
        .to_vec()
}

/// Idempotence over the wire: a retried batch is answered with its original offsets and stored
/// once, also after a kill -9 and restart (state replayed from the log); gaps, unknown producers
/// with a non-zero sequence and fenced epochs are refused with Kafka's codes.
#[test]
fn idempotent_retries_are_stored_once_even_across_a_crash() {
    let mut b = Broker::start();
    ensure_topic(&b, "idem");
    let pid = match call(&b, ApiKey::InitProducerId, 4, init_producer_id()) {
        ResponseKind::InitProducerId(r) => {
            assert_eq!(r.error_code, 0);
            assert_eq!(r.producer_epoch, 0);
            r.producer_id.0
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(produce_code(&b, "idem", idem_batch(pid, 0, 0, 3)), (0, 0));
    assert_eq!(produce_code(&b, "idem", idem_batch(pid, 0, 3, 2)), (0, 3));
    assert_eq!(produce_code(&b, "idem", idem_batch(pid, 0, 3, 2)), (0, 3), "retry: original offset");
    assert_eq!(produce_code(&b, "idem", idem_batch(pid, 0, 0, 3)), (0, 0), "older retry within five batches");
    assert_eq!(produce_code(&b, "idem", idem_batch(pid, 0, 9, 1)).0, 45, "OUT_OF_ORDER_SEQUENCE_NUMBER");
    assert_eq!(produce_code(&b, "idem", idem_batch(pid + 1000, 0, 7, 1)).0, 59, "UNKNOWN_PRODUCER_ID");
    assert_eq!(latest_offset(&b, "idem"), 5);
    // a producer writing historical timestamps (year 2001) must keep its state too
    let old_pid = match call(&b, ApiKey::InitProducerId, 4, init_producer_id()) {
        ResponseKind::InitProducerId(r) => r.producer_id.0,
        other => panic!("{other:?}"),
    };
    assert_eq!(produce_code(&b, "idem", idem_batch_at(old_pid, 0, 0, 1, 1_000_000_000_000)), (0, 5));
    assert_eq!(produce_code(&b, "idem", idem_batch_at(old_pid, 0, 1, 1, 1_000_000_000_000)), (0, 6));

    b.kill9();
    b.spawn();
    let got = produce_code(&b, "idem", idem_batch(pid, 0, 3, 2));
    assert_eq!(got, (0, 3), "retry after a crash: still a duplicate; broker log: {}", b.log_tail());
    let old_retry = produce_code(&b, "idem", idem_batch_at(old_pid, 0, 1, 1, 1_000_000_000_000));
    assert_eq!(old_retry, (0, 6), "old record timestamps do not expire the producer at restart");
    assert_eq!(produce_code(&b, "idem", idem_batch(pid, 0, 5, 1)), (0, 7));
    assert_eq!(produce_code(&b, "idem", idem_batch(pid, 1, 0, 1)), (0, 8), "a new epoch starts at 0");
    assert_eq!(produce_code(&b, "idem", idem_batch(pid, 0, 6, 1)).0, 47, "INVALID_PRODUCER_EPOCH: fenced");
    assert_eq!(latest_offset(&b, "idem"), 9);

    // DescribeProducers shows the state that was rebuilt after the crash
    let mut t = describe_producers_request::TopicRequest::default();
    t.name = TopicName(StrBytes::from_static_str("idem"));
    t.partition_indexes = vec![0, 9];
    let mut r = DescribeProducersRequest::default();
    r.topics = vec![t];
    match call(&b, ApiKey::DescribeProducers, 0, RequestKind::DescribeProducers(r)) {
        ResponseKind::DescribeProducers(d) => {
            let p0 = &d.topics[0].partitions[0];
            assert_eq!(p0.error_code, 0);
            assert_eq!(p0.active_producers.len(), 2);
            let s = p0.active_producers.iter().find(|s| s.producer_id.0 == pid).unwrap();
            assert_eq!((s.producer_id.0, s.producer_epoch, s.last_sequence), (pid, 1, 0));
            assert_eq!(s.current_txn_start_offset, -1);
            assert_eq!(d.topics[0].partitions[1].error_code, 3, "unknown partition");
        }
        other => panic!("{other:?}"),
    }

    // a fresh InitProducerId never repeats an id, even after the restart
    let pid2 = match call(&b, ApiKey::InitProducerId, 0, init_producer_id()) {
        ResponseKind::InitProducerId(r) => r.producer_id.0,
        other => panic!("{other:?}"),
    };
    assert!(pid2 > pid);

    // KIP-360: re-initialising with the current id and epoch bumps the epoch, which fences the
    // old epoch on every partition
    let mut r = InitProducerIdRequest::default();
    r.transactional_id = None;
    r.producer_id = ProducerId(pid);
    r.producer_epoch = 1;
    match call(&b, ApiKey::InitProducerId, 4, RequestKind::InitProducerId(r.clone())) {
        ResponseKind::InitProducerId(x) => assert_eq!((x.error_code, x.producer_id.0, x.producer_epoch), (0, pid, 2)),
        other => panic!("{other:?}"),
    }
    assert_eq!(produce_code(&b, "idem", idem_batch(pid, 2, 0, 1)), (0, 9));
    assert_eq!(produce_code(&b, "idem", idem_batch(pid, 1, 1, 1)).0, 47, "epoch 1 is fenced");
    r.producer_id = ProducerId(pid2 + 5_000_000);
    match call(&b, ApiKey::InitProducerId, 4, RequestKind::InitProducerId(r)) {
        ResponseKind::InitProducerId(x) => assert_eq!(x.error_code, 49, "INVALID_PRODUCER_ID_MAPPING"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let b = Broker::start();
    ensure_topic(&b, "pipe");
    let mut s = connect(&b);
    let mut all = Vec::new();
    let mut expect = Vec::new();
    for i in 0..30 {
        let (key, version, body) = match i % 3 {
            0 => (ApiKey::ApiVersions, 3, RequestKind::ApiVersions(Default::default())),
            1 => (ApiKey::Produce, 9, produce_body("pipe", good_batch(1))),
            _ => (ApiKey::Metadata, 12, RequestKind::Metadata(Default::default())),
        };
        all.extend_from_slice(&request(key, version, 100 + i, body));
        expect.push((key, version, 100 + i));
    }
    s.write_all(&all).unwrap();
    let mut produce_offsets = Vec::new();
    for (key, version, cid) in expect {
        let frame = read_frame(&mut s).unwrap();
        let (got, resp) = decode_response(key, version, Bytes::from(frame)).unwrap();
        assert_eq!(got, cid, "responses in request order");
        if let ResponseKind::Produce(r) = resp {
            produce_offsets.push(r.responses[0].partition_responses[0].base_offset);
        }
    }
    assert_eq!(produce_offsets, (0..10).collect::<Vec<i64>>());
}

#[test]
fn random_frames_never_kill_the_broker() {
    let b = Broker::start();
    ensure_topic(&b, "fz");
    assert_eq!(produce_code(&b, "fz", good_batch(5)).0, 0);
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let keys: Vec<i16> = sluice_protocol::api::SUPPORTED_APIS.iter().map(|s| s.key as i16).collect();
    for _ in 0..300 {
        let len = rng.gen_range(0..200);
        let mut body: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        if body.len() >= 4 && rng.gen_bool(0.8) {
            // make most frames reach a real decoder: a supported key and a plausible version
            let k = keys[rng.gen_range(0..keys.len())];
            body[0..2].copy_from_slice(&k.to_be_bytes());
            body[2..4].copy_from_slice(&rng.gen_range(0i16..13).to_be_bytes());
        }
        let mut f = (body.len() as i32).to_be_bytes().to_vec();
        f.extend_from_slice(&body);
        let mut s = connect(&b);
        let _ = s.write_all(&f);
        s.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        let mut sink = [0u8; 4096];
        let _ = s.read(&mut sink);
    }
    alive(&b);
    assert_eq!(latest_offset(&b, "fz"), 5, "stored data unchanged");
}

/// The partition count of `topic` as Metadata gives it.
fn partition_count(b: &Broker, topic: &str) -> usize {
    let mut t = metadata_request::MetadataRequestTopic::default();
    t.name = Some(TopicName(StrBytes::from_string(topic.to_string())));
    let mut r = MetadataRequest::default();
    r.topics = Some(vec![t]);
    match call(b, ApiKey::Metadata, 9, RequestKind::Metadata(r)) {
        ResponseKind::Metadata(m) => m.topics[0].partitions.len(),
        other => panic!("{other:?}"),
    }
}

/// Kafka's ControllerApis: a topic named twice in one CreatePartitions request is refused both
/// times (INVALID_REQUEST) and keeps its partitions; the request's other topics grow.
#[test]
fn create_partitions_naming_a_topic_twice_refuses_both_and_grows_the_rest() {
    let b = Broker::start_with(&["--num-partitions", "1"]);
    ensure_topic(&b, "twice");
    ensure_topic(&b, "once");
    let topic = |name: &str, count: i32| {
        let mut t = create_partitions_request::CreatePartitionsTopic::default();
        t.name = TopicName(StrBytes::from_string(name.to_string()));
        t.count = count;
        t
    };
    let mut r = CreatePartitionsRequest::default();
    r.topics = vec![topic("twice", 2), topic("once", 3), topic("twice", 4)];
    r.timeout_ms = 10_000;
    let resp = match call(&b, ApiKey::CreatePartitions, 3, RequestKind::CreatePartitions(r)) {
        ResponseKind::CreatePartitions(resp) => resp,
        other => panic!("{other:?}"),
    };
    let codes: Vec<(String, i16)> = resp.results.iter().map(|r| (r.name.0.to_string(), r.error_code)).collect();
    let invalid_request = kafka_protocol::error::ResponseError::InvalidRequest.code();
    assert_eq!(codes, vec![("twice".into(), invalid_request), ("once".into(), 0), ("twice".into(), invalid_request)]);
    assert_eq!(partition_count(&b, "twice"), 1);
    assert_eq!(partition_count(&b, "once"), 3);
}
