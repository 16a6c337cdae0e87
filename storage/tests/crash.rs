//! Crash-recovery tests: cut the last segment at every byte position of its last batches, flip
//! random bytes, damage index files; reopen; the log must hold exactly the valid prefix and
//! accept appends after it. Plus: two processes on one directory, group commit, and appends of
//! shared bytes.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use rand::{Rng, SeedableRng};
use sluice_storage::segment::file_name;
use sluice_storage::{DirLock, FlushPolicy, Log, LogConfig, StorageError};
use std::fs;
use std::path::{Path, PathBuf};

/// Build a log of `n` batches and "crash" (drop without close). Returns the model.
fn build(path: &Path, n: usize) -> Vec<(i64, Vec<u8>)> {
    let mut log = Log::open(path, small_config()).unwrap();
    let mut model = Vec::new();
    for i in 0..n {
        let mut b = make_batch(1 + i % 3, 40 + (i * 37) % 200, i as u64, 1000 + i as i64);
        let info = log.append_durable(&mut b, 1000 + i as i64).unwrap();
        model.push((info.first_offset, b));
    }
    drop(log);
    model
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

fn last_segment(path: &Path) -> (i64, PathBuf) {
    let mut bases: Vec<i64> = fs::read_dir(path)
        .unwrap()
        .filter_map(|e| {
            let n = e.unwrap().file_name().to_string_lossy().into_owned();
            n.strip_suffix(".log").and_then(|s| s.parse().ok())
        })
        .collect();
    bases.sort();
    let b = *bases.last().unwrap();
    (b, path.join(file_name(b, "log")))
}

/// Reopen and check: the log equals `expect`, and one more append lands right after it and
/// survives another crash.
fn check_recovered(path: &Path, expect: &[(i64, Vec<u8>)]) {
    let mut log = Log::open(path, small_config()).unwrap();
    assert!(!log.recovery_report().clean);
    let got = read_all(&log, 0);
    assert_eq!(got.len(), expect.len(), "recovered batch count");
    assert!(got == expect, "recovered contents differ");
    let next = expect
        .last()
        .map(|(b, v)| b + sluice_protocol::batch::BatchView::parse(v).unwrap().0.last_offset_delta() as i64 + 1)
        .unwrap_or(0);
    assert_eq!(log.log_end_offset(), next);
    let mut b = make_batch(2, 10, 999, 5000);
    let info = log.append_durable(&mut b, 5000).unwrap();
    assert_eq!(info.first_offset, next);
    drop(log);
    let log = Log::open(path, small_config()).unwrap();
    let got = read_all(&log, 0);
    assert_eq!(got.len(), expect.len() + 1);
    assert_eq!(got.last().unwrap(), &(next, b));
}

#[test]
fn truncation_at_every_byte_of_the_last_batches() {
    let root = tempfile::tempdir().unwrap();
    let pristine = root.path().join("pristine");
    let model = build(&pristine, 24);
    let (seg_base, seg_path) = last_segment(&pristine);
    let seg_len = fs::metadata(&seg_path).unwrap().len();
    // batches of the last segment with their positions
    let mut pos = 0u64;
    let mut in_seg = Vec::new();
    for (base, bytes) in &model {
        if *base >= seg_base {
            in_seg.push((pos, *base, bytes.len() as u64));
            pos += bytes.len() as u64;
        }
    }
    assert_eq!(pos, seg_len);
    assert!(in_seg.len() >= 3, "need several batches in the last segment");
    let cut_from = in_seg[in_seg.len() - 3].0;
    let mut cases = 0;
    for cut in cut_from..seg_len {
        let dir = root.path().join(format!("cut-{cut}"));
        copy_dir(&pristine, &dir);
        let f = fs::OpenOptions::new().write(true).open(dir.join(file_name(seg_base, "log"))).unwrap();
        f.set_len(cut).unwrap();
        drop(f);
        let keep: Vec<_> = model
            .iter()
            .filter(|(b, _)| *b < seg_base || in_seg.iter().any(|(p, base, len)| base == b && p + len <= cut))
            .cloned()
            .collect();
        check_recovered(&dir, &keep);
        fs::remove_dir_all(&dir).unwrap();
        cases += 1;
    }
    assert!(cases > 100);
}

#[test]
fn random_byte_flips_in_the_last_segment() {
    let root = tempfile::tempdir().unwrap();
    let pristine = root.path().join("pristine");
    let model = build(&pristine, 24);
    let (seg_base, seg_path) = last_segment(&pristine);
    let seg_bytes = fs::read(&seg_path).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut pos = 0usize;
    let mut in_seg = Vec::new();
    for (base, bytes) in &model {
        if *base >= seg_base {
            in_seg.push((pos, *base, bytes.len()));
            pos += bytes.len();
        }
    }
    for i in 0..200 {
        let at = rng.gen_range(0..seg_bytes.len());
        let (bpos, _, _) = *in_seg.iter().find(|(p, _, l)| at >= *p && at < p + l).unwrap();
        // The partition leader epoch (bytes 12..16 of a batch) is outside the CRC by the v2
        // format's design, so a flip there cannot be detected; skip those bytes.
        if (12..16).contains(&(at - bpos)) {
            continue;
        }
        let dir = root.path().join(format!("flip-{i}"));
        copy_dir(&pristine, &dir);
        let mut bytes = seg_bytes.clone();
        bytes[at] ^= 1 << rng.gen_range(0..8);
        fs::write(dir.join(file_name(seg_base, "log")), &bytes).unwrap();
        let keep: Vec<_> = model
            .iter()
            .filter(|(b, _)| *b < seg_base || in_seg.iter().any(|(p, base, _)| base == b && *p < bpos))
            .cloned()
            .collect();
        check_recovered(&dir, &keep);
        fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn garbage_appended_after_the_last_batch_is_cut() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("p");
    let model = build(&dir, 10);
    let (_, seg_path) = last_segment(&dir);
    let mut bytes = fs::read(&seg_path).unwrap();
    bytes.extend_from_slice(&[0u8; 100]); // preallocated zeros after a crash
    bytes.extend_from_slice(&[0xff; 61]);
    fs::write(&seg_path, &bytes).unwrap();
    check_recovered(&dir, &model);
}

#[test]
fn damaged_or_missing_indexes_are_rebuilt() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("p");
    let mut log = Log::open(&dir, small_config()).unwrap();
    let mut model = Vec::new();
    for i in 0..40 {
        let mut b = make_batch(2, 100, i, 1000 + i as i64 * 10);
        let info = log.append_durable(&mut b, 1000).unwrap();
        model.push((info.first_offset, b));
    }
    let bases = log.segment_bases();
    assert!(bases.len() >= 3);
    log.close().unwrap();
    // delete one segment's offset index, scramble another's, truncate a time index
    fs::remove_file(dir.join(file_name(bases[0], "index"))).unwrap();
    let idx = dir.join(file_name(bases[1], "index"));
    let mut b = fs::read(&idx).unwrap();
    assert!(!b.is_empty());
    b.iter_mut().for_each(|x| *x = 0xAB);
    fs::write(&idx, &b).unwrap();
    fs::write(dir.join(file_name(bases[2], "timeindex")), [0xffu8; 12]).unwrap();
    let log = Log::open(&dir, small_config()).unwrap();
    assert!(log.recovery_report().clean);
    assert_eq!(read_all(&log, 0), model);
    for (off, bytes) in &model {
        let got = log.read(*off, 10, None, true).unwrap();
        assert_eq!(&got[..], &bytes[..]);
        let (v, _) = sluice_protocol::batch::BatchView::parse(bytes).unwrap();
        assert_eq!(log.offset_for_timestamp(v.base_timestamp()).unwrap(), Some((*off, v.base_timestamp())));
    }
}

#[test]
fn corrupt_checkpoint_means_full_scan_not_data_loss() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("p");
    let model = build(&dir, 30);
    fs::write(dir.join("partition.checkpoint"), b"garbage").unwrap();
    let log = Log::open(&dir, small_config()).unwrap();
    assert_eq!(log.recovery_report().scanned_from, Some(0));
    assert_eq!(read_all(&log, 0), model);
}

