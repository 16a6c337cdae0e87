//! Model-based property test: random sequences of append, read, roll, retention, delete-records,
//! tail truncation (Raft's), flush, clean close + reopen and crash (drop) + reopen must agree
//! with an in-memory model.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use proptest::prelude::*;
use sluice_protocol::batch::{iter_batches, BatchView};
use sluice_storage::Log;

#[derive(Debug, Clone)]
enum Op {
    Append { records: usize, value_len: usize },
    Read { at: u16, max_bytes: usize },
    ReadTimestamp { at: u16 },
    Roll,
    RetainBytes { bytes: u16 },
    DeleteRecords { at: u16 },
    Truncate { at: u16 },
    Flush,
    Reopen { clean: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1usize..6, 0usize..400).prop_map(|(records, value_len)| Op::Append { records, value_len }),
        4 => (any::<u16>(), 1usize..3000).prop_map(|(at, max_bytes)| Op::Read { at, max_bytes }),
        1 => any::<u16>().prop_map(|at| Op::ReadTimestamp { at }),
        1 => Just(Op::Roll),
        1 => any::<u16>().prop_map(|bytes| Op::RetainBytes { bytes: bytes % 6000 }),
        1 => any::<u16>().prop_map(|at| Op::DeleteRecords { at }),
        2 => any::<u16>().prop_map(|at| Op::Truncate { at }),
        1 => Just(Op::Flush),
        1 => any::<bool>().prop_map(|clean| Op::Reopen { clean }),
    ]
}

/// The model: every batch ever appended and not deleted, with its assigned offsets.
struct Model {
    batches: Vec<(i64, i64, Vec<u8>)>, // base, last, bytes (base offset assigned)
    next: i64,
    log_start: i64,
}

fn pick(at: u16, lo: i64, hi: i64) -> i64 {
    if hi <= lo {
        lo
    } else {
        lo + i64::from(at) % (hi - lo)
    }
}

