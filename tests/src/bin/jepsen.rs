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
use sluice_tests::lossyfs::Mount;
use sluice_tests::proxy::{Links, Proxy};
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
    /// (internal) One client worker process: runs operations, prints its history events as
    /// JSON lines on stdout.
    Worker(WorkerArgs),
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
    /// The transactional workload with zombies as the only fault: a worker frozen (SIGSTOP)
    /// mid-transaction, a new instance started with its transactional id, the old one resumed.
    Zombie,
    /// Consume-transform-produce: half the workers write transactions to the input topic, the
    /// other half (group `jepsen-chain`) copy each input value v to the output topic as
    /// v + 10^15, committing the input offsets in the same transaction.
    Chain,
}

/// Output values of the chain are input values plus this.
const CHAIN_SHIFT: i64 = 1_000_000_000_000_000;
/// History keys of the chain's output topic are its partitions plus this.
const OUT_BASE: i32 = 1000;
const OUT_TOPIC: &str = "jepsen-out";

/// The topic and partition behind a history key.
fn topic_of(key: i32) -> (&'static str, i32) {
    if key >= OUT_BASE {
        (OUT_TOPIC, key - OUT_BASE)
    } else {
        (TOPIC, key)
    }
}

/// The history key of a record.
fn key_of(topic: &str, partition: i32) -> i32 {
    if topic == OUT_TOPIC {
        OUT_BASE + partition
    } else {
        partition
    }
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
    /// kill -9 a client worker process (it is replaced by a new process, same transactional id).
    ClientKill,
    /// SIGSTOP a client worker process, SIGCONT it.
    ClientPause,
    /// A zombie: SIGSTOP a worker mid-run, start a new instance with its transactional id,
    /// then SIGCONT the old one (it must be fenced and stop).
    Zombie,
    /// Cut one broker off from the other brokers (every Raft link to and from it, through
    /// the link proxies); clients still reach it. Cluster runs only.
    Partition,
    /// Cut one broker's power: kill -9 it, and its data directory (a `lossyfs` FUSE mount)
    /// forgets every write not fsynced — all of it, a seeded prefix, or a prefix with a torn
    /// last page — then it restarts on what was synced. Needs FUSE (`/dev/fuse`, fuse3).
    PowerCut,
    /// Flip one bit at rest in a stored batch of one broker's copy of a partition (inside the
    /// bytes its CRC covers). Never served: on three brokers the damaged replica repairs the
    /// batch from another replica's copy (decision 0037); on one broker the partition goes
    /// offline, and the heal restores the bit and restarts the broker (an operator restoring a
    /// copy).
    Corrupt,
}

#[derive(clap::Args, Clone)]
struct WorkerArgs {
    #[arg(long, value_enum)]
    workload: Workload,
    #[arg(long)]
    seed: u64,
    #[arg(long)]
    keys: i32,
    /// History process id (unique per worker process).
    #[arg(long)]
    process: i64,
    /// Transactional id slot (a replacement keeps its predecessor's).
    #[arg(long)]
    slot: i64,
    #[arg(long)]
    bootstrap: String,
    /// The run's time origin (ns since the Unix epoch): history times are relative to it.
    #[arg(long)]
    start_unix_ns: u64,
    /// Stop invoking at this time (ns since the run's origin).
    #[arg(long)]
    stop_ns: u64,
    #[arg(long)]
    ops: usize,
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
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "kill,pause,cut,blackhole,delay,client-kill,client-pause,zombie,partition"
    )]
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
    /// Run a bad producer alongside (its own process id, 3000): malformed batches (a header
    /// that disagrees with its records) and out-of-spec transactional batches (a higher epoch
    /// than the coordinator's, Produce v12 with a fenced epoch), every one recorded as failed —
    /// a read of any of its values is an aborted read — and any of them accepted fails the run.
    #[arg(long)]
    bad_producer: bool,
    /// Brokers: 1, or a cluster (cluster mode: a metadata quorum of all of them, partitions
    /// spread over them), each behind its own proxy; broker faults hit one chosen at random.
    #[arg(long, default_value_t = 1)]
    nodes: usize,
}

const TOPIC: &str = "jepsen";

fn unix_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

/// The history being recorded: in memory (the harness) or streamed to stdout (a worker).
struct Recorder {
    start_unix_ns: u64,
    ops: Mutex<Vec<Op>>,
    stdout: bool,
}

impl Recorder {
    fn new(start_unix_ns: u64, stdout: bool) -> Recorder {
        Recorder { start_unix_ns, ops: Mutex::new(Vec::new()), stdout }
    }

    fn now(&self) -> u64 {
        unix_ns().saturating_sub(self.start_unix_ns)
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
        self.push_op(Op { index: 0, time_ns: self.now(), process, kind, f, value, commit_ns, note });
    }

    fn push_op(&self, mut op: Op) {
        let mut ops = self.ops.lock().unwrap_or_else(|e| e.into_inner());
        if self.stdout {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            let _ = serde_json::to_writer(&mut out, &op);
            let _ = out.write_all(b"\n");
            let _ = out.flush();
            return;
        }
        op.index = ops.len();
        ops.push(op);
    }
}

/// A broker and the proxy in front of it (clients and the other brokers reach it through it).
struct Node {
    broker: Mutex<Broker>,
    proxy: Proxy,
    /// The broker's data directory as a `lossyfs` mount (runs with `power-cut`); dropped after
    /// the broker (field order), unmounting cleanly.
    fs: Mutex<Option<Mount>>,
    /// Where the mount's backing directory and mount point live.
    _tmp: Option<tempfile::TempDir>,
}

