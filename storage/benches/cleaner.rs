//! Log-cleaner throughput (issue 20), beside a baseline measured in the same run: a compacted
//! log of keyed records (random 100-byte values, batches of 100 records, 16 MiB segments) is
//! written — once with 10,000 keys (nearly every record superseded) and once with a key space
//! 0.9 times the record count (most records kept, most batches rewritten) — then
//! - baseline: every segment file read and written again to a new file, fsynced (the least a
//!   cleaner that rewrites segments must do);
//! - cleaner: one full pass (`prepare_clean`, `clean`, `install_clean`) over the same log: map
//!   the keys, rewrite the segments with one record per key, swap them in.
//!
//! Both read from the page cache (the log was just written) and fsync what they write. Prints
//! MiB/s of input segments and the ratio. Run:
//! `cargo bench -p sluice-storage --bench cleaner -- [MiB]` (default 256; also a codec: `lz4`).
#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use rand::{RngCore, SeedableRng};
use sluice_protocol::batch::{BatchBuilder, Compression, NewRecord};
use sluice_storage::cleaner::{self, CleanOptions};
use sluice_storage::{Log, LogConfig};
use std::collections::HashMap;
use std::io::Write;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let mib: u64 = args.iter().find_map(|a| a.parse().ok()).unwrap_or(256);
    let codec = if args.iter().any(|a| a == "lz4") { Compression::Lz4 } else { Compression::None };
    println!(
        "{mib} MiB of 100-byte random values in 16 MiB segments ({codec:?}); {} cores",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    // records per MiB, about: 100 records per ~13 KiB batch
    let records = mib * 8_000;
    for (label, keys) in [("10,000 keys", 10_000), ("mostly unique keys", records * 9 / 10)] {
        run(label, mib, codec, keys);
    }
}

fn run(label: &str, mib: u64, codec: Compression, keys: u64) {
    let dir = tempfile::tempdir_in(std::env::var("BENCH_DIR").unwrap_or_else(|_| ".".into())).unwrap();
    let config = LogConfig {
        segment_bytes: 16 << 20,
        retention_ms: -1,
        cleanup_compact: true,
        cleanup_delete: false,
        flush: sluice_storage::FlushPolicy::Interval { interval_ms: 1000 },
        ..LogConfig::default()
    };
    let mut log = Log::open(&dir.path().join("log"), config).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut n = 0u64;
    while log.size_bytes() < mib << 20 {
        let records: Vec<NewRecord> = (0..100)
            .map(|_| {
                let mut v = vec![0u8; 100];
                rng.fill_bytes(&mut v);
                n += 1;
                NewRecord {
                    timestamp: 1_000,
                    key: Some(Bytes::from(format!("key-{}", (n * 7919) % keys))),
                    value: Some(Bytes::from(v)),
                    headers: vec![],
                }
            })
            .collect();
        let mut b = BatchBuilder { compression: codec, ..Default::default() }.build(&records).unwrap().to_vec();
        log.append(&mut b, 1_000, None).unwrap();
    }
    log.roll().unwrap();
    log.flush().unwrap();
    log.set_high_watermark(log.log_end_offset());
    let input: u64 = log.size_bytes();

    // baseline: read every segment and write it again, fsynced
    let copy_dir = dir.path().join("copy");
    std::fs::create_dir_all(&copy_dir).unwrap();
    let t0 = Instant::now();
    for entry in std::fs::read_dir(dir.path().join("log")).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "log") {
            let bytes = std::fs::read(&p).unwrap();
            let mut f = std::fs::File::create(copy_dir.join(p.file_name().unwrap())).unwrap();
            f.write_all(&bytes).unwrap();
            f.sync_all().unwrap();
        }
    }
    let base_s = t0.elapsed().as_secs_f64();

    // the cleaner: one pass over everything
    let opts = CleanOptions {
        now_ms: 10_000,
        delete_retention_ms: 86_400_000,
        min_compaction_lag_ms: 0,
        upper: log.log_end_offset(),
        map_capacity: (128 << 20) / cleaner::MAP_ENTRY_BYTES,
        keep_last: HashMap::new(),
        io_bytes_per_second: None,
    };
    let t0 = Instant::now();
    let mut job = log.prepare_clean(&opts).unwrap().unwrap();
    let cleaned = cleaner::clean(&mut job, &opts).unwrap();
    let stats = cleaned.stats.clone();
    assert!(log.install_clean(cleaned).unwrap());
    let clean_s = t0.elapsed().as_secs_f64();
    let mibs = |s: f64| input as f64 / (1 << 20) as f64 / s;
    println!(
        "{label}: {} records in, {} kept, {:.1} of {:.1} MiB written",
        stats.records_read,
        stats.records_kept,
        stats.bytes_written as f64 / (1 << 20) as f64,
        input as f64 / (1 << 20) as f64
    );
    println!("  read + rewrite + fsync (baseline): {:8.1} MiB/s  ({base_s:.2} s)", mibs(base_s));
    println!("  cleaner pass:                      {:8.1} MiB/s  ({clean_s:.2} s)", mibs(clean_s));
    println!("  ratio cleaner / baseline: {:.2}", base_s / clean_s);
}
