//! A replicated partition's leader decides, before it proposes a write, what applying it will
//! do: the [`Verdict`] (the offsets it takes, or the refusal), judged against the partition's
//! applied state *plus every write it has proposed and not yet seen applied* — the tip of the
//! log as the leader will have made it. Decision 0045, step 2: the verdict travels in the Raft
//! command (`PartCommand::Predicted`) and every replica's apply checks it against what it did
//! (`sluice_replication_verdicts_total`), which shows the leader alone can judge — the
//! precondition for one log per replica, where followers only copy what the leader wrote.
//!
//! The tip holds only what proposals changed: the log end after them, the producers they
//! touched, the markers they wrote. Everything else is read from the applied state. It starts
//! again from the applied state when every proposal it predicted has been applied (the applied
//! log end reached its end), when the leader's term changed, or when an apply found a verdict
//! that differed (`stale`).

use super::producer_state::{self, BatchHeader, MarkerHeader, Plan, ProducerEntry, Refusal};
use super::Partition;
pub use crate::replication::types::Verdict;
use crate::sync::OrDie as _;
use sluice_protocol::batch::{BatchView, NO_PRODUCER_ID};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

/// The leader's view ahead of its state machine (see the module's comment).
#[derive(Debug, Default)]
pub struct Tip {
    /// The leader's term it was built in.
    term: i32,
    /// The log end once everything proposed is applied.
    end: i64,
    /// Producers touched by proposals not yet applied, as those proposals leave them.
    producers: HashMap<i64, ProducerEntry>,
    /// Each producer's last marker proposed, by offset.
    markers: HashMap<i64, i64>,
    /// One log per replica: judged writes of this term appended to the log when it started,
    /// and judged writes proposed since (it starts again once all of them are appended).
    base: u64,
    judged: u64,
}

/// The tip, locked: hold it until the write it judged is proposed, so writes reach the Raft
/// log in the order they were judged.
pub struct TipGuard<'a> {
    tip: MutexGuard<'a, Tip>,
    partition: &'a Partition,
}

/// A produce batch's fields a verdict needs.
fn header(batch: &[u8]) -> Option<(i64, BatchHeader, i64)> {
    let v = BatchView::parse_unchecked_crc(batch).ok()?;
    Some((v.producer_id(), BatchHeader::of(&v), i64::from(v.last_offset_delta())))
}

impl Partition {
    /// Lock the tip for a write this leader (in `term`) is about to propose, starting it again
    /// from the applied state when nothing it predicted is still to be applied.
    pub fn tip(&self, term: i32) -> TipGuard<'_> {
        let mut tip = self.tip.lock().or_die();
        let applied_end = self.log().log_end_offset();
        let stale = self.tip_stale.swap(false, Ordering::AcqRel);
        // one log per replica: the log (and the producer state) moves when an entry is
        // appended, not applied, and Raft's own entries take offsets the tip does not predict,
        // so what is still in flight is counted, not measured
        let appended = {
            let (t, n) = *self.appended.lock().or_die();
            if t == term {
                n
            } else {
                0
            }
        };
        let caught_up = if self.is_single_log() { appended >= tip.base + tip.judged } else { applied_end >= tip.end };
        if stale || tip.term != term || caught_up {
            *tip = Tip { term, end: applied_end, base: appended, ..Tip::default() };
        }
        TipGuard { tip, partition: self }
    }

    /// An apply found a verdict that differed: the tip starts again from the applied state.
    pub(crate) fn tip_went_stale(&self) {
        self.tip_stale.store(true, Ordering::Release);
    }
}

