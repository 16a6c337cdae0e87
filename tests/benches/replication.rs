//! Replication, measured in one run on this machine (issue 10):
//! 1. produce acks=all throughput and request-latency p99 (`sluicectl perf produce`, 1 KiB random
//!    records, one partition, 5 requests in flight) on a single broker, and on a three-broker
//!    cluster with replication factor 3 and with replication factor 1 (the same cluster, so
//!    the quorum's cost is visible); ratios to the single broker;
//! 2. failover time over repeated kills: a librdkafka producer (idempotent, acks=all) writes
//!    continuously while the partition's leader is killed with SIGKILL (then restarted); failover
//!    = last acknowledgement before the kill → first acknowledgement after it; p50 and p99.
//!
//! `cargo bench -p sluice-tests --bench replication -- [RUNS] [RECORDS] [KILLS]` (RUNS 0: only
//! the failover; kills 12 s apart; `SLUICE_BENCH_LOGS=<dir>` keeps the brokers' logs, at INFO and
//! every life of each,
//! `SLUICE_BENCH_RDKAFKA_DEBUG=<contexts>` prints librdkafka's debug log).
//! tests/bench/replication.sh builds the release binaries, runs tests/bench/soak.sh (librdkafka's
//! `rdkafka_performance` as the load) and then this for the failover. Not part of CI.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rdkafka::producer::{FutureProducer, FutureRecord};
use sluice_client::{Admin, ClientConfig};
use sluice_tests::{free_port, Broker};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn start_cluster() -> Vec<Broker> {
    let raft: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let voters = raft.iter().enumerate().map(|(i, p)| format!("{}@127.0.0.1:{p}", i + 1)).collect::<Vec<_>>().join(",");
    (0..3)
        .map(|i| {
            let id = (i + 1).to_string();
            // kept logs (`SLUICE_BENCH_LOGS`) at INFO: each broker's leadership changes and
            // elections, every life of it (a restart appends to its log)
            let filter = std::env::var_os("SLUICE_BENCH_LOGS").map(|_| "info,openraft=warn");
            Broker::start_on_logging(free_port(), &["--node-id", &id, "--controller-quorum-voters", &voters], filter)
        })
        .collect()
}

