//! One partition on this broker: its log, the high watermark, and the append path.
//!
//! Lock order: a partition's `log` mutex is taken alone, never while holding another
//! partition's or the topic registry's lock. The mutex is held only for in-memory work and a
//! `pwrite` into the page cache; fsync happens outside it through the log's `Flusher`, so
//! concurrent produce requests share fsyncs (group commit).
//!
//! High watermark: under `FlushPolicy::Sync` it advances only to the durable end (nothing a
//! consumer sees can disappear in a crash); under `Interval` it advances right after the write.
//!
//! Last stable offset: min(first offset of the oldest open transaction, high watermark). A
//! transactional batch opens its producer's transaction here; a COMMIT/ABORT marker
//! ([`Partition::write_marker`]) closes it, and an ABORT adds an entry to the segment's
//! aborted-transaction index (fsynced at once: read_committed consumers rely on it, and replay
//! regenerates an entry a crash lost before that fsync).

pub mod apply;
pub mod producer_state;
pub mod tip;

use crate::sync::OrDie as _;
use bytes::Bytes;
use producer_state::{BatchHeader, MarkerHeader, Plan, ProducerEntry, Refusal};
use sluice_protocol::batch::{iter_batches, BatchBuilder, BatchView, ControlMarker, ControlType, NO_PRODUCER_ID};
use sluice_storage::{AbortedTxn, AppendInfo, FlushPolicy, Flusher, Log, LogConfig, StorageError};
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The log cleaner's view of a compacted partition ([`Partition::cleaning_status`]).
#[derive(Debug, Clone, PartialEq)]
pub struct CleaningStatus {
    /// Dirty bytes over all cleanable bytes (Kafka's cleanable ratio).
    pub dirty_ratio: f64,
    pub dirty_bytes: u64,
    /// A pass should run now.
    pub due: bool,
    /// Timestamp of the oldest dirty batch (what `max.compaction.lag.ms` measures).
    pub oldest_dirty_ms: Option<i64>,
    /// When the last pass finished.
    pub last_cleaned_ms: Option<i64>,
}

/// What a produce append did.
#[derive(Debug)]
pub enum Appended {
    /// Written at these offsets; wait for durability up to `last_offset + 1`.
    New { info: AppendInfo, log_start: i64, sync: bool },
    /// An exact retry of a retained batch: nothing written; the original offsets are answered
    /// once they are durable.
    Duplicate { first_offset: i64, last_offset: i64, log_start: i64, sync: bool },
}

#[derive(Debug)]
pub enum AppendError {
    Storage(StorageError),
    Refused(Refusal),
}

pub struct Partition {
    pub topic: String,
    pub index: i32,
    /// Producer state (idempotence). Lock order: `producers` before `log`, so that check,
    /// append and apply are one step for each batch.
    producers: Mutex<HashMap<i64, ProducerEntry>>,
    log: Mutex<Log>,
    /// The log's flusher (replaced with the log when a replica installs a snapshot).
    flusher: Mutex<Arc<Flusher>>,
    /// Wakes long-polling fetches when the high watermark (or the LSO) moves.
    hw_changed: Arc<tokio::sync::Notify>,
    /// First offset of the oldest open transaction (`i64::MAX`: none). Written under the
    /// producer-state lock; read without it.
    first_unstable: AtomicI64,
    /// The log cleaner leaves offsets from here on alone. Cluster mode: a replica's restart
    /// applies its Raft log again from `applied.json`'s log end and matches each entry against
    /// the batch stored at that offset, so nothing above it may be rewritten; the replica moves
    /// this up as it records what it applied, and a partition not replicated is released
    /// (`i64::MAX`, the single-broker default).
    clean_limit: AtomicI64,
    /// The log was damaged when opened (decision 0037): the producer-state replay stopped at
    /// its first read, so the state is rebuilt once the log is repaired.
    replay_incomplete: std::sync::atomic::AtomicBool,
    /// Cluster mode, coordinator on another broker: (producer id, epoch) whose transaction that
    /// coordinator confirmed holds this partition (KIP-890 verification). Cleared for a
    /// producer by its next marker (under the producer-state lock), so a batch arriving after
    /// the transaction ended must be verified again.
    verified: Mutex<std::collections::HashSet<(i64, i16)>>,
    /// Markers written since the partition was opened, for [`Partition::marker_since`].
    markers: Mutex<MarkerHistory>,
    /// Replicated, on the leader: the log as its proposals will leave it (`tip.rs`). Lock
    /// order: `tip` before `producers`.
    tip: Mutex<tip::Tip>,
    /// An apply found a verdict that differed from the leader's: the tip starts again.
    tip_stale: std::sync::atomic::AtomicBool,
    /// One log per replica: the partition's Raft log is its log (decision 0045 step 3). Set
    /// when its replica starts.
    single_log: std::sync::atomic::AtomicBool,
    /// One log per replica: the term of the last judged write appended, and how many of that
    /// term were appended (`append_entry`).
    appended: Mutex<(i32, u64)>,
}

/// The offset of each producer's last marker written since the partition was opened, and the
/// log end when it was opened (older markers are looked up in the log).
struct MarkerHistory {
    opened_end: i64,
    last: HashMap<i64, i64>,
}

/// A marker written by [`Partition::write_marker`]: wait for durability up to `offset + 1`.
#[derive(Debug)]
pub struct MarkerWritten {
    pub offset: i64,
    pub sync: bool,
}

/// What a read returned, with the offsets a Fetch response reports.
#[derive(Debug, Clone)]
pub struct ReadOutcome {
    pub records: Bytes,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// read_committed: (producer id, first offset) of aborted transactions overlapping the
    /// returned range.
    pub aborted: Vec<(i64, i64)>,
}

impl Partition {
    pub fn new(topic: String, index: i32, mut log: Log, hw_changed: Arc<tokio::sync::Notify>) -> Partition {
        let flusher = log.flusher();
        // (damage the replay itself meets — rot in a segment trusted at open — stops it too:
        // the flag must be read after it, or a repair would not complete it)
        let (mut producers, complete) = rebuild_producer_state(&mut log);
        let replay_incomplete = std::sync::atomic::AtomicBool::new(!complete || log.is_damaged());
        // After a restart every producer gets a full expiration window again.
        let now = crate::clock::now_ms();
        for e in producers.values_mut() {
            e.last_timestamp = e.last_timestamp.max(now);
        }
        let first_unstable = AtomicI64::new(first_unstable(&producers));
        let markers = MarkerHistory { opened_end: log.log_end_offset(), last: HashMap::new() };
        Partition {
            verified: Mutex::new(Default::default()),
            markers: Mutex::new(markers),
            tip: Mutex::new(tip::Tip::default()),
            tip_stale: std::sync::atomic::AtomicBool::new(false),
            single_log: std::sync::atomic::AtomicBool::new(false),
            appended: Mutex::new((-1, 0)),
            topic,
            index,
            producers: Mutex::new(producers),
            log: Mutex::new(log),
            flusher: Mutex::new(flusher),
            hw_changed,
            first_unstable,
            clean_limit: AtomicI64::new(i64::MAX),
            replay_incomplete,
        }
    }

    /// A compacted partition with batches at or past its clean limit, or (one log per replica)
    /// past the retention floor its Raft log's purge moves: the cleaner stops at both, and
    /// `applied.json`, rewritten as entries apply, keeps the limit at the end while the floor
    /// moves only with a snapshot: counting only the limit, an idle snapshot could fail to
    /// come, and replicas kept uncleaned the batches after their last snapshot (the likely
    /// cause of a rare failure of the compacted-topic cluster test with `single`; decision 0045).
    pub fn cleaner_held_back(&self) -> bool {
        let log = self.log();
        let end = log.log_end_offset();
        log.config().cleanup_compact && (self.clean_limit.load(Ordering::Acquire) < end || log.retention_floor() < end)
    }

    /// Where the log cleaner must stop (see the field); 0 holds it entirely.
    pub fn set_clean_limit(&self, offset: i64) {
        self.clean_limit.store(offset, Ordering::Release);
    }

    /// The last stable offset: min(first offset of the oldest open transaction, high watermark),
    /// never below the log start offset.
    pub fn last_stable_offset(&self) -> i64 {
        let log = self.log();
        self.last_stable_offset_of(&log)
    }

    /// The LSO for a log the caller has locked. Kafka keeps `logStart ≤ LSO ≤ HW`: when
    /// DeleteRecords or retention removed the first batch of a transaction that is still open,
    /// the LSO is the log start (an offset Fetch serves), not the transaction's first offset.
    pub fn last_stable_offset_of(&self, log: &Log) -> i64 {
        let hw = log.high_watermark();
        self.first_unstable.load(Ordering::Acquire).min(hw).max(log.log_start_offset().min(hw))
    }

