//! The topic registry: topics, their ids, partitions and config overrides, persisted in
//! `<log.dirs>/__sluice_metadata.json` (written atomically: tmp file, fsync, rename, fsync dir),
//! and the partition logs under `<log.dirs>/<topic>-<partition>/`.
//!
//! Lock order: `topics` (registry) before any partition's log lock; the registry lock is never
//! held across an await or a blocking fsync of partition data.

use crate::config::Config;
use crate::dynamic_config::DynamicConfigs;
use crate::partition::Partition;
use crate::routing::{BrokerAddr, Route, ShardPlacement};
use crate::sync::OrDie as _;
use crate::topic_config::TopicSettings;
use serde::{Deserialize, Serialize};
use sluice_storage::{DirLock, Log, StorageError};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use uuid::Uuid;

pub const METADATA_FILE: &str = "__sluice_metadata.json";
pub const TOPIC_NAME_BYTES_MAX: usize = 249;
/// The group coordinator's internal log (its partitions are the coordinator's shards).
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";
/// The transaction coordinator's internal log.
pub const TXN_TOPIC: &str = "__transaction_state";
/// Names of internal logs kept in the data directory; no user topic may take them.
pub const RESERVED_TOPICS: &[&str] = &[OFFSETS_TOPIC, TXN_TOPIC];

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct TopicRecord {
    id: Uuid,
    partitions: i32,
    #[serde(default)]
    configs: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct MetadataFile {
    version: u32,
    cluster_id: String,
    topics: BTreeMap<String, TopicRecord>,
    /// Dynamic broker and group configs (in cluster mode a copy of the quorum's).
    #[serde(default)]
    dynamic: DynamicConfigs,
}

pub struct Topic {
    pub name: String,
    pub id: Uuid,
    pub configs: BTreeMap<String, String>,
    /// What `configs` mean over the broker's defaults.
    pub settings: TopicSettings,
    pub partitions: Vec<Arc<Partition>>,
}

impl Topic {
    /// Partition `index`, if it exists (negative and too-large indexes are simply absent).
    pub fn partition(&self, index: i32) -> Option<&Arc<Partition>> {
        usize::try_from(index).ok().and_then(|i| self.partitions.get(i))
    }
}

/// Why [`TopicRegistry::handle`] gives no way to write a partition here (its Kafka code:
/// `error_map::unwritable_code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unwritable {
    /// This broker holds no such partition (UNKNOWN_TOPIC_OR_PARTITION).
    NoSuchPartition,
    /// Cluster mode: a partition written elsewhere — a replicated one whose replica is not
    /// running here (yet), which only its Raft group may write, or one placed on a single other
    /// broker, of which this broker's copy is an empty placeholder (NOT_LEADER_OR_FOLLOWER:
    /// retriable; clients go to the leader).
    NotWrittenHere,
}

