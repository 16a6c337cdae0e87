//! # sluicectl
//!
//! Sluice's admin CLI. What belongs here: admin commands over the wire (`topics`, `groups`,
//! `transactions`, `cluster`, `users`, `acls`), offline tools over data files (`log dump` now, the
//! exactly-once `verify` later), and the load generator (`perf`).
//!
//! Exit codes: 0 success, 1 the operation failed, 2 bad usage.

mod admin;
mod console;
mod groups;
mod perf;
mod security;
mod transactions;
mod verify;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use sluice_protocol::batch::{BatchView, LOG_OVERHEAD_BYTES};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "sluicectl", version, about = "Operate Sluice: admin, log inspection, verification, load")]
struct Cli {
    /// Broker to talk to.
    #[arg(long, global = true, default_value = "127.0.0.1:9092")]
    bootstrap_server: String,
    /// Output format.
    #[arg(long, global = true, value_enum, default_value_t = Output::Table)]
    output: Output,
    /// Client properties for secured listeners (Kafka's --command-config): security.protocol,
    /// sasl.mechanism, sasl.username, sasl.password, ssl.ca.location, …
    #[arg(long, global = true)]
    command_config: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Table,
    Json,
}

#[derive(Subcommand)]
enum Cmd {
    /// Topics: list, describe, create, delete, alter (partitions, configs).
    Topics {
        #[command(subcommand)]
        cmd: admin::TopicsCmd,
    },
    /// SCRAM users: list, add (or change a password), delete.
    Users {
        #[command(subcommand)]
        cmd: security::UsersCmd,
    },
    /// ACLs: list, add, remove (topics, groups, transactional ids, the cluster).
    Acls {
        #[command(subcommand)]
        cmd: security::AclsCmd,
    },
    /// Consumer groups: list, describe (members, offsets, lag), delete, reset-offsets.
    Groups {
        #[command(subcommand)]
        cmd: groups::GroupsCmd,
    },
    /// Transactions: list, describe, describe-producers, find-hanging, abort.
    Transactions {
        #[command(subcommand)]
        cmd: transactions::TransactionsCmd,
    },
    /// Console producer: one record per stdin line.
    Produce(console::ProduceArgs),
    /// Console consumer: print records (values, or keys/headers/offsets, or JSON).
    Consume(console::ConsumeArgs),
    /// Log directories: partition sizes and disk space, as the broker reports them.
    LogDirs {
        #[command(subcommand)]
        cmd: LogDirsCmd,
    },
    /// Offline exactly-once audit of a partition directory (read-only): contiguous offsets,
    /// valid CRCs, no duplicate or gap in any producer's sequences, every transaction closed by
    /// a marker, the aborted-transaction index matching the ABORT markers. Exit 1 on a finding.
    /// Give a partition directory, or `--topic` to audit every partition of a topic under
    /// `--log-dirs` (stop the broker first, or audit a copy).
    Verify {
        #[arg(required_unless_present = "topic", conflicts_with = "topic")]
        partition_dir: Option<PathBuf>,
        #[arg(long)]
        topic: Option<String>,
        /// The broker's data directory (with --topic).
        #[arg(long, default_value = "./sluice-data")]
        log_dirs: PathBuf,
    },
    /// Print a shell completion script: `sluicectl completions bash > /etc/bash_completion.d/sluicectl`.
    Completions { shell: clap_complete::Shell },
    /// The cluster: brokers and controller.
    Cluster {
        #[command(subcommand)]
        cmd: ClusterCmd,
    },
    /// Load generator: end-to-end produce or consume throughput and latency.
    Perf {
        #[command(subcommand)]
        cmd: PerfCmd,
    },
    /// Inspect data files offline.
    Log {
        #[command(subcommand)]
        cmd: LogCmd,
    },
}

#[derive(Subcommand)]
enum LogDirsCmd {
    /// Size of every partition and the disk's total and usable bytes.
    Describe,
}

#[derive(Subcommand)]
enum ClusterCmd {
    /// Brokers, controller, cluster id, and every partition's leader, replicas and lag.
    Describe,
    /// Move leadership back to the preferred (first) replica, as kafka-leader-election
    /// --election-type PREFERRED: every replicated partition, a topic's, or one partition.
    ElectLeaders {
        #[arg(long)]
        topic: Option<String>,
        #[arg(long, requires = "topic")]
        partition: Option<i32>,
    },
    /// Move a replicated partition to other brokers, e.g. `--replicas 2,3,4` (the first is the
    /// preferred leader); the data is copied through its Raft group before the old replicas go.
    Reassign {
        #[arg(long)]
        topic: String,
        #[arg(long)]
        partition: i32,
        #[arg(long, value_delimiter = ',', required = true)]
        replicas: Vec<i32>,
    },
    /// Partition moves in progress.
    Reassignments,
    /// Remove a broker that joined the running cluster (kafka-cluster unregister --id N); move
    /// its partition replicas away first.
    RemoveBroker {
        #[arg(long)]
        id: i32,
    },
}

