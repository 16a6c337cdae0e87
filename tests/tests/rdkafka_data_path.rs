//! librdkafka (through the `rdkafka` crate) against a real `sluice` process: produce/consume
//! round trips, admin operations, long polls, and restarts (clean and kill -9).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rdkafka::admin::{
    AdminClient, AdminOptions, AlterConfig, NewPartitions, NewTopic, ResourceSpecifier, TopicReplication,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use sluice_tests::Broker;
use std::time::{Duration, Instant};

fn producer(b: &Broker, extra: &[(&str, &str)]) -> BaseProducer {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", b.bootstrap()).set("acks", "all").set("enable.idempotence", "true");
    for (k, v) in extra {
        c.set(*k, *v);
    }
    c.create().expect("producer")
}

fn consumer(b: &Broker, extra: &[(&str, &str)]) -> BaseConsumer {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", b.bootstrap())
        .set("group.id", "itest")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest");
    for (k, v) in extra {
        c.set(*k, *v);
    }
    c.create().expect("consumer")
}

/// Record timestamps: recent, so retention (7 days by default) never applies during a test.
fn base_ts() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64 - 3_600_000
}

/// Produce `n` records with timestamps `ts0 + i`; returns `ts0`.
fn produce_n(p: &BaseProducer, topic: &str, partition: i32, n: usize, value: impl Fn(usize) -> Vec<u8>) -> i64 {
    let ts0 = base_ts();
    for i in 0..n {
        let v = value(i);
        let k = format!("k{i}");
        let headers = OwnedHeaders::new().insert(Header { key: "i", value: Some(&i.to_string()) });
        let mut rec =
            BaseRecord::to(topic).partition(partition).key(&k).payload(&v).headers(headers).timestamp(ts0 + i as i64);
        loop {
            match p.send(rec) {
                Ok(()) => break,
                Err((e, r)) => {
                    assert!(
                        matches!(
                            e,
                            rdkafka::error::KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull)
                        ),
                        "{e}"
                    );
                    rec = r;
                    p.poll(Duration::from_millis(10));
                }
            }
        }
    }
    p.flush(Duration::from_secs(30)).expect("all delivered");
    ts0
}

/// (partition, offset, key, value, timestamp, first header value)
type Consumed = (i32, i64, Vec<u8>, Vec<u8>, i64, String);

fn consume_n(c: &BaseConsumer, topic: &str, partitions: i32, n: usize) -> Vec<Consumed> {
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while out.len() < n && Instant::now() < deadline {
        if let Some(m) = c.poll(Duration::from_millis(200)) {
            let m = m.expect("no consume error");
            let h = m
                .headers()
                .map(|h| String::from_utf8_lossy(h.get(0).value.unwrap_or_default()).into_owned())
                .unwrap_or_default();
            out.push((
                m.partition(),
                m.offset(),
                m.key().unwrap_or_default().to_vec(),
                m.payload().unwrap_or_default().to_vec(),
                m.timestamp().to_millis().unwrap_or(-1),
                h,
            ));
        }
    }
    out
}

