//! What the group and transaction coordinators share: their shards are the partitions of an
//! internal key/value log (`__consumer_offsets`, `__transaction_state`), and in a cluster each
//! shard is replicated by a Raft group whose leader coordinates the shard. This module runs that
//! part once for both:
//!
//! - [`replicate`] starts this broker's replica of every shard it is assigned (the assignment
//!   spreads `min(replication factor, voters)` replicas over the voters in id order), applying
//!   each committed entry through [`ShardOwner::apply`];
//! - [`watch_leadership`] follows each replica's Raft metrics and tells the owner when to load a
//!   shard (this broker leads it and has applied every entry of its log, its own term's too, so
//!   the state loaded is exactly what the log holds) and when to drop it (it no longer leads) —
//!   re-checked at least every second, so a shard dropped after a failed write is reloaded once
//!   its log is applied — and replaces a log a read found damaged with another replica's copy
//!   (`cluster/mend.rs`: a leader that cannot hands its leadership over);
//! - [`ShardReplicas`] answers who leads a shard (both coordinators' `ShardPlacement`);
//! - [`ShardState`] is where a shard is in that life, the same for both coordinators, and
//!   [`ShardWrite`] is a write to a shard's log: when it fails or its outcome is unknown, the
//!   shard is rolled back ([`roll_back`]) — its in-memory state, changed before the write was
//!   durable, is dropped and reloaded from the log, at once on one node and by the leadership
//!   watcher in a cluster — so what a coordinator answers always follows its log.
//!
//! A coordinator keeps its own shard contents and decides what loading means (the group
//! coordinator replays groups and offsets; the transaction coordinator also finishes the
//! transactions it finds awaiting their markers).

use crate::cluster::replica::{start_kv, KvStore, ReplicaSpec, ShardReplica};
use crate::cluster::ClusterNode;
use crate::kvlog::{KvLog, KvRecord, LogWait};
use crate::sync::OrDie as _;
use sluice_storage::StorageError;
use std::path::Path;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// Where a coordinator shard is in its life on this broker. Loading runs under the shard's
/// lock, so no request sees a shard half loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardState {
    /// Not coordinated here: another broker leads it (replicated), or this one has not loaded
    /// it yet. Requests for it are answered NOT_COORDINATOR.
    Unloaded,
    /// Its in-memory state is what its log holds: requests are served.
    Active,
    /// A write to its log failed or has an unknown outcome, so its in-memory state (changed
    /// before the write was durable) no longer follows the log: dropped, and reloaded from the
    /// log ([`roll_back`]). Answered as `Unloaded` meanwhile.
    Failed,
}

impl ShardState {
    pub fn is_active(self) -> bool {
        self == ShardState::Active
    }
}

/// Whether shard `shard` of `shards` is `Failed` (`ShardPlacement::shard_failed`); a shard
/// busy loading is not asked: its lock is held for as long as that takes.
pub fn shard_failed<S>(shards: &[std::sync::Mutex<S>], shard: i32, state: impl Fn(&S) -> ShardState) -> bool {
    usize::try_from(shard)
        .ok()
        .and_then(|i| shards.get(i))
        .and_then(|s| s.try_lock().ok().map(|s| state(&s) == ShardState::Failed))
        .unwrap_or(false)
}

/// A write to a coordinator shard's log under way (a local append's fsync, or a Raft commit).
/// Await [`ShardWrite::wait`]: when the write fails or its outcome is unknown, the shard it was
/// made to is rolled back before the error is returned.
#[must_use]
pub struct ShardWrite {
    wait: LogWait,
    shard: Option<(Weak<dyn ShardOwner>, usize)>,
}

impl ShardWrite {
    /// A write of `owner`'s shard `shard`, durable once `wait` ends well.
    pub fn new(wait: LogWait, owner: Weak<dyn ShardOwner>, shard: usize) -> ShardWrite {
        ShardWrite { wait, shard: Some((owner, shard)) }
    }

