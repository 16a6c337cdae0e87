//! # sluicectl
//!
//! Sluice's admin CLI. What belongs here: admin commands over the wire (topics, groups,
//! transactions — coming with issue 8), offline tools over data files (`log dump` now, the
//! exactly-once `verify` later), and the load generator (`perf`).
//!
//! Exit codes: 0 success, 1 the operation failed, 2 bad usage.

use clap::{Parser, Subcommand};
use sluice_protocol::batch::{BatchView, LOG_OVERHEAD_BYTES};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "sluicectl", version, about = "Operate Sluice: admin, log inspection, verification, load")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Inspect data files offline.
    Log {
        #[command(subcommand)]
        cmd: LogCmd,
    },
}

#[derive(Subcommand)]
enum LogCmd {
    /// Decode a segment (.log) file: one line per batch (offsets, producer, sequence, flags).
    Dump {
        /// Path of a `.log` segment file.
        path: PathBuf,
        /// Also print every record (key, value, headers).
        #[arg(long)]
        records: bool,
    },
}

fn dump(path: &Path, records: bool) -> Result<(), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut pos = 0usize;
    let mut batches = 0u64;
    while pos < bytes.len() {
        match BatchView::parse(&bytes[pos..]) {
            Ok((b, size)) => {
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Log { cmd: LogCmd::Dump { path, records } } => dump(&path, records),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluicectl: {e}");
            ExitCode::from(1)
        }
    }
}