#[derive(Subcommand)]
enum PerfCmd {
    /// Produce random records as fast as the broker acknowledges them.
    Produce(perf::ProduceArgs),
    /// Read a topic from the beginning as fast as possible.
    Consume(perf::ConsumeArgs),
    /// Produce inside transactions committed every `--commit-interval-ms`; reports commit latency.
    Txn(perf::TxnArgs),
}

#[derive(Subcommand)]
enum LogCmd {
    /// Decode a data file: a segment (.log: one line per batch — offsets, producer, sequence,
    /// flags, markers), an offset or time index, an aborted-transaction index, or a producer
    /// snapshot.
    Dump {
        /// Path of a `.log`, `.index`, `.timeindex`, `.txnindex` or `.snapshot` file.
        path: PathBuf,
        /// Also print every record (key, value, headers).
        #[arg(long)]
        records: bool,
    },
}

/// Dispatch on the file kind: .log, .index, .timeindex, .txnindex, .snapshot.
fn dump_any(path: &Path, records: bool) -> Result<(), String> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let base: i64 = name.split('.').next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let read = || std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()));
    let be32 = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let be64 = |b: &[u8]| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[..8]);
        i64::from_be_bytes(a)
    };
    if name == sluice_storage::cleaner::CLEANER_FILE {
        let dir = path.parent().unwrap_or(Path::new("."));
        let st = sluice_storage::cleaner::CleanerState::load(dir);
        println!(
            "log cleaner: cleaned below offset {}, offsets may have gaps below {}, tombstones pending from {}",
            st.clean_end,
            st.gaps_below,
            if st.pending_deletes_from == i64::MAX { "-".to_string() } else { st.pending_deletes_from.to_string() }
        );
        for (end, at) in &st.passes {
            println!("  pass cleaned below {end}, finished at {at} ms");
        }
        return Ok(());
    }
    match path.extension().and_then(|e| e.to_str()) {
        Some("log") => dump(path, records),
        Some("index") => {
            let bytes = read()?;
            for e in bytes.chunks_exact(8) {
                let (rel, pos) = (be32(&e[..4]), be32(&e[4..]));
                if rel == 0 && pos == 0 && base > 0 {
                    break; // preallocated zeros after the last entry
                }
                println!("offset {} position {pos}", base + i64::from(rel));
            }
            Ok(())
        }
        Some("timeindex") => {
            let bytes = read()?;
            for e in bytes.chunks_exact(12) {
                let (ts, rel) = (be64(&e[..8]), be32(&e[8..]));
                if ts == 0 && rel == 0 {
                    break;
                }
                println!("timestamp {ts} offset {}", base + i64::from(rel));
            }
            Ok(())
        }
        Some("txnindex") => {
            let bytes = read()?;
            for (i, e) in bytes.chunks(sluice_storage::txnindex::TXN_ENTRY_BYTES).enumerate() {
                match sluice_storage::AbortedTxn::decode(e) {
                    Some(t) => println!(
                        "aborted producer {} first_offset {} last_offset {} last_stable_offset {}",
                        t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset
                    ),
                    None => return Err(format!("{}: entry {i} is corrupt", path.display())),
                }
            }
            Ok(())
        }
        Some("snapshot") => {
            let bytes = read()?;
            let (version, payload) =
                sluice_storage::sidefile::decode(*b"SLPS", &bytes).map_err(|e| format!("{}: {e}", path.display()))?;
            // payload: version:u8, producer count:u32, then the broker's entries
            let producers = payload.get(1..5).map(be32).unwrap_or(0);
            println!(
                "producer snapshot at offset {base}: frame version {version}, payload {} bytes, {producers} producers, CRC ok",
                payload.len()
            );
            Ok(())
        }
        _ => Err(format!(
            "{}: not a .log, .index, .timeindex, .txnindex, .snapshot or cleaner.checkpoint file",
            path.display()
        )),
    }
}

