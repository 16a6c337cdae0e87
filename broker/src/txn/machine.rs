//! The transaction coordinator's state machine for one transactional id, as pure decisions:
//! each takes the current metadata and a request and returns a [`Decision`] — answer now with
//! nothing changed, refuse with a Kafka error, or a [`Transition`] the runtime must log durably
//! before acting on it (then write markers, then log the completion).
//!
//! States (Kafka's `TransactionState`) and their allowed predecessors:
//! - Empty ← (new), Empty, CompleteCommit, CompleteAbort (InitProducerId: epoch bump);
//! - Ongoing ← Empty, Ongoing, CompleteCommit, CompleteAbort (AddPartitionsToTxn/AddOffsetsToTxn);
//! - PrepareCommit ← Ongoing (EndTxn commit);
//! - PrepareAbort ← Ongoing (EndTxn abort, timeout, or a new instance's InitProducerId: the
//!   epoch is bumped first, which fences the old instance);
//! - CompleteCommit ← PrepareCommit; CompleteAbort ← PrepareAbort (all markers durable);
//! - Dead ← Empty, CompleteCommit, CompleteAbort (`transactional.id.expiration.ms`).

use kafka_protocol::error::ResponseError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    Dead,
}

impl TxnState {
    /// Kafka's names (ListTransactions, DescribeTransactions).
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
        }
    }

    pub fn may_follow(self, prev: Option<TxnState>) -> bool {
        use TxnState::*;
        let Some(prev) = prev else { return self == Empty };
        match self {
            Empty => matches!(prev, Empty | CompleteCommit | CompleteAbort),
            Ongoing => matches!(prev, Empty | Ongoing | CompleteCommit | CompleteAbort),
            PrepareCommit | PrepareAbort => prev == Ongoing,
            CompleteCommit => prev == PrepareCommit,
            CompleteAbort => prev == PrepareAbort,
            Dead => matches!(prev, Empty | CompleteCommit | CompleteAbort),
        }
    }
}

/// What the coordinator knows of one transactional id (Kafka's `TransactionMetadata`), and
/// what its log records hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnMetadata {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// The epoch before the last bump: a retried InitProducerId (KIP-360) carrying it is
    /// answered with the current one instead of being fenced.
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<(String, i32)>,
    /// Consumer groups whose offsets are in the transaction (AddOffsetsToTxn).
    pub groups: BTreeSet<String>,
    pub txn_start_ms: i64,
    pub last_update_ms: i64,
}

/// Markers the runtime must write (after logging `next`) before logging `complete`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Markers {
    pub commit: bool,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub partitions: BTreeSet<(String, i32)>,
    pub groups: BTreeSet<String>,
    pub complete: TxnMetadata,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub next: TxnMetadata,
    pub markers: Option<Markers>,
    /// The answer once done: `None` = success, else this error (e.g. CONCURRENT_TRANSACTIONS
    /// for an InitProducerId that first had to abort the old instance's transaction).
    pub reply_error: Option<ResponseError>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Nothing to change; answer success (a retry of something already done).
    Unchanged,
    Refuse(ResponseError),
    Apply(Box<Transition>),
}

/// Limits the decisions need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnLimits {
    /// `transaction.max.timeout.ms`
    pub max_timeout_ms: i32,
}

fn apply(prev: Option<&TxnMetadata>, next: TxnMetadata, markers: Option<Markers>) -> Decision {
    assert!(
        next.state.may_follow(prev.map(|p| p.state)),
        "illegal transaction transition {:?} -> {:?}",
        prev.map(|p| p.state),
        next.state
    );
    Decision::Apply(Box::new(Transition { next, markers, reply_error: None }))
}

/// Abort `m`'s ongoing transaction with a bumped epoch (fencing the instance that opened it).
fn fence_and_abort(m: &TxnMetadata, now: i64) -> (TxnMetadata, Markers) {
    let mut next = m.clone();
    next.last_producer_epoch = m.producer_epoch;
    next.producer_epoch = m.producer_epoch.saturating_add(1);
    next.state = TxnState::PrepareAbort;
    next.last_update_ms = now;
    let mut complete = next.clone();
    complete.state = TxnState::CompleteAbort;
    complete.partitions.clear();
    complete.groups.clear();
    let markers = Markers {
        commit: false,
        producer_id: next.producer_id,
        producer_epoch: next.producer_epoch,
        partitions: next.partitions.clone(),
        groups: next.groups.clone(),
        complete,
    };
    (next, markers)
}

