//! AlterPartitionReassignments (v0–1): move a replicated partition to other brokers. The new
//! assignment is committed in the metadata quorum; the partition's Raft leader adds the new
//! replicas as learners, waits until they caught up, then replaces the voters (joint consensus),
//! so every acknowledged record stays on a majority throughout; the replicas left out stop once
//! the move is reported done. Cancelling (replicas null) is refused: a membership change in
//! progress is finished, not rolled back.

use super::*;

const NO_REASSIGNMENT_IN_PROGRESS: i16 = 85;

pub async fn alter(
    topics: &Arc<TopicRegistry>,
    version: i16,
    req: AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
    let mut resp = AlterPartitionReassignmentsResponse::default();
    if version >= 1 {
        resp.allow_replication_factor_change = req.allow_replication_factor_change;
    }
    let image = topics.cluster.get().map(|c| c.image());
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
                        match topics.cluster_write(cmd).await {
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

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
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
}
