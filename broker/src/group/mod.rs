//! The group coordinator: consumer groups (classic protocol) and committed offsets.
//!
//! A group belongs to one partition of the internal offsets log (`__consumer_offsets-<n>`,
//! n = Java hash of the group id mod `offsets.topic.num.partitions`, as in Kafka). Each such
//! partition is a [`Shard`]: its log (opened on first use) and its groups, behind one mutex.
//! The state machine is pure (`machine.rs`); this runtime parks JoinGroup/SyncGroup requests,
//! writes what the machine orders stored, waits for durability, then answers.
//!
//! Durability: an offset commit or a group's new assignment is answered only after its record
//! is fsynced. The in-memory value is updated when the record is appended (under the shard
//! lock, so memory follows log order); see docs/decisions/0004-group-coordinator.md. A write
//! that fails, or whose outcome is unknown, rolls its shard back: the in-memory groups are
//! reloaded from the log (`coordinator::ShardWrite`, shared with the transaction coordinator).
//!
//! Reload time is bounded by compaction: when a shard has appended many more records than it
//! has live keys, it re-appends its live state and moves the log start offset to that point, so
//! whole segments behind it are deleted and a restart replays only live state plus a tail.

pub mod codec;
pub mod consumer;
pub mod error;
pub mod machine;

use crate::config::coordinators::CoordinatorSettings;
use crate::coordinator::{ShardOwner, ShardState, ShardWrite};
use crate::group::error::GroupError;
use crate::kvlog::{KvLog, KvRecord, LogWait};
use crate::sync::OrDie as _;
use bytes::Bytes;
use codec::{Entry, StoredGroup, StoredMember, StoredOffset};
use machine::{CommittedOffset, Effect, Group, GroupState, JoinArgs, JoinResult, SyncArgs, SyncResult};
use sluice_storage::{LogConfig, StorageError};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use tokio::sync::oneshot;

pub use crate::topics::OFFSETS_TOPIC;
const PARTITIONS_FILE: &str = "__consumer_offsets.json";

/// Committed offsets by topic: (partition, offset if any).
pub type OffsetRows = Vec<(String, Vec<(i32, Option<CommittedOffset>)>)>;

type Waiters<T> = HashMap<(String, String), oneshot::Sender<T>>;

pub struct Shard {
    index: i32,
    log: KvLog,
    /// Cluster mode, replicated offsets log: this broker's replica of the shard's Raft group.
    replica: Option<Arc<crate::cluster::replica::ShardReplica>>,
    /// Where the shard is: `Active` once loaded (on one node from the start; replicated, while
    /// this broker leads it), `Failed` after a write it cannot vouch for (reloaded).
    state: ShardState,
    /// The coordinator, which a failed write rolls back ([`ShardWrite`]).
    owner: Weak<dyn ShardOwner>,
    pub groups: HashMap<String, Group>,
    join_waiters: Waiters<JoinResult>,
    sync_waiters: Waiters<SyncResult>,
}

/// Answers to deliver once `durable` (if any) is reached.
#[must_use]
pub struct Deliveries {
    durable: ShardWrite,
    joins: Vec<(oneshot::Sender<JoinResult>, JoinResult)>,
    syncs: Vec<(oneshot::Sender<SyncResult>, SyncResult)>,
}

impl Deliveries {
    fn none() -> Deliveries {
        Deliveries { durable: ShardWrite::none(), joins: Vec::new(), syncs: Vec::new() }
    }

    /// Wait for durability, then answer. Returns whether the store succeeded.
    pub async fn finish(mut self) -> bool {
        let durable = std::mem::replace(&mut self.durable, ShardWrite::none());
        self.deliver(durable.wait().await)
    }

    /// [`Deliveries::finish`] from blocking test code (a local log).
    #[cfg(test)]
    pub fn finish_blocking(mut self) -> bool {
        let durable = std::mem::replace(&mut self.durable, ShardWrite::none());
        self.deliver(durable.wait_blocking())
    }

    /// Answer once the store ended with `stored`.
    fn deliver(self, stored: Result<(), StorageError>) -> bool {
        let ok = match stored {
            Ok(()) => true,
            Err(e) => {
                tracing::error!("offsets log write failed: {e}");
                false
            }
        };
        for (tx, mut r) in self.joins {
            if !ok {
                r = JoinResult::error(GroupError::WriteFailed, &r.member_id);
            }
            let _ = tx.send(r);
        }
        for (tx, mut r) in self.syncs {
            if !ok {
                r = SyncResult::error(GroupError::WriteFailed);
            }
            let _ = tx.send(r);
        }
        ok
    }
}

impl Shard {
    /// Run `check` on the group, created empty if absent (and dropped again if refused).
    /// Returns whether the group existed before.
    fn check_group(
        &mut self,
        id: &str,
        now: i64,
        check: impl FnOnce(&mut Group) -> Result<(), GroupError>,
    ) -> Result<bool, GroupError> {
        let existed = self.groups.contains_key(id);
        let g = self.groups.entry(id.to_string()).or_insert_with(|| Group::new(id, now));
        if let Err(e) = check(g) {
            if !existed {
                self.groups.remove(id);
            }
            return Err(e);
        }
        Ok(existed)
    }

    /// Append entries (in order) and return what to wait on for their durability (a failure
    /// there rolls the shard back).
    fn append(&mut self, entries: &[Entry], now: i64) -> Result<ShardWrite, StorageError> {
        let wait = self.append_log(entries, now)?;
        Ok(ShardWrite::new(wait, self.owner.clone(), self.index as usize))
    }

    /// [`Shard::append`] without the roll back: for callers that handle a failure themselves.
    fn append_log(&mut self, entries: &[Entry], now: i64) -> Result<LogWait, StorageError> {
        let records: Vec<KvRecord> = entries.iter().map(codec::encode).collect();
        let Some(replica) = self.replica.clone() else { return self.log.append(&records, now).map(LogWait::Local) };
        if !self.state.is_active() {
            return Err(StorageError::InvalidConfig("this broker does not coordinate this shard".into()));
        }
        let records = records
            .iter()
            .map(|(k, v)| crate::replication::types::KvEntry { key: k.to_vec(), value: v.as_ref().map(|v| v.to_vec()) })
            .collect();
        replica
            .propose(crate::replication::types::ShardCommand::Kv { records, now_ms: now })
            .map(LogWait::Raft)
            .map_err(|code| StorageError::InvalidConfig(format!("not the shard's leader ({code})")))
    }

