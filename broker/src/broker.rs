//! The composition root: [`Broker::start`] builds and wires every service of one broker — a
//! single node, or a member of a cluster (`controller.quorum.voters` set) — and
//! [`Broker::run`] serves its listeners until shutdown. `main.rs` only turns flags, the
//! environment and a TOML file into a [`Config`] and calls these two.
//!
//! Start-up order: the metrics endpoint; the data directory (locked, every partition log
//! opened and recovered); in a cluster, the metadata quorum, then the services that follow it
//! (the reconciler, reassignment, the replicated coordinator logs, producer-id blocks from the
//! quorum) and this broker's registration; last, the listeners, so no client is accepted
//! before everything it could ask for exists.

use crate::cluster::reconcile::{spawn_reconciler, SecuritySync};
use crate::cluster::{ClusterNode, Command};
use crate::config::Config;
use crate::connection::ListenerRuntime;
use crate::group::GroupCoordinator;
use crate::producer_ids::ProducerIds;
use crate::security::Security;
use crate::services::Services;
use crate::topics::TopicRegistry;
use crate::txn::markers::BrokerMarkers;
use crate::txn::TxnCoordinator;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// Why a broker could not start. `main` prints it and exits with [`StartError::exit_code`].
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The settings cannot work (a listener's TLS files, ...): exit code 2, as a bad flag.
    #[error("{0}")]
    Settings(String),
    /// Something the broker needs failed (the data directory, a port, the quorum): exit code 1.
    #[error("{0}")]
    Failed(String),
}

impl StartError {
    pub fn exit_code(&self) -> u8 {
        match self {
            StartError::Settings(_) => 2,
            StartError::Failed(_) => 1,
        }
    }
}

/// A failure of one start-up step: `what` says which.
fn failed(what: &'static str) -> impl Fn(anyhow::Error) -> StartError {
    move |e| StartError::Failed(format!("{what}: {e}"))
}

/// A started broker: its services wired, its listeners bound, not yet accepting.
pub struct Broker {
    state: Arc<Services>,
    listeners: Vec<(TcpListener, ListenerRuntime)>,
}

impl Broker {
    /// Build and wire every service for `config`, and bind its listeners.
    pub async fn start(config: Config) -> Result<Broker, StartError> {
        if let Some(addr) = config.metrics_listener {
            if let Some(handle) = crate::metrics::install() {
                crate::metrics::serve(addr, handle)
                    .await
                    .map_err(|e| StartError::Failed(format!("cannot serve metrics on {addr}: {e}")))?;
            }
        }
        crate::failpoints::arm(&config.failpoints);
        let state =
            tokio::task::block_in_place(|| open_services(config)).map_err(|e| StartError::Failed(e.to_string()))?;
        if !state.config.voters.is_empty() {
            join_cluster(&state).await?;
        }
        let listeners = bind_listeners(&state).await?;
        Ok(Broker { state, listeners })
    }

    /// The broker's services (topic registry, coordinators, security, ...).
    pub fn services(&self) -> &Arc<Services> {
        &self.state
    }

    /// Serve every listener until `shutdown` completes, then drain (`server::run`).
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) {
        let state = self.state;
        for l in &state.config.listeners {
            tracing::info!("sluice listening on {} ({}, {:?})", l.addr, l.name, l.protocol);
        }
        tracing::info!("data in {}, cluster id {}", state.topics.data_dir().display(), state.topics.cluster_id);
        crate::server::run(state, self.listeners, shutdown).await;
    }
}

/// Open every service over `config`'s data directory (its topics, coordinator logs,
/// credentials and ACLs, producer-id blocks) and connect those that call each other through
/// ports: the group coordinator follows the group configs the topic registry stores; the
/// transaction coordinator's markers go to the partitions and the group coordinator. Blocking.
pub(crate) fn open_services(config: Config) -> anyhow::Result<Arc<Services>> {
    let config = Arc::new(config);
    let topics = Arc::new(TopicRegistry::open(config.clone())?);
    let data_dir = topics.data_dir().to_path_buf();
    let producer_ids = Arc::new(ProducerIds::open(&data_dir)?);
    let groups = GroupCoordinator::open(&data_dir, &config.log, config.groups.clone())?;
    let will_replicate = TxnCoordinator::will_replicate(&config);
    let txns = TxnCoordinator::open(&data_dir, &config.log, config.txns.clone(), will_replicate)?;
    let security = Arc::new(Security::open(&data_dir, config.security.clone())?);
    let weak = Arc::downgrade(&groups);
    topics.on_group_configs(Box::new(move |configs| {
        if let Some(g) = weak.upgrade() {
            g.set_group_configs(configs);
        }
    }));
    txns.set_markers(Arc::new(BrokerMarkers::new(&topics, &groups)));
    Ok(Arc::new(Services { config, topics, groups, txns, security, producer_ids }))
}

