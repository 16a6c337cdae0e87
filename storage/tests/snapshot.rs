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

/// One log per replica: the log holds entries past the commit point, and a snapshot of it
/// (`link_snapshot_upto`) is the log below that point only — the segment holding it sent up to
/// its batch there, the later segments not at all. A log rebuilt from it holds exactly that.
#[test]
fn a_snapshot_up_to_an_offset_leaves_out_everything_past_it() {
    let root = tempfile::tempdir().unwrap();
    let (src, links, staged, dst) =
        (root.path().join("src"), root.path().join("links"), root.path().join("staged"), root.path().join("t-0"));
    let mut log = Log::open(&src, small_config()).unwrap();
    fill(&mut log, 0, 40);
    let bases = log.segment_bases();
    assert!(bases.len() > 3, "several segments");
    let all = read_all(&log, 0);
    // a batch boundary inside the second-to-last segment
    let upto = all.iter().map(|(b, _)| *b).find(|b| *b > bases[bases.len() - 2]).unwrap();
    let snap = log.link_snapshot_upto(&links, Some(upto)).unwrap();
    assert_eq!(snap.log_end, upto);
    assert!(!snap.files.iter().any(|(n, _)| n.starts_with(&format!("{:020}", bases[bases.len() - 1]))));
    stage(&links, &snap.files, &staged);
    finish_staging(&staged, snap.log_start).unwrap();
    swap_in(&dst, &staged).unwrap();
    let got = Log::open(&dst, small_config()).unwrap();
    assert_eq!((got.log_start_offset(), got.log_end_offset()), (0, upto));
    let want: Vec<_> = all.into_iter().filter(|(b, _)| *b < upto).collect();
    assert!(read_all(&got, 0) == want, "the batches below the offset, nothing more");
}

/// A retention floor keeps the segments holding offsets at or above it, whatever retention and
/// DeleteRecords say; a read of what they hold below the log start still works there.
#[test]
fn a_retention_floor_keeps_segments_for_reads_below_the_log_start() {
    let root = tempfile::tempdir().unwrap();
    let mut log = Log::open(&root.path().join("t-0"), small_config()).unwrap();
    fill(&mut log, 0, 40);
    log.set_high_watermark(i64::MAX);
    let bases = log.segment_bases();
    let floor = bases[2] + 1;
    log.set_retention_floor(floor);
    log.delete_records(log.log_end_offset()).unwrap();
    assert_eq!(log.segment_bases()[0], bases[2], "the segment holding the floor and the later ones stay");
    let b = log.read_retained(floor, 1).unwrap();
    let (_, v) = sluice_protocol::batch::iter_batches(&b).next().unwrap().unwrap();
    assert!(v.base_offset() <= floor && floor <= v.last_offset());
    assert!(log.read(floor, 1, None, true).is_err(), "below the log start for consumers");
    log.set_retention_floor(i64::MAX);
    log.enforce_retention(0).unwrap();
    assert_eq!(log.segment_count(), 1, "the floor lifted, retention deletes them");
}
