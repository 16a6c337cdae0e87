//! The log cleaner against a model: random histories of keyed records, tombstones, idempotent
//! batches and transactions that commit or abort, cleaned in one or more passes, must keep
//! exactly Kafka's records (newest value per key, tombstones and empty transactions' markers
//! until the horizon, no aborted record, the last batch of each live producer — emptied if need
//! be —, offsets as they were) and read the same committed table as before; a crash at every step of the swap leaves
//! the old log or the new one, each valid.
#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use proptest::prelude::*;
use sluice_protocol::batch::{iter_batches, BatchBuilder, ControlMarker, ControlType, NewRecord, NO_PRODUCER_ID};
use sluice_storage::cleaner::{self, CleanOptions};
use sluice_storage::{AbortedTxn, Log, LogConfig};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 600,
        index_interval_bytes: 100,
        segment_index_bytes: 4096,
        retention_ms: -1,
        cleanup_compact: true,
        cleanup_delete: false,
        ..LogConfig::default()
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// records (key, value) in one batch by producer kind: 0 plain, 1..=2 idempotent, 10..=11 transactional
    Batch { producer: i64, records: Vec<(Option<u8>, Option<u8>)> },
    /// end producer's open transaction
    End { producer: i64, commit: bool },
}

fn op() -> impl Strategy<Value = Op> {
    let rec = (prop::option::weighted(0.95, 0u8..6), prop::option::weighted(0.8, any::<u8>()));
    prop_oneof![
        6 => (prop_oneof![Just(NO_PRODUCER_ID), 1i64..=2, 10i64..=11], prop::collection::vec(rec, 1..4))
            .prop_map(|(producer, records)| Op::Batch { producer, records }),
        2 => (10i64..=11, any::<bool>()).prop_map(|(producer, commit)| Op::End { producer, commit }),
    ]
}

/// key, value, timestamp, producer id, aborted
type WrittenRecord = (Option<Bytes>, Option<Bytes>, i64, i64, bool);

/// What was written: every record with its fate, and each producer's last batch.
#[derive(Default, Debug)]
struct Written {
    /// offset → (key, value, timestamp, pid, aborted)
    records: BTreeMap<i64, WrittenRecord>,
    /// marker offset → (pid, commit, data offsets of its transaction)
    markers: BTreeMap<i64, (i64, bool, Vec<i64>)>,
    /// pid → (base, last) offsets of its last batch (data or marker)
    last_batch: HashMap<i64, (i64, i64)>,
}

