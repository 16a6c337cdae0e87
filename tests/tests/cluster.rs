//! Cluster mode, first slice (issue 10 in progress): three broker processes form the metadata
//! quorum (openraft) from one command each; every broker lists all three and the same
//! controller and cluster id; producer-id blocks come from the quorum, so no id is handed out
//! twice across brokers, a kill -9 of the controller, a re-election and a restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use kafka_protocol::messages::{ApiKey, InitProducerIdRequest, RequestKind, ResponseKind};
use sluice_client::{Admin, ClientConfig, Connection};
use sluice_tests::{free_port, Broker};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

struct Cluster {
    brokers: Vec<Broker>,
}

impl Cluster {
    fn start() -> Cluster {
        let raft: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let voters =
            raft.iter().enumerate().map(|(i, p)| format!("{}@127.0.0.1:{p}", i + 1)).collect::<Vec<_>>().join(",");
        let brokers = (0..3)
            .map(|i| {
                let id = (i + 1).to_string();
                Broker::start_on(free_port(), &["--node-id", &id, "--controller-quorum-voters", &voters])
            })
            .collect();
        Cluster { brokers }
    }
}

async fn describe(b: &Broker) -> Option<sluice_client::admin::ClusterDescription> {
    let a = Admin::new(&ClientConfig::new().set("bootstrap.servers", b.bootstrap()).set("request.timeout.ms", 2000))
        .ok()?;
    tokio::time::timeout(Duration::from_secs(3), a.describe_cluster()).await.ok()?.ok()
}

/// Wait until every running broker lists `n` brokers and they agree on a controller (not
/// `not`); returns it and how long it took.
async fn agreed_controller(c: &Cluster, running: &[usize], n: usize, not: i32) -> (i32, Duration) {
    let t0 = Instant::now();
    loop {
        let mut seen = BTreeSet::new();
        let mut ok = true;
        for &i in running {
            match describe(&c.brokers[i]).await {
                Some(d) if d.brokers.len() == n && d.controller_id > 0 && d.controller_id != not => {
                    seen.insert((d.controller_id, d.cluster_id));
                }
                _ => ok = false,
            }
        }
        if ok && seen.len() == 1 {
            return (seen.into_iter().next().unwrap().0, t0.elapsed());
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "no agreement on a controller: {seen:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn producer_id(b: &Broker) -> i64 {
    let conn = Connection::connect(&b.bootstrap(), "cluster-test", 1).await.unwrap();
    let mut r = InitProducerIdRequest::default();
    r.transaction_timeout_ms = 60_000;
    r.transactional_id = None;
    r.producer_id = kafka_protocol::messages::ProducerId(-1);
    r.producer_epoch = -1;
    match conn.call(ApiKey::InitProducerId, 4, RequestKind::InitProducerId(r)).await.unwrap() {
        ResponseKind::InitProducerId(r) => {
            assert_eq!(r.error_code, 0, "InitProducerId from {}", b.bootstrap());
            r.producer_id.0
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_brokers_form_a_quorum_that_survives_losing_its_controller() {
    let mut c = Cluster::start();
    let (controller, took) = agreed_controller(&c, &[0, 1, 2], 3, -1).await;
    eprintln!("controller {controller} after {took:?}");

    // producer ids from every broker: distinct, each broker in its own block
    let mut ids = Vec::new();
    for b in &c.brokers {
        for _ in 0..3 {
            ids.push(producer_id(b).await);
        }
    }
    let distinct: BTreeSet<i64> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), ids.len(), "{ids:?}");
    let blocks: BTreeSet<i64> = ids.iter().map(|id| id / 1000).collect();
    assert_eq!(blocks.len(), 3, "one block per broker: {ids:?}");

    // kill -9 the controller: the other two elect a new one
    let dead = usize::try_from(controller - 1).unwrap();
    c.brokers[dead].kill9();
    let running: Vec<usize> = (0..3).filter(|i| *i != dead).collect();
    let (next, took) = agreed_controller(&c, &running, 3, controller).await;
    eprintln!("new controller {next} after {took:?}");
    assert!(took < Duration::from_secs(10), "re-election took {took:?}");
    for &i in &running {
        ids.push(producer_id(&c.brokers[i]).await);
    }

    // the old controller restarts and rejoins; its in-memory block is gone, and the block it
    // gets now was never handed out before
    let before = *ids.iter().max().unwrap();
    c.brokers[dead].spawn();
    agreed_controller(&c, &[0, 1, 2], 3, -1).await;
    let fresh = producer_id(&c.brokers[dead]).await;
    assert!(fresh > before, "restarted broker got {fresh}, at or below {before}");
    ids.push(fresh);
    let distinct: BTreeSet<i64> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), ids.len(), "a producer id was handed out twice: {ids:?}");

    // a minority cannot hand out ids: with two brokers down, the last one refuses
    let others: Vec<usize> = (0..3).filter(|i| *i != dead).collect();
    c.brokers[others[0]].kill9();
    c.brokers[dead].kill9();
    let last = &c.brokers[others[1]];
    // drain the last broker's current block first, then it must ask the quorum
    let conn = Connection::connect(&last.bootstrap(), "cluster-test", 1).await.unwrap();
    let mut refused = false;
    for _ in 0..1100 {
        let mut r = InitProducerIdRequest::default();
        r.transaction_timeout_ms = 60_000;
        r.transactional_id = None;
        r.producer_id = kafka_protocol::messages::ProducerId(-1);
        r.producer_epoch = -1;
        let ResponseKind::InitProducerId(r) =
            conn.call(ApiKey::InitProducerId, 4, RequestKind::InitProducerId(r)).await.unwrap()
        else {
            panic!()
        };
        if r.error_code != 0 {
            refused = true;
            break;
        }
        assert!(!distinct.contains(&r.producer_id.0), "id {} handed out twice", r.producer_id.0);
    }
    assert!(refused, "a broker cut off from the quorum kept handing out producer ids past its block");
}