/// Cluster mode: start this broker's member of the metadata quorum and everything that follows
/// the quorum, then register the broker (in the background: the quorum may still be forming).
async fn join_cluster(state: &Arc<Services>) -> Result<(), StartError> {
    let id = state.config.node_id as u64;
    let dir = state.topics.data_dir().join("__cluster");
    // What this broker brings into the cluster: everything it had on its first join (so a
    // single node's ACLs and users are not lost), only its bootstrap users after that.
    let first_join = !dir.exists();
    let bootstrap: Vec<&str> = state.config.security.bootstrap_users.iter().map(|(u, _)| u.as_str()).collect();
    let upserts: Vec<_> = state
        .security
        .credentials
        .export()
        .into_iter()
        .filter(|(u, _)| first_join || bootstrap.contains(&u.as_str()))
        .flat_map(|(u, creds)| creds.into_iter().map(move |(m, c)| (u.clone(), m, c)))
        .collect();
    let imported_acls = if first_join { state.security.acls.all() } else { Vec::new() };
    let own = state.config.controller_listener.clone();
    if state.config.controller_tls {
        let (acceptor, connector) =
            crate::security::tls::peer_tls(&state.config.security).map_err(failed("the Raft port's TLS"))?;
        crate::cluster::network::use_tls(acceptor, connector);
    }
    let node =
        ClusterNode::start(id, state.config.voters.clone(), own, &dir).await.map_err(failed("metadata quorum"))?;
    node.append_bytes_max.store(state.config.replica_fetch_max_bytes, std::sync::atomic::Ordering::Relaxed);
    node.snapshot_bytes.store(state.config.raft_snapshot_bytes, std::sync::atomic::Ordering::Relaxed);
    node.single_log.store(state.config.single_log, std::sync::atomic::Ordering::Relaxed);
    node.follower_cache_tail.store(state.config.replica_page_cache_tail_bytes, std::sync::atomic::Ordering::Relaxed);
    node.partition_in_flight_bytes
        .store(state.config.partition_in_flight_max_bytes, std::sync::atomic::Ordering::Relaxed);
    let _ = node.in_flight.set(crate::cluster::replica::Budget::new(state.config.in_flight_max_bytes));
    let _ = state.topics.cluster.set(node.clone());
    // peer brokers' Kafka calls come over the cluster port (`interbroker.rs`)
    crate::interbroker::use_cluster(&node);
    let services = Arc::downgrade(state);
    let _ = node.kafka.set(Arc::new(move |frame| {
        let services = services.clone();
        Box::pin(async move {
            let state = services.upgrade()?;
            crate::pipeline::dispatch::peer_request(&state, frame).await
        })
    }));
    let security = state.security.clone();
    let sync_security: SecuritySync = Box::new(move |image| {
        let acls = security.acls.replace(image.acls.clone());
        acls.and(security.credentials.replace(&image.credentials))
    });
    spawn_reconciler(&state.topics, sync_security, node.clone(), &dir).map_err(failed("metadata quorum"))?;
    crate::cluster::reassign::spawn_membership_driver(&node);
    state.txns.enable_replication(&node, &dir.join("replicas")).await.map_err(failed("transaction log replication"))?;
    state.groups.enable_replication(&node, &dir.join("replicas")).await.map_err(failed("offsets log replication"))?;
    state.producer_ids.use_source(Arc::new(crate::cluster::QuorumBlocks(node.clone(), state.config.node_id)));
    let l = &state.config.listeners[0];
    let register = Command::RegisterBroker {
        node_id: state.config.node_id,
        host: l.advertised_host.clone(),
        port: l.advertised_port,
        cluster_id: state.topics.cluster_id.clone(),
    };
    tokio::spawn(async move {
        let hour = Duration::from_secs(3600);
        match node.write(register, hour).await {
            Ok(_) => tracing::info!("registered with the metadata quorum"),
            Err(e) => tracing::error!("could not register with the metadata quorum: {e}"),
        }
        if !imported_acls.is_empty() {
            if let Err(e) = node.write(Command::CreateAcls { acls: imported_acls }, hour).await {
                tracing::error!("could not bring this broker's ACLs into the cluster: {e}");
            }
        }
        if !upserts.is_empty() {
            let cmd = Command::AlterCredentials { upserts, deletes: vec![], only_if_absent: true };
            if let Err(e) = node.write(cmd, hour).await {
                tracing::error!("could not bring this broker's users into the cluster: {e}");
            }
        }
    });
    Ok(())
}

/// Every configured listener, bound (its TLS set up first: a bad certificate is a settings error).
async fn bind_listeners(state: &Services) -> Result<Vec<(TcpListener, ListenerRuntime)>, StartError> {
    let mut bound = Vec::new();
    for l in &state.config.listeners {
        let runtime = ListenerRuntime::new(l, &state.config.security)
            .map_err(|e| StartError::Settings(format!("listener {}: {e}", l.name)))?;
        let socket = TcpListener::bind(l.addr)
            .await
            .map_err(|e| StartError::Failed(format!("cannot listen on {} ({}): {e}", l.addr, l.name)))?;
        bound.push((socket, runtime));
    }
    Ok(bound)
}
