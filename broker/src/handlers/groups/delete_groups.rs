//! DeleteGroups.

use super::*;

pub fn delete(groups: &GroupCoordinator, req: DeleteGroupsRequest) -> Reply {
    let now = now_ms();
    let outcomes: Vec<(GroupId, Result<_, GroupError>)> =
        req.groups_names.into_iter().map(|g| (g.clone(), groups.delete_group(&g, now))).collect();
    let fut: LaterReply = Box::pin(async move {
        let mut resp = DeleteGroupsResponse::default();
        for (g, outcome) in outcomes {
            let mut r = delete_groups_response::DeletableGroupResult::default();
            r.group_id = g;
            r.error_code = match outcome {
                Err(e) => error_map::group_code(e),
                Ok(wait) => match group::wait_durable(wait).await {
                    Ok(()) => 0,
                    Err(_) => ResponseError::CoordinatorNotAvailable.code(),
                },
            };
            resp.results.push(r);
        }
        ResponseKind::DeleteGroups(resp)
    });
    Reply::Later(fut)
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn delete_groups(c: &Authz<'_>, r: &mut DeleteGroupsRequest, _version: i16) -> Gate {
        let denied = split_off(&mut r.groups_names, |g| c.ok(Op::Delete, Rt::Group, g));
        if denied.is_empty() {
            return Gate::Pass;
        }
        patch(
            move |resp: &mut DeleteGroupsResponse| {
                for g in denied {
                    let mut x = delete_groups_response::DeletableGroupResult::default();
                    x.group_id = g;
                    x.error_code = E::GroupAuthorizationFailed.code();
                    resp.results.push(x);
                }
            },
            pick!(DeleteGroups),
        )
    }
}

/// Its routing rule in a cluster (a key's requests reach only its coordinator), applied before
/// the handler by `pipeline/route.rs`.
pub mod route {
    use crate::handlers::gate::prelude::*;
    use crate::handlers::gate::routing::*;
    use crate::routing::Router;

    pub fn delete_groups(router: &dyn Router, r: &mut DeleteGroupsRequest, _version: i16) -> Gate {
        let (keep, away): (Vec<_>, Vec<_>) =
            std::mem::take(&mut r.groups_names).into_iter().partition(|g| mine(router, 0, g));
        r.groups_names = keep;
        if away.is_empty() {
            return Gate::Pass;
        }
        patch_answer(move |resp| {
            if let ResponseKind::DeleteGroups(resp) = resp {
                for g in away {
                    let mut x = delete_groups_response::DeletableGroupResult::default();
                    x.group_id = g;
                    x.error_code = NOT_COORDINATOR;
                    resp.results.push(x);
                }
            }
        })
    }
}