#[derive(Debug, thiserror::Error)]
pub enum TopicError {
    #[error("topic '{0}' already exists")]
    Exists(String),
    #[error("unknown topic '{0}'")]
    Unknown(String),
    #[error("invalid topic name '{0}': {1}")]
    InvalidName(String, String),
    #[error("invalid partition count: {0}")]
    InvalidPartitions(String),
    #[error("invalid replication factor {0}: this broker is a single node")]
    InvalidReplicationFactor(i16),
    #[error("invalid replication factor {0}: {1} brokers are registered")]
    ReplicationFactorTooLarge(i16, usize),
    #[error("invalid config {0}: {1}")]
    InvalidConfig(String, String),
    #[error("{0}")]
    InvalidReplicaAssignment(String),
    #[error("{0}")]
    InvalidRequest(String),
    #[error("storage: {0}")]
    Storage(#[from] StorageError),
    #[error("metadata quorum: {0}")]
    Cluster(String),
    /// Decided in the metadata quorum, not ready here within the wait (Kafka's
    /// REQUEST_TIMED_OUT: the change still happens).
    #[error("{0}")]
    TimedOut(String),
}

impl From<crate::topic_config::InvalidTopicConfig> for TopicError {
    fn from(e: crate::topic_config::InvalidTopicConfig) -> Self {
        TopicError::InvalidConfig(e.0, e.1)
    }
}

/// A topic asked for ([`TopicRegistry::propose_topic`]): created, or (cluster mode) decided in the
/// metadata quorum and not yet waited for ([`TopicRegistry::await_created`]).
pub enum Proposed {
    Created(Arc<Topic>),
    Decided { name: String, id: Uuid },
}

/// What this broker knows of the topics (and, in a cluster, of the metadata quorum's image
/// that decides them). Knows no coordinator: the group configs it stores are handed to
/// whoever subscribed ([`TopicRegistry::on_group_configs`]).
/// An edit of a topic's (or a broker or group resource's) config overrides, given the current
/// ones: AlterConfigs replaces them, IncrementalAlterConfigs applies its operations.
pub type ConfigEdit = Arc<dyn Fn(&mut BTreeMap<String, String>) -> Result<(), TopicError> + Send + Sync>;

pub struct TopicRegistry {
    pub config: Arc<Config>,
    pub cluster_id: String,
    data_dir: PathBuf,
    topics: RwLock<BTreeMap<String, Arc<Topic>>>,
    /// Dynamic broker and group configs; written under the `topics` write lock (topic
    /// settings are derived from them).
    dynamic: RwLock<DynamicConfigs>,
    pub hw_changed: Arc<tokio::sync::Notify>,
    /// Told every group config when the dynamic configs change (the group coordinator).
    group_configs: std::sync::OnceLock<GroupConfigsObserver>,
    /// The metadata quorum, in cluster mode (`controller.quorum.voters` set).
    pub cluster: std::sync::OnceLock<Arc<crate::cluster::ClusterNode>>,
    _lock: DirLock,
}

/// Kafka's topic-name rule: 1–249 of `[a-zA-Z0-9._-]`, not "." or "..".
pub fn validate_topic_name(name: &str) -> Result<(), TopicError> {
    let bad = |why: &str| Err(TopicError::InvalidName(name.to_string(), why.to_string()));
    if name.is_empty() {
        return bad("empty");
    }
    if name == "." || name == ".." {
        return bad("'.' and '..' are not allowed");
    }
    if RESERVED_TOPICS.contains(&name) {
        return bad("reserved for the broker's internal log");
    }
    if name.len() > TOPIC_NAME_BYTES_MAX {
        return bad("longer than 249 characters");
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-') {
        return bad("only ASCII letters, digits, '.', '_' and '-' are allowed");
    }
    Ok(())
}

/// Receives the group configs (group id → configs) whenever they change.
pub type GroupConfigsObserver = Box<dyn Fn(&BTreeMap<String, BTreeMap<String, String>>) + Send + Sync>;

impl TopicRegistry {
    /// Lock the data directory, load topic metadata, open (and recover) every partition log.
    pub fn open(config: Arc<Config>) -> Result<TopicRegistry, anyhow::Error> {
        let data_dir = config.log_dir.clone();
        let lock = DirLock::acquire(&data_dir)?;
        // finish deletions interrupted by a crash
        for e in std::fs::read_dir(&data_dir)? {
            let e = e?;
            if e.file_name().to_string_lossy().ends_with("-delete") {
                std::fs::remove_dir_all(e.path())?;
            }
        }
        let meta_path = data_dir.join(METADATA_FILE);
        let meta: MetadataFile = match std::fs::read(&meta_path) {
            Ok(b) => serde_json::from_slice(&b)
                .map_err(|e| anyhow::anyhow!("{} is unreadable ({e}); refusing to start", meta_path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => MetadataFile {
                version: 1,
                cluster_id: base64ish(Uuid::new_v4()),
                topics: BTreeMap::new(),
                dynamic: DynamicConfigs::default(),
            },
            Err(e) => return Err(e.into()),
        };
        let hw_changed = Arc::new(tokio::sync::Notify::new());
        let mut topics = BTreeMap::new();
        for (name, rec) in &meta.topics {
            let settings = TopicSettings::resolve(&config, &meta.dynamic, &rec.configs, false)?;
            let log_config = settings.log.clone();
            let mut partitions = Vec::new();
            for p in 0..rec.partitions {
                let dir = partition_dir(&data_dir, name, p);
                let mut log_config = log_config.clone();
                if dir.join(sluice_storage::log::RAFT_TERMS_FILE).exists() {
                    // one log per replica: the batches carry Raft terms (decision 0045)
                    log_config.leader_epoch = None;
                }
                let log = Log::open(&dir, log_config)?;
                let r = log.recovery_report();
                if !r.clean {
                    tracing::info!(
                        topic = name.as_str(),
                        partition = p,
                        scanned_bytes = r.bytes_scanned,
                        truncated_bytes = r.truncated_bytes,
                        "recovered after unclean shutdown"
                    );
                }
                partitions.push(held_in_cluster(&config, Partition::new(name.clone(), p, log, hw_changed.clone())));
            }
            topics.insert(
                name.clone(),
                Arc::new(Topic { name: name.clone(), id: rec.id, configs: rec.configs.clone(), settings, partitions }),
            );
        }
        let state = TopicRegistry {
            cluster: std::sync::OnceLock::new(),
            group_configs: std::sync::OnceLock::new(),
            config,
            cluster_id: meta.cluster_id.clone(),
            data_dir,
            topics: RwLock::new(topics),
            dynamic: RwLock::new(meta.dynamic.clone()),
            hw_changed,
            _lock: lock,
        };
        state.persist()?;
        Ok(state)
    }

    /// The brokers to list (id, host, port) and the controller: this broker alone in single-node
    /// mode; in cluster mode every registered broker (this one at the address of `listener`)
    /// and the metadata quorum's leader (-1 while there is none).
    pub fn cluster_view(&self, listener: &crate::config::security::ListenerConfig) -> (Vec<(i32, String, i32)>, i32) {
        let me = (self.config.node_id, listener.advertised_host.clone(), listener.advertised_port);
        let Some(c) = self.cluster.get() else { return (vec![me], self.config.node_id) };
        let mut brokers: Vec<(i32, String, i32)> = c
            .image()
            .brokers
            .values()
            .filter(|b| b.node_id != me.0)
            .map(|b| (b.node_id, b.host.clone(), b.port))
            .collect();
        brokers.push(me);
        brokers.sort();
        let controller = c.leader().and_then(|l| i32::try_from(l).ok()).unwrap_or(-1);
        (brokers, controller)
    }

    /// Cluster mode: this broker's replica of a replicated partition (replication factor > 1).
    pub fn replica(&self, topic: &str, index: i32) -> Option<Arc<crate::cluster::replica::Replica>> {
        self.cluster.get()?.replica(&(topic.to_string(), index))
    }

    /// The partition `topic`/`index` as this broker writes it: through its Raft group when this
    /// broker holds a replica of it, its local log when it is the partition's only copy.
    /// Every write (produce, markers, DeleteRecords) goes through this: a partition placed on
    /// several brokers is never written outside its Raft group — not even in the moment after
    /// the reconciler created its local copy and before it started the replica (a marker
    /// written there once left a transaction open for ever on the real log, and the copy
    /// ahead of its group).
    pub fn handle(&self, topic: &str, index: i32) -> Result<crate::partition_handle::PartitionHandle, Unwritable> {
        let partition = self.partition(topic, index).ok_or(Unwritable::NoSuchPartition)?;
        self.handle_of(topic, index, partition)
    }

    /// [`TopicRegistry::handle`] for a partition the caller already found.
    pub fn handle_of(
        &self,
        topic: &str,
        index: i32,
        partition: Arc<Partition>,
    ) -> Result<crate::partition_handle::PartitionHandle, Unwritable> {
        use crate::partition_handle::PartitionHandle;
        match self.replica(topic, index) {
            Some(replica) => Ok(PartitionHandle::Replicated { partition, replica }),
            None if self.written_elsewhere(topic, index) => Err(Unwritable::NotWrittenHere),
            None => Ok(PartitionHandle::Local(partition)),
        }
    }

    /// Cluster mode, for a partition this broker has no replica of running: is it written
    /// elsewhere? Yes when the metadata image places it on several brokers (only its Raft group
    /// writes it) or on one other broker (the reconciler creates every topic's partitions on
    /// every broker; a copy not placed here stays empty). Only a partition placed on this broker
    /// alone — or not in the image at all — is this broker's to write directly.
    pub fn written_elsewhere(&self, topic: &str, index: i32) -> bool {
        let Some(c) = self.cluster.get() else { return false };
        let image = c.image();
        let placed = image.replicas_of(topic, index);
        !placed.is_empty() && placed != [self.config.node_id]
    }

    /// Cluster mode: is `topic`/`index` one of the cluster's partitions, as this broker's
    /// metadata image has it (a broker that lacks it may just not have created it yet)? False
    /// on one node, where the local registry is the whole truth.
    pub fn placed_in_cluster(&self, topic: &str, index: i32) -> bool {
        self.cluster.get().is_some_and(|c| !c.image().replicas_of(topic, index).is_empty())
    }

    /// The Raft term of this broker's replica of `topic`/`partition` (its leader epoch), if
    /// it has one (a replicated partition, cluster mode).
    pub fn replica_term(&self, topic: &str, partition: i32) -> Option<i32> {
        let c = self.cluster.get()?;
        c.replica(&(topic.to_string(), partition)).map(|r| r.term())
    }

    /// Cluster mode: whether this broker leads `topic`/`partition`'s group but has not applied
    /// an entry of its own term yet (`Replica::leads_unsettled`).
    pub fn leader_unsettled(&self, topic: &str, partition: i32) -> bool {
        let Some(c) = self.cluster.get() else { return false };
        c.replica(&(topic.to_string(), partition)).is_some_and(|r| r.leads_unsettled())
    }

    /// Cluster mode: has every replicated partition of `topic` assigned to this broker a
    /// replica here that knows its leader?
    fn replicas_led(&self, topic: &str) -> bool {
        let Some(c) = self.cluster.get() else { return true };
        let image = c.image();
        let Some(info) = image.topics.get(topic) else { return false };
        info.replicas.iter().enumerate().all(|(p, r)| {
            r.len() < 2
                || !r.contains(&self.config.node_id)
                || c.replica(&(topic.to_string(), p as i32)).is_some_and(|rep| rep.leader().is_some())
        })
    }

    /// The cluster id clients see: the quorum's (the first registered broker's) in cluster
    /// mode — none until the quorum has named the cluster (a broker's own id meanwhile would
    /// differ from broker to broker, and librdkafka warns that it is connected to two
    /// clusters) — this broker's own otherwise.
    pub fn effective_cluster_id(&self) -> Option<String> {
        match self.cluster.get() {
            Some(c) => Some(c.image().cluster_id.clone()).filter(|id| !id.is_empty()),
            None => Some(self.cluster_id.clone()),
        }
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    fn persist_map(&self, topics: &BTreeMap<String, Arc<Topic>>) -> Result<(), StorageError> {
        let meta = MetadataFile {
            version: 1,
            cluster_id: self.cluster_id.clone(),
            topics: topics
                .iter()
                .map(|(n, t)| {
                    (
                        n.clone(),
                        TopicRecord { id: t.id, partitions: t.partitions.len() as i32, configs: t.configs.clone() },
                    )
                })
                .collect(),
            dynamic: self.dynamic.read().or_die().clone(),
        };
        let bytes = serde_json::to_vec_pretty(&meta).map_err(|e| StorageError::InvalidConfig(e.to_string()))?;
        sluice_storage::sidefile::write_atomic(&self.data_dir.join(METADATA_FILE), &bytes)
    }

    /// A topic's settings from `configs` over this broker's defaults (static and dynamic).
    fn settings_for(&self, configs: &BTreeMap<String, String>, strict: bool) -> Result<TopicSettings, TopicError> {
        let dynamic = self.dynamic.read().or_die();
        Ok(TopicSettings::resolve(&self.config, &dynamic, configs, strict)?)
    }

    /// The dynamic broker and group configs.
    pub fn dynamic(&self) -> DynamicConfigs {
        self.dynamic.read().or_die().clone()
    }

    /// Replace the dynamic configs of one resource (a broker's, "" the cluster default, or a
    /// group's: `resource_type` 4 or 32) with `configs`, validated by the caller (cluster mode:
    /// through the quorum).
    pub async fn set_resource_configs(
        self: &Arc<Self>,
        resource_type: i8,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<(), TopicError> {
        if self.cluster.get().is_none() {
            let name = name.to_string();
            return self
                .on_disk(move |s| {
                    let mut all = s.dynamic();
                    all.set_resource(resource_type, &name, configs);
                    s.replace_dynamic(all)
                })
                .await;
        }
        let want = configs.clone();
        self.quorum_write(crate::cluster::Command::SetResourceConfigs { resource_type, name: name.into(), configs })
            .await?;
        self.await_local(|s| {
            let d = s.dynamic();
            let map = if resource_type == 32 { &d.groups } else { &d.brokers };
            (map.get(name).cloned().unwrap_or_default() == want).then_some(())
        })
        .await
    }

    /// Run `f` — this broker's disk work: partition directories, metadata fsyncs — on the
    /// blocking pool, so an async handler's worker thread never waits for the disk.
    async fn on_disk<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&TopicRegistry) -> Result<T, TopicError> + Send + 'static,
    ) -> Result<T, TopicError> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || f(&me))
            .await
            .unwrap_or_else(|e| Err(TopicError::Cluster(format!("the topic metadata task failed: {e}"))))
    }