    /// Record that the (remote) coordinator verified `pid`/`epoch`'s transaction here.
    pub fn mark_verified(&self, pid: i64, epoch: i16) {
        self.verified.lock().or_die().insert((pid, epoch));
    }

    /// Was `pid`/`epoch` verified since its last marker here?
    pub fn is_verified(&self, pid: i64, epoch: i16) -> bool {
        self.verified.lock().or_die().contains(&(pid, epoch))
    }

    /// Has a marker for `pid` been written at or after offset `from`? The KIP-890 guard of a
    /// replicated partition, checked when a verified transactional batch is applied: `from` is
    /// the log end when the leader began the batch's verification, so a marker at or after it
    /// ended the transaction the coordinator confirmed, and the batch must not reopen it. A
    /// function of the log alone, so every replica decides the same (markers from before this
    /// partition was opened are read from the log; below the log start nothing can be known
    /// and the answer is yes).
    pub fn marker_since(&self, pid: i64, from: i64) -> bool {
        let opened_end = {
            let h = self.markers.lock().or_die();
            if h.last.get(&pid).is_some_and(|at| *at >= from) {
                return true;
            }
            h.opened_end
        };
        if from >= opened_end {
            return false;
        }
        let log = self.log();
        if from < log.log_start_offset() {
            return true;
        }
        let mut offset = from;
        while offset < opened_end {
            let chunk = match log.read(offset, 1 << 20, None, true) {
                Ok(c) if !c.is_empty() => c,
                Ok(_) => return false,
                Err(_) => return true,
            };
            for item in iter_batches(&chunk) {
                let Ok((_, v)) = item else { return true };
                if v.base_offset() >= opened_end {
                    return false;
                }
                if v.is_control() && v.producer_id() == pid {
                    return true;
                }
                offset = v.last_offset() + 1;
            }
        }
        false
    }

    /// Write a COMMIT or ABORT marker for producer `pid` (WriteTxnMarkers), closing its open
    /// transaction here. Refused for an older producer or coordinator epoch. Stage 1: the
    /// caller then waits for durability up to `offset + 1` (always `sync`).
    pub fn write_marker(&self, pid: i64, m: &MarkerHeader, now_ms: i64) -> Result<MarkerWritten, AppendError> {
        let mut producers = self.producers.lock().or_die();
        self.verified.lock().or_die().retain(|(p, _)| *p != pid);
        if let Err(r) = producer_state::check_marker(producers.get(&pid), m) {
            return Err(AppendError::Refused(r));
        }
        let kind = if m.commit { ControlType::Commit } else { ControlType::Abort };
        let batch = BatchBuilder::control_marker(
            pid,
            m.epoch,
            ControlMarker { kind, coordinator_epoch: m.coordinator_epoch },
            m.timestamp,
        )
        .map_err(|e| AppendError::Storage(StorageError::InvalidConfig(format!("marker batch: {e}"))))?;
        let mut buf = batch.to_vec();
        let (info, _log_start, _sync) = self.append(&mut buf, now_ms, false).map_err(AppendError::Storage)?;
        if info.rolled {
            self.snapshot(&producers, info.first_offset);
        }
        self.markers.lock().or_die().last.insert(pid, info.first_offset);
        let (entry, closed) = producer_state::apply_marker(producers.remove(&pid), m);
        producers.insert(pid, entry);
        if let (Some(first_offset), false) = (closed, m.commit) {
            let lso = first_unstable(&producers).min(info.first_offset + 1);
            let txn =
                AbortedTxn { producer_id: pid, first_offset, last_offset: info.first_offset, last_stable_offset: lso };
            self.log().append_aborted_txn(txn).map_err(AppendError::Storage)?;
        }
        self.first_unstable.store(first_unstable(&producers), Ordering::Release);
        drop(producers);
        self.hw_changed.notify_waiters();
        // fsynced whatever the flush policy (decision 0039): the coordinator's decision that
        // this marker stands for is fsynced, and once it is, nothing sends the marker again; a
        // marker lost to a power cut while the records it closed stay would leave them open
        // for this producer's next transaction to commit
        Ok(MarkerWritten { offset: info.first_offset, sync: true })
    }

    /// Tests only (failpoint `log.raft_control_batches`, decision 0045's gate): append the
    /// control batches one log per replica will keep for Raft's own entries
    /// (`sluice_protocol::raft_control`: KRaft's LEADER_CHANGE, type 2, and a membership, a
    /// Sluice type no client knows, 0x5100), outside any transaction. Clients must skip them and
    /// read on across the offsets they take.
    pub fn append_raft_control_batches(&self, now_ms: i64) -> Result<(), StorageError> {
        use sluice_protocol::raft_control::RaftControl;
        let producers = self.producers.lock().or_die();
        let entries = [
            RaftControl::LeaderChange { leader: 1, voters: vec![1] },
            RaftControl::Membership(Bytes::from_static(b"voters 1")),
        ];
        for entry in entries {
            let batch =
                entry.build(0, now_ms).map_err(|e| StorageError::InvalidConfig(format!("control batch: {e}")))?;
            let mut buf = batch.to_vec();
            let (info, _, _) = self.append(&mut buf, now_ms, false)?;
            if info.rolled {
                self.snapshot(&producers, info.first_offset);
            }
        }
        Ok(())
    }

    /// One log per replica (decision 0045 step 3): append one Raft entry's batch, judged by the
    /// leader already, at the log end in `term` (its partition leader epoch), and move the
    /// producer state, the open transactions and the aborted-transaction index with it as a
    /// replay of the log would — whether or not the entry commits: a new leader's log defines
    /// the state, and [`Partition::truncate_entries`] takes back what Raft truncates. The
    /// high watermark is not moved (the entry is not committed yet).
    /// `judged`: a write a leader judged (`tip.rs` counts them to know when its proposals are
    /// all in the log).
    pub fn append_entry(
        &self,
        batch: &mut bytes::Bytes,
        term: i32,
        now_ms: i64,
        judged: bool,
    ) -> Result<AppendInfo, StorageError> {
        let mut producers = self.producers.lock().or_die();
        let mut log = self.log();
        let opens_txn = BatchView::parse_unchecked_crc(batch).is_ok_and(|v| {
            v.is_transactional()
                && !v.is_control()
                && producers.get(&v.producer_id()).is_none_or(|e| e.txn_first_offset.is_none())
        });
        let info = log.append_shared(batch, now_ms, Some(term))?;
        if judged {
            let mut a = self.appended.lock().or_die();
            *a = if a.0 == term { (term, a.1 + 1) } else { (term, 1) };
        }
        if opens_txn {
            // before the high watermark can pass it (it moves only when the entry commits)
            self.first_unstable.fetch_min(info.first_offset, Ordering::AcqRel);
        }
        // the batch as stored (`append` wrote its offsets into `batch`; its CRC was checked)
        if let Ok(v) = BatchView::parse_unchecked_crc(batch) {
            if v.is_control() && v.producer_id() != NO_PRODUCER_ID {
                self.verified.lock().or_die().retain(|(p, _)| *p != v.producer_id());
                self.markers.lock().or_die().last.insert(v.producer_id(), v.base_offset());
            }
            replay_batch(&mut log, &mut producers, &v, false);
        }
        self.first_unstable.store(first_unstable(&producers), Ordering::Release);
        drop(log);
        if info.rolled {
            // the state before this batch = the state for every offset below the new segment
            // (`producers` now includes the batch: taken before it, as `append` does, would
            // need the state twice; the snapshot is at the batch's end instead)
            self.snapshot(&producers, info.last_offset + 1);
        }
        Ok(info)
    }

    /// One log per replica: Raft truncated its entries from the one stored at `offset` on (a new
    /// leader does not have them). The log is cut there, and producer state, open transactions
    /// and marker history are rebuilt from the newest producer snapshot below the cut. Returns
    /// the bytes cut.
    pub fn truncate_entries(&self, offset: i64) -> Result<u64, StorageError> {
        let mut producers = self.producers.lock().or_die();
        let mut log = self.log();
        let cut = log.truncate_to(offset)?;
        let (rebuilt, complete) = rebuild_producer_state(&mut log);
        *producers = rebuilt;
        self.replay_incomplete.store(!complete || log.is_damaged(), Ordering::Release);
        self.first_unstable.store(first_unstable(&producers), Ordering::Release);
        {
            let mut h = self.markers.lock().or_die();
            h.last.retain(|_, at| *at < offset);
            h.opened_end = h.opened_end.min(offset);
        }
        self.verified.lock().or_die().clear();
        drop(log);
        drop(producers);
        self.tip_went_stale();
        Ok(cut)
    }