    /// Nothing written: nothing to wait for.
    pub fn none() -> ShardWrite {
        ShardWrite { wait: LogWait::none(), shard: None }
    }

    pub fn is_none(&self) -> bool {
        self.wait.is_none()
    }

    /// `self` unless it waits on nothing (a later write's wait covers the earlier ones of the
    /// same shard: the local log fsyncs in order, Raft commits in order).
    pub fn or(self, other: ShardWrite) -> ShardWrite {
        if self.is_none() {
            other
        } else {
            self
        }
    }

    /// Wait until the write is durable; on failure (or an unknown outcome) roll its shard back.
    pub async fn wait(self) -> Result<(), StorageError> {
        let result = self.wait.wait().await;
        if result.is_err() {
            if let Some(owner) = self.shard.as_ref().and_then(|(o, _)| o.upgrade()) {
                roll_back(owner, self.shard.map_or(0, |(_, i)| i));
            }
        }
        result
    }

    /// [`ShardWrite::wait`] from blocking test code (a local log; no roll back).
    #[cfg(test)]
    pub fn wait_blocking(self) -> Result<(), StorageError> {
        self.wait.wait_blocking()
    }

    /// Test code: a write whose outcome is never known (as a Raft commit whose replica stopped).
    #[cfg(test)]
    pub fn lost(owner: Weak<dyn ShardOwner>, shard: usize) -> ShardWrite {
        ShardWrite::new(LogWait::Raft(crate::cluster::replica::PendingWrite::lost()), owner, shard)
    }
}

/// Shard `shard` of `owner` no longer follows its log (a write failed or its outcome is
/// unknown): drop its in-memory state (parked requests are answered NOT_COORDINATOR) and reload
/// it from the log — at once on one node; replicated, once this broker leads the shard with every
/// entry applied ([`watch_leadership`]), so a write that commits after all is in what is loaded.
pub fn roll_back(owner: Arc<dyn ShardOwner>, shard: usize) {
    tracing::warn!(
        topic = owner.topic(),
        shard,
        "a write to the coordinator log failed or has an unknown outcome; reloading the shard from its log"
    );
    owner.unload(shard, ShardState::Failed);
    if !owner.replicated() {
        owner.load(shard, None);
    }
}

/// A coordinator whose shards the shared runtime replicates and rolls back.
pub trait ShardOwner: Send + Sync + 'static {
    /// The internal topic whose partitions are the shards (names the replicas and their files).
    fn topic(&self) -> &'static str;
    /// How many shards there are (fixed at first use).
    fn shard_count(&self) -> usize;
    /// The wanted replication factor (capped at the number of voters).
    fn replication_factor(&self) -> i32;
    /// Run `f` on shard `shard`'s key/value log under the shard's lock; `false` if there is no
    /// such shard.
    fn with_log(&self, shard: usize, f: &mut dyn FnMut(&mut KvLog)) -> bool;
    /// Applied on every replica of shard `shard` (its Raft state machine): append durably.
    /// Blocking.
    fn apply(&self, shard: usize, records: &[KvRecord], now: i64) -> Result<(), String> {
        on_log(self, shard, |log| match log.append(records, now).map_err(|e| e.to_string())? {
            Some((flusher, end)) => flusher.sync_to(end).map(|_| ()).map_err(|e| e.to_string()),
            None => Ok(()),
        })
    }
    /// Shard `shard`'s live records (the newest value of each key, deleted keys dropped): its
    /// Raft snapshot. Blocking (reads the shard's log).
    fn live(&self, shard: usize) -> Result<Vec<KvRecord>, String> {
        on_log(self, shard, |log| log.live().map_err(|e| e.to_string()))
    }
    /// Make shard `shard`'s log hold exactly `records`, durably: a snapshot installed on a
    /// replica that does not lead it, or another replica's copy replacing a damaged log
    /// (rebuilt whole: nothing of it can be read). Blocking.
    fn replace(&self, shard: usize, records: &[KvRecord], now: i64) -> Result<(), String> {
        on_log(self, shard, |log| {
            if log.is_damaged() { log.rebuild(records, now) } else { log.compact(records, now) }
                .map_err(|e| e.to_string())
        })
    }
    /// Whether a read found damaged data in shard `shard`'s log (it is offline until replaced).
    fn damaged(&self, shard: usize) -> bool {
        on_log(self, shard, |log| Ok(log.is_damaged())).unwrap_or(false)
    }
    /// Replicated: hold shard `shard`'s log damaged if its open cut bytes off its end
    /// (`KvLog::suspect_cut`); why, if so.
    fn suspect_cut(&self, shard: usize) -> Option<String> {
        on_log(self, shard, |log| Ok(log.suspect_cut())).ok().flatten()
    }
    /// Are the shards replicated (cluster mode, a Raft group each)?
    fn replicated(&self) -> bool;
    /// Where shard `shard` is (see [`ShardState`]).
    fn state(&self, shard: usize) -> ShardState;
    /// Load shard `shard`'s state from its log and make it `Active` (`Failed` if the log cannot
    /// be read). Replicated: this broker leads it in Raft term `epoch` with every entry applied;
    /// `None` on one node. Blocking (reads the shard's log).
    fn load(self: Arc<Self>, shard: usize, epoch: Option<i32>);
    /// Drop shard `shard`'s state, leaving it `to` (`Unloaded`: this broker no longer leads it;
    /// `Failed`: it no longer follows its log). Parked requests are answered NOT_COORDINATOR.
    fn unload(&self, shard: usize, to: ShardState);
}

