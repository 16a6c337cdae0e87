//! JoinGroup (classic protocol): parked until the group's join phase completes.

use super::*;

fn join_error(code: ResponseError, member_id: StrBytes) -> JoinGroupResponse {
    let mut r = JoinGroupResponse::default();
    r.error_code = code.code();
    r.generation_id = -1;
    r.member_id = member_id;
    r
}

pub fn join(
    groups: &GroupCoordinator,
    version: i16,
    client_id: &str,
    peer: Option<SocketAddr>,
    req: JoinGroupRequest,
) -> Reply {
    if req.group_id.is_empty() {
        return Reply::now(ResponseKind::JoinGroup(join_error(ResponseError::InvalidGroupId, req.member_id)));
    }
    let rebalance_timeout_ms = if version == 0 { req.session_timeout_ms } else { req.rebalance_timeout_ms };
    let args = JoinArgs {
        member_id: req.member_id.to_string(),
        instance_id: opt(&req.group_instance_id).map(str::to_string),
        protocol_type: req.protocol_type.to_string(),
        protocols: req.protocols.iter().map(|p| (p.name.to_string(), p.metadata.to_vec())).collect(),
        session_timeout_ms: req.session_timeout_ms,
        rebalance_timeout_ms,
        client_id: client_id.to_string(),
        client_host: peer.map(|p| format!("/{}", p.ip())).unwrap_or_default(),
        require_known_member_id: version >= 4,
        new_member_id: format!("{client_id}-{}", uuid::Uuid::new_v4()),
    };
    let (rx, deliveries) = groups.join(&req.group_id, args, now_ms());
    let member_id = req.member_id.clone();
    let fut: LaterReply = Box::pin(async move {
        deliveries.finish().await;
        let resp = match rx.await {
            Ok(r) => {
                let mut resp = JoinGroupResponse::default();
                resp.error_code = error_map::group_error(r.error);
                resp.generation_id = r.generation;
                resp.protocol_type = r.protocol_type.map(|s| sb(&s));
                resp.protocol_name = r.protocol.map(|s| sb(&s));
                if version < 7 && resp.protocol_name.is_none() {
                    resp.protocol_name = Some(StrBytes::default());
                }
                resp.leader = sb(&r.leader);
                resp.member_id = sb(&r.member_id);
                resp.skip_assignment = r.skip_assignment && version >= 9;
                resp.members = r
                    .members
                    .into_iter()
                    .map(|(id, instance, meta)| {
                        let mut m = join_group_response::JoinGroupResponseMember::default();
                        m.member_id = sb(&id);
                        m.group_instance_id = instance.map(|s| sb(&s));
                        m.metadata = group::bytes(&meta);
                        m
                    })
                    .collect();
                resp
            }
            // the parked request was superseded (a newer JoinGroup of the same member)
            Err(_) => join_error(ResponseError::UnknownMemberId, member_id),
        };
        ResponseKind::JoinGroup(resp)
    });
    Reply::Later(fut)
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn join_group(c: &Authz<'_>, r: &mut JoinGroupRequest, _version: i16) -> Gate {
        group_gate(c, &r.group_id, |code| {
            let mut x = JoinGroupResponse::default();
            x.error_code = code;
            x.generation_id = -1;
            ResponseKind::JoinGroup(x)
        })
    }
}

/// Its routing rule in a cluster (a key's requests reach only its coordinator), applied before
/// the handler by `pipeline/route.rs`.
pub mod route {
    use crate::handlers::gate::prelude::*;
    use crate::handlers::gate::routing::*;
    use crate::routing::Router;

    pub fn join_group(router: &dyn Router, r: &mut JoinGroupRequest, _version: i16) -> Gate {
        if mine(router, 0, &r.group_id) {
            return Gate::Pass;
        }
        let mut x = JoinGroupResponse::default();
        x.error_code = NOT_COORDINATOR;
        x.generation_id = -1;
        deny(ResponseKind::JoinGroup(x))
    }
}
