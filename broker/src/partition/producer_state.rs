//! Per-partition producer state and the idempotence check (promise 2), as Kafka keeps them
//! (`ProducerStateEntry`, `ProducerAppendInfo`): for each producer id the epoch, the metadata of
//! its last [`BATCHES_RETAINED`] batches, the coordinator epoch and the first offset of its
//! ongoing transaction.
//!
//! Pure functions, no locks, no I/O: [`check`] looks at the state and an incoming batch header
//! and returns a [`Plan`]; the caller appends (or not) and only then calls [`apply`] with the
//! offsets the log assigned — validate on a copy, apply after the append (Kafka's order), so a
//! failed append leaves the state untouched.
//!
//! Transactions: a transactional batch opens a transaction (its first offset bounds the last
//! stable offset) until a COMMIT/ABORT marker closes it ([`check_marker`], [`apply_marker`]).

use std::collections::VecDeque;

/// Kafka's `NUM_BATCHES_TO_RETAIN`: a retry is recognised if it is one of the last five
/// batches, which is why clients keep at most five requests in flight.
pub const BATCHES_RETAINED: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMetadata {
    pub first_seq: i32,
    pub last_seq: i32,
    pub first_offset: i64,
    pub last_offset: i64,
    pub timestamp: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProducerEntry {
    pub epoch: i16,
    /// Oldest first, at most [`BATCHES_RETAINED`].
    pub batches: VecDeque<BatchMetadata>,
    pub coordinator_epoch: i32,
    /// First offset of the ongoing transaction, if one is open.
    pub txn_first_offset: Option<i64>,
    pub last_timestamp: i64,
}

/// The fields of an incoming batch header that the check needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub epoch: i16,
    pub first_seq: i32,
    pub last_seq: i32,
    pub transactional: bool,
    pub max_timestamp: i64,
}

impl BatchHeader {
    /// The fields of `v`'s header the check needs.
    pub fn of(v: &sluice_protocol::batch::BatchView<'_>) -> BatchHeader {
        BatchHeader {
            epoch: v.producer_epoch(),
            first_seq: v.base_sequence(),
            last_seq: v.last_sequence(),
            transactional: v.is_transactional(),
            max_timestamp: v.max_timestamp(),
        }
    }
}

/// Why a batch is refused. Mapped to Kafka codes in `error_map.rs`. (Serializable: it is part
/// of what a replicated partition's state machine answers, `replication::types::PartResult`.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Refusal {
    /// An older epoch than the producer's current one: a zombie (INVALID_PRODUCER_EPOCH).
    InvalidProducerEpoch { current: i16, got: i16 },
    /// A gap or reordering (OUT_OF_ORDER_SEQUENCE_NUMBER).
    OutOfOrderSequence { expected: i32, got: i32 },
    /// A non-transactional batch while the producer has an open transaction (INVALID_TXN_STATE).
    InvalidTxnState,
    /// No state for this producer on this partition and a sequence other than 0
    /// (UNKNOWN_PRODUCER_ID; the client resets its sequence or bumps its epoch, KIP-360).
    UnknownProducerId { got: i32 },
    /// A transaction marker from an older transaction coordinator epoch
    /// (TRANSACTION_COORDINATOR_FENCED).
    CoordinatorFenced { current: i32, got: i32 },
    /// A transactional batch the transaction coordinator does not expect on this partition
    /// (not added to an ongoing transaction, wrong producer, fenced): the Kafka code it gave.
    TxnVerification(i16),
    /// A transactional batch of a replicated partition that is not (or no longer) in its
    /// producer's transaction: unverified, or a marker for the producer was applied since the
    /// verification began (INVALID_TXN_STATE, counted as not in a transaction).
    NotInTransaction,
}

/// A transaction marker (COMMIT/ABORT control batch) for one producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarkerHeader {
    pub epoch: i16,
    pub coordinator_epoch: i32,
    pub commit: bool,
    pub timestamp: i64,
}

