//! `jepsen`: Jepsen-style fault tests for Sluice (issue 9).
//!
//! `jepsen run` starts a broker process on 127.0.0.1 behind the fault-injecting proxy, runs
//! client workers (Sluice's Rust client; plus a librdkafka read_committed reader as an
//! independent view) while a seeded nemesis kills (-9) and restarts the broker, freezes it
//! (SIGSTOP/SIGCONT) and cuts, blackholes or delays connections; then heals, drains every
//! partition, writes the history (JSON lines, docs/jepsen.md) and checks it. Exit status 0
//! only when the checker finds no anomaly. `jepsen check FILE` re-checks a history.

use clap::{Parser, Subcommand, ValueEnum};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use sluice_client::{ClientConfig, Consumer, Producer, ProducerRecord};
use sluice_tests::jepsen::checker::{self, Report, ANOMALIES};
use sluice_tests::jepsen::history::{self, Micro, Op, OpFn, OpType};
use sluice_tests::proxy::Proxy;
use sluice_tests::Broker;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(name = "jepsen", about = "Jepsen-style fault tests for Sluice")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a workload under faults, write the history, check it.
    Run(RunArgs),
    /// Check a history file (JSON lines).
    Check {
        /// The history.
        file: PathBuf,
        /// Count G0 and G1c-ww (write cycles Kafka's model allows) against the verdict.
        #[arg(long)]
        strict: bool,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum, Debug)]
enum Workload {
    /// Transactions of sends and polls over many keys; offsets committed in the transaction.
    Txn,
    /// Idempotent producers sending unique values.
    Idempotent,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum, Debug)]
enum Fault {
    /// No faults (alone: a run without a nemesis).
    None,
    /// kill -9 the broker, restart it.
    Kill,
    /// SIGSTOP the broker, SIGCONT it.
    Pause,
    /// Cut every client connection.
    Cut,
    /// Forward nothing for a while (a network partition between clients and broker).
    Blackhole,
    /// Delay every forwarded chunk.
    Delay,
}

#[derive(clap::Args, Clone)]
struct RunArgs {
    /// What the clients do.
    #[arg(long, value_enum, default_value = "txn")]
    workload: Workload,
    /// Seed for the workload and the fault schedule.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Seconds of load (faults included); the drain comes after.
    #[arg(long, default_value_t = 20)]
    time_limit: u64,
    /// Stop invoking after this many operations.
    #[arg(long, default_value_t = 1_000_000)]
    ops: usize,
    /// Keys = partitions of the test topic.
    #[arg(long, default_value_t = 4)]
    keys: i32,
    /// Client worker processes.
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// Faults to inject (comma-separated), or `none`.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "kill,pause,cut,blackhole,delay")]
    nemesis: Vec<Fault>,
    /// Seconds between faults (a fault lasts up to this long too).
    #[arg(long, default_value_t = 3)]
    fault_interval: u64,
    /// Where to write the history (default: target/jepsen/<workload>-<seed>.jsonl).
    #[arg(long)]
    history: Option<PathBuf>,
    /// Extra broker flags, e.g. `--broker-arg=--testing-failpoints --broker-arg=fetch.ignore_lso`.
    #[arg(long = "broker-arg", allow_hyphen_values = true)]
    broker_args: Vec<String>,
    /// Count G0 and G1c-ww (write cycles Kafka's model allows) against the verdict.
    #[arg(long)]
    strict: bool,
    /// Run the librdkafka read_committed reader alongside (an independent view).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    librdkafka_reader: bool,
}

const TOPIC: &str = "jepsen";

/// The shared history being recorded.
struct Recorder {
    start: Instant,
    ops: Mutex<Vec<Op>>,
}

impl Recorder {
    fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn push(
        &self,
        process: i64,
        kind: OpType,
        f: OpFn,
        value: Vec<Micro>,
        commit_ns: Option<u64>,
        note: Option<String>,
    ) {
        let mut ops = self.ops.lock().unwrap_or_else(|e| e.into_inner());
        let index = ops.len();
        ops.push(Op { index, time_ns: self.now(), process, kind, f, value, commit_ns, note });
    }
}

