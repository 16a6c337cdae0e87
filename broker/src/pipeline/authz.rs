//! Authorization before dispatch: Kafka's ACL rules (KafkaApis), each API's in its handler's
//! file (`handlers/<api>.rs`, module `acl`), written with the toolkit in `handlers/gate.rs`.
//!
//! A rule either passes the request, denies it whole (an answer built there with the
//! *_AUTHORIZATION_FAILED code), or removes the resources the principal may not touch from the
//! request and patches their errors into the handler's answer — so a Produce to one allowed and
//! one denied topic writes the first and answers TOPIC_AUTHORIZATION_FAILED for the second.
//! Listing APIs (Metadata for all topics, ListGroups, ListTransactions, OffsetFetch of all
//! topics) drop what the principal may not Describe.

use super::Gate;
use crate::handlers::{self, gate::Authz};
use crate::security::Session;
use crate::services::Services;
use sluice_protocol::api::SupportedRequest;

/// Decide for one request. Without an authorizer everything passes (one branch, no work).
pub fn gate(state: &Services, session: &Session, body: &mut SupportedRequest, version: i16) -> Gate {
    if !state.security.settings.authorizer {
        return Gate::Pass;
    }
    let c = Authz { security: &state.security, topics: &state.topics, session };
    if session.peer_broker || state.security.settings.super_users.contains(&session.principal) {
        return Gate::Pass;
    }
    match body {
        // the handshake and the version exchange need no permission
        SupportedRequest::ApiVersions(_)
        | SupportedRequest::SaslHandshake(_)
        | SupportedRequest::SaslAuthenticate(_) => Gate::Pass,
        SupportedRequest::Produce(r) => handlers::produce::acl::authorize(&c, r, version),
        SupportedRequest::Fetch(r) => handlers::fetch::acl::authorize(&c, r, version),
        SupportedRequest::Metadata(r) => handlers::metadata::acl::authorize(&c, r, version),
        SupportedRequest::ListOffsets(r) => handlers::list_offsets::acl::authorize(&c, r, version),
        SupportedRequest::CreateTopics(r) => handlers::topics::create_topics::acl::create_topics(&c, r, version),
        SupportedRequest::DeleteTopics(r) => handlers::topics::delete_topics::acl::delete_topics(&c, r, version),
        SupportedRequest::CreatePartitions(r) => {
            handlers::topics::create_partitions::acl::create_partitions(&c, r, version)
        }
        SupportedRequest::DeleteRecords(r) => handlers::delete_records::acl::authorize(&c, r, version),
        SupportedRequest::DescribeConfigs(r) => {
            handlers::configs::describe_configs::acl::describe_configs(&c, r, version)
        }
        SupportedRequest::AlterConfigs(r) => handlers::configs::alter_configs::acl::alter_configs(&c, r, version),
        SupportedRequest::IncrementalAlterConfigs(r) => {
            handlers::configs::incremental_alter_configs::acl::incremental_alter_configs(&c, r, version)
        }
        SupportedRequest::DescribeCluster(r) => handlers::describe_cluster::acl::describe_cluster(&c, r, version),
        SupportedRequest::AlterPartitionReassignments(r) => {
            handlers::reassign::alter_partition_reassignments::acl::alter_partition_reassignments(&c, r, version)
        }
        SupportedRequest::UnregisterBroker(r) => {
            handlers::reassign::unregister_broker::acl::unregister_broker(&c, r, version)
        }
        SupportedRequest::ListPartitionReassignments(r) => {
            handlers::reassign::list_partition_reassignments::acl::list_partition_reassignments(&c, r, version)
        }
        SupportedRequest::ElectLeaders(r) => handlers::elect_leaders::acl::authorize(&c, r, version),
        SupportedRequest::DescribeLogDirs(r) => handlers::describe_log_dirs::acl::describe_log_dirs(&c, r, version),
        SupportedRequest::InitProducerId(r) => handlers::init_producer_id::acl::authorize(&c, r, version),
        SupportedRequest::DescribeProducers(r) => handlers::describe_producers::acl::authorize(&c, r, version),
        SupportedRequest::FindCoordinator(r) => {
            handlers::groups::find_coordinator::acl::find_coordinator(&c, r, version)
        }
        SupportedRequest::JoinGroup(r) => handlers::groups::join_group::acl::join_group(&c, r, version),
        SupportedRequest::SyncGroup(r) => handlers::groups::sync_group::acl::sync_group(&c, r, version),
        SupportedRequest::Heartbeat(r) => handlers::groups::heartbeat::acl::heartbeat(&c, r, version),
        SupportedRequest::LeaveGroup(r) => handlers::groups::leave_group::acl::leave_group(&c, r, version),
        SupportedRequest::ConsumerGroupHeartbeat(r) => {
            handlers::groups::consumer_group_heartbeat::acl::consumer_group_heartbeat(&c, r, version)
        }
        SupportedRequest::OffsetCommit(r) => handlers::groups::offset_commit::acl::offset_commit(&c, r, version),
        SupportedRequest::OffsetFetch(r) => handlers::groups::offset_fetch::acl::offset_fetch(&c, r, version),
        SupportedRequest::OffsetDelete(r) => handlers::groups::offset_delete::acl::offset_delete(&c, r, version),
        SupportedRequest::DescribeGroups(r) => handlers::groups::describe_groups::acl::describe_groups(&c, r, version),
        SupportedRequest::ConsumerGroupDescribe(r) => {
            handlers::groups::consumer_group_describe::acl::consumer_group_describe(&c, r, version)
        }
        SupportedRequest::ListGroups(r) => handlers::groups::list_groups::acl::list_groups(&c, r, version),
        SupportedRequest::DeleteGroups(r) => handlers::groups::delete_groups::acl::delete_groups(&c, r, version),
        SupportedRequest::WriteTxnMarkers(r) => handlers::write_txn_markers::acl::authorize(&c, r, version),
        SupportedRequest::AddPartitionsToTxn(r) => {
            handlers::txn::add_partitions_to_txn::acl::add_partitions_to_txn(&c, r, version)
        }
        SupportedRequest::AddOffsetsToTxn(r) => {
            handlers::txn::add_offsets_to_txn::acl::add_offsets_to_txn(&c, r, version)
        }
        SupportedRequest::EndTxn(r) => handlers::txn::end_txn::acl::end_txn(&c, r, version),
        SupportedRequest::TxnOffsetCommit(r) => {
            handlers::txn::txn_offset_commit::acl::txn_offset_commit(&c, r, version)
        }
        SupportedRequest::ListTransactions(r) => {
            handlers::txn::list_transactions::acl::list_transactions(&c, r, version)
        }
        SupportedRequest::DescribeTransactions(r) => {
            handlers::txn::describe_transactions::acl::describe_transactions(&c, r, version)
        }
        SupportedRequest::CreateAcls(r) => handlers::security::create_acls::acl::create_acls(&c, r, version),
        SupportedRequest::DeleteAcls(r) => handlers::security::delete_acls::acl::delete_acls(&c, r, version),
        SupportedRequest::DescribeAcls(r) => handlers::security::describe_acls::acl::describe_acls(&c, r, version),
        SupportedRequest::DescribeUserScramCredentials(r) => {
            handlers::security::describe_user_scram_credentials::acl::describe_user_scram_credentials(&c, r, version)
        }
        SupportedRequest::AlterUserScramCredentials(r) => {
            handlers::security::alter_user_scram_credentials::acl::alter_user_scram_credentials(&c, r, version)
        } // no catch-all: every API of the table has its rule, or this does not compile
    }
}