/// `f`'s answer on shard `shard`'s log (`ShardOwner::with_log`).
fn on_log<O: ShardOwner + ?Sized, T>(
    owner: &O,
    shard: usize,
    f: impl FnOnce(&mut KvLog) -> Result<T, String>,
) -> Result<T, String> {
    let (mut f, mut out) = (Some(f), None);
    owner.with_log(shard, &mut |log| out = f.take().map(|f| f(log)));
    out.unwrap_or_else(|| Err(format!("no shard {shard}")))
}

/// Shard `shard`'s log as the scrubber walks it (`scrubber.rs`).
struct ScrubbedShard {
    owner: Weak<dyn ShardOwner>,
    shard: usize,
}

impl crate::scrubber::Scrubbed for ScrubbedShard {
    fn segments(&self) -> Vec<i64> {
        let Some(owner) = self.owner.upgrade() else { return Vec::new() };
        on_log(&*owner, self.shard, |log| Ok(log.segment_bases())).unwrap_or_default()
    }

    /// Damage found marks the log damaged: a replicated shard's replica replaces it
    /// ([`watch_leadership`]); on one node the shard goes offline at its next write or load.
    fn scrub(&self, segment: i64, position: u64, max_bytes: usize) -> Result<Option<u64>, StorageError> {
        let Some(owner) = self.owner.upgrade() else { return Ok(None) };
        let mut out = Ok(None);
        owner.with_log(self.shard, &mut |log| out = log.scrub(segment, position, max_bytes));
        if let Err(StorageError::Corrupt { path, position, reason }) = &out {
            tracing::error!(
                "coordinator log {}-{} is damaged: damaged data in {} at byte {position}: {reason} (found by the \
                 scrubber)",
                owner.topic(),
                self.shard,
                path.display()
            );
            ::metrics::counter!(crate::metrics::STORAGE_CORRUPTIONS_TOTAL, "topic" => owner.topic()).increment(1);
        }
        out
    }
}

/// Every shard log of `owner`, for the scrubber.
pub fn scrubbed_logs<O: ShardOwner>(owner: &Arc<O>) -> Vec<Arc<dyn crate::scrubber::Scrubbed>> {
    let weak: Weak<dyn ShardOwner> = Arc::downgrade(owner) as Weak<O>;
    (0..owner.shard_count())
        .map(|shard| Arc::new(ScrubbedShard { owner: weak.clone(), shard }) as Arc<dyn crate::scrubber::Scrubbed>)
        .collect()
}