    /// One log per replica: the partition's Raft log is its log from now on.
    pub fn set_single_log(&self) {
        self.single_log.store(true, Ordering::Release);
        // (a group converted from a Raft log of its own, decision 0056: the tip counted
        // proposals the other way)
        self.tip_went_stale();
    }

    pub fn is_single_log(&self) -> bool {
        self.single_log.load(Ordering::Acquire)
    }

    /// Has producer `pid` an open transaction here?
    pub fn has_open_transaction(&self, pid: i64) -> bool {
        let producers = self.producers.lock().or_die();
        producers.get(&pid).is_some_and(|e| e.txn_first_offset.is_some())
    }

    /// Every producer's state on this partition (DescribeProducers).
    pub fn producer_entries(&self) -> Vec<(i64, ProducerEntry)> {
        self.producers.lock().or_die().iter().map(|(k, v)| (*k, v.clone())).collect()
    }

    /// Forget producers idle for longer than `expiration_ms` (`producer.id.expiration.ms`),
    /// judged by the later of their last batch's timestamp and the broker's clock when it was
    /// appended (or when the state was reloaded); never one with an open transaction. Returns how
    /// many were removed. A removed producer that comes back with a non-zero sequence gets
    /// UNKNOWN_PRODUCER_ID and resets (KIP-360); nothing it wrote can be duplicated, because a
    /// retry of an old batch is long past the client's delivery timeout.
    pub fn expire_producers(&self, now_ms: i64, expiration_ms: i64) -> usize {
        let mut producers = self.producers.lock().or_die();
        let before = producers.len();
        producers.retain(|pid, e| {
            let keep = e.txn_first_offset.is_some() || now_ms.saturating_sub(e.last_timestamp) <= expiration_ms;
            if !keep {
                tracing::debug!(pid, last_timestamp = e.last_timestamp, now_ms, "producer expired");
            }
            keep
        });
        before - producers.len()
    }

    /// Stage 1 of produce for one batch (header already validated): the idempotence check,
    /// the append, then the state update — in that order, under the producer-state lock.
    /// Transactional batches are refused here; see [`Partition::append_batch_in_txn`].
    pub fn append_batch(&self, batch: &mut [u8], now_ms: i64) -> Result<Appended, AppendError> {
        self.append_batch_in_txn(batch, now_ms, None)
    }

    /// [`Partition::append_batch`] where a transactional batch is first verified by `verify`
    /// (the transaction coordinator: is this partition in the producer's ongoing transaction?).
    /// The verification runs under the producer-state lock, which a marker also takes: a batch
    /// verified before its transaction ended is in the log before that transaction's marker.
    pub fn append_batch_in_txn(
        &self,
        batch: &mut [u8],
        now_ms: i64,
        verify: Option<&dyn Fn(i64, i16) -> Result<(), Refusal>>,
    ) -> Result<Appended, AppendError> {
        let header = BatchView::parse_unchecked_crc(batch).map(|v| (v.producer_id(), BatchHeader::of(&v)));
        let (pid, hdr) = match header {
            Ok((pid, hdr)) if pid != NO_PRODUCER_ID => (pid, hdr),
            _ => {
                let producers = self.producers.lock().or_die();
                let (info, log_start, sync) = self.append(batch, now_ms, false).map_err(AppendError::Storage)?;
                if info.rolled {
                    self.snapshot(&producers, info.first_offset);
                }
                drop(producers);
                return Ok(Appended::New { info, log_start, sync });
            }
        };
        let mut producers = self.producers.lock().or_die();
        let verify_this = verify.map(|v| move || v(pid, hdr.epoch));
        let plan = producer_state::decide(
            producers.get(&pid),
            &hdr,
            verify_this.as_ref().map(|v| v as &dyn Fn() -> Result<(), Refusal>),
        );
        match plan {
            Plan::Reject(r) => {
                Self::count_refusal(&r);
                Err(AppendError::Refused(r))
            }
            Plan::Duplicate { first_offset, last_offset } => {
                ::metrics::counter!(crate::metrics::PRODUCE_DUPLICATES_TOTAL).increment(1);
                let log = self.log();
                let sync = log.config().flush == FlushPolicy::Sync;
                Ok(Appended::Duplicate { first_offset, last_offset, log_start: log.log_start_offset(), sync })
            }
            Plan::Append => {
                let opens_txn = hdr.transactional && producers.get(&pid).is_none_or(|e| e.txn_first_offset.is_none());
                let (info, log_start, sync) = self.append(batch, now_ms, opens_txn).map_err(AppendError::Storage)?;
                if info.rolled {
                    // the state before this batch = the state for every offset below the new segment
                    self.snapshot(&producers, info.first_offset);
                }
                let entry = producers.remove(&pid);
                let mut entry = producer_state::apply(entry, &hdr, info.first_offset, info.last_offset);
                // Expiry is judged by when the broker last heard from the producer, not by record
                // timestamps alone: a producer writing old timestamps must not lose its state.
                entry.last_timestamp = entry.last_timestamp.max(now_ms);
                producers.insert(pid, entry);
                if opens_txn {
                    self.first_unstable.store(first_unstable(&producers), Ordering::Release);
                }
                Ok(Appended::New { info, log_start, sync })
            }
        }
    }

    pub(crate) fn count_refusal(r: &Refusal) {
        let reason = match r {
            Refusal::InvalidProducerEpoch { .. } => "invalid_producer_epoch",
            Refusal::OutOfOrderSequence { .. } => "out_of_order_sequence",
            Refusal::InvalidTxnState => "invalid_txn_state",
            Refusal::UnknownProducerId { .. } => "unknown_producer_id",
            Refusal::CoordinatorFenced { .. } => "coordinator_fenced",
            Refusal::TxnVerification(_) | Refusal::NotInTransaction => "not_in_transaction",
        };
        ::metrics::counter!(crate::metrics::PRODUCE_REFUSED_TOTAL, "reason" => reason).increment(1);
        if matches!(r, Refusal::InvalidProducerEpoch { .. }) {
            ::metrics::counter!(crate::metrics::PRODUCERS_FENCED_TOTAL, "api" => "produce").increment(1);
        }
    }

