//! Request dispatch: one arm per supported API, each calling its handler in `handlers/`.
//! The API table (`sluice_protocol::api::SUPPORTED_APIS`) decides what reaches here; a test
//! checks that every row of the table has an arm.

use crate::handlers::{self, Reply};
use crate::security::acl::{self, ResourceType as Rt};
use crate::security::authz::Gate;
use crate::security::Session;
use crate::state::BrokerState;
use kafka_protocol::messages::{RequestKind, ResponseKind};
use sluice_protocol::api::Request;
use std::sync::Arc;

/// Run stage 1 of `req` (in connection order) and return how it will be answered.
/// Blocking work (metadata fsyncs, log appends) runs under `block_in_place`.
pub fn dispatch(state: &Arc<BrokerState>, req: Request) -> Option<Reply> {
    let session = state.config.listeners.first().map(Session::internal)?;
    dispatch_from(state, req, &session)
}

/// [`dispatch`] for a request of `session` (its principal is authorized first; its peer is
/// shown in DescribeGroups; its listener decides the addresses handed out).
pub fn dispatch_from(state: &Arc<BrokerState>, mut req: Request, session: &Session) -> Option<Reply> {
    let version = req.version();
    let peer = session.peer;
    let authz = match crate::security::authz::gate(state, session, &mut req.body, version) {
        Gate::Pass => None,
        Gate::Deny(answer) => return Some(Reply::Now(answer)),
        Gate::Patch(p) => Some(p),
    };
    let route = match crate::cluster::route::gate(state, &mut req.body, version) {
        Gate::Pass => None,
        Gate::Deny(answer) => return Some(Reply::Now(answer)),
        Gate::Patch(p) => Some(p),
    };
    let patch: Option<crate::security::authz::Patch> = match (authz, route) {
        (None, None) => None,
        (Some(p), None) | (None, Some(p)) => Some(p),
        (Some(a), Some(b)) => Some(Box::new(move |r: &mut ResponseKind| {
            b(r);
            a(r);
        })),
    };
    let client_id = req.header.client_id.as_ref().map(|s| s.to_string()).unwrap_or_default();
    let reply = match req.body {
        RequestKind::ApiVersions(_) => {
            Reply::now(ResponseKind::ApiVersions(handlers::api_versions::response(0, state.config.txns.version)))
        }
        RequestKind::Metadata(r) => {
            let (topic_ops, cluster_ops) =
                (r.include_topic_authorized_operations, r.include_cluster_authorized_operations);
            let mut resp = handlers::metadata::handle(state, &session.listener, version, r);
            let sec = &state.security;
            if topic_ops {
                for t in resp.topics.iter_mut().filter(|t| t.error_code == 0) {
                    let name = t.name.as_ref().map(|n| n.to_string()).unwrap_or_default();
                    t.topic_authorized_operations = sec.authorized_operations(session, Rt::Topic, &name);
                }
            }
            if cluster_ops {
                resp.cluster_authorized_operations = sec.authorized_operations(session, Rt::Cluster, acl::CLUSTER);
            }
            Reply::now(ResponseKind::Metadata(resp))
        }
        RequestKind::Produce(r) => handlers::produce::handle(state, version, r),
        RequestKind::Fetch(r) => handlers::fetch::handle(state, version, r),
        RequestKind::ListOffsets(r) => {
            Reply::now(ResponseKind::ListOffsets(handlers::list_offsets::handle(state, version, r)))
        }
        RequestKind::CreateTopics(r) => Reply::now(ResponseKind::CreateTopics(handlers::topics::create(state, r))),
        RequestKind::DeleteTopics(r) => Reply::now(ResponseKind::DeleteTopics(handlers::topics::delete(state, r))),
        RequestKind::CreatePartitions(r) => {
            Reply::now(ResponseKind::CreatePartitions(handlers::topics::create_partitions(state, r)))
        }
        RequestKind::DeleteRecords(r) => {
            Reply::now(ResponseKind::DeleteRecords(handlers::delete_records::handle(state, r)))
        }
        RequestKind::DescribeConfigs(r) => {
            Reply::now(ResponseKind::DescribeConfigs(handlers::configs::describe(state, r)))
        }
        RequestKind::AlterConfigs(r) => Reply::now(ResponseKind::AlterConfigs(handlers::configs::alter(state, r))),
        RequestKind::IncrementalAlterConfigs(r) => {
            Reply::now(ResponseKind::IncrementalAlterConfigs(handlers::configs::incremental_alter(state, r)))
        }
        RequestKind::DescribeCluster(r) => {
            let mut resp = handlers::describe_cluster::describe_cluster(state, &session.listener);
            if r.include_cluster_authorized_operations {
                resp.cluster_authorized_operations =
                    state.security.authorized_operations(session, Rt::Cluster, acl::CLUSTER);
            }
            Reply::now(ResponseKind::DescribeCluster(resp))
        }
        RequestKind::DescribeLogDirs(r) => {
            Reply::now(ResponseKind::DescribeLogDirs(handlers::describe_cluster::describe_log_dirs(state, r)))
        }
        RequestKind::ElectLeaders(r) => {
            Reply::now(ResponseKind::ElectLeaders(handlers::elect_leaders::handle(state, r)))
        }
        RequestKind::AlterPartitionReassignments(r) => {
            Reply::now(ResponseKind::AlterPartitionReassignments(handlers::reassign::alter(state, version, r)))
        }
        RequestKind::ListPartitionReassignments(r) => {
            Reply::now(ResponseKind::ListPartitionReassignments(handlers::reassign::list(state, r)))
        }
        RequestKind::UnregisterBroker(r) => {
            Reply::now(ResponseKind::UnregisterBroker(handlers::reassign::unregister(state, r)))
        }
        RequestKind::InitProducerId(r) if r.transactional_id.as_ref().is_some_and(|t| !t.is_empty()) => {
            handlers::txn::init_producer_id(state, version, r)
        }
        RequestKind::InitProducerId(r) => {
            Reply::now(ResponseKind::InitProducerId(handlers::init_producer_id::handle(state, version, r)))
        }
        RequestKind::DescribeProducers(r) => {
            Reply::now(ResponseKind::DescribeProducers(handlers::describe_producers::handle(state, r)))
        }
        RequestKind::FindCoordinator(r) => Reply::now(ResponseKind::FindCoordinator(
            handlers::groups::find_coordinator(state, &session.listener, version, r),
        )),
        RequestKind::JoinGroup(r) => handlers::groups::join(state, version, &client_id, peer, r),
        RequestKind::SyncGroup(r) => handlers::groups::sync(state, r),
        RequestKind::Heartbeat(r) => Reply::now(ResponseKind::Heartbeat(handlers::groups::heartbeat(state, r))),
        RequestKind::ConsumerGroupHeartbeat(r) => Reply::now(ResponseKind::ConsumerGroupHeartbeat(
            handlers::groups::consumer_heartbeat(state, version, &client_id, peer, r),
        )),
        RequestKind::LeaveGroup(r) => handlers::groups::leave(state, version, r),
        RequestKind::OffsetCommit(r) => handlers::groups::offset_commit(state, r),
        RequestKind::OffsetFetch(r) => {
            Reply::now(ResponseKind::OffsetFetch(handlers::groups::offset_fetch(state, version, r)))
        }
        RequestKind::OffsetDelete(r) => handlers::groups::offset_delete(state, r),
        RequestKind::DescribeGroups(r) => {
            let ops = r.include_authorized_operations;
            let mut resp = handlers::groups::describe(state, r);
            for g in resp.groups.iter_mut().filter(|g| ops && g.error_code == 0) {
                g.authorized_operations =
                    state.security.authorized_operations(session, Rt::Group, &g.group_id.to_string());
            }
            Reply::now(ResponseKind::DescribeGroups(resp))
        }
        RequestKind::ConsumerGroupDescribe(r) => {
            let ops = r.include_authorized_operations;
            let mut resp = handlers::groups::consumer_describe(state, r);
            for g in resp.groups.iter_mut().filter(|g| ops && g.error_code == 0) {
                g.authorized_operations =
                    state.security.authorized_operations(session, Rt::Group, &g.group_id.to_string());
            }
            Reply::now(ResponseKind::ConsumerGroupDescribe(resp))
        }
        RequestKind::ListGroups(r) => Reply::now(ResponseKind::ListGroups(handlers::groups::list(state, r))),
        RequestKind::DeleteGroups(r) => handlers::groups::delete(state, r),
        RequestKind::WriteTxnMarkers(r) => handlers::write_txn_markers::handle(state, r),
        RequestKind::AddPartitionsToTxn(r) => handlers::txn::add_partitions(state, version, r),
        RequestKind::AddOffsetsToTxn(r) => handlers::txn::add_offsets(state, version, r),
        RequestKind::EndTxn(r) => handlers::txn::end_txn(state, version, r),
        RequestKind::TxnOffsetCommit(r) => handlers::txn::txn_offset_commit(state, version, r),
        RequestKind::ListTransactions(r) => Reply::now(ResponseKind::ListTransactions(handlers::txn::list(state, r))),
        RequestKind::DescribeTransactions(r) => {
            Reply::now(ResponseKind::DescribeTransactions(handlers::txn::describe(state, r)))
        }
        RequestKind::SaslHandshake(_) | RequestKind::SaslAuthenticate(_) => {
            // reached only outside a SASL listener's handshake (see `connection`)
            return Some(illegal_sasl_state(req.api_key));
        }
        RequestKind::CreateAcls(r) => Reply::now(ResponseKind::CreateAcls(handlers::security::create_acls(state, r))),
        RequestKind::DescribeAcls(r) => {
            Reply::now(ResponseKind::DescribeAcls(handlers::security::describe_acls(state, r)))
        }
        RequestKind::DeleteAcls(r) => Reply::now(ResponseKind::DeleteAcls(handlers::security::delete_acls(state, r))),
        RequestKind::DescribeUserScramCredentials(r) => {
            Reply::now(ResponseKind::DescribeUserScramCredentials(handlers::security::describe_scram(state, r)))
        }
        RequestKind::AlterUserScramCredentials(r) => {
            Reply::now(ResponseKind::AlterUserScramCredentials(handlers::security::alter_scram(state, r)))
        }
        // `RequestKind` is non-exhaustive; keys outside the table never decode to here
        // (`decode_request` refuses them), so reaching this arm is a table/dispatch mismatch.
        other => {
            tracing::error!("no handler for {other:?}");
            return None;
        }
    };
    Some(match (reply, patch) {
        (reply, None) | (reply @ Reply::None, _) => reply,
        (Reply::Now(mut body), Some(p)) => {
            p(&mut body);
            Reply::Now(body)
        }
        (Reply::Later(fut), Some(p)) => Reply::Later(Box::pin(async move {
            let mut body = fut.await;
            p(&mut body);
            body
        })),
    })
}

