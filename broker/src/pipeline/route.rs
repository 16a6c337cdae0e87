//! Cluster mode: only a partition's leader serves it, and only a key's coordinator serves
//! its group or transaction (NOT_COORDINATOR elsewhere). Produce, Fetch and ListOffsets for
//! partitions led elsewhere are removed from the request and answered NOT_LEADER_OR_FOLLOWER,
//! so clients refresh their metadata and go to the leader (as with Kafka after a leadership
//! change). Each API's rule is in its handler's file (module `route`), written with
//! `handlers/gate.rs::routing`; the APIs any broker answers are listed here.

use super::Gate;
use crate::handlers::{self, gate::routing::NOT_LEADER};
use crate::services::Services;
use kafka_protocol::error::ResponseError;
use sluice_protocol::api::SupportedRequest;

/// Decide where one request is served (one node: here, always).
pub fn gate(state: &Services, body: &mut SupportedRequest, version: i16) -> Gate {
    if state.topics.cluster.get().is_none() {
        return Gate::Pass;
    }
    debug_assert_eq!(NOT_LEADER, ResponseError::NotLeaderOrFollower.code());
    match body {
        SupportedRequest::JoinGroup(r) => handlers::groups::join_group::route::join_group(state, r, version),
        SupportedRequest::SyncGroup(r) => handlers::groups::sync_group::route::sync_group(state, r, version),
        SupportedRequest::Heartbeat(r) => handlers::groups::heartbeat::route::heartbeat(state, r, version),
        SupportedRequest::LeaveGroup(r) => handlers::groups::leave_group::route::leave_group(state, r, version),
        SupportedRequest::ConsumerGroupHeartbeat(r) => {
            handlers::groups::consumer_group_heartbeat::route::consumer_group_heartbeat(state, r, version)
        }
        SupportedRequest::OffsetDelete(r) => handlers::groups::offset_delete::route::offset_delete(state, r, version),
        SupportedRequest::AddOffsetsToTxn(r) => {
            handlers::txn::add_offsets_to_txn::route::add_offsets_to_txn(state, r, version)
        }
        SupportedRequest::EndTxn(r) => handlers::txn::end_txn::route::end_txn(state, r, version),
        SupportedRequest::InitProducerId(r) => handlers::init_producer_id::route::init_producer_id(state, r, version),
        SupportedRequest::OffsetCommit(r) => handlers::groups::offset_commit::route::offset_commit(state, r, version),
        SupportedRequest::TxnOffsetCommit(r) => {
            handlers::txn::txn_offset_commit::route::txn_offset_commit(state, r, version)
        }
        SupportedRequest::AddPartitionsToTxn(r) => {
            handlers::txn::add_partitions_to_txn::route::add_partitions_to_txn(state, r, version)
        }
        SupportedRequest::OffsetFetch(r) => handlers::groups::offset_fetch::route::offset_fetch(state, r, version),
        SupportedRequest::DescribeGroups(r) => {
            handlers::groups::describe_groups::route::describe_groups(state, r, version)
        }
        SupportedRequest::ConsumerGroupDescribe(r) => {
            handlers::groups::consumer_group_describe::route::consumer_group_describe(state, r, version)
        }
        SupportedRequest::DeleteGroups(r) => handlers::groups::delete_groups::route::delete_groups(state, r, version),
        SupportedRequest::DescribeTransactions(r) => {
            handlers::txn::describe_transactions::route::describe_transactions(state, r, version)
        }
        SupportedRequest::Produce(r) => handlers::produce::route::produce(state, r, version),
        SupportedRequest::Fetch(r) => handlers::fetch::route::fetch(state, &state.topics, r, version),
        SupportedRequest::ListOffsets(r) => handlers::list_offsets::route::list_offsets(state, r, version),
        // any broker answers these (their handlers go to the metadata quorum, or answer for what
        // this broker holds)
        SupportedRequest::ApiVersions(_)
        | SupportedRequest::SaslHandshake(_)
        | SupportedRequest::SaslAuthenticate(_)
        | SupportedRequest::Metadata(_)
        | SupportedRequest::CreateTopics(_)
        | SupportedRequest::DeleteTopics(_)
        | SupportedRequest::CreatePartitions(_)
        | SupportedRequest::DeleteRecords(_)
        | SupportedRequest::DescribeConfigs(_)
        | SupportedRequest::AlterConfigs(_)
        | SupportedRequest::IncrementalAlterConfigs(_)
        | SupportedRequest::DescribeCluster(_)
        | SupportedRequest::AlterPartitionReassignments(_)
        | SupportedRequest::UnregisterBroker(_)
        | SupportedRequest::ListPartitionReassignments(_)
        | SupportedRequest::ElectLeaders(_)
        | SupportedRequest::DescribeLogDirs(_)
        | SupportedRequest::DescribeProducers(_)
        | SupportedRequest::FindCoordinator(_)
        | SupportedRequest::ListGroups(_)
        | SupportedRequest::WriteTxnMarkers(_)
        | SupportedRequest::ListTransactions(_)
        | SupportedRequest::CreateAcls(_)
        | SupportedRequest::DeleteAcls(_)
        | SupportedRequest::DescribeAcls(_)
        | SupportedRequest::DescribeUserScramCredentials(_)
        | SupportedRequest::AlterUserScramCredentials(_) => Gate::Pass,
        // no catch-all: every API of the table is named above, or this does not compile
    }
}
