//! Consumer-group APIs, one file each: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup, ConsumerGroupHeartbeat, OffsetCommit, OffsetFetch, OffsetDelete, DescribeGroups,
//! ConsumerGroupDescribe, ListGroups, DeleteGroups. Each file holds its API's answer, its ACL
//! rule (`acl`) and its cluster routing rule (`route`); this module, what they share.
//! Translation only: the rules live in `group/`.

use super::{now_ms, sb, topic_name, LaterReply, Reply};
use crate::config::Config;
use crate::error_map;
use crate::group::error::GroupError;
use crate::group::machine::{GroupState, JoinArgs, SyncArgs};
use crate::group::GroupCoordinator;
use crate::group::{self, OffsetToCommit};
use crate::routing::Router;
use crate::routing::{CoordinatorKey, Route};
use crate::topics::TopicRegistry;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use std::net::SocketAddr;
use std::sync::Arc;

pub mod consumer_group_describe;
pub mod consumer_group_heartbeat;
pub mod delete_groups;
pub mod describe_groups;
pub mod find_coordinator;
pub mod heartbeat;
pub mod join_group;
pub mod leave_group;
pub mod list_groups;
pub mod offset_commit;
pub mod offset_delete;
pub mod offset_fetch;
pub mod sync_group;

fn opt(s: &Option<StrBytes>) -> Option<&str> {
    s.as_ref().map(|s| s.as_str()).filter(|s| !s.is_empty())
}

/// Per topic, per partition: a refusal code, or `None` = committed with the group's outcome.
pub type TopicCodes = Vec<(TopicName, Vec<(i32, Option<i16>)>)>;

/// One partition of an OffsetCommit/TxnOffsetCommit: (partition, offset, leader epoch, metadata).
pub type OffsetRow = (i32, i64, i32, Option<StrBytes>);

/// Split a commit into the offsets to store and the per-partition refusals (unknown partition,
/// metadata over `offset.metadata.max.bytes`).
pub fn plan_offsets(
    groups: &GroupCoordinator,
    topics: &Arc<TopicRegistry>,
    commit: Vec<(TopicName, Vec<OffsetRow>)>,
) -> (Vec<OffsetToCommit>, TopicCodes) {
    let max_meta = groups.settings.metadata_max_bytes;
    let mut to_commit = Vec::new();
    let mut layout: TopicCodes = Vec::new();
    for (name, parts) in commit {
        let topic = topics.topic(&name);
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
