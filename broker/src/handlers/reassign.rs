//! AlterPartitionReassignments (v0–1) and ListPartitionReassignments (v0), as
//! `kafka-reassign-partitions` uses them: move a replicated partition to other brokers. The new
//! assignment is committed in the metadata quorum; the partition's Raft leader adds the new
//! replicas as learners, waits until they caught up, then replaces the voters (joint consensus),
//! so every acknowledged record stays on a majority throughout; the replicas left out stop once
//! the move is reported done. Cancelling (replicas null) is refused: a membership change in
//! progress is finished, not rolled back.

use super::{sb, topic_name};
use crate::services::Services;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::*;

const NO_REASSIGNMENT_IN_PROGRESS: i16 = 85;

pub async fn alter(
    state: &Services,
    version: i16,
    req: AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
    let mut resp = AlterPartitionReassignmentsResponse::default();
    if version >= 1 {
        resp.allow_replication_factor_change = req.allow_replication_factor_change;
    }
    let image = state.topics.cluster.get().map(|c| c.image());
    for t in req.topics {
        let mut tr = ReassignableTopicResponse::default();
        tr.name = t.name.clone();
        for p in t.partitions {
            let mut pr = ReassignablePartitionResponse::default();
            pr.partition_index = p.partition_index;
            let current = image
                .as_ref()
                .and_then(|i| i.topics.get(t.name.as_str()))
                .and_then(|i| i.replicas.get(usize::try_from(p.partition_index).ok()?).cloned());
            let (code, message): (i16, Option<String>) = match (&image, current, p.replicas) {
                (None, _, _) => (
                    ResponseError::InvalidReplicaAssignment.code(),
                    Some("a single broker holds every partition; start a cluster to move replicas".into()),
                ),
                (Some(_), None, _) => (ResponseError::UnknownTopicOrPartition.code(), None),
                (Some(_), Some(_), None) => (
                    NO_REASSIGNMENT_IN_PROGRESS,
                    Some("cancelling is not supported: a started move is finished".into()),
                ),
                (Some(_), Some(cur), Some(new)) => {
                    let new: Vec<i32> = new.iter().map(|b| b.0).collect();
                    if version >= 1 && !req.allow_replication_factor_change && new.len() != cur.len() {
                        (
                            ResponseError::InvalidReplicationFactor.code(),
                            Some(format!("{} replicas instead of {}", new.len(), cur.len())),
                        )
                    } else {
                        let cmd = crate::cluster::Command::ReassignPartition {
                            name: t.name.to_string(),
                            partition: p.partition_index,
                            replicas: new,
                        };
                        match state.topics.cluster_write(cmd).await {
                            Ok(crate::cluster::CommandResult::Refused(
                                crate::cluster::Refusal::InvalidReplicaAssignment(m),
                            )) => (ResponseError::InvalidReplicaAssignment.code(), Some(m)),
                            Ok(crate::cluster::CommandResult::Refused(_)) => {
                                (ResponseError::UnknownTopicOrPartition.code(), None)
                            }
                            Ok(_) => (0, None),
                            Err(e) => (ResponseError::RequestTimedOut.code(), Some(e)),
                        }
                    }
                }
            };
            pr.error_code = code;
            pr.error_message = message.map(|m| sb(&m));
            tr.partitions.push(pr);
        }
        resp.responses.push(tr);
    }
    resp
}

pub fn list(state: &Services, req: ListPartitionReassignmentsRequest) -> ListPartitionReassignmentsResponse {
    let mut resp = ListPartitionReassignmentsResponse::default();
    let Some(image) = state.topics.cluster.get().map(|c| c.image()) else { return resp };
    let wanted: Option<std::collections::BTreeMap<String, Vec<i32>>> =
        req.topics.map(|ts| ts.into_iter().map(|t| (t.name.to_string(), t.partition_indexes)).collect());
    for (name, info) in &image.topics {
        let mut tr = OngoingTopicReassignment::default();
        tr.name = topic_name(name);
        for (p, before) in &info.moving {
            if wanted.as_ref().is_some_and(|w| !w.get(name).is_some_and(|ps| ps.contains(p))) {
                continue;
            }
            let Some(after) = usize::try_from(*p).ok().and_then(|i| info.replicas.get(i)) else { continue };
            let mut pr = OngoingPartitionReassignment::default();
            pr.partition_index = *p;
            let mut all: Vec<i32> = after.clone();
            all.extend(before.iter().filter(|b| !after.contains(b)));
            pr.replicas = all.into_iter().map(BrokerId).collect();
            pr.adding_replicas = after.iter().filter(|a| !before.contains(a)).map(|a| BrokerId(*a)).collect();
            pr.removing_replicas = before.iter().filter(|b| !after.contains(b)).map(|b| BrokerId(*b)).collect();
            tr.partitions.push(pr);
        }
        if !tr.partitions.is_empty() {
            resp.topics.push(tr);
        }
    }
    resp
}

