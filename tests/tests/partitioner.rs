//! Sluice's client partitioner puts a key on the same partition as librdkafka's
//! `murmur2_random` (= the Java client's default partitioner): 10,000 keys written by
//! librdkafka are read back and compared with `partition_for_key`, and Sluice's producer
//! writes the same keys to the same partitions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use common::send_retrying;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use sluice_client::partitioner::partition_for_key;
use sluice_tests::Broker;

mod common;
use std::collections::HashMap;
use std::time::{Duration, Instant};

const KEYS: usize = 10_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_land_where_librdkafka_murmur2_puts_them() {
    let b = Broker::start_with(&["--num-partitions", "12"]);
    let bootstrap = b.bootstrap();
    // librdkafka writes 10,000 keys; we read where each landed.
    let placed: HashMap<String, i32> = tokio::task::spawn_blocking(move || {
        let p: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("partitioner", "murmur2_random")
            .set("linger.ms", "5")
            .create()
            .unwrap();
        for i in 0..KEYS {
            let key = format!("key-{i}");
            send_retrying(&p, BaseRecord::to("keys").key(&key).payload("v"));
        }
        p.flush(Duration::from_secs(30)).unwrap();
        let c: BaseConsumer =
            ClientConfig::new().set("bootstrap.servers", &bootstrap).set("group.id", "k").create().unwrap();
        let mut tpl = TopicPartitionList::new();
        for part in 0..12 {
            tpl.add_partition_offset("keys", part, Offset::Beginning).unwrap();
        }
        c.assign(&tpl).unwrap();
        let mut placed = HashMap::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while placed.len() < KEYS && Instant::now() < deadline {
            if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
                placed.insert(String::from_utf8_lossy(m.key().unwrap()).to_string(), m.partition());
            }
        }
        placed
    })
    .await
    .unwrap();
    assert_eq!(placed.len(), KEYS);
    for (key, part) in &placed {
        assert_eq!(*part, partition_for_key(key.as_bytes(), 12), "key {key}");
    }
    // Sluice's producer puts every key where librdkafka did.
    let p = sluice_client::Producer::new(&sluice_client::ClientConfig::new().set("bootstrap.servers", b.bootstrap()))
        .await
        .unwrap();
    let mut futs = Vec::with_capacity(KEYS);
    for i in 0..KEYS {
        let key = format!("key-{i}");
        futs.push((key.clone(), p.send(sluice_client::ProducerRecord::new("keys2", "v").key(key)).await.unwrap()));
    }
    for (key, f) in futs {
        assert_eq!(f.await.unwrap().partition, placed[&key], "key {key}");
    }
}
