//! `sluicectl verify PARTITION_DIR`: an offline exactly-once audit of one partition's files
//! (read-only: nothing is modified). Findings, each of which makes the exit code 1:
//! - a batch that fails its CRC or length check, or offsets that are not contiguous;
//! - a batch whose partition leader epoch is not 0 (Sluice stamps 0 on every batch, and the
//!   field is outside the CRC: another value is a damaged field; decision 0043);
//! - per producer id: an epoch that goes backwards, a new epoch not starting at sequence 0, a
//!   sequence gap, or a sequence range written twice (a duplicate);
//! - a transactional batch never closed by a COMMIT/ABORT marker, a marker without an open
//!   transaction;
//! - an ABORT marker without its aborted-transaction index entry, or an index entry without its
//!   ABORT marker.

use anyhow::{Context, Result};
use sluice_protocol::batch::{BatchView, ControlType};
use sluice_storage::txnindex::{AbortedTxn, TXN_ENTRY_BYTES};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

#[derive(Debug, Default, serde::Serialize)]
pub struct Report {
    pub segments: usize,
    pub batches: u64,
    pub records: u64,
    pub producers: usize,
    pub transactions_committed: u64,
    pub transactions_aborted: u64,
    /// Markers for a producer with nothing open on this partition: normal (a partition added to
    /// a transaction that wrote nothing there, or a second abort), counted, not a finding.
    pub markers_without_data: u64,
    pub findings: Vec<String>,
}

fn files(dir: &Path, ext: &str) -> Result<Vec<(i64, std::path::PathBuf)>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let p = e?.path();
        let Some(name) = p.file_name().and_then(|n| n.to_str()) else { continue };
        if let Some(stem) = name.strip_suffix(&format!(".{ext}")) {
            if stem.len() == 20 {
                if let Ok(base) = stem.parse::<i64>() {
                    v.push((base, p.clone()));
                }
            }
        }
    }
    v.sort();
    Ok(v)
}

fn next_seq(s: i32) -> i32 {
    if s == i32::MAX {
        0
    } else {
        s + 1
    }
}

