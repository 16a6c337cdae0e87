//! A partition group's Raft log that *is* the partition's segment log (decision 0045 step 3):
//! each Raft entry is one batch of the partition's log, written once per replica, at the log
//! end, with Raft's term as its partition leader epoch.
//!
//! What each entry becomes:
//! - `PartCommand::Stored` (a batch the leader judged, offsets assigned): the batch as it is —
//!   records or a transaction marker, what consumers read;
//! - Raft's blank entry (a new leader's first): a LEADER_CHANGE control batch naming the leader;
//! - a membership: a control batch of Sluice's membership type;
//! - any other command (DeleteRecords, and the commands of the double format): a control batch of
//!   Sluice's command type.
//!
//! Consumers skip control batches whatever their type (decision 0045's gate), so Raft's own
//! entries take offsets and need no translation.
//!
//! **Index ↔ offset.** No batch field holds a Raft index. From the *anchor* on — entry
//! `anchor.0` is the batch at offset `anchor.1`, kept in `raft-state.json` — every batch is the
//! next entry, so the map is rebuilt at open by hopping over the batches from the anchor. A purge
//! moves the anchor up (and nothing else: retention deletes segments, decision 0025); the map in
//! memory covers the entries not purged.
//!
//! **Node ids.** openraft's log id names the term's leader; a batch has a field for the term but
//! none for the node. One node leads a term, and a term's first entry is its leader's blank entry
//! (its LEADER_CHANGE batch names the node), so data batches take their node from the term; the
//! leaders of terms whose first entry was purged are kept in `raft-state.json`. Raft's control
//! batches carry their node themselves.
//!
//! **Recent entries** (decision 0057): the batches of the newest entries stay in memory as they
//! were appended ([`Recent`], bounded), shared with the entries read: a leader's followers and
//! every replica's state machine read an entry soon after it was appended, and find it there
//! instead of mapping its segment, checking its CRC and copying it out. An entry not there is
//! read from its segment as before.
//!
//! **Durability.** An append writes the batches (page cache), then its fsync runs on a blocking
//! thread and openraft is told once it completes — the partition log's own group commit
//! (`Flusher`), shared with everything else that waits on it. A truncation is the storage
//! crate's `Log::truncate_to` (the recovery point lowered first, decision 0038).
//!
//! Every partition group created with `replication.log.format=single` (the default) keeps its
//! Raft log here; a `double` group's replicas build theirs here when it converts
//! (`cluster/convert.rs`, decision 0056).

// openraft's traits return its (large) StorageError; the helpers here return the same.
#![allow(clippy::result_large_err)]

use super::log_store::{io_err, write_atomic, Logged, Progress, ProgressFile};
use super::types::{NodeId, PartCommand};
use crate::sync::OrDie as _;
use bytes::Bytes;
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{
    CommittedLeaderId, Entry, EntryPayload, LogId, Membership, OptionalSend, RaftLogReader, StorageError, Vote,
};
use serde::{Deserialize, Serialize};
use sluice_protocol::batch::{iter_batches, BatchView};
use sluice_protocol::raft_control::RaftControl;
use sluice_storage::{AppendInfo, Log, StorageError as SE};
use std::collections::{BTreeMap, VecDeque};
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The store's own state: vote and purged id, the anchor and the leaders of terms (and the
/// commit point as of its last write; the current one is in `raft-progress`).
const STATE_FILE: &str = "raft-state.json";

/// The partition's segment log, as the Raft log store writes and reads it (the partition
/// implements it, `partition/mod.rs`; the replication layer sees nothing else of the
/// partition). The store is its only writer.
pub trait SegmentLog: Send + Sync + 'static {
    /// The log, to read (and for its offsets and flusher).
    fn segment_log(&self) -> MutexGuard<'_, Log>;
    /// Append one entry's batch at the log end with `term` as its partition leader epoch; what
    /// the partition derives from its log (producer state) follows. `judged`: a write its
    /// leader judged (`Stored`, `Answered`). `batch` ends as what was stored (a batch that came
    /// stamped stays the bytes it came in: `Log::append_shared`).
    fn append_entry(&self, batch: &mut Bytes, term: i32, now_ms: i64, judged: bool) -> Result<AppendInfo, SE>;
    /// Remove every batch from `offset` on; what the partition derives from its log follows.
    fn truncate_entries(&self, offset: i64) -> Result<u64, SE>;
    /// From now on the log's batches carry Raft terms as their epochs (not one epoch stamped
    /// on every batch, decision 0043), durably: a restart opens it so.
    fn use_terms(&self) -> Result<(), SE>;
}

/// What a partition's state machine asks of the Raft log that is its segment log.
pub trait EntryIndex: Send + Sync + 'static {
    /// The offset right after entry `index`'s batch, if the entry is held.
    fn end_of(&self, index: u64) -> Option<i64>;
    /// The partition's log was replaced by a snapshot through `last` that ends at `log_end`:
    /// nothing of the old log is an entry any more; the next entry is the batch at `log_end`.
    fn installed(&self, last: Option<LogId<NodeId>>, log_end: i64) -> Result<(), StorageError<NodeId>>;
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct State {
    vote: Option<Vote<NodeId>>,
    committed: Option<LogId<NodeId>>,
    last_purged: Option<LogId<NodeId>>,
    /// Entry `.0` is the batch at offset `.1`, and every batch after it is the next entry.
    anchor: Option<(u64, i64)>,
    /// The leader of each term whose first entry may no longer be read (purged, or never held:
    /// entries after a snapshot).
    leaders: BTreeMap<u64, NodeId>,
}

/// One entry not purged: its batch's first and last offsets, and its term.
#[derive(Debug, Clone, Copy)]
struct Slot {
    offset: i64,
    last: i64,
    term: u64,
}

struct Inner<L: ?Sized> {
    dir: PathBuf,
    log: Arc<L>,
    state: State,
    /// The index of `slots[0]` (or of the next entry, when there is none).
    first: u64,
    slots: VecDeque<Slot>,
    /// The leader of every term the slots hold (and the state's).
    leaders: BTreeMap<u64, NodeId>,
    /// The bytes of batches one bounded read returns at most (at least one entry).
    read_bytes_max: usize,
    /// Where the commit point goes (`Progress`).
    progress: ProgressFile,
    /// The newest entries' batches, as appended.
    recent: Recent,
}

/// The most bytes of batches one log keeps in memory ([`Recent`]) until told otherwise
/// ([`PartitionLogStore::keep_recent`]): the default of `replication.partition.in.flight.max.bytes`
/// and of `replica.fetch.max.bytes`.
const RECENT_BYTES_DEFAULT: usize = (32 << 20) + (1 << 20);
/// The most bytes of batches all the logs of this process keep in memory together
/// ([`PartitionLogStore::keep_recent`]; at first the default of `replication.in.flight.max.bytes`
/// and of `replica.fetch.max.bytes`).
static RECENT_BYTES_PROCESS_MAX: AtomicUsize = AtomicUsize::new((128 << 20) + (1 << 20));
/// The bytes every [`Recent`] of this process holds.
static RECENT_BYTES: AtomicUsize = AtomicUsize::new(0);