    fn group_entry(&self, g: &Group) -> Entry {
        if g.state == GroupState::Dead {
            return Entry::Group(g.id.clone(), None);
        }
        let protocol = g.protocol.clone().unwrap_or_default();
        Entry::Group(
            g.id.clone(),
            Some(StoredGroup {
                generation: g.generation,
                protocol_type: g.protocol_type.clone(),
                protocol: g.protocol.clone(),
                leader: g.leader.clone(),
                members: g
                    .members
                    .values()
                    .map(|m| StoredMember {
                        id: m.id.clone(),
                        instance_id: m.instance_id.clone(),
                        client_id: m.client_id.clone(),
                        client_host: m.client_host.clone(),
                        session_timeout_ms: m.session_timeout_ms,
                        rebalance_timeout_ms: m.rebalance_timeout_ms,
                        subscription: m.metadata_for(&protocol),
                        assignment: m.assignment.clone(),
                    })
                    .collect(),
            }),
        )
    }

    /// Carry out a transition's effects: store first (append now, durability awaited by the
    /// caller through the returned deliveries), then hand over the parked requests' answers.
    fn apply(&mut self, group_id: &str, effects: Vec<Effect>, now: i64) -> Deliveries {
        let mut d = Deliveries::none();
        let mut store_failed = false;
        for e in effects {
            match e {
                Effect::Store => {
                    let Some(g) = self.groups.get(group_id) else { continue };
                    let entry = self.group_entry(g);
                    match self.append(&[entry], now) {
                        Ok(w) => d.durable = w.or(std::mem::replace(&mut d.durable, ShardWrite::none())),
                        Err(e) => {
                            tracing::error!(group = group_id, "storing group metadata failed: {e}");
                            store_failed = true;
                        }
                    }
                }
                Effect::Join(member, mut r) => {
                    if store_failed {
                        r = JoinResult::error(GroupError::WriteFailed, &member);
                    }
                    if let Some(tx) = self.join_waiters.remove(&(group_id.to_string(), member)) {
                        d.joins.push((tx, r));
                    }
                }
                Effect::Sync(member, mut r) => {
                    if store_failed {
                        r = SyncResult::error(GroupError::WriteFailed);
                    }
                    if let Some(tx) = self.sync_waiters.remove(&(group_id.to_string(), member)) {
                        d.syncs.push((tx, r));
                    }
                }
            }
        }
        if store_failed {
            // the transition is in memory but not in the log
            self.roll_back(now);
        }
        d
    }

    /// Drop the in-memory groups, leaving the shard `to` (parked joins and syncs are told
    /// NOT_COORDINATOR).
    fn drop_state(&mut self, to: ShardState) {
        for (_, tx) in self.join_waiters.drain() {
            let _ = tx.send(JoinResult::error(GroupError::NotCoordinator, ""));
        }
        for (_, tx) in self.sync_waiters.drain() {
            let _ = tx.send(SyncResult::error(GroupError::NotCoordinator));
        }
        self.groups.clear();
        self.state = to;
    }

    /// Load the groups from the log: `Active`, or `Failed` if it cannot be read.
    fn reload(&mut self, now: i64) {
        self.drop_state(ShardState::Failed);
        match self.load(now) {
            Ok(n) => {
                self.state = ShardState::Active;
                tracing::info!(
                    shard = self.index,
                    records = n,
                    groups = self.groups.len(),
                    "loaded offsets-log partition"
                );
            }
            Err(e) => tracing::error!(shard = self.index, "cannot load the offsets log: {e}"),
        }
    }

    /// A write this shard cannot vouch for (under its lock): as `coordinator::roll_back`.
    fn roll_back(&mut self, now: i64) {
        tracing::warn!(shard = self.index, "an offsets-log write failed; reloading the shard from its log");
        self.drop_state(ShardState::Failed);
        if self.replica.is_none() {
            self.reload(now);
        }
    }

    fn live_keys(&self) -> usize {
        self.groups.values().map(|g| 1 + g.offsets.len() + g.pending_txn.values().map(|m| m.len()).sum::<usize>()).sum()
    }

    fn live_entries(&self) -> Vec<Entry> {
        let mut out = Vec::new();
        for g in self.groups.values() {
            out.push(self.group_entry(g));
            for ((topic, partition), o) in &g.offsets {
                out.push(Entry::Offset {
                    group: g.id.clone(),
                    topic: topic.clone(),
                    partition: *partition,
                    value: Some(StoredOffset {
                        offset: o.offset,
                        leader_epoch: o.leader_epoch,
                        metadata: o.metadata.clone(),
                        commit_ms: o.commit_ms,
                    }),
                });
            }
            for (pid, pending) in &g.pending_txn {
                for ((topic, partition), o) in pending {
                    out.push(Entry::TxnOffset {
                        group: g.id.clone(),
                        producer_id: *pid,
                        topic: topic.clone(),
                        partition: *partition,
                        value: StoredOffset {
                            offset: o.offset,
                            leader_epoch: o.leader_epoch,
                            metadata: o.metadata.clone(),
                            commit_ms: o.commit_ms,
                        },
                    });
                }
            }
        }
        out
    }

    /// Re-append the live state and drop everything before it (see the module docs).
    fn compact(&mut self, now: i64) -> Result<bool, StorageError> {
        if !self.log.wants_compaction(self.live_keys()) {
            return Ok(false);
        }
        let live: Vec<KvRecord> = self.live_entries().iter().map(codec::encode).collect();
        self.log.compact(&live, now)?;
        Ok(true)
    }

    /// Replay the log into groups.
    fn load(&mut self, now: i64) -> Result<usize, StorageError> {
        let records = self.log.read_all()?;
        let n = records.len();
        for (k, v) in records {
            match codec::decode(Some(&k), v.as_deref()) {
                Ok(e) => self.replay(e, now),
                Err(e) => tracing::warn!(shard = self.index, "skipping record: {e}"),
            }
        }
        Ok(n)
    }

