//! Produce and consume throughput of Sluice's Rust client next to librdkafka (the `rdkafka`
//! crate) against the same broker process, in the same run, alternating runs so drift hits
//! both. Same settings for both: idempotent producer, acks=all, linger.ms=5, batch.size
//! 256 KiB, no compression, 1 KiB random values, 3 partitions; consumers read a topic from the
//! start. Prints medians and the ratio Sluice/librdkafka (target ≥ 1.0).
//!
//! `cargo bench -p sluice-tests --bench client_vs_rdkafka -- [RUNS] [RECORDS]`
//! (tests/bench/client.sh builds the release broker and runs this).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rand::RngCore;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer as _, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use sluice_client::{ClientConfig, Consumer, Producer, ProducerRecord};
use sluice_tests::Broker;
use std::time::{Duration, Instant};

const PARTITIONS: i32 = 3;
const VALUE: usize = 1024;

fn values(n: usize) -> Vec<Vec<u8>> {
    let mut rng = rand::thread_rng();
    (0..n.min(1024))
        .map(|_| {
            let mut v = vec![0u8; VALUE];
            rng.fill_bytes(&mut v);
            v
        })
        .collect()
}

async fn sluice_produce(bootstrap: &str, topic: &str, n: usize, pool: &[Vec<u8>]) -> f64 {
    let p = Producer::new(
        &ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("linger.ms", 5)
            .set("batch.size", 262_144)
            .set("buffer.memory", 256 * 1024 * 1024),
    )
    .await
    .unwrap();
    let pool: Vec<bytes::Bytes> = pool.iter().map(|v| bytes::Bytes::from(v.clone())).collect();
    let start = Instant::now();
    let mut pending = Vec::with_capacity(n);
    for i in 0..n {
        let rec = ProducerRecord {
            topic: topic.to_string(),
            partition: Some(i as i32 % PARTITIONS),
            value: Some(pool[i % pool.len()].clone()),
            ..Default::default()
        };
        pending.push(p.send(rec).await.unwrap());
    }
    for d in pending {
        d.await.unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    p.close().await.unwrap();
    (n * VALUE) as f64 / secs / 1_048_576.0
}

fn rdkafka_produce(bootstrap: &str, topic: &str, n: usize, pool: &[Vec<u8>]) -> f64 {
    let p: ThreadedProducer<DefaultProducerContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("batch.size", "262144")
        .set("queue.buffering.max.kbytes", "262144")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .unwrap();
    // Connected, topic known, producer id fetched: the clock starts where Sluice's does.
    p.client().fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
    let start = Instant::now();
    for i in 0..n {
        let mut rec = BaseRecord::<(), [u8]>::to(topic).partition(i as i32 % PARTITIONS).payload(&pool[i % pool.len()]);
        loop {
            match p.send(rec) {
                Ok(()) => break,
                Err((_, r)) => {
                    rec = r;
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }
    p.flush(Duration::from_secs(300)).unwrap();
    let secs = start.elapsed().as_secs_f64();
    (n * VALUE) as f64 / secs / 1_048_576.0
}

async fn sluice_consume(bootstrap: &str, topic: &str, n: usize) -> f64 {
    let mut c =
        Consumer::new(&ClientConfig::new().set("bootstrap.servers", bootstrap).set("auto.offset.reset", "earliest"))
            .unwrap();
    c.assign(&(0..PARTITIONS).map(|p| (topic.to_string(), p)).collect::<Vec<_>>()).unwrap();
    // The clock starts at the first record for both consumers (connection and offset
    // lookup excluded), and counts the records after it.
    let mut first = c.poll(Duration::from_millis(500)).await.unwrap().len();
    while first == 0 {
        first = c.poll(Duration::from_millis(500)).await.unwrap().len();
    }
    let start = Instant::now();
    let mut got = first;
    while got < n {
        got += c.poll(Duration::from_millis(500)).await.unwrap().len();
    }
    let secs = start.elapsed().as_secs_f64();
    ((n - first) * VALUE) as f64 / secs / 1_048_576.0
}

fn rdkafka_consume(bootstrap: &str, topic: &str, n: usize) -> f64 {
    let c: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "bench")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    c.assign(&tpl).unwrap();
    while c.poll(Duration::from_millis(500)).is_none() {}
    let start = Instant::now();
    let mut got = 1;
    while got < n {
        if let Some(m) = c.poll(Duration::from_millis(500)) {
            m.unwrap();
            got += 1;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    ((n - 1) * VALUE) as f64 / secs / 1_048_576.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; positional numbers are ours.
    let nums: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let runs = nums.first().copied().unwrap_or(3).max(1);
    let records = nums.get(1).copied().unwrap_or(200_000);
    let b = Broker::start_with(&["--num-partitions", &PARTITIONS.to_string()]);
    let bootstrap = b.bootstrap();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let pool = values(records);
    let (mut sp, mut rp, mut sc, mut rc) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for run in 0..runs {
        let (st, rt_) = (format!("s-{run}"), format!("r-{run}"));
        // Alternate which client goes first.
        if run % 2 == 0 {
            sp.push(rt.block_on(sluice_produce(&bootstrap, &st, records, &pool)));
            rp.push(rdkafka_produce(&bootstrap, &rt_, records, &pool));
        } else {
            rp.push(rdkafka_produce(&bootstrap, &rt_, records, &pool));
            sp.push(rt.block_on(sluice_produce(&bootstrap, &st, records, &pool)));
        }
        // Each consumer reads the topic the other client wrote (same bytes either way).
        sc.push(rt.block_on(sluice_consume(&bootstrap, &rt_, records)));
        rc.push(rdkafka_consume(&bootstrap, &st, records));
        eprintln!(
            "run {run}: produce sluice {:.1} / librdkafka {:.1} MiB/s; consume sluice {:.1} / librdkafka {:.1} MiB/s",
            sp[run], rp[run], sc[run], rc[run]
        );
    }
    let (sp, rp, sc, rc) = (median(sp), median(rp), median(sc), median(rc));
    println!("| {records} x 1 KiB, {PARTITIONS} partitions, median of {runs} | Sluice client | librdkafka | ratio |");
    println!("|---|---|---|---|");
    println!("| produce (idempotent, acks=all) MiB/s | {sp:.1} | {rp:.1} | {:.2} |", sp / rp);
    println!("| consume MiB/s | {sc:.1} | {rc:.1} | {:.2} |", sc / rc);
}
