//! Cluster mode: the metadata quorum, a Raft group (openraft 0.9) across the voters named in
//! `controller.quorum.voters`. It holds the cluster's metadata image — registered brokers,
//! topics and their replica assignments, configs, producer-id blocks, ACLs and SCRAM users —
//! and its leader is the cluster's controller (docs/decisions/0010).
//!
//! - `store`: the metadata quorum's durable Raft log (binary records, fsynced) and its state
//!   machine (the image);
//! - `network`: every Raft group's RPCs, forwarded writes and admin calls between brokers,
//!   length-prefixed bincode frames over TCP;
//! - `failover`: elects a new leader at once when a leader's process is found gone;
//! - `replica`: one Raft group per replicated partition and per coordinator-log partition;
//! - `reconcile`: makes this broker's topics and replicas match the image;
//! - `reassign`: moves a partition group's voters to the replicas the image assigns.
//!
//! Where requests must go is `routing`; the gate that sends them there is `pipeline::route`.

pub mod convert;
pub mod failover;
pub mod mend;
pub mod network;
pub mod reassign;
pub mod reconcile;
pub mod replica;
pub mod rpc_health;
pub mod store;

use crate::sync::OrDie as _;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Cursor;
use std::sync::{Arc, RwLock};
use std::time::Duration;

pub use crate::replication::types::NodeId;

/// A change to the metadata image. Applied in log order on every voter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// A broker announces itself and the address clients should use.
    /// The first registration also names the cluster (its `cluster_id`).
    RegisterBroker {
        node_id: i32,
        host: String,
        port: i32,
        cluster_id: String,
    },
    /// A broker left the cluster (`UnregisterBroker`): no longer listed.
    UnregisterBroker {
        node_id: i32,
    },
    /// Hand out the next block of producer ids (never handed out twice, across failovers).
    AllocateProducerIds {
        node_id: i32,
        count: i64,
    },
    /// Create a topic; its partitions are assigned to the registered brokers.
    CreateTopic {
        name: String,
        id: uuid::Uuid,
        partitions: i32,
        configs: BTreeMap<String, String>,
        /// Replicas per partition (0 in entries written before replication: one).
        #[serde(default)]
        replication_factor: i32,
        /// A manual assignment (CreateTopics `assignments`), validated by the broker that
        /// took the request: partition i's replicas, preferred leader first.
        #[serde(default)]
        assignment: Option<Vec<Vec<i32>>>,
    },
    DeleteTopic {
        name: String,
    },
    /// Grow a topic to `count` partitions.
    CreatePartitions {
        name: String,
        count: i32,
        /// The new partitions' replicas (CreatePartitions `assignments`), validated by the
        /// broker that took the request.
        #[serde(default)]
        assignment: Option<Vec<Vec<i32>>>,
    },
    /// Move a replicated partition to a new replica set (the partition's Raft group changes its
    /// membership: new replicas catch up as learners, then the voters are replaced).
    ReassignPartition {
        name: String,
        partition: i32,
        replicas: Vec<i32>,
    },
    /// The partition's group now has exactly its assigned replicas as voters.
    ReassignmentDone {
        name: String,
        partition: i32,
        replicas: Vec<i32>,
    },
    /// A replicated partition's Raft group elected `leader` in `term` (published by the new
    /// leader, so brokers that are not replicas route clients to it as well).
    PartitionLeader {
        name: String,
        id: uuid::Uuid,
        partition: i32,
        leader: i32,
        term: i32,
    },
    /// Replace a topic's config overrides.
    SetTopicConfigs {
        name: String,
        configs: BTreeMap<String, String>,
    },
    /// Replace the dynamic configs of a broker resource (resource type 4: "" the cluster
    /// default, or a broker id) or a group (32), already validated; empty removes them.
    SetResourceConfigs {
        resource_type: i8,
        name: String,
        configs: BTreeMap<String, String>,
    },
    /// Add ACL bindings (already validated; present ones are kept once).
    CreateAcls {
        acls: Vec<crate::security::model::AclBinding>,
    },
    /// Delete the bindings each filter matches.
    DeleteAcls {
        filters: Vec<crate::security::model::AclFilter>,
    },
    /// Set and delete SCRAM credentials (`(user, mechanism name)`); with `only_if_absent`, an
    /// upsert applies only to a user with no credential yet (bootstrap users, first join).
    AlterCredentials {
        upserts: Vec<(String, String, crate::security::model::CredentialRecord)>,
        deletes: Vec<(String, String)>,
        only_if_absent: bool,
    },
}

