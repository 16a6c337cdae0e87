//! Transactions, as in Kafka's producer API: `init_transactions` (fences older instances of the
//! same `transactional.id` and completes their open transaction), `begin_transaction`, `send`,
//! `send_offsets_to_transaction`, `commit_transaction`, `abort_transaction` — and two-phase
//! commit for an external coordinator (KIP-939): `init_transactions_keep_prepared`,
//! `prepare_transaction`, `complete_transaction`.
//!
//! Errors are typed: a retriable one (e.g. a commit that timed out) may be retried with the same
//! call — a commit whose outcome is unknown is only ever retried as a commit, never aborted;
//! an abortable one means `abort_transaction` and start again; a fatal one (fenced by a newer
//! instance) means drop the producer.

use super::{flush, sender::fail_queued, Producer, Shared, TxnPhase};
use crate::cluster::{by_topic, sb, Broker};
use crate::error::{Error, ErrorKind, Result};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use sluice_protocol::api;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A consumer's group membership, passed to [`Producer::send_offsets_to_transaction`] so the
/// group coordinator can refuse offsets from a member that is no longer in the group (KIP-447).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupMetadata {
    /// Group id.
    pub group_id: String,
    /// Generation the member belongs to (-1 for none).
    pub generation_id: i32,
    /// Member id ("" for none).
    pub member_id: String,
    /// Static membership id.
    pub group_instance_id: Option<String>,
}

impl ConsumerGroupMetadata {
    /// Metadata for a group without membership checks (generation -1).
    pub fn new(group_id: impl Into<String>) -> ConsumerGroupMetadata {
        ConsumerGroupMetadata {
            group_id: group_id.into(),
            generation_id: -1,
            member_id: String::new(),
            group_instance_id: None,
        }
    }
}

/// Codes after which the coordinator should be looked up again.
fn coordinator_moved(c: ResponseError) -> bool {
    matches!(c, ResponseError::NotCoordinator | ResponseError::CoordinatorNotAvailable)
}

/// Codes that mean "try again shortly" for coordinator requests.
fn busy(c: ResponseError) -> bool {
    matches!(c, ResponseError::ConcurrentTransactions | ResponseError::CoordinatorLoadInProgress)
        || coordinator_moved(c)
        || c.is_retriable()
}

/// Retry `call` against the transaction coordinator until it succeeds, fails for good, or
/// `deadline` passes. `call` returns the error code of its answer.
async fn with_coordinator<T, F, Fut>(sh: &Arc<Shared>, deadline: Instant, mut call: F) -> Result<T>
where
    F: FnMut(Arc<Broker>) -> Fut,
    Fut: std::future::Future<Output = Result<(i16, T)>>,
{
    let id = sh.s.transactional_id.clone().unwrap_or_default();
    let mut backoff = Duration::from_millis(20);
    loop {
        let attempt = async {
            let coord = if id.is_empty() {
                sh.cluster.any_broker(crate::cluster::Lane::Coordinator).await?
            } else {
                sh.cluster.find_coordinator(1, &id).await?
            };
            sh.cluster.timed(call(coord)).await
        };
        let err = match attempt.await {
            Ok((0, v)) => return Ok(v),
            Ok((code, _)) => Error::from_code(code, "transaction coordinator").unwrap_or_else(|| Error::invalid("?")),
            Err(e) => e,
        };
        let retry = match err.code() {
            Some(c) => busy(c),
            None => err.is_retriable(),
        };
        if !retry {
            return Err(err);
        }
        if Instant::now() + backoff >= deadline {
            return Err(err.with_kind(ErrorKind::Retriable));
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(sh.s.retry_backoff.max(Duration::from_millis(20)));
    }
}

/// A transaction prepared for two-phase commit (KIP-939), as an external coordinator records
/// it: the producer id and epoch that wrote it. Its text form is `<producer id>:<epoch>`
/// (`Display` and `FromStr`), as Kafka's `PreparedTxnState.toString`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreparedTxnState {
    /// The producer id of the prepared transaction.
    pub producer_id: i64,
    /// Its producer epoch.
    pub epoch: i16,
}