/// InitProducerId with a transactional id. `fresh_pid` is a never-used producer id the
/// runtime allocated in case one is needed (new id, or epoch exhaustion).
pub fn init_producer_id(
    cur: Option<&TxnMetadata>,
    timeout_ms: i32,
    expected: Option<(i64, i16)>,
    fresh_pid: i64,
    limits: TxnLimits,
    now: i64,
) -> Decision {
    if timeout_ms <= 0 || timeout_ms > limits.max_timeout_ms {
        return Decision::Refuse(ResponseError::InvalidTransactionTimeout);
    }
    let Some(m) = cur else {
        let next = TxnMetadata {
            producer_id: fresh_pid,
            producer_epoch: 0,
            last_producer_epoch: -1,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            groups: BTreeSet::new(),
            txn_start_ms: -1,
            last_update_ms: now,
        };
        return apply(None, next, None);
    };
    if let Some((pid, epoch)) = expected {
        let current = pid == m.producer_id && epoch == m.producer_epoch;
        let retry = pid == m.producer_id && epoch == m.last_producer_epoch && m.state == TxnState::Empty;
        if retry {
            return Decision::Unchanged; // the bump this producer asked for already happened
        }
        if !current {
            return Decision::Refuse(ResponseError::ProducerFenced);
        }
    }
    match m.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort => Decision::Refuse(ResponseError::ConcurrentTransactions),
        TxnState::Ongoing => {
            // A new instance: fence the old one and abort its transaction; the client retries.
            let (next, markers) = fence_and_abort(m, now);
            match apply(Some(m), next, Some(markers)) {
                Decision::Apply(mut t) => {
                    t.reply_error = Some(ResponseError::ConcurrentTransactions);
                    Decision::Apply(t)
                }
                other => other,
            }
        }
        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort | TxnState::Dead => {
            let mut next = m.clone();
            if m.producer_epoch >= i16::MAX - 1 {
                next.producer_id = fresh_pid;
                next.producer_epoch = 0;
                next.last_producer_epoch = -1;
            } else {
                next.last_producer_epoch = m.producer_epoch;
                next.producer_epoch = m.producer_epoch + 1;
            }
            next.timeout_ms = timeout_ms;
            next.state = TxnState::Empty;
            next.partitions.clear();
            next.groups.clear();
            next.txn_start_ms = -1;
            next.last_update_ms = now;
            let prev = if m.state == TxnState::Dead { None } else { Some(m) };
            apply(prev, next, None)
        }
    }
}

fn check_producer(cur: Option<&TxnMetadata>, pid: i64, epoch: i16) -> Result<&TxnMetadata, ResponseError> {
    let m = cur.ok_or(ResponseError::InvalidProducerIdMapping)?;
    if m.producer_id != pid {
        return Err(ResponseError::InvalidProducerIdMapping);
    }
    if epoch != m.producer_epoch {
        return Err(ResponseError::ProducerFenced);
    }
    Ok(m)
}

/// AddPartitionsToTxn (`partitions`) and AddOffsetsToTxn (`group`).
pub fn add_to_txn(
    cur: Option<&TxnMetadata>,
    pid: i64,
    epoch: i16,
    partitions: &[(String, i32)],
    group: Option<&str>,
    now: i64,
) -> Decision {
    let m = match check_producer(cur, pid, epoch) {
        Ok(m) => m,
        Err(e) => return Decision::Refuse(e),
    };
    match m.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort => {
            return Decision::Refuse(ResponseError::ConcurrentTransactions)
        }
        TxnState::Dead => return Decision::Refuse(ResponseError::InvalidProducerIdMapping),
        _ => {}
    }
    let has_all = partitions.iter().all(|p| m.partitions.contains(p)) && group.is_none_or(|g| m.groups.contains(g));
    if m.state == TxnState::Ongoing && has_all {
        return Decision::Unchanged;
    }
    let mut next = m.clone();
    if m.state != TxnState::Ongoing {
        next.txn_start_ms = now;
        next.partitions.clear();
        next.groups.clear();
    }
    next.partitions.extend(partitions.iter().cloned());
    if let Some(g) = group {
        next.groups.insert(g.to_string());
    }
    next.state = TxnState::Ongoing;
    next.last_update_ms = now;
    apply(Some(m), next, None)
}