    fn replay(&mut self, e: Entry, now: i64) {
        match e {
            Entry::Group(id, Some(stored)) => {
                let g = self.groups.entry(id.clone()).or_insert_with(|| Group::new(&id, now));
                g.restore(stored, now);
            }
            Entry::Group(id, None) => {
                self.groups.remove(&id);
            }
            Entry::Offset { group, topic, partition, value } => match value {
                Some(v) => {
                    let g = self.groups.entry(group.clone()).or_insert_with(|| Group::new(&group, now));
                    g.offsets.insert(
                        (topic, partition),
                        CommittedOffset {
                            offset: v.offset,
                            leader_epoch: v.leader_epoch,
                            metadata: v.metadata,
                            commit_ms: v.commit_ms,
                        },
                    );
                }
                None => {
                    if let Some(g) = self.groups.get_mut(&group) {
                        g.offsets.remove(&(topic, partition));
                    }
                }
            },
            Entry::TxnOffset { group, producer_id, topic, partition, value: v } => {
                let g = self.groups.entry(group.clone()).or_insert_with(|| Group::new(&group, now));
                g.pending_txn.entry(producer_id).or_default().insert(
                    (topic, partition),
                    CommittedOffset {
                        offset: v.offset,
                        leader_epoch: v.leader_epoch,
                        metadata: v.metadata,
                        commit_ms: v.commit_ms,
                    },
                );
            }
            Entry::TxnEnd { group, producer_id, commit } => {
                if let Some(g) = self.groups.get_mut(&group) {
                    g.complete_txn(producer_id, commit);
                }
            }
        }
    }
}

/// One partition's commit request, already validated against the topic registry.
pub struct OffsetToCommit {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
}

impl OffsetToCommit {
    /// The partitions a commit names, for the member checks (`validate_offset_commit`).
    fn partitions(offsets: &[OffsetToCommit]) -> Vec<consumer::Tp> {
        offsets.iter().map(|o| (o.topic.clone(), o.partition)).collect()
    }

    fn stored(&self, now: i64) -> StoredOffset {
        StoredOffset {
            offset: self.offset,
            leader_epoch: self.leader_epoch,
            metadata: self.metadata.clone(),
            commit_ms: now,
        }
    }

    fn into_committed(self, now: i64) -> ((String, i32), CommittedOffset) {
        let c = CommittedOffset {
            offset: self.offset,
            leader_epoch: self.leader_epoch,
            metadata: self.metadata,
            commit_ms: now,
        };
        ((self.topic, self.partition), c)
    }
}

/// A group's own (session timeout, heartbeat interval), where its group configs set them.
type GroupTimers = (Option<i32>, Option<i32>);

pub struct GroupCoordinator {
    /// Cluster mode, replicated offsets log: the replicas of each shard.
    replication: std::sync::OnceLock<crate::coordinator::ShardReplicas>,
    pub settings: CoordinatorSettings,
    shards: Vec<Mutex<Shard>>,
    /// Group configs (KIP-848): per group, its session timeout and heartbeat interval where
    /// set (`consumer.session.timeout.ms`, `consumer.heartbeat.interval.ms`).
    timers: std::sync::RwLock<std::collections::BTreeMap<String, GroupTimers>>,
}

impl GroupCoordinator {
    /// The group configs in force (from the dynamic configs).
    pub fn set_group_configs(
        &self,
        groups: &std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>,
    ) {
        let timers = groups.iter().map(|(g, c)| (g.clone(), crate::dynamic_config::group_timers(c))).collect();
        *self.timers.write().or_die() = timers;
    }

    /// A consumer-protocol group's session timeout: its group config, else the broker's.
    pub fn consumer_session_timeout_ms(&self, group: &str) -> i32 {
        let t = self.timers.read().or_die();
        t.get(group).and_then(|x| x.0).unwrap_or(self.settings.consumer_session_timeout_ms)
    }

    /// A consumer-protocol group's heartbeat interval: its group config, else the broker's.
    pub fn consumer_heartbeat_interval_ms(&self, group: &str) -> i32 {
        let t = self.timers.read().or_die();
        t.get(group).and_then(|x| x.1).unwrap_or(self.settings.consumer_heartbeat_interval_ms)
    }

    /// Open every existing offsets-log partition under `data_dir` and replay it.
    pub fn open(data_dir: &Path, base: &LogConfig, mut settings: CoordinatorSettings) -> anyhow::Result<Arc<Self>> {
        // The partition count is fixed at first use: changing it would move groups between logs.
        let pfile = data_dir.join(PARTITIONS_FILE);
        match std::fs::read(&pfile) {
            Ok(b) => {
                let v: serde_json::Value = serde_json::from_slice(&b)
                    .map_err(|e| anyhow::anyhow!("{} is unreadable ({e}); refusing to start", pfile.display()))?;
                let stored = v.get("partitions").and_then(|p| p.as_i64()).unwrap_or(0) as i32;
                if stored < 1 {
                    anyhow::bail!("{} holds no valid partition count; refusing to start", pfile.display());
                }
                if stored != settings.partitions {
                    tracing::warn!(
                        configured = settings.partitions,
                        stored,
                        "offsets.topic.num.partitions cannot change after first use; keeping {stored}"
                    );
                    settings.partitions = stored;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let body = serde_json::json!({ "partitions": settings.partitions }).to_string();
                sluice_storage::sidefile::write_atomic(&pfile, body.as_bytes())?;
            }
            Err(e) => return Err(e.into()),
        }
        let now = crate::clock::now_ms();
        let mut shards = Vec::new();
        for i in 0..settings.partitions {
            let dir = data_dir.join(format!("{OFFSETS_TOPIC}-{i}"));
            let mut shard = Shard {
                index: i,
                log: KvLog::new(dir.clone(), base, settings.segment_bytes),
                replica: None,
                state: ShardState::Active,
                owner: Weak::<GroupCoordinator>::new(),
                groups: HashMap::new(),
                join_waiters: HashMap::new(),
                sync_waiters: HashMap::new(),
            };
            if dir.exists() {
                // a log that cannot be read (damaged data: decision 0036) fails its shard, not
                // the broker: its groups get NOT_COORDINATOR, every other shard serves, and no
                // committed offset is forgotten (an empty state would send consumers back)
                match shard.load(now) {
                    Ok(n) => {
                        tracing::info!(
                            shard = i,
                            records = n,
                            groups = shard.groups.len(),
                            "loaded group coordinator state"
                        )
                    }
                    Err(e) => {
                        tracing::error!(shard = i, "offsets-log shard {i} is offline: cannot load it: {e}");
                        shard.drop_state(ShardState::Failed);
                    }
                }
            }
            shards.push(Mutex::new(shard));
        }
        let c = Arc::new(GroupCoordinator {
            settings,
            shards,
            replication: std::sync::OnceLock::new(),
            timers: Default::default(),
        });
        let owner: Weak<dyn ShardOwner> = Arc::downgrade(&c) as Weak<GroupCoordinator>;
        for shard in &c.shards {
            shard.lock().or_die().owner = owner.clone();
        }
        Ok(c)
    }

    /// Replicate the offsets log (cluster mode): one Raft group per shard over
    /// `min(offsets.topic.replication.factor, voters)` voters (the shared shard runtime,
    /// `coordinator.rs`); each shard's coordinator is its group's leader, which reloads the
    /// shard's groups and offsets when it takes over.
    pub async fn enable_replication(
        self: &Arc<Self>,
        node: &Arc<crate::cluster::ClusterNode>,
        dir: &Path,
    ) -> anyhow::Result<()> {
        let Some(replicas) = crate::coordinator::replicate(self, node, dir).await? else { return Ok(()) };
        for (i, shard) in self.shards.iter().enumerate() {
            shard.lock().or_die().replica = replicas.replica(i);
        }
        if self.replication.set(replicas).is_err() {
            anyhow::bail!("offsets log replication started twice");
        }
        if let Some(replicas) = self.replication.get() {
            crate::coordinator::watch_leadership(self, replicas);
        }
        Ok(())
    }

    pub fn partition_for(&self, group: &str) -> i32 {
        crate::routing::shard_for(group, self.settings.partitions)
    }

    fn shard(&self, group: &str) -> MutexGuard<'_, Shard> {
        let i = self.partition_for(group) as usize;
        self.shards[i.min(self.shards.len() - 1)].lock().or_die()
    }