impl TipGuard<'_> {
    /// The verdict on a produce batch (`verified`, `from`: KIP-890's verification carried in
    /// the command, as apply checks it), and the tip moved past it. `None`: not judged (a
    /// batch whose header cannot be read; apply refuses or writes it on its own).
    pub fn batch(&mut self, batch: &[u8], now_ms: i64, verified: bool, from: Option<i64>) -> Option<Verdict> {
        let (pid, hdr, delta) = header(batch)?;
        let end = self.tip.end;
        if pid == NO_PRODUCER_ID {
            self.tip.end = end + delta + 1;
            return Some(Verdict::At { first: end, last: end + delta });
        }
        let p = self.partition;
        let producers = p.producers.lock().or_die();
        let entry = self.tip.producers.get(&pid).or_else(|| producers.get(&pid));
        let ended = || from.is_some_and(|from| self.tip.markers.get(&pid).is_some_and(|at| *at >= from));
        let verify = || {
            if verified && !ended() && !from.is_some_and(|from| p.marker_since(pid, from)) {
                Ok(())
            } else {
                Err(Refusal::NotInTransaction)
            }
        };
        let plan = producer_state::decide(entry, &hdr, Some(&verify));
        let entry = entry.cloned();
        drop(producers);
        Some(match plan {
            Plan::Reject(r) => Verdict::Refused(r),
            Plan::Duplicate { first_offset, last_offset } => Verdict::At { first: first_offset, last: last_offset },
            Plan::Append => {
                let mut next = producer_state::apply(entry, &hdr, end, end + delta);
                next.last_timestamp = next.last_timestamp.max(now_ms);
                self.tip.producers.insert(pid, next);
                self.tip.end = end + delta + 1;
                Verdict::At { first: end, last: end + delta }
            }
        })
    }

    /// The verdict on a COMMIT/ABORT marker for `pid`, and the tip moved past it.
    pub fn marker(&mut self, pid: i64, m: &MarkerHeader) -> Verdict {
        let producers = self.partition.producers.lock().or_die();
        let entry = self.tip.producers.get(&pid).or_else(|| producers.get(&pid));
        if let Err(r) = producer_state::check_marker(entry, m) {
            return Verdict::Refused(r);
        }
        let entry = entry.cloned();
        drop(producers);
        let at = self.tip.end;
        let (next, _) = producer_state::apply_marker(entry, m);
        self.tip.producers.insert(pid, next);
        self.tip.markers.insert(pid, at);
        self.tip.end = at + 1;
        Verdict::At { first: at, last: at }
    }

    /// The log end the tip predicts before the next write.
    pub fn end(&self) -> i64 {
        self.tip.end
    }

    /// One log per replica: a write this tip judged was proposed (it is in flight until the
    /// partition's log has it). A retry answered with a batch's offsets takes one offset.
    pub fn proposed(&mut self, takes_offset: bool) {
        self.tip.judged += 1;
        if takes_offset {
            self.tip.end += 1;
        }
    }

    /// The write judged was not proposed (or its outcome is unknown): the next write starts
    /// the tip again from the applied state.
    pub fn abandon(self) {
        self.partition.tip_went_stale();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::types::{PartCommand, PartResult, PartitionLog};
    use proptest::prelude::*;
    use sluice_protocol::batch::{BatchBuilder, NewRecord};
    use sluice_storage::{Log, LogConfig};
    use std::collections::VecDeque;
    use std::sync::Arc;

    #[derive(Debug, Clone)]
    enum Step {
        /// A batch of `n` records from producer `pid` (0: no producer id): the next sequence,
        /// a retry of its last batch, or a sequence out of the air.
        Batch {
            pid: i64,
            epoch: i16,
            seq: SeqChoice,
            n: usize,
            txn: bool,
            verified: bool,
            from_back: i64,
        },
        Marker {
            pid: i64,
            epoch: i16,
            coordinator_epoch: i32,
            commit: bool,
        },
        /// Apply this many of the writes proposed and not yet applied.
        Apply(usize),
        /// Every write applied, then a new term (a new leader, settled).
        NewTerm,
    }

    #[derive(Debug, Clone)]
    enum SeqChoice {
        Next,
        Retry,
        Any(i32),
    }

    fn step() -> impl Strategy<Value = Step> {
        let seq = prop_oneof![4 => Just(SeqChoice::Next), 2 => Just(SeqChoice::Retry), 1 => (0..12i32).prop_map(SeqChoice::Any)];
        prop_oneof![
            6 => (0..4i64, 0..2i16, seq, 1..4usize, any::<bool>(), prop::bool::weighted(0.8), 0..4i64).prop_map(
                |(pid, epoch, seq, n, txn, verified, from_back)| Step::Batch { pid, epoch, seq, n, txn, verified, from_back }
            ),
            2 => (1..4i64, 0..3i16, 0..2i32, any::<bool>())
                .prop_map(|(pid, epoch, coordinator_epoch, commit)| Step::Marker { pid, epoch, coordinator_epoch, commit }),
            3 => (0..6usize).prop_map(Step::Apply),
            1 => Just(Step::NewTerm),
        ]
    }

    fn batch(pid: i64, epoch: i16, seq: i32, n: usize, txn: bool) -> Vec<u8> {
        let recs: Vec<NewRecord> = (0..n)
            .map(|i| NewRecord {
                timestamp: 1000 + i as i64,
                value: Some(bytes::Bytes::from(vec![3u8; 30])),
                ..Default::default()
            })
            .collect();
        let (producer_id, producer_epoch, base_sequence) =
            if pid == 0 { (NO_PRODUCER_ID, -1, -1) } else { (pid, epoch, seq) };
        BatchBuilder {
            producer_id,
            producer_epoch,
            base_sequence,
            transactional: txn && pid != 0,
            ..Default::default()
        }
        .build(&recs)
        .unwrap()
        .to_vec()
    }

    /// What applying did, as a verdict.
    fn done(r: &PartResult) -> Verdict {
        match r {
            PartResult::Appended { first, last, .. } => Verdict::At { first: *first, last: *last },
            PartResult::Refused(r) => Verdict::Refused(*r),
            other => panic!("not a write's result: {other:?}"),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        /// Whatever producers and coordinators send, with any number of writes proposed and not
        /// yet applied, and leaders changing, the verdict the leader judges on the tip is what
        /// applying the write does.
        #[test]
        fn the_leaders_verdict_is_what_applying_does(steps in proptest::collection::vec(step(), 1..120)) {
            let dir = tempfile::tempdir().unwrap();
            let log = Log::open(dir.path(), LogConfig { segment_bytes: 2000, retention_ms: -1, ..LogConfig::default() }).unwrap();
            let p = Arc::new(Partition::new("t".into(), 0, log, Arc::new(tokio::sync::Notify::new())));
            let mut term = 1;
            let mut in_flight: VecDeque<(PartCommand, Verdict)> = VecDeque::new();
            // each producer's last batch sent and the sequence after it
            let mut sent: HashMap<i64, (Vec<u8>, i32)> = HashMap::new();
            let apply = |in_flight: &mut VecDeque<(PartCommand, Verdict)>, n: usize| -> Result<(), TestCaseError> {
                for _ in 0..n {
                    let Some((mut cmd, verdict)) = in_flight.pop_front() else { break };
                    let (result, _) = PartitionLog::apply(&*p, &mut cmd);
                    prop_assert_eq!(done(&result), verdict, "{:?}", cmd.inner());
                }
                Ok(())
            };
            for (i, s) in steps.into_iter().enumerate() {
                let now = 10_000 + i as i64;
                match s {
                    Step::Batch { pid, epoch, seq, n, txn, verified, from_back } => {
                        let b = match (seq, sent.get(&pid)) {
                            (SeqChoice::Retry, Some((last, _))) => last.clone(),
                            (SeqChoice::Next, Some((_, next))) => batch(pid, epoch, *next, n, txn),
                            (SeqChoice::Any(s), _) => batch(pid, epoch, s, n, txn),
                            (_, None) => batch(pid, epoch, 0, n, txn),
                        };
                        let v = BatchView::parse_unchecked_crc(&b).unwrap();
                        sent.insert(pid, (b.clone(), v.last_sequence().wrapping_add(1)));
                        let from = (txn && pid != 0).then(|| (p.log().log_end_offset() - from_back).max(0));
                        let mut tip = p.tip(term);
                        let verdict = tip.batch(&b, now, verified, from).expect("a readable header");
                        let cmd = PartCommand::Produce { batch: b, now_ms: now, verified, verified_from: from };
                        in_flight.push_back((PartCommand::Predicted { cmd: Box::new(cmd), verdict }, verdict));
                    }
                    Step::Marker { pid, epoch, coordinator_epoch, commit } => {
                        let m = MarkerHeader { epoch, coordinator_epoch, commit, timestamp: now };
                        let verdict = p.tip(term).marker(pid, &m);
                        let cmd = PartCommand::Marker { producer_id: pid, epoch, coordinator_epoch, commit, now_ms: now };
                        in_flight.push_back((PartCommand::Predicted { cmd: Box::new(cmd), verdict }, verdict));
                    }
                    Step::Apply(n) => apply(&mut in_flight, n)?,
                    Step::NewTerm => {
                        apply(&mut in_flight, usize::MAX)?;
                        term += 1;
                    }
                }
            }
            apply(&mut in_flight, usize::MAX)?;
        }
    }
}