impl Node {
    /// Flip one bit inside the CRC-covered bytes (past the first 17: base offset, length,
    /// leader epoch and magic are outside the CRC) of a whole stored batch of a random segment
    /// of this broker's workload partitions; the file, byte and bit flipped.
    /// `newest`: always among the newest three batches (one broker: the final drain comes after
    /// the heal restored the bit, so only readers at the tail can meet it).
    fn corrupt(&self, rng: &mut StdRng, newest: bool) -> Option<(PathBuf, u64, u64)> {
        let dir = self.broker.lock().unwrap_or_else(|e| e.into_inner()).data_dir.clone();
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .ok()?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with(TOPIC))
            .filter_map(|e| std::fs::read_dir(e.path()).ok())
            .flatten()
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "log"))
            .collect();
        files.sort();
        for _ in 0..8 {
            let file = files.get(rng.gen_range(0..files.len().max(1)))?.clone();
            let bytes = std::fs::read(&file).ok()?;
            // whole batches that pass their CRC (a tail being written, or damaged, ends them)
            let batches: Vec<(usize, usize)> = sluice_protocol::batch::iter_batches(&bytes)
                .map_while(Result::ok)
                .map(|(at, b)| (at, b.size()))
                .collect();
            // half the time one of the newest three batches, which readers at the tail have
            // yet to read; otherwise any (the final drain reads them all)
            let from = if rng.gen_bool(0.5) || newest { batches.len().saturating_sub(3) } else { 0 };
            let Some(&(start, size)) = batches.get(rng.gen_range(from..batches.len().max(1))) else { continue };
            let at = (start + 17 + rng.gen_range(0..size - 17)) as u64;
            let bit = rng.gen_range(0..8u64);
            sluice_tests::lossyfs::corrupt(&file, "flip", at, bit).ok()?;
            return Some((file, at, bit));
        }
        None
    }

    /// kill -9 the broker and cut the power of its disk; mount again on what was synced (the
    /// heal restarts the broker). Returns what the cut dropped.
    fn power_cut(&self, mode: &str, seed: u64) -> String {
        let mut b = self.broker.lock().unwrap_or_else(|e| e.into_inner());
        b.resume();
        b.kill9();
        let mut fs = self.fs.lock().unwrap_or_else(|e| e.into_inner());
        let Some(mut m) = fs.take() else { return "no lossyfs mount".into() };
        let answer = m.cut(mode, seed);
        *fs = Some(Mount::start(&m.disk, &m.mnt));
        format!("{mode}: {answer}")
    }
}

/// The brokers, shared by the nemesis and the drain.
struct Cluster {
    nodes: Vec<Node>,
    /// Proxies on the brokers' Raft links (cluster runs).
    links: Option<Links>,
}

impl Cluster {
    fn bootstrap(&self) -> String {
        self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.proxy.port)).collect::<Vec<_>>().join(",")
    }

    fn heal(&self) {
        if let Some(l) = &self.links {
            l.heal();
        }
        for n in &self.nodes {
            let f = &n.proxy.faults;
            f.blackhole.store(false, Ordering::Relaxed);
            f.delay_ms.store(0, Ordering::Relaxed);
            let mut b = n.broker.lock().unwrap_or_else(|e| e.into_inner());
            b.resume();
            if !b.is_running() {
                b.spawn();
            }
        }
    }
}