/// EndTxn. A retry of a decided outcome is answered with it; it never flips a decision.
///
/// Transaction version 2 (`tv2`: EndTxn v5+, KIP-890 part 2): the epoch is bumped with every
/// transaction — the markers carry the new epoch and the answer hands it to the producer — so a
/// delayed request or batch of a finished transaction is fenced instead of landing on the next
/// one. A retry with the previous epoch of a completed transaction gets the outcome again.
/// `fresh_pid` replaces the producer id when the epoch is exhausted.
pub fn end_txn(
    cur: Option<&TxnMetadata>,
    pid: i64,
    epoch: i16,
    commit: bool,
    tv2: bool,
    fresh_pid: i64,
    now: i64,
) -> Decision {
    if tv2 {
        if let Some(m) = cur {
            let done = if commit { TxnState::CompleteCommit } else { TxnState::CompleteAbort };
            let preparing = if commit { TxnState::PrepareCommit } else { TxnState::PrepareAbort };
            let retry = m.producer_id == pid && epoch == m.last_producer_epoch && epoch != m.producer_epoch;
            if retry && m.state == done {
                return Decision::Unchanged;
            }
            if retry && m.state == preparing {
                return Decision::Refuse(ResponseError::ConcurrentTransactions);
            }
        }
    }
    let m = match check_producer(cur, pid, epoch) {
        Ok(m) => m,
        Err(e) => return Decision::Refuse(e),
    };
    match (m.state, commit) {
        (TxnState::Ongoing, _) => {
            let mut next = m.clone();
            next.state = if commit { TxnState::PrepareCommit } else { TxnState::PrepareAbort };
            next.last_update_ms = now;
            if tv2 {
                next.last_producer_epoch = m.producer_epoch;
                next.producer_epoch = m.producer_epoch.saturating_add(1);
            }
            let mut complete = next.clone();
            complete.state = if commit { TxnState::CompleteCommit } else { TxnState::CompleteAbort };
            complete.partitions.clear();
            complete.groups.clear();
            if tv2 && next.producer_epoch >= i16::MAX - 1 {
                // epoch exhausted: the next transaction gets a new producer id
                complete.producer_id = fresh_pid;
                complete.producer_epoch = 0;
                complete.last_producer_epoch = -1;
            }
            let markers = Markers {
                commit,
                producer_id: m.producer_id,
                producer_epoch: next.producer_epoch,
                partitions: m.partitions.clone(),
                groups: m.groups.clone(),
                complete,
            };
            apply(Some(m), next, Some(markers))
        }
        (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => Decision::Unchanged,
        (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => {
            Decision::Refuse(ResponseError::ConcurrentTransactions)
        }
        _ => Decision::Refuse(ResponseError::InvalidTxnState),
    }
}

/// The coordinator's own abort of a transaction open past its timeout (fencing the producer).
pub fn timeout(cur: &TxnMetadata, now: i64) -> Option<Decision> {
    if cur.state != TxnState::Ongoing || now <= cur.txn_start_ms.saturating_add(i64::from(cur.timeout_ms)) {
        return None;
    }
    let (next, markers) = fence_and_abort(cur, now);
    Some(apply(Some(cur), next, Some(markers)))
}

/// `transactional.id.expiration.ms`: an id idle this long with no transaction open is forgotten.
pub fn expired(cur: &TxnMetadata, now: i64, expiration_ms: i64) -> bool {
    matches!(cur.state, TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort)
        && now.saturating_sub(cur.last_update_ms) > expiration_ms
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: TxnLimits = TxnLimits { max_timeout_ms: 900_000 };

    fn applied(d: Decision) -> Transition {
        match d {
            Decision::Apply(t) => *t,
            other => panic!("expected a transition, got {other:?}"),
        }
    }

    fn new_txn() -> TxnMetadata {
        applied(init_producer_id(None, 60_000, None, 77, LIMITS, 0)).next
    }

    #[test]
    fn a_committed_transaction_walks_the_states() {
        let m = new_txn();
        assert_eq!((m.producer_id, m.producer_epoch, m.state), (77, 0, TxnState::Empty));
        let t = applied(add_to_txn(Some(&m), 77, 0, &[("t".into(), 0), ("t".into(), 1)], None, 10));
        assert_eq!(t.next.state, TxnState::Ongoing);
        assert_eq!(t.next.txn_start_ms, 10);
        let m = t.next;
        assert_eq!(add_to_txn(Some(&m), 77, 0, &[("t".into(), 1)], None, 11), Decision::Unchanged);
        let m = applied(add_to_txn(Some(&m), 77, 0, &[], Some("g"), 12)).next;
        assert_eq!(m.txn_start_ms, 10, "adding to an ongoing transaction keeps its start");
        let t = applied(end_txn(Some(&m), 77, 0, true, false, 0, 20));
        assert_eq!(t.next.state, TxnState::PrepareCommit);
        let mk = t.markers.unwrap();
        assert!(mk.commit);
        assert_eq!(mk.partitions.len(), 2);
        assert_eq!(mk.groups.len(), 1);
        assert_eq!(mk.complete.state, TxnState::CompleteCommit);
        let prepared = t.next;
        assert_eq!(
            end_txn(Some(&prepared), 77, 0, true, false, 0, 21),
            Decision::Refuse(ResponseError::ConcurrentTransactions)
        );
        assert_eq!(
            end_txn(Some(&prepared), 77, 0, false, false, 0, 21),
            Decision::Refuse(ResponseError::InvalidTxnState)
        );
        assert_eq!(
            add_to_txn(Some(&prepared), 77, 0, &[("t".into(), 0)], None, 21),
            Decision::Refuse(ResponseError::ConcurrentTransactions)
        );
        let done = mk.complete;
        assert_eq!(
            end_txn(Some(&done), 77, 0, true, false, 0, 22),
            Decision::Unchanged,
            "a retried commit gets the outcome"
        );
        assert_eq!(end_txn(Some(&done), 77, 0, false, false, 0, 22), Decision::Refuse(ResponseError::InvalidTxnState));
        // the next transaction starts fresh
        let t = applied(add_to_txn(Some(&done), 77, 0, &[("u".into(), 0)], None, 30));
        assert_eq!(t.next.partitions.len(), 1);
        assert_eq!(t.next.txn_start_ms, 30);
    }

    #[test]
    fn a_new_instance_fences_the_old_and_aborts_its_transaction() {
        let m = new_txn();
        let m = applied(add_to_txn(Some(&m), 77, 0, &[("t".into(), 0)], None, 10)).next;
        let t = applied(init_producer_id(Some(&m), 60_000, None, 99, LIMITS, 20));
        assert_eq!(t.reply_error, Some(ResponseError::ConcurrentTransactions));
        assert_eq!(t.next.state, TxnState::PrepareAbort);
        assert_eq!(t.next.producer_epoch, 1, "bumped before the abort markers: the old instance is fenced");
        let mk = t.markers.unwrap();
        assert_eq!((mk.commit, mk.producer_epoch), (false, 1));
        // the old instance's requests are fenced from now on
        assert_eq!(end_txn(Some(&t.next), 77, 0, true, false, 0, 21), Decision::Refuse(ResponseError::ProducerFenced));
        // once aborted, the new instance's retry gets the next epoch
        let t = applied(init_producer_id(Some(&mk.complete), 60_000, None, 99, LIMITS, 30));
        assert_eq!((t.next.producer_id, t.next.producer_epoch, t.next.state), (77, 2, TxnState::Empty));
        assert_eq!(
            add_to_txn(Some(&t.next), 77, 1, &[("t".into(), 0)], None, 31),
            Decision::Refuse(ResponseError::ProducerFenced)
        );
    }

    #[test]
    fn timeouts_abort_with_a_fence_and_limits_hold() {
        let m = new_txn();
        let m = applied(add_to_txn(Some(&m), 77, 0, &[("t".into(), 0)], None, 1000)).next;
        assert!(timeout(&m, 61_000).is_none());
        let t = applied(timeout(&m, 61_001).unwrap());
        assert_eq!((t.next.state, t.next.producer_epoch), (TxnState::PrepareAbort, 1));
        assert_eq!(
            init_producer_id(None, 900_001, None, 5, LIMITS, 0),
            Decision::Refuse(ResponseError::InvalidTransactionTimeout)
        );
        assert_eq!(add_to_txn(None, 1, 0, &[], None, 0), Decision::Refuse(ResponseError::InvalidProducerIdMapping));
        assert_eq!(
            end_txn(Some(&m), 78, 0, true, false, 0, 0),
            Decision::Refuse(ResponseError::InvalidProducerIdMapping)
        );
        let empty = new_txn();
        assert_eq!(end_txn(Some(&empty), 77, 0, true, false, 0, 0), Decision::Refuse(ResponseError::InvalidTxnState));
    }

    #[test]
    fn transaction_version_2_bumps_the_epoch_per_transaction() {
        let m = new_txn();
        let m = applied(add_to_txn(Some(&m), 77, 0, &[("t".into(), 0)], None, 1)).next;
        let t = applied(end_txn(Some(&m), 77, 0, true, true, 99, 2));
        assert_eq!((t.next.producer_epoch, t.next.last_producer_epoch), (1, 0));
        let mk = t.markers.unwrap();
        assert_eq!(mk.producer_epoch, 1, "markers carry the new epoch");
        let done = mk.complete;
        assert_eq!((done.producer_id, done.producer_epoch, done.state), (77, 1, TxnState::CompleteCommit));
        // a retried EndTxn with the old epoch gets the outcome; the opposite outcome is fenced
        assert_eq!(end_txn(Some(&done), 77, 0, true, true, 99, 3), Decision::Unchanged);
        assert_eq!(end_txn(Some(&done), 77, 0, false, true, 99, 3), Decision::Refuse(ResponseError::ProducerFenced));
        // the next transaction runs on epoch 1; a delayed EndTxn of the previous one cannot end it
        let next = applied(add_to_txn(Some(&done), 77, 1, &[("t".into(), 0)], None, 4)).next;
        assert_eq!(end_txn(Some(&next), 77, 0, true, true, 99, 5), Decision::Refuse(ResponseError::ProducerFenced));
        assert_eq!(
            add_to_txn(Some(&next), 77, 0, &[("t".into(), 1)], None, 5),
            Decision::Refuse(ResponseError::ProducerFenced)
        );
        // exhausting the epoch rotates the producer id
        let mut old = next.clone();
        old.producer_epoch = i16::MAX - 2;
        let t = applied(end_txn(Some(&old), 77, i16::MAX - 2, false, true, 99, 6));
        let mk = t.markers.unwrap();
        assert_eq!((mk.producer_id, mk.producer_epoch), (77, i16::MAX - 1));
        assert_eq!((mk.complete.producer_id, mk.complete.producer_epoch), (99, 0));
    }

    #[test]
    fn idle_ids_expire_but_never_with_an_open_transaction() {
        let m = new_txn();
        assert!(!expired(&m, 1000, 1000));
        assert!(expired(&m, 1001, 1000));
        let open = applied(add_to_txn(Some(&m), 77, 0, &[("t".into(), 0)], None, 0)).next;
        assert!(!expired(&open, 1_000_000, 1000), "an open transaction is aborted by its timeout, not expired");
    }

    #[test]
    fn kip360_retries_and_epoch_exhaustion() {
        let m = new_txn();
        let bumped = applied(init_producer_id(Some(&m), 60_000, Some((77, 0)), 99, LIMITS, 5)).next;
        assert_eq!(bumped.producer_epoch, 1);
        assert_eq!(init_producer_id(Some(&bumped), 60_000, Some((77, 0)), 99, LIMITS, 6), Decision::Unchanged);
        assert_eq!(
            init_producer_id(Some(&bumped), 60_000, Some((77, 7)), 99, LIMITS, 6),
            Decision::Refuse(ResponseError::ProducerFenced)
        );
        let mut old = bumped.clone();
        old.producer_epoch = i16::MAX - 1;
        let t = applied(init_producer_id(Some(&old), 60_000, None, 99, LIMITS, 7));
        assert_eq!((t.next.producer_id, t.next.producer_epoch), (99, 0));
    }
}
