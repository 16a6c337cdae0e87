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

pub mod machine;

use crate::config::coordinators::TxnSettings;
use crate::kvlog::KvLog;
use crate::partition::producer_state::{MarkerHeader, Refusal};
use crate::partition::{AppendError, Partition};
use crate::routing::{shard_for, CoordinatorKey, Route, Router as _};
use crate::state::BrokerState;
use crate::sync::OrDie as _;
use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use machine::{Decision, Markers, TxnLimits, TxnMetadata, TxnState};
use sluice_storage::{LogConfig, StorageError};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

pub const TXN_TOPIC: &str = "__transaction_state";
const META_FILE: &str = "__transaction_state.json";

struct Shard {
    log: KvLog,
    txns: HashMap<String, TxnMetadata>,
    /// Replicated (cluster mode): this broker leads the shard's Raft group and has loaded its
    /// state from the replicated log. Always true otherwise.
    loaded: bool,
    /// Replicated: the Raft term this broker leads the shard in — the coordinator epoch its
    /// markers carry (rises with every new leader, so a deposed one is fenced).
    epoch: i32,
}

/// Cluster mode with `transaction.state.log.replication.factor` > 1: each shard's log is
/// replicated by a Raft group; the shard's coordinator is that group's leader.
pub struct TxnReplication {
    /// The replicas of each shard (from the voters, fixed).
    pub replicas: Vec<Vec<i32>>,
    /// This broker's replica of each shard, if it is one.
    pub groups: Vec<Option<Arc<crate::cluster::replica::Replica>>>,
}

/// What to wait on before acting on a logged transition.
use crate::kvlog::LogWait as TxnWait;

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
    replication: std::sync::OnceLock<TxnReplication>,
}

/// What a request's decision led to.
pub enum Outcome {
    /// Success with this (current) metadata.
    Done(TxnMetadata),
    Refused(ResponseError),
}

