//! Consumer-group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
//! OffsetCommit, OffsetFetch, OffsetDelete, DescribeGroups, ListGroups, DeleteGroups.
//! Translation only: the rules live in `group/`.

use super::{now_ms, sb, topic_name, LaterReply, Reply};
use crate::error_map;
use crate::group::error::GroupError;
use crate::group::machine::{GroupState, JoinArgs, SyncArgs};
use crate::group::{self, OffsetToCommit};
use crate::routing::{CoordinatorKey, Route, Router as _};
use crate::services::Services;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use std::net::SocketAddr;

fn opt(s: &Option<StrBytes>) -> Option<&str> {
    s.as_ref().map(|s| s.as_str()).filter(|s| !s.is_empty())
}

/// FindCoordinator: this broker coordinates every group (key type 0) and every transactional
/// id (key type 1).
pub fn find_coordinator(
    state: &Services,
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
            Some(key) => match state.coordinator_of(key) {
                Route::Here => {
                    c.node_id = BrokerId(state.config.node_id);
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

fn join_error(code: ResponseError, member_id: StrBytes) -> JoinGroupResponse {
    let mut r = JoinGroupResponse::default();
    r.error_code = code.code();
    r.generation_id = -1;
    r.member_id = member_id;
    r
}

pub fn join(state: &Services, version: i16, client_id: &str, peer: Option<SocketAddr>, req: JoinGroupRequest) -> Reply {
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
    let (rx, deliveries) = state.groups.join(&req.group_id, args, now_ms());
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

pub fn sync(state: &Services, req: SyncGroupRequest) -> Reply {
    let assignments = req.assignments.iter().map(|a| (a.member_id.to_string(), a.assignment.to_vec())).collect();
    let args = SyncArgs {
        member_id: &req.member_id,
        instance_id: opt(&req.group_instance_id),
        generation: req.generation_id,
        protocol_type: opt(&req.protocol_type),
        protocol: opt(&req.protocol_name),
        assignments,
    };
    let (rx, deliveries) = state.groups.sync(&req.group_id, args, now_ms());
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

/// ConsumerGroupHeartbeat (KIP-848): topics by name in, by id out.
pub fn consumer_heartbeat(
    state: &Services,
    version: i16,
    client_id: &str,
    peer: Option<SocketAddr>,
    req: ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    let mut resp = ConsumerGroupHeartbeatResponse::default();
    resp.heartbeat_interval_ms = state.groups.consumer_heartbeat_interval_ms(&req.group_id);
    if req.group_id.is_empty() || (version >= 1 && req.member_id.is_empty()) {
        resp.error_code = ResponseError::InvalidRequest.code();
        resp.error_message = Some(sb("group id and (v1+) member id are required"));
        return resp;
    }
    if req.subscribed_topic_regex.as_ref().is_some_and(|r| !r.is_empty()) {
        resp.error_code = ResponseError::InvalidRequest.code();
        resp.error_message = Some(sb("subscription by regular expression is not supported yet"));
        return resp;
    }
    let owned = req.topic_partitions.as_ref().map(|tps| {
        tps.iter()
            .filter_map(|t| {
                state.topics.topic_by_id(t.topic_id).map(|topic| (topic.name.clone(), t.partitions.clone()))
            })
            .flat_map(|(name, ps)| ps.into_iter().map(move |p| (name.clone(), p)))
            .collect()
    });
    let h = crate::group::consumer::Heartbeat {
        member_id: req.member_id.to_string(),
        member_epoch: req.member_epoch,
        instance_id: opt(&req.instance_id).map(str::to_string),
        rebalance_timeout_ms: req.rebalance_timeout_ms,
        subscribed: req.subscribed_topic_names.as_ref().map(|ts| ts.iter().map(|t| t.to_string()).collect()),
        owned,
        client_id: client_id.to_string(),
        client_host: peer.map(|p| format!("/{}", p.ip())).unwrap_or_default(),
        new_member_id: uuid::Uuid::new_v4().to_string(),
    };
    let partitions = |t: &str| state.topics.topic(t).map(|t| t.partitions.len() as i32);
    match state.groups.consumer_heartbeat(&req.group_id, h, &partitions, now_ms()) {
        Err(e) => resp.error_code = error_map::group_code(e),
        Ok(a) => {
            resp.member_id = Some(sb(&a.member_id));
            resp.member_epoch = a.member_epoch;
            resp.assignment = a.assignment.map(|set| {
                let mut by_topic: std::collections::BTreeMap<String, Vec<i32>> = Default::default();
                for (t, p) in set {
                    by_topic.entry(t).or_default().push(p);
                }
                let mut asg = consumer_group_heartbeat_response::Assignment::default();
                asg.topic_partitions = by_topic
                    .into_iter()
                    .filter_map(|(t, ps)| {
                        let topic = state.topics.topic(&t)?;
                        let mut tp = consumer_group_heartbeat_response::TopicPartitions::default();
                        tp.topic_id = topic.id;
                        tp.partitions = ps;
                        Some(tp)
                    })
                    .collect();
                asg
            });
        }
    }
    resp
}

pub fn heartbeat(state: &Services, req: HeartbeatRequest) -> HeartbeatResponse {
    let mut resp = HeartbeatResponse::default();
    let answer =
        state.groups.heartbeat(&req.group_id, &req.member_id, opt(&req.group_instance_id), req.generation_id, now_ms());
    resp.error_code = error_map::group_answer(answer);
    resp
}

pub fn leave(state: &Services, version: i16, req: LeaveGroupRequest) -> Reply {
    let members: Vec<(String, Option<String>)> = if version >= 3 {
        req.members.iter().map(|m| (m.member_id.to_string(), opt(&m.group_instance_id).map(str::to_string))).collect()
    } else {
        vec![(req.member_id.to_string(), None)]
    };
    let (codes, deliveries) = state.groups.leave(&req.group_id, &members, now_ms());
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

pub fn offset_commit(state: &Services, req: OffsetCommitRequest) -> Reply {
    let group_id = req.group_id.to_string();
    let rows = req.topics.iter().map(|t| {
        let ps = t
            .partitions
            .iter()
            .map(|p| (p.partition_index, p.committed_offset, p.committed_leader_epoch, p.committed_metadata.clone()));
        (t.name.clone(), ps.collect())
    });
    let (to_commit, layout) = plan_offsets(state, rows.collect());
    let outcome = if group_id.is_empty() {
        Err(ResponseError::InvalidGroupId.code())
    } else if to_commit.is_empty() {
        Ok(crate::coordinator::ShardWrite::none())
    } else {
        state
            .groups
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

type Wanted = Option<Vec<(String, Vec<i32>)>>;

/// Per topic, per partition: a refusal code, or `None` = committed with the group's outcome.
pub type TopicCodes = Vec<(TopicName, Vec<(i32, Option<i16>)>)>;

/// One partition of an OffsetCommit/TxnOffsetCommit: (partition, offset, leader epoch, metadata).
pub type OffsetRow = (i32, i64, i32, Option<StrBytes>);

/// Split a commit into the offsets to store and the per-partition refusals (unknown partition,
/// metadata over `offset.metadata.max.bytes`).
pub fn plan_offsets(state: &Services, topics: Vec<(TopicName, Vec<OffsetRow>)>) -> (Vec<OffsetToCommit>, TopicCodes) {
    let max_meta = state.groups.settings.metadata_max_bytes;
    let mut to_commit = Vec::new();
    let mut layout: TopicCodes = Vec::new();
    for (name, parts) in topics {
        let topic = state.topics.topic(&name);
        let mut rows = Vec::new();
        for (partition, offset, leader_epoch, metadata) in parts {
            let meta = metadata.map(|m| m.to_string()).unwrap_or_default();
            let refusal = if topic.as_ref().and_then(|tp| tp.partition(partition)).is_none() {
                Some(ResponseError::UnknownTopicOrPartition.code())
            } else if meta.len() > max_meta {
                Some(ResponseError::OffsetMetadataTooLarge.code())
            } else {
                to_commit.push(OffsetToCommit {
                    topic: name.to_string(),
                    partition,
                    offset,
                    leader_epoch,
                    metadata: meta,
                });
                None
            };
            rows.push((partition, refusal));
        }
        layout.push((name, rows));
    }
    (to_commit, layout)
}

fn fetch_group(state: &Services, group_id: &str, wanted: Wanted) -> group::OffsetRows {
    state.groups.fetch_offsets(group_id, wanted)
}

/// OffsetFetch. With require_stable (v7+), a partition whose offset is pending in an open
/// transaction answers UNSTABLE_OFFSET_COMMIT (the client retries until the marker lands).
pub fn offset_fetch(state: &Services, version: i16, req: OffsetFetchRequest) -> OffsetFetchResponse {
    let require_stable = version >= 7 && req.require_stable;
    let unstable = |group: &str, topic: &str, p: i32| {
        require_stable && state.groups.pending_partitions(group).contains(&(topic.to_string(), p))
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
            for (topic, rows) in fetch_group(state, &g.group_id, wanted) {
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
        for (topic, rows) in fetch_group(state, &req.group_id, wanted) {
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

pub fn offset_delete(state: &Services, req: OffsetDeleteRequest) -> Reply {
    let topics: Vec<(String, Vec<i32>)> = req
        .topics
        .iter()
        .map(|t| (t.name.to_string(), t.partitions.iter().map(|p| p.partition_index).collect()))
        .collect();
    let outcome = state.groups.delete_offsets(&req.group_id, topics, now_ms());
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

fn described_member(
    id: &str,
    instance: Option<&str>,
    client_id: &str,
    host: &str,
) -> describe_groups_response::DescribedGroupMember {
    let mut dm = describe_groups_response::DescribedGroupMember::default();
    dm.member_id = sb(id);
    dm.group_instance_id = instance.map(sb);
    dm.client_id = sb(client_id);
    dm.client_host = sb(host);
    dm
}

/// ConsumerGroupDescribe (KIP-848): a consumer-protocol group with its epochs and each member's
/// assignment and target. A classic group, or none, is GROUP_ID_NOT_FOUND as in Kafka (the Java
/// Admin client then falls back to DescribeGroups).
pub fn consumer_describe(state: &Services, req: ConsumerGroupDescribeRequest) -> ConsumerGroupDescribeResponse {
    use consumer_group_describe_response as cgd;
    let assignment = |tps: &std::collections::BTreeSet<(String, i32)>| {
        let mut by_topic: std::collections::BTreeMap<&str, Vec<i32>> = Default::default();
        for (t, p) in tps {
            by_topic.entry(t.as_str()).or_default().push(*p);
        }
        let mut a = cgd::Assignment::default();
        a.topic_partitions = by_topic
            .into_iter()
            .filter_map(|(t, ps)| {
                let topic = state.topics.topic(t)?;
                let mut x = cgd::TopicPartitions::default();
                x.topic_id = topic.id;
                x.topic_name = TopicName(sb(t));
                x.partitions = ps;
                Some(x)
            })
            .collect();
        a
    };
    let mut resp = ConsumerGroupDescribeResponse::default();
    for id in req.group_ids {
        let mut d = cgd::DescribedGroup::default();
        d.group_id = id.clone();
        d.authorized_operations = i32::MIN;
        match state.groups.describe(&id) {
            Some(g) if g.members.is_empty() && g.consumer.is_some() => {
                let c = g.consumer.clone().unwrap_or_default();
                d.group_state = sb(c.state_name());
                d.group_epoch = c.group_epoch;
                d.assignment_epoch = c.assignment_epoch;
                d.assignor_name = sb("uniform");
                d.members = c
                    .members
                    .values()
                    .map(|m| {
                        let mut dm = cgd::Member::default();
                        dm.member_id = sb(&m.id);
                        dm.instance_id = m.instance_id.as_deref().map(sb);
                        dm.member_epoch = m.epoch;
                        dm.client_id = sb(&m.client_id);
                        dm.client_host = sb(&m.client_host);
                        dm.subscribed_topic_names = m.subscribed.iter().map(|t| TopicName(sb(t))).collect();
                        dm.assignment = assignment(&m.assigned);
                        dm.target_assignment =
                            assignment(c.target.get(&m.id).unwrap_or(&std::collections::BTreeSet::new()));
                        dm.member_type = 1; // consumer protocol (v1+; -1 would be unknown)
                        dm
                    })
                    .collect();
            }
            Some(_) => {
                d.error_code = ResponseError::GroupIdNotFound.code();
                d.error_message = Some(sb(&format!("Group {} is not a consumer group.", id.as_str())));
            }
            None => {
                d.error_code = ResponseError::GroupIdNotFound.code();
                d.error_message = Some(sb(&format!("Group {} not found.", id.as_str())));
            }
        }
        resp.groups.push(d);
    }
    resp
}

pub fn describe(state: &Services, req: DescribeGroupsRequest) -> DescribeGroupsResponse {
    let mut resp = DescribeGroupsResponse::default();
    for id in req.groups {
        let mut d = describe_groups_response::DescribedGroup::default();
        d.group_id = id.clone();
        d.authorized_operations = i32::MIN;
        match state.groups.describe(&id) {
            None => d.group_state = sb(GroupState::Dead.name()),
            Some(g) if g.members.is_empty() && g.consumer.is_some() => {
                // a KIP-848 group, shown in the classic format (what admin tools decode)
                let c = g.consumer.clone().unwrap_or_default();
                d.group_state = sb(c.state_name());
                d.protocol_type = sb("consumer");
                d.protocol_data = sb("uniform");
                d.members = c
                    .members
                    .values()
                    .map(|m| {
                        let mut dm = described_member(&m.id, m.instance_id.as_deref(), &m.client_id, &m.client_host);
                        dm.member_metadata = group::codec::encode_subscription(m.subscribed.iter());
                        dm.member_assignment = group::codec::encode_assignment(m.assigned.iter());
                        dm
                    })
                    .collect();
            }
            Some(g) => {
                d.group_state = sb(g.state_and_type().0);
                d.protocol_type = sb(g.protocol_type.as_deref().unwrap_or_default());
                let protocol = g.protocol.clone().unwrap_or_default();
                if g.state == GroupState::Stable {
                    d.protocol_data = sb(&protocol);
                }
                d.members = g
                    .members
                    .values()
                    .map(|m| {
                        let mut dm = described_member(&m.id, m.instance_id.as_deref(), &m.client_id, &m.client_host);
                        if g.state == GroupState::Stable {
                            dm.member_metadata = group::bytes(&m.metadata_for(&protocol));
                            dm.member_assignment = group::bytes(&m.assignment);
                        }
                        dm
                    })
                    .collect();
            }
        }
        resp.groups.push(d);
    }
    resp
}

pub fn list(state: &Services, req: ListGroupsRequest) -> ListGroupsResponse {
    let states: Vec<String> = req.states_filter.iter().map(|s| s.to_lowercase()).collect();
    let types: Vec<String> = req.types_filter.iter().map(|s| s.to_lowercase()).collect();
    let mut resp = ListGroupsResponse::default();
    for (id, protocol_type, st, kind) in state.groups.list() {
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

pub fn delete(state: &Services, req: DeleteGroupsRequest) -> Reply {
    let now = now_ms();
    let outcomes: Vec<(GroupId, Result<_, GroupError>)> =
        req.groups_names.into_iter().map(|g| (g.clone(), state.groups.delete_group(&g, now))).collect();
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

/// This file's APIs' authorization rules (Kafka's ACLs, as `KafkaApis` checks them), applied
/// before the handler by `pipeline/authz.rs`.
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

    pub fn join_group(c: &Authz<'_>, r: &mut JoinGroupRequest, _version: i16) -> Gate {
        group_gate(c, &r.group_id, |code| {
            let mut x = JoinGroupResponse::default();
            x.error_code = code;
            x.generation_id = -1;
            ResponseKind::JoinGroup(x)
        })
    }

    pub fn sync_group(c: &Authz<'_>, r: &mut SyncGroupRequest, _version: i16) -> Gate {
        group_gate(c, &r.group_id, |code| {
            let mut x = SyncGroupResponse::default();
            x.error_code = code;
            ResponseKind::SyncGroup(x)
        })
    }

    pub fn heartbeat(c: &Authz<'_>, r: &mut HeartbeatRequest, _version: i16) -> Gate {
        group_gate(c, &r.group_id, |code| {
            let mut x = HeartbeatResponse::default();
            x.error_code = code;
            ResponseKind::Heartbeat(x)
        })
    }

    pub fn leave_group(c: &Authz<'_>, r: &mut LeaveGroupRequest, _version: i16) -> Gate {
        group_gate(c, &r.group_id, |code| {
            let mut x = LeaveGroupResponse::default();
            x.error_code = code;
            ResponseKind::LeaveGroup(x)
        })
    }

    pub fn consumer_group_heartbeat(c: &Authz<'_>, r: &mut ConsumerGroupHeartbeatRequest, _version: i16) -> Gate {
        group_gate(c, &r.group_id, |code| {
            let mut x = ConsumerGroupHeartbeatResponse::default();
            x.error_code = code;
            x.error_message = msg("Group authorization failed.");
            ResponseKind::ConsumerGroupHeartbeat(x)
        })
    }

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

    pub fn describe_groups(c: &Authz<'_>, r: &mut DescribeGroupsRequest, _version: i16) -> Gate {
        let denied: HashSet<String> =
            r.groups.iter().filter(|g| !c.ok(Op::Describe, Rt::Group, g)).map(|g| g.to_string()).collect();
        if denied.is_empty() {
            return Gate::Pass;
        }
        patch(
            move |resp: &mut DescribeGroupsResponse| {
                for g in resp.groups.iter_mut().filter(|g| denied.contains(g.group_id.as_str())) {
                    let mut x = describe_groups_response::DescribedGroup::default();
                    x.group_id = g.group_id.clone();
                    x.error_code = E::GroupAuthorizationFailed.code();
                    x.authorized_operations = i32::MIN;
                    *g = x;
                }
            },
            pick!(DescribeGroups),
        )
    }

    pub fn consumer_group_describe(c: &Authz<'_>, r: &mut ConsumerGroupDescribeRequest, _version: i16) -> Gate {
        let denied: HashSet<String> =
            r.group_ids.iter().filter(|g| !c.ok(Op::Describe, Rt::Group, g)).map(|g| g.to_string()).collect();
        if denied.is_empty() {
            return Gate::Pass;
        }
        patch(
            move |resp: &mut ConsumerGroupDescribeResponse| {
                for g in resp.groups.iter_mut().filter(|g| denied.contains(g.group_id.as_str())) {
                    let mut x = consumer_group_describe_response::DescribedGroup::default();
                    x.group_id = g.group_id.clone();
                    x.error_code = E::GroupAuthorizationFailed.code();
                    x.authorized_operations = i32::MIN;
                    *g = x;
                }
            },
            pick!(ConsumerGroupDescribe),
        )
    }

    pub fn list_groups(c: &Authz<'_>, _r: &mut ListGroupsRequest, _version: i16) -> Gate {
        if c.cluster(Op::Describe) {
            return Gate::Pass;
        }
        let (sec, who) = (c.state.security.clone(), c.session.clone());
        patch(
            move |resp: &mut ListGroupsResponse| {
                resp.groups.retain(|g| sec.allowed(&who, Op::Describe, Rt::Group, &g.group_id))
            },
            pick!(ListGroups),
        )
    }

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

    pub fn offset_fetch(c: &Authz<'_>, r: &mut OffsetFetchRequest, version: i16) -> Gate {
        let allowed_topics: HashSet<String> =
            c.state.topics.topics().iter().filter(|t| c.topic(Op::Describe, &t.name)).map(|t| t.name.clone()).collect();
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

/// This file's APIs' routing rules in a cluster (a partition's requests reach only its leader, a
/// key's only its coordinator), applied before the handler by `pipeline/route.rs`.
pub mod route {
    use crate::handlers::gate::prelude::*;
    use crate::handlers::gate::routing::*;
    use crate::services::Services;

    pub fn join_group(state: &Services, r: &mut JoinGroupRequest, _version: i16) -> Gate {
        if mine(state, 0, &r.group_id) {
            return Gate::Pass;
        }
        let mut x = JoinGroupResponse::default();
        x.error_code = NOT_COORDINATOR;
        x.generation_id = -1;
        deny(ResponseKind::JoinGroup(x))
    }

    pub fn sync_group(state: &Services, r: &mut SyncGroupRequest, _version: i16) -> Gate {
        top!(state, 0, &r.group_id, SyncGroupResponse, SyncGroup)
    }

    pub fn heartbeat(state: &Services, r: &mut HeartbeatRequest, _version: i16) -> Gate {
        top!(state, 0, &r.group_id, HeartbeatResponse, Heartbeat)
    }

    pub fn leave_group(state: &Services, r: &mut LeaveGroupRequest, _version: i16) -> Gate {
        top!(state, 0, &r.group_id, LeaveGroupResponse, LeaveGroup)
    }

    pub fn consumer_group_heartbeat(state: &Services, r: &mut ConsumerGroupHeartbeatRequest, _version: i16) -> Gate {
        top!(state, 0, &r.group_id, ConsumerGroupHeartbeatResponse, ConsumerGroupHeartbeat)
    }

    pub fn offset_delete(state: &Services, r: &mut OffsetDeleteRequest, _version: i16) -> Gate {
        top!(state, 0, &r.group_id, OffsetDeleteResponse, OffsetDelete)
    }

    pub fn offset_commit(state: &Services, r: &mut OffsetCommitRequest, _version: i16) -> Gate {
        if mine(state, 0, &r.group_id) {
            return Gate::Pass;
        }
        let mut x = OffsetCommitResponse::default();
        x.topics = r.topics.iter().map(|t| refuse::offset_commit_topic(t, NOT_COORDINATOR)).collect();
        deny(ResponseKind::OffsetCommit(x))
    }

    pub fn offset_fetch(state: &Services, r: &mut OffsetFetchRequest, version: i16) -> Gate {
        if version < 8 {
            if mine(state, 0, &r.group_id) {
                return Gate::Pass;
            }
            let mut x = OffsetFetchResponse::default();
            x.error_code = NOT_COORDINATOR;
            return deny(ResponseKind::OffsetFetch(x));
        }
        let (keep, away): (Vec<_>, Vec<_>) =
            std::mem::take(&mut r.groups).into_iter().partition(|g| mine(state, 0, &g.group_id));
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

    pub fn describe_groups(state: &Services, r: &mut DescribeGroupsRequest, _version: i16) -> Gate {
        let away: Vec<String> = r.groups.iter().filter(|g| !mine(state, 0, g)).map(|g| g.to_string()).collect();
        if away.is_empty() {
            return Gate::Pass;
        }
        patch_answer(move |resp| {
            if let ResponseKind::DescribeGroups(resp) = resp {
                for g in resp.groups.iter_mut().filter(|g| away.iter().any(|a| a == g.group_id.as_str())) {
                    let mut x = describe_groups_response::DescribedGroup::default();
                    x.group_id = g.group_id.clone();
                    x.error_code = NOT_COORDINATOR;
                    *g = x;
                }
            }
        })
    }

    pub fn consumer_group_describe(state: &Services, r: &mut ConsumerGroupDescribeRequest, _version: i16) -> Gate {
        let away: Vec<String> = r.group_ids.iter().filter(|g| !mine(state, 0, g)).map(|g| g.to_string()).collect();
        if away.is_empty() {
            return Gate::Pass;
        }
        patch_answer(move |resp| {
            if let ResponseKind::ConsumerGroupDescribe(resp) = resp {
                for g in resp.groups.iter_mut().filter(|g| away.iter().any(|a| a == g.group_id.as_str())) {
                    let mut x = consumer_group_describe_response::DescribedGroup::default();
                    x.group_id = g.group_id.clone();
                    x.error_code = NOT_COORDINATOR;
                    *g = x;
                }
            }
        })
    }

    pub fn delete_groups(state: &Services, r: &mut DeleteGroupsRequest, _version: i16) -> Gate {
        let (keep, away): (Vec<_>, Vec<_>) =
            std::mem::take(&mut r.groups_names).into_iter().partition(|g| mine(state, 0, g));
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