/// The batches of the newest entries as this replica appended them (its offsets and term in
/// them: the bytes its segment holds), contiguous up to the newest: `batches[i]` is entry
/// `first + i`. Bounded by `max` and, with every other log's, by [`RECENT_BYTES_PROCESS_MAX`]:
/// the oldest go first, and an entry that does not fit is not kept (nor is any before it).
struct Recent {
    first: u64,
    batches: VecDeque<Bytes>,
    bytes: usize,
    max: usize,
}

impl Recent {
    fn new() -> Recent {
        Recent { first: 0, batches: VecDeque::new(), bytes: 0, max: RECENT_BYTES_DEFAULT }
    }

    fn get(&self, index: u64) -> Option<&Bytes> {
        self.batches.get(usize::try_from(index.checked_sub(self.first)?).ok()?)
    }

    /// Keep entry `index`'s batch (the entry after the newest kept, or the cache starts again
    /// at it).
    fn push(&mut self, index: u64, batch: Bytes) {
        if self.first + self.batches.len() as u64 != index {
            self.clear(index);
        }
        let n = batch.len();
        while !self.batches.is_empty() && self.bytes + n > self.max {
            self.pop_oldest();
        }
        let process_max = RECENT_BYTES_PROCESS_MAX.load(Ordering::Relaxed);
        loop {
            let before = RECENT_BYTES.fetch_add(n, Ordering::AcqRel);
            if self.bytes + n <= self.max && before + n <= process_max {
                break;
            }
            RECENT_BYTES.fetch_sub(n, Ordering::AcqRel);
            if self.batches.is_empty() {
                // too large, or the process's bound is taken by other logs: not kept
                self.first = index + 1;
                return;
            }
            self.pop_oldest();
        }
        self.bytes += n;
        self.batches.push_back(batch);
    }

    /// A batch no longer kept: its bytes leave the counts.
    fn forget(&mut self, b: &Bytes) {
        self.bytes -= b.len();
        RECENT_BYTES.fetch_sub(b.len(), Ordering::AcqRel);
    }

    fn pop_oldest(&mut self) {
        if let Some(b) = self.batches.pop_front() {
            self.forget(&b);
            self.first += 1;
        }
    }

    /// Forget entries from `index` on (truncated).
    fn truncate(&mut self, index: u64) {
        while self.first + (self.batches.len() as u64) > index {
            let Some(b) = self.batches.pop_back() else { break };
            self.forget(&b);
        }
    }

    /// Forget entries up to `index` (purged).
    fn purge(&mut self, index: u64) {
        while self.first <= index && !self.batches.is_empty() {
            self.pop_oldest();
        }
    }

    /// Forget every entry; the next kept is `next`.
    fn clear(&mut self, next: u64) {
        RECENT_BYTES.fetch_sub(self.bytes, Ordering::AcqRel);
        self.batches.clear();
        self.bytes = 0;
        self.first = next;
    }
}