#[test]
fn clean_shutdown_skips_the_scan() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("p");
    build(&dir, 30);
    let log = Log::open(&dir, small_config()).unwrap();
    assert!(log.recovery_report().scanned_from.is_some());
    log.close().unwrap();
    let log = Log::open(&dir, small_config()).unwrap();
    let r = log.recovery_report();
    assert!(r.clean);
    assert_eq!(r.scanned_from, None);
    // the marker is consumed: a crash now means a scan again
    drop(log);
    let log = Log::open(&dir, small_config()).unwrap();
    assert!(!log.recovery_report().clean);
}

#[test]
fn bad_batches_are_refused_without_a_partial_write() {
    let root = tempfile::tempdir().unwrap();
    let mut log = Log::open(&root.path().join("p"), small_config()).unwrap();
    let good = make_batch(1, 10, 1, 1);
    let mut bad_crc = make_batch(1, 10, 2, 1);
    let last = bad_crc.len() - 1;
    bad_crc[last] ^= 1;
    let mut two = good.clone();
    two.extend_from_slice(&bad_crc);
    assert!(matches!(log.append(&mut two, 0, None), Err(StorageError::InvalidBatch { .. })));
    let mut truncated = good[..good.len() - 3].to_vec();
    assert!(matches!(log.append(&mut truncated, 0, None), Err(StorageError::InvalidBatch { .. })));
    let mut empty = vec![];
    assert!(log.append(&mut empty, 0, None).is_err());
    let mut big = make_batch(1, 5000, 3, 1);
    let mut cfg = small_config();
    cfg.max_message_bytes = 1000;
    log.set_config(cfg).unwrap();
    assert!(matches!(log.append(&mut big, 0, None), Err(StorageError::BatchTooLarge { .. })));
    assert_eq!(log.log_end_offset(), 0);
    assert_eq!(log.size_bytes(), 0);
    let mut g = good.clone();
    assert_eq!(log.append(&mut g, 0, None).unwrap().first_offset, 0);
}

/// `append_shared` (decision 0062): a batch that already carries the base offset and epoch it
/// is given (a replica's copy of its leader's) is stored as the bytes it came in, not a copy;
/// one that does not is stamped in a copy, the bytes it shares left as they were; a bad CRC is
/// refused either way, nothing written.
#[test]
fn shared_batches_are_stored_as_they_came_when_stamped_and_copied_when_not() {
    use sluice_protocol::batch::{set_base_offset, set_partition_leader_epoch, BatchView};
    let root = tempfile::tempdir().unwrap();
    // epochs given per append (Raft terms, as a replica's log has them), not one per log
    let config = LogConfig { leader_epoch: None, ..small_config() };
    let mut log = Log::open(&root.path().join("p"), config).unwrap();
    let mut stamped = make_batch(1, 10, 1, 1);
    set_base_offset(&mut stamped, 0);
    set_partition_leader_epoch(&mut stamped, 3);
    let frame = bytes::Bytes::from(stamped.clone());
    let mut came = frame.slice(..); // shared: any stamp would need a copy
    assert_eq!(log.append_shared(&mut came, 0, Some(3)).unwrap().first_offset, 0);
    assert_eq!(came.as_ptr(), frame.as_ptr(), "stored as it came");
    assert_eq!(&log.read_retained(0, 1).unwrap()[..], &stamped[..]);

    let original = make_batch(1, 10, 2, 1);
    let frame = bytes::Bytes::from(original.clone());
    let mut shared = frame.slice(..);
    assert_eq!(log.append_shared(&mut shared, 0, Some(3)).unwrap().first_offset, 1);
    assert_eq!(&frame[..], &original[..], "the shared bytes untouched");
    let view = BatchView::parse(&shared).unwrap().0;
    assert_eq!((view.base_offset(), view.partition_leader_epoch()), (1, 3));
    assert_eq!(&log.read_retained(1, 1).unwrap()[..], &shared[..]);

    let mut bad = make_batch(1, 10, 3, 1);
    set_base_offset(&mut bad, 2);
    set_partition_leader_epoch(&mut bad, 3);
    let last = bad.len() - 1;
    bad[last] ^= 1;
    let refused = log.append_shared(&mut bytes::Bytes::from(bad), 0, Some(3));
    assert!(matches!(refused, Err(StorageError::InvalidBatch { .. })), "{refused:?}");
    assert_eq!(log.log_end_offset(), 2);
}

#[test]
fn out_of_range_reads_are_errors() {
    let root = tempfile::tempdir().unwrap();
    let mut log = Log::open(&root.path().join("p"), small_config()).unwrap();
    let mut b = make_batch(3, 10, 1, 1);
    log.append(&mut b, 0, None).unwrap();
    assert!(matches!(log.read(4, 100, None, true), Err(StorageError::OffsetOutOfRange { .. })));
    assert!(log.read(3, 100, None, true).unwrap().is_empty());
    assert!(matches!(log.read(-1, 100, None, true), Err(StorageError::OffsetOutOfRange { .. })));
}