pub fn verify(dir: &Path) -> Result<Report> {
    let mut r = Report::default();
    let logs = files(dir, "log")?;
    if logs.is_empty() {
        anyhow::bail!("{} holds no .log segments (give a partition directory such as data/orders-0)", dir.display());
    }
    r.segments = logs.len();
    // producer id → (epoch, last sequence)
    let mut seqs: BTreeMap<i64, (i16, i32)> = BTreeMap::new();
    // producer id → first offset of its open transaction
    let mut open: BTreeMap<i64, i64> = BTreeMap::new();
    // (producer id, first offset, marker offset) of every ABORT marker
    let mut aborts: BTreeSet<(i64, i64, i64)> = BTreeSet::new();
    let mut expected: Option<i64> = None;
    for (base, path) in &logs {
        let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        let mut pos = 0usize;
        while pos < bytes.len() {
            let (b, size) = match BatchView::parse(&bytes[pos..]) {
                Ok(x) => x,
                Err(e) => {
                    r.findings.push(format!("{}: invalid batch at byte {pos}: {e}", path.display()));
                    break;
                }
            };
            pos += size;
            r.batches += 1;
            r.records += b.records_count().max(0) as u64;
            let at = b.base_offset();
            if b.partition_leader_epoch() != 0 {
                r.findings.push(format!(
                    "offset {at}: partition leader epoch {}, not 0: the field is damaged (it is outside the CRC)",
                    b.partition_leader_epoch()
                ));
            }
            match expected {
                Some(e) if at != e => r.findings.push(format!("offset {at} follows {}: not contiguous", e - 1)),
                None if at < *base => {
                    r.findings.push(format!("{}: first batch at {at}, below the segment base", path.display()))
                }
                _ => {}
            }
            expected = Some(b.last_offset() + 1);
            let pid = b.producer_id();
            if pid < 0 {
                continue;
            }
            if b.is_control() {
                match b.control_marker() {
                    Ok(Some(m)) => match open.remove(&pid) {
                        Some(first) => match m.kind {
                            ControlType::Commit => r.transactions_committed += 1,
                            ControlType::Abort => {
                                r.transactions_aborted += 1;
                                aborts.insert((pid, first, at));
                            }
                        },
                        None => r.markers_without_data += 1,
                    },
                    Ok(None) => {}
                    Err(e) => r.findings.push(format!("offset {at}: undecodable control batch: {e}")),
                }
                continue;
            }
            let (epoch, first, last) = (b.producer_epoch(), b.base_sequence(), b.last_sequence());
            match seqs.get(&pid).copied() {
                None => {
                    if first != 0 {
                        r.findings.push(format!("offset {at}: producer {pid} starts at sequence {first}, not 0"));
                    }
                }
                Some((e, _)) if epoch < e => r.findings.push(format!(
                    "offset {at}: producer {pid} epoch {epoch} after epoch {e} (a fenced writer got in)"
                )),
                Some((e, _)) if epoch > e => {
                    if first != 0 {
                        r.findings.push(format!(
                            "offset {at}: producer {pid} new epoch {epoch} starts at sequence {first}, not 0"
                        ));
                    }
                }
                Some((_, prev)) => {
                    let want = next_seq(prev);
                    if first != want {
                        let what = if first <= prev && first >= 0 { "duplicate" } else { "gap" };
                        r.findings.push(format!(
                            "offset {at}: producer {pid} epoch {epoch} sequence {first}..={last} after {prev}: {what}"
                        ));
                    }
                }
            }
            seqs.insert(pid, (epoch, last));
            if b.is_transactional() {
                open.entry(pid).or_insert(at);
            }
        }
    }
    r.producers = seqs.len();
    for (pid, first) in &open {
        r.findings.push(format!("producer {pid}: transaction open since offset {first} has no marker"));
    }
    // the aborted-transaction index must list exactly the aborted transactions
    let mut indexed: BTreeSet<(i64, i64, i64)> = BTreeSet::new();
    for (_, path) in files(dir, "txnindex")? {
        let bytes = std::fs::read(&path)?;
        for (i, chunk) in bytes.chunks(TXN_ENTRY_BYTES).enumerate() {
            match AbortedTxn::decode(chunk) {
                Some(t) => {
                    indexed.insert((t.producer_id, t.first_offset, t.last_offset));
                }
                None => r.findings.push(format!("{}: entry {i} is corrupt", path.display())),
            }
        }
    }
    for a in aborts.difference(&indexed) {
        r.findings
            .push(format!("ABORT of producer {} at offset {} is missing from the aborted-transaction index", a.0, a.2));
    }
    for a in indexed.difference(&aborts) {
        r.findings.push(format!(
            "aborted-transaction index lists producer {} at {}..={} with no matching ABORT marker",
            a.0, a.1, a.2
        ));
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_protocol::batch::{BatchBuilder, ControlMarker, NewRecord};
    use sluice_storage::{AbortedTxn, Log, LogConfig};

    fn idem(pid: i64, epoch: i16, seq: i32, n: usize, txn: bool) -> Vec<u8> {
        let recs: Vec<NewRecord> = (0..n).map(|_| NewRecord { timestamp: 1, ..Default::default() }).collect();
        BatchBuilder {
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            transactional: txn,
            ..Default::default()
        }
        .build(&recs)
        .unwrap()
        .to_vec()
    }

    #[test]
    fn clean_log_has_no_findings_and_each_defect_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
        log.append(&mut idem(1, 0, 0, 3, false), 0, None).unwrap();
        log.append(&mut idem(1, 0, 3, 2, false), 0, None).unwrap();
        log.append(&mut idem(2, 0, 0, 1, true), 0, None).unwrap(); // offset 5
        let abort = ControlMarker { kind: ControlType::Abort, coordinator_epoch: 0 };
        let mut m = BatchBuilder::control_marker(2, 0, abort, 1).unwrap().to_vec();
        let info = log.append(&mut m, 0, None).unwrap(); // offset 6
        log.append_aborted_txn(AbortedTxn {
            producer_id: 2,
            first_offset: 5,
            last_offset: info.first_offset,
            last_stable_offset: 5,
        })
        .unwrap();
        log.flush().unwrap();
        let r = verify(dir.path()).unwrap();
        assert!(r.findings.is_empty(), "{:?}", r.findings);
        assert_eq!((r.producers, r.transactions_aborted), (2, 1));

        // a duplicate, a gap, an unclosed transaction and a fenced epoch
        log.append(&mut idem(1, 0, 3, 2, false), 0, None).unwrap();
        log.append(&mut idem(1, 0, 9, 1, false), 0, None).unwrap();
        log.append(&mut idem(3, 0, 0, 1, true), 0, None).unwrap();
        log.append(&mut idem(1, 1, 0, 1, false), 0, None).unwrap();
        log.append(&mut idem(1, 0, 10, 1, false), 0, None).unwrap();
        log.flush().unwrap();
        let r = verify(dir.path()).unwrap();
        let all = r.findings.join("\n");
        assert!(all.contains("duplicate"), "{all}");
        assert!(all.contains("gap"), "{all}");
        assert!(all.contains("has no marker"), "{all}");
        assert!(all.contains("fenced writer"), "{all}");
        drop(log);

        // an index entry without its marker
        let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
        let leo = log.log_end_offset();
        log.append(&mut idem(9, 0, 0, 1, false), 0, None).unwrap();
        log.append_aborted_txn(AbortedTxn {
            producer_id: 9,
            first_offset: leo,
            last_offset: leo,
            last_stable_offset: leo,
        })
        .unwrap();
        log.flush().unwrap();
        let all = verify(dir.path()).unwrap().findings.join("\n");
        assert!(all.contains("no matching ABORT marker"), "{all}");
    }

    /// A flipped bit in a batch's partition leader epoch (outside the CRC) is a finding.
    #[test]
    fn a_damaged_partition_leader_epoch_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
        log.append(&mut idem(1, 0, 0, 3, false), 0, None).unwrap();
        let second = log.log_end_offset();
        log.append(&mut idem(1, 0, 3, 2, false), 0, None).unwrap();
        log.flush().unwrap();
        drop(log);
        assert!(verify(dir.path()).unwrap().findings.is_empty());
        let (_, path) = files(dir.path(), "log").unwrap().remove(0);
        let mut bytes = std::fs::read(&path).unwrap();
        let (_, first_len) = BatchView::parse(&bytes).unwrap();
        bytes[first_len + 15] ^= 0x04; // the second batch's epoch (bytes 12..16 of a batch)
        std::fs::write(&path, &bytes).unwrap();
        let all = verify(dir.path()).unwrap().findings.join("\n");
        assert!(all.contains(&format!("offset {second}: partition leader epoch 4, not 0")), "{all}");
    }
}
