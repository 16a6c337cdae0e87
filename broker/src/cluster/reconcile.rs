//! Make this broker's topics match the metadata image: create the topics (and partitions) the
//! quorum has, apply their configs, delete the ones it deleted. Every broker keeps a log for
//! every partition of every topic; only the partition's leader serves it (`route`).
//!
//! Deletion only ever touches topics this reconciler created (their ids are kept in
//! `<log.dirs>/__cluster/managed-topics.json`): a topic that existed in the data directory
//! before the broker joined a cluster is left alone, never silently deleted.

use super::MetadataImage;
use crate::sync::OrDie as _;
use crate::topics::TopicRegistry;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use uuid::Uuid;

pub struct Reconciler {
    path: PathBuf,
    managed: Mutex<BTreeSet<Uuid>>,
    /// The image index the local ACL and credential files were last replaced from.
    synced_path: PathBuf,
    synced: Mutex<u64>,
    /// Where this broker's partition Raft groups keep their logs (`<topic id>-<partition>`).
    replicas_dir: PathBuf,
}

impl Reconciler {
    pub fn open(cluster_dir: &std::path::Path) -> anyhow::Result<Reconciler> {
        let path = cluster_dir.join("managed-topics.json");
        let managed = match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeSet::new(),
            Err(e) => return Err(e.into()),
        };
        let synced_path = cluster_dir.join("security-synced.json");
        let synced = match std::fs::read(&synced_path) {
            Ok(b) => serde_json::from_slice(&b)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e.into()),
        };
        let replicas_dir = cluster_dir.join("replicas");
        Ok(Reconciler { path, managed: Mutex::new(managed), synced_path, synced: Mutex::new(synced), replicas_dir })
    }

    /// ACLs and SCRAM credentials: this broker's copies become the image's — only from an image
    /// newer than the last one copied (an older image replayed at start never rolls them back,
    /// e.g. never forgets a DENY added since).
    fn sync_security(&self, security: &SecuritySync, image: &MetadataImage) {
        let mut synced = self.synced.lock().or_die();
        if image.applied_index <= *synced {
            return;
        }
        if let Err(e) = security(image) {
            tracing::error!("cannot store the cluster's ACLs or credentials: {e}");
            return;
        }
        *synced = image.applied_index;
        if let Err(e) = serde_json::to_vec(&*synced)
            .map_err(anyhow::Error::from)
            .and_then(|b| sluice_storage::sidefile::write_atomic(&self.synced_path, &b).map_err(anyhow::Error::from))
        {
            tracing::error!("cannot save {}: {e}", self.synced_path.display());
        }
    }

    fn save(&self, managed: &BTreeSet<Uuid>) {
        match serde_json::to_vec(managed) {
            Ok(b) => {
                if let Err(e) = sluice_storage::sidefile::write_atomic(&self.path, &b) {
                    tracing::error!("cannot save {}: {e}", self.path.display());
                }
            }
            Err(e) => tracing::error!("cannot encode the managed topics: {e}"),
        }
    }

    /// One pass (blocking: creates and deletes directories).
    pub fn run(&self, state: &TopicRegistry, security: &SecuritySync, image: &MetadataImage) {
        self.sync_security(security, image);
        if state.dynamic() != image.configs {
            if let Err(e) = state.replace_dynamic(image.configs.clone()) {
                tracing::error!("cannot store the cluster's dynamic configs: {e}");
            }
        }
        let mut managed = self.managed.lock().or_die();
        let before = managed.clone();
        for (name, info) in &image.topics {
            let want = info.replicas.len() as i32;
            match state.topic(name) {
                Some(t) if t.id == info.id => {
                    if (t.partitions.len() as i32) < want {
                        if let Err(e) = state.create_partitions_local(name, want, false) {
                            tracing::error!(topic = name.as_str(), "cannot add partitions: {e}");
                        }
                    }
                    if t.configs != info.configs {
                        let configs = info.configs.clone();
                        if let Err(e) = state.alter_topic_configs_local(
                            name,
                            |c| {
                                *c = configs;
                                Ok(())
                            },
                            false,
                        ) {
                            tracing::error!(topic = name.as_str(), "cannot apply configs: {e}");
                        }
                    }
                    managed.insert(info.id);
                }
                Some(t) if !managed.contains(&t.id) => {
                    tracing::error!(
                        topic = name.as_str(),
                        "a local topic of this name predates cluster mode; the cluster's topic is not served here"
                    );
                }
                other => {
                    if other.is_some() {
                        // an older incarnation (deleted and re-created while this broker was away)
                        let _ = state.delete_topic_local(name);
                    }
                    match state.create_topic_with_id(name, Some(info.id), want, -1, info.configs.clone(), false) {
                        Ok(_) => {
                            managed.insert(info.id);
                        }
                        Err(e) => tracing::error!(topic = name.as_str(), "cannot create: {e}"),
                    }
                }
            }
        }
        for t in state.topics() {
            if managed.contains(&t.id) && image.topics.get(&t.name).is_none_or(|i| i.id != t.id) {
                match state.delete_topic_local(&t.name) {
                    Ok(()) => {
                        managed.remove(&t.id);
                    }
                    Err(e) => tracing::error!(topic = t.name.as_str(), "cannot delete: {e}"),
                }
            }
        }
        if *managed != before {
            self.save(&managed);
        }
        drop(managed);
        self.sync_replicas(state, image);
    }

    /// Start this broker's replica of every replicated partition assigned to it, and stop (and
    /// remove) those of partitions deleted or no longer assigned here. Blocking.
    fn sync_replicas(&self, state: &TopicRegistry, image: &MetadataImage) {
        let Some(node) = state.cluster.get() else { return };
        let Ok(handle) = tokio::runtime::Handle::try_current() else { return };
        let me = state.config.node_id;
        let mut wanted = std::collections::HashMap::new();
        for (name, info) in &image.topics {
            for (p, replicas) in info.replicas.iter().enumerate() {
                if replicas.len() <= 1 {
                    // not replicated: nothing replays over it, the log cleaner may have it all
                    if let Some(part) =
                        state.topic(name).filter(|t| t.id == info.id).and_then(|t| t.partition(p as i32).cloned())
                    {
                        part.set_clean_limit(i64::MAX);
                    }
                }
                if replicas.len() > 1 && replicas.contains(&me) {
                    let initialize = !info.moved.contains(&(p as i32));
                    wanted.insert((name.clone(), p as i32), (info.id, replicas.clone(), initialize));
                }
            }
        }
        let current: Vec<_> = node.replicas.read().or_die().values().cloned().collect();
        for r in current {
            let topic_alive = image.topics.get(&r.key.0).is_some_and(|t| t.id == r.topic_id);
            if wanted.get(&r.key).is_some_and(|(id, _, _)| *id == r.topic_id) {
                continue;
            }
            // reassigned away: keep serving until the group's leader reports the move done (its
            // new membership committed), then stop
            let moving = image.topics.get(&r.key.0).is_some_and(|t| t.moving.contains_key(&r.key.1));
            if topic_alive && moving {
                continue;
            }
            node.replicas.write().or_die().remove(&r.key);
            if let Err(e) = handle.block_on(r.raft.shutdown()) {
                tracing::warn!(topic = r.key.0.as_str(), partition = r.key.1, "replica shutdown: {e}");
            }
            let _ = std::fs::remove_dir_all(&r.dir);
        }
        if crate::failpoints::armed(crate::failpoints::Failpoint::ReplicaDelayStart)
            && wanted.keys().any(|k| node.replica(k).is_none())
        {
            std::thread::sleep(std::time::Duration::from_secs(3));
        }
        let starting = tokio::task::LocalSet::new();
        let limit = Arc::new(tokio::sync::Semaphore::new(STARTS_AT_ONCE));
        for (key, (id, replicas, initialize)) in wanted {
            if node.replica(&key).is_some() {
                continue;
            }
            // the topic's local copy must exist first (created above)
            let Some(partition) = state.topic(&key.0).filter(|t| t.id == id).and_then(|t| t.partition(key.1).cloned())
            else {
                continue;
            };
            let dir = super::replica::dir_of(&self.replicas_dir, id, key.1);
            let spec = super::replica::ReplicaSpec {
                key: key.clone(),
                topic_id: id,
                replicas,
                initialize,
                append_bytes_max: node.append_bytes(),
                snapshot_bytes: node.snapshot_bytes(),
                budgets: node.budgets(),
                single_log: node.single_log(),
                follower_cache_tail: node.follower_cache_tail.load(std::sync::atomic::Ordering::Relaxed),
                answering: Default::default(),
            };
            let addresses = node.addresses();
            let network = super::network::PartNetwork::new(&spec.key, &addresses)
                .pipelined(spec.append_bytes_max)
                .noting_answers(spec.answering.clone());
            let peers = Arc::new(super::network::GroupPeers {
                node: Arc::downgrade(node),
                key: key.clone(),
                kind: super::network::GroupKind::Partition,
                assigned: spec
                    .replicas
                    .iter()
                    .filter_map(|r| crate::replication::types::NodeId::try_from(*r).ok())
                    .collect(),
            });
            let segments: Arc<dyn crate::replication::partition_log_store::SegmentLog> = partition.clone();
            let (node, limit) = (node.clone(), limit.clone());
            // (local: a start's future is not `Send`)
            starting.spawn_local(async move {
                let _turn = limit.acquire_owned().await;
                // a group converting to one log per replica: converted before it runs (decision 0056)
                if let Err(e) = super::convert::prepare(&dir, &*partition, &segments).await {
                    tracing::error!(topic = key.0.as_str(), partition = key.1, "cannot convert replica: {e}");
                    return;
                }
                let started =
                    super::replica::start(node.node_id, spec, &addresses, network, partition, segments, peers, dir)
                        .await;
                match started {
                    Ok(r) => {
                        node.replicas.write().or_die().insert(key, r.clone());
                        // (a group kept in its partition log never converts; a new replica may hold no file yet)
                        if super::replica::log_format_of(&r.dir) != Some(true) {
                            tokio::spawn(restart_when_converted(Arc::downgrade(&node), r.clone()));
                        }
                        tokio::spawn(publish_leadership(Arc::downgrade(&node), r));
                    }
                    Err(e) => tracing::error!(topic = key.0.as_str(), partition = key.1, "cannot start replica: {e}"),
                }
            });
        }
        // every start driven on this thread, a few at once
        handle.block_on(starting);
    }
}

