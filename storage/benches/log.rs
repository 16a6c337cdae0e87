//! Storage benchmarks, each printed next to a baseline measured in the same run:
//! - append (1 KiB and 64 KiB batches) under the Sync policy (fdatasync per append, as a lone
//!   producer sees it) vs the same bytes written to a plain file with fdatasync after each write;
//! - append under the Interval policy (a background flush every 100 ms) vs a plain file with
//!   the same background fdatasync cadence;
//! - sequential read through the log (zero-copy slices, CRC32C over every byte so the data is
//!   really touched) vs `pread` of the same file plus the same CRC;
//! - recovery: a full scan of an uncleanly closed log vs reading the bytes and CRC-ing them.
//!
//! Payloads are random (zero-filled data flatters this disk). Run:
//! `cargo bench -p sluice-storage --bench log` (add `-- --quick` for a short run).
#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rand::{Rng, RngCore, SeedableRng};
use sluice_protocol::batch::{BatchBuilder, NewRecord};
use sluice_storage::{FlushPolicy, Log, LogConfig};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Totals per (group, function): bytes and time, to print throughput ratios after each group.
static TOTALS: Mutex<BTreeMap<(String, String), (u64, Duration)>> = Mutex::new(BTreeMap::new());

fn record(group: &str, func: &str, bytes: u64, t: Duration) {
    let mut m = TOTALS.lock().unwrap();
    let e = m.entry((group.to_string(), func.to_string())).or_insert((0, Duration::ZERO));
    e.0 += bytes;
    e.1 += t;
}

fn mib_s(bytes: u64, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64() / (1024.0 * 1024.0)
}

fn print_ratio(group: &str, sluice: &str, baseline: &str) {
    let m = TOTALS.lock().unwrap();
    if let (Some(s), Some(b)) = (m.get(&(group.into(), sluice.into())), m.get(&(group.into(), baseline.into()))) {
        let (s, b) = (mib_s(s.0, s.1), mib_s(b.0, b.1));
        println!("RATIO {group}: sluice {sluice} {s:.1} MiB/s vs baseline {baseline} {b:.1} MiB/s = {:.2}x", s / b);
    }
}

/// One batch of about `bytes` bytes of random values (1 KiB records, or one record if smaller).
fn random_batch(bytes: usize, rng: &mut impl RngCore) -> Vec<u8> {
    let record_bytes = bytes.min(1024);
    let n = (bytes / record_bytes).max(1);
    let recs: Vec<NewRecord> = (0..n)
        .map(|i| {
            let mut v = vec![0u8; record_bytes.saturating_sub(80)];
            rng.fill_bytes(&mut v);
            NewRecord {
                timestamp: 1_700_000_000_000 + i as i64,
                key: None,
                value: Some(Bytes::from(v)),
                headers: vec![],
            }
        })
        .collect();
    BatchBuilder::default().build(&recs).unwrap().to_vec()
}

fn open_log(dir: &std::path::Path, flush: FlushPolicy) -> Log {
    Log::open(dir, LogConfig { flush, retention_ms: -1, ..LogConfig::default() }).unwrap()
}

/// Background fsync every `every`, stopped on drop.
struct Ticker {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}
impl Ticker {
    fn start(every: Duration, f: impl Fn() + Send + 'static) -> Ticker {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                std::thread::sleep(every);
                f();
            }
        });
        Ticker { stop, handle: Some(handle) }
    }
}
impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.join().unwrap();
        }
    }
}