    pub fn shards(&self) -> impl Iterator<Item = MutexGuard<'_, Shard>> {
        self.shards.iter().map(|s| s.lock().or_die())
    }

    /// JoinGroup: the answer arrives on the returned receiver (now or when the join phase ends).
    pub fn join(&self, group_id: &str, args: JoinArgs, now: i64) -> (oneshot::Receiver<JoinResult>, Deliveries) {
        let (tx, rx) = oneshot::channel();
        let mut shard = self.group_shard(group_id, now);
        let known = !args.member_id.is_empty();
        if known && !shard.groups.contains_key(group_id) {
            let _ = tx.send(JoinResult::error(GroupError::UnknownMemberId, &args.member_id));
            return (rx, Deliveries::none());
        }
        let g = shard.groups.entry(group_id.to_string()).or_insert_with(|| Group::new(group_id, now));
        let before = g.rebalances;
        let out = g.join(args, now, &self.settings.group);
        count_rebalances(before, g.rebalances);
        shard.join_waiters.insert((group_id.to_string(), out.member_id.clone()), tx);
        let d = shard.apply(group_id, out.effects, now);
        (rx, d)
    }

    /// SyncGroup: the answer arrives on the returned receiver (now or when the leader syncs).
    pub fn sync(&self, group_id: &str, a: SyncArgs<'_>, now: i64) -> (oneshot::Receiver<SyncResult>, Deliveries) {
        let (tx, rx) = oneshot::channel();
        let mut shard = self.group_shard(group_id, now);
        let Some(g) = shard.groups.get_mut(group_id) else {
            let _ = tx.send(SyncResult::error(GroupError::UnknownMemberId));
            return (rx, Deliveries::none());
        };
        let member_id = a.member_id.to_string();
        let effects = g.sync(a, now);
        shard.sync_waiters.insert((group_id.to_string(), member_id), tx);
        let d = shard.apply(group_id, effects, now);
        (rx, d)
    }

    /// ConsumerGroupHeartbeat (KIP-848).
    pub fn consumer_heartbeat(
        &self,
        group_id: &str,
        h: consumer::Heartbeat,
        partitions: &dyn Fn(&str) -> Option<i32>,
        now: i64,
    ) -> Result<consumer::HeartbeatAnswer, GroupError> {
        let mut shard = self.shard(group_id);
        let g = shard.groups.entry(group_id.to_string()).or_insert_with(|| Group::new(group_id, now));
        if !g.members.is_empty() || !g.pending_members.is_empty() {
            return Err(GroupError::GroupIdNotFound); // a classic group is using this id
        }
        if g.protocol_type.is_none() {
            g.protocol_type = Some("consumer".into());
        }
        g.consumer.get_or_insert_with(Default::default).heartbeat(h, partitions, now)
    }

    pub fn heartbeat(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        now: i64,
    ) -> Result<(), GroupError> {
        let mut shard = self.group_shard(group_id, now);
        match shard.groups.get_mut(group_id) {
            Some(g) => g.heartbeat(member_id, instance_id, generation, now),
            None => Err(GroupError::UnknownMemberId),
        }
    }

    /// LeaveGroup for each (member id, instance id): its answer, in order.
    #[allow(clippy::type_complexity)]
    pub fn leave(
        &self,
        group_id: &str,
        members: &[(String, Option<String>)],
        now: i64,
    ) -> (Vec<Result<(), GroupError>>, Deliveries) {
        let mut shard = self.group_shard(group_id, now);
        let Some(g) = shard.groups.get_mut(group_id) else {
            return (vec![Err(GroupError::UnknownMemberId); members.len()], Deliveries::none());
        };
        let mut codes = Vec::new();
        let mut effects = Vec::new();
        let before = g.rebalances;
        for (m, i) in members {
            let (code, e) = g.leave(m, i.as_deref(), now, &self.settings.group);
            codes.push(code);
            effects.extend(e);
        }
        count_rebalances(before, g.rebalances);
        let d = shard.apply(group_id, effects, now);
        (codes, d)
    }

    /// OffsetCommit: check membership, store the offsets, answer after they are durable.
    /// Returns a group-level error, or what to wait on.
    pub fn commit_offsets(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        offsets: Vec<OffsetToCommit>,
        now: i64,
    ) -> Result<ShardWrite, GroupError> {
        let mut shard = self.group_shard(group_id, now);
        if !shard.groups.contains_key(group_id) && generation >= 0 {
            return Err(GroupError::IllegalGeneration);
        }
        let committed = OffsetToCommit::partitions(&offsets);
        let existed = shard.check_group(group_id, now, |g| {
            g.validate_offset_commit(member_id, instance_id, generation, &committed, now)
        })?;
        let entries: Vec<Entry> = offsets
            .iter()
            .map(|o| Entry::Offset {
                group: group_id.to_string(),
                topic: o.topic.clone(),
                partition: o.partition,
                value: Some(o.stored(now)),
            })
            .collect();
        let wait = match shard.append(&entries, now) {
            Ok(w) => w,
            Err(e) => {
                tracing::error!(group = group_id, "offset commit failed: {e}");
                if !existed {
                    shard.groups.remove(group_id);
                }
                return Err(GroupError::WriteFailed);
            }
        };
        if let Some(g) = shard.groups.get_mut(group_id) {
            g.offsets.extend(offsets.into_iter().map(|o| o.into_committed(now)));
        }
        Ok(wait)
    }

    /// TxnOffsetCommit: record offsets pending in `pid`'s transaction (durable before answering;
    /// visible to OffsetFetch only once the transaction commits).
    #[allow(clippy::too_many_arguments)]
    pub fn commit_txn_offsets(
        &self,
        group_id: &str,
        pid: i64,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        offsets: Vec<OffsetToCommit>,
        now: i64,
    ) -> Result<ShardWrite, GroupError> {
        let mut shard = self.group_shard(group_id, now);
        let committed = OffsetToCommit::partitions(&offsets);
        shard.check_group(group_id, now, |g| {
            g.validate_txn_offset_commit(member_id, instance_id, generation, &committed)
        })?;
        let entries: Vec<Entry> = offsets
            .iter()
            .map(|o| Entry::TxnOffset {
                group: group_id.to_string(),
                producer_id: pid,
                topic: o.topic.clone(),
                partition: o.partition,
                value: o.stored(now),
            })
            .collect();
        let wait = shard.append(&entries, now).map_err(|e| {
            tracing::error!(group = group_id, "txn offset commit failed: {e}");
            GroupError::WriteFailed
        })?;
        if let Some(g) = shard.groups.get_mut(group_id) {
            g.pending_txn.entry(pid).or_default().extend(offsets.into_iter().map(|o| o.into_committed(now)));
        }
        Ok(wait)
    }

    /// The marker for `pid`'s transaction reached this group: commit or drop its offsets.
    pub fn complete_txn(&self, group_id: &str, pid: i64, commit: bool, now: i64) -> Result<ShardWrite, GroupError> {
        let mut shard = self.shard(group_id);
        if !shard.state.is_active() {
            return Err(GroupError::NotCoordinator);
        }
        let entry = Entry::TxnEnd { group: group_id.to_string(), producer_id: pid, commit };
        let wait = shard.append(&[entry], now).map_err(|e| {
            tracing::error!(group = group_id, "txn offset completion failed: {e}");
            GroupError::WriteFailed
        })?;
        if let Some(g) = shard.groups.get_mut(group_id) {
            g.complete_txn(pid, commit);
        }
        Ok(wait)
    }

    /// A transaction marker on offsets-log partition `partition` (sent by a transaction
    /// coordinator on another broker): complete `pid`'s pending offsets in every group of that
    /// partition. `None` when there were none.
    pub fn complete_txn_in_partition(
        &self,
        partition: i32,
        pid: i64,
        commit: bool,
        now: i64,
    ) -> Result<Option<ShardWrite>, GroupError> {
        let Some(lock) = usize::try_from(partition).ok().and_then(|i| self.shards.get(i)) else {
            return Err(GroupError::UnknownTopicOrPartition);
        };
        let mut shard = lock.lock().or_die();
        if !shard.state.is_active() {
            // replicated: another broker leads this offsets-log partition (or is taking over)
            return Err(GroupError::NotCoordinator);
        }
        let groups: Vec<String> =
            shard.groups.values().filter(|g| g.pending_txn.contains_key(&pid)).map(|g| g.id.clone()).collect();
        if groups.is_empty() {
            return Ok(None);
        }
        let entries: Vec<Entry> =
            groups.iter().map(|g| Entry::TxnEnd { group: g.clone(), producer_id: pid, commit }).collect();
        let wait = shard.append(&entries, now).map_err(|e| {
            tracing::error!(partition, "txn offset completion failed: {e}");
            GroupError::WriteFailed
        })?;
        for g in &groups {
            if let Some(g) = shard.groups.get_mut(g) {
                g.complete_txn(pid, commit);
            }
        }
        Ok(Some(wait))
    }

    /// Partitions of `group_id` with transactional offsets still pending.
    pub fn pending_partitions(&self, group_id: &str) -> std::collections::BTreeSet<(String, i32)> {
        let shard = self.shard(group_id);
        shard
            .groups
            .get(group_id)
            .map(|g| g.pending_txn.values().flat_map(|m| m.keys().cloned()).collect())
            .unwrap_or_default()
    }

    /// Committed offsets of a group: all of them, or those asked for (missing ones as `None`).
    /// `NotCoordinator` while its shard is not loaded here (led elsewhere, rolled back, or
    /// offline because its log is damaged): an empty answer would read as "nothing committed"
    /// and send the group's consumers to their reset position.
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        wanted: Option<Vec<(String, Vec<i32>)>>,
    ) -> Result<OffsetRows, GroupError> {
        let shard = self.shard(group_id);
        if !shard.state.is_active() {
            return Err(GroupError::NotCoordinator);
        }
        let g = shard.groups.get(group_id);
        Ok(match wanted {
            Some(topics) => topics
                .into_iter()
                .map(|(t, parts)| {
                    let rows = parts
                        .into_iter()
                        .map(|p| (p, g.and_then(|g| g.offsets.get(&(t.clone(), p)).cloned())))
                        .collect();
                    (t, rows)
                })
                .collect(),
            None => {
                let mut by_topic: std::collections::BTreeMap<String, Vec<(i32, Option<CommittedOffset>)>> =
                    Default::default();
                if let Some(g) = g {
                    for ((t, p), o) in &g.offsets {
                        by_topic.entry(t.clone()).or_default().push((*p, Some(o.clone())));
                    }
                }
                by_topic.into_iter().collect()
            }
        })
    }

    /// OffsetDelete: a group-level error, or per-partition codes (GROUP_SUBSCRIBED_TO_TOPIC for
    /// topics the members consume), plus what to wait on.
    #[allow(clippy::type_complexity)]
    pub fn delete_offsets(
        &self,
        group_id: &str,
        topics: Vec<(String, Vec<i32>)>,
        now: i64,
    ) -> Result<(Vec<(String, Vec<(i32, Option<GroupError>)>)>, ShardWrite), GroupError> {
        let mut shard = self.group_shard(group_id, now);
        let Some(g) = shard.groups.get(group_id) else {
            return Err(GroupError::GroupIdNotFound);
        };
        let subscribed = if g.state == GroupState::Empty && !g.has_consumer_members() {
            Default::default()
        } else {
            match g.subscribed_topics() {
                Some(s) => s,
                None => return Err(GroupError::NonEmptyGroup),
            }
        };
        let mut entries = Vec::new();
        let mut result = Vec::new();
        for (t, parts) in topics {
            let mut rows = Vec::new();
            for p in parts {
                if subscribed.contains(&t) {
                    rows.push((p, Some(GroupError::GroupSubscribedToTopic)));
                } else {
                    if g.offsets.contains_key(&(t.clone(), p)) {
                        entries.push(Entry::Offset {
                            group: group_id.to_string(),
                            topic: t.clone(),
                            partition: p,
                            value: None,
                        });
                    }
                    rows.push((p, None));
                }
            }
            result.push((t, rows));
        }
        let wait = shard.append(&entries, now).map_err(|e| {
            tracing::error!(group = group_id, "offset delete failed: {e}");
            GroupError::WriteFailed
        })?;
        if let Some(g) = shard.groups.get_mut(group_id) {
            for e in entries {
                if let Entry::Offset { topic, partition, .. } = e {
                    g.offsets.remove(&(topic, partition));
                }
            }
        }
        Ok((result, wait))
    }

    /// DeleteGroups for one group.
    pub fn delete_group(&self, group_id: &str, now: i64) -> Result<ShardWrite, GroupError> {
        let mut shard = self.group_shard(group_id, now);
        let Some(g) = shard.groups.get_mut(group_id) else {
            return Err(GroupError::GroupIdNotFound);
        };
        if !g.pending_members.is_empty() {
            return Err(GroupError::NonEmptyGroup);
        }
        g.mark_dead(now)?;
        let mut entries: Vec<Entry> = g
            .offsets
            .keys()
            .map(|(t, p)| Entry::Offset { group: group_id.to_string(), topic: t.clone(), partition: *p, value: None })
            .collect();
        entries.push(Entry::Group(group_id.to_string(), None));
        shard.groups.remove(group_id);
        shard.append(&entries, now).map_err(|e| {
            tracing::error!(group = group_id, "group delete failed: {e}");
            GroupError::WriteFailed
        })
    }

    /// Group `group_id`'s shard, with the group's timers that are due by `now` run first (session
    /// expiry, lapsed pending members, a join or sync phase past its deadline), as the background
    /// timer would run them: a request sees the group as Kafka's coordinator, whose timers fire
    /// on time, would — not a member whose session ended a moment ago (librdkafka's 0081 deletes
    /// a group exactly one session timeout after closing its static members).
    fn group_shard(&self, group_id: &str, now: i64) -> MutexGuard<'_, Shard> {
        let mut shard = self.shard(group_id);
        self.run_due_timers(&mut shard, group_id, now);
        shard
    }

    /// Run group `group_id`'s timers that are due by `now` (see [`GroupCoordinator::group_shard`]).
    fn run_due_timers(&self, shard: &mut Shard, group_id: &str, now: i64) {
        let Some(g) = shard.groups.get_mut(group_id) else { return };
        let before = g.rebalances;
        let effects = g.tick(now, &self.settings.group);
        count_rebalances(before, g.rebalances);
        if effects.is_empty() {
            return;
        }
        let d = shard.apply(group_id, effects, now);
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn(d.finish());
            }
            // no runtime (blocking test code): parked requests see their answer dropped
            Err(_) => drop(d),
        }
    }

    /// A copy of one group (DescribeGroups).
    pub fn describe(&self, group_id: &str) -> Option<Group> {
        self.shard(group_id).groups.get(group_id).cloned()
    }

    /// (group id, protocol type, state name, group type) of every group.
    pub fn list(&self) -> Vec<(String, String, &'static str, &'static str)> {
        let mut out = Vec::new();
        for shard in self.shards() {
            for g in shard.groups.values() {
                let (state, kind) = g.state_and_type();
                out.push((g.id.clone(), g.protocol_type.clone().unwrap_or_default(), state, kind));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// The earliest moment [`GroupCoordinator::tick`] has work, over every loaded group.
    pub fn next_deadline(&self) -> Option<i64> {
        self.shards()
            .filter(|s| s.state.is_active())
            .filter_map(|s| {
                s.groups
                    .values()
                    .filter_map(|g| {
                        let consumer_timeout = i64::from(self.consumer_session_timeout_ms(&g.id));
                        let consumer = g.consumer.as_ref().and_then(|c| c.next_deadline(consumer_timeout));
                        [g.next_deadline(), consumer].into_iter().flatten().min()
                    })
                    .min()
            })
            .min()
    }

    /// Timers of every group, run when [`GroupCoordinator::next_deadline`] is due (and at
    /// least every 100 ms, to pick up deadlines set since): returns the answers to deliver.
    pub fn tick(&self, now: i64) -> Vec<Deliveries> {
        let mut out = Vec::new();
        for mut shard in self.shards() {
            if !shard.state.is_active() {
                continue;
            }
            let ids: Vec<String> = shard.groups.keys().cloned().collect();
            for id in ids {
                let Some(g) = shard.groups.get_mut(&id) else { continue };
                let consumer_timeout = i64::from(self.consumer_session_timeout_ms(&id));
                if let Some(c) = g.consumer.as_mut() {
                    let gone = c.tick(now, consumer_timeout);
                    if gone > 0 {
                        tracing::info!(group = %id, gone, "consumer-protocol members expired");
                    }
                }
                let before = g.rebalances;
                let effects = g.tick(now, &self.settings.group);
                count_rebalances(before, g.rebalances);
                if !effects.is_empty() {
                    out.push(shard.apply(&id, effects, now));
                }
            }
        }
        out
    }

    /// Periodic housekeeping: expire offsets of groups empty for `offsets.retention.ms`, drop
    /// empty groups without offsets, compact shards. Blocking.
    pub fn maintain(&self, now: i64) {
        let retention = self.settings.retention_ms;
        for mut shard in self.shards() {
            if !shard.state.is_active() {
                continue;
            }
            let mut entries = Vec::new();
            let mut dead = Vec::new();
            for g in shard.groups.values_mut() {
                if g.state != GroupState::Empty || !g.pending_members.is_empty() || g.has_consumer_members() {
                    continue;
                }
                if retention >= 0 {
                    let since = g.state_since_ms;
                    let expired: Vec<(String, i32)> = g
                        .offsets
                        .iter()
                        .filter(|(_, o)| now - o.commit_ms.max(since) > retention)
                        .map(|(k, _)| k.clone())
                        .collect();
                    for (t, p) in expired {
                        g.offsets.remove(&(t.clone(), p));
                        entries.push(Entry::Offset { group: g.id.clone(), topic: t, partition: p, value: None });
                    }
                }
                if g.offsets.is_empty() && g.mark_dead(now).is_ok() {
                    entries.push(Entry::Group(g.id.clone(), None));
                    dead.push(g.id.clone());
                }
            }
            for id in dead {
                shard.groups.remove(&id);
            }
            if !entries.is_empty() {
                match shard.append_log(&entries, now) {
                    // replicated: the commit is not awaited under the shard's lock (applying it
                    // takes that lock); a lost expiry is redone next time
                    Ok(LogWait::Local(Some((f, end)))) => {
                        if let Err(e) = f.sync_to(end) {
                            tracing::error!(shard = shard.index, "offsets log fsync failed: {e}");
                            shard.roll_back(now);
                            continue;
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::error!(shard = shard.index, "offset expiry failed: {e}");
                        shard.roll_back(now);
                        continue;
                    }
                }
            }
            match shard.compact(now) {
                Ok(true) => tracing::info!(shard = shard.index, live = shard.live_keys(), "compacted offsets log"),
                Ok(false) => {}
                Err(e) => tracing::error!(shard = shard.index, "offsets log compaction failed: {e}"),
            }
        }
    }

    /// Record group gauges (count by state).
    pub fn record_gauges(&self) {
        let mut counts: HashMap<&'static str, usize> = HashMap::new();
        for s in
            [GroupState::Empty, GroupState::PreparingRebalance, GroupState::CompletingRebalance, GroupState::Stable]
        {
            counts.insert(s.name(), 0);
        }
        for shard in self.shards() {
            for g in shard.groups.values() {
                *counts.entry(g.state.name()).or_default() += 1;
            }
        }
        for (state, n) in counts {
            ::metrics::gauge!(crate::metrics::GROUPS, "state" => state).set(n as f64);
        }
    }

    /// Flush and close the logs (clean shutdown).
    pub fn close(&self) {
        for mut shard in self.shards() {
            if let Err(e) = shard.log.close() {
                tracing::error!(shard = shard.index, "closing offsets log failed: {e}");
            }
        }
    }
}

fn count_rebalances(before: u64, after: u64) {
    if after > before {
        ::metrics::counter!(crate::metrics::GROUP_REBALANCES_TOTAL).increment(after - before);
    }
}

/// Wait for an offsets-log write (a local fsync on a blocking thread, or a Raft commit); a
/// failure rolls its shard back.
pub async fn wait_durable(wait: ShardWrite) -> Result<(), StorageError> {
    wait.wait().await
}

/// Member metadata as bytes for responses.
pub fn bytes(v: &[u8]) -> Bytes {
    Bytes::copy_from_slice(v)
}

/// The offsets log's shards on the shared coordinator runtime (cluster mode).
impl crate::coordinator::ShardOwner for GroupCoordinator {
    fn topic(&self) -> &'static str {
        OFFSETS_TOPIC
    }

    fn shard_count(&self) -> usize {
        self.shards.len()
    }

    fn replication_factor(&self) -> i32 {
        self.settings.replication_factor
    }

    fn with_log(&self, shard: usize, f: &mut dyn FnMut(&mut crate::kvlog::KvLog)) -> bool {
        let Some(s) = self.shards.get(shard) else { return false };
        f(&mut s.lock().or_die().log);
        true
    }

    fn replicated(&self) -> bool {
        self.replication.get().is_some()
    }

    fn state(&self, shard: usize) -> ShardState {
        self.shards.get(shard).map_or(ShardState::Unloaded, |s| s.lock().or_die().state)
    }

    fn load(self: Arc<Self>, shard: usize, _epoch: Option<i32>) {
        if let Some(s) = self.shards.get(shard) {
            s.lock().or_die().reload(crate::clock::now_ms());
        }
    }

    fn unload(&self, shard: usize, to: ShardState) {
        if let Some(s) = self.shards.get(shard) {
            let mut s = s.lock().or_die();
            if s.state.is_active() && to == ShardState::Unloaded {
                tracing::info!(shard, "no longer leading offsets-log partition");
            }
            s.drop_state(to);
        }
    }
}

/// Replicated (cluster mode, replication factor > 1): each offsets-log partition is a Raft
/// group and its leader coordinates the partition's groups.
impl crate::routing::ShardPlacement for GroupCoordinator {
    fn replicated(&self) -> bool {
        self.replication.get().is_some()
    }

    /// The broker leading shard `shard`'s group, as this broker knows it.
    fn shard_leader(&self, shard: i32) -> Option<i32> {
        self.replication.get()?.leader(shard)
    }

    fn shard_failed(&self, shard: i32) -> bool {
        crate::coordinator::shard_failed(&self.shards, shard, |s| s.state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::coordinators::GroupSettings;

    fn settings() -> CoordinatorSettings {
        CoordinatorSettings {
            group: GroupSettings { initial_rebalance_delay_ms: 0, ..Default::default() },
            partitions: 3,
            segment_bytes: 16 * 1024,
            ..Default::default()
        }
    }

    fn commit(c: &GroupCoordinator, group: &str, partition: i32, offset: i64, now: i64) {
        let o =
            OffsetToCommit { topic: "t".into(), partition, offset, leader_epoch: 0, metadata: format!("m{offset}") };
        let wait = c.commit_offsets(group, "", None, -1, vec![o], now).unwrap();
        assert!(!wait.is_none());
        wait.wait_blocking().unwrap();
    }

    /// A write whose outcome is unknown (here: lost before it reached the disk) rolls its shard
    /// back: the offset committed in memory before the write was durable is gone again, and the
    /// shard serves what its log holds.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_write_that_fails_rolls_its_shard_back_to_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let c = GroupCoordinator::open(dir.path(), &LogConfig::default(), settings()).unwrap();
        commit(&c, "g", 0, 5, 1);
        let i = c.partition_for("g") as usize;
        c.shards[i].lock().or_die().log.drop_appends = true;
        let o = OffsetToCommit { topic: "t".into(), partition: 0, offset: 9, leader_epoch: 0, metadata: String::new() };
        let write = c.commit_offsets("g", "", None, -1, vec![o], 2).unwrap();
        assert_eq!(offsets(&c, "g"), vec![(0, 9)], "in memory before it is durable");
        drop(write);
        c.shards[i].lock().or_die().log.drop_appends = false;
        let owner: Weak<dyn ShardOwner> = Arc::downgrade(&c) as Weak<GroupCoordinator>;
        assert!(ShardWrite::lost(owner, i).wait().await.is_err());
        assert_eq!(offsets(&c, "g"), vec![(0, 5)], "rolled back to what the log holds");
        assert_eq!(c.state(i), ShardState::Active, "reloaded at once on one node");
    }

    /// A static member that closes without leaving (KIP-345) is gone once its session timeout
    /// has passed since its last heartbeat or commit — at that very millisecond, as with Kafka,
    /// whether or not the background timer has run yet: DeleteGroups then succeeds (librdkafka's
    /// 0081 deletes such groups exactly one session timeout after closing their consumers).
    #[tokio::test(flavor = "multi_thread")]
    async fn a_group_whose_last_session_just_ended_can_be_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let c = GroupCoordinator::open(dir.path(), &LogConfig::default(), settings()).unwrap();
        let args = JoinArgs {
            member_id: String::new(),
            instance_id: Some("static-1".into()),
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), vec![0])],
            session_timeout_ms: 6_000,
            rebalance_timeout_ms: 10_000,
            client_id: "c".into(),
            client_host: "h".into(),
            require_known_member_id: false,
            new_member_id: "m-1".into(),
        };
        let (mut rx, d) = c.join("g", args, 0);
        assert!(d.finish().await);
        assert_eq!(rx.try_recv().unwrap().generation, 1);
        let sync = SyncArgs {
            member_id: "m-1",
            instance_id: Some("static-1"),
            generation: 1,
            protocol_type: None,
            protocol: None,
            assignments: vec![("m-1".into(), vec![1])],
        };
        let (mut rx, d) = c.sync("g", sync, 10);
        assert!(d.finish().await);
        assert_eq!(rx.try_recv().unwrap().error, None);
        // the consumer's last act: a commit on close (it refreshes the session), then no leave
        let o = OffsetToCommit { topic: "t".into(), partition: 0, offset: 3, leader_epoch: 0, metadata: String::new() };
        c.commit_offsets("g", "m-1", Some("static-1"), 1, vec![o], 1_000).unwrap().wait().await.unwrap();
        assert!(matches!(c.delete_group("g", 6_999), Err(GroupError::NonEmptyGroup)), "still in its session");
        let deleted = c.delete_group("g", 7_000).expect("the session ended at 7000");
        deleted.wait().await.unwrap();
        assert!(c.describe("g").is_none());
    }

    fn offsets(c: &GroupCoordinator, group: &str) -> Vec<(i32, i64)> {
        c.fetch_offsets(group, None)
            .expect("loaded")
            .into_iter()
            .flat_map(|(_, rows)| rows.into_iter().map(|(p, o)| (p, o.map(|o| o.offset).unwrap_or(-1))))
            .collect()
    }

    #[test]
    fn offsets_and_groups_survive_reopen_and_compaction_bounds_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let base = LogConfig::default();
        {
            let c = GroupCoordinator::open(dir.path(), &base, settings()).unwrap();
            // a stable group with one member and an assignment
            let args = JoinArgs {
                member_id: String::new(),
                instance_id: None,
                protocol_type: "consumer".into(),
                protocols: vec![("range".into(), vec![0, 1])],
                session_timeout_ms: 10_000,
                rebalance_timeout_ms: 10_000,
                client_id: "c".into(),
                client_host: "h".into(),
                require_known_member_id: false,
                new_member_id: "m-1".into(),
            };
            let (mut rx, d) = c.join("members", args, 0);
            assert!(d.finish_blocking());
            let r = rx.try_recv().unwrap();
            assert_eq!(r.generation, 1);
            let (mut rx, d) = c.sync(
                "members",
                SyncArgs {
                    member_id: "m-1",
                    instance_id: None,
                    generation: 1,
                    protocol_type: None,
                    protocol: None,
                    assignments: vec![("m-1".into(), vec![5, 5])],
                },
                1,
            );
            assert!(d.finish_blocking());
            assert_eq!(rx.try_recv().unwrap().assignment, vec![5, 5]);
            // many commits to few keys: the log grows far beyond the live state
            for i in 0..3000 {
                commit(&c, "simple", (i % 4) as i32, i, 10 + i);
            }
            commit(&c, "gone", 0, 1, 5000);
            assert!(!c.delete_group("gone", 5001).unwrap().is_none());
            let shard = c.partition_for("simple") as usize;
            let (_, before) = c.shards[shard].lock().unwrap().log.log_start_and_segments().unwrap();
            c.maintain(6000);
            let (start, after) = c.shards[shard].lock().unwrap().log.log_start_and_segments().unwrap();
            assert!(start > 0, "compaction moved the log start");
            assert!(after < before, "whole segments behind the log start were deleted");
            // more commits after compaction, then an unclean stop (no close)
            commit(&c, "simple", 1, 7777, 7000);
        }
        let c = GroupCoordinator::open(dir.path(), &base, settings()).unwrap();
        assert_eq!(offsets(&c, "simple"), vec![(0, 2996), (1, 7777), (2, 2998), (3, 2999)]);
        assert!(c.describe("gone").is_none(), "a deleted group stays deleted");
        let g = c.describe("members").unwrap();
        assert_eq!(g.state, GroupState::Stable);
        assert_eq!(g.generation, 1);
        assert_eq!(g.members["m-1"].assignment, vec![5, 5]);
        // the reloaded member keeps heartbeating with its generation
        assert_eq!(c.heartbeat("members", "m-1", None, 1, 100), Ok(()));
        // and a zombie with an older generation is refused
        assert_eq!(c.heartbeat("members", "m-1", None, 0, 100), Err(GroupError::IllegalGeneration));
    }

    #[test]
    fn the_partition_count_is_fixed_at_first_use() {
        let dir = tempfile::tempdir().unwrap();
        let base = LogConfig::default();
        {
            let c = GroupCoordinator::open(dir.path(), &base, settings()).unwrap();
            commit(&c, "g", 0, 42, 1);
        }
        let more = CoordinatorSettings { partitions: 7, ..settings() };
        let c = GroupCoordinator::open(dir.path(), &base, more).unwrap();
        assert_eq!(c.settings.partitions, 3);
        assert_eq!(offsets(&c, "g"), vec![(0, 42)]);
    }
}