/// What applying a command returned.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommandResult {
    #[default]
    Done,
    /// `[first, first + count)` is the caller's.
    ProducerIds { first: i64, count: i64 },
    /// The bindings each DeleteAcls filter removed.
    DeletedAcls(Vec<Vec<crate::security::model::AclBinding>>),
    /// The command was refused (the image is unchanged).
    Refused(Refusal),
}

/// Why a topic command was refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Refusal {
    TopicExists,
    UnknownTopic,
    InvalidPartitions(String),
    NoBrokers,
    InvalidReplicationFactor(String),
    InvalidReplicaAssignment(String),
}

/// A topic in the image: its id, the replicas of each partition (leader first), its configs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicInfo {
    pub id: uuid::Uuid,
    pub replicas: Vec<Vec<i32>>,
    pub configs: BTreeMap<String, String>,
    /// Partitions being reassigned, with the replicas they had before.
    #[serde(default)]
    pub moving: BTreeMap<i32, Vec<i32>>,
    /// Partitions ever reassigned: their Raft group exists, so no replica may initialize a
    /// new one (only the first replica at creation does).
    #[serde(default)]
    pub moved: std::collections::BTreeSet<i32>,
    /// The last leader each replicated partition's group published: (leader, Raft term).
    #[serde(default)]
    pub leaders: BTreeMap<i32, (i32, i32)>,
}

openraft::declare_raft_types!(
    pub TypeConfig:
        D = Command,
        R = CommandResult,
        NodeId = NodeId,
        Node = openraft::BasicNode,
);

pub type Raft = openraft::Raft<TypeConfig>;

/// The published image: swapped whole after each apply.
pub type SharedImage = Arc<RwLock<Arc<MetadataImage>>>;

/// A registered broker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerInfo {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
}

/// The cluster's metadata as of the last applied log entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataImage {
    pub cluster_id: String,
    pub brokers: BTreeMap<i32, BrokerInfo>,
    /// The next producer id not yet handed out.
    pub next_producer_id: i64,
    #[serde(default)]
    pub topics: BTreeMap<String, TopicInfo>,
    /// ACL bindings, cluster-wide.
    #[serde(default)]
    pub acls: Vec<crate::security::model::AclBinding>,
    /// SCRAM credentials, cluster-wide.
    #[serde(default)]
    pub credentials: crate::security::model::CredentialMap,
    /// Dynamic broker and group configs, cluster-wide.
    #[serde(default)]
    pub configs: crate::dynamic_config::DynamicConfigs,
    /// The Raft index of the last entry applied (a broker's copies of ACLs and credentials
    /// are replaced only by a newer image, never by an older one replayed at start).
    #[serde(default)]
    pub applied_index: u64,
}