fn write(log: &mut Log, ops: &[Op]) -> Written {
    let mut w = Written::default();
    let mut open: HashMap<i64, (i64, Vec<i64>)> = HashMap::new(); // pid → (first offset, offsets)
    let mut seq: HashMap<i64, i32> = HashMap::new();
    let mut ts = 1_000i64;
    for op in ops {
        match op {
            Op::Batch { producer, records } => {
                let recs: Vec<NewRecord> = records
                    .iter()
                    .map(|(k, v)| {
                        ts += 1;
                        NewRecord {
                            timestamp: ts,
                            key: k.map(|k| Bytes::from(vec![b'k', k])),
                            value: v.map(|v| Bytes::from(vec![v; 20])),
                            headers: vec![],
                        }
                    })
                    .collect();
                let txn = *producer >= 10;
                let s = seq.entry(*producer).or_insert(0);
                let b = BatchBuilder {
                    producer_id: *producer,
                    producer_epoch: if *producer == NO_PRODUCER_ID { -1 } else { 0 },
                    base_sequence: if *producer == NO_PRODUCER_ID { -1 } else { *s },
                    transactional: txn,
                    ..Default::default()
                }
                .build(&recs)
                .unwrap();
                *s += recs.len() as i32;
                let info = log.append_durable(&mut b.to_vec(), ts).unwrap();
                for (i, r) in recs.iter().enumerate() {
                    let o = info.first_offset + i as i64;
                    w.records.insert(o, (r.key.clone(), r.value.clone(), r.timestamp, *producer, false));
                    if txn {
                        open.entry(*producer).or_insert((o, Vec::new())).1.push(o);
                    }
                }
                if *producer != NO_PRODUCER_ID {
                    w.last_batch.insert(*producer, (info.first_offset, info.last_offset));
                }
            }
            Op::End { producer, commit } => {
                let Some((first, offsets)) = open.remove(producer) else { continue };
                ts += 1;
                let kind = if *commit { ControlType::Commit } else { ControlType::Abort };
                let m = BatchBuilder::control_marker(*producer, 0, ControlMarker { kind, coordinator_epoch: 0 }, ts)
                    .unwrap();
                let info = log.append_durable(&mut m.to_vec(), ts).unwrap();
                let at = info.first_offset;
                if !commit {
                    for o in &offsets {
                        if let Some(r) = w.records.get_mut(o) {
                            r.4 = true;
                        }
                    }
                    log.append_aborted_txn(AbortedTxn {
                        producer_id: *producer,
                        first_offset: first,
                        last_offset: at,
                        last_stable_offset: at,
                    })
                    .unwrap();
                }
                w.markers.insert(at, (*producer, *commit, offsets));
                w.last_batch.insert(*producer, (at, at));
            }
        }
    }
    // close what is still open (commit), so that the whole log can be cleaned
    for (producer, (_, offsets)) in open {
        ts += 1;
        let m = BatchBuilder::control_marker(
            producer,
            0,
            ControlMarker { kind: ControlType::Commit, coordinator_epoch: 0 },
            ts,
        )
        .unwrap();
        let info = log.append_durable(&mut m.to_vec(), ts).unwrap();
        w.markers.insert(info.first_offset, (producer, true, offsets));
        w.last_batch.insert(producer, (info.first_offset, info.first_offset));
    }
    w
}

/// The log as read: offset → (key, value, timestamp) of data records; marker offsets.
#[derive(Debug, PartialEq)]
struct Read {
    records: BTreeMap<i64, (Option<Bytes>, Option<Bytes>, i64)>,
    markers: HashSet<i64>,
    batches: Vec<(i64, i64)>,
}