#[test]
fn round_trip_with_keys_headers_timestamps_and_codecs() {
    let b = Broker::start();
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let topic = format!("rt-{codec}");
        let p = producer(&b, &[("compression.type", codec), ("linger.ms", "5")]);
        let ts0 = produce_n(&p, &topic, 0, 2000, |i| format!("value-{i}").repeat(5).into_bytes());
        let c = consumer(&b, &[]);
        let got = consume_n(&c, &topic, 1, 2000);
        assert_eq!(got.len(), 2000, "{codec}");
        for (i, (part, off, key, val, ts, h)) in got.iter().enumerate() {
            assert_eq!((*part, *off), (0, i as i64));
            assert_eq!(key, format!("k{i}").as_bytes());
            assert_eq!(val, &format!("value-{i}").repeat(5).into_bytes());
            assert_eq!(*ts, ts0 + i as i64);
            assert_eq!(h, &i.to_string());
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn admin_topics_configs_partitions() {
    let b = Broker::start();
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", b.bootstrap()).create().unwrap();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let r = admin
        .create_topics(&[NewTopic::new("adm", 3, TopicReplication::Fixed(1)).set("retention.ms", "123456")], &opts)
        .await
        .unwrap();
    assert!(r[0].is_ok(), "{r:?}");
    let dup = admin.create_topics(&[NewTopic::new("adm", 3, TopicReplication::Fixed(1))], &opts).await.unwrap();
    assert!(matches!(&dup[0], Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists))), "{dup:?}");
    let bad = admin.create_topics(&[NewTopic::new("bad/name", 1, TopicReplication::Fixed(1))], &opts).await.unwrap();
    assert!(matches!(&bad[0], Err((_, rdkafka::types::RDKafkaErrorCode::InvalidTopic))), "{bad:?}");
    let bad_cfg = admin
        .create_topics(&[NewTopic::new("badcfg", 1, TopicReplication::Fixed(1)).set("cleanup.policy", "shred")], &opts)
        .await
        .unwrap();
    assert!(matches!(&bad_cfg[0], Err((_, rdkafka::types::RDKafkaErrorCode::InvalidConfig))), "{bad_cfg:?}");

    let cfg = admin.describe_configs(&[ResourceSpecifier::Topic("adm")], &opts).await.unwrap();
    let res = cfg[0].as_ref().unwrap();
    assert_eq!(res.get("retention.ms").and_then(|e| e.value.clone()).as_deref(), Some("123456"));
    assert_eq!(res.get("cleanup.policy").and_then(|e| e.value.clone()).as_deref(), Some("delete"));

    let alter = AlterConfig::new(ResourceSpecifier::Topic("adm")).set("retention.bytes", "4096");
    let r = admin.alter_configs(&[alter], &opts).await.unwrap();
    assert!(r[0].is_ok(), "{r:?}");
    let cfg = admin.describe_configs(&[ResourceSpecifier::Topic("adm")], &opts).await.unwrap();
    assert_eq!(cfg[0].as_ref().unwrap().get("retention.bytes").and_then(|e| e.value.clone()).as_deref(), Some("4096"));

    let r = admin.create_partitions(&[NewPartitions::new("adm", 5)], &opts).await.unwrap();
    assert!(r[0].is_ok(), "{r:?}");
    let r = admin.create_partitions(&[NewPartitions::new("adm", 2)], &opts).await.unwrap();
    assert!(r[0].is_err());
    let md = admin.inner().fetch_metadata(Some("adm"), Duration::from_secs(5)).unwrap();
    assert_eq!(md.topics()[0].partitions().len(), 5);

    let r = admin.delete_topics(&["adm"], &opts).await.unwrap();
    assert!(r[0].is_ok(), "{r:?}");
    let r = admin.delete_topics(&["adm"], &opts).await.unwrap();
    assert!(matches!(&r[0], Err((_, rdkafka::types::RDKafkaErrorCode::UnknownTopicOrPartition))), "{r:?}");
}

#[test]
fn fetch_long_poll_is_woken_by_a_produce() {
    let b = Broker::start();
    let p = producer(&b, &[]);
    produce_n(&p, "lp", 0, 1, |_| b"first".to_vec());
    let c = consumer(&b, &[("fetch.wait.max.ms", "5000")]);
    assert_eq!(consume_n(&c, "lp", 1, 1).len(), 1);
    // the consumer now long-polls at the end of the log; a produce must wake it well before 5 s
    std::thread::sleep(Duration::from_millis(300));
    let sent = Instant::now();
    produce_n(&p, "lp", 0, 1, |_| b"second".to_vec());
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = None;
    while Instant::now() < deadline {
        if let Some(m) = c.poll(Duration::from_millis(50)) {
            got = Some((m.unwrap().payload().unwrap().to_vec(), sent.elapsed()));
            break;
        }
    }
    let (payload, latency) = got.expect("second record arrives");
    assert_eq!(payload, b"second");
    assert!(latency < Duration::from_millis(2500), "long poll not woken: {latency:?}");
}

#[test]
fn acknowledged_writes_survive_kill9_and_clean_restart() {
    let mut b = Broker::start();
    let p = producer(&b, &[("linger.ms", "2")]);
    produce_n(&p, "dur", 0, 20_000, |i| format!("{i:08}").into_bytes());
    drop(p);
    b.kill9();
    b.spawn();
    let c = consumer(&b, &[]);
    let got = consume_n(&c, "dur", 1, 20_000);
    assert_eq!(got.len(), 20_000);
    assert!(got.iter().enumerate().all(|(i, r)| r.3 == format!("{i:08}").into_bytes() && r.1 == i as i64));
    drop(c);
    // clean stop, then more writes continue at the right offset
    assert_eq!(b.stop(), Some(0));
    b.spawn();
    let p = producer(&b, &[]);
    produce_n(&p, "dur", 0, 10, |i| format!("after-{i}").into_bytes());
    let c = consumer(&b, &[]);
    let got = consume_n(&c, "dur", 1, 20_010);
    assert_eq!(got.len(), 20_010);
    assert_eq!(got[20_000].3, b"after-0");
    assert_eq!(got[20_000].1, 20_000);
}