fn producer_config(bootstrap: &str, txn_id: Option<String>) -> ClientConfig {
    let mut cfg = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
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

fn consumer_config(bootstrap: &str) -> ClientConfig {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
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

/// The consumer group of a worker (None: it does not consume).
fn group_of(w: Workload, slot: i64) -> Option<&'static str> {
    match w {
        Workload::Txn | Workload::Zombie => Some("jepsen"),
        Workload::Chain if slot % 2 == 1 => Some("jepsen-chain"),
        _ => None,
    }
}

async fn clients(bootstrap: &str, w: Workload, slot: i64) -> Result<Clients, sluice_client::Error> {
    match w {
        Workload::Txn | Workload::Zombie | Workload::Chain => {
            let producer = Producer::new(&producer_config(bootstrap, Some(format!("jepsen-{slot}")))).await?;
            producer.init_transactions().await?;
            let consumer = match group_of(w, slot) {
                Some(g) => {
                    let mut c = Consumer::new(&consumer_config(bootstrap).set("group.id", g))?;
                    c.subscribe(&[TOPIC])?;
                    Some(c)
                }
                None => None,
            };
            Ok(Clients { producer, consumer })
        }
        Workload::Idempotent => {
            Ok(Clients { producer: Producer::new(&producer_config(bootstrap, None)).await?, consumer: None })
        }
    }
}

fn value_of(r: &sluice_client::ConsumerRecord) -> i64 {
    r.value.as_deref().and_then(|v| std::str::from_utf8(v).ok()).and_then(|s| s.parse().ok()).unwrap_or(-1)
}

/// One transactional operation: sends and a poll, offsets in the transaction, commit.
/// One transactional operation: a poll (if the worker consumes), sends (given, or for a chain
/// processor one output per record read), the read offsets in the transaction, commit.
async fn txn_op(
    cl: &mut Clients,
    sends: &[(i32, i64)],
    chain: bool,
    abort: bool,
    group: Option<&str>,
    rec: &Recorder,
) -> (OpType, Vec<Micro>, Option<u64>, Option<String>, bool) {
    let p = &cl.producer;
    let mut micro = Vec::new();
    if let Err(e) = p.begin_transaction().await {
        return (OpType::Fail, micro, None, Some(e.to_string()), e.is_fatal());
    }
    let mut polled = Vec::new();
    let mut rebalanced = false;
    if let Some(consumer) = cl.consumer.as_mut() {
        let before = consumer.assignment();
        polled = match consumer.poll(Duration::from_millis(50)).await {
            Ok(r) => r,
            Err(e) => {
                let _ = p.abort_transaction().await;
                return (OpType::Fail, micro, None, Some(format!("poll: {e}")), true);
            }
        };
        rebalanced = consumer.assignment() != before;
    }
    let mut reads: BTreeMap<i32, Vec<(i64, i64)>> = BTreeMap::new();
    let mut first: BTreeMap<(String, i32), i64> = BTreeMap::new();
    let mut next: BTreeMap<(String, i32), i64> = BTreeMap::new();
    for r in &polled {
        reads.entry(key_of(&r.topic, r.partition)).or_default().push((r.offset, value_of(r)));
        first.entry((r.topic.clone(), r.partition)).or_insert(r.offset);
        next.insert((r.topic.clone(), r.partition), r.offset + 1);
    }
    let derived: Vec<(i32, i64)> = if chain {
        polled.iter().map(|r| (OUT_BASE + r.partition, value_of(r) + CHAIN_SHIFT)).collect()
    } else {
        sends.to_vec()
    };
    let mut deliveries = Vec::new();
    let mut failed: Option<sluice_client::Error> = None;
    for (key, value) in &derived {
        let (topic, partition) = topic_of(*key);
        match p.send(ProducerRecord::new(topic, value.to_string()).partition(partition)).await {
            Ok(d) => deliveries.push((*key, *value, d)),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    let offsets: Vec<(String, i32, i64)> = next.into_iter().map(|((t, p), o)| (t, p, o)).collect();
    if let (None, false, Some(consumer)) = (&failed, offsets.is_empty(), cl.consumer.as_ref()) {
        if let Some(g) = consumer.group_metadata() {
            if let Err(e) = p.send_offsets_to_transaction(&offsets, &g).await {
                failed = Some(e);
            }
        }
    }
    let rewind = |consumer: Option<&mut Consumer>| {
        if let Some(c) = consumer {
            for (tp, o) in &first {
                let _ = c.seek(tp, *o);
            }
        }
    };
    let poll_micro = Micro::Poll { reads, group: group.map(|g| g.to_string()) };
    let attempted: Vec<Micro> =
        derived.iter().map(|(key, value)| Micro::Send { key: *key, value: *value, offset: None }).collect();
    if failed.is_none() && abort {
        // Written, then aborted: flush so the records are in the log before the abort.
        if let Err(e) = p.flush().await {
            failed = Some(e);
        } else {
            return match p.abort_transaction().await {
                Ok(()) => {
                    rewind(cl.consumer.as_mut());
                    (OpType::Fail, attempted, None, Some("aborted on purpose".into()), false)
                }
                Err(e) => (OpType::Info, attempted, None, Some(e.to_string()), true),
            };
        }
    }
    if let Some(e) = failed {
        if e.is_fatal() {
            return (OpType::Info, attempted, None, Some(e.to_string()), true);
        }
        let _ = p.abort_transaction().await;
        rewind(cl.consumer.as_mut());
        return (OpType::Fail, attempted, None, Some(e.to_string()), false);
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
            micro.push(poll_micro);
            (OpType::Ok, micro, commit_ns, rebalanced.then(|| "rebalanced".to_string()), false)
        }
        Err(e) if e.is_abortable() => {
            let _ = p.abort_transaction().await;
            rewind(cl.consumer.as_mut());
            (OpType::Fail, attempted, commit_ns, Some(e.to_string()), false)
        }
        // Unknown outcome: the sends may or may not be committed.
        Err(e) => (OpType::Info, attempted, commit_ns, Some(e.to_string()), true),
    }
}

/// A worker process: operations until `stop_ns`, each event printed as a history line.
async fn worker(args: WorkerArgs) {
    let process = args.process;
    let rec = Recorder::new(args.start_unix_ns, true);
    let mut rng = StdRng::seed_from_u64(args.seed.wrapping_mul(1000).wrapping_add(process as u64));
    let mut next_value = process * 1_000_000_000;
    let mut cl: Option<Clients> = None;
    let mut budget = args.ops;
    while rec.now() < args.stop_ns && budget > 0 {
        budget -= 1;
        if cl.is_none() {
            match clients(&args.bootstrap, args.workload, args.slot).await {
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
        // A chain processor's sends come from what it reads.
        let n = if args.workload == Workload::Chain && args.slot % 2 == 1 { 0 } else { rng.gen_range(1..=3) };
        let sends: Vec<(i32, i64)> = (0..n)
            .map(|_| {
                next_value += 1;
                (rng.gen_range(0..args.keys), next_value)
            })
            .collect();
        let invoke: Vec<Micro> =
            sends.iter().map(|(key, value)| Micro::Send { key: *key, value: *value, offset: None }).collect();
        rec.push(process, OpType::Invoke, OpFn::Txn, invoke.clone(), None, None);
        let (kind, micro, commit_ns, note, rebuild) = match args.workload {
            Workload::Txn | Workload::Zombie | Workload::Chain => {
                let chain = args.workload == Workload::Chain && args.slot % 2 == 1;
                // One transaction in eight is aborted on purpose, after its records were
                // written: nobody may ever read them (G1a).
                let abort = rng.gen_range(0..8) == 0;
                txn_op(c, &sends, chain, abort, group_of(args.workload, args.slot), &rec).await
            }
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
        let fenced =
            note.as_deref().is_some_and(|n| n.contains("ProducerFenced") || n.contains("InvalidProducerEpoch"));
        let rewound = kind == OpType::Fail && group_of(args.workload, args.slot).is_some();
        let rebalanced = note.as_deref() == Some("rebalanced");
        rec.push(process, kind, OpFn::Txn, micro, commit_ns, note.filter(|n| n != "rebalanced"));
        if rewound || rebalanced {
            rec.push(process, OpType::Ok, OpFn::Rewind, vec![], None, None);
        }
        if fenced {
            // A newer instance took over this transactional id: a zombie stops cleanly.
            break;
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

/// The client worker processes: spawned, read, killed, paused, replaced.
struct Workers {
    args: RunArgs,
    bootstrap: String,
    rec: Arc<Recorder>,
    stop_ns: u64,
    /// process id → (pid, slot)
    live: Mutex<BTreeMap<i64, (u32, i64)>>,
    next_process: AtomicI64,
    /// Processes the nemesis killed (their reader restarts them).
    killed: Mutex<std::collections::BTreeSet<i64>>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl Workers {
    /// Start a worker process for transactional-id `slot`; its events go into the history.
    fn spawn(self: &Arc<Self>, slot: i64) {
        let process = self.next_process.fetch_add(1, Ordering::Relaxed);
        let exe = match std::env::current_exe() {
            Ok(e) => e,
            Err(_) => return,
        };
        let a = &self.args;
        let child = std::process::Command::new(exe)
            .arg("worker")
            .args(["--workload", &format!("{:?}", a.workload).to_lowercase()])
            .args(["--seed", &a.seed.to_string(), "--keys", &a.keys.to_string()])
            .args(["--process", &process.to_string(), "--slot", &slot.to_string()])
            .args(["--bootstrap", &self.bootstrap])
            .args(["--start-unix-ns", &self.rec.start_unix_ns.to_string(), "--stop-ns", &self.stop_ns.to_string()])
            .args(["--ops", &(a.ops / a.workers.max(1)).max(1).to_string()])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn();
        let Ok(mut child) = child else { return };
        self.live.lock().unwrap_or_else(|e| e.into_inner()).insert(process, (child.id(), slot));
        let Some(stdout) = child.stdout.take() else { return };
        let me = self.clone();
        let t = std::thread::spawn(move || {
            use std::io::BufRead;
            let mut pending: Option<Op> = None;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let Ok(op) = serde_json::from_str::<Op>(&line) else { continue };
                pending = (op.kind == OpType::Invoke && op.f == OpFn::Txn).then(|| op.clone());
                me.rec.push_op(op);
            }
            let _ = child.wait();
            // An operation cut short by a crash has an unknown outcome.
            if let Some(inv) = pending {
                me.rec.push(process, OpType::Info, OpFn::Txn, inv.value, None, Some("process died".into()));
            }
            me.live.lock().unwrap_or_else(|e| e.into_inner()).remove(&process);
            let was_killed = me.killed.lock().unwrap_or_else(|e| e.into_inner()).remove(&process);
            if was_killed && me.rec.now() < me.stop_ns {
                me.spawn(slot);
            }
        });
        self.threads.lock().unwrap_or_else(|e| e.into_inner()).push(t);
    }

    /// A live worker chosen by `pick`, with its pid and slot.
    fn choose(&self, pick: usize) -> Option<(i64, u32, i64)> {
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        if live.is_empty() {
            return None;
        }
        live.iter().nth(pick % live.len()).map(|(p, (pid, slot))| (*p, *pid, *slot))
    }

    fn signal(pid: u32, sig: &str) {
        let _ = std::process::Command::new("kill").arg(sig).arg(pid.to_string()).status();
    }

    fn join(&self) {
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            let threads: Vec<_> = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
            if threads.is_empty() {
                return;
            }
            for t in threads {
                while !t.is_finished() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(50));
                }
                if t.is_finished() {
                    let _ = t.join();
                }
            }
            if Instant::now() >= deadline {
                // Stragglers (e.g. still paused): kill them.
                for (_, (pid, _)) in self.live.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                    Self::signal(*pid, "-CONT");
                    Self::signal(*pid, "-KILL");
                }
                return;
            }
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
            rec.push(process, OpType::Ok, OpFn::Txn, vec![Micro::Poll { reads, group: None }], None, None);
        }
    }
}

/// Faults on a seeded schedule until `stop`; returns (fault, healed at ns) for unavailability.
async fn nemesis(
    args: RunArgs,
    cluster: Arc<Cluster>,
    workers: Arc<Workers>,
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
    let mut single_corrupted: Option<(PathBuf, u64, u64)> = None;
    while !stop.load(Ordering::Relaxed) {
        let fault = faults[rng.gen_range(0..faults.len())];
        let hold = Duration::from_millis(rng.gen_range(300..=interval.as_millis() as u64));
        let name = format!("{fault:?}").to_lowercase();
        let client_fault = matches!(fault, Fault::ClientKill | Fault::ClientPause | Fault::Zombie);
        let target = if client_fault { workers.choose(rng.gen_range(0..1000)) } else { None };
        let on = target.map(|(p, _, _)| format!(" on process {p}")).unwrap_or_default();
        rec.push(-1, OpType::Invoke, OpFn::Nemesis, vec![], None, Some(format!("{name}{on} for {hold:?}")));
        let c = cluster.clone();
        match (fault, target) {
            (Fault::ClientKill, Some((p, pid, _))) => {
                workers.killed.lock().unwrap_or_else(|e| e.into_inner()).insert(p);
                Workers::signal(pid, "-KILL");
            }
            (Fault::ClientPause, Some((_, pid, _))) => Workers::signal(pid, "-STOP"),
            (Fault::Zombie, Some((_, pid, slot))) => {
                // Freeze it, and start its replacement with the same transactional id.
                Workers::signal(pid, "-STOP");
                workers.spawn(slot);
            }
            (Fault::ClientKill | Fault::ClientPause | Fault::Zombie, None) => {}
            _ => {}
        }
        let i = rng.gen_range(0..cluster.nodes.len());
        let node = &cluster.nodes[i];
        match fault {
            Fault::Kill => {
                let _ = tokio::task::spawn_blocking(move || {
                    c.nodes[i].broker.lock().unwrap_or_else(|e| e.into_inner()).kill9()
                })
                .await;
            }
            Fault::Pause => node.broker.lock().unwrap_or_else(|e| e.into_inner()).pause(),
            Fault::Cut => node.proxy.cut_all(),
            Fault::Blackhole => node.proxy.faults.blackhole.store(true, Ordering::Relaxed),
            Fault::Delay => node.proxy.faults.delay_ms.store(rng.gen_range(50..300), Ordering::Relaxed),
            Fault::Partition => {
                if let Some(l) = &cluster.links {
                    l.isolate(i);
                }
            }
            Fault::PowerCut => {
                let mode = ["all", "prefix", "torn"][rng.gen_range(0..3)];
                let seed = rng.gen::<u64>();
                let dropped = tokio::task::spawn_blocking(move || c.nodes[i].power_cut(mode, seed)).await;
                let note = format!("power cut of broker {}: {}", i + 1, dropped.unwrap_or_else(|e| e.to_string()));
                rec.push(-1, OpType::Info, OpFn::Nemesis, vec![], None, Some(note));
            }
            Fault::Corrupt => {
                let flipped = node.corrupt(&mut rng, cluster.nodes.len() == 1);
                let note = match &flipped {
                    Some((f, at, bit)) => {
                        format!("corrupt broker {}: bit {bit} of byte {at} of {}", i + 1, f.display())
                    }
                    None => format!("corrupt broker {}: no stored batch to damage", i + 1),
                };
                rec.push(-1, OpType::Info, OpFn::Nemesis, vec![], None, Some(note));
                if cluster.nodes.len() == 1 {
                    single_corrupted = flipped;
                }
            }
            Fault::None | Fault::ClientKill | Fault::ClientPause | Fault::Zombie => {}
        }
        tokio::time::sleep(hold).await;
        // one broker: no other copy to repair from; the operator's repair is to restore the
        // bytes and restart it (the partition stays offline until then)
        if let Some((file, at, bit)) = single_corrupted.take() {
            let _ = sluice_tests::lossyfs::corrupt(&file, "flip", at, bit);
            let c = cluster.clone();
            let _ = tokio::task::spawn_blocking(move || {
                c.nodes[0].broker.lock().unwrap_or_else(|e| e.into_inner()).kill9()
            })
            .await;
        }
        if let (Fault::ClientPause | Fault::Zombie, Some((_, pid, _))) = (fault, target) {
            Workers::signal(pid, "-CONT");
        }
        let c = cluster.clone();
        let _ = tokio::task::spawn_blocking(move || c.heal()).await;
        if fault == Fault::Blackhole {
            cluster.nodes[i].proxy.cut_all();
        }
        rec.push(-1, OpType::Ok, OpFn::Nemesis, vec![], None, Some(format!("healed {name}")));
        healed.push((name, rec.now()));
        tokio::time::sleep(interval).await;
    }
    healed
}

/// Wait until every broker lists all `n` and they agree on a controller.
async fn wait_for_cluster(cluster: &Cluster, n: usize) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut controllers = std::collections::BTreeSet::new();
        for node in &cluster.nodes {
            let cfg = ClientConfig::new().set("bootstrap.servers", format!("127.0.0.1:{}", node.proxy.port));
            let d = match sluice_client::Admin::new(&cfg) {
                Ok(a) => {
                    tokio::time::timeout(Duration::from_secs(3), a.describe_cluster()).await.ok().and_then(|r| r.ok())
                }
                Err(_) => None,
            };
            match d {
                Some(d) if d.brokers.len() == n && d.controller_id > 0 => {
                    controllers.insert(d.controller_id);
                }
                _ => {
                    controllers.insert(-1);
                }
            }
        }
        if controllers.len() == 1 && !controllers.contains(&-1) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err("the brokers did not form a cluster within 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Read every partition from the start, read_committed, up to its last stable offset.
async fn drain(cluster: &Cluster, keys: i32, topics: &[&str], rec: &Recorder) -> Result<(), String> {
    let cfg = ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap())
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "earliest")
        .set("fetch.max.wait.ms", 100);
    let deadline = Instant::now() + Duration::from_secs(60);
    // Open transactions of crashed instances are aborted by the coordinator's timeout; wait
    // until the LSO reaches the high watermark everywhere.
    let mut c = Consumer::new(&cfg).map_err(|e| e.to_string())?;
    let tps: Vec<(String, i32)> = topics.iter().flat_map(|t| (0..keys).map(move |p| (t.to_string(), p))).collect();
    c.assign(&tps).map_err(|e| e.to_string())?;
    let mut reads: BTreeMap<i32, Vec<(i64, i64)>> = BTreeMap::new();
    rec.push(2000, OpType::Invoke, OpFn::Txn, vec![], None, Some("final drain".into()));
    loop {
        for r in c.poll(Duration::from_millis(200)).await.map_err(|e| e.to_string())? {
            reads.entry(key_of(&r.topic, r.partition)).or_default().push((r.offset, value_of(&r)));
        }
        // the partitions not read to their end yet, with where they stand (hw, lso, position):
        // a stuck last stable offset is an open transaction, a stuck position a fetch
        let behind: Vec<String> = tps
            .iter()
            .filter_map(|tp| {
                let (hw, pos) = (c.watermarks(tp), c.position(tp));
                match hw {
                    Some((hw, lso)) if lso >= hw && pos.unwrap_or(0) >= hw => None,
                    _ => Some(format!("{}-{} (hw, lso) {hw:?} position {pos:?}", tp.0, tp.1)),
                }
            })
            .collect();
        if behind.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("drain did not reach the end of every partition within 60 s: {}", behind.join("; ")));
        }
    }
    rec.push(2000, OpType::Ok, OpFn::Txn, vec![Micro::Poll { reads, group: None }], None, Some("final drain".into()));
    Ok(())
}

/// What the bad producer did.
#[derive(Default)]
struct BadReport {
    attempts: usize,
    /// Answered with an error, as they must be.
    refused: usize,
    /// What a broker accepted that it must refuse.
    accepted: Vec<String>,
}

/// History process of the bad producer.
const BAD_PROCESS: i64 = 3000;
/// Its values: far above every worker's (process × 10^9 + n, chain outputs + 10^15).
const BAD_VALUES: i64 = 8_000_000_000_000_000_000;

/// The bad producer (`--bad-producer`): until `stop`, sends what no correct client sends, on
/// the workload's topic, through the same proxies (and faults) as the workers. Every send is
/// recorded as failed — none may ever be read — except that a legitimate transactional batch
/// it aborts on purpose is recorded as failed only once the abort is confirmed.
async fn bad_producer(bootstrap: String, keys: i32, seed: u64, rec: Arc<Recorder>, stop: Arc<AtomicBool>) -> BadReport {
    use sluice_protocol::batch::Compression;
    use sluice_tests::raw;
    let mut rng = StdRng::seed_from_u64(seed ^ 0xbad);
    let mut report = BadReport::default();
    let mut next = BAD_VALUES;
    let addrs: Vec<String> = bootstrap.split(',').map(str::to_string).collect();
    let mut conn: Option<sluice_client::Connection> = None;
    while !stop.load(Ordering::Relaxed) {
        let c = match &conn {
            Some(c) if !c.is_closed() => c,
            _ => {
                let addr = &addrs[rng.gen_range(0..addrs.len())];
                match sluice_client::Connection::connect(addr, "jepsen-bad", 1).await {
                    Ok(c) => conn.insert(c),
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                }
            }
        };
        let key = rng.gen_range(0..keys);
        let vals: Vec<(i64, String)> = (0..3)
            .map(|_| {
                next += 1;
                (1_000, next.to_string())
            })
            .collect();
        let sends: Vec<Micro> =
            vals.iter().map(|(_, v)| Micro::Send { key, value: v.parse().unwrap_or(-1), offset: None }).collect();
        rec.push(BAD_PROCESS, OpType::Invoke, OpFn::Txn, sends.clone(), None, None);
        let case = rng.gen_range(0..3);
        // (what was sent, its answer; `None`: no answer) for batches that must be refused
        let mut must_refuse: Vec<(String, Option<i16>)> = Vec::new();
        let mut aborted_ok = true;
        match case {
            0 => {
                let m = raw::MALFORMATIONS[rng.gen_range(0..raw::MALFORMATIONS.len())];
                let compression = if rng.gen_bool(0.5) { Compression::Lz4 } else { Compression::None };
                let pid = match raw::init_producer_id(c, 4, None, None).await {
                    Ok((0, pid, _)) if rng.gen_bool(0.5) => pid,
                    _ => -1,
                };
                let good = raw::batch(pid, 0, 0, false, &vals, compression);
                let answer = raw::produce(c, 9, None, TOPIC, key, raw::malformed(&good, m)).await.ok().map(|a| a.0);
                must_refuse.push((format!("{m:?} {compression:?} pid {pid}"), answer));
            }
            1 => {
                // transaction version 1, a batch with a higher epoch than the coordinator's
                let txn = "jepsen-bad-epoch";
                if let Ok((0, pid, e)) = raw::init_producer_id_timeout(c, 3, Some(txn), None, 2_000).await {
                    if raw::add_partitions(c, txn, pid, e, TOPIC, &[key]).await.ok() == Some(0) {
                        let b = raw::batch(pid, e.saturating_add(5), 0, true, &vals, Compression::None);
                        let answer = raw::produce(c, 9, Some(txn), TOPIC, key, b).await.ok().map(|a| a.0);
                        must_refuse.push((format!("epoch {} over the coordinator's {e}", e.saturating_add(5)), answer));
                    }
                    let _ = raw::end_txn(c, 3, txn, pid, e, false).await;
                }
            }
            _ => {
                // transaction version 2: a batch, aborted; then a late batch with the fenced
                // epoch (refused); then an abort with nothing added
                let txn = "jepsen-bad-v12";
                aborted_ok = false;
                if let Ok((0, pid, e)) = raw::init_producer_id_timeout(c, 4, Some(txn), None, 2_000).await {
                    let b = raw::batch(pid, e, 0, true, &vals[..1], Compression::None);
                    let first = raw::produce(c, 12, Some(txn), TOPIC, key, b).await.ok().map(|a| a.0);
                    if let Ok((0, _, e1)) = raw::end_txn(c, 5, txn, pid, e, false).await {
                        aborted_ok = true;
                        let late = raw::batch(pid, e, 1, true, &vals[1..], Compression::None);
                        let answer = raw::produce(c, 12, Some(txn), TOPIC, key, late).await.ok().map(|a| a.0);
                        must_refuse.push((format!("Produce v12 with epoch {e} after {e1}"), answer));
                        let _ = raw::end_txn(c, 5, txn, pid, e1, false).await;
                    } else if first != Some(0) {
                        aborted_ok = true; // never written
                    }
                }
            }
        }
        report.attempts += must_refuse.len();
        for (what, answer) in must_refuse {
            match answer {
                Some(0) => report.accepted.push(what),
                Some(_) => report.refused += 1,
                None => conn = None,
            }
        }
        // every value must stay invisible; an abort that was not confirmed leaves the first
        // batch's fate unknown (the coordinator's timeout aborts it)
        let kind = if aborted_ok { OpType::Fail } else { OpType::Info };
        rec.push(BAD_PROCESS, kind, OpFn::Txn, sends, None, Some(format!("bad producer case {case}")));
        tokio::time::sleep(Duration::from_millis(rng.gen_range(20..120))).await;
    }
    report
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

fn run(mut args: RunArgs) -> Result<bool, String> {
    if args.workload == Workload::Zombie {
        args.nemesis = vec![Fault::Zombie];
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    let n = args.nodes.max(1);
    if n == 1 {
        args.nemesis.retain(|f| *f != Fault::Partition); // no links between brokers to cut
    }
    let links = if n > 1 { Some(Links::new(n, args.seed).map_err(|e| e.to_string())?) } else { None };
    let power = args.nemesis.contains(&Fault::PowerCut);
    if power {
        if let Some(why) = sluice_tests::lossyfs::unavailable() {
            return Err(format!("the power-cut fault needs FUSE, unavailable here: {why}"));
        }
    }
    let mut nodes = Vec::new();
    for i in 0..n {
        let proxy = Proxy::start(0, args.seed.wrapping_add(i as u64)).map_err(|e| e.to_string())?;
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
        if n > 1 {
            broker_args.extend([
                "--node-id".into(),
                (i + 1).to_string(),
                "--controller-quorum-voters".into(),
                links.as_ref().map(|l| l.voters_for(i)).unwrap_or_default(),
            ]);
        }
        broker_args.extend(args.broker_args.iter().cloned());
        let refs: Vec<&str> = broker_args.iter().map(|s| s.as_str()).collect();
        let (broker, fs, tmp) = if power {
            let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
            let mount = Mount::start(&tmp.path().join("disk"), &tmp.path().join("data"));
            (Broker::start_in(mount.mnt.clone(), &refs), Some(mount), Some(tmp))
        } else {
            (Broker::start_with(&refs), None, None)
        };
        proxy.set_target(broker.port);
        nodes.push(Node { broker: Mutex::new(broker), proxy, fs: Mutex::new(fs), _tmp: tmp });
    }
    let cluster = Arc::new(Cluster { nodes, links });
    if n > 1 {
        rt.block_on(wait_for_cluster(&cluster, n))?;
    }
    let rec = Arc::new(Recorder::new(unix_ns(), false));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let workers = Arc::new(Workers {
        args: args.clone(),
        bootstrap: cluster.bootstrap(),
        rec: rec.clone(),
        stop_ns: args.time_limit * 1_000_000_000,
        live: Mutex::new(BTreeMap::new()),
        next_process: AtomicI64::new(0),
        killed: Mutex::new(Default::default()),
        threads: Mutex::new(Vec::new()),
    });
    let healed = rt.block_on(async {
        for slot in 0..args.workers as i64 {
            workers.spawn(slot);
        }
        let reader_stop = Arc::new(AtomicBool::new(false));
        let reader = args.librdkafka_reader.then(|| {
            let (c, r, s, k) = (cluster.clone(), rec.clone(), reader_stop.clone(), args.keys);
            std::thread::spawn(move || rdkafka_reader(c, k, r, s))
        });
        let nem = tokio::spawn(nemesis(args.clone(), cluster.clone(), workers.clone(), rec.clone(), stop.clone()));
        let bad = args.bad_producer.then(|| {
            let (b, r, s) = (cluster.bootstrap(), rec.clone(), stop.clone());
            tokio::spawn(bad_producer(b, args.keys, args.seed, r, s))
        });
        tokio::time::sleep(Duration::from_secs(args.time_limit)).await;
        stop.store(true, Ordering::Relaxed);
        let healed = nem.await.unwrap_or_default();
        let bad = match bad {
            Some(b) => Some(b.await.unwrap_or_default()),
            None => None,
        };
        let c = cluster.clone();
        let _ = tokio::task::spawn_blocking(move || c.heal()).await;
        let w = workers.clone();
        let _ = tokio::task::spawn_blocking(move || w.join()).await;
        // Let the reader catch up with what the workers committed, then stop it.
        tokio::time::sleep(Duration::from_secs(2)).await;
        reader_stop.store(true, Ordering::Relaxed);
        if let Some(r) = reader {
            let _ = tokio::task::spawn_blocking(move || r.join()).await;
        }
        (healed, bad)
    });
    let (healed, bad) = healed;
    let topics: &[&str] = if args.workload == Workload::Chain { &[TOPIC, OUT_TOPIC] } else { &[TOPIC] };
    let drained = rt.block_on(drain(&cluster, args.keys, topics, &rec));
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
    // Latency of each ok operation (invoke → completion, per process) and completion times.
    let mut invoked: BTreeMap<i64, u64> = BTreeMap::new();
    let mut lat: Vec<u64> = Vec::new();
    let mut oks: Vec<u64> = Vec::new();
    for o in ops.iter().filter(|o| o.f == OpFn::Txn && o.process < 1000) {
        match o.kind {
            OpType::Invoke => {
                invoked.insert(o.process, o.time_ns);
            }
            OpType::Ok => {
                if let Some(t) = invoked.remove(&o.process) {
                    lat.push(o.time_ns.saturating_sub(t));
                }
                oks.push(o.time_ns);
            }
            _ => {
                invoked.remove(&o.process);
            }
        }
    }
    lat.sort_unstable();
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
    // a replica that judged a write unlike its leader (decision 0045, step 2) fails the run
    let differed: usize = cluster
        .nodes
        .iter()
        .map(|n| {
            let dir = n.broker.lock().unwrap_or_else(|e| e.into_inner()).data_dir.clone();
            let log = std::fs::read_to_string(dir.with_extension("log")).unwrap_or_default();
            log.lines().filter(|l| l.contains("replication verdict differs")).count()
        })
        .sum();
    if cluster.nodes.len() > 1 {
        println!("  writes a replica judged unlike its leader {differed}");
    }
    if args.nemesis.contains(&Fault::Corrupt) {
        // what the brokers said of the damage (decisions 0036, 0037)
        let said = |what: &str| {
            cluster
                .nodes
                .iter()
                .map(|n| {
                    let dir = n.broker.lock().unwrap_or_else(|e| e.into_inner()).data_dir.clone();
                    let log = std::fs::read_to_string(dir.with_extension("log")).unwrap_or_default();
                    log.lines().filter(|l| l.contains(what)).count()
                })
                .sum::<usize>()
        };
        println!(
            "  damaged batches found by reads {}, repaired from another replica {}",
            said("is offline: damaged data"),
            said("was replaced by broker")
        );
        if std::env::var_os("JEPSEN_SHOW_DAMAGE").is_some() {
            for n in &cluster.nodes {
                let dir = n.broker.lock().unwrap_or_else(|e| e.into_inner()).data_dir.clone();
                let log = std::fs::read_to_string(dir.with_extension("log")).unwrap_or_default();
                for l in log.lines().filter(|l| l.contains("damage") || l.contains("repair")) {
                    println!("    {l}");
                }
            }
        }
    }
    if let Err(e) = &drained {
        println!("  drain: {e}");
    }
    print_report(&report);
    let progress = count(OpType::Ok) > 0;
    if !progress {
        println!("  no operation succeeded: the run proves nothing");
    }
    let mut bad_ok = true;
    if let Some(b) = &bad {
        println!("  bad producer: {} attempts, {} refused, {} accepted", b.attempts, b.refused, b.accepted.len());
        for what in b.accepted.iter().take(5) {
            println!("    accepted: {what}");
        }
        bad_ok = b.accepted.is_empty() && b.refused > 0;
        if b.refused == 0 {
            println!("  the bad producer reached no broker: the run proves nothing about it");
        }
    }
    let ok = report.valid() && drained.is_ok() && progress && bad_ok && differed == 0;
    if !ok {
        broker_evidence(&cluster);
    }
    Ok(ok)
}

/// A failed run: each broker's last warnings and errors on stdout (CI shows them), and its whole
/// log copied to `JEPSEN_LOGS_DIR` when set — the brokers' temporary directories go with the run.
fn broker_evidence(cluster: &Cluster) {
    let keep = std::env::var_os("JEPSEN_LOGS_DIR").map(std::path::PathBuf::from);
    for (i, node) in cluster.nodes.iter().enumerate() {
        let path = node.broker.lock().unwrap_or_else(|e| e.into_inner()).data_dir.with_extension("log");
        let log = std::fs::read_to_string(&path).unwrap_or_default();
        let notable: Vec<&str> = log.lines().filter(|l| l.contains("WARN") || l.contains("ERROR")).collect();
        println!("  broker {} log: the last 20 of {} warnings and errors", i + 1, notable.len());
        for line in &notable[notable.len().saturating_sub(20)..] {
            println!("    {line}");
        }
        if let Some(dir) = &keep {
            let to = dir.join(format!("broker-{}.log", i + 1));
            match std::fs::create_dir_all(dir).and_then(|()| std::fs::copy(&path, &to)) {
                Ok(_) => println!("  broker {} log kept in {}", i + 1, to.display()),
                Err(e) => println!("  broker {} log not kept: {e}", i + 1),
            }
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Run(args) => run(args),
        Cmd::Worker(args) => match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
            Ok(rt) => {
                rt.block_on(worker(args));
                Ok(true)
            }
            Err(e) => Err(e.to_string()),
        },
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
