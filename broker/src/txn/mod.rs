//! The transaction coordinator. A transactional id belongs to one partition of the internal
//! transaction-state log (`__transaction_state-<n>`, Java hash of the id mod
//! `transaction.state.log.num.partitions`, as Kafka); each partition is a shard: its key/value
//! log and the metadata of its ids, behind one mutex.
//!
//! Every transition the pure machine (`machine.rs`) decides is appended to the shard's log and
//! fsynced before it is acted on; a transition that ends a transaction (PrepareCommit /
//! PrepareAbort) is followed by the markers — a COMMIT/ABORT control batch on every partition of
//! the transaction and the group coordinator's completion of its pending offsets, each retried
//! until durable — and only then by the logged completion. After a restart, transactions found
//! in PrepareCommit/PrepareAbort are completed the same way (`recover`).

pub mod error;
pub mod machine;
pub mod markers;

use crate::config::coordinators::TxnSettings;
use crate::kvlog::KvLog;
use crate::routing::shard_for;
use crate::sync::OrDie as _;
use crate::txn::error::TxnError;
use bytes::Bytes;
use machine::{Decision, Markers, TxnLimits, TxnMetadata, TxnState};
use markers::{Marker, MarkerDone, MarkerWriter};
use sluice_storage::{LogConfig, StorageError};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

pub use crate::topics::TXN_TOPIC;
const META_FILE: &str = "__transaction_state.json";

struct Shard {
    log: KvLog,
    txns: HashMap<String, TxnMetadata>,
    /// Where the shard is: `Active` once loaded (on one node from the start; replicated, while
    /// this broker leads its Raft group), `Failed` after a write it cannot vouch for (reloaded).
    state: ShardState,
    /// Replicated: the Raft term this broker leads the shard in — the coordinator epoch its
    /// markers carry (rises with every new leader, so a deposed one is fenced).
    epoch: i32,
    /// Sluice's liveness: when each heartbeating producer's last heartbeat arrived here (memory
    /// only; a coordinator that takes over grants a full grace period from its first check).
    heartbeats: HashMap<String, i64>,
}

/// What to wait on before acting on a logged transition.
use crate::coordinator::{ShardOwner, ShardState, ShardWrite as TxnWait};
use crate::kvlog::LogWait;

/// How long a marker is retried before the coordinator says so (then every 30 s).
const STILL_RETRYING: Duration = Duration::from_secs(10);

async fn wait_logged(w: TxnWait) -> Result<(), ()> {
    w.wait().await.map_err(|e| tracing::warn!("transaction log write: {e}"))
}

fn key(id: &str) -> Bytes {
    Bytes::from(serde_json::json!({ "txn": id }).to_string())
}

fn encode(id: &str, m: Option<&TxnMetadata>) -> (Bytes, Option<Bytes>) {
    (key(id), m.map(|m| Bytes::from(serde_json::to_vec(m).unwrap_or_default())))
}

fn decode(k: &[u8], v: Option<&[u8]>) -> Option<(String, Option<TxnMetadata>)> {
    let k: serde_json::Value = serde_json::from_slice(k).ok()?;
    let id = k.get("txn")?.as_str()?.to_string();
    match v {
        None => Some((id, None)),
        Some(v) => Some((id, Some(serde_json::from_slice(v).ok()?))),
    }
}

pub struct TxnCoordinator {
    pub settings: TxnSettings,
    /// Written into every marker; one more at every start of this broker (a single node is the
    /// coordinator of every id; with a cluster it becomes the partition leader's epoch).
    pub coordinator_epoch: i32,
    shards: Vec<Mutex<Shard>>,
    /// Cluster mode with `transaction.state.log.replication.factor` > 1: each shard's log is
    /// replicated by a Raft group; the shard's coordinator is that group's leader.
    replication: std::sync::OnceLock<crate::coordinator::ShardReplicas>,
    /// The log will be replicated (set at start; replication begins once the quorum is up).
    will_replicate: bool,
    /// Where markers go (wired by the composition root).
    markers: std::sync::OnceLock<Arc<dyn MarkerWriter>>,
    /// This coordinator, which a failed write rolls back (`coordinator::ShardWrite`).
    me: std::sync::OnceLock<Weak<TxnCoordinator>>,
}

