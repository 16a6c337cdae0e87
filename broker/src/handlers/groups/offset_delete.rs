//! OffsetDelete.

use super::*;

pub fn offset_delete(groups: &GroupCoordinator, req: OffsetDeleteRequest) -> Reply {
    let topics: Vec<(String, Vec<i32>)> = req
        .topics
        .iter()
        .map(|t| (t.name.to_string(), t.partitions.iter().map(|p| p.partition_index).collect()))
        .collect();
    let outcome = groups.delete_offsets(&req.group_id, topics, now_ms());
    let fut: LaterReply = Box::pin(async move {
        let mut resp = OffsetDeleteResponse::default();
        match outcome {
            Err(e) => resp.error_code = error_map::group_code(e),
            Ok((rows, wait)) => {
                if let Err(e) = group::wait_durable(wait).await {
                    tracing::error!("offset delete fsync failed: {e}");
                    resp.error_code = ResponseError::CoordinatorNotAvailable.code();
                }
                for (t, parts) in rows {
                    let mut tr = offset_delete_response::OffsetDeleteResponseTopic::default();
                    tr.name = topic_name(&t);
                    for (p, code) in parts {
                        let mut pr = offset_delete_response::OffsetDeleteResponsePartition::default();
                        pr.partition_index = p;
                        pr.error_code = error_map::group_error(code);
                        tr.partitions.push(pr);
                    }
                    resp.topics.push(tr);
                }
            }
        }
        ResponseKind::OffsetDelete(resp)
    });
    Reply::Later(fut)
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn offset_delete(c: &Authz<'_>, r: &mut OffsetDeleteRequest, _version: i16) -> Gate {
        if !c.ok(Op::Delete, Rt::Group, &r.group_id) {
            let mut x = OffsetDeleteResponse::default();
            x.error_code = E::GroupAuthorizationFailed.code();
            return Gate::Deny(Box::new(ResponseKind::OffsetDelete(x)));
        }
        let denied = split_off(&mut r.topics, |t| c.topic(Op::Read, &t.name));
        if denied.is_empty() {
            return Gate::Pass;
        }
        patch(
            move |resp: &mut OffsetDeleteResponse| {
                for t in denied {
                    let mut out = offset_delete_response::OffsetDeleteResponseTopic::default();
                    out.name = t.name;
                    out.partitions = t
                        .partitions
                        .iter()
                        .map(|p| {
                            let mut x = offset_delete_response::OffsetDeleteResponsePartition::default();
                            x.partition_index = p.partition_index;
                            x.error_code = E::TopicAuthorizationFailed.code();
                            x
                        })
                        .collect();
                    resp.topics.push(out);
                }
            },
            pick!(OffsetDelete),
        )
    }
}

/// Its routing rule in a cluster (a key's requests reach only its coordinator), applied before
/// the handler by `pipeline/route.rs`.
pub mod route {
    use crate::handlers::gate::prelude::*;
    use crate::handlers::gate::routing::*;
    use crate::routing::Router;

    pub fn offset_delete(router: &dyn Router, r: &mut OffsetDeleteRequest, _version: i16) -> Gate {
        top!(router, 0, &r.group_id, OffsetDeleteResponse, OffsetDelete)
    }
}