/// One shard of a coordinator as its Raft state machine sees it: its key/value log.
struct OwnerShard<O> {
    owner: Weak<O>,
    shard: usize,
}

impl<O> OwnerShard<O> {
    fn owner(&self) -> Result<Arc<O>, String> {
        self.owner.upgrade().ok_or_else(|| "the broker is shutting down".to_string())
    }
}

impl<O: ShardOwner> KvStore for OwnerShard<O> {
    fn apply(&self, records: &[KvRecord], now_ms: i64) -> Result<(), String> {
        self.owner()?.apply(self.shard, records, now_ms)
    }

    fn live(&self) -> Result<Vec<crate::replication::types::KvEntry>, String> {
        let live = self.owner()?.live(self.shard)?;
        Ok(live
            .into_iter()
            .map(|(k, v)| crate::replication::types::KvEntry { key: k.to_vec(), value: v.map(|v| v.to_vec()) })
            .collect())
    }

    fn replace(&self, records: Vec<crate::replication::types::KvEntry>, now_ms: i64) -> Result<(), String> {
        self.owner()?.replace(self.shard, &crate::cluster::mend::to_pairs(records), now_ms)
    }

    fn damaged(&self) -> bool {
        self.owner().is_ok_and(|o| o.damaged(self.shard))
    }

    fn suspect_cut(&self) -> Option<String> {
        self.owner().ok().and_then(|o| o.suspect_cut(self.shard))
    }
}

/// The replicas of a coordinator's shards in a cluster.
pub struct ShardReplicas {
    /// The brokers replicating each shard (from the voters, fixed).
    pub assignment: Vec<Vec<i32>>,
    /// This broker's replica of each shard, if it is one.
    pub groups: Vec<Option<Arc<ShardReplica>>>,
}

impl ShardReplicas {
    /// The broker leading shard `shard`, as this broker knows it: its replica's view of the
    /// leader, or (not a replica here) the shard's first replica.
    pub fn leader(&self, shard: i32) -> Option<i32> {
        let i = usize::try_from(shard).ok()?;
        match self.groups.get(i)? {
            Some(g) => g.leader(),
            None => self.assignment.get(i)?.first().copied(),
        }
    }

    /// This broker's replica of shard `shard`, if it is one.
    pub fn replica(&self, shard: usize) -> Option<Arc<ShardReplica>> {
        self.groups.get(shard).and_then(|g| g.clone())
    }
}

/// Start this broker's replica of each of `owner`'s shards it is assigned (every shard unloaded
/// first). `None` when the replication factor, capped at the voters, is below 2: the shards
/// stay local. The caller records the replicas, then calls [`watch_leadership`].
pub async fn replicate<O: ShardOwner>(
    owner: &Arc<O>,
    node: &Arc<ClusterNode>,
    dir: &Path,
) -> anyhow::Result<Option<ShardReplicas>> {
    let ids: Vec<i32> = node.voters.keys().filter_map(|v| i32::try_from(*v).ok()).collect();
    let rf = usize::try_from(owner.replication_factor()).unwrap_or(1).min(ids.len());
    if rf < 2 {
        return Ok(None);
    }
    let me = i32::try_from(node.node_id)?;
    let n = owner.shard_count();
    let assignment: Vec<Vec<i32>> = (0..n).map(|i| (0..rf).map(|k| ids[(i + k) % ids.len()]).collect()).collect();
    let topic = owner.topic();
    let mut groups = Vec::with_capacity(n);
    for (i, r) in assignment.iter().enumerate() {
        owner.unload(i, ShardState::Unloaded);
        if !r.contains(&me) {
            groups.push(None);
            continue;
        }
        let store: Arc<dyn KvStore> = Arc::new(OwnerShard { owner: Arc::downgrade(owner), shard: i });
        let spec = ReplicaSpec {
            key: (topic.to_string(), i32::try_from(i)?),
            topic_id: uuid::Uuid::nil(),
            replicas: r.clone(),
            initialize: true,
            append_bytes_max: node.append_bytes(),
            snapshot_bytes: node.snapshot_bytes(),
            single_log: false,
            follower_cache_tail: -1,
            budgets: node.budgets(),
            answering: Default::default(),
        };
        let network = crate::cluster::network::ShardNetwork::new(&spec.key, &node.voters);
        let peers = Arc::new(crate::cluster::network::GroupPeers {
            node: Arc::downgrade(node),
            key: spec.key.clone(),
            kind: crate::cluster::network::GroupKind::Shard,
            assigned: spec
                .replicas
                .iter()
                .filter_map(|r| crate::replication::types::NodeId::try_from(*r).ok())
                .collect(),
        });
        let g =
            start_kv(node.node_id, spec, &node.voters, network, store, peers, dir.join(format!("{topic}-{i}"))).await?;
        node.shards.write().or_die().insert(g.key.clone(), g.clone());
        groups.push(Some(g));
    }
    Ok(Some(ShardReplicas { assignment, groups }))
}