/// Wait until the first broker lists all three (each registered in the metadata quorum).
async fn registered(c: &[Broker]) {
    let admin = Admin::new(&ClientConfig::new().set("bootstrap.servers", c[0].bootstrap())).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while admin.describe_cluster().await.map(|d| d.brokers.len()).unwrap_or(0) < 3 {
        assert!(Instant::now() < deadline, "the cluster did not form");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn bootstrap(c: &[Broker]) -> String {
    c.iter().map(|b| b.bootstrap()).collect::<Vec<_>>().join(",")
}

/// The leader of `topic`/0 per librdkafka's metadata, waiting for one.
fn leader(bootstrap: &str, topic: &str) -> i32 {
    use rdkafka::consumer::{BaseConsumer, Consumer as _};
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let c: BaseConsumer = rdkafka::ClientConfig::new().set("bootstrap.servers", bootstrap).create().unwrap();
        if let Ok(m) = c.fetch_metadata(Some(topic), Duration::from_secs(3)) {
            if let Some(l) = m.topics().first().and_then(|t| t.partitions().first()).map(|p| p.leader()) {
                if l > 0 {
                    return l;
                }
            }
        }
        assert!(Instant::now() < deadline, "no leader for {topic}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Create `topic` once `rf` brokers are registered (a cluster just started may not have them all
/// yet: INVALID_REPLICATION_FACTOR, tried again for up to 30 s).
async fn create(b: &Broker, topic: &str, rf: i16) {
    let admin = Admin::new(&ClientConfig::new().set("bootstrap.servers", b.bootstrap())).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match admin.create_topic(topic, 1, rf, &[]).await {
            Ok(()) => return,
            Err(e) if Instant::now() < deadline && format!("{e:?}").contains("InvalidReplicationFactor") => {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => panic!("create {topic}: {e}"),
        }
    }
}

/// `sluicectl perf produce` against `b`: (MiB/s, p99 ms).
fn perf(b: &Broker, topic: &str, records: usize) -> (f64, f64) {
    let out = Command::new(sluice_tests::sluicectl_bin())
        .args(["--bootstrap-server", &b.bootstrap(), "--output", "json", "perf", "produce", "--topic", topic])
        .args(["--num-records", &records.to_string(), "--record-size", "1024", "--acks", "-1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    (j["mib_per_sec"].as_f64().unwrap(), j["latency_ms_p99"].as_f64().unwrap())
}

/// Seconds of the day (UTC) with milliseconds, as the brokers' log lines show time.
fn chrono_like(t: std::time::SystemTime) -> String {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let s = d.as_secs() % 86_400;
    format!("{:02}:{:02}:{:02}.{:03}", s / 3600, s / 60 % 60, s % 60, d.subsec_millis())
}

/// librdkafka's log lines, on stderr with the time of day.
struct Stderr;

impl rdkafka::ClientContext for Stderr {
    fn log(&self, _level: rdkafka::config::RDKafkaLogLevel, fac: &str, line: &str) {
        eprintln!("{} rdkafka {fac}: {line}", chrono_like(std::time::SystemTime::now()));
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i.min(v.len() - 1)]
}

fn print_throughput(rows: &[(&str, Vec<f64>, Vec<f64>)], runs: usize, records: usize) {
    let base = median(rows[0].1.clone());
    println!("\n# Replication benchmark ({runs} runs, {records} records of 1 KiB, 1 partition, acks=all)\n");
    println!("| Setup | MiB/s (median) | p99 ms (median) | throughput ÷ single broker |");
    println!("|---|---|---|---|");
    for (name, mibs, p99) in rows {
        let m = median(mibs.clone());
        println!("| {name} | {m:.1} | {:.2} | {:.2} |", median(p99.clone()), m / base);
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let runs: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(3);
    let records: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let kills: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(10);

    // 1. throughput: single broker, then the cluster (RF 3 and RF 1), alternating runs
    let single = Broker::start();
    let mut cluster = start_cluster();
    registered(&cluster).await;
    let mut rows: Vec<(&str, Vec<f64>, Vec<f64>)> = vec![
        ("single broker", vec![], vec![]),
        ("3 brokers, RF 3", vec![], vec![]),
        ("3 brokers, RF 1", vec![], vec![]),
    ];
    for r in 0..runs {
        let t = format!("single-{r}");
        create(&single, &t, 1).await;
        let (m, p) = perf(&single, &t, records);
        rows[0].1.push(m);
        rows[0].2.push(p);
        for (row, rf) in [(1usize, 3i16), (2, 1)] {
            let t = format!("rf{rf}-{r}");
            create(&cluster[0], &t, rf).await;
            let l = leader(&bootstrap(&cluster), &t);
            let (m, p) = perf(&cluster[usize::try_from(l - 1).unwrap()], &t, records);
            rows[row].1.push(m);
            rows[row].2.push(p);
        }
    }
    drop(single);
    if runs > 0 {
        print_throughput(&rows, runs, records);
    }

    // 2. failover over repeated kills of the partition's leader
    create(&cluster[0], "failover", 3).await;
    let acks: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut config = rdkafka::ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap(&cluster))
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "1")
        .set("message.timeout.ms", "120000")
        .set("topic.metadata.refresh.interval.ms", "1000");
    // SLUICE_BENCH_RDKAFKA_DEBUG=<contexts>: librdkafka's debug log on stderr
    if let Ok(d) = std::env::var("SLUICE_BENCH_RDKAFKA_DEBUG") {
        config.set("debug", d).set_log_level(rdkafka::config::RDKafkaLogLevel::Debug);
    }
    let producer: FutureProducer<Stderr> = config.create_with_context(Stderr).unwrap();
    let writer = {
        let (acks, stop, producer) = (acks.clone(), stop.clone(), producer.clone());
        tokio::spawn(async move {
            let mut inflight = tokio::task::JoinSet::new();
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let v = i.to_string();
                i += 1;
                if let Ok(d) = producer.send_result(FutureRecord::<(), _>::to("failover").payload(&v)) {
                    let acks = acks.clone();
                    inflight.spawn(async move {
                        if matches!(d.await, Ok(Ok(_))) {
                            acks.lock().unwrap().push(Instant::now());
                        }
                    });
                }
                while inflight.len() >= 8 {
                    inflight.join_next().await;
                }
            }
            inflight.join_all().await;
        })
    };
    let mut times = Vec::new();
    for k in 0..kills {
        // each kill one failover: 12 s after the last restart, past librdkafka's longest
        // reconnect backoff (reconnect.backoff.max.ms, 10 s) for the broker that restarted
        tokio::time::sleep(Duration::from_secs(12)).await;
        let l = leader(&bootstrap(&cluster), "failover");
        let victim = usize::try_from(l - 1).unwrap();
        let last_before = acks.lock().unwrap().last().copied();
        cluster[victim].kill9();
        let killed = Instant::now();
        let at = chrono_like(std::time::SystemTime::now());
        let deadline = killed + Duration::from_secs(60);
        let first_after = loop {
            if let Some(t) = acks.lock().unwrap().iter().find(|t| **t > killed).copied() {
                break Some(t);
            }
            if Instant::now() > deadline {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        match (last_before, first_after) {
            (Some(a), Some(b)) => {
                let ms = (b - a).as_secs_f64() * 1000.0;
                eprintln!("kill {k} at {at}: broker {l}, failover {ms:.0} ms");
                times.push(ms);
            }
            _ => eprintln!("kill {k}: no acknowledgement around the kill of broker {l}"),
        }
        cluster[victim].spawn();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    // SLUICE_BENCH_LOGS=<dir>: keep the brokers' logs (to see each election's timeline)
    if let Some(dir) = std::env::var_os("SLUICE_BENCH_LOGS") {
        let _ = std::fs::create_dir_all(&dir);
        for (i, b) in cluster.iter().enumerate() {
            let _ = std::fs::copy(
                b.data_dir.with_extension("log"),
                std::path::Path::new(&dir).join(format!("broker-{}.log", i + 1)),
            );
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(30), writer).await;
    if !times.is_empty() {
        println!(
            "\nFailover (last ack before the SIGKILL of the leader → first ack after), {} kills: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
            times.len(),
            percentile(times.clone(), 0.5),
            percentile(times.clone(), 0.99),
            times.iter().copied().fold(0.0, f64::max)
        );
    }
}