impl Drop for Recent {
    fn drop(&mut self) {
        RECENT_BYTES.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// The Raft log over a partition's segment log (cheap to clone: a handle).
pub struct PartitionLogStore<C, L: ?Sized> {
    inner: Arc<Mutex<Inner<L>>>,
    _c: std::marker::PhantomData<fn() -> C>,
}

impl<C, L: ?Sized> Clone for PartitionLogStore<C, L> {
    fn clone(&self) -> Self {
        PartitionLogStore { inner: self.inner.clone(), _c: std::marker::PhantomData }
    }
}

fn corrupt(what: String) -> StorageError<NodeId> {
    io_err(std::io::Error::new(std::io::ErrorKind::InvalidData, what))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A Raft control batch's record timestamp: none (Kafka's -1).
const NO_TIMESTAMP: i64 = -1;

/// What a control batch of Sluice's types carries: the node that wrote it, and its payload.
#[derive(Serialize, Deserialize)]
struct Carried<T> {
    node: NodeId,
    payload: T,
}

/// The batch an entry is stored as (its base offset is the log's to assign, a `Stored` batch's
/// too). Takes the entry: a batch's bytes are moved, not copied.
fn encode<C: Logged<D = PartCommand>>(e: Entry<C>) -> Result<Bytes, StorageError<NodeId>> {
    let term = epoch_of(e.log_id.leader_id.term)?;
    let node = e.log_id.leader_id.node_id;
    let control = match e.payload {
        // (shared: a follower's received batch is a slice of the frame it came in, decision 0062)
        EntryPayload::Normal(PartCommand::Stored { batch }) => return Ok(batch),
        EntryPayload::Blank => RaftControl::LeaderChange {
            leader: i32::try_from(node).map_err(|_| corrupt(format!("node id {node} is not a Kafka broker id")))?,
            voters: Vec::new(),
        },
        EntryPayload::Membership(m) => RaftControl::Membership(
            bincode::serialize(&Carried { node, payload: m }).map_err(|e| corrupt(e.to_string()))?.into(),
        ),
        EntryPayload::Normal(cmd) => RaftControl::Command(
            bincode::serialize(&Carried { node, payload: cmd }).map_err(|e| corrupt(e.to_string()))?.into(),
        ),
    };
    // no timestamp: every replica builds Raft's own batches itself, and their bytes must be the
    // same on each (a damaged batch is repaired with a peer's copy; decision 0036)
    control.build(term, NO_TIMESTAMP).map_err(|e| corrupt(e.to_string()))
}

/// The term as a partition leader epoch.
fn epoch_of(term: u64) -> Result<i32, StorageError<NodeId>> {
    i32::try_from(term).map_err(|_| corrupt(format!("term {term} does not fit a partition leader epoch")))
}

/// The entry batch `view` holds, entry `index`; `leaders` names the leader of a data batch's
/// term; `owned` gives the batch's bytes for a data entry to hold. Also what Raft's control
/// batches say of their term's leader.
fn decode<C: Logged<D = PartCommand>>(
    view: &BatchView<'_>,
    index: u64,
    leaders: &BTreeMap<u64, NodeId>,
    owned: impl FnOnce() -> Bytes,
) -> Result<Entry<C>, StorageError<NodeId>> {
    let term = u64::try_from(view.partition_leader_epoch())
        .map_err(|_| corrupt(format!("the batch at offset {} has no term", view.base_offset())))?;
    let control = if view.is_control() {
        RaftControl::parse(view).map_err(|e| corrupt(format!("offset {}: {e}", view.base_offset())))?
    } else {
        None
    };
    let (node, payload) = match control {
        Some(RaftControl::LeaderChange { leader, .. }) => {
            let node = NodeId::try_from(leader).map_err(|_| corrupt(format!("leader {leader}")))?;
            (node, EntryPayload::Blank)
        }
        Some(RaftControl::Membership(b)) => {
            let c: Carried<Membership<NodeId, openraft::BasicNode>> =
                bincode::deserialize(&b).map_err(|e| corrupt(format!("offset {}: {e}", view.base_offset())))?;
            (c.node, EntryPayload::Membership(c.payload))
        }
        Some(RaftControl::Command(b)) => {
            let c: Carried<PartCommand> =
                bincode::deserialize(&b).map_err(|e| corrupt(format!("offset {}: {e}", view.base_offset())))?;
            (c.node, EntryPayload::Normal(c.payload))
        }
        None => {
            let node = *leaders.get(&term).ok_or_else(|| {
                corrupt(format!(
                    "the batch at offset {} is of term {term}, whose leader is not known",
                    view.base_offset()
                ))
            })?;
            (node, EntryPayload::Normal(PartCommand::Stored { batch: owned() }))
        }
    };
    Ok(Entry { log_id: LogId::new(CommittedLeaderId::new(term, node), index), payload })
}

/// The node a Raft control batch names as its writer (`None` for a data batch or a marker).
fn writer_of(view: &BatchView<'_>) -> Option<NodeId> {
    if !view.is_control() {
        return None;
    }
    match RaftControl::parse(view).ok()?? {
        RaftControl::LeaderChange { leader, .. } => NodeId::try_from(leader).ok(),
        RaftControl::Membership(b) | RaftControl::Command(b) => {
            // the node is the first field: read it alone
            bincode::deserialize::<NodeId>(&b).ok()
        }
    }
}

impl<L: SegmentLog + ?Sized> Inner<L> {
    /// Has this node ever voted or held an entry?
    fn voted_or_held(&self) -> bool {
        self.state.vote.is_some() || !self.slots.is_empty() || self.state.last_purged.is_some()
    }

    fn save_state(&self) -> Result<(), StorageError<NodeId>> {
        let state = State { committed: self.durable_committed(), ..self.state.clone() };
        write_atomic(&self.dir.join(STATE_FILE), &serde_json::to_vec(&state).map_err(io_err)?)
    }

    /// Let the log's batches carry epochs (terms) up to `term` (`Log::set_epoch_ceiling`).
    fn raise_epoch_ceiling(&self, term: u64) -> Result<(), StorageError<NodeId>> {
        self.log.segment_log().set_epoch_ceiling(epoch_of(term)?);
        Ok(())
    }

    /// The commit point as far as this replica's durable entries reach: a follower commits
    /// entries it has written but not yet fsynced, and a commit point stored beyond what a
    /// power cut leaves would name entries a restart cannot re-apply (or, after a truncation
    /// that was lost with them, other entries).
    fn durable_committed(&self) -> Option<LogId<NodeId>> {
        let committed = self.state.committed?;
        if committed.index < self.first {
            // purged: a snapshot holds it
            return Some(committed);
        }
        let durable = self.log.segment_log().flusher().durable_end();
        let held = self.slots.partition_point(|s| s.last < durable) as u64;
        if committed.index < self.first + held {
            return Some(committed);
        }
        match held.checked_sub(1) {
            Some(i) => self.log_id(self.first + i),
            None => self.state.last_purged,
        }
    }

    fn next_index(&self) -> u64 {
        self.first + self.slots.len() as u64
    }

    fn log_id(&self, index: u64) -> Option<LogId<NodeId>> {
        let slot = self.slots.get(usize::try_from(index.checked_sub(self.first)?).ok()?)?;
        let node = self.leaders.get(&slot.term)?;
        Some(LogId::new(CommittedLeaderId::new(slot.term, *node), index))
    }

    /// The entries `[start, end)` held, their batches adding up to at most `max_bytes` (at least
    /// one entry).
    fn read<C: Logged<D = PartCommand>>(
        &self,
        start: u64,
        end: u64,
        max_bytes: usize,
    ) -> Result<Vec<Entry<C>>, Unread> {
        let start = start.max(self.first);
        let end = end.min(self.next_index());
        let mut out = Vec::new();
        let mut total = 0usize;
        let (mut kept, mut mapped) = (0u64, 0u64);
        // taken at the first entry not kept in memory: reads of kept entries do not contend
        // with the partition's appends for its log
        let mut log = None;
        for index in start..end {
            let Some(slot) = usize::try_from(index - self.first).ok().and_then(|i| self.slots.get(i)) else { break };
            if let Some(batch) = self.recent.get(index) {
                // as appended: its CRC was checked then, and the bytes are shared, not copied
                let view = BatchView::parse_unchecked_crc(batch)
                    .map_err(|e| corrupt(format!("Raft entry {index} (kept): {e}")))?;
                total = total.saturating_add(view.size());
                if total > max_bytes && !out.is_empty() {
                    break;
                }
                out.push(decode::<C>(&view, index, &self.leaders, || batch.clone())?);
                kept += 1;
                continue;
            }
            // the segment's read checked the batch's CRC (a damaged one is never served)
            let bytes = match log.get_or_insert_with(|| self.log.segment_log()).read_retained(slot.offset, 1) {
                Ok(b) => b,
                Err(e @ SE::Corrupt { .. }) => return Err(Unread::Damaged(format!("Raft entry {index}: {e}"))),
                Err(e) => return Err(Unread::Failed(io_err(e))),
            };
            if bytes.is_empty() {
                return Err(corrupt(format!("Raft entry {index}: no batch at offset {}", slot.offset)).into());
            }
            let view =
                BatchView::parse_unchecked_crc(&bytes).map_err(|e| corrupt(format!("Raft entry {index}: {e}")))?;
            if view.base_offset() != slot.offset {
                return Err(corrupt(format!(
                    "Raft entry {index}: the batch at offset {} starts at {}",
                    slot.offset,
                    view.base_offset()
                ))
                .into());
            }
            total = total.saturating_add(view.size());
            if total > max_bytes && !out.is_empty() {
                break;
            }
            // (copied: a mapped segment is not to outlive a truncation)
            out.push(decode::<C>(&view, index, &self.leaders, || Bytes::copy_from_slice(view.bytes()))?);
            mapped += 1;
        }
        drop(log);
        ::metrics::counter!(crate::metrics::RAFT_ENTRY_READS_TOTAL, "from" => "memory").increment(kept);
        ::metrics::counter!(crate::metrics::RAFT_ENTRY_READS_TOTAL, "from" => "segment").increment(mapped);
        Ok(out)
    }
}

/// Why a read of entries returned none.
enum Unread {
    /// An entry's batch failed its CRC (the log is marked damaged; the replica's maintenance
    /// repairs it from a peer's copy).
    Damaged(String),
    Failed(StorageError<NodeId>),
}

impl From<StorageError<NodeId>> for Unread {
    fn from(e: StorageError<NodeId>) -> Unread {
        Unread::Failed(e)
    }
}

/// How long a read of an entry whose batch is damaged waits for the repair before it fails
/// (and the group stops on this broker, as for any storage failure). The repair runs every
/// half second while the log is damaged (`replica::maintain`), up to a minute.
const DAMAGED_READ_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

impl<C: Logged<D = PartCommand>, L: SegmentLog + ?Sized> PartitionLogStore<C, L> {
    /// The entries `[start, end)`, at most `max_bytes` of them (the store's bound when `None`).
    /// A damaged batch is never read: the read waits (without the store's lock) while the
    /// replica repairs it from a peer's copy, as a separate Raft log would have gone on being
    /// read meanwhile ([`DAMAGED_READ_WAIT`]).
    async fn read_entries(
        &self,
        start: u64,
        end: u64,
        max_bytes: Option<usize>,
    ) -> Result<Vec<Entry<C>>, StorageError<NodeId>> {
        let t0 = std::time::Instant::now();
        let mut warned = false;
        loop {
            let read = {
                let g = self.lock();
                let max = max_bytes.unwrap_or(g.read_bytes_max);
                g.read(start, end, max)
            };
            match read {
                Ok(entries) => return Ok(entries),
                Err(Unread::Failed(e)) => return Err(e),
                Err(Unread::Damaged(why)) if t0.elapsed() < DAMAGED_READ_WAIT => {
                    if !std::mem::replace(&mut warned, true) {
                        tracing::warn!("{why}: the read waits for its repair from another replica");
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
                Err(Unread::Damaged(why)) => {
                    return Err(corrupt(format!("{why}: not repaired in {DAMAGED_READ_WAIT:?}")))
                }
            }
        }
    }

    /// Open the store in `dir` over `log`: the entries from the anchor to the log's end.
    pub fn open(dir: &Path, log: Arc<L>) -> Result<Self, StorageError<NodeId>> {
        std::fs::create_dir_all(dir).map_err(io_err)?;
        let mut state: State = match std::fs::read(dir.join(STATE_FILE)) {
            Ok(b) => serde_json::from_slice(&b).map_err(io_err)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => State::default(),
            Err(e) => return Err(io_err(e)),
        };
        // the commit point moves in its own file (`Progress`)
        state.committed = Progress::later(state.committed, Progress::read(dir).committed);
        let mut inner = Inner {
            dir: dir.to_path_buf(),
            log,
            first: state.last_purged.map_or(0, |p| p.index + 1),
            slots: VecDeque::new(),
            leaders: state.leaders.clone(),
            read_bytes_max: 8 << 20,
            progress: ProgressFile::new(dir),
            recent: Recent::new(),
            state,
        };
        if let Some(e) = inner.log.segment_log().config().leader_epoch {
            // terms are the batches' epochs here: a log that stamps one epoch on every batch
            // (decision 0043) would lose them
            return Err(corrupt(format!(
                "the partition log stamps epoch {e} on every batch; its Raft log needs terms"
            )));
        }
        // no batch here can carry a term above the vote's (saved before any entry of its
        // term): one that does is a flipped bit, found by the scan below (decision 0050). No
        // vote saved: nothing to check against
        if let Some(v) = inner.state.vote {
            inner.raise_epoch_ceiling(v.leader_id().term)?;
        }
        if let Some((index, offset)) = inner.state.anchor {
            inner.first = index;
            let mut guard = inner.log.segment_log();
            // the entries from the anchor on stay whatever retention says
            guard.set_retention_floor(offset);
            let (start, end) = (guard.segment_bases().first().copied().unwrap_or(0), guard.log_end_offset());
            if offset < start {
                return Err(corrupt(format!(
                    "Raft entry {index} (offset {offset}) is below the log start {start}: deleted before it was purged"
                )));
            }
            let mut at = offset;
            while at < end {
                let bytes = guard.read_retained(at, 1 << 20).map_err(io_err)?;
                if bytes.is_empty() {
                    break;
                }
                for item in iter_batches(&bytes) {
                    let (_, view) = item.map_err(|e| corrupt(format!("offset {at}: {e}")))?;
                    let term = u64::try_from(view.partition_leader_epoch())
                        .map_err(|_| corrupt(format!("the batch at offset {} has no term", view.base_offset())))?;
                    if let Some(node) = writer_of(&view) {
                        inner.leaders.entry(term).or_insert(node);
                    }
                    inner.slots.push_back(Slot { offset: view.base_offset(), last: view.last_offset(), term });
                    at = view.last_offset() + 1;
                }
            }
            drop(guard);
        }
        Ok(PartitionLogStore { inner: Arc::new(Mutex::new(inner)), _c: std::marker::PhantomData })
    }

    fn lock(&self) -> MutexGuard<'_, Inner<L>> {
        self.inner.lock().or_die()
    }

    /// What one bounded read returns at most (at least one entry): what openraft sends a
    /// follower in one append.
    pub fn limit_reads(&self, bytes: usize) {
        self.lock().read_bytes_max = bytes.max(1);
    }

    /// Keep at most `bytes` of the newest entries' batches in memory, and this process's logs
    /// together at most `process_bytes` ([`Recent`]): a replica keeps what its leader may still
    /// read for a follower or apply, the bytes in flight (`replication.partition.in.flight.max.bytes`,
    /// `replication.in.flight.max.bytes`) and one append more.
    pub fn keep_recent(&self, bytes: usize, process_bytes: usize) {
        RECENT_BYTES_PROCESS_MAX.store(process_bytes, Ordering::Relaxed);
        let mut g = self.lock();
        g.recent.max = bytes;
        let next = g.next_index();
        // (what it keeps now is within the new bound, or it starts again)
        if g.recent.bytes > bytes {
            g.recent.clear(next);
        }
    }

    /// Write `entries` at the log's end (page cache, not synced): the flusher that makes them
    /// durable and the offset to sync to.
    fn write<I: IntoIterator<Item = Entry<C>>>(
        &self,
        entries: I,
    ) -> Result<(Arc<sluice_storage::Flusher>, i64), StorageError<NodeId>> {
        let mut g = self.lock();
        let inner = &mut *g;
        for e in entries {
            let index = e.log_id.index;
            let term = e.log_id.leader_id.term;
            let node = e.log_id.leader_id.node_id;
            let leo = {
                let mut log = inner.log.segment_log();
                // (the vote was saved before any entry of its term; this only makes sure, under
                // the lock this append takes anyway)
                log.set_epoch_ceiling(epoch_of(term)?);
                log.log_end_offset()
            };
            if inner.slots.is_empty() {
                // the first entry held: from here on every batch is the next entry
                if inner.state.anchor != Some((index, leo)) {
                    inner.state.anchor = Some((index, leo));
                    inner.save_state()?;
                }
                inner.log.segment_log().set_retention_floor(leo);
                inner.first = index;
            } else if index != inner.next_index() {
                return Err(corrupt(format!("Raft entry {index} appended after {}", inner.next_index() - 1)));
            }
            let blank = matches!(e.payload, EntryPayload::Blank);
            // a batch goes at the log end whatever offset its leader judged it would take: an
            // entry the leader did not judge (Raft's own, DeleteRecords) may have come between
            let judged =
                matches!(e.payload, EntryPayload::Normal(PartCommand::Stored { .. } | PartCommand::Answered { .. }));
            let mut bytes = encode(e)?;
            if !blank && inner.leaders.get(&term) != Some(&node) {
                // a data batch names no node: the leader of a term whose blank entry is not
                // held here (entries after a snapshot) is kept where the next open finds it
                inner.state.leaders.insert(term, node);
                inner.save_state()?;
            }
            inner.leaders.insert(term, node);
            let view =
                BatchView::parse_unchecked_crc(&bytes).map_err(|e| corrupt(format!("Raft entry {index}: {e}")))?;
            if view.size() != bytes.len() {
                return Err(corrupt(format!("Raft entry {index} is more than one batch")));
            }
            let info = inner.log.append_entry(&mut bytes, epoch_of(term)?, now_ms(), judged).map_err(io_err)?;
            inner.slots.push_back(Slot { offset: info.first_offset, last: info.last_offset, term });
            // (`bytes` is now what the segment holds: the batch with its offsets and term)
            inner.recent.push(index, bytes);
        }
        let log = inner.log.segment_log();
        Ok((log.flusher(), log.log_end_offset()))
    }

    /// Write `entries` at the log's end and make them durable before returning: a group's
    /// entries carried over from a Raft log of its own (decision 0056), before the group runs.
    pub fn append_durably(&self, entries: Vec<Entry<C>>) -> Result<(), StorageError<NodeId>> {
        let (flusher, end) = self.write(entries)?;
        flusher.sync_to(end).map(|_| ()).map_err(|e| io_err(std::io::Error::other(e.to_string())))
    }

    /// Has this node ever voted or held an entry?
    pub fn has_vote_or_entries(&self) -> bool {
        self.lock().voted_or_held()
    }

    /// A new group's birth without entries (decision 0052): `vote` (the first leader's, of
    /// term 1, committed) and entry `born` (the initial membership, which the state machine's
    /// snapshot holds) as purged, so the first entry this log holds — the partition's first
    /// batch — is entry `born.index + 1` at offset 0, and no Raft entry of the group's own
    /// comes before it. Only into a store that never voted nor held an entry.
    pub fn seed(&self, vote: Vote<NodeId>, born: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut g = self.lock();
        if g.voted_or_held() || g.state.anchor.is_some() {
            return Err(corrupt("a group is born only into an empty Raft log".into()));
        }
        let (term, node) = (born.leader_id.term, born.leader_id.node_id);
        g.raise_epoch_ceiling(vote.leader_id().term.max(term))?;
        g.state.vote = Some(vote);
        g.state.last_purged = Some(born);
        g.state.committed = Some(born);
        g.state.leaders.insert(term, node);
        g.leaders.insert(term, node);
        g.first = born.index + 1;
        g.save_state()
    }
}

/// Whether the Raft log kept in the partition log under `dir` holds more than a birth
/// ([`PartitionLogStore::seed`]): an entry held or purged past the initial membership, or a
/// vote other than the first leader's committed one of term 1. Unreadable: yes (the replica
/// holds something).
pub fn holds_past_birth(dir: &Path) -> bool {
    let state: State = match std::fs::read(dir.join(STATE_FILE)) {
        Ok(b) => match serde_json::from_slice(&b) {
            Ok(s) => s,
            Err(_) => return true,
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return false,
        Err(_) => return true,
    };
    state.anchor.is_some()
        || state.last_purged.is_some_and(|p| p.index > 0)
        || state.vote.is_some_and(|v| v.leader_id().term > 1 || !v.is_committed())
}

impl<C: Logged<D = PartCommand>, L: SegmentLog + ?Sized> EntryIndex for PartitionLogStore<C, L> {
    fn end_of(&self, index: u64) -> Option<i64> {
        let g = self.lock();
        let i = usize::try_from(index.checked_sub(g.first)?).ok()?;
        g.slots.get(i).map(|s| s.last + 1)
    }

    fn installed(&self, last: Option<LogId<NodeId>>, log_end: i64) -> Result<(), StorageError<NodeId>> {
        let mut g = self.lock();
        let inner = &mut *g;
        // the installed segments' terms are the leader's, at most the vote's
        if let Some(v) = inner.state.vote {
            inner.raise_epoch_ceiling(v.leader_id().term)?;
        }
        inner.slots.clear();
        inner.first = last.map_or(0, |l| l.index + 1);
        inner.recent.clear(inner.first);
        inner.state.anchor = Some((inner.first, log_end));
        if let Some(l) = last {
            inner.state.last_purged = Some(l);
            inner.state.leaders.insert(l.leader_id.term, l.leader_id.node_id);
            inner.leaders.insert(l.leader_id.term, l.leader_id.node_id);
        }
        inner.log.segment_log().set_retention_floor(log_end);
        inner.save_state()
    }
}

impl<C: Logged<D = PartCommand>, L: SegmentLog + ?Sized> RaftLogReader<C> for PartitionLogStore<C, L> {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<C>>, StorageError<NodeId>> {
        let start = match range.start_bound() {
            Bound::Included(s) => *s,
            Bound::Excluded(s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(e) => e.saturating_add(1),
            Bound::Excluded(e) => *e,
            Bound::Unbounded => u64::MAX,
        };
        self.read_entries(start, end, Some(usize::MAX)).await
    }

    async fn limited_get_log_entries(&mut self, start: u64, end: u64) -> Result<Vec<Entry<C>>, StorageError<NodeId>> {
        self.read_entries(start, end, None).await
    }
}

impl<C: Logged<D = PartCommand>, L: SegmentLog + ?Sized> RaftLogStorage<C> for PartitionLogStore<C, L> {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<C>, StorageError<NodeId>> {
        let g = self.lock();
        let last = match g.next_index().checked_sub(1).filter(|_| !g.slots.is_empty()) {
            Some(i) => {
                Some(g.log_id(i).ok_or_else(|| corrupt(format!("Raft entry {i}: its term's leader is not known")))?)
            }
            None => g.state.last_purged,
        };
        Ok(LogState { last_purged_log_id: g.state.last_purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut g = self.lock();
        g.state.vote = Some(*vote);
        g.save_state()?;
        g.raise_epoch_ceiling(vote.leader_id().term)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        Ok(self.lock().state.vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> Result<(), StorageError<NodeId>> {
        // one page rewritten, not the whole state file renamed (`Progress`); framed under the
        // lock, written outside it, so the log's readers do not wait for it. What it records
        // stops at the entries already durable here (decision 0048), so whatever a power cut
        // leaves of it is safe: an older commit point, or a torn page that fails its CRC and
        // gives way to the state file's. Not fdatasynced: a follower answers each append only
        // after this, and the fdatasync was a seventh of that answer's time (decision 0057).
        let write = {
            let mut g = self.lock();
            g.state.committed = committed;
            let durable = g.durable_committed();
            g.progress.prepare(&Progress { committed: durable, flushed: None })?
        };
        write.finish_unsynced()
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        Ok(self.lock().state.committed)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<C>) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<C>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut n = 0u64;
        let written = self.write(entries.into_iter().inspect(|_| n += 1));
        match written {
            Ok((flusher, end)) => {
                ::metrics::counter!(crate::metrics::RAFT_LOG_FLUSHES_TOTAL).increment(1);
                ::metrics::counter!(crate::metrics::RAFT_LOG_ENTRIES_APPENDED_TOTAL).increment(n);
                // durable on a blocking thread: the Raft task does not wait for the disk
                tokio::task::spawn_blocking(move || {
                    let started = std::time::Instant::now();
                    let synced = flusher.sync_to(end).map(|_| ()).map_err(std::io::Error::other);
                    ::metrics::histogram!(crate::metrics::FSYNC_SECONDS).record(started.elapsed().as_secs_f64());
                    callback.log_io_completed(synced)
                });
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(e)
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut g = self.lock();
        // (below the first entry held: everything held goes)
        let Ok(at) = usize::try_from(log_id.index.saturating_sub(g.first)) else { return Ok(()) };
        let Some(slot) = g.slots.get(at).copied() else { return Ok(()) };
        g.recent.truncate(log_id.index);
        g.log.truncate_entries(slot.offset).map_err(io_err)?;
        g.slots.truncate(at);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut g = self.lock();
        let inner = &mut *g;
        // the entries up to it are forgotten (their batches stay in the partition log until
        // retention deletes them); the anchor moves to the first one left
        let drop_n = usize::try_from((log_id.index + 1).saturating_sub(inner.first)).unwrap_or(usize::MAX);
        let drop_n = drop_n.min(inner.slots.len());
        inner.slots.drain(..drop_n);
        inner.first = inner.first.max(log_id.index + 1);
        inner.recent.purge(log_id.index);
        let offset = match inner.slots.front() {
            Some(s) => s.offset,
            None => inner.log.segment_log().log_end_offset(),
        };
        inner.state.anchor = Some((inner.first, offset));
        inner.state.last_purged = Some(log_id);
        inner.log.segment_log().set_retention_floor(offset);
        inner.state.leaders.insert(log_id.leader_id.term, log_id.leader_id.node_id);
        inner.leaders.insert(log_id.leader_id.term, log_id.leader_id.node_id);
        // the leaders of terms wholly purged are not needed any more
        let oldest = inner.slots.front().map_or(log_id.leader_id.term, |s| s.term).min(log_id.leader_id.term);
        inner.state.leaders.retain(|t, _| *t >= oldest);
        inner.save_state()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine, Snapshot, SnapshotMeta};
    use openraft::{BasicNode, StoredMembership};
    use sluice_storage::LogConfig;
    use std::io::Cursor;

    openraft::declare_raft_types!(
        pub TestConfig:
            D = PartCommand,
            R = (),
            NodeId = NodeId,
            Node = BasicNode,
    );

    /// A partition's segment log alone.
    struct Bare(Mutex<Log>);
    impl SegmentLog for Bare {
        fn segment_log(&self) -> MutexGuard<'_, Log> {
            self.0.lock().or_die()
        }
        fn append_entry(&self, batch: &mut Bytes, term: i32, now_ms: i64, _judged: bool) -> Result<AppendInfo, SE> {
            self.0.lock().or_die().append_shared(batch, now_ms, Some(term))
        }
        fn truncate_entries(&self, offset: i64) -> Result<u64, SE> {
            self.0.lock().or_die().truncate_to(offset)
        }
        fn use_terms(&self) -> Result<(), SE> {
            Ok(())
        }
    }

    type Applied = (Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>);
    type Taken = Option<(SnapshotMeta<NodeId, BasicNode>, Vec<u8>)>;

    /// What openraft's suite needs of a state machine: the last applied id and membership.
    #[derive(Clone, Default)]
    struct Sm {
        state: Arc<Mutex<Applied>>,
        snapshot: Arc<Mutex<Taken>>,
    }

    impl RaftSnapshotBuilder<TestConfig> for Sm {
        async fn build_snapshot(&mut self) -> Result<Snapshot<TestConfig>, StorageError<NodeId>> {
            let (last, membership) = self.state.lock().or_die().clone();
            let meta = SnapshotMeta { last_log_id: last, last_membership: membership, snapshot_id: "s".into() };
            *self.snapshot.lock().or_die() = Some((meta.clone(), Vec::new()));
            Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(Vec::new())) })
        }
    }

    impl RaftStateMachine<TestConfig> for Sm {
        type SnapshotBuilder = Self;
        async fn applied_state(&mut self) -> Result<Applied, StorageError<NodeId>> {
            Ok(self.state.lock().or_die().clone())
        }
        async fn apply<I>(&mut self, entries: I) -> Result<Vec<()>, StorageError<NodeId>>
        where
            I: IntoIterator<Item = Entry<TestConfig>> + OptionalSend,
            I::IntoIter: OptionalSend,
        {
            let mut s = self.state.lock().or_die();
            let mut out = Vec::new();
            for e in entries {
                s.0 = Some(e.log_id);
                if let EntryPayload::Membership(m) = e.payload {
                    s.1 = StoredMembership::new(Some(e.log_id), m);
                }
                out.push(());
            }
            Ok(out)
        }
        async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
            self.clone()
        }
        async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
            Ok(Box::new(Cursor::new(Vec::new())))
        }
        async fn install_snapshot(
            &mut self,
            meta: &SnapshotMeta<NodeId, BasicNode>,
            snapshot: Box<Cursor<Vec<u8>>>,
        ) -> Result<(), StorageError<NodeId>> {
            *self.state.lock().or_die() = (meta.last_log_id, meta.last_membership.clone());
            *self.snapshot.lock().or_die() = Some((meta.clone(), snapshot.into_inner()));
            Ok(())
        }
        async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TestConfig>>, StorageError<NodeId>> {
            Ok(self
                .snapshot
                .lock()
                .or_die()
                .clone()
                .map(|(meta, data)| Snapshot { meta, snapshot: Box::new(Cursor::new(data)) }))
        }
    }

    type Store = PartitionLogStore<TestConfig, Bare>;

    fn id(term: u64, node: NodeId, index: u64) -> LogId<NodeId> {
        LogId::new(CommittedLeaderId::new(term, node), index)
    }

    /// A batch of `n` records judged to go at `offset` in `term` (a producer's, or a COMMIT
    /// marker).
    fn stored(term: i32, offset: i64, n: usize, marker: bool) -> PartCommand {
        use sluice_protocol::batch::{BatchBuilder, ControlMarker, ControlType, NewRecord};
        let b = if marker {
            BatchBuilder::control_marker(7, 0, ControlMarker { kind: ControlType::Commit, coordinator_epoch: 1 }, 5)
                .unwrap()
        } else {
            let recs: Vec<NewRecord> = (0..n)
                .map(|i| NewRecord {
                    timestamp: 1000 + i as i64,
                    value: Some(bytes::Bytes::from(vec![i as u8; 50 + i])),
                    ..Default::default()
                })
                .collect();
            BatchBuilder::default().build(&recs).unwrap()
        };
        let mut b = b.to_vec();
        sluice_protocol::batch::set_base_offset(&mut b, offset);
        sluice_protocol::batch::set_partition_leader_epoch(&mut b, term);
        PartCommand::Stored { batch: b.into() }
    }

    /// Two terms of two leaders: blank, membership, records, a marker, a DeleteRecords, and the
    /// second leader's blank and records. The entries, and each one's offset.
    fn history(store: &Store) -> Vec<Entry<TestConfig>> {
        let members: std::collections::BTreeSet<NodeId> = [1, 2, 3].into();
        let mut out = Vec::new();
        let push = |out: &mut Vec<Entry<TestConfig>>, e: Entry<TestConfig>, takes: i64| {
            let before = store.lock().log.segment_log().log_end_offset();
            let (_, end) = store.write([e.clone()]).unwrap();
            assert_eq!(end, before + takes, "entry {} takes {takes} offsets", e.log_id.index);
            out.push(e);
        };
        let end = || store.lock().log.segment_log().log_end_offset();
        push(&mut out, Entry { log_id: id(1, 1, 1), payload: EntryPayload::Blank }, 1);
        let m = EntryPayload::Membership(Membership::new(vec![members], None));
        push(&mut out, Entry { log_id: id(1, 1, 2), payload: m }, 1);
        for (i, n) in [3usize, 1, 4].into_iter().enumerate() {
            let e = Entry { log_id: id(1, 1, 3 + i as u64), payload: EntryPayload::Normal(stored(1, end(), n, false)) };
            push(&mut out, e, n as i64);
        }
        push(&mut out, Entry { log_id: id(1, 1, 6), payload: EntryPayload::Normal(stored(1, end(), 1, true)) }, 1);
        let d = EntryPayload::Normal(PartCommand::DeleteRecords { offset: 2 });
        push(&mut out, Entry { log_id: id(1, 1, 7), payload: d }, 1);
        push(&mut out, Entry { log_id: id(2, 3, 8), payload: EntryPayload::Blank }, 1);
        push(&mut out, Entry { log_id: id(2, 3, 9), payload: EntryPayload::Normal(stored(2, end(), 2, false)) }, 2);
        out
    }

    fn read_back(store: &Store) -> Vec<Entry<TestConfig>> {
        let mut s = store.clone();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async move {
            let state = RaftLogStorage::get_log_state(&mut s).await.unwrap();
            let Some(last) = state.last_log_id else { return Vec::new() };
            s.try_get_log_entries(..=last.index).await.unwrap()
        })
    }

    fn bare(dir: &Path) -> Arc<Bare> {
        let log =
            Log::open(&dir.join("p-0"), LogConfig { segment_bytes: 400, leader_epoch: None, ..LogConfig::default() })
                .unwrap();
        Arc::new(Bare(Mutex::new(log)))
    }

    /// Every kind of entry goes in as one batch and comes back the same — after a reopen too,
    /// the index rebuilt from the batches and the data batches' leader from their term's blank
    /// entry; consumers' view of the log is its records and marker, Raft's batches control
    /// batches.
    #[test]
    fn entries_come_back_as_written_across_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("raft"), bare(dir.path())).unwrap();
        let written = history(&store);
        assert_eq!(read_back(&store), written);
        drop(store);
        let store = Store::open(&dir.path().join("raft"), bare(dir.path())).unwrap();
        assert_eq!(read_back(&store), written, "after a reopen");
        // the data batches are where consumers read them, with the term as their epoch
        let g = store.lock();
        let log = g.log.segment_log();
        let mut all = Vec::new();
        let mut at = 0;
        while at < log.log_end_offset() {
            let bytes = log.read(at, 1 << 20, None, true).unwrap();
            for r in iter_batches(&bytes) {
                at = r.unwrap().1.last_offset() + 1;
            }
            all.extend_from_slice(&bytes);
        }
        let views: Vec<_> = iter_batches(&all).map(|r| r.unwrap().1).collect();
        assert_eq!(views.len(), 9);
        assert_eq!(views.iter().filter(|v| !v.is_control()).map(|v| v.records_count()).sum::<i32>(), 10);
        assert_eq!(views.iter().map(|v| v.partition_leader_epoch()).collect::<Vec<_>>(), [1, 1, 1, 1, 1, 1, 1, 2, 2]);
    }

    /// The batch of a `Stored` entry, and where its bytes are.
    fn stored_batches(entries: &[Entry<TestConfig>]) -> Vec<(Bytes, usize)> {
        entries
            .iter()
            .filter_map(|e| match &e.payload {
                EntryPayload::Normal(PartCommand::Stored { batch }) => Some((batch.clone(), batch.as_ptr() as usize)),
                _ => None,
            })
            .collect()
    }

    /// Entries read soon after they were appended come from memory (decision 0057): two reads
    /// share the very bytes appended (no copy), which are what the segment holds (a reopened
    /// store, which reads the segments, reads the same entries).
    #[test]
    fn recent_entries_are_read_from_memory_as_the_segment_holds_them() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("raft"), bare(dir.path())).unwrap();
        let written = history(&store);
        let (a, b) = (read_back(&store), read_back(&store));
        let (a, b) = (stored_batches(&a), stored_batches(&b));
        assert_eq!(a.len(), 5);
        for ((x, at_x), (y, at_y)) in a.iter().zip(&b) {
            assert_eq!(x, y);
            assert_eq!(at_x, at_y, "both reads share the batch kept in memory");
        }
        drop(store);
        let store = Store::open(&dir.path().join("raft"), bare(dir.path())).unwrap();
        let from_segments = read_back(&store);
        assert_eq!(from_segments, written);
        let c = stored_batches(&from_segments);
        assert_eq!(c.iter().map(|x| &x.0).collect::<Vec<_>>(), a.iter().map(|x| &x.0).collect::<Vec<_>>());
        // (a batch read from a segment is its own copy)
        let again = stored_batches(&read_back(&store));
        assert!(c.iter().zip(&again).all(|(x, y)| x.1 != y.1));
    }

    /// The kept batches stay within their bound, the newest kept, contiguous; a batch larger
    /// than the bound is not kept, nor anything before it; what is forgotten leaves the
    /// process's count.
    #[test]
    fn recent_entries_stay_within_their_bound() {
        let mut r = Recent::new();
        let mib = Bytes::from(vec![7u8; 1 << 20]);
        r.max = 16 << 20;
        for i in 0..40u64 {
            r.push(i, mib.clone());
            assert!(r.bytes <= r.max);
        }
        assert_eq!(r.batches.len(), 16);
        assert_eq!(r.first, 40 - r.batches.len() as u64);
        assert!(r.get(39).is_some() && r.get(r.first - 1).is_none() && r.get(40).is_none());
        // not the next entry: kept from it on
        r.push(45, mib.clone());
        assert_eq!((r.first, r.batches.len()), (45, 1));
        r.push(46, Bytes::from(vec![0u8; r.max + 1]));
        assert_eq!((r.first, r.batches.len(), r.bytes), (47, 0, 0));
        r.push(47, mib.clone());
        r.push(48, mib.clone());
        r.truncate(48);
        assert_eq!((r.first, r.batches.len()), (47, 1));
        r.purge(47);
        assert_eq!((r.first, r.batches.len(), r.bytes), (48, 0, 0));
    }

    /// The commit point is in `raft-progress` (one page rewritten): a reopen finds it, and an
    /// unreadable one gives way to the state file's older value.
    #[test]
    fn the_commit_point_survives_a_reopen_and_an_unreadable_progress_file_falls_back() {
        let dir = tempfile::tempdir().unwrap();
        let raft = dir.path().join("raft");
        let mut store = Store::open(&raft, bare(dir.path())).unwrap();
        history(&store);
        sync_all(&store);
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let at = |i| Some(LogId::new(CommittedLeaderId::new(1, 1), i));
        rt.block_on(store.save_committed(at(1))).unwrap();
        rt.block_on(store.save_vote(&Vote::new(2, 1))).unwrap();
        rt.block_on(store.save_committed(at(5))).unwrap();
        drop(store);
        let mut store = Store::open(&raft, bare(dir.path())).unwrap();
        assert_eq!(rt.block_on(store.read_committed()).unwrap(), at(5));
        drop(store);
        std::fs::write(raft.join("raft-progress"), b"").unwrap();
        let mut store = Store::open(&raft, bare(dir.path())).unwrap();
        assert_eq!(rt.block_on(store.read_committed()).unwrap(), at(1), "the state file's, saved with the vote");
        assert_eq!(rt.block_on(store.read_vote()).unwrap(), Some(Vote::new(2, 1)));
    }

    fn sync_all(store: &Store) {
        let (flusher, end) = {
            let g = store.lock();
            let log = g.log.segment_log();
            (log.flusher(), log.log_end_offset())
        };
        flusher.sync_to(end).unwrap();
    }

    /// A follower commits entries it has not yet fsynced: the commit point kept on disk never
    /// names one, so that what a power cut leaves of it can be re-applied at a restart.
    #[test]
    fn the_commit_point_kept_on_disk_never_passes_the_durable_entries() {
        let dir = tempfile::tempdir().unwrap();
        let raft = dir.path().join("raft");
        let mut store = Store::open(&raft, bare(dir.path())).unwrap();
        let written = history(&store);
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        // nothing durable yet: nothing committed on disk, though openraft reads its own value back
        rt.block_on(store.save_committed(Some(written[4].log_id))).unwrap();
        assert_eq!(rt.block_on(store.read_committed()).unwrap(), Some(written[4].log_id));
        rt.block_on(store.save_vote(&Vote::new(2, 1))).unwrap();
        assert_eq!(Progress::read(&raft).committed, None);
        let state: State = serde_json::from_slice(&std::fs::read(raft.join(STATE_FILE)).unwrap()).unwrap();
        assert_eq!(state.committed, None, "the state file's too");
        // durable: kept as it is
        sync_all(&store);
        rt.block_on(store.save_committed(Some(written[4].log_id))).unwrap();
        assert_eq!(Progress::read(&raft).committed, Some(written[4].log_id));
        drop(store);
        let mut store = Store::open(&raft, bare(dir.path())).unwrap();
        assert_eq!(rt.block_on(store.read_committed()).unwrap(), Some(written[4].log_id));
    }

    /// Raft's truncation cuts the partition log at the entry's batch; a purge moves the anchor
    /// past the entries it drops and keeps the leader of their term: after a reopen the entries
    /// left read back as written, even a data batch whose term's blank entry was purged.
    #[test]
    fn truncation_and_purge_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let raft = dir.path().join("raft");
        let mut store = Store::open(&raft, bare(dir.path())).unwrap();
        let mut written = history(&store);
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let offset_of = |s: &Store, i: u64| {
            let g = s.lock();
            g.slots.get((i - g.first) as usize).map(|x| x.offset)
        };
        let cut = offset_of(&store, 8).unwrap();
        rt.block_on(store.truncate(id(2, 3, 8))).unwrap();
        written.truncate(7);
        assert_eq!(store.lock().log.segment_log().log_end_offset(), cut);
        assert_eq!(read_back(&store), written);
        // a third term, led by node 2, goes on where the cut was
        let blank = Entry { log_id: id(3, 2, 8), payload: EntryPayload::Blank };
        let data = |s: &Store| {
            let end = s.lock().log.segment_log().log_end_offset();
            Entry { log_id: id(3, 2, 9), payload: EntryPayload::Normal(stored(3, end, 3, false)) }
        };
        store.write([blank.clone()]).unwrap();
        let data = data(&store);
        store.write([data.clone()]).unwrap();
        assert_eq!(offset_of(&store, 8), Some(cut));
        rt.block_on(store.purge(id(3, 2, 8))).unwrap();
        drop(store);
        let mut store = Store::open(&raft, bare(dir.path())).unwrap();
        let state = rt.block_on(RaftLogStorage::get_log_state(&mut store)).unwrap();
        assert_eq!(state.last_purged_log_id, Some(id(3, 2, 8)));
        assert_eq!(state.last_log_id, Some(id(3, 2, 9)));
        assert_eq!(rt.block_on(store.try_get_log_entries(9..10)).unwrap(), vec![data]);
        assert!(rt.block_on(store.try_get_log_entries(1..9)).unwrap().is_empty(), "purged entries are not read");
    }

    /// A crash that tears the log's end, at every byte of its last entries: the store opens to
    /// a prefix of what was written, every entry it has reads back as written, and appending
    /// goes on from there.
    #[test]
    fn a_log_cut_at_every_byte_of_its_last_entries_opens_to_a_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("raft"), bare(dir.path())).unwrap();
        let written = history(&store);
        drop(store);
        let segs: Vec<PathBuf> = {
            let mut v: Vec<PathBuf> = std::fs::read_dir(dir.path().join("p-0"))
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|x| x == "log"))
                .collect();
            v.sort();
            v
        };
        let last = segs.last().unwrap();
        let len = std::fs::metadata(last).unwrap().len();
        for cut in 0..len {
            let copy = tempfile::tempdir().unwrap();
            for sub in ["p-0", "raft"] {
                std::fs::create_dir_all(copy.path().join(sub)).unwrap();
                for e in std::fs::read_dir(dir.path().join(sub)).unwrap() {
                    let e = e.unwrap();
                    std::fs::copy(e.path(), copy.path().join(sub).join(e.file_name())).unwrap();
                }
            }
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(copy.path().join("p-0").join(last.file_name().unwrap()))
                .unwrap();
            f.set_len(cut).unwrap();
            drop(f);
            let store = Store::open(&copy.path().join("raft"), bare(copy.path())).unwrap();
            let got = read_back(&store);
            assert!(got.len() < written.len(), "cut at byte {cut}: all {} entries", got.len());
            assert_eq!(got[..], written[..got.len()], "cut at byte {cut}");
            // and the next entry goes right after
            let next = got.last().map_or(1, |e| e.log_id.index + 1);
            let offset = store.lock().log.segment_log().log_end_offset();
            store.write([Entry { log_id: id(3, 2, next), payload: EntryPayload::Blank }]).unwrap();
            let again = read_back(&store);
            assert_eq!(again.len(), got.len() + 1, "cut at byte {cut}");
            assert_eq!(again.last().map(|e| e.log_id), Some(id(3, 2, next)));
            assert_eq!(store.lock().slots.back().map(|s| s.offset), Some(offset));
        }
    }

    fn open_in(dir: &Path) -> Store {
        let log =
            Log::open(&dir.join("p-0"), LogConfig { segment_bytes: 4096, leader_epoch: None, ..LogConfig::default() })
                .unwrap();
        Store::open(&dir.join("raft"), Arc::new(Bare(Mutex::new(log)))).unwrap()
    }

    struct Builder;
    impl openraft::testing::StoreBuilder<TestConfig, Store, Sm, tempfile::TempDir> for Builder {
        async fn build(&self) -> Result<(tempfile::TempDir, Store, Sm), StorageError<NodeId>> {
            let dir = tempfile::tempdir().map_err(io_err)?;
            let store = open_in(dir.path());
            Ok((dir, store, Sm::default()))
        }
    }

    /// openraft's own conformance suite for log storage (vote, committed, append, read back,
    /// log state, truncate, purge, membership from the log) over a partition's segment log.
    #[test]
    fn openrafts_storage_suite_passes() {
        openraft::testing::Suite::test_all(Builder).unwrap();
    }
}