fn dump(path: &Path, records: bool) -> Result<(), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut pos = 0usize;
    let mut batches = 0u64;
    let mut next: Option<i64> = None;
    while pos < bytes.len() {
        match BatchView::parse(&bytes[pos..]) {
            Ok((b, size)) => {
                if let Some(n) = next.filter(|n| b.base_offset() > *n) {
                    println!("offsets {n}..={}: removed by the log cleaner", b.base_offset() - 1);
                }
                next = Some(b.last_offset() + 1);
                let marker = b.control_marker().ok().flatten();
                println!(
                    "position {pos} offsets {}..={} count {} size {size} crc {:#010x} compression {:?} \
                     producer {} epoch {} sequence {} transactional {} control {}{} max_timestamp {}",
                    b.base_offset(),
                    b.last_offset(),
                    b.records_count(),
                    b.crc(),
                    b.compression().map(|c| format!("{c:?}")).unwrap_or_else(|e| e.to_string()),
                    b.producer_id(),
                    b.producer_epoch(),
                    b.base_sequence(),
                    b.is_transactional(),
                    b.is_control(),
                    marker
                        .map(|m| format!(" marker {:?} coordinator_epoch {}", m.kind, m.coordinator_epoch))
                        .unwrap_or_default(),
                    b.max_timestamp(),
                );
                if records && !b.is_control() {
                    match b.records() {
                        Ok(rs) => {
                            for r in rs {
                                let show = |v: &Option<bytes::Bytes>| match v {
                                    None => "null".to_string(),
                                    Some(b) => String::from_utf8_lossy(b).into_owned(),
                                };
                                let headers: Vec<String> =
                                    r.headers.iter().map(|h| format!("{}={}", h.key, show(&h.value))).collect();
                                println!(
                                    "  offset {} timestamp {} key {} value {} headers [{}]",
                                    r.offset,
                                    r.timestamp,
                                    show(&r.key),
                                    show(&r.value),
                                    headers.join(", ")
                                );
                            }
                        }
                        Err(e) => println!("  records undecodable: {e}"),
                    }
                }
                batches += 1;
                pos += size;
            }
            Err(e) => {
                let tail = bytes.len() - pos;
                println!("position {pos}: invalid batch ({e}); {tail} bytes from here are not valid batches");
                if tail < LOG_OVERHEAD_BYTES {
                    println!("(a torn tail: recovery cuts it)");
                }
                return Err(format!("{}: {batches} valid batches, then corruption at byte {pos}", path.display()));
            }
        }
    }
    println!("{batches} batches, {} bytes, all valid", bytes.len());
    Ok(())
}

fn print_summary(what: &str, s: &perf::Summary, output: Output) {
    match output {
        Output::Json => println!("{}", serde_json::to_string(s).unwrap_or_default()),
        Output::Table => println!(
            "{what}: {} records, {:.1} MiB in {:.2} s: {:.0} records/s, {:.1} MiB/s; request latency ms p50 {:.2} p99 {:.2} p99.9 {:.2} max {:.2}",
            s.records,
            s.bytes as f64 / 1048576.0,
            s.seconds,
            s.records_per_sec,
            s.mib_per_sec,
            s.latency_ms_p50,
            s.latency_ms_p99,
            s.latency_ms_p999,
            s.latency_ms_max
        ),
    }
    if let (Output::Table, false) = (output, s.latency_histogram.iter().all(|(_, n)| *n == 0)) {
        let total: u64 = s.latency_histogram.iter().map(|(_, n)| n).sum();
        println!("{what}: request latency histogram (ms):");
        for (bound, n) in s.latency_histogram.iter().filter(|(_, n)| *n > 0) {
            let bar = "#".repeat(((*n * 50) / total.max(1)) as usize);
            println!("  {bound:>6} {n:>9}  {bar}");
        }
    }
    if let (Output::Table, Some(n), Some(p50), Some(p99)) = (output, s.commits, s.commit_ms_p50, s.commit_ms_p99) {
        println!("{what}: {n} transactions committed; commit latency ms p50 {p50:.2} p99 {p99:.2}");
    }
}

fn run_perf(bootstrap: &str, cmd: PerfCmd, output: Output) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    rt.block_on(async {
        match cmd {
            PerfCmd::Produce(a) => perf::produce(bootstrap, &a).await.map(|s| print_summary("produce", &s, output)),
            PerfCmd::Consume(a) => perf::consume(bootstrap, &a).await.map(|s| print_summary("consume", &s, output)),
            PerfCmd::Txn(a) => perf::produce_txn(bootstrap, &a).await.map(|s| print_summary("txn", &s, output)),
        }
    })
    .map_err(|e| format!("{e:#}"))
}

fn run_admin(
    output: Output,
    f: impl std::future::Future<Output = anyhow::Result<(serde_json::Value, String)>>,
) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    let (j, table) = rt.block_on(f).map_err(|e| format!("{e:#}"))?;
    match output {
        Output::Json => println!("{j}"),
        Output::Table => println!("{table}"),
    }
    Ok(())
}