impl MetadataImage {
    /// Apply one command (deterministic: every voter computes the same result).
    pub fn apply(&mut self, c: &Command) -> CommandResult {
        match c {
            Command::RegisterBroker { node_id, host, port, cluster_id } => {
                if self.cluster_id.is_empty() {
                    self.cluster_id = cluster_id.clone();
                }
                self.brokers.insert(*node_id, BrokerInfo { node_id: *node_id, host: host.clone(), port: *port });
                CommandResult::Done
            }
            Command::UnregisterBroker { node_id } => {
                self.brokers.remove(node_id);
                CommandResult::Done
            }
            Command::AllocateProducerIds { count, .. } => {
                let first = self.next_producer_id;
                self.next_producer_id = first.saturating_add((*count).max(1));
                CommandResult::ProducerIds { first, count: (*count).max(1) }
            }
            Command::CreateTopic { name, id, partitions, configs, replication_factor, assignment } => {
                if self.topics.contains_key(name) {
                    return CommandResult::Refused(Refusal::TopicExists);
                }
                if !(1..=10_000).contains(partitions) {
                    return CommandResult::Refused(Refusal::InvalidPartitions(format!("{partitions}")));
                }
                let rf = (*replication_factor).max(1);
                if rf as usize > self.brokers.len() && !self.brokers.is_empty() {
                    return CommandResult::Refused(Refusal::InvalidReplicationFactor(format!(
                        "replication factor {rf} is larger than the {} registered brokers",
                        self.brokers.len()
                    )));
                }
                if let Some(a) = assignment {
                    if let Some(b) = a.iter().flatten().find(|b| !self.brokers.contains_key(b)) {
                        return CommandResult::Refused(Refusal::InvalidReplicationFactor(format!(
                            "The manual partition assignment includes broker {b}, but no such broker is registered."
                        )));
                    }
                }
                let replicas = match assignment {
                    Some(a) => a.clone(),
                    None => match self.assign(name, 0, *partitions, rf) {
                        Some(r) => r,
                        None => return CommandResult::Refused(Refusal::NoBrokers),
                    },
                };
                self.topics.insert(
                    name.clone(),
                    TopicInfo {
                        id: *id,
                        replicas,
                        configs: configs.clone(),
                        moving: BTreeMap::new(),
                        moved: Default::default(),
                        leaders: BTreeMap::new(),
                    },
                );
                CommandResult::Done
            }
            Command::DeleteTopic { name } => match self.topics.remove(name) {
                Some(_) => CommandResult::Done,
                None => CommandResult::Refused(Refusal::UnknownTopic),
            },
            Command::CreatePartitions { name, count, assignment } => {
                let Some((current, rf)) = self
                    .topics
                    .get(name)
                    .map(|t| (t.replicas.len() as i32, t.replicas.first().map_or(1, |r| r.len() as i32)))
                else {
                    return CommandResult::Refused(Refusal::UnknownTopic);
                };
                if *count <= current || *count > 10_000 {
                    return CommandResult::Refused(Refusal::InvalidPartitions(format!(
                        "topic has {current} partitions; {count} must be larger (and at most 10000)"
                    )));
                }
                let more = match assignment {
                    Some(a)
                        if a.len() as i32 == count - current
                            && a.iter().flatten().all(|b| self.brokers.contains_key(b)) =>
                    {
                        a.clone()
                    }
                    Some(_) => {
                        return CommandResult::Refused(Refusal::InvalidReplicationFactor(
                            "the manual partition assignment names unregistered brokers".into(),
                        ))
                    }
                    None => match self.assign(name, current, *count, rf) {
                        Some(m) => m,
                        None => return CommandResult::Refused(Refusal::NoBrokers),
                    },
                };
                if let Some(t) = self.topics.get_mut(name) {
                    t.replicas.extend(more);
                }
                CommandResult::Done
            }
            Command::ReassignPartition { name, partition, replicas } => {
                let brokers = &self.brokers;
                let Some(t) = self.topics.get_mut(name) else {
                    return CommandResult::Refused(Refusal::UnknownTopic);
                };
                let Some(current) = usize::try_from(*partition).ok().and_then(|p| t.replicas.get_mut(p)) else {
                    return CommandResult::Refused(Refusal::UnknownTopic);
                };
                let refuse = |m: String| CommandResult::Refused(Refusal::InvalidReplicaAssignment(m));
                if current.len() < 2 || replicas.len() < 2 {
                    return refuse("only replicated partitions move (two replicas or more, before and after)".into());
                }
                let distinct: std::collections::BTreeSet<i32> = replicas.iter().copied().collect();
                if distinct.len() != replicas.len() {
                    return refuse(format!("replicas {replicas:?} name a broker twice"));
                }
                if let Some(b) = replicas.iter().find(|b| !brokers.contains_key(b)) {
                    return refuse(format!("broker {b} is not registered"));
                }
                if current == replicas {
                    return CommandResult::Done;
                }
                let before = t.moving.get(partition).cloned().unwrap_or_else(|| current.clone());
                t.moving.insert(*partition, before);
                t.moved.insert(*partition);
                *current = replicas.clone();
                CommandResult::Done
            }
            Command::ReassignmentDone { name, partition, replicas } => {
                if let Some(t) = self.topics.get_mut(name) {
                    let now = usize::try_from(*partition).ok().and_then(|p| t.replicas.get(p));
                    if now == Some(replicas) {
                        t.moving.remove(partition);
                    }
                }
                CommandResult::Done
            }
            Command::PartitionLeader { name, id, partition, leader, term } => {
                if let Some(t) = self.topics.get_mut(name).filter(|t| t.id == *id) {
                    let newer = t.leaders.get(partition).is_none_or(|(_, known)| *term >= *known);
                    if newer && usize::try_from(*partition).is_ok_and(|p| p < t.replicas.len()) {
                        t.leaders.insert(*partition, (*leader, *term));
                    }
                }
                CommandResult::Done
            }
            Command::SetResourceConfigs { resource_type, name, configs } => {
                self.configs.set_resource(*resource_type, name, configs.clone());
                CommandResult::Done
            }
            Command::SetTopicConfigs { name, configs } => match self.topics.get_mut(name) {
                Some(t) => {
                    t.configs = configs.clone();
                    CommandResult::Done
                }
                None => CommandResult::Refused(Refusal::UnknownTopic),
            },
            Command::CreateAcls { acls } => {
                for b in acls {
                    if !self.acls.contains(b) {
                        self.acls.push(b.clone());
                    }
                }
                CommandResult::Done
            }
            Command::DeleteAcls { filters } => {
                let deleted: Vec<Vec<_>> =
                    filters.iter().map(|f| self.acls.iter().filter(|b| f.matches(b)).cloned().collect()).collect();
                self.acls.retain(|b| !filters.iter().any(|f| f.matches(b)));
                CommandResult::DeletedAcls(deleted)
            }
            Command::AlterCredentials { upserts, deletes, only_if_absent } => {
                for (user, mech, cred) in upserts {
                    if *only_if_absent && self.credentials.get(user).is_some_and(|c| !c.is_empty()) {
                        continue;
                    }
                    self.credentials.entry(user.clone()).or_default().insert(mech.clone(), cred.clone());
                }
                for (user, mech) in deletes {
                    if let Some(c) = self.credentials.get_mut(user) {
                        c.remove(mech);
                        if c.is_empty() {
                            self.credentials.remove(user);
                        }
                    }
                }
                CommandResult::Done
            }
        }
    }

