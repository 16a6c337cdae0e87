//! One partition as this broker writes it: [`PartitionHandle`] is either the local log alone
//! (one node, or a partition without replicas elsewhere) or the log behind its Raft group (a
//! replicated partition this broker holds a replica of). Callers ask for a write and await it;
//! whether that is an append under the partition's locks and an fsync, or a proposal that
//! every replica's state machine applies with the same `Partition` function once a majority
//! has it, is decided here and nowhere else.

use crate::cluster::replica::{PendingWrite, Replica};
use crate::partition::apply::{apply_batch, apply_marker, TxnGuard};
use crate::partition::producer_state::{MarkerHeader, Refusal};
use crate::partition::tip::{TipGuard, Verdict};
use crate::partition::{AppendError, Appended, Partition};
use crate::replication::types::{ApplyFailure, PartCommand, PartResult, WriteError};
use bytes::BytesMut;
use sluice_protocol::batch::{BatchBuilder, BatchError, BatchView, ControlMarker, ControlType};
use sluice_storage::StorageError;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone)]
pub enum PartitionHandle {
    /// Written here: appended under the partition's locks, durable after its fsync.
    Local(Arc<Partition>),
    /// Written through the partition's Raft group, led by this broker or not (a write proposed
    /// on a follower is refused with [`WriteError::NotLeader`]).
    Replicated { partition: Arc<Partition>, replica: Arc<Replica> },
}

/// Why a write (a batch or a marker) was not made, or is not known to be.
#[derive(Debug, thiserror::Error)]
pub enum WriteRefused {
    /// The partition's producer state (or, for a batch, the transaction coordinator) refused
    /// it: nothing was written.
    #[error("refused: {0:?}")]
    Refused(Refusal),
    /// Storage refused it or failed: written or not, it is not durable.
    #[error("{0}")]
    Storage(Arc<StorageError>),
    /// Not proposed, or proposed with an unknown outcome (replicated; a new leader still
    /// applying its predecessor's entries refuses every write as not the leader).
    #[error("{0}")]
    Write(WriteError),
}

/// Where KIP-890's verification of a transactional batch began (see
/// [`PartitionHandle::verification_start`]).
#[derive(Debug, Clone, Copy)]
pub struct VerificationStart {
    /// Replicated: this broker leads with every entry of earlier terms applied.
    settled: bool,
    /// Replicated, transactional: the log end before the coordinator was asked.
    from: Option<i64>,
}

/// A produce batch's write under way.
pub enum BatchWrite {
    /// Appended here at `first..end` (or an exact retry of a stored batch, answered with its
    /// original offsets): durable once the partition's fsync reaches `end` (if `sync`).
    Local { partition: Arc<Partition>, first: i64, end: i64, log_start: i64, sync: bool },
    /// Proposed to the partition's Raft group: answered when applied.
    Replicated(PendingWrite),
}

/// A marker write under way: await [`MarkerWrite::wait`].
pub enum MarkerWrite {
    Local { partition: Arc<Partition>, end: i64, sync: bool },
    Replicated(PendingWrite),
}

impl PartitionHandle {
    pub fn partition(&self) -> &Arc<Partition> {
        match self {
            PartitionHandle::Local(p) | PartitionHandle::Replicated { partition: p, .. } => p,
        }
    }

    /// The partition's Raft group, if it is replicated here.
    pub fn replica(&self) -> Option<&Arc<Replica>> {
        match self {
            PartitionHandle::Local(_) => None,
            PartitionHandle::Replicated { replica, .. } => Some(replica),
        }
    }

    /// Note where KIP-890's verification of a (transactional) batch begins, before the
    /// transaction coordinator is asked. Replicated: the log end now — a marker for the producer
    /// applied at or after it ended the transaction the coordinator is about to confirm, and the
    /// batch is refused when applied (`PartCommand::Produce::verified_from`, decision 0016) —
    /// taken only once this leader has applied every entry of earlier terms (a marker of an
    /// earlier transaction is then below it). Local: nothing to note (the verification runs
    /// under the producer-state lock, with the append).
    pub fn verification_start(&self, transactional: bool) -> VerificationStart {
        match self {
            PartitionHandle::Local(_) => VerificationStart { settled: true, from: None },
            PartitionHandle::Replicated { partition, replica } => {
                let settled = replica.applied_own_term();
                VerificationStart { settled, from: transactional.then(|| partition.log().log_end_offset()) }
            }
        }
    }