/// SaslHandshake/SaslAuthenticate where no SASL exchange is expected.
pub fn illegal_sasl_state(key: kafka_protocol::messages::ApiKey) -> Reply {
    use kafka_protocol::error::ResponseError;
    use kafka_protocol::messages::{SaslAuthenticateResponse, SaslHandshakeResponse};
    let code = ResponseError::IllegalSaslState.code();
    if key == kafka_protocol::messages::ApiKey::SaslHandshake {
        let mut r = SaslHandshakeResponse::default();
        r.error_code = code;
        Reply::now(ResponseKind::SaslHandshake(r))
    } else {
        let mut r = SaslAuthenticateResponse::default();
        r.error_code = code;
        r.error_message = Some(handlers::sb("no SASL exchange on this listener or connection"));
        Reply::now(ResponseKind::SaslAuthenticate(r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::StrBytes;
    use sluice_protocol::api::{decode_request, encode_request, encode_response, SUPPORTED_APIS};

    fn default_request(key: ApiKey, v: i16, topic_id: uuid::Uuid) -> RequestKind {
        let name = TopicName(kafka_protocol::protocol::StrBytes::from_static_str("t"));
        match key {
            ApiKey::Produce => {
                let mut p = produce_request::PartitionProduceData::default();
                let batch = sluice_protocol::batch::BatchBuilder::default()
                    .build(&[sluice_protocol::batch::NewRecord { timestamp: 1, ..Default::default() }])
                    .unwrap();
                p.records = Some(batch);
                let mut t = produce_request::TopicProduceData::default();
                t.name = name;
                t.partition_data = vec![p];
                let mut r = ProduceRequest::default();
                r.acks = -1;
                r.topic_data = vec![t];
                RequestKind::Produce(r)
            }
            ApiKey::Fetch => {
                let mut p = fetch_request::FetchPartition::default();
                p.partition_max_bytes = 1000;
                let mut t = fetch_request::FetchTopic::default();
                if v >= 13 {
                    t.topic_id = topic_id;
                } else {
                    t.topic = name;
                }
                t.partitions = vec![p];
                let mut r = FetchRequest::default();
                r.max_bytes = 10000;
                r.isolation_level = if v % 2 == 0 { 1 } else { 0 };
                r.topics = vec![t];
                RequestKind::Fetch(r)
            }
            ApiKey::ListOffsets => {
                let mut t = list_offsets_request::ListOffsetsTopic::default();
                t.name = name;
                t.partitions = (-3..1)
                    .filter(|ts| v >= 7 || *ts != -3)
                    .map(|ts| {
                        let mut p = list_offsets_request::ListOffsetsPartition::default();
                        p.timestamp = ts;
                        p
                    })
                    .collect();
                let mut r = ListOffsetsRequest::default();
                r.topics = vec![t];
                RequestKind::ListOffsets(r)
            }
            ApiKey::Metadata => {
                let mut t = metadata_request::MetadataRequestTopic::default();
                t.name = Some(name);
                let mut r = MetadataRequest::default();
                r.topics = Some(vec![t]);
                RequestKind::Metadata(r)
            }
            ApiKey::ApiVersions => RequestKind::ApiVersions(ApiVersionsRequest::default()),
            ApiKey::CreateTopics => RequestKind::CreateTopics(CreateTopicsRequest::default()),
            ApiKey::DeleteTopics => RequestKind::DeleteTopics(DeleteTopicsRequest::default()),
            ApiKey::CreatePartitions => RequestKind::CreatePartitions(CreatePartitionsRequest::default()),
            ApiKey::DeleteRecords => RequestKind::DeleteRecords(DeleteRecordsRequest::default()),
            ApiKey::DescribeConfigs => {
                let mut res = describe_configs_request::DescribeConfigsResource::default();
                res.resource_type = 2;
                res.resource_name = name.0.clone();
                let mut b = describe_configs_request::DescribeConfigsResource::default();
                b.resource_type = 4;
                let mut r = DescribeConfigsRequest::default();
                r.resources = vec![res, b];
                RequestKind::DescribeConfigs(r)
            }
            ApiKey::AlterConfigs => {
                let mut res = alter_configs_request::AlterConfigsResource::default();
                res.resource_type = 2;
                res.resource_name = name.0.clone();
                let mut r = AlterConfigsRequest::default();
                r.resources = vec![res];
                RequestKind::AlterConfigs(r)
            }
            ApiKey::IncrementalAlterConfigs => {
                let mut res = incremental_alter_configs_request::AlterConfigsResource::default();
                res.resource_type = 2;
                res.resource_name = name.0.clone();
                let mut r = IncrementalAlterConfigsRequest::default();
                r.resources = vec![res];
                RequestKind::IncrementalAlterConfigs(r)
            }
            ApiKey::DescribeCluster => RequestKind::DescribeCluster(DescribeClusterRequest::default()),
            ApiKey::DescribeLogDirs => RequestKind::DescribeLogDirs(DescribeLogDirsRequest::default()),
            ApiKey::AlterPartitionReassignments => {
                let mut p = alter_partition_reassignments_request::ReassignablePartition::default();
                p.partition_index = 0;
                p.replicas = Some(vec![BrokerId(1), BrokerId(2)]);
                let mut t = alter_partition_reassignments_request::ReassignableTopic::default();
                t.name = name.clone();
                t.partitions = vec![p];
                let mut r = AlterPartitionReassignmentsRequest::default();
                r.topics = vec![t];
                RequestKind::AlterPartitionReassignments(r)
            }
            ApiKey::UnregisterBroker => {
                let mut r = UnregisterBrokerRequest::default();
                r.broker_id = BrokerId(7);
                RequestKind::UnregisterBroker(r)
            }
            ApiKey::ListPartitionReassignments => {
                RequestKind::ListPartitionReassignments(ListPartitionReassignmentsRequest::default())
            }
            ApiKey::ElectLeaders => {
                let mut t = elect_leaders_request::TopicPartitions::default();
                t.topic = name.clone();
                t.partitions = vec![0];
                let mut r = ElectLeadersRequest::default();
                r.topic_partitions = Some(vec![t]);
                RequestKind::ElectLeaders(r)
            }
            ApiKey::InitProducerId => RequestKind::InitProducerId(InitProducerIdRequest::default()),
            ApiKey::DescribeProducers => {
                let mut t = describe_producers_request::TopicRequest::default();
                t.name = name;
                t.partition_indexes = vec![0, 1, 7];
                let mut r = DescribeProducersRequest::default();
                r.topics = vec![t];
                RequestKind::DescribeProducers(r)
            }
            ApiKey::FindCoordinator => {
                let mut r = FindCoordinatorRequest::default();
                if v >= 4 {
                    r.coordinator_keys = vec![StrBytes::from_static_str("g")];
                } else {
                    r.key = StrBytes::from_static_str("g");
                }
                RequestKind::FindCoordinator(r)
            }
            ApiKey::JoinGroup => {
                let mut p = join_group_request::JoinGroupRequestProtocol::default();
                p.name = StrBytes::from_static_str("range");
                let mut r = JoinGroupRequest::default();
                // one group per version: a second member would wait for the first to rejoin
                r.group_id = GroupId(StrBytes::from_string(format!("g-v{v}")));
                r.session_timeout_ms = 10_000;
                r.rebalance_timeout_ms = if v >= 1 { 10_000 } else { -1 };
                r.protocol_type = StrBytes::from_static_str("consumer");
                r.protocols = vec![p];
                RequestKind::JoinGroup(r)
            }
            ApiKey::SyncGroup => RequestKind::SyncGroup(SyncGroupRequest::default()),
            ApiKey::Heartbeat => RequestKind::Heartbeat(HeartbeatRequest::default()),
            ApiKey::LeaveGroup => RequestKind::LeaveGroup(LeaveGroupRequest::default()),
            ApiKey::OffsetCommit => {
                let mut p = offset_commit_request::OffsetCommitRequestPartition::default();
                p.committed_offset = 5;
                let mut t = offset_commit_request::OffsetCommitRequestTopic::default();
                t.name = name;
                t.partitions = vec![p];
                let mut r = OffsetCommitRequest::default();
                r.group_id = GroupId(StrBytes::from_static_str("g2"));
                r.generation_id_or_member_epoch = -1;
                r.topics = vec![t];
                RequestKind::OffsetCommit(r)
            }
            ApiKey::OffsetFetch => {
                let mut g = offset_fetch_request::OffsetFetchRequestGroup::default();
                g.group_id = GroupId(StrBytes::from_static_str("g2"));
                let mut r = OffsetFetchRequest::default();
                if v >= 8 {
                    r.groups = vec![g];
                } else {
                    r.group_id = GroupId(StrBytes::from_static_str("g2"));
                }
                RequestKind::OffsetFetch(r)
            }
            ApiKey::OffsetDelete => {
                let mut r = OffsetDeleteRequest::default();
                r.group_id = GroupId(StrBytes::from_static_str("g2"));
                RequestKind::OffsetDelete(r)
            }
            ApiKey::DescribeGroups => {
                let mut r = DescribeGroupsRequest::default();
                r.groups = vec![GroupId(StrBytes::from_static_str("g")), GroupId(StrBytes::from_static_str("g2"))];
                RequestKind::DescribeGroups(r)
            }
            ApiKey::ListGroups => RequestKind::ListGroups(ListGroupsRequest::default()),
            ApiKey::DeleteGroups => {
                let mut r = DeleteGroupsRequest::default();
                r.groups_names = vec![GroupId(StrBytes::from_static_str("nope"))];
                RequestKind::DeleteGroups(r)
            }
            ApiKey::WriteTxnMarkers => {
                let mut t = write_txn_markers_request::WritableTxnMarkerTopic::default();
                t.name = name;
                t.partition_indexes = vec![0, 9];
                let mut m = write_txn_markers_request::WritableTxnMarker::default();
                m.producer_id = ProducerId(4242);
                m.topics = vec![t];
                let mut r = WriteTxnMarkersRequest::default();
                r.markers = vec![m];
                RequestKind::WriteTxnMarkers(r)
            }
            ApiKey::AddPartitionsToTxn => {
                let mut t = add_partitions_to_txn_request::AddPartitionsToTxnTopic::default();
                t.name = name;
                t.partitions = vec![0];
                let mut r = AddPartitionsToTxnRequest::default();
                if v >= 4 {
                    let mut x = add_partitions_to_txn_request::AddPartitionsToTxnTransaction::default();
                    x.transactional_id = TransactionalId(StrBytes::from_static_str("tx"));
                    x.verify_only = v == 5;
                    x.topics = vec![t];
                    r.transactions = vec![x];
                } else {
                    r.v3_and_below_transactional_id = TransactionalId(StrBytes::from_static_str("tx"));
                    r.v3_and_below_topics = vec![t];
                }
                RequestKind::AddPartitionsToTxn(r)
            }
            ApiKey::AddOffsetsToTxn => {
                let mut r = AddOffsetsToTxnRequest::default();
                r.transactional_id = TransactionalId(StrBytes::from_static_str("tx"));
                r.group_id = GroupId(StrBytes::from_static_str("g"));
                RequestKind::AddOffsetsToTxn(r)
            }
            ApiKey::EndTxn => {
                let mut r = EndTxnRequest::default();
                r.transactional_id = TransactionalId(StrBytes::from_static_str("tx"));
                RequestKind::EndTxn(r)
            }
            ApiKey::TxnOffsetCommit => {
                let mut p = txn_offset_commit_request::TxnOffsetCommitRequestPartition::default();
                p.committed_offset = 1;
                let mut t = txn_offset_commit_request::TxnOffsetCommitRequestTopic::default();
                t.name = name;
                t.partitions = vec![p];
                let mut r = TxnOffsetCommitRequest::default();
                r.transactional_id = TransactionalId(StrBytes::from_static_str("tx"));
                r.group_id = GroupId(StrBytes::from_static_str("g"));
                r.topics = vec![t];
                RequestKind::TxnOffsetCommit(r)
            }
            ApiKey::ListTransactions => RequestKind::ListTransactions(ListTransactionsRequest::default()),
            ApiKey::DescribeTransactions => {
                let mut r = DescribeTransactionsRequest::default();
                r.transactional_ids = vec![TransactionalId(StrBytes::from_static_str("tx"))];
                RequestKind::DescribeTransactions(r)
            }
            ApiKey::ConsumerGroupDescribe => {
                let mut r = ConsumerGroupDescribeRequest::default();
                r.group_ids = vec![GroupId(StrBytes::from_static_str("g")), GroupId(StrBytes::from_static_str("g2"))];
                RequestKind::ConsumerGroupDescribe(r)
            }
            ApiKey::ConsumerGroupHeartbeat => {
                let mut r = ConsumerGroupHeartbeatRequest::default();
                r.group_id = GroupId(StrBytes::from_string(format!("cg-v{v}")));
                r.member_id = StrBytes::from_static_str("m1");
                r.rebalance_timeout_ms = 10_000;
                r.subscribed_topic_names = Some(vec![name]);
                RequestKind::ConsumerGroupHeartbeat(r)
            }
            ApiKey::SaslHandshake => RequestKind::SaslHandshake(SaslHandshakeRequest::default()),
            ApiKey::SaslAuthenticate => RequestKind::SaslAuthenticate(SaslAuthenticateRequest::default()),
            ApiKey::CreateAcls => {
                let mut c = create_acls_request::AclCreation::default();
                c.resource_type = 2;
                c.resource_name = StrBytes::from_static_str("t");
                if v >= 1 {
                    c.resource_pattern_type = 3;
                }
                c.principal = StrBytes::from_static_str("User:a");
                c.host = StrBytes::from_static_str("*");
                c.operation = 3;
                c.permission_type = 3;
                let mut r = CreateAclsRequest::default();
                r.creations = vec![c];
                RequestKind::CreateAcls(r)
            }
            ApiKey::DescribeAcls => {
                let mut r = DescribeAclsRequest::default();
                r.resource_type_filter = 1;
                if v >= 1 {
                    r.pattern_type_filter = 1;
                }
                r.operation = 1;
                r.permission_type = 1;
                RequestKind::DescribeAcls(r)
            }
            ApiKey::DeleteAcls => {
                let mut f = delete_acls_request::DeleteAclsFilter::default();
                f.resource_type_filter = 2;
                if v >= 1 {
                    f.pattern_type_filter = 1;
                }
                f.operation = 1;
                f.permission_type = 1;
                let mut r = DeleteAclsRequest::default();
                r.filters = vec![f];
                RequestKind::DeleteAcls(r)
            }
            ApiKey::DescribeUserScramCredentials => {
                RequestKind::DescribeUserScramCredentials(DescribeUserScramCredentialsRequest::default())
            }
            ApiKey::AlterUserScramCredentials => {
                let mut u = alter_user_scram_credentials_request::ScramCredentialUpsertion::default();
                u.name = StrBytes::from_static_str("u");
                u.mechanism = 1;
                u.iterations = 4096;
                u.salt = bytes::Bytes::from_static(b"salt");
                u.salted_password = bytes::Bytes::from_static(&[1; 32]);
                let mut r = AlterUserScramCredentialsRequest::default();
                r.upsertions = vec![u];
                RequestKind::AlterUserScramCredentials(r)
            }
            other => panic!("add {other:?} to default_request"),
        }
    }

    /// Every (API, version) in the table decodes, has a handler, and its answer encodes at that
    /// version, with a topic present so that per-topic fields are filled.
    #[tokio::test(flavor = "multi_thread")]
    async fn every_supported_version_is_answered() {
        answer_every_version(&[]).await;
    }

    /// Every (API, version) with `flags`: each answer encodes at its version.
    async fn answer_every_version(flags: &[(&str, &str)]) -> Vec<(ApiKey, i16, ResponseKind)> {
        let dir = tempfile::tempdir().unwrap();
        let mut map = std::collections::BTreeMap::new();
        map.insert("log.dirs".to_string(), dir.path().display().to_string());
        map.insert("group.initial.rebalance.delay.ms".to_string(), "0".to_string());
        for (k, v) in flags {
            map.insert(k.to_string(), v.to_string());
        }
        let cfg = crate::config::resolve(&map, &Default::default(), None).unwrap();
        let state = Arc::new(BrokerState::open(cfg).unwrap());
        state.create_topic("t", 2, 1, Default::default(), false).unwrap();
        let mut answers = Vec::new();
        for spec in SUPPORTED_APIS {
            for v in spec.served_min..=spec.max {
                let header = RequestHeader::default()
                    .with_request_api_key(spec.key as i16)
                    .with_request_api_version(v)
                    .with_correlation_id(7);
                let topic_id = state.topic("t").unwrap().id;
                let frame = encode_request(&header, &default_request(spec.key, v, topic_id)).unwrap();
                let req = decode_request(frame.freeze().slice(4..)).unwrap();
                let body = match tokio::task::block_in_place(|| dispatch(&state, req)) {
                    Some(Reply::Now(b)) => *b,
                    Some(Reply::Later(f)) => f.await,
                    Some(Reply::None) => continue,
                    None => panic!("{:?} v{v} has no handler", spec.key),
                };
                if let Err(e) = encode_response(spec.key, v, 7, &body) {
                    panic!("{:?} v{v}: {e}", spec.key);
                }
                answers.push((spec.key, v, body));
            }
        }
        answers
    }

    /// With the authorizer on and no ACL, an anonymous client gets an encodable refusal with
    /// the right *_AUTHORIZATION_FAILED code from every API, at every version.
    #[tokio::test(flavor = "multi_thread")]
    async fn every_api_refuses_an_unauthorized_principal() {
        let answers = answer_every_version(&[("authorizer.class.name", "acl")]).await;
        let (topic, group, txn, cluster) = (29, 30, 53, 31);
        for (key, v, body) in answers {
            let codes: Vec<i16> = match &body {
                ResponseKind::Produce(r) => {
                    r.responses.iter().flat_map(|t| t.partition_responses.iter().map(|p| p.error_code)).collect()
                }
                ResponseKind::Fetch(r) => {
                    r.responses.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)).collect()
                }
                ResponseKind::ListOffsets(r) => {
                    r.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)).collect()
                }
                ResponseKind::Metadata(r) => r.topics.iter().map(|t| t.error_code).collect(),
                ResponseKind::DescribeConfigs(r) => r.results.iter().map(|x| x.error_code).collect(),
                ResponseKind::AlterConfigs(r) => r.responses.iter().map(|x| x.error_code).collect(),
                ResponseKind::IncrementalAlterConfigs(r) => r.responses.iter().map(|x| x.error_code).collect(),
                ResponseKind::DescribeCluster(r) => {
                    // as Kafka: anyone may describe the cluster (only its authorized operations
                    // need Describe on the cluster)
                    assert_eq!(r.error_code, 0, "DescribeCluster v{v}");
                    continue;
                }
                ResponseKind::ElectLeaders(r) => std::iter::once(r.error_code)
                    .filter(|_| v >= 1) // the top-level code is v1+
                    .chain(
                        r.replica_election_results.iter().flat_map(|t| t.partition_result.iter().map(|p| p.error_code)),
                    )
                    .collect(),
                ResponseKind::AlterPartitionReassignments(r) => std::iter::once(r.error_code)
                    .chain(r.responses.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)))
                    .collect(),
                ResponseKind::ListPartitionReassignments(r) => vec![r.error_code],
                ResponseKind::UnregisterBroker(r) => vec![r.error_code],
                ResponseKind::InitProducerId(r) => vec![r.error_code],
                ResponseKind::DescribeProducers(r) => {
                    r.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)).collect()
                }
                ResponseKind::FindCoordinator(r) if v < 4 => vec![r.error_code],
                ResponseKind::FindCoordinator(r) => r.coordinators.iter().map(|c| c.error_code).collect(),
                ResponseKind::JoinGroup(r) => vec![r.error_code],
                ResponseKind::OffsetCommit(r) => {
                    r.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)).collect()
                }
                ResponseKind::OffsetFetch(r) if v < 8 => vec![r.error_code],
                ResponseKind::OffsetFetch(r) => r.groups.iter().map(|g| g.error_code).collect(),
                ResponseKind::DescribeGroups(r) => r.groups.iter().map(|g| g.error_code).collect(),
                ResponseKind::ConsumerGroupDescribe(r) => r.groups.iter().map(|g| g.error_code).collect(),
                ResponseKind::ListGroups(r) => {
                    assert!(r.groups.is_empty(), "ListGroups v{v} lists groups the principal may not see");
                    continue;
                }
                ResponseKind::DeleteGroups(r) => r.results.iter().map(|g| g.error_code).collect(),
                ResponseKind::WriteTxnMarkers(r) => r
                    .markers
                    .iter()
                    .flat_map(|m| m.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)))
                    .collect(),
                ResponseKind::AddPartitionsToTxn(r) if v < 4 => r
                    .results_by_topic_v3_and_below
                    .iter()
                    .flat_map(|t| t.results_by_partition.iter().map(|p| p.partition_error_code))
                    .collect(),
                ResponseKind::AddPartitionsToTxn(r) => vec![r.error_code],
                ResponseKind::AddOffsetsToTxn(r) => vec![r.error_code],
                ResponseKind::EndTxn(r) => vec![r.error_code],
                ResponseKind::TxnOffsetCommit(r) => {
                    r.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)).collect()
                }
                ResponseKind::DescribeTransactions(r) => r.transaction_states.iter().map(|t| t.error_code).collect(),
                ResponseKind::ConsumerGroupHeartbeat(r) => vec![r.error_code],
                ResponseKind::CreateAcls(r) => r.results.iter().map(|x| x.error_code).collect(),
                ResponseKind::DescribeAcls(r) => vec![r.error_code],
                ResponseKind::DeleteAcls(r) => r.filter_results.iter().map(|x| x.error_code).collect(),
                ResponseKind::DescribeUserScramCredentials(r) => vec![r.error_code],
                ResponseKind::AlterUserScramCredentials(r) => r.results.iter().map(|x| x.error_code).collect(),
                _ => continue,
            };
            let want: &[i16] = match key {
                ApiKey::Produce
                | ApiKey::Fetch
                | ApiKey::ListOffsets
                | ApiKey::Metadata
                | ApiKey::DescribeConfigs
                | ApiKey::AlterConfigs
                | ApiKey::IncrementalAlterConfigs
                | ApiKey::DescribeProducers => &[topic, cluster],
                ApiKey::InitProducerId => &[cluster],
                ApiKey::FindCoordinator
                | ApiKey::JoinGroup
                | ApiKey::OffsetFetch
                | ApiKey::DescribeGroups
                | ApiKey::ConsumerGroupDescribe
                | ApiKey::DeleteGroups
                | ApiKey::ConsumerGroupHeartbeat => &[group],
                ApiKey::OffsetCommit => &[group],
                ApiKey::AddOffsetsToTxn | ApiKey::EndTxn | ApiKey::TxnOffsetCommit | ApiKey::DescribeTransactions => {
                    &[txn]
                }
                ApiKey::AddPartitionsToTxn if v < 4 => &[txn],
                _ => &[cluster],
            };
            assert!(
                !codes.is_empty() && codes.iter().all(|c| want.contains(c)),
                "{key:?} v{v}: codes {codes:?}, want one of {want:?}"
            );
        }
    }
}