/// Replicas started at once by one pass of the reconciler: each start waits on its peers'
/// answers and a few fsyncs (a new group's birth, decision 0052), so a topic of many
/// partitions started one replica after another took longer than CreateTopics waits for its
/// leaders (10 s) under load.
const STARTS_AT_ONCE: usize = 16;

/// While `r` runs: once it has applied its group's conversion to one log per replica (decision
/// 0056), stop it and have the reconciler start it again — converted, before its group runs.
async fn restart_when_converted(node: std::sync::Weak<super::ClusterNode>, r: Arc<super::replica::Replica>) {
    let mut rx = r.raft.metrics();
    loop {
        tokio::select! {
            _ = r.conversion.until_due() => break,
            changed = rx.changed() => {
                if changed.is_err() {
                    return; // the group shut down
                }
            }
        }
    }
    let Some(n) = node.upgrade() else { return };
    {
        let mut replicas = n.replicas.write().or_die();
        if !replicas.get(&r.key).is_some_and(|cur| Arc::ptr_eq(cur, &r)) {
            return; // stopped meanwhile (moved away, topic deleted)
        }
        replicas.remove(&r.key);
    }
    if let Err(e) = r.raft.shutdown().await {
        tracing::warn!(topic = r.key.0.as_str(), partition = r.key.1, "replica shutdown: {e}");
    }
    drop(rx);
    drop(r);
    n.restart.notify_one();
}

