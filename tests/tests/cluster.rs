//! Cluster mode, first slice (issue 10 in progress): three broker processes form the metadata
//! quorum (openraft) from one command each; every broker lists all three and the same
//! controller and cluster id; producer-id blocks come from the quorum, so no id is handed out
//! twice across brokers, a kill -9 of the controller, a re-election and a restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use kafka_protocol::messages::{ApiKey, InitProducerIdRequest, RequestKind, ResponseKind};
use sluice_client::{Admin, ClientConfig, Connection};
use sluice_tests::proxy::Links;
use sluice_tests::{free_port, Broker};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

struct Cluster {
    brokers: Vec<Broker>,
    voters: String,
}

/// Every cluster test also checks that no replica judged a write unlike its leader (decision
/// 0045, step 2: the leader's verdict travels with the write, and each apply compares).
impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let differed: Vec<String> = self
            .brokers
            .iter()
            .flat_map(|b| {
                let log = std::fs::read_to_string(b.data_dir.with_extension("log")).unwrap_or_default();
                log.lines()
                    .filter(|l| l.contains("replication verdict differs"))
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect();
        assert!(differed.is_empty(), "a replica judged a write unlike its leader: {differed:#?}");
    }
}

impl Cluster {
    fn start() -> Cluster {
        Self::start_with(&[])
    }

    /// Three brokers, each also given `extra` flags.
    fn start_with(extra: &[&str]) -> Cluster {
        let raft: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let voters =
            raft.iter().enumerate().map(|(i, p)| format!("{}@127.0.0.1:{p}", i + 1)).collect::<Vec<_>>().join(",");
        let brokers = (0..3)
            .map(|i| {
                let id = (i + 1).to_string();
                let mut args = vec!["--node-id", &id, "--controller-quorum-voters", &voters];
                args.extend_from_slice(extra);
                Broker::start_on(free_port(), &args)
            })
            .collect();
        Cluster { brokers, voters }
    }

    /// Three brokers, each with a Prometheus endpoint: the cluster and the endpoints' ports.
    fn start_with_metrics() -> (Cluster, Vec<u16>) {
        Self::start_with_metrics_and(&[])
    }

    /// [`Cluster::start_with_metrics`], each broker also given `extra` flags.
    fn start_with_metrics_and(extra: &[&str]) -> (Cluster, Vec<u16>) {
        Self::start_with_metrics_logging(extra, None)
    }

    /// [`Cluster::start_with_metrics_and`], the brokers logging with `log_filter`.
    fn start_with_metrics_logging(extra: &[&str], log_filter: Option<&str>) -> (Cluster, Vec<u16>) {
        let raft: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let voters =
            raft.iter().enumerate().map(|(i, p)| format!("{}@127.0.0.1:{p}", i + 1)).collect::<Vec<_>>().join(",");
        let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let brokers = (0..3)
            .map(|i| {
                let (id, metrics) = ((i + 1).to_string(), format!("127.0.0.1:{}", ports[i]));
                let mut args =
                    vec!["--node-id", &id, "--controller-quorum-voters", &voters, "--metrics-listener", &metrics];
                args.extend_from_slice(extra);
                Broker::start_on_logging(free_port(), &args, log_filter)
            })
            .collect();
        (Cluster { brokers, voters }, ports)
    }

    /// Three brokers whose Raft traffic runs through a proxy per link, so a test can cut the
    /// network between brokers (see [`Links`]).
    fn start_linked(seed: u64) -> (Cluster, Links) {
        let links = Links::new(3, seed).unwrap();
        let brokers = (0..3)
            .map(|i| {
                let (id, voters) = ((i + 1).to_string(), links.voters_for(i));
                Broker::start_on(free_port(), &["--node-id", &id, "--controller-quorum-voters", &voters])
            })
            .collect();
        (Cluster { brokers, voters: links.voters_for(0) }, links)
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

/// One idempotent InitProducerId: its error code and producer id.
async fn init_producer_id(conn: &Connection) -> (i16, i64) {
    let mut r = InitProducerIdRequest::default();
    r.transaction_timeout_ms = 60_000;
    r.transactional_id = None;
    r.producer_id = kafka_protocol::messages::ProducerId(-1);
    r.producer_epoch = -1;
    match conn.call(ApiKey::InitProducerId, 4, RequestKind::InitProducerId(r)).await.unwrap() {
        ResponseKind::InitProducerId(r) => (r.error_code, r.producer_id.0),
        other => panic!("{other:?}"),
    }
}

/// A producer id from `b`, retrying COORDINATOR_LOAD_IN_PROGRESS (no block from the quorum
/// yet) as clients do.
async fn producer_id(b: &Broker) -> i64 {
    let conn = Connection::connect(&b.bootstrap(), "cluster-test", 1).await.unwrap();
    let t0 = Instant::now();
    loop {
        match init_producer_id(&conn).await {
            (0, id) => return id,
            (14, _) if t0.elapsed() < Duration::from_secs(30) => tokio::time::sleep(Duration::from_millis(50)).await,
            (code, _) => panic!("InitProducerId from {}: error {code}", b.bootstrap()),
        }
    }
}

/// Producer-id blocks come from the quorum without a request ever waiting for it: many
/// connections asking InitProducerId at once get distinct ids, and once the quorum is gone
/// (two brokers killed) every request is still answered at once — ids from the block in hand,
/// then COORDINATOR_LOAD_IN_PROGRESS — and the broker stays responsive. A handler that waited
/// for the quorum on a worker thread, holding the allocator's lock, once left the other
/// workers blocked on that lock and the runtime with none to run the quorum: the broker
/// stopped answering (franz-go's TestTxnEtl on three brokers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_producer_id_requests_never_wait_for_the_quorum() {
    let mut c = Cluster::start();
    agreed_controller(&c, &[0, 1, 2], 3, -1).await;
    // (connections, calls each, stop at the first refusal)
    async fn ask_all(b: &Broker, calls: usize, until_refused: bool) -> (Vec<i64>, usize) {
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let conn = Connection::connect(&b.bootstrap(), "cluster-test", 1).await.unwrap();
            tasks.push(tokio::spawn(async move {
                let (mut ids, mut refused) = (Vec::new(), 0);
                for n in 0..calls {
                    let call = init_producer_id(&conn);
                    let Ok((code, id)) = tokio::time::timeout(Duration::from_secs(5), call).await else {
                        panic!("InitProducerId unanswered for 5 s (call {n})");
                    };
                    match code {
                        0 => ids.push(id),
                        14 if until_refused => {
                            refused += 1;
                            break;
                        }
                        14 => tokio::time::sleep(Duration::from_millis(20)).await,
                        _ => panic!("error {code}"),
                    }
                }
                (ids, refused)
            }));
        }
        let (mut ids, mut refused) = (Vec::new(), 0);
        for t in tasks {
            let (i, r) = t.await.unwrap();
            ids.extend(i);
            refused += r;
        }
        (ids, refused)
    }
    let b = 0;
    let (mut ids, _) = ask_all(&c.brokers[b], 20, false).await;
    // the quorum goes: the block in hand is used up, then every request is refused at once
    c.brokers[1].kill9();
    c.brokers[2].kill9();
    let (more, refused) = ask_all(&c.brokers[b], 200, true).await;
    assert!(refused > 0, "a broker without a quorum handed out {} more ids", more.len());
    assert!(describe(&c.brokers[b]).await.is_some(), "the broker still answers");
    ids.extend(more);
    let distinct: BTreeSet<i64> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), ids.len(), "a producer id was handed out twice");
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
    let (leader_now, _) = agreed_controller(&c, &[0, 1, 2], 3, -1).await;
    let fresh = producer_id(&c.brokers[dead]).await;
    assert!(fresh > before, "restarted broker got {fresh}, at or below {before}");
    ids.push(fresh);
    let distinct: BTreeSet<i64> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), ids.len(), "a producer id was handed out twice: {ids:?}");

    // a minority cannot hand out ids: with the two followers down, the leader left alone (it
    // still believes it leads) refuses once its block is spent instead of waiting for ever
    let survivor = usize::try_from(leader_now - 1).unwrap();
    for i in (0..3).filter(|i| *i != survivor) {
        c.brokers[i].kill9();
    }
    let last = &c.brokers[survivor];
    // drain the last broker's current block first, then it must ask the quorum
    let conn = Connection::connect(&last.bootstrap(), "cluster-test", 1).await.unwrap();
    let mut refused = false;
    for _ in 0..1100 {
        let mut r = InitProducerIdRequest::default();
        r.transaction_timeout_ms = 60_000;
        r.transactional_id = None;
        r.producer_id = kafka_protocol::messages::ProducerId(-1);
        r.producer_epoch = -1;
        // a refusal may also be the broker giving up on the quorum after its write timeout
        let call = conn.call(ApiKey::InitProducerId, 4, RequestKind::InitProducerId(r));
        let Ok(answer) = tokio::time::timeout(Duration::from_secs(60), call).await else {
            panic!("InitProducerId without a quorum hung for 60 s");
        };
        let ResponseKind::InitProducerId(r) = answer.unwrap() else { panic!() };
        if r.error_code != 0 {
            refused = true;
            break;
        }
        assert!(!distinct.contains(&r.producer_id.0), "id {} handed out twice", r.producer_id.0);
    }
    assert!(refused, "a broker cut off from the quorum kept handing out producer ids past its block");
}

/// Topics live in the quorum: created on one broker, their partitions are spread over all
/// three, librdkafka producing through one broker and consuming in a group through another
/// routes itself to each partition's leader; a broker that does not lead a partition answers
/// NOT_LEADER_OR_FOLLOWER; a deletion reaches every broker; a restarted broker keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_spread_over_the_brokers_and_clients_route_themselves() {
    use rdkafka::consumer::{BaseConsumer, Consumer as _};
    use rdkafka::message::Message;
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer as _, ThreadedProducer};

    let mut c = Cluster::start();
    agreed_controller(&c, &[0, 1, 2], 3, -1).await;
    let admin = Admin::new(&ClientConfig::new().set("bootstrap.servers", c.brokers[1].bootstrap())).unwrap();
    admin.create_topic("spread", 6, -1, &[("retention.ms", "86400000")]).await.unwrap();
    let e = admin.create_topic("spread", 6, -1, &[]).await.unwrap_err();
    assert!(e.to_string().contains("TopicAlreadyExists"), "{e}");

    // every broker reports the same leaders (once each partition's Raft group elected one),
    // spread over all three
    let t0 = Instant::now();
    let leaders_seen = loop {
        let mut leaders_seen = Vec::new();
        for b in &c.brokers {
            let a = Admin::new(&ClientConfig::new().set("bootstrap.servers", b.bootstrap())).unwrap();
            let d = a.describe_topic("spread").await.unwrap();
            let leaders: Vec<i32> = d.partitions.iter().map(|p| p.leader).collect();
            leaders_seen.push(leaders);
            assert_eq!(
                a.describe_topic_configs("spread").await.unwrap().get("retention.ms").map(String::as_str),
                Some("86400000")
            );
        }
        if leaders_seen.windows(2).all(|w| w[0] == w[1]) && leaders_seen[0].iter().all(|l| *l > 0) {
            break leaders_seen;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "brokers disagree on leaders: {leaders_seen:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let distinct: BTreeSet<i32> = leaders_seen[0].iter().copied().collect();
    assert_eq!(distinct, BTreeSet::from([1, 2, 3]), "{leaders_seen:?}");
    // sluicectl cluster describe shows the same leaders and replicas
    let out = std::process::Command::new(sluice_tests::sluicectl_bin())
        .args(["--bootstrap-server", &c.brokers[2].bootstrap(), "--output", "json", "cluster", "describe"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["brokers"].as_array().unwrap().len(), 3);
    let described: Vec<i64> = j["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["topic"] == "spread")
        .map(|p| {
            // three replicas (the cluster's default replication factor), the leader among them
            let replicas = p["replicas"].as_array().unwrap();
            assert_eq!(replicas.len(), 3, "{p}");
            assert!(replicas.contains(&p["leader"]), "{p}");
            p["leader"].as_i64().unwrap()
        })
        .collect();
    assert_eq!(described, leaders_seen[0].iter().map(|l| i64::from(*l)).collect::<Vec<_>>());

    // librdkafka: produce through broker 1, consume in a group through broker 3
    let bootstrap1 = c.brokers[0].bootstrap();
    let bootstrap3 = c.brokers[2].bootstrap();
    let produced = tokio::task::spawn_blocking(move || {
        let p: ThreadedProducer<DefaultProducerContext> =
            rdkafka::ClientConfig::new().set("bootstrap.servers", &bootstrap1).set("linger.ms", "5").create().unwrap();
        for i in 0..3000 {
            let (k, v) = (format!("k{i}"), format!("v{i}"));
            p.send(BaseRecord::to("spread").key(&k).payload(&v)).map_err(|(e, _)| e).unwrap();
        }
        p.flush(Duration::from_secs(30)).unwrap();
        3000
    })
    .await
    .unwrap();
    let got = tokio::task::spawn_blocking(move || {
        let cons: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &bootstrap3)
            .set("group.id", "spread-readers")
            .set("auto.offset.reset", "earliest")
            .create()
            .unwrap();
        cons.subscribe(&["spread"]).unwrap();
        let mut seen = BTreeSet::new();
        let mut partitions = BTreeSet::new();
        let deadline = Instant::now() + Duration::from_secs(40);
        while seen.len() < 3000 && Instant::now() < deadline {
            if let Some(Ok(m)) = cons.poll(Duration::from_millis(100)) {
                seen.insert(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
                partitions.insert(m.partition());
            }
        }
        (seen.len(), partitions.len())
    })
    .await
    .unwrap();
    assert_eq!(got, (produced, 6), "every record, from every partition");

    // a broker that does not lead partition 0 refuses to write it
    let leader0 = leaders_seen[0][0];
    let other = if leader0 == 1 { 1 } else { 0 }; // index of a broker (node id index + 1) not leading it
    let conn = Connection::connect(&c.brokers[other].bootstrap(), "cluster-test", 1).await.unwrap();
    let batch = sluice_protocol::batch::BatchBuilder::default()
        .build(&[sluice_protocol::batch::NewRecord { timestamp: 1, ..Default::default() }])
        .unwrap();
    let mut pd = kafka_protocol::messages::produce_request::PartitionProduceData::default();
    pd.index = 0;
    pd.records = Some(batch);
    let mut td = kafka_protocol::messages::produce_request::TopicProduceData::default();
    td.name = kafka_protocol::messages::TopicName(kafka_protocol::protocol::StrBytes::from_static_str("spread"));
    td.partition_data = vec![pd];
    let mut req = kafka_protocol::messages::ProduceRequest::default();
    req.acks = -1;
    req.timeout_ms = 5000;
    req.topic_data = vec![td];
    let ResponseKind::Produce(r) = conn.call(ApiKey::Produce, 9, RequestKind::Produce(req)).await.unwrap() else {
        panic!()
    };
    assert_eq!(r.responses[0].partition_responses[0].error_code, 6, "NOT_LEADER_OR_FOLLOWER");

    // a broker restart keeps the topic; a deletion reaches every broker
    c.brokers[2].kill9();
    c.brokers[2].spawn();
    agreed_controller(&c, &[0, 1, 2], 3, -1).await;
    let a3 = Admin::new(&ClientConfig::new().set("bootstrap.servers", c.brokers[2].bootstrap())).unwrap();
    assert_eq!(a3.describe_topic("spread").await.unwrap().partitions.len(), 6);
    a3.delete_topic("spread").await.unwrap();
    for b in &c.brokers {
        let deadline = Instant::now() + Duration::from_secs(10);
        while b.data_dir.join("spread-0").exists() {
            assert!(Instant::now() < deadline, "{} still has the deleted topic", b.bootstrap());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let a = Admin::new(&ClientConfig::new().set("bootstrap.servers", b.bootstrap())).unwrap();
        assert!(!a.list_topics().await.unwrap().contains(&"spread".to_string()));
    }
}

/// A librdkafka transaction over partitions led by all three brokers: the coordinator (one of
/// them) writes its markers to the other leaders with WriteTxnMarkers; read_committed sees the
/// committed transaction whole and nothing of the aborted one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_span_partitions_led_by_different_brokers() {
    use rdkafka::consumer::{BaseConsumer, Consumer as _};
    use rdkafka::message::Message;
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer as _, ThreadedProducer};
    use rdkafka::{Offset, TopicPartitionList};

    let (c, ports) = Cluster::start_with_metrics();
    agreed_controller(&c, &[0, 1, 2], 3, -1).await;
    let admin = Admin::new(&ClientConfig::new().set("bootstrap.servers", c.brokers[0].bootstrap())).unwrap();
    admin.create_topic("ledger", 6, -1, &[]).await.unwrap();
    let leaders: BTreeSet<i32> =
        admin.describe_topic("ledger").await.unwrap().partitions.iter().map(|p| p.leader).collect();
    assert_eq!(leaders.len(), 3);
    let bootstrap = c.brokers[1].bootstrap();
    let b2 = bootstrap.clone();
    tokio::task::spawn_blocking(move || {
        let p: ThreadedProducer<DefaultProducerContext> = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &b2)
            .set("transactional.id", "cross-broker")
            .create()
            .unwrap();
        p.init_transactions(Duration::from_secs(20)).unwrap();
        for (round, commit) in [("a", true), ("b", false), ("c", true)] {
            p.begin_transaction().unwrap();
            for part in 0..6 {
                for i in 0..5 {
                    let v = format!("{round}-{part}-{i}");
                    p.send(BaseRecord::<(), _>::to("ledger").partition(part).payload(&v)).map_err(|(e, _)| e).unwrap();
                }
            }
            p.flush(Duration::from_secs(20)).unwrap();
            if commit {
                p.commit_transaction(Duration::from_secs(20)).unwrap();
            } else {
                p.abort_transaction(Duration::from_secs(20)).unwrap();
            }
        }
    })
    .await
    .unwrap();
    let read = |isolation: &'static str, want: usize| {
        let b = bootstrap.clone();
        tokio::task::spawn_blocking(move || {
            let cons: BaseConsumer = rdkafka::ClientConfig::new()
                .set("bootstrap.servers", &b)
                .set("group.id", format!("check-{isolation}"))
                .set("isolation.level", isolation)
                .set("enable.auto.commit", "false")
                .create()
                .unwrap();
            let mut tpl = TopicPartitionList::new();
            for p in 0..6 {
                tpl.add_partition_offset("ledger", p, Offset::Beginning).unwrap();
            }
            cons.assign(&tpl).unwrap();
            let mut got = BTreeSet::new();
            let deadline = Instant::now() + Duration::from_secs(20);
            while got.len() < want && Instant::now() < deadline {
                if let Some(Ok(m)) = cons.poll(Duration::from_millis(100)) {
                    got.insert(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
                }
            }
            let until = Instant::now() + Duration::from_millis(700);
            while Instant::now() < until {
                if let Some(Ok(m)) = cons.poll(Duration::from_millis(100)) {
                    got.insert(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
                }
            }
            got
        })
    };
    let committed = read("read_committed", 60).await.unwrap();
    assert_eq!(committed.len(), 60, "two committed transactions of 30");
    assert!(committed.iter().all(|v| !v.starts_with("b-")), "an aborted record was read_committed");
    let all = read("read_uncommitted", 90).await.unwrap();
    assert_eq!(all.len(), 90);
    // every batch and marker was judged by its leader before it was proposed, and every
    // replica did what the leader judged (decision 0045, step 2)
    let verdicts = |outcome: &str| -> f64 {
        ports.iter().map(|p| ports_series(*p, "sluice_replication_verdicts_total", &[outcome])).sum()
    };
    // 18 batches (6 partitions, 3 transactions) and 18 markers, on each of three replicas
    // (with one log per replica the leader stores what it judged: no verdict to compare)
    if !one_log_per_replica() {
        let matched = verdicts("outcome=\"matched\"");
        assert!(matched >= 3.0 * 36.0, "writes judged and applied as judged: {matched}");
    }
    assert_eq!(verdicts("outcome=\"differed\""), 0.0);
}

/// The leader of `topic`/0 as librdkafka's metadata reports it (-1: none yet).
fn rdkafka_leader(bootstrap: &str, topic: &str) -> i32 {
    use rdkafka::consumer::{BaseConsumer, Consumer as _};
    let c: BaseConsumer = rdkafka::ClientConfig::new().set("bootstrap.servers", bootstrap).create().unwrap();
    match c.fetch_metadata(Some(topic), Duration::from_secs(3)) {
        Ok(m) => m.topics().first().and_then(|t| t.partitions().first()).map_or(-1, |p| p.leader()),
        Err(_) => -1,
    }
}

/// The partition's leader once metadata names one (within 30 s).
async fn known_leader(bootstrap: &str, topic: &str) -> i32 {
    let t0 = Instant::now();
    loop {
        let leader = rdkafka_leader(bootstrap, topic);
        if leader > 0 {
            return leader;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "{topic}: no leader");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Replication (one Raft group per partition): three replicas; librdkafka produces with
/// idempotence and acks=all while the partition's leader is killed with SIGKILL. A new leader
/// takes over within seconds, every acknowledged record is there exactly once, in order, and
/// the killed broker comes back as a follower.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicated_partition_keeps_every_acknowledged_record_when_its_leader_is_killed() {
    a_killed_leader_loses_no_acknowledged_record(&[]).await;
}

/// The same with one log per replica (`replication.log.format=single`, decision 0045 step 3):
/// the partition's Raft log is its segment log — each batch written once per replica, Raft's
/// own entries control batches the consumer reads across — and no broker keeps a Raft log of
/// its own for the partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_log_per_replica_keeps_every_acknowledged_record_when_its_leader_is_killed() {
    let c = a_killed_leader_loses_no_acknowledged_record(&["--replication-log-format", "single"]).await;
    for b in &c.brokers {
        assert!(b.data_dir.join("replicated-0").join("raft.terms").exists(), "the log carries Raft terms");
        let replicas = b.data_dir.join("__cluster").join("replicas");
        let groups: Vec<_> = std::fs::read_dir(&replicas)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().ends_with("-0")))
            .filter(|p| p.join("raft-state.json").exists())
            .collect();
        assert!(!groups.is_empty(), "a partition group kept in its segment log");
        for g in groups {
            for e in std::fs::read_dir(&g).unwrap() {
                let name = e.unwrap().file_name().to_string_lossy().into_owned();
                assert!(!name.starts_with("raft-log"), "{}: a Raft log of its own: {name}", g.display());
            }
        }
    }
}

/// Numbers polled by `cons` (its records' values): until `want` arrived (60 s at most), then 2 s
/// more, so nothing beyond them (a duplicate arriving late) goes unseen.
fn poll_numbers(cons: &rdkafka::consumer::BaseConsumer, want: usize) -> Vec<usize> {
    use rdkafka::message::Message;
    let mut seen: Vec<usize> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline && seen.len() < want {
        if let Some(Ok(m)) = cons.poll(Duration::from_millis(200)) {
            seen.push(std::str::from_utf8(m.payload().unwrap()).unwrap().parse().unwrap());
        }
    }
    let quiet = Instant::now() + Duration::from_secs(2);
    while Instant::now() < quiet {
        if let Some(Ok(m)) = cons.poll(Duration::from_millis(200)) {
            seen.push(std::str::from_utf8(m.payload().unwrap()).unwrap().parse().unwrap());
        }
    }
    seen
}

/// Read `topic` from the start with a read_committed librdkafka consumer (a group of its own):
/// every record in `acked` (numbers as values) is there, none twice, in order. What was read.
fn read_back_once_in_order(bootstrap: &str, topic: &str, acked: &[usize]) -> Vec<usize> {
    use rdkafka::consumer::{BaseConsumer, Consumer as _};
    let cons: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("{topic}-check"))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    cons.subscribe(&[topic]).unwrap();
    let seen = poll_numbers(&cons, acked.len());
    let unique: BTreeSet<usize> = seen.iter().copied().collect();
    assert_eq!(unique.len(), seen.len(), "duplicates in the partition");
    let missing: Vec<&usize> = acked.iter().filter(|v| !unique.contains(v)).collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged records missing (of {}; {} read), first {:?}",
        missing.len(),
        acked.len(),
        seen.len(),
        missing.first()
    );
    let mut sorted = seen.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, seen, "records out of order");
    seen
}

