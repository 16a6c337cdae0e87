//! Checks shared by several test files (independent of the client under test: librdkafka reads).
#![allow(dead_code)]

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Message, ToBytes};
use rdkafka::producer::{BaseProducer, BaseRecord, ProducerContext};
use rdkafka::{Offset, TopicPartitionList};
use sluice_tests::proxy::Proxy;
use sluice_tests::Broker;
use std::time::{Duration, Instant};

/// A broker whose advertised address is a fault-injecting proxy in front of it (4 partitions
/// per auto-created topic).
pub fn behind_proxy(seed: u64) -> (Proxy, Broker) {
    let proxy = Proxy::start(0, seed).unwrap();
    let b = Broker::start_with(&[
        "--advertised-listeners",
        &format!("PLAINTEXT://127.0.0.1:{}", proxy.port),
        "--num-partitions",
        "4",
    ]);
    proxy.set_target(b.port);
    (proxy, b)
}

/// librdkafka `send`, waiting (polling) while its queue is full.
pub fn send_retrying<C, K, P>(p: &BaseProducer<C>, mut rec: BaseRecord<'_, K, P, ()>)
where
    C: ProducerContext<DeliveryOpaque = ()>,
    K: ToBytes + ?Sized,
    P: ToBytes + ?Sized,
{
    loop {
        match p.send(rec) {
            Ok(()) => return,
            Err((_, r)) => {
                rec = r;
                p.poll(Duration::from_millis(5));
            }
        }
    }
}

/// Read every partition fully and check: partition `p` holds exactly the values `i` with
/// `i % partitions == p`, each once, in increasing order.
pub fn assert_exactly_once_in_order(bootstrap: &str, topic: &str, total: usize, partitions: usize) {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "verify")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p as i32, Offset::Beginning).unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut per: Vec<Vec<usize>> = vec![Vec::new(); partitions];
    let mut n = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut idle = Instant::now();
    while Instant::now() < deadline && idle.elapsed() < Duration::from_secs(5) {
        if let Some(m) = c.poll(Duration::from_millis(100)) {
            let m = m.unwrap();
            let v: usize = std::str::from_utf8(m.payload().unwrap()).unwrap().parse().unwrap();
            per[m.partition() as usize].push(v);
            n += 1;
            idle = Instant::now();
        }
    }
    for (p, got) in per.iter().enumerate() {
        let want: Vec<usize> = (0..total).filter(|i| i % partitions == p).collect();
        if got != &want {
            let dups = got.len() as i64 - got.iter().collect::<std::collections::BTreeSet<_>>().len() as i64;
            panic!(
                "partition {p}: {} records (want {}), {dups} duplicates, first mismatch at {:?}",
                got.len(),
                want.len(),
                got.iter().zip(&want).position(|(a, b)| a != b)
            );
        }
    }
    assert_eq!(n, total);
}