fn append_benches(c: &mut Criterion) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    for (policy_name, interval) in [("sync", None), ("interval", Some(Duration::from_millis(100)))] {
        let group_name = format!("append_{policy_name}");
        let mut group = c.benchmark_group(&group_name);
        group.sample_size(10);
        for size in [1024usize, 64 * 1024] {
            let batch = random_batch(size, &mut rng);
            group.throughput(Throughput::Bytes(batch.len() as u64));
            // One file / one log per benchmark function, kept across samples: the figure is
            // steady-state appending, not file creation and deletion.
            let raw_id = format!("raw_file/{size}");
            {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("raw");
                let mut f = OpenOptions::new().create(true).write(true).truncate(true).open(&path).unwrap();
                let sync_f = Arc::new(f.try_clone().unwrap());
                let _ticker = interval.map(|every| {
                    let sf = sync_f.clone();
                    Ticker::start(every, move || sf.sync_data().unwrap())
                });
                group.bench_with_input(BenchmarkId::new("raw_file", size), &batch, |b, batch| {
                    b.iter_custom(|iters| {
                        let t = Instant::now();
                        for _ in 0..iters {
                            f.write_all(batch).unwrap();
                            if interval.is_none() {
                                f.sync_data().unwrap();
                            }
                        }
                        let el = t.elapsed();
                        record(&group_name, &raw_id, iters * batch.len() as u64, el);
                        el
                    })
                });
            }
            let sl_id = format!("sluice_log/{size}");
            {
                let dir = tempfile::tempdir().unwrap();
                let policy = match interval {
                    None => FlushPolicy::Sync,
                    Some(d) => FlushPolicy::Interval { interval_ms: d.as_millis() as u64 },
                };
                let mut log = open_log(&dir.path().join("p"), policy);
                let flusher = log.flusher();
                let _ticker = interval.map(|every| {
                    let fl = flusher.clone();
                    Ticker::start(every, move || {
                        fl.sync_to(fl.written_end()).unwrap();
                    })
                });
                let mut buf = batch.clone();
                group.bench_with_input(BenchmarkId::new("sluice_log", size), &batch, |b, _| {
                    b.iter_custom(|iters| {
                        let t = Instant::now();
                        for _ in 0..iters {
                            let info = log.append(&mut buf, 1_700_000_000_000, None).unwrap();
                            if interval.is_none() {
                                flusher.sync_to(info.last_offset + 1).unwrap();
                            }
                        }
                        let el = t.elapsed();
                        record(&group_name, &sl_id, iters * batch.len() as u64, el);
                        el
                    })
                });
            }
        }
        group.finish();
        for size in [1024usize, 64 * 1024] {
            print_ratio(&group_name, &format!("sluice_log/{size}"), &format!("raw_file/{size}"));
        }
    }
}

/// Fill a log with about `total` bytes of 64 KiB batches; returns its dir and the .log files.
fn filled_log(total: usize) -> (tempfile::TempDir, std::path::PathBuf) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(2);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p");
    let mut log =
        Log::open(&path, LogConfig { segment_bytes: 256 * 1024 * 1024, retention_ms: -1, ..LogConfig::default() })
            .unwrap();
    let batches: Vec<Vec<u8>> = (0..16).map(|_| random_batch(64 * 1024, &mut rng)).collect();
    let mut written = 0;
    while written < total {
        let mut b = batches[rng.gen_range(0..batches.len())].clone();
        written += log.append(&mut b, 1_700_000_000_000, None).unwrap().bytes;
    }
    log.flush().unwrap();
    drop(log); // unclean: no marker
    (dir, path)
}

fn log_files(path: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(path)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    v.sort();
    v
}

fn raw_read_crc(files: &[std::path::PathBuf]) -> u64 {
    let mut buf = vec![0u8; 1024 * 1024];
    let mut total = 0u64;
    let mut crc = 0u32;
    for p in files {
        let f = File::open(p).unwrap();
        let mut pos = 0u64;
        loop {
            let n = f.read_at(&mut buf, pos).unwrap();
            if n == 0 {
                break;
            }
            crc = crc32c::crc32c_append(crc, &buf[..n]);
            pos += n as u64;
        }
        total += pos;
    }
    std::hint::black_box(crc);
    total
}

