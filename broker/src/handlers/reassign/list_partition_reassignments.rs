//! ListPartitionReassignments (v0).

use super::*;

pub fn list(topics: &Arc<TopicRegistry>, req: ListPartitionReassignmentsRequest) -> ListPartitionReassignmentsResponse {
    let mut resp = ListPartitionReassignmentsResponse::default();
    let Some(image) = topics.cluster.get().map(|c| c.image()) else { return resp };
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

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

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
