//! OffsetCommit: answered once the offsets are durable.

use super::*;

pub fn offset_commit(groups: &GroupCoordinator, topics: &Arc<TopicRegistry>, req: OffsetCommitRequest) -> Reply {
    let group_id = req.group_id.to_string();
    let rows = req.topics.iter().map(|t| {
        let ps = t
            .partitions
            .iter()
            .map(|p| (p.partition_index, p.committed_offset, p.committed_leader_epoch, p.committed_metadata.clone()));
        (t.name.clone(), ps.collect())
    });
    let (to_commit, layout) = plan_offsets(groups, topics, rows.collect());
    let outcome = if group_id.is_empty() {
        Err(ResponseError::InvalidGroupId.code())
    } else if to_commit.is_empty() {
        Ok(crate::coordinator::ShardWrite::none())
    } else {
        groups
            .commit_offsets(
                &group_id,
                &req.member_id,
                opt(&req.group_instance_id),
                req.generation_id_or_member_epoch,
                to_commit,
                now_ms(),
            )
            .map_err(error_map::group_code)
    };
    let fut: LaterReply = Box::pin(async move {
        let group_code = match outcome {
            Err(code) => code,
            Ok(wait) => match group::wait_durable(wait).await {
                Ok(()) => 0,
                Err(e) => {
                    tracing::error!("offset commit fsync failed: {e}");
                    ResponseError::CoordinatorNotAvailable.code()
                }
            },
        };
        let mut resp = OffsetCommitResponse::default();
        for (name, rows) in layout {
            let mut tr = offset_commit_response::OffsetCommitResponseTopic::default();
            tr.name = name;
            for (p, code) in rows {
                let mut pr = offset_commit_response::OffsetCommitResponsePartition::default();
                pr.partition_index = p;
                pr.error_code = code.unwrap_or(group_code);
                tr.partitions.push(pr);
            }
            resp.topics.push(tr);
        }
        ResponseKind::OffsetCommit(resp)
    });
    Reply::Later(fut)
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn offset_commit(c: &Authz<'_>, r: &mut OffsetCommitRequest, _version: i16) -> Gate {
        let group_ok = c.ok(Op::Read, Rt::Group, &r.group_id);
        let denied = split_off(&mut r.topics, |t| group_ok && c.topic(Op::Read, &t.name));
        if denied.is_empty() {
            return Gate::Pass;
        }
        let code = if group_ok { E::TopicAuthorizationFailed } else { E::GroupAuthorizationFailed }.code();
        patch(
            move |resp: &mut OffsetCommitResponse| {
                for t in denied {
                    resp.topics.push(refuse::offset_commit_topic(&t, code));
                }
            },
            pick!(OffsetCommit),
        )
    }
}

/// Its routing rule in a cluster (a key's requests reach only its coordinator), applied before
/// the handler by `pipeline/route.rs`.
pub mod route {
    use crate::handlers::gate::prelude::*;
    use crate::handlers::gate::routing::*;
    use crate::routing::Router;

    pub fn offset_commit(router: &dyn Router, r: &mut OffsetCommitRequest, _version: i16) -> Gate {
        if mine(router, 0, &r.group_id) {
            return Gate::Pass;
        }
        let mut x = OffsetCommitResponse::default();
        x.topics = r.topics.iter().map(|t| refuse::offset_commit_topic(t, NOT_COORDINATOR)).collect();
        deny(ResponseKind::OffsetCommit(x))
    }
}