/// May this marker be written? Kafka's `appendEndTxnMarker` checks: not from an older producer
/// epoch (a zombie's coordinator request), not from an older coordinator epoch.
pub fn check_marker(entry: Option<&ProducerEntry>, m: &MarkerHeader) -> Result<(), Refusal> {
    let Some(e) = entry else { return Ok(()) };
    if m.epoch < e.epoch {
        return Err(Refusal::InvalidProducerEpoch { current: e.epoch, got: m.epoch });
    }
    if m.coordinator_epoch < e.coordinator_epoch {
        return Err(Refusal::CoordinatorFenced { current: e.coordinator_epoch, got: m.coordinator_epoch });
    }
    Ok(())
}

/// The state after the marker was appended, and the first offset of the transaction it closed
/// (`None` if the producer had no open transaction here: nothing to commit or abort).
pub fn apply_marker(entry: Option<ProducerEntry>, m: &MarkerHeader) -> (ProducerEntry, Option<i64>) {
    let mut e = entry.unwrap_or_default();
    if m.epoch > e.epoch {
        // a bumped epoch (fencing, or a new epoch per transaction): its sequences start over
        e.batches.clear();
        e.epoch = m.epoch;
    }
    e.coordinator_epoch = m.coordinator_epoch;
    e.last_timestamp = e.last_timestamp.max(m.timestamp);
    let first = e.txn_first_offset.take();
    (e, first)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Write it, then [`apply`] with the assigned offsets.
    Append,
    /// An exact retry of a retained batch: answer with its original offsets, write nothing.
    Duplicate {
        first_offset: i64,
        last_offset: i64,
    },
    Reject(Refusal),
}

/// Snapshot payload version (the storage layer frames it with its own version and CRC).
pub const SNAPSHOT_PAYLOAD_VERSION: u8 = 1;

/// Encode every producer's state (deterministic order) for a `<offset>.snapshot` file.
pub fn encode_snapshot<'a>(entries: impl Iterator<Item = (&'a i64, &'a ProducerEntry)>) -> Vec<u8> {
    let mut list: Vec<(&i64, &ProducerEntry)> = entries.collect();
    list.sort_by_key(|(pid, _)| **pid);
    let mut out = Vec::with_capacity(8 + list.len() * 64);
    out.push(SNAPSHOT_PAYLOAD_VERSION);
    out.extend_from_slice(&(list.len() as u32).to_be_bytes());
    for (pid, e) in list {
        out.extend_from_slice(&pid.to_be_bytes());
        out.extend_from_slice(&e.epoch.to_be_bytes());
        out.extend_from_slice(&e.coordinator_epoch.to_be_bytes());
        out.extend_from_slice(&e.txn_first_offset.unwrap_or(-1).to_be_bytes());
        out.extend_from_slice(&e.last_timestamp.to_be_bytes());
        out.push(e.batches.len() as u8);
        for b in &e.batches {
            out.extend_from_slice(&b.first_seq.to_be_bytes());
            out.extend_from_slice(&b.last_seq.to_be_bytes());
            out.extend_from_slice(&b.first_offset.to_be_bytes());
            out.extend_from_slice(&b.last_offset.to_be_bytes());
            out.extend_from_slice(&b.timestamp.to_be_bytes());
        }
    }
    out
}

/// Decode a snapshot payload; `None` if it is malformed (the caller then replays the log).
pub fn decode_snapshot(mut b: &[u8]) -> Option<Vec<(i64, ProducerEntry)>> {
    fn take<const N: usize>(b: &mut &[u8]) -> Option<[u8; N]> {
        let (h, t) = (b.get(..N)?, b.get(N..)?);
        *b = t;
        h.try_into().ok()
    }
    if take::<1>(&mut b)?[0] != SNAPSHOT_PAYLOAD_VERSION {
        return None;
    }
    let n = u32::from_be_bytes(take(&mut b)?) as usize;
    let mut out = Vec::with_capacity(n.min(b.len() / 31 + 1));
    for _ in 0..n {
        let pid = i64::from_be_bytes(take(&mut b)?);
        let epoch = i16::from_be_bytes(take(&mut b)?);
        let coordinator_epoch = i32::from_be_bytes(take(&mut b)?);
        let txn = i64::from_be_bytes(take(&mut b)?);
        let last_timestamp = i64::from_be_bytes(take(&mut b)?);
        let nb = take::<1>(&mut b)?[0] as usize;
        if nb > BATCHES_RETAINED {
            return None;
        }
        let mut batches = VecDeque::with_capacity(nb);
        for _ in 0..nb {
            batches.push_back(BatchMetadata {
                first_seq: i32::from_be_bytes(take(&mut b)?),
                last_seq: i32::from_be_bytes(take(&mut b)?),
                first_offset: i64::from_be_bytes(take(&mut b)?),
                last_offset: i64::from_be_bytes(take(&mut b)?),
                timestamp: i64::from_be_bytes(take(&mut b)?),
            });
        }
        let txn_first_offset = if txn < 0 { None } else { Some(txn) };
        out.push((pid, ProducerEntry { epoch, batches, coordinator_epoch, txn_first_offset, last_timestamp }));
    }
    if !b.is_empty() {
        return None;
    }
    Some(out)
}

