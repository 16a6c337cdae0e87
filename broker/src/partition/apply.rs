//! The one place a write is applied to a partition: [`apply_batch`] for a produce batch,
//! [`apply_marker`] for a COMMIT/ABORT marker. On one node `PartitionHandle::Local` calls them
//! at once; in a cluster every replica's state machine calls them (through the replication
//! layer's [`PartitionLog`], implemented here) for each committed command, in Raft order.
//! Either way they run under the partition's producer-state lock, so a batch and a marker of
//! the same producer are ordered the same on every copy.
//!
//! KIP-890's guard is checked here too ([`TxnGuard`]): on one node the coordinator is asked
//! under that lock; replicated, the leader's verification travels in the Raft command as data
//! (`verified`, `verified_from`) and is checked in Raft order against the markers applied since
//! the verification began (decision 0016).

use super::producer_state::{MarkerHeader, Refusal};
use super::{AppendError, Appended, MarkerWritten, Partition};
use crate::replication::types::Verdict;
use crate::replication::types::{ApplyFailure, PartCommand, PartResult, PartitionLog};
use sluice_protocol::batch::{iter_batches, BatchView};
use sluice_storage::StorageError;
use std::sync::Arc;

/// How a transactional batch is known to be in its producer's ongoing transaction (KIP-890).
pub enum TxnGuard<'a> {
    /// One node: ask the transaction coordinator (under the producer-state lock, which a marker
    /// also takes, so a batch verified before its transaction ended precedes that marker).
    Ask(&'a dyn Fn(i64, i16) -> Result<(), Refusal>),
    /// Replicated: the leader's verification, carried in the command — `verified` by the
    /// coordinator, which began when the log ended at `from`; a marker for the producer at or
    /// after `from` ended the transaction the coordinator confirmed.
    Carried { verified: bool, from: Option<i64> },
}

/// Append one produce batch (idempotence check, transactional guard, append, producer state),
/// or answer an exact retry of a stored batch with its original offsets.
pub fn apply_batch(p: &Partition, batch: &mut [u8], now_ms: i64, guard: TxnGuard<'_>) -> Result<Appended, AppendError> {
    match guard {
        TxnGuard::Ask(verify) => p.append_batch_in_txn(batch, now_ms, Some(verify)),
        TxnGuard::Carried { verified, from } => {
            let verify = |pid: i64, _: i16| {
                let ended = from.is_some_and(|from| p.marker_since(pid, from));
                if verified && !ended {
                    Ok(())
                } else {
                    Err(Refusal::NotInTransaction)
                }
            };
            p.append_batch_in_txn(batch, now_ms, Some(&verify))
        }
    }
}

/// Write a COMMIT or ABORT marker for producer `pid`, closing its open transaction here.
pub fn apply_marker(p: &Partition, pid: i64, header: &MarkerHeader, now_ms: i64) -> Result<MarkerWritten, AppendError> {
    p.write_marker(pid, header, now_ms)
}

impl PartitionLog for Partition {
    fn name(&self) -> String {
        format!("{}-{}", self.topic, self.index)
    }

    fn offsets(&self) -> (i64, i64) {
        let log = self.log();
        (log.log_start_offset(), log.log_end_offset())
    }