impl std::fmt::Display for PreparedTxnState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.producer_id, self.epoch)
    }
}

impl std::str::FromStr for PreparedTxnState {
    type Err = Error;
    fn from_str(s: &str) -> Result<PreparedTxnState> {
        let bad = || Error::invalid(format!("'{s}' is not a prepared transaction state (<producer id>:<epoch>)"));
        let (p, e) = s.trim().split_once(':').ok_or_else(bad)?;
        Ok(PreparedTxnState { producer_id: p.parse().map_err(|_| bad())?, epoch: e.parse().map_err(|_| bad())? })
    }
}

/// InitProducerId: a new producer id, or (with `current`) a new epoch for the current one.
pub(crate) async fn init_producer_id(sh: &Arc<Shared>, current: Option<(i64, i16)>) -> Result<(i64, i16)> {
    init_producer_id_with(sh, current, false).await.map(|(pid, epoch, _)| (pid, epoch))
}

/// InitProducerId with KIP-939's fields when the producer uses two-phase commit: with
/// `keep_prepared`, an ongoing transaction is kept and named in the answer (the third value).
pub(crate) async fn init_producer_id_with(
    sh: &Arc<Shared>,
    current: Option<(i64, i16)>,
    keep_prepared: bool,
) -> Result<(i64, i16, Option<PreparedTxnState>)> {
    let deadline = Instant::now() + sh.s.max_block;
    let txn_id = sh.s.transactional_id.clone();
    let timeout_ms = sh.s.transaction_timeout.as_millis().min(i32::MAX as u128) as i32;
    let two_phase = sh.s.two_phase_commit;
    let heartbeat_ms = sh.s.heartbeat_interval.as_millis().min(i32::MAX as u128) as i32;
    let r = with_coordinator(sh, deadline, |b| {
        let txn_id = txn_id.clone();
        async move {
            let mut r = InitProducerIdRequest::default();
            r.transactional_id = txn_id.as_deref().map(|t| TransactionalId(sb(t)));
            r.transaction_timeout_ms = timeout_ms;
            let (pid, epoch) = current.unwrap_or((-1, -1));
            r.producer_id = ProducerId(pid);
            r.producer_epoch = epoch;
            let version = b.version(ApiKey::InitProducerId)?;
            if version < 3 {
                r.producer_id = ProducerId(-1);
                r.producer_epoch = -1;
            }
            if two_phase {
                if version < 6 {
                    return Err(Error::kafka(
                        ResponseError::UnsupportedVersion,
                        "two-phase commit needs InitProducerId v6 (KIP-939), which the broker lacks",
                    ));
                }
                r.enable_2_pc = true;
                r.keep_prepared_txn = keep_prepared;
            }
            // Sluice's liveness options, in a tag other brokers skip: a 2PC producer marks its
            // transactions prepared; a heartbeating one says how often
            if version >= 2 && txn_id.is_some() && (two_phase || heartbeat_ms > 0) {
                r.unknown_tagged_fields
                    .insert(api::TXN_LIVENESS_TAG, api::encode_txn_liveness(two_phase, heartbeat_ms));
            }
            match b.call(ApiKey::InitProducerId, RequestKind::InitProducerId(r)).await? {
                ResponseKind::InitProducerId(p) => {
                    let ongoing = (p.ongoing_txn_producer_id.0 >= 0).then_some(PreparedTxnState {
                        producer_id: p.ongoing_txn_producer_id.0,
                        epoch: p.ongoing_txn_producer_epoch,
                    });
                    let served = p.unknown_tagged_fields.get(&api::TXN_LIVENESS_TAG).map(|t| t.as_ref())
                        == Some(&[api::TXN_LIVENESS_SERVED][..]);
                    Ok((p.error_code, (p.producer_id.0, p.producer_epoch, ongoing, served)))
                }
                _ => Err(Error::invalid("unexpected response to InitProducerId")),
            }
        }
    })
    .await;
    match r {
        Ok((pid, epoch, ongoing, served)) => {
            sh.lock().liveness_served = served;
            Ok((pid, epoch, ongoing))
        }
        Err(e) => Err(match e.code() {
            Some(ResponseError::InvalidProducerEpoch | ResponseError::ProducerFenced) => e.with_kind(ErrorKind::Fatal),
            _ => e,
        }),
    }
}