#[test]
fn many_partitions_interleaved() {
    let b = Broker::start();
    let admin_p = producer(&b, &[("linger.ms", "5"), ("batch.num.messages", "1000")]);
    // auto-created topic with one partition; create a 12-partition topic explicitly
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let admin: AdminClient<DefaultClientContext> =
            ClientConfig::new().set("bootstrap.servers", b.bootstrap()).create().unwrap();
        let r = admin
            .create_topics(&[NewTopic::new("wide", 12, TopicReplication::Fixed(1))], &AdminOptions::new())
            .await
            .unwrap();
        assert!(r[0].is_ok());
    });
    for i in 0..60_000usize {
        let v = format!("{i}");
        let mut rec = BaseRecord::<(), _>::to("wide").partition((i % 12) as i32).payload(&v);
        loop {
            match admin_p.send(rec) {
                Ok(()) => break,
                Err((_, r)) => {
                    rec = r;
                    admin_p.poll(Duration::from_millis(5));
                }
            }
        }
    }
    admin_p.flush(Duration::from_secs(60)).unwrap();
    let c = consumer(&b, &[]);
    let got = consume_n(&c, "wide", 12, 60_000);
    assert_eq!(got.len(), 60_000);
    let mut values: Vec<usize> = got.iter().map(|r| String::from_utf8_lossy(&r.3).parse().unwrap()).collect();
    values.sort_unstable();
    assert!(values.iter().enumerate().all(|(i, v)| i == *v));
    for part in 0..12 {
        let offs: Vec<i64> = got.iter().filter(|r| r.0 == part).map(|r| r.1).collect();
        assert!(offs.iter().enumerate().all(|(i, o)| *o == i as i64), "partition {part} offsets");
        assert_eq!(offs.len(), 5000);
    }
}

/// `cleanup.policy=compact` is accepted (Kafka Streams' changelogs need it) and shown; every
/// record of a compacted topic needs a key: a keyless one is INVALID_RECORD, as in Kafka.
#[tokio::test(flavor = "multi_thread")]
async fn compacted_topics_refuse_records_without_a_key() {
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let b = Broker::start();
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", b.bootstrap()).create().unwrap();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let r = admin
        .create_topics(
            &[
                NewTopic::new("compacted", 1, TopicReplication::Fixed(1)).set("cleanup.policy", "compact"),
                NewTopic::new("both", 1, TopicReplication::Fixed(1)).set("cleanup.policy", "delete,compact"),
            ],
            &opts,
        )
        .await
        .unwrap();
    assert!(r.iter().all(|x| x.is_ok()), "{r:?}");
    let cfg = admin
        .describe_configs(&[ResourceSpecifier::Topic("compacted"), ResourceSpecifier::Topic("both")], &opts)
        .await
        .unwrap();
    let policy = |i: usize| cfg[i].as_ref().unwrap().get("cleanup.policy").and_then(|e| e.value.clone());
    assert_eq!(policy(0).as_deref(), Some("compact"));
    assert_eq!(policy(1).as_deref(), Some("delete,compact"), "described as set, as Kafka does");
    let p: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", b.bootstrap())
        .set("acks", "all")
        .set("message.send.max.retries", "0")
        .create()
        .unwrap();
    for topic in ["compacted", "both"] {
        let keyed = p.send(FutureRecord::to(topic).key("k").payload("v"), Duration::from_secs(10)).await;
        assert!(keyed.is_ok(), "{keyed:?}");
        let keyless = p.send(FutureRecord::<(), _>::to(topic).payload("v"), Duration::from_secs(10)).await;
        assert!(
            matches!(
                &keyless,
                Err((
                    rdkafka::error::KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::InvalidRecord),
                    _
                ))
            ),
            "{keyless:?}"
        );
    }
    // a delete-policy topic takes keyless records
    let plain = p.send(FutureRecord::<(), _>::to("plain").payload("v"), Duration::from_secs(10)).await;
    assert!(plain.is_ok(), "{plain:?}");

    // KIP-467: in one batch of keyed and keyless records, the response names the keyless ones
    // (INVALID_RECORD); librdkafka fails the others of the batch as _INVALID_DIFFERENT_RECORD
    let batched: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", b.bootstrap())
        .set("acks", "all")
        .set("linger.ms", "200")
        .set("message.send.max.retries", "0")
        .create()
        .unwrap();
    let sends: Vec<_> = (0..6)
        .map(|i| {
            let key = format!("k{i}");
            let rec = FutureRecord::to("compacted").partition(0).payload("v");
            let rec = if i % 3 == 1 { rec } else { rec.key(key.as_str()) };
            batched.send_result(rec).map_err(|(e, _)| e).unwrap()
        })
        .collect();
    let mut codes = Vec::new();
    for f in sends {
        codes.push(match f.await.unwrap() {
            Ok(_) => None,
            Err((rdkafka::error::KafkaError::MessageProduction(code), _)) => Some(code),
            Err(e) => panic!("{e:?}"),
        });
    }
    use rdkafka::types::RDKafkaErrorCode::{InvalidDifferentRecord, InvalidRecord};
    let want = [0, 1, 2, 3, 4, 5].map(|i| Some(if i % 3 == 1 { InvalidRecord } else { InvalidDifferentRecord }));
    assert_eq!(codes, want.to_vec());
}
