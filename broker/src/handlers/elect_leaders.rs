//! ElectLeaders (v0–2, `kafka-leader-election --election-type PREFERRED`): move a replicated
//! partition's leadership back to its preferred replica (the first in its assignment), e.g.
//! after a failover left one broker leading too much. The preferred replica is asked to stand
//! for election in the partition's Raft group (its log must be up to date to win, so no
//! acknowledged record is lost); the answer comes once it leads or after the request's timeout.
//! UNCLEAN elections do not exist with Raft: refused with INVALID_REQUEST.

use super::{sb, topic_name};
use crate::routing::Router;
use crate::topics::TopicRegistry;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

const ELECTION_NOT_NEEDED: i16 = 84;
const PREFERRED_LEADER_NOT_AVAILABLE: i16 = 80;

/// One partition: elect its preferred replica.
async fn elect(
    topics: &Arc<TopicRegistry>,
    router: &dyn Router,
    topic: &str,
    p: i32,
    deadline: Instant,
) -> (i16, Option<String>) {
    let Some(node) = topics.cluster.get() else {
        return (ELECTION_NOT_NEEDED, Some("a single broker leads every partition".into()));
    };
    let image = node.image();
    let Some(replicas) = image.topics.get(topic).and_then(|t| t.replicas.get(usize::try_from(p).ok()?)).cloned() else {
        return (ResponseError::UnknownTopicOrPartition.code(), None);
    };
    let Some(&preferred) = replicas.first() else { return (ResponseError::UnknownTopicOrPartition.code(), None) };
    if replicas.len() < 2 {
        return (ELECTION_NOT_NEEDED, Some("the partition has a single replica".into()));
    }
    if router.leader_of(topic, p).map(|(l, _)| l) == Some(preferred) {
        return (ELECTION_NOT_NEEDED, Some(format!("broker {preferred} already leads it")));
    }
    let asked = crate::cluster::network::elect(node, u64::try_from(preferred).unwrap_or(0), topic, p).await;
    if let Err(e) = asked {
        return (PREFERRED_LEADER_NOT_AVAILABLE, Some(e.to_string()));
    }
    // answered once the preferred replica leads (as this broker's replica, if any, sees it)
    loop {
        match router.leader_of(topic, p) {
            Some((l, _)) if l == preferred => return (0, None),
            _ if topics.replica(topic, p).is_none() => return (0, None), // not a replica here: cannot watch
            _ => {}
        }
        if Instant::now() >= deadline {
            return (
                ResponseError::RequestTimedOut.code(),
                Some(format!("broker {preferred} stood for election but does not lead yet")),
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub async fn handle(
    topics: &Arc<TopicRegistry>,
    router: &dyn Router,
    req: ElectLeadersRequest,
) -> ElectLeadersResponse {
    let deadline = Instant::now() + Duration::from_millis(req.timeout_ms.clamp(1000, 60_000) as u64);
    let mut resp = ElectLeadersResponse::default();
    let wanted: BTreeMap<String, Vec<i32>> = match req.topic_partitions {
        Some(tps) => tps.into_iter().map(|t| (t.topic.0.to_string(), t.partitions)).collect(),
        // null: every partition with more than one replica
        None => topics
            .cluster
            .get()
            .map(|c| {
                c.image()
                    .topics
                    .iter()
                    .map(|(n, t)| {
                        let ps = t.replicas.iter().enumerate().filter(|(_, r)| r.len() > 1).map(|(i, _)| i as i32);
                        (n.clone(), ps.collect::<Vec<_>>())
                    })
                    .filter(|(_, ps)| !ps.is_empty())
                    .collect()
            })
            .unwrap_or_default(),
    };
    for (topic, partitions) in wanted {
        let mut tr = ReplicaElectionResult::default();
        tr.topic = topic_name(&topic);
        for p in partitions {
            let mut pr = PartitionResult::default();
            pr.partition_id = p;
            let (code, message) = if req.election_type != 0 {
                (
                    ResponseError::InvalidRequest.code(),
                    Some(
                        "only PREFERRED elections: Raft never elects a replica that may lack acknowledged data".into(),
                    ),
                )
            } else {
                elect(topics, router, &topic, p, deadline).await
            };
            pr.error_code = code;
            pr.error_message = message.map(|m| sb(&m));
            tr.partition_result.push(pr);
        }
        resp.replica_election_results.push(tr);
    }
    resp
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied
/// before the handler by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn authorize(c: &Authz<'_>, r: &mut ElectLeadersRequest, version: i16) -> Gate {
        if c.cluster(Op::Alter) {
            return Gate::Pass;
        }
        let mut x = ElectLeadersResponse::default();
        if version >= 1 {
            x.error_code = E::ClusterAuthorizationFailed.code();
        }
        for t in r.topic_partitions.iter().flatten() {
            let mut tr = elect_leaders_response::ReplicaElectionResult::default();
            tr.topic = t.topic.clone();
            for p in &t.partitions {
                let mut pr = elect_leaders_response::PartitionResult::default();
                pr.partition_id = *p;
                pr.error_code = E::ClusterAuthorizationFailed.code();
                tr.partition_result.push(pr);
            }
            x.replica_election_results.push(tr);
        }
        Gate::Deny(Box::new(ResponseKind::ElectLeaders(x)))
    }
}
