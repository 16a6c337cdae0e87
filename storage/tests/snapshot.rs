//! A partition snapshot is its linked files: a log rebuilt from them (as a replica installs a
//! snapshot) holds exactly the snapshot's batches, its log start and its end, and appends made
//! after the snapshot are not in it. A swap interrupted by a crash is finished or undone on open.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use sluice_storage::snapshot::{finish_staging, swap_in};
use sluice_storage::Log;
use std::fs;
use std::path::Path;

fn fill(log: &mut Log, from: usize, n: usize) {
    for i in from..from + n {
        let mut b = make_batch(1 + i % 3, 60, i as u64, 1000 + i as i64);
        log.append_durable(&mut b, 1000 + i as i64).unwrap();
    }
}

/// Copy the snapshot's files, each cut to its recorded length (what the stream sends).
fn stage(from: &Path, files: &[(String, u64)], to: &Path) {
    fs::create_dir_all(to).unwrap();
    for (name, len) in files {
        let bytes = fs::read(from.join(name)).unwrap();
        fs::write(to.join(name), &bytes[..*len as usize]).unwrap();
    }
}

#[test]
fn a_log_rebuilt_from_its_linked_snapshot_holds_exactly_the_snapshot() {
    let root = tempfile::tempdir().unwrap();
    let (src, links, staged, dst) =
        (root.path().join("src"), root.path().join("links"), root.path().join("staged"), root.path().join("t-0"));
    let mut log = Log::open(&src, small_config()).unwrap();
    fill(&mut log, 0, 40);
    log.set_high_watermark(i64::MAX);
    log.delete_records(7).unwrap();
    let snap = log.link_snapshot(&links).unwrap();
    assert!(log.segment_count() > 1, "several segments");
    assert_eq!(snap.log_start, 7);
    assert_eq!(snap.log_end, log.log_end_offset());
    let want = read_all(&log, 7);
    // written after the snapshot: into the active segment it shares with the links
    fill(&mut log, 40, 5);
    assert!(log.log_end_offset() > snap.log_end);

    // the receiving replica had a log of its own, now replaced
    let mut old = Log::open(&dst, small_config()).unwrap();
    fill(&mut old, 100, 3);
    stage(&links, &snap.files, &staged);
    finish_staging(&staged, snap.log_start).unwrap();
    swap_in(&dst, &staged).unwrap();
    drop(old);
    let got = Log::open(&dst, small_config()).unwrap();
    assert_eq!((got.log_start_offset(), got.log_end_offset()), (snap.log_start, snap.log_end));
    assert!(read_all(&got, snap.log_start) == want, "the snapshot's batches, nothing more");
    assert!(!root.path().join("t-0.installing").exists() && !root.path().join("t-0.replaced").exists());
}

#[test]
fn a_swap_cut_by_a_crash_is_finished_or_undone_on_open() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("t-0");
    let installing = root.path().join("t-0.installing");
    let replaced = root.path().join("t-0.replaced");
    let mut a = Log::open(&dir, small_config()).unwrap();
    fill(&mut a, 0, 4);
    let a_end = a.log_end_offset();
    drop(a);
    let mut b = Log::open(&root.path().join("b"), small_config()).unwrap();
    fill(&mut b, 0, 9);
    let b_end = b.log_end_offset();
    drop(b);

    // crashed after the partition's directory was renamed away: the new one takes its place
    fs::rename(&dir, &replaced).unwrap();
    fs::rename(root.path().join("b"), &installing).unwrap();
    let log = Log::open(&dir, small_config()).unwrap();
    assert_eq!(log.log_end_offset(), b_end);
    assert!(!installing.exists() && !replaced.exists());
    drop(log);

    // crashed while staging, before any rename of the partition's directory: it stays
    let mut c = Log::open(&installing, small_config()).unwrap();
    fill(&mut c, 0, 2);
    drop(c);
    let log = Log::open(&dir, small_config()).unwrap();
    assert_eq!(log.log_end_offset(), b_end);
    assert!(!installing.exists());
    assert_ne!(a_end, b_end);
}