    /// `rf` replicas for each of partitions `from..to` of `name` (the first is the preferred
    /// leader), spread round-robin over the registered brokers from a start that depends on the
    /// name (so topics do not all begin on the same broker). Deterministic.
    fn assign(&self, name: &str, from: i32, to: i32, rf: i32) -> Option<Vec<Vec<i32>>> {
        let ids: Vec<i32> = self.brokers.keys().copied().collect();
        if ids.is_empty() {
            return None;
        }
        let rf = (rf.max(1) as usize).min(ids.len());
        let start = name.bytes().fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(usize::from(b)));
        Some((from..to).map(|p| (0..rf).map(|k| ids[(start + p as usize + k) % ids.len()]).collect()).collect())
    }

    /// The preferred leader (first replica) of partition `p` of `topic`, if the topic and
    /// partition exist. A replicated partition's actual leader is its Raft group's
    /// (`TopicRegistry::leader_of`).
    pub fn leader(&self, topic: &str, p: i32) -> Option<i32> {
        self.topics.get(topic)?.replicas.get(usize::try_from(p).ok()?)?.first().copied()
    }

    /// The brokers partition `p` of `topic` is placed on (empty if there is no such partition).
    pub fn replicas_of(&self, topic: &str, p: i32) -> &[i32] {
        let placed = self.topics.get(topic).and_then(|t| t.replicas.get(usize::try_from(p).ok()?));
        placed.map_or(&[], |r| r.as_slice())
    }

    /// The leader (and Raft term) partition `p` of `topic` last published, if it is still one
    /// of the partition's replicas.
    pub fn published_leader(&self, topic: &str, p: i32) -> Option<(i32, i32)> {
        let t = self.topics.get(topic)?;
        let (leader, term) = *t.leaders.get(&p)?;
        t.replicas.get(usize::try_from(p).ok()?)?.contains(&leader).then_some((leader, term))
    }
}

/// This broker's membership in the metadata quorum.
/// Answers a Kafka request frame (without its size prefix) that a peer broker sent over the
/// cluster port: the response frame (without its size prefix), `None` if it cannot be answered.
/// Set by the composition root (`broker.rs`), which owns the request pipeline.
pub type KafkaHandler =
    Arc<dyn Fn(Vec<u8>) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<Vec<u8>>> + Send>> + Send + Sync>;