fn check_contents(log: &Log, m: &Model) {
    assert_eq!(log.log_end_offset(), m.next, "LEO");
    assert_eq!(log.log_start_offset(), m.log_start, "log start");
    let got = read_all(log, m.log_start);
    let want: Vec<_> =
        m.batches.iter().filter(|(_, last, _)| *last >= m.log_start).map(|(b, _, bytes)| (*b, bytes.clone())).collect();
    assert_eq!(got.len(), want.len(), "batch count");
    assert!(got == want, "contents differ from the model");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn log_agrees_with_model(ops in proptest::collection::vec(op(), 1..60)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t-0");
        let mut log = Some(Log::open(&path, small_config()).unwrap());
        let mut m = Model { batches: vec![], next: 0, log_start: 0 };
        let mut ts = 1_000_000i64;
        for op in ops {
            let l = log.as_mut().unwrap();
            match op {
                Op::Append { records, value_len } => {
                    ts += 10;
                    let mut b = make_batch(records, value_len, m.next as u64, ts);
                    let info = l.append_durable(&mut b, ts).unwrap();
                    prop_assert_eq!(info.first_offset, m.next);
                    prop_assert_eq!(info.last_offset, m.next + records as i64 - 1);
                    m.batches.push((info.first_offset, info.last_offset, b));
                    m.next = info.last_offset + 1;
                    let leo = l.log_end_offset();
                    l.set_high_watermark(leo);
                }
                Op::Read { at, max_bytes } => {
                    if m.next == m.log_start { continue; }
                    let off = pick(at, m.log_start, m.next);
                    let bytes = l.read(off, max_bytes, None, true).unwrap();
                    let views: Vec<BatchView> = iter_batches(&bytes).map(|r| r.unwrap().1).collect();
                    prop_assert!(!views.is_empty());
                    prop_assert!(views[0].base_offset() <= off && off <= views[0].last_offset());
                    prop_assert!(views.len() == 1 || bytes.len() <= max_bytes);
                    let idx = m.batches.iter().position(|(b, _, _)| *b == views[0].base_offset()).unwrap();
                    for (i, v) in views.iter().enumerate() {
                        prop_assert_eq!(v.bytes(), &m.batches[idx + i].2[..]);
                    }
                    // bounded read: nothing at or past the upper bound
                    let upper = pick(at / 2, off, m.next + 1);
                    let bounded = l.read(off, max_bytes, Some(upper), true).unwrap();
                    for r in iter_batches(&bounded) {
                        prop_assert!(r.unwrap().1.base_offset() < upper);
                    }
                }
                Op::ReadTimestamp { at } => {
                    let live: Vec<_> = m.batches.iter().filter(|(b, _, _)| *b >= m.log_start).collect();
                    if live.is_empty() { continue; }
                    let (base, _, bytes) = live[at as usize % live.len()];
                    let (v, _) = BatchView::parse(bytes).unwrap();
                    let want_ts = v.base_timestamp();
                    let found = l.offset_for_timestamp(want_ts).unwrap();
                    prop_assert_eq!(found, Some((*base, want_ts)));
                    prop_assert_eq!(l.offset_for_timestamp(ts + 1_000_000).unwrap(), None);
                }
                Op::Roll => {
                    l.roll().unwrap();
                }
                Op::RetainBytes { bytes } => {
                    let mut cfg = l.config().clone();
                    cfg.retention_bytes = i64::from(bytes);
                    l.set_config(cfg).unwrap();
                    let before = l.log_start_offset();
                    l.enforce_retention(ts).unwrap();
                    let after = l.log_start_offset();
                    prop_assert!(after >= before);
                    prop_assert!(after == before || after == m.next || m.batches.iter().any(|(b, _, _)| *b == after), "start on a batch boundary");
                    // it stopped for a reason: only the active segment left, or size within bounds
                    let bases = l.segment_bases();
                    if bases.len() > 1 {
                        let first_size = l.size_bytes() - read_all_size_after(l, bases[1]);
                        prop_assert!(l.size_bytes() - first_size < u64::from(bytes));
                    }
                    m.log_start = after;
                    let mut cfg = l.config().clone();
                    cfg.retention_bytes = -1;
                    l.set_config(cfg).unwrap();
                }
                Op::DeleteRecords { at } => {
                    let target = pick(at, m.log_start, m.next + 1);
                    let got = l.delete_records(target).unwrap();
                    prop_assert_eq!(got, target.max(m.log_start));
                    m.log_start = got;
                    prop_assert!(l.read(m.log_start.saturating_sub(1).max(0), 100, None, true).is_err() || m.log_start == 0);
                }
                Op::Truncate { at } => {
                    // at a batch's base offset at or past the log start, or at the LEO
                    let bounds: Vec<i64> = m
                        .batches
                        .iter()
                        .map(|(b, _, _)| *b)
                        .filter(|b| *b >= m.log_start)
                        .chain(std::iter::once(m.next))
                        .collect();
                    let to = bounds[at as usize % bounds.len()];
                    let held: u64 = m.batches.iter().filter(|(b, _, _)| *b >= to).map(|(_, _, v)| v.len() as u64).sum();
                    // inside a batch of more than one record: refused, nothing cut
                    if let Some((b, last, _)) = m.batches.iter().find(|(b, last, _)| *b >= m.log_start && *last > *b) {
                        let inside = b + 1 + i64::from(at) % (last - b);
                        prop_assert!(l.truncate_to(inside).is_err(), "{inside} splits {b}..={last}");
                        prop_assert_eq!(l.log_end_offset(), m.next);
                    }
                    prop_assert!(l.truncate_to(m.log_start - 1).is_err() || m.log_start == 0);
                    let removed = l.truncate_to(to).unwrap();
                    prop_assert_eq!(removed, held);
                    m.batches.retain(|(b, _, _)| *b < to);
                    m.next = to;
                    prop_assert_eq!(l.high_watermark(), to.min(l.log_end_offset()));
                    prop_assert!(l.flusher().durable_end() <= to);
                    prop_assert_eq!(l.flusher().written_end(), to);
                    // a wait past the cut is told so, one below it is answered
                    let past = l.flusher().sync_to(to + 1);
                    prop_assert!(matches!(past, Err(sluice_storage::StorageError::Truncated { .. })) || removed == 0, "{:?}", past);
                    prop_assert_eq!(l.flusher().sync_to(to).unwrap(), to);
                    // the segments' statistics: the newest timestamp is the last batch left's
                    if let Some((_, _, bytes)) = m.batches.last().filter(|(_, last, _)| *last >= m.log_start) {
                        let (v, _) = BatchView::parse(bytes).unwrap();
                        prop_assert_eq!(l.max_timestamp().unwrap().map(|(t, _)| t), Some(v.max_timestamp()));
                    }
                }
                Op::Flush => {
                    l.flush().unwrap();
                }
                Op::Reopen { clean } => {
                    let l = log.take().unwrap();
                    if clean { l.close().unwrap(); } else { drop(l); }
                    let reopened = Log::open(&path, small_config()).unwrap();
                    prop_assert_eq!(reopened.recovery_report().clean, clean);
                    prop_assert_eq!(reopened.recovery_report().truncated_bytes, 0);
                    prop_assert!(!reopened.is_offline(), "reopened offline: {:?}", reopened.recovery_report());
                    log = Some(reopened);
                }
            }
            check_contents(log.as_ref().unwrap(), &m);
        }
    }
}