/// Sluice's heartbeat or prepare ([`api::TXN_HEARTBEAT`], [`api::TXN_PREPARE`]): an
/// AddPartitionsToTxn v3 with no partitions and the action in a tag; the coordinator answers the
/// outcome's error code in the same tag.
pub(crate) async fn liveness(sh: &Arc<Shared>, action: u8, deadline: Instant) -> Result<()> {
    let (pid, epoch) = {
        let st = sh.lock();
        (st.pid, st.epoch)
    };
    let id = sh.s.transactional_id.clone().unwrap_or_default();
    with_coordinator(sh, deadline, |b| {
        let id = id.clone();
        async move {
            if b.version(ApiKey::AddPartitionsToTxn)? < 3 {
                return Err(Error::kafka(ResponseError::UnsupportedVersion, "AddPartitionsToTxn v3 needed"));
            }
            let mut r = AddPartitionsToTxnRequest::default();
            r.v3_and_below_transactional_id = TransactionalId(sb(&id));
            r.v3_and_below_producer_id = ProducerId(pid);
            r.v3_and_below_producer_epoch = epoch;
            r.unknown_tagged_fields.insert(api::TXN_LIVENESS_TAG, bytes::Bytes::copy_from_slice(&[action]));
            match b.call(ApiKey::AddPartitionsToTxn, RequestKind::AddPartitionsToTxn(r)).await? {
                ResponseKind::AddPartitionsToTxn(a) => {
                    let code = a
                        .unknown_tagged_fields
                        .get(&api::TXN_LIVENESS_TAG)
                        .and_then(|t| Some(i16::from_be_bytes(t.get(..2)?.try_into().ok()?)))
                        .ok_or_else(|| Error::invalid("the coordinator did not answer the liveness request"))?;
                    Ok((code, ()))
                }
                _ => Err(Error::invalid("unexpected response to AddPartitionsToTxn")),
            }
        }
    })
    .await
}

/// The heartbeat task (`transaction.heartbeat.interval.ms`): while the producer lives, a
/// heartbeat every interval while a transaction is open and not prepared.
pub(crate) fn spawn_heartbeats(sh: &Arc<Shared>) {
    let interval = sh.s.heartbeat_interval;
    if interval.is_zero() || sh.s.transactional_id.is_none() {
        return;
    }
    let weak = Arc::downgrade(sh);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(interval).await;
            let Some(sh) = weak.upgrade() else { return };
            let beat = {
                let st = sh.lock();
                if st.closing || st.fatal.is_some() {
                    return;
                }
                st.liveness_served
                    && matches!(st.phase, TxnPhase::InTransaction | TxnPhase::Committing | TxnPhase::Aborting)
            };
            if beat {
                // a lost heartbeat is made good by the next one; the coordinator allows several
                let _ = liveness(&sh, api::TXN_HEARTBEAT, Instant::now() + interval).await;
            }
        }
    });
}

