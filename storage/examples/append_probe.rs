//! Quick append probe (not a benchmark of record): `cargo run --release -p sluice-storage
//! --example append_probe -- SIZE COUNT sync|interval INDEX_INTERVAL`
#![allow(clippy::unwrap_used)]
use rand::RngCore;
use sluice_protocol::batch::{BatchBuilder, NewRecord};
use sluice_storage::{FlushPolicy, Log, LogConfig};
use std::io::Write;
use std::time::Instant;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let size: usize = a.get(1).map(|s| s.parse().unwrap()).unwrap_or(65536);
    let count: usize = a.get(2).map(|s| s.parse().unwrap()).unwrap_or(2000);
    let sync = a.get(3).map(|s| s == "sync").unwrap_or(true);
    let interval: u64 = a.get(4).map(|s| s.parse().unwrap()).unwrap_or(4096);
    let mut v = vec![0u8; size - 100];
    rand::thread_rng().fill_bytes(&mut v);
    let batch = BatchBuilder::default()
        .build(&[NewRecord { timestamp: 1, key: None, value: Some(v.into()), headers: vec![] }])
        .unwrap()
        .to_vec();
    let dir = tempfile::tempdir_in(".").unwrap();
    let mut f = std::fs::File::create(dir.path().join("raw")).unwrap();
    let rf = std::sync::Arc::new(f.try_clone().unwrap());
    let rstop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (rf2, rstop2) = (rf.clone(), rstop.clone());
    let rticker = std::thread::spawn(move || {
        while !rstop2.load(std::sync::atomic::Ordering::Relaxed) {
            std::thread::sleep(std::time::Duration::from_millis(100));
            rf2.sync_data().unwrap();
        }
    });
    let t = Instant::now();
    for _ in 0..count {
        f.write_all(&batch).unwrap();
        if sync {
            f.sync_data().unwrap();
        }
    }
    let raw = t.elapsed();
    rstop.store(true, std::sync::atomic::Ordering::Relaxed);
    rticker.join().unwrap();
    drop(f);
    std::fs::remove_file(dir.path().join("raw")).unwrap();
    let policy = if sync { FlushPolicy::Sync } else { FlushPolicy::Interval { interval_ms: 1000 } };
    let mut log = Log::open(
        &dir.path().join("p"),
        LogConfig {
            flush: policy,
            index_interval_bytes: interval,
            segment_bytes: std::env::var("SEGMENT_BYTES").ok().and_then(|v| v.parse().ok()).unwrap_or(1 << 30),
            ..Default::default()
        },
    )
    .unwrap();
    let fl = log.flusher();
    let ticker_fl = fl.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let ticker = std::thread::spawn(move || {
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            std::thread::sleep(std::time::Duration::from_millis(100));
            ticker_fl.sync_to(ticker_fl.written_end()).unwrap();
        }
    });
    let mut buf = batch.clone();
    let t = Instant::now();
    for _ in 0..count {
        let info = log.append(&mut buf, 1, None).unwrap();
        if sync {
            fl.sync_to(info.last_offset + 1).unwrap();
        }
    }
    let sl = t.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    ticker.join().unwrap();
    eprintln!("fsyncs {} segments {}", fl.fsync_count(), log.segment_count());
    let mb = (count * batch.len()) as f64 / 1048576.0;
    println!(
        "size {size} sync {sync}: raw {:.1} MiB/s, sluice {:.1} MiB/s, ratio {:.2}",
        mb / raw.as_secs_f64(),
        mb / sl.as_secs_f64(),
        raw.as_secs_f64() / sl.as_secs_f64()
    );
}