/// Bytes held by segments from `base` on.
fn read_all_size_after(log: &Log, base: i64) -> u64 {
    read_all(log, base.max(log.log_start_offset()))
        .iter()
        .filter(|(b, _)| *b >= base)
        .map(|(_, v)| v.len() as u64)
        .sum()
}

/// ListOffsets MAX_TIMESTAMP as Kafka 3.8+ answers it: the offset of the *record* with the
/// newest timestamp, not its batch's first offset (three records at +100, +400, +250 in one
/// batch: offset 1), compressed or not; the earliest record wins a tie, across segments too.
#[test]
fn max_timestamp_names_the_record_that_carries_it() {
    use sluice_protocol::batch::{BatchBuilder, Compression, NewRecord};
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(&dir.path().join("t-0"), small_config()).unwrap();
    assert_eq!(log.max_timestamp().unwrap(), None, "an empty log has none");
    let t0 = 1_700_000_000_000i64;
    let recs = |deltas: &[i64]| -> Vec<NewRecord> {
        deltas
            .iter()
            .map(|d| NewRecord {
                timestamp: t0 + d,
                value: Some(bytes::Bytes::from_static(b"v")),
                ..Default::default()
            })
            .collect()
    };
    let mut b = BatchBuilder::default().build(&recs(&[100, 400, 250])).unwrap().to_vec();
    log.append_durable(&mut b, t0).unwrap();
    assert_eq!(log.max_timestamp().unwrap(), Some((t0 + 400, 1)));
    // a newer one in an lz4 batch, at its third record (offsets 3..=6)
    let lz4 = BatchBuilder { compression: Compression::Lz4, ..Default::default() };
    let mut b = lz4.build(&recs(&[0, 300, 500, 500])).unwrap().to_vec();
    log.append_durable(&mut b, t0).unwrap();
    assert_eq!(log.max_timestamp().unwrap(), Some((t0 + 500, 5)), "the first record carrying it");
    // the same timestamp again in a later segment: the earliest record still wins
    log.roll().unwrap();
    let mut b = BatchBuilder::default().build(&recs(&[500])).unwrap().to_vec();
    log.append_durable(&mut b, t0).unwrap();
    assert_eq!(log.max_timestamp().unwrap(), Some((t0 + 500, 5)));
}