/// The broker and its proxy, shared by the nemesis and the drain.
struct Cluster {
    broker: Mutex<Broker>,
    proxy: Proxy,
}

impl Cluster {
    fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.proxy.port)
    }

    fn heal(&self) {
        let f = &self.proxy.faults;
        f.blackhole.store(false, Ordering::Relaxed);
        f.delay_ms.store(0, Ordering::Relaxed);
        let mut b = self.broker.lock().unwrap_or_else(|e| e.into_inner());
        b.resume();
        if !b.is_running() {
            b.spawn();
        }
    }
}

fn producer_config(c: &Cluster, txn_id: Option<String>) -> ClientConfig {
    let mut cfg = ClientConfig::new()
        .set("bootstrap.servers", c.bootstrap())
        .set("linger.ms", 1)
        .set("request.timeout.ms", 2000)
        .set("delivery.timeout.ms", 10_000)
        .set("max.block.ms", 5000)
        .set("retry.backoff.ms", 50);
    if let Some(id) = txn_id {
        cfg = cfg.set("transactional.id", id).set("transaction.timeout.ms", 10_000);
    }
    cfg
}

fn consumer_config(c: &Cluster) -> ClientConfig {
    ClientConfig::new()
        .set("bootstrap.servers", c.bootstrap())
        .set("group.id", "jepsen")
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("request.timeout.ms", 2000)
        .set("session.timeout.ms", 6000)
        .set("heartbeat.interval.ms", 500)
        .set("max.poll.interval.ms", 15_000)
        .set("fetch.max.wait.ms", 100)
        .set("max.poll.records", 50)
}

/// A worker's clients; rebuilt (a new instance, fencing the old) after an unknown outcome.
struct Clients {
    producer: Producer,
    consumer: Option<Consumer>,
}

async fn clients(c: &Cluster, w: Workload, process: i64) -> Result<Clients, sluice_client::Error> {
    match w {
        Workload::Txn => {
            let producer = Producer::new(&producer_config(c, Some(format!("jepsen-{process}")))).await?;
            producer.init_transactions().await?;
            let mut consumer = Consumer::new(&consumer_config(c))?;
            consumer.subscribe(&[TOPIC])?;
            Ok(Clients { producer, consumer: Some(consumer) })
        }
        Workload::Idempotent => {
            Ok(Clients { producer: Producer::new(&producer_config(c, None)).await?, consumer: None })
        }
    }
}

fn value_of(r: &sluice_client::ConsumerRecord) -> i64 {
    r.value.as_deref().and_then(|v| std::str::from_utf8(v).ok()).and_then(|s| s.parse().ok()).unwrap_or(-1)
}