    /// Append one produce batch; a transactional one must be in its producer's ongoing
    /// transaction, as `verify` (the coordinator) says — `Refusal::NotInTransaction` when it is
    /// not, any other refusal for a fenced producer or a coordinator that cannot answer.
    /// Local: verified under the producer-state lock, which a marker also takes, then appended.
    /// Replicated: verified now — a fenced producer is refused at once; a batch not in a
    /// transaction is proposed unverified and refused when applied, so an exact retry of a
    /// stored batch is still answered as the duplicate it is — and checked again in Raft order
    /// against `start` when applied; a leader just elected waits (at most 1 s) until it has
    /// applied every entry of earlier terms, and refuses the batch if it has not. The leader
    /// judges the batch before proposing it, and the command carries that verdict
    /// (`partition::tip`, decision 0045 step 2).
    /// The local append takes the partition's locks (no await while held); a proposal waits
    /// (at most `wait`) only for room in the budgets of bytes in flight, then is queued, not
    /// waited for.
    pub async fn append_batch(
        &self,
        mut batch: BytesMut,
        now: i64,
        verify: &(dyn Fn(i64, i16) -> Result<(), Refusal> + Sync),
        start: VerificationStart,
        wait: Duration,
    ) -> Result<BatchWrite, WriteRefused> {
        let PartitionHandle::Replicated { replica, partition } = self else {
            let p = self.partition();
            let appended = apply_batch(p, &mut batch, now, TxnGuard::Ask(verify));
            if matches!(appended, Ok(Appended::New { .. }))
                && crate::failpoints::armed(crate::failpoints::Failpoint::LogRaftControlBatches)
            {
                // tests only: Raft's own entries as control batches between the records
                if let Err(e) = p.append_raft_control_batches(now) {
                    tracing::error!("failpoint log.raft_control_batches: {e}");
                }
            }
            return match appended {
                Ok(Appended::New { info, log_start, sync }) => Ok(BatchWrite::Local {
                    partition: p.clone(),
                    first: info.first_offset,
                    end: info.last_offset + 1,
                    log_start,
                    sync,
                }),
                Ok(Appended::Duplicate { first_offset, last_offset, log_start, sync }) => Ok(BatchWrite::Local {
                    partition: p.clone(),
                    first: first_offset,
                    end: last_offset + 1,
                    log_start,
                    sync,
                }),
                Err(AppendError::Refused(r)) => Err(WriteRefused::Refused(r)),
                Err(AppendError::Storage(e)) => Err(WriteRefused::Storage(Arc::new(e))),
            };
        };
        let verdict = transactional(&batch).map(|(pid, epoch)| verify(pid, epoch));
        let verified = matches!(verdict, Some(Ok(())));
        if verified && crate::failpoints::armed(crate::failpoints::Failpoint::ProduceDelayAfterVerify) {
            // tests only: widen the window between the verification and the proposal (a marker
            // may be ordered in between)
            tokio::time::sleep(Duration::from_millis(1500)).await;
        }
        match verdict {
            // a new leader still applying its predecessor's entries: the client retries (the
            // guard's start is not known yet)
            Some(_) if !start.settled => return Err(WriteRefused::Write(WriteError::NotLeader)),
            // fenced, or the coordinator cannot answer now: refused as on one broker
            Some(Err(r)) if r != Refusal::NotInTransaction => return Err(WriteRefused::Refused(r)),
            _ => {}
        }
        // room in the partition's and the broker's budgets of bytes in flight: waiting here
        // (stage 1) stops this connection being read, so producers are held back
        let admitted = replica.admit(batch.len(), wait).await.map_err(WriteRefused::Write)?;
        // a leader just elected takes the write once its blank entry is applied (a round trip)
        // rather than refuse it and send the client through a metadata refresh
        replica.settled(wait.min(SETTLE_WAIT)).await;
        // judged, then proposed, under the tip's lock (decision 0045, step 2)
        let mut tip = settled_tip(partition, replica)?;
        if partition.is_single_log() {
            // one log per replica (step 3): the batch goes into the Raft log as the leader
            // judged it, offsets assigned, or nothing is proposed
            check_batch(partition, &batch).map_err(|e| WriteRefused::Storage(Arc::new(e)))?;
            let end_before = tip.end();
            let verdict = tip.batch(&batch, now, verified, start.from);
            return propose_stored(replica, tip, Vec::from(batch), end_before, verdict, Some(admitted))
                .map(BatchWrite::Replicated);
        }
        let verdict = tip.batch(&batch, now, verified, start.from);
        // the request's buffer becomes the command (no copy of the records)
        let cmd = PartCommand::Produce { batch: Vec::from(batch), now_ms: now, verified, verified_from: start.from };
        propose_judged(replica, tip, cmd, verdict, Some(admitted)).map(BatchWrite::Replicated)
    }

