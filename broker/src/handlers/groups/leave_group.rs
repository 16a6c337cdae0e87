//! LeaveGroup (v3+: several members at once).

use super::*;

pub fn leave(groups: &GroupCoordinator, version: i16, req: LeaveGroupRequest) -> Reply {
    let members: Vec<(String, Option<String>)> = if version >= 3 {
        req.members.iter().map(|m| (m.member_id.to_string(), opt(&m.group_instance_id).map(str::to_string))).collect()
    } else {
        vec![(req.member_id.to_string(), None)]
    };
    let (codes, deliveries) = groups.leave(&req.group_id, &members, now_ms());
    let fut: LaterReply = Box::pin(async move {
        let ok = deliveries.finish().await;
        let mut resp = LeaveGroupResponse::default();
        if !ok {
            resp.error_code = ResponseError::CoordinatorNotAvailable.code();
        } else if version >= 3 {
            resp.members = members
                .iter()
                .zip(&codes)
                .map(|((m, i), code)| {
                    let mut r = leave_group_response::MemberResponse::default();
                    r.member_id = sb(m);
                    r.group_instance_id = i.as_deref().map(sb);
                    r.error_code = error_map::group_answer(*code);
                    r
                })
                .collect();
        } else {
            resp.error_code = codes.first().map_or(0, |c| error_map::group_answer(*c));
        }
        ResponseKind::LeaveGroup(resp)
    });
    Reply::Later(fut)
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn leave_group(c: &Authz<'_>, r: &mut LeaveGroupRequest, _version: i16) -> Gate {
        group_gate(c, &r.group_id, |code| {
            let mut x = LeaveGroupResponse::default();
            x.error_code = code;
            ResponseKind::LeaveGroup(x)
        })
    }
}

/// Its routing rule in a cluster (a key's requests reach only its coordinator), applied before
/// the handler by `pipeline/route.rs`.
pub mod route {
    use crate::handlers::gate::prelude::*;
    use crate::handlers::gate::routing::*;
    use crate::routing::Router;

    pub fn leave_group(router: &dyn Router, r: &mut LeaveGroupRequest, _version: i16) -> Gate {
        top!(router, 0, &r.group_id, LeaveGroupResponse, LeaveGroup)
    }
}