    fn apply(&self, cmd: &mut PartCommand) -> (PartResult, i64) {
        let failed = |e: StorageError| (PartResult::Failed(ApplyFailure::Storage(Arc::new(e))), 0);
        match cmd {
            PartCommand::Produce { batch, now_ms, verified, verified_from } => {
                let guard = TxnGuard::Carried { verified: *verified, from: *verified_from };
                match apply_batch(self, batch, *now_ms, guard) {
                    Ok(Appended::New { info, log_start, .. }) => (
                        PartResult::Appended { first: info.first_offset, last: info.last_offset, log_start },
                        info.last_offset + 1,
                    ),
                    Ok(Appended::Duplicate { first_offset, last_offset, log_start, .. }) => {
                        (PartResult::Appended { first: first_offset, last: last_offset, log_start }, last_offset + 1)
                    }
                    Err(AppendError::Refused(r)) => (PartResult::Refused(r), 0),
                    Err(AppendError::Storage(e)) => failed(e),
                }
            }
            PartCommand::Marker { producer_id, epoch, coordinator_epoch, commit, now_ms } => {
                let header = MarkerHeader {
                    epoch: *epoch,
                    coordinator_epoch: *coordinator_epoch,
                    commit: *commit,
                    timestamp: *now_ms,
                };
                match apply_marker(self, *producer_id, &header, *now_ms) {
                    Ok(w) => (PartResult::Appended { first: w.offset, last: w.offset, log_start: 0 }, w.offset + 1),
                    Err(AppendError::Refused(r)) => (PartResult::Refused(r), 0),
                    Err(AppendError::Storage(e)) => failed(e),
                }
            }
            PartCommand::Predicted { cmd, verdict } => {
                let (result, end) = self.apply(cmd);
                self.check_verdict(verdict, &result);
                (result, end)
            }
            // only a partition whose Raft log is its segment log holds these; it is not wired
            // into a partition's group yet (decision 0045 step 3)
            PartCommand::Stored { .. } | PartCommand::Answered { .. } => failed(StorageError::InvalidConfig(
                "a stored batch (one log per replica) reached a partition whose Raft log is separate".into(),
            )),
            // (the replica's state machine acts on it: `cluster::replica`, decision 0056)
            PartCommand::Convert => (PartResult::Done, 0),
            PartCommand::DeleteRecords { offset } => {
                let mut log = self.log();
                let end = log.log_end_offset();
                // everything applied is committed (the batches before this one in its apply run
                // are not yet published)
                log.set_high_watermark(end);
                match log.delete_records((*offset).clamp(0, end)) {
                    Ok(start) => (PartResult::LogStart(start), 0),
                    Err(e) => failed(e),
                }
            }
        }
    }