    /// Write a COMMIT/ABORT marker for `producer_id`: appended now (local), or proposed to the
    /// partition's group. Blocking (the local append takes the partition's locks; a proposal
    /// waits for the group to accept it).
    pub fn write_marker(&self, producer_id: i64, header: &MarkerHeader, now: i64) -> Result<MarkerWrite, WriteRefused> {
        match self {
            PartitionHandle::Local(p) => match apply_marker(p, producer_id, header, now) {
                Ok(w) => Ok(MarkerWrite::Local { partition: p.clone(), end: w.offset + 1, sync: w.sync }),
                Err(AppendError::Refused(r)) => Err(WriteRefused::Refused(r)),
                Err(AppendError::Storage(e)) => Err(WriteRefused::Storage(Arc::new(e))),
            },
            PartitionHandle::Replicated { replica, partition } if partition.is_single_log() => {
                let mut tip = settled_tip(partition, replica)?;
                let end_before = tip.end();
                let verdict = tip.marker(producer_id, header);
                let kind = if header.commit { ControlType::Commit } else { ControlType::Abort };
                let marker = ControlMarker { kind, coordinator_epoch: header.coordinator_epoch };
                let batch = BatchBuilder::control_marker(producer_id, header.epoch, marker, now).map_err(|e| {
                    WriteRefused::Storage(Arc::new(StorageError::InvalidConfig(format!("marker batch: {e}"))))
                })?;
                propose_stored(replica, tip, batch.to_vec(), end_before, Some(verdict), None)
                    .map(MarkerWrite::Replicated)
            }
            PartitionHandle::Replicated { replica, partition } => {
                let mut tip = settled_tip(partition, replica)?;
                let verdict = tip.marker(producer_id, header);
                let cmd = PartCommand::Marker {
                    producer_id,
                    epoch: header.epoch,
                    coordinator_epoch: header.coordinator_epoch,
                    commit: header.commit,
                    now_ms: now,
                };
                propose_judged(replica, tip, cmd, Some(verdict), None).map(MarkerWrite::Replicated)
            }
        }
    }
}

impl MarkerWrite {
    /// Wait until the marker is durable (local: its fsync; replicated: applied once a majority
    /// has it, waiting at most `timeout`).
    pub async fn wait(self, timeout: Duration) -> Result<(), WriteRefused> {
        match self {
            MarkerWrite::Local { partition, end, sync } => {
                partition.wait_durable_async(end, sync).await.map_err(|e| WriteRefused::Storage(Arc::new(e)))
            }
            MarkerWrite::Replicated(w) => match w.wait(timeout).await {
                Ok(PartResult::Done | PartResult::Appended { .. } | PartResult::LogStart(_)) => Ok(()),
                Ok(PartResult::Refused(r)) => Err(WriteRefused::Refused(r)),
                Ok(PartResult::Failed(ApplyFailure::Storage(e))) => Err(WriteRefused::Storage(e)),
                Err(e) => Err(WriteRefused::Write(e)),
            },
        }
    }
}

/// How long a produce batch waits for a leader just elected to apply its blank entry.
const SETTLE_WAIT: Duration = Duration::from_secs(1);

/// The partition's tip, locked, on a leader that has applied every entry of earlier terms (its
/// applied state is then everything before its own proposals). A leader not yet there takes
/// no write: the client or the transaction coordinator retries (NOT_LEADER_OR_FOLLOWER).
fn settled_tip<'a>(partition: &'a Partition, replica: &Replica) -> Result<TipGuard<'a>, WriteRefused> {
    let term = replica.term();
    if !replica.applied_own_term() {
        return Err(WriteRefused::Write(WriteError::NotLeader));
    }
    Ok(partition.tip(term))
}

