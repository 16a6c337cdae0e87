//! Sluice's transaction liveness beyond KIP-939 (issue 21, items 2 and 3), with Sluice's Rust
//! client against a broker process: a two-phase-commit transaction keeps its short timeout until
//! the producer marks it prepared (then it waits for its outcome however long), and a producer
//! that heartbeats keeps a transaction alive only while it does — a silent one is aborted after
//! `transaction.liveness.missed.heartbeats` intervals even though its timeout is long.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sluice_client::{Admin, ClientConfig, Producer, ProducerRecord};
use sluice_tests::Broker;
use std::time::Duration;

fn broker() -> Broker {
    Broker::start_with(&[
        "--transaction-two-phase-commit-enable",
        "true",
        "--transaction-max-timeout-ms",
        "120000",
        "--transaction-abort-timed-out-transaction-cleanup-interval-ms",
        "100",
        "--transaction-liveness-missed-heartbeats",
        "3",
    ])
}

fn config(b: &Broker, id: &str, extra: &[(&str, &str)]) -> ClientConfig {
    let mut c = ClientConfig::new().set("bootstrap.servers", b.bootstrap()).set("transactional.id", id);
    for (k, v) in extra {
        c = c.set(k, v);
    }
    c
}

/// A producer with a transaction open on `t` (one record sent and acknowledged).
async fn open_txn(b: &Broker, id: &str, extra: &[(&str, &str)]) -> Producer {
    let p = Producer::new(&config(b, id, extra)).await.unwrap();
    p.init_transactions().await.unwrap();
    p.begin_transaction().await.unwrap();
    p.send(ProducerRecord::new("t", format!("{id}-0"))).await.unwrap().await.unwrap();
    p
}

async fn state(admin: &Admin, id: &str) -> (String, Option<i64>) {
    let d = admin.describe_transaction(id).await.unwrap();
    (d.state, d.prepared_ms)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unprepared_two_phase_transaction_keeps_its_timeout_and_a_prepared_one_waits() {
    let b = broker();
    let admin = Admin::new(&ClientConfig::new().set("bootstrap.servers", b.bootstrap())).unwrap();
    admin.create_topic("t", 1, 1, &[]).await.unwrap();
    let two_phase = [("transaction.two.phase.commit.enable", "true"), ("transaction.timeout.ms", "1000")];
    let forgotten = open_txn(&b, "forgotten", &two_phase).await;
    let prepared = open_txn(&b, "prepared", &two_phase).await;
    let state_of_prepared = prepared.prepare_transaction().await.unwrap();
    let (st, at) = state(&admin, "prepared").await;
    assert_eq!(st, "Ongoing");
    assert!(at.is_some(), "DescribeTransactions says it is prepared");
    tokio::time::sleep(Duration::from_millis(2500)).await; // past the 1 s timeout
    assert_eq!(state(&admin, "forgotten").await, ("CompleteAbort".to_string(), None), "unprepared: timed out");
    assert_eq!(state(&admin, "prepared").await.0, "Ongoing", "prepared: waits for its outcome");
    drop(forgotten);
    drop(prepared);
    let next = Producer::new(&config(&b, "prepared", &two_phase)).await.unwrap();
    assert_eq!(next.init_transactions_keep_prepared().await.unwrap(), Some(state_of_prepared));
    assert!(next.complete_transaction(state_of_prepared).await.unwrap());
    let again = Producer::new(&config(&b, "forgotten", &two_phase)).await.unwrap();
    assert_eq!(again.init_transactions_keep_prepared().await.unwrap(), None, "nothing left to keep");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_producer_loses_its_transaction_after_missed_heartbeats_despite_a_long_timeout() {
    let b = broker();
    let admin = Admin::new(&ClientConfig::new().set("bootstrap.servers", b.bootstrap())).unwrap();
    admin.create_topic("t", 1, 1, &[]).await.unwrap();
    let long = ("transaction.timeout.ms", "60000");
    let beating = open_txn(&b, "beating", &[long, ("transaction.heartbeat.interval.ms", "200")]).await;
    let quiet = open_txn(&b, "quiet", &[long]).await;
    // 3 missed intervals are 600 ms: alive for 2 s while the heartbeats flow
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(state(&admin, "beating").await.0, "Ongoing", "heartbeats keep it");
    drop(beating); // the producer goes silent (as if its process died)
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(state(&admin, "beating").await.0, "CompleteAbort", "aborted after 3 missed heartbeats");
    assert_eq!(state(&admin, "quiet").await.0, "Ongoing", "no heartbeats asked: only its 60 s timeout applies");
    quiet.commit_transaction().await.unwrap();
}