#[test]
fn group_commit_shares_fsyncs() {
    let root = tempfile::tempdir().unwrap();
    let log =
        Log::open(&root.path().join("p"), LogConfig { flush: FlushPolicy::Sync, ..LogConfig::default() }).unwrap();
    let flusher = log.flusher();
    let log = std::sync::Arc::new(std::sync::Mutex::new(log));
    let threads = 8;
    let per = 50;
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let log = log.clone();
            let flusher = flusher.clone();
            std::thread::spawn(move || {
                for i in 0..per {
                    let mut b = make_batch(1, 100, t * 1000 + i, 1);
                    let info = log.lock().unwrap().append(&mut b, 1, None).unwrap();
                    let durable = flusher.sync_to(info.last_offset + 1).unwrap();
                    assert!(durable > info.last_offset);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let appends = threads * per;
    let fsyncs = flusher.fsync_count();
    assert_eq!(flusher.durable_end(), appends as i64);
    assert!(fsyncs <= appends, "at most one fsync per append ({fsyncs})");
    eprintln!("{appends} appends from {threads} threads took {fsyncs} fsyncs");
}

#[test]
fn aborted_txn_index_and_snapshots_survive_reopen() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("p");
    let mut log = Log::open(&dir, small_config()).unwrap();
    for i in 0..5 {
        let mut b = make_batch(1, 10, i, 1);
        log.append(&mut b, 0, None).unwrap();
    }
    let t = sluice_storage::AbortedTxn { producer_id: 9, first_offset: 1, last_offset: 4, last_stable_offset: 1 };
    log.append_aborted_txn(t).unwrap();
    log.write_producer_snapshot(5, b"state").unwrap();
    assert_eq!(log.collect_aborted_txns(0, 2), vec![t]);
    assert!(log.collect_aborted_txns(0, 1).is_empty());
    assert!(log.collect_aborted_txns(5, 10).is_empty());
    log.flush().unwrap();
    drop(log);
    let log = Log::open(&dir, small_config()).unwrap();
    assert_eq!(log.collect_aborted_txns(0, 5), vec![t]);
    assert_eq!(log.latest_producer_snapshot().unwrap(), Some((5, b"state".to_vec())));
}

/// A log in `dir` (small segments) holding three one-record batches of producer 1, offsets 0..3.
fn log_of_three_batches(dir: &std::path::Path) -> Log {
    let mut log = Log::open(dir, small_config()).unwrap();
    for i in 0..3 {
        let mut b = make_batch(1, 10, i, 1);
        log.append(&mut b, 0, None).unwrap();
    }
    log
}

#[test]
fn snapshot_and_txn_entries_past_a_truncated_tail_are_dropped() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("p");
    let mut log = log_of_three_batches(&dir);
    log.append_aborted_txn(sluice_storage::AbortedTxn {
        producer_id: 1,
        first_offset: 0,
        last_offset: 2,
        last_stable_offset: 0,
    })
    .unwrap();
    log.write_producer_snapshot(3, b"s").unwrap();
    drop(log);
    // tear the last batch
    let (_, seg) = last_segment(&dir);
    let len = fs::metadata(&seg).unwrap().len();
    fs::OpenOptions::new().write(true).open(&seg).unwrap().set_len(len - 5).unwrap();
    let log = Log::open(&dir, small_config()).unwrap();
    assert_eq!(log.log_end_offset(), 2);
    assert!(log.collect_aborted_txns(0, 10).is_empty());
    assert_eq!(log.latest_producer_snapshot().unwrap(), None);
}

/// The aborted-transaction index is fsynced when its entry is added, before the log's marker
/// is: a power cut between the two leaves an entry whose marker is gone. Recovery drops it
/// also when the recovery point lies in the same segment (decision 0038's branch once kept
/// it: a read_committed consumer then skipped the next transaction at those offsets).
#[test]
fn a_txn_entry_whose_marker_was_lost_is_dropped_when_the_recovery_point_is_in_its_segment() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("p");
    let mut log = log_of_three_batches(&dir);
    log.flush().unwrap(); // the recovery point is 3
    drop(log);
    let (_, seg) = last_segment(&dir);
    let synced = fs::metadata(&seg).unwrap().len();
    let mut log = Log::open(&dir, small_config()).unwrap();
    let mut marker = make_batch(1, 10, 3, 1);
    log.append(&mut marker, 0, None).unwrap();
    let t = sluice_storage::AbortedTxn { producer_id: 1, first_offset: 0, last_offset: 3, last_stable_offset: 0 };
    log.append_aborted_txn(t).unwrap();
    assert_eq!(log.collect_aborted_txns(0, 10), vec![t]);
    drop(log);
    // the power cut takes the unsynced marker; the index entry was synced
    fs::OpenOptions::new().write(true).open(&seg).unwrap().set_len(synced).unwrap();
    let log = Log::open(&dir, small_config()).unwrap();
    assert_eq!(log.log_end_offset(), 3);
    assert!(!log.is_damaged(), "nothing below the recovery point is missing");
    assert!(log.collect_aborted_txns(0, 10).is_empty(), "an entry whose marker is gone");
}

/// Two processes on one directory: the second fails with a clear error. The child is this
/// test binary re-run with an environment variable.
#[test]
fn second_process_on_the_same_directory_fails() {
    if let Ok(dir) = std::env::var("SLUICE_TEST_LOCK_CHILD") {
        match DirLock::acquire(Path::new(&dir)) {
            Ok(_) => std::process::exit(0),
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(3);
            }
        }
    }
    let root = tempfile::tempdir().unwrap();
    let _held = DirLock::acquire(root.path()).unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["second_process_on_the_same_directory_fails", "--exact", "--nocapture"])
        .env("SLUICE_TEST_LOCK_CHILD", root.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "child should fail to lock");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("locked by another process"), "stderr: {stderr}");
    drop(_held);
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["second_process_on_the_same_directory_fails", "--exact"])
        .env("SLUICE_TEST_LOCK_CHILD", root.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "lock is free once released");
}

/// `segment.ms` is measured in record time (as in Kafka): old timestamps do not roll every
/// append, and a span of record time longer than `segment.ms` does roll.
#[test]
fn segment_ms_rolls_by_record_time() {
    let root = tempfile::tempdir().unwrap();
    let cfg = LogConfig { segment_ms: 1000, ..LogConfig::default() };
    let mut log = Log::open(&root.path().join("p"), cfg).unwrap();
    let now = 1_800_000_000_000;
    for i in 0..10 {
        let mut b = make_batch(1, 10, i, 1_000_000_000_000 + i as i64 * 10); // year 2001
        log.append(&mut b, now, None).unwrap();
    }
    assert_eq!(log.segment_count(), 1);
    let mut b = make_batch(1, 10, 99, 1_000_000_000_000 + 5000);
    log.append(&mut b, now, None).unwrap();
    assert_eq!(log.segment_count(), 2);
}

/// A segment that starts with a batch without a timestamp (a Raft control batch, when a
/// partition's Raft log is its segment log: decision 0045) still rolls in record time, from
/// its first batch that has one — before and after a reopen. (It rolled only by size: every
/// record of a compacted topic stayed in its active segment, out of the cleaner's reach.)
#[test]
fn a_segment_that_starts_without_a_timestamp_rolls_by_record_time_from_its_first_timestamped_batch() {
    use sluice_protocol::raft_control::RaftControl;
    let root = tempfile::tempdir().unwrap();
    let cfg = LogConfig { segment_ms: 1000, ..LogConfig::default() };
    let mut log = Log::open(&root.path().join("p"), cfg.clone()).unwrap();
    let now = 1_800_000_000_000;
    let t = 1_000_000_000_000;
    let mut leader = RaftControl::LeaderChange { leader: 1, voters: Vec::new() }.build(1, -1).unwrap().to_vec();
    log.append(&mut leader, now, Some(1)).unwrap();
    for i in 0..5 {
        let mut b = make_batch(1, 10, i, t + i as i64 * 100);
        log.append(&mut b, now, Some(1)).unwrap();
    }
    assert_eq!(log.segment_count(), 1, "400 ms of record time");
    drop(log);
    let mut log = Log::open(&root.path().join("p"), cfg).unwrap();
    let mut b = make_batch(1, 10, 9, t + 999);
    log.append(&mut b, now, Some(1)).unwrap();
    assert_eq!(log.segment_count(), 1, "999 ms after the first timestamped batch");
    let mut b = make_batch(1, 10, 10, t + 1000);
    log.append(&mut b, now, Some(1)).unwrap();
    assert_eq!(log.segment_count(), 2, "1000 ms after it");
}

