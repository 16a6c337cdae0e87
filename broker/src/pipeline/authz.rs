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
    let c = Authz { state, session };
    if state.security.settings.super_users.contains(&session.principal) {
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
        SupportedRequest::CreateTopics(r) => handlers::topics::acl::create_topics(&c, r, version),
        SupportedRequest::DeleteTopics(r) => handlers::topics::acl::delete_topics(&c, r, version),
        SupportedRequest::CreatePartitions(r) => handlers::topics::acl::create_partitions(&c, r, version),
        SupportedRequest::DeleteRecords(r) => handlers::delete_records::acl::authorize(&c, r, version),
        SupportedRequest::DescribeConfigs(r) => handlers::configs::acl::describe_configs(&c, r, version),
        SupportedRequest::AlterConfigs(r) => handlers::configs::acl::alter_configs(&c, r, version),
        SupportedRequest::IncrementalAlterConfigs(r) => {
            handlers::configs::acl::incremental_alter_configs(&c, r, version)
        }
        SupportedRequest::DescribeCluster(r) => handlers::describe_cluster::acl::describe_cluster(&c, r, version),
        SupportedRequest::AlterPartitionReassignments(r) => {
            handlers::reassign::acl::alter_partition_reassignments(&c, r, version)
        }
        SupportedRequest::UnregisterBroker(r) => handlers::reassign::acl::unregister_broker(&c, r, version),
        SupportedRequest::ListPartitionReassignments(r) => {
            handlers::reassign::acl::list_partition_reassignments(&c, r, version)
        }
        SupportedRequest::ElectLeaders(r) => handlers::elect_leaders::acl::authorize(&c, r, version),
        SupportedRequest::DescribeLogDirs(r) => handlers::describe_cluster::acl::describe_log_dirs(&c, r, version),
        SupportedRequest::InitProducerId(r) => handlers::init_producer_id::acl::authorize(&c, r, version),
        SupportedRequest::DescribeProducers(r) => handlers::describe_producers::acl::authorize(&c, r, version),
        SupportedRequest::FindCoordinator(r) => handlers::groups::acl::find_coordinator(&c, r, version),
        SupportedRequest::JoinGroup(r) => handlers::groups::acl::join_group(&c, r, version),
        SupportedRequest::SyncGroup(r) => handlers::groups::acl::sync_group(&c, r, version),
        SupportedRequest::Heartbeat(r) => handlers::groups::acl::heartbeat(&c, r, version),
        SupportedRequest::LeaveGroup(r) => handlers::groups::acl::leave_group(&c, r, version),
        SupportedRequest::ConsumerGroupHeartbeat(r) => handlers::groups::acl::consumer_group_heartbeat(&c, r, version),
        SupportedRequest::OffsetCommit(r) => handlers::groups::acl::offset_commit(&c, r, version),
        SupportedRequest::OffsetFetch(r) => handlers::groups::acl::offset_fetch(&c, r, version),
        SupportedRequest::OffsetDelete(r) => handlers::groups::acl::offset_delete(&c, r, version),
        SupportedRequest::DescribeGroups(r) => handlers::groups::acl::describe_groups(&c, r, version),
        SupportedRequest::ConsumerGroupDescribe(r) => handlers::groups::acl::consumer_group_describe(&c, r, version),
        SupportedRequest::ListGroups(r) => handlers::groups::acl::list_groups(&c, r, version),
        SupportedRequest::DeleteGroups(r) => handlers::groups::acl::delete_groups(&c, r, version),
        SupportedRequest::WriteTxnMarkers(r) => handlers::write_txn_markers::acl::authorize(&c, r, version),
        SupportedRequest::AddPartitionsToTxn(r) => handlers::txn::acl::add_partitions_to_txn(&c, r, version),
        SupportedRequest::AddOffsetsToTxn(r) => handlers::txn::acl::add_offsets_to_txn(&c, r, version),
        SupportedRequest::EndTxn(r) => handlers::txn::acl::end_txn(&c, r, version),
        SupportedRequest::TxnOffsetCommit(r) => handlers::txn::acl::txn_offset_commit(&c, r, version),
        SupportedRequest::ListTransactions(r) => handlers::txn::acl::list_transactions(&c, r, version),
        SupportedRequest::DescribeTransactions(r) => handlers::txn::acl::describe_transactions(&c, r, version),
        SupportedRequest::CreateAcls(r) => handlers::security::acl::create_acls(&c, r, version),
        SupportedRequest::DeleteAcls(r) => handlers::security::acl::delete_acls(&c, r, version),
        SupportedRequest::DescribeAcls(r) => handlers::security::acl::describe_acls(&c, r, version),
        SupportedRequest::DescribeUserScramCredentials(r) => {
            handlers::security::acl::describe_user_scram_credentials(&c, r, version)
        }
        SupportedRequest::AlterUserScramCredentials(r) => {
            handlers::security::acl::alter_user_scram_credentials(&c, r, version)
        } // no catch-all: every API of the table has its rule, or this does not compile
    }
}