/// What a request's decision led to.
pub enum Outcome {
    /// Success with this (current) metadata.
    Done(TxnMetadata),
    Refused(TxnError),
}

impl TxnCoordinator {
    /// Open (and replay) every shard's log under `data_dir`; `will_replicate`: cluster mode
    /// with a replicated log ([`TxnCoordinator::will_replicate`]).
    pub fn open(
        data_dir: &Path,
        base: &LogConfig,
        mut settings: TxnSettings,
        will_replicate: bool,
    ) -> anyhow::Result<Arc<Self>> {
        let meta_path = data_dir.join(META_FILE);
        let mut coordinator_epoch = 0;
        match std::fs::read(&meta_path) {
            Ok(b) => {
                let v: serde_json::Value = serde_json::from_slice(&b)
                    .map_err(|e| anyhow::anyhow!("{} is unreadable ({e}); refusing to start", meta_path.display()))?;
                let stored = v.get("partitions").and_then(|p| p.as_i64()).unwrap_or(0) as i32;
                if stored < 1 {
                    anyhow::bail!("{} holds no valid partition count; refusing to start", meta_path.display());
                }
                if stored != settings.partitions {
                    tracing::warn!(stored, "transaction.state.log.num.partitions cannot change after first use");
                    settings.partitions = stored;
                }
                coordinator_epoch = v.get("coordinator_epoch").and_then(|p| p.as_i64()).unwrap_or(0) as i32 + 1;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        let body = serde_json::json!({ "partitions": settings.partitions, "coordinator_epoch": coordinator_epoch });
        sluice_storage::sidefile::write_atomic(&meta_path, body.to_string().as_bytes())?;
        let mut shards = Vec::new();
        for i in 0..settings.partitions {
            let mut shard = Shard {
                log: KvLog::new(data_dir.join(format!("{TXN_TOPIC}-{i}")), base, settings.segment_bytes),
                txns: HashMap::new(),
                state: ShardState::Active,
                epoch: coordinator_epoch,
                heartbeats: HashMap::new(),
            };
            // a log that cannot be read (damaged data: decision 0036) fails its shard, not the
            // broker: its transactional ids get NOT_COORDINATOR, every other shard serves, and
            // nothing is forgotten (an empty state would let producer epochs go back)
            let records = match shard.log.read_all() {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!(shard = i, "transaction-log shard {i} is offline: cannot load it: {e}");
                    shard.state = ShardState::Failed;
                    Vec::new()
                }
            };
            for (k, v) in records {
                match decode(&k, v.as_deref()) {
                    Some((id, Some(m))) => {
                        shard.txns.insert(id, m);
                    }
                    Some((id, None)) => {
                        shard.txns.remove(&id);
                    }
                    None => tracing::warn!(shard = i, "skipping unreadable transaction-log record"),
                }
            }
            shards.push(Mutex::new(shard));
        }
        let c = Arc::new(TxnCoordinator {
            settings,
            coordinator_epoch,
            shards,
            replication: std::sync::OnceLock::new(),
            will_replicate,
            markers: std::sync::OnceLock::new(),
            me: std::sync::OnceLock::new(),
        });
        let _ = c.me.set(Arc::downgrade(&c));
        Ok(c)
    }

    fn shard_index(&self, id: &str) -> usize {
        (shard_for(id, self.settings.partitions) as usize).min(self.shards.len() - 1)
    }

    fn shard(&self, id: &str) -> MutexGuard<'_, Shard> {
        self.shard_at(self.shard_index(id))
    }