/// One transactional operation: sends and a poll, offsets in the transaction, commit.
async fn txn_op(
    cl: &mut Clients,
    sends: &[(i32, i64)],
    rec: &Recorder,
) -> (OpType, Vec<Micro>, Option<u64>, Option<String>, bool) {
    let Some(consumer) = cl.consumer.as_mut() else { return (OpType::Fail, vec![], None, None, false) };
    let p = &cl.producer;
    let before = consumer.assignment();
    let mut micro = Vec::new();
    if let Err(e) = p.begin_transaction().await {
        return (OpType::Fail, micro, None, Some(e.to_string()), e.is_fatal());
    }
    let polled = match consumer.poll(Duration::from_millis(50)).await {
        Ok(r) => r,
        Err(e) => {
            let _ = p.abort_transaction().await;
            return (OpType::Fail, micro, None, Some(format!("poll: {e}")), true);
        }
    };
    let rebalanced = consumer.assignment() != before;
    let mut reads: BTreeMap<i32, Vec<(i64, i64)>> = BTreeMap::new();
    let mut first: BTreeMap<(String, i32), i64> = BTreeMap::new();
    let mut next: BTreeMap<(String, i32), i64> = BTreeMap::new();
    for r in &polled {
        reads.entry(r.partition).or_default().push((r.offset, value_of(r)));
        first.entry((r.topic.clone(), r.partition)).or_insert(r.offset);
        next.insert((r.topic.clone(), r.partition), r.offset + 1);
    }
    let mut deliveries = Vec::new();
    let mut failed: Option<sluice_client::Error> = None;
    for (key, value) in sends {
        match p.send(ProducerRecord::new(TOPIC, value.to_string()).partition(*key)).await {
            Ok(d) => deliveries.push((*key, *value, d)),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    let offsets: Vec<(String, i32, i64)> = next.into_iter().map(|((t, p), o)| (t, p, o)).collect();
    if failed.is_none() && !offsets.is_empty() {
        if let Some(g) = consumer.group_metadata() {
            if let Err(e) = p.send_offsets_to_transaction(&offsets, &g).await {
                failed = Some(e);
            }
        }
    }
    let rewind = |consumer: &mut Consumer| {
        for (tp, o) in &first {
            let _ = consumer.seek(tp, *o);
        }
    };
    if let Some(e) = failed {
        if e.is_fatal() {
            return (OpType::Info, micro, None, Some(e.to_string()), true);
        }
        let _ = p.abort_transaction().await;
        rewind(consumer);
        return (OpType::Fail, micro, None, Some(e.to_string()), false);
    }
    let commit_ns = Some(rec.now());
    let mut outcome = p.commit_transaction().await;
    let deadline = Instant::now() + Duration::from_secs(8);
    while let Err(e) = &outcome {
        if !e.is_retriable() || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        outcome = p.commit_transaction().await;
    }
    match outcome {
        Ok(()) => {
            for (key, value, d) in deliveries {
                let offset = d.await.ok().map(|m| m.offset);
                micro.push(Micro::Send { key, value, offset });
            }
            micro.push(Micro::Poll { reads });
            (OpType::Ok, micro, commit_ns, rebalanced.then(|| "rebalanced".to_string()), false)
        }
        Err(e) if e.is_abortable() => {
            let _ = p.abort_transaction().await;
            rewind(consumer);
            for (key, value, _) in deliveries {
                micro.push(Micro::Send { key, value, offset: None });
            }
            (OpType::Fail, micro, commit_ns, Some(e.to_string()), false)
        }
        Err(e) => {
            // Unknown outcome: the sends may or may not be committed.
            for (key, value, _) in deliveries {
                micro.push(Micro::Send { key, value, offset: None });
            }
            (OpType::Info, micro, commit_ns, Some(e.to_string()), true)
        }
    }
}

async fn worker(
    process: i64,
    args: RunArgs,
    cluster: Arc<Cluster>,
    rec: Arc<Recorder>,
    stop: Arc<AtomicBool>,
    budget: Arc<AtomicI64>,
    latencies: Arc<Mutex<Vec<(u64, u64)>>>,
) {
    let mut rng = StdRng::seed_from_u64(args.seed.wrapping_mul(1000).wrapping_add(process as u64));
    let mut next_value = process * 1_000_000_000;
    let mut cl: Option<Clients> = None;
    while !stop.load(Ordering::Relaxed) && budget.fetch_sub(1, Ordering::Relaxed) > 0 {
        if cl.is_none() {
            match clients(&cluster, args.workload, process).await {
                Ok(c) => {
                    rec.push(process, OpType::Ok, OpFn::Rewind, vec![], None, Some("new client instance".into()));
                    cl = Some(c);
                }
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            }
        }
        let Some(c) = cl.as_mut() else { continue };
        let n = rng.gen_range(1..=3);
        let sends: Vec<(i32, i64)> = (0..n)
            .map(|_| {
                next_value += 1;
                (rng.gen_range(0..args.keys), next_value)
            })
            .collect();
        let invoke: Vec<Micro> =
            sends.iter().map(|(key, value)| Micro::Send { key: *key, value: *value, offset: None }).collect();
        rec.push(process, OpType::Invoke, OpFn::Txn, invoke.clone(), None, None);
        let started = rec.now();
        let (kind, micro, commit_ns, note, rebuild) = match args.workload {
            Workload::Txn => txn_op(c, &sends, &rec).await,
            Workload::Idempotent => {
                let (key, value) = sends[0];
                let r = match c.producer.send(ProducerRecord::new(TOPIC, value.to_string()).partition(key)).await {
                    Ok(d) => d.await,
                    Err(e) => Err(e),
                };
                match r {
                    Ok(md) => {
                        (OpType::Ok, vec![Micro::Send { key, value, offset: Some(md.offset) }], None, None, false)
                    }
                    // An idempotent send that failed may still have been written.
                    Err(e) => {
                        (OpType::Info, vec![Micro::Send { key, value, offset: None }], None, Some(e.to_string()), false)
                    }
                }
            }
        };
        let (kind, micro) = match (args.workload, kind) {
            (Workload::Idempotent, _) => (kind, micro),
            (_, OpType::Info) | (_, OpType::Fail) if micro.is_empty() => (kind, invoke),
            _ => (kind, micro),
        };
        if kind == OpType::Ok {
            latencies.lock().unwrap_or_else(|e| e.into_inner()).push((rec.now(), rec.now() - started));
        }
        let rewound = kind == OpType::Fail && args.workload == Workload::Txn;
        let rebalanced = note.as_deref() == Some("rebalanced");
        rec.push(process, kind, OpFn::Txn, micro, commit_ns, note.filter(|n| n != "rebalanced"));
        if rewound || rebalanced {
            rec.push(process, OpType::Ok, OpFn::Rewind, vec![], None, None);
        }
        if rebuild {
            cl = None;
        }
    }
    if let Some(c) = cl {
        if let Some(consumer) = c.consumer {
            let _ = consumer.close().await;
        }
    }
}

/// librdkafka reading read_committed from the start, for the whole run: an independent view.
fn rdkafka_reader(cluster: Arc<Cluster>, keys: i32, rec: Arc<Recorder>, stop: Arc<AtomicBool>) {
    let c: BaseConsumer = match rdkafka::ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap())
        .set("group.id", "jepsen-librdkafka")
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .create()
    {
        Ok(c) => c,
        Err(_) => return,
    };
    let mut tpl = TopicPartitionList::new();
    for p in 0..keys {
        let _ = tpl.add_partition_offset(TOPIC, p, Offset::Beginning);
    }
    if c.assign(&tpl).is_err() {
        return;
    }
    let process = 1000;
    while !stop.load(Ordering::Relaxed) {
        // One operation per record, completed when the record was handed over: a read is
        // never timestamped earlier than it happened (the precommitted-read check relies on it).
        if let Some(Ok(m)) = c.poll(Duration::from_millis(50)) {
            let v = m.payload().and_then(|p| std::str::from_utf8(p).ok()).and_then(|s| s.parse().ok()).unwrap_or(-1);
            let reads = BTreeMap::from([(m.partition(), vec![(m.offset(), v)])]);
            rec.push(process, OpType::Invoke, OpFn::Txn, vec![], None, None);
            rec.push(process, OpType::Ok, OpFn::Txn, vec![Micro::Poll { reads }], None, None);
        }
    }
}

/// Faults on a seeded schedule until `stop`; returns (fault, healed at ns) for unavailability.
async fn nemesis(
    args: RunArgs,
    cluster: Arc<Cluster>,
    rec: Arc<Recorder>,
    stop: Arc<AtomicBool>,
) -> Vec<(String, u64)> {
    let mut rng = StdRng::seed_from_u64(args.seed ^ 0x6e656d);
    let mut healed = Vec::new();
    let faults: Vec<Fault> = args.nemesis.iter().copied().filter(|f| *f != Fault::None).collect();
    if faults.is_empty() {
        return healed;
    }
    let interval = Duration::from_secs(args.fault_interval.max(1));
    tokio::time::sleep(interval).await;
    while !stop.load(Ordering::Relaxed) {
        let fault = faults[rng.gen_range(0..faults.len())];
        let hold = Duration::from_millis(rng.gen_range(300..=interval.as_millis() as u64));
        let name = format!("{fault:?}").to_lowercase();
        rec.push(-1, OpType::Invoke, OpFn::Nemesis, vec![], None, Some(format!("{name} for {hold:?}")));
        let c = cluster.clone();
        match fault {
            Fault::Kill => {
                let _ = tokio::task::spawn_blocking(move || c.broker.lock().unwrap_or_else(|e| e.into_inner()).kill9())
                    .await;
            }
            Fault::Pause => cluster.broker.lock().unwrap_or_else(|e| e.into_inner()).pause(),
            Fault::Cut => cluster.proxy.cut_all(),
            Fault::Blackhole => cluster.proxy.faults.blackhole.store(true, Ordering::Relaxed),
            Fault::Delay => cluster.proxy.faults.delay_ms.store(rng.gen_range(50..300), Ordering::Relaxed),
            Fault::None => {}
        }
        tokio::time::sleep(hold).await;
        let c = cluster.clone();
        let _ = tokio::task::spawn_blocking(move || c.heal()).await;
        if fault == Fault::Blackhole {
            cluster.proxy.cut_all();
        }
        rec.push(-1, OpType::Ok, OpFn::Nemesis, vec![], None, Some(format!("healed {name}")));
        healed.push((name, rec.now()));
        tokio::time::sleep(interval).await;
    }
    healed
}

/// Read every partition from the start, read_committed, up to its last stable offset.
async fn drain(cluster: &Cluster, keys: i32, rec: &Recorder) -> Result<(), String> {
    let cfg = ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap())
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "earliest")
        .set("fetch.max.wait.ms", 100);
    let deadline = Instant::now() + Duration::from_secs(60);
    // Open transactions of crashed instances are aborted by the coordinator's timeout; wait
    // until the LSO reaches the high watermark everywhere.
    let mut c = Consumer::new(&cfg).map_err(|e| e.to_string())?;
    let tps: Vec<(String, i32)> = (0..keys).map(|p| (TOPIC.to_string(), p)).collect();
    c.assign(&tps).map_err(|e| e.to_string())?;
    let mut reads: BTreeMap<i32, Vec<(i64, i64)>> = BTreeMap::new();
    rec.push(2000, OpType::Invoke, OpFn::Txn, vec![], None, Some("final drain".into()));
    loop {
        for r in c.poll(Duration::from_millis(200)).await.map_err(|e| e.to_string())? {
            reads.entry(r.partition).or_default().push((r.offset, value_of(&r)));
        }
        let mut done = true;
        for tp in &tps {
            let hw = c.watermarks(tp);
            let pos = c.position(tp).unwrap_or(0);
            match hw {
                Some((hw, lso)) if lso >= hw && pos >= hw => {}
                _ => done = false,
            }
        }
        if done {
            break;
        }
        if Instant::now() > deadline {
            return Err("drain did not reach the end of every partition within 60 s".into());
        }
    }
    rec.push(2000, OpType::Ok, OpFn::Txn, vec![Micro::Poll { reads }], None, Some("final drain".into()));
    Ok(())
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize] as f64 / 1e6
}

