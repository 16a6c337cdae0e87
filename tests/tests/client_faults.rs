//! Sluice's Rust client under faults, judged by librdkafka reading the result: responses lost
//! by the proxy and a broker killed -9 never duplicate or reorder what the idempotent producer
//! wrote; a transaction commit that times out while the broker is frozen is retried as a commit
//! (never aborted) and lands once the broker resumes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{assert_exactly_once_in_order, behind_proxy};
use sluice_client::{ClientConfig, Consumer, ErrorKind, Producer, ProducerRecord};
use sluice_tests::proxy::Proxy;
use sluice_tests::Broker;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

async fn producer(proxy: &Proxy) -> Producer {
    Producer::new(
        &ClientConfig::new()
            .set("bootstrap.servers", format!("127.0.0.1:{}", proxy.port))
            .set("linger.ms", 5)
            .set("batch.size", 1024)
            .set("retry.backoff.ms", 20)
            .set("request.timeout.ms", 3000)
            .set("delivery.timeout.ms", 170_000),
    )
    .await
    .unwrap()
}

/// Send values `range` (as 7-digit strings) to partition `i % 4`; returns the deliveries.
async fn send_all(p: &Producer, topic: &str, range: std::ops::Range<usize>) -> Vec<sluice_client::DeliveryFuture> {
    let mut out = Vec::new();
    for i in range {
        out.push(p.send(ProducerRecord::new(topic, format!("{i:07}")).partition((i % 4) as i32)).await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_responses_never_duplicate_or_reorder() {
    let (proxy, b) = behind_proxy(21);
    let p = producer(&proxy).await;
    for d in send_all(&p, "ceos", 0..4).await {
        d.await.unwrap();
    }
    proxy.faults.drop_response_per_mille.store(50, Ordering::Relaxed);
    let total = 30_000;
    let deliveries = send_all(&p, "ceos", 4..total).await;
    for d in deliveries {
        d.await.expect("every record delivered despite lost responses");
    }
    proxy.faults.drop_response_per_mille.store(0, Ordering::Relaxed);
    let dropped = proxy.faults.dropped.load(Ordering::Relaxed);
    assert!(dropped >= 3, "the proxy must actually have dropped responses ({dropped})");
    let bootstrap = b.bootstrap();
    tokio::task::spawn_blocking(move || assert_exactly_once_in_order(&bootstrap, "ceos", total, 4)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_between_a_send_and_its_retry_is_still_exactly_once() {
    let (proxy, mut b) = behind_proxy(23);
    let p = producer(&proxy).await;
    for d in send_all(&p, "ceos9", 0..4).await {
        d.await.unwrap();
    }
    // Every response is lost: the broker writes the batches, the client keeps retrying them.
    proxy.faults.drop_response_per_mille.store(1000, Ordering::Relaxed);
    let deliveries = send_all(&p, "ceos9", 4..3000).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(proxy.faults.dropped.load(Ordering::Relaxed) > 0);
    b.kill9();
    b.spawn();
    proxy.faults.drop_response_per_mille.store(0, Ordering::Relaxed);
    for d in deliveries {
        d.await.expect("every record delivered after the restart");
    }
    let bootstrap = b.bootstrap();
    tokio::task::spawn_blocking(move || assert_exactly_once_in_order(&bootstrap, "ceos9", 3000, 4)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_that_times_out_is_retried_never_aborted() {
    let b = Broker::start_with(&["--num-partitions", "2"]);
    let p = Producer::new(
        &ClientConfig::new()
            .set("bootstrap.servers", b.bootstrap())
            .set("transactional.id", "slow-commit")
            .set("request.timeout.ms", 1000)
            .set("max.block.ms", 2500),
    )
    .await
    .unwrap();
    p.init_transactions().await.unwrap();
    p.begin_transaction().await.unwrap();
    for i in 0..50 {
        p.send(ProducerRecord::new("slow", format!("{i}")).partition(i % 2)).await.unwrap();
    }
    p.flush().await.unwrap();
    b.pause();
    let err = p.commit_transaction().await.expect_err("the broker is frozen");
    assert_eq!(err.kind(), ErrorKind::Retriable, "{err}");
    let refused = p.abort_transaction().await.expect_err("an unknown outcome is never aborted");
    assert_eq!(refused.kind(), ErrorKind::Invalid, "{refused}");
    b.resume();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match p.commit_transaction().await {
            Ok(()) => break,
            Err(e) if e.is_retriable() && Instant::now() < deadline => continue,
            Err(e) => panic!("commit retry failed: {e}"),
        }
    }
    let mut c = Consumer::new(
        &ClientConfig::new()
            .set("bootstrap.servers", b.bootstrap())
            .set("isolation.level", "read_committed")
            .set("auto.offset.reset", "earliest"),
    )
    .unwrap();
    c.assign(&[("slow".into(), 0), ("slow".into(), 1)]).unwrap();
    let mut n = 0;
    let deadline = Instant::now() + Duration::from_secs(15);
    while n < 50 && Instant::now() < deadline {
        n += c.poll(Duration::from_millis(200)).await.unwrap().len();
    }
    assert_eq!(n, 50, "the retried commit committed the transaction");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_broker_bounds_waits_by_delivery_timeout_and_buffer_memory() {
    let b = Broker::start_with(&["--num-partitions", "1"]);
    let p = Producer::new(
        &ClientConfig::new()
            .set("bootstrap.servers", b.bootstrap())
            .set("request.timeout.ms", 500)
            .set("delivery.timeout.ms", 1500)
            .set("buffer.memory", 1_048_576)
            .set("max.request.size", 1_048_576)
            .set("max.block.ms", 800),
    )
    .await
    .unwrap();
    p.send(ProducerRecord::new("frozen", "warm")).await.unwrap().await.unwrap();
    b.pause();
    // delivery.timeout.ms: a record the broker never acknowledges fails in time.
    let started = Instant::now();
    let d = p.send(ProducerRecord::new("frozen", "stuck")).await.unwrap();
    let err = d.await.expect_err("no acknowledgement from a frozen broker");
    assert!(err.is_retriable(), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10), "bounded by delivery.timeout.ms: {:?}", started.elapsed());
    // buffer.memory: once it is full, send waits max.block.ms and then refuses.
    let value = vec![7u8; 100_000];
    let mut refused = None;
    for _ in 0..40 {
        match p.send(ProducerRecord::new("frozen", value.clone())).await {
            Ok(_) => {}
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let refused = refused.expect("back-pressure once buffer.memory is used up");
    assert!(refused.message().contains("buffer.memory"), "{refused}");
    b.resume();
    // The producer recovers: a new record is delivered.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match p.send(ProducerRecord::new("frozen", "after")).await {
            Ok(d) => match d.await {
                Ok(_) => break,
                Err(e) if Instant::now() < deadline => eprintln!("retrying after: {e}"),
                Err(e) => panic!("{e}"),
            },
            Err(e) if Instant::now() < deadline => {
                eprintln!("waiting for buffer space: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
}