    pub fn log(&self) -> MutexGuard<'_, Log> {
        self.log.lock().or_die()
    }

    pub fn set_config(&self, mut config: LogConfig) -> Result<(), StorageError> {
        if self.is_single_log() {
            // the batches carry Raft terms, not one epoch (decision 0045)
            config.leader_epoch = None;
        }
        self.log().set_config(config)
    }

    /// Stage 1 of produce: validate and write (ordered with other appends to this partition).
    /// Returns what was stored, the log start offset, and whether durability must be awaited.
    ///
    /// `opens_txn`: the batch opens a transaction. The LSO is lowered to its first offset while
    /// the log lock is still held — before anything (this call under the Interval policy, a
    /// concurrent group-commit fsync under Sync, a replica's publish) can move the high
    /// watermark past it — so a read_committed fetch never sees it before its marker.
    fn append(
        &self,
        batches: &mut [u8],
        now_ms: i64,
        opens_txn: bool,
    ) -> Result<(AppendInfo, i64, bool), StorageError> {
        let mut log = self.log();
        let info = log.append(batches, now_ms, Some(0))?;
        if opens_txn {
            self.first_unstable.fetch_min(info.first_offset, Ordering::AcqRel);
        }
        let log_start = log.log_start_offset();
        match log.config().flush {
            FlushPolicy::Sync => Ok((info, log_start, true)),
            FlushPolicy::Interval { .. } => {
                let leo = log.log_end_offset();
                log.set_high_watermark(leo);
                drop(log);
                self.hw_changed.notify_waiters();
                Ok((info, log_start, false))
            }
        }
    }

    /// Stage 2 of produce under the Sync policy: wait until offsets below `end` are durable,
    /// then advance the high watermark. Blocks: call from a blocking thread.
    pub fn wait_durable(&self, end: i64) -> Result<(), StorageError> {
        let started = std::time::Instant::now();
        if crate::failpoints::armed(crate::failpoints::Failpoint::ProduceAckBeforeFsync) {
            // on purpose: the acknowledgement claims what no fsync made true
            let mut log = self.log();
            let leo = log.log_end_offset();
            log.set_high_watermark(leo);
            drop(log);
            self.hw_changed.notify_waiters();
            return Ok(());
        }
        let durable = self.flusher().sync_to(end)?;
        ::metrics::histogram!(crate::metrics::FSYNC_SECONDS).record(started.elapsed().as_secs_f64());
        self.log().set_high_watermark(durable);
        self.hw_changed.notify_waiters();
        Ok(())
    }

    /// [`Partition::wait_durable`] from async code (on a blocking thread), if `sync`.
    pub async fn wait_durable_async(self: &Arc<Self>, end: i64, sync: bool) -> Result<(), StorageError> {
        if !sync {
            return Ok(());
        }
        let p = self.clone();
        tokio::task::spawn_blocking(move || p.wait_durable(end))
            .await
            .unwrap_or_else(|e| Err(StorageError::InvalidConfig(e.to_string())))
    }

    /// A replicated partition (cluster::replica): everything applied is committed — on a
    /// majority's fsynced Raft logs — so the high watermark moves to the log end at once; this
    /// replica's own copy is fsynced later (`flush`) and rebuilt from the Raft log after a crash.
    pub fn publish_committed(&self) {
        let mut log = self.log();
        let leo = log.log_end_offset();
        if leo > log.high_watermark() {
            log.set_high_watermark(leo);
        }
        drop(log);
        self.hw_changed.notify_waiters();
    }

    fn flusher(&self) -> Arc<Flusher> {
        self.flusher.lock().or_die().clone()
    }

    /// A replica installs a snapshot of its partition (`cluster::replica`): the staged files
    /// (`sluice_storage::snapshot`) replace this partition's log, and producer state, open
    /// transactions and marker history are rebuilt from them. Everything in a snapshot is
    /// committed: the high watermark is its end. Returns the new log's start and end.
    pub fn install_snapshot(&self, staged: &std::path::Path, log_start: i64) -> Result<(i64, i64), StorageError> {
        sluice_storage::snapshot::finish_staging(staged, log_start)?;
        let mut producers = self.producers.lock().or_die();
        let mut log = self.log();
        let dir = log.dir().to_path_buf();
        let config = log.config().clone();
        sluice_storage::snapshot::swap_in(&dir, staged)?;
        let mut new = Log::open(&dir, config)?;
        let (rebuilt, complete) = rebuild_producer_state(&mut new);
        *producers = rebuilt;
        self.replay_incomplete.store(!complete || new.is_damaged(), Ordering::Release);
        let leo = new.log_end_offset();
        new.set_high_watermark(leo);
        let offsets = (new.log_start_offset(), leo);
        self.first_unstable.store(first_unstable(&producers), Ordering::Release);
        *self.markers.lock().or_die() = MarkerHistory { opened_end: leo, last: HashMap::new() };
        self.verified.lock().or_die().clear();
        *self.flusher.lock().or_die() = new.flusher();
        drop(std::mem::replace(&mut *log, new));
        drop(log);
        drop(producers);
        self.hw_changed.notify_waiters();
        Ok(offsets)
    }

    /// Periodic flush for the Interval policy (and the recovery-point checkpoint).
    pub fn flush(&self) -> Result<(), StorageError> {
        let flusher = self.flusher();
        let end = flusher.written_end();
        let durable = flusher.sync_to(end)?;
        let mut log = self.log();
        if log.config().flush == FlushPolicy::Sync {
            log.set_high_watermark(durable);
        }
        log.write_checkpoint()
    }

    /// Write a producer-state snapshot at `offset` (the state of every batch below it) and
    /// keep only this one and the previous. A failure costs only a longer replay on restart.
    /// The file write (and its fsyncs) happens outside the log lock, so reads carry on.
    fn snapshot(&self, producers: &HashMap<i64, ProducerEntry>, offset: i64) {
        let dir = self.log().dir().to_path_buf();
        let payload = producer_state::encode_snapshot(producers.iter());
        match sluice_storage::log::write_producer_snapshot(&dir, offset, &payload) {
            Ok(()) => {
                let log = self.log();
                if let Ok(offsets) = log.producer_snapshot_offsets() {
                    if offsets.len() > 2 {
                        let _ = log.delete_snapshots_before(offsets[offsets.len() - 2]);
                    }
                }
            }
            Err(e) => tracing::warn!(topic = %self.topic, partition = self.index, "producer snapshot failed: {e}"),
        }
    }

    /// Take the log out for a clean close at shutdown, snapshotting producer state at the end
    /// of the log first so the next start replays nothing.
    pub fn into_log(self) -> Log {
        let producers = self.producers.lock().or_die().clone();
        let leo = self.log().log_end_offset();
        self.snapshot(&producers, leo);
        self.log.into_inner().or_die()
    }

    /// Publish this partition's offsets and producer count as gauges.
    pub fn record_gauges(&self) {
        let producers = self.producers.lock().or_die().len();
        let (leo, hw, lso, offline) = {
            let log = self.log();
            (log.log_end_offset(), log.high_watermark(), self.last_stable_offset_of(&log), log.is_offline())
        };
        let labels = [("topic", self.topic.clone()), ("partition", self.index.to_string())];
        ::metrics::gauge!(crate::metrics::LOG_END_OFFSET, &labels).set(leo as f64);
        ::metrics::gauge!(crate::metrics::HIGH_WATERMARK, &labels).set(hw as f64);
        ::metrics::gauge!(crate::metrics::LAST_STABLE_OFFSET, &labels).set(lso as f64);
        ::metrics::gauge!(crate::metrics::LSO_LAG, &labels).set((hw - lso) as f64);
        ::metrics::gauge!(crate::metrics::PRODUCERS, &labels).set(producers as f64);
        ::metrics::gauge!(crate::metrics::PARTITION_OFFLINE, &labels).set(if offline { 1.0 } else { 0.0 });
    }

    pub fn high_watermark(&self) -> i64 {
        self.log().high_watermark()
    }

    /// The log cleaner's view of this partition (`None`: not a compacted topic): how dirty its
    /// cleanable range is and whether a pass is due now — the dirty ratio reached
    /// `min.cleanable.dirty.ratio`, the oldest dirty record passed `max.compaction.lag.ms`, or
    /// tombstones reached their `delete.retention.ms` horizon.
    pub fn cleaning_status(&self, now_ms: i64) -> Option<CleaningStatus> {
        let log = self.log();
        let c = log.config().clone();
        if !c.cleanup_compact {
            return None;
        }
        let upper = self.last_stable_offset_of(&log).min(self.clean_limit.load(Ordering::Acquire));
        let end = log.cleanable_end(upper, now_ms, c.min_compaction_lag_ms);
        let (clean, dirty) = log.clean_and_dirty_bytes(end);
        let ratio = if clean + dirty == 0 { 0.0 } else { dirty as f64 / (clean + dirty) as f64 };
        let oldest_dirty = log.first_dirty_timestamp(end);
        let overdue = oldest_dirty.is_some_and(|t| t >= 0 && now_ms.saturating_sub(t) > c.max_compaction_lag_ms);
        let state = log.cleaner_state();
        let tombstones_due = state.deletes_due(now_ms, c.delete_retention_ms) && end > log.log_start_offset();
        Some(CleaningStatus {
            dirty_ratio: ratio,
            dirty_bytes: dirty,
            due: (dirty > 0 && (ratio >= c.min_cleanable_dirty_ratio || overdue)) || tombstones_due,
            oldest_dirty_ms: oldest_dirty,
            last_cleaned_ms: state.last_cleaned_ms(),
        })
    }

    /// One log-cleaner pass (`sluice_storage::cleaner`): the range is taken and the result
    /// swapped in under the log lock, the cleaning itself runs without it (appends and reads go
    /// on). Open transactions are never touched: the pass stops at the last stable offset. The
    /// last batch of every producer this partition still tracks is kept, so idempotence and
    /// transactions carry on across cleaning and restarts. `None`: nothing to clean.
    pub fn clean(
        &self,
        now_ms: i64,
        map_capacity: usize,
        io_bytes_per_second: Option<f64>,
    ) -> Result<Option<sluice_storage::cleaner::CleanStats>, StorageError> {
        // a replicated partition's copy is fsynced lazily: make the range durable first
        let lso = self.last_stable_offset();
        self.flusher().sync_to(lso)?;
        let keep_last: HashMap<i64, i64> = self
            .producers
            .lock()
            .or_die()
            .iter()
            .filter_map(|(pid, e)| e.batches.back().map(|b| (*pid, b.last_offset)))
            .collect();
        let (mut job, opts) = {
            let log = self.log();
            let c = log.config();
            if !c.cleanup_compact {
                return Ok(None);
            }
            let opts = sluice_storage::cleaner::CleanOptions {
                now_ms,
                delete_retention_ms: c.delete_retention_ms,
                min_compaction_lag_ms: c.min_compaction_lag_ms,
                upper: self.last_stable_offset_of(&log).min(self.clean_limit.load(Ordering::Acquire)),
                map_capacity,
                keep_last,
                io_bytes_per_second,
            };
            match log.prepare_clean(&opts)? {
                Some(job) => (job, opts),
                None => return Ok(None),
            }
        };
        let cleaned = sluice_storage::cleaner::clean(&mut job, &opts)?;
        let stats = cleaned.stats.clone();
        let installed = self.log().install_clean(cleaned)?;
        Ok(installed.then_some(stats))
    }

    /// Read up to `max_bytes` from `offset`, bounded by the high watermark (read_uncommitted)
    /// or the last stable offset (read_committed, with the aborted transactions overlapping
    /// what is returned).
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        read_committed: bool,
        min_one: bool,
    ) -> Result<ReadOutcome, StorageError> {
        let log = self.log();
        let hw = log.high_watermark();
        let lso = self.last_stable_offset_of(&log);
        let ignore_lso = crate::failpoints::armed(crate::failpoints::Failpoint::FetchIgnoreLso);
        let upper = if read_committed && !ignore_lso { lso } else { hw };
        let records = match log.read(offset, max_bytes, Some(upper), min_one) {
            Ok(r) => r,
            Err(e) => {
                self.report_damage(&e, "");
                return Err(e);
            }
        };
        let aborted = if read_committed && !records.is_empty() {
            let end = iter_batches(&records).filter_map(|b| b.ok()).map(|(_, v)| v.last_offset() + 1).max();
            log.collect_aborted_txns(offset, end.unwrap_or(upper))
                .into_iter()
                .map(|t| (t.producer_id, t.first_offset))
                .collect()
        } else {
            Vec::new()
        };
        Ok(ReadOutcome {
            records,
            high_watermark: hw,
            last_stable_offset: lso,
            log_start_offset: log.log_start_offset(),
            aborted,
        })
    }
}

