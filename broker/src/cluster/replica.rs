//! Partition replication: one Raft group (openraft) per partition whose topic has a
//! replication factor above one, its voters the partition's replicas.
//!
//! Two logs (decision record 0010): each group's Raft log (`replication::log_store::LogStore`, binary records,
//! fsynced) holds the produce batches and transaction markers in the order the leader proposed
//! them; the partition log is the state machine. A batch is applied — the idempotence and
//! transaction checks, the offsets, the write — on every replica only once a majority has it,
//! so the partition log holds only committed data: the high watermark is its end, an `acks=all`
//! answer means "on a majority", and every replica computes the same producer state, so a new
//! leader continues the same sequences and epochs.
//!
//! The Raft log is fsynced before an entry counts as accepted; the partition log is not fsynced
//! per batch (a second fsync per batch would cost about 60% of the throughput — decision record
//! 0010), only every 500 ms before `applied.json` is rewritten.
//!
//! Restart: `applied.json` records the last applied Raft entry and the partition log's end at
//! that point (written only after that data is durable in the partition log). Entries after it
//! are applied again; while the partition log already holds their batches (written before the
//! crash, after the last `applied.json`), each is matched against the stored batch at the replay
//! cursor instead of written twice.
//!
//! Snapshots (decision record 0025): every `raft.log.max.bytes.between.snapshots` applied, a
//! replica links its partition's files into `snapshots/<id>/` and purges its Raft log up to the
//! snapshot ([`maintain`]); a follower the kept log no longer reaches is sent the snapshot's
//! files and swaps them in for its partition (`ReplicaSm::install_snapshot`).

// openraft's traits return its (large) StorageError; the helpers here return the same.
#![allow(clippy::result_large_err)]

