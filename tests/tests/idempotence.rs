//! Promise 2 under faults: through the fault-injecting proxy, responses are lost after the broker
//! acted on the request, so librdkafka retries; every partition must still hold each record
//! exactly once, in send order — also when the broker is killed -9 between a send and its retry.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use common::{assert_exactly_once_in_order, behind_proxy, send_retrying};
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;
use sluice_tests::proxy::Proxy;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

mod common;

#[derive(Clone, Default)]
struct Counts {
    ok: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
}
impl ClientContext for Counts {}
impl ProducerContext for Counts {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
        match r {
            Ok(_) => self.ok.fetch_add(1, Ordering::Relaxed),
            Err(_) => self.failed.fetch_add(1, Ordering::Relaxed),
        };
    }
}

fn idempotent_producer(proxy: &Proxy, counts: &Counts) -> BaseProducer<Counts> {
    ClientConfig::new()
        .set("bootstrap.servers", format!("127.0.0.1:{}", proxy.port))
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("max.in.flight.requests.per.connection", "5")
        .set("linger.ms", "5")
        .set("batch.num.messages", "200")
        .set("message.timeout.ms", "180000")
        .set("retry.backoff.ms", "20")
        .set("reconnect.backoff.ms", "20")
        .set("reconnect.backoff.max.ms", "200")
        .create_with_context(counts.clone())
        .unwrap()
}

fn send_all(p: &BaseProducer<Counts>, topic: &str, range: std::ops::Range<usize>, partitions: usize) {
    for i in range {
        let v = format!("{:07}", i);
        send_retrying(p, BaseRecord::<(), _>::to(topic).partition((i % partitions) as i32).payload(&v));
    }
}

#[test]
fn lost_responses_never_duplicate_or_reorder() {
    let (proxy, b) = behind_proxy(7);
    let counts = Counts::default();
    let p = idempotent_producer(&proxy, &counts);
    // warm up without faults (metadata, producer id, topic auto-created with 4 partitions)
    send_all(&p, "eos", 0..4, 4);
    p.flush(Duration::from_secs(30)).unwrap();
    proxy.faults.drop_response_per_mille.store(15, Ordering::Relaxed);
    let total = 100_000;
    send_all(&p, "eos", 4..total, 4);
    p.flush(Duration::from_secs(170)).expect("every record delivered");
    proxy.faults.drop_response_per_mille.store(0, Ordering::Relaxed);
    assert_eq!(counts.failed.load(Ordering::Relaxed), 0, "no delivery failures");
    assert_eq!(counts.ok.load(Ordering::Relaxed), total as u64);
    let dropped = proxy.faults.dropped.load(Ordering::Relaxed);
    assert!(dropped >= 5, "the proxy must actually have dropped responses ({dropped})");
    eprintln!("{dropped} responses dropped");
    assert_exactly_once_in_order(&b.bootstrap(), "eos", total, 4);
    // the offline audit agrees: no duplicate or gap in any producer's sequences
    let mut b = b;
    assert_eq!(b.stop(), Some(0));
    for p in 0..4 {
        let out = std::process::Command::new(sluice_tests::sluicectl_bin())
            .arg("verify")
            .arg(b.data_dir.join(format!("eos-{p}")))
            .output()
            .unwrap();
        assert!(out.status.success(), "verify eos-{p}: {}", String::from_utf8_lossy(&out.stdout));
    }
}

#[test]
fn kill9_between_a_send_and_its_retry_is_still_exactly_once() {
    let (proxy, mut b) = behind_proxy(11);
    let counts = Counts::default();
    let p = idempotent_producer(&proxy, &counts);
    send_all(&p, "eos9", 0..4, 4);
    p.flush(Duration::from_secs(30)).unwrap();
    // every response is lost: the broker writes the batches, the client keeps retrying them
    proxy.faults.drop_response_per_mille.store(1000, Ordering::Relaxed);
    send_all(&p, "eos9", 4..2000, 4);
    for _ in 0..50 {
        p.poll(Duration::from_millis(20));
    }
    assert!(proxy.faults.dropped.load(Ordering::Relaxed) > 0);
    b.kill9();
    b.spawn();
    proxy.faults.drop_response_per_mille.store(0, Ordering::Relaxed);
    p.flush(Duration::from_secs(120)).expect("every record delivered after the restart");
    assert_eq!(counts.failed.load(Ordering::Relaxed), 0);
    assert_exactly_once_in_order(&b.bootstrap(), "eos9", 2000, 4);
}