    fn shard_at(&self, i: usize) -> MutexGuard<'_, Shard> {
        self.shards[i].lock().or_die()
    }

    /// The coordinator epoch markers for `id` carry.
    pub fn epoch_for(&self, id: &str) -> i32 {
        if self.replication.get().is_some() {
            self.shard(id).epoch
        } else {
            self.coordinator_epoch
        }
    }

    /// Log records for shard `i` (under its lock): appended locally, or proposed to the shard's
    /// Raft group — the caller waits on the result outside the lock.
    fn log_write(
        &self,
        i: usize,
        shard: &mut Shard,
        records: &[crate::kvlog::KvRecord],
        now: i64,
    ) -> Result<TxnWait, TxnError> {
        let owner: Weak<dyn ShardOwner> = self.me.get().cloned().unwrap_or_default();
        let Some(r) = self.replication.get() else {
            return shard.log.append(records, now).map(|d| TxnWait::new(LogWait::Local(d), owner, i)).map_err(|e| {
                tracing::error!(shard = i, "transaction log append failed: {e}");
                TxnError::WriteFailed
            });
        };
        if !shard.state.is_active() {
            return Err(TxnError::NotCoordinator);
        }
        let group = r.replica(i).ok_or(TxnError::NotCoordinator)?;
        let records = records
            .iter()
            .map(|(k, v)| crate::replication::types::KvEntry { key: k.to_vec(), value: v.as_ref().map(|v| v.to_vec()) })
            .collect();
        group
            .propose(crate::replication::types::ShardCommand::Kv { records, now_ms: now })
            .map(|w| TxnWait::new(LogWait::Raft(w), owner, i))
            .map_err(|_| TxnError::NotCoordinator)
    }

    /// Replicated: this broker now leads shard `i` in `term`, with every earlier entry applied:
    /// load its state from the log. Returns the ids whose transactions await their markers.
    fn load_shard(&self, i: usize, term: i32) -> Vec<String> {
        let mut shard = self.shard_at(i);
        let records = match shard.log.read_all() {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(shard = i, "cannot load the transaction log: {e}");
                return Vec::new();
            }
        };
        shard.txns.clear();
        shard.heartbeats.clear();
        for (k, v) in records {
            match decode(&k, v.as_deref()) {
                Some((id, Some(m))) => {
                    shard.txns.insert(id, m);
                }
                Some((id, None)) => {
                    shard.txns.remove(&id);
                }
                None => {}
            }
        }
        shard.state = ShardState::Active;
        shard.epoch = term;
        tracing::info!(shard = i, term, ids = shard.txns.len(), "leading transaction-log partition");
        shard
            .txns
            .iter()
            .filter(|(_, m)| matches!(m.state, TxnState::PrepareCommit | TxnState::PrepareAbort))
            .map(|(id, _)| id.clone())
            .collect()
    }

    fn unload_shard(&self, i: usize, to: ShardState) {
        let mut shard = self.shard_at(i);
        if shard.state.is_active() && to == ShardState::Unloaded {
            tracing::info!(shard = i, "no longer leading transaction-log partition");
        }
        shard.state = to;
        shard.txns.clear();
        shard.heartbeats.clear();
    }

    pub fn limits(&self) -> TxnLimits {
        TxnLimits { max_timeout_ms: self.settings.max_timeout_ms, two_phase_commit: self.settings.two_phase_commit }
    }

    /// Crash here if the failpoint is armed (crash tests only).
    fn failpoint(&self, point: crate::failpoints::Failpoint) {
        if crate::failpoints::armed(point) {
            tracing::error!("failpoint {}: crashing", point.name());
            std::process::abort();
        }
    }

    pub fn get(&self, id: &str) -> Option<TxnMetadata> {
        let shard = self.shard(id);
        if !shard.state.is_active() {
            return None;
        }
        shard.txns.get(id).cloned()
    }

    /// Every id with its metadata (ListTransactions).
    pub fn all(&self) -> Vec<(String, TxnMetadata)> {
        let mut out: Vec<(String, TxnMetadata)> = self
            .shards
            .iter()
            .flat_map(|s| {
                let s = s.lock().or_die();
                if !s.state.is_active() {
                    return Vec::new();
                }
                s.txns.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<Vec<_>>()
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// KIP-890 part 1: may `pid`/`epoch` write a transactional batch to this partition? Only
    /// with the coordinator's current epoch (PRODUCER_FENCED otherwise; the produce path answers
    /// INVALID_PRODUCER_EPOCH, as Kafka's `AddPartitionsToTxnManager`), while its transaction is
    /// Ongoing and holds the partition. Called under the partition's producer-state lock on a
    /// single node, so a marker cannot slip in between.
    pub fn verify_partition(
        &self,
        id: &str,
        pid: i64,
        epoch: i16,
        topic: &str,
        partition: i32,
    ) -> Result<(), TxnError> {
        let shard = self.shard(id);
        if !shard.state.is_active() {
            return Err(TxnError::NotCoordinator);
        }
        let Some(m) = shard.txns.get(id) else { return Err(TxnError::InvalidProducerIdMapping) };
        if m.producer_id != pid {
            return Err(TxnError::InvalidProducerIdMapping);
        }
        // equal, as Kafka's `handleVerifyPartitionsInTransaction`: a batch with a *higher* epoch
        // than the coordinator's would make the partition refuse this transaction's marker
        if epoch != m.producer_epoch {
            return Err(TxnError::ProducerFenced);
        }
        if matches!(m.state, TxnState::PrepareCommit | TxnState::PrepareAbort) {
            return Err(TxnError::ConcurrentTransactions);
        }
        if m.state != TxnState::Ongoing || !m.partitions.contains(&(topic.to_string(), partition)) {
            return Err(TxnError::InvalidTxnState);
        }
        Ok(())
    }

    /// Sluice's liveness: a heartbeat from `id`'s current producer instance.
    pub fn heartbeat(&self, id: &str, pid: i64, epoch: i16) -> Result<(), TxnError> {
        let mut shard = self.shard(id);
        if !shard.state.is_active() {
            return Err(TxnError::NotCoordinator);
        }
        machine::heartbeat_allowed(shard.txns.get(id), pid, epoch)?;
        shard.heartbeats.insert(id.to_string(), crate::clock::now_ms());
        Ok(())
    }

    /// Add partitions (and/or a group) to `id`'s transaction and wait until that is durable:
    /// the implicit add of transaction version 2 (Produce v12, TxnOffsetCommit v5).
    pub async fn add_durably(
        &self,
        id: &str,
        pid: i64,
        epoch: i16,
        parts: &[(String, i32)],
        group: Option<&str>,
    ) -> Result<(), TxnError> {
        let now = crate::clock::now_ms();
        let (d, durable) = self.decide(id, |m| machine::add_to_txn(m, pid, epoch, parts, group, now), now)?;
        wait_logged(durable).await.map_err(|_| TxnError::WriteFailed)?;
        match d {
            Decision::Refuse(e) => Err(e),
            Decision::Unchanged | Decision::Apply(_) => Ok(()),
        }
    }

    /// Decide under the shard lock; log the transition (the caller awaits its durability).
    fn decide(
        &self,
        id: &str,
        f: impl FnOnce(Option<&TxnMetadata>) -> Decision,
        now: i64,
    ) -> Result<(Decision, TxnWait), TxnError> {
        let i = self.shard_index(id);
        let mut shard = self.shard_at(i);
        if !shard.state.is_active() {
            return Err(TxnError::NotCoordinator);
        }
        let d = f(shard.txns.get(id));
        let durable = match &d {
            Decision::Apply(t) => {
                if t.markers.is_some() {
                    self.failpoint(crate::failpoints::Failpoint::TxnBeforePrepare);
                }
                let wait = self.log_write(i, &mut shard, &[encode(id, Some(&t.next))], now)?;
                shard.txns.insert(id.to_string(), t.next.clone());
                wait
            }
            _ => TxnWait::none(),
        };
        Ok((d, durable))
    }

    /// Wire the coordinator's port to the partitions and groups (the composition root does).
    pub fn set_markers(&self, markers: Arc<dyn MarkerWriter>) {
        if self.markers.set(markers).is_err() {
            tracing::error!("the transaction coordinator's marker writer was wired twice; keeping the first");
        }
    }

    /// Run a request end to end: decide, log, write markers, log completion.
    pub async fn run(self: &Arc<Self>, id: &str, f: impl FnOnce(Option<&TxnMetadata>) -> Decision) -> Outcome {
        let now = crate::clock::now_ms();
        let (d, durable) = match self.decide(id, f, now) {
            Ok(x) => x,
            Err(e) => return Outcome::Refused(e),
        };
        if wait_logged(durable).await.is_err() {
            // the write may still commit later (replicated) or be in the log after all; the
            // in-memory state no longer follows the log, so the shard was rolled back: reloaded
            // from the log (replicated: once it is applied), which finishes whatever it finds
            // decided
            return Outcome::Refused(TxnError::WriteFailed);
        }
        match d {
            Decision::Refuse(e) => Outcome::Refused(e),
            Decision::Unchanged => match self.get(id) {
                Some(m) => Outcome::Done(m),
                None => Outcome::Refused(TxnError::InvalidProducerIdMapping),
            },
            Decision::Apply(t) => {
                let mut last = t.next.clone();
                if let Some(markers) = t.markers {
                    self.failpoint(crate::failpoints::Failpoint::TxnAfterPrepare);
                    // the completion must happen even if the client goes away
                    let me = self.clone();
                    let owned = id.to_string();
                    match tokio::spawn(async move { me.complete(&owned, markers).await }).await {
                        Ok(Ok(m)) => last = m,
                        _ => return Outcome::Refused(TxnError::WriteFailed),
                    }
                }
                match t.reply_error {
                    Some(e) => Outcome::Refused(e),
                    None => Outcome::Done(last),
                }
            }
        }
    }

    /// Timers: abort transactions open past their timeout; forget expired ids.
    pub async fn check_timeouts(self: &Arc<Self>) {
        let now = crate::clock::now_ms();
        let mut due = Vec::new();
        let mut waits = Vec::new();
        for (i, s) in self.shards.iter().enumerate() {
            let mut s = s.lock().or_die();
            if !s.state.is_active() {
                continue;
            }
            let expired: Vec<String> = s
                .txns
                .iter()
                .filter(|(_, m)| machine::expired(m, now, self.settings.id_expiration_ms))
                .map(|(k, _)| k.clone())
                .collect();
            for id in expired {
                if let Ok(w) = self.log_write(i, &mut s, &[encode(&id, None)], now) {
                    s.txns.remove(&id);
                    s.heartbeats.remove(&id);
                    waits.push(w);
                    tracing::info!(txn = %id, "transactional id expired");
                }
            }
            let missed = self.settings.missed_heartbeats;
            let mut first_heard = Vec::new();
            for (id, m) in &s.txns {
                let heartbeat = (m.heartbeat_interval_ms > 0 && m.state == TxnState::Ongoing).then(|| {
                    // a coordinator that has not heard from the producer yet starts counting now
                    let last = s.heartbeats.get(id).copied();
                    if last.is_none() {
                        first_heard.push(id.clone());
                    }
                    (last.unwrap_or(now), missed)
                });
                if machine::timeout(m, now, heartbeat).is_some() {
                    due.push((id.clone(), heartbeat));
                }
            }
            for id in first_heard {
                s.heartbeats.insert(id, now);
            }
        }
        for w in waits {
            let _ = wait_logged(w).await;
        }
        for (id, heartbeat) in due {
            tracing::info!(txn = %id, "aborting a transaction open past its timeout or whose producer stopped heartbeating");
            let now = crate::clock::now_ms();
            let outcome = self
                .run(&id, |m| match m {
                    Some(m) => machine::timeout(m, now, heartbeat).unwrap_or(Decision::Unchanged),
                    None => Decision::Unchanged,
                })
                .await;
            if let Outcome::Refused(e) = outcome {
                tracing::warn!(txn = %id, "timeout abort failed: {e:?}");
            }
        }
    }

    /// Bound every shard's log (Kafka compacts `__transaction_state`): once it holds more than
    /// twice the records its ids need, keep only each id's newest record. Every replica of a
    /// replicated shard does this to its own copy, leader or not. Blocking.
    pub fn compact_logs(&self, now: i64) {
        for (i, s) in self.shards.iter().enumerate() {
            let mut s = s.lock().or_die();
            match s.log.compact_folding(now) {
                Ok(Some(live)) => tracing::info!(shard = i, live, "compacted transaction log"),
                Ok(None) => {}
                Err(e) => tracing::error!(shard = i, "transaction log compaction failed: {e}"),
            }
        }
    }

    /// After a restart: finish every transaction whose decision was logged but whose markers
    /// may not all be written. (Replicated: done per shard when this broker starts leading it.)
    pub async fn recover(self: &Arc<Self>) {
        if self.will_replicate {
            return;
        }
        let pending: Vec<(String, TxnMetadata)> = self
            .all()
            .into_iter()
            .filter(|(_, m)| matches!(m.state, TxnState::PrepareCommit | TxnState::PrepareAbort))
            .collect();
        for (id, m) in pending {
            self.recover_one(&id, m).await;
        }
    }

    /// Cluster mode with a replicated transaction log?
    pub fn will_replicate(config: &crate::config::Config) -> bool {
        config.voters.len() >= 2 && config.txns.replication_factor >= 2
    }

    /// Replicate the transaction log (cluster mode): one Raft group per shard over
    /// `min(transaction.state.log.replication.factor, voters)` voters (the shared shard
    /// runtime, `coordinator.rs`); each shard's coordinator is its group's leader, which loads
    /// the shard's state from the log when it takes over and finishes the transactions that
    /// were awaiting markers.
    pub async fn enable_replication(
        self: &Arc<Self>,
        node: &Arc<crate::cluster::ClusterNode>,
        dir: &Path,
    ) -> anyhow::Result<()> {
        if !self.will_replicate {
            return Ok(());
        }
        let Some(replicas) = crate::coordinator::replicate(self, node, dir).await? else { return Ok(()) };
        if self.replication.set(replicas).is_err() {
            anyhow::bail!("transaction log replication started twice");
        }
        if let Some(replicas) = self.replication.get() {
            crate::coordinator::watch_leadership(self, replicas);
        }
        Ok(())
    }

    /// Finish one transaction found in PrepareCommit/PrepareAbort: its markers, then its completion.
    async fn recover_one(self: &Arc<Self>, id: &str, m: TxnMetadata) {
        let commit = m.state == TxnState::PrepareCommit;
        tracing::info!(txn = %id, commit, "completing a transaction decided before the restart");
        let mut done = m.clone();
        done.state = if commit { TxnState::CompleteCommit } else { TxnState::CompleteAbort };
        done.partitions.clear();
        done.groups.clear();
        let markers = Markers {
            commit,
            producer_id: m.producer_id,
            producer_epoch: m.producer_epoch,
            partitions: m.partitions.clone(),
            groups: m.groups.clone(),
            complete: done,
        };
        if let Err(e) = self.complete(id, markers).await {
            tracing::error!(txn = %id, "recovery failed: {e}");
        }
    }

    /// The marker for `id`'s transaction as of now (the coordinator epoch is read at every
    /// attempt: it rises when this broker takes a shard over).
    fn marker(&self, id: &str, (producer_id, producer_epoch, commit): (i64, i16, bool)) -> Marker {
        Marker { producer_id, producer_epoch, coordinator_epoch: self.epoch_for(id), commit }
    }

    /// Write one marker, retried until it is durable (or nothing of the transaction can be open
    /// there); `MarkerDone::Fenced` if a newer coordinator has written to the partition.
    async fn write_marker_until_durable(
        &self,
        markers: &dyn MarkerWriter,
        id: &str,
        topic: &str,
        index: i32,
        h: (i64, i16, bool),
    ) -> MarkerDone {
        let mut backoff = Duration::from_millis(50);
        let started = tokio::time::Instant::now();
        let mut next_report = STILL_RETRYING;
        loop {
            match markers.write(id, topic, index, self.marker(id, h)).await {
                MarkerDone::Retry => {}
                done => return done,
            }
            // the transaction stays open there (read_committed consumers wait at it) until the
            // marker is written: say so, every 30 s (some causes retry without a line of
            // their own: no leader yet, no replica running here yet)
            let waited = started.elapsed();
            if waited >= next_report {
                tracing::warn!(
                    txn = id,
                    topic,
                    partition = index,
                    waited_s = waited.as_secs(),
                    "transaction marker not written yet; still retrying"
                );
                next_report = waited + Duration::from_secs(30);
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }

    /// Complete `pid`'s pending offsets in `group`, retried until durable: at the group's
    /// coordinator — this broker, or another one through a marker on the group's offsets-log
    /// partition — looked up again on every attempt (it may move while a leader is elected).
    async fn complete_group_until_durable(
        &self,
        markers: &dyn MarkerWriter,
        id: &str,
        group: &str,
        h: (i64, i16, bool),
    ) {
        let mut backoff = Duration::from_millis(50);
        while !markers.complete_offsets(id, group, self.marker(id, h)).await {
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }

    /// Write every marker (in parallel, each retried until durable), then log the completion —
    /// never while a marker is missing: a partition that refused one because a newer coordinator
    /// wrote to it leaves the transaction to that coordinator.
    async fn complete(self: &Arc<Self>, id: &str, m: Markers) -> Result<TxnMetadata, StorageError> {
        let Some(writer) = self.markers.get().cloned() else {
            return Err(StorageError::InvalidConfig("the coordinator's marker writer is not wired".into()));
        };
        let header = (m.producer_id, m.producer_epoch, m.commit);
        let mut tasks = tokio::task::JoinSet::new();
        for (topic, index) in m.partitions.clone() {
            let (me, writer, id) = (self.clone(), writer.clone(), id.to_string());
            tasks
                .spawn(async move { me.write_marker_until_durable(writer.as_ref(), &id, &topic, index, header).await });
        }
        for g in m.groups.clone() {
            let (me, writer, id) = (self.clone(), writer.clone(), id.to_string());
            tasks.spawn(async move {
                me.complete_group_until_durable(writer.as_ref(), &id, &g, header).await;
                MarkerDone::Written
            });
        }
        let mut fenced = false;
        while let Some(done) = tasks.join_next().await {
            fenced |= !matches!(done, Ok(MarkerDone::Written));
        }
        if fenced {
            return Err(StorageError::InvalidConfig(format!("markers of {id} refused: a newer coordinator owns it")));
        }
        let now = crate::clock::now_ms();
        let wait = {
            let i = self.shard_index(id);
            let mut shard = self.shard_at(i);
            let prev = shard.txns.get(id).map(|x| x.state);
            if !m.complete.state.may_follow(prev) {
                // replicated: leadership moved meanwhile; the new leader completes it
                return Err(StorageError::InvalidConfig(format!(
                    "completion of {id} from {prev:?}: no longer leading"
                )));
            }
            let w = self
                .log_write(i, &mut shard, &[encode(id, Some(&m.complete))], now)
                .map_err(|e| StorageError::InvalidConfig(format!("{e:?}")))?;
            shard.txns.insert(id.to_string(), m.complete.clone());
            w
        };
        if wait_logged(wait).await.is_err() {
            return Err(StorageError::InvalidConfig("completion not logged (the shard was rolled back)".into()));
        }
        let outcome = if m.commit { "commit" } else { "abort" };
        ::metrics::counter!(crate::metrics::TRANSACTIONS_TOTAL, "outcome" => outcome).increment(1);
        Ok(m.complete)
    }

    /// Publish open-transaction gauges.
    pub fn record_gauges(&self, now: i64) {
        let open: Vec<(i64, bool)> = self
            .all()
            .into_iter()
            .filter(|(_, m)| matches!(m.state, TxnState::Ongoing | TxnState::PrepareCommit | TxnState::PrepareAbort))
            .map(|(_, m)| (m.txn_start_ms, m.two_phase && m.state == TxnState::Ongoing))
            .collect();
        let oldest = |starts: &mut dyn Iterator<Item = i64>| {
            starts.filter(|t| *t > 0).map(|t| (now - t).max(0)).max().unwrap_or(0) as f64 / 1000.0
        };
        ::metrics::gauge!(crate::metrics::OPEN_TRANSACTIONS).set(open.len() as f64);
        ::metrics::gauge!(crate::metrics::OLDEST_TRANSACTION_SECONDS).set(oldest(&mut open.iter().map(|o| o.0)));
        let prepared: Vec<i64> = open.iter().filter(|o| o.1).map(|o| o.0).collect();
        ::metrics::gauge!(crate::metrics::PREPARED_TRANSACTIONS).set(prepared.len() as f64);
        ::metrics::gauge!(crate::metrics::OLDEST_PREPARED_TRANSACTION_SECONDS)
            .set(oldest(&mut prepared.iter().copied()));
    }

    pub fn close(&self) {
        for s in &self.shards {
            let mut s = s.lock().or_die();
            if let Err(e) = s.log.close() {
                tracing::error!("closing transaction log failed: {e}");
            }
        }
    }
}

/// The transaction log's shards on the shared coordinator runtime (cluster mode).
impl crate::coordinator::ShardOwner for TxnCoordinator {
    fn topic(&self) -> &'static str {
        TXN_TOPIC
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

    /// Load the shard, then finish every transaction it holds that awaits its markers.
    fn load(self: Arc<Self>, shard: usize, epoch: Option<i32>) {
        for id in self.load_shard(shard, epoch.unwrap_or(self.coordinator_epoch)) {
            let me = self.clone();
            tokio::spawn(async move {
                if let Some(m) = me.get(&id) {
                    me.recover_one(&id, m).await;
                }
            });
        }
    }

    fn unload(&self, shard: usize, to: ShardState) {
        self.unload_shard(shard, to);
    }
}

/// Replicated (cluster mode, replication factor > 1): each transaction-log partition is a
/// Raft group and its leader coordinates the partition's transactional ids.
impl crate::routing::ShardPlacement for TxnCoordinator {
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

    /// A transition in memory that its log does not hold (its write lost) is undone by rolling
    /// the shard back: on one node it is reloaded from the log at once and serves again.
    #[tokio::test(flavor = "multi_thread")]
    async fn rolling_a_shard_back_restores_what_its_log_holds() {
        let dir = tempfile::tempdir().unwrap();
        let settings = TxnSettings { partitions: 1, ..Default::default() };
        let c = TxnCoordinator::open(dir.path(), &LogConfig::default(), settings, false).unwrap();
        let limits = c.limits();
        let now = crate::clock::now_ms();
        let init = c.run("t", |m| machine::init_producer_id(m, 60_000, None, &mut || Ok(7), limits, now)).await;
        let Outcome::Done(m) = init else { panic!("init refused") };
        c.shard_at(0).log.drop_appends = true;
        let parts = [("topic".to_string(), 0)];
        let add = c.run("t", |m| machine::add_to_txn(m, 7, m.map_or(0, |m| m.producer_epoch), &parts, None, now)).await;
        assert!(matches!(add, Outcome::Done(ref a) if a.state == TxnState::Ongoing), "the lost write looked durable");
        assert_eq!(c.get("t").map(|m| m.state), Some(TxnState::Ongoing));
        c.shard_at(0).log.drop_appends = false;
        crate::coordinator::roll_back(c.clone(), 0);
        assert_eq!(c.get("t").map(|x| x.state), Some(m.state), "back to what the log holds");
        assert!(c.get("t").is_some_and(|x| x.partitions.is_empty()));
        assert!(crate::coordinator::ShardOwner::state(&*c, 0).is_active());
    }
}
