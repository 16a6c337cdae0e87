//! OffsetFetch (v8+: several groups at once).

use super::*;

type Wanted = Option<Vec<(String, Vec<i32>)>>;

/// OffsetFetch. With require_stable (v7+), a partition whose offset is pending in an open
/// transaction answers UNSTABLE_OFFSET_COMMIT (the client retries until the marker lands).
pub fn offset_fetch(groups: &GroupCoordinator, version: i16, req: OffsetFetchRequest) -> OffsetFetchResponse {
    let require_stable = version >= 7 && req.require_stable;
    let unstable = |group: &str, topic: &str, p: i32| {
        require_stable && groups.pending_partitions(group).contains(&(topic.to_string(), p))
    };
    let mut resp = OffsetFetchResponse::default();
    if version >= 8 {
        for g in req.groups {
            let wanted: Wanted = g
                .topics
                .as_ref()
                .map(|ts| ts.iter().map(|t| (t.name.to_string(), t.partition_indexes.clone())).collect());
            let mut gr = offset_fetch_response::OffsetFetchResponseGroup::default();
            gr.group_id = g.group_id.clone();
            let rows = match groups.fetch_offsets(&g.group_id, wanted) {
                Ok(rows) => rows,
                Err(e) => {
                    gr.error_code = crate::error_map::group_code(e);
                    resp.groups.push(gr);
                    continue;
                }
            };
            for (topic, rows) in rows {
                let mut tr = offset_fetch_response::OffsetFetchResponseTopics::default();
                tr.name = topic_name(&topic);
                for (p, o) in rows {
                    let mut pr = offset_fetch_response::OffsetFetchResponsePartitions::default();
                    pr.partition_index = p;
                    if unstable(&g.group_id, &topic, p) {
                        fill(&mut pr.committed_offset, &mut pr.committed_leader_epoch, &mut pr.metadata, None);
                        pr.error_code = ResponseError::UnstableOffsetCommit.code();
                    } else {
                        fill(&mut pr.committed_offset, &mut pr.committed_leader_epoch, &mut pr.metadata, o);
                    }
                    tr.partitions.push(pr);
                }
                gr.topics.push(tr);
            }
            resp.groups.push(gr);
        }
    } else {
        let wanted: Wanted = req
            .topics
            .as_ref()
            .map(|ts| ts.iter().map(|t| (t.name.to_string(), t.partition_indexes.clone())).collect());
        let rows = match groups.fetch_offsets(&req.group_id, wanted) {
            Ok(rows) => rows,
            Err(e) => {
                resp.error_code = crate::error_map::group_code(e);
                return resp;
            }
        };
        for (topic, rows) in rows {
            let mut tr = offset_fetch_response::OffsetFetchResponseTopic::default();
            tr.name = topic_name(&topic);
            for (p, o) in rows {
                let mut pr = offset_fetch_response::OffsetFetchResponsePartition::default();
                pr.partition_index = p;
                if unstable(&req.group_id, &topic, p) {
                    fill(&mut pr.committed_offset, &mut pr.committed_leader_epoch, &mut pr.metadata, None);
                    pr.error_code = ResponseError::UnstableOffsetCommit.code();
                } else {
                    fill(&mut pr.committed_offset, &mut pr.committed_leader_epoch, &mut pr.metadata, o);
                }
                tr.partitions.push(pr);
            }
            resp.topics.push(tr);
        }
    }
    resp
}