fn read_and_recovery_benches(c: &mut Criterion) {
    let total = if std::env::args().any(|a| a == "--quick") { 256 << 20 } else { 1 << 30 };
    let (_dir, path) = filled_log(total);
    let files = log_files(&path);
    let bytes: u64 = files.iter().map(|p| std::fs::metadata(p).unwrap().len()).sum();

    let mut group = c.benchmark_group("read");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(bytes));
    group.bench_function("raw_pread_crc", |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                raw_read_crc(&files);
            }
            let el = t.elapsed();
            record("read", "raw_pread_crc", iters * bytes, el);
            el
        })
    });
    let log = Log::open(&path, LogConfig::default()).unwrap();
    group.bench_function("sluice_read_crc", |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                let mut off = 0;
                let mut crc = 0u32;
                let mut n = 0u64;
                loop {
                    let chunk = log.read(off, 1024 * 1024, None, true).unwrap();
                    if chunk.is_empty() {
                        break;
                    }
                    crc = crc32c::crc32c_append(crc, &chunk);
                    n += chunk.len() as u64;
                    let last = sluice_protocol::batch::iter_batches(&chunk).last().unwrap().unwrap().1.last_offset();
                    off = last + 1;
                }
                assert_eq!(n, bytes);
                std::hint::black_box(crc);
            }
            let el = t.elapsed();
            record("read", "sluice_read_crc", iters * bytes, el);
            el
        })
    });
    group.finish();
    drop(log);
    print_ratio("read", "sluice_read_crc", "raw_pread_crc");

    let mut group = c.benchmark_group("recovery");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(bytes));
    group.bench_function("raw_pread_crc", |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                raw_read_crc(&files);
            }
            let el = t.elapsed();
            record("recovery", "raw_pread_crc", iters * bytes, el);
            el
        })
    });
    group.bench_function("sluice_full_scan", |b| {
        b.iter_custom(|iters| {
            let mut el = Duration::ZERO;
            for _ in 0..iters {
                // force a full scan: no clean marker, no checkpoint
                let _ = std::fs::remove_file(path.join("partition.checkpoint"));
                let _ = std::fs::remove_file(path.join(".clean_shutdown"));
                let t = Instant::now();
                let log = Log::open(&path, LogConfig::default()).unwrap();
                el += t.elapsed();
                assert_eq!(log.recovery_report().bytes_scanned, bytes);
                drop(log);
            }
            record("recovery", "sluice_full_scan", iters * bytes, el);
            el
        })
    });
    group.finish();
    print_ratio("recovery", "sluice_full_scan", "raw_pread_crc");
    let m = TOTALS.lock().unwrap();
    if let Some((b, t)) = m.get(&("recovery".to_string(), "sluice_full_scan".to_string())) {
        println!("RECOVERY speed: {:.2} GiB/s scanned", *b as f64 / t.as_secs_f64() / (1u64 << 30) as f64);
    }
}

