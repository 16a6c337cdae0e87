//! SyncGroup: parked until the leader's assignment is stored.

use super::*;

pub fn sync(groups: &GroupCoordinator, req: SyncGroupRequest) -> Reply {
    let assignments = req.assignments.iter().map(|a| (a.member_id.to_string(), a.assignment.to_vec())).collect();
    let args = SyncArgs {
        member_id: &req.member_id,
        instance_id: opt(&req.group_instance_id),
        generation: req.generation_id,
        protocol_type: opt(&req.protocol_type),
        protocol: opt(&req.protocol_name),
        assignments,
    };
    let (rx, deliveries) = groups.sync(&req.group_id, args, now_ms());
    let fut: LaterReply = Box::pin(async move {
        deliveries.finish().await;
        let mut resp = SyncGroupResponse::default();
        match rx.await {
            Ok(r) => {
                resp.error_code = error_map::group_error(r.error);
                resp.protocol_type = r.protocol_type.map(|s| sb(&s));
                resp.protocol_name = r.protocol.map(|s| sb(&s));
                resp.assignment = group::bytes(&r.assignment);
            }
            Err(_) => resp.error_code = ResponseError::UnknownMemberId.code(),
        }
        ResponseKind::SyncGroup(resp)
    });
    Reply::Later(fut)
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn sync_group(c: &Authz<'_>, r: &mut SyncGroupRequest, _version: i16) -> Gate {
        group_gate(c, &r.group_id, |code| {
            let mut x = SyncGroupResponse::default();
            x.error_code = code;
            ResponseKind::SyncGroup(x)
        })
    }
}

/// Its routing rule in a cluster (a key's requests reach only its coordinator), applied before
/// the handler by `pipeline/route.rs`.
pub mod route {
    use crate::handlers::gate::prelude::*;
    use crate::handlers::gate::routing::*;
    use crate::routing::Router;

    pub fn sync_group(router: &dyn Router, r: &mut SyncGroupRequest, _version: i16) -> Gate {
        top!(router, 0, &r.group_id, SyncGroupResponse, SyncGroup)
    }
}