/// Follow the leadership of every shard replicated here: load a shard when this broker leads
/// it with every entry of its log applied, drop it when it no longer leads. One task per
/// replica, ending with the broker (the owner dropped) or the replica.
pub fn watch_leadership<O: ShardOwner>(owner: &Arc<O>, replicas: &ShardReplicas) {
    for (i, g) in replicas.groups.iter().enumerate() {
        let Some(g) = g.clone() else { continue };
        let weak = Arc::downgrade(owner);
        tokio::spawn(async move {
            let mut rx = g.raft.metrics();
            // the last repair failure logged (once while it stays the same)
            let mut warned: Option<String> = None;
            // no repair is tried again within a second of one that failed
            let mut retry_at = tokio::time::Instant::now();
            loop {
                let (is_leader, ready, term) = {
                    let m = rx.borrow();
                    let applied = m.last_applied;
                    let all_applied = applied.map(|l| l.index) >= m.last_log_index;
                    let this_term = applied.map(|l| l.leader_id.term) == Some(m.current_term);
                    (m.current_leader == Some(m.id), all_applied && this_term, m.current_term)
                };
                let Some(owner) = weak.upgrade() else { return };
                // a damaged log (found by a read: a load, a snapshot, a compaction) is replaced
                // by another replica's copy; a leader that cannot repair it lets another lead
                if let Some(mender) =
                    g.kv_mender().filter(|m| m.is_damaged() && tokio::time::Instant::now() >= retry_at)
                {
                    if let Err(e) = mender.mend().await {
                        retry_at = tokio::time::Instant::now() + Duration::from_secs(1);
                        if warned.as_ref() != Some(&e) {
                            tracing::warn!("{e}; trying again every second");
                            warned = Some(e);
                        }
                        if is_leader {
                            mender.peers.hand_over().await;
                        }
                    }
                }
                let state = owner.state(i);
                if is_leader && ready && !state.is_active() && !owner.damaged(i) {
                    let epoch = i32::try_from(term).unwrap_or(i32::MAX);
                    tokio::task::block_in_place(|| owner.load(i, Some(epoch)));
                } else if !is_leader && state != ShardState::Unloaded {
                    owner.unload(i, ShardState::Unloaded);
                }
                // re-checked at least every second (a shard rolled back after a failed write is
                // reloaded once its log is applied)
                if let Ok(Err(_)) = tokio::time::timeout(Duration::from_secs(1), rx.changed()).await {
                    // the replica stopped (a storage failure it cannot apply past, or the
                    // broker's shutdown): this broker no longer coordinates the shard
                    if let Some(owner) = weak.upgrade() {
                        owner.unload(i, ShardState::Unloaded);
                    }
                    return;
                }
            }
        });
    }
}