#[cfg(test)]
mod restart_tests {
    use crate::state::BrokerState;
    use sluice_protocol::batch::{BatchBuilder, NewRecord};

    #[test]
    fn producer_state_survives_a_broker_restart() {
        let dir = tempfile::tempdir().unwrap();
        let mut flags = std::collections::BTreeMap::new();
        flags.insert("log.dirs".to_string(), dir.path().display().to_string());
        let cfg = crate::config::resolve(&flags, &Default::default(), None).unwrap();
        let state = BrokerState::open(cfg.clone()).unwrap();
        state.create_topic("t", 1, 1, Default::default(), false).unwrap();
        let mut b = BatchBuilder { producer_id: 5, producer_epoch: 0, base_sequence: 0, ..Default::default() }
            .build(&[NewRecord { timestamp: crate::handlers::now_ms(), ..Default::default() }])
            .unwrap()
            .to_vec();
        state.partition("t", 0).unwrap().append_batch(&mut b, 0).unwrap();
        assert_eq!(state.partition("t", 0).unwrap().producer_entries().len(), 1);
        drop(state);
        let state = BrokerState::open(cfg).unwrap();
        let p = state.partition("t", 0).unwrap();
        assert_eq!(p.producer_entries().len(), 1);
        assert_eq!(p.expire_producers(crate::handlers::now_ms(), state.config.producer_id_expiration_ms), 0);
    }
}