pub use super::mend::KvStore;
use super::mend::{KvGate, KvMender, Mender, Peers, ShardPeers};
use crate::replication::log_store::{io_err, LogStore, Logged};
use crate::replication::partition_log_store::{EntryIndex, PartitionLogStore, SegmentLog};
use crate::replication::snapshot::{unpack, FilesStream, SnapshotData, SnapshotHeader};
use crate::replication::types::ApplyFailure;
use crate::replication::types::{
    GroupKey, KvEntry, NodeId, PartCommand, PartConfig, PartResult, PartitionLog, ShardCommand, ShardConfig,
    ShardResult, WriteError,
};
use crate::sync::OrDie as _;
use openraft::network::RaftNetworkFactory;
use openraft::storage::{RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, CommittedLeaderId, Entry, EntryPayload, LogId, Membership, OptionalSend, RaftSnapshotBuilder,
    SnapshotMeta, StorageError, StoredMembership, Vote,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// This broker's replica of one partition's Raft group (`C` = `PartConfig`), or of a
/// coordinator shard's ([`ShardReplica`]).
pub struct Replica<C: Logged = PartConfig> {
    pub key: GroupKey,
    pub topic_id: uuid::Uuid,
    pub raft: openraft::Raft<C>,
    pub dir: PathBuf,
    /// On the leader: when each follower last caught up (for `in_sync`).
    sync: std::sync::Mutex<SyncTrack>,
    /// Bytes of produce batches proposed here and not yet answered: this partition's budget
    /// and the broker's (`replication.partition.in.flight.max.bytes`,
    /// `replication.in.flight.max.bytes`).
    budgets: [Budget; 2],
    /// On the leader: answered writes' budget bytes held until every live follower holds them.
    trailing: Arc<Trailing>,
    /// A leader found gone (`failover`): reported as no leader until the group moves on.
    pub lost: Lost,
    /// What this replica answered other brokers' vote requests (`failover`).
    pub ballots: Ballots,
    /// What peers that repair their copy read from this one (`mend.rs`).
    pub copies: Copies,
    /// Non-zero while this replica's Raft log, cut at damage, lacks entries it had (see
    /// [`heal`]): the entry it must hold again before it votes or stands.
    pub healing: Arc<std::sync::atomic::AtomicU64>,
    /// AppendEntries RPCs this replica has taken from a leader (`network.rs`): a replica asked
    /// to stand waits for one more, so it stands with what its leader last committed.
    pub appends_taken: std::sync::atomic::AtomicU64,
    /// Born in this process (decision 0052): a follower knows its leader from the committed
    /// vote of its birth before that broker runs the group, and names it only once it has taken
    /// an append from it (`leader`).
    born: std::sync::atomic::AtomicBool,
    /// A `double` group's conversion to one log per replica (decision 0056): writes are
    /// proposed through its gate.
    pub conversion: Arc<Conversion>,
}

/// One replica's part in its group's conversion to one log per replica (decision 0056,
/// `convert.rs`).
#[derive(Default)]
pub struct Conversion {
    /// Held while a write is put on the Raft core's queue, and while the leader closes itself
    /// to writes and proposes the conversion: nothing it proposes comes after it.
    gate: std::sync::Mutex<()>,
    /// The term in which this replica, leading, last proposed the conversion (0: never). From
    /// then on it takes no write, in that term or a later one: its conversion entry may still be
    /// in its log, to be committed with the writes after it (a leader re-elected proposes it
    /// again, and the group converts at the first one committed).
    proposed_in: std::sync::atomic::AtomicU64,
    /// This replica applied the conversion (or installed a converted replica's snapshot): it
    /// takes no write, and its group is to restart on the partition log.
    applied: std::sync::atomic::AtomicBool,
    /// Woken once `applied` is set.
    due: tokio::sync::Notify,
}

impl Conversion {
    /// Put `cmd` on the Raft core's queue now, unless this replica takes no more writes. Never
    /// waits: see `Replica::propose`.
    pub(crate) fn submit<C: crate::replication::log_store::Logged>(
        &self,
        raft: &openraft::Raft<C>,
        cmd: C::D,
    ) -> Result<tokio::sync::oneshot::Receiver<openraft::raft::ClientWriteResult<C>>, WriteError> {
        let _gate = self.gate.lock().or_die();
        if self.applied.load(std::sync::atomic::Ordering::Acquire)
            || self.proposed_in.load(std::sync::atomic::Ordering::Acquire) != 0
        {
            return Err(WriteError::NotLeader);
        }
        submit_now(raft, cmd)
    }

    /// On the leader, in `term`: propose the conversion (once per term), and take no write
    /// after it.
    fn propose(&self, raft: &openraft::Raft<PartConfig>, term: u64) -> bool {
        let _gate = self.gate.lock().or_die();
        if self.applied.load(std::sync::atomic::Ordering::Acquire)
            || self.proposed_in.load(std::sync::atomic::Ordering::Acquire) == term
        {
            return false;
        }
        self.proposed_in.store(term, std::sync::atomic::Ordering::Release);
        let proposed = submit_now(raft, PartCommand::Convert).is_ok();
        if !proposed {
            self.proposed_in.store(0, std::sync::atomic::Ordering::Release); // (the group stopped: nothing proposed)
        }
        proposed
    }

    /// Has this replica applied the conversion? Then its group waits to be restarted.
    pub fn is_due(&self) -> bool {
        self.applied.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The state machine applied the conversion (its `applied.json` says so).
    fn applied(&self) {
        self.applied.store(true, std::sync::atomic::Ordering::Release);
        self.due.notify_one();
    }

    /// Wait until this replica has applied the conversion.
    pub async fn until_due(&self) {
        while !self.is_due() {
            self.due.notified().await;
        }
    }
}

/// Put `cmd` on the Raft core's queue: openraft's `client_write_ff` only queues it, so its
/// future is ready at its first poll; one that is not (the core stopped) is refused.
fn submit_now<C: crate::replication::log_store::Logged>(
    raft: &openraft::Raft<C>,
    cmd: C::D,
) -> Result<tokio::sync::oneshot::Receiver<openraft::raft::ClientWriteResult<C>>, WriteError> {
    let mut submit = std::pin::pin!(raft.client_write_ff(cmd));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match std::future::Future::poll(submit.as_mut(), &mut cx) {
        std::task::Poll::Ready(Ok(rx)) => Ok(rx),
        std::task::Poll::Ready(Err(_)) | std::task::Poll::Pending => Err(WriteError::Stopped),
    }
}

/// What a replica offers the other replicas of its group to repair a damaged copy from, and
/// repairs its own with (`mend.rs`).
#[derive(Clone)]
pub enum Copies {
    /// A partition's log: a damaged batch is replaced by another replica's identical copy.
    Part(Arc<dyn PartitionLog>),
    /// A coordinator shard's key/value log: a damaged log is replaced whole by another
    /// replica's live records.
    Kv(Arc<KvMender>),
}

impl<C: Logged> Replica<C> {
    /// A partition replica's log (peers read their copies of its batches).
    pub fn partition_log(&self) -> Option<Arc<dyn PartitionLog>> {
        match &self.copies {
            Copies::Part(p) => Some(p.clone()),
            Copies::Kv(_) => None,
        }
    }

    /// A coordinator shard replica's repair (peers read its live records through its gate).
    pub fn kv_mender(&self) -> Option<Arc<KvMender>> {
        match &self.copies {
            Copies::Kv(m) => Some(m.clone()),
            Copies::Part(_) => None,
        }
    }

    /// See [`heal`].
    pub fn is_healing(&self) -> bool {
        self.healing.load(std::sync::atomic::Ordering::Acquire) != 0
    }

    /// Before a follower stands for election on request (ElectLeaders, moving leadership):
    /// wait, at most `wait`, until it has taken an AppendEntries sent after the request and
    /// applied everything in its log — what its leader had committed then. A follower that
    /// stood without it (say, one just added, lacking the membership entry that made it a
    /// voter) would be refused by the voters, and its failed election would leave the group
    /// leaderless until an election timer fires.
    pub async fn caught_up_with_leader(&self, wait: Duration) -> bool {
        use std::sync::atomic::Ordering;
        let seen = self.appends_taken.load(Ordering::Acquire);
        let deadline = Instant::now() + wait;
        loop {
            let m = self.raft.metrics().borrow().clone();
            let applied_all = m.last_applied.map(|l| l.index) == m.last_log_index;
            if self.appends_taken.load(Ordering::Acquire) > seen && applied_all {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A leader this replica found gone (`cluster/failover.rs`), with the term it led: while the group's metrics still
/// name it in that term, the group reports no leader.
#[derive(Default)]
pub struct Lost(std::sync::atomic::AtomicU64, std::sync::atomic::AtomicU64);

impl Lost {
    pub(crate) fn set(&self, leader: NodeId, term: u64) {
        self.1.store(term, std::sync::atomic::Ordering::Relaxed);
        self.0.store(leader, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether `leader` in `term` is the leader found gone.
    pub fn is(&self, leader: NodeId, term: u64) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed) == leader
            && self.1.load(std::sync::atomic::Ordering::Relaxed) == term
    }
}

/// What this replica answered other brokers' vote requests (`network.rs`), for `failover`'s
/// retry loop: the last vote it granted, as (term, candidate), and which candidates asked with a
/// log shorter than its own. A vote openraft merely adopted from a refusal's answer is not a
/// grant: a candidate takes a higher vote it is shown, even from a voter whose log is shorter
/// than its own (decision 0055).
#[derive(Default)]
pub struct Ballots(std::sync::Mutex<BallotsSeen>);

#[derive(Default)]
struct BallotsSeen {
    granted: Option<(u64, NodeId)>,
    /// Candidates whose last request carried a shorter log than this replica's, and when.
    shorter: BTreeMap<NodeId, Instant>,
}

/// How long a candidate's shorter log is remembered: one failover's retries (`failover`).
const SHORTER_FOR: Duration = Duration::from_secs(5);

impl Ballots {
    /// Note this replica's answer to `candidate`'s request, which carried `their_log`.
    pub(crate) fn answered(
        &self,
        candidate: NodeId,
        their_log: Option<LogId<NodeId>>,
        answer: &Result<openraft::raft::VoteResponse<NodeId>, openraft::error::RaftError<NodeId>>,
    ) {
        let (Ok(r), Ok(mut seen)) = (answer, self.0.lock()) else { return };
        if r.vote_granted {
            seen.granted = Some((r.vote.leader_id().term, r.vote.leader_id().node_id));
        }
        // the answer carries this replica's own last log id
        if their_log < r.last_log_id {
            seen.shorter.insert(candidate, Instant::now());
        } else {
            seen.shorter.remove(&candidate);
        }
    }

    /// Whether a vote for `candidate` in `term` should hold this replica back from standing
    /// again: it granted that vote (so the candidate's log is at least as long as its own), or
    /// it adopted it and has not seen that candidate ask with a shorter log than its own (the
    /// candidate may be about to win). A candidate with a shorter log cannot win this
    /// replica's vote, so a vote for it holds nothing back.
    pub fn holds_back(&self, candidate: NodeId, term: u64) -> bool {
        let Ok(seen) = self.0.lock() else { return true };
        seen.granted == Some((term, candidate))
            || seen.shorter.get(&candidate).is_none_or(|at| at.elapsed() >= SHORTER_FOR)
    }
}

/// A budget of bytes in flight: a produce batch waits for its bytes before it is proposed and
/// returns them when its write is answered, so requests wait (and the connection stops being
/// read) instead of queueing without bound when a follower or the disk is slower than
/// producers.
#[derive(Clone)]
pub struct Budget {
    sem: Arc<tokio::sync::Semaphore>,
    capacity: u32,
}

impl Budget {
    pub fn new(bytes: u64) -> Budget {
        let capacity = u32::try_from(bytes.max(1)).unwrap_or(u32::MAX);
        Budget { sem: Arc::new(tokio::sync::Semaphore::new(capacity as usize)), capacity }
    }

    /// Bytes taken now.
    pub fn in_use(&self) -> u64 {
        u64::from(self.capacity).saturating_sub(self.sem.available_permits() as u64)
    }

    async fn take(&self, bytes: usize, deadline: tokio::time::Instant, wait: Duration) -> Result<Admitted, WriteError> {
        // a batch larger than the whole budget waits for all of it
        let n = u32::try_from(bytes).unwrap_or(u32::MAX).min(self.capacity);
        match tokio::time::timeout_at(deadline, self.sem.clone().acquire_many_owned(n)).await {
            Ok(Ok(permit)) => Ok(Admitted(vec![permit])),
            Ok(Err(_)) => Err(WriteError::Stopped),
            Err(_) => Err(WriteError::TimedOut(wait)),
        }
    }
}

/// Bytes of a budget held by a proposed write until it is answered (and then, on the leader,
/// until its followers hold it: [`Trailing`]).
pub struct Admitted(Vec<tokio::sync::OwnedSemaphorePermit>);

impl Admitted {
    fn bytes(&self) -> u64 {
        self.0.first().map_or(0, |p| p.num_permits() as u64)
    }
}

/// A follower that has not moved for this long holds no bytes of its leader's budget back
/// ([`Trailing`]): it is gone, paused, or being sent a snapshot.
const TRAIL_LIVE: Duration = Duration::from_secs(2);

/// On a group's leader: when each follower last answered an append or a heartbeat (the
/// group's transport notes it, `network::GroupPeer`). A follower that answers is alive, if
/// slow: it keeps holding bytes back ([`Trailing`]) while its matched index stands still — a
/// follower stopped most of the time, or starting on a loaded machine, whose appends time out
/// before it answers them, still answers heartbeats and the appends it takes in time. One
/// that answers nothing (gone, paused, its disk stuck: its Raft core answers nothing while a
/// write waits) is let go after [`TRAIL_LIVE`].
#[derive(Default)]
pub struct Answering(std::sync::Mutex<BTreeMap<NodeId, Instant>>);

impl Answering {
    /// `follower` answered just now.
    pub fn answered(&self, follower: NodeId) {
        self.0.lock().or_die().insert(follower, Instant::now());
    }

    /// When `follower` last answered.
    fn last(&self, follower: NodeId) -> Option<Instant> {
        self.0.lock().or_die().get(&follower).copied()
    }
}

/// How many appends of `replica.fetch.max.bytes` a partition's leader keeps in flight to each
/// follower (decision 0058): openraft 0.9 sends a follower its next append only once the last
/// is answered, and a follower answers once its entries are on disk; so the leader reads this
/// many appends' worth at once and `network::GroupPeer` sends them as that many frames, one
/// after the other, which the follower takes in order while it writes and syncs the ones before.
pub const APPEND_PIPELINE: usize = 4;

/// The most answered writes [`Trailing`] keeps on record once they hold no bytes (a follower
/// further back than the record does not count): bounds its memory however small the writes.
const TRAIL_RECORD: usize = 8192;

/// On a partition's leader: answered writes whose followers do not all hold them yet, with the
/// budget bytes each still holds (decision 0054). Raft answers a write once a majority holds
/// it, so on its own a follower slower than the other two (three replicas sharing two cores)
/// falls behind without bound, until it needs a snapshot of the whole partition. Holding the
/// bytes of `replication.partition.in.flight.max.bytes` until every live follower has them (as
/// Kafka's acks=all waits for its ISR) paces producers to the slowest follower that moved
/// within [`TRAIL_LIVE`] and is at most one budget behind. One that stopped, or is further
/// behind, holds nothing back (Kafka's follower out of its ISR) until it is within a budget
/// again.
#[derive(Default)]
pub struct Trailing(std::sync::Mutex<TrailQueue>);

#[derive(Default)]
struct TrailQueue {
    /// Answered writes in Raft index order: the index, the bytes answered up to and including
    /// it (a running total), and the budget bytes it still holds. Kept while they hold bytes,
    /// and as a record of the bytes behind the newest for one budget more.
    writes: std::collections::VecDeque<(u64, u64, Option<Admitted>)>,
    /// The newest write dropped from `writes`, and the running total there.
    dropped: (u64, u64),
}

impl Trailing {
    /// Write `index` was answered: its bytes stay held until [`Trailing::release`] passes it.
    fn hold(&self, index: u64, admitted: Admitted) {
        let mut q = self.0.lock().or_die();
        let bytes = admitted.bytes();
        // answers come in index order but may be taken here out of it (each on its own task)
        let at = q.writes.iter().rposition(|w| w.0 < index).map_or(0, |p| p + 1);
        let before = if at == 0 { q.dropped.1 } else { q.writes[at - 1].1 };
        q.writes.insert(at, (index, before + bytes, Some(admitted)));
        for w in q.writes.iter_mut().skip(at + 1) {
            w.1 += bytes;
        }
    }

    /// Bytes of answered writes past `index`; `None` if that is further back than the record.
    fn behind(&self, index: u64) -> Option<u64> {
        let q = self.0.lock().or_die();
        let newest = q.writes.back().map_or(q.dropped.1, |w| w.1);
        if index < q.dropped.0 {
            return None;
        }
        // (in index order: the last write at or before `index`)
        let upto = match q.writes.partition_point(|w| w.0 <= index) {
            0 => q.dropped.1,
            n => q.writes[n - 1].1,
        };
        Some(newest - upto)
    }

    /// Return the budget bytes of every write up to `index` (`u64::MAX`: all), and forget the
    /// record more than `keep` bytes (or [`TRAIL_RECORD`] writes) behind the newest.
    fn release(&self, index: u64, keep: u64) {
        let freed: Vec<Admitted> = {
            let mut q = self.0.lock().or_die();
            let mut freed = Vec::new();
            for w in q.writes.iter_mut().take_while(|w| w.0 <= index) {
                freed.extend(w.2.take());
            }
            let newest = q.writes.back().map_or(0, |w| w.1);
            while q
                .writes
                .front()
                .is_some_and(|w| w.2.is_none() && (newest - w.1 > keep || q.writes.len() > TRAIL_RECORD))
            {
                if let Some(w) = q.writes.pop_front() {
                    q.dropped = (w.0, w.1);
                }
            }
            freed
        };
        drop(freed); // the semaphores' waiters wake outside the lock
    }

    /// Not leading: nothing is held, nothing recorded.
    fn clear(&self) {
        let old = std::mem::take(&mut *self.0.lock().or_die());
        drop(old);
    }
}

/// Does a follower that last moved at `moved` and last answered at `answered` count as live
/// at `now` ([`Trailing`], [`Answering`])?
fn is_live(now: Instant, moved: Instant, answered: Option<Instant>) -> bool {
    let within = |t: Instant| now.saturating_duration_since(t) < TRAIL_LIVE;
    within(moved) || answered.is_some_and(within)
}

/// On the leader, while the group runs: return the budget bytes of `trailing` that every live
/// follower within one budget holds ([`Trailing`]). A follower is live while it moved or
/// answered ([`Answering`]) within [`TRAIL_LIVE`].
fn release_trailing<C: Logged>(
    key: GroupKey,
    raft: openraft::Raft<C>,
    trailing: Arc<Trailing>,
    answering: Arc<Answering>,
    budget: u64,
) {
    tokio::spawn(async move {
        let mut rx = raft.metrics();
        // each follower's matched index and when it last moved: a follower first seen counts as
        // just moved (a leader just elected counts its followers in, as Kafka's new leader
        // starts from the ISR it is given: one that is gone, its predecessor, for `TRAIL_LIVE`)
        let mut moved: BTreeMap<NodeId, (u64, Instant)> = BTreeMap::new();
        // whether each follower held bytes back at the last look (a change is logged)
        let mut counted: BTreeMap<NodeId, bool> = BTreeMap::new();
        loop {
            // (woken without a change too: a follower gone quiet must stop holding bytes back)
            if let Ok(Err(_)) = tokio::time::timeout(TRAIL_LIVE / 4, rx.changed()).await {
                trailing.clear();
                return; // the group shut down
            }
            // each follower's matched index, on the leader (openraft's metrics read and let go
            // before the trail is locked)
            let followers: Option<Vec<(NodeId, u64)>> = {
                let m = rx.borrow_and_update();
                m.replication.as_ref().filter(|_| m.current_leader == Some(m.id)).map(|repl| {
                    repl.iter()
                        .filter(|(id, _)| **id != m.id)
                        .map(|(id, matched)| (*id, matched.map_or(0, |l| l.index)))
                        .collect()
                })
            };
            let floor = followers.map(|followers| {
                let now = Instant::now();
                let mut floor = u64::MAX;
                for (id, at) in followers {
                    let seen = moved.entry(id).or_insert((at, now));
                    if seen.0 != at {
                        *seen = (at, now);
                    }
                    let live = is_live(now, seen.1, answering.last(id));
                    let behind = trailing.behind(at);
                    let holds = live && behind.is_some_and(|b| b <= budget);
                    if holds {
                        floor = floor.min(at);
                    }
                    // one line each time a follower starts or stops holding producers back
                    // (Kafka's "Shrinking ISR" / "Expanding ISR")
                    if counted.insert(id, holds).unwrap_or(true) != holds {
                        let why = match behind {
                            _ if holds => "holds producers back again: it answers and is within one budget".to_string(),
                            _ if !live => format!("no longer holds producers back: no answer for {TRAIL_LIVE:?}"),
                            Some(b) => {
                                format!("no longer holds producers back: {b} bytes behind, over the budget of {budget}")
                            }
                            None => {
                                "no longer holds producers back: further behind than the leader's record".to_string()
                            }
                        };
                        tracing::info!(topic = key.0.as_str(), partition = key.1, follower = id, "follower {id} {why}");
                    }
                }
                floor
            });
            match floor {
                Some(floor) => trailing.release(floor, budget),
                None => {
                    moved.clear();
                    counted.clear();
                    trailing.clear();
                }
            }
        }
    });
}

/// Kafka's ISR rule over Raft's replication progress: a follower is in sync while, within
/// `replica.lag.time.max.ms`, it caught up with where the leader's log ended at some moment
/// (Kafka: its fetch reached the leader's log end as of its previous fetch). The leader notes
/// its log end at each observation; a follower is in sync if its matched index reaches one of
/// the ends noted within the lag time. A new term starts with every replica in sync for one lag
/// time (Kafka's new leader starts from the ISR it is given).
struct SyncTrack {
    term: u64,
    started: std::time::Instant,
    ends: std::collections::VecDeque<(std::time::Instant, u64)>,
}

impl Default for SyncTrack {
    fn default() -> Self {
        SyncTrack { term: 0, started: std::time::Instant::now(), ends: Default::default() }
    }
}

/// A coordinator shard's replica.
pub type ShardReplica = Replica<ShardConfig>;

impl<C: Logged> Replica<C> {
    /// The group's leader as this replica knows it.
    pub fn leader(&self) -> Option<i32> {
        let m = self.raft.metrics();
        let m = m.borrow();
        let leader = m.current_leader.filter(|l| !self.lost.is(*l, m.current_term))?;
        // a group just born names its first replica leader before that broker runs it: a
        // follower names it once it has heard from it (clients asked meanwhile retry, and
        // CreateTopics waits until then)
        if leader != m.id
            && self.born.load(std::sync::atomic::Ordering::Acquire)
            && self.appends_taken.load(std::sync::atomic::Ordering::Acquire) == 0
        {
            return None;
        }
        i32::try_from(leader).ok()
    }

    /// Does this replica lead its group without having applied an entry of its own term yet?
    /// Its high watermark may then be below what the previous leader served.
    pub fn leads_unsettled(&self) -> bool {
        let m = self.raft.metrics();
        let m = m.borrow();
        m.current_leader == Some(m.id) && m.last_applied.is_none_or(|l| l.leader_id.term != m.current_term)
    }

    /// The group's voters as this replica knows them.
    pub fn voters(&self) -> std::collections::BTreeSet<i32> {
        let m = self.raft.metrics().borrow().membership_config.clone();
        m.voter_ids().filter_map(|v| i32::try_from(v).ok()).collect()
    }

    /// The current Raft term (reported to clients as the partition's leader epoch).
    pub fn term(&self) -> i32 {
        i32::try_from(self.raft.metrics().borrow().current_term).unwrap_or(i32::MAX)
    }

    /// Has this replica applied an entry of its current term? On a leader: every entry
    /// committed before it became leader is applied, so its partition log holds them all (the
    /// KIP-890 guard's start offset is taken only then).
    pub fn applied_own_term(&self) -> bool {
        let m = self.raft.metrics().borrow().clone();
        m.last_applied.is_some_and(|l| l.leader_id.term == m.current_term)
    }

    /// A leader just elected: wait, at most `wait`, until it has applied an entry of its own
    /// term (its blank entry, committed once a follower has it) — every entry of earlier terms
    /// is then applied. Whether it has; false at once where this replica does not lead.
    pub async fn settled(&self, wait: Duration) -> bool {
        let mut rx = self.raft.metrics();
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            {
                let m = rx.borrow_and_update();
                if m.current_leader != Some(m.id) {
                    return false;
                }
                if m.last_applied.is_some_and(|l| l.leader_id.term == m.current_term) {
                    return true;
                }
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                _ => return false,
            }
        }
    }

    /// On the leader: how far each replica's Raft log trails the leader's (entries), by node.
    pub fn lag(&self) -> Option<BTreeMap<i32, u64>> {
        let m = self.raft.metrics().borrow().clone();
        let last = m.last_log_index.unwrap_or(0);
        let repl = m.replication?;
        Some(
            repl.iter()
                .filter_map(|(id, matched)| {
                    let id = i32::try_from(*id).ok()?;
                    Some((id, last.saturating_sub(matched.map(|l| l.index).unwrap_or(0))))
                })
                .collect(),
        )
    }

    /// On the leader: the replicas in sync (itself, and the followers that caught up within
    /// `lag`); elsewhere none. A follower is first counted as caught up when this leader first
    /// sees it (Kafka's leader starts from the ISR it is given).
    pub fn in_sync(&self, lag: Duration) -> Vec<i32> {
        let m = self.raft.metrics().borrow().clone();
        let Some(repl) = m.replication.as_ref() else { return Vec::new() };
        let now = std::time::Instant::now();
        let last = m.last_log_index.unwrap_or(0);
        let mut t = self.sync.lock().or_die();
        if t.term != m.current_term {
            *t = SyncTrack { term: m.current_term, started: now, ends: Default::default() };
        }
        while t.ends.front().is_some_and(|(at, _)| now.duration_since(*at) > lag) {
            t.ends.pop_front();
        }
        match t.ends.back_mut() {
            Some(back) if back.1 == last => back.0 = now,
            _ => t.ends.push_back((now, last)),
        }
        let grace = now.duration_since(t.started) <= lag;
        let mut out: std::collections::BTreeSet<i32> = repl
            .iter()
            .filter(|(id, matched)| {
                let matched = matched.map(|l| l.index).unwrap_or(0);
                **id == m.id || grace || t.ends.iter().any(|(_, end)| *end <= matched)
            })
            .filter_map(|(id, _)| i32::try_from(*id).ok())
            .collect();
        out.insert(i32::try_from(m.id).unwrap_or(-1));
        out.into_iter().collect()
    }

    /// On the leader: wait until `needed` replicas (itself included) hold the Raft log up to
    /// `index`, or `deadline`; whether they do. For min.insync.replicas above a majority:
    /// Raft's commit already puts every write on a majority.
    pub async fn await_replicas(&self, index: u64, needed: usize, deadline: tokio::time::Instant) -> bool {
        let mut rx = self.raft.metrics();
        loop {
            let held = {
                let m = rx.borrow_and_update();
                let followers = m.replication.as_ref().map_or(0, |r| {
                    r.iter().filter(|(id, l)| **id != m.id && l.is_some_and(|l| l.index >= index)).count()
                });
                followers + 1
            };
            if held >= needed {
                return true;
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                _ => return false,
            }
        }
    }

    /// Propose `cmd`; returns the receiver of its result, in proposal order (called in a
    /// request's ordered stage 1, or under a coordinator shard's lock, so proposals keep their
    /// callers' order). Never waits: openraft's `client_write_ff` only puts the command on the
    /// Raft core's unbounded queue, so its future is ready at its first poll; one that is not
    /// (the core stopped, and openraft waits to say why) is refused as [`WriteError::Stopped`].
    pub fn propose(&self, cmd: C::D) -> Result<PendingWrite<C>, WriteError> {
        if self.leader() != i32::try_from(self.raft_id()).ok() {
            return Err(WriteError::NotLeader);
        }
        self.conversion.submit(&self.raft, cmd).map(|rx| PendingWrite(rx, None))
    }

    fn raft_id(&self) -> NodeId {
        self.raft.metrics().borrow().id
    }

    /// Wait (at most `wait`) for `bytes` of this partition's and the broker's budgets of bytes
    /// in flight; held by the write [`Replica::propose_admitted`] makes.
    pub async fn admit(&self, bytes: usize, wait: Duration) -> Result<Admitted, WriteError> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut own = self.budgets[0].take(bytes, deadline, wait).await?;
        let broker = self.budgets[1].take(bytes, deadline, wait).await?;
        own.0.extend(broker.0);
        Ok(own)
    }

    /// [`Replica::propose`], holding `admitted` until the write is answered.
    pub fn propose_admitted(&self, cmd: C::D, admitted: Admitted) -> Result<PendingWrite<C>, WriteError> {
        let mut w = self.propose(cmd)?;
        w.1 = Some((admitted, self.trailing.clone()));
        Ok(w)
    }
}

/// A proposed write: await it for the applied result.
pub struct PendingWrite<C: Logged = PartConfig>(
    tokio::sync::oneshot::Receiver<openraft::raft::ClientWriteResult<C>>,
    Option<(Admitted, Arc<Trailing>)>,
);

impl<C: Logged> PendingWrite<C> {
    /// Test code: a write whose replica stopped before answering (its outcome never known).
    #[cfg(test)]
    pub fn lost() -> PendingWrite<C> {
        let (_, rx) = tokio::sync::oneshot::channel();
        PendingWrite(rx, None)
    }

    /// The result once committed and applied; an error if leadership was lost first or the
    /// replica stopped (the write may or may not commit later: the client retries, and
    /// idempotence makes the retry safe), or after `timeout`.
    pub async fn wait(self, timeout: Duration) -> Result<C::R, WriteError> {
        self.wait_indexed(timeout).await.map(|(r, _)| r)
    }

    /// [`PendingWrite::wait`], with the write's index in the group's Raft log.
    pub async fn wait_indexed(self, timeout: Duration) -> Result<(C::R, u64), WriteError> {
        let PendingWrite(mut rx, admitted) = self;
        let answer = match tokio::time::timeout(timeout, &mut rx).await {
            Ok(Ok(Ok(r))) => {
                // its bytes stay held until the followers hold it too ([`Trailing`])
                if let Some((held, trailing)) = admitted {
                    trailing.hold(r.log_id.index, held);
                }
                return Ok((r.data, r.log_id.index));
            }
            Ok(Ok(Err(e))) => Err(WriteError::LeadershipLost(e.to_string())),
            Ok(Err(_)) => Err(WriteError::Stopped),
            Err(_) => {
                // still in the Raft pipeline: its bytes stay in flight until Raft answers
                if let Some(held) = admitted {
                    tokio::spawn(async move {
                        let _ = rx.await;
                        drop(held);
                    });
                }
                return Err(WriteError::TimedOut(timeout));
            }
        };
        drop(admitted);
        answer
    }
}

/// A replica whose Raft log was cut at damage (`LogStore::damaged_until`) lost entries it had
/// acknowledged: counted in a majority, they may be on only one other replica. Were it to vote
/// (or stand) now, a candidate lacking them could win, and committed entries would be lost.
/// So until its log holds entry `until` again (sent by a leader, or in a snapshot) it neither
/// stands for election (openraft's timer off; `failover` and `PartElect` ask
/// [`Replica::is_healing`]) nor answers vote requests (`network.rs`). Decision 0037.
fn heal<C: Logged>(key: &GroupKey, raft: &openraft::Raft<C>, until: u64, healing: Arc<std::sync::atomic::AtomicU64>) {
    use std::sync::atomic::Ordering;
    healing.store(until, Ordering::Release);
    raft.runtime_config().elect(false);
    tracing::warn!(
        group = key.0.as_str(),
        partition = key.1,
        "the Raft log was damaged and cut before entry {until}: this replica neither votes nor stands for election \
         until it holds entry {until} again"
    );
    let (raft, key) = (raft.clone(), key.clone());
    tokio::spawn(async move {
        let mut rx = raft.metrics();
        loop {
            let held = {
                let m = rx.borrow_and_update();
                m.last_log_index.unwrap_or(0).max(m.snapshot.map_or(0, |s| s.index))
            };
            if held >= until {
                healing.store(0, Ordering::Release);
                raft.runtime_config().elect(true);
                tracing::info!(
                    group = key.0.as_str(),
                    partition = key.1,
                    "the Raft log holds entry {until} again: this replica votes and stands again"
                );
                return;
            }
            if rx.changed().await.is_err() {
                return; // the group shut down
            }
        }
    });
}

/// Which partition a replica is of, as the image assigns it.
pub struct ReplicaSpec {
    pub key: GroupKey,
    pub topic_id: uuid::Uuid,
    pub replicas: Vec<i32>,
    /// The first replica of a partition never reassigned may form the group.
    pub initialize: bool,
    /// `replica.fetch.max.bytes`: bytes of entries the leader reads for one append to a
    /// follower (at least one entry; `LogStore::limit_reads`).
    pub append_bytes_max: usize,
    /// `raft.log.max.bytes.between.snapshots`: a partition's replica snapshots its segments
    /// (and purges its Raft log) after applying this many bytes of batches.
    pub snapshot_bytes: u64,
    /// This partition's budget of bytes in flight and the broker's (shared by its partitions).
    pub budgets: [Budget; 2],
    /// `replication.log.format=single`: a new partition group's Raft log is its segment log
    /// (decision 0045 step 3). A group keeps the format it was created with.
    pub single_log: bool,
    /// `replica.page.cache.tail.bytes`: while this replica follows, its partition log keeps at
    /// most this many bytes of its end in the page cache (-1: as its config says; decision 0054).
    pub follower_cache_tail: i64,
    /// When each follower last answered (noted by the group's transport; [`Answering`]).
    pub answering: Arc<Answering>,
}

/// Start (or reopen) this broker's replica of a partition. With `initialize` (the first replica
/// of a partition never reassigned), a replica that never held the group's state forms it with
/// every replica in `replicas` as a voter; any other waits to be contacted by the leader.
#[allow(clippy::too_many_arguments)]
pub async fn start<N: RaftNetworkFactory<PartConfig>>(
    me: NodeId,
    spec: ReplicaSpec,
    addresses: &BTreeMap<NodeId, String>,
    network: N,
    partition: Arc<dyn PartitionLog>,
    segments: Arc<dyn SegmentLog>,
    peers: Arc<dyn Peers>,
    dir: PathBuf,
) -> anyhow::Result<Arc<Replica>> {
    sluice_storage::sidefile::create_dir_durable(&dir)?;
    // (a group converting to one log per replica converted before this: `convert::prepare`)
    let single = match log_format_of(&dir) {
        Some(single) => single,
        None => group_log_format(&peers, &spec).await,
    };
    let conversion = Arc::new(Conversion::default());
    // a `double` group's leader on a broker set to `single` converts it
    let convert = !single && spec.single_log;
    let mender = Arc::new(Mender::new(partition.clone(), peers));
    let every = spec.snapshot_bytes.max(1);
    let budget = spec.budgets[0].clone();
    let (append_bytes_max, snapshot_bytes, follower_tail) =
        (spec.append_bytes_max, spec.snapshot_bytes, spec.follower_cache_tail);
    let replica = if single {
        segments.use_terms().map_err(|e| anyhow::anyhow!("{e}"))?;
        // the log is the Raft log: its entries cannot be indexed, read or appended to until
        // the damaged (or lost) batches are its peers' copies again, the bytes this replica
        // held and acknowledged; it takes no part in its group meanwhile. Damage is known from
        // the log's open, or found by the store's own (a batch whose term is above the vote's:
        // decision 0050)
        let mut repairs = 0;
        let log = loop {
            if partition.is_damaged() {
                let name = partition.name();
                tracing::warn!(
                    partition = name.as_str(),
                    "the log is damaged: repairing it from the other replicas first"
                );
                mender.mend_patiently(&name, MEND_ATTEMPTS).await.map_err(|e| {
                    anyhow::anyhow!("{name}: the log is damaged and was not repaired from the other replicas: {e}")
                })?;
                repairs += 1;
            }
            match PartitionLogStore::<PartConfig, dyn SegmentLog>::open(&dir, segments.clone()) {
                Ok(log) => break log,
                // (damage found in another segment each time: a few at most)
                Err(e) if partition.is_damaged() && repairs < 8 => {
                    tracing::warn!(partition = partition.name().as_str(), "opening its Raft log: {e}");
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
        };
        // one read: the appends the leader keeps in flight to a follower (decision 0058)
        let read_max = append_bytes_max.saturating_mul(APPEND_PIPELINE);
        log.limit_reads(read_max);
        // what the leader may read again (for a follower, or to apply it): the bytes in flight
        log.keep_recent(
            (spec.budgets[0].capacity as usize).saturating_add(read_max),
            (spec.budgets[1].capacity as usize).saturating_add(read_max),
        );
        let mut initialized = log.has_vote_or_entries();
        let mut born_now = false;
        let index: Arc<dyn EntryIndex> = Arc::new(log.clone());
        let mut sm = ReplicaSm::open(&dir, partition, Some(index))?.with_mender(mender.clone());
        if spec.initialize && !initialized {
            if let Some((vote, born, membership)) = birth(&mender.peers, &spec, addresses).await? {
                // the state machine first: a store seeded means born (`initialized`)
                sm.seed(born, membership).await.map_err(|e| anyhow::anyhow!("a new group's birth: {e}"))?;
                log.seed(vote, born)?;
                initialized = true;
                born_now = true;
                tracing::debug!(topic = spec.key.0.as_str(), partition = spec.key.1, "group born without entries");
            }
        }
        let progress = sm.progress.clone();
        let partition = sm.partition.clone();
        let copies = Copies::Part(partition.clone());
        let replica =
            start_group(me, spec, addresses, network, sm, dir, copies, log, initialized, None, conversion).await?;
        replica.born.store(born_now, std::sync::atomic::Ordering::Release);
        let upkeep = Upkeep { every, follower_tail, budget, convert: false };
        maintain(replica.clone(), progress, upkeep, partition, mender);
        replica
    } else {
        let log = LogStore::<PartConfig>::open(&dir)?;
        log.limit_reads(append_bytes_max.saturating_mul(APPEND_PIPELINE));
        // a file of the Raft log per quarter snapshot interval: the purge after each snapshot
        // deletes files (decision 0030)
        log.roll_at((snapshot_bytes / 4).clamp(1 << 20, 16 << 20));
        let (initialized, damaged_until) = (log.has_vote_or_entries(), log.damaged_until());
        let sm = ReplicaSm::open(&dir, partition, None)?
            .with_mender(mender.clone())
            .converting(conversion.clone(), segments.clone());
        let progress = sm.progress.clone();
        let partition = sm.partition.clone();
        let copies = Copies::Part(partition.clone());
        let replica =
            start_group(me, spec, addresses, network, sm, dir, copies, log, initialized, damaged_until, conversion)
                .await?;
        let upkeep = Upkeep { every, follower_tail, budget, convert };
        maintain(replica.clone(), progress, upkeep, partition, mender);
        replica
    };
    Ok(replica)
}

/// The state file of a Raft log kept in the partition's segment log (`PartitionLogStore`).
pub(super) const SINGLE_LOG_STATE: &str = "raft-state.json";

/// The directory of a partition replica under `replicas_dir`.
pub fn dir_of(replicas_dir: &Path, topic_id: uuid::Uuid, partition: i32) -> PathBuf {
    replicas_dir.join(format!("{topic_id}-{partition}"))
}

/// Whether the partition replica in `dir` holds more than a birth without entries (decision
/// 0052): any Raft log of its own does, and a log kept in the partition log does once it held
/// an entry or a vote other than the first leader's.
pub fn held_past_birth(dir: &Path) -> bool {
    match log_format_of(dir) {
        None => false,
        Some(false) => true,
        Some(true) => crate::replication::partition_log_store::holds_past_birth(dir),
    }
}

/// The voters of a group of `replicas`, with their Raft addresses.
fn members_of(replicas: &[i32], addresses: &BTreeMap<NodeId, String>) -> anyhow::Result<BTreeMap<NodeId, BasicNode>> {
    let mut members = BTreeMap::new();
    for r in replicas {
        let id = NodeId::try_from(*r)?;
        let addr = addresses.get(&id).ok_or_else(|| anyhow::anyhow!("replica {r} has no Raft address"))?;
        members.insert(id, BasicNode { addr: addr.clone() });
    }
    Ok(members)
}

/// A new group born without entries (one log per replica, decision 0052): with Raft's own
/// first entries (the membership, the first leader's blank) in the partition log, a new
/// partition's first record would be at offset 2, not 0 as Kafka clients expect. Instead every
/// replica of a partition never reassigned, holding nothing, starts as if the group's first
/// entry (its membership, index 0) were applied and purged and the first replica had won
/// term 1 (a committed vote: openraft restores a committed leader as leader, with no blank
/// entry). Not when another replica holds more than that (this one was wiped: a first replica
/// reborn as term 1's leader with an empty log would write entries over the group's), nor when
/// none answers (then the first replica forms the group with entries, as before).
async fn birth(
    peers: &Arc<dyn Peers>,
    spec: &ReplicaSpec,
    addresses: &BTreeMap<NodeId, String>,
) -> anyhow::Result<Option<(Vote<NodeId>, LogId<NodeId>, Membership<NodeId, BasicNode>)>> {
    let Some(first) = spec.replicas.first().and_then(|r| NodeId::try_from(*r).ok()) else { return Ok(None) };
    let answers = peers.held().await;
    if answers.iter().any(|(_, a)| matches!(a, Ok(true))) || !answers.iter().any(|(_, a)| a.is_ok()) {
        return Ok(None);
    }
    let members = members_of(&spec.replicas, addresses)?;
    let voters: BTreeSet<NodeId> = members.keys().copied().collect();
    let membership = Membership::new(vec![voters], members);
    Ok(Some((Vote::new_committed(1, first), LogId::new(CommittedLeaderId::new(1, first), 0), membership)))
}

/// Whether the partition replica in `dir` keeps its Raft log in its segment log (`Some(true)`)
/// or in a Raft log of its own (`LogStore`'s files): the format it was created with. `None`
/// for a new replica.
pub fn log_format_of(dir: &Path) -> Option<bool> {
    if dir.join(SINGLE_LOG_STATE).exists() {
        return Some(true);
    }
    (!own_raft_log_files(dir).is_empty()).then_some(false)
}

/// The files of a Raft log of its own (`LogStore`: `raft-log*`, `raft-meta.json`) in a
/// partition replica's directory.
pub(super) fn own_raft_log_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(list) = std::fs::read_dir(dir) else { return Vec::new() };
    list.filter_map(|e| e.ok())
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("raft-log") || name == "raft-meta.json"
        })
        .map(|e| e.path())
        .collect()
}

/// The format of a new replica's Raft log: its group's, as the other replicas keep it — a
/// group whose replicas differ has different offsets on each (Raft's own entries take offsets
/// in one, not in the other) — and for a group no other replica holds yet, this broker's
/// `replication.log.format`. When no other replica answers at all, they are asked again for
/// up to 10 s; then this broker's setting, with a warning.
async fn group_log_format(peers: &Arc<dyn Peers>, spec: &ReplicaSpec) -> bool {
    let name = format!("{}-{}", spec.key.0, spec.key.1);
    for attempt in 0..10 {
        let answers = peers.formats().await;
        if let Some(single) = answers.iter().find_map(|(_, a)| a.as_ref().ok().copied().flatten()) {
            if single != spec.single_log {
                tracing::info!(
                    partition = name.as_str(),
                    "a new replica keeps its Raft log as its group does: replication.log.format={}",
                    if single { "single" } else { "double" }
                );
            }
            return single;
        }
        if answers.iter().any(|(_, a)| a.is_ok()) {
            // the replicas that answered hold none: a new group (waiting for one that does not
            // answer would hold up every new partition while a broker is down: the reconciler
            // starts replicas one by one)
            return spec.single_log;
        }
        if attempt == 0 {
            tracing::info!(partition = name.as_str(), "asking the other replicas how the group keeps its Raft log");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    tracing::warn!(
        partition = name.as_str(),
        "no other replica said how the group keeps its Raft log: this broker's replication.log.format applies"
    );
    spec.single_log
}

/// While a partition's group runs: take a snapshot once `every` bytes of batches were applied
/// since the last, and purge the Raft log up to the newest snapshot — except, on the leader,
/// the entries a follower still needs unless it is more than [`KEPT_SNAPSHOTS`] snapshot
/// intervals behind (then it is sent the snapshot: a copy of the whole partition, which a
/// follower merely slower than the producers must never need). Each replica does this for its
/// own log. And while this replica follows, its partition log keeps only `follower_tail` bytes of
/// its end in the page cache (decision 0054). A `double` group's leader on a broker set to
/// `single` proposes its conversion (decision 0056); once this replica applied it, nothing more
/// is done here until the group restarts.
fn maintain(
    replica: Arc<Replica>,
    progress: Arc<SmProgress>,
    upkeep: Upkeep,
    partition: Arc<dyn PartitionLog>,
    mender: Arc<Mender>,
) {
    use std::sync::atomic::Ordering;
    let Upkeep { every, follower_tail, budget, convert } = upkeep;
    let (raft, key, conversion) = (replica.raft.clone(), replica.key.clone(), replica.conversion.clone());
    drop(replica);
    tokio::spawn(async move {
        let mut rx = raft.metrics();
        let labels = [("group", key.0.clone()), ("partition", key.1.to_string())];
        // the indexes of the newest snapshots, oldest first
        let mut recent: std::collections::VecDeque<u64> = Default::default();
        // the last applied entry when a snapshot was last asked for
        let mut triggered_at = 0u64;
        // the last applied entry the loop saw, and for how many rounds it stayed
        let (mut seen_applied, mut idle_rounds) = (0u64, 0u32);
        // whether the partition log was last told this replica leads (None: not told yet)
        let mut told_leading: Option<bool> = None;
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if rx.has_changed().is_err() {
                return; // the group shut down
            }
            ::metrics::gauge!(crate::metrics::RAFT_BYTES_IN_FLIGHT, &labels).set(budget.in_use() as f64);
            if conversion.is_due() {
                continue; // applied: no snapshot, purge or write until the group restarts
            }
            if convert {
                let (leading, term, settled) = {
                    let m = rx.borrow();
                    let leading = m.current_leader == Some(m.id);
                    (leading, m.current_term, m.last_applied.is_some_and(|l| l.leader_id.term == m.current_term))
                };
                if leading && settled && conversion.propose(&raft, term) {
                    tracing::info!(
                        partition = partition.name(),
                        "converting the group's Raft log to one log per replica (replication.log.format=single, term {term})"
                    );
                }
            }
            // damaged data found by a read: repaired from the other replicas now (the state
            // machine would, before its next entry, but a leader serves reads meanwhile); a
            // leader that cannot repair lets another replica lead
            if partition.is_damaged() {
                if let Err(e) = mender.mend().await {
                    tracing::warn!(partition = partition.name(), "{e}");
                    let leading = {
                        let m = rx.borrow();
                        m.current_leader == Some(m.id)
                    };
                    if leading {
                        mender.peers.hand_over().await;
                    }
                }
            }
            // openraft requires each snapshot to end at a later entry than the one before
            let (applied, snap_index, leading) = {
                let m = rx.borrow();
                (m.last_applied.map_or(0, |l| l.index), m.snapshot.map(|s| s.index), m.current_leader == Some(m.id))
            };
            // a follower's log is read by no consumer: only its tail stays in the page cache,
            // so its writes reuse pages instead of growing the cache (decision 0054). A new
            // leader keeps what its config says from its next fsync on.
            if told_leading != Some(leading) {
                partition.keep_cached_tail(if leading { -1 } else { follower_tail });
                told_leading = Some(leading);
            }
            // a snapshot whose log start retention (or DeleteRecords) has passed keeps deleted
            // segments on disk through its links: replace it
            let log_start = partition.offsets().0;
            let pinning = snap_index.is_some() && log_start > progress.snapshot_log_start.load(Ordering::Acquire);
            let fresh = applied > snap_index.unwrap_or(0).max(triggered_at);
            if pinning && leading {
                // a no-op entry (DeleteRecords to the log start) gives every replica a later
                // entry to end its next snapshot at — a follower's too, whose snapshot may be at
                // its last entry while the leader's is not (writes stopped: without it that
                // follower's old snapshot kept the deleted segments until the next write)
                let _ = conversion.submit(&raft, PartCommand::DeleteRecords { offset: log_start });
            }
            idle_rounds = if applied == seen_applied { idle_rounds + 1 } else { 0 };
            seen_applied = applied;
            // a compacted partition's cleaner stops where a restart would replay from (the end
            // `applied.json` records, rewritten only as entries apply): once writes pause, a
            // snapshot records the end, so the cleaner reaches the last records too
            let cleaner_held = idle_rounds >= 2 && partition.cleaner_held_back();
            if (progress.bytes_since_snapshot.load(Ordering::Relaxed) >= every || pinning || cleaner_held)
                && fresh
                && !progress.replaying.load(Ordering::Acquire)
            {
                progress.bytes_since_snapshot.store(0, Ordering::Relaxed);
                triggered_at = applied;
                if raft.trigger().snapshot().await.is_err() {
                    return;
                }
            }
            let m = rx.borrow_and_update().clone();
            let Some(snap) = m.snapshot else { continue };
            if recent.back() != Some(&snap.index) {
                recent.push_back(snap.index);
                if recent.len() > KEPT_SNAPSHOTS {
                    recent.pop_front();
                }
            }
            let oldest = recent.front().copied().unwrap_or(0);
            let mut upto = snap.index;
            for (id, matched) in m.replication.iter().flatten() {
                let at = matched.map_or(0, |l| l.index);
                if *id != m.id && at < upto && (at >= oldest || recent.len() < KEPT_SNAPSHOTS) {
                    upto = at;
                }
            }
            if m.purged.is_some_and(|p| p.index >= upto) || upto == 0 {
                continue;
            }
            if raft.trigger().purge_log(upto).await.is_err() {
                return;
            }
        }
    });
}

/// What [`maintain`] keeps a partition's replica to.
struct Upkeep {
    /// Snapshot after this many bytes of batches applied.
    every: u64,
    /// While following, keep this many bytes of the log's end in the page cache (-1: all).
    follower_tail: i64,
    budget: Budget,
    /// Propose the group's conversion to one log per replica while leading.
    convert: bool,
}

/// A coordinator shard snapshots every `raft.log.max.bytes.between.snapshots` / this many
/// entries (decision 0031).
const SHARD_ENTRY_BYTES: u64 = 16 * 1024;

/// A leader keeps the Raft log a follower needs while it is at most this many snapshot
/// intervals behind (at the default interval, 512 MiB of entries).
const KEPT_SNAPSHOTS: usize = 8;

/// A coordinator shard's replica: its state machine appends to the shard's key/value log
/// through `store` (which makes the records durable before returning); a damaged log is
/// replaced by a copy from `peers`.
pub async fn start_kv<N: RaftNetworkFactory<ShardConfig>>(
    me: NodeId,
    spec: ReplicaSpec,
    addresses: &BTreeMap<NodeId, String>,
    network: N,
    store: Arc<dyn KvStore>,
    peers: Arc<dyn ShardPeers>,
    dir: PathBuf,
) -> anyhow::Result<Arc<ShardReplica>> {
    sluice_storage::sidefile::create_dir_durable(&dir)?;
    let sm = KvSm::open(&dir, store)?;
    let name = format!("{}-{}", spec.key.0, spec.key.1);
    let mender = Arc::new(KvMender::new(sm.gate.clone(), peers, name, spec.key.0.clone()));
    let log = LogStore::<ShardConfig>::open(&dir)?;
    log.limit_reads(spec.append_bytes_max);
    log.roll_at((spec.snapshot_bytes / 4).clamp(1 << 20, 16 << 20));
    let (initialized, damaged_until) = (log.has_vote_or_entries(), log.damaged_until());
    let conversion = Arc::new(Conversion::default());
    start_group(me, spec, addresses, network, sm, dir, Copies::Kv(mender), log, initialized, damaged_until, conversion)
        .await
}

/// Start a group over `network`, the transport the caller gives it (the cluster's RPC port,
/// `cluster/network.rs`: this layer knows no transport of its own).
/// `log`: the group's Raft log (`initialized`: it ever voted or held an entry; `damaged_until`:
/// see [`heal`]).
#[allow(clippy::too_many_arguments)]
async fn start_group<C: Logged, N: RaftNetworkFactory<C>, SM: RaftStateMachine<C>, LS: RaftLogStorage<C>>(
    me: NodeId,
    spec: ReplicaSpec,
    addresses: &BTreeMap<NodeId, String>,
    network: N,
    sm: SM,
    dir: PathBuf,
    copies: Copies,
    log: LS,
    initialized: bool,
    damaged_until: Option<u64>,
    conversion: Arc<Conversion>,
) -> anyhow::Result<Arc<Replica<C>>>
where
    C::D: Clone,
{
    let ReplicaSpec { key, topic_id, replicas, initialize, snapshot_bytes, budgets, answering, .. } = spec;
    // every group heartbeats each 500 ms: openraft bounds each append (heartbeat or entries) by
    // the heartbeat interval, and at 250 ms a loaded broker's answers came late, every late
    // answer cost a reconnect and the RPCs piled up until a cluster of ~300 groups per broker
    // stopped answering (decision 0041). A follower stands after its lease (the maximum) plus
    // a random timeout: 3-4 s for a partition, 4.5-6 s for a coordinator shard (many, mostly
    // idle), so a follower stalled for a second or two does not depose a live leader when it
    // wakes (openraft 0.9 has no pre-vote); a gone leader is replaced without waiting
    // (`failover`, decision 0028)
    let shard = topic_id.is_nil();
    let (heartbeat, election) = if shard { (500, 1500) } else { (500, 1000) };
    // a partition's snapshots are taken and its log purged by `maintain` (decision 0025) — by
    // bytes, which openraft's policies do not count; a coordinator shard's entries are small
    // key/value records: openraft snapshots it every `snapshot_bytes / 16 KiB` entries (4,096 at
    // the default) and purges its log up to each but the last half interval (decision 0031)
    let shard_entries = (snapshot_bytes / SHARD_ENTRY_BYTES).max(64);
    let (snapshot_policy, keep) = if shard {
        (openraft::SnapshotPolicy::LogsSinceLast(shard_entries), shard_entries / 2)
    } else {
        (openraft::SnapshotPolicy::Never, u64::MAX)
    };
    let config = openraft::Config {
        cluster_name: format!("sluice-{}-{}", key.0, key.1),
        heartbeat_interval: heartbeat,
        election_timeout_min: election,
        election_timeout_max: election * 2,
        snapshot_policy,
        max_in_snapshot_log_to_keep: keep,
        // a snapshot's last chunk is answered once it is installed (the segments scanned)
        install_snapshot_timeout: 60_000,
        snapshot_max_chunk_size: 1 << 20,
        ..Default::default()
    };
    let config = Arc::new(config.validate().map_err(|e| anyhow::anyhow!("raft config: {e}"))?);
    let raft =
        openraft::Raft::<C>::new(me, config, network, log, sm).await.map_err(|e| anyhow::anyhow!("raft: {e}"))?;
    if initialize && !initialized && replicas.first().and_then(|r| NodeId::try_from(*r).ok()) == Some(me) {
        if let Err(e) = raft.initialize(members_of(&replicas, addresses)?).await {
            tracing::info!(topic = key.0.as_str(), partition = key.1, "replica group already initialized: {e}");
        }
    }
    observe(key.clone(), raft.metrics());
    let trailing = Arc::new(Trailing::default());
    if !shard {
        release_trailing(key.clone(), raft.clone(), trailing.clone(), answering, budgets[0].capacity.into());
    }
    let healing = Arc::new(std::sync::atomic::AtomicU64::new(0));
    if let Some(until) = damaged_until {
        heal(&key, &raft, until, healing.clone());
    }
    Ok(Arc::new(Replica {
        key,
        topic_id,
        raft,
        dir,
        sync: Default::default(),
        budgets,
        trailing,
        lost: Default::default(),
        ballots: Default::default(),
        copies,
        healing,
        appends_taken: Default::default(),
        born: Default::default(),
        conversion,
    }))
}

/// How many times (a second apart) a replica tries to repair damaged data before it stops.
const MEND_ATTEMPTS: u32 = 60;

/// A follower more than this many Raft entries behind its leader for at least [`BEHIND_FOR`] is
/// reported (one line) once it is back within them.
const CAUGHT_UP_ENTRIES: u64 = 10;
const BEHIND_FOR: Duration = Duration::from_secs(1);

/// Follow a group's Raft metrics while it runs: one INFO line when its leader changes and when
/// this replica stands for election, and the group's gauges (refreshed at most once a second:
/// the metrics change with every applied entry).
fn observe(key: GroupKey, mut rx: tokio::sync::watch::Receiver<openraft::RaftMetrics<NodeId, BasicNode>>) {
    use crate::metrics::{RAFT_APPLY_LAG, RAFT_LEADER_CHANGES_TOTAL, RAFT_REPLICATION_LAG, RAFT_TERM};
    tokio::spawn(async move {
        let labels = [("group", key.0.clone()), ("partition", key.1.to_string())];
        let (mut leader, mut candidate_term) = (None, 0u64);
        let mut gauges_at: Option<Instant> = None;
        // on the leader: followers found far behind, since when and by how many entries at most
        let mut behind: BTreeMap<NodeId, (Instant, u64)> = BTreeMap::new();
        loop {
            let (id, term, now_leader, state, last_log, applied, lags) = {
                let m = rx.borrow_and_update();
                let applied = m.last_applied.map_or(0, |l| l.index);
                let last_log = m.last_log_index.unwrap_or(0);
                let lags: Option<Vec<(NodeId, u64)>> = m.replication.as_ref().map(|r| {
                    r.iter()
                        .filter(|(n, _)| **n != m.id)
                        .map(|(n, matched)| (*n, last_log.saturating_sub(matched.map_or(0, |l| l.index))))
                        .collect()
                });
                (m.id, m.current_term, m.current_leader, m.state, last_log, applied, lags)
            };
            let followers = lags.as_ref().map(|l| l.iter().map(|(_, lag)| *lag).max().unwrap_or(0));
            // one line when a follower that fell far behind has caught up
            match &lags {
                // forget the followers only when another broker leads: an election this
                // broker wins again (a heartbeat missed under load) does not end the episode
                None if now_leader.is_some_and(|l| l != id) => behind.clear(),
                None => {}
                Some(lags) => {
                    for (n, lag) in lags {
                        if *lag > CAUGHT_UP_ENTRIES {
                            let e = behind.entry(*n).or_insert((Instant::now(), *lag));
                            e.1 = e.1.max(*lag);
                        } else if let Some((since, most)) = behind.remove(n) {
                            // behind only briefly (a burst): not worth a line
                            if since.elapsed() >= BEHIND_FOR {
                                tracing::info!(
                                    group = key.0.as_str(),
                                    partition = key.1,
                                    term,
                                    "replica {n} caught up through the log: it was up to {most} entries behind \
                                     for {:.1} s",
                                    since.elapsed().as_secs_f64()
                                );
                            }
                        }
                    }
                }
            }
            if now_leader != leader {
                let show = |l: Option<NodeId>| l.map_or_else(|| "none".to_string(), |l| l.to_string());
                tracing::info!(
                    group = key.0.as_str(),
                    partition = key.1,
                    term,
                    "raft leader {} -> {}{}",
                    show(leader),
                    show(now_leader),
                    if now_leader == Some(id) { " (this broker)" } else { "" }
                );
                if now_leader.is_some() {
                    ::metrics::counter!(RAFT_LEADER_CHANGES_TOTAL, &labels).increment(1);
                }
                leader = now_leader;
            }
            if state == openraft::ServerState::Candidate && candidate_term != term {
                tracing::info!(
                    group = key.0.as_str(),
                    partition = key.1,
                    term,
                    "raft election: standing in term {term}"
                );
                candidate_term = term;
            }
            if gauges_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                ::metrics::gauge!(RAFT_TERM, &labels).set(term as f64);
                ::metrics::gauge!(RAFT_APPLY_LAG, &labels).set(last_log.saturating_sub(applied) as f64);
                ::metrics::gauge!(RAFT_REPLICATION_LAG, &labels).set(followers.unwrap_or(0) as f64);
                gauges_at = Some(Instant::now());
            }
            // woken by a change, or after a second to refresh the gauges of an idle group
            if let Ok(Err(_)) = tokio::time::timeout(Duration::from_secs(1), rx.changed()).await {
                return; // the group shut down
            }
        }
    });
}

/// A coordinator shard's snapshot as taken: its meta and the live records in bincode.
type KvTaken = (SnapshotMeta<NodeId, BasicNode>, Arc<Vec<u8>>);

/// The state machine of a coordinator shard's group: its key/value log. Applying a record twice
/// (after a crash before `applied.json`) is harmless: the latest value per key is the state.
/// A snapshot is the log's live records, read when openraft asks for one (decision 0031), and
/// kept in `kv-snapshot.bin` to hand over again should the log not be readable.
///
/// A damaged log (a read failed its CRC) is written nothing until it is replaced by another
/// replica's copy (`mend.rs`, by the shard's leadership watcher in `coordinator.rs`): the
/// entries applied meanwhile are kept by its [`KvGate`] and written after the copy. So nothing
/// waits on the other replicas here, not even at start (openraft applies the committed entries
/// before any peer can be asked).
pub struct KvSm {
    dir: PathBuf,
    store: Arc<dyn KvStore>,
    gate: Arc<KvGate>,
    applied: Applied,
    saved_at: Instant,
    /// The newest snapshot handed over (again, should reading the log for the next fail).
    last: Option<KvTaken>,
    built: u64,
}

impl KvSm {
    fn open(dir: &Path, store: Arc<dyn KvStore>) -> anyhow::Result<KvSm> {
        let applied: Applied = match std::fs::read(dir.join(APPLIED_FILE)) {
            Ok(b) => serde_json::from_slice(&b)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Applied::default(),
            Err(e) => return Err(e.into()),
        };
        if let Some(why) = store.suspect_cut() {
            tracing::warn!(
                "coordinator log {}: {why}; acknowledged records may be among them: it is replaced by another \
                 replica's copy",
                shard_name(dir)
            );
        }
        let gate = Arc::new(KvGate::new(store.clone(), applied.last_applied.map_or(0, |l| l.index)));
        let last = match sluice_storage::sidefile::read_framed(&dir.join(KV_SNAPSHOT_FILE), KV_SNAPSHOT_MAGIC) {
            Ok(Some((_, payload))) => bincode::deserialize::<(SnapshotMeta<NodeId, BasicNode>, Vec<u8>)>(&payload)
                .ok()
                .map(|(meta, data)| (meta, Arc::new(data))),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(dir = %dir.display(), "the last coordinator shard snapshot is unreadable: {e}");
                None
            }
        };
        Ok(KvSm { dir: dir.to_path_buf(), store, gate, applied, saved_at: Instant::now(), last, built: 0 })
    }

    /// Record the last applied entry. The records themselves are durable when `apply` returns,
    /// so this only bounds the replay after a restart (re-applying is harmless): rewritten at
    /// most every 500 ms, not once per write — and before a snapshot, so that the applied entry
    /// on disk is never older than a snapshot the log may be purged up to.
    fn save(&mut self) -> Result<(), StorageError<NodeId>> {
        write_kv_applied(&self.dir, &self.applied).map_err(|e| io_err(std::io::Error::other(e)))?;
        self.saved_at = Instant::now();
        Ok(())
    }

    /// A snapshot of everything applied: `applied.json` written, then the live records read
    /// and encoded in bincode, on a blocking thread.
    async fn take_snapshot(&mut self) -> Result<KvTaken, String> {
        let Some(last) = self.applied.last_applied else { return Err("nothing applied yet".into()) };
        let meta = SnapshotMeta {
            last_log_id: Some(last),
            last_membership: self.applied.membership.clone(),
            snapshot_id: format!("{}-{}-{}", last.leader_id.term, last.index, self.built + 1),
        };
        let (dir, applied, store, m) = (self.dir.clone(), self.applied.clone(), self.store.clone(), meta.clone());
        let data = tokio::task::spawn_blocking(move || {
            write_kv_applied(&dir, &applied)?;
            let data = bincode::serialize(&store.live()?).map_err(|e| e.to_string())?;
            keep_kv_snapshot(&dir, &m, &data)?;
            Ok::<Vec<u8>, String>(data)
        })
        .await
        .map_err(|e| e.to_string())??;
        self.saved_at = Instant::now();
        self.built += 1;
        let taken = (meta, Arc::new(data));
        self.last = Some(taken.clone());
        Ok(taken)
    }
}

impl RaftStateMachine<ShardConfig> for KvSm {
    type SnapshotBuilder = KvSnapshot;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>), StorageError<NodeId>> {
        Ok((self.applied.last_applied, self.applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<ShardResult>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<ShardConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<_> = entries.into_iter().collect();
        let mut out = Vec::with_capacity(entries.len());
        tokio::task::block_in_place(|| {
            for e in entries {
                match e.payload {
                    EntryPayload::Normal(ShardCommand::Kv { records, now_ms }) => {
                        self.gate.apply(e.log_id.index, super::mend::to_pairs(records), now_ms).map_err(|why| {
                            io_err(std::io::Error::other(format!(
                                "{}: cannot apply a committed entry, stopping this replica: {why}",
                                shard_name(&self.dir)
                            )))
                        })?
                    }
                    EntryPayload::Blank => self.gate.advance(e.log_id.index),
                    EntryPayload::Membership(m) => {
                        self.applied.membership = StoredMembership::new(Some(e.log_id), m);
                        self.gate.advance(e.log_id.index);
                    }
                }
                self.applied.last_applied = Some(e.log_id);
                out.push(ShardResult::Done);
            }
            if self.saved_at.elapsed() >= APPLIED_EVERY {
                self.save()?;
            }
            Ok::<(), StorageError<NodeId>>(())
        })?;
        Ok(out)
    }

    /// Taken here, on the state machine's task between applies (openraft builds it on another
    /// task while applies go on); should reading the log fail, the previous one is handed over
    /// again (openraft treats a failed build as fatal to the group).
    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        match self.take_snapshot().await {
            Ok(taken) => KvSnapshot { taken: Some(taken), why: String::new() },
            Err(why) => {
                tracing::warn!(dir = %self.dir.display(), "coordinator shard snapshot not taken: {why}");
                KvSnapshot { taken: self.last.clone(), why }
            }
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    /// The leader's live records replace this replica's log, durably, before the snapshot's
    /// last entry is recorded as applied.
    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let data = snapshot.into_inner();
        let records: Vec<KvEntry> = bincode::deserialize(&data).map_err(io_err)?;
        let count = records.len();
        let mut applied = self.applied.clone();
        applied.last_applied = meta.last_log_id;
        applied.membership = meta.last_membership.clone();
        let (dir, gate, done, m, kept) =
            (self.dir.clone(), self.gate.clone(), applied.clone(), meta.clone(), data.clone());
        tokio::task::spawn_blocking(move || {
            // under the gate: a repair from a peer's copy never swaps in an older state after it
            gate.install(last_index(&done), records, || {
                write_kv_applied(&dir, &done)?;
                keep_kv_snapshot(&dir, &m, &kept)
            })
        })
        .await
        .map_err(io_err)?
        .map_err(|e| io_err(std::io::Error::other(e)))?;
        self.applied = applied;
        self.saved_at = Instant::now();
        self.last = Some((meta.clone(), Arc::new(data)));
        let last = meta.last_log_id.map_or(0, |l| l.index);
        tracing::info!(dir = %self.dir.display(), records = count, "installed a coordinator shard snapshot through entry {last}");
        ::metrics::counter!(crate::metrics::RAFT_SNAPSHOTS_INSTALLED_TOTAL, "partition" => shard_name(&self.dir))
            .increment(1);
        Ok(())
    }

    /// A snapshot of the state now (the log is the state; nothing else is kept on disk).
    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<ShardConfig>>, StorageError<NodeId>> {
        if self.applied.last_applied.is_none() {
            return Ok(None);
        }
        let (meta, data) = match self.take_snapshot().await {
            Ok(taken) => taken,
            Err(why) => match self.last.clone() {
                Some(last) => last,
                // a damaged log, no snapshot kept: none to hand over until it is replaced
                None if self.store.damaged() => return Ok(None),
                None => return Err(io_err(std::io::Error::other(why))),
            },
        };
        Ok(Some(Snapshot { meta, snapshot: Box::new(Cursor::new(data.to_vec())) }))
    }
}

/// Write a coordinator shard replica's `applied.json` (atomically). Blocking.
fn write_kv_applied(dir: &Path, applied: &Applied) -> Result<(), String> {
    let bytes = serde_json::to_vec(applied).map_err(|e| e.to_string())?;
    sluice_storage::sidefile::write_atomic(&dir.join(APPLIED_FILE), &bytes).map_err(|e| e.to_string())
}

/// `kv-snapshot.bin`: a coordinator shard replica's newest snapshot (meta and live records),
/// handed over again after a restart when its log cannot be read (openraft needs one at
/// start once the Raft log was purged).
const KV_SNAPSHOT_FILE: &str = "kv-snapshot.bin";
const KV_SNAPSHOT_MAGIC: [u8; 4] = *b"SKVS";

/// Keep snapshot `meta` with `data` in `kv-snapshot.bin` (atomically, CRC-framed). Blocking.
fn keep_kv_snapshot(dir: &Path, meta: &SnapshotMeta<NodeId, BasicNode>, data: &[u8]) -> Result<(), String> {
    let payload = bincode::serialize(&(meta, data)).map_err(|e| e.to_string())?;
    let framed = sluice_storage::sidefile::encode(KV_SNAPSHOT_MAGIC, 1, &payload);
    sluice_storage::sidefile::write_atomic(&dir.join(KV_SNAPSHOT_FILE), &framed).map_err(|e| e.to_string())
}

/// A shard replica's directory name (`__consumer_offsets-3`), for metrics.
fn shard_name(dir: &Path) -> String {
    dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

fn last_index(applied: &Applied) -> u64 {
    applied.last_applied.map_or(0, |l| l.index)
}

/// `applied.json`: the last applied entry and the partition log's end right after it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct Applied {
    pub(super) last_applied: Option<LogId<NodeId>>,
    pub(super) membership: StoredMembership<NodeId, BasicNode>,
    pub(super) log_end: i64,
    /// A replica of a `double` group that applied its conversion (or installed a converted
    /// replica's snapshot) at this entry, and converts when its group next starts
    /// (`convert.rs`, decision 0056).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) convert_at: Option<LogId<NodeId>>,
}

/// The replica's `applied.json` (the default when there is none).
pub(super) fn read_applied(dir: &Path) -> anyhow::Result<Applied> {
    match std::fs::read(dir.join(APPLIED_FILE)) {
        Ok(b) => Ok(serde_json::from_slice(&b)?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Applied::default()),
        Err(e) => Err(e.into()),
    }
}

const APPLIED_FILE: &str = "applied.json";
/// `applied.json` is rewritten at most this often (replay after a crash covers the rest).
const APPLIED_EVERY: Duration = Duration::from_millis(500);

/// The state machine: the partition itself (`partition/apply.rs` applies each command).
pub struct ReplicaSm {
    dir: PathBuf,
    partition: Arc<dyn PartitionLog>,
    applied: Applied,
    /// While `cursor < replay_end`, applied batches are already in the partition log (written
    /// after the last `applied.json`): matched, not written again.
    cursor: i64,
    replay_end: i64,
    saved_at: Instant,
    /// The newest snapshot taken or installed (`snapshots/<id>/`).
    snapshot: Option<StoredSnapshot>,
    /// Shared with the group's maintenance task ([`maintain`]).
    progress: Arc<SmProgress>,
    /// Repairs damaged batches from the other replicas (none in unit tests).
    mender: Option<Arc<Mender>>,
    /// One log per replica (decision 0045 step 3): the group's Raft log is the partition's
    /// log, which holds every entry's batch already when it is applied.
    entries: Option<Arc<dyn EntryIndex>>,
    /// A `double` group's conversion (decision 0056): this replica's part in it, and the
    /// partition's log to switch to Raft terms when a converted replica's snapshot is installed.
    conversion: Option<(Arc<Conversion>, Arc<dyn SegmentLog>)>,
    /// The conversion is applied: `applied.json` keeps its entry, nothing more is applied to
    /// the partition nor saved, and no snapshot is taken, until the group restarts.
    frozen: bool,
}

/// What the state machine tells the task that decides when to snapshot and purge.
#[derive(Default)]
pub struct SmProgress {
    /// Bytes of batches applied since the last snapshot.
    bytes_since_snapshot: std::sync::atomic::AtomicU64,
    /// Still matching batches written before a crash: no snapshot may be taken (the partition
    /// log holds batches past the last applied entry).
    replaying: std::sync::atomic::AtomicBool,
    /// The log start offset of the newest snapshot: once retention or DeleteRecords moves the
    /// partition's past it, the snapshot's links pin deleted segments, and a new one is taken.
    snapshot_log_start: std::sync::atomic::AtomicI64,
}

/// A snapshot on disk: `snapshots/<id>/` holds the linked files and `snapshot.json` this.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct StoredSnapshot {
    meta: SnapshotMeta<NodeId, BasicNode>,
    header: SnapshotHeader,
}

const SNAPSHOTS_DIR: &str = "snapshots";
const SNAPSHOT_FILE: &str = "snapshot.json";
const INCOMING_FILE: &str = "incoming.snapshot";
const INCOMING_DIR: &str = "incoming.d";

impl ReplicaSm {
    fn open(
        dir: &Path,
        partition: Arc<dyn PartitionLog>,
        entries: Option<Arc<dyn EntryIndex>>,
    ) -> anyhow::Result<ReplicaSm> {
        let applied = read_applied(dir)?;
        let (start, end) = partition.offsets();
        // one log per replica: nothing to replay (the batches are the entries)
        let cursor = if entries.is_some() { end } else { applied.log_end.max(start) };
        if cursor > end {
            tracing::error!(
                partition = partition.name(),
                "the partition log ends at {end}, before the last applied offset {cursor}"
            );
        }
        let snapshot = Self::load_snapshot(dir)?;
        let progress = Arc::new(SmProgress::default());
        if let Some(s) = &snapshot {
            progress.snapshot_log_start.store(s.header.log_start, std::sync::atomic::Ordering::Release);
        }
        progress.replaying.store(cursor < end, std::sync::atomic::Ordering::Release);
        // one log per replica: the store's open set the retention floor at its first entry,
        // which the cleaner stops at too
        partition.replays_from(if entries.is_some() { applied.log_end } else { cursor });
        let _ = std::fs::remove_file(dir.join(INCOMING_FILE));
        let _ = std::fs::remove_dir_all(dir.join(INCOMING_DIR));
        Ok(ReplicaSm {
            dir: dir.to_path_buf(),
            partition,
            applied,
            cursor,
            replay_end: end,
            saved_at: Instant::now(),
            snapshot,
            progress,
            mender: None,
            entries,
            conversion: None,
            frozen: false,
        })
    }

    /// A replica of a `double` group: it converts when it applies the conversion.
    fn converting(mut self, conversion: Arc<Conversion>, segments: Arc<dyn SegmentLog>) -> ReplicaSm {
        self.conversion = Some((conversion, segments));
        self
    }

    /// Applied the conversion at `at` (or installed a converted replica's snapshot through it):
    /// recorded durably with the partition log's end here, and nothing more is applied to the
    /// partition; the group is restarted on the partition log (`convert.rs`).
    fn begin_conversion(&mut self, at: LogId<NodeId>, log_end: i64) -> Result<(), StorageError<NodeId>> {
        self.applied.last_applied = Some(at);
        self.applied.log_end = log_end;
        self.applied.convert_at = Some(at);
        // (again, at a converted replica's snapshot installed while frozen)
        self.frozen = false;
        self.save()?;
        self.frozen = true;
        if let Some((c, _)) = &self.conversion {
            c.applied();
        }
        tracing::info!(
            partition = self.partition.name(),
            "the group converts to one log per replica at Raft entry {} (offset {log_end}): restarting it",
            at.index
        );
        Ok(())
    }

    /// One log per replica: apply entry `index`'s command, whose batch the log holds already.
    fn apply_stored(&mut self, cmd: &PartCommand, index: u64, ix: &dyn EntryIndex) -> PartResult {
        let log_start = self.partition.offsets().0;
        match cmd {
            PartCommand::Stored { batch } => {
                let Some(end) = ix.end_of(index) else {
                    return PartResult::Failed(ApplyFailure::Storage(Arc::new(
                        sluice_storage::StorageError::InvalidConfig(format!("Raft entry {index} is not held")),
                    )));
                };
                let delta = sluice_protocol::batch::BatchView::parse_unchecked_crc(batch)
                    .map_or(0, |v| i64::from(v.last_offset_delta()));
                self.progress.bytes_since_snapshot.fetch_add(batch.len() as u64, std::sync::atomic::Ordering::Relaxed);
                PartResult::Appended { first: end - 1 - delta, last: end - 1, log_start }
            }
            PartCommand::Answered { first, last } => PartResult::Appended { first: *first, last: *last, log_start },
            // (a second conversion proposed after the first, carried over: nothing to do)
            PartCommand::Convert => PartResult::Done,
            PartCommand::DeleteRecords { offset } => {
                // everything up to this entry is committed
                if let Some(end) = ix.end_of(index) {
                    self.partition.publish_committed_to(end);
                }
                match self.partition.delete_records_committed(*offset) {
                    Ok(start) => PartResult::LogStart(start),
                    Err(e) => PartResult::Failed(ApplyFailure::Storage(Arc::new(e))),
                }
            }
            other => PartResult::Failed(ApplyFailure::Storage(Arc::new(sluice_storage::StorageError::InvalidConfig(
                format!("{other:?} is not a write of one log per replica"),
            )))),
        }
    }

    fn with_mender(mut self, mender: Arc<Mender>) -> ReplicaSm {
        self.mender = Some(mender);
        self
    }

    /// Apply one committed entry's command, never skipping it: a replica that skipped one
    /// would differ from the others for good. `None`: a read found damaged data (before or
    /// during this apply, which then refused to write anything): repair it
    /// ([`ReplicaSm::mend`]) and apply the same command again. A storage failure no repair can
    /// undo (a failed write or fsync) stops the group on this broker; the others go on.
    fn apply_entry(&mut self, cmd: &mut PartCommand) -> Result<Option<(PartResult, i64)>, StorageError<NodeId>> {
        let failure = match self.apply_one(cmd) {
            Ok((PartResult::Failed(f), _)) => f.to_string(),
            Ok(done) => return Ok(Some(done)),
            Err(e) => e.to_string(),
        };
        if self.partition.is_damaged() {
            return Ok(None);
        }
        Err(io_err(std::io::Error::other(format!(
            "{}: cannot apply a committed entry, stopping this replica: {failure}",
            self.partition.name()
        ))))
    }

    /// Repair the partition's damaged data from the other replicas, trying every second until
    /// a copy fits or [`MEND_ATTEMPTS`] failed (then the group stops here). Nothing is applied
    /// meanwhile; this replica's Raft log still takes entries, and a leader that cannot repair
    /// hands its leadership over (`maintain`).
    async fn mend(&self) -> Result<(), StorageError<NodeId>> {
        let name = self.partition.name();
        let Some(mender) = self.mender.clone() else {
            return Err(io_err(std::io::Error::other(format!("{name}: damaged data, no peers to repair it"))));
        };
        mender
            .mend_patiently(&name, MEND_ATTEMPTS)
            .await
            .map_err(|last| io_err(std::io::Error::other(format!("{name}: stopping this replica: {last}"))))
    }

    /// The newest complete snapshot under `dir` (others, and any left half made, are removed).
    fn load_snapshot(dir: &Path) -> anyhow::Result<Option<StoredSnapshot>> {
        let snaps = dir.join(SNAPSHOTS_DIR);
        let Ok(list) = std::fs::read_dir(&snaps) else { return Ok(None) };
        let mut found: Vec<(StoredSnapshot, PathBuf)> = Vec::new();
        let mut junk = Vec::new();
        for e in list {
            let path = e?.path();
            match std::fs::read(path.join(SNAPSHOT_FILE)).ok().and_then(|b| serde_json::from_slice(&b).ok()) {
                Some(s) => found.push((s, path)),
                None => junk.push(path),
            }
        }
        found.sort_by_key(|(s, _)| s.meta.last_log_id);
        let newest = found.pop();
        for p in junk.into_iter().chain(found.into_iter().map(|(_, p)| p)) {
            let _ = std::fs::remove_dir_all(p);
        }
        Ok(newest.map(|(s, _)| s))
    }

    fn snapshot_dir(&self, id: &str) -> PathBuf {
        self.dir.join(SNAPSHOTS_DIR).join(id)
    }

    /// Record the last applied entry — after fsyncing the partition log, so `applied.json`
    /// never claims data a crash could still take away.
    fn save(&mut self) -> Result<(), StorageError<NodeId>> {
        if self.frozen {
            return Ok(()); // `applied.json` keeps the conversion's entry
        }
        save_applied(&self.dir, &*self.partition, &self.applied).map_err(|e| io_err(std::io::Error::other(e)))?;
        self.saved_at = Instant::now();
        Ok(())
    }

    /// A new group's birth (decision 0052): its first entry, the membership, applied at `born`
    /// and held by a snapshot of the (empty) partition, for a replica that will need it.
    async fn seed(&mut self, born: LogId<NodeId>, membership: Membership<NodeId, BasicNode>) -> Result<(), String> {
        self.applied.last_applied = Some(born);
        self.applied.membership = StoredMembership::new(Some(born), membership);
        self.take_snapshot().await.map(|_| ())
    }

    /// Take a snapshot of everything applied: fsync the partition and record it as applied,
    /// hard-link its files into `snapshots/<id>/` (on a blocking thread), then drop the older
    /// snapshot. The partition log holds exactly the applied entries' batches here (no apply
    /// runs meanwhile: this runs on the state machine's task), so the snapshot is the state at
    /// its last log id.
    async fn take_snapshot(&mut self) -> Result<StoredSnapshot, String> {
        if self.cursor < self.replay_end {
            return Err("still replaying entries written before a restart".into());
        }
        if self.frozen {
            return Err("converting to one log per replica".into());
        }
        let (dir, partition, applied) = (self.dir.clone(), self.partition.clone(), self.applied.clone());
        // one log per replica: the log holds entries past the last applied one, left out
        let single = self.entries.is_some();
        let upto = single.then_some(applied.log_end);
        let stored = tokio::task::spawn_blocking(move || {
            save_applied(&dir, &*partition, &applied)?;
            link_snapshot(&dir, &*partition, &applied, upto, single)
        })
        .await
        .map_err(|e| e.to_string())??;
        self.saved_at = Instant::now();
        self.progress.snapshot_log_start.store(stored.header.log_start, std::sync::atomic::Ordering::Release);
        self.progress.bytes_since_snapshot.store(0, std::sync::atomic::Ordering::Relaxed);
        if let Some(old) = self.snapshot.replace(stored.clone()) {
            let _ = std::fs::remove_dir_all(self.snapshot_dir(&old.meta.snapshot_id));
        }
        Ok(stored)
    }

    fn snapshot_data(&self, s: &StoredSnapshot) -> Result<Snapshot<PartConfig>, StorageError<NodeId>> {
        let stream = FilesStream::new(&self.snapshot_dir(&s.meta.snapshot_id), &s.header).map_err(io_err)?;
        Ok(Snapshot { meta: s.meta.clone(), snapshot: Box::new(SnapshotData::Out(stream)) })
    }

    /// Apply one committed command — unless it is being replayed (the partition log already
    /// holds what it wrote, after the last `applied.json`): then the stored batch at the cursor
    /// is matched and passed, and a command not found there was refused (or a duplicate) the
    /// first time.
    fn apply_one(&mut self, cmd: &mut PartCommand) -> Result<(PartResult, i64), sluice_storage::StorageError> {
        // writes no batch: applied again when replayed (moving the log start is idempotent)
        if self.cursor >= self.replay_end || matches!(cmd, PartCommand::DeleteRecords { .. }) {
            if let PartCommand::Produce { batch, .. } = cmd.inner() {
                self.progress.bytes_since_snapshot.fetch_add(batch.len() as u64, std::sync::atomic::Ordering::Relaxed);
            }
            return Ok(self.partition.apply(cmd));
        }
        let out = match self.partition.stored(self.cursor, cmd)? {
            Some((result, next)) => {
                self.cursor = next;
                (result, 0)
            }
            None => (PartResult::default(), 0),
        };
        if self.cursor >= self.replay_end {
            self.progress.replaying.store(false, std::sync::atomic::Ordering::Release);
        }
        Ok(out)
    }
}

/// Fsync the partition, then record `applied` in `applied.json` (never claiming data a crash
/// could still take away).
pub(super) fn save_applied(dir: &Path, partition: &dyn PartitionLog, applied: &Applied) -> Result<(), String> {
    partition.flush().map_err(|e| e.to_string())?;
    let bytes = serde_json::to_vec(applied).map_err(|e| e.to_string())?;
    sluice_storage::sidefile::write_atomic(&dir.join(APPLIED_FILE), &bytes).map_err(|e| e.to_string())?;
    // the log cleaner stops where a restart replays from; one log per replica, also at the
    // retention floor the store's purge moves (no entry not purged is rewritten)
    partition.replays_from(applied.log_end);
    Ok(())
}

/// Hard-link the partition's files into `snapshots/<id>/` (made under a temporary name, its
/// `snapshot.json` last) as the snapshot of `applied`, which is durable already.
pub(super) fn link_snapshot(
    dir: &Path,
    partition: &dyn PartitionLog,
    applied: &Applied,
    upto: Option<i64>,
    single_log: bool,
) -> Result<StoredSnapshot, String> {
    let last = applied.last_applied;
    let id = match last {
        Some(l) => format!("{}-{}-{}", l.leader_id.term, l.index, crate::clock::now_ms()),
        None => format!("0-0-{}", crate::clock::now_ms()),
    };
    let snaps = dir.join(SNAPSHOTS_DIR);
    std::fs::create_dir_all(&snaps).map_err(|e| e.to_string())?;
    let tmp = snaps.join(format!("{id}.tmp"));
    let linked = partition.link_snapshot(&tmp, upto).map_err(|e| e.to_string())?;
    let stored = StoredSnapshot {
        meta: SnapshotMeta { last_log_id: last, last_membership: applied.membership.clone(), snapshot_id: id },
        header: SnapshotHeader {
            log_start: linked.log_start,
            log_end: linked.log_end,
            files: linked.files,
            single_log,
        },
    };
    let json = serde_json::to_vec(&stored).map_err(|e| e.to_string())?;
    sluice_storage::sidefile::write_atomic(&tmp.join(SNAPSHOT_FILE), &json).map_err(|e| e.to_string())?;
    std::fs::rename(&tmp, snaps.join(&stored.meta.snapshot_id)).map_err(|e| e.to_string())?;
    Ok(stored)
}

/// A coordinator shard's snapshot, taken when openraft asks for a builder ([`KvSm`]).
pub struct KvSnapshot {
    taken: Option<KvTaken>,
    why: String,
}

impl RaftSnapshotBuilder<ShardConfig> for KvSnapshot {
    async fn build_snapshot(&mut self) -> Result<Snapshot<ShardConfig>, StorageError<NodeId>> {
        match &self.taken {
            Some((meta, data)) => Ok(Snapshot { meta: meta.clone(), snapshot: Box::new(Cursor::new(data.to_vec())) }),
            None => Err(io_err(std::io::Error::other(format!("no snapshot: {}", self.why)))),
        }
    }
}

/// A partition's snapshot, taken when openraft asks for a builder (on the state machine's task,
/// between applies); building only hands it over. Should taking it fail, the previous snapshot
/// is handed over again (openraft treats a failed build as fatal to the group).
pub struct SegmentsSnapshot {
    taken: Option<Snapshot<PartConfig>>,
    why: String,
}

impl RaftSnapshotBuilder<PartConfig> for SegmentsSnapshot {
    async fn build_snapshot(&mut self) -> Result<Snapshot<PartConfig>, StorageError<NodeId>> {
        self.taken.take().ok_or_else(|| io_err(std::io::Error::other(self.why.clone())))
    }
}

impl RaftStateMachine<PartConfig> for ReplicaSm {
    type SnapshotBuilder = SegmentsSnapshot;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>), StorageError<NodeId>> {
        Ok((self.applied.last_applied, self.applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<PartResult>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<PartConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut entries: Vec<_> = entries.into_iter().collect();
        if crate::failpoints::armed(crate::failpoints::Failpoint::ReplicaDelayNewTerm)
            && entries.iter().any(|e| matches!(e.payload, EntryPayload::Blank) && e.log_id.leader_id.term > 1)
        {
            tokio::time::sleep(Duration::from_secs(3)).await;
        }
        let entries_ix = self.entries.clone();
        let mut out = Vec::with_capacity(entries.len());
        let mut end = 0i64;
        let mut next = 0usize;
        loop {
            // damaged data is repaired (awaiting the other replicas) before anything more is
            // applied; the entry a read's damage refused is applied again after it
            if self.partition.is_damaged() {
                self.mend().await?;
            }
            let refused = tokio::task::block_in_place(|| {
                while let Some(e) = entries.get_mut(next) {
                    let r = match &mut e.payload {
                        EntryPayload::Blank => PartResult::Done,
                        EntryPayload::Normal(c) => match entries_ix.clone() {
                            Some(ix) => self.apply_stored(c, e.log_id.index, &*ix),
                            // converting: applied again from the partition log once converted
                            None if self.frozen => PartResult::Done,
                            None if matches!(c, PartCommand::Convert) => {
                                let log_end = if self.cursor < self.replay_end {
                                    self.cursor
                                } else {
                                    self.partition.offsets().1.max(self.cursor)
                                };
                                self.begin_conversion(e.log_id, log_end)?;
                                PartResult::Done
                            }
                            None => match self.apply_entry(c)? {
                                Some((r, written_end)) => {
                                    end = end.max(written_end);
                                    r
                                }
                                None => return Ok(true),
                            },
                        },
                        EntryPayload::Membership(m) => {
                            self.applied.membership = StoredMembership::new(Some(e.log_id), m.clone());
                            PartResult::Done
                        }
                    };
                    self.applied.last_applied = Some(e.log_id);
                    out.push(r);
                    next += 1;
                }
                if let Some(ix) = &entries_ix {
                    // one log per replica: the log holds the entries past the last applied one
                    // too; the committed ones end where the last applied entry's batch does
                    if let Some(end) = self.applied.last_applied.and_then(|l| ix.end_of(l.index)) {
                        self.partition.publish_committed_to(end);
                        self.applied.log_end = end;
                    }
                } else {
                    // committed = on a majority's fsynced Raft logs: visible (and acknowledged)
                    // now; this copy is fsynced by the next `save`, and replayed from the Raft
                    // log if lost
                    if end > 0 {
                        self.partition.publish_committed();
                    }
                    self.applied.log_end = self.partition.offsets().1.max(self.cursor);
                    if self.cursor < self.replay_end {
                        // still replaying: record only what is known to be matched
                        self.applied.log_end = self.cursor;
                    }
                }
                if self.saved_at.elapsed() >= APPLIED_EVERY {
                    self.save()?;
                }
                Ok::<bool, StorageError<NodeId>>(false)
            })?;
            if !refused {
                return Ok(out);
            }
        }
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        match self.take_snapshot().await {
            Ok(s) => {
                ::metrics::counter!(crate::metrics::RAFT_SNAPSHOTS_TOTAL, "partition" => self.partition.name())
                    .increment(1);
                SegmentsSnapshot { taken: self.snapshot_data(&s).ok(), why: String::new() }
            }
            Err(why) => {
                tracing::warn!(partition = self.partition.name(), "no new snapshot: {why}");
                let previous = self.snapshot.clone().and_then(|s| self.snapshot_data(&s).ok());
                SegmentsSnapshot { taken: previous, why }
            }
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapshotData>, StorageError<NodeId>> {
        let f = tokio::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .write(true)
            .truncate(true)
            .open(self.dir.join(INCOMING_FILE))
            .await
            .map_err(io_err)?;
        Ok(Box::new(SnapshotData::In(f)))
    }

    /// Replace the partition with the leader's snapshot: unpack its files, swap them in for
    /// the partition's (`sluice_storage::snapshot::swap_in`), record the snapshot's last entry
    /// as applied, and keep the installed files as this replica's own snapshot.
    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<SnapshotData>,
    ) -> Result<(), StorageError<NodeId>> {
        use tokio::io::AsyncWriteExt as _;
        let mut data = *snapshot;
        data.flush().await.map_err(io_err)?;
        if let SnapshotData::In(f) = &data {
            f.sync_all().await.map_err(io_err)?;
        }
        drop(data);
        let started = Instant::now();
        let (dir, partition, meta) = (self.dir.clone(), self.partition.clone(), meta.clone());
        let frozen = self.frozen;
        let ix = self.entries.clone();
        let segments = self.conversion.as_ref().map(|(_, s)| s.clone());
        let installed = tokio::task::spawn_blocking(move || {
            let staged = dir.join(INCOMING_DIR);
            let header = unpack(&dir.join(INCOMING_FILE), &staged).map_err(|e| e.to_string())?;
            // a `double` group's replica sent a converted replica's snapshot converts at its
            // last entry (decision 0056): its batches carry Raft terms
            let converts = match (&segments, ix.is_none() && header.single_log) {
                (Some(segments), true) => {
                    segments.use_terms().map_err(|e| e.to_string())?;
                    true
                }
                _ => false,
            };
            if frozen && !converts {
                // (converting, only a converted replica's snapshot can be past the conversion)
                return Err("a snapshot of a Raft log of its own, sent while converting".to_string());
            }
            let (start, end) = partition.install_snapshot(&staged, header.log_start).map_err(|e| e.to_string())?;
            if let Some(ix) = &ix {
                // the next entry is the batch at the snapshot's end
                ix.installed(meta.last_log_id, end).map_err(|e| e.to_string())?;
            }
            // (converting: marked with the install, so a crash before the group restarts still
            // converts at the next start)
            let applied = Applied {
                last_applied: meta.last_log_id,
                membership: meta.last_membership.clone(),
                log_end: end,
                convert_at: if converts { meta.last_log_id } else { None },
            };
            save_applied(&dir, &*partition, &applied)?;
            let _ = std::fs::remove_file(dir.join(INCOMING_FILE));
            Ok::<_, String>((applied, start, header.bytes(), converts))
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r)
        .map_err(|e| io_err(std::io::Error::other(e)))?;
        let (applied, start, bytes, converts) = installed;
        let (end, through) = (applied.log_end, applied.last_applied.map_or(0, |l| l.index));
        self.applied = applied;
        self.cursor = end;
        self.replay_end = end;
        self.saved_at = Instant::now();
        self.progress.replaying.store(false, std::sync::atomic::Ordering::Release);
        ::metrics::counter!(crate::metrics::RAFT_SNAPSHOTS_INSTALLED_TOTAL, "partition" => self.partition.name())
            .increment(1);
        tracing::info!(
            partition = self.partition.name(),
            "caught up from a snapshot of segments: offsets {start}..{end}, {bytes} bytes in {:?}, through Raft entry {through}",
            started.elapsed(),
        );
        if converts {
            if let Some(last) = self.applied.last_applied {
                return self.begin_conversion(last, end);
            }
        }
        if let Err(why) = self.take_snapshot().await {
            tracing::warn!(partition = self.partition.name(), "installed snapshot not kept: {why}");
        }
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<PartConfig>>, StorageError<NodeId>> {
        match self.snapshot.clone() {
            Some(s) => self.snapshot_data(&s).map(Some),
            None => Ok(None),
        }
    }
}

impl Drop for KvSm {
    fn drop(&mut self) {
        let _ = self.save();
    }
}

impl Drop for ReplicaSm {
    fn drop(&mut self) {
        let _ = self.save();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::Partition;
    use crate::replication::types::{KvEntry, Verdict};
    use openraft::CommittedLeaderId;
    use sluice_protocol::batch::{BatchBuilder, NewRecord};
    use sluice_storage::{Log, LogConfig};

    /// Decision 0055: a vote adopted from a refusal holds a replica back only while the
    /// candidate it names has not asked with a shorter log than the replica's; a granted vote
    /// always does.
    #[test]
    fn a_vote_holds_a_replica_back_unless_its_candidate_has_the_shorter_log() {
        let b = Ballots::default();
        let log = |term, index| Some(LogId::new(CommittedLeaderId::new(term, 0), index));
        let answer =
            |term, node, granted, mine| Ok(openraft::raft::VoteResponse::new(Vote::new(term, node), mine, granted));
        assert!(b.holds_back(2, 22), "nothing seen of 2: it may be about to win");
        // 2 asked with a shorter log and was refused: a vote for it (adopted) holds nothing back
        b.answered(2, log(20, 90), &answer(22, 2, false, log(20, 100)));
        assert!(!b.holds_back(2, 22));
        assert!(b.holds_back(3, 22), "another candidate");
        // 2 asks again with the same log as this replica's, and is granted
        b.answered(2, log(20, 100), &answer(23, 2, true, log(20, 100)));
        assert!(b.holds_back(2, 23));
        // a longer log refused for its lower vote: not shorter, so still held back
        b.answered(2, log(20, 120), &answer(24, 1, false, log(20, 100)));
        assert!(b.holds_back(2, 24));
    }

    /// The trail of answered writes (decision 0054): bytes behind an index come from the
    /// running totals, answers taken out of order included; a release returns the budget bytes
    /// of the writes up to it and keeps one budget of record behind the newest; an index older
    /// than the record is further behind than it can say.
    #[tokio::test]
    async fn the_trail_counts_bytes_behind_and_returns_them_when_followers_hold_them() {
        let budget = Budget::new(100_000);
        let far = tokio::time::Instant::now() + Duration::from_secs(5);
        let trail = Trailing::default();
        for (index, bytes) in [(3, 100), (5, 200), (4, 50), (8, 300)] {
            trail.hold(index, budget.take(bytes, far, Duration::from_secs(5)).await.unwrap());
        }
        assert_eq!(budget.in_use(), 650);
        assert_eq!(trail.behind(8), Some(0));
        assert_eq!(trail.behind(7), Some(300));
        assert_eq!(trail.behind(4), Some(500));
        assert_eq!(trail.behind(2), Some(650));
        trail.release(5, 1000);
        assert_eq!(budget.in_use(), 300, "writes 3, 4 and 5 returned their bytes");
        assert_eq!(trail.behind(4), Some(500), "and stay on record");
        trail.release(8, 250);
        assert_eq!(budget.in_use(), 0);
        assert_eq!(trail.behind(5), Some(300), "the record keeps one budget behind the newest");
        assert_eq!(trail.behind(4), None, "older than the record");
        trail.hold(9, budget.take(10, far, Duration::from_secs(5)).await.unwrap());
        trail.clear();
        assert_eq!(budget.in_use(), 0, "a replica that stops leading holds nothing");
        // however small the writes, the record keeps at most `TRAIL_RECORD` of them
        for index in 1..=(TRAIL_RECORD as u64 + 100) {
            trail.hold(index, budget.take(1, far, Duration::from_secs(5)).await.unwrap());
        }
        trail.release(u64::MAX, 1 << 20);
        assert_eq!(budget.in_use(), 0);
        assert_eq!(trail.behind(50), None, "older than the record");
        assert_eq!(trail.behind(200), Some(TRAIL_RECORD as u64 + 100 - 200));
    }

    /// A follower is live while it moved or answered within `TRAIL_LIVE`: one whose appends
    /// time out (stopped most of the time, or starting on a loaded machine) but that answers
    /// heartbeats and some appends keeps pacing producers. CI's cluster run failed when only a
    /// move counted: the slow follower had not taken its first entry 2 s after its leader was
    /// elected, was let go, and ended 426 MB behind.
    #[test]
    fn a_follower_that_answers_is_live_though_it_did_not_move() {
        let now = Instant::now();
        let ago = |ms: u64| now.checked_sub(Duration::from_millis(ms)).unwrap_or(now);
        assert!(is_live(now, ago(100), None), "moved just now");
        assert!(is_live(now, ago(3_000), Some(ago(500))), "answered within TRAIL_LIVE, though it did not move");
        assert!(!is_live(now, ago(3_000), Some(ago(2_500))), "neither moved nor answered within TRAIL_LIVE");
        assert!(!is_live(now, ago(3_000), None), "never answered and not moved");
    }

    /// Commands keep the JSON form of the Raft log files of earlier versions (base64 bytes, a
    /// bare string or null for an optional value: converted on open, decision 0023) and travel
    /// as raw bytes in bincode (RPC frames, log records); both round-trip.
    #[test]
    fn commands_round_trip_as_json_and_as_bincode() {
        let cmds = vec![
            PartCommand::Produce { batch: vec![0, 1, 2, 255], now_ms: 7, verified: true, verified_from: Some(3) },
            PartCommand::Marker { producer_id: 4, epoch: 2, coordinator_epoch: 1, commit: false, now_ms: 9 },
        ];
        let json = serde_json::to_string(&cmds).unwrap();
        assert!(json.contains(r#""batch":"AAEC/w==""#), "{json}");
        assert_eq!(serde_json::from_str::<Vec<PartCommand>>(&json).unwrap(), cmds);
        let kv = ShardCommand::Kv {
            records: vec![
                KvEntry { key: b"k".to_vec(), value: Some(vec![9; 3]) },
                KvEntry { key: vec![], value: None },
            ],
            now_ms: 8,
        };
        let kv_json = serde_json::to_string(&kv).unwrap();
        // the form shard logs were written in while partitions and shards shared one command type
        assert_eq!(kv_json, r#"{"Kv":{"records":[{"key":"aw==","value":"CQkJ"},{"key":"","value":null}],"now_ms":8}}"#);
        assert_eq!(serde_json::from_str::<ShardCommand>(&kv_json).unwrap(), kv);
        assert_eq!(bincode::deserialize::<ShardCommand>(&bincode::serialize(&kv).unwrap()).unwrap(), kv);
        // and neither kind decodes as the other
        assert!(serde_json::from_str::<PartCommand>(&kv_json).is_err());
        for c in &cmds {
            assert!(serde_json::from_str::<ShardCommand>(&serde_json::to_string(c).unwrap()).is_err(), "{c:?}");
        }
        let bin = bincode::serialize(&cmds).unwrap();
        assert!(bin.windows(4).any(|w| w == [0, 1, 2, 255]), "bytes travel raw");
        assert_eq!(bincode::deserialize::<Vec<PartCommand>>(&bin).unwrap(), cmds);
        // a truncated frame is an error, not a panic
        assert!(bincode::deserialize::<Vec<PartCommand>>(&bin[..bin.len() - 3]).is_err());
        // an entry written before `verified_from` existed still reads (as None)
        let old = r#"{"Produce":{"batch":"AAEC/w==","now_ms":7,"verified":true}}"#;
        let want = PartCommand::Produce { batch: vec![0, 1, 2, 255], now_ms: 7, verified: true, verified_from: None };
        assert_eq!(serde_json::from_str::<PartCommand>(old).unwrap(), want);
        // a command with its leader's verdict (decision 0045) is a new variant: the commands
        // above encode as they did before it existed, and it round-trips in both forms
        let before: &[u8] = &[0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 255];
        assert!(bin[8..].starts_with(before), "{bin:?}");
        let judged = vec![
            PartCommand::Predicted { cmd: Box::new(cmds[0].clone()), verdict: Verdict::At { first: 3, last: 5 } },
            PartCommand::Predicted {
                cmd: Box::new(cmds[1].clone()),
                verdict: Verdict::Refused(crate::partition::producer_state::Refusal::CoordinatorFenced {
                    current: 2,
                    got: 1,
                }),
            },
        ];
        let bin = bincode::serialize(&judged).unwrap();
        assert_eq!(bincode::deserialize::<Vec<PartCommand>>(&bin).unwrap(), judged);
        let json = serde_json::to_string(&judged).unwrap();
        assert_eq!(serde_json::from_str::<Vec<PartCommand>>(&json).unwrap(), judged);
        assert_eq!(judged[0].inner(), &cmds[0]);
    }

    fn open_partition(dir: &Path) -> Arc<Partition> {
        let log = Log::open(dir, LogConfig { retention_ms: -1, ..LogConfig::default() }).unwrap();
        Arc::new(Partition::new("t".into(), 0, log, Arc::new(tokio::sync::Notify::new())))
    }

    fn produce(pid: i64, seq: i32, n: usize, tag: u8) -> PartCommand {
        let recs: Vec<NewRecord> = (0..n)
            .map(|i| NewRecord {
                timestamp: 1000 + i as i64,
                value: Some(bytes::Bytes::from(vec![tag; 20])),
                ..Default::default()
            })
            .collect();
        let batch = BatchBuilder { producer_id: pid, producer_epoch: 0, base_sequence: seq, ..Default::default() }
            .build(&recs)
            .unwrap()
            .to_vec();
        PartCommand::Produce { batch, now_ms: 5, verified: false, verified_from: None }
    }

    fn entry(index: u64, cmd: PartCommand) -> Entry<PartConfig> {
        Entry { log_id: LogId::new(CommittedLeaderId::new(1, 1), index), payload: EntryPayload::Normal(cmd) }
    }

    fn commands() -> Vec<PartCommand> {
        vec![
            produce(7, 0, 3, 1),
            produce(-1, -1, 2, 2),
            produce(7, 3, 1, 3),
            produce(7, 3, 1, 3), // a retry of the one before: deduplicated
            produce(7, 9, 1, 4), // out of order: refused
            PartCommand::Marker { producer_id: 9, epoch: 0, coordinator_epoch: 0, commit: false, now_ms: 5 },
            produce(-1, -1, 1, 5),
        ]
    }

    /// A replica that crashed after writing batches but before recording them as applied
    /// re-applies those entries on restart without writing anything twice, answers the same
    /// offsets, and then carries on at the end of the log.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn entries_applied_again_after_a_crash_are_not_written_twice() {
        let data = tempfile::tempdir().unwrap();
        let raft = tempfile::tempdir().unwrap();
        let cmds = commands();
        // the first run applies everything; `applied.json` is then put back to after entry 2,
        // as if the process died before rewriting it
        let first: Vec<PartResult> = {
            let mut sm = ReplicaSm::open(raft.path(), open_partition(data.path()), None).unwrap();
            let out1 =
                sm.apply(cmds[..2].iter().cloned().enumerate().map(|(i, c)| entry(i as u64 + 1, c))).await.unwrap();
            sm.save().unwrap();
            let stale = std::fs::read(raft.path().join(APPLIED_FILE)).unwrap();
            let out2 =
                sm.apply(cmds[2..].iter().cloned().enumerate().map(|(i, c)| entry(i as u64 + 3, c))).await.unwrap();
            drop(sm);
            std::fs::write(raft.path().join(APPLIED_FILE), stale).unwrap();
            out1.into_iter().chain(out2).collect()
        };
        assert!(matches!(first[3], PartResult::Appended { first: 5, last: 5, .. }), "{:?}", first[3]);
        assert!(matches!(first[4], PartResult::Refused(_) | PartResult::Failed(_)), "{:?}", first[4]);
        let end_before = open_partition(data.path()).log().log_end_offset();
        assert_eq!(end_before, 3 + 2 + 1 + 1 + 1);

        let partition = open_partition(data.path());
        let mut sm = ReplicaSm::open(raft.path(), partition.clone() as Arc<dyn PartitionLog>, None).unwrap();
        assert_eq!(sm.applied_state().await.unwrap().0.map(|l| l.index), Some(2));
        let again = sm.apply(cmds[2..].iter().cloned().enumerate().map(|(i, c)| entry(i as u64 + 3, c))).await.unwrap();
        assert_eq!(partition.log().log_end_offset(), end_before, "nothing written twice");
        for (a, b) in first[2..].iter().zip(&again) {
            if let (PartResult::Appended { first: x, .. }, PartResult::Appended { first: y, .. }) = (a, b) {
                assert_eq!(x, y);
            }
        }
        // past the replay: a new entry is written at the end
        let more = sm.apply([entry(10, produce(7, 4, 2, 6))]).await.unwrap();
        assert!(
            matches!(more[0], PartResult::Appended { first, last, .. } if first == end_before && last == end_before + 1)
        );
        assert_eq!(partition.log().log_end_offset(), end_before + 2);
    }

    fn keyed_produce(key: u8, round: i64) -> PartCommand {
        let recs = [NewRecord {
            timestamp: 1000 + round * 10,
            key: Some(bytes::Bytes::from(vec![key])),
            value: Some(bytes::Bytes::from(vec![key; 40])),
            ..Default::default()
        }];
        let batch = BatchBuilder::default().build(&recs).unwrap().to_vec();
        PartCommand::Produce { batch, now_ms: 5, verified: false, verified_from: None }
    }

    /// Issue 20: the log cleaner never rewrites what a restart replays. A compacted replica's
    /// cleaner stops at the log end `applied.json` records, so entries applied after it are
    /// matched against their own stored batches after a crash (with the limit lifted, the pass
    /// removes superseded batches there and the replay fails to match them).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_cleaner_leaves_what_a_restart_replays_alone() {
        let data = tempfile::tempdir().unwrap();
        let raft = tempfile::tempdir().unwrap();
        let config = LogConfig {
            retention_ms: -1,
            segment_ms: 5,
            cleanup_compact: true,
            cleanup_delete: false,
            ..LogConfig::default()
        };
        let open = |dir: &Path| {
            let log = Log::open(dir, config.clone()).unwrap();
            let p = Arc::new(Partition::new("t".into(), 0, log, Arc::new(tokio::sync::Notify::new())));
            p.set_clean_limit(0);
            p
        };
        let cmds: Vec<PartCommand> = (0..24).map(|i| keyed_produce((i % 3) as u8, i)).collect();
        let partition = open(data.path());
        let first: Vec<PartResult> = {
            let mut sm = ReplicaSm::open(raft.path(), partition.clone() as Arc<dyn PartitionLog>, None).unwrap();
            let out1 =
                sm.apply(cmds[..8].iter().cloned().enumerate().map(|(i, c)| entry(i as u64 + 1, c))).await.unwrap();
            sm.save().unwrap();
            let stale = std::fs::read(raft.path().join(APPLIED_FILE)).unwrap();
            let out2 =
                sm.apply(cmds[8..].iter().cloned().enumerate().map(|(i, c)| entry(i as u64 + 9, c))).await.unwrap();
            partition.publish_committed();
            if std::env::var("TEST_LIFT_CLEAN_LIMIT").is_ok() {
                partition.set_clean_limit(i64::MAX);
            }
            let stats = partition.clean(10_000, 1 << 16, None).unwrap().expect("a pass");
            assert!(stats.records_kept < stats.records_read, "{stats:?}");
            drop(sm);
            // a crash before applied.json was rewritten: it still says entry 8
            std::fs::write(raft.path().join(APPLIED_FILE), stale).unwrap();
            out1.into_iter().chain(out2).collect()
        };
        drop(partition);
        let partition = open(data.path());
        let end_before = partition.log().log_end_offset();
        let mut sm = ReplicaSm::open(raft.path(), partition.clone() as Arc<dyn PartitionLog>, None).unwrap();
        let again = sm.apply(cmds[8..].iter().cloned().enumerate().map(|(i, c)| entry(i as u64 + 9, c))).await.unwrap();
        assert_eq!(partition.log().log_end_offset(), end_before, "nothing written twice");
        for (a, b) in first[8..].iter().zip(&again) {
            assert!(
                matches!((a, b), (PartResult::Appended { first: x, .. }, PartResult::Appended { first: y, .. }) if x == y),
                "replayed {b:?}, first applied {a:?}"
            );
        }
    }
}