/// The sender's AddPartitionsToTxn for partitions that have data waiting.
pub(crate) async fn add_partitions(sh: Arc<Shared>, want: Vec<(String, i32)>) {
    let (pid, epoch) = {
        let st = sh.lock();
        (st.pid, st.epoch)
    };
    let id = sh.s.transactional_id.clone().unwrap_or_default();
    let deadline = Instant::now() + sh.s.max_block;
    let want2 = want.clone();
    let r = with_coordinator(&sh, deadline, |b| {
        let (id, want) = (id.clone(), want2.clone());
        async move {
            let topics = by_topic(want)
                .into_iter()
                .map(|(t, partitions)| {
                    let mut x = add_partitions_to_txn_request::AddPartitionsToTxnTopic::default();
                    x.name = TopicName(sb(&t));
                    x.partitions = partitions;
                    x
                })
                .collect();
            let mut r = AddPartitionsToTxnRequest::default();
            r.v3_and_below_transactional_id = TransactionalId(sb(&id));
            r.v3_and_below_producer_id = ProducerId(pid);
            r.v3_and_below_producer_epoch = epoch;
            r.v3_and_below_topics = topics;
            match b.call(ApiKey::AddPartitionsToTxn, RequestKind::AddPartitionsToTxn(r)).await? {
                ResponseKind::AddPartitionsToTxn(a) => {
                    // The first real error wins; OPERATION_NOT_ATTEMPTED only accompanies one.
                    let mut code = a.error_code;
                    for t in &a.results_by_topic_v3_and_below {
                        for p in &t.results_by_partition {
                            if p.partition_error_code != 0 && (code == 0 || code == 55) {
                                code = p.partition_error_code;
                            }
                        }
                    }
                    Ok((code, ()))
                }
                _ => Err(Error::invalid("unexpected response to AddPartitionsToTxn")),
            }
        }
    })
    .await;
    let mut st = sh.lock();
    st.adding = false;
    match r {
        Ok(()) => {
            for k in &want {
                if let Some(p) = st.parts.get_mut(k) {
                    p.added = true;
                }
            }
        }
        Err(e) if e.is_fatal() || matches!(e.code(), Some(ResponseError::InvalidProducerEpoch)) => {
            let e = e.with_kind(ErrorKind::Fatal);
            st.fatal = Some(e.clone());
            fail_queued(&sh, &mut st, &e);
        }
        Err(e) => {
            let e = e.with_kind(ErrorKind::Abortable);
            st.abortable = Some(e.clone());
            // Batches of partitions not in the transaction must never be sent.
            let mut freed = Vec::new();
            for k in &want {
                if let Some(p) = st.parts.get_mut(k) {
                    for b in p.queue.drain(..) {
                        freed.push(b.fail(&e));
                    }
                }
            }
            for bytes in freed {
                sh.finished(&mut st, bytes);
            }
        }
    }
    drop(st);
    sh.wake.notify_one();
}

impl Producer {
    fn txn_state(&self, allowed: &[TxnPhase], call: &str) -> Result<()> {
        let sh = self.shared();
        if sh.s.transactional_id.is_none() {
            return Err(Error::invalid(format!("{call} needs transactional.id")));
        }
        let st = sh.lock();
        if let Some(e) = &st.fatal {
            return Err(e.clone());
        }
        if !allowed.contains(&st.phase) {
            return Err(Error::invalid(format!("{call} is not allowed in state {:?}", st.phase)));
        }
        Ok(())
    }

    /// Register the transactional id with its coordinator: fences any older producer with the
    /// same id, and completes (commits or aborts) a transaction it left open. Call once, first.
    pub async fn init_transactions(&self) -> Result<()> {
        self.txn_state(&[TxnPhase::Uninitialized], "init_transactions")?;
        let (pid, epoch) = init_producer_id(self.shared(), None).await?;
        let mut st = self.shared().lock();
        st.pid = pid;
        st.epoch = epoch;
        st.phase = TxnPhase::Ready;
        Ok(())
    }

    /// Two-phase commit (KIP-939; needs `transaction.two.phase.commit.enable=true` here and on
    /// the broker): register the transactional id, fencing older instances, but keep a
    /// transaction an earlier instance left prepared instead of aborting it. Returns that
    /// transaction's state, if there is one: the producer is then in it, and
    /// [`Producer::complete_transaction`] (or commit, or abort) must end it first.
    pub async fn init_transactions_keep_prepared(&self) -> Result<Option<PreparedTxnState>> {
        self.txn_state(&[TxnPhase::Uninitialized], "init_transactions_keep_prepared")?;
        if !self.shared().s.two_phase_commit {
            return Err(Error::invalid(
                "init_transactions_keep_prepared needs transaction.two.phase.commit.enable=true",
            ));
        }
        let (pid, epoch, ongoing) = init_producer_id_with(self.shared(), None, true).await?;
        let mut st = self.shared().lock();
        st.pid = pid;
        st.epoch = epoch;
        st.prepared = ongoing;
        st.phase = if ongoing.is_some() { TxnPhase::Prepared } else { TxnPhase::Ready };
        Ok(ongoing)
    }

