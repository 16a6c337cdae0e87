//! The handles a request's handler may use — the config, the topic registry, the group and
//! transaction coordinators, security, producer ids — and the [`Router`] over them. Built and
//! wired once by the composition root (`broker.rs`, `open_services`) and held by the request
//! pipeline, which gives each handler only the handles it uses (and the background tasks
//! theirs, `background::Background`). Nothing below the pipeline sees it: the coordinators get
//! their own ports, the topic registry knows no coordinator.

use crate::config::Config;
use crate::group::GroupCoordinator;
use crate::producer_ids::ProducerIds;
use crate::routing::{CoordinatorKey, Route, Router};
use crate::security::Security;
use crate::topics::TopicRegistry;
use crate::txn::TxnCoordinator;
use std::sync::Arc;

pub struct Services {
    pub config: Arc<Config>,
    pub topics: Arc<TopicRegistry>,
    pub groups: Arc<GroupCoordinator>,
    pub txns: Arc<TxnCoordinator>,
    pub security: Arc<Security>,
    pub producer_ids: Arc<ProducerIds>,
}

impl Services {
    /// Close the coordinators' logs, then flush every partition and close the logs cleanly
    /// (SIGTERM); partitions still shared by in-flight requests are flushed but not marked clean.
    pub fn shutdown(self) {
        self.groups.close();
        self.txns.close();
        match Arc::try_unwrap(self.topics) {
            Ok(topics) => topics.shutdown(),
            Err(topics) => {
                tracing::warn!("the topics are still in use at shutdown; flushing without a clean marker");
                topics.flush_all();
            }
        }
    }
}

/// One node: every partition and key is served here. A cluster: a replicated partition's
/// leader is its Raft group's; a key's coordinator leads its coordinator-log partition (or,
/// with that log not replicated, the partitions are spread over the brokers in id order).
impl Router for Services {
    fn leader_of(&self, topic: &str, index: i32) -> Option<(i32, i32)> {
        self.topics.leader_of(topic, index)
    }

    fn this_broker(&self) -> i32 {
        self.config.node_id
    }

    fn coordinator_of(&self, key: CoordinatorKey<'_>) -> Route {
        match key {
            CoordinatorKey::Group(_) => {
                self.topics.coordinator_route(self.groups.as_ref(), key.shard(self.config.groups.partitions))
            }
            CoordinatorKey::Transaction(_) => {
                self.topics.coordinator_route(self.txns.as_ref(), key.shard(self.config.txns.partitions))
            }
        }
    }
}
