//! ConsumerGroupDescribe (KIP-848 groups).

use super::*;

/// ConsumerGroupDescribe (KIP-848): a consumer-protocol group with its epochs and each member's
/// assignment and target. A classic group, or none, is GROUP_ID_NOT_FOUND as in Kafka (the Java
/// Admin client then falls back to DescribeGroups).
pub fn consumer_describe(
    groups: &GroupCoordinator,
    topics: &Arc<TopicRegistry>,
    req: ConsumerGroupDescribeRequest,
) -> ConsumerGroupDescribeResponse {
    use consumer_group_describe_response as cgd;
    let assignment = |tps: &std::collections::BTreeSet<(String, i32)>| {
        let mut by_topic: std::collections::BTreeMap<&str, Vec<i32>> = Default::default();
        for (t, p) in tps {
            by_topic.entry(t.as_str()).or_default().push(*p);
        }
        let mut a = cgd::Assignment::default();
        a.topic_partitions = by_topic
            .into_iter()
            .filter_map(|(t, ps)| {
                let topic = topics.topic(t)?;
                let mut x = cgd::TopicPartitions::default();
                x.topic_id = topic.id;
                x.topic_name = TopicName(sb(t));
                x.partitions = ps;
                Some(x)
            })
            .collect();
        a
    };
    let mut resp = ConsumerGroupDescribeResponse::default();
    for id in req.group_ids {
        let mut d = cgd::DescribedGroup::default();
        d.group_id = id.clone();
        d.authorized_operations = i32::MIN;
        match groups.describe(&id) {
            Some(g) if g.members.is_empty() && g.consumer.is_some() => {
                let c = g.consumer.clone().unwrap_or_default();
                d.group_state = sb(c.state_name());
                d.group_epoch = c.group_epoch;
                d.assignment_epoch = c.assignment_epoch;
                d.assignor_name = sb("uniform");
                d.members = c
                    .members
                    .values()
                    .map(|m| {
                        let mut dm = cgd::Member::default();
                        dm.member_id = sb(&m.id);
                        dm.instance_id = m.instance_id.as_deref().map(sb);
                        dm.member_epoch = m.epoch;
                        dm.client_id = sb(&m.client_id);
                        dm.client_host = sb(&m.client_host);
                        dm.subscribed_topic_names = m.subscribed.iter().map(|t| TopicName(sb(t))).collect();
                        dm.assignment = assignment(&m.assigned);
                        dm.target_assignment =
                            assignment(c.target.get(&m.id).unwrap_or(&std::collections::BTreeSet::new()));
                        dm.member_type = 1; // consumer protocol (v1+; -1 would be unknown)
                        dm
                    })
                    .collect();
            }
            Some(_) => {
                d.error_code = ResponseError::GroupIdNotFound.code();
                d.error_message = Some(sb(&format!("Group {} is not a consumer group.", id.as_str())));
            }
            None => {
                d.error_code = ResponseError::GroupIdNotFound.code();
                d.error_message = Some(sb(&format!("Group {} not found.", id.as_str())));
            }
        }
        resp.groups.push(d);
    }
    resp
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn consumer_group_describe(c: &Authz<'_>, r: &mut ConsumerGroupDescribeRequest, _version: i16) -> Gate {
        let denied: HashSet<String> =
            r.group_ids.iter().filter(|g| !c.ok(Op::Describe, Rt::Group, g)).map(|g| g.to_string()).collect();
        if denied.is_empty() {
            return Gate::Pass;
        }
        patch(
            move |resp: &mut ConsumerGroupDescribeResponse| {
                for g in resp.groups.iter_mut().filter(|g| denied.contains(g.group_id.as_str())) {
                    let mut x = consumer_group_describe_response::DescribedGroup::default();
                    x.group_id = g.group_id.clone();
                    x.error_code = E::GroupAuthorizationFailed.code();
                    x.authorized_operations = i32::MIN;
                    *g = x;
                }
            },
            pick!(ConsumerGroupDescribe),
        )
    }
}

/// Its routing rule in a cluster (a key's requests reach only its coordinator), applied before
/// the handler by `pipeline/route.rs`.
pub mod route {
    use crate::handlers::gate::prelude::*;
    use crate::handlers::gate::routing::*;
    use crate::routing::Router;

    pub fn consumer_group_describe(router: &dyn Router, r: &mut ConsumerGroupDescribeRequest, _version: i16) -> Gate {
        let away: Vec<String> = r.group_ids.iter().filter(|g| !mine(router, 0, g)).map(|g| g.to_string()).collect();
        if away.is_empty() {
            return Gate::Pass;
        }
        patch_answer(move |resp| {
            if let ResponseKind::ConsumerGroupDescribe(resp) = resp {
                for g in resp.groups.iter_mut().filter(|g| away.iter().any(|a| a == g.group_id.as_str())) {
                    let mut x = consumer_group_describe_response::DescribedGroup::default();
                    x.group_id = g.group_id.clone();
                    x.error_code = NOT_COORDINATOR;
                    *g = x;
                }
            }
        })
    }
}