impl Partition {
    /// One log line and the corruption counter for damaged data a read or the scrubber met
    /// (reported once: the log is offline from then on and answers `Offline`).
    fn report_damage(&self, e: &StorageError, found_by: &str) {
        if let StorageError::Corrupt { path, position, reason } = e {
            tracing::error!(
                "partition {}-{} is offline: damaged data in {} at byte {position}: {reason}; \
                 nothing from it is served{found_by} (docs/storage.md, \"Damaged data\")",
                self.topic,
                self.index,
                path.display()
            );
            ::metrics::counter!(crate::metrics::STORAGE_CORRUPTIONS_TOTAL, "topic" => self.topic.clone()).increment(1);
        }
    }

    /// Replace the damaged batch `d` with a peer's `copy` (`Log::repair`); once the log is
    /// whole again, the producer state is rebuilt if the damage was there at open (its replay
    /// stopped then). No append ran while the log was damaged: it refuses them.
    pub fn repair(&self, d: &sluice_storage::Damage, copy: &[u8]) -> Result<bool, StorageError> {
        let mut producers = self.producers.lock().or_die();
        let mut log = self.log();
        let whole = log.repair(d, copy)?;
        if whole && self.replay_incomplete.swap(false, Ordering::AcqRel) {
            let (mut rebuilt, complete) = rebuild_producer_state(&mut log);
            // more damage further on stopped it again: completed after that repair
            self.replay_incomplete.store(!complete, Ordering::Release);
            let now = crate::clock::now_ms();
            for e in rebuilt.values_mut() {
                e.last_timestamp = e.last_timestamp.max(now);
            }
            self.first_unstable.store(first_unstable(&rebuilt), Ordering::Release);
            *producers = rebuilt;
        }
        Ok(whole)
    }

    /// The scrubber's step: check about `max_bytes` of segment `segment` from byte `position`
    /// (`sluice_storage::Log::scrub`); damage is reported as a read's is.
    pub fn scrub(&self, segment: i64, position: u64, max_bytes: usize) -> Result<Option<u64>, StorageError> {
        let result = self.log().scrub(segment, position, max_bytes);
        if let Err(e) = &result {
            self.report_damage(e, " (found by the scrubber)");
        }
        result
    }
}

fn first_unstable(producers: &HashMap<i64, ProducerEntry>) -> i64 {
    producers.values().filter_map(|e| e.txn_first_offset).min().unwrap_or(i64::MAX)
}

/// Rebuild producer state: the newest snapshot, then every idempotent batch and transaction
/// marker after it applied in offset order, exactly as when it was appended. An ABORT marker
/// whose aborted-transaction index entry a crash lost gets it back. `false` with it: a read
/// failed (damage), so the state is only what came before it.
fn rebuild_producer_state(log: &mut Log) -> (HashMap<i64, ProducerEntry>, bool) {
    let mut producers: HashMap<i64, ProducerEntry> = HashMap::new();
    let mut offset = log.log_start_offset();
    // Start from the newest readable snapshot (the log already dropped any past its end).
    match log.latest_producer_snapshot() {
        Ok(Some((snap_offset, payload))) => match producer_state::decode_snapshot(&payload) {
            Some(entries) => {
                producers.extend(entries);
                offset = offset.max(snap_offset);
            }
            None => tracing::warn!("producer snapshot at {snap_offset} is malformed; replaying the whole log"),
        },
        Ok(None) => {}
        Err(e) => tracing::warn!("producer snapshots unreadable ({e}); replaying the whole log"),
    }
    let end = log.log_end_offset();
    while offset < end {
        let chunk = match log.read(offset, 4 << 20, None, true) {
            Ok(c) if !c.is_empty() => c,
            Ok(_) => break,
            Err(e) => {
                tracing::error!("producer-state replay stopped at offset {offset}: {e}");
                return (producers, false);
            }
        };
        for item in iter_batches(&chunk) {
            let Ok((_, v)) = item else { break };
            offset = v.last_offset() + 1;
            replay_batch(log, &mut producers, &v, true);
        }
    }
    (producers, true)
}

/// Apply one stored batch to producer state, as it was when the batch was appended: an
/// idempotent batch moves its producer, a transaction marker closes its transaction (an ABORT
/// gets its aborted-transaction index entry back if a crash lost it); a batch without a
/// producer, or of an older epoch than its producer's, changes nothing.
fn replay_batch(log: &mut Log, producers: &mut HashMap<i64, ProducerEntry>, v: &BatchView<'_>, replaying: bool) {
    if v.producer_id() == NO_PRODUCER_ID {
        return;
    }
    if v.is_control() {
        replay_marker(log, producers, v, replaying);
        return;
    }
    let hdr = BatchHeader::of(v);
    let pid = v.producer_id();
    let entry = producers.remove(&pid);
    let stale = entry.as_ref().is_some_and(|e| hdr.epoch < e.epoch);
    if stale {
        tracing::warn!(pid, offset = v.base_offset(), "replay: batch with an older epoch ignored");
        if let Some(e) = entry {
            producers.insert(pid, e);
        }
        return;
    }
    producers.insert(pid, producer_state::apply(entry, &hdr, v.base_offset(), v.last_offset()));
}