    /// Two-phase commit's first phase (KIP-939): flush every record of the transaction and
    /// return its state for the external coordinator to record. The transaction stays open —
    /// never aborted by its timeout — until [`Producer::complete_transaction`], commit or abort,
    /// here or in a later instance (after `init_transactions_keep_prepared`).
    pub async fn prepare_transaction(&self) -> Result<PreparedTxnState> {
        self.txn_state(&[TxnPhase::InTransaction], "prepare_transaction")?;
        let sh = self.shared().clone();
        if !sh.s.two_phase_commit {
            return Err(Error::invalid("prepare_transaction needs transaction.two.phase.commit.enable=true"));
        }
        flush(&sh).await?;
        if let Some(e) = sh.lock().abortable.clone() {
            return Err(e);
        }
        let served = sh.lock().liveness_served;
        if served && self.anything_added() {
            // Sluice: mark it prepared, so it no longer times out (until then it keeps
            // transaction.timeout.ms, and a forgotten unprepared transaction ends)
            liveness(&sh, api::TXN_PREPARE, Instant::now() + sh.s.max_block).await.map_err(|e| self.txn_error(e))?;
        }
        let mut st = sh.lock();
        let state = PreparedTxnState { producer_id: st.pid, epoch: st.epoch };
        st.prepared = Some(state);
        st.phase = TxnPhase::Prepared;
        Ok(state)
    }

    /// Two-phase commit's second phase: commit the prepared transaction if `state` names it
    /// (the external coordinator decided to commit what was prepared), otherwise abort it.
    /// Returns whether it committed.
    pub async fn complete_transaction(&self, state: PreparedTxnState) -> Result<bool> {
        self.txn_state(&[TxnPhase::Prepared, TxnPhase::Committing, TxnPhase::Aborting], "complete_transaction")?;
        let (phase, prepared) = {
            let st = self.shared().lock();
            (st.phase, st.prepared)
        };
        let commit = match phase {
            TxnPhase::Committing => true,
            TxnPhase::Aborting => false,
            _ => prepared == Some(state),
        };
        if commit {
            self.commit_transaction().await?;
        } else {
            self.abort_transaction().await?;
        }
        Ok(commit)
    }

    /// Start a transaction (local only; the coordinator learns of it with the first partition).
    pub async fn begin_transaction(&self) -> Result<()> {
        self.txn_state(&[TxnPhase::Ready], "begin_transaction")?;
        let mut st = self.shared().lock();
        st.phase = TxnPhase::InTransaction;
        st.abortable = None;
        st.offsets_added = false;
        st.txn_seq_gap = false;
        for p in st.parts.values_mut() {
            p.added = false;
        }
        Ok(())
    }

