//! DescribeCluster: the cluster id, the controller and the brokers, as the listener the request
//! came in on advertises them.

use super::sb;
use crate::topics::TopicRegistry;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterResponse};
use std::sync::Arc;

pub fn describe_cluster(
    topics: &Arc<TopicRegistry>,
    listener: &crate::config::security::ListenerConfig,
) -> DescribeClusterResponse {
    let mut r = DescribeClusterResponse::default();
    r.cluster_id = sb(&topics.effective_cluster_id().unwrap_or_default());
    let (brokers, controller) = topics.cluster_view(listener);
    r.controller_id = BrokerId(controller);
    r.endpoint_type = 1;
    r.brokers = brokers
        .into_iter()
        .map(|(id, host, port)| {
            let mut b = DescribeClusterBroker::default();
            b.broker_id = BrokerId(id);
            b.host = sb(&host);
            b.port = port;
            b
        })
        .collect();
    r
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied
/// before the handler by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    // Kafka answers DescribeCluster to any authenticated principal (as Metadata's broker list)
    pub fn describe_cluster(_c: &Authz<'_>, _r: &mut DescribeClusterRequest, _version: i16) -> Gate {
        Gate::Pass
    }
}
