//! DescribeGroups (classic groups).

use super::*;

pub fn describe(groups: &GroupCoordinator, req: DescribeGroupsRequest) -> DescribeGroupsResponse {
    let mut resp = DescribeGroupsResponse::default();
    for id in req.groups {
        let mut d = describe_groups_response::DescribedGroup::default();
        d.group_id = id.clone();
        d.authorized_operations = i32::MIN;
        match groups.describe(&id) {
            None => d.group_state = sb(GroupState::Dead.name()),
            Some(g) if g.members.is_empty() && g.consumer.is_some() => {
                // a KIP-848 group, shown in the classic format (what admin tools decode)
                let c = g.consumer.clone().unwrap_or_default();
                d.group_state = sb(c.state_name());
                d.protocol_type = sb("consumer");
                d.protocol_data = sb("uniform");
                d.members = c
                    .members
                    .values()
                    .map(|m| {
                        let mut dm = described_member(&m.id, m.instance_id.as_deref(), &m.client_id, &m.client_host);
                        dm.member_metadata = group::codec::encode_subscription(m.subscribed.iter());
                        dm.member_assignment = group::codec::encode_assignment(m.assigned.iter());
                        dm
                    })
                    .collect();
            }
            Some(g) => {
                d.group_state = sb(g.state_and_type().0);
                d.protocol_type = sb(g.protocol_type.as_deref().unwrap_or_default());
                let protocol = g.protocol.clone().unwrap_or_default();
                if g.state == GroupState::Stable {
                    d.protocol_data = sb(&protocol);
                }
                d.members = g
                    .members
                    .values()
                    .map(|m| {
                        let mut dm = described_member(&m.id, m.instance_id.as_deref(), &m.client_id, &m.client_host);
                        if g.state == GroupState::Stable {
                            dm.member_metadata = group::bytes(&m.metadata_for(&protocol));
                            dm.member_assignment = group::bytes(&m.assignment);
                        }
                        dm
                    })
                    .collect();
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

    pub fn describe_groups(c: &Authz<'_>, r: &mut DescribeGroupsRequest, _version: i16) -> Gate {
        let denied: HashSet<String> =
            r.groups.iter().filter(|g| !c.ok(Op::Describe, Rt::Group, g)).map(|g| g.to_string()).collect();
        if denied.is_empty() {
            return Gate::Pass;
        }
        patch(
            move |resp: &mut DescribeGroupsResponse| {
                for g in resp.groups.iter_mut().filter(|g| denied.contains(g.group_id.as_str())) {
                    let mut x = describe_groups_response::DescribedGroup::default();
                    x.group_id = g.group_id.clone();
                    x.error_code = E::GroupAuthorizationFailed.code();
                    x.authorized_operations = i32::MIN;
                    *g = x;
                }
            },
            pick!(DescribeGroups),
        )
    }
}

/// Its routing rule in a cluster (a key's requests reach only its coordinator), applied before
/// the handler by `pipeline/route.rs`.
pub mod route {
    use crate::handlers::gate::prelude::*;
    use crate::handlers::gate::routing::*;
    use crate::routing::Router;

    pub fn describe_groups(router: &dyn Router, r: &mut DescribeGroupsRequest, _version: i16) -> Gate {
        let away: Vec<String> = r.groups.iter().filter(|g| !mine(router, 0, g)).map(|g| g.to_string()).collect();
        if away.is_empty() {
            return Gate::Pass;
        }
        patch_answer(move |resp| {
            if let ResponseKind::DescribeGroups(resp) = resp {
                for g in resp.groups.iter_mut().filter(|g| away.iter().any(|a| a == g.group_id.as_str())) {
                    let mut x = describe_groups_response::DescribedGroup::default();
                    x.group_id = g.group_id.clone();
                    x.error_code = NOT_COORDINATOR;
                    *g = x;
                }
            }
        })
    }
}