/// The sequence after `seq`, wrapping at i32::MAX as Kafka does.
pub fn next_seq(seq: i32) -> i32 {
    if seq == i32::MAX {
        0
    } else {
        seq + 1
    }
}

/// `seq` advanced by `delta` (≥ 0), wrapping at i32::MAX to 0.
pub fn seq_add(seq: i32, delta: i32) -> i32 {
    let room = i32::MAX - seq;
    if delta <= room {
        seq + delta
    } else {
        delta - room - 1
    }
}

/// Records in a batch from its first and last sequence (wrap-aware).
pub fn seq_count(first: i32, last: i32) -> i64 {
    if last >= first {
        i64::from(last) - i64::from(first) + 1
    } else {
        (i64::from(i32::MAX) - i64::from(first)) + i64::from(last) + 2
    }
}

/// Decide what to do with a batch from a producer whose state is `entry`.
///
/// `None` (no state on this partition) accepts only sequence 0, as ../shared/SEMANTICS.md
/// promises: accepting any sequence (Kafka since KIP-360) would let a reordered second batch of
/// a new producer in ahead of its first. Kafka accepts any sequence when the state was
/// *removed* (expiry, retention); the idempotence issue decides that case when it adds expiry.
pub fn check(entry: Option<&ProducerEntry>, b: &BatchHeader) -> Plan {
    let Some(e) = entry else {
        return if b.first_seq == 0 {
            Plan::Append
        } else {
            Plan::Reject(Refusal::UnknownProducerId { got: b.first_seq })
        };
    };
    if b.epoch < e.epoch {
        return Plan::Reject(Refusal::InvalidProducerEpoch { current: e.epoch, got: b.epoch });
    }
    if b.epoch == e.epoch {
        if let Some(d) = e.batches.iter().find(|d| d.first_seq == b.first_seq && d.last_seq == b.last_seq) {
            return Plan::Duplicate { first_offset: d.first_offset, last_offset: d.last_offset };
        }
        let expected = e.batches.back().map(|d| next_seq(d.last_seq)).unwrap_or(0);
        if b.first_seq != expected {
            return Plan::Reject(Refusal::OutOfOrderSequence { expected, got: b.first_seq });
        }
    } else if b.first_seq != 0 {
        // a new epoch starts its sequences at 0
        return Plan::Reject(Refusal::OutOfOrderSequence { expected: 0, got: b.first_seq });
    }
    if !b.transactional && e.txn_first_offset.is_some() {
        return Plan::Reject(Refusal::InvalidTxnState);
    }
    Plan::Append
}

/// [`check`], then KIP-890's guard for a transactional batch that is not an exact retry:
/// `verify` (is the partition in the producer's ongoing transaction?) runs first, as Kafka
/// verifies before the append, so a fenced producer is told so whatever this partition knows of
/// it; no `verify` refuses it. The one decision both the append and a leader's prediction of it
/// (`partition::tip`) make.
pub fn decide(
    entry: Option<&ProducerEntry>,
    b: &BatchHeader,
    verify: Option<&dyn Fn() -> Result<(), Refusal>>,
) -> Plan {
    let plan = check(entry, b);
    if b.transactional && !matches!(plan, Plan::Duplicate { .. }) {
        let Some(verify) = verify else {
            return Plan::Reject(Refusal::InvalidTxnState);
        };
        if let Err(r) = verify() {
            return Plan::Reject(r);
        }
    }
    plan
}