/// Propose `cmd` with the leader's `verdict` on it, the tip still locked (so writes reach the
/// Raft log in the order they were judged); a write not proposed, or not judged, makes the tip
/// start again from the applied state.
fn propose_judged(
    replica: &Replica,
    tip: TipGuard<'_>,
    cmd: PartCommand,
    verdict: Option<Verdict>,
    admitted: Option<crate::cluster::replica::Admitted>,
) -> Result<PendingWrite, WriteRefused> {
    let judged = verdict.is_some();
    let cmd = match verdict {
        Some(verdict) => PartCommand::Predicted { cmd: Box::new(cmd), verdict },
        None => cmd,
    };
    let proposed = match admitted {
        Some(admitted) => replica.propose_admitted(cmd, admitted),
        None => replica.propose(cmd),
    };
    match proposed {
        Ok(w) if judged => Ok(w),
        Ok(w) => {
            tip.abandon();
            Ok(w)
        }
        Err(e) => {
            tip.abandon();
            Err(WriteRefused::Write(e))
        }
    }
}

/// One log per replica: propose what the leader judged — the batch at the offsets it takes and
/// with the term as its epoch (`PartCommand::Stored`), or for an exact retry of a batch already
/// held the offsets it was stored at (`PartCommand::Answered`, answered once it commits and with
/// it the batch it repeats) — or, refused, nothing. The tip stays locked until it is proposed.
fn propose_stored(
    replica: &Replica,
    mut tip: TipGuard<'_>,
    mut batch: Vec<u8>,
    end_before: i64,
    verdict: Option<Verdict>,
    admitted: Option<crate::cluster::replica::Admitted>,
) -> Result<PendingWrite, WriteRefused> {
    let (cmd, retry) = match verdict {
        None => {
            tip.abandon();
            return Err(WriteRefused::Storage(Arc::new(StorageError::InvalidConfig("an unreadable batch".into()))));
        }
        Some(Verdict::Refused(r)) => {
            crate::partition::Partition::count_refusal(&r);
            return Err(WriteRefused::Refused(r));
        }
        Some(Verdict::At { first, last }) if first < end_before => {
            ::metrics::counter!(crate::metrics::PRODUCE_DUPLICATES_TOTAL).increment(1);
            (PartCommand::Answered { first, last }, true)
        }
        Some(Verdict::At { first, .. }) => {
            sluice_protocol::batch::set_base_offset(&mut batch, first);
            sluice_protocol::batch::set_partition_leader_epoch(&mut batch, replica.term());
            (PartCommand::Stored { batch: batch.into() }, false)
        }
    };
    let proposed = match admitted {
        Some(admitted) => replica.propose_admitted(cmd, admitted),
        None => replica.propose(cmd),
    };
    match proposed {
        Ok(w) => {
            tip.proposed(retry);
            Ok(w)
        }
        Err(e) => {
            tip.abandon();
            Err(WriteRefused::Write(e))
        }
    }
}

/// One log per replica: a batch that would not be stored is refused before it is proposed
/// (the Raft log stores what it is given): one whole v2 batch, its CRC right, at least one
/// record, within `max.message.bytes`.
fn check_batch(partition: &crate::partition::Partition, batch: &[u8]) -> Result<(), StorageError> {
    let invalid = |source| StorageError::InvalidBatch { position: 0, source };
    let (view, size) = BatchView::parse(batch).map_err(invalid)?;
    if size != batch.len() {
        return Err(invalid(BatchError::MalformedRecord("more than one batch for a partition")));
    }
    if view.records_count() < 1 {
        return Err(invalid(BatchError::InvalidRecordCount(view.records_count())));
    }
    let max = partition.log().config().max_message_bytes;
    if size > max {
        return Err(StorageError::BatchTooLarge { size, max });
    }
    Ok(())
}

/// A transactional batch's producer id and epoch.
fn transactional(batch: &[u8]) -> Option<(i64, i16)> {
    let v = sluice_protocol::batch::BatchView::parse_unchecked_crc(batch).ok()?;
    v.is_transactional().then(|| (v.producer_id(), v.producer_epoch()))
}