    /// Add consumed offsets to the transaction: they are committed for `group` if and only if
    /// the transaction commits. `offsets` are (topic, partition, next offset to read).
    pub async fn send_offsets_to_transaction(
        &self,
        offsets: &[(String, i32, i64)],
        group: &ConsumerGroupMetadata,
    ) -> Result<()> {
        self.txn_state(&[TxnPhase::InTransaction], "send_offsets_to_transaction")?;
        let sh = self.shared().clone();
        if let Some(e) = sh.lock().abortable.clone() {
            return Err(e);
        }
        let (pid, epoch) = {
            let st = sh.lock();
            (st.pid, st.epoch)
        };
        let id = sh.s.transactional_id.clone().unwrap_or_default();
        let deadline = Instant::now() + sh.s.max_block;
        let gid = group.group_id.clone();
        let r = with_coordinator(&sh, deadline, |b| {
            let (id, gid) = (id.clone(), gid.clone());
            async move {
                let mut r = AddOffsetsToTxnRequest::default();
                r.transactional_id = TransactionalId(sb(&id));
                r.producer_id = ProducerId(pid);
                r.producer_epoch = epoch;
                r.group_id = GroupId(sb(&gid));
                match b.call(ApiKey::AddOffsetsToTxn, RequestKind::AddOffsetsToTxn(r)).await? {
                    ResponseKind::AddOffsetsToTxn(a) => Ok((a.error_code, ())),
                    _ => Err(Error::invalid("unexpected response to AddOffsetsToTxn")),
                }
            }
        })
        .await;
        if let Err(e) = r {
            return Err(self.txn_error(e));
        }
        sh.lock().offsets_added = true;
        // Then the offsets themselves, to the group coordinator.
        let mut backoff = Duration::from_millis(20);
        loop {
            let attempt = async {
                let coord = sh.cluster.find_coordinator(0, &group.group_id).await?;
                let topics = by_topic(offsets.iter().map(|(t, p, o)| {
                    let mut tp = txn_offset_commit_request::TxnOffsetCommitRequestPartition::default();
                    tp.partition_index = *p;
                    tp.committed_offset = *o;
                    tp.committed_leader_epoch = -1;
                    (t.clone(), tp)
                }))
                .into_iter()
                .map(|(t, partitions)| {
                    let mut x = txn_offset_commit_request::TxnOffsetCommitRequestTopic::default();
                    x.name = TopicName(sb(&t));
                    x.partitions = partitions;
                    x
                })
                .collect();
                let mut r = TxnOffsetCommitRequest::default();
                r.transactional_id = TransactionalId(sb(&id));
                r.group_id = GroupId(sb(&group.group_id));
                r.producer_id = ProducerId(pid);
                r.producer_epoch = epoch;
                if coord.version(ApiKey::TxnOffsetCommit)? >= 3 {
                    r.generation_id = group.generation_id;
                    r.member_id = sb(&group.member_id);
                    r.group_instance_id = group.group_instance_id.as_deref().map(sb);
                }
                r.topics = topics;
                let resp =
                    sh.cluster.timed(coord.call(ApiKey::TxnOffsetCommit, RequestKind::TxnOffsetCommit(r))).await?;
                let ResponseKind::TxnOffsetCommit(c) = resp else {
                    return Err(Error::invalid("unexpected response to TxnOffsetCommit"));
                };
                let code = c
                    .topics
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
                    .find(|c| *c != 0)
                    .unwrap_or(0);
                Error::check(code, "TxnOffsetCommit")
            };
            let e = match attempt.await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            let retry = match e.code() {
                Some(
                    ResponseError::UnknownMemberId | ResponseError::IllegalGeneration | ResponseError::FencedInstanceId,
                ) => false,
                Some(c) => busy(c) || c == ResponseError::UnknownTopicOrPartition,
                None => e.is_retriable(),
            };
            if !retry || Instant::now() + backoff >= deadline {
                let e = if retry { e } else { self.txn_error(e) };
                if e.is_abortable() {
                    sh.lock().abortable.get_or_insert(e.clone());
                }
                return Err(e);
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(500));
        }
    }

    /// Classify an error met inside a transaction.
    fn txn_error(&self, e: Error) -> Error {
        match e.code() {
            Some(ResponseError::ProducerFenced | ResponseError::InvalidProducerEpoch) => {
                let e = e.with_kind(ErrorKind::Fatal);
                self.shared().lock().fatal = Some(e.clone());
                e
            }
            _ if e.is_fatal() => {
                self.shared().lock().fatal = Some(e.clone());
                e
            }
            _ if e.is_retriable() => e,
            _ => e.with_kind(ErrorKind::Abortable),
        }
    }