fn fill(offset: &mut i64, epoch: &mut i32, meta: &mut Option<StrBytes>, o: Option<group::machine::CommittedOffset>) {
    match o {
        Some(o) => {
            *offset = o.offset;
            *epoch = o.leader_epoch;
            *meta = Some(sb(&o.metadata));
        }
        None => {
            *offset = -1;
            *epoch = -1;
            *meta = Some(StrBytes::default());
        }
    }
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn offset_fetch(c: &Authz<'_>, r: &mut OffsetFetchRequest, version: i16) -> Gate {
        let allowed_topics: HashSet<String> =
            c.topics.topics().iter().filter(|t| c.topic(Op::Describe, &t.name)).map(|t| t.name.clone()).collect();
        if version < 8 {
            if !c.ok(Op::Describe, Rt::Group, &r.group_id) {
                let code = E::GroupAuthorizationFailed.code();
                let mut x = OffsetFetchResponse::default();
                x.error_code = code;
                // v0-v1 have no top-level error: Kafka answers it on every partition asked
                if version < 2 {
                    x.topics = r.topics.iter().flatten().map(|t| offset_fetch_topic_refused(t, code)).collect();
                }
                return Gate::Deny(Box::new(ResponseKind::OffsetFetch(x)));
            }
            let denied = match r.topics.as_mut() {
                Some(ts) => split_off(ts, |t| c.topic(Op::Describe, &t.name)),
                None => Vec::new(),
            };
            return patch(
                move |resp: &mut OffsetFetchResponse| {
                    resp.topics.retain(|t| allowed_topics.contains(t.name.as_str()));
                    for t in &denied {
                        resp.topics.push(offset_fetch_topic_refused(t, E::TopicAuthorizationFailed.code()));
                    }
                },
                pick!(OffsetFetch),
            );
        }
        let denied_groups = split_off(&mut r.groups, |g| c.ok(Op::Describe, Rt::Group, &g.group_id));
        let mut denied_topics: Vec<(GroupId, Vec<offset_fetch_request::OffsetFetchRequestTopics>)> = Vec::new();
        for g in r.groups.iter_mut() {
            if let Some(ts) = g.topics.as_mut() {
                let d = split_off(ts, |t| c.topic(Op::Describe, &t.name));
                if !d.is_empty() {
                    denied_topics.push((g.group_id.clone(), d));
                }
            }
        }
        patch(
            move |resp: &mut OffsetFetchResponse| {
                for g in resp.groups.iter_mut() {
                    g.topics.retain(|t| allowed_topics.contains(t.name.as_str()));
                    for (_, ts) in denied_topics.iter().filter(|(id, _)| *id == g.group_id) {
                        for t in ts {
                            let mut out = offset_fetch_response::OffsetFetchResponseTopics::default();
                            out.name = t.name.clone();
                            out.topic_id = t.topic_id;
                            out.partitions = t
                                .partition_indexes
                                .iter()
                                .map(|p| {
                                    let mut x = offset_fetch_response::OffsetFetchResponsePartitions::default();
                                    x.partition_index = *p;
                                    x.committed_offset = -1;
                                    x.error_code = E::TopicAuthorizationFailed.code();
                                    x
                                })
                                .collect();
                            g.topics.push(out);
                        }
                    }
                }
                for g in denied_groups {
                    let mut x = offset_fetch_response::OffsetFetchResponseGroup::default();
                    x.group_id = g.group_id;
                    x.error_code = E::GroupAuthorizationFailed.code();
                    resp.groups.push(x);
                }
            },
            pick!(OffsetFetch),
        )
    }

    /// OffsetFetch v0-v7: topic `t` refused with `code` on every partition asked.
    fn offset_fetch_topic_refused(
        t: &offset_fetch_request::OffsetFetchRequestTopic,
        code: i16,
    ) -> offset_fetch_response::OffsetFetchResponseTopic {
        let mut out = offset_fetch_response::OffsetFetchResponseTopic::default();
        out.name = t.name.clone();
        out.partitions = t
            .partition_indexes
            .iter()
            .map(|p| {
                let mut x = offset_fetch_response::OffsetFetchResponsePartition::default();
                x.partition_index = *p;
                x.committed_offset = -1;
                x.error_code = code;
                x
            })
            .collect();
        out
    }
}

/// Its routing rule in a cluster (a key's requests reach only its coordinator), applied before
/// the handler by `pipeline/route.rs`.
pub mod route {
    use crate::handlers::gate::prelude::*;
    use crate::handlers::gate::routing::*;
    use crate::routing::Router;

    pub fn offset_fetch(router: &dyn Router, r: &mut OffsetFetchRequest, version: i16) -> Gate {
        if version < 8 {
            if mine(router, 0, &r.group_id) {
                return Gate::Pass;
            }
            let mut x = OffsetFetchResponse::default();
            x.error_code = NOT_COORDINATOR;
            return deny(ResponseKind::OffsetFetch(x));
        }
        let (keep, away): (Vec<_>, Vec<_>) =
            std::mem::take(&mut r.groups).into_iter().partition(|g| mine(router, 0, &g.group_id));
        r.groups = keep;
        if away.is_empty() {
            return Gate::Pass;
        }
        let away: Vec<GroupId> = away.into_iter().map(|g| g.group_id).collect();
        patch_answer(move |resp| {
            if let ResponseKind::OffsetFetch(resp) = resp {
                for g in away {
                    let mut x = offset_fetch_response::OffsetFetchResponseGroup::default();
                    x.group_id = g;
                    x.error_code = NOT_COORDINATOR;
                    resp.groups.push(x);
                }
            }
        })
    }
}