/// `replaying`: a replay of stored batches (an index entry written now was lost, and is said
/// so); otherwise the marker was just appended and its entry is written for the first time.
fn replay_marker(log: &mut Log, producers: &mut HashMap<i64, ProducerEntry>, v: &BatchView<'_>, replaying: bool) {
    let Ok(Some(marker)) = v.control_marker() else {
        tracing::warn!(offset = v.base_offset(), "replay: unreadable control batch ignored");
        return;
    };
    let pid = v.producer_id();
    let m = MarkerHeader {
        epoch: v.producer_epoch(),
        coordinator_epoch: marker.coordinator_epoch,
        commit: marker.kind == ControlType::Commit,
        timestamp: v.max_timestamp(),
    };
    let (entry, closed) = producer_state::apply_marker(producers.remove(&pid), &m);
    producers.insert(pid, entry);
    if let (Some(first_offset), false) = (closed, m.commit) {
        let at = v.base_offset();
        if !log.collect_aborted_txns(at, at + 1).iter().any(|t| t.last_offset == at && t.producer_id == pid) {
            let lso = first_unstable(producers).min(at + 1);
            let txn = AbortedTxn { producer_id: pid, first_offset, last_offset: at, last_stable_offset: lso };
            match log.append_aborted_txn(txn) {
                Ok(()) if replaying => {
                    tracing::info!(pid, offset = at, "replay: restored a lost aborted-transaction index entry")
                }
                Ok(()) => {}
                Err(e) => tracing::error!(pid, offset = at, "replay: cannot restore aborted-transaction entry: {e}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::error::ResponseError;
    use sluice_protocol::batch::{BatchBuilder, NewRecord};

    fn batch(pid: i64, epoch: i16, seq: i32, n: usize) -> Vec<u8> {
        let recs: Vec<NewRecord> = (0..n)
            .map(|i| NewRecord {
                timestamp: 1000 + i as i64,
                value: Some(Bytes::from(vec![7u8; 90])),
                ..Default::default()
            })
            .collect();
        BatchBuilder { producer_id: pid, producer_epoch: epoch, base_sequence: seq, ..Default::default() }
            .build(&recs)
            .unwrap()
            .to_vec()
    }

    fn config() -> LogConfig {
        LogConfig { segment_bytes: 1500, retention_ms: -1, ..LogConfig::default() }
    }

    fn open(dir: &std::path::Path) -> Partition {
        Partition::new("t".into(), 0, Log::open(dir, config()).unwrap(), Arc::new(tokio::sync::Notify::new()))
    }

    /// Producer state without `last_timestamp`, which a reload sets to the reload time.
    fn state(p: &Partition) -> HashMap<i64, ProducerEntry> {
        let mut m = p.producers.lock().unwrap().clone();
        for e in m.values_mut() {
            e.last_timestamp = 0;
        }
        m
    }

    /// Write batches from several producers across many segment rolls (with an epoch bump and a
    /// plain producer mixed in).
    fn fill(p: &Partition) {
        let mut seqs = [0i32; 3];
        for round in 0..40 {
            for pid in 0..3usize {
                let epoch = if pid == 2 && round >= 20 { 1 } else { 0 };
                if pid == 2 && round == 20 {
                    seqs[2] = 0;
                }
                let n = 1 + (round + pid) % 3;
                let mut b = batch(pid as i64 + 100, epoch, seqs[pid], n);
                assert!(matches!(p.append_batch(&mut b, 0).unwrap(), Appended::New { .. }));
                seqs[pid] += n as i32;
            }
            let mut plain = BatchBuilder::default().build(&[NewRecord::default()]).unwrap().to_vec();
            p.append_batch(&mut plain, 0).unwrap();
        }
    }

    /// A retry of producer 100's last batch (in `before`) is answered as a duplicate.
    fn assert_last_retry_is_a_duplicate(p: &Partition, before: &HashMap<i64, ProducerEntry>) {
        let last = before[&100].batches.back().copied().unwrap();
        let mut retry = batch(100, 0, last.first_seq, (last.last_seq - last.first_seq + 1) as usize);
        assert!(matches!(
            p.append_batch(&mut retry, 0).unwrap(),
            Appended::Duplicate { first_offset, .. } if first_offset == last.first_offset
        ));
    }

    #[test]
    fn snapshot_plus_replay_reproduces_the_state_after_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(dir.path());
        fill(&p);
        let before = state(&p);
        assert_eq!(before.len(), 3);
        assert_eq!(before[&102].epoch, 1);
        let snaps = p.log().producer_snapshot_offsets().unwrap();
        assert!(!snaps.is_empty() && snaps.len() <= 2, "snapshots at rolls, two kept: {snaps:?}");
        drop(p); // crash: no clean close
        let p = open(dir.path());
        assert_eq!(state(&p), before, "newest snapshot + replay after it");
        // a retry of the last batch is still recognised
        assert_last_retry_is_a_duplicate(&p, &before);
        // clean close: snapshot at the end of the log
        let leo = p.log().log_end_offset();
        p.into_log().close().unwrap();
        let p = open(dir.path());
        assert_eq!(p.log().producer_snapshot_offsets().unwrap().last(), Some(&leo));
        assert_eq!(state(&p), before);
    }

    #[test]
    fn idle_producers_expire_but_not_with_an_open_transaction() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(dir.path());
        let mut b = batch(1, 0, 0, 1); // timestamps ~1000, appended at "time" 1000
        p.append_batch(&mut b, 1000).unwrap();
        let mut t = BatchBuilder {
            producer_id: 2,
            producer_epoch: 0,
            base_sequence: 0,
            transactional: true,
            ..Default::default()
        }
        .build(&[NewRecord { timestamp: 1000, ..Default::default() }])
        .unwrap()
        .to_vec();
        p.append_batch_in_txn(&mut t, 1000, Some(&|_, _| Ok(()))).unwrap();
        assert_eq!(p.expire_producers(1500, 1000), 0, "not idle long enough");
        assert_eq!(p.expire_producers(1_000_000, 1000), 1);
        let left: Vec<i64> = p.producer_entries().into_iter().map(|(pid, _)| pid).collect();
        assert_eq!(left, vec![2], "the producer with an open transaction stays");
        // the expired producer must restart its sequence
        let mut again = batch(1, 0, 1, 1);
        assert!(matches!(p.append_batch(&mut again, 0), Err(AppendError::Refused(Refusal::UnknownProducerId { .. }))));
    }

    #[test]
    fn damaged_snapshots_fall_back_to_a_full_replay() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(dir.path());
        fill(&p);
        let before = state(&p);
        drop(p);
        for off in Log::open(dir.path(), config()).unwrap().producer_snapshot_offsets().unwrap() {
            let path = dir.path().join(sluice_storage::segment::file_name(off, "snapshot"));
            let mut bytes = std::fs::read(&path).unwrap();
            let n = bytes.len();
            bytes[n - 1] ^= 0xff;
            std::fs::write(&path, bytes).unwrap();
        }
        let p = open(dir.path());
        assert_eq!(state(&p), before);
    }

    /// Issue 22 (decision 0037): rot in a closed segment that only the producer-state replay
    /// reads (the snapshots are gone, so it replays from the start) stops the replay there and
    /// takes the log offline; once a replica's copy repairs the batch, the replay is completed:
    /// the producer state is what it was before the crash, and a retry of the last batch is
    /// still a duplicate.
    #[test]
    fn a_replay_stopped_by_damage_is_completed_once_a_copy_repairs_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(dir.path());
        fill(&p);
        let before = state(&p);
        drop(p); // crash: no clean close
        for off in Log::open(dir.path(), config()).unwrap().producer_snapshot_offsets().unwrap() {
            std::fs::remove_file(dir.path().join(sluice_storage::segment::file_name(off, "snapshot"))).unwrap();
        }
        // another replica's copy: the same bytes
        let copy_dir = tempfile::tempdir().unwrap();
        for e in std::fs::read_dir(dir.path()).unwrap().flatten() {
            std::fs::copy(e.path(), copy_dir.path().join(e.file_name())).unwrap();
        }
        let replica = Log::open(copy_dir.path(), config()).unwrap();
        // a bit rots inside the records of the first segment's second batch (under its CRC)
        let first = dir.path().join(sluice_storage::segment::file_name(0, "log"));
        let mut bytes = std::fs::read(&first).unwrap();
        let starts: Vec<usize> = iter_batches(&bytes).map(|b| b.unwrap().0).collect();
        bytes[starts[1] + 62] ^= 0x04;
        std::fs::write(&first, &bytes).unwrap();
        let p = open(dir.path());
        assert!(p.log().is_offline(), "the replay met the damage: the log is offline");
        assert_ne!(state(&p), before, "the replay stopped at the damage");
        let d = p.log().find_damage().unwrap().expect("the damage is found");
        let copy = replica.read(d.base_offset, 1, None, true).unwrap();
        assert!(p.repair(&d, &copy).unwrap(), "repaired and online");
        assert_eq!(state(&p), before, "the replay is completed after the repair");
        assert_last_retry_is_a_duplicate(&p, &before);
    }

    fn txn_batch(pid: i64, epoch: i16, seq: i32, n: usize) -> Vec<u8> {
        let recs: Vec<NewRecord> =
            (0..n).map(|i| NewRecord { timestamp: 1000 + i as i64, ..Default::default() }).collect();
        BatchBuilder {
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            transactional: true,
            ..Default::default()
        }
        .build(&recs)
        .unwrap()
        .to_vec()
    }

    fn append_durably(p: &Partition, mut b: Vec<u8>) -> i64 {
        match p.append_batch_in_txn(&mut b, 0, Some(&|_, _| Ok(()))).unwrap() {
            Appended::New { info, .. } => {
                p.wait_durable(info.last_offset + 1).unwrap();
                info.first_offset
            }
            other => panic!("{other:?}"),
        }
    }

    fn marker(p: &Partition, pid: i64, epoch: i16, commit: bool) -> i64 {
        let m = MarkerHeader { epoch, coordinator_epoch: 0, commit, timestamp: 5 };
        let w = p.write_marker(pid, &m, 0).unwrap();
        p.wait_durable(w.offset + 1).unwrap();
        w.offset
    }

    fn offsets_read(p: &Partition, from: i64, committed: bool) -> (Vec<i64>, ReadOutcome) {
        let out = p.read(from, 1 << 20, committed, true).unwrap();
        let offs = iter_batches(&out.records).map(|b| b.unwrap().1.base_offset()).collect();
        (offs, out)
    }

    /// The replicated KIP-890 guard: a marker at or after the verification's start is found
    /// whether it was written since the partition was opened or before (read from the log), and
    /// only the producer's own markers count.
    #[test]
    fn markers_since_an_offset_are_found_in_memory_and_after_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(dir.path());
        append_durably(&p, txn_batch(7, 0, 0, 2)); // 0..=1
        let from = p.log().log_end_offset(); // 2: a verification begins here
        assert!(!p.marker_since(7, from));
        append_durably(&p, batch(1, 0, 0, 1)); // 2, another producer
        marker(&p, 8, 0, true); // 3, another producer's marker
        assert!(!p.marker_since(7, from), "other producers' markers do not count");
        let at = marker(&p, 7, 0, true); // 4
        assert!(p.marker_since(7, from) && p.marker_since(7, at) && !p.marker_since(7, at + 1));
        drop(p);
        let p = open(dir.path());
        assert!(p.marker_since(7, from), "found in the log after a reopen");
        assert!(!p.marker_since(7, at + 1));
        assert!(!p.marker_since(1, 0), "a producer without markers");
    }

    #[test]
    fn the_lso_gates_open_transactions_and_aborts_are_indexed() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(dir.path());
        append_durably(&p, batch(1, 0, 0, 1)); // offset 0, plain
        let t1 = append_durably(&p, txn_batch(7, 0, 0, 2)); // 1..=2, txn of producer 7
        append_durably(&p, batch(1, 0, 1, 1)); // 3, plain, after the open txn
        assert_eq!(t1, 1);
        assert_eq!(p.high_watermark(), 4);
        assert_eq!(p.last_stable_offset(), 1, "the open transaction holds the LSO at its first offset");
        let (rc, out) = offsets_read(&p, 0, true);
        assert_eq!(rc, vec![0], "read_committed stops at the LSO");
        assert_eq!(out.last_stable_offset, 1);
        let (ru, _) = offsets_read(&p, 0, false);
        assert_eq!(ru, vec![0, 1, 3], "read_uncommitted sees everything below the HW");
        // a transactional batch the coordinator does not vouch for is refused, and nothing is written
        let mut stray = txn_batch(9, 0, 0, 1);
        let refuse = |_: i64, _: i16| Err(Refusal::TxnVerification(ResponseError::InvalidTxnState.code()));
        assert!(matches!(
            p.append_batch_in_txn(&mut stray, 0, Some(&refuse)),
            Err(AppendError::Refused(Refusal::TxnVerification(_)))
        ));
        let mut stray = txn_batch(9, 0, 0, 1);
        assert!(matches!(p.append_batch(&mut stray, 0), Err(AppendError::Refused(Refusal::InvalidTxnState))));
        assert_eq!(p.log().log_end_offset(), 4);
        // a plain batch from the producer with the open transaction is refused
        let mut plain = batch(7, 0, 2, 1);
        assert!(matches!(p.append_batch(&mut plain, 0), Err(AppendError::Refused(Refusal::InvalidTxnState))));
        // abort: marker at 4, LSO released, aborted transaction listed for read_committed
        let at = marker(&p, 7, 0, false);
        assert_eq!(at, 4);
        assert_eq!(p.last_stable_offset(), 5);
        let (rc, out) = offsets_read(&p, 0, true);
        assert_eq!(rc, vec![0, 1, 3, 4]);
        assert_eq!(out.aborted, vec![(7, 1)]);
        let (_, out) = offsets_read(&p, 4, true);
        assert_eq!(out.aborted, vec![(7, 1)], "the marker's own fetch still lists its transaction");
        let (_, out) = offsets_read(&p, 5, true);
        assert!(out.records.is_empty() && out.aborted.is_empty());
        // a second transaction, committed: no aborted entry for it
        append_durably(&p, txn_batch(7, 0, 2, 1)); // 5
        assert_eq!(p.last_stable_offset(), 5);
        marker(&p, 7, 0, true); // 6
        assert_eq!(p.last_stable_offset(), 7);
        let (_, out) = offsets_read(&p, 5, true);
        assert!(out.aborted.is_empty(), "{:?}", out.aborted);
        // a zombie's marker (older epoch) is refused
        let m = MarkerHeader { epoch: -1, coordinator_epoch: 0, commit: true, timestamp: 0 };
        assert!(matches!(p.write_marker(7, &m, 0), Err(AppendError::Refused(Refusal::InvalidProducerEpoch { .. }))));
    }

    /// Kafka keeps `logStart ≤ LSO ≤ HW`: DeleteRecords past the first batch of a transaction
    /// that is still open must not leave the LSO at an offset Fetch refuses.
    #[test]
    fn the_lso_never_falls_below_the_log_start() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(dir.path());
        append_durably(&p, txn_batch(7, 0, 0, 1)); // 0: opens 7's transaction
        append_durably(&p, batch(1, 0, 0, 1)); // 1
        append_durably(&p, batch(1, 0, 1, 1)); // 2
        assert_eq!(p.last_stable_offset(), 0);
        p.log().delete_records(2).unwrap();
        assert_eq!(p.log().log_start_offset(), 2);
        assert_eq!(p.last_stable_offset(), 2, "clamped to the log start");
        let (offs, out) = offsets_read(&p, 2, true);
        assert!(offs.is_empty(), "the open transaction still holds back read_committed: {offs:?}");
        assert_eq!(out.last_stable_offset, 2);
        marker(&p, 7, 0, true); // 3
        assert_eq!(p.last_stable_offset(), 4);
        let (offs, _) = offsets_read(&p, 2, true);
        assert_eq!(offs, vec![2, 3]);
    }

    /// A read_committed fetch racing the append of a batch that opens a transaction must never
    /// see that batch before its marker: the LSO has to be lowered before the high watermark
    /// covers the batch (a CI Jepsen run caught librdkafka reading an aborted record once).
    /// Every transaction here is aborted, so any data record a read returns must be listed
    /// as aborted.
    #[test]
    fn reads_racing_appends_never_see_an_open_transaction() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = LogConfig {
            segment_bytes: 1 << 30,
            retention_ms: -1,
            flush: FlushPolicy::Interval { interval_ms: 60_000 },
            ..LogConfig::default()
        };
        let p = Arc::new(Partition::new(
            "t".into(),
            0,
            Log::open(dir.path(), cfg).unwrap(),
            Arc::new(tokio::sync::Notify::new()),
        ));
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let (p, done) = (p.clone(), done.clone());
            std::thread::spawn(move || {
                let mut from = 0i64;
                let mut reads = 0u64;
                while !done.load(Ordering::Relaxed) {
                    let out = p.read(from, 1 << 20, true, true).unwrap();
                    reads += 1;
                    for item in iter_batches(&out.records) {
                        let (_, v) = item.unwrap();
                        if v.is_transactional() && !v.is_control() {
                            let listed = out
                                .aborted
                                .iter()
                                .any(|(pid, first)| *pid == v.producer_id() && *first <= v.base_offset());
                            assert!(listed, "read an open or aborted transaction's batch at {}", v.base_offset());
                        }
                        from = v.last_offset() + 1;
                    }
                }
                reads
            })
        };
        for seq in 0..5_000i32 {
            let mut b = txn_batch(7, 0, seq, 1);
            p.append_batch_in_txn(&mut b, 0, Some(&|_, _| Ok(()))).unwrap();
            let m = MarkerHeader { epoch: 0, coordinator_epoch: 0, commit: false, timestamp: 5 };
            p.write_marker(7, &m, 0).unwrap();
        }
        done.store(true, Ordering::Relaxed);
        let reads = reader.join().expect("the reader saw no open transaction");
        assert!(reads > 100, "the reader raced the writer ({reads} reads)");
    }

    #[test]
    fn open_transactions_and_lost_abort_entries_are_rebuilt_after_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(dir.path());
        append_durably(&p, txn_batch(7, 0, 0, 1)); // 0
        append_durably(&p, txn_batch(8, 0, 0, 1)); // 1
        marker(&p, 7, 0, false); // 2: abort 7
        append_durably(&p, batch(1, 0, 0, 1)); // 3
        assert_eq!(p.last_stable_offset(), 1, "8 is still open");
        drop(p); // crash
                 // the crash also lost the aborted-transaction index entry (written, not yet synced)
        for e in std::fs::read_dir(dir.path()).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_some_and(|x| x == "txnindex") {
                std::fs::write(&path, b"").unwrap();
            }
        }
        let p = open(dir.path());
        assert_eq!(p.last_stable_offset(), 1, "the open transaction of 8 is known again");
        let (offs, out) = offsets_read(&p, 0, true);
        assert_eq!(offs, vec![0], "only below the LSO");
        assert_eq!(out.aborted, vec![(7, 0)], "replay restored the lost entry: offset 0 is known aborted");
        marker(&p, 8, 0, true); // 4
        let (offs, out) = offsets_read(&p, 0, true);
        assert_eq!(offs, vec![0, 1, 2, 3, 4]);
        assert_eq!(out.aborted, vec![(7, 0)]);
        p.into_log().close().unwrap();
        let p = open(dir.path());
        let (_, out) = offsets_read(&p, 0, true);
        assert_eq!(out.aborted, vec![(7, 0)], "and it is not duplicated by a later replay");
        assert_eq!(p.last_stable_offset(), 5);
    }

    fn keyed(pid: i64, epoch: i16, seq: i32, keys: &[u8], transactional: bool) -> Vec<u8> {
        let recs: Vec<NewRecord> = keys
            .iter()
            .map(|k| NewRecord {
                timestamp: 1000,
                key: Some(Bytes::from(vec![*k])),
                value: Some(Bytes::from(vec![*k; 60])),
                ..Default::default()
            })
            .collect();
        BatchBuilder {
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            transactional,
            ..Default::default()
        }
        .build(&recs)
        .unwrap()
        .to_vec()
    }

    /// Cleaning keeps the last batch of every producer the partition tracks (emptied when its
    /// records are superseded) and the marker after it, so a restart that replays the whole
    /// cleaned log (no producer snapshot) rebuilds the same producer state: no transaction left
    /// open, sequences and epochs as they were, and a retry of the last batch still a duplicate.
    #[test]
    fn cleaning_keeps_producer_state_across_a_full_replay() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = LogConfig { cleanup_compact: true, cleanup_delete: false, ..config() };
        let p = Partition::new(
            "t".into(),
            0,
            Log::open(dir.path(), cfg.clone()).unwrap(),
            Arc::new(tokio::sync::Notify::new()),
        );
        let mut seq = 0;
        for round in 0..30 {
            // idempotent producer 7: keys 1..3 again and again
            let mut b = keyed(7, 0, seq, &[1, 2, 3], false);
            assert!(matches!(p.append_batch(&mut b, 0).unwrap(), Appended::New { .. }));
            let leo = p.log().log_end_offset();
            p.wait_durable(leo).unwrap();
            seq += 3;
            // transactional producer 8: one batch per transaction, committed or aborted
            append_durably(&p, keyed(8, 0, round, &[4], true));
            marker(&p, 8, 0, round % 3 != 0);
        }
        // the last batches are superseded by a plain producer's records
        let mut plain = keyed(-1, -1, -1, &[1, 2, 3, 4], false);
        p.append_batch(&mut plain, 0).unwrap();
        p.log().roll().unwrap();
        let leo = p.log().log_end_offset();
        p.wait_durable(leo).unwrap();
        let before = state(&p);
        let size_before = p.log().size_bytes();
        let stats = p.clean(10_000, 1 << 20, None).unwrap().expect("a pass ran");
        assert!(stats.records_kept < stats.records_read / 4, "{stats:?}");
        assert!(p.log().size_bytes() < size_before / 3);
        assert_eq!(state(&p), before);
        drop(p);
        for e in std::fs::read_dir(dir.path()).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_some_and(|x| x == "snapshot") {
                std::fs::remove_file(path).unwrap();
            }
        }
        let p =
            Partition::new("t".into(), 0, Log::open(dir.path(), cfg).unwrap(), Arc::new(tokio::sync::Notify::new()));
        let after = state(&p);
        for pid in [7, 8] {
            let (b, a) = (&before[&pid], &after[&pid]);
            assert_eq!((a.epoch, a.txn_first_offset), (b.epoch, None), "producer {pid}");
            assert_eq!(a.batches.back(), b.batches.back(), "producer {pid}'s last batch");
        }
        assert_eq!(p.last_stable_offset(), p.log().log_end_offset(), "no transaction reopened by the replay");
        let mut retry = keyed(7, 0, seq - 3, &[1, 2, 3], false);
        assert!(matches!(p.append_batch(&mut retry, 0).unwrap(), Appended::Duplicate { .. }));
        let mut next = keyed(7, 0, seq, &[1], false);
        assert!(matches!(p.append_batch(&mut next, 0).unwrap(), Appended::New { .. }));
    }
}