    async fn end_txn(&self, commit: bool) -> Result<()> {
        let sh = self.shared().clone();
        let (pid, epoch) = {
            let st = sh.lock();
            (st.pid, st.epoch)
        };
        let id = sh.s.transactional_id.clone().unwrap_or_default();
        let deadline = Instant::now() + sh.s.max_block;
        let r = with_coordinator(&sh, deadline, |b| {
            let id = id.clone();
            async move {
                let mut r = EndTxnRequest::default();
                r.transactional_id = TransactionalId(sb(&id));
                r.producer_id = ProducerId(pid);
                r.producer_epoch = epoch;
                r.committed = commit;
                match b.call(ApiKey::EndTxn, RequestKind::EndTxn(r)).await? {
                    ResponseKind::EndTxn(a) => Ok((a.error_code, ())),
                    _ => Err(Error::invalid("unexpected response to EndTxn")),
                }
            }
        })
        .await;
        match r {
            Ok(()) => Ok(()),
            Err(e) if e.is_retriable() => Err(e),
            Err(e) => {
                let e = e.with_kind(ErrorKind::Fatal);
                sh.lock().fatal = Some(e.clone());
                Err(e)
            }
        }
    }

    fn anything_added(&self) -> bool {
        let st = self.shared().lock();
        // a prepared transaction kept from an earlier instance has partitions this one never added
        st.offsets_added || st.parts.values().any(|p| p.added) || st.prepared.is_some()
    }

    /// Flush and commit the transaction. An abortable error (a record failed) means the
    /// transaction must be aborted instead. A retriable error (timeout) leaves the outcome
    /// unknown: call `commit_transaction` again — the coordinator answers with the recorded
    /// outcome — never `abort_transaction`.
    pub async fn commit_transaction(&self) -> Result<()> {
        self.txn_state(&[TxnPhase::InTransaction, TxnPhase::Prepared, TxnPhase::Committing], "commit_transaction")?;
        let sh = self.shared().clone();
        if sh.lock().phase == TxnPhase::Prepared {
            sh.lock().phase = TxnPhase::Committing;
        }
        if sh.lock().phase == TxnPhase::InTransaction {
            flush(&sh).await?;
            if let Some(e) = sh.lock().abortable.clone() {
                return Err(e);
            }
            sh.lock().phase = TxnPhase::Committing;
        }
        if self.anything_added() {
            self.end_txn(true).await?;
        }
        let mut st = sh.lock();
        st.phase = TxnPhase::Ready;
        st.prepared = None;
        Ok(())
    }

    /// Abort the transaction: records not yet sent are dropped (their futures fail), records
    /// sent are aborted with the transaction.
    pub async fn abort_transaction(&self) -> Result<()> {
        self.txn_state(&[TxnPhase::InTransaction, TxnPhase::Prepared, TxnPhase::Aborting], "abort_transaction")?;
        let sh = self.shared().clone();
        {
            let mut st = sh.lock();
            if st.phase == TxnPhase::Prepared {
                st.phase = TxnPhase::Aborting;
            }
            if st.phase == TxnPhase::InTransaction {
                if st.parts.values().any(|p| p.queue.iter().any(|b| b.seq.is_some())) {
                    st.txn_seq_gap = true;
                }
                let e = Error::new(ErrorKind::Abortable, "the transaction was aborted");
                fail_queued(&sh, &mut st, &e);
                st.phase = TxnPhase::Aborting;
            }
        }
        flush(&sh).await?;
        if self.anything_added() {
            self.end_txn(false).await?;
        }
        let gap = std::mem::take(&mut sh.lock().txn_seq_gap);
        if gap {
            // KIP-360: a new epoch lets sequences start over after a failed batch.
            let current = {
                let st = sh.lock();
                (st.pid, st.epoch)
            };
            let (pid, epoch) = init_producer_id(&sh, Some(current)).await?;
            let mut st = sh.lock();
            st.pid = pid;
            st.epoch = epoch;
            for p in st.parts.values_mut() {
                p.restart_sequences();
            }
        }
        let mut st = sh.lock();
        st.phase = TxnPhase::Ready;
        st.abortable = None;
        st.prepared = None;
        Ok(())
    }
}
