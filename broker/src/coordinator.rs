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
//!   its log is applied;
//! - [`ShardReplicas`] answers who leads a shard (both coordinators' `ShardPlacement`).
//!
//! A coordinator keeps its own shard contents and decides what loading means (the group
//! coordinator replays groups and offsets; the transaction coordinator also finishes the
//! transactions it finds awaiting their markers).

use crate::cluster::replica::{start_kv, KvApply, Replica, ReplicaSpec};
use crate::cluster::ClusterNode;
use crate::kvlog::KvRecord;
use crate::sync::OrDie as _;
use std::path::Path;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// A coordinator whose shards the shared runtime replicates.
pub trait ShardOwner: Send + Sync + 'static {
    /// The internal topic whose partitions are the shards (names the replicas and their files).
    fn topic(&self) -> &'static str;
    /// How many shards there are (fixed at first use).
    fn shard_count(&self) -> usize;
    /// The wanted replication factor (capped at the number of voters).
    fn replication_factor(&self) -> i32;
    /// Applied on every replica of shard `shard` (its Raft state machine): append durably.
    fn apply(&self, shard: usize, records: &[KvRecord], now: i64) -> Result<(), String>;
    /// Does this broker hold shard `shard` loaded (it leads it and its state follows the log)?
    fn loaded(&self, shard: usize) -> bool;
    /// This broker leads shard `shard` in Raft term `epoch` with every entry applied: load its
    /// state from the log. Blocking (reads the shard's log).
    fn load(self: Arc<Self>, shard: usize, epoch: i32);
    /// This broker no longer leads shard `shard` (or has not yet loaded it): drop its state.
    fn unload(&self, shard: usize);
}

/// The replicas of a coordinator's shards in a cluster.
pub struct ShardReplicas {
    /// The brokers replicating each shard (from the voters, fixed).
    pub assignment: Vec<Vec<i32>>,
    /// This broker's replica of each shard, if it is one.
    pub groups: Vec<Option<Arc<Replica>>>,
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
    pub fn replica(&self, shard: usize) -> Option<Arc<Replica>> {
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
        owner.unload(i);
        if !r.contains(&me) {
            groups.push(None);
            continue;
        }
        let weak: Weak<O> = Arc::downgrade(owner);
        let apply: KvApply = Arc::new(move |records, now| match weak.upgrade() {
            Some(o) => {
                let records: Vec<KvRecord> =
                    records.into_iter().map(|r| (bytes::Bytes::from(r.key), r.value.map(bytes::Bytes::from))).collect();
                o.apply(i, &records, now)
            }
            None => Err("the broker is shutting down".into()),
        });
        let spec = ReplicaSpec {
            key: (topic.to_string(), i32::try_from(i)?),
            topic_id: uuid::Uuid::nil(),
            replicas: r.clone(),
            initialize: true,
        };
        let g = start_kv(node.node_id, spec, &node.voters, apply, dir.join(format!("{topic}-{i}"))).await?;
        node.replicas.write().or_die().insert(g.key.clone(), g.clone());
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
            loop {
                let (is_leader, ready, term) = {
                    let m = rx.borrow();
                    let applied = m.last_applied;
                    let all_applied = applied.map(|l| l.index) >= m.last_log_index;
                    let this_term = applied.map(|l| l.leader_id.term) == Some(m.current_term);
                    (m.current_leader == Some(m.id), all_applied && this_term, m.current_term)
                };
                let Some(owner) = weak.upgrade() else { return };
                let loaded = owner.loaded(i);
                if is_leader && ready && !loaded {
                    let epoch = i32::try_from(term).unwrap_or(i32::MAX);
                    tokio::task::block_in_place(|| owner.load(i, epoch));
                } else if !is_leader && loaded {
                    owner.unload(i);
                }
                // re-checked at least every second (a shard dropped after a failed write is
                // reloaded once its log is applied)
                if let Ok(Err(_)) = tokio::time::timeout(Duration::from_secs(1), rx.changed()).await {
                    return;
                }
            }
        });
    }
}