/// While `r` runs: each time this broker becomes its group's leader (a new term), publish that
/// to the metadata quorum, so brokers that are not replicas route clients here too.
async fn publish_leadership(node: std::sync::Weak<super::ClusterNode>, r: Arc<super::replica::Replica>) {
    let mut rx = r.raft.metrics();
    let mut published: Option<u64> = None;
    loop {
        let (me, leader, term) = {
            let m = rx.borrow();
            (m.id, m.current_leader, m.current_term)
        };
        if leader == Some(me) && published != Some(term) {
            let Some(n) = node.upgrade() else { return };
            if !n.replica(&r.key).is_some_and(|cur| Arc::ptr_eq(&cur, &r)) {
                return; // stopped (moved away, topic deleted)
            }
            let cmd = super::Command::PartitionLeader {
                name: r.key.0.clone(),
                id: r.topic_id,
                partition: r.key.1,
                leader: i32::try_from(me).unwrap_or(-1),
                term: i32::try_from(term).unwrap_or(i32::MAX),
            };
            match n.write(cmd, std::time::Duration::from_secs(10)).await {
                Ok(_) => published = Some(term),
                Err(e) => {
                    tracing::debug!(topic = r.key.0.as_str(), partition = r.key.1, "leadership not published: {e}");
                    drop(n);
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    continue;
                }
            }
        }
        if rx.changed().await.is_err() {
            return; // the group shut down
        }
    }
}

/// Stores the image's ACLs and SCRAM credentials as this broker's (the security service's).
pub type SecuritySync = Box<dyn Fn(&MetadataImage) -> anyhow::Result<()> + Send + Sync>;

/// Keep this broker's topics (and, through `security`, its ACLs and credentials) in line with
/// the image, now and after every change. Holds the registry weakly so that shutdown can still
/// close it cleanly.
pub fn spawn_reconciler(
    state: &Arc<TopicRegistry>,
    security: SecuritySync,
    node: Arc<super::ClusterNode>,
    dir: &std::path::Path,
) -> anyhow::Result<()> {
    let reconciler = Reconciler::open(dir)?;
    let weak = Arc::downgrade(state);
    let mut changed = node.changed.clone();
    tokio::spawn(async move {
        loop {
            let Some(state) = weak.upgrade() else { return };
            let image = node.image();
            tokio::task::block_in_place(|| reconciler.run(&state, &security, &image));
            drop(state);
            tokio::select! {
                c = changed.changed() => {
                    if c.is_err() {
                        return;
                    }
                }
                // a replica stopped to be started again (`restart_when_converted`)
                _ = node.restart.notified() => {}
            }
        }
    });
    Ok(())
}