/// `<log_dirs>/<topic>-<n>` for every partition n, in partition order.
fn topic_dirs(log_dirs: &Path, topic: &str) -> Result<Vec<PathBuf>, String> {
    let entries = std::fs::read_dir(log_dirs).map_err(|e| format!("cannot read {}: {e}", log_dirs.display()))?;
    let mut dirs: Vec<(i32, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let n: i32 = name.strip_prefix(topic)?.strip_prefix('-')?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    if dirs.is_empty() {
        return Err(format!("no partition of topic '{topic}' under {}", log_dirs.display()));
    }
    dirs.sort();
    Ok(dirs.into_iter().map(|(_, p)| p).collect())
}

fn run_verify(dirs: &[PathBuf], output: Output) -> Result<(), String> {
    let mut findings = 0;
    for dir in dirs {
        findings += verify_one(dir, output)?;
    }
    if findings == 0 {
        Ok(())
    } else {
        Err(format!("{findings} finding(s)"))
    }
}

fn verify_one(dir: &Path, output: Output) -> Result<usize, String> {
    let r = verify::verify(dir).map_err(|e| format!("{e:#}"))?;
    match output {
        Output::Json => println!("{}", serde_json::to_string(&r).unwrap_or_default()),
        Output::Table => {
            println!(
                "{}: {} segments, {} batches, {} records, {} producers, {} committed and {} aborted transactions",
                dir.display(),
                r.segments,
                r.batches,
                r.records,
                r.producers,
                r.transactions_committed,
                r.transactions_aborted
            );
            for f in &r.findings {
                println!("FINDING: {f}");
            }
            if r.findings.is_empty() {
                println!("no findings");
            }
        }
    }
    Ok(r.findings.len())
}

fn run_console(f: impl std::future::Future<Output = anyhow::Result<()>>) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    rt.block_on(f).map_err(|e| format!("{e:#}"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = security::load_command_config(cli.command_config.as_deref()) {
        eprintln!("sluicectl: {e:#}");
        return ExitCode::from(2);
    }
    let result = match cli.cmd {
        Cmd::Users { cmd } => run_admin(cli.output, security::users(&cli.bootstrap_server, cmd)),
        Cmd::Acls { cmd } => run_admin(cli.output, security::acls(&cli.bootstrap_server, cmd)),
        Cmd::Topics { cmd } => run_admin(cli.output, admin::topics(&cli.bootstrap_server, cmd)),
        Cmd::Transactions { cmd } => run_admin(cli.output, transactions::run(&cli.bootstrap_server, cmd)),
        Cmd::Groups { cmd } => run_admin(cli.output, groups::run(&cli.bootstrap_server, cmd)),
        Cmd::Cluster { cmd: ClusterCmd::Describe } => run_admin(cli.output, admin::cluster(&cli.bootstrap_server)),
        Cmd::Cluster { cmd: ClusterCmd::Reassign { topic, partition, replicas } } => {
            run_admin(cli.output, admin::reassign(&cli.bootstrap_server, &topic, partition, &replicas))
        }
        Cmd::Cluster { cmd: ClusterCmd::RemoveBroker { id } } => {
            run_admin(cli.output, admin::remove_broker(&cli.bootstrap_server, id))
        }
        Cmd::Cluster { cmd: ClusterCmd::Reassignments } => {
            run_admin(cli.output, admin::reassignments(&cli.bootstrap_server))
        }
        Cmd::Cluster { cmd: ClusterCmd::ElectLeaders { topic, partition } } => {
            run_admin(cli.output, admin::elect_leaders(&cli.bootstrap_server, topic.as_deref(), partition))
        }
        Cmd::LogDirs { cmd: LogDirsCmd::Describe } => run_admin(cli.output, admin::log_dirs(&cli.bootstrap_server)),
        Cmd::Verify { partition_dir, topic, log_dirs } => match (partition_dir, topic) {
            (Some(dir), _) => run_verify(&[dir], cli.output),
            (None, Some(t)) => topic_dirs(&log_dirs, &t).and_then(|dirs| run_verify(&dirs, cli.output)),
            (None, None) => Err("give a partition directory or --topic".into()),
        },
        Cmd::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "sluicectl", &mut std::io::stdout());
            Ok(())
        }
        Cmd::Produce(a) => run_console(async {
            console::produce(&cli.bootstrap_server, &a).await.map(|n| eprintln!("produced {n} records"))
        }),
        Cmd::Consume(a) => run_console(async {
            console::consume(&cli.bootstrap_server, &a, matches!(cli.output, Output::Json))
                .await
                .map(|n| eprintln!("consumed {n} records"))
        }),
        Cmd::Log { cmd: LogCmd::Dump { path, records } } => dump_any(&path, records),
        Cmd::Perf { cmd } => run_perf(&cli.bootstrap_server, cmd, cli.output),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluicectl: {e}");
            ExitCode::from(1)
        }
    }
}
