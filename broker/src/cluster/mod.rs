//! Cluster mode (issue 10, in progress): the metadata quorum, a Raft group (openraft 0.9)
//! across the voters named in `controller.quorum.voters`. It holds the cluster's metadata
//! image — registered brokers and producer-id blocks so far — and its leader is the cluster's
//! controller. Partition replication is not built yet (docs/decisions/0010).
//!
//! - `store`: the durable Raft log (JSON lines, fsynced) and the state machine (the image);
//! - `network`: Raft RPCs and forwarded writes between brokers, length-prefixed JSON over TCP.

pub mod network;
pub mod store;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Cursor;
use std::sync::{Arc, RwLock};
use std::time::Duration;

pub type NodeId = u64;

/// A change to the metadata image. Applied in log order on every voter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// A broker announces itself and the address clients should use.
    /// The first registration also names the cluster (its `cluster_id`).
    RegisterBroker { node_id: i32, host: String, port: i32, cluster_id: String },
    /// Hand out the next block of producer ids (never handed out twice, across failovers).
    AllocateProducerIds { node_id: i32, count: i64 },
}

/// What applying a command returned.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommandResult {
    #[default]
    Done,
    /// `[first, first + count)` is the caller's.
    ProducerIds { first: i64, count: i64 },
}

openraft::declare_raft_types!(
    pub TypeConfig:
        D = Command,
        R = CommandResult,
        NodeId = NodeId,
        Node = openraft::BasicNode,
);

pub type Raft = openraft::Raft<TypeConfig>;

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
            Command::AllocateProducerIds { count, .. } => {
                let first = self.next_producer_id;
                self.next_producer_id = first.saturating_add((*count).max(1));
                CommandResult::ProducerIds { first, count: (*count).max(1) }
            }
        }
    }
}

/// `controller.quorum.voters`: `id@host:port,...` (the Raft address of each voter).
pub fn parse_voters(text: &str) -> Result<BTreeMap<NodeId, String>, String> {
    let mut out = BTreeMap::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (id, addr) = item.split_once('@').ok_or_else(|| format!("'{item}' is not id@host:port"))?;
        let id: NodeId = id.trim().parse().map_err(|_| format!("'{item}': the id must be a number"))?;
        let addr = addr.trim();
        addr.parse::<std::net::SocketAddr>().map_err(|_| format!("'{item}': {addr} is not an ip:port"))?;
        if out.insert(id, addr.to_string()).is_some() {
            return Err(format!("voter {id} is named twice"));
        }
    }
    Ok(out)
}

/// This broker's membership in the metadata quorum.
pub struct ClusterNode {
    pub node_id: NodeId,
    pub raft: Raft,
    pub image: Arc<RwLock<MetadataImage>>,
    pub voters: BTreeMap<NodeId, String>,
}

impl ClusterNode {
    /// Open the Raft log under `dir`, serve Raft RPCs on this voter's address, and (on the
    /// lowest-numbered voter, once) initialize the group with every voter.
    pub async fn start(
        node_id: NodeId,
        voters: BTreeMap<NodeId, String>,
        dir: &std::path::Path,
    ) -> anyhow::Result<Arc<ClusterNode>> {
        let addr = voters
            .get(&node_id)
            .ok_or_else(|| anyhow::anyhow!("node.id {node_id} is not among controller.quorum.voters"))?
            .clone();
        std::fs::create_dir_all(dir)?;
        let config = openraft::Config {
            cluster_name: "sluice".into(),
            heartbeat_interval: 250,
            election_timeout_min: 1000,
            election_timeout_max: 2000,
            ..Default::default()
        };
        let config = Arc::new(config.validate().map_err(|e| anyhow::anyhow!("raft config: {e}"))?);
        let image = Arc::new(RwLock::new(MetadataImage::default()));
        let log = store::LogStore::open(dir)?;
        let sm = store::StateMachine::open(dir, image.clone())?;
        let initialized = log.has_vote_or_entries();
        let raft =
            Raft::new(node_id, config, network::Network, log, sm).await.map_err(|e| anyhow::anyhow!("raft: {e}"))?;
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen for Raft on {addr}: {e}"))?;
        let node = Arc::new(ClusterNode { node_id, raft, image, voters });
        tokio::spawn(network::serve(listener, node.clone()));
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

    /// A copy of the metadata image.
    pub fn image(&self) -> MetadataImage {
        self.image.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Commit `cmd` through the leader (forwarded if this node is a follower), retrying while
    /// there is no leader, for up to `timeout`.
    pub async fn write(&self, cmd: Command, timeout: Duration) -> anyhow::Result<CommandResult> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let attempt = match self.leader() {
                Some(l) if l == self.node_id => {
                    self.raft.client_write(cmd.clone()).await.map(|r| r.data).map_err(|e| anyhow::anyhow!("{e}"))
                }
                Some(l) => match self.voters.get(&l) {
                    Some(addr) => network::forward(addr, &cmd).await,
                    None => Err(anyhow::anyhow!("leader {l} has no known address")),
                },
                None => Err(anyhow::anyhow!("no leader yet")),
            };
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

/// Producer-id blocks from the quorum (called from blocking handler code).
pub struct QuorumBlocks(pub Arc<ClusterNode>, pub i32);

impl crate::producer_ids::BlockSource for QuorumBlocks {
    fn allocate(&self, count: i64) -> Result<i64, String> {
        let node = self.0.clone();
        let cmd = Command::AllocateProducerIds { node_id: self.1, count };
        let handle = tokio::runtime::Handle::try_current().map_err(|e| e.to_string())?;
        let r = tokio::task::block_in_place(|| handle.block_on(node.write(cmd, Duration::from_secs(10))));
        match r.map_err(|e| e.to_string())? {
            CommandResult::ProducerIds { first, .. } => Ok(first),
            other => Err(format!("unexpected answer {other:?}")),
        }
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
    fn voters_parse_and_errors() {
        let v = parse_voters("1@127.0.0.1:9093, 2@127.0.0.1:9094").unwrap();
        assert_eq!(v.len(), 2);
        assert!(parse_voters("1@x:1").is_err());
        assert!(parse_voters("a@127.0.0.1:1").is_err());
        assert!(parse_voters("1@127.0.0.1:1,1@127.0.0.1:2").is_err());
        assert!(parse_voters("127.0.0.1:1").is_err());
    }

    #[test]
    fn producer_id_blocks_never_overlap() {
        let mut img = MetadataImage::default();
        let a = img.apply(&Command::AllocateProducerIds { node_id: 1, count: 1000 });
        let b = img.apply(&Command::AllocateProducerIds { node_id: 2, count: 1000 });
        assert_eq!(a, CommandResult::ProducerIds { first: 0, count: 1000 });
        assert_eq!(b, CommandResult::ProducerIds { first: 1000, count: 1000 });
    }
}