/// `cleanup.policy=compact` (without `delete`): retention by time and size deletes nothing, as in
/// Kafka; DeleteRecords still moves the log start.
#[test]
fn a_compact_only_log_keeps_old_segments() {
    let root = tempfile::tempdir().unwrap();
    let cfg = LogConfig {
        segment_bytes: 500,
        retention_ms: 60_000,
        retention_bytes: 100,
        cleanup_delete: false,
        cleanup_compact: true,
        ..small_config()
    };
    let mut log = Log::open(&root.path().join("p"), cfg).unwrap();
    let now = 1_800_000_000_000i64;
    for i in 0..12 {
        let mut b = make_batch(1, 150, i, now - 7_200_000);
        log.append(&mut b, now, None).unwrap();
    }
    let leo = log.log_end_offset();
    log.set_high_watermark(leo);
    let before = log.segment_count();
    assert!(before >= 4, "{before} segments");
    assert_eq!(log.enforce_retention(now).unwrap(), 0);
    assert_eq!(log.segment_count(), before);
    assert_eq!(read_all(&log, 0).len(), 12);
    log.delete_records(5).unwrap();
    assert_eq!(log.log_start_offset(), 5);
}

/// `retention.ms` deletes whole segments whose newest record is older, never the active one and
/// never one reaching the high watermark.
#[test]
fn retention_ms_deletes_old_segments_only() {
    let root = tempfile::tempdir().unwrap();
    let cfg = LogConfig { segment_bytes: 500, retention_ms: 60_000, ..small_config() };
    let mut log = Log::open(&root.path().join("p"), cfg).unwrap();
    let now = 1_800_000_000_000i64;
    // old records (2 hours ago), then recent ones
    for i in 0..12 {
        let ts = if i < 8 { now - 7_200_000 } else { now - 1_000 };
        let mut b = make_batch(1, 150, i, ts);
        log.append(&mut b, now, None).unwrap();
    }
    let before = log.segment_count();
    assert!(before >= 4, "{before} segments");
    // nothing is deleted while the high watermark has not passed the segments
    assert_eq!(log.enforce_retention(now).unwrap(), 0);
    let leo = log.log_end_offset();
    log.set_high_watermark(leo);
    let deleted = log.enforce_retention(now).unwrap();
    assert!(deleted > 0);
    assert_eq!(log.segment_count(), before - deleted);
    // what is left starts at a segment holding a recent record, or is the active segment
    let start = log.log_start_offset();
    let left = read_all(&log, start);
    assert!(!left.is_empty());
    assert_eq!(left.last().unwrap().0, 11);
    assert!(left.iter().any(|(o, _)| *o >= 8), "recent records kept");
    assert!(read_all(&log, start).len() <= 12 - deleted);
    // reading below the new start is out of range
    assert!(log.read(0, 100, None, true).is_err());
}

/// A closed log of 30 batches in `dir`: the batches written, its first segment's bytes and
/// that segment's batch boundaries.
fn closed_log(dir: &Path) -> (Batches, Vec<u8>, Vec<usize>) {
    let model = build(dir, 30);
    Log::open(dir, small_config()).unwrap().close().unwrap();
    let bytes = fs::read(dir.join(file_name(0, "log"))).unwrap();
    let starts: Vec<usize> = sluice_protocol::batch::iter_batches(&bytes).map(|b| b.unwrap().0).collect();
    (model, bytes, starts)
}

/// Rot at rest: a bit flipped in a closed segment below the recovery point (a clean open scans
/// nothing) is never served. Every read up to the damaged batch works; the read that reaches it
/// fails with `Corrupt` naming the file and position, and the log is offline from then on
/// (reads and appends), so no later read can serve it either. Every byte of the first
/// segment's batches past the 12-byte base offset and length fields is tried.
#[test]
fn a_flipped_bit_in_a_closed_segment_is_never_served_and_takes_the_log_offline() {
    let root = tempfile::tempdir().unwrap();
    let pristine = root.path().join("pristine");
    let (model, bytes, starts) = closed_log(&pristine);
    let mut rng = rand::rngs::StdRng::seed_from_u64(36);
    for trial in 0..120 {
        let batch = rng.gen_range(0..starts.len());
        let end = starts.get(batch + 1).copied().unwrap_or(bytes.len());
        // past baseOffset (8) and batchLength (4); partitionLeaderEpoch (4) and magic (1)
        // are outside the CRC or checked by the parser: start at the CRC field
        let at = rng.gen_range(starts[batch] + 17..end);
        let dir = root.path().join(format!("t{trial}"));
        copy_dir(&pristine, &dir);
        let mut damaged = bytes.clone();
        damaged[at] ^= 1 << rng.gen_range(0..8);
        fs::write(dir.join(file_name(0, "log")), &damaged).unwrap();
        let mut log = Log::open(&dir, small_config()).unwrap();
        assert!(log.recovery_report().clean, "a clean open: nothing re-checked at open");
        let bad_offset = model[batch].0;
        // everything before the damaged batch reads fine, batch by batch
        for (base, want) in model.iter().take_while(|(b, _)| *b < bad_offset) {
            let got = log.read(*base, 1, None, true).unwrap();
            assert_eq!(&got[..], &want[..], "trial {trial}: batch at {base}");
        }
        // one large read from the start stops before the damaged batch, serving what is good
        let prefix: Vec<u8> =
            model.iter().take_while(|(b, _)| *b < bad_offset).flat_map(|(_, w)| w.iter().copied()).collect();
        if !prefix.is_empty() {
            let got = log.read(0, 1 << 20, None, true).unwrap();
            assert!(
                got.len() == prefix.len() && got[..] == prefix[..],
                "trial {trial}: {} bytes served, {} good",
                got.len(),
                prefix.len()
            );
            assert!(!log.is_offline(), "trial {trial}: the good prefix was served, nothing damaged yet");
        }
        match log.read(bad_offset, 1 << 20, None, true) {
            Err(StorageError::Corrupt { path, position, .. }) => {
                assert_eq!(path, dir.join(file_name(0, "log")));
                assert_eq!(position, starts[batch] as u64, "trial {trial}");
            }
            other => panic!("trial {trial}: flip at byte {at} of batch {batch}: {other:?}"),
        }
        assert!(log.is_offline());
        assert!(matches!(log.read(0, 1 << 20, None, true), Err(StorageError::Offline(_))));
        let mut b = make_batch(1, 10, 7, 9000);
        assert!(matches!(log.append(&mut b, 9000, None), Err(StorageError::Offline(_))));
    }
}

