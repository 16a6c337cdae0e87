//! FindCoordinator (groups and transactional ids): which broker coordinates each key.

use super::*;

/// FindCoordinator: this broker coordinates every group (key type 0) and every transactional
/// id (key type 1).
pub fn find_coordinator(
    router: &dyn Router,
    config: &Config,
    listener: &crate::config::security::ListenerConfig,
    version: i16,
    req: FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    let keys: Vec<StrBytes> = if version >= 4 { req.coordinator_keys.clone() } else { vec![req.key.clone()] };
    let mut resp = FindCoordinatorResponse::default();
    for key in keys {
        let mut c = find_coordinator_response::Coordinator::default();
        c.key = key;
        match CoordinatorKey::from_wire(req.key_type, &c.key) {
            Some(key) => match router.coordinator_of(key) {
                Route::Here => {
                    c.node_id = BrokerId(config.node_id);
                    c.host = sb(&listener.advertised_host);
                    c.port = listener.advertised_port;
                }
                Route::Broker(b) => {
                    c.node_id = BrokerId(b.node_id);
                    c.host = sb(&b.host);
                    c.port = b.port;
                }
                Route::Electing => {
                    c.node_id = BrokerId(-1);
                    c.port = -1;
                    c.error_code = ResponseError::CoordinatorNotAvailable.code();
                }
            },
            None => {
                c.node_id = BrokerId(-1);
                c.port = -1;
                c.error_code = ResponseError::InvalidRequest.code();
                c.error_message = Some(sb("unknown coordinator key type"));
            }
        }
        resp.coordinators.push(c);
    }
    if version < 4 {
        if let Some(c) = resp.coordinators.pop() {
            resp.error_code = c.error_code;
            resp.error_message = c.error_message;
            resp.node_id = c.node_id;
            resp.host = c.host;
            resp.port = c.port;
        }
    }
    resp
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn find_coordinator(c: &Authz<'_>, r: &mut FindCoordinatorRequest, version: i16) -> Gate {
        let (rt, code) = if r.key_type == 1 {
            (Rt::TransactionalId, E::TransactionalIdAuthorizationFailed.code())
        } else {
            (Rt::Group, E::GroupAuthorizationFailed.code())
        };
        let denied: HashSet<String> = std::iter::once(r.key.to_string())
            .filter(|_| version < 4)
            .chain(r.coordinator_keys.iter().map(|k| k.to_string()))
            .filter(|k| !c.ok(Op::Describe, rt, k))
            .collect();
        if denied.is_empty() {
            return Gate::Pass;
        }
        patch(
            move |resp: &mut FindCoordinatorResponse| {
                if version < 4 {
                    resp.error_code = code;
                    resp.error_message = msg("Authorization failed.");
                    resp.node_id = BrokerId(-1);
                    resp.host = StrBytes::default();
                    resp.port = -1;
                }
                for k in resp.coordinators.iter_mut().filter(|k| denied.contains(k.key.as_str())) {
                    k.error_code = code;
                    k.error_message = msg("Authorization failed.");
                    k.node_id = BrokerId(-1);
                    k.host = StrBytes::default();
                    k.port = -1;
                }
            },
            pick!(FindCoordinator),
        )
    }
}