impl TxnCoordinator {
    pub fn open(data_dir: &Path, base: &LogConfig, mut settings: TxnSettings) -> anyhow::Result<Self> {
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
                loaded: true,
                epoch: coordinator_epoch,
            };
            for (k, v) in shard.log.read_all()? {
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
        Ok(TxnCoordinator { settings, coordinator_epoch, shards, replication: std::sync::OnceLock::new() })
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

    /// Is the transaction log replicated (cluster mode, replication factor > 1)?
    pub fn replication(&self) -> Option<&TxnReplication> {
        self.replication.get()
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
    ) -> Result<TxnWait, ResponseError> {
        let Some(r) = self.replication.get() else {
            return shard.log.append(records, now).map(TxnWait::Local).map_err(|e| {
                tracing::error!(shard = i, "transaction log append failed: {e}");
                ResponseError::CoordinatorNotAvailable
            });
        };
        if !shard.loaded {
            return Err(ResponseError::NotCoordinator);
        }
        let group = r.groups.get(i).and_then(|g| g.clone()).ok_or(ResponseError::NotCoordinator)?;
        let records = records
            .iter()
            .map(|(k, v)| crate::replication::types::KvEntry { key: k.to_vec(), value: v.as_ref().map(|v| v.to_vec()) })
            .collect();
        group
            .propose(crate::replication::types::PartCommand::Kv { records, now_ms: now })
            .map(TxnWait::Raft)
            .map_err(|_| ResponseError::NotCoordinator)
    }

    /// Applied on every replica of shard `i` (the Raft state machine): append durably. The
    /// in-memory state is loaded from this log when the replica becomes the shard's leader.
    pub fn apply_replicated(&self, i: usize, records: &[crate::kvlog::KvRecord], now: i64) -> Result<(), String> {
        let mut shard = self.shards.get(i).ok_or("no such shard")?.lock().or_die();
        match shard.log.append(records, now).map_err(|e| e.to_string())? {
            Some((flusher, end)) => flusher.sync_to(end).map(|_| ()).map_err(|e| e.to_string()),
            None => Ok(()),
        }
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
        shard.loaded = true;
        shard.epoch = term;
        tracing::info!(shard = i, term, ids = shard.txns.len(), "leading transaction-log partition");
        shard
            .txns
            .iter()
            .filter(|(_, m)| matches!(m.state, TxnState::PrepareCommit | TxnState::PrepareAbort))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Replicated: a logged transition of `id` was not confirmed committed — drop its shard
    /// (reloaded from the log by the leadership watcher once everything proposed is applied).
    fn forget_after_failed_write(&self, id: &str) {
        if self.replication.get().is_some() {
            tracing::warn!(txn = id, "transaction log write not confirmed; reloading the shard");
            self.unload_shard(self.shard_index(id));
        }
    }

    fn unload_shard(&self, i: usize) {
        let mut shard = self.shard_at(i);
        if shard.loaded {
            tracing::info!(shard = i, "no longer leading transaction-log partition");
        }
        shard.loaded = false;
        shard.txns.clear();
    }

    pub fn limits(&self) -> TxnLimits {
        TxnLimits { max_timeout_ms: self.settings.max_timeout_ms }
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
        if !shard.loaded {
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
                if !s.loaded {
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
    ) -> Result<(), ResponseError> {
        let shard = self.shard(id);
        if !shard.loaded {
            return Err(ResponseError::NotCoordinator);
        }
        let Some(m) = shard.txns.get(id) else { return Err(ResponseError::InvalidProducerIdMapping) };
        if m.producer_id != pid {
            return Err(ResponseError::InvalidProducerIdMapping);
        }
        // equal, as Kafka's `handleVerifyPartitionsInTransaction`: a batch with a *higher* epoch
        // than the coordinator's would make the partition refuse this transaction's marker
        if epoch != m.producer_epoch {
            return Err(ResponseError::ProducerFenced);
        }
        if matches!(m.state, TxnState::PrepareCommit | TxnState::PrepareAbort) {
            return Err(ResponseError::ConcurrentTransactions);
        }
        if m.state != TxnState::Ongoing || !m.partitions.contains(&(topic.to_string(), partition)) {
            return Err(ResponseError::InvalidTxnState);
        }
        Ok(())
    }

    /// Add partitions (and/or a group) to `id`'s transaction and wait until that is durable,
    /// blocking: the implicit add of transaction version 2 (Produce v12, TxnOffsetCommit v5).
    pub fn add_blocking(
        &self,
        id: &str,
        pid: i64,
        epoch: i16,
        parts: &[(String, i32)],
        group: Option<&str>,
    ) -> Result<(), ResponseError> {
        let now = crate::clock::now_ms();
        let (d, durable) = self.decide(id, |m| machine::add_to_txn(m, pid, epoch, parts, group, now), now)?;
        let handle = tokio::runtime::Handle::try_current().map_err(|_| ResponseError::CoordinatorNotAvailable)?;
        tokio::task::block_in_place(|| handle.block_on(wait_logged(durable)))
            .map_err(|_| ResponseError::CoordinatorNotAvailable)?;
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
    ) -> Result<(Decision, TxnWait), ResponseError> {
        let i = self.shard_index(id);
        let mut shard = self.shard_at(i);
        if !shard.loaded {
            return Err(ResponseError::NotCoordinator);
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
            _ => TxnWait::Local(None),
        };
        Ok((d, durable))
    }

    /// Run a request end to end: decide, log, write markers, log completion.
    pub async fn run(state: &Arc<BrokerState>, id: &str, f: impl FnOnce(Option<&TxnMetadata>) -> Decision) -> Outcome {
        let now = crate::clock::now_ms();
        let (d, durable) = match state.txns.decide(id, f, now) {
            Ok(x) => x,
            Err(e) => return Outcome::Refused(e),
        };
        if wait_logged(durable).await.is_err() {
            // replicated: the write may still commit later; the in-memory state no longer
            // follows the log, so drop the shard and reload it once the log is applied (the
            // reload finishes whatever it finds decided)
            state.txns.forget_after_failed_write(id);
            return Outcome::Refused(ResponseError::CoordinatorNotAvailable);
        }
        match d {
            Decision::Refuse(e) => Outcome::Refused(e),
            Decision::Unchanged => match state.txns.get(id) {
                Some(m) => Outcome::Done(m),
                None => Outcome::Refused(ResponseError::InvalidProducerIdMapping),
            },
            Decision::Apply(t) => {
                let mut last = t.next.clone();
                if let Some(markers) = t.markers {
                    state.txns.failpoint(crate::failpoints::Failpoint::TxnAfterPrepare);
                    // the completion must happen even if the client goes away
                    let st = state.clone();
                    let owned = id.to_string();
                    match tokio::spawn(async move { complete(&st, &owned, markers).await }).await {
                        Ok(Ok(m)) => last = m,
                        _ => return Outcome::Refused(ResponseError::CoordinatorNotAvailable),
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
    pub async fn check_timeouts(state: &Arc<BrokerState>) {
        let now = crate::clock::now_ms();
        let mut due = Vec::new();
        let mut waits = Vec::new();
        for (i, s) in state.txns.shards.iter().enumerate() {
            let mut s = s.lock().or_die();
            if !s.loaded {
                continue;
            }
            let expired: Vec<String> = s
                .txns
                .iter()
                .filter(|(_, m)| machine::expired(m, now, state.txns.settings.id_expiration_ms))
                .map(|(k, _)| k.clone())
                .collect();
            for id in expired {
                if let Ok(w) = state.txns.log_write(i, &mut s, &[encode(&id, None)], now) {
                    s.txns.remove(&id);
                    waits.push(w);
                    tracing::info!(txn = %id, "transactional id expired");
                }
            }
            for (id, m) in &s.txns {
                if machine::timeout(m, now).is_some() {
                    due.push(id.clone());
                }
            }
        }
        for w in waits {
            let _ = wait_logged(w).await;
        }
        for id in due {
            tracing::info!(txn = %id, "aborting a transaction open past its timeout");
            let now = crate::clock::now_ms();
            let outcome = TxnCoordinator::run(state, &id, |m| match m {
                Some(m) => machine::timeout(m, now).unwrap_or(Decision::Unchanged),
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
    pub async fn recover(state: &Arc<BrokerState>) {
        if Self::will_replicate(&state.config) {
            return;
        }
        let pending: Vec<(String, TxnMetadata)> = state
            .txns
            .all()
            .into_iter()
            .filter(|(_, m)| matches!(m.state, TxnState::PrepareCommit | TxnState::PrepareAbort))
            .collect();
        for (id, m) in pending {
            Self::recover_one(state, &id, m).await;
        }
    }

    /// Cluster mode with a replicated transaction log?
    pub fn will_replicate(config: &crate::config::Config) -> bool {
        config.voters.len() >= 2 && config.txns.replication_factor >= 2
    }

    /// Replicate the transaction log (cluster mode): one Raft group per shard over
    /// `min(transaction.state.log.replication.factor, voters)` voters (spread in id order); each
    /// shard's coordinator is its group's leader, which loads the shard's state from the log when
    /// it takes over and finishes the transactions that were awaiting markers.
    pub async fn enable_replication(
        state: &Arc<BrokerState>,
        node: &Arc<crate::cluster::ClusterNode>,
        dir: &Path,
    ) -> anyhow::Result<()> {
        use crate::cluster::replica::{start_kv, KvApply, ReplicaSpec};
        if !Self::will_replicate(&state.config) {
            return Ok(());
        }
        let txns = &state.txns;
        let ids: Vec<i32> = node.voters.keys().filter_map(|v| i32::try_from(*v).ok()).collect();
        let rf = usize::try_from(txns.settings.replication_factor).unwrap_or(1).min(ids.len());
        let me = state.config.node_id;
        let n = txns.shards.len();
        let replicas: Vec<Vec<i32>> = (0..n).map(|i| (0..rf).map(|k| ids[(i + k) % ids.len()]).collect()).collect();
        for i in 0..n {
            txns.unload_shard(i);
        }
        let mut groups = Vec::with_capacity(n);
        for (i, r) in replicas.iter().enumerate() {
            if !r.contains(&me) {
                groups.push(None);
                continue;
            }
            let weak = Arc::downgrade(state);
            let apply: KvApply = Arc::new(move |records, now| match weak.upgrade() {
                Some(st) => st.txns.apply_replicated(i, records, now),
                None => Err("the broker is shutting down".into()),
            });
            let spec = ReplicaSpec {
                key: (TXN_TOPIC.to_string(), i as i32),
                topic_id: uuid::Uuid::nil(),
                replicas: r.clone(),
                initialize: true,
            };
            let g = start_kv(node.node_id, spec, &node.voters, apply, dir.join(format!("{TXN_TOPIC}-{i}"))).await?;
            node.replicas.write().or_die().insert(g.key.clone(), g.clone());
            groups.push(Some(g));
        }
        let watch: Vec<(usize, Arc<crate::cluster::replica::Replica>)> =
            groups.iter().enumerate().filter_map(|(i, g)| g.clone().map(|g| (i, g))).collect();
        if txns.replication.set(TxnReplication { replicas, groups }).is_err() {
            anyhow::bail!("transaction log replication started twice");
        }
        for (i, g) in watch {
            let weak = Arc::downgrade(state);
            tokio::spawn(async move {
                let mut rx = g.raft.metrics();
                loop {
                    // ready: leading, with every entry of its log applied (its own term's too),
                    // so the state loaded is exactly what the log holds
                    let (is_leader, ready, term) = {
                        let m = rx.borrow();
                        let applied = m.last_applied;
                        let all_applied = applied.map(|l| l.index) >= m.last_log_index;
                        let this_term = applied.map(|l| l.leader_id.term) == Some(m.current_term);
                        (m.current_leader == Some(m.id), all_applied && this_term, m.current_term)
                    };
                    let Some(st) = weak.upgrade() else { return };
                    let loaded = st.txns.shard_at(i).loaded;
                    if is_leader && ready && !loaded {
                        let epoch = i32::try_from(term).unwrap_or(i32::MAX);
                        let pending = tokio::task::block_in_place(|| st.txns.load_shard(i, epoch));
                        for id in pending {
                            let st = st.clone();
                            tokio::spawn(async move {
                                if let Some(m) = st.txns.get(&id) {
                                    TxnCoordinator::recover_one(&st, &id, m).await;
                                }
                            });
                        }
                    } else if !is_leader && loaded {
                        st.txns.unload_shard(i);
                    }
                    drop(st);
                    // re-checked at least every second (a shard dropped after a failed write
                    // is reloaded once its log is applied)
                    if let Ok(Err(_)) = tokio::time::timeout(Duration::from_secs(1), rx.changed()).await {
                        return;
                    }
                }
            });
        }
        Ok(())
    }

    /// Finish one transaction found in PrepareCommit/PrepareAbort: its markers, then its completion.
    async fn recover_one(state: &Arc<BrokerState>, id: &str, m: TxnMetadata) {
        {
            let id = id.to_string();
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
            if let Err(e) = complete(state, &id, markers).await {
                tracing::error!(txn = %id, "recovery failed: {e}");
            }
        }
    }

    /// Publish open-transaction gauges.
    pub fn record_gauges(&self, now: i64) {
        let open: Vec<i64> = self
            .all()
            .into_iter()
            .filter(|(_, m)| matches!(m.state, TxnState::Ongoing | TxnState::PrepareCommit | TxnState::PrepareAbort))
            .map(|(_, m)| m.txn_start_ms)
            .collect();
        ::metrics::gauge!(crate::metrics::OPEN_TRANSACTIONS).set(open.len() as f64);
        let oldest = open.iter().filter(|t| **t > 0).map(|t| (now - t).max(0)).max().unwrap_or(0);
        ::metrics::gauge!(crate::metrics::OLDEST_TRANSACTION_SECONDS).set(oldest as f64 / 1000.0);
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

/// Where a partition's marker goes.
enum MarkerTarget {
    /// This broker writes it (single node, or it leads an unreplicated partition).
    Local,
    /// This broker leads the replicated partition: through its Raft group.
    Replica(Arc<crate::cluster::replica::Replica>),
    /// Another broker leads it (the address of its client listener).
    Remote(String),
    /// A replicated partition without a leader right now: try again shortly.
    Wait,
}

/// Cluster mode: who writes the marker for `topic`/`index`.
fn marker_target(state: &BrokerState, topic: &str, index: i32) -> MarkerTarget {
    let Some(c) = state.cluster.get() else { return MarkerTarget::Local };
    let Some((leader, _)) = state.leader_of(topic, index) else { return MarkerTarget::Local };
    if leader < 0 {
        return MarkerTarget::Wait;
    }
    if leader == state.config.node_id {
        return match state.replica(topic, index) {
            Some(r) => MarkerTarget::Replica(r),
            None => MarkerTarget::Local,
        };
    }
    match c.image().brokers.get(&leader) {
        Some(b) => MarkerTarget::Remote(format!("{}:{}", b.host, b.port)),
        None => MarkerTarget::Wait,
    }
}

/// What became of one marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MarkerDone {
    /// Durable, or nothing of the transaction can be open there (the partition is gone, or it
    /// holds no open transaction of the producer): the transaction may complete.
    Written,
    /// A newer coordinator wrote to the partition: this one must not complete the transaction
    /// (the newer one finishes it).
    Fenced,
    /// Not written yet: try again.
    Retry,
}

/// A marker was refused with INVALID_PRODUCER_EPOCH at a partition this broker holds: harmless
/// if the producer has no open transaction there (nothing to close), otherwise the transaction
/// must not be called complete — its data would stay open behind the LSO for ever.
fn refused_epoch(partition: Option<&Partition>, id: &str, topic: &str, index: i32, pid: i64) -> MarkerDone {
    let open = partition.is_some_and(|p| p.has_open_transaction(pid));
    if open {
        tracing::error!(
            txn = id,
            topic,
            partition = index,
            pid,
            "marker refused (older producer epoch) while the transaction is open there; retrying"
        );
        MarkerDone::Retry
    } else {
        tracing::warn!(txn = id, topic, partition = index, pid, "marker refused; nothing of the transaction is open");
        MarkerDone::Written
    }
}

/// Send the marker to the partition's leader (WriteTxnMarkers v1).
async fn write_marker_remote(
    state: &BrokerState,
    addr: &str,
    id: &str,
    topic: &str,
    index: i32,
    h: (i64, i16, bool),
) -> MarkerDone {
    let (pid, epoch, commit) = h;
    let coordinator_epoch = state.txns.epoch_for(id);
    let ttl = Duration::from_secs(10);
    let code =
        match crate::interbroker::write_marker(addr, topic, index, pid, epoch, commit, coordinator_epoch, ttl).await {
            Ok(code) => code,
            Err(e) => {
                tracing::warn!(txn = id, topic, partition = index, "marker to {addr}: {e}");
                return MarkerDone::Retry;
            }
        };
    match ResponseError::try_from_code(code) {
        None if code == 0 => MarkerDone::Written,
        Some(ResponseError::UnknownTopicOrPartition) => {
            tracing::warn!(txn = id, topic, partition = index, "marker skipped: {addr} has no such partition");
            MarkerDone::Written
        }
        Some(ResponseError::TransactionCoordinatorFenced) => {
            tracing::warn!(txn = id, topic, partition = index, "marker refused by {addr}: a newer coordinator");
            MarkerDone::Fenced
        }
        // INVALID_PRODUCER_EPOCH included: whether the transaction is open there is not known
        // here, and completing it while it is would leave its data open for ever
        _ => {
            tracing::warn!(txn = id, topic, partition = index, code, "marker to {addr} failed; retrying");
            MarkerDone::Retry
        }
    }
}

/// Write one marker, retried until it is durable (or nothing of the transaction can be open
/// there); `MarkerDone::Fenced` if a newer coordinator has written to the partition.
async fn write_marker_until_durable(
    state: &Arc<BrokerState>,
    id: &str,
    topic: &str,
    index: i32,
    h: (i64, i16, bool),
) -> MarkerDone {
    let (pid, epoch, commit) = h;
    let mut backoff = Duration::from_millis(50);
    loop {
        match marker_target(state, topic, index) {
            MarkerTarget::Remote(addr) => {
                let done = write_marker_remote(state, &addr, id, topic, index, h).await;
                if done != MarkerDone::Retry {
                    return done;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
            MarkerTarget::Wait => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
            MarkerTarget::Replica(r) => {
                use crate::replication::types::{PartCommand, PartResult};
                let cmd = PartCommand::Marker {
                    producer_id: pid,
                    epoch,
                    coordinator_epoch: state.txns.epoch_for(id),
                    commit,
                    now_ms: crate::clock::now_ms(),
                };
                let write = match tokio::time::timeout(Duration::from_secs(10), r.raft.client_write(cmd)).await {
                    Ok(Ok(w)) => w.data,
                    Ok(Err(e)) => PartResult::Error { code: -1, message: e.to_string() },
                    Err(_) => PartResult::Error { code: -1, message: "not committed within 10 s".into() },
                };
                match write {
                    PartResult::Error { code, message } if code == -1 || code == 6 || code == 7 => {
                        tracing::warn!(txn = id, topic, partition = index, "replicated marker: {message}; retrying");
                    }
                    PartResult::Error { code, message } => {
                        tracing::warn!(txn = id, topic, partition = index, "marker refused: {message}");
                        match ResponseError::try_from_code(code) {
                            Some(ResponseError::TransactionCoordinatorFenced) => return MarkerDone::Fenced,
                            Some(ResponseError::InvalidProducerEpoch) => {
                                let p = state.partition(topic, index);
                                if refused_epoch(p.as_deref(), id, topic, index, pid) == MarkerDone::Written {
                                    return MarkerDone::Written;
                                }
                            }
                            _ => return MarkerDone::Written,
                        }
                    }
                    _ => return MarkerDone::Written,
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
            MarkerTarget::Local => {}
        }
        let Some(p) = state.partition(topic, index) else {
            tracing::warn!(txn = id, topic, partition = index, "marker skipped: partition is gone");
            return MarkerDone::Written;
        };
        let now = crate::clock::now_ms();
        let header = MarkerHeader { epoch, coordinator_epoch: state.txns.epoch_for(id), commit, timestamp: now };
        let part = p.clone();
        let written = tokio::task::spawn_blocking(move || part.write_marker(pid, &header, now))
            .await
            .unwrap_or_else(|e| Err(AppendError::Storage(StorageError::InvalidConfig(e.to_string()))));
        match written {
            Ok(w) => match p.wait_durable_async(w.offset + 1, w.sync).await {
                Ok(()) => return MarkerDone::Written,
                Err(e) => tracing::error!(txn = id, topic, partition = index, "marker fsync failed: {e}"),
            },
            Err(AppendError::Refused(Refusal::CoordinatorFenced { current, got })) => {
                tracing::warn!(txn = id, topic, partition = index, current, got, "marker refused: a newer coordinator");
                return MarkerDone::Fenced;
            }
            Err(AppendError::Refused(_)) => {
                if refused_epoch(Some(&p), id, topic, index, pid) == MarkerDone::Written {
                    return MarkerDone::Written;
                }
            }
            Err(AppendError::Storage(e)) => {
                tracing::error!(txn = id, topic, partition = index, "marker write failed: {e}")
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// Complete `pid`'s pending offsets in `group`, retried until durable: at the group's
/// coordinator — this broker, or another one through a marker on the group's offsets-log
/// partition — looked up again on every attempt (it may move while a leader is elected).
async fn complete_group_until_durable(state: &Arc<BrokerState>, id: &str, group: &str, header: (i64, i16, bool)) {
    let (pid, _, commit) = header;
    let mut backoff = Duration::from_millis(50);
    loop {
        match state.coordinator_of(CoordinatorKey::Group(group)) {
            Route::Broker(b) => {
                let partition = shard_for(group, state.config.groups.partitions);
                if write_marker_remote(state, &b.addr(), id, crate::group::OFFSETS_TOPIC, partition, header).await
                    != MarkerDone::Retry
                {
                    return;
                }
            }
            Route::Electing => {} // its coordinator is being elected
            Route::Here => match state.groups.complete_txn(group, pid, commit, crate::clock::now_ms()) {
                Ok(w) => {
                    if crate::group::wait_durable(w).await.is_ok() {
                        return;
                    }
                }
                Err(e) => tracing::warn!(txn = id, group, "completing transactional offsets failed: {e:?}"),
            },
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// Write every marker (in parallel, each retried until durable), then log the completion —
/// never while a marker is missing: a partition that refused one because a newer coordinator
/// wrote to it leaves the transaction to that coordinator.
async fn complete(state: &Arc<BrokerState>, id: &str, m: Markers) -> Result<TxnMetadata, StorageError> {
    let mut tasks = tokio::task::JoinSet::new();
    for (topic, index) in m.partitions.clone() {
        let (st, id, header) = (state.clone(), id.to_string(), (m.producer_id, m.producer_epoch, m.commit));
        tasks.spawn(async move { write_marker_until_durable(&st, &id, &topic, index, header).await });
    }
    for g in m.groups.clone() {
        let (st, id) = (state.clone(), id.to_string());
        let header = (m.producer_id, m.producer_epoch, m.commit);
        tasks.spawn(async move {
            complete_group_until_durable(&st, &id, &g, header).await;
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
        let i = state.txns.shard_index(id);
        let mut shard = state.txns.shard_at(i);
        let prev = shard.txns.get(id).map(|x| x.state);
        if !m.complete.state.may_follow(prev) {
            // replicated: leadership moved meanwhile; the new leader completes it
            return Err(StorageError::InvalidConfig(format!("completion of {id} from {prev:?}: no longer leading")));
        }
        let w = state
            .txns
            .log_write(i, &mut shard, &[encode(id, Some(&m.complete))], now)
            .map_err(|e| StorageError::InvalidConfig(format!("{e:?}")))?;
        shard.txns.insert(id.to_string(), m.complete.clone());
        w
    };
    if wait_logged(wait).await.is_err() {
        state.txns.forget_after_failed_write(id);
        return Err(StorageError::InvalidConfig("completion not logged".into()));
    }
    let outcome = if m.commit { "commit" } else { "abort" };
    ::metrics::counter!(crate::metrics::TRANSACTIONS_TOTAL, "outcome" => outcome).increment(1);
    Ok(m.complete)
}

/// Replicated (cluster mode, replication factor > 1): each transaction-log partition is a
/// Raft group and its leader coordinates the partition's transactional ids.
impl crate::routing::ShardPlacement for TxnCoordinator {
    fn replicated(&self) -> bool {
        self.replication.get().is_some()
    }

    /// The broker leading shard `shard`'s group, as this broker knows it.
    fn shard_leader(&self, shard: i32) -> Option<i32> {
        let r = self.replication.get()?;
        let i = usize::try_from(shard).ok()?;
        match r.groups.get(i)? {
            Some(g) => g.leader(),
            None => r.replicas.get(i)?.first().copied(),
        }
    }
}