/// A Raft log kept in the partition log (decision 0045) goes on past known damage while the
/// damaged batch waits for its repair: the consumers' paths (`read`, `append`) refuse, but the
/// Raft store's reads of other batches, its appends at the end and its truncations proceed; the
/// damaged batch itself is never read (`Corrupt`), and a truncation that cuts it away leaves no
/// damage to find.
#[test]
fn a_raft_log_kept_in_the_log_goes_on_past_known_damage_but_never_reads_it() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("p");
    let (model, mut bytes, starts) = closed_log(&dir);
    let first = dir.join(file_name(0, "log"));
    assert!(starts.len() >= 4, "{} batches in the first segment", starts.len());
    let bad = 2;
    bytes[starts[bad] + 30] ^= 0x10;
    fs::write(&first, &bytes).unwrap();
    let mut log = Log::open(&dir, small_config()).unwrap();
    let bad_offset = model[bad].0;
    assert!(matches!(log.read_retained(bad_offset, 1), Err(StorageError::Corrupt { .. })));
    assert!(log.is_damaged());
    assert!(matches!(log.read(0, 1, None, true), Err(StorageError::Offline(_))), "consumers are refused");
    let mut b = make_batch(1, 10, 7, 9000);
    assert!(matches!(log.append(b.clone().as_mut_slice(), 9000, None), Err(StorageError::Offline(_))));
    // the Raft store's reads of every other batch, and an append at the end
    for (base, want) in model.iter().filter(|(o, _)| *o != bad_offset) {
        assert_eq!(&log.read_retained(*base, 1).unwrap()[..], &want[..], "batch at {base}");
    }
    let info = log.append_past_damage(&mut b, 9000, None).unwrap();
    assert_eq!(&log.read_retained(info.first_offset, 1).unwrap()[..], &b[..]);
    assert!(matches!(log.read_retained(bad_offset, 1), Err(StorageError::Corrupt { .. })), "still never read");
    // Raft truncates from the damaged batch on: nothing damaged is left
    log.truncate_to(bad_offset).unwrap();
    assert_eq!(log.find_damage().unwrap(), None);
    assert!(!log.is_offline());
    assert_eq!(&log.read(0, 1, None, true).unwrap()[..], &model[0].1[..], "consumers are served again");
}

/// A closed log of 30 batches in `root/pristine`, a replica's copy of it opened from
/// `root/replica`, and its first segment's bytes and batch boundaries.
struct Closed {
    pristine: PathBuf,
    model: Vec<(i64, Vec<u8>)>,
    replica: Log,
    bytes: Vec<u8>,
    starts: Vec<usize>,
}

fn closed_with_replica(root: &Path) -> Closed {
    let pristine = root.join("pristine");
    let (model, bytes, starts) = closed_log(&pristine);
    copy_dir(&pristine, &root.join("replica"));
    let replica = Log::open(&root.join("replica"), small_config()).unwrap();
    Closed { pristine, model, replica, bytes, starts }
}

/// A batch's base offset lies outside its CRC, so a flipped bit there passes the CRC check.
/// Every bit of it, in every batch of a closed segment, flipped in turn (decision 0040):
/// - no read ever returns bytes other than the batch stored at that offset (reads check that
///   each batch starts one past the previous one, from an index entry);
/// - the damage is found, by the clean open, a read or the scrubber, and the log goes offline;
/// - a replica's copy repairs it: the file is byte for byte what it was.
#[test]
fn a_flipped_base_offset_is_never_served_and_a_replicas_copy_repairs_it() {
    // bytes 0..8 of the header, big-endian
    every_flip_is_found_and_repaired("base offset", 64, |bit| 7 - bit / 8, None);
}

/// The partition leader epoch (header bytes 12..16) is outside the CRC too. Every batch of a
/// log carries the same epoch (`LogConfig::leader_epoch`, decision 0043), so every bit of it,
/// in every batch of a closed segment, flipped in turn, is found as the base offset's are:
/// never served, found, repaired byte for byte.
#[test]
fn a_flipped_leader_epoch_is_never_served_and_a_replicas_copy_repairs_it() {
    every_flip_is_found_and_repaired("leader epoch", 32, |bit| 15 - bit / 8, None);
}

/// A log whose epochs are Raft terms (one log per replica, decision 0045) carries many epochs,
/// so the check above does not apply; it is checked against a ceiling instead, the highest
/// term its replica has voted in (decision 0050). Every bit of an epoch of 0 under a ceiling
/// of 0, flipped in turn in every batch, is found and repaired as above.
#[test]
fn a_flipped_term_above_the_ceiling_is_never_served_and_a_replicas_copy_repairs_it() {
    every_flip_is_found_and_repaired("term", 32, |bit| 15 - bit / 8, Some(0));
}

/// What the ceiling does not catch: a flip that leaves the epoch between 0 and the ceiling
/// (a low bit of a term, when later terms were voted in). Flips above it, or to a negative
/// epoch, are damage; the ceiling is raised, never lowered.
#[test]
fn the_epoch_ceiling_refuses_epochs_above_it_or_below_zero_only() {
    let root = tempfile::tempdir().unwrap();
    let pristine = root.path().join("pristine");
    let (_, bytes, starts) = closed_log(&pristine);
    for (epoch, ceiling, damaged) in [(5, 5, false), (2, 5, false), (0, 5, false), (6, 5, true), (-1, 5, true)] {
        let dir = root.path().join(format!("e{epoch}-{ceiling}"));
        copy_dir(&pristine, &dir);
        let mut changed = bytes.clone();
        changed[starts[2] + 12..starts[2] + 16].copy_from_slice(&i32::to_be_bytes(epoch));
        fs::write(dir.join(file_name(0, "log")), &changed).unwrap();
        let mut log = Log::open(&dir, LogConfig { leader_epoch: None, ..small_config() }).unwrap();
        log.set_epoch_ceiling(ceiling);
        log.set_epoch_ceiling(ceiling - 3);
        assert_eq!(log.epoch_ceiling(), Some(ceiling), "never lowered");
        let (mut at, mut refused) = (0, false);
        while at < log.log_end_offset() {
            match log.read(at, 1 << 20, None, true) {
                Ok(got) => {
                    for b in sluice_protocol::batch::iter_batches(&got) {
                        at = b.unwrap().1.last_offset() + 1;
                    }
                }
                Err(StorageError::Corrupt { .. }) => {
                    refused = true;
                    break;
                }
                Err(e) => panic!("epoch {epoch} under ceiling {ceiling}: {e}"),
            }
        }
        assert_eq!(refused, damaged, "epoch {epoch} under ceiling {ceiling}: a read refused it");
        assert_eq!(log.is_damaged(), damaged, "epoch {epoch} under ceiling {ceiling}");
    }
}