    /// Make the dynamic configs `new` (this broker only: persisted, then every topic's settings
    /// recomputed over them and the groups' timers updated).
    pub fn replace_dynamic(&self, new: DynamicConfigs) -> Result<(), TopicError> {
        let mut topics = self.topics.write().or_die();
        let old = std::mem::replace(&mut *self.dynamic.write().or_die(), new.clone());
        if old == new {
            return Ok(());
        }
        if let Err(e) = self.persist_map(&topics) {
            *self.dynamic.write().or_die() = old;
            return Err(e.into());
        }
        for (name, t) in topics.iter_mut() {
            let settings = match TopicSettings::resolve(&self.config, &new, &t.configs, false) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(
                        topic = name.as_str(),
                        "dynamic configs left the topic's settings as they were: {e}"
                    );
                    continue;
                }
            };
            if settings == t.settings {
                continue;
            }
            for p in &t.partitions {
                p.set_config(settings.log.clone())?;
            }
            *t = Arc::new(Topic {
                name: t.name.clone(),
                id: t.id,
                configs: t.configs.clone(),
                settings,
                partitions: t.partitions.clone(),
            });
        }
        if let Some(observer) = self.group_configs.get() {
            observer(&new.groups);
        }
        Ok(())
    }

    fn persist(&self) -> Result<(), StorageError> {
        let topics = self.topics.read().or_die();
        self.persist_map(&topics)
    }

    pub fn topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics.read().or_die().get(name).cloned()
    }

    pub fn topic_by_id(&self, id: Uuid) -> Option<Arc<Topic>> {
        self.topics.read().or_die().values().find(|t| t.id == id).cloned()
    }

    pub fn topics(&self) -> Vec<Arc<Topic>> {
        self.topics.read().or_die().values().cloned().collect()
    }

    pub fn partition(&self, topic: &str, index: i32) -> Option<Arc<Partition>> {
        self.topic(topic)?.partition(index).cloned()
    }

    /// Create a topic (validating everything before touching disk). The metadata file is
    /// written after the partition directories exist, so a crash in between leaves only
    /// unreferenced directories, which a later create of the same name reuses after wiping.
    pub async fn create_topic(
        self: &Arc<Self>,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<Arc<Topic>, TopicError> {
        let proposed = self.propose_topic(name, partitions, replication_factor, configs, validate_only).await?;
        self.await_created(proposed).await
    }

    /// [`TopicRegistry::create_topic`] without waiting for the cluster: in cluster mode the topic
    /// is decided in the quorum and [`TopicRegistry::await_created`] waits for it, so that a
    /// CreateTopics of many topics decides them all first and waits for them together (their
    /// replica groups start and elect at once, not one topic after the other).
    pub async fn propose_topic(
        self: &Arc<Self>,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<Proposed, TopicError> {
        self.settings_for(&configs, true)?;
        if self.cluster.get().is_none() {
            let name = name.to_string();
            return self
                .on_disk(move |s| {
                    s.create_topic_with_id(&name, None, partitions, replication_factor, configs, validate_only)
                })
                .await
                .map(Proposed::Created);
        }
        // cluster mode: validate here, decide in the quorum, then wait for this broker's copy
        validate_topic_name(name)?;
        let partitions = if partitions == -1 { self.config.num_partitions } else { partitions };
        let brokers = self.cluster.get().map_or(1, |c| c.image().brokers.len()).max(1);
        let rf = match (replication_factor, self.config.default_replication_factor) {
            (-1, -1) => brokers.min(3) as i16,
            (-1, d) => d,
            (r, _) => r,
        };
        if rf < 1 || rf as usize > brokers {
            return Err(TopicError::ReplicationFactorTooLarge(rf, brokers));
        }
        if validate_only {
            return self.create_topic_with_id(name, None, partitions, -1, configs, true).map(Proposed::Created);
        }
        self.create_in_quorum(name, partitions, configs, i32::from(rf), None).await
    }

    /// A topic proposed: the topic itself, or (cluster mode) decided in the quorum and
    /// [`TopicRegistry::await_created`] — answered once this broker has the topic and its
    /// replicated partitions have leaders (as Kafka's controller elects them at creation), so
    /// clients can use it at once.
    pub async fn await_created(&self, proposed: Proposed) -> Result<Arc<Topic>, TopicError> {
        match proposed {
            Proposed::Created(t) => Ok(t),
            Proposed::Decided { name, id } => {
                self.await_local(|s| s.topic(&name).filter(|t| t.id == id && s.replicas_led(&name))).await
            }
        }
    }

    /// Cluster mode: decide a new topic in the quorum (not waiting for it).
    async fn create_in_quorum(
        &self,
        name: &str,
        partitions: i32,
        configs: BTreeMap<String, String>,
        replication_factor: i32,
        assignment: Option<Vec<Vec<i32>>>,
    ) -> Result<Proposed, TopicError> {
        let id = Uuid::new_v4();
        self.quorum_write(crate::cluster::Command::CreateTopic {
            name: name.into(),
            id,
            partitions,
            configs,
            replication_factor,
            assignment,
        })
        .await?;
        Ok(Proposed::Decided { name: name.to_string(), id })
    }

    /// Kafka's checks of a manual replica assignment: every list `rf` distinct registered brokers.
    fn check_assignment(&self, assignment: &[Vec<i32>], rf: usize) -> Result<(), TopicError> {
        let bad = |m: String| Err(TopicError::InvalidReplicaAssignment(m));
        let registered: Vec<i32> = match self.cluster.get() {
            Some(c) => c.image().brokers.keys().copied().collect(),
            None => vec![self.config.node_id],
        };
        for replicas in assignment {
            if replicas.is_empty() {
                return bad("The manual partition assignment includes an empty replica list.".into());
            }
            if replicas.len() != rf {
                return bad(format!(
                    "The manual partition assignment includes a partition with {} replica(s), but this is not consistent with the others, which have {rf}.",
                    replicas.len()
                ));
            }
            for (i, b) in replicas.iter().enumerate() {
                if replicas[..i].contains(b) {
                    return bad(format!("The manual partition assignment includes the broker {b} more than once."));
                }
                if !registered.contains(b) {
                    return bad(format!(
                        "The manual partition assignment includes broker {b}, but no such broker is registered."
                    ));
                }
            }
        }
        Ok(())
    }

    /// Grow a topic to `count` partitions placed as `assignment` says (CreatePartitions
    /// `assignments`: one replica list per new partition), with Kafka's validation.
    pub async fn create_partitions_assigned(
        self: &Arc<Self>,
        name: &str,
        count: i32,
        assignment: Vec<Vec<i32>>,
        validate_only: bool,
    ) -> Result<(), TopicError> {
        let topic = self.topic(name).ok_or_else(|| TopicError::Unknown(name.to_string()))?;
        let current = topic.partitions.len() as i32;
        let adding = count - current;
        if adding > 0 && assignment.len() as i32 != adding {
            return Err(TopicError::InvalidReplicaAssignment(format!(
                "Attempted to add {adding} additional partition(s), but only {} assignment(s) were supplied.",
                assignment.len()
            )));
        }
        let rf = match self.cluster.get() {
            Some(c) => c.image().topics.get(name).and_then(|i| i.replicas.first().map(Vec::len)).unwrap_or(1),
            None => 1,
        };
        self.check_assignment(&assignment, rf)?;
        if self.cluster.get().is_none() || validate_only {
            let name = name.to_string();
            return self.on_disk(move |s| s.create_partitions_local(&name, count, validate_only)).await;
        }
        self.quorum_write(crate::cluster::Command::CreatePartitions {
            name: name.into(),
            count,
            assignment: Some(assignment),
        })
        .await?;
        self.await_local(|s| s.topic(name).filter(|t| t.partitions.len() as i32 >= count).map(|_| ())).await
    }

    /// Propose a topic with a manual replica assignment (CreateTopics `assignments`): partition
    /// i's replicas, preferred leader first, with Kafka's validation. On one broker the only
    /// assignment is this broker, once per partition. Waited for as [`TopicRegistry::propose_topic`].
    pub async fn propose_topic_assigned(
        self: &Arc<Self>,
        name: &str,
        assignment: Vec<Vec<i32>>,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<Proposed, TopicError> {
        let rf = assignment.first().map_or(0, Vec::len);
        self.check_assignment(&assignment, rf)?;
        self.settings_for(&configs, true)?;
        let partitions = i32::try_from(assignment.len()).unwrap_or(i32::MAX);
        if self.cluster.get().is_none() || validate_only {
            validate_topic_name(name)?;
            let name = name.to_string();
            return self
                .on_disk(move |s| s.create_topic_with_id(&name, None, partitions, -1, configs, validate_only))
                .await
                .map(Proposed::Created);
        }
        validate_topic_name(name)?;
        self.create_in_quorum(name, partitions, configs, rf as i32, Some(assignment)).await
    }

    /// Delete a topic (cluster mode: everywhere, through the quorum).
    pub async fn delete_topic(self: &Arc<Self>, name: &str) -> Result<(), TopicError> {
        if self.cluster.get().is_none() {
            let name = name.to_string();
            return self.on_disk(move |s| s.delete_topic_local(&name)).await;
        }
        self.quorum_write(crate::cluster::Command::DeleteTopic { name: name.into() }).await?;
        self.await_local(|s| s.topic(name).is_none().then_some(())).await
    }

    /// Grow a topic to `count` partitions (cluster mode: through the quorum).
    pub async fn create_partitions(
        self: &Arc<Self>,
        name: &str,
        count: i32,
        validate_only: bool,
    ) -> Result<(), TopicError> {
        if self.cluster.get().is_none() || validate_only {
            let name = name.to_string();
            return self.on_disk(move |s| s.create_partitions_local(&name, count, validate_only)).await;
        }
        self.quorum_write(crate::cluster::Command::CreatePartitions { name: name.into(), count, assignment: None })
            .await?;
        self.await_local(|s| s.topic(name).filter(|t| t.partitions.len() as i32 >= count).map(|_| ())).await
    }

    /// Change a topic's config overrides (cluster mode: through the quorum).
    pub async fn alter_topic_configs(
        self: &Arc<Self>,
        name: &str,
        f: ConfigEdit,
        validate_only: bool,
    ) -> Result<(), TopicError> {
        if self.cluster.get().is_none() || validate_only {
            let name = name.to_string();
            return self
                .on_disk(move |s| {
                    // set now: Kafka's validation applies in full
                    let f = |m: &mut BTreeMap<String, String>| {
                        f(m)?;
                        s.settings_for(m, true).map(|_| ())
                    };
                    s.alter_topic_configs_local(&name, f, validate_only)
                })
                .await;
        }
        let topic = self.topic(name).ok_or_else(|| TopicError::Unknown(name.to_string()))?;
        let mut configs = topic.configs.clone();
        f(&mut configs)?;
        self.settings_for(&configs, true)?;
        let want = configs.clone();
        self.quorum_write(crate::cluster::Command::SetTopicConfigs { name: name.into(), configs }).await?;
        self.await_local(|s| s.topic(name).filter(|t| t.configs == want).map(|_| ())).await
    }

    /// Commit `cmd` in the metadata quorum and return what applying it gave.
    pub async fn cluster_write(&self, cmd: crate::cluster::Command) -> Result<crate::cluster::CommandResult, String> {
        let node = self.cluster.get().cloned().ok_or_else(|| "not in cluster mode".to_string())?;
        node.write(cmd, std::time::Duration::from_secs(10)).await.map_err(|e| e.to_string())
    }

    /// Wait (up to 10 s) until this broker's reconciled state satisfies `f`.
    pub async fn await_cluster<T>(&self, f: impl Fn(&TopicRegistry) -> Option<T>) -> Result<T, String> {
        self.await_local(f).await.map_err(|e| e.to_string())
    }

    /// Commit a topic command in the metadata quorum.
    async fn quorum_write(&self, cmd: crate::cluster::Command) -> Result<(), TopicError> {
        use crate::cluster::{CommandResult, Refusal};
        let node = self.cluster.get().cloned().ok_or_else(|| TopicError::Cluster("not in cluster mode".into()))?;
        let name = match &cmd {
            crate::cluster::Command::CreateTopic { name, .. }
            | crate::cluster::Command::DeleteTopic { name }
            | crate::cluster::Command::CreatePartitions { name, .. }
            | crate::cluster::Command::SetTopicConfigs { name, .. } => name.clone(),
            _ => String::new(),
        };
        let result = node
            .write(cmd, std::time::Duration::from_secs(10))
            .await
            .map_err(|e| TopicError::Cluster(e.to_string()))?;
        match result {
            CommandResult::Refused(Refusal::TopicExists) => Err(TopicError::Exists(name)),
            CommandResult::Refused(Refusal::UnknownTopic) => Err(TopicError::Unknown(name)),
            CommandResult::Refused(Refusal::InvalidPartitions(m)) => Err(TopicError::InvalidPartitions(m)),
            CommandResult::Refused(Refusal::NoBrokers) => Err(TopicError::Cluster("no broker is registered".into())),
            CommandResult::Refused(Refusal::InvalidReplicationFactor(m)) => Err(TopicError::Cluster(m)),
            _ => Ok(()),
        }
    }

    /// Wait (up to 10 s) until this broker's reconciled state satisfies `f`.
    async fn await_local<T>(&self, f: impl Fn(&TopicRegistry) -> Option<T>) -> Result<T, TopicError> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            if let Some(x) = f(self) {
                return Ok(x);
            }
            if std::time::Instant::now() > deadline {
                return Err(TopicError::TimedOut(
                    "decided in the metadata quorum, not yet ready on this broker within 10 s (it will be)".into(),
                ));
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// [`TopicRegistry::create_topic`] with a given topic id (cluster mode: the quorum's).
    pub fn create_topic_with_id(
        &self,
        name: &str,
        id: Option<Uuid>,
        partitions: i32,
        replication_factor: i16,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<Arc<Topic>, TopicError> {
        validate_topic_name(name)?;
        let partitions = if partitions == -1 { self.config.num_partitions } else { partitions };
        if !(1..=10_000).contains(&partitions) {
            return Err(TopicError::InvalidPartitions(format!("{partitions} (must be 1..=10000)")));
        }
        if replication_factor != -1 && replication_factor != 1 {
            return Err(TopicError::InvalidReplicationFactor(replication_factor));
        }
        let settings = self.settings_for(&configs, false)?;
        let log_config = settings.log.clone();
        let mut topics = self.topics.write().or_die();
        if topics.contains_key(name) {
            return Err(TopicError::Exists(name.to_string()));
        }
        let id = id.unwrap_or_else(Uuid::new_v4);
        if validate_only {
            return Ok(Arc::new(Topic { name: name.to_string(), id, configs, settings, partitions: vec![] }));
        }
        let mut parts = Vec::new();
        for p in 0..partitions {
            let dir = partition_dir(&self.data_dir, name, p);
            if dir.exists() {
                std::fs::remove_dir_all(&dir).map_err(|e| StorageError::Io { path: dir.clone(), source: e })?;
            }
            let log = Log::open(&dir, log_config.clone())?;
            parts
                .push(held_in_cluster(&self.config, Partition::new(name.to_string(), p, log, self.hw_changed.clone())));
        }
        let topic = Arc::new(Topic { name: name.to_string(), id, configs, settings, partitions: parts });
        topics.insert(name.to_string(), topic.clone());
        if let Err(e) = self.persist_map(&topics) {
            topics.remove(name);
            return Err(e.into());
        }
        tracing::info!(topic = name, partitions, "created topic");
        Ok(topic)
    }

    /// Delete a topic: forget it durably first, then remove its directories (this broker only).
    pub fn delete_topic_local(&self, name: &str) -> Result<(), TopicError> {
        let mut topics = self.topics.write().or_die();
        let topic = topics.remove(name).ok_or_else(|| TopicError::Unknown(name.to_string()))?;
        if let Err(e) = self.persist_map(&topics) {
            topics.insert(name.to_string(), topic);
            return Err(e.into());
        }
        drop(topics);
        for p in &topic.partitions {
            let dir = partition_dir(&self.data_dir, name, p.index);
            let doomed = self.data_dir.join(format!("{name}-{}.{}-delete", p.index, Uuid::new_v4().simple()));
            if std::fs::rename(&dir, &doomed).is_ok() {
                let _ = std::fs::remove_dir_all(&doomed);
            }
        }
        tracing::info!(topic = name, "deleted topic");
        Ok(())
    }

    /// Grow a topic to `count` partitions (this broker only).
    pub fn create_partitions_local(&self, name: &str, count: i32, validate_only: bool) -> Result<(), TopicError> {
        let mut topics = self.topics.write().or_die();
        let topic = topics.get(name).cloned().ok_or_else(|| TopicError::Unknown(name.to_string()))?;
        let current = topic.partitions.len() as i32;
        if count <= current {
            return Err(TopicError::InvalidPartitions(format!(
                "topic has {current} partitions; the new count {count} must be larger"
            )));
        }
        if count > 10_000 {
            return Err(TopicError::InvalidPartitions(format!("{count} (must be ≤ 10000)")));
        }
        if validate_only {
            return Ok(());
        }
        let log_config = topic.settings.log.clone();
        let mut parts = topic.partitions.clone();
        for p in current..count {
            let dir = partition_dir(&self.data_dir, name, p);
            if dir.exists() {
                std::fs::remove_dir_all(&dir).map_err(|e| StorageError::Io { path: dir.clone(), source: e })?;
            }
            let log = Log::open(&dir, log_config.clone())?;
            parts
                .push(held_in_cluster(&self.config, Partition::new(name.to_string(), p, log, self.hw_changed.clone())));
        }
        let new = Arc::new(Topic {
            name: name.to_string(),
            id: topic.id,
            configs: topic.configs.clone(),
            settings: topic.settings.clone(),
            partitions: parts,
        });
        topics.insert(name.to_string(), new);
        if let Err(e) = self.persist_map(&topics) {
            topics.insert(name.to_string(), topic);
            return Err(e.into());
        }
        Ok(())
    }

    /// Replace (or, with `incremental`, merge) a topic's config overrides (this broker only).
    pub fn alter_topic_configs_local(
        &self,
        name: &str,
        f: impl FnOnce(&mut BTreeMap<String, String>) -> Result<(), TopicError>,
        validate_only: bool,
    ) -> Result<(), TopicError> {
        let mut topics = self.topics.write().or_die();
        let topic = topics.get(name).cloned().ok_or_else(|| TopicError::Unknown(name.to_string()))?;
        let mut configs = topic.configs.clone();
        f(&mut configs)?;
        let settings = self.settings_for(&configs, false)?;
        let log_config = settings.log.clone();
        if validate_only {
            return Ok(());
        }
        let new = Arc::new(Topic {
            name: name.to_string(),
            id: topic.id,
            configs,
            settings,
            partitions: topic.partitions.clone(),
        });
        topics.insert(name.to_string(), new);
        if let Err(e) = self.persist_map(&topics) {
            topics.insert(name.to_string(), topic);
            return Err(e.into());
        }
        for p in &topics[name].partitions {
            p.set_config(log_config.clone())?;
        }
        Ok(())
    }

    /// Flush every partition (at shutdown, when the registry is still shared).
    pub fn flush_all(&self) {
        for t in self.topics() {
            for p in &t.partitions {
                let _ = p.flush();
            }
        }
    }

    /// Flush every partition and close the logs cleanly (SIGTERM). Partitions (or topics)
    /// still shared by in-flight requests are flushed but not marked clean.
    pub fn shutdown(self) {
        let topics = std::mem::take(&mut *self.topics.write().or_die());
        let flush = |p: &Partition| {
            if let Err(e) = p.flush() {
                tracing::error!(topic = %p.topic, partition = p.index, "flush at shutdown failed: {e}");
            }
        };
        for (_, topic) in topics {
            let topic = match Arc::try_unwrap(topic) {
                Ok(topic) => topic,
                Err(shared) => {
                    shared.partitions.iter().for_each(|p| flush(p));
                    continue;
                }
            };
            for p in topic.partitions {
                match Arc::try_unwrap(p) {
                    Ok(p) => {
                        if let Err(e) = p.into_log().close() {
                            tracing::error!("clean close failed: {e}");
                        }
                    }
                    Err(p) => flush(&p),
                }
            }
        }
    }
}

impl TopicRegistry {
    /// Cluster mode: who leads `topic`/`index` and its leader epoch. A replicated partition's
    /// leader is its Raft group's (-1 while it elects one; epoch = the Raft term) — on a broker
    /// that is not one of its replicas, the leader the group last published to the metadata
    /// quorum; otherwise the assigned broker (epoch 0). `None`: unknown here (or single-node mode).
    pub fn leader_of(&self, topic: &str, index: i32) -> Option<(i32, i32)> {
        let c = self.cluster.get()?;
        if let Some(r) = c.replica(&(topic.to_string(), index)) {
            return Some((r.leader().unwrap_or(-1), r.term()));
        }
        // not a replica here: the leader its group last published, else the preferred one —
        // never this broker, whose replica is not running (it could not lead the group)
        let image = c.image();
        let led = image.published_leader(topic, index).or_else(|| image.leader(topic, index).map(|l| (l, 0)));
        led.map(|(l, term)| {
            if l == self.config.node_id && image.replicas_of(topic, index).len() > 1 {
                (-1, term)
            } else {
                (l, term)
            }
        })
    }

    /// Who coordinates `shard` of a coordinator placed by `placement`: here on one node; in a
    /// cluster the shard's Raft leader (replicated log), or the brokers in id order otherwise.
    pub fn coordinator_route(&self, placement: &dyn ShardPlacement, shard: i32) -> Route {
        let here = || if placement.shard_failed(shard) { Route::Electing } else { Route::Here };
        let Some(c) = self.cluster.get() else { return here() };
        let image = c.image();
        let owner = if placement.replicated() {
            placement.shard_leader(shard)
        } else {
            let ids: Vec<&crate::cluster::BrokerInfo> = image.brokers.values().collect();
            usize::try_from(shard).ok().and_then(|i| ids.get(i % ids.len().max(1))).map(|b| b.node_id)
        };
        match owner.and_then(|o| image.brokers.get(&o)) {
            Some(b) if b.node_id == self.config.node_id => here(),
            Some(b) => Route::Broker(BrokerAddr { node_id: b.node_id, host: b.host.clone(), port: b.port }),
            None => Route::Electing,
        }
    }

    /// Subscribe the group coordinator to the group configs (told the current ones now).
    pub fn on_group_configs(&self, observer: GroupConfigsObserver) {
        observer(&self.dynamic().groups);
        if self.group_configs.set(observer).is_err() {
            tracing::error!("group configs subscribed twice; keeping the first subscriber");
        }
    }
}

/// Cluster mode: the log cleaner leaves a partition alone until its replica says from where a
/// restart replays (`Partition::set_clean_limit`), or the reconciler finds it is not replicated.
fn held_in_cluster(config: &Config, p: Partition) -> Arc<Partition> {
    if !config.voters.is_empty() {
        p.set_clean_limit(0);
    }
    Arc::new(p)
}

pub fn partition_dir(data_dir: &Path, topic: &str, p: i32) -> PathBuf {
    data_dir.join(format!("{topic}-{p}"))
}

/// Kafka cluster ids are 22-char url-safe base64 of a UUID; hex is fine for clients.
fn base64ish(u: Uuid) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bits = u.as_u128();
    (0..22).map(|i| ALPHABET[((bits >> (i * 6)) & 63) as usize] as char).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The recovery point in a partition's checkpoint file (`sluice_storage::log`'s format).
    fn recovery_point(dir: &Path) -> i64 {
        let framed = sluice_storage::sidefile::read_framed(&dir.join(sluice_storage::log::CHECKPOINT_FILE), *b"SLCP");
        let (_, payload) = framed.expect("readable").expect("a checkpoint");
        i64::from_be_bytes(payload[..8].try_into().expect("8 bytes"))
    }

    /// SIGTERM while a request still holds a topic: its partitions are flushed all the same.
    /// With `log.flush.policy=interval`, acknowledged records that were not yet synced reach
    /// the disk, and the recovery point covers them.
    #[test]
    fn shutdown_flushes_the_partitions_of_a_topic_still_in_use() {
        use sluice_protocol::batch::{BatchBuilder, NewRecord};
        let dir = tempfile::tempdir().expect("tempdir");
        let mut flags = BTreeMap::new();
        flags.insert("log.dirs".to_string(), dir.path().display().to_string());
        flags.insert("log.flush.policy".to_string(), "interval".to_string());
        flags.insert("log.flush.interval.ms".to_string(), "3600000".to_string());
        let config = Arc::new(crate::config::resolve(&flags, &BTreeMap::new(), None).expect("config"));
        let topics = TopicRegistry::open(config).expect("open");
        let topic = topics.create_topic_with_id("held", None, 1, 1, BTreeMap::new(), false).expect("topic");
        let records = vec![NewRecord { timestamp: crate::clock::now_ms(), ..Default::default() }; 3];
        let mut batch = BatchBuilder::default().build(&records).expect("batch").to_vec();
        topic.partitions[0].append_batch(&mut batch, 0).expect("append");
        let partition_dir = dir.path().join("held-0");
        assert_eq!(recovery_point(&partition_dir), 0, "nothing synced yet");
        topics.shutdown();
        assert_eq!(recovery_point(&partition_dir), 3, "flushed at shutdown although still in use");
        drop(topic);
    }

    #[test]
    fn topic_names() {
        assert!(validate_topic_name("orders.v1_x-y").is_ok());
        assert!(validate_topic_name("").is_err());
        assert!(validate_topic_name("..").is_err());
        assert!(validate_topic_name("a/b").is_err());
        assert!(validate_topic_name(&"x".repeat(250)).is_err());
    }

    #[test]
    fn topic_configs() {
        let c = crate::config::resolve(&BTreeMap::new(), &BTreeMap::new(), None).expect("defaults");
        let mut m = BTreeMap::new();
        m.insert("retention.ms".to_string(), "1000".to_string());
        assert_eq!(TopicSettings::resolve(&c, &DynamicConfigs::default(), &m, true).unwrap().log.retention_ms, 1000);
        m.insert("cleanup.policy".to_string(), "compact".to_string());
        let s = TopicSettings::resolve(&c, &DynamicConfigs::default(), &m, true).unwrap();
        assert!(s.log.cleanup_compact && !s.log.cleanup_delete, "compact only: no retention");
        m.insert("cleanup.policy".to_string(), "compact, delete".to_string());
        let s = TopicSettings::resolve(&c, &DynamicConfigs::default(), &m, true).unwrap();
        assert!(s.log.cleanup_compact && s.log.cleanup_delete);
        m.insert("cleanup.policy".to_string(), "shred".to_string());
        assert!(TopicSettings::resolve(&c, &DynamicConfigs::default(), &m, true).is_err());
        let mut m = BTreeMap::new();
        m.insert("nope".to_string(), "1".to_string());
        assert!(TopicSettings::resolve(&c, &DynamicConfigs::default(), &m, false).is_err());
    }
}
