//! Cluster mode: only a partition's leader serves it, and only a key's coordinator serves
//! its group or transaction (NOT_COORDINATOR elsewhere). Produce, Fetch, ListOffsets and
//! DeleteRecords for partitions led elsewhere are removed from the request and answered
//! NOT_LEADER_OR_FOLLOWER, so clients refresh their metadata and go to the leader (as with
//! Kafka after a leadership change).

use super::{Gate, Patch};
use crate::handlers::refuse;
use crate::routing::{CoordinatorKey, Route, Router as _};
use crate::services::Services;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use sluice_protocol::api::SupportedRequest;

const NOT_LEADER: i16 = 6;

/// Partitions of `topic` this broker does not lead (a replicated partition: its Raft group's
/// leader; otherwise the image's assignment).
fn not_mine(state: &Services, _image: &crate::cluster::MetadataImage, topic: &str, p: i32) -> bool {
    match state.leader_of(topic, p) {
        Some((l, _)) => l != state.config.node_id,
        None => false, // unknown here: the handler answers UNKNOWN_TOPIC_OR_PARTITION
    }
}

fn patch(f: impl FnOnce(&mut ResponseKind) + Send + 'static) -> Gate {
    let p: Patch = Box::new(f);
    Gate::Patch(p)
}

const NOT_COORDINATOR: i16 = 16;

/// Does this broker coordinate `key` (0: group, 1: transactional id)?
fn mine(state: &Services, key_type: i8, key: &str) -> bool {
    CoordinatorKey::from_wire(key_type, key).is_some_and(|k| state.coordinator_of(k) == Route::Here)
}

fn deny(r: ResponseKind) -> Gate {
    Gate::Deny(Box::new(r))
}