/// One log per replica (decision 0045 step 3): the partition derives its state from entries
/// appended with `append_entry` and cut with `truncate_entries` exactly as a replay of the same
/// log would.
#[cfg(test)]
mod entry_tests {
    use super::*;
    use proptest::prelude::*;
    use sluice_protocol::batch::{BatchBuilder, ControlMarker, NewRecord};

    #[derive(Debug, Clone)]
    enum Op {
        /// Producer `pid % 3`'s next batch of `n` records, transactional or not.
        Batch { pid: u8, n: u8, txn: bool },
        /// A COMMIT or ABORT marker for producer `pid % 3`.
        Marker { pid: u8, commit: bool },
        /// A Raft blank entry (a control batch without a producer).
        Blank,
        /// Raft truncates the entries from the `at`-th last on.
        Truncate { at: u8 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (any::<u8>(), 1u8..4, any::<bool>()).prop_map(|(pid, n, txn)| Op::Batch { pid, n, txn }),
            2 => (any::<u8>(), any::<bool>()).prop_map(|(pid, commit)| Op::Marker { pid, commit }),
            1 => Just(Op::Blank),
            1 => any::<u8>().prop_map(|at| Op::Truncate { at }),
        ]
    }

    fn config() -> LogConfig {
        LogConfig { segment_bytes: 700, retention_ms: -1, leader_epoch: None, ..LogConfig::default() }
    }