pub struct ClusterNode {
    pub node_id: NodeId,
    pub raft: Raft,
    /// The image as of the last applied entries; replaced whole on each apply, so readers
    /// (every routed request) take a cheap `Arc` instead of copying it.
    pub image: SharedImage,
    pub voters: BTreeMap<NodeId, String>,
    /// Bumped after every applied batch of entries (the broker reconciles its topics).
    pub changed: tokio::sync::watch::Receiver<u64>,
    /// This broker's Raft address.
    pub own_addr: String,
    /// This broker's replicas of replicated partitions (replication factor > 1).
    pub replicas: RwLock<std::collections::HashMap<crate::replication::types::GroupKey, Arc<replica::Replica>>>,
    /// This broker's replicas of coordinator shards (their Raft groups carry `ShardCommand`s).
    pub shards: RwLock<std::collections::HashMap<crate::replication::types::GroupKey, Arc<replica::ShardReplica>>>,
    /// `replica.fetch.max.bytes`: bytes of entries per append to a follower of a partition's or
    /// shard's group (`LogStore::limit_reads`).
    pub append_bytes_max: std::sync::atomic::AtomicUsize,
    /// `raft.log.max.bytes.between.snapshots`, for each partition's group.
    pub snapshot_bytes: std::sync::atomic::AtomicU64,
    /// `replication.log.format=single`: a new partition group keeps its Raft log in the
    /// partition's log (decision 0045 step 3).
    pub single_log: std::sync::atomic::AtomicBool,
    /// `replica.page.cache.tail.bytes`, for each partition's group.
    pub follower_cache_tail: std::sync::atomic::AtomicI64,
    /// `replication.partition.in.flight.max.bytes`, for each partition's group.
    pub partition_in_flight_bytes: std::sync::atomic::AtomicU64,
    /// `replication.in.flight.max.bytes`: the broker's budget, shared by its partitions (set
    /// once, before the first replica starts).
    pub in_flight: std::sync::OnceLock<replica::Budget>,
    /// When this broker started (`failover`: a broker started recently stands last).
    pub started: std::time::Instant,
    /// What this broker answered vote requests in the metadata quorum (`failover`).
    pub metadata_ballots: replica::Ballots,
    /// A replica stopped to be started again (a group converted to one log per replica,
    /// decision 0056): the reconciler runs again.
    pub restart: tokio::sync::Notify,
    /// Peer brokers' Kafka calls (`interbroker.rs`) arrive on the cluster port: see
    /// [`KafkaHandler`].
    pub kafka: std::sync::OnceLock<KafkaHandler>,
    /// Where this broker's partition replicas keep their directories
    /// (`<topic id>-<partition>`, as the reconciler makes them).
    pub replicas_dir: std::path::PathBuf,
}

