//! Turning fetched batches into records, per partition. Pure (no I/O), so it is tested on
//! hand-made logs.
//!
//! read_committed is enforced twice. The broker bounds the answer by the last stable offset and
//! lists the aborted transactions it overlaps (Kafka's rule: a transactional batch of a producer
//! in that list, at or after the listed first offset and before its ABORT marker, is dropped).
//! In addition a transactional record is *held* until this consumer reads its transaction's
//! marker: COMMIT releases it, ABORT drops it. Records are released in offset order, so a held
//! record also holds every record after it — the client keeps its own stable offset, and stays
//! correct against a broker that does not bound by the LSO. Control records never reach the user.

use bytes::Bytes;
use sluice_protocol::batch::{iter_batches, BatchError, ControlType};
use std::collections::{HashSet, VecDeque};

/// A record read from a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Timestamp (ms since the epoch).
    pub timestamp: i64,
    /// Key.
    pub key: Option<Bytes>,
    /// Value.
    pub value: Option<Bytes>,
    /// Headers in order.
    pub headers: Vec<(String, Option<Bytes>)>,
}

#[derive(Debug, Clone)]
struct Held {
    record: ConsumerRecord,
    /// The producer whose open transaction holds the record; `None` once decided.
    pid: Option<i64>,
}

/// Per-partition decoding state.
#[derive(Debug, Default, Clone)]
pub struct PartitionReader {
    /// Next offset to fetch.
    pub fetch_offset: i64,
    read_committed: bool,
    held: VecDeque<Held>,
    /// Producers with transactional data read but no marker yet.
    open: HashSet<i64>,
    /// Producers whose current transaction the broker reported aborted.
    aborted: HashSet<i64>,
}

/// What one fetched chunk added.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Decoded {
    /// Batches consumed.
    pub batches: usize,
    /// The chunk ended in a partial batch (normal: the broker cuts at the size limit).
    pub truncated: bool,
}

impl PartitionReader {
    /// A reader starting at `offset`.
    pub fn new(offset: i64, read_committed: bool) -> PartitionReader {
        PartitionReader { fetch_offset: offset, read_committed, ..Default::default() }
    }

    /// The offset to commit: the first record not yet handed to the user (held ones included).
    pub fn position(&self) -> i64 {
        self.held.front().map_or(self.fetch_offset, |h| h.record.offset)
    }

    /// Records held for an undecided transaction.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Decode a fetched chunk. `aborted` is the response's (producer id, first offset) list.
    pub fn decode(
        &mut self,
        topic: &str,
        partition: i32,
        data: &Bytes,
        aborted: &[(i64, i64)],
    ) -> Result<Decoded, BatchError> {
        let mut out = Decoded::default();
        let mut aborted_list: Vec<(i64, i64)> = aborted.to_vec();
        aborted_list.sort_by_key(|a| a.1);
        let mut next_aborted = 0;
        for item in iter_batches(data) {
            let batch = match item {
                Ok((_, b)) => b,
                Err(BatchError::Truncated { .. }) => {
                    out.truncated = true;
                    break;
                }
                Err(e) => return Err(e),
            };
            out.batches += 1;
            if batch.last_offset() < self.fetch_offset {
                continue;
            }
            // Aborted transactions the broker listed become active as their first offset passes.
            while next_aborted < aborted_list.len() && aborted_list[next_aborted].1 <= batch.last_offset() {
                if self.read_committed {
                    self.aborted.insert(aborted_list[next_aborted].0);
                }
                next_aborted += 1;
            }
            let pid = batch.producer_id();
            if batch.is_control() {
                if let Some(marker) = batch.control_marker()? {
                    if self.read_committed && batch.is_transactional() {
                        self.aborted.remove(&pid);
                        self.open.remove(&pid);
                        match marker.kind {
                            ControlType::Commit => {
                                for h in self.held.iter_mut().filter(|h| h.pid == Some(pid)) {
                                    h.pid = None;
                                }
                            }
                            ControlType::Abort => self.held.retain(|h| h.pid != Some(pid)),
                        }
                    }
                }
                self.fetch_offset = batch.last_offset() + 1;
                continue;
            }
            let txn = self.read_committed && batch.is_transactional();
            if txn && self.aborted.contains(&pid) {
                self.fetch_offset = batch.last_offset() + 1;
                continue;
            }
            if txn {
                self.open.insert(pid);
            }
            for r in batch.records_shared(data)? {
                if r.offset < self.fetch_offset {
                    continue;
                }
                self.held.push_back(Held {
                    record: ConsumerRecord {
                        topic: topic.to_string(),
                        partition,
                        offset: r.offset,
                        timestamp: r.timestamp,
                        key: r.key,
                        value: r.value,
                        headers: r.headers.into_iter().map(|h| (h.key, h.value)).collect(),
                    },
                    pid: if txn { Some(pid) } else { None },
                });
            }
            self.fetch_offset = batch.last_offset() + 1;
        }
        Ok(out)
    }