    fn open(dir: &std::path::Path) -> Partition {
        Partition::new("t".into(), 0, Log::open(dir, config()).unwrap(), Arc::new(tokio::sync::Notify::new()))
    }

    /// What a partition derives from its log: producer state (without the times a reopen
    /// refreshes), the first open transaction, the aborted transactions.
    fn derived(p: &Partition) -> (Vec<(i64, ProducerEntry)>, i64, Vec<AbortedTxn>) {
        let mut producers: Vec<_> = p.producers.lock().unwrap().clone().into_iter().collect();
        producers.sort_by_key(|(pid, _)| *pid);
        for (_, e) in producers.iter_mut() {
            e.last_timestamp = 0;
        }
        let log = p.log();
        let aborted = log.collect_aborted_txns(0, i64::MAX);
        (producers, p.first_unstable.load(Ordering::Acquire), aborted)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        #[test]
        fn entries_and_truncations_leave_the_state_a_replay_of_the_log_gives(ops in proptest::collection::vec(op(), 1..50)) {
            let dir = tempfile::tempdir().unwrap();
            let p = open(dir.path());
            // the base offset of every entry held, and each producer's next sequence
            let mut bases: Vec<i64> = Vec::new();
            let term = 3;
            for op in ops {
                let seq = |p: &Partition, pid: i64| {
                    p.producers.lock().unwrap().get(&pid).and_then(|e| e.batches.back().map(|b| b.last_seq + 1)).unwrap_or(0)
                };
                let b = match op {
                    Op::Batch { pid, n, txn } => {
                        let pid = i64::from(pid % 3) + 10;
                        let recs: Vec<NewRecord> = (0..n).map(|i| NewRecord {
                            timestamp: 1000 + i64::from(i),
                            value: Some(Bytes::from(vec![1u8; 40])),
                            ..Default::default()
                        }).collect();
                        BatchBuilder { producer_id: pid, producer_epoch: 0, base_sequence: seq(&p, pid), transactional: txn, ..Default::default() }
                            .build(&recs).unwrap().to_vec()
                    }
                    Op::Marker { pid, commit } => {
                        let pid = i64::from(pid % 3) + 10;
                        let kind = if commit { ControlType::Commit } else { ControlType::Abort };
                        BatchBuilder::control_marker(pid, 0, ControlMarker { kind, coordinator_epoch: 0 }, 5).unwrap().to_vec()
                    }
                    Op::Blank => sluice_protocol::raft_control::RaftControl::LeaderChange { leader: 1, voters: vec![] }
                        .build(term, 5).unwrap().to_vec(),
                    Op::Truncate { at } => {
                        if bases.is_empty() { continue; }
                        let keep = bases.len() - 1 - usize::from(at) % bases.len();
                        let offset = bases[keep];
                        p.truncate_entries(offset).unwrap();
                        bases.truncate(keep);
                        prop_assert_eq!(p.log().log_end_offset(), offset);
                        continue;
                    }
                };
                let info = p.append_entry(&mut bytes::Bytes::from(b), term, 0, true).unwrap();
                bases.push(info.first_offset);
            }
            let got = derived(&p);
            // a replay of the same log, from the producer snapshots the entries left
            drop(p);
            let replayed = open(dir.path());
            prop_assert_eq!(got, derived(&replayed));
        }
    }
}