    fn stored(&self, offset: i64, cmd: &PartCommand) -> Result<Option<(PartResult, i64)>, StorageError> {
        let stored = match self.log().read(offset, 1, None, true) {
            Ok(b) => b,
            Err(StorageError::OffsetOutOfRange { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        Ok(self.stored_matches(offset, cmd, &stored))
    }

    fn is_damaged(&self) -> bool {
        self.log().is_damaged()
    }

    fn find_damage(&self) -> Result<Option<sluice_storage::Damage>, StorageError> {
        self.log().find_damage()
    }

    fn repair(&self, d: &sluice_storage::Damage, copy: &[u8], from: u64) -> Result<bool, StorageError> {
        let whole = Partition::repair(self, d, copy)?;
        // a warning once the log is whole (the data was restored, but the disk under it lost
        // bytes); each batch before that (a lost tail takes one per batch) at INFO
        let line = format!(
            "partition {}-{}: the damaged batch at offset {} (byte {} of {}) was replaced by broker {from}'s copy{}",
            self.topic,
            self.index,
            d.base_offset,
            d.position,
            d.path.display(),
            if whole { "; the partition is online again" } else { "" }
        );
        if whole {
            tracing::warn!("{line}");
        } else {
            tracing::info!("{line}");
        }
        ::metrics::counter!(crate::metrics::STORAGE_REPAIRS_TOTAL, "topic" => self.topic.clone()).increment(1);
        Ok(whole)
    }

    fn copy_of(&self, offset: i64) -> Result<bytes::Bytes, StorageError> {
        self.log().read(offset, 1, None, true)
    }

    fn publish_committed(&self) {
        Partition::publish_committed(self)
    }

    fn flush(&self) -> Result<(), StorageError> {
        Partition::flush(self)
    }

    fn keep_cached_tail(&self, bytes: i64) {
        self.log().set_role_tail(bytes);
    }

    fn link_snapshot(
        &self,
        into: &std::path::Path,
        upto: Option<i64>,
    ) -> Result<sluice_storage::LinkedSnapshot, StorageError> {
        Partition::flush(self)?;
        self.log().link_snapshot_upto(into, upto)
    }

    fn publish_committed_to(&self, end: i64) {
        let mut log = self.log();
        if end > log.high_watermark() {
            log.set_high_watermark(end);
            drop(log);
            self.hw_changed.notify_waiters();
        }
    }

    fn delete_records_committed(&self, offset: i64) -> Result<i64, StorageError> {
        let mut log = self.log();
        let hw = log.high_watermark();
        log.delete_records(offset.clamp(0, hw))
    }

    fn install_snapshot(&self, staged: &std::path::Path, log_start: i64) -> Result<(i64, i64), StorageError> {
        Partition::install_snapshot(self, staged, log_start)
    }

    fn replays_from(&self, offset: i64) {
        self.set_clean_limit(offset);
    }

    fn cleaner_held_back(&self) -> bool {
        Partition::cleaner_held_back(self)
    }
}

impl crate::replication::partition_log_store::SegmentLog for Partition {
    fn segment_log(&self) -> std::sync::MutexGuard<'_, sluice_storage::Log> {
        self.log()
    }
    fn append_entry(
        &self,
        batch: &mut bytes::Bytes,
        term: i32,
        now_ms: i64,
        judged: bool,
    ) -> Result<sluice_storage::AppendInfo, StorageError> {
        Partition::append_entry(self, batch, term, now_ms, judged)
    }
    fn truncate_entries(&self, offset: i64) -> Result<u64, StorageError> {
        Partition::truncate_entries(self, offset)
    }
    fn use_terms(&self) -> Result<(), StorageError> {
        let mut log = self.log();
        let marker = log.dir().join(sluice_storage::log::RAFT_TERMS_FILE);
        if !marker.exists() {
            sluice_storage::sidefile::write_atomic(&marker, b"")?;
        }
        let mut config = log.config().clone();
        config.leader_epoch = None;
        log.set_config(config)?;
        drop(log);
        self.set_single_log();
        Ok(())
    }
}

impl Partition {
    /// Was what applying a write did (`result`) what the leader judged it would do? Counted
    /// either way (`sluice_replication_verdicts_total`); a difference is logged, and the
    /// leader's tip starts again. A write storage failed is not judged.
    fn check_verdict(&self, verdict: &Verdict, result: &PartResult) {
        let got = match result {
            PartResult::Appended { first, last, .. } => Verdict::At { first: *first, last: *last },
            PartResult::Refused(r) => Verdict::Refused(*r),
            PartResult::Done | PartResult::Failed(_) | PartResult::LogStart(_) => return,
        };
        let outcome = if got == *verdict {
            "matched"
        } else {
            tracing::warn!(
                topic = %self.topic,
                partition = self.index,
                "replication verdict differs: the leader judged {verdict:?}, applying did {got:?}"
            );
            self.tip_went_stale();
            "differed"
        };
        ::metrics::counter!(crate::metrics::REPLICATION_VERDICTS_TOTAL, "outcome" => outcome).increment(1);
    }

    /// Whether `stored` (read at `offset`) is the batch `cmd` wrote there: what applying it did
    /// and the offset after it.
    fn stored_matches(&self, offset: i64, cmd: &PartCommand, stored: &[u8]) -> Option<(PartResult, i64)> {
        let (_, view) = iter_batches(stored).next()?.ok()?;
        let same = match cmd.inner() {
            PartCommand::DeleteRecords { .. }
            | PartCommand::Predicted { .. }
            | PartCommand::Answered { .. }
            | PartCommand::Convert => return None,
            PartCommand::Marker { producer_id, .. } => view.is_control() && view.producer_id() == *producer_id,
            PartCommand::Stored { batch } => {
                let ours = BatchView::parse_unchecked_crc(batch).ok()?;
                view.crc() == ours.crc() && view.base_offset() == ours.base_offset()
            }
            PartCommand::Produce { batch, .. } => {
                let ours = BatchView::parse_unchecked_crc(batch).ok()?;
                !view.is_control()
                    && view.producer_id() == ours.producer_id()
                    && view.base_sequence() == ours.base_sequence()
                    && view.last_offset_delta() == ours.last_offset_delta()
                    && view.records_bytes() == ours.records_bytes()
            }
        };
        if !same || view.base_offset() != offset {
            return None;
        }
        let log_start = self.log().log_start_offset();
        let result = PartResult::Appended { first: view.base_offset(), last: view.last_offset(), log_start };
        Some((result, view.last_offset() + 1))
    }
}