/// Group and transaction APIs reach only the key's coordinator; elsewhere NOT_COORDINATOR, so
/// the client looks the coordinator up again.
fn coordinator_gate(state: &Services, body: &mut SupportedRequest, version: i16) -> Gate {
    macro_rules! top {
        ($key_type:expr, $key:expr, $Resp:ident, $variant:ident) => {{
            if mine(state, $key_type, $key) {
                return Gate::Pass;
            }
            let mut x = $Resp::default();
            x.error_code = NOT_COORDINATOR;
            deny(ResponseKind::$variant(x))
        }};
    }
    match body {
        SupportedRequest::JoinGroup(r) => {
            if mine(state, 0, &r.group_id) {
                return Gate::Pass;
            }
            let mut x = JoinGroupResponse::default();
            x.error_code = NOT_COORDINATOR;
            x.generation_id = -1;
            deny(ResponseKind::JoinGroup(x))
        }
        SupportedRequest::SyncGroup(r) => top!(0, &r.group_id, SyncGroupResponse, SyncGroup),
        SupportedRequest::Heartbeat(r) => top!(0, &r.group_id, HeartbeatResponse, Heartbeat),
        SupportedRequest::LeaveGroup(r) => top!(0, &r.group_id, LeaveGroupResponse, LeaveGroup),
        SupportedRequest::ConsumerGroupHeartbeat(r) => {
            top!(0, &r.group_id, ConsumerGroupHeartbeatResponse, ConsumerGroupHeartbeat)
        }
        SupportedRequest::OffsetDelete(r) => top!(0, &r.group_id, OffsetDeleteResponse, OffsetDelete),
        SupportedRequest::AddOffsetsToTxn(r) => top!(1, &r.transactional_id, AddOffsetsToTxnResponse, AddOffsetsToTxn),
        SupportedRequest::EndTxn(r) => {
            if mine(state, 1, &r.transactional_id) {
                return Gate::Pass;
            }
            let mut x = EndTxnResponse::default();
            x.error_code = NOT_COORDINATOR;
            x.producer_id = ProducerId(-1);
            x.producer_epoch = -1;
            deny(ResponseKind::EndTxn(x))
        }
        SupportedRequest::InitProducerId(r) => match r.transactional_id.as_ref().filter(|t| !t.is_empty()) {
            Some(t) if !mine(state, 1, t) => {
                let mut x = InitProducerIdResponse::default();
                x.error_code = NOT_COORDINATOR;
                x.producer_id = ProducerId(-1);
                x.producer_epoch = -1;
                deny(ResponseKind::InitProducerId(x))
            }
            _ => Gate::Pass,
        },
        SupportedRequest::OffsetCommit(r) => {
            if mine(state, 0, &r.group_id) {
                return Gate::Pass;
            }
            let mut x = OffsetCommitResponse::default();
            x.topics = r.topics.iter().map(|t| refuse::offset_commit_topic(t, NOT_COORDINATOR)).collect();
            deny(ResponseKind::OffsetCommit(x))
        }
        SupportedRequest::TxnOffsetCommit(r) => {
            if mine(state, 0, &r.group_id) {
                return Gate::Pass;
            }
            let mut x = TxnOffsetCommitResponse::default();
            x.topics = r.topics.iter().map(|t| refuse::txn_offset_commit_topic(t, NOT_COORDINATOR)).collect();
            deny(ResponseKind::TxnOffsetCommit(x))
        }
        SupportedRequest::AddPartitionsToTxn(r) if version < 4 => {
            if mine(state, 1, &r.v3_and_below_transactional_id) {
                return Gate::Pass;
            }
            let x = refuse::add_partitions_v3(r, |_| NOT_COORDINATOR);
            deny(ResponseKind::AddPartitionsToTxn(x))
        }
        SupportedRequest::OffsetFetch(r) if version < 8 => {
            if mine(state, 0, &r.group_id) {
                return Gate::Pass;
            }
            let mut x = OffsetFetchResponse::default();
            x.error_code = NOT_COORDINATOR;
            deny(ResponseKind::OffsetFetch(x))
        }
        SupportedRequest::OffsetFetch(r) => {
            let (keep, away): (Vec<_>, Vec<_>) =
                std::mem::take(&mut r.groups).into_iter().partition(|g| mine(state, 0, &g.group_id));
            r.groups = keep;
            if away.is_empty() {
                return Gate::Pass;
            }
            let away: Vec<GroupId> = away.into_iter().map(|g| g.group_id).collect();
            patch(move |resp| {
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
        SupportedRequest::DescribeGroups(r) => {
            let away: Vec<String> = r.groups.iter().filter(|g| !mine(state, 0, g)).map(|g| g.to_string()).collect();
            if away.is_empty() {
                return Gate::Pass;
            }
            patch(move |resp| {
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
        SupportedRequest::ConsumerGroupDescribe(r) => {
            let away: Vec<String> = r.group_ids.iter().filter(|g| !mine(state, 0, g)).map(|g| g.to_string()).collect();
            if away.is_empty() {
                return Gate::Pass;
            }
            patch(move |resp| {
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
        SupportedRequest::DeleteGroups(r) => {
            let (keep, away): (Vec<_>, Vec<_>) =
                std::mem::take(&mut r.groups_names).into_iter().partition(|g| mine(state, 0, g));
            r.groups_names = keep;
            if away.is_empty() {
                return Gate::Pass;
            }
            patch(move |resp| {
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
        SupportedRequest::DescribeTransactions(r) => {
            let away: Vec<String> =
                r.transactional_ids.iter().filter(|t| !mine(state, 1, t)).map(|t| t.to_string()).collect();
            if away.is_empty() {
                return Gate::Pass;
            }
            patch(move |resp| {
                if let ResponseKind::DescribeTransactions(resp) = resp {
                    for t in resp
                        .transaction_states
                        .iter_mut()
                        .filter(|t| away.iter().any(|a| a == t.transactional_id.as_str()))
                    {
                        let mut x = describe_transactions_response::TransactionState::default();
                        x.transactional_id = t.transactional_id.clone();
                        x.error_code = NOT_COORDINATOR;
                        *t = x;
                    }
                }
            })
        }
        _ => Gate::Pass,
    }
}

pub fn gate(state: &Services, body: &mut SupportedRequest, version: i16) -> Gate {
    let Some(cluster) = state.topics.cluster.get() else { return Gate::Pass };
    if let g @ (Gate::Deny(_) | Gate::Patch(_)) = coordinator_gate(state, body, version) {
        return g;
    }
    debug_assert_eq!(NOT_LEADER, ResponseError::NotLeaderOrFollower.code());
    let image = cluster.image();
    match body {
        SupportedRequest::Produce(r) => {
            let mut moved: Vec<(TopicName, Vec<i32>)> = Vec::new();
            for t in r.topic_data.iter_mut() {
                let (keep, away): (Vec<_>, Vec<_>) = std::mem::take(&mut t.partition_data)
                    .into_iter()
                    .partition(|p| !not_mine(state, &image, &t.name, p.index));
                t.partition_data = keep;
                if !away.is_empty() {
                    moved.push((t.name.clone(), away.iter().map(|p| p.index).collect()));
                }
            }
            r.topic_data.retain(|t| !t.partition_data.is_empty());
            if moved.is_empty() {
                return Gate::Pass;
            }
            patch(move |resp| {
                if let ResponseKind::Produce(resp) = resp {
                    for (name, parts) in moved {
                        resp.responses.push(refuse::produce_topic(name, parts, NOT_LEADER));
                    }
                }
            })
        }
        SupportedRequest::Fetch(r) => {
            let mut moved: Vec<(TopicName, uuid::Uuid, Vec<i32>)> = Vec::new();
            for t in r.topics.iter_mut() {
                let name = if version >= 13 {
                    match state.topics.topic_by_id(t.topic_id) {
                        Some(x) => x.name.clone(),
                        None => continue,
                    }
                } else {
                    t.topic.to_string()
                };
                let (keep, away): (Vec<_>, Vec<_>) = std::mem::take(&mut t.partitions)
                    .into_iter()
                    .partition(|p| !not_mine(state, &image, &name, p.partition));
                t.partitions = keep;
                if !away.is_empty() {
                    moved.push((t.topic.clone(), t.topic_id, away.iter().map(|p| p.partition).collect()));
                }
            }
            r.topics.retain(|t| !t.partitions.is_empty());
            if moved.is_empty() {
                return Gate::Pass;
            }
            patch(move |resp| {
                if let ResponseKind::Fetch(resp) = resp {
                    for (topic, id, parts) in moved {
                        resp.responses.push(refuse::fetch_topic(topic, id, parts, NOT_LEADER));
                    }
                }
            })
        }
        // replica id -2 (Kafka's "debugging" replica): any replica answers with its own log,
        // e.g. `sluicectl cluster describe` measuring each follower's lag
        SupportedRequest::ListOffsets(r) if r.replica_id.0 == -2 => Gate::Pass,
        SupportedRequest::ListOffsets(r) => {
            let mut moved: Vec<(TopicName, Vec<i32>)> = Vec::new();
            for t in r.topics.iter_mut() {
                let (keep, away): (Vec<_>, Vec<_>) = std::mem::take(&mut t.partitions)
                    .into_iter()
                    .partition(|p| !not_mine(state, &image, &t.name, p.partition_index));
                t.partitions = keep;
                if !away.is_empty() {
                    moved.push((t.name.clone(), away.iter().map(|p| p.partition_index).collect()));
                }
            }
            r.topics.retain(|t| !t.partitions.is_empty());
            if moved.is_empty() {
                return Gate::Pass;
            }
            patch(move |resp| {
                if let ResponseKind::ListOffsets(resp) = resp {
                    for (name, parts) in moved {
                        resp.topics.push(refuse::list_offsets_topic(name, parts, NOT_LEADER));
                    }
                }
            })
        }
        _ => Gate::Pass,
    }
}