/// Flip each of `bits` bits of a header field outside the CRC (`byte_of(bit)`: the byte of the
/// batch it is in; bit `bit % 8` of it), in every batch of a closed segment, one case each.
/// `ceiling`: the log is opened as one whose epochs are terms, under that ceiling.
fn every_flip_is_found_and_repaired(field: &str, bits: usize, byte_of: impl Fn(usize) -> usize, ceiling: Option<i32>) {
    let root = tempfile::tempdir().unwrap();
    let Closed { pristine, model, replica, bytes, starts } = closed_with_replica(root.path());
    let open = |dir: &Path| match ceiling {
        None => Log::open(dir, small_config()).unwrap(),
        Some(c) => {
            let mut log = Log::open(dir, LogConfig { leader_epoch: None, ..small_config() }).unwrap();
            log.set_epoch_ceiling(c);
            log
        }
    };
    assert!(starts.len() >= 5, "the first segment holds {} batches", starts.len());
    let in_segment = |base: i64| model.iter().position(|(b, _)| *b == base).is_some_and(|i| i < starts.len());
    let mut found_by = std::collections::BTreeMap::<&str, usize>::new();
    for batch in 0..starts.len() {
        for bit in 0..bits {
            let case = format!("batch {batch}, {field} bit {bit}");
            let dir = root.path().join(format!("b{batch}-{bit}"));
            copy_dir(&pristine, &dir);
            let mut damaged = bytes.clone();
            damaged[starts[batch] + byte_of(bit)] ^= 1 << (bit % 8);
            fs::write(dir.join(file_name(0, "log")), &damaged).unwrap();
            let mut log = open(&dir);
            let mut how = if log.is_damaged() { "open" } else { "" };
            // the scrubber first for odd bits, reads first for even ones
            let scrub = |log: &Log, how: &mut &str| {
                let mut at = Some(0);
                while let (Some(p), "") = (at, *how) {
                    match log.scrub(0, p, 1 << 10) {
                        Ok(next) => at = next,
                        Err(_) => *how = "scrub",
                    }
                }
            };
            if bit % 2 == 1 {
                scrub(&log, &mut how);
            }
            for (base, want) in &model {
                match log.read(*base, 1, None, true) {
                    Ok(got) => assert_eq!(&got[..], &want[..], "{case}: the read at {base}"),
                    Err(StorageError::Corrupt { .. }) => {
                        assert!(in_segment(*base), "{case}: damage reported for {base}, outside the segment");
                        how = if how.is_empty() { "read" } else { how };
                    }
                    Err(StorageError::Offline(_)) => {}
                    Err(e) => panic!("{case}: {e}"),
                }
            }
            scrub(&log, &mut how);
            assert!(log.is_damaged(), "{case}: the damage was never found");
            *found_by.entry(how).or_default() += 1;
            let d = log.find_damage().unwrap().unwrap();
            assert_eq!(d.position, starts[batch] as u64, "{case}: where the damage is");
            repair_from(&mut log, &replica, &case);
            assert_eq!(fs::read(dir.join(file_name(0, "log"))).unwrap(), bytes, "{case}: the segment as it was");
            assert_eq!(read_all(&log, 0), model, "{case}");
            fs::remove_dir_all(&dir).unwrap();
        }
    }
    eprintln!("{field} flips found by: {found_by:?}");
}

/// A damaged batch is repaired with another replica's copy (issue 22, decision 0036): the log
/// finds where the damage is and the offset the batch must start at, refuses copies that are
/// not that batch (a neighbour, a copy that fails its CRC), and takes the right one in place:
/// the segment is byte for byte what it was, every batch reads back and the log is online.
/// Flips anywhere in a batch but its base offset and leader epoch (outside the CRC; their own
/// tests flip every bit of both).
#[test]
fn a_damaged_batch_is_replaced_by_a_replicas_copy_and_the_log_comes_back() {
    let root = tempfile::tempdir().unwrap();
    let Closed { pristine, model, replica, bytes, starts } = closed_with_replica(root.path());
    assert!(starts.len() >= 3);
    let mut rng = rand::rngs::StdRng::seed_from_u64(22);
    for trial in 0..60 {
        let batch = rng.gen_range(0..starts.len());
        let end = starts.get(batch + 1).copied().unwrap_or(bytes.len());
        // batchLength (8..12) or anything from the CRC field on
        let at = if rng.gen_bool(0.1) {
            starts[batch] + rng.gen_range(8..12)
        } else {
            rng.gen_range(starts[batch] + 17..end)
        };
        let dir = root.path().join(format!("r{trial}"));
        copy_dir(&pristine, &dir);
        let mut damaged = bytes.clone();
        damaged[at] ^= 1 << rng.gen_range(0..8);
        fs::write(dir.join(file_name(0, "log")), &damaged).unwrap();
        let mut log = Log::open(&dir, small_config()).unwrap();
        let bad_offset = model[batch].0;
        // found at open when an index entry names the damaged batch (its header no longer
        // parses), or by the first read that meets it
        if !log.is_damaged() {
            assert_eq!(log.find_damage().unwrap(), None, "trial {trial}: nothing found before a read meets it");
            let read = log.read(bad_offset, 1 << 20, None, true);
            assert!(matches!(read, Err(StorageError::Corrupt { .. })), "trial {trial}: byte {at}: {read:?}");
        }
        assert!(log.is_offline() && log.is_damaged());
        let d = log.find_damage().unwrap().unwrap_or_else(|| panic!("trial {trial}: damage not found"));
        assert_eq!((d.position, d.base_offset), (starts[batch] as u64, bad_offset), "trial {trial}: byte {at}");
        // copies that are not the damaged batch are refused, and nothing is written
        let neighbour = model[if batch + 1 < model.len() { batch + 1 } else { batch - 1 }].0;
        let wrong = replica.read(neighbour, 1, None, true).unwrap();
        assert!(matches!(log.repair(&d, &wrong), Err(StorageError::Unrepairable { .. })), "trial {trial}: neighbour");
        let mut rotten = replica.read(bad_offset, 1, None, true).unwrap().to_vec();
        let last = rotten.len() - 1;
        rotten[last] ^= 0x10;
        assert!(matches!(log.repair(&d, &rotten), Err(StorageError::Unrepairable { .. })), "trial {trial}: rotten");
        assert!(log.is_offline());
        // the replica's copy of it is taken
        let copy = replica.read(bad_offset, 1, None, true).unwrap();
        assert!(log.repair(&d, &copy).unwrap(), "trial {trial}: repaired and online");
        assert!(!log.is_offline() && !log.is_damaged());
        assert_eq!(fs::read(dir.join(file_name(0, "log"))).unwrap(), bytes, "trial {trial}: the segment as it was");
        for (base, want) in &model {
            assert_eq!(&log.read(*base, 1, None, true).unwrap()[..], &want[..], "trial {trial}: batch at {base}");
        }
        let mut b = make_batch(1, 10, 7, 9000);
        log.append(&mut b, 9000, None).unwrap();
    }
}

/// A single flipped bit in a closed segment's offset index (which can keep the entries in
/// order, so the check at open passes) never makes a read skip, repeat or refuse a batch: a
/// position from the index that does not lead to the batch asked for is not trusted, and the
/// read scans the segment from its start instead. Every bit of every entry is tried.
#[test]
fn a_flipped_bit_in_an_offset_index_never_changes_what_is_read() {
    let root = tempfile::tempdir().unwrap();
    let pristine = root.path().join("pristine");
    let model = build(&pristine, 30);
    Log::open(&pristine, small_config()).unwrap().close().unwrap();
    let index = fs::read(pristine.join(file_name(0, "index"))).unwrap();
    assert!(index.len() >= 16, "the first segment's index has entries past the first: {} bytes", index.len());
    let dir = root.path().join("t");
    for at in 0..index.len() {
        for bit in 0..8 {
            let _ = fs::remove_dir_all(&dir);
            copy_dir(&pristine, &dir);
            let mut damaged = index.clone();
            damaged[at] ^= 1 << bit;
            fs::write(dir.join(file_name(0, "index")), &damaged).unwrap();
            let log = Log::open(&dir, small_config()).unwrap();
            for (base, want) in &model {
                let got = log.read(*base, 1, None, true);
                assert!(
                    matches!(&got, Ok(g) if g[..] == want[..]),
                    "byte {at} bit {bit}: batch at {base}: {:?}",
                    got.map(|g| g.len())
                );
            }
            assert_eq!(read_all(&log, 0), model, "byte {at} bit {bit}");
            assert!(!log.is_offline(), "byte {at} bit {bit}");
        }
    }
}