    /// Take up to `max` decided records, in offset order.
    pub fn take(&mut self, max: usize, out: &mut Vec<ConsumerRecord>) {
        while out.len() < max {
            match self.held.front() {
                Some(h) if h.pid.is_none() => {
                    if let Some(h) = self.held.pop_front() {
                        out.push(h.record);
                    }
                }
                _ => break,
            }
        }
    }

    /// Forget everything read and start again at `offset` (seek, reset).
    pub fn seek(&mut self, offset: i64) {
        let rc = self.read_committed;
        *self = PartitionReader::new(offset, rc);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_protocol::batch::{BatchBuilder, ControlMarker, NewRecord};

    fn log(batches: &[(i64, Bytes)]) -> Bytes {
        let mut out = Vec::new();
        for (base, b) in batches {
            let mut v = b.to_vec();
            sluice_protocol::batch::set_base_offset(&mut v, *base);
            out.extend_from_slice(&v);
        }
        Bytes::from(out)
    }

    fn data(pid: i64, txn: bool, values: &[&str]) -> Bytes {
        let recs: Vec<NewRecord> = values
            .iter()
            .map(|v| NewRecord { timestamp: 1, value: Some(Bytes::from(v.to_string())), ..Default::default() })
            .collect();
        BatchBuilder { producer_id: pid, producer_epoch: 0, base_sequence: 0, transactional: txn, ..Default::default() }
            .build(&recs)
            .expect("batch")
    }

    fn marker(pid: i64, commit: bool) -> Bytes {
        let kind = if commit { ControlType::Commit } else { ControlType::Abort };
        BatchBuilder::control_marker(pid, 0, ControlMarker { kind, coordinator_epoch: 0 }, 1).expect("marker")
    }

    fn values(r: &[ConsumerRecord]) -> Vec<String> {
        r.iter().map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or(b"")).to_string()).collect()
    }

    #[test]
    fn committed_released_at_marker_aborted_dropped_order_kept() {
        // 0-1: txn A; 2: plain; 3: txn B; 4: abort B; 5: commit A; 6: plain
        let l = log(&[
            (0, data(1, true, &["a1", "a2"])),
            (2, data(-1, false, &["p1"])),
            (3, data(2, true, &["b1"])),
            (4, marker(2, false)),
            (5, marker(1, true)),
            (6, data(-1, false, &["p2"])),
        ]);
        let mut r = PartitionReader::new(0, true);
        // First only up to offset 3: nothing may be released, A is undecided.
        let first =
            log(&[(0, data(1, true, &["a1", "a2"])), (2, data(-1, false, &["p1"])), (3, data(2, true, &["b1"]))]);
        r.decode("t", 0, &first, &[]).expect("decode");
        let mut out = Vec::new();
        r.take(100, &mut out);
        assert!(out.is_empty(), "held until the marker");
        assert_eq!(r.position(), 0, "commit position stays before held records");
        r.decode("t", 0, &l, &[]).expect("decode rest");
        r.take(100, &mut out);
        assert_eq!(values(&out), ["a1", "a2", "p1", "p2"]);
        assert_eq!(out.iter().map(|r| r.offset).collect::<Vec<_>>(), [0, 1, 2, 6]);
        assert_eq!(r.position(), 7);
    }

    #[test]
    fn broker_aborted_list_drops_without_waiting() {
        let l = log(&[(0, data(7, true, &["x"])), (1, data(-1, false, &["p"]))]);
        let mut r = PartitionReader::new(0, true);
        r.decode("t", 0, &l, &[(7, 0)]).expect("decode");
        let mut out = Vec::new();
        r.take(10, &mut out);
        assert_eq!(values(&out), ["p"]);
    }

    #[test]
    fn read_uncommitted_sees_everything_but_markers() {
        let l = log(&[(0, data(1, true, &["a"])), (1, marker(1, false)), (2, data(-1, false, &["p"]))]);
        let mut r = PartitionReader::new(0, false);
        r.decode("t", 0, &l, &[(1, 0)]).expect("decode");
        let mut out = Vec::new();
        r.take(10, &mut out);
        assert_eq!(values(&out), ["a", "p"]);
        assert_eq!(r.fetch_offset, 3);
    }

    #[test]
    fn starts_mid_batch_and_stops_at_a_partial_batch() {
        let l = log(&[(0, data(-1, false, &["a", "b", "c"])), (3, data(-1, false, &["d"]))]);
        let mut r = PartitionReader::new(1, true);
        let d = r.decode("t", 0, &l.slice(..l.len() - 5), &[]).expect("decode");
        assert!(d.truncated);
        let mut out = Vec::new();
        r.take(10, &mut out);
        assert_eq!(values(&out), ["b", "c"]);
        assert_eq!(r.fetch_offset, 3);
        let mut bad = l.to_vec();
        let n = bad.len();
        bad[n - 1] ^= 0xff;
        assert!(PartitionReader::new(0, true).decode("t", 0, &Bytes::from(bad), &[]).is_err(), "CRC errors are errors");
    }
}