const BROKER_ID_NOT_REGISTERED: i16 = 102;

/// UnregisterBroker (v0, `kafka-cluster unregister --id N`): remove a broker that joined a
/// running cluster (with `controller.listener`) from the metadata quorum and the broker list.
/// Refused for the configured voters (they hold the coordinators' replicas) and for a broker
/// that still holds partition replicas (move them first: `sluicectl cluster reassign`).
pub async fn unregister(state: &Services, req: UnregisterBrokerRequest) -> UnregisterBrokerResponse {
    let mut resp = UnregisterBrokerResponse::default();
    let id = req.broker_id.0;
    let refuse = |mut r: UnregisterBrokerResponse, code: i16, m: String| {
        r.error_code = code;
        r.error_message = Some(sb(&m));
        r
    };
    let Some(node) = state.topics.cluster.get() else {
        return refuse(resp, ResponseError::InvalidRequest.code(), "a single broker is not a cluster".into());
    };
    let image = node.image();
    if !image.brokers.contains_key(&id) {
        return refuse(resp, BROKER_ID_NOT_REGISTERED, format!("broker {id} is not registered"));
    }
    if image.brokers.len() < 2 {
        return refuse(resp, ResponseError::InvalidRequest.code(), format!("broker {id} is the last broker"));
    }
    let held: Vec<String> = image
        .topics
        .iter()
        .flat_map(|(n, t)| {
            t.replicas.iter().enumerate().filter(|(_, r)| r.contains(&id)).map(move |(p, _)| format!("{n}-{p}"))
        })
        .collect();
    if !held.is_empty() {
        return refuse(
            resp,
            ResponseError::InvalidRequest.code(),
            format!("broker {id} still holds replicas of {} (move them first): {}", held.len(), held.join(", ")),
        );
    }
    let done = node.remove_broker(u64::try_from(id).unwrap_or(0)).await;
    if let Err(e) = done {
        resp = refuse(resp, ResponseError::RequestTimedOut.code(), e.to_string());
    }
    resp
}

/// This file's APIs' authorization rules (Kafka's ACLs, as `KafkaApis` checks them), applied
/// before the handler by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn alter_partition_reassignments(
        c: &Authz<'_>,
        r: &mut AlterPartitionReassignmentsRequest,
        _version: i16,
    ) -> Gate {
        if c.cluster(Op::Alter) {
            return Gate::Pass;
        }
        let mut x = AlterPartitionReassignmentsResponse::default();
        x.error_code = E::ClusterAuthorizationFailed.code();
        for t in &r.topics {
            let mut tr = alter_partition_reassignments_response::ReassignableTopicResponse::default();
            tr.name = t.name.clone();
            for p in &t.partitions {
                let mut pr = alter_partition_reassignments_response::ReassignablePartitionResponse::default();
                pr.partition_index = p.partition_index;
                pr.error_code = E::ClusterAuthorizationFailed.code();
                tr.partitions.push(pr);
            }
            x.responses.push(tr);
        }
        Gate::Deny(Box::new(ResponseKind::AlterPartitionReassignments(x)))
    }

    pub fn unregister_broker(c: &Authz<'_>, _r: &mut UnregisterBrokerRequest, _version: i16) -> Gate {
        if c.cluster(Op::Alter) {
            return Gate::Pass;
        }
        let mut x = UnregisterBrokerResponse::default();
        x.error_code = E::ClusterAuthorizationFailed.code();
        Gate::Deny(Box::new(ResponseKind::UnregisterBroker(x)))
    }

    pub fn list_partition_reassignments(
        c: &Authz<'_>,
        _r: &mut ListPartitionReassignmentsRequest,
        _version: i16,
    ) -> Gate {
        if c.cluster(Op::Describe) {
            return Gate::Pass;
        }
        let mut x = ListPartitionReassignmentsResponse::default();
        x.error_code = E::ClusterAuthorizationFailed.code();
        Gate::Deny(Box::new(ResponseKind::ListPartitionReassignments(x)))
    }
}