/// A flipped bit anywhere in the newest producer-state snapshot is detected (its CRC): the
/// snapshot is deleted and the older one is used (the broker then replays the log from there),
/// never a damaged payload. Every bit of the file is tried.
#[test]
fn a_flipped_bit_in_a_producer_snapshot_is_never_used() {
    let root = tempfile::tempdir().unwrap();
    let pristine = root.path().join("pristine");
    let mut log = Log::open(&pristine, small_config()).unwrap();
    for i in 0..6 {
        let mut b = make_batch(1, 10, i, 1);
        log.append_durable(&mut b, 0).unwrap();
    }
    log.write_producer_snapshot(2, b"older state").unwrap();
    log.write_producer_snapshot(5, b"newest producer state, several bytes long").unwrap();
    log.close().unwrap();
    let newest = fs::read(pristine.join(file_name(5, "snapshot"))).unwrap();
    let dir = root.path().join("t");
    for at in 0..newest.len() {
        for bit in 0..8 {
            let _ = fs::remove_dir_all(&dir);
            copy_dir(&pristine, &dir);
            let mut damaged = newest.clone();
            damaged[at] ^= 1 << bit;
            fs::write(dir.join(file_name(5, "snapshot")), &damaged).unwrap();
            let log = Log::open(&dir, small_config()).unwrap();
            assert_eq!(
                log.latest_producer_snapshot().unwrap(),
                Some((2, b"older state".to_vec())),
                "byte {at} bit {bit} of {}",
                newest.len()
            );
            assert_eq!(log.producer_snapshot_offsets().unwrap(), vec![2], "the damaged one is deleted");
        }
    }
}

/// A log of `n` batches in one segment, synced and checkpointed through the first `synced`
/// of them (the recovery point), the rest synced after the checkpoint; then "crash". Returns
/// the model, the segment's bytes and its batches' byte positions.
/// Batches as read back: (base offset, bytes).
type Batches = Vec<(i64, Vec<u8>)>;

fn build_past_recovery_point(path: &Path, n: usize, synced: usize) -> (Batches, Vec<u8>, Vec<usize>) {
    let config = LogConfig { segment_bytes: 1 << 20, ..small_config() };
    let mut log = Log::open(path, config).unwrap();
    let mut model = Vec::new();
    for i in 0..n {
        if i == synced {
            log.flush().unwrap();
        }
        let mut b = make_batch(1 + i % 3, 40 + (i * 37) % 200, i as u64, 1000 + i as i64);
        let info = log.append_durable(&mut b, 1000 + i as i64).unwrap();
        model.push((info.first_offset, b));
    }
    drop(log);
    let bytes = fs::read(path.join(file_name(0, "log"))).unwrap();
    let starts = sluice_protocol::batch::iter_batches(&bytes).map(|b| b.unwrap().0).collect();
    (model, bytes, starts)
}

fn log_end_of(model: &[(i64, Vec<u8>)]) -> i64 {
    let (base, last) = model.last().unwrap();
    base + i64::from(sluice_protocol::batch::BatchView::parse(last).unwrap().0.last_offset_delta()) + 1
}

/// Repair `log` with `replica`'s copies until it is whole: how many batches it took.
/// A closed segment that is not the last, damaged from one of its batches to its very end (a
/// zeroed or lost last page): whichever batch the damage starts in, and the file zeroed to its
/// end, cut inside the batch or cut exactly where the batch starts (it still parses whole), the
/// damage is found, no read skips the missing offsets, and a replica's copies make the segment
/// byte for byte what it was — the segments after it untouched — and every batch reads back.
#[test]
fn a_closed_segment_damaged_to_its_end_is_repaired_in_place() {
    let root = tempfile::tempdir().unwrap();
    let Closed { pristine, model, replica, bytes, starts } = closed_with_replica(root.path());
    assert!(model.len() > starts.len(), "segment 0 is not the last");
    for (k, &start) in starts.iter().enumerate() {
        for how in ["zeroed", "cut", "cut at the batch's start"] {
            let case = format!("batch {k} on: {how}");
            let dir = root.path().join(format!("end{k}-{}", how.len()));
            copy_dir(&pristine, &dir);
            let mut damaged = bytes.clone();
            match how {
                "zeroed" => damaged[start + 20..].iter_mut().for_each(|b| *b = 0),
                "cut" => damaged.truncate(start + 20),
                _ => damaged.truncate(start),
            }
            fs::write(dir.join(file_name(0, "log")), &damaged).unwrap();
            let mut log = Log::open(&dir, small_config()).unwrap();
            if !log.is_damaged() {
                // a clean open trusts a closed segment whose indexes still fit: a read finds it
                assert!(
                    matches!(log.read(model[k].0, 1 << 20, None, true), Err(StorageError::Corrupt { .. })),
                    "{case}: the damage is served"
                );
            }
            assert!(log.is_damaged(), "{case}: the damage was never found");
            repair_from(&mut log, &replica, &case);
            assert_eq!(fs::read(dir.join(file_name(0, "log"))).unwrap(), bytes, "{case}: the segment as it was");
            assert_eq!(read_all(&log, 0), model, "{case}");
            fs::remove_dir_all(&dir).unwrap();
        }
    }
}

fn repair_from(log: &mut Log, replica: &Log, what: &str) -> usize {
    for n in 1..1000 {
        let d = log.find_damage().unwrap().unwrap_or_else(|| panic!("{what}: damage not found"));
        let copy = replica.read(d.base_offset, 1, None, true).unwrap();
        if log.repair(&d, &copy).unwrap_or_else(|e| panic!("{what}: copy of {} refused: {e}", d.base_offset)) {
            return n;
        }
    }
    panic!("{what}: never whole");
}