/// The state after `b` was appended at `[first_offset, last_offset]`. Call only after
/// [`check`] said [`Plan::Append`] and the append succeeded.
pub fn apply(entry: Option<ProducerEntry>, b: &BatchHeader, first_offset: i64, last_offset: i64) -> ProducerEntry {
    // a producer no marker has reached yet has no coordinator epoch (-1, as Kafka's
    // DescribeProducers shows it)
    let mut e = entry.unwrap_or(ProducerEntry { coordinator_epoch: -1, ..ProducerEntry::default() });
    if e.batches.is_empty() && e.epoch != b.epoch || b.epoch > e.epoch {
        e.batches.clear();
    }
    assert!(b.epoch >= e.epoch, "apply after a refused epoch");
    e.epoch = b.epoch;
    e.batches.push_back(BatchMetadata {
        first_seq: b.first_seq,
        last_seq: b.last_seq,
        first_offset,
        last_offset,
        timestamp: b.max_timestamp,
    });
    while e.batches.len() > BATCHES_RETAINED {
        e.batches.pop_front();
    }
    e.last_timestamp = b.max_timestamp;
    if b.transactional && e.txn_first_offset.is_none() {
        e.txn_first_offset = Some(first_offset);
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hdr(epoch: i16, first_seq: i32, count: i32) -> BatchHeader {
        BatchHeader {
            epoch,
            first_seq,
            last_seq: seq_add(first_seq, count - 1),
            transactional: false,
            max_timestamp: 0,
        }
    }

    #[test]
    fn snapshot_roundtrip_and_garbage() {
        let mut m = std::collections::HashMap::new();
        let mut e = None;
        for i in 0..7 {
            e = Some(apply(e, &hdr(2, i * 3, 3), i64::from(i) * 10, i64::from(i) * 10 + 2));
        }
        m.insert(42i64, e.unwrap());
        m.insert(7i64, apply(None, &BatchHeader { transactional: true, ..hdr(0, 0, 1) }, 99, 99));
        let bytes = encode_snapshot(m.iter());
        let back: std::collections::HashMap<i64, ProducerEntry> =
            decode_snapshot(&bytes).unwrap().into_iter().collect();
        assert_eq!(back, m);
        for cut in 0..bytes.len() {
            assert!(decode_snapshot(&bytes[..cut]).is_none());
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode_snapshot(&longer).is_none());
    }

    #[test]
    fn sequence_arithmetic_wraps_like_kafka() {
        assert_eq!(seq_add(i32::MAX, 1), 0);
        assert_eq!(seq_add(i32::MAX - 1, 3), 1);
        assert_eq!(seq_count(i32::MAX - 1, 1), 4);
        assert_eq!(seq_count(5, 5), 1);
    }

    #[test]
    fn rules() {
        let e = apply(None, &hdr(0, 0, 3), 10, 12);
        assert_eq!(check(Some(&e), &hdr(0, 3, 1)), Plan::Append);
        assert_eq!(check(Some(&e), &hdr(0, 0, 3)), Plan::Duplicate { first_offset: 10, last_offset: 12 });
        assert_eq!(check(Some(&e), &hdr(0, 5, 1)), Plan::Reject(Refusal::OutOfOrderSequence { expected: 3, got: 5 }));
        // a partial overlap is not a duplicate
        assert!(matches!(check(Some(&e), &hdr(0, 1, 2)), Plan::Reject(Refusal::OutOfOrderSequence { .. })));
        let bumped = apply(Some(e.clone()), &hdr(1, 0, 1), 13, 13);
        assert_eq!(
            check(Some(&bumped), &hdr(0, 3, 1)),
            Plan::Reject(Refusal::InvalidProducerEpoch { current: 1, got: 0 })
        );
        assert!(matches!(
            check(Some(&e), &hdr(2, 7, 1)),
            Plan::Reject(Refusal::OutOfOrderSequence { expected: 0, .. })
        ));
        assert_eq!(check(None, &hdr(4, 0, 1)), Plan::Append);
        assert_eq!(check(None, &hdr(4, 1234, 1)), Plan::Reject(Refusal::UnknownProducerId { got: 1234 }));
        // sequences wrap at i32::MAX
        let w = apply(Some(ProducerEntry::default()), &hdr(0, i32::MAX - 1, 2), 0, 1);
        assert_eq!(check(Some(&w), &hdr(0, 0, 1)), Plan::Append);
        // an open transaction refuses plain batches
        let t = apply(None, &BatchHeader { transactional: true, ..hdr(0, 0, 1) }, 5, 5);
        assert_eq!(t.txn_first_offset, Some(5));
        assert_eq!(check(Some(&t), &hdr(0, 1, 1)), Plan::Reject(Refusal::InvalidTxnState));
        // only the last five batches are retained
        let mut e = None;
        for i in 0..7 {
            e = Some(apply(e, &hdr(0, i, 1), i64::from(i), i64::from(i)));
        }
        let e = e.unwrap();
        assert_eq!(e.batches.len(), BATCHES_RETAINED);
        assert!(matches!(check(Some(&e), &hdr(0, 1, 1)), Plan::Reject(Refusal::OutOfOrderSequence { .. })));
        assert_eq!(check(Some(&e), &hdr(0, 2, 1)), Plan::Duplicate { first_offset: 2, last_offset: 2 });
    }

    /// One delivery attempt in a simulated client/network schedule.
    #[derive(Debug, Clone)]
    enum Step {
        /// Deliver the next new batch.
        Next,
        /// Re-deliver batch `back` places before the newest sent one (a retry after a lost
        /// response), within the client's in-flight window.
        Retry { back: usize },
        /// Deliver the batch after next before the next one (pipelined requests reordered by a
        /// failed connection), then both in order, as a client's retry does.
        Reorder,
        /// The producer bumps its epoch (KIP-360) and starts sequences at 0; a zombie with the
        /// old epoch then sends once more.
        BumpEpoch,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            6 => Just(Step::Next),
            3 => (0usize..BATCHES_RETAINED).prop_map(|back| Step::Retry { back }),
            1 => Just(Step::Reorder),
            1 => Just(Step::BumpEpoch),
        ]
    }

    #[test]
    fn markers_close_transactions() {
        let txn = |epoch, seq, n| BatchHeader { transactional: true, ..hdr(epoch, seq, n) };
        let m = |epoch, ce, commit| MarkerHeader { epoch, coordinator_epoch: ce, commit, timestamp: 0 };
        let e = apply(None, &txn(3, 0, 2), 100, 101);
        assert_eq!(e.txn_first_offset, Some(100));
        let e = apply(Some(e), &txn(3, 2, 1), 105, 105);
        assert_eq!(e.txn_first_offset, Some(100), "the first offset stays the transaction's first");
        assert_eq!(check(Some(&e), &hdr(3, 3, 1)), Plan::Reject(Refusal::InvalidTxnState));
        assert_eq!(check_marker(Some(&e), &m(2, 0, true)), Err(Refusal::InvalidProducerEpoch { current: 3, got: 2 }));
        let (e, first) = apply_marker(Some(e), &m(3, 5, false));
        assert_eq!(first, Some(100));
        assert_eq!(e.txn_first_offset, None);
        assert_eq!(e.coordinator_epoch, 5);
        assert_eq!(check_marker(Some(&e), &m(3, 4, true)), Err(Refusal::CoordinatorFenced { current: 5, got: 4 }));
        assert_eq!(check(Some(&e), &hdr(3, 3, 1)), Plan::Append, "after the marker, plain batches again");
        // a marker with a bumped epoch (a fenced producer's transaction aborted) resets sequences
        let (e, first) = apply_marker(Some(e), &m(4, 5, false));
        assert_eq!(first, None, "nothing open: nothing to abort");
        assert_eq!(e.epoch, 4);
        assert!(e.batches.is_empty());
        assert_eq!(check(Some(&e), &txn(4, 0, 1)), Plan::Append);
        assert_eq!(check(Some(&e), &txn(3, 4, 1)), Plan::Reject(Refusal::InvalidProducerEpoch { current: 4, got: 3 }));
    }

    proptest! {
        /// Exactly once, in order: whatever retries (within five in flight) and reorderings the
        /// network causes, the log holds every batch the producer sent exactly once, in send
        /// order, and every retry is answered with the original offsets.
        #[test]
        fn every_batch_exactly_once_in_order(steps in proptest::collection::vec(step(), 1..200),
                                             counts in proptest::collection::vec(1i32..20, 200)) {
            // a producer that already wrote up to i32::MAX - 31, so sequences wrap during the run
            let seed = BatchHeader { epoch: 0, first_seq: i32::MAX - 40, last_seq: i32::MAX - 31, transactional: false, max_timestamp: 0 };
            let mut state: Option<ProducerEntry> = Some(apply(Some(ProducerEntry::default()), &seed, 0, 9));
            let mut log: Vec<(i16, i32, i32)> = Vec::new(); // (epoch, first_seq, last_seq) per append
            let mut offsets: Vec<(i64, i64)> = Vec::new(); // per sent batch index in this epoch
            let mut sent: Vec<BatchHeader> = Vec::new();   // batches of the current epoch, in order
            let mut epoch: i16 = 0;
            let mut next_first: i32 = i32::MAX - 30;
            let mut leo: i64 = 10;
            let mut k = 0usize;
            let deliver = |state: &mut Option<ProducerEntry>, b: &BatchHeader, log: &mut Vec<(i16, i32, i32)>, leo: &mut i64| -> Plan {
                let plan = check(state.as_ref(), b);
                if plan == Plan::Append {
                    let n = seq_count(b.first_seq, b.last_seq);
                    let (f, l) = (*leo, *leo + n - 1);
                    *leo += n;
                    log.push((b.epoch, b.first_seq, b.last_seq));
                    *state = Some(apply(state.take(), b, f, l));
                }
                plan
            };
            let new_batch = |epoch: i16, next_first: &mut i32, k: &mut usize| {
                let count = counts[*k % counts.len()];
                *k += 1;
                let b = BatchHeader { epoch, first_seq: *next_first, last_seq: seq_add(*next_first, count - 1), transactional: false, max_timestamp: 0 };
                *next_first = seq_add(*next_first, count);
                b
            };
            for s in steps {
                match s {
                    Step::Next => {
                        let b = new_batch(epoch, &mut next_first, &mut k);
                        let before = leo;
                        prop_assert_eq!(deliver(&mut state, &b, &mut log, &mut leo), Plan::Append);
                        offsets.push((before, leo - 1));
                        sent.push(b);
                    }
                    Step::Retry { back } => {
                        if back < sent.len() {
                            let i = sent.len() - 1 - back;
                            let plan = deliver(&mut state, &sent[i], &mut log, &mut leo);
                            prop_assert_eq!(plan, Plan::Duplicate { first_offset: offsets[i].0, last_offset: offsets[i].1 });
                        }
                    }
                    Step::Reorder => {
                        let b1 = new_batch(epoch, &mut next_first, &mut k);
                        let b2 = new_batch(epoch, &mut next_first, &mut k);
                        let p2 = deliver(&mut state, &b2, &mut log, &mut leo);
                        prop_assert!(
                            matches!(p2, Plan::Reject(Refusal::OutOfOrderSequence { .. } | Refusal::UnknownProducerId { .. })),
                            "reordered: {:?}", p2
                        );
                        for b in [b1, b2] {
                            let before = leo;
                            prop_assert_eq!(deliver(&mut state, &b, &mut log, &mut leo), Plan::Append);
                            offsets.push((before, leo - 1));
                            sent.push(b);
                        }
                    }
                    Step::BumpEpoch => {
                        let zombie = new_batch(epoch, &mut next_first, &mut k);
                        epoch += 1;
                        next_first = 0;
                        sent.clear();
                        offsets.clear();
                        let b = new_batch(epoch, &mut next_first, &mut k);
                        let before = leo;
                        prop_assert_eq!(deliver(&mut state, &b, &mut log, &mut leo), Plan::Append);
                        offsets.push((before, leo - 1));
                        sent.push(b);
                        let pz = deliver(&mut state, &zombie, &mut log, &mut leo);
                        prop_assert!(matches!(pz, Plan::Reject(Refusal::InvalidProducerEpoch { .. })), "zombie: {:?}", pz);
                    }
                }
            }
            // the log: no batch twice, and within each epoch sequences are contiguous
            for w in log.windows(2) {
                let ((e1, _, l1), (e2, f2, _)) = (w[0], w[1]);
                if e1 == e2 {
                    prop_assert_eq!(f2, next_seq(l1), "contiguous within an epoch");
                } else {
                    prop_assert!(e2 > e1 && f2 == 0, "a new epoch starts at sequence 0");
                }
            }
        }
    }
}
