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
//!   epoch is bumped first, which fences the old instance); with transaction version 2 also
//!   ← Empty, CompleteCommit, CompleteAbort (an abort with no partition added, Kafka 4.x);
//! - CompleteCommit ← PrepareCommit; CompleteAbort ← PrepareAbort (all markers durable);
//! - Dead ← Empty, CompleteCommit, CompleteAbort (`transactional.id.expiration.ms`).

use crate::txn::error::TxnError;
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
            PrepareCommit => prev == Ongoing,
            // transaction version 2 may abort with no partition added (Kafka 4.x)
            PrepareAbort => matches!(prev, Ongoing | Empty | CompleteCommit | CompleteAbort),
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
    /// The producer id before the last transition (Kafka's `prevProducerId`): after a rotation
    /// at epoch exhaustion, a retry carrying the old id is recognised.
    #[serde(default = "no_producer_id")]
    pub prev_producer_id: i64,
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
    /// KIP-939: the producer uses two-phase commit (InitProducerId `Enable2Pc`): its
    /// transaction may stay prepared while an external coordinator decides, so the timeout never
    /// aborts it (Kafka stores `Integer.MAX_VALUE` as its timeout, as `timeout_ms` here).
    #[serde(default, skip_serializing_if = "is_false")]
    pub two_phase: bool,
    /// The producer id and epoch that opened the ongoing transaction (KIP-939's
    /// `OngoingTxnProducerId`/`Epoch`): a new instance that keeps the prepared transaction
    /// (`KeepPreparedTxn`) gets a bumped epoch, and this pair still names the transaction the
    /// external coordinator recorded. (-1, -1) until a new instance keeps the transaction: the
    /// epoch of an ongoing transaction changes only then, so until then it is the current pair.
    #[serde(default = "no_producer", skip_serializing_if = "is_no_producer")]
    pub txn_producer: (i64, i16),
    /// Sluice: when the producer marked the ongoing 2PC transaction prepared ([`prepare`]);
    /// -1 when it has not. Meaningful only while the state is Ongoing.
    #[serde(default = "no_time", skip_serializing_if = "is_negative")]
    pub prepared_ms: i64,
    /// Sluice: a 2PC producer that marks its transactions prepared keeps this timeout until it
    /// does (0: KIP-939's rule, no timeout at all).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unprepared_timeout_ms: i32,
    /// Sluice: the producer's heartbeat interval (0: it does not heartbeat).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub heartbeat_interval_ms: i32,
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
    pub reply_error: Option<TxnError>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Nothing to change; answer success (a retry of something already done).
    Unchanged,
    Refuse(TxnError),
    Apply(Box<Transition>),
}

/// Limits the decisions need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnLimits {
    /// `transaction.max.timeout.ms`
    pub max_timeout_ms: i32,
    /// `transaction.two.phase.commit.enable` (KIP-939)
    pub two_phase_commit: bool,
}

fn no_producer_id() -> i64 {
    -1
}

fn no_producer() -> (i64, i16) {
    (-1, -1)
}

fn no_time() -> i64 {
    -1
}

// Fields at their defaults are left out of the log records (a record of a transaction that uses
// none of KIP-939 or Sluice's liveness is as it was before them).
fn is_false(v: &bool) -> bool {
    !*v
}

fn is_no_producer(v: &(i64, i16)) -> bool {
    *v == (-1, -1)
}

fn is_negative(v: &i64) -> bool {
    *v < 0
}

fn is_zero(v: &i32) -> bool {
    *v == 0
}

impl TxnMetadata {
    /// KIP-939's answer to a `KeepPreparedTxn` InitProducerId: the producer id and epoch of the
    /// ongoing transaction, (-1, -1) when none is ongoing.
    pub fn ongoing_txn_producer(&self) -> (i64, i16) {
        if self.state != TxnState::Ongoing {
            (-1, -1)
        } else if self.txn_producer.0 >= 0 {
            self.txn_producer
        } else {
            (self.producer_id, self.producer_epoch)
        }
    }

    /// An ongoing 2PC transaction its producer marked prepared: it waits for its outcome.
    pub fn is_prepared(&self) -> bool {
        self.state == TxnState::Ongoing && self.two_phase && self.prepared_ms >= 0
    }
}

/// KIP-939's InitProducerId fields (version 6+), and Sluice's liveness options (a tagged field
/// Kafka brokers skip, sent only by clients that know it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InitOptions {
    /// `Enable2Pc`: the producer's transactions are completed by an external coordinator.
    pub enable_2pc: bool,
    /// `KeepPreparedTxn`: keep the ongoing transaction (this new instance will commit or abort
    /// it) instead of aborting it.
    pub keep_prepared: bool,
    /// Sluice: the producer marks each transaction prepared ([`prepare`]); until then the
    /// transaction keeps the requested timeout (2PC only).
    pub explicit_prepare: bool,
    /// Sluice: the producer heartbeats this often (ms, 0: never); an unprepared transaction
    /// whose producer misses enough heartbeats is aborted ([`timeout`]).
    pub heartbeat_interval_ms: i32,
}

/// Kafka's `isEpochExhausted`: no client is handed an epoch above `Short.MAX_VALUE - 1`, so the
/// coordinator can always fence it with one more.
pub fn epoch_exhausted(epoch: i16) -> bool {
    epoch >= i16::MAX - 1
}

/// A never-used producer id, allocated only when one is needed (a new transactional id, or a
/// rotation at epoch exhaustion).
pub type FreshPid<'a> = &'a mut dyn FnMut() -> Result<i64, TxnError>;