/// Issue 22: every byte below the recovery point was synced (and acknowledged) before, so
/// damage there is rot, not a torn write — also in the segment that holds the recovery point,
/// which the open scans. It used to be cut there like a torn tail, losing acknowledged batches
/// (and, on a replica, shifting every later offset). Now:
/// - a flipped bit in any batch below it, or a zeroed page over several: the bytes are kept,
///   the log is damaged (offline), the scan resumes after the damage, and a replica's copies
///   make the segment what it was;
/// - the file cut anywhere below it (a disk that lost synced writes): the log still ends at the
///   recovery point, damaged, and a replica's copies of the missing batches fill it;
/// - a cut past the recovery point is a torn tail, cut as before.
#[test]
fn damage_below_the_recovery_point_is_kept_and_a_lost_tail_is_filled_from_a_replicas_copies() {
    let root = tempfile::tempdir().unwrap();
    let pristine = root.path().join("pristine");
    let (model, bytes, starts) = build_past_recovery_point(&pristine, 24, 20);
    let config = LogConfig { segment_bytes: 1 << 20, ..small_config() };
    copy_dir(&pristine, &root.path().join("replica"));
    let replica = Log::open(&root.path().join("replica"), config.clone()).unwrap();
    let end = log_end_of(&model);
    let recovery_point = model[20].0;
    let segment = |dir: &Path| dir.join(file_name(0, "log"));
    let open = |case: &str, damage: &dyn Fn(&mut Vec<u8>)| {
        let dir = root.path().join(case);
        let _ = fs::remove_dir_all(&dir);
        copy_dir(&pristine, &dir);
        let mut damaged = bytes.clone();
        damage(&mut damaged);
        fs::write(segment(&dir), &damaged).unwrap();
        (Log::open(&dir, config.clone()).unwrap(), dir)
    };
    // a flipped bit in each batch below the recovery point
    for batch in 0..20 {
        let case = format!("flip in batch {batch}");
        let (mut log, dir) = open(&case, &|b: &mut Vec<u8>| b[starts[batch] + 40] ^= 0x04);
        assert!(log.is_damaged(), "{case}: found at open");
        assert_eq!(log.log_end_offset(), end, "{case}: nothing cut");
        let d = log.find_damage().unwrap().unwrap();
        assert_eq!((d.position, d.base_offset), (starts[batch] as u64, model[batch].0), "{case}");
        assert_eq!(repair_from(&mut log, &replica, &case), 1, "{case}");
        assert_eq!(fs::read(segment(&dir)).unwrap(), bytes, "{case}: the segment as it was");
        assert_eq!(read_all(&log, 0), model, "{case}");
    }
    // a zeroed run over batches 5..=8 (their headers too)
    let case = "zeroed run";
    let (mut log, dir) = open(case, &|b: &mut Vec<u8>| b[starts[5] + 3..starts[8] + 20].fill(0));
    assert!(log.is_damaged() && log.log_end_offset() == end, "{case}: kept");
    assert_eq!(repair_from(&mut log, &replica, case), 4, "{case}");
    assert_eq!(fs::read(segment(&dir)).unwrap(), bytes, "{case}: the segment as it was");
    // the file cut at every byte of batch 12, and at every batch's start below the recovery point
    let cuts: Vec<usize> = (starts[12]..starts[13]).chain(starts[..20].iter().copied()).collect();
    for cut in cuts {
        let case = format!("cut at byte {cut}");
        let (mut log, dir) = open(&case, &|b: &mut Vec<u8>| b.truncate(cut));
        assert!(log.is_damaged(), "{case}: found at open");
        assert_eq!(log.log_end_offset(), recovery_point, "{case}: the log ends at the recovery point");
        // the batches from the one the cut is in, up to the recovery point
        let lost = 20 - starts.iter().filter(|s| **s < cut).count() + usize::from(!starts.contains(&cut));
        assert_eq!(repair_from(&mut log, &replica, &case), lost, "{case}: one copy per missing batch");
        assert!(!log.is_offline(), "{case}");
        assert_eq!(fs::read(segment(&dir)).unwrap(), bytes[..starts[20]], "{case}: the synced batches as they were");
        assert_eq!(read_all(&log, 0), model[..20], "{case}");
        let mut b = make_batch(1, 10, 7, 9000);
        assert_eq!(
            log.append(&mut b, 9000, None).unwrap().first_offset,
            recovery_point,
            "{case}: appends go on after it"
        );
    }
    // after a clean close every byte is below the recovery point: a file cut at a batch's
    // start (which looks whole to the clean open's checks) is found and filled too
    let clean = root.path().join("clean");
    copy_dir(&pristine, &clean);
    Log::open(&clean, config.clone()).unwrap().close().unwrap();
    let file = fs::read(segment(&clean)).unwrap();
    fs::write(segment(&clean), &file[..starts[10]]).unwrap();
    let mut log = Log::open(&clean, config.clone()).unwrap();
    assert!(log.is_damaged() && log.log_end_offset() == end, "clean close, cut file: found, nothing lost");
    assert_eq!(repair_from(&mut log, &replica, "clean close"), 14);
    assert_eq!(read_all(&log, 0), model);
    // a torn tail past the recovery point is cut as before
    let (log, _) = open("torn", &|b: &mut Vec<u8>| b.truncate(starts[22] + 10));
    assert!(!log.is_damaged() && log.log_end_offset() == model[22].0, "torn tail past the recovery point: cut");
    assert_eq!(read_all(&log, 0), model[..22]);
}

/// A crash part way through `Log::truncate_to` — after the lowered recovery point is written,
/// after each later segment is deleted (newest first), after the cut — leaves a log that opens
/// online, holds a prefix of what it held before and at least everything below the cut, and
/// takes appends. The intermediate states are built from copies of the directory before and
/// after a real truncation. Without the recovery point lowered first, the states with the
/// later segments gone open offline ("offsets … missing").
#[test]
fn a_crash_part_way_through_a_truncation_keeps_a_whole_prefix() {
    let root = tempfile::tempdir().unwrap();
    let before = root.path().join("before");
    let mut log = Log::open(&before, small_config()).unwrap();
    let mut model = Vec::new();
    for i in 0..30usize {
        let mut b = make_batch(1 + i % 3, 40 + (i * 37) % 200, i as u64, 1000 + i as i64);
        let info = log.append_durable(&mut b, 1000 + i as i64).unwrap();
        model.push((info.first_offset, b));
    }
    // the recovery point at the log end, as the periodic flush leaves it
    log.flush().unwrap();
    drop(log);
    let bases: Vec<i64> = {
        let l = Log::open(&before, small_config()).unwrap();
        let b = l.segment_bases();
        drop(l);
        b
    };
    assert!(bases.len() >= 4, "several segments: {bases:?}");
    for cut_at in [1usize, bases.len() / 2, bases.len() - 1] {
        // the cut: the second batch of segment `cut_at` (a boundary inside it)
        let seg_base = bases[cut_at];
        let Some(&(to, _)) = model.iter().find(|(b, _)| *b > seg_base) else { continue };
        let after = root.path().join(format!("after-{to}"));
        copy_dir(&before, &after);
        {
            let mut l = Log::open(&after, small_config()).unwrap();
            l.truncate_to(to).unwrap();
            drop(l);
        }
        let keep: Vec<_> = model.iter().filter(|(b, _)| *b < to).cloned().collect();
        let checkpoint = fs::read(after.join(sluice_storage::log::CHECKPOINT_FILE)).unwrap();
        // every intermediate state: the new checkpoint, then the later segments gone newest
        // first, the kept one still whole
        let later: Vec<i64> = bases.iter().copied().filter(|b| *b > seg_base).collect();
        for gone in 0..=later.len() {
            let state = root.path().join(format!("state-{to}-{gone}"));
            copy_dir(&before, &state);
            fs::write(state.join(sluice_storage::log::CHECKPOINT_FILE), &checkpoint).unwrap();
            for b in later.iter().rev().take(gone) {
                for ext in ["log", "index", "timeindex", "txnindex"] {
                    let _ = fs::remove_file(state.join(file_name(*b, ext)));
                }
            }
            let l = Log::open(&state, small_config()).unwrap();
            assert!(!l.is_offline(), "cut at {to}, {gone} later segments gone: offline");
            let got = read_all(&l, 0);
            assert!(got.len() >= keep.len() && got[..] == model[..got.len()], "cut at {to}, {gone} gone: not a prefix");
            drop(l);
        }
        // and the finished truncation, after a crash: exactly the batches below the cut
        check_recovered(&after, &keep);
    }
}