/// Call `f` with every batch of the log, in offset order.
fn each_batch(log: &Log, mut f: impl FnMut(&sluice_protocol::batch::BatchView<'_>)) {
    let mut next = log.log_start_offset();
    loop {
        let bytes = log.read(next, 4096, None, true).unwrap();
        if bytes.is_empty() {
            break;
        }
        for b in iter_batches(&bytes) {
            let (_, v) = b.unwrap();
            assert!(v.base_offset() >= next, "offsets grow: batch at {} after {next}", v.base_offset());
            f(&v);
            next = v.last_offset() + 1;
        }
    }
}

fn read(log: &Log) -> Read {
    let mut r = Read { records: BTreeMap::new(), markers: HashSet::new(), batches: Vec::new() };
    each_batch(log, |v| {
        r.batches.push((v.base_offset(), v.last_offset()));
        if v.is_control() {
            r.markers.insert(v.base_offset());
        } else {
            for rec in v.records().unwrap() {
                r.records.insert(rec.offset, (rec.key, rec.value, rec.timestamp));
            }
        }
    });
    r
}

/// The read_committed table: newest committed value of each key (a tombstone: absent).
fn table(log: &Log) -> BTreeMap<Bytes, Bytes> {
    let aborted = log.collect_aborted_txns(0, i64::MAX);
    let mut t = BTreeMap::new();
    each_batch(log, |v| {
        let is_aborted = v.is_transactional()
            && aborted.iter().any(|a| {
                a.producer_id == v.producer_id()
                    && a.first_offset <= v.base_offset()
                    && v.base_offset() <= a.last_offset
            });
        if v.is_control() || is_aborted {
            return;
        }
        for rec in v.records().unwrap() {
            let Some(k) = rec.key else { continue };
            match rec.value {
                Some(val) => t.insert(k, val),
                None => t.remove(&k),
            };
        }
    });
    t
}

fn options(now_ms: i64, keep_last: &HashMap<i64, i64>, log: &Log) -> CleanOptions {
    CleanOptions {
        now_ms,
        delete_retention_ms: 1_000,
        min_compaction_lag_ms: 0,
        upper: log.log_end_offset(),
        map_capacity: 1 << 20,
        keep_last: keep_last.clone(),
        io_bytes_per_second: None,
    }
}

fn pass(log: &mut Log, now_ms: i64, keep_last: &HashMap<i64, i64>) -> bool {
    let opts = &options(now_ms, keep_last, log);
    let Some(mut job) = log.prepare_clean(opts).unwrap() else { return false };
    let cleaned = cleaner::clean(&mut job, opts).unwrap();
    log.install_clean(cleaned).unwrap()
}

/// Kafka's rules, checked record by record below the cleaned end `end` with tombstone horizon
/// `horizon` (everything at or past `end` is as written).
fn check(w: &Written, r: &Read, end: i64, horizon: i64, keep_last: &HashMap<i64, i64>) {
    let live_batch =
        |o: i64| w.last_batch.iter().any(|(pid, (b, l))| keep_last.get(pid) == Some(l) && *b <= o && o <= *l);
    // newest non-aborted record of each key below `end`
    let mut newest: HashMap<Bytes, i64> = HashMap::new();
    for (o, (k, _, _, _, aborted)) in w.records.range(..end) {
        if let (Some(k), false) = (k, aborted) {
            newest.insert(k.clone(), *o);
        }
    }
    for (o, (k, v, ts, _, aborted)) in &w.records {
        let expect = if *o >= end {
            true
        } else if *aborted || k.is_none() {
            false
        } else {
            newest.get(k.as_ref().unwrap()) == Some(o) && (v.is_some() || *o >= horizon)
        };
        match r.records.get(o) {
            Some(got) => {
                assert!(expect, "record at {o} should have been removed");
                assert_eq!(got, &(k.clone(), v.clone(), *ts), "record at {o} changed");
            }
            None => assert!(!expect, "record at {o} lost (end {end}, horizon {horizon})"),
        }
    }
    assert!(r.records.keys().all(|o| w.records.contains_key(o)), "a record appeared");
    for (pid, (b, l)) in &w.last_batch {
        if keep_last.get(pid) == Some(l) {
            assert!(r.batches.contains(&(*b, *l)), "producer {pid}'s last batch {b}..={l} kept");
        }
    }
    for (o, (_, commit, offsets)) in &w.markers {
        let expect = *o >= end
            || live_batch(*o)
            || *o >= horizon
            || offsets.iter().any(|d| r.records.contains_key(d) || live_batch(*d));
        assert_eq!(r.markers.contains(o), expect, "marker at {o} (commit {commit})");
    }
}

fn keep_last_of(w: &Written, keep: &[bool]) -> HashMap<i64, i64> {
    let mut pids: Vec<_> = w.last_batch.iter().collect();
    pids.sort();
    pids.into_iter().zip(keep.iter().cycle()).filter(|(_, k)| **k).map(|((pid, (_, l)), _)| (*pid, *l)).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    #[test]
    fn cleaning_keeps_exactly_kafkas_records_and_the_committed_table(
        ops in prop::collection::vec(op(), 1..80),
        more in prop::collection::vec(op(), 0..30),
        keep in prop::collection::vec(any::<bool>(), 1..6),
        second_after_ms in prop_oneof![Just(0i64), Just(5_000i64)],
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), config()).unwrap();
        let mut w = write(&mut log, &ops);
        log.roll().unwrap();
        log.set_high_watermark(log.log_end_offset());
        let before = read(&log);
        let table_before = table(&log);
        let keep_last = keep_last_of(&w, &keep);

        // pass 1 at t=10,000: no pass finished a delete.retention.ms ago, so no tombstone goes
        let end1 = log.log_end_offset();
        pass(&mut log, 10_000, &keep_last);
        prop_assert_eq!(log.cleaner_state().clean_end, end1);
        let r1 = read(&log);
        check(&w, &r1, end1, i64::MIN, &keep_last);
        prop_assert_eq!(table(&log), table_before.clone());
        prop_assert_eq!(log.log_end_offset(), end1);
        prop_assert!(r1.records.len() <= before.records.len());

        // more writes, then pass 2 later: the horizon is pass 1's end once 1 s has passed
        let w2 = write(&mut log, &more);
        for (o, r) in w2.records { w.records.insert(o, r); }
        for (o, m) in w2.markers { w.markers.insert(o, m); }
        log.roll().unwrap();
        log.set_high_watermark(log.log_end_offset());
        let table_before2 = table(&log);
        let end2 = log.log_end_offset();
        let now2 = 10_000 + second_after_ms;
        pass(&mut log, now2, &keep_last);
        let horizon = if second_after_ms >= 1_000 { end1 } else { i64::MIN };
        let r2 = read(&log);
        check(&w, &r2, end2, horizon, &keep_last);
        prop_assert_eq!(table(&log), table_before2);

        // a crash (no close) and a reopen read the same, with a full scan of every segment
        drop(log);
        std::fs::remove_file(dir.path().join(sluice_storage::log::CHECKPOINT_FILE)).unwrap();
        let log = Log::open(dir.path(), config()).unwrap();
        prop_assert_eq!(read(&log), r2);
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// A crash after every file-system step of a swap: the reopened log is the old one or the
/// cleaned one, exactly, and a later pass finishes the job.
#[test]
fn a_crash_at_any_step_of_a_swap_leaves_the_old_log_or_the_new() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base");
    let ops: Vec<Op> = (0..120)
        .map(|i| match i % 9 {
            7 => Op::End { producer: 10, commit: i % 2 == 0 },
            n => Op::Batch {
                producer: if n % 3 == 0 { 10 } else { 1 },
                records: vec![
                    (Some((i % 5) as u8), if i % 11 == 0 { None } else { Some(i as u8) }),
                    (Some(9), Some(1)),
                ],
            },
        })
        .collect();
    let (w, keep_last, before, after) = {
        let mut log = Log::open(&base, config()).unwrap();
        let w = write(&mut log, &ops);
        log.roll().unwrap();
        log.set_high_watermark(log.log_end_offset());
        let keep_last = keep_last_of(&w, &[true]);
        let before = read(&log);
        drop(log);
        // the result of an uninterrupted pass, on a copy
        let full = dir.path().join("full");
        copy_dir(&base, &full);
        let mut log = Log::open(&full, config()).unwrap();
        log.set_high_watermark(log.log_end_offset());
        assert!(pass(&mut log, 10_000, &keep_last));
        (w, keep_last, before, read(&log))
    };
    assert!(after.records.len() < before.records.len() / 2, "the history compacts");
    let end = before.batches.last().unwrap().1 + 1;
    let mut crashed_mid_swap = 0;
    for steps in 0.. {
        let d = dir.path().join(format!("crash-{steps}"));
        copy_dir(&base, &d);
        let mut log = Log::open(&d, config()).unwrap();
        log.set_high_watermark(log.log_end_offset());
        let opts = options(10_000, &keep_last, &log);
        let mut job = log.prepare_clean(&opts).unwrap().unwrap();
        let cleaned = cleaner::clean(&mut job, &opts).unwrap();
        cleaner::crash_after_steps(Some(steps));
        let outcome = log.install_clean(cleaned);
        cleaner::crash_after_steps(None);
        drop(log);
        let mut log = Log::open(&d, config()).unwrap();
        let got = read(&log);
        assert!(got == before || got == after, "after {steps} steps: neither the old log nor the cleaned one");
        if got == after && outcome.is_err() {
            crashed_mid_swap += 1;
        }
        check(&w, &got, if got == after { end } else { i64::MIN }, i64::MIN, &keep_last);
        // a later pass reaches the cleaned log from wherever the crash left it
        log.set_high_watermark(log.log_end_offset());
        pass(&mut log, 10_000, &keep_last);
        assert_eq!(read(&log), after, "after {steps} steps, a new pass");
        if outcome.is_ok() {
            break;
        }
        assert!(steps < 1000);
    }
    assert!(crashed_mid_swap > 0, "some crash points fell between the manifest and the end");
}