impl ClusterNode {
    /// Open the Raft log under `dir`, serve Raft RPCs on this voter's address, and (on the
    /// lowest-numbered voter, once) initialize the group with every voter.
    pub async fn start(
        node_id: NodeId,
        voters: BTreeMap<NodeId, String>,
        own_addr: Option<String>,
        dir: &std::path::Path,
    ) -> anyhow::Result<Arc<ClusterNode>> {
        let joining = !voters.contains_key(&node_id);
        let addr = match (voters.get(&node_id), &own_addr) {
            (Some(a), _) => a.clone(),
            (None, Some(a)) => a.clone(),
            (None, None) => anyhow::bail!(
                "node.id {node_id} is not among controller.quorum.voters: give controller.listener (this broker's \
                 Raft address) to join a running cluster"
            ),
        };
        sluice_storage::sidefile::create_dir_durable(dir)?;
        let config = openraft::Config {
            cluster_name: "sluice".into(),
            heartbeat_interval: 250,
            election_timeout_min: 1000,
            election_timeout_max: 2000,
            ..Default::default()
        };
        let config = Arc::new(config.validate().map_err(|e| anyhow::anyhow!("raft config: {e}"))?);
        let image: SharedImage = Arc::new(RwLock::new(Arc::new(MetadataImage::default())));
        let log = store::LogStore::open(dir)?;
        let (changed_tx, changed) = tokio::sync::watch::channel(0u64);
        let sm = store::StateMachine::open(dir, image.clone(), changed_tx)?;
        let initialized = log.has_vote_or_entries();
        let raft = Raft::new(node_id, config, network::Network { book: Arc::new(voters.clone()) }, log, sm)
            .await
            .map_err(|e| anyhow::anyhow!("raft: {e}"))?;
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen for Raft on {addr}: {e}"))?;
        let node = Arc::new(ClusterNode {
            node_id,
            raft,
            image,
            voters,
            changed,
            replicas: Default::default(),
            shards: Default::default(),
            own_addr: addr.clone(),
            append_bytes_max: std::sync::atomic::AtomicUsize::new(1024 * 1024),
            snapshot_bytes: std::sync::atomic::AtomicU64::new(64 << 20),
            single_log: std::sync::atomic::AtomicBool::new(false),
            follower_cache_tail: std::sync::atomic::AtomicI64::new(-1),
            partition_in_flight_bytes: std::sync::atomic::AtomicU64::new(32 << 20),
            in_flight: std::sync::OnceLock::new(),
            started: std::time::Instant::now(),
            metadata_ballots: Default::default(),
            restart: Default::default(),
            kafka: std::sync::OnceLock::new(),
            replicas_dir: dir.join("replicas"),
        });
        tokio::spawn(network::serve(listener, node.clone()));
        tokio::spawn(rpc_health::summarize());
        if !initialized && joining {
            // a broker added to a running cluster: ask the voters until the leader adds it
            let n = node.clone();
            tokio::spawn(async move {
                loop {
                    for (id, a) in &n.voters {
                        match network::join(a, n.node_id, &n.own_addr).await {
                            Ok(()) => {
                                tracing::info!("joined the metadata quorum (through voter {id})");
                                return;
                            }
                            Err(e) => tracing::debug!("joining through voter {id}: {e}"),
                        }
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            });
        }
        if !initialized && voters_min(&node.voters) == Some(node_id) {
            let members: BTreeMap<NodeId, openraft::BasicNode> =
                node.voters.iter().map(|(id, a)| (*id, openraft::BasicNode { addr: a.clone() })).collect();
            match node.raft.initialize(members).await {
                Ok(()) => tracing::info!("initialized the metadata quorum with {} voters", node.voters.len()),
                Err(e) => tracing::info!("metadata quorum already initialized: {e}"),
            }
        }
        Ok(node)
    }

    /// The current leader (the controller), if known.
    pub fn leader(&self) -> Option<NodeId> {
        self.raft.metrics().borrow().current_leader
    }

    /// The Raft address of broker `id`: a configured voter's, or one the quorum's membership
    /// holds (brokers that joined later).
    pub fn addr_of(&self, id: NodeId) -> Option<String> {
        if let Some(a) = self.voters.get(&id) {
            return Some(a.clone());
        }
        let m = self.raft.metrics().borrow().membership_config.clone();
        m.membership().get_node(&id).map(|n| n.addr.clone())
    }

    /// Every known broker's Raft address.
    pub fn addresses(&self) -> BTreeMap<NodeId, String> {
        let mut out = self.voters.clone();
        let m = self.raft.metrics().borrow().membership_config.clone();
        for (id, n) in m.membership().nodes() {
            out.entry(*id).or_insert_with(|| n.addr.clone());
        }
        out
    }

    /// On the leader: add broker `id` (Raft address `addr`) to the metadata quorum — as a
    /// learner until it has caught up, then as a voter. Elsewhere: forwarded to the leader.
    pub async fn add_broker(&self, id: NodeId, addr: &str) -> anyhow::Result<()> {
        match self.leader() {
            Some(l) if l == self.node_id => {
                let node = openraft::BasicNode { addr: addr.to_string() };
                tokio::time::timeout(Duration::from_secs(120), self.raft.add_learner(id, node, true))
                    .await
                    .map_err(|_| anyhow::anyhow!("broker {id} did not catch up within 120 s"))?
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                let add = openraft::ChangeMembers::AddVoterIds(std::iter::once(id).collect());
                tokio::time::timeout(Duration::from_secs(30), self.raft.change_membership(add, false))
                    .await
                    .map_err(|_| anyhow::anyhow!("membership change not committed within 30 s"))?
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                tracing::info!("broker {id} ({addr}) joined the metadata quorum");
                Ok(())
            }
            Some(l) => {
                let a = self.addr_of(l).ok_or_else(|| anyhow::anyhow!("leader {l} has no known address"))?;
                network::join(&a, id, addr).await
            }
            None => anyhow::bail!("no leader yet"),
        }
    }

    /// Drop broker `id` from every coordinator shard group this broker is a member of: the
    /// groups this broker leads remove it (joint consensus; a leader may remove itself and
    /// step down), the others are waited for (their leaders do the same). Within 50 s.
    pub async fn drop_from_coordinators(&self, id: NodeId) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(50);
        let member = i32::try_from(id)?;
        loop {
            let groups: Vec<Arc<replica::ShardReplica>> = self
                .shards
                .read()
                .or_die()
                .values()
                .filter(|r| r.voters().contains(&member))
                // the broker leaving waits only for the groups it leads: it is not told of the
                // final membership of the others (it is no longer in it)
                .filter(|r| id != self.node_id || r.leader() == Some(member))
                .cloned()
                .collect();
            if groups.is_empty() {
                return Ok(());
            }
            // the groups led here change their membership all at once
            let me = i32::try_from(self.node_id).ok();
            let changes: Vec<_> = groups
                .iter()
                .filter(|g| g.leader() == me)
                .map(|g| {
                    let g = g.clone();
                    tokio::spawn(async move {
                        let remove = openraft::ChangeMembers::RemoveVoters(std::iter::once(id).collect());
                        let r = tokio::time::timeout(Duration::from_secs(10), g.raft.change_membership(remove, false));
                        match r.await {
                            Ok(Ok(_)) => {
                                tracing::info!(group = g.key.0.as_str(), shard = g.key.1, "broker {id} removed")
                            }
                            Ok(Err(e)) => {
                                tracing::info!(group = g.key.0.as_str(), shard = g.key.1, "removing {id}: {e}")
                            }
                            Err(_) => {
                                tracing::info!(group = g.key.0.as_str(), shard = g.key.1, "removing {id}: timed out")
                            }
                        }
                    })
                })
                .collect();
            for c in changes {
                let _ = c.await;
            }
            if tokio::time::Instant::now() >= deadline {
                let left: Vec<String> = groups.iter().map(|g| format!("{}-{}", g.key.0, g.key.1)).collect();
                anyhow::bail!("broker {id} is still a voter of coordinator groups {}", left.join(", "));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// On the leader: remove broker `id` from the metadata quorum and the broker list — one of
    /// the configured voters after every broker dropped it from the coordinator shard groups.
    /// Elsewhere: forwarded to the leader.
    pub async fn remove_broker(&self, id: NodeId) -> anyhow::Result<()> {
        match self.leader() {
            Some(l) if l == self.node_id => {
                if self.voters.contains_key(&id) {
                    // every broker (the one leaving too) shrinks the coordinator groups it leads,
                    // at the same time (each waits for the groups the others lead)
                    let registered = self.image();
                    let remote: Vec<(NodeId, tokio::task::JoinHandle<anyhow::Result<()>>)> = self
                        .addresses()
                        .into_iter()
                        .filter(|(b, _)| *b != self.node_id)
                        .filter(|(b, _)| i32::try_from(*b).is_ok_and(|b| registered.brokers.contains_key(&b)))
                        .map(|(b, addr)| {
                            (b, tokio::spawn(async move { network::drop_from_coordinators(&addr, id).await }))
                        })
                        .collect();
                    // (the broker leaving cannot see the groups it was dropped from change further)
                    let local = self.drop_from_coordinators(id).await;
                    let mut failed = local.err().filter(|_| self.node_id != id).map(|e| (self.node_id, e));
                    for (b, h) in remote {
                        let r = h.await.map_err(|e| anyhow::anyhow!("{e}")).and_then(|r| r);
                        if let (Err(e), true) = (r, b != id) {
                            failed.get_or_insert((b, e));
                        }
                    }
                    if let Some((b, e)) = failed {
                        anyhow::bail!("broker {b} could not drop broker {id} from the coordinators: {e}");
                    }
                }
                let m = self.raft.metrics().borrow().membership_config.clone();
                if m.membership().voter_ids().any(|v| v == id) {
                    let remove = openraft::ChangeMembers::RemoveVoters(std::iter::once(id).collect());
                    tokio::time::timeout(Duration::from_secs(30), self.raft.change_membership(remove, false))
                        .await
                        .map_err(|_| anyhow::anyhow!("membership change not committed within 30 s"))?
                        .map_err(|e| anyhow::anyhow!("{e}"))?;
                }
                let node_id = i32::try_from(id)?;
                self.write(Command::UnregisterBroker { node_id }, Duration::from_secs(10)).await?;
                tracing::info!("broker {id} left the cluster");
                Ok(())
            }
            Some(l) => {
                let a = self.addr_of(l).ok_or_else(|| anyhow::anyhow!("leader {l} has no known address"))?;
                network::leave(&a, id).await
            }
            None => anyhow::bail!("no leader yet"),
        }
    }

    /// This broker's replica of a partition, if the partition is replicated and has one here.
    pub fn replica(&self, key: &crate::replication::types::GroupKey) -> Option<Arc<replica::Replica>> {
        self.replicas.read().or_die().get(key).cloned()
    }

    /// The directory of this broker's replica of `key`, for the topic of that name the image
    /// holds (none when it holds none).
    pub fn replica_dir(&self, key: &crate::replication::types::GroupKey) -> Option<std::path::PathBuf> {
        let id = self.image.read().or_die().topics.get(&key.0)?.id;
        Some(replica::dir_of(&self.replicas_dir, id, key.1))
    }

    /// `replica.fetch.max.bytes`, for each group's Raft log (its bounded reads).
    pub fn append_bytes(&self) -> usize {
        self.append_bytes_max.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// `raft.log.max.bytes.between.snapshots`, for each partition's group.
    pub fn snapshot_bytes(&self) -> u64 {
        self.snapshot_bytes.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn single_log(&self) -> bool {
        self.single_log.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A new partition replica's budgets of bytes in flight: its own and the broker's.
    pub fn budgets(&self) -> [replica::Budget; 2] {
        let own = replica::Budget::new(self.partition_in_flight_bytes.load(std::sync::atomic::Ordering::Relaxed));
        [own, self.in_flight.get_or_init(|| replica::Budget::new(128 << 20)).clone()]
    }

    /// This broker's replica of a coordinator shard, if it has one.
    pub fn shard_replica(&self, key: &crate::replication::types::GroupKey) -> Option<Arc<replica::ShardReplica>> {
        self.shards.read().or_die().get(key).cloned()
    }

    /// The current metadata image (shared, not copied).
    pub fn image(&self) -> Arc<MetadataImage> {
        self.image.read().or_die().clone()
    }

    /// Commit `cmd` through the leader (forwarded if this node is a follower), retrying while
    /// there is no leader, for up to `timeout`.
    pub async fn write(&self, cmd: Command, timeout: Duration) -> anyhow::Result<CommandResult> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // each attempt is bounded: a leader that lost its majority waits for a commit that
            // never comes
            let attempt = tokio::time::timeout_at(deadline, async {
                match self.leader() {
                    Some(l) if l == self.node_id => {
                        self.raft.client_write(cmd.clone()).await.map(|r| r.data).map_err(|e| anyhow::anyhow!("{e}"))
                    }
                    Some(l) => match self.addr_of(l) {
                        Some(addr) => network::forward(&addr, &cmd).await,
                        None => Err(anyhow::anyhow!("leader {l} has no known address")),
                    },
                    None => Err(anyhow::anyhow!("no leader yet")),
                }
            })
            .await
            .unwrap_or_else(|_| Err(anyhow::anyhow!("no majority answered within {timeout:?}")));
            match attempt {
                Ok(r) => return Ok(r),
                Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
                Err(e) => {
                    tracing::debug!("metadata write retried: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}

/// Producer-id blocks from the quorum, asked for in the background by the allocator.
pub struct QuorumBlocks(pub Arc<ClusterNode>, pub i32);

impl crate::producer_ids::BlockSource for QuorumBlocks {
    fn allocate(&self, count: i64) -> crate::producer_ids::BoxFuture<Result<i64, String>> {
        let node = self.0.clone();
        let cmd = Command::AllocateProducerIds { node_id: self.1, count };
        Box::pin(async move {
            match node.write(cmd, Duration::from_secs(10)).await.map_err(|e| e.to_string())? {
                CommandResult::ProducerIds { first, .. } => Ok(first),
                other => Err(format!("unexpected answer {other:?}")),
            }
        })
    }

    fn high_water(&self) -> i64 {
        self.0.image().next_producer_id
    }
}

fn voters_min(v: &BTreeMap<NodeId, String>) -> Option<NodeId> {
    v.keys().next().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producer_id_blocks_never_overlap() {
        let mut img = MetadataImage::default();
        let a = img.apply(&Command::AllocateProducerIds { node_id: 1, count: 1000 });
        let b = img.apply(&Command::AllocateProducerIds { node_id: 2, count: 1000 });
        assert_eq!(a, CommandResult::ProducerIds { first: 0, count: 1000 });
        assert_eq!(b, CommandResult::ProducerIds { first: 1000, count: 1000 });
    }
}