fn apply(prev: Option<&TxnMetadata>, mut next: TxnMetadata, markers: Option<Markers>) -> Decision {
    // Kafka's `prevProducerId`: the id before this transition
    next.prev_producer_id = prev.map(|p| p.producer_id).unwrap_or(-1);
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
    complete.prev_producer_id = next.producer_id;
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

/// InitProducerId with a transactional id (Kafka's `prepareInitProducerIdTransit`). `expected`
/// is the producer's current id and epoch (KIP-360, v3+) when it asks for a bump after an error.
pub fn init_producer_id(
    cur: Option<&TxnMetadata>,
    timeout_ms: i32,
    expected: Option<(i64, i16)>,
    fresh_pid: FreshPid<'_>,
    limits: TxnLimits,
    now: i64,
) -> Decision {
    init_producer_id_with(cur, timeout_ms, expected, InitOptions::default(), fresh_pid, limits, now)
}

/// InitProducerId with KIP-939's fields. Two-phase commit (`opts.enable_2pc`) needs
/// `transaction.two.phase.commit.enable` (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka);
/// its timeout is exempt from `transaction.max.timeout.ms` and stored as `i32::MAX` (never
/// expires). `keep_prepared` with an ongoing transaction bumps the epoch (fencing the instance
/// that prepared it) and keeps the transaction — its partitions, offsets and start — for this
/// instance to commit or abort; without it an ongoing transaction is aborted as always.
pub fn init_producer_id_with(
    cur: Option<&TxnMetadata>,
    timeout_ms: i32,
    expected: Option<(i64, i16)>,
    opts: InitOptions,
    fresh_pid: FreshPid<'_>,
    limits: TxnLimits,
    now: i64,
) -> Decision {
    if opts.keep_prepared && !opts.enable_2pc {
        return Decision::Refuse(TxnError::InvalidRequest);
    }
    if opts.enable_2pc && !limits.two_phase_commit {
        return Decision::Refuse(TxnError::TwoPhaseCommitDisabled);
    }
    let requested = timeout_ms;
    if (!opts.enable_2pc || opts.explicit_prepare) && (requested <= 0 || requested > limits.max_timeout_ms) {
        return Decision::Refuse(TxnError::InvalidTransactionTimeout);
    }
    if opts.heartbeat_interval_ms < 0 {
        return Decision::Refuse(TxnError::InvalidRequest);
    }
    let timeout_ms = if opts.enable_2pc { i32::MAX } else { requested };
    // Sluice's liveness options, as the producer declared them
    let unprepared_timeout_ms = if opts.enable_2pc && opts.explicit_prepare { requested } else { 0 };
    let liveness = |next: &mut TxnMetadata| {
        next.unprepared_timeout_ms = unprepared_timeout_ms;
        next.heartbeat_interval_ms = opts.heartbeat_interval_ms;
    };
    let Some(m) = cur else {
        let producer_id = match fresh_pid() {
            Ok(p) => p,
            Err(e) => return Decision::Refuse(e),
        };
        let next = TxnMetadata {
            producer_id,
            prev_producer_id: -1,
            producer_epoch: 0,
            last_producer_epoch: -1,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            groups: BTreeSet::new(),
            txn_start_ms: -1,
            last_update_ms: now,
            two_phase: opts.enable_2pc,
            txn_producer: (-1, -1),
            prepared_ms: -1,
            unprepared_timeout_ms,
            heartbeat_interval_ms: opts.heartbeat_interval_ms,
        };
        return apply(None, next, None);
    };
    if let Some((pid, epoch)) = expected {
        // Kafka's `isValidProducerId`: the current id, or the id before a rotation when the
        // request carries an exhausted epoch (a retry of the bump that rotated it)
        let valid =
            m.producer_epoch < 0 || pid == m.producer_id || (pid == m.prev_producer_id && epoch_exhausted(epoch));
        if !valid {
            return Decision::Refuse(TxnError::ProducerFenced);
        }
    }
    match m.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort => Decision::Refuse(TxnError::ConcurrentTransactions),
        TxnState::Ongoing if opts.keep_prepared => {
            // KIP-939: a new instance keeps the prepared transaction; the bump fences the old one
            let mut next = m.clone();
            next.last_producer_epoch = m.producer_epoch;
            next.producer_epoch = m.producer_epoch.saturating_add(1);
            next.timeout_ms = timeout_ms;
            next.two_phase = true;
            if next.txn_producer.0 < 0 {
                next.txn_producer = (m.producer_id, m.producer_epoch);
            }
            liveness(&mut next);
            next.last_update_ms = now;
            apply(Some(m), next, None)
        }
        TxnState::Ongoing => {
            // A new instance: fence the old one and abort its transaction; the client retries.
            let (next, markers) = fence_and_abort(m, now);
            match apply(Some(m), next, Some(markers)) {
                Decision::Apply(mut t) => {
                    t.reply_error = Some(TxnError::ConcurrentTransactions);
                    Decision::Apply(t)
                }
                other => other,
            }
        }
        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort | TxnState::Dead => {
            let mut next = m.clone();
            if epoch_exhausted(m.producer_epoch) && expected.is_none_or(|(_, e)| e == m.producer_epoch) {
                // rotation: a new id at epoch 0
                next.producer_id = match fresh_pid() {
                    Ok(p) => p,
                    Err(e) => return Decision::Refuse(e),
                };
                next.producer_epoch = 0;
                next.last_producer_epoch = if expected.is_some() { m.producer_epoch } else { -1 };
            } else {
                // Kafka's `prepareIncrementProducerEpoch`
                match expected {
                    None => {
                        next.producer_epoch = m.producer_epoch + 1;
                        next.last_producer_epoch = -1;
                    }
                    Some((_, e)) if m.producer_epoch < 0 || e == m.producer_epoch => {
                        next.producer_epoch = m.producer_epoch + 1;
                        next.last_producer_epoch = m.producer_epoch;
                    }
                    // a retry of a bump that happened (its answer was lost): the current epoch
                    Some((_, e)) if e == m.last_producer_epoch && m.state == TxnState::Empty => {
                        return Decision::Unchanged
                    }
                    Some((_, e)) if e == m.last_producer_epoch => {}
                    Some(_) => return Decision::Refuse(TxnError::ProducerFenced),
                }
            }
            next.timeout_ms = timeout_ms;
            next.two_phase = opts.enable_2pc;
            liveness(&mut next);
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

fn check_producer(cur: Option<&TxnMetadata>, pid: i64, epoch: i16) -> Result<&TxnMetadata, TxnError> {
    let m = cur.ok_or(TxnError::InvalidProducerIdMapping)?;
    if m.producer_id != pid {
        return Err(TxnError::InvalidProducerIdMapping);
    }
    if epoch != m.producer_epoch {
        return Err(TxnError::ProducerFenced);
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
        TxnState::PrepareCommit | TxnState::PrepareAbort => return Decision::Refuse(TxnError::ConcurrentTransactions),
        TxnState::Dead => return Decision::Refuse(TxnError::InvalidProducerIdMapping),
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
        next.txn_producer = (-1, -1);
        next.prepared_ms = -1;
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
/// Transaction version 2 (`tv2`: EndTxn v5+, KIP-890 part 2): see [`end_txn_v2`].
pub fn end_txn(
    cur: Option<&TxnMetadata>,
    pid: i64,
    epoch: i16,
    commit: bool,
    tv2: bool,
    fresh_pid: FreshPid<'_>,
    now: i64,
) -> Decision {
    if tv2 {
        return end_txn_v2(cur, pid, epoch, commit, fresh_pid, now);
    }
    let m = match check_producer(cur, pid, epoch) {
        Ok(m) => m,
        Err(e) => return Decision::Refuse(e),
    };
    match (m.state, commit) {
        (TxnState::Ongoing, _) => {
            let state = if commit { TxnState::PrepareCommit } else { TxnState::PrepareAbort };
            let mut next = m.clone();
            next.state = state;
            next.last_update_ms = now;
            let mut complete = next.clone();
            complete.state = if commit { TxnState::CompleteCommit } else { TxnState::CompleteAbort };
            complete.prev_producer_id = next.producer_id;
            complete.partitions.clear();
            complete.groups.clear();
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
            Decision::Refuse(TxnError::ConcurrentTransactions)
        }
        _ => Decision::Refuse(TxnError::InvalidTxnState),
    }
}

/// EndTxn with transaction version 2, as Kafka 4.x's `endTransaction`: every transaction ends
/// with an epoch bump — the markers carry the new epoch and the answer hands it to the producer
/// — so a delayed request or batch of a finished transaction is fenced instead of landing on
/// the next one. A retry (the epoch just before the bump, or the old id after a rotation) gets
/// the outcome again. An abort with no partition added (states Empty, CompleteCommit,
/// CompleteAbort) goes through PrepareAbort too, with nothing to mark, and bumps the epoch. When
/// the current epoch is exhausted, the markers carry `i16::MAX` and the next transaction gets a
/// new producer id at epoch 0.
fn end_txn_v2(
    cur: Option<&TxnMetadata>,
    pid: i64,
    epoch: i16,
    commit: bool,
    fresh_pid: FreshPid<'_>,
    now: i64,
) -> Decision {
    use TxnState::*;
    let Some(m) = cur else { return Decision::Refuse(TxnError::InvalidProducerIdMapping) };
    let retry_on_overflow = m.prev_producer_id == pid && epoch == i16::MAX - 1 && m.producer_epoch == 0;
    let retry_on_bump = i32::from(m.producer_epoch) == i32::from(epoch) + 1;
    if m.producer_id != pid && !retry_on_overflow {
        return Decision::Refuse(TxnError::InvalidProducerIdMapping);
    }
    let valid_epoch = match m.state {
        Ongoing | Empty | Dead => epoch == m.producer_epoch,
        PrepareCommit | PrepareAbort => retry_on_bump,
        CompleteCommit | CompleteAbort => retry_on_bump || retry_on_overflow || epoch == m.producer_epoch,
    };
    if !valid_epoch {
        return Decision::Refuse(TxnError::ProducerFenced);
    }
    let retry = retry_on_bump || retry_on_overflow;
    let mut prepare = |state: TxnState, no_partition_added: bool| -> Decision {
        let rotate_to = if epoch_exhausted(m.producer_epoch) {
            match fresh_pid() {
                Ok(p) => Some(p),
                Err(e) => return Decision::Refuse(e),
            }
        } else {
            None
        };
        let mut next = m.clone();
        next.state = state;
        next.last_producer_epoch = m.producer_epoch;
        next.producer_epoch = m.producer_epoch.saturating_add(1);
        if no_partition_added {
            next.txn_start_ms = now;
            next.partitions.clear();
            next.groups.clear();
        }
        next.last_update_ms = now;
        let mut complete = next.clone();
        complete.state = if state == PrepareCommit { CompleteCommit } else { CompleteAbort };
        complete.prev_producer_id = next.producer_id;
        complete.partitions.clear();
        complete.groups.clear();
        if let Some(p) = rotate_to {
            complete.producer_id = p;
            complete.producer_epoch = 0;
            // what the client last saw before the rotation (Kafka's `prepareComplete`)
            complete.last_producer_epoch = m.producer_epoch;
        }
        let markers = Markers {
            commit: state == PrepareCommit,
            producer_id: m.producer_id,
            producer_epoch: next.producer_epoch,
            partitions: next.partitions.clone(),
            groups: next.groups.clone(),
            complete,
        };
        apply(Some(m), next, Some(markers))
    };
    match (m.state, commit) {
        (Ongoing, true) => prepare(PrepareCommit, false),
        (Ongoing, false) => prepare(PrepareAbort, false),
        (CompleteCommit, true) | (CompleteAbort, false) if retry => Decision::Unchanged,
        (CompleteCommit, true) => Decision::Refuse(TxnError::InvalidTxnState),
        (CompleteCommit, false) if retry => Decision::Refuse(TxnError::InvalidTxnState),
        (CompleteCommit | CompleteAbort | Empty, false) => prepare(PrepareAbort, true),
        (PrepareCommit, true) | (PrepareAbort, false) => Decision::Refuse(TxnError::ConcurrentTransactions),
        _ => Decision::Refuse(TxnError::InvalidTxnState),
    }
}

/// The coordinator's own abort of a transaction open past its timeout (fencing the producer).
/// A 2PC transaction (KIP-939) has none, except Sluice's: until its producer marks it prepared,
/// one whose producer asked for explicit prepares keeps the timeout it requested. Liveness
/// (Sluice): `heartbeat` is when the producer's last heartbeat arrived and how many intervals
/// may pass without one; an unprepared transaction whose heartbeating producer fell silent that
/// long is aborted however long its timeout.
pub fn timeout(cur: &TxnMetadata, now: i64, heartbeat: Option<(i64, u32)>) -> Option<Decision> {
    if cur.state != TxnState::Ongoing || cur.is_prepared() {
        return None;
    }
    let limit = if !cur.two_phase {
        Some(cur.timeout_ms)
    } else {
        (cur.unprepared_timeout_ms > 0).then_some(cur.unprepared_timeout_ms)
    };
    let timed_out = limit.is_some_and(|t| now > cur.txn_start_ms.saturating_add(i64::from(t)));
    let silent = match heartbeat {
        Some((last, missed)) if cur.heartbeat_interval_ms > 0 => {
            let since = last.max(cur.txn_start_ms);
            now > since.saturating_add(i64::from(cur.heartbeat_interval_ms) * i64::from(missed.max(1)))
        }
        _ => false,
    };
    if !timed_out && !silent {
        return None;
    }
    let (next, markers) = fence_and_abort(cur, now);
    Some(apply(Some(cur), next, Some(markers)))
}

/// Sluice: the producer marks its ongoing 2PC transaction prepared (everything flushed, its
/// state handed to the external coordinator): from now on it waits for its outcome, whatever
/// its timeout or heartbeats.
pub fn prepare(cur: Option<&TxnMetadata>, pid: i64, epoch: i16, now: i64) -> Decision {
    let m = match check_producer(cur, pid, epoch) {
        Ok(m) => m,
        Err(e) => return Decision::Refuse(e),
    };
    match m.state {
        TxnState::Ongoing if !m.two_phase => Decision::Refuse(TxnError::InvalidTxnState),
        TxnState::Ongoing if m.prepared_ms >= 0 => Decision::Unchanged,
        TxnState::Ongoing => {
            let mut next = m.clone();
            next.prepared_ms = now;
            next.last_update_ms = now;
            apply(Some(m), next, None)
        }
        TxnState::PrepareCommit | TxnState::PrepareAbort => Decision::Refuse(TxnError::ConcurrentTransactions),
        _ => Decision::Refuse(TxnError::InvalidTxnState),
    }
}

/// Sluice: a heartbeat from `pid`/`epoch` is its producer's: the current instance.
pub fn heartbeat_allowed(cur: Option<&TxnMetadata>, pid: i64, epoch: i16) -> Result<(), TxnError> {
    check_producer(cur, pid, epoch).map(|_| ())
}

/// `transactional.id.expiration.ms`: an id idle this long with no transaction open is forgotten.
pub fn expired(cur: &TxnMetadata, now: i64, expiration_ms: i64) -> bool {
    matches!(cur.state, TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort)
        && now.saturating_sub(cur.last_update_ms) > expiration_ms
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: TxnLimits = TxnLimits { max_timeout_ms: 900_000, two_phase_commit: true };

    /// A producer id source handing out `p` (any number of times).
    fn pid(p: i64) -> impl FnMut() -> Result<i64, TxnError> {
        move || Ok(p)
    }

    fn applied(d: Decision) -> Transition {
        match d {
            Decision::Apply(t) => *t,
            other => panic!("expected a transition, got {other:?}"),
        }
    }

    fn new_txn() -> TxnMetadata {
        applied(init_producer_id(None, 60_000, None, &mut pid(77), LIMITS, 0)).next
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
        let t = applied(end_txn(Some(&m), 77, 0, true, false, &mut pid(0), 20));
        assert_eq!(t.next.state, TxnState::PrepareCommit);
        let mk = t.markers.unwrap();
        assert!(mk.commit);
        assert_eq!(mk.partitions.len(), 2);
        assert_eq!(mk.groups.len(), 1);
        assert_eq!(mk.complete.state, TxnState::CompleteCommit);
        let prepared = t.next;
        assert_eq!(
            end_txn(Some(&prepared), 77, 0, true, false, &mut pid(0), 21),
            Decision::Refuse(TxnError::ConcurrentTransactions)
        );
        assert_eq!(
            end_txn(Some(&prepared), 77, 0, false, false, &mut pid(0), 21),
            Decision::Refuse(TxnError::InvalidTxnState)
        );
        assert_eq!(
            add_to_txn(Some(&prepared), 77, 0, &[("t".into(), 0)], None, 21),
            Decision::Refuse(TxnError::ConcurrentTransactions)
        );
        let done = mk.complete;
        assert_eq!(
            end_txn(Some(&done), 77, 0, true, false, &mut pid(0), 22),
            Decision::Unchanged,
            "a retried commit gets the outcome"
        );
        assert_eq!(
            end_txn(Some(&done), 77, 0, false, false, &mut pid(0), 22),
            Decision::Refuse(TxnError::InvalidTxnState)
        );
        // the next transaction starts fresh
        let t = applied(add_to_txn(Some(&done), 77, 0, &[("u".into(), 0)], None, 30));
        assert_eq!(t.next.partitions.len(), 1);
        assert_eq!(t.next.txn_start_ms, 30);
    }

    #[test]
    fn a_new_instance_fences_the_old_and_aborts_its_transaction() {
        let m = new_txn();
        let m = applied(add_to_txn(Some(&m), 77, 0, &[("t".into(), 0)], None, 10)).next;
        let t = applied(init_producer_id(Some(&m), 60_000, None, &mut pid(99), LIMITS, 20));
        assert_eq!(t.reply_error, Some(TxnError::ConcurrentTransactions));
        assert_eq!(t.next.state, TxnState::PrepareAbort);
        assert_eq!(t.next.producer_epoch, 1, "bumped before the abort markers: the old instance is fenced");
        let mk = t.markers.unwrap();
        assert_eq!((mk.commit, mk.producer_epoch), (false, 1));
        // the old instance's requests are fenced from now on
        assert_eq!(
            end_txn(Some(&t.next), 77, 0, true, false, &mut pid(0), 21),
            Decision::Refuse(TxnError::ProducerFenced)
        );
        // once aborted, the new instance's retry gets the next epoch
        let t = applied(init_producer_id(Some(&mk.complete), 60_000, None, &mut pid(99), LIMITS, 30));
        assert_eq!((t.next.producer_id, t.next.producer_epoch, t.next.state), (77, 2, TxnState::Empty));
        assert_eq!(
            add_to_txn(Some(&t.next), 77, 1, &[("t".into(), 0)], None, 31),
            Decision::Refuse(TxnError::ProducerFenced)
        );
    }

    #[test]
    fn timeouts_abort_with_a_fence_and_limits_hold() {
        let m = new_txn();
        let m = applied(add_to_txn(Some(&m), 77, 0, &[("t".into(), 0)], None, 1000)).next;
        assert!(timeout(&m, 61_000, None).is_none());
        let t = applied(timeout(&m, 61_001, None).unwrap());
        assert_eq!((t.next.state, t.next.producer_epoch), (TxnState::PrepareAbort, 1));
        assert_eq!(
            init_producer_id(None, 900_001, None, &mut pid(5), LIMITS, 0),
            Decision::Refuse(TxnError::InvalidTransactionTimeout)
        );
        assert_eq!(add_to_txn(None, 1, 0, &[], None, 0), Decision::Refuse(TxnError::InvalidProducerIdMapping));
        assert_eq!(
            end_txn(Some(&m), 78, 0, true, false, &mut pid(0), 0),
            Decision::Refuse(TxnError::InvalidProducerIdMapping)
        );
        let empty = new_txn();
        assert_eq!(
            end_txn(Some(&empty), 77, 0, true, false, &mut pid(0), 0),
            Decision::Refuse(TxnError::InvalidTxnState)
        );
    }

    #[test]
    fn transaction_version_2_bumps_the_epoch_per_transaction() {
        let m = new_txn();
        let m = applied(add_to_txn(Some(&m), 77, 0, &[("t".into(), 0)], None, 1)).next;
        let t = applied(end_txn(Some(&m), 77, 0, true, true, &mut pid(99), 2));
        assert_eq!((t.next.producer_epoch, t.next.last_producer_epoch), (1, 0));
        let mk = t.markers.unwrap();
        assert_eq!(mk.producer_epoch, 1, "markers carry the new epoch");
        let done = mk.complete;
        assert_eq!((done.producer_id, done.producer_epoch, done.state), (77, 1, TxnState::CompleteCommit));
        // a retried EndTxn with the old epoch gets the outcome; the opposite outcome is refused
        // as Kafka 4.x refuses it (INVALID_TXN_STATE)
        assert_eq!(end_txn(Some(&done), 77, 0, true, true, &mut pid(99), 3), Decision::Unchanged);
        assert_eq!(
            end_txn(Some(&done), 77, 0, false, true, &mut pid(99), 3),
            Decision::Refuse(TxnError::InvalidTxnState)
        );
        // the next transaction runs on epoch 1; a delayed EndTxn of the previous one cannot end it
        let next = applied(add_to_txn(Some(&done), 77, 1, &[("t".into(), 0)], None, 4)).next;
        assert_eq!(
            end_txn(Some(&next), 77, 0, true, true, &mut pid(99), 5),
            Decision::Refuse(TxnError::ProducerFenced)
        );
        assert_eq!(
            add_to_txn(Some(&next), 77, 0, &[("t".into(), 1)], None, 5),
            Decision::Refuse(TxnError::ProducerFenced)
        );
    }

    /// A producer id source that fails the test if it is asked.
    fn no_pid() -> impl FnMut() -> Result<i64, TxnError> {
        || panic!("no producer id may be allocated here")
    }

    #[test]
    fn transaction_version_2_aborts_with_no_partition_added() {
        // Empty (right after InitProducerId): PrepareAbort with nothing to mark, epoch bumped
        let m = new_txn();
        let t = applied(end_txn(Some(&m), 77, 0, false, true, &mut no_pid(), 10));
        assert_eq!((t.next.state, t.next.producer_epoch, t.next.txn_start_ms), (TxnState::PrepareAbort, 1, 10));
        let mk = t.markers.unwrap();
        assert!(mk.partitions.is_empty() && mk.groups.is_empty() && !mk.commit);
        let aborted = mk.complete;
        assert_eq!((aborted.state, aborted.producer_epoch), (TxnState::CompleteAbort, 1));
        // its retry gets the outcome; a commit in Empty is refused
        assert_eq!(end_txn(Some(&aborted), 77, 0, false, true, &mut no_pid(), 11), Decision::Unchanged);
        assert_eq!(
            end_txn(Some(&m), 77, 0, true, true, &mut no_pid(), 11),
            Decision::Refuse(TxnError::InvalidTxnState)
        );
        // CompleteAbort and CompleteCommit with the current epoch: a new empty abort
        let t = applied(end_txn(Some(&aborted), 77, 1, false, true, &mut no_pid(), 12));
        assert_eq!((t.next.state, t.next.producer_epoch), (TxnState::PrepareAbort, 2));
        let open = applied(add_to_txn(Some(&aborted), 77, 1, &[("t".into(), 0)], None, 13)).next;
        let committed = applied(end_txn(Some(&open), 77, 1, true, true, &mut no_pid(), 14)).markers.unwrap().complete;
        assert_eq!((committed.state, committed.producer_epoch), (TxnState::CompleteCommit, 2));
        let t = applied(end_txn(Some(&committed), 77, 2, false, true, &mut no_pid(), 15));
        assert_eq!((t.next.state, t.next.producer_epoch), (TxnState::PrepareAbort, 3));
        // transaction version 1 keeps Kafka's old answer
        assert_eq!(
            end_txn(Some(&m), 77, 0, false, false, &mut no_pid(), 16),
            Decision::Refuse(TxnError::InvalidTxnState)
        );
    }

    #[test]
    fn transaction_version_2_rotates_at_kafkas_boundary_and_answers_retries() {
        let mut m = applied(add_to_txn(Some(&new_txn()), 77, 0, &[("t".into(), 0)], None, 1)).next;
        // 32765 is not exhausted: a plain bump to 32766, no id consumed
        m.producer_epoch = i16::MAX - 2;
        let t = applied(end_txn(Some(&m), 77, i16::MAX - 2, true, true, &mut no_pid(), 2));
        let done = t.markers.unwrap().complete;
        assert_eq!((done.producer_id, done.producer_epoch), (77, i16::MAX - 1));
        // 32766 is: markers at 32767, the next transaction on a new id at epoch 0
        let open = applied(add_to_txn(Some(&done), 77, i16::MAX - 1, &[("t".into(), 0)], None, 3)).next;
        let t = applied(end_txn(Some(&open), 77, i16::MAX - 1, true, true, &mut pid(99), 4));
        let mk = t.markers.unwrap();
        assert_eq!((mk.producer_id, mk.producer_epoch), (77, i16::MAX));
        let rotated = mk.complete;
        assert_eq!((rotated.producer_id, rotated.producer_epoch, rotated.prev_producer_id), (99, 0, 77));
        // a retry with the old id and epoch is answered with the new ones (retryOnOverflow)
        assert_eq!(end_txn(Some(&rotated), 77, i16::MAX - 1, true, true, &mut no_pid(), 5), Decision::Unchanged);
        assert_eq!(
            end_txn(Some(&rotated), 77, i16::MAX - 1, false, true, &mut no_pid(), 5),
            Decision::Refuse(TxnError::InvalidTxnState)
        );
        assert_eq!(
            end_txn(Some(&rotated), 78, i16::MAX - 1, true, true, &mut no_pid(), 5),
            Decision::Refuse(TxnError::InvalidProducerIdMapping)
        );
    }

    #[test]
    fn init_producer_id_retries_straddling_a_rotation_and_consumes_ids_only_then() {
        let mut m = new_txn();
        // a bump allocates nothing
        let bumped = applied(init_producer_id(Some(&m), 60_000, Some((77, 0)), &mut no_pid(), LIMITS, 1)).next;
        assert_eq!((bumped.producer_id, bumped.producer_epoch), (77, 1));
        // at 32766 (Kafka's exhaustion) the id rotates
        m.producer_epoch = i16::MAX - 1;
        let rotated =
            applied(init_producer_id(Some(&m), 60_000, Some((77, i16::MAX - 1)), &mut pid(99), LIMITS, 2)).next;
        assert_eq!((rotated.producer_id, rotated.producer_epoch, rotated.prev_producer_id), (99, 0, 77));
        // the same request retried (its answer was lost) gets the new id, not PRODUCER_FENCED
        let again = init_producer_id(Some(&rotated), 60_000, Some((77, i16::MAX - 1)), &mut no_pid(), LIMITS, 3);
        assert_eq!(again, Decision::Unchanged);
        // an old id with an epoch that is not exhausted is a zombie
        assert_eq!(
            init_producer_id(Some(&rotated), 60_000, Some((77, 5)), &mut no_pid(), LIMITS, 3),
            Decision::Refuse(TxnError::ProducerFenced)
        );
        // 32765 bumps to 32766 without rotating
        m.producer_epoch = i16::MAX - 2;
        let t = applied(init_producer_id(Some(&m), 60_000, None, &mut no_pid(), LIMITS, 4)).next;
        assert_eq!((t.producer_id, t.producer_epoch), (77, i16::MAX - 1));
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
        let bumped = applied(init_producer_id(Some(&m), 60_000, Some((77, 0)), &mut pid(99), LIMITS, 5)).next;
        assert_eq!(bumped.producer_epoch, 1);
        assert_eq!(
            init_producer_id(Some(&bumped), 60_000, Some((77, 0)), &mut pid(99), LIMITS, 6),
            Decision::Unchanged
        );
        assert_eq!(
            init_producer_id(Some(&bumped), 60_000, Some((77, 7)), &mut pid(99), LIMITS, 6),
            Decision::Refuse(TxnError::ProducerFenced)
        );
        let mut old = bumped.clone();
        old.producer_epoch = i16::MAX - 1;
        let t = applied(init_producer_id(Some(&old), 60_000, None, &mut pid(99), LIMITS, 7));
        assert_eq!((t.next.producer_id, t.next.producer_epoch), (99, 0));
    }

    const KEEP: InitOptions =
        InitOptions { enable_2pc: true, keep_prepared: true, explicit_prepare: false, heartbeat_interval_ms: 0 };
    const TWO_PHASE: InitOptions =
        InitOptions { enable_2pc: true, keep_prepared: false, explicit_prepare: false, heartbeat_interval_ms: 0 };

    #[test]
    fn kip939_a_new_instance_keeps_the_prepared_transaction_and_commits_it() {
        let m = applied(init_producer_id_with(None, 60_000, None, TWO_PHASE, &mut pid(77), LIMITS, 0)).next;
        assert!(m.two_phase);
        assert_eq!(m.timeout_ms, i32::MAX, "Kafka stores Integer.MAX_VALUE as a 2PC transaction's timeout");
        let open = applied(add_to_txn(Some(&m), 77, 0, &[("t".into(), 0), ("t".into(), 1)], Some("g"), 10)).next;
        assert_eq!(open.ongoing_txn_producer(), (77, 0));
        assert!(timeout(&open, i64::MAX / 2, None).is_none(), "a 2PC transaction is never aborted by its timeout");
        // the job restarts: the new instance keeps the transaction, fencing the old one
        let t = applied(init_producer_id_with(Some(&open), 60_000, None, KEEP, &mut no_pid(), LIMITS, 20));
        assert_eq!(t.reply_error, None);
        assert!(t.markers.is_none(), "nothing is aborted");
        let kept = t.next;
        assert_eq!((kept.state, kept.producer_id, kept.producer_epoch), (TxnState::Ongoing, 77, 1));
        assert_eq!(kept.partitions, open.partitions);
        assert_eq!(kept.groups, open.groups);
        assert_eq!(kept.txn_start_ms, 10);
        assert_eq!(kept.ongoing_txn_producer(), (77, 0), "names the transaction the external coordinator recorded");
        assert_eq!(
            add_to_txn(Some(&kept), 77, 0, &[("t".into(), 2)], None, 21),
            Decision::Refuse(TxnError::ProducerFenced),
            "the instance that prepared it is fenced"
        );
        // it restarts again before deciding: still the same transaction
        let again = applied(init_producer_id_with(Some(&kept), 60_000, None, KEEP, &mut no_pid(), LIMITS, 30)).next;
        assert_eq!((again.producer_epoch, again.ongoing_txn_producer()), (2, (77, 0)));
        // and commits it: markers for every partition and the group
        for tv2 in [false, true] {
            let t = applied(end_txn(Some(&again), 77, 2, true, tv2, &mut no_pid(), 40));
            let mk = t.markers.unwrap();
            assert!(mk.commit);
            assert_eq!(mk.partitions, open.partitions);
            assert_eq!(mk.groups, open.groups);
            assert!(mk.producer_epoch >= 2, "markers fence every earlier epoch");
            assert_eq!(mk.complete.ongoing_txn_producer(), (-1, -1));
        }
    }

    #[test]
    fn kip939_without_keeping_the_transaction_is_aborted_and_limits_hold() {
        let m = applied(init_producer_id_with(None, 60_000, None, TWO_PHASE, &mut pid(77), LIMITS, 0)).next;
        let open = applied(add_to_txn(Some(&m), 77, 0, &[("t".into(), 0)], None, 10)).next;
        // forceTerminateTransaction: Enable2Pc without KeepPreparedTxn aborts with a fence
        let t = applied(init_producer_id_with(Some(&open), 60_000, None, TWO_PHASE, &mut no_pid(), LIMITS, 20));
        assert_eq!(t.reply_error, Some(TxnError::ConcurrentTransactions));
        let mk = t.markers.unwrap();
        assert!(!mk.commit);
        let t = applied(init_producer_id_with(Some(&mk.complete), 60_000, None, TWO_PHASE, &mut no_pid(), LIMITS, 30));
        assert_eq!((t.next.state, t.next.producer_epoch), (TxnState::Empty, 2));
        assert_eq!(t.next.ongoing_txn_producer(), (-1, -1));
        // an ordinary producer taking the id over aborts too, and its transactions time out again
        let open = applied(add_to_txn(Some(&t.next), 77, 2, &[("t".into(), 0)], None, 40)).next;
        let t = applied(init_producer_id(Some(&open), 60_000, None, &mut no_pid(), LIMITS, 50));
        assert_eq!(t.reply_error, Some(TxnError::ConcurrentTransactions));
        let plain =
            applied(init_producer_id(Some(&t.markers.unwrap().complete), 60_000, None, &mut no_pid(), LIMITS, 60)).next;
        assert!(!plain.two_phase);
        let open = applied(add_to_txn(Some(&plain), 77, plain.producer_epoch, &[("t".into(), 0)], None, 70)).next;
        assert!(timeout(&open, 70 + 60_001, None).is_some());
        // refusals
        assert_eq!(
            init_producer_id_with(
                None,
                60_000,
                None,
                InitOptions { keep_prepared: true, ..InitOptions::default() },
                &mut pid(5),
                LIMITS,
                0
            ),
            Decision::Refuse(TxnError::InvalidRequest)
        );
        let off = TxnLimits { two_phase_commit: false, ..LIMITS };
        assert_eq!(
            init_producer_id_with(None, 60_000, None, TWO_PHASE, &mut pid(5), off, 0),
            Decision::Refuse(TxnError::TwoPhaseCommitDisabled)
        );
        assert!(
            matches!(init_producer_id_with(None, 900_001, None, TWO_PHASE, &mut pid(5), LIMITS, 0), Decision::Apply(_)),
            "exempt from transaction.max.timeout.ms"
        );
        // keeping with nothing ongoing is an ordinary bump
        let t = applied(init_producer_id_with(Some(&m), 60_000, None, KEEP, &mut no_pid(), LIMITS, 5));
        assert_eq!(
            (t.next.state, t.next.producer_epoch, t.next.ongoing_txn_producer()),
            (TxnState::Empty, 1, (-1, -1))
        );
    }

    #[test]
    fn explicit_prepares_keep_the_short_timeout_until_prepared_and_missed_heartbeats_abort() {
        let explicit = InitOptions { explicit_prepare: true, heartbeat_interval_ms: 100, ..TWO_PHASE };
        let m = applied(init_producer_id_with(None, 1000, None, explicit, &mut pid(77), LIMITS, 0)).next;
        assert_eq!((m.timeout_ms, m.unprepared_timeout_ms, m.heartbeat_interval_ms), (i32::MAX, 1000, 100));
        assert_eq!(
            init_producer_id_with(None, 900_001, None, explicit, &mut pid(77), LIMITS, 0),
            Decision::Refuse(TxnError::InvalidTransactionTimeout),
            "the short timeout is an ordinary one"
        );
        let open = applied(add_to_txn(Some(&m), 77, 0, &[("t".into(), 0)], None, 10)).next;
        assert!(!open.is_prepared());
        assert!(timeout(&open, 1010, Some((1000, 3))).is_none());
        assert!(timeout(&open, 1011, Some((1000, 3))).is_some(), "unprepared: its own timeout");
        assert!(timeout(&open, 400, Some((50, 3))).is_some(), "three missed heartbeats (300 ms)");
        assert!(timeout(&open, 340, Some((50, 3))).is_none());
        assert_eq!(prepare(Some(&open), 77, 1, 20), Decision::Refuse(TxnError::ProducerFenced));
        let prepared = applied(prepare(Some(&open), 77, 0, 20)).next;
        assert!(prepared.is_prepared());
        assert_eq!(prepare(Some(&prepared), 77, 0, 21), Decision::Unchanged, "a retry");
        assert!(timeout(&prepared, i64::MAX / 2, Some((0, 3))).is_none(), "prepared: waits, heartbeats or not");
        // a kept prepared transaction stays prepared; the next one starts unprepared
        let kept = applied(init_producer_id_with(
            Some(&prepared),
            1000,
            None,
            InitOptions { keep_prepared: true, ..explicit },
            &mut no_pid(),
            LIMITS,
            30,
        ))
        .next;
        assert!(kept.is_prepared());
        let done = applied(end_txn(Some(&kept), 77, 1, true, false, &mut no_pid(), 40)).markers.unwrap().complete;
        assert!(!done.is_prepared());
        let next = applied(add_to_txn(Some(&done), 77, 1, &[("t".into(), 0)], None, 50)).next;
        assert!(!next.is_prepared() && timeout(&next, 1051, None).is_some());
        // not 2PC: nothing to prepare; heartbeats still bound an ordinary transaction
        let plain = InitOptions { heartbeat_interval_ms: 100, ..InitOptions::default() };
        let m = applied(init_producer_id_with(None, 60_000, None, plain, &mut pid(78), LIMITS, 0)).next;
        let open = applied(add_to_txn(Some(&m), 78, 0, &[("t".into(), 0)], None, 0)).next;
        assert_eq!(prepare(Some(&open), 78, 0, 1), Decision::Refuse(TxnError::InvalidTxnState));
        assert!(timeout(&open, 301, Some((0, 3))).is_some());
        assert!(timeout(&open, 301, None).is_none(), "without a heartbeat record only the timeout counts");
    }
}