/// Kill -9 a replicated partition's leader under an idempotent librdkafka producer (brokers
/// given `extra` flags): the cluster, once every check passed.
async fn a_killed_leader_loses_no_acknowledged_record(extra: &[&str]) -> Cluster {
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let mut c = Cluster::start_with(extra);
    agreed_controller(&c, &[0, 1, 2], 3, -1).await;
    let bootstrap = c.brokers.iter().map(|b| b.bootstrap()).collect::<Vec<_>>().join(",");
    let admin = Admin::new(&ClientConfig::new().set("bootstrap.servers", c.brokers[0].bootstrap())).unwrap();
    // replication factor -1: the cluster default, three replicas on three brokers
    admin.create_topic("replicated", 1, -1, &[]).await.unwrap();
    let t0 = Instant::now();
    let leader = loop {
        let l = rdkafka_leader(&bootstrap, "replicated");
        if l > 0 {
            break l;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "no leader elected for the partition");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "2")
        .set("message.timeout.ms", "60000")
        .create()
        .unwrap();
    const N: usize = 3000;
    let mut acked = Vec::new();
    let mut acked_at = Vec::new();
    let mut killed_at = None;
    for chunk in 0..N / 100 {
        // enqueued in order here (librdkafka keeps it per partition), awaited together
        let mut sends = tokio::task::JoinSet::new();
        for i in chunk * 100..(chunk + 1) * 100 {
            let value = i.to_string();
            let delivery = producer.send_result(FutureRecord::<(), _>::to("replicated").payload(&value)).ok().unwrap();
            sends.spawn(async move { (i, matches!(delivery.await, Ok(Ok(_))), Instant::now()) });
        }
        let mut done: Vec<(usize, bool, Instant)> = sends.join_all().await;
        done.sort_by_key(|d| d.0);
        for (i, ok, at) in done {
            if ok {
                acked.push(i);
                acked_at.push(at);
            }
        }
        if chunk == 10 {
            let victim = usize::try_from(leader - 1).unwrap();
            c.brokers[victim].kill9();
            killed_at = Some(Instant::now());
        }
    }
    let killed_at = killed_at.unwrap();
    let first_after = acked_at.iter().filter(|t| **t > killed_at).min().copied().expect("acks after the kill");
    let failover = first_after - killed_at;
    eprintln!("failover: first acknowledgement {failover:?} after the leader was killed");
    assert!(failover < Duration::from_secs(20), "{failover:?}");
    assert!(acked.len() >= N * 9 / 10, "only {} of {N} acknowledged", acked.len());
    let new_leader = rdkafka_leader(&bootstrap, "replicated");
    assert!(new_leader > 0 && new_leader != leader, "leader {leader} → {new_leader}");
    // the killed broker rejoins as a follower
    let victim = usize::try_from(leader - 1).unwrap();
    c.brokers[victim].spawn();
    // read everything back: each acknowledged value exactly once, in the order sent
    read_back_once_in_order(&bootstrap, "replicated", &acked);

    // the restarted broker catches up: `cluster describe` shows every replica at lag 0
    let describe = |b: &Broker| -> serde_json::Value {
        let out = std::process::Command::new(sluice_tests::sluicectl_bin())
            .args(["--bootstrap-server", &b.bootstrap(), "--output", "json", "cluster", "describe"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        j["partitions"].as_array().unwrap().iter().find(|p| p["topic"] == "replicated").unwrap().clone()
    };
    let t0 = Instant::now();
    let p = loop {
        let p = describe(&c.brokers[0]);
        let lags: Vec<&serde_json::Value> = p["lag"].as_object().unwrap().values().collect();
        if lags.len() == 3 && lags.iter().all(|l| l.as_i64() == Some(0)) {
            break p;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "replicas did not catch up: {p}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // preferred leader election: leadership goes back to the first replica
    let preferred = p["replicas"][0].as_i64().unwrap() as i32;
    let out = std::process::Command::new(sluice_tests::sluicectl_bin())
        .args(["--bootstrap-server", &c.brokers[0].bootstrap(), "cluster", "elect-leaders", "--topic", "replicated"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let t0 = Instant::now();
    while rdkafka_leader(&bootstrap, "replicated") != preferred {
        assert!(t0.elapsed() < Duration::from_secs(20), "broker {preferred} did not take the lead");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("leader moved back to broker {preferred}: {}", String::from_utf8_lossy(&out.stdout).trim());
    // and the partition still takes writes (acks=all) through its new leader
    let d = producer.send(FutureRecord::<(), _>::to("replicated").payload("after"), Duration::from_secs(30)).await;
    assert!(d.is_ok(), "{d:?}");
    c
}

/// Once the three brokers agree on a controller: create `topic` with one partition on all three
/// and wait until it has a leader; the leader's index in `c.brokers`.
async fn replicated_topic(c: &Cluster, topic: &str) -> usize {
    agreed_controller(c, &[0, 1, 2], 3, -1).await;
    let admin = Admin::new(&ClientConfig::new().set("bootstrap.servers", c.brokers[0].bootstrap())).unwrap();
    admin.create_topic(topic, 1, 3, &[]).await.unwrap();
    leader_of(c, topic).await
}

/// Produce one record to `topic`/0 at `b` with acks=all and the given timeout; the error code.
async fn produce_code(b: &Broker, topic: &'static str, timeout_ms: i32) -> i16 {
    produce_code_at(b.bootstrap(), topic, timeout_ms).await
}

/// [`produce_code`] to the broker at `bootstrap`.
async fn produce_code_at(bootstrap: String, topic: &'static str, timeout_ms: i32) -> i16 {
    let record = sluice_protocol::batch::NewRecord { timestamp: 1, ..Default::default() };
    produce_batch_at(bootstrap, topic, record, timeout_ms).await
}

/// Produce a batch of the one `record` to `topic`/0 at `b` with acks=all; the error code.
async fn produce_batch(
    b: &Broker,
    topic: &'static str,
    record: sluice_protocol::batch::NewRecord,
    timeout_ms: i32,
) -> i16 {
    produce_batch_at(b.bootstrap(), topic, record, timeout_ms).await
}

/// [`produce_batch`] to the broker at `bootstrap`.
async fn produce_batch_at(
    bootstrap: String,
    topic: &'static str,
    record: sluice_protocol::batch::NewRecord,
    timeout_ms: i32,
) -> i16 {
    produce_records_at(bootstrap, topic, &[record], timeout_ms).await
}

/// Produce one batch of `records` to `topic`/0 at the broker at `bootstrap` with acks=all and
/// the given timeout; the error code (-1: no answer).
async fn produce_records_at(
    bootstrap: String,
    topic: &'static str,
    records: &[sluice_protocol::batch::NewRecord],
    timeout_ms: i32,
) -> i16 {
    let Ok(conn) = Connection::connect(&bootstrap, "cluster-test", 1).await else { return -1 };
    let batch = sluice_protocol::batch::BatchBuilder::default().build(records).unwrap();
    let mut pd = kafka_protocol::messages::produce_request::PartitionProduceData::default();
    pd.index = 0;
    pd.records = Some(batch);
    let mut td = kafka_protocol::messages::produce_request::TopicProduceData::default();
    td.name = kafka_protocol::messages::TopicName(kafka_protocol::protocol::StrBytes::from_static_str(topic));
    td.partition_data = vec![pd];
    let mut req = kafka_protocol::messages::ProduceRequest::default();
    req.acks = -1;
    req.timeout_ms = timeout_ms;
    req.topic_data = vec![td];
    match conn.call(ApiKey::Produce, 9, RequestKind::Produce(req)).await {
        Ok(ResponseKind::Produce(r)) => r.responses[0].partition_responses[0].error_code,
        _ => -1,
    }
}

/// Produce one acks=all record to `topic`/0 at each of `among` in turn until one acknowledges
/// (within 30 s); its index. `when` names the moment for the failure message.
async fn acknowledged_by_one_of(c: &Cluster, among: &[usize], topic: &'static str, when: &str) -> usize {
    let t0 = Instant::now();
    loop {
        for &i in among {
            if produce_code(&c.brokers[i], topic, 3000).await == 0 {
                return i;
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "no acknowledgement {when}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// acks=all needs a majority of the partition's replicas: with one follower frozen (SIGSTOP)
/// the leader still acknowledges; with both frozen — the leader alone, a minority — it
/// cannot (REQUEST_TIMED_OUT), and acknowledges again once they are back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_without_a_majority_of_replicas_cannot_acknowledge() {
    let c = Cluster::start();
    let leader = replicated_topic(&c, "majority").await;
    let followers: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    assert_eq!(produce_code(&c.brokers[leader], "majority", 5000).await, 0);
    c.brokers[followers[0]].pause();
    assert_eq!(produce_code(&c.brokers[leader], "majority", 5000).await, 0, "leader + one follower = majority");
    c.brokers[followers[1]].pause();
    let started = Instant::now();
    let code = produce_code(&c.brokers[leader], "majority", 2000).await;
    assert_ne!(code, 0, "a leader alone acknowledged acks=all");
    assert!(started.elapsed() < Duration::from_secs(10), "the refusal is bounded by the request timeout");
    c.brokers[followers[0]].resume();
    c.brokers[followers[1]].resume();
    // the leader may have changed while it was cut off: ask every broker
    acknowledged_by_one_of(&c, &[0, 1, 2], "majority", "after the followers came back").await;
}

/// The log end of partition 0 of `topic` in broker `b`'s own replica (ListOffsets as replica
/// -2, which any replica answers); -1 if it cannot tell.
async fn replica_end(b: &Broker, topic: &str) -> i64 {
    replica_offset(b, topic, -1).await
}

/// ListOffsets for `timestamp` (-1 latest, -2 earliest) of partition 0 of `topic` in broker
/// `b`'s own replica; -1 if it cannot tell.
async fn replica_offset(b: &Broker, topic: &str, timestamp: i64) -> i64 {
    match list_offsets_at(b, topic, timestamp, -2).await {
        (0, offset, _) => offset,
        _ => -1,
    }
}

/// ListOffsets for the end of `topic`/0 at `b`, as a consumer asks it (read_uncommitted): the
/// error code, the offset and the leader epoch (-1 when the broker cannot be reached).
async fn list_end(b: &Broker, topic: &str) -> (i16, i64, i32) {
    list_offsets_at(b, topic, -1, -1).await
}

/// ListOffsets (v4) of `topic`/0 at `b` for `timestamp`, asked as `replica_id` (-2: debugging,
/// any replica's own log; -1: a consumer): the error code, the offset and the leader epoch
/// ((-1, -1, -1) when the broker cannot be reached).
async fn list_offsets_at(b: &Broker, topic: &str, timestamp: i64, replica_id: i32) -> (i16, i64, i32) {
    let Ok(conn) = Connection::connect(&b.bootstrap(), "cluster-test", 1).await else { return (-1, -1, -1) };
    let mut p = kafka_protocol::messages::list_offsets_request::ListOffsetsPartition::default();
    p.partition_index = 0;
    p.timestamp = timestamp;
    let mut t = kafka_protocol::messages::list_offsets_request::ListOffsetsTopic::default();
    t.name = kafka_protocol::messages::TopicName(kafka_protocol::protocol::StrBytes::from_string(topic.into()));
    t.partitions = vec![p];
    let mut r = kafka_protocol::messages::ListOffsetsRequest::default();
    r.replica_id = kafka_protocol::messages::BrokerId(replica_id);
    r.topics = vec![t];
    match conn.call(ApiKey::ListOffsets, 4, RequestKind::ListOffsets(r)).await {
        Ok(ResponseKind::ListOffsets(r)) => {
            let p = &r.topics[0].partitions[0];
            (p.error_code, p.offset, p.leader_epoch)
        }
        _ => (-1, -1, -1),
    }
}

/// Kafka's KIP-207 on a partition leader just elected (decision 0052): until it has applied an
/// entry of its own term its high watermark can be below what its predecessor acknowledged (the
/// commit it learned as a follower), and a client comparing its position with that end takes
/// records for lost (franz-go resets to the start). So it answers ListOffsets for the end with
/// OFFSET_NOT_AVAILABLE (78, retriable) until then, and every end it answers covers every
/// acknowledged record, with the new leader's term as its leader epoch (Kafka answers the
/// current one). The failpoint holds each new term's first entry 3 s before it is
/// applied, so the window is seen every time (without the guard the leader answers at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_just_elected_answers_the_end_only_once_it_has_settled() {
    let mut c = Cluster::start_with(&["--testing-failpoints", "replica.delay_new_term"]);
    let leader = replicated_topic(&c, "settling").await;
    for i in 0..10 {
        let t0 = Instant::now();
        while produce_code(&c.brokers[leader], "settling", 5000).await != 0 {
            assert!(t0.elapsed() < Duration::from_secs(10), "record {i} was not acknowledged");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // at once: the followers may not know yet that the last records are committed
    c.brokers[leader].kill9();
    let others: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    let (mut unsettled, mut answered) = (0, None);
    let t0 = Instant::now();
    while answered.is_none() {
        assert!(t0.elapsed() < Duration::from_secs(30), "no new leader answered the end");
        for &i in &others {
            match list_end(&c.brokers[i], "settling").await {
                (0, end, epoch) => {
                    assert!(end >= 10, "broker {} answered the end {end}: below 10 acknowledged records", i + 1);
                    // (Kafka answers the end with the current leader epoch: the Raft term)
                    assert!(epoch >= 2, "broker {} answered the end with leader epoch {epoch}, not its term", i + 1);
                    answered = Some(end);
                }
                (78, _, _) => unsettled += 1,
                _ => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        unsettled > 0,
        "the new leader answered the end ({answered:?}) without ever answering OFFSET_NOT_AVAILABLE"
    );
}

/// A network partition *between brokers* (proxies on every Raft link; clients still reach every
/// broker): the partition's leader, cut off from both followers — a minority of one — cannot
/// acknowledge acks=all; the two others elect a new leader that does; once the network heals
/// the old leader rejoins as a follower and every replica holds exactly the acknowledged
/// records (the write the old leader took but could not commit is gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_other_brokers_cannot_acknowledge_and_the_majority_goes_on() {
    let (c, links) = Cluster::start_linked(11);
    let leader = replicated_topic(&c, "cut").await;
    let mut acked = 0i64;
    for _ in 0..5 {
        assert_eq!(produce_code(&c.brokers[leader], "cut", 5000).await, 0);
        acked += 1;
    }

    links.isolate(leader);
    let started = Instant::now();
    let code = produce_code(&c.brokers[leader], "cut", 2000).await;
    assert_ne!(code, 0, "a leader cut off from its followers acknowledged acks=all");
    assert!(started.elapsed() < Duration::from_secs(10), "the refusal is bounded by the request timeout");
    // the majority side elects a leader among itself and takes writes
    let others: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    let t0 = Instant::now();
    let new_leader = acknowledged_by_one_of(&c, &others, "cut", "from the majority side").await;
    acked += 1;
    eprintln!("broker {} cut off; broker {} leads after {:?}", leader + 1, new_leader + 1, t0.elapsed());
    for _ in 0..4 {
        assert_eq!(produce_code(&c.brokers[new_leader], "cut", 5000).await, 0);
        acked += 1;
    }
    // still cut off, the old leader acknowledges nothing
    assert_ne!(produce_code(&c.brokers[leader], "cut", 1000).await, 0, "the cut-off broker acknowledged");

    links.heal();
    let t0 = Instant::now();
    loop {
        let mut ends = Vec::new();
        for b in &c.brokers {
            ends.push(replica_end(b, "cut").await);
        }
        // (the log ends agree; with one log per replica Raft's entries take offsets too, so
        // the records are counted as well)
        let records: Vec<i64> = c.brokers.iter().map(|b| records_in(b, "cut")).collect();
        let same = ends.iter().all(|e| *e == ends[0]);
        if same && records.iter().all(|r| *r == acked) && (one_log_per_replica() || ends[0] == acked) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "replicas did not converge on the {acked} acknowledged records: ends {ends:?}, records {records:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // and the partition takes writes again
    acknowledged_by_one_of(&c, &[0, 1, 2], "cut", "after healing").await;
}

fn ctl_json(b: &Broker, args: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(sluice_tests::sluicectl_bin())
        .args(["--bootstrap-server", &b.bootstrap(), "--output", "json"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "sluicectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Wait (up to 60 s) until broker `b` lists no reassignment in progress; `failure` otherwise.
async fn reassignments_done(b: &Broker, failure: &str) {
    let t0 = Instant::now();
    loop {
        let r = ctl_json(b, &["cluster", "reassignments"]);
        if r["reassignments"].as_array().unwrap().is_empty() {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "{failure}: {r}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The leader of `topic`/0 as broker `b` reports it in Metadata (-1: none or no answer).
async fn metadata_leader(b: &Broker, topic: &str) -> i32 {
    let Ok(conn) = Connection::connect(&b.bootstrap(), "cluster-test", 1).await else { return -1 };
    let mut t = kafka_protocol::messages::metadata_request::MetadataRequestTopic::default();
    t.name = Some(kafka_protocol::messages::TopicName(kafka_protocol::protocol::StrBytes::from_string(topic.into())));
    let mut r = kafka_protocol::messages::MetadataRequest::default();
    r.topics = Some(vec![t]);
    match conn.call(ApiKey::Metadata, 9, RequestKind::Metadata(r)).await {
        Ok(ResponseKind::Metadata(m)) => {
            m.topics.first().and_then(|t| t.partitions.first()).map(|p| p.leader_id.0).unwrap_or(-1)
        }
        _ => -1,
    }
}

/// A broker that is not a replica of a partition still reports its actual leader: each new
/// leader of a partition's Raft group publishes itself to the metadata quorum. The partition is
/// shrunk from three replicas to {another, the leader} — the leader keeps leading but is no
/// longer the preferred replica — and the dropped broker reports the leader, not the preferred.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_outside_a_partitions_replicas_reports_its_actual_leader() {
    let c = Cluster::start();
    let leader = i32::try_from(replicated_topic(&c, "led").await + 1).unwrap();
    let other = (1..=3).find(|b| *b != leader).unwrap();
    let outsider = (1..=3).find(|b| *b != leader && *b != other).unwrap();
    let replicas = format!("{other},{leader}");
    ctl_json(&c.brokers[0], &["cluster", "reassign", "--topic", "led", "--partition", "0", "--replicas", &replicas]);
    reassignments_done(&c.brokers[0], "the move did not finish").await;
    let outside = &c.brokers[usize::try_from(outsider - 1).unwrap()];
    let t0 = Instant::now();
    loop {
        // the leader as the replicas see it (it may have changed during the move)
        let actual = metadata_leader(&c.brokers[usize::try_from(other - 1).unwrap()], "led").await;
        let seen = metadata_leader(outside, "led").await;
        if actual > 0 && seen == actual {
            eprintln!("preferred {other}, leader {actual}, broker {outsider} (not a replica) reports {seen}");
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "broker {outsider} reports leader {seen}, the replicas {actual} (preferred {other})"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Moving a partition's replicas (kafka-reassign-partitions' API): a partition on two brokers
/// moves to another pair while librdkafka keeps producing with acks=all; the new replica
/// catches up through the partition's Raft group, the old one leaves, and after the broker that
/// was dropped is killed every acknowledged record is still there, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_moves_to_other_brokers_without_losing_a_record() {
    use rdkafka::consumer::{BaseConsumer, Consumer as _};
    use rdkafka::message::Message;
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let mut c = Cluster::start();
    agreed_controller(&c, &[0, 1, 2], 3, -1).await;
    let admin = Admin::new(&ClientConfig::new().set("bootstrap.servers", c.brokers[0].bootstrap())).unwrap();
    admin.create_topic("moving", 1, 2, &[]).await.unwrap();
    let bootstrap = c.brokers.iter().map(|b| b.bootstrap()).collect::<Vec<_>>().join(",");
    let t0 = Instant::now();
    while rdkafka_leader(&bootstrap, "moving") <= 0 {
        assert!(t0.elapsed() < Duration::from_secs(30), "no leader elected");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let d = ctl_json(&c.brokers[0], &["cluster", "describe"]);
    let before: Vec<i64> = d["partitions"].as_array().unwrap().iter().find(|p| p["topic"] == "moving").unwrap()
        ["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_i64().unwrap())
        .collect();
    assert_eq!(before.len(), 2);
    let outsider = (1..=3).find(|b| !before.contains(b)).unwrap();
    let (dropped, kept) = (before[0], before[1]);
    let after = [kept, outsider];
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("message.timeout.ms", "60000")
        .create()
        .unwrap();
    let mut acked = BTreeSet::new();
    let send = |range: std::ops::Range<usize>| {
        let deliveries: Vec<_> = range
            .map(|i| {
                (i, producer.send_result(FutureRecord::<(), _>::to("moving").payload(&i.to_string())).ok().unwrap())
            })
            .collect();
        deliveries
    };
    for (i, d) in send(0..500) {
        if matches!(d.await, Ok(Ok(_))) {
            acked.insert(i);
        }
    }
    let replicas = format!("{},{}", after[0], after[1]);
    ctl_json(&c.brokers[2], &["cluster", "reassign", "--topic", "moving", "--partition", "0", "--replicas", &replicas]);
    // writes carry on during the move
    let during = send(500..1000);
    reassignments_done(&c.brokers[0], "the move did not finish").await;
    for (i, d) in during {
        if matches!(d.await, Ok(Ok(_))) {
            acked.insert(i);
        }
    }
    eprintln!("moved {before:?} → {after:?} in {:?}", t0.elapsed());
    let d = ctl_json(&c.brokers[0], &["cluster", "describe"]);
    let p = d["partitions"].as_array().unwrap().iter().find(|p| p["topic"] == "moving").unwrap().clone();
    assert_eq!(p["replicas"], serde_json::json!(after), "{p}");
    // the broker left out goes away; the new pair holds everything
    c.brokers[usize::try_from(dropped - 1).unwrap()].kill9();
    for (i, d) in send(1000..1100) {
        if matches!(d.await, Ok(Ok(_))) {
            acked.insert(i);
        }
    }
    assert!(acked.len() >= 1000, "only {} acknowledged", acked.len());
    eprintln!("produced after the kill at {:?}", t0.elapsed());
    // assigned, not subscribed: a group's coordinator may be the killed broker (coordinators
    // do not fail over yet)
    let cons: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", "moving-check")
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset("moving", 0, rdkafka::Offset::Beginning).unwrap();
    cons.assign(&tpl).unwrap();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline && seen.len() < acked.len() {
        if let Some(Ok(m)) = cons.poll(Duration::from_millis(200)) {
            seen.push(std::str::from_utf8(m.payload().unwrap()).unwrap().parse::<usize>().unwrap());
        }
    }
    let unique: BTreeSet<usize> = seen.iter().copied().collect();
    assert_eq!(unique.len(), seen.len(), "duplicates");
    assert!(acked.is_subset(&unique), "missing: {:?}", acked.difference(&unique).take(10).collect::<Vec<_>>());
}

/// The broker coordinating transactional id `id` (FindCoordinator through `b`; -1 if none).
async fn txn_coordinator(b: &Broker, id: &str) -> i32 {
    find_coordinator(b, id, 1).await
}

/// The broker coordinating transactional id `id`, waiting up to 30 s for one to be elected.
async fn wait_txn_coordinator(b: &Broker, id: &str) -> i32 {
    let t0 = Instant::now();
    loop {
        let node = txn_coordinator(b, id).await;
        if node > 0 {
            return node;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "no transaction coordinator for {id}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every value librdkafka's read_committed consumer reads from `topic`'s three partitions from
/// the start: until `want` arrived (or 60 s passed), then `quiet` more to catch any extra.
fn read_committed(bootstrap: &str, topic: &str, want: usize, quiet: Duration) -> Vec<String> {
    use rdkafka::consumer::{BaseConsumer, Consumer as _};
    use rdkafka::message::Message;
    let cons: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("{topic}-check"))
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..3 {
        tpl.add_partition_offset(topic, p, rdkafka::Offset::Beginning).unwrap();
    }
    cons.assign(&tpl).unwrap();
    let mut seen: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut quiet_until: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if quiet_until.is_some_and(|q| now >= q) || (quiet_until.is_none() && now >= deadline) {
            return seen;
        }
        if quiet_until.is_none() && seen.len() >= want {
            quiet_until = Some(now + quiet);
        }
        if let Some(Ok(m)) = cons.poll(Duration::from_millis(200)) {
            seen.push(String::from_utf8_lossy(m.payload().unwrap()).into_owned());
        }
    }
}

/// FindCoordinator for a group (0) or transactional id (1) through `b`; -1 if none.
async fn find_coordinator(b: &Broker, key: &str, key_type: i8) -> i32 {
    let Ok(conn) = Connection::connect(&b.bootstrap(), "cluster-test", 1).await else { return -1 };
    let mut r = kafka_protocol::messages::FindCoordinatorRequest::default();
    r.key = kafka_protocol::protocol::StrBytes::from_string(key.to_string());
    r.key_type = key_type;
    match conn.call(ApiKey::FindCoordinator, 3, RequestKind::FindCoordinator(r)).await {
        Ok(ResponseKind::FindCoordinator(r)) if r.error_code == 0 => r.node_id.0,
        _ => -1,
    }
}

/// The transaction coordinator fails over: its log is replicated (one Raft group per
/// transaction-log partition), so when the coordinator's broker is killed with SIGKILL another
/// replica takes over with the same producer id and epoch, finishes what was decided, and the
/// librdkafka transactional producer carries on. read_committed sees every committed
/// transaction whole and nothing of an aborted one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transaction_coordinator_fails_over_to_another_broker() {
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer as _, ThreadedProducer};
    let mut c = Cluster::start();
    agreed_controller(&c, &[0, 1, 2], 3, -1).await;
    let admin = Admin::new(&ClientConfig::new().set("bootstrap.servers", c.brokers[0].bootstrap())).unwrap();
    admin.create_topic("ledger2", 3, 3, &[]).await.unwrap();
    let bootstrap = c.brokers.iter().map(|b| b.bootstrap()).collect::<Vec<_>>().join(",");
    let coordinator = wait_txn_coordinator(&c.brokers[0], "failover-txn").await;
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let b2 = bootstrap.clone();
    let producer = tokio::task::spawn_blocking(move || {
        let p: ThreadedProducer<DefaultProducerContext> = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &b2)
            .set("transactional.id", "failover-txn")
            .set("transaction.timeout.ms", "60000")
            .set("message.timeout.ms", "60000")
            .create()
            .unwrap();
        p.init_transactions(Duration::from_secs(30)).unwrap();
        let (mut committed, mut aborted) = (Vec::new(), Vec::new());
        for n in 0..40 {
            if n == 10 {
                let _ = tx.send(()); // the test kills the coordinator now
            }
            p.begin_transaction().unwrap();
            for i in 0..10 {
                let v = format!("t{n}-{i}");
                p.send(BaseRecord::<(), _>::to("ledger2").partition(i % 3).payload(&v)).map_err(|(e, _)| e).unwrap();
            }
            let mut outcome = p.commit_transaction(Duration::from_secs(30));
            // a commit cut off by the failover is retried (librdkafka: retriable) or aborted
            for _ in 0..5 {
                match &outcome {
                    Err(rdkafka::error::KafkaError::Transaction(e)) if e.is_retriable() => {
                        std::thread::sleep(Duration::from_millis(500));
                        outcome = p.commit_transaction(Duration::from_secs(30));
                    }
                    _ => break,
                }
            }
            match outcome {
                Ok(()) => committed.push(n),
                Err(rdkafka::error::KafkaError::Transaction(e)) if e.txn_requires_abort() => {
                    p.abort_transaction(Duration::from_secs(30)).unwrap();
                    aborted.push(n);
                }
                Err(e) => panic!("transaction {n}: {e}"),
            }
        }
        (committed, aborted)
    });
    rx.recv().unwrap();
    let victim = usize::try_from(coordinator - 1).unwrap();
    c.brokers[victim].kill9();
    let killed = Instant::now();
    let (committed, aborted) = producer.await.unwrap();
    eprintln!("{} committed, {} aborted; {:?} since the kill", committed.len(), aborted.len(), killed.elapsed());
    assert!(committed.len() >= 35, "committed {committed:?}, aborted {aborted:?}");
    let new = txn_coordinator(&c.brokers[(victim + 1) % 3], "failover-txn").await;
    assert!(new > 0 && new != coordinator, "coordinator {coordinator} → {new}");
    // read_committed: committed transactions whole, exactly once; aborted ones invisible
    let want = committed.len() * 10;
    let seen = read_committed(&bootstrap, "ledger2", want, Duration::from_secs(3));
    let unique: BTreeSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "duplicates in read_committed");
    for n in &committed {
        for i in 0..10 {
            assert!(unique.contains(&format!("t{n}-{i}")), "committed t{n}-{i} missing");
        }
    }
    for n in &aborted {
        assert!(!seen.iter().any(|v| v.starts_with(&format!("t{n}-"))), "aborted transaction {n} visible");
    }
    assert_eq!(seen.len(), want, "only committed records");
}

/// KIP-939 in cluster mode: a transaction prepared for two-phase commit outlives the kill -9 of
/// its coordinator's broker and `transaction.max.timeout.ms`; the coordinator that takes over
/// (from the replicated transaction log) hands it to a new producer instance that keeps it
/// (`KeepPreparedTxn`) and commits it, and librdkafka's read_committed consumer sees every
/// record exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_transaction_survives_its_coordinators_kill_and_a_new_instance_commits_it() {
    use sluice_client::{Producer, ProducerRecord};
    let mut c = Cluster::start_with(&[
        "--transaction-two-phase-commit-enable",
        "true",
        "--transaction-max-timeout-ms",
        "6000",
        "--transaction-abort-timed-out-transaction-cleanup-interval-ms",
        "200",
    ]);
    agreed_controller(&c, &[0, 1, 2], 3, -1).await;
    let admin = Admin::new(&ClientConfig::new().set("bootstrap.servers", c.brokers[0].bootstrap())).unwrap();
    admin.create_topic("prepared", 3, 3, &[]).await.unwrap();
    let coordinator = wait_txn_coordinator(&c.brokers[0], "2pc-job").await;
    let victim = usize::try_from(coordinator - 1).unwrap();
    let config = |bootstrap: String| {
        ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("transactional.id", "2pc-job")
            .set("transaction.two.phase.commit.enable", "true")
            .set("transaction.timeout.ms", "5000")
    };
    let all = c.brokers.iter().map(|b| b.bootstrap()).collect::<Vec<_>>().join(",");
    let job = Producer::new(&config(all.clone())).await.unwrap();
    job.init_transactions().await.unwrap();
    job.begin_transaction().await.unwrap();
    for i in 0..30 {
        job.send(ProducerRecord::new("prepared", format!("r{i}")).partition(i % 3)).await.unwrap();
    }
    let state = job.prepare_transaction().await.unwrap();
    drop(job); // the job dies with its transaction prepared
    c.brokers[victim].kill9();
    // past transaction.max.timeout.ms (the unprepared-phase timeout of 5 s leaves room for a
    // slow RF-3 produce before the prepare)
    tokio::time::sleep(Duration::from_secs(8)).await;
    let live = (0..3).filter(|i| *i != victim).map(|i| c.brokers[i].bootstrap()).collect::<Vec<_>>().join(",");
    let recovered = Producer::new(&config(live.clone())).await.unwrap();
    let ongoing = recovered.init_transactions_keep_prepared().await.unwrap();
    assert_eq!(ongoing, Some(state), "the new coordinator kept the prepared transaction");
    let new = txn_coordinator(&c.brokers[(victim + 1) % 3], "2pc-job").await;
    assert!(new > 0 && new != coordinator, "coordinator {coordinator} -> {new}");
    assert!(recovered.complete_transaction(state).await.unwrap(), "committed");
    let mut seen = read_committed(&live, "prepared", 30, Duration::from_secs(2));
    seen.sort();
    let mut want: Vec<String> = (0..30).map(|i| format!("r{i}")).collect();
    want.sort();
    assert_eq!(seen, want, "every prepared record exactly once");
}

/// The replicated transaction-state log is compacted on every replica (each folds its own
/// copy), and the coordinator that takes over after a kill -9 reloads the compacted log with
/// the id's state intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replicated_transaction_log_is_compacted_on_every_replica_and_fails_over() {
    use sluice_tests::raw;
    let mut c = Cluster::start_with(&[
        "--transaction-state-log-num-partitions",
        "1",
        "--transaction-abort-timed-out-transaction-cleanup-interval-ms",
        "200",
    ]);
    agreed_controller(&c, &[0, 1, 2], 3, -1).await;
    let txn = "compact-cluster";
    let (coordinator, conn, pid, epoch) = init_at_coordinator(&c, txn).await;
    let victim = usize::try_from(coordinator - 1).unwrap();
    // 1,500 empty aborts: 3,000 records (~1 MB uncompacted) in the shard's log on each replica
    let epoch = raw::abort_empty(&conn, txn, pid, epoch, 1_500).await.unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    for (i, b) in c.brokers.iter().enumerate() {
        let bytes = sluice_tests::segment_file_bytes(&b.data_dir.join("__transaction_state-0"));
        assert!(bytes > 0 && bytes <= 400_000, "broker {}: {bytes} bytes of transaction log", i + 1);
    }
    drop(conn);
    c.brokers[victim].kill9();
    let other = (victim + 1) % 3;
    carries_on_after_aborts(&c, other, txn, coordinator, pid, epoch).await;
}

/// The group coordinator fails over: the offsets log is replicated, so after the coordinator's
/// broker is killed with SIGKILL another replica coordinates the group with its committed
/// offsets: a new member resumes exactly where the first one committed (nothing read twice,
/// nothing skipped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_group_coordinator_fails_over_with_the_committed_offsets() {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer as _};
    use rdkafka::message::Message;
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer as _, ThreadedProducer};
    let mut c = Cluster::start();
    agreed_controller(&c, &[0, 1, 2], 3, -1).await;
    let admin = Admin::new(&ClientConfig::new().set("bootstrap.servers", c.brokers[0].bootstrap())).unwrap();
    admin.create_topic("grp", 3, 3, &[]).await.unwrap();
    let bootstrap = c.brokers.iter().map(|b| b.bootstrap()).collect::<Vec<_>>().join(",");
    let b2 = bootstrap.clone();
    tokio::task::spawn_blocking(move || {
        let p: ThreadedProducer<DefaultProducerContext> =
            rdkafka::ClientConfig::new().set("bootstrap.servers", &b2).set("acks", "all").create().unwrap();
        for i in 0..300 {
            let v = i.to_string();
            p.send(BaseRecord::<(), _>::to("grp").partition(i % 3).payload(&v)).map_err(|(e, _)| e).unwrap();
        }
        p.flush(Duration::from_secs(30)).unwrap();
    })
    .await
    .unwrap();
    let t0 = Instant::now();
    let coordinator = loop {
        let id = find_coordinator(&c.brokers[0], "failover-group", 0).await;
        if id > 0 {
            break id;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "no group coordinator");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let consumer = |bootstrap: String| -> BaseConsumer {
        let cons: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("group.id", "failover-group")
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .set("session.timeout.ms", "10000")
            .create()
            .unwrap();
        cons.subscribe(&["grp"]).unwrap();
        cons
    };
    let b1 = bootstrap.clone();
    let first: Vec<usize> = tokio::task::spawn_blocking(move || {
        let cons = consumer(b1);
        let mut seen = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while seen.len() < 150 && Instant::now() < deadline {
            if let Some(Ok(m)) = cons.poll(Duration::from_millis(200)) {
                seen.push(std::str::from_utf8(m.payload().unwrap()).unwrap().parse().unwrap());
            }
        }
        cons.commit_consumer_state(CommitMode::Sync).unwrap();
        seen
    })
    .await
    .unwrap();
    assert_eq!(first.len(), 150);
    c.brokers[usize::try_from(coordinator - 1).unwrap()].kill9();
    let b3 = bootstrap.clone();
    let second: Vec<usize> = tokio::task::spawn_blocking(move || {
        let cons = consumer(b3);
        poll_numbers(&cons, 150)
    })
    .await
    .unwrap();
    let new = find_coordinator(&c.brokers[usize::try_from(coordinator % 3).unwrap()], "failover-group", 0).await;
    assert!(new > 0 && new != coordinator, "coordinator {coordinator} → {new}");
    let a: BTreeSet<usize> = first.iter().copied().collect();
    let b: BTreeSet<usize> = second.iter().copied().collect();
    assert_eq!(b.len(), second.len(), "the second member read something twice");
    assert!(a.is_disjoint(&b), "read again after the failover: {:?}", a.intersection(&b).take(10).collect::<Vec<_>>());
    assert_eq!(a.len() + b.len(), 300, "first {} + second {}", a.len(), b.len());
}

/// A fourth broker joins the running cluster (`controller.listener`: its own Raft address), takes
/// a partition's replica through a reassignment and serves it; after its replica is moved away
/// it is removed (`sluicectl cluster remove-broker`, UnregisterBroker) and no longer listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_joins_a_running_cluster_and_leaves_it() {
    let mut c = Cluster::start();
    agreed_controller(&c, &[0, 1, 2], 3, -1).await;
    let raft4 = format!("127.0.0.1:{}", free_port());
    c.brokers.push(Broker::start_on(
        free_port(),
        &["--node-id", "4", "--controller-quorum-voters", &c.voters, "--controller-listener", &raft4],
    ));
    let (controller, took) = agreed_controller(&c, &[0, 1, 2, 3], 4, -1).await;
    eprintln!("broker 4 listed by all four after {took:?} (controller {controller})");
    let admin = Admin::new(&ClientConfig::new().set("bootstrap.servers", c.brokers[3].bootstrap())).unwrap();
    admin.create_topic("joined", 1, 3, &[]).await.unwrap();
    let bootstrap = c.brokers.iter().map(|b| b.bootstrap()).collect::<Vec<_>>().join(",");
    let t0 = Instant::now();
    while rdkafka_leader(&bootstrap, "joined") <= 0 {
        assert!(t0.elapsed() < Duration::from_secs(30), "no leader");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for _ in 0..20 {
        // (a metadata request that times out on a loaded machine answers -1: asked again)
        let leader = known_leader(&bootstrap, "joined").await;
        let code = produce_code(&c.brokers[usize::try_from(leader - 1).unwrap()], "joined", 5000).await;
        assert_eq!(code, 0);
    }
    // move the partition onto broker 4 (first: its preferred leader) and two of the others
    ctl_json(&c.brokers[0], &["cluster", "reassign", "--topic", "joined", "--partition", "0", "--replicas", "4,1,2"]);
    reassignments_done(&c.brokers[0], "the move onto broker 4 did not finish").await;
    ctl_json(&c.brokers[0], &["cluster", "elect-leaders", "--topic", "joined"]);
    let t0 = Instant::now();
    while rdkafka_leader(&bootstrap, "joined") != 4 {
        assert!(t0.elapsed() < Duration::from_secs(30), "broker 4 does not lead its partition");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(produce_code(&c.brokers[3], "joined", 5000).await, 0, "broker 4 takes writes as leader");
    let d = ctl_json(&c.brokers[3], &["cluster", "describe"]);
    let p = d["partitions"].as_array().unwrap().iter().find(|p| p["topic"] == "joined").unwrap().clone();
    assert_eq!(p["lag"]["4"], 0, "{p}");
    // a broker holding replicas, or a configured voter, is not removed
    let held = std::process::Command::new(sluice_tests::sluicectl_bin())
        .args(["--bootstrap-server", &c.brokers[0].bootstrap(), "cluster", "remove-broker", "--id", "4"])
        .output()
        .unwrap();
    assert!(!held.status.success() && String::from_utf8_lossy(&held.stderr).contains("joined-0"));
    // move it away, then remove broker 4
    ctl_json(&c.brokers[0], &["cluster", "reassign", "--topic", "joined", "--partition", "0", "--replicas", "1,2,3"]);
    reassignments_done(&c.brokers[0], "the move off broker 4 did not finish").await;
    ctl_json(&c.brokers[0], &["cluster", "remove-broker", "--id", "4"]);
    c.brokers[3].kill9();
    agreed_controller(&c, &[0, 1, 2], 3, -1).await;
    let t0 = Instant::now();
    loop {
        let l = rdkafka_leader(&c.brokers[0].bootstrap(), "joined");
        if l > 0 && produce_code(&c.brokers[usize::try_from(l - 1).unwrap()], "joined", 5000).await == 0 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "the partition does not take writes after broker 4 left");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The voters of the last membership in a coordinator shard group's Raft log on broker `b` (read
/// with `sluice raft-log-dump`: the log is binary).
fn shard_voters(b: &Broker, group: &str) -> BTreeSet<u64> {
    let dir = b.data_dir.join("__cluster").join("replicas").join(group);
    let out = std::process::Command::new(sluice_tests::sluice_bin()).arg("raft-log-dump").arg(&dir).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().rev().find(|l| l.contains("\"Membership\"")).unwrap_or("{}");
    let v: serde_json::Value = serde_json::from_str(last).unwrap();
    v["payload"]["Membership"]["configs"]
        .as_array()
        .and_then(|c| c.last())
        .and_then(|c| c.as_array())
        .map(|ids| ids.iter().filter_map(|i| i.as_u64()).collect())
        .unwrap_or_default()
}

/// One of the configured voters is removed (`cluster remove-broker`): every broker first drops
/// it from the coordinator shard groups it leads (their Raft logs end with a membership without
/// it), then it leaves the metadata quorum and the broker list. With it stopped, the two others
/// agree on a controller, and transactions and group commits keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_voter_is_removed_and_the_coordinators_carry_on() {
    let mut c = Cluster::start();
    agreed_controller(&c, &[0, 1, 2], 3, -1).await;
    let admin = Admin::new(&ClientConfig::new().set("bootstrap.servers", c.brokers[0].bootstrap())).unwrap();
    admin.create_topic("kept", 1, 2, &[]).await.unwrap();
    let t_start = Instant::now();
    // keep the topic off broker 3 (refused while it holds a replica)
    let refused = std::process::Command::new(sluice_tests::sluicectl_bin())
        .args(["--bootstrap-server", &c.brokers[0].bootstrap(), "cluster", "remove-broker", "--id", "3"])
        .output()
        .unwrap();
    let d = ctl_json(&c.brokers[0], &["cluster", "describe"]);
    let on3 = d["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["topic"] == "kept" && p["replicas"].as_array().unwrap().iter().any(|r| r.as_i64() == Some(3)));
    if on3 {
        assert!(!refused.status.success(), "removed while holding a replica");
        assert!(String::from_utf8_lossy(&refused.stderr).contains("kept-0"));
        ctl_json(&c.brokers[0], &["cluster", "reassign", "--topic", "kept", "--partition", "0", "--replicas", "1,2"]);
        reassignments_done(&c.brokers[0], "the move off broker 3 did not finish").await;
        ctl_json(&c.brokers[0], &["cluster", "remove-broker", "--id", "3"]);
    } else {
        assert!(refused.status.success(), "{}", String::from_utf8_lossy(&refused.stderr));
    }
    eprintln!("broker 3 removed after {:?}", t_start.elapsed());
    for g in ["__transaction_state-0", "__consumer_offsets-0"] {
        for b in &c.brokers[..2] {
            let v = shard_voters(b, g);
            assert_eq!(v, BTreeSet::from([1, 2]), "{g} on {}: voters {v:?}", b.bootstrap());
        }
    }
    c.brokers[2].kill9();
    agreed_controller(&c, &[0, 1], 2, -1).await;

    // a transactional producer and a group's committed offsets, on the two brokers left
    use rdkafka::producer::Producer as _;
    let bootstrap = format!("{},{}", c.brokers[0].bootstrap(), c.brokers[1].bootstrap());
    let producer: rdkafka::producer::FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("transactional.id", "after-removal")
        .create()
        .unwrap();
    producer.init_transactions(Duration::from_secs(30)).unwrap();
    for t in 0..3 {
        producer.begin_transaction().unwrap();
        for i in 0..5 {
            let v = format!("{t}-{i}");
            producer
                .send(rdkafka::producer::FutureRecord::<(), _>::to("kept").payload(&v), Duration::from_secs(10))
                .await
                .unwrap();
        }
        producer.commit_transaction(Duration::from_secs(30)).unwrap();
    }
    let consumer: rdkafka::consumer::BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", "after-removal")
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    use rdkafka::consumer::Consumer as _;
    consumer.subscribe(&["kept"]).unwrap();
    let mut n = 0;
    let t0 = Instant::now();
    while n < 15 {
        if let Some(Ok(_)) = consumer.poll(Duration::from_millis(200)) {
            n += 1;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "read {n} of 15 committed records");
    }
    consumer.commit_consumer_state(rdkafka::consumer::CommitMode::Sync).unwrap();
    eprintln!("transactions and group commits done after {:?}", t_start.elapsed());
    let committed = consumer.committed(Duration::from_secs(10)).unwrap();
    let at = committed.elements().first().map(|e| e.offset());
    assert!(matches!(at, Some(rdkafka::Offset::Offset(o)) if o >= 15), "committed {at:?}");
}

/// The leader of partition 0 of `topic` (an index into `c.brokers`), waiting up to 30 s.
async fn leader_of(c: &Cluster, topic: &str) -> usize {
    let bootstrap = c.brokers.iter().map(|b| b.bootstrap()).collect::<Vec<_>>().join(",");
    let t0 = Instant::now();
    loop {
        let l = rdkafka_leader(&bootstrap, topic);
        if l > 0 {
            return usize::try_from(l - 1).unwrap();
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "no leader elected for {topic}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// min.insync.replicas (issue 24 item 5) on three replicas: with one follower frozen, a topic
/// asking for all three refuses acks=all — NOT_ENOUGH_REPLICAS_AFTER_APPEND for a write already
/// in the log that the frozen replica cannot take, then NOT_ENOUGH_REPLICAS before writing once
/// it has been behind longer than replica.lag.time.max.ms — while a topic asking for two (a
/// majority) keeps acknowledging; once the follower is back, all three acknowledge again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_insync_replicas_refuses_acks_all_without_enough_replicas() {
    let c = Cluster::start_with(&["--replica-lag-time-max-ms", "1000"]);
    agreed_controller(&c, &[0, 1, 2], 3, -1).await;
    let admin = Admin::new(&ClientConfig::new().set("bootstrap.servers", c.brokers[0].bootstrap())).unwrap();
    admin.create_topic("isr3", 1, 3, &[("min.insync.replicas", "3")]).await.unwrap();
    admin.create_topic("isr2", 1, 3, &[("min.insync.replicas", "2")]).await.unwrap();
    let (l3, l2) = (leader_of(&c, "isr3").await, leader_of(&c, "isr2").await);
    assert_eq!(produce_code(&c.brokers[l3], "isr3", 5000).await, 0, "all three in sync");
    let frozen = (0..3).find(|i| *i != l3 && *i != l2).unwrap();
    c.brokers[frozen].pause();
    let code = produce_code(&c.brokers[l3], "isr3", 2000).await;
    assert!(code == 20 || code == 19, "min.insync.replicas=3 with a replica frozen answered {code}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(produce_code(&c.brokers[l3], "isr3", 2000).await, 19, "NOT_ENOUGH_REPLICAS once out of sync");
    assert_eq!(produce_code(&c.brokers[l2], "isr2", 5000).await, 0, "two of three meet min.insync.replicas=2");
    c.brokers[frozen].resume();
    let t0 = Instant::now();
    while produce_code(&c.brokers[l3], "isr3", 3000).await != 0 {
        assert!(t0.elapsed() < Duration::from_secs(30), "all three never acknowledged again");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // a dynamic cluster-wide default set through one broker is the topic default on every one
    // (the metadata quorum carries it)
    let conn = Connection::connect(&c.brokers[l3].bootstrap(), "cluster-test", 1).await.unwrap();
    assert_eq!(sluice_tests::raw::set_configs(&conn, 4, "", &[("min.insync.replicas", "3")]).await, 0);
    for b in &c.brokers {
        let conn = Connection::connect(&b.bootstrap(), "cluster-test", 1).await.unwrap();
        let t0 = Instant::now();
        while sluice_tests::raw::config_of(&conn, 2, "isr2", "min.insync.replicas").await != ("2".into(), 1)
            || sluice_tests::raw::config_of(&conn, 2, "noisr", "min.insync.replicas").await.0 != "3"
        {
            if sluice_tests::raw::config_of(&conn, 2, "noisr", "min.insync.replicas").await.1 == -1 {
                let _ = sluice_tests::raw::create_topic(&conn, "noisr").await;
            }
            assert!(t0.elapsed() < Duration::from_secs(10), "broker {} never saw the dynamic default", b.port);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// KIP-890 in a cluster (issue 18 item 3): a transaction-version-1 batch the coordinator
/// verified just before its transaction's marker must not reopen the transaction. The failpoint
/// holds the verified batch 1.5 s before the leader proposes it; the transaction commits in that
/// window, so the partition's Raft log orders the marker first. Applied after the marker, the
/// batch must be refused, and the partition must have no open transaction: its LSO reaches the
/// high watermark (a reopened transaction would pin it until the transaction timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_verified_before_its_transactions_marker_does_not_reopen_it() {
    use sluice_protocol::batch::Compression;
    use sluice_tests::raw;
    let c = Cluster::start_with(&["--testing-failpoints", "produce.delay_after_verify"]);
    agreed_controller(&c, &[0, 1, 2], 3, -1).await;
    let admin = Admin::new(&ClientConfig::new().set("bootstrap.servers", c.brokers[0].bootstrap())).unwrap();
    admin.create_topic("race", 1, 3, &[]).await.unwrap();
    let leader = leader_of(&c, "race").await;
    let txn = "race-txn";
    let t0 = Instant::now();
    let (coordinator, pid, epoch) = loop {
        let id = txn_coordinator(&c.brokers[0], txn).await;
        if id > 0 {
            let b = &c.brokers[usize::try_from(id - 1).unwrap()];
            let conn = Connection::connect(&b.bootstrap(), "race", 1).await.unwrap();
            match raw::init_producer_id(&conn, 4, Some(txn), None).await.unwrap() {
                (0, pid, epoch) => break (conn, pid, epoch),
                (14..=16, _, _) => {}
                (err, _, _) => panic!("InitProducerId on broker {id}: error {err}"),
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "no transaction coordinator initialized the id");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(raw::add_partitions(&coordinator, txn, pid, epoch, "race", &[0]).await.unwrap(), 0);
    let batch = raw::batch(pid, epoch, 0, true, &[(0, "late".to_string())], Compression::None);
    let conn = Connection::connect(&c.brokers[leader].bootstrap(), "race", 1).await.unwrap();
    // Produce v9: transaction version 1 (no implicit add; the coordinator verifies)
    let produce = tokio::spawn(async move { raw::produce(&conn, 9, Some("race-txn"), "race", 0, batch).await });
    tokio::time::sleep(Duration::from_millis(400)).await; // verified, and held by the failpoint
    let (err, _, _) = raw::end_txn(&coordinator, 3, txn, pid, epoch, true).await.unwrap();
    assert_eq!(err, 0, "EndTxn(commit)");
    let (produced, _) = produce.await.unwrap().unwrap();
    let conn = Connection::connect(&c.brokers[leader].bootstrap(), "race", 1).await.unwrap();
    let t1 = Instant::now();
    let (hw, lso) = loop {
        let (_, hw, _) = raw::list_offset(&conn, "race", 0, -1, false).await.unwrap();
        let (_, lso, _) = raw::list_offset(&conn, "race", 0, -1, true).await.unwrap();
        if lso == hw || t1.elapsed() > Duration::from_secs(10) {
            break (hw, lso);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(lso, hw, "a transaction reopened after its marker pins the LSO (the batch was answered {produced})");
    assert_ne!(produced, 0, "the batch verified before the marker was appended after it");
}

/// WriteTxnMarkers of one COMMIT marker for producer `pid` on `topic`/0, sent to the broker at
/// `bootstrap`: the
/// partition's error code (-1: no answer).
async fn marker_code(bootstrap: &str, topic: &str, pid: i64) -> i16 {
    use kafka_protocol::messages::{write_txn_markers_request as w, ProducerId, TopicName, WriteTxnMarkersRequest};
    let Ok(conn) = Connection::connect(bootstrap, "cluster-test", 1).await else { return -1 };
    let mut t = w::WritableTxnMarkerTopic::default();
    t.name = TopicName(kafka_protocol::protocol::StrBytes::from_string(topic.to_string()));
    t.partition_indexes = vec![0];
    let mut m = w::WritableTxnMarker::default();
    m.producer_id = ProducerId(pid);
    m.transaction_result = true;
    m.topics = vec![t];
    let mut r = WriteTxnMarkersRequest::default();
    r.markers = vec![m];
    match conn.call(ApiKey::WriteTxnMarkers, 1, RequestKind::WriteTxnMarkers(r)).await {
        Ok(ResponseKind::WriteTxnMarkers(resp)) => resp.markers[0].topics[0].partitions[0].error_code,
        _ => -1,
    }
}

/// A replicated partition is written only through its Raft group. Each broker creates the
/// topic's local copy before it starts its replica of the partition (held 3 s apart here by a
/// failpoint); in between, a WriteTxnMarkers or a Produce reaching the copy is refused
/// NOT_LEADER_OR_FOLLOWER (retriable), never written to the copy alone. (A marker written that
/// way once completed a transaction whose data stayed open on the real log for ever: the Jepsen
/// chain workload's first transaction, seed 7.) Afterwards the replicas agree on the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicated_partition_is_not_written_before_its_replica_runs() {
    const NOT_LEADER: i16 = 6;
    const UNKNOWN: i16 = 3;
    let c = Cluster::start_with(&["--testing-failpoints", "replica.delay_start"]);
    agreed_controller(&c, &[0, 1, 2], 3, -1).await;
    let admin = Admin::new(&ClientConfig::new().set("bootstrap.servers", c.brokers[0].bootstrap())).unwrap();
    // each broker's first answers once it has the topic: its local copy exists, its replica
    // waits on the failpoint (all three probed at once, from before the topic exists)
    let probes: Vec<_> = c
        .brokers
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let bootstrap = b.bootstrap();
            tokio::spawn(async move {
                let t0 = Instant::now();
                let marker = loop {
                    match marker_code(&bootstrap, "early", 7000 + i as i64).await {
                        UNKNOWN | -1 => {}
                        code => break code,
                    }
                    assert!(t0.elapsed() < Duration::from_secs(10), "broker {} never had the topic", i + 1);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                };
                (marker, produce_code_at(bootstrap, "early", 1000).await, t0.elapsed())
            })
        })
        .collect();
    admin.create_topic("early", 1, 3, &[]).await.unwrap();
    for (i, p) in probes.into_iter().enumerate() {
        let (marker, produced, took) = p.await.unwrap();
        assert_eq!(marker, NOT_LEADER, "broker {}: a marker before the replica runs ({took:?})", i + 1);
        assert_ne!(produced, 0, "broker {}: a produce before the replica runs was acknowledged", i + 1);
    }
    // once the replicas run, the partition takes writes and every replica holds the same log
    let leader = leader_of(&c, "early").await;
    acknowledged_by_one_of(&c, &[leader, 0, 1, 2], "early", "after the replicas started").await;
    let t0 = Instant::now();
    loop {
        let mut ends = Vec::new();
        for b in &c.brokers {
            ends.push(replica_end(b, "early").await);
        }
        if ends.iter().all(|e| *e == ends[0]) && ends[0] >= 1 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "the replicas disagree on the log end: {ends:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One series' value on the Prometheus endpoint at `port` (None when absent).
fn scrape_value(port: u16, series: &str) -> Option<f64> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    body.lines().find(|l| l.starts_with(series)).and_then(|l| l.rsplit(' ').next()).and_then(|v| v.parse().ok())
}

/// A peer whose Raft RPCs fail (issue 19 item 6, decision 0042): its peers log one line each 10 s
/// saying how many failed and how, then one line when it answers again, and count every RPC in
/// `sluice_raft_rpcs_total` — instead of openraft's four or five lines per failed RPC, which
/// are left out (they are named by source line for openraft 0.9.23: an upgrade that moves them
/// fails this test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raft_rpc_failures_are_summarized_per_peer() {
    // (a filter naming openraft would keep its lines; the recovery line is INFO)
    let (c, ports) = Cluster::start_with_metrics_logging(&[], Some("warn,sluice_broker::cluster::rpc_health=info"));
    replicated_topic(&c, "quiet").await;
    let stopped = 1usize; // broker 2
    c.brokers[stopped].pause();
    tokio::time::sleep(Duration::from_secs(22)).await;
    c.brokers[stopped].resume();
    let log_of = |i: usize| std::fs::read_to_string(c.brokers[i].data_dir.with_extension("log")).unwrap_or_default();
    let t0 = Instant::now();
    loop {
        let log = log_of(0);
        if log.contains("Raft RPCs to broker 2 are answered again") {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(40), "no recovery line for broker 2: {log}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for i in [0, 2] {
        let log = log_of(i);
        let failing: Vec<&str> = log.lines().filter(|l| l.contains("Raft RPCs to broker 2 failing")).collect();
        // 22 s stopped: at least one whole 10 s interval in which every RPC to it timed out
        assert!(
            failing.iter().any(|l| l.contains(" answered=0 ") && !l.contains(" timed_out=0 ")),
            "broker {}: no interval of timed-out RPCs to broker 2: {failing:?}",
            i + 1
        );
        assert!(failing.len() <= 4, "broker {}: more than one line per 10 s: {failing:?}", i + 1);
        for noise in [
            "RPCError",
            "error replication to target",
            "update progress error",
            "heartbeat error",
            "while requesting vote",
            "A message will be ignored because vote changed",
        ] {
            let n = log.lines().filter(|l| l.contains("openraft") && l.contains(noise)).count();
            assert_eq!(n, 0, "broker {}: openraft's per-RPC line \"{noise}\" logged {n} times", i + 1);
        }
        let timed_out = ports_series(ports[i], "sluice_raft_rpcs_total", &["peer=\"2\"", "outcome=\"timed_out\""]);
        assert!(timed_out > 0.0, "broker {}: no timed-out RPC to broker 2 counted", i + 1);
        let answered = ports_series(ports[i], "sluice_raft_rpcs_total", &["peer=\"2\"", "outcome=\"answered\""]);
        assert!(answered > 0.0, "broker {}: no answered RPC to broker 2 counted", i + 1);
    }
}

/// The value of the series `name` whose labels include each of `labels` on the Prometheus
/// endpoint at `port` (0 when absent).
fn ports_series(port: u16, name: &str, labels: &[&str]) -> f64 {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return 0.0 };
    let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && labels.iter().all(|x| l.contains(x)))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

/// Each broker reports its replica's Raft group (issue 19 item 6): the term, the leaders it saw
/// take over, apply and replication lag. After the leader's kill -9 the survivors report a higher
/// term and one more leader change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raft_groups_report_term_leader_changes_and_lag() {
    let (mut c, ports) = Cluster::start_with_metrics();
    let leader = replicated_topic(&c, "observed").await;
    for _ in 0..20 {
        assert_eq!(produce_code(&c.brokers[leader], "observed", 5000).await, 0);
    }
    let series = |name: &str| format!("{name}{{group=\"observed\",partition=\"0\"}}");
    let settled = |want_term: f64| {
        let ports = ports.clone();
        async move {
            let t0 = Instant::now();
            loop {
                let terms: Vec<Option<f64>> =
                    ports.iter().map(|p| scrape_value(*p, &series("sluice_raft_term"))).collect();
                if terms.iter().flatten().count() >= 2 && terms.iter().flatten().all(|t| *t >= want_term) {
                    return terms;
                }
                assert!(t0.elapsed() < Duration::from_secs(30), "terms not reported: {terms:?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let before = settled(1.0).await;
    let old_term = before.iter().flatten().cloned().fold(0.0, f64::max);
    let survivor = (0..3).find(|i| *i != leader).unwrap();
    let changes_before = scrape_value(ports[survivor], &series("sluice_raft_leader_changes_total")).unwrap_or(0.0);
    assert!(changes_before >= 1.0, "the first leader counts as a change");
    // (an entry committed a moment ago may not be applied yet: the gauge reaches 0 at once)
    let t0 = Instant::now();
    while scrape_value(ports[survivor], &series("sluice_raft_apply_lag")) != Some(0.0) {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "apply lag: {:?}",
            scrape_value(ports[survivor], &series("sluice_raft_apply_lag"))
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let on_leader = scrape_value(ports[leader], &series("sluice_raft_replication_lag"));
    assert!(on_leader.is_some(), "the leader reports its followers' lag");
    c.brokers[leader].kill9();
    let t0 = Instant::now();
    loop {
        let term = scrape_value(ports[survivor], &series("sluice_raft_term")).unwrap_or(0.0);
        let changes = scrape_value(ports[survivor], &series("sluice_raft_leader_changes_total")).unwrap_or(0.0);
        if term > old_term && changes > changes_before {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no new term or leader reported: term {term}, changes {changes}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Produce one batch holding a single record of `bytes` bytes to `topic`/0 at `b` (acks=all);
/// the error code.
async fn produce_big(b: &Broker, topic: &'static str, bytes: usize) -> i16 {
    let value = bytes::Bytes::from(vec![b'x'; bytes]);
    let record = sluice_protocol::batch::NewRecord { timestamp: 1, value: Some(value), ..Default::default() };
    produce_batch(b, topic, record, 30_000).await
}

/// A follower paused while a megabyte-batch backlog builds up catches up once it runs again
/// (issue 19): the leader sends it `replica.fetch.max.bytes` per append, each answered within
/// the heartbeat interval openraft allows an append. Sent whole (openraft's 300 entries, here
/// 80 MB), every append timed out and was sent again for ever. The leader logs one line when
/// it has caught up.
///
/// Run alone: beside other three-broker tests on two cores it failed 4 of 6 suite runs on
/// 2026-12-04 — the resumed follower stood for election every ~9 s and the re-elected leader
/// sent it nothing it heard in between (issue 19: data starving heartbeats under CPU
/// contention, not understood yet). Alone it passed every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "CPU contention from parallel tests starves its catch-up (issue 19): tests/run-all.sh runs it alone"]
async fn a_follower_that_fell_far_behind_catches_up() {
    let (c, ports) = Cluster::start_with_metrics_logging(&[], Some("info,openraft=warn"));
    let leader = replicated_topic(&c, "backlog").await;
    let follower = (0..3).find(|i| *i != leader).unwrap();
    c.brokers[follower].pause();
    let paused = Instant::now();
    for i in 0..80 {
        assert_eq!(produce_big(&c.brokers[leader], "backlog", 1_000_000).await, 0, "batch {i}");
    }
    let series = "sluice_raft_replication_lag{group=\"backlog\",partition=\"0\"}";
    eprintln!("lag {:?} after {:?} stopped", scrape_value(ports[leader], series), paused.elapsed());
    c.brokers[follower].resume();
    // The leader says so in one line (issue 19 item 6). That line, not the lag gauge, is the
    // signal: the gauge reads 0 on a broker that is not leading, and the resumed follower, its
    // election timer long expired, may make the leader step down for a moment (CI saw it).
    // (whichever broker leads by then: an election may move the leadership meanwhile)
    let said = format!("replica {} caught up through the log", follower + 1);
    let logs = || -> Vec<String> {
        c.brokers
            .iter()
            .map(|b| std::fs::read_to_string(b.data_dir.with_extension("log")).unwrap_or_default())
            .collect()
    };
    let t0 = Instant::now();
    while !logs().iter().any(|l| l.contains(&said)) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no leader logged '{said}': {}",
            logs()
                .iter()
                .enumerate()
                .map(|(i, l)| format!(
                    "broker {}:\n{}",
                    i + 1,
                    l.lines()
                        .filter(|l| l.contains("backlog") || l.contains("WARN") || l.contains("ERROR"))
                        .collect::<Vec<_>>()
                        .join("\n")
                ))
                .collect::<Vec<_>>()
                .join("\n")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("caught up {:?} after it resumed", t0.elapsed());
    // and the lag gauge of the broker that leads now agrees
    let t0 = Instant::now();
    loop {
        let lags: Vec<Option<f64>> = ports.iter().map(|p| scrape_value(*p, series)).collect();
        let leading = c.brokers.iter().position(|b| {
            std::fs::read_to_string(b.data_dir.with_extension("log"))
                .unwrap_or_default()
                .lines()
                .rfind(|l| l.contains("group=\"backlog\"") && l.contains("raft leader"))
                .is_some_and(|l| l.contains("(this broker)"))
        });
        if leading.is_some_and(|i| lags[i] == Some(0.0)) {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "lag on the leader {leading:?}: {lags:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Produce one batch of a `bytes`-byte record to `topic`/0 at the first of `among` that
/// acknowledges it (trying for 30 s); that broker's index.
async fn produce_big_at_one_of(c: &Cluster, among: &[usize], topic: &'static str, bytes: usize) -> usize {
    let t0 = Instant::now();
    loop {
        for &i in among {
            if produce_big(&c.brokers[i], topic, bytes).await == 0 {
                return i;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no broker acknowledged a batch to {topic}; panics: {}\n{}",
            c.brokers.iter().map(|b| b.panics()).collect::<String>(),
            among.iter().map(|i| format!("broker {i}:\n{}\n", c.brokers[*i].log_tail())).collect::<String>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The suites run with either format of a replicated partition's Raft log
/// (`TEST_REPLICATION_LOG_FORMAT=double|single`, decisions 0045 and 0052; `single` when unset,
/// as the broker's default): with `single` Raft's own entries (a new leader's first entry,
/// membership changes) are control batches of the partition log, so they take offsets between
/// the records.
fn one_log_per_replica() -> bool {
    !std::env::var("TEST_REPLICATION_LOG_FORMAT").is_ok_and(|f| f == "double")
}

/// The records (control batches left out: transaction markers, and Raft's own entries with one
/// log per replica) in broker `b`'s replica of `topic`/0, counted in its segment files.
fn records_in(b: &Broker, topic: &str) -> i64 {
    let mut n = 0;
    for file in segments(&b.data_dir.join(format!("{topic}-0"))).values() {
        let bytes = std::fs::read(file).unwrap_or_default();
        for (_, v) in sluice_protocol::batch::iter_batches(&bytes).map_while(Result::ok) {
            if !v.is_control() {
                n += i64::from(v.records_count());
            }
        }
    }
    n
}

/// `seen` (offset, value) read back is `want`'s records in order, at increasing offsets; at
/// offsets 0, 1, … unless Raft's own entries take offsets too (one log per replica).
fn assert_numbered(seen: &[(i64, String)], want: std::ops::Range<usize>) {
    let values: Vec<String> = seen.iter().map(|(_, v)| v.clone()).collect();
    assert_eq!(values, want.clone().map(|i| format!("record-{i}")).collect::<Vec<_>>());
    if one_log_per_replica() {
        assert!(seen.windows(2).all(|w| w[0].0 < w[1].0), "offsets go up: {seen:?}");
    } else {
        assert_eq!(seen.iter().map(|(o, _)| *o).collect::<Vec<_>>(), want.map(|i| i as i64).collect::<Vec<_>>());
    }
}

fn segments(dir: &std::path::Path) -> BTreeMap<i64, std::path::PathBuf> {
    std::fs::read_dir(dir)
        .map(|list| {
            list.filter_map(|e| e.ok())
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    name.strip_suffix(".log").and_then(|b| b.parse().ok()).map(|b| (b, e.path()))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Every segment's bytes, oldest first, as they are on disk (damage included).
fn segment_bytes(dir: &std::path::Path) -> Vec<u8> {
    segments(dir).values().flat_map(|p| std::fs::read(p).unwrap()).collect()
}

/// The bytes of every batch whose base offset is `from` or later, in offset order: the same
/// whatever offsets each replica's segments rolled at (a replica that installed a snapshot, or
/// whose retention ran at another moment, holds the same batches in other files).
fn batches_from(dir: &std::path::Path, from: i64) -> Vec<u8> {
    let mut out = Vec::new();
    for file in segments(dir).values() {
        let bytes = std::fs::read(file).unwrap_or_default();
        for (at, v) in sluice_protocol::batch::iter_batches(&bytes).map_while(Result::ok) {
            if v.base_offset() >= from {
                out.extend_from_slice(&bytes[at..at + v.size()]);
            }
        }
    }
    out
}

/// A partition replica's Raft group directory on broker `b` (the one replicated topic's).
fn replica_dir(b: &Broker) -> std::path::PathBuf {
    let replicas = b.data_dir.join("__cluster").join("replicas");
    std::fs::read_dir(&replicas)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            // `<topic id>-<partition>`: a UUID's 36 characters first (a shard's is its name)
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            name.len() > 37 && name[..36].bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
        })
        .expect("a partition replica directory")
}

/// Issue 19, bounded disk: every replica snapshots its partition's segments after
/// `raft.log.max.bytes.between.snapshots` and purges its Raft log up to the snapshot, so the Raft
/// log stays a small fraction of the data; and a replica wiped while the others carried on
/// (retention deleting their oldest segments meanwhile) catches up from a snapshot of the
/// leader's segments — its log starts where the leader's did, not at 0, and its Raft log never
/// held the first entries — holding the same batches as the leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_replica_catches_up_from_a_snapshot_of_segments() {
    let snapshot_every = std::env::var("TEST_SNAPSHOT_BYTES").unwrap_or_else(|_| "2000000".into());
    let (mut c, ports) = Cluster::start_with_metrics_and(&[
        "--raft-log-max-bytes-between-snapshots",
        &snapshot_every,
        "--log-retention-check-interval-ms",
        "500",
    ]);
    agreed_controller(&c, &[0, 1, 2], 3, -1).await;
    let admin = Admin::new(&ClientConfig::new().set("bootstrap.servers", c.brokers[0].bootstrap())).unwrap();
    admin.create_topic("wiped", 1, 3, &[("segment.bytes", "1048576"), ("retention.bytes", "4000000")]).await.unwrap();
    let mut leader = leader_of(&c, "wiped").await;
    let follower = (0..3).find(|i| *i != leader).unwrap();
    // (at whichever broker leads: under a loaded machine leadership may move)
    for _ in 0..60 {
        leader = produce_big_at_one_of(&c, &[leader, 0, 1, 2], "wiped", 200_000).await;
    }
    // the Raft log was purged up to a snapshot on every replica: far below the 12 MB produced
    tokio::time::sleep(Duration::from_secs(2)).await;
    // (a purge past every entry leaves no file: with snapshots off, TEST_SNAPSHOT_BYTES=1000000000,
    // this fails)
    for b in &c.brokers {
        let raft_log = raft_log_bytes(&replica_dir(b));
        assert!(raft_log < 6_000_000, "broker {}: the Raft log holds {raft_log} bytes", b.addr());
    }

    c.brokers[follower].stop();
    let wiped_replica = replica_dir(&c.brokers[follower]);
    std::fs::remove_dir_all(&wiped_replica).unwrap();
    std::fs::remove_dir_all(c.brokers[follower].data_dir.join("wiped-0")).unwrap();
    let running: Vec<usize> = (0..3).filter(|i| *i != follower).collect();
    for _ in 0..20 {
        leader = produce_big_at_one_of(&c, &[&[leader][..], &running].concat(), "wiped", 200_000).await;
    }
    let leader_dir = c.brokers[leader].data_dir.join("wiped-0");
    let t0 = Instant::now();
    while segments(&leader_dir).keys().next().copied().unwrap_or(0) == 0 {
        assert!(t0.elapsed() < Duration::from_secs(20), "retention did not trim the leader's log");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    c.brokers[follower].spawn();

    let installed = "sluice_raft_snapshots_installed_total{partition=\"wiped-0\"}";
    let lag = "sluice_raft_replication_lag{group=\"wiped\",partition=\"0\"}";
    let t0 = Instant::now();
    loop {
        let done = scrape_value(ports[follower], installed).unwrap_or(0.0) >= 1.0
            && scrape_value(ports[leader], lag) == Some(0.0);
        if done {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the wiped replica did not catch up from a snapshot: installed {:?}, lag {:?}\npanics: {}\nleader:\n{}\nwiped:\n{}",
            scrape_value(ports[follower], installed),
            scrape_value(ports[leader], lag),
            c.brokers.iter().map(|b| b.panics()).collect::<String>(),
            c.brokers[leader].log_tail(),
            c.brokers[follower].log_tail()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let follower_dir = c.brokers[follower].data_dir.join("wiped-0");
    let start = *segments(&follower_dir).keys().next().unwrap();
    eprintln!("the wiped replica caught up in {:?}; its log starts at offset {start}", t0.elapsed());
    assert!(start > 0, "the wiped replica's log starts at 0: it replayed the Raft log");
    // the Raft log it was sent starts after the snapshot, not at entry 1
    let dump = std::process::Command::new(sluice_tests::sluice_bin())
        .arg("raft-log-dump")
        .arg(replica_dir(&c.brokers[follower]))
        .output()
        .unwrap();
    let first: Option<u64> = String::from_utf8_lossy(&dump.stdout)
        .lines()
        .next()
        .and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .and_then(|v| v["log_id"]["index"].as_u64());
    assert!(first.is_none_or(|i| i > 1), "the wiped replica's Raft log starts at entry {first:?}");
    // the same batches as the leader, from the later of the two logs' starts (retention runs
    // on each replica at its own moment: compared until both have settled)
    let t0 = Instant::now();
    loop {
        let start_of = |d: &std::path::Path| segments(d).keys().next().copied().unwrap_or(0);
        let common = start_of(&follower_dir).max(start_of(&leader_dir));
        let (ours, theirs) = (batches_from(&follower_dir, common), batches_from(&leader_dir, common));
        if !ours.is_empty() && ours == theirs {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the replicas differ from offset {common}: {} vs {} bytes; segments (base, bytes): {:?} vs {:?}",
            ours.len(),
            theirs.len(),
            segment_sizes(&follower_dir),
            segment_sizes(&leader_dir)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// (base offset, bytes) of each segment in a partition directory, for failure messages.
fn segment_sizes(dir: &std::path::Path) -> Vec<(i64, u64)> {
    segments(dir).into_iter().map(|(b, p)| (b, std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))).collect()
}

/// Issue 19: DeleteRecords on a replicated partition goes through its Raft group, so every
/// replica — not only the leader that answered — moves its log start (and deletes the segments
/// below it); a later leader keeps the records deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_records_moves_the_log_start_on_every_replica() {
    let c = Cluster::start();
    let leader = replicated_topic(&c, "trimmed").await;
    for i in 0..10 {
        assert_eq!(produce_code(&c.brokers[leader], "trimmed", 5000).await, 0, "record {i}");
    }
    assert_eq!(delete_records(&c.brokers[leader], "trimmed", 6).await, (0, 6));
    for b in &c.brokers {
        let t0 = Instant::now();
        loop {
            let start = replica_offset(b, "trimmed", -2).await;
            if start == 6 {
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(10), "broker {}: its replica starts at {start}", b.addr());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // a partition with one replica: the broker holding it trims it; the two others know it
    // from the metadata and send the client to its leader (NOT_LEADER_OR_FOLLOWER), as Kafka's
    // brokers do, rather than calling it unknown
    let admin = Admin::new(&ClientConfig::new().set("bootstrap.servers", c.brokers[0].bootstrap())).unwrap();
    admin.create_topic("single", 1, 1, &[]).await.unwrap();
    let holder = acknowledged_by_one_of(&c, &[0, 1, 2], "single", "on the one replica").await;
    for (i, b) in c.brokers.iter().enumerate() {
        let (code, _) = delete_records(b, "single", 1).await;
        let want = if i == holder { 0 } else { 6 };
        assert_eq!(code, want, "DeleteRecords at broker {} (the partition is on broker {})", i + 1, holder + 1);
    }
}

/// DeleteRecords of `topic`/0 below `offset`, sent to `b`: (error code, low watermark).
async fn delete_records(b: &Broker, topic: &str, offset: i64) -> (i16, i64) {
    let conn = Connection::connect(&b.bootstrap(), "cluster-test", 1).await.unwrap();
    let mut p = kafka_protocol::messages::delete_records_request::DeleteRecordsPartition::default();
    p.partition_index = 0;
    p.offset = offset;
    let mut t = kafka_protocol::messages::delete_records_request::DeleteRecordsTopic::default();
    t.name = kafka_protocol::messages::TopicName(kafka_protocol::protocol::StrBytes::from_string(topic.to_string()));
    t.partitions = vec![p];
    let mut req = kafka_protocol::messages::DeleteRecordsRequest::default();
    req.topics = vec![t];
    req.timeout_ms = 10_000;
    let resp = conn.call(ApiKey::DeleteRecords, 2, RequestKind::DeleteRecords(req)).await.unwrap();
    let ResponseKind::DeleteRecords(r) = resp else { panic!("{resp:?}") };
    let answer = &r.topics[0].partitions[0];
    (answer.error_code, answer.low_watermark)
}

/// Issue 19, bounded memory: a produce request for a replicated partition waits for room in the
/// partition's budget of bytes in flight (`replication.partition.in.flight.max.bytes`) before
/// its batch is proposed. With both followers stopped nothing commits, so of ten 1 MB batches
/// sent at once only the three that fit in a 3.5 MB budget are proposed; the others wait, time
/// out, and are never written (without the budget all ten are proposed and commit once the
/// followers return). The bytes in flight never exceed the budget, and return when Raft answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_waits_for_room_in_the_bytes_in_flight_budget() {
    let limit = std::env::var("TEST_IN_FLIGHT_BYTES").unwrap_or_else(|_| "3500000".into());
    let (c, ports) = Cluster::start_with_metrics_and(&["--replication-partition-in-flight-max-bytes", &limit]);
    let leader = replicated_topic(&c, "budget").await;
    let followers: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    for f in &followers {
        c.brokers[*f].pause();
    }
    let value = bytes::Bytes::from(vec![b'b'; 1_000_000]);
    let sends: Vec<_> = (0..10)
        .map(|_| {
            let record =
                sluice_protocol::batch::NewRecord { timestamp: 1, value: Some(value.clone()), ..Default::default() };
            tokio::spawn(produce_batch_at(c.brokers[leader].bootstrap(), "budget", record, 1000))
        })
        .collect();
    // (the followers stay stopped for about a second: past their lease and election timeout
    // (3–4 s) they would stand on waking, and a new leader would lack the admitted batches)
    tokio::time::sleep(Duration::from_millis(600)).await;
    let in_flight = scrape_value(ports[leader], "sluice_raft_bytes_in_flight{group=\"budget\",partition=\"0\"}");
    let mut codes = Vec::new();
    for s in sends {
        codes.push(s.await.unwrap());
    }
    let timed_out = kafka_protocol::error::ResponseError::RequestTimedOut.code();
    assert!(codes.iter().all(|c| *c == timed_out), "nothing commits with the followers stopped: {codes:?}");
    let in_flight = in_flight.unwrap_or(0.0);
    assert!(in_flight > 2_000_000.0 && in_flight <= 3_500_000.0, "bytes in flight: {in_flight}");
    for f in &followers {
        c.brokers[*f].resume();
    }
    // the admitted batches commit; the others were never proposed
    let t0 = Instant::now();
    // (records, not offsets: with one log per replica Raft's own entries take offsets too)
    while records_in(&c.brokers[leader], "budget") < 3 {
        assert!(t0.elapsed() < Duration::from_secs(20), "the admitted batches did not commit");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let stored = records_in(&c.brokers[leader], "budget");
    assert_eq!(stored, 3, "only the batches that fit in the budget were proposed");
    let t0 = Instant::now();
    while scrape_value(ports[leader], "sluice_raft_bytes_in_flight{group=\"budget\",partition=\"0\"}") != Some(0.0) {
        assert!(t0.elapsed() < Duration::from_secs(5), "the budget's bytes did not return");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Bytes of `topic`/0's segment files on broker `b`.
fn partition_bytes(b: &Broker, topic: &str) -> u64 {
    segments(&b.data_dir.join(format!("{topic}-0"))).values().map(|p| std::fs::metadata(p).map_or(0, |m| m.len())).sum()
}

/// Keep producing 1 MB batches to `topic`/0 at `bootstrap`, four at a time, until `stop`; the
/// batches acknowledged, each with when.
fn keep_producing(
    bootstrap: String,
    topic: &'static str,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Vec<tokio::task::JoinHandle<Vec<Instant>>> {
    (0..4)
        .map(|_| {
            let (bootstrap, stop) = (bootstrap.clone(), stop.clone());
            tokio::spawn(async move {
                let mut acked = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let value = bytes::Bytes::from(vec![b'p'; 1_000_000]);
                    let record =
                        sluice_protocol::batch::NewRecord { timestamp: 1, value: Some(value), ..Default::default() };
                    if produce_batch_at(bootstrap.clone(), topic, record, 30_000).await == 0 {
                        acked.push(Instant::now());
                    }
                }
                acked
            })
        })
        .collect()
}

/// The lines of `b`'s log in which its trail says a follower stopped or started holding
/// producers back (`replica::release_trailing`).
fn trail_lines(b: &Broker) -> Vec<String> {
    let log = std::fs::read_to_string(b.data_dir.with_extension("log")).unwrap_or_default();
    log.lines().filter(|l| l.contains("holds producers back")).map(str::to_string).collect()
}

/// Issue 19 item 3 (decision 0054): Raft acknowledges a write once a majority holds it, so a
/// follower slower than the other two fell behind without bound under a saturating producer —
/// gigabytes in 60 s, then a snapshot of the whole partition. The leader now holds a write's
/// bytes of `replication.partition.in.flight.max.bytes` until every live follower holds it
/// too: a follower stopped two thirds of the time stays within about one budget of the leader
/// while producers are paced to it; one that is gone holds nothing back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_follower_paces_producers_and_a_gone_one_does_not_hold_them() {
    let budget = 8_000_000u64;
    let (mut c, _ports) = Cluster::start_with_metrics_logging(
        &["--replication-partition-in-flight-max-bytes", &budget.to_string()],
        Some("warn,sluice_broker::cluster::replica=info"),
    );
    let leader = replicated_topic(&c, "paced").await;
    let followers: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    let (slow, other) = (followers[0], followers[1]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producers = keep_producing(c.brokers[leader].bootstrap(), "paced", stop.clone());
    // the slow follower runs 150 ms of every 900 (moving within `TRAIL_LIVE`, 2 s);
    // `TEST_SLOW_RUN_MS` makes it slower (decision 0061 measured 40 ms)
    let run_ms = std::env::var("TEST_SLOW_RUN_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(150);
    let mut most_behind = 0u64;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(12) {
        c.brokers[slow].pause();
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_millis(150)).await;
            let behind =
                partition_bytes(&c.brokers[leader], "paced").saturating_sub(partition_bytes(&c.brokers[slow], "paced"));
            most_behind = most_behind.max(behind);
        }
        c.brokers[slow].resume();
        tokio::time::sleep(Duration::from_millis(run_ms)).await;
    }
    let written = partition_bytes(&c.brokers[leader], "paced");
    eprintln!(
        "leader {written} bytes, the slow follower at most {most_behind} behind, the other {} behind; trail: {:#?}",
        written.saturating_sub(partition_bytes(&c.brokers[other], "paced")),
        trail_lines(&c.brokers[leader])
    );
    assert!(written > 3 * budget, "the producers went on ({written} bytes)");
    // one budget, plus what was answered or on its way to the follower when it stopped
    assert!(
        most_behind <= 2 * budget,
        "the slow follower fell {most_behind} bytes behind the leader (budget {budget}, leader {written}); \
         the leader's trail: {:#?}",
        trail_lines(&c.brokers[leader])
    );
    // a follower gone: after `TRAIL_LIVE` producers go on at the pace of the one left
    c.brokers[slow].kill9();
    let gone = Instant::now();
    tokio::time::sleep(Duration::from_secs(8)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut acked: Vec<Instant> = Vec::new();
    for p in producers {
        acked.extend(p.await.unwrap());
    }
    let after = acked.iter().filter(|t| **t > gone + Duration::from_secs(4)).count();
    assert!(after >= 10, "{after} batches acknowledged from 4 s after a follower was killed");
}

/// Decision 0060 (group commit): openraft 0.9's core writes each append and waits for its
/// flush before it takes the next message, so a leader flushed once per produce batch however
/// many waited. Patched, it takes the messages queued meanwhile first and writes their entries
/// with one append and one flush. Here 16 connections produce at once to a partition's
/// leader: it must flush less often than it appends entries (one flush per entry without the
/// patch, each client write being one entry), and each flush's latency is timed
/// (`sluice_fsync_seconds`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_writes_the_batches_queued_during_a_flush_with_one_flush() {
    let (c, ports) = Cluster::start_with_metrics_and(&[]);
    let leader = replicated_topic(&c, "merged").await;
    let counts = || {
        let get = |series| scrape_value(ports[leader], series).unwrap_or(0.0);
        let fsyncs = get("sluice_fsync_seconds_count");
        (get("sluice_raft_log_flushes_total"), get("sluice_raft_log_entries_appended_total"), fsyncs)
    };
    let (flushes0, entries0, fsyncs0) = counts();
    let sends: Vec<_> = (0..16)
        .map(|_| {
            let bootstrap = c.brokers[leader].bootstrap();
            tokio::spawn(async move {
                for _ in 0..20 {
                    let value = bytes::Bytes::from(vec![b'm'; 100_000]);
                    let record =
                        sluice_protocol::batch::NewRecord { timestamp: 1, value: Some(value), ..Default::default() };
                    assert_eq!(produce_batch_at(bootstrap.clone(), "merged", record, 30_000).await, 0);
                }
            })
        })
        .collect();
    for s in sends {
        s.await.unwrap();
    }
    let (flushes, entries, fsyncs) = counts();
    let (flushes, entries, fsyncs) = (flushes - flushes0, entries - entries0, fsyncs - fsyncs0);
    eprintln!("the leader appended {entries} entries with {flushes} flushes ({fsyncs} timed)");
    assert!(entries >= 320.0, "every batch is an entry on the leader ({entries})");
    assert!(flushes <= 0.8 * entries, "{flushes} flushes for {entries} entries: the queued writes were not merged");
    // each flush's latency is `sluice_fsync_seconds` (a few may still be under way)
    assert!(fsyncs + 4.0 >= flushes, "{fsyncs} fsyncs timed for {flushes} Raft log flushes");
}

/// Decision 0054: a follower's partition log keeps only `replica.page.cache.tail.bytes` of its
/// end in the page cache (no consumer reads it; on this VM a page cache that grows costs a host
/// fault per page), while the leader's log, read by consumers, stays cached as the kernel keeps
/// it. The drop follows each fsync of the partition log: every append with one log per replica,
/// each snapshot (here every 4 MB) with `double`, whose partition log is synced only then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followers_log_keeps_only_its_tail_in_the_page_cache() {
    let tail = 4u64 << 20;
    let (c, _ports) = Cluster::start_with_metrics_and(&[
        "--replica-page-cache-tail-bytes",
        &tail.to_string(),
        "--raft-log-max-bytes-between-snapshots",
        "4000000",
    ]);
    let leader = replicated_topic(&c, "cached").await;
    for i in 0..40 {
        assert_eq!(produce_big(&c.brokers[leader], "cached", 1_000_000).await, 0, "batch {i}");
    }
    let cached = |i: usize| -> (u64, u64) {
        segments(&c.brokers[i].data_dir.join("cached-0")).values().fold((0, 0), |(c, l), p| {
            let (pc, pl) = sluice_tests::page_cache::cached_bytes(p);
            (c + pc, l + pl)
        })
    };
    // (each follower drops what lies behind its tail at its next fsync, in 2 MiB steps; with
    // `double` up to a snapshot interval more is not synced yet)
    let t0 = Instant::now();
    loop {
        let all: Vec<(u64, u64)> = (0..3).map(cached).collect();
        let followers_dropped = (0..3).filter(|i| *i != leader).all(|i| {
            let (held, len) = all[i];
            len >= 40_000_000 && held <= tail + (8 << 20)
        });
        let (held, len) = all[leader];
        if followers_dropped {
            assert!(held >= len / 2, "the leader's log stays cached: {all:?} (leader {})", leader + 1);
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "a follower's log kept more than its tail ({tail} bytes) cached: (cached, length) per broker {all:?}, leader {}",
            leader + 1
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Bytes under `dir`, each file counted once however many hard links it has there (as `du`).
fn disk_bytes(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut seen = BTreeSet::new();
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(list) = std::fs::read_dir(&d) else { continue };
        for e in list.filter_map(|e| e.ok()) {
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                stack.push(e.path());
            } else if seen.insert((m.dev(), m.ino())) {
                total += m.blocks() * 512;
            }
        }
    }
    total
}

/// Issue 19's soak, short profile (60 s; `SLUICE_SOAK_SECONDS` for the long one): three
/// brokers, replication factor 3, a librdkafka idempotent producer (acks=all) enqueueing 1 KiB
/// records as fast as it can while a read_committed consumer reads. Throughout: no election (every
/// broker's replica saw one leader, in term 1), every broker's RSS at most `SLUICE_SOAK_RSS_MIB`
/// (default 256); at the end each broker's data directory at most 1.15× its partition log, and
/// every acknowledged record read exactly once, in order. Then, under the same load, the leader
/// is killed with SIGKILL: acknowledgements resume within 5 s and every acknowledged record is
/// read once, in order. Then retention trims every broker's disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a soak saturates the machine: tests/run-all.sh runs it alone"]
async fn replication_holds_under_a_saturating_producer() {
    let secs: u64 = std::env::var("SLUICE_SOAK_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
    let rss_max: u64 = std::env::var("SLUICE_SOAK_RSS_MIB").ok().and_then(|s| s.parse().ok()).unwrap_or(256) << 20;
    // extra broker flags, to show what the test catches without a mechanism
    let extra = std::env::var("SLUICE_SOAK_BROKER_ARGS").unwrap_or_default();
    let mut extra: Vec<&str> = extra.split_whitespace().collect();
    extra.extend(["--log-retention-check-interval-ms", "1000"]);
    let (mut c, ports) = Cluster::start_with_metrics_and(&extra);
    agreed_controller(&c, &[0, 1, 2], 3, -1).await;
    let admin = Admin::new(&ClientConfig::new().set("bootstrap.servers", c.brokers[0].bootstrap())).unwrap();
    admin.create_topic("soak", 1, 3, &[("segment.bytes", "104857600")]).await.unwrap();
    leader_of(&c, "soak").await;
    let bootstrap = c.brokers.iter().map(|b| b.bootstrap()).collect::<Vec<_>>().join(",");

    let load = Load::start(&bootstrap, 0, 0);
    let mut peak = [0u64; 3];
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(secs) {
        for (i, b) in c.brokers.iter().enumerate() {
            peak[i] = peak[i].max(b.rss_bytes().unwrap_or(0));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (sent, acked, read) = load.finish().await;
    eprintln!(
        "soak {secs} s: {sent} records sent, {} acknowledged, {} read; peak RSS {:?} MiB",
        acked.len(),
        read.len(),
        peak.map(|r| r >> 20)
    );
    for (i, b) in c.brokers.iter().enumerate() {
        let term = scrape_value(ports[i], "sluice_raft_term{group=\"soak\",partition=\"0\"}");
        let changes = scrape_value(ports[i], "sluice_raft_leader_changes_total{group=\"soak\",partition=\"0\"}");
        assert_eq!((term, changes), (Some(1.0), Some(1.0)), "broker {}: an election happened", b.addr());
        let (all, partition) = (disk_bytes(&b.data_dir), disk_bytes(&b.data_dir.join("soak-0")));
        eprintln!("broker {}: data dir {} MiB, partition log {} MiB", i + 1, all >> 20, partition >> 20);
        assert!(
            all as f64 <= 1.15 * partition as f64,
            "broker {}: {all} bytes on disk for a {partition}-byte log",
            i + 1
        );
        assert!(peak[i] <= rss_max, "broker {}: RSS reached {} MiB", i + 1, peak[i] >> 20);
    }
    assert!(acked.len() > 10_000, "too few records acknowledged: {}", acked.len());
    read_once_in_order(&acked, &read, 0..sent);

    // then the leader is killed with SIGKILL under the same load (a new producer, the same
    // kind): a new leader takes over within seconds, the producer keeps going with its producer
    // id, and every acknowledged record is read once, in order; the killed broker comes back
    let next = read.last().map_or(0, |(o, _)| o + 1);
    let load = Load::start(&bootstrap, next, sent);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let victim = leader_of(&c, "soak").await;
    c.brokers[victim].kill9();
    let killed = Instant::now();
    tokio::time::sleep(Duration::from_secs(10)).await;
    c.brokers[victim].spawn();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let last_before = load.acked.lock().unwrap().iter().map(|a| a.2).filter(|t| *t < killed).max();
    let first_after = load.acked.lock().unwrap().iter().map(|a| a.2).filter(|t| *t > killed).min();
    let (sent2, acked2, read2) = load.finish().await;
    let (Some(a), Some(b)) = (last_before, first_after) else {
        panic!("no acknowledgement on one side of the kill of broker {}", victim + 1)
    };
    eprintln!(
        "kill -9 of the leader (broker {}) under load: failover {:?}; {} records sent, {} acknowledged, {} read",
        victim + 1,
        b - a,
        sent2 - sent,
        acked2.len(),
        read2.len()
    );
    assert!(b - a < Duration::from_secs(5), "failover under load took {:?}", b - a);
    assert!(acked2.len() > 1_000, "too few records acknowledged around the kill: {}", acked2.len());
    read_once_in_order(&acked2, &read2, sent..sent2);

    // then retention trims the partition to a size bound, and disk falls on all three brokers
    let before: Vec<u64> = c.brokers.iter().map(|b| disk_bytes(&b.data_dir)).collect();
    admin.alter_topic_configs("soak", &[("retention.bytes", "209715200")], &[]).await.unwrap();
    let t0 = Instant::now();
    loop {
        let now: Vec<u64> = c.brokers.iter().map(|b| disk_bytes(&b.data_dir)).collect();
        if now.iter().all(|d| *d < 400 << 20) {
            eprintln!("after retention.bytes=200 MiB: {:?} MiB (before {:?} MiB)", now.map_mib(), before.map_mib());
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "disk did not fall with retention: {:?} MiB (before {:?} MiB)",
            now.map_mib(),
            before.map_mib()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Every acknowledged record read once, in order; nothing read that was not sent (ids in
/// `sent`).
fn read_once_in_order(acked: &[(i64, u64, Instant)], read: &[(i64, u64)], sent: std::ops::Range<u64>) {
    let read_ids: Vec<u64> = read.iter().map(|(_, id)| *id).collect();
    assert!(read.windows(2).all(|w| w[0].0 < w[1].0), "offsets read out of order");
    let mut acked_ids: Vec<u64> = acked.iter().map(|(_, id, _)| *id).collect();
    acked_ids.sort_unstable();
    let read_set: BTreeSet<u64> = read_ids.iter().copied().collect();
    assert_eq!(read_set.len(), read_ids.len(), "a record was read twice");
    let missing: Vec<u64> = acked_ids.iter().copied().filter(|id| !read_set.contains(id)).take(5).collect();
    assert!(missing.is_empty(), "acknowledged records not read: {missing:?}...");
    assert!(read_ids.windows(2).all(|w| w[0] < w[1]), "records read out of the order they were sent");
    assert!(read_ids.iter().all(|id| sent.contains(id)), "read a record never sent");
}

/// A librdkafka idempotent producer at full speed (1 KiB records to `soak`/0, each carrying
/// its id, counting from `first_id`) and a read_committed consumer from offset `from`.
struct Load {
    acked: std::sync::Arc<std::sync::Mutex<Vec<(i64, u64, Instant)>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    producer: std::thread::JoinHandle<u64>,
    consumer: std::thread::JoinHandle<Vec<(i64, u64)>>,
}

impl Load {
    fn start(bootstrap: &str, from: i64, first_id: u64) -> Load {
        use rdkafka::consumer::{BaseConsumer, Consumer as _};
        use rdkafka::message::Message;
        use rdkafka::producer::{BaseRecord, DeliveryResult, Producer as _, ProducerContext, ThreadedProducer};
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{Arc, Mutex};

        type Acked = Arc<Mutex<Vec<(i64, u64, Instant)>>>;
        struct Acks(Acked);
        impl rdkafka::ClientContext for Acks {}
        impl ProducerContext for Acks {
            type DeliveryOpaque = ();
            fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
                if let Ok(m) = r {
                    let id = m.payload().and_then(|p| p.get(..8)).map(|b| u64::from_be_bytes(b.try_into().unwrap()));
                    if let Some(id) = id {
                        self.0.lock().unwrap().push((m.offset(), id, Instant::now()));
                    }
                }
            }
        }

        let acked: Acked = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let producer = {
            let (bootstrap, acked, stop) = (bootstrap.to_string(), acked.clone(), stop.clone());
            std::thread::spawn(move || {
                let p: ThreadedProducer<Acks> = rdkafka::ClientConfig::new()
                    .set("bootstrap.servers", &bootstrap)
                    .set("enable.idempotence", "true")
                    .set("linger.ms", "5")
                    .set("message.timeout.ms", "120000")
                    .set("topic.metadata.refresh.interval.ms", "1000")
                    .create_with_context(Acks(acked))
                    .unwrap();
                let mut id = first_id;
                let mut value = vec![b's'; 1024];
                while !stop.load(Ordering::Relaxed) {
                    value[..8].copy_from_slice(&id.to_be_bytes());
                    match p.send(BaseRecord::<(), [u8]>::to("soak").partition(0).payload(&value)) {
                        Ok(()) => id += 1,
                        Err(_) => std::thread::sleep(Duration::from_millis(1)), // queue full
                    }
                }
                p.flush(Duration::from_secs(120)).unwrap();
                id
            })
        };
        let consumer = {
            let (bootstrap, stop) = (bootstrap.to_string(), stop.clone());
            std::thread::spawn(move || {
                let cons: BaseConsumer = rdkafka::ClientConfig::new()
                    .set("bootstrap.servers", &bootstrap)
                    .set("group.id", "soak-reader")
                    .set("isolation.level", "read_committed")
                    .set("enable.auto.commit", "false")
                    .create()
                    .unwrap();
                let mut tpl = rdkafka::TopicPartitionList::new();
                tpl.add_partition_offset("soak", 0, rdkafka::Offset::Offset(from)).unwrap();
                cons.assign(&tpl).unwrap();
                let mut read: Vec<(i64, u64)> = Vec::new();
                let mut idle_since: Option<Instant> = None;
                loop {
                    match cons.poll(Duration::from_millis(200)) {
                        Some(Ok(m)) => {
                            let id =
                                m.payload().and_then(|p| p.get(..8)).map(|b| u64::from_be_bytes(b.try_into().unwrap()));
                            read.push((m.offset(), id.unwrap_or(u64::MAX)));
                            idle_since = None;
                        }
                        // the producer is done: read until nothing new for 5 s
                        _ if stop.load(Ordering::Relaxed)
                            && idle_since.get_or_insert_with(Instant::now).elapsed() > Duration::from_secs(5) =>
                        {
                            return read;
                        }
                        _ => {}
                    }
                }
            })
        };
        Load { acked, stop, producer, consumer }
    }

    /// Stop producing, wait for the last acknowledgements and reads: (ids sent up to, acked, read).
    async fn finish(self) -> (u64, Vec<(i64, u64, Instant)>, Vec<(i64, u64)>) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (producer, consumer) = (self.producer, self.consumer);
        let sent = tokio::task::spawn_blocking(move || producer.join().unwrap()).await.unwrap();
        let read = tokio::task::spawn_blocking(move || consumer.join().unwrap()).await.unwrap();
        let acked = self.acked.lock().unwrap().clone();
        (sent, acked, read)
    }
}

trait MapMib {
    fn map_mib(&self) -> Vec<u64>;
}

impl MapMib for Vec<u64> {
    fn map_mib(&self) -> Vec<u64> {
        self.iter().map(|b| b >> 20).collect()
    }
}

/// Failover without waiting out Raft's timers (issue 19 item 4, decision 0028): a leader killed
/// with SIGKILL is found gone by its followers at once (its Raft connection ends and its Raft
/// port refuses connections), they stop naming it as leader, and a new leader is elected well
/// before any follower's own election timer could fire (a partition follower stands only after
/// its 2 s lease and a 1–2 s timeout without heartbeats, so at the earliest 2.5 s after a kill
/// that came just before a 500 ms heartbeat); the new leader takes writes. Timed, so run alone:
/// beside other three-broker tests on two cores, CI once saw both survivors still electing at
/// 1.27 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "timed failover: tests/run-all.sh runs it alone"]
async fn a_killed_leader_is_replaced_before_any_election_timer_fires() {
    let mut c = Cluster::start();
    let leader = replicated_topic(&c, "fast").await;
    assert_eq!(produce_code(&c.brokers[leader], "fast", 5000).await, 0);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let dead = i32::try_from(leader + 1).unwrap();
    let survivors: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    c.brokers[leader].kill9();
    let t0 = Instant::now();
    let new = loop {
        let mut named = Vec::new();
        for &i in &survivors {
            named.push(metadata_leader(&c.brokers[i], "fast").await);
        }
        if named.iter().all(|l| *l > 0 && *l != dead) && named[0] == named[1] {
            eprintln!("new leader {} named by both survivors {:?} after the kill", named[0], t0.elapsed());
            break named[0];
        }
        if t0.elapsed() > Duration::from_millis(300) {
            assert!(!named.contains(&dead), "a survivor still names the killed broker {dead}: {named:?}");
        }
        assert!(
            t0.elapsed() < Duration::from_millis(2400),
            "no new leader {:?} after killing broker {dead}: {named:?}",
            t0.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let new = usize::try_from(new - 1).unwrap();
    assert_eq!(produce_code(&c.brokers[new], "fast", 5000).await, 0, "the new leader takes writes");
}

/// The bytes of a Raft group's log files in `dir` (`raft-log-<first index>.bin`, and the single
/// `raft-log.bin` of earlier versions).
fn raft_log_bytes(dir: &std::path::Path) -> u64 {
    let Ok(files) = std::fs::read_dir(dir) else { return 0 };
    files
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with("raft-log") && n.ends_with(".bin")))
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

/// A key/value log's state read from its segment files: the newest value of each key, deleted
/// keys dropped (a coordinator shard's log on one replica).
fn folded_kv(dir: &std::path::Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut state = BTreeMap::new();
    for (_, path) in segments(dir) {
        let bytes = std::fs::read(&path).unwrap();
        let mut pos = 0;
        while let Ok((b, size)) = sluice_protocol::batch::BatchView::parse(&bytes[pos..]) {
            for r in b.records().unwrap() {
                let Some(k) = r.key else { continue };
                match r.value {
                    Some(v) => state.insert(k.to_vec(), v.to_vec()),
                    None => state.remove(&k.to_vec()),
                };
            }
            pos += size;
        }
    }
    state
}

/// The first entry index in a Raft group's log on disk (`sluice raft-log-dump`), if any.
fn first_raft_entry(dir: &std::path::Path) -> Option<u64> {
    let dump = std::process::Command::new(sluice_tests::sluice_bin()).arg("raft-log-dump").arg(dir).output().unwrap();
    String::from_utf8_lossy(&dump.stdout)
        .lines()
        .next()
        .and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .and_then(|v| v["log_id"]["index"].as_u64())
}

/// Issue 19, bounded disk for coordinator shards: a shard's group snapshots its live records
/// every `raft.log.max.bytes.between.snapshots` / 16 KiB entries and purges its Raft log, so
/// no replica keeps the shard's first entries; a replica wiped while the others went on is sent
/// the snapshot (it cannot replay: the entries are gone), holds the same state as the leader,
/// and a transaction coordinator that fails over carries on from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_shard_snapshots_its_state_and_a_wiped_replica_catches_up_from_it() {
    use sluice_tests::raw;
    // 2,000,000 / 16 KiB: a snapshot every 122 entries
    let (mut c, ports) = Cluster::start_with_metrics_and(&[
        "--transaction-state-log-num-partitions",
        "1",
        "--raft-log-max-bytes-between-snapshots",
        "2000000",
    ]);
    agreed_controller(&c, &[0, 1, 2], 3, -1).await;
    let txn = "shard-snapshot";
    let (coordinator, conn, pid, epoch) = init_at_coordinator(&c, txn).await;
    let leader = usize::try_from(coordinator - 1).unwrap();
    let shard_dir = |b: &Broker| b.data_dir.join("__cluster").join("replicas").join("__transaction_state-0");
    let kv_dir = |b: &Broker| b.data_dir.join("__transaction_state-0");
    // 400 empty aborts: several snapshot intervals of entries
    let epoch = raw::abort_empty(&conn, txn, pid, epoch, 400).await.unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    for b in &c.brokers {
        let first = first_raft_entry(&shard_dir(b));
        assert!(first.is_some_and(|i| i > 100), "broker {}: the shard's Raft log starts at {first:?}", b.addr());
    }

    let wiped = (leader + 1) % 3;
    c.brokers[wiped].stop();
    std::fs::remove_dir_all(shard_dir(&c.brokers[wiped])).unwrap();
    std::fs::remove_dir_all(kv_dir(&c.brokers[wiped])).unwrap();
    // the others go on meanwhile
    let epoch = raw::abort_empty(&conn, txn, pid, epoch, 200).await.unwrap();
    c.brokers[wiped].spawn();
    let installed = "sluice_raft_snapshots_installed_total{partition=\"__transaction_state-0\"}";
    let t1 = Instant::now();
    loop {
        let caught_up = scrape_value(ports[wiped], installed).unwrap_or(0.0) >= 1.0
            && folded_kv(&kv_dir(&c.brokers[wiped])) == folded_kv(&kv_dir(&c.brokers[leader]));
        if caught_up {
            break;
        }
        assert!(
            t1.elapsed() < Duration::from_secs(60),
            "the wiped shard replica did not catch up from a snapshot: installed {:?}\nwiped:\n{}",
            scrape_value(ports[wiped], installed),
            c.brokers[wiped].log_tail()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let first = first_raft_entry(&shard_dir(&c.brokers[wiped]));
    assert!(first.is_none_or(|i| i > 100), "the wiped replica's Raft log starts at entry {first:?}: it replayed");
    assert!(!folded_kv(&kv_dir(&c.brokers[wiped])).is_empty(), "the wiped replica holds no transaction state");

    // the leader's broker killed: a survivor (the wiped one or the other) carries on
    drop(conn);
    c.brokers[leader].kill9();
    carries_on_after_aborts(&c, wiped, txn, coordinator, pid, epoch).await;
}

/// Decision 0033: a follower whose connection from a live leader ends (a leader drops a
/// connection whose append timed out under load) does not report the partition leaderless: it
/// tries the leader's port first, and only a refused port is a lost leader. Every open Raft
/// connection is closed 30 times while both followers' Metadata is read every 20 ms: it always
/// names the leader. (Before, each reset made the followers answer "no leader" for about
/// 300 ms, and a partition leader routing a transaction to its "electing" coordinator answered
/// NOT_COORDINATOR — franz-go's TestTxnEtl on three brokers.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_leader_whose_connections_drop_is_never_reported_lost() {
    let (c, links) = Cluster::start_linked(5);
    let leader = replicated_topic(&c, "reset").await;
    assert_eq!(produce_code(&c.brokers[leader], "reset", 5000).await, 0);
    let followers: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    let want = i32::try_from(leader + 1).unwrap();
    let mut answers = Vec::new();
    for _ in 0..30 {
        links.reset();
        let until = Instant::now() + Duration::from_millis(150);
        while Instant::now() < until {
            for f in &followers {
                answers.push((*f + 1, metadata_leader(&c.brokers[*f], "reset").await));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let wrong: Vec<_> = answers.iter().filter(|(_, l)| *l != want).collect();
    assert!(
        wrong.is_empty(),
        "{} of {} Metadata answers from the followers did not name leader {want}: {:?}",
        wrong.len(),
        answers.len(),
        &wrong[..wrong.len().min(10)]
    );
}

/// Initialize transactional id `txn` at its coordinator, retrying as clients do while the
/// shard's leadership settles: NOT_COORDINATOR (16) sends a client back to FindCoordinator,
/// COORDINATOR_LOAD_IN_PROGRESS (14) and COORDINATOR_NOT_AVAILABLE (15) make it wait. The
/// coordinator's id, a connection to it, the producer id and epoch.
async fn init_at_coordinator(c: &Cluster, txn: &str) -> (i32, Connection, i64, i16) {
    use sluice_tests::raw;
    let t0 = Instant::now();
    loop {
        let id = txn_coordinator(&c.brokers[0], txn).await;
        if id > 0 {
            let b = &c.brokers[usize::try_from(id - 1).unwrap()];
            let conn = Connection::connect(&b.bootstrap(), "txn-test", 1).await.unwrap();
            match raw::init_producer_id(&conn, 4, Some(txn), None).await.unwrap() {
                (0, pid, epoch) => return (id, conn, pid, epoch),
                (14..=16, _, _) => {}
                (err, _, _) => panic!("InitProducerId on broker {id}: error {err}"),
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "no transaction coordinator initialized the id");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// After `old`, the coordinator of `txn`, was killed: a new coordinator (asked through broker
/// index `via`) describes the id's last transaction as aborted at `pid`/`epoch` and ends the
/// next one, bumping the epoch — it carries on from the replicated log.
async fn carries_on_after_aborts(c: &Cluster, via: usize, txn: &str, old: i32, pid: i64, epoch: i16) {
    use sluice_tests::raw;
    let (new, conn) = new_coordinator_after_aborts(c, via, txn, old).await;
    assert_eq!(raw::describe_txn(&conn, txn).await.unwrap(), ("CompleteAbort".into(), pid, epoch), "on {new}");
    let (err, _, next) = raw::end_txn(&conn, 5, txn, pid, epoch, false).await.unwrap();
    assert_eq!((err, next), (0, epoch + 1), "the new coordinator {new} carries on");
}

/// After `old`, the coordinator of `txn`, was killed: the broker that coordinates it now (asked
/// through broker index `via`) once it describes the id's last transaction as aborted, and a
/// connection to it.
async fn new_coordinator_after_aborts(c: &Cluster, via: usize, txn: &str, old: i32) -> (i32, Connection) {
    use sluice_tests::raw;
    let t0 = Instant::now();
    loop {
        let id = txn_coordinator(&c.brokers[via], txn).await;
        if id > 0 && id != old {
            let b = &c.brokers[usize::try_from(id - 1).unwrap()];
            if let Ok(conn) = Connection::connect(&b.bootstrap(), "txn-test", 1).await {
                if raw::describe_txn(&conn, txn).await.is_ok_and(|d| d.0 == "CompleteAbort") {
                    return (id, conn);
                }
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "no new coordinator with the id's state");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Produce one batch of `records` to `topic`/0 at `b` with acks=all; the error code.
async fn produce_records(b: &Broker, topic: &'static str, records: &[sluice_protocol::batch::NewRecord]) -> i16 {
    produce_records_at(b.bootstrap(), topic, records, 10_000).await
}

/// offset, key, value
type DiskRecord = (i64, Vec<u8>, Vec<u8>);

/// Every data record in partition directory `dir`'s segments: (offset, key, value), and the
/// base of its newest (active) segment.
fn records_on_disk(dir: &std::path::Path) -> (Vec<DiskRecord>, i64) {
    let segs = segments(dir);
    let mut out = Vec::new();
    for path in segs.values() {
        let bytes = std::fs::read(path).unwrap_or_default();
        for b in sluice_protocol::batch::iter_batches(&bytes) {
            let Ok((_, v)) = b else { break };
            if v.is_control() {
                continue;
            }
            for r in v.records().unwrap_or_default() {
                out.push((r.offset, r.key.unwrap_or_default().to_vec(), r.value.unwrap_or_default().to_vec()));
            }
        }
    }
    (out, segs.keys().next_back().copied().unwrap_or(0))
}

/// The replica in `dir` is compacted: its newest value of every key is `expected`'s, and below
/// its active segment no key appears twice.
fn compacted_as(dir: &std::path::Path, expected: &BTreeMap<Vec<u8>, Vec<u8>>) -> Result<(), String> {
    let (records, active) = records_on_disk(dir);
    let mut table = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for (o, k, v) in &records {
        if *o < active && !seen.insert(k.clone()) {
            return Err(format!("key {} twice below the active segment at {active}", String::from_utf8_lossy(k)));
        }
        table.insert(k.clone(), v.clone());
    }
    if &table != expected {
        return Err(format!("table of {} keys differs from the {} expected", table.len(), expected.len()));
    }
    Ok(())
}

/// Issue 20 on a replicated topic: every replica cleans its copy to the same table (one record
/// per key below its active segment), and a replica wiped after cleaning catches up from a
/// snapshot of the leader's cleaned segments and is compacted as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_replica_of_a_compacted_topic_is_cleaned_and_a_wiped_one_catches_up_cleaned() {
    let (mut c, ports) = Cluster::start_with_metrics_and(&[
        "--log-cleaner-backoff-ms",
        "200",
        "--raft-log-max-bytes-between-snapshots",
        "300000",
    ]);
    agreed_controller(&c, &[0, 1, 2], 3, -1).await;
    let admin = Admin::new(&ClientConfig::new().set("bootstrap.servers", c.brokers[0].bootstrap())).unwrap();
    let configs = [("cleanup.policy", "compact"), ("segment.ms", "100"), ("min.cleanable.dirty.ratio", "0.01")];
    admin.create_topic("compacted", 1, 3, &configs).await.unwrap();
    let mut leader = leader_of(&c, "compacted").await;
    let mut expected = BTreeMap::new();
    let produce_round = |expected: &mut BTreeMap<Vec<u8>, Vec<u8>>, round: i64| {
        let records: Vec<sluice_protocol::batch::NewRecord> = (0..20)
            .map(|k| sluice_protocol::batch::NewRecord {
                // 200 ms of record time per round: each round rolls a segment (segment.ms=100)
                timestamp: 1_000_000 + round * 200,
                key: Some(bytes::Bytes::from(format!("k{k}"))),
                value: Some(bytes::Bytes::from(format!("{round}-{k}-{}", "v".repeat(1000)))),
                headers: vec![],
            })
            .collect();
        for r in &records {
            expected.insert(r.key.clone().unwrap().to_vec(), r.value.clone().unwrap().to_vec());
        }
        records
    };
    let mut rounds = Vec::new();
    for round in 0..40 {
        rounds.push(produce_round(&mut expected, round));
    }
    async fn produce_at_one_of(c: &Cluster, among: &[usize], records: &[sluice_protocol::batch::NewRecord]) -> usize {
        let t0 = Instant::now();
        loop {
            for &i in among {
                if produce_records(&c.brokers[i], "compacted", records).await == 0 {
                    return i;
                }
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "no broker acknowledged a round");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    for records in &rounds {
        leader = produce_at_one_of(&c, &[leader, 0, 1, 2], records).await;
    }
    let dirs: Vec<_> = c.brokers.iter().map(|b| b.data_dir.join("compacted-0")).collect();
    let wait_compacted = |dirs: Vec<std::path::PathBuf>, expected: BTreeMap<Vec<u8>, Vec<u8>>| async move {
        let t0 = Instant::now();
        loop {
            let states: Vec<_> = dirs.iter().map(|d| compacted_as(d, &expected)).collect();
            if states.iter().all(|s| s.is_ok()) {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "replicas not compacted: {states:?}; segments {:?}; cleaned {:?}; passes logged {:?}",
                dirs.iter().map(|d| segments(d).len()).collect::<Vec<_>>(),
                dirs.iter().map(|d| d.join("cleaner.checkpoint").exists()).collect::<Vec<_>>(),
                dirs.iter()
                    .map(|d| std::fs::read_to_string(d.parent().unwrap().with_extension("log"))
                        .unwrap_or_default()
                        .matches("cleaned offsets")
                        .count())
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    };
    wait_compacted(dirs.clone(), expected.clone()).await;

    // wipe a follower, write more (its snapshot moves on), bring it back
    let follower = (0..3).find(|i| *i != leader).unwrap();
    c.brokers[follower].stop();
    std::fs::remove_dir_all(replica_dir(&c.brokers[follower])).unwrap();
    std::fs::remove_dir_all(&dirs[follower]).unwrap();
    let running: Vec<usize> = (0..3).filter(|i| *i != follower).collect();
    for round in 40..60 {
        let records = produce_round(&mut expected, round);
        leader = produce_at_one_of(&c, &[&[leader][..], &running].concat(), &records).await;
    }
    c.brokers[follower].spawn();
    let installed = "sluice_raft_snapshots_installed_total{partition=\"compacted-0\"}";
    let t0 = Instant::now();
    while scrape_value(ports[follower], installed).unwrap_or(0.0) < 1.0 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the wiped replica installed no snapshot:\n{}\nthe leader:\n{}",
            c.brokers[follower].log_tail(),
            c.brokers[leader].log_tail()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // one more round rolls every replica's active segment past the last batch of the history
    let records = produce_round(&mut expected, 60);
    produce_at_one_of(&c, &[leader, 0, 1, 2], &records).await;
    wait_compacted(dirs, expected).await;
}

/// Each broker's directory of `topic`/0, once all three hold the same batches (the followers
/// apply a moment after the leader acknowledges).
async fn same_on_every_replica(c: &Cluster, topic: &str, leader: usize) -> Vec<std::path::PathBuf> {
    let dirs: Vec<_> = c.brokers.iter().map(|b| b.data_dir.join(format!("{topic}-0"))).collect();
    let t0 = Instant::now();
    while !dirs.iter().all(|d| segment_bytes(d) == segment_bytes(&dirs[leader])) {
        if t0.elapsed() >= Duration::from_secs(30) {
            for (i, b) in c.brokers.iter().enumerate() {
                let log = std::fs::read_to_string(b.data_dir.with_extension("log")).unwrap_or_default();
                let lines: Vec<&str> = log
                    .lines()
                    .filter(|l| l.contains(&format!("\"{topic}")) || l.contains(&format!("={topic}")))
                    .collect();
                eprintln!("broker {}:\n{}", i + 1, lines.join("\n"));
            }
            panic!("the replicas differ:\n{}", batch_lists(&dirs));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    dirs
}

/// Each directory's batches (base offset, last offset, control or not, epoch, CRC), for a
/// failure's message.
fn batch_lists(dirs: &[std::path::PathBuf]) -> String {
    let mut out = String::new();
    for d in dirs {
        out.push_str(&format!("{}:\n", d.display()));
        for file in segments(d).values() {
            let bytes = std::fs::read(file).unwrap_or_default();
            for (_, v) in sluice_protocol::batch::iter_batches(&bytes).map_while(Result::ok) {
                out.push_str(&format!(
                    "  {}..{} {} epoch {} crc {:08x}\n",
                    v.base_offset(),
                    v.last_offset(),
                    if v.is_control() { "control" } else { "records" },
                    v.partition_leader_epoch(),
                    v.crc()
                ));
            }
        }
    }
    out
}

/// Flip a bit in the record of batch `n` (past its 61-byte header, inside what its CRC covers)
/// of segment `file`; the file's bytes before, and its record batches' byte positions.
fn flip_in_batch(file: &std::path::Path, n: usize, bit: u64) -> (Vec<u8>, Vec<usize>) {
    let pristine = std::fs::read(file).unwrap();
    // (the record batches: with one log per replica Raft's own control batches are there too)
    let starts: Vec<usize> = sluice_protocol::batch::iter_batches(&pristine)
        .map(|b| b.unwrap())
        .filter(|(_, v)| !v.is_control())
        .map(|(at, _)| at)
        .collect();
    sluice_tests::lossyfs::corrupt(file, "flip", (starts[n] + 64) as u64, bit).unwrap();
    assert_ne!(std::fs::read(file).unwrap(), pristine);
    (pristine, starts)
}

/// Issue 22: a bit that rots at rest in the leader's copy of a replicated partition is found by
/// the first read that meets it (the partition goes offline there: KAFKA_STORAGE_ERROR, one
/// log line), and the replica replaces the damaged batch with another replica's copy of it
/// (decision 0037): the file is byte for byte what it was, the consumer — librdkafka with
/// `check.crcs` — reads every record once and in order, and the partition takes writes again.
/// Without the repair the partition stays offline and the consumer never gets past the damage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_replica_repairs_itself_from_its_peers() {
    use rdkafka::consumer::{BaseConsumer, Consumer as _};
    use rdkafka::message::Message;
    let (c, ports) = Cluster::start_with_metrics_logging(&[], Some("info,openraft=warn"));
    let leader = replicated_topic(&c, "mended").await;
    produce_numbered(&c, &[leader], "mended", 0..40).await;
    let dirs = same_on_every_replica(&c, "mended", leader).await;
    let file = segments(&dirs[leader])[&0].clone();
    // a bit in the 21st batch's record
    let (pristine, starts) = flip_in_batch(&file, 20, 5);
    assert_eq!(starts.len(), 40);

    let cons: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", c.brokers[0].bootstrap())
        .set("group.id", "mended-check")
        .set("enable.auto.commit", "false")
        .set("check.crcs", "true")
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset("mended", 0, rdkafka::Offset::Beginning).unwrap();
    cons.assign(&tpl).unwrap();
    let mut seen: Vec<(i64, String)> = Vec::new();
    let t0 = Instant::now();
    while seen.len() < 40 {
        assert!(t0.elapsed() < Duration::from_secs(60), "read {} of 40 records: {seen:?}", seen.len());
        match cons.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                seen.push((m.offset(), String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned()))
            }
            Some(Err(e)) => eprintln!("consumer: {e}"),
            None => {}
        }
    }
    // every record once, in order
    assert_numbered(&seen, 0..40);
    // the read found the damage, the replica repaired it: the file is what it was
    let log = std::fs::read_to_string(c.brokers[leader].data_dir.with_extension("log")).unwrap_or_default();
    assert!(log.contains("partition mended-0 is offline: damaged data"), "the damage was found by a read");
    assert!(log.contains("was replaced by broker"), "the repair is logged");
    assert_eq!(std::fs::read(&file).unwrap(), pristine, "the segment holds what it held");
    let t0 = Instant::now();
    while scrape_value(ports[leader], "sluice_partition_offline{topic=\"mended\",partition=\"0\"}") != Some(0.0) {
        assert!(t0.elapsed() < Duration::from_secs(10), "the partition is reported offline");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(scrape_value(ports[leader], "sluice_storage_repairs_total{topic=\"mended\"}"), Some(1.0));
    // and it takes writes again, wherever it is led now
    acknowledged_by_one_of(&c, &[0, 1, 2], "mended", "after the repair").await;
}

/// Produce `record-{i}` for `i` in `range` to `topic`/0, one batch each, acks=all, at whichever
/// of `among` acknowledges.
async fn produce_numbered(c: &Cluster, among: &[usize], topic: &'static str, range: std::ops::Range<usize>) {
    for i in range {
        let record = sluice_protocol::batch::NewRecord {
            timestamp: 1,
            value: Some(bytes::Bytes::from(format!("record-{i}"))),
            ..Default::default()
        };
        let t0 = Instant::now();
        'sent: loop {
            for &b in among {
                if produce_batch(&c.brokers[b], topic, record.clone(), 5_000).await == 0 {
                    break 'sent;
                }
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "record {i} not acknowledged");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// librdkafka's view of `topic`/0 through `bootstrap`, from the start: `want` records (60 s at
/// most), with their offsets.
fn read_numbered(bootstrap: &str, topic: &str, want: usize) -> Vec<(i64, String)> {
    use rdkafka::consumer::{BaseConsumer, Consumer as _};
    use rdkafka::message::Message;
    let cons: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("{topic}-check"))
        .set("enable.auto.commit", "false")
        .set("check.crcs", "true")
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, rdkafka::Offset::Beginning).unwrap();
    cons.assign(&tpl).unwrap();
    let mut seen = Vec::new();
    let t0 = Instant::now();
    while seen.len() < want && t0.elapsed() < Duration::from_secs(60) {
        if let Some(Ok(m)) = cons.poll(Duration::from_millis(200)) {
            seen.push((m.offset(), String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned()));
        }
    }
    seen
}

/// Issue 22: a bit flipped at rest in a follower's Raft log, found when it starts again (each
/// record carries a CRC32C). The log is cut at the damaged record (decision 0030) and the
/// replica is sent again what it lost, while the others serve: afterwards every replica's
/// partition log holds the same batches, and with the old leader killed the two others —
/// the damaged one among them — serve every acknowledged record once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_raft_log_is_cut_at_the_damage_and_the_replica_catches_up() {
    // (the Raft log files of the double format, whatever format the suite runs with)
    let (mut c, _ports) =
        Cluster::start_with_metrics_logging(&["--replication-log-format", "double"], Some("info,openraft=warn"));
    let leader = replicated_topic(&c, "raftrot").await;
    let follower = (0..3).find(|i| *i != leader).unwrap();
    produce_numbered(&c, &[leader], "raftrot", 0..40).await;
    let dirs = same_on_every_replica(&c, "raftrot", leader).await;
    assert_eq!(c.brokers[follower].stop(), Some(0));
    let rdir = replica_dir(&c.brokers[follower]);
    let mut files: Vec<_> = std::fs::read_dir(&rdir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("raft-log"))
        .collect();
    files.sort();
    let file = files.iter().find(|p| std::fs::metadata(p).unwrap().len() > 1000).expect("a Raft log file").clone();
    let size = std::fs::metadata(&file).unwrap().len();
    sluice_tests::lossyfs::corrupt(&file, "flip", size / 2, 4).unwrap();
    let others: Vec<usize> = (0..3).filter(|i| *i != follower).collect();
    produce_numbered(&c, &others, "raftrot", 40..60).await;
    c.brokers[follower].spawn();
    // it catches up: every replica holds the same batches again
    let t0 = Instant::now();
    while !dirs.iter().all(|d| segment_bytes(d) == segment_bytes(&dirs[leader])) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the damaged replica did not catch up\npanics: {}\n{}",
            c.brokers[follower].panics(),
            c.brokers[follower].log_tail()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let log = std::fs::read_to_string(c.brokers[follower].data_dir.with_extension("log")).unwrap_or_default();
    assert!(
        log.lines().any(|l| l.contains("raft-log") && (l.contains("CRC") || l.contains("does not follow"))),
        "the start names the damaged record:\n{}",
        c.brokers[follower].log_tail()
    );
    // the old leader gone, the other two serve everything acknowledged
    let current = leader_of(&c, "raftrot").await;
    c.brokers[current].kill9();
    let alive: Vec<usize> = (0..3).filter(|i| *i != current).collect();
    produce_numbered(&c, &alive, "raftrot", 60..61).await;
    let seen = read_numbered(&c.brokers[alive[0]].bootstrap(), "raftrot", 61);
    // every acknowledged record once, in order
    assert_numbered(&seen, 0..61);
    assert!(c.brokers.iter().all(|b| b.panics().is_empty()));
}

/// Issue 22: damage where nobody reads — a follower's copy — is found by the background
/// scrubber (`log.scrub.bytes.per.second`), and the follower repairs the batch from another
/// replica: its file is byte for byte what it was, with no client reading anything.
/// Without the scrubber (rate 0) the damage stays: the test fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scrubber_finds_damage_in_a_followers_copy_and_the_follower_repairs_it() {
    let rate = std::env::var("TEST_SCRUB_RATE").unwrap_or_else(|_| "104857600".into());
    let (c, _ports) =
        Cluster::start_with_metrics_logging(&["--log-scrub-bytes-per-second", &rate], Some("info,openraft=warn"));
    let leader = replicated_topic(&c, "scrubbed").await;
    let follower = (0..3).find(|i| *i != leader).unwrap();
    produce_numbered(&c, &[leader], "scrubbed", 0..40).await;
    let dirs = same_on_every_replica(&c, "scrubbed", leader).await;
    let file = segments(&dirs[follower])[&0].clone();
    // a bit of the 21st batch's record (inside its CRC: a base offset's is not)
    let (pristine, _) = flip_in_batch(&file, 20, 1);
    let t0 = Instant::now();
    while std::fs::read(&file).unwrap() != pristine {
        assert!(
            t0.elapsed() < Duration::from_secs(40),
            "the follower's damaged copy was not found and repaired:\n{}",
            c.brokers[follower].log_tail()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!("found and repaired {:?} after the damage", t0.elapsed());
    let log = std::fs::read_to_string(c.brokers[follower].data_dir.with_extension("log")).unwrap_or_default();
    assert!(log.contains("(found by the scrubber)"), "the scrubber found it");
    assert!(log.contains("was replaced by broker"), "the follower repaired it");
    // and the partition is whole: everything reads back through the follower's leader
    let seen = read_numbered(&c.brokers[follower].bootstrap(), "scrubbed", 40);
    assert_numbered(&seen, 0..40);
}

/// Issue 22: a replica's synced batches damaged or lost while it is down — a bit flipped in a
/// batch of its active segment, and the file cut further on (a disk that lost writes it had
/// synced) — all below the end its `applied.json` records. Its start used to take the flip for
/// a torn tail and cut there: the acknowledged batches after it were gone on that replica, the
/// entries that wrote them were never applied again, and every batch it wrote afterwards took
/// other offsets than on the other replicas. Now its start keeps what it has (the partition's
/// recovery point says those bytes were synced), and the replica restores the damaged batch and
/// the lost ones from its peers' copies before it applies anything more: every replica holds
/// the same batches, and the replica serves every record once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicas_synced_batches_damaged_or_lost_at_rest_are_restored_from_its_peers() {
    let (mut c, ports) = Cluster::start_with_metrics_logging(&[], Some("info,openraft=warn"));
    let leader = replicated_topic(&c, "synced").await;
    let follower = (0..3).find(|i| *i != leader).unwrap();
    produce_numbered(&c, &[leader], "synced", 0..40).await;
    // a second later one more: its apply records everything as applied (and synced)
    tokio::time::sleep(Duration::from_millis(1100)).await;
    produce_numbered(&c, &[leader], "synced", 40..41).await;
    let dirs = same_on_every_replica(&c, "synced", leader).await;
    let applied = replica_dir(&c.brokers[follower]).join("applied.json");
    let applied_end = || {
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&applied).unwrap_or_default()).unwrap_or(serde_json::Value::Null);
        json["log_end"].as_i64().unwrap_or(0)
    };
    until(|| applied_end() >= 41, "the follower records offset 41 as applied").await;
    c.brokers[follower].kill9();
    let file = segments(&dirs[follower])[&0].clone();
    let (pristine, starts) = flip_in_batch(&file, 10, 3);
    assert_eq!(starts.len(), 41);
    let mut damaged = std::fs::read(&file).unwrap();
    damaged.truncate(starts[30] + 7);
    std::fs::write(&file, &damaged).unwrap();

    let others: Vec<usize> = (0..3).filter(|i| *i != follower).collect();
    produce_numbered(&c, &others, "synced", 41..60).await;
    c.brokers[follower].spawn();
    let t0 = Instant::now();
    while segment_bytes(&dirs[follower]) != segment_bytes(&dirs[leader]) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the damaged replica does not hold the leader's batches\npanics: {}\n{}",
            c.brokers[follower].panics(),
            c.brokers[follower].log_tail()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(std::fs::read(&file).unwrap()[..pristine.len()], pristine[..], "its first 41 batches as they were");
    let log = std::fs::read_to_string(c.brokers[follower].data_dir.with_extension("log")).unwrap_or_default();
    assert!(
        log.contains("below the recovery point"),
        "the start says what it kept:\n{}",
        c.brokers[follower].log_tail()
    );
    assert!(log.contains("the partition is online again"), "the repair is logged");
    // the flipped batch and the eleven lost ones, each from a peer's copy
    assert_eq!(scrape_value(ports[follower], "sluice_storage_repairs_total{topic=\"synced\"}"), Some(12.0));
    let seen = read_numbered(&c.brokers[follower].bootstrap(), "synced", 60);
    assert_numbered(&seen, 0..60);
    assert!(c.brokers.iter().all(|b| b.panics().is_empty()));
}

/// Three brokers whose replicated partitions keep their Raft logs in `format`, one topic
/// (replication factor 3) holding `records` numbered records on every replica.
struct Replicated {
    c: Cluster,
    ports: Vec<u16>,
    leader: usize,
    follower: usize,
    dirs: Vec<std::path::PathBuf>,
}

async fn replicated_in(format: &str, topic: &'static str, records: usize) -> Replicated {
    let (c, ports) =
        Cluster::start_with_metrics_logging(&["--replication-log-format", format], Some("info,openraft=warn"));
    let leader = replicated_topic(&c, topic).await;
    let follower = (0..3).find(|i| *i != leader).unwrap();
    produce_numbered(&c, &[leader], topic, 0..records).await;
    let dirs = same_on_every_replica(&c, topic, leader).await;
    Replicated { c, ports, leader, follower, dirs }
}

/// One log per replica (decision 0045): a batch's partition leader epoch is its Raft term,
/// outside the batch's CRC. A flipped high bit in a follower's copy at rest (a term it never
/// voted in) is found when the replica's Raft log opens, and the batch is repaired from a
/// peer's copy before the replica takes part in its group (decision 0050): the file is byte for
/// byte what it was. Without the check the replica opens with the flipped term in its log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_log_per_replica_finds_a_flipped_term_at_rest_and_repairs_it_from_its_peers() {
    let Replicated { mut c, ports, leader, follower, dirs } = replicated_in("single", "terms", 30).await;
    c.brokers[follower].kill9();
    let file = segments(&dirs[follower])[&0].clone();
    let pristine = std::fs::read(&file).unwrap();
    let data: Vec<usize> = sluice_protocol::batch::iter_batches(&pristine)
        .map(|b| b.unwrap())
        .filter(|(_, v)| !v.is_control())
        .map(|(at, _)| at)
        .collect();
    assert!(data.len() >= 20, "{} data batches", data.len());
    // bit 20 of the epoch (header bytes 12..16, big-endian): term + 2^20
    let mut flipped = pristine.clone();
    flipped[data[10] + 13] ^= 1 << 4;
    std::fs::write(&file, &flipped).unwrap();

    c.brokers[follower].spawn();
    until(|| std::fs::read(&file).unwrap()[..pristine.len()] == pristine[..], "the follower's copy is repaired").await;
    let log = std::fs::read_to_string(c.brokers[follower].data_dir.with_extension("log")).unwrap_or_default();
    let about = || log.lines().filter(|l| l.contains("terms") || l.contains("damage")).collect::<Vec<_>>().join("\n");
    assert!(log.contains("outside the terms this replica has seen"), "the damage is named:\n{}", about());
    assert!(log.contains("the partition is online again"), "the repair is logged");
    assert_eq!(scrape_value(ports[follower], "sluice_storage_repairs_total{topic=\"terms\"}"), Some(1.0));
    // the replica takes part again: it holds what the others hold after more writes
    produce_numbered(&c, &[leader], "terms", 30..40).await;
    same_on_every_replica(&c, "terms", leader).await;
    let seen = read_numbered(&c.brokers[leader].bootstrap(), "terms", 40);
    let values: Vec<String> = seen.iter().map(|(_, v)| v.clone()).collect();
    assert_eq!(values, (0..40).map(|i| format!("record-{i}")).collect::<Vec<_>>());
    assert!(c.brokers.iter().all(|b| b.panics().is_empty()));
}

/// A group whose replicas keep their Raft logs differently has different offsets on each (Raft's
/// own entries take offsets with one log per replica). A replica created after its group (here
/// a wiped follower; a reassigned partition's new replica alike) takes its group's format from
/// the other replicas, not its broker's `replication.log.format`: restarted with `single`, the
/// wiped follower of a `double` group keeps a Raft log of its own, and its partition log is
/// the leader's byte for byte. Without asking, it was created `single`, and its log differed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_replica_keeps_its_raft_log_as_its_group_does() {
    let Replicated { mut c, leader, follower, dirs, .. } = replicated_in("double", "formats", 20).await;
    c.brokers[follower].stop();
    std::fs::remove_dir_all(replica_dir(&c.brokers[follower])).unwrap();
    std::fs::remove_dir_all(&dirs[follower]).unwrap();
    let at = c.brokers[follower].extra_args.iter().position(|a| a == "double").unwrap();
    c.brokers[follower].extra_args[at] = "single".into();
    c.brokers[follower].spawn();
    produce_numbered(&c, &[leader], "formats", 20..40).await;
    same_on_every_replica(&c, "formats", leader).await;
    let group = replica_dir(&c.brokers[follower]);
    let files: Vec<String> =
        std::fs::read_dir(&group).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(files.iter().any(|f| f.starts_with("raft-log")), "a Raft log of its own: {files:?}");
    assert!(!files.iter().any(|f| f == "raft-state.json"), "not the partition log: {files:?}");
    let log = std::fs::read_to_string(c.brokers[follower].data_dir.with_extension("log")).unwrap_or_default();
    assert!(log.contains("keeps its Raft log as its group does"), "{}", c.brokers[follower].log_tail());
    assert!(c.brokers.iter().all(|b| b.panics().is_empty()));
}

/// Decision 0056: a `double` group (a Raft log of its own beside the partition log) converts to
/// one log per replica once its leader's broker is set to `single`. Every replica converts at
/// the one Raft entry the leader proposed: the two replicas running take it, and the one away
/// meanwhile (still set to `double`) is sent a converted replica's snapshot and converts at its
/// last entry. Afterwards no replica keeps a Raft log of its own, the three partition logs are
/// byte for byte the same, the records written before keep their offsets, every record is read
/// once and in order, and the converted group survives its leader's kill -9. Without the
/// conversion the replicas keep their Raft logs (the first assertion fails).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_double_group_converts_to_one_log_per_replica_at_one_entry() {
    let (mut c, _) =
        Cluster::start_with_metrics_logging(&["--replication-log-format", "double"], Some("info,openraft=warn"));
    agreed_controller(&c, &[0, 1, 2], 3, -1).await;
    let admin = Admin::new(&ClientConfig::new().set("bootstrap.servers", c.brokers[0].bootstrap())).unwrap();
    // (the records' timestamp is 1970: time retention would delete a closed segment of them, as a
    // replica sent a snapshot has)
    admin.create_topic("converts", 1, 3, &[("retention.ms", "-1")]).await.unwrap();
    let leader = leader_of(&c, "converts").await;
    let follower = (0..3).find(|i| *i != leader).unwrap();
    produce_numbered(&c, &[leader], "converts", 0..30).await;
    same_on_every_replica(&c, "converts", leader).await;
    let before = read_numbered(&c.brokers[leader].bootstrap(), "converts", 30);
    assert_eq!(before.iter().map(|(o, _)| *o).collect::<Vec<_>>(), (0..30).collect::<Vec<i64>>());
    let away = (0..3).find(|i| *i != leader && *i != follower).unwrap();
    c.brokers[away].stop();
    let running = [leader, follower];
    for &b in &running {
        c.brokers[b].stop();
        let at = c.brokers[b].extra_args.iter().position(|a| a == "double").unwrap();
        c.brokers[b].extra_args[at] = "single".into();
    }
    for &b in &running {
        c.brokers[b].spawn();
    }
    let converted = converted_to_single;
    let t0 = Instant::now();
    while !running.iter().all(|&b| converted(&c.brokers[b])) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the running replicas did not convert:\n{}",
            c.brokers[leader].log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    produce_numbered(&c, &running, "converts", 30..50).await;
    // the replica that was away still keeps `double`: its group's format is not its setting
    c.brokers[away].spawn();
    let t0 = Instant::now();
    while !converted(&c.brokers[away]) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the replica away did not convert:\n{}",
            c.brokers[away].log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let leader = leader_of(&c, "converts").await;
    produce_numbered(&c, &[leader], "converts", 50..60).await;
    same_on_every_replica(&c, "converts", leader).await;
    for (i, b) in c.brokers.iter().enumerate() {
        let log = std::fs::read_to_string(b.data_dir.with_extension("log")).unwrap_or_default();
        assert!(log.contains("converted to one log per replica at Raft entry"), "broker {}: {}", i + 1, b.log_tail());
    }
    let seen = read_numbered(&c.brokers[leader].bootstrap(), "converts", 60);
    assert_eq!(seen[..30], before[..], "the records written before keep their offsets");
    let values: Vec<String> = seen.iter().map(|(_, v)| v.clone()).collect();
    assert_eq!(values, (0..60).map(|i| format!("record-{i}")).collect::<Vec<_>>());
    // the converted group elects a new leader and takes writes
    c.brokers[leader].kill9();
    let others: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    produce_numbered(&c, &others, "converts", 60..70).await;
    let seen = read_numbered(&c.brokers[others[0]].bootstrap(), "converts", 70);
    let values: Vec<String> = seen.iter().map(|(_, v)| v.clone()).collect();
    assert_eq!(values, (0..70).map(|i| format!("record-{i}")).collect::<Vec<_>>());
    assert!(c.brokers.iter().all(|b| b.panics().is_empty()));
}

/// Does `b`'s replica of the one replicated partition keep its Raft log in the partition log, and
/// no Raft log of its own?
fn converted_to_single(b: &Broker) -> bool {
    // (the partition's group: its directory is `<topic id>-0`, a shard's is its name)
    let Ok(list) = std::fs::read_dir(b.data_dir.join("__cluster").join("replicas")) else { return false };
    let Some(group) = list.filter_map(|e| e.ok()).map(|e| e.path()).find(|p| {
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        name.len() > 37 && name[..36].bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
    }) else {
        return false;
    };
    let files: Vec<String> = std::fs::read_dir(&group)
        .map(|l| l.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    files.iter().any(|f| f == "raft-state.json") && !files.iter().any(|f| f.starts_with("raft-log"))
}

/// Decision 0056 as an operator meets it: a rolling restart of a `double` cluster into
/// `single` (followers first, the leader last) while a librdkafka idempotent producer writes
/// without pause. The group converts once a broker set to `single` leads it; writes refused
/// meanwhile (NOT_LEADER_OR_FOLLOWER) are retried by the producer. Every acknowledged record is
/// read back once and in order by a read_committed consumer, and the three replicas hold the
/// same bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_double_group_converts_in_a_rolling_restart_under_an_idempotent_producer() {
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let (mut c, _) =
        Cluster::start_with_metrics_logging(&["--replication-log-format", "double"], Some("info,openraft=warn"));
    let leader = replicated_topic(&c, "rolling").await;
    let bootstrap = c.brokers.iter().map(|b| b.bootstrap()).collect::<Vec<_>>().join(",");
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "2")
        .set("message.timeout.ms", "120000")
        .set("topic.metadata.refresh.interval.ms", "1000")
        .create()
        .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sender = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut deliveries = tokio::task::JoinSet::new();
            let mut i = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let value = i.to_string();
                let delivery = producer.send_result(FutureRecord::<(), _>::to("rolling").payload(&value)).ok().unwrap();
                deliveries.spawn(async move {
                    match delivery.await {
                        Ok(Ok(_)) => (i, true),
                        Ok(Err((e, _))) => {
                            static SHOWN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
                            if SHOWN.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < 5 {
                                eprintln!("record {i} not acknowledged: {e}");
                            }
                            (i, false)
                        }
                        Err(_) => (i, false),
                    }
                });
                i += 1;
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
            let mut acked: Vec<usize> =
                deliveries.join_all().await.into_iter().filter(|(_, ok)| *ok).map(|(i, _)| i).collect();
            acked.sort_unstable();
            (i, acked)
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let order: Vec<usize> = (0..3).filter(|i| *i != leader).chain([leader]).collect();
    for b in order {
        c.brokers[b].stop();
        let at = c.brokers[b].extra_args.iter().position(|a| a == "double").unwrap();
        c.brokers[b].extra_args[at] = "single".into();
        c.brokers[b].spawn();
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    let t0 = Instant::now();
    while !c.brokers.iter().all(converted_to_single) {
        assert!(t0.elapsed() < Duration::from_secs(60), "not every replica converted");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (sent, acked) = sender.await.unwrap();
    assert!(acked.len() >= sent * 9 / 10, "only {} of {sent} acknowledged", acked.len());
    let leader = leader_of(&c, "rolling").await;
    same_on_every_replica(&c, "rolling", leader).await;
    let seen = read_back_once_in_order(&bootstrap, "rolling", &acked);
    eprintln!("rolling restart: {sent} sent, {} acknowledged, {} read", acked.len(), seen.len());
    for (i, b) in c.brokers.iter().enumerate() {
        let log = std::fs::read_to_string(b.data_dir.with_extension("log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().filter(|l| l.contains("one log per replica")).collect();
        eprintln!("broker {}:\n{}", i + 1, lines.join("\n"));
        assert!(lines.iter().any(|l| l.contains("converted to one log per replica at Raft entry")), "broker {}", i + 1);
    }
    assert!(c.brokers.iter().all(|b| b.panics().is_empty()));
}

/// One log per replica: a new partition's group is born without entries (decision 0052), so its
/// first record is at offset 0 as on Kafka (librdkafka's 0103 counts on it: it deletes records
/// up to the offset after its first transaction), and no replica's log holds a batch before it.
/// Formed with entries, Raft's membership and the first leader's blank came first (offsets 0
/// and 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_log_per_replica_a_new_partitions_first_record_is_at_offset_0() {
    let Replicated { c, leader, dirs, .. } = replicated_in("single", "born", 10).await;
    let seen = read_numbered(&c.brokers[leader].bootstrap(), "born", 10);
    let offsets: Vec<i64> = seen.iter().map(|(o, _)| *o).collect();
    assert_eq!(offsets, (0..10).collect::<Vec<i64>>(), "{seen:?}");
    for d in &dirs {
        let first = std::fs::read(&segments(d)[&0]).unwrap();
        let (_, v) = sluice_protocol::batch::iter_batches(&first).next().unwrap().unwrap();
        assert!(!v.is_control() && v.base_offset() == 0, "{}: the first batch is a record batch at 0", d.display());
    }
    assert!(c.brokers.iter().all(|b| b.panics().is_empty()));
}

/// A group born without entries knows its leader (its first replica, term 1) before that
/// broker runs it (decision 0052). The other replicas name it only once they have heard from it,
/// and CreateTopics waits for its partitions' leaders, so the leader named when it returns takes
/// writes. Here the first replica's broker is down: the two others elect one of them. Without
/// the wait they name the dead broker at once, CreateTopics returns, and the produce fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_log_per_replica_a_born_leader_is_named_once_it_is_heard_from() {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let mut c = Cluster::start_with(&["--replication-log-format", "single"]);
    // the first replica's broker: not the controller (which CreateTopics needs)
    let (controller, _) = agreed_controller(&c, &[0, 1, 2], 3, -1).await;
    let dead = (1..=3).find(|id| *id != controller).unwrap();
    let live: Vec<usize> = (0..3).filter(|i| *i as i32 + 1 != dead).collect();
    c.brokers[usize::try_from(dead - 1).unwrap()].kill9();
    let admin: AdminClient<rdkafka::client::DefaultClientContext> =
        rdkafka::ClientConfig::new().set("bootstrap.servers", c.brokers[live[0]].bootstrap()).create().unwrap();
    let ids: Vec<i32> = [dead].into_iter().chain(live.iter().map(|i| *i as i32 + 1)).collect();
    let assignment: [&[i32]; 1] = [&ids];
    let topic = NewTopic::new("unheard", 1, TopicReplication::Variable(&assignment));
    let t0 = Instant::now();
    let created = admin.create_topics(&[topic], &AdminOptions::new()).await.unwrap();
    assert!(created.iter().all(|r| r.is_ok()), "{created:?}");
    let took = t0.elapsed();
    let named = rdkafka_leader(&c.brokers[live[0]].bootstrap(), "unheard");
    assert!(
        named > 0 && named != dead,
        "CreateTopics returned after {took:?} with leader {named} (broker {dead} is down)"
    );
    let leader = usize::try_from(named - 1).unwrap();
    assert_eq!(produce_code(&c.brokers[leader], "unheard", 5000).await, 0, "at the leader named, broker {named}");
    assert!(c.brokers.iter().all(|b| b.panics().is_empty()));
}

/// A group born without entries starts with its first replica as term 1's leader (decision
/// 0052) — but a first replica wiped and restarted while its group holds entries must not: as
/// term 1's leader with an empty log it would write new entries under the ids of the group's
/// (here: all three stopped, the first replica wiped and started alone, the others after it).
/// It asks the other replicas first, and with none answering forms nothing by itself; the
/// others elect a leader and it catches up. Without the question it leads term 1 again and the
/// replicas differ.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_log_per_replica_a_wiped_first_replica_is_not_born_again() {
    let Replicated { mut c, leader, dirs, .. } = replicated_in("single", "reborn", 20).await;
    for b in c.brokers.iter_mut() {
        b.kill9();
    }
    std::fs::remove_dir_all(replica_dir(&c.brokers[leader])).unwrap();
    std::fs::remove_dir_all(&dirs[leader]).unwrap();
    c.brokers[leader].spawn();
    tokio::time::sleep(Duration::from_secs(3)).await;
    for i in (0..3).filter(|i| *i != leader) {
        c.brokers[i].spawn();
    }
    agreed_controller(&c, &[0, 1, 2], 3, -1).await;
    produce_numbered(&c, &[0, 1, 2], "reborn", 20..40).await;
    let now = leader_of(&c, "reborn").await;
    same_on_every_replica(&c, "reborn", now).await;
    let seen = read_numbered(&c.brokers[now].bootstrap(), "reborn", 40);
    let values: Vec<String> = seen.iter().map(|(_, v)| v.clone()).collect();
    assert_eq!(values, (0..40).map(|i| format!("record-{i}")).collect::<Vec<_>>());
    assert!(c.brokers.iter().all(|b| b.panics().is_empty()));
}

/// The entry indexes of a Raft group directory's log, in file order (`sluice raft-log-dump`).
fn raft_log_indexes(dir: &std::path::Path) -> Vec<u64> {
    let dump = std::process::Command::new(sluice_tests::sluice_bin()).arg("raft-log-dump").arg(dir).output().unwrap();
    String::from_utf8_lossy(&dump.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["log_id"]["index"].as_u64())
        .collect()
}

/// The records of a Raft group directory's log files, in order: (file, byte offset, length of
/// the payload after its 8-byte header).
fn raft_log_records(dir: &std::path::Path) -> Vec<(std::path::PathBuf, u64, usize)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().unwrap().to_string_lossy().starts_with("raft-log")
                && p.extension().is_some_and(|x| x == "bin")
        })
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let bytes = std::fs::read(&f).unwrap();
        let mut pos = 0usize;
        while pos + 8 <= bytes.len() {
            let len = u32::from_be_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
            if pos + 8 + len > bytes.len() {
                break;
            }
            out.push((f.clone(), pos as u64, len));
            pos += 8 + len;
        }
    }
    out
}

/// Issue 22, decision 0037: a replica whose Raft log was cut at damage lost entries it had
/// acknowledged — entries a majority committed with it. Here the leader L and follower B
/// commit records 20..60 while follower C is down; B is killed before it records them as
/// applied, and the Raft record of the first such entry rots. Then L dies and B and C start.
/// Were B to vote, C (whose log ends before them) could not win, but B could — with C's vote,
/// its cut log being the longer — and lead without records it had acknowledged: when L
/// returns, its entries from the older term would be overwritten. B must neither vote nor
/// stand until it holds its lost entries again, so no leader is elected until L is back,
/// and every acknowledged record is served once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_raft_log_lost_acknowledged_entries_does_not_vote_until_it_has_them_again() {
    // (the Raft log files of the double format, whatever format the suite runs with)
    let (mut c, _ports) =
        Cluster::start_with_metrics_logging(&["--replication-log-format", "double"], Some("info,openraft=warn"));
    let leader = replicated_topic(&c, "cutvote").await;
    let others: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    let (b, cc) = (others[0], others[1]);
    produce_numbered(&c, &[leader], "cutvote", 0..20).await;
    same_on_every_replica(&c, "cutvote", leader).await;
    assert_eq!(c.brokers[cc].stop(), Some(0));
    produce_numbered(&c, &[leader], "cutvote", 20..40).await;
    // B records what it applied (`applied.json`) as it applies an entry at least 500 ms after
    // its last record: the pause makes the next entry one such, so a record exists whatever
    // the machine's speed (CI once produced everything within 500 ms of B's replica starting,
    // and B never wrote one), and the entries after it are past it
    tokio::time::sleep(Duration::from_millis(700)).await;
    produce_numbered(&c, &[leader], "cutvote", 40..60).await;
    let rdir = replica_dir(&c.brokers[b]);
    until(|| rdir.join("applied.json").exists(), "broker B records what it applied").await;
    c.brokers[b].kill9();
    // the first entry past what B's applied.json records: its Raft record rots
    let applied: serde_json::Value =
        serde_json::from_slice(&std::fs::read(rdir.join("applied.json")).unwrap()).unwrap();
    let applied_index = applied["last_applied"]["index"].as_u64().unwrap_or(0);
    let indexes = raft_log_indexes(&rdir);
    let records = raft_log_records(&rdir);
    assert_eq!(records.len(), indexes.len(), "records and entries line up");
    // (late in the log: B's cut log stays longer than C's, so C would vote for B)
    let k = indexes
        .iter()
        .position(|i| *i > applied_index)
        .map(|first| first.max(indexes.len().saturating_sub(6)))
        .unwrap_or_else(|| panic!("no entry past applied.json ({applied_index}): B recorded everything (timing)"));
    eprintln!("B applied.json at {applied_index}, its log ends at {:?}; damaging entry {}", indexes.last(), indexes[k]);
    let (file, offset, len) = records[k].clone();
    sluice_tests::lossyfs::corrupt(&file, "flip", offset + 8 + (len as u64) / 2, 3).unwrap();
    c.brokers[leader].kill9();
    c.brokers[b].spawn();
    c.brokers[cc].spawn();
    // L is gone: whatever B and C acknowledge now must survive too
    let mut acked = Vec::new();
    let t0 = Instant::now();
    for i in 60..72 {
        let record = sluice_protocol::batch::NewRecord {
            timestamp: 1,
            value: Some(bytes::Bytes::from(format!("record-{i}"))),
            ..Default::default()
        };
        for x in [b, cc] {
            if produce_batch(&c.brokers[x], "cutvote", record.clone(), 1_000).await == 0 {
                acked.push(i);
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!("acknowledged while L was down: {acked:?} ({:?})", t0.elapsed());
    let log = std::fs::read_to_string(c.brokers[b].data_dir.with_extension("log")).unwrap_or_default();
    assert!(
        log.contains("neither votes nor stands for election"),
        "B says it will not vote:\n{}",
        log.lines()
            .filter(|l| l.contains("raft-log") || l.contains("damaged") || l.contains("cutvote"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    c.brokers[leader].spawn();
    produce_numbered(&c, &[0, 1, 2], "cutvote", 80..81).await;
    let want: Vec<String> = (0..60).chain(acked.iter().copied()).chain([80]).map(|i| format!("record-{i}")).collect();
    let unacked: Vec<String> = (60..72).filter(|i| !acked.contains(i)).map(|i| format!("record-{i}")).collect();
    let t0 = Instant::now();
    loop {
        let seen: Vec<String> = read_numbered(&c.brokers[leader].bootstrap(), "cutvote", want.len())
            .into_iter()
            .map(|(_, v)| v)
            .filter(|v| !unacked.contains(v))
            .collect();
        if seen == want {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "acknowledged records lost or repeated: read {seen:?}");
    }
    let log = std::fs::read_to_string(c.brokers[b].data_dir.with_extension("log")).unwrap_or_default();
    assert!(log.contains("votes and stands again"), "B caught up and votes again:\n{}", c.brokers[b].log_tail());
}

/// Wait up to 30 s for `done`, checking every 200 ms; `what` names the failure.
async fn until(done: impl Fn() -> bool, what: &str) {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < Duration::from_secs(30), "{what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Issue 22, a coordinator log (decision 0037): a bit rots in a follower's copy of the
/// transaction log (one shard, three replicas) while it is down, and the others go on. The
/// follower finds the damage when it starts (its log is read to load the shard: the CRC
/// fails), and, since replicas hold the same state but not the same bytes, replaces its whole
/// log with another replica's live records (`cluster/mend.rs`: one WARN line,
/// `sluice_storage_repairs_total`), then applies what was committed since: its state is the
/// leader's, and it takes new entries. Killed, with the end of its last batch cut away, it
/// holds its log damaged at the next start and replaces it again (a cut looks like a torn
/// write, but may have taken acknowledged records). Made to lead (the other coordinators killed in turn),
/// it carries on from that state: the id's last transaction aborted at the epoch the others
/// reached, and the next one ends with the epoch after it. Without the repair, the follower's
/// log stays damaged and the test fails waiting for it. Last, a bit rots in the leading
/// replica's log while it runs: the scrubber finds it, the leader replaces its log with a
/// follower's copy and serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinator_log_damage_is_repaired_from_another_replicas_copy() {
    use sluice_tests::raw;
    let (mut c, ports) = Cluster::start_with_metrics_logging(
        &["--transaction-state-log-num-partitions", "1"],
        Some("info,openraft=error"),
    );
    agreed_controller(&c, &[0, 1, 2], 3, -1).await;
    let txn = "kv-mend";
    let (coordinator, conn, pid, epoch) = init_at_coordinator(&c, txn).await;
    let leader = usize::try_from(coordinator - 1).unwrap();
    let epoch = raw::abort_empty(&conn, txn, pid, epoch, 30).await.unwrap();
    let kv_dir = |b: &Broker| b.data_dir.join("__transaction_state-0");
    let same_as_leader =
        |c: &Cluster, i: usize| folded_kv(&kv_dir(&c.brokers[i])) == folded_kv(&kv_dir(&c.brokers[leader]));
    let damaged = (leader + 1) % 3;
    until(|| same_as_leader(&c, damaged), "the follower's transaction log differs").await;
    c.brokers[damaged].stop();
    let file = segments(&kv_dir(&c.brokers[damaged])).into_values().next().unwrap();
    flip_in_batch(&file, 0, 3);
    // the others go on meanwhile
    let epoch = raw::abort_empty(&conn, txn, pid, epoch, 20).await.unwrap();
    c.brokers[damaged].spawn();
    let repairs = "sluice_storage_repairs_total{topic=\"__transaction_state\"}";
    let t0 = Instant::now();
    while scrape_value(ports[damaged], repairs) != Some(1.0) || !same_as_leader(&c, damaged) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the damaged transaction log was not replaced: repairs {:?}\n{}",
            scrape_value(ports[damaged], repairs),
            c.brokers[damaged].log_tail()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let log = std::fs::read_to_string(c.brokers[damaged].data_dir.with_extension("log")).unwrap_or_default();
    assert!(log.contains("is offline: cannot load it"), "the damage was found at start");
    assert!(log.contains("the damaged log was replaced by broker"), "the repair is logged");
    // it takes new entries
    let epoch = raw::abort_empty(&conn, txn, pid, epoch, 10).await.unwrap();
    until(|| same_as_leader(&c, damaged), "the repaired log does not follow the leader's").await;
    // killed, with the end of its last batch cut away (as a torn tail looks, but acknowledged:
    // its applied.json is past it): the start cuts that batch, holds the log damaged and
    // replaces it too. The last batch is another id's first state, written a second after the
    // rest, so that its apply rewrites applied.json (at most every 500 ms), and no later write
    // of its key hides the loss.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let (err, _, _) = raw::init_producer_id(&conn, 4, Some("kv-mend-other"), None).await.unwrap();
    assert_eq!(err, 0);
    until(|| same_as_leader(&c, damaged), "the repaired log does not follow the leader's").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    c.brokers[damaged].kill9();
    let file = segments(&kv_dir(&c.brokers[damaged])).into_values().last().unwrap();
    let len = std::fs::metadata(&file).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&file).unwrap().set_len(len - 10).unwrap();
    // (nothing written meanwhile: a later write of the same key would hide the loss)
    c.brokers[damaged].spawn();
    let t0 = Instant::now();
    while scrape_value(ports[damaged], repairs) != Some(1.0) || !same_as_leader(&c, damaged) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the cut transaction log was not replaced: repairs {:?}, same state as the leader's: {}\n{}",
            scrape_value(ports[damaged], repairs),
            same_as_leader(&c, damaged),
            c.brokers[damaged].log_tail()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let log = std::fs::read_to_string(c.brokers[damaged].data_dir.with_extension("log")).unwrap_or_default();
    assert!(log.contains("bytes off its end; acknowledged records may be among them"), "the cut is logged");
    drop(conn);

    // the repaired replica leads: whichever other broker coordinates is killed (and started
    // again once another leads) until it does
    let me = i32::try_from(damaged + 1).unwrap();
    let mut rounds = 0;
    loop {
        let id = wait_txn_coordinator(&c.brokers[damaged], txn).await;
        if id == me {
            break;
        }
        rounds += 1;
        assert!(rounds <= 8, "the repaired replica never led the shard");
        let killed = usize::try_from(id - 1).unwrap();
        c.brokers[killed].kill9();
        let t0 = Instant::now();
        while [id, -1].contains(&txn_coordinator(&c.brokers[damaged], txn).await) {
            assert!(t0.elapsed() < Duration::from_secs(30), "no coordinator after broker {id} was killed");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        c.brokers[killed].spawn();
    }
    let before_scrub = scrape_value(ports[damaged], repairs).unwrap_or(0.0);
    let (conn, described) = described_at_coordinator(&c.brokers[damaged], txn).await;
    assert_eq!(described, ("CompleteAbort".into(), pid, epoch), "the repaired coordinator's state");
    let (err, _, next) = raw::end_txn(&conn, 5, txn, pid, epoch, false).await.unwrap();
    assert_eq!((err, next), (0, epoch + 1), "the repaired coordinator carries on");

    // a bit rots in the leader's own log while it runs: nobody reads it, the scrubber finds
    // it, and the leader replaces its log with a follower's copy while it goes on serving
    let others: Vec<usize> = (0..3).filter(|i| *i != damaged).collect();
    until(
        || others.iter().all(|&i| folded_kv(&kv_dir(&c.brokers[i])) == folded_kv(&kv_dir(&c.brokers[damaged]))),
        "the followers differ from the leader",
    )
    .await;
    let file = segments(&kv_dir(&c.brokers[damaged])).into_values().next().unwrap();
    flip_in_batch(&file, 0, 6);
    let t0 = Instant::now();
    while scrape_value(ports[damaged], repairs).unwrap_or(0.0) < 1.0 + before_scrub {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the scrubber did not find the damage in the leader's log: repairs {:?}\n{}",
            scrape_value(ports[damaged], repairs),
            c.brokers[damaged].log_tail()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let log = std::fs::read_to_string(c.brokers[damaged].data_dir.with_extension("log")).unwrap_or_default();
    assert!(log.contains("(found by the scrubber)"), "the scrubber's find is logged");
    let (err, _, after) = raw::end_txn(&conn, 5, txn, pid, next, false).await.unwrap();
    assert_eq!((err, after), (0, next + 1), "the leader serves on");
    until(
        || others.iter().all(|&i| folded_kv(&kv_dir(&c.brokers[i])) == folded_kv(&kv_dir(&c.brokers[damaged]))),
        "the repaired leader's log differs from its followers'",
    )
    .await;
}

/// A connection to `b`, the coordinator of transactional id `txn`, and the id's state (state,
/// producer id, epoch) once `b` has loaded it (up to 30 s).
async fn described_at_coordinator(b: &Broker, txn: &str) -> (Connection, (String, i64, i16)) {
    let conn = Connection::connect(&b.bootstrap(), "txn-test", 1).await.unwrap();
    let t0 = Instant::now();
    loop {
        match sluice_tests::raw::describe_txn(&conn, txn).await {
            Ok(d) if !d.0.is_empty() => return (conn, d),
            other => assert!(t0.elapsed() < Duration::from_secs(30), "broker {} answers {other:?}", b.port),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Issue 22, a coordinator log whose leader cannot repair it (decision 0037): a bit rots in the
/// transaction-log leader's own log while it runs, and every copy it asks for is refused (the
/// failpoint `kv.mend_refuses_copies`, armed on every broker). The scrubber finds the damage,
/// the leader logs that it could not replace its log and hands the shard over: another replica,
/// whose log is intact, leads and coordinates — the id's state is what it was, and its next
/// transaction ends with the next epoch — while the damaged one keeps trying and never
/// coordinates again. Without the hand-over, FindCoordinator names the damaged leader, which
/// does not load the shard, for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_leader_that_cannot_repair_its_log_hands_the_shard_over() {
    use sluice_tests::raw;
    let c = Cluster::start_with(&[
        "--transaction-state-log-num-partitions",
        "1",
        "--testing-failpoints",
        "kv.mend_refuses_copies",
    ]);
    agreed_controller(&c, &[0, 1, 2], 3, -1).await;
    let txn = "kv-hand-over";
    let (coordinator, conn, pid, epoch) = init_at_coordinator(&c, txn).await;
    let leader = usize::try_from(coordinator - 1).unwrap();
    let epoch = raw::abort_empty(&conn, txn, pid, epoch, 10).await.unwrap();
    let kv_dir = |b: &Broker| b.data_dir.join("__transaction_state-0");
    let others: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    until(
        || others.iter().all(|&i| folded_kv(&kv_dir(&c.brokers[i])) == folded_kv(&kv_dir(&c.brokers[leader]))),
        "the followers differ from the leader",
    )
    .await;
    drop(conn);
    let file = segments(&kv_dir(&c.brokers[leader])).into_values().next().unwrap();
    flip_in_batch(&file, 0, 6);
    // the scrubber finds it, the repair fails, and another broker coordinates
    let t0 = Instant::now();
    let new = loop {
        let id = txn_coordinator(&c.brokers[others[0]], txn).await;
        if id > 0 && id != coordinator {
            break id;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "the damaged leader (broker {coordinator}) never handed the shard over\n{}",
            c.brokers[leader].log_tail()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let log = std::fs::read_to_string(c.brokers[leader].data_dir.with_extension("log")).unwrap_or_default();
    assert!(log.contains("(found by the scrubber)"), "the scrubber's find is logged");
    assert!(
        log.contains("the damaged log was not replaced") && log.contains("trying again every second"),
        "the failed repair is logged"
    );
    // the new coordinator has the id's state and carries on
    let (conn, described) = described_at_coordinator(&c.brokers[usize::try_from(new - 1).unwrap()], txn).await;
    assert_eq!(described, ("CompleteAbort".into(), pid, epoch), "the new coordinator's state");
    let (err, _, next) = raw::end_txn(&conn, 5, txn, pid, epoch, false).await.unwrap();
    assert_eq!((err, next), (0, epoch + 1), "the new coordinator carries on");
    // the damaged replica does not coordinate again (it would hand over again if elected)
    for _ in 0..20 {
        for i in 0..3 {
            let id = txn_coordinator(&c.brokers[i], txn).await;
            assert_ne!(id, coordinator, "broker {} names the damaged replica as coordinator", i + 1);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The cluster id a broker's Metadata (v9) names: None when it names none.
async fn metadata_cluster_id(b: &Broker) -> Option<String> {
    let conn = Connection::connect(&b.bootstrap(), "cluster-test", 1).await.expect("connect");
    let r = kafka_protocol::messages::MetadataRequest::default();
    match conn.call(ApiKey::Metadata, 9, RequestKind::Metadata(r)).await {
        Ok(ResponseKind::Metadata(m)) => m.cluster_id.map(|id| id.to_string()),
        other => panic!("{other:?}"),
    }
}

/// A broker names its cluster only once the metadata quorum has: before, its own id would
/// differ from its peers' and then from the cluster's (librdkafka warns "reports different
/// ClusterId … a client must not be simultaneously connected to multiple clusters"). Once the
/// quorum formed, all three name the same one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_names_no_cluster_before_its_quorum_does() {
    let raft: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let voters = raft.iter().enumerate().map(|(i, p)| format!("{}@127.0.0.1:{p}", i + 1)).collect::<Vec<_>>().join(",");
    let start = |i: usize| {
        Broker::start_on(free_port(), &["--node-id", &(i + 1).to_string(), "--controller-quorum-voters", &voters])
    };
    let first = start(0);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(metadata_cluster_id(&first).await, None, "a broker alone, no quorum: no cluster yet");
    let c = Cluster { brokers: vec![first, start(1), start(2)], voters };
    agreed_controller(&c, &[0, 1, 2], 3, -1).await;
    let mut ids = BTreeSet::new();
    for b in &c.brokers {
        ids.insert(metadata_cluster_id(b).await);
    }
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert!(ids.iter().all(Option::is_some), "{ids:?}");
}
