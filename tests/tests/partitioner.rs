//! Sluice's client partitioner puts a key on the same partition as librdkafka's
//! `murmur2_random` (= the Java client's default partitioner).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use sluice_client::partitioner::partition_for_key;
use sluice_tests::Broker;
use std::time::{Duration, Instant};

#[test]
fn keys_land_where_librdkafka_murmur2_puts_them() {
    let b = Broker::start_with(&["--num-partitions", "12"]);
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", b.bootstrap())
        .set("partitioner", "murmur2_random")
        .create()
        .unwrap();
    for i in 0..200 {
        let key = format!("key-{i}");
        p.send(BaseRecord::to("keys").key(&key).payload("v")).unwrap();
    }
    p.flush(Duration::from_secs(10)).unwrap();
    let c: BaseConsumer =
        ClientConfig::new().set("bootstrap.servers", b.bootstrap()).set("group.id", "k").create().unwrap();
    let mut tpl = TopicPartitionList::new();
    for part in 0..12 {
        tpl.add_partition_offset("keys", part, Offset::Beginning).unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut seen = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen < 200 && Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            let key = m.key().unwrap();
            assert_eq!(m.partition(), partition_for_key(key, 12), "key {}", String::from_utf8_lossy(key));
            seen += 1;
        }
    }
    assert_eq!(seen, 200);
}