fn print_report(r: &Report) {
    for a in ANOMALIES {
        let allowed = if r.allowed.iter().any(|x| x == a) { "  (allowed by Kafka's model)" } else { "" };
        println!("  {a:<22} {}{allowed}", r.count(a));
        if let Some(ex) = r.examples.get(*a) {
            for e in ex {
                println!("      {e}");
            }
        }
    }
    println!("  verdict: {}", if r.valid() { "valid (no anomaly)" } else { "INVALID" });
}

fn run(args: RunArgs) -> Result<bool, String> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    let proxy = Proxy::start(0, args.seed).map_err(|e| e.to_string())?;
    let mut broker_args: Vec<String> = vec![
        "--advertised-listeners".into(),
        format!("PLAINTEXT://127.0.0.1:{}", proxy.port),
        "--num-partitions".into(),
        args.keys.to_string(),
        "--group-initial-rebalance-delay-ms".into(),
        "0".into(),
        "--transaction-abort-timed-out-transaction-cleanup-interval-ms".into(),
        "500".into(),
    ];
    broker_args.extend(args.broker_args.iter().cloned());
    let refs: Vec<&str> = broker_args.iter().map(|s| s.as_str()).collect();
    let broker = Broker::start_with(&refs);
    proxy.set_target(broker.port);
    let cluster = Arc::new(Cluster { broker: Mutex::new(broker), proxy });
    let rec = Arc::new(Recorder { start: Instant::now(), ops: Mutex::new(Vec::new()) });
    let stop = Arc::new(AtomicBool::new(false));
    let budget = Arc::new(AtomicI64::new(args.ops as i64));
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let healed = rt.block_on(async {
        let mut tasks = Vec::new();
        for p in 0..args.workers as i64 {
            tasks.push(tokio::spawn(worker(
                p,
                args.clone(),
                cluster.clone(),
                rec.clone(),
                stop.clone(),
                budget.clone(),
                latencies.clone(),
            )));
        }
        let reader_stop = Arc::new(AtomicBool::new(false));
        let reader = args.librdkafka_reader.then(|| {
            let (c, r, s, k) = (cluster.clone(), rec.clone(), reader_stop.clone(), args.keys);
            std::thread::spawn(move || rdkafka_reader(c, k, r, s))
        });
        let nem = tokio::spawn(nemesis(args.clone(), cluster.clone(), rec.clone(), stop.clone()));
        tokio::time::sleep(Duration::from_secs(args.time_limit)).await;
        stop.store(true, Ordering::Relaxed);
        let healed = nem.await.unwrap_or_default();
        let c = cluster.clone();
        let _ = tokio::task::spawn_blocking(move || c.heal()).await;
        for t in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(30), t).await;
        }
        // Let the reader catch up with what the workers committed, then stop it.
        tokio::time::sleep(Duration::from_secs(2)).await;
        reader_stop.store(true, Ordering::Relaxed);
        if let Some(r) = reader {
            let _ = tokio::task::spawn_blocking(move || r.join()).await;
        }
        healed
    });
    let drained = rt.block_on(drain(&cluster, args.keys, &rec));
    let ops = rec.ops.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let path = args.history.clone().unwrap_or_else(|| {
        PathBuf::from(format!("target/jepsen/{:?}-{}.jsonl", args.workload, args.seed).to_lowercase())
    });
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    }
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).map_err(|e| e.to_string())?);
    history::write(&ops, &mut f).map_err(|e| e.to_string())?;
    drop(f);
    let mode = if args.strict { checker::Mode::Strict } else { checker::Mode::Kafka };
    let report = checker::check_with(&ops, mode);
    // Summary.
    let count = |k: OpType| ops.iter().filter(|o| o.f == OpFn::Txn && o.kind == k && o.process < 1000).count();
    let mut lat: Vec<u64> = latencies.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|(_, d)| *d).collect();
    lat.sort_unstable();
    let oks: Vec<u64> = latencies.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|(t, _)| *t).collect();
    println!(
        "jepsen run: workload {:?}, seed {}, {} s, history {}",
        args.workload,
        args.seed,
        started.elapsed().as_secs(),
        path.display()
    );
    println!(
        "  operations: {} ok, {} failed, {} unknown; faults injected: {}",
        count(OpType::Ok),
        count(OpType::Fail),
        count(OpType::Info),
        healed.len()
    );
    println!(
        "  latency ms (ok ops): p50 {:.1}, p99 {:.1}, max {:.1}",
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        percentile(&lat, 1.0)
    );
    for (fault, at) in &healed {
        let next_ok = oks.iter().filter(|t| **t >= *at).min();
        match next_ok {
            Some(t) => println!("  after {fault}: first ok op {:.0} ms after healing", (*t - *at) as f64 / 1e6),
            None => println!("  after {fault}: no ok op afterwards"),
        }
    }
    println!("  acked sends {}, reads {}, committed ops {}", report.acked_sends, report.reads, report.committed_txns);
    if let Err(e) = &drained {
        println!("  drain: {e}");
    }
    print_report(&report);
    let progress = count(OpType::Ok) > 0;
    if !progress {
        println!("  no operation succeeded: the run proves nothing");
    }
    Ok(report.valid() && drained.is_ok() && progress)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Run(args) => run(args),
        Cmd::Check { file, strict } => std::fs::File::open(&file)
            .map_err(|e| format!("{}: {e}", file.display()))
            .and_then(|f| history::read(std::io::BufReader::new(f)))
            .map(|ops| {
                let mode = if strict { checker::Mode::Strict } else { checker::Mode::Kafka };
                let r = checker::check_with(&ops, mode);
                print_report(&r);
                r.valid()
            }),
    };
    match r {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("jepsen: {e}");
            ExitCode::from(2)
        }
    }
}
