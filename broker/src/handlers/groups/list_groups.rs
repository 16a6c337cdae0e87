//! ListGroups.

use super::*;

pub fn list(groups: &GroupCoordinator, req: ListGroupsRequest) -> ListGroupsResponse {
    let states: Vec<String> = req.states_filter.iter().map(|s| s.to_lowercase()).collect();
    let types: Vec<String> = req.types_filter.iter().map(|s| s.to_lowercase()).collect();
    let mut resp = ListGroupsResponse::default();
    for (id, protocol_type, st, kind) in groups.list() {
        if !states.is_empty() && !states.contains(&st.to_lowercase()) {
            continue;
        }
        if !types.is_empty() && !types.contains(&kind.to_string()) {
            continue;
        }
        let mut g = list_groups_response::ListedGroup::default();
        g.group_id = GroupId(sb(&id));
        g.protocol_type = sb(&protocol_type);
        g.group_state = sb(st);
        g.group_type = sb(kind);
        resp.groups.push(g);
    }
    resp
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn list_groups(c: &Authz<'_>, _r: &mut ListGroupsRequest, _version: i16) -> Gate {
        if c.cluster(Op::Describe) {
            return Gate::Pass;
        }
        let (sec, who) = (c.security.clone(), c.session.clone());
        patch(
            move |resp: &mut ListGroupsResponse| {
                resp.groups.retain(|g| sec.allowed(&who, Op::Describe, Rt::Group, &g.group_id))
            },
            pick!(ListGroups),
        )
    }
}