/// Paired append comparison: rounds alternate between the plain file and the log (each keeps its
/// own growing file and background flusher), so both see the same kernel writeback conditions;
/// prints the median of the per-round ratios. Criterion runs one function after the other, and
/// for page-cache-speed writes the dirty-page state left by the previous function swings its
/// figures widely; this is the figure the storage docs use for the `interval` policy.
fn paired_append(_c: &mut Criterion) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let rounds = if std::env::args().any(|a| a == "--quick") { 7 } else { 15 };
    for (policy_name, interval) in [("interval", Some(Duration::from_millis(100))), ("sync", None)] {
        for size in [1024usize, 64 * 1024] {
            let batch = random_batch(size, &mut rng);
            let round_bytes: usize = match (interval, size) {
                (Some(_), _) => 256 << 20,
                (None, 1024) => 1 << 20,
                (None, _) => 48 << 20,
            };
            let per_round = (round_bytes / batch.len()).max(1);
            let dir = tempfile::tempdir().unwrap();
            let mut f =
                OpenOptions::new().create(true).write(true).truncate(true).open(dir.path().join("raw")).unwrap();
            let sync_f = Arc::new(f.try_clone().unwrap());
            let policy = match interval {
                None => FlushPolicy::Sync,
                Some(d) => FlushPolicy::Interval { interval_ms: d.as_millis() as u64 },
            };
            let mut log = open_log(&dir.path().join("p"), policy);
            let flusher = log.flusher();
            let _tickers = interval.map(|every| {
                let sf = sync_f.clone();
                let fl = flusher.clone();
                (
                    Ticker::start(every, move || sf.sync_data().unwrap()),
                    Ticker::start(every, move || {
                        fl.sync_to(fl.written_end()).unwrap();
                    }),
                )
            });
            let mut buf = batch.clone();
            let mut ratios = Vec::new();
            for _ in 0..rounds {
                let t = Instant::now();
                for _ in 0..per_round {
                    f.write_all(&batch).unwrap();
                    if interval.is_none() {
                        f.sync_data().unwrap();
                    }
                }
                let raw = t.elapsed();
                let t = Instant::now();
                for _ in 0..per_round {
                    let info = log.append(&mut buf, 1_700_000_000_000, None).unwrap();
                    if interval.is_none() {
                        flusher.sync_to(info.last_offset + 1).unwrap();
                    }
                }
                let sl = t.elapsed();
                ratios.push(raw.as_secs_f64() / sl.as_secs_f64());
            }
            ratios.sort_by(|a, b| a.total_cmp(b));
            println!(
                "PAIRED RATIO append_{policy_name} {size}: median {:.2} (min {:.2}, max {:.2}, {rounds} alternating rounds of {} MiB)",
                ratios[ratios.len() / 2],
                ratios[0],
                ratios[ratios.len() - 1],
                round_bytes >> 20
            );
        }
    }
}

/// Issue 10's "Raft log vs partition log" question, measured: replicating a partition with a
/// Raft log separate from the partition log writes every batch twice. Per 16 KiB batch, on the
/// acks=all path (durable before the answer):
/// - `one_log`: the partition log is the Raft log (append + fdatasync) — design A;
/// - `two_logs_lazy`: the Raft log (framed copy, fdatasync) plus the partition log written
///   without fsync (it can be rebuilt from the Raft log) — design B at its cheapest;
/// - `two_logs_synced`: both fsynced — design B if the partition log must be durable on its own.
fn raft_log_choice(c: &mut Criterion) {
    let group_name = "raft_log_choice";
    let mut group = c.benchmark_group(group_name);
    group.sample_size(10);
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let size = 16 * 1024;
    let batch = random_batch(size, &mut rng);
    group.throughput(Throughput::Bytes(batch.len() as u64));
    for variant in ["one_log", "two_logs_lazy", "two_logs_synced"] {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open_log(&dir.path().join("p"), FlushPolicy::Sync);
        let flusher = log.flusher();
        let mut raft = OpenOptions::new().create(true).append(true).open(dir.path().join("raft.log")).unwrap();
        let mut buf = batch.clone();
        let id = format!("{variant}/{size}");
        group.bench_with_input(BenchmarkId::new(variant, size), &batch, |b, batch| {
            b.iter_custom(|iters| {
                let t = Instant::now();
                for i in 0..iters {
                    if variant != "one_log" {
                        // the Raft entry: index, term, length, then the batch
                        let mut header = [0u8; 20];
                        header[..8].copy_from_slice(&i.to_be_bytes());
                        header[16..].copy_from_slice(&(batch.len() as u32).to_be_bytes());
                        raft.write_all(&header).unwrap();
                        raft.write_all(batch).unwrap();
                        raft.sync_data().unwrap();
                    }
                    let info = log.append(&mut buf, 1_700_000_000_000, None).unwrap();
                    if variant != "two_logs_lazy" {
                        flusher.sync_to(info.last_offset + 1).unwrap();
                    }
                }
                let el = t.elapsed();
                record(group_name, &id, iters * batch.len() as u64, el);
                el
            })
        });
    }
    group.finish();
    for variant in ["two_logs_lazy", "two_logs_synced"] {
        print_ratio(group_name, &format!("{variant}/{size}"), &format!("one_log/{size}"));
    }
}

criterion_group!(benches, append_benches, paired_append, read_and_recovery_benches, raft_log_choice);
criterion_main!(benches);
