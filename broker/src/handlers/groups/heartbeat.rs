//! Heartbeat (classic protocol).

use super::*;

pub fn heartbeat(groups: &GroupCoordinator, req: HeartbeatRequest) -> HeartbeatResponse {
    let mut resp = HeartbeatResponse::default();
    let answer =
        groups.heartbeat(&req.group_id, &req.member_id, opt(&req.group_instance_id), req.generation_id, now_ms());
    resp.error_code = error_map::group_answer(answer);
    resp
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn heartbeat(c: &Authz<'_>, r: &mut HeartbeatRequest, _version: i16) -> Gate {
        group_gate(c, &r.group_id, |code| {
            let mut x = HeartbeatResponse::default();
            x.error_code = code;
            ResponseKind::Heartbeat(x)
        })
    }
}

/// Its routing rule in a cluster (a key's requests reach only its coordinator), applied before
/// the handler by `pipeline/route.rs`.
pub mod route {
    use crate::handlers::gate::prelude::*;
    use crate::handlers::gate::routing::*;
    use crate::routing::Router;

    pub fn heartbeat(router: &dyn Router, r: &mut HeartbeatRequest, _version: i16) -> Gate {
        top!(router, 0, &r.group_id, HeartbeatResponse, Heartbeat)
    }
}
