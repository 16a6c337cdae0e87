//! Request dispatch: one arm per supported API, each calling its handler in `handlers/`.
//! The API table (`sluice_protocol::api::supported_apis!`) decides what reaches here: the
//! match is over its `SupportedRequest`, with no catch-all arm, so a row without a handler does
//! not compile.

use super::Gate;
use crate::handlers::{self, Reply};
use crate::security::acl::{self, ResourceType as Rt};
use crate::security::Session;
use crate::services::Services;
use kafka_protocol::messages::ResponseKind;
use sluice_protocol::api::{Request, SupportedRequest};
use std::sync::Arc;

/// Run stage 1 of `req` (in connection order: the connection awaits it before it reads the
/// next request) and return how it will be answered. Stage 1 waits only by awaiting: quorum
/// writes, calls to peer brokers and Raft proposals are futures; disk work that fsyncs
/// (topic metadata, producer-id blocks, log start checkpoints) runs on the blocking pool.
/// Nothing here blocks a worker thread or re-enters the runtime.
pub async fn dispatch(state: &Arc<Services>, req: Request) -> Option<Reply> {
    let session = state.config.listeners.first().map(Session::internal)?;
    dispatch_from(state, req, &session).await
}

/// A peer broker's Kafka request that arrived on the cluster port (`interbroker.rs`): decoded,
/// dispatched as [`Session::peer_broker`] (allowed everything, on the first listener), its
/// answer awaited and encoded. The response frame without its size prefix; `None` for a frame
/// that does not decode or a request that is not answered.
pub async fn peer_request(state: &Arc<Services>, frame: Vec<u8>) -> Option<Vec<u8>> {
    let req = match sluice_protocol::api::decode_request(bytes::Bytes::from(frame)) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!("a peer broker's Kafka call does not decode: {e}");
            return None;
        }
    };
    let (key, version, correlation_id) = (req.api_key, req.version(), req.header.correlation_id);
    let session = state.config.listeners.first().map(Session::peer_broker)?;
    let answer = match dispatch_from(state, req, &session).await? {
        Reply::Now(r) => *r,
        Reply::Later(fut) => fut.await,
        Reply::None => return None,
    };
    match sluice_protocol::api::encode_response(key, version, correlation_id, &answer) {
        Ok(mut buf) => Some(buf.split_off(4).to_vec()),
        Err(e) => {
            tracing::error!("cannot encode {key:?} v{version} for a peer broker: {e}");
            None
        }
    }
}

/// Run `f`, a handler whose work is the disk's (it fsyncs), on the blocking pool and await it.
/// `None` (the connection closes) if it panicked.
async fn on_blocking_pool<T: Send + 'static>(
    state: &Arc<Services>,
    f: impl FnOnce(&Arc<Services>) -> T + Send + 'static,
) -> Option<T> {
    let state = state.clone();
    match tokio::task::spawn_blocking(move || f(&state)).await {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::error!("a request handler failed: {e}");
            None
        }
    }
}

/// [`dispatch`] for a request of `session` (its principal is authorized first; its peer is
/// shown in DescribeGroups; its listener decides the addresses handed out).
pub async fn dispatch_from(state: &Arc<Services>, req: Request, session: &Session) -> Option<Reply> {
    let version = req.version();
    let peer = session.peer;
    let client_id = req.header.client_id.as_ref().map(|s| s.to_string()).unwrap_or_default();
    // keys outside the table never decode (`decode_request` refuses them); the gates and the
    // match below have an arm for every row of the table, or this crate does not compile
    let api_key = req.api_key;
    let Some(mut body) = SupportedRequest::from_kind(req.body) else {
        tracing::error!("a request outside the API table reached dispatch: {api_key:?}");
        return None;
    };
    let authz = match super::authz::gate(state, session, &mut body, version) {
        Gate::Pass => None,
        Gate::Deny(answer) => return Some(Reply::Now(answer)),
        Gate::Patch(p) => Some(p),
    };
    let route = match super::route::gate(state, &mut body, version) {
        Gate::Pass => None,
        Gate::Deny(answer) => return Some(Reply::Now(answer)),
        Gate::Patch(p) => Some(p),
    };
    let patch: Option<super::Patch> = match (authz, route) {
        (None, None) => None,
        (Some(p), None) | (None, Some(p)) => Some(p),
        (Some(a), Some(b)) => Some(Box::new(move |r: &mut ResponseKind| {
            b(r);
            a(r);
        })),
    };
    let reply = match body {
        SupportedRequest::ApiVersions(_) => {
            Reply::now(ResponseKind::ApiVersions(handlers::api_versions::response(0, state.config.txns.version)))
        }
        SupportedRequest::Metadata(r) => {
            let (topic_ops, cluster_ops) =
                (r.include_topic_authorized_operations, r.include_cluster_authorized_operations);
            let mut resp =
                handlers::metadata::handle(&state.topics, &state.config, state.as_ref(), &session.listener, version, r)
                    .await;
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
        SupportedRequest::Produce(r) => {
            handlers::produce::handle(&state.topics, &state.config, &state.txns, state.as_ref(), version, r).await
        }
        SupportedRequest::Fetch(r) => handlers::fetch::handle(&state.topics, version, r),
        SupportedRequest::ListOffsets(r) => {
            Reply::now(ResponseKind::ListOffsets(handlers::list_offsets::handle(&state.topics, version, r)))
        }
        SupportedRequest::CreateTopics(r) => Reply::now(ResponseKind::CreateTopics(
            handlers::topics::create_topics::create(&state.topics, &state.config, r).await,
        )),
        SupportedRequest::DeleteTopics(r) => {
            Reply::now(ResponseKind::DeleteTopics(handlers::topics::delete_topics::delete(&state.topics, r).await))
        }
        SupportedRequest::CreatePartitions(r) => Reply::now(ResponseKind::CreatePartitions(
            handlers::topics::create_partitions::create_partitions(&state.topics, r).await,
        )),
        SupportedRequest::DeleteRecords(r) => {
            Reply::now(ResponseKind::DeleteRecords(handlers::delete_records::handle(&state.topics, r).await))
        }
        SupportedRequest::DescribeConfigs(r) => Reply::now(ResponseKind::DescribeConfigs(
            handlers::configs::describe_configs::describe(&state.topics, &state.config, r),
        )),
        SupportedRequest::AlterConfigs(r) => Reply::now(ResponseKind::AlterConfigs(
            handlers::configs::alter_configs::alter(&state.topics, &state.config, r).await,
        )),
        SupportedRequest::IncrementalAlterConfigs(r) => Reply::now(ResponseKind::IncrementalAlterConfigs(
            handlers::configs::incremental_alter_configs::incremental_alter(&state.topics, &state.config, r).await,
        )),
        SupportedRequest::DescribeCluster(r) => {
            let mut resp = handlers::describe_cluster::describe_cluster(&state.topics, &session.listener);
            if r.include_cluster_authorized_operations {
                resp.cluster_authorized_operations =
                    state.security.authorized_operations(session, Rt::Cluster, acl::CLUSTER);
            }
            Reply::now(ResponseKind::DescribeCluster(resp))
        }
        SupportedRequest::DescribeLogDirs(r) => {
            Reply::now(ResponseKind::DescribeLogDirs(handlers::describe_log_dirs::describe_log_dirs(&state.topics, r)))
        }
        SupportedRequest::ElectLeaders(r) => Reply::now(ResponseKind::ElectLeaders(
            handlers::elect_leaders::handle(&state.topics, state.as_ref(), r).await,
        )),
        SupportedRequest::AlterPartitionReassignments(r) => Reply::now(ResponseKind::AlterPartitionReassignments(
            handlers::reassign::alter_partition_reassignments::alter(&state.topics, version, r).await,
        )),
        SupportedRequest::ListPartitionReassignments(r) => Reply::now(ResponseKind::ListPartitionReassignments(
            handlers::reassign::list_partition_reassignments::list(&state.topics, r),
        )),
        SupportedRequest::UnregisterBroker(r) => Reply::now(ResponseKind::UnregisterBroker(
            handlers::reassign::unregister_broker::unregister(&state.topics, r).await,
        )),
        SupportedRequest::InitProducerId(r) if r.transactional_id.as_ref().is_some_and(|t| !t.is_empty()) => {
            on_blocking_pool(state, move |s| {
                handlers::init_producer_id::transactional(&s.txns, &s.producer_ids, version, r)
            })
            .await?
        }
        SupportedRequest::InitProducerId(r) => {
            let resp =
                on_blocking_pool(state, move |s| handlers::init_producer_id::handle(&s.producer_ids, version, r))
                    .await?;
            Reply::now(ResponseKind::InitProducerId(resp))
        }
        SupportedRequest::DescribeProducers(r) => {
            Reply::now(ResponseKind::DescribeProducers(handlers::describe_producers::handle(&state.topics, r)))
        }
        SupportedRequest::FindCoordinator(r) => {
            Reply::now(ResponseKind::FindCoordinator(handlers::groups::find_coordinator::find_coordinator(
                state.as_ref(),
                &state.config,
                &session.listener,
                version,
                r,
            )))
        }
        SupportedRequest::JoinGroup(r) => {
            handlers::groups::join_group::join(&state.groups, version, &client_id, peer, r)
        }
        SupportedRequest::SyncGroup(r) => handlers::groups::sync_group::sync(&state.groups, r),
        SupportedRequest::Heartbeat(r) => {
            Reply::now(ResponseKind::Heartbeat(handlers::groups::heartbeat::heartbeat(&state.groups, r)))
        }
        SupportedRequest::ConsumerGroupHeartbeat(r) => Reply::now(ResponseKind::ConsumerGroupHeartbeat(
            handlers::groups::consumer_group_heartbeat::consumer_heartbeat(
                &state.groups,
                &state.topics,
                version,
                &client_id,
                peer,
                r,
            ),
        )),
        SupportedRequest::LeaveGroup(r) => handlers::groups::leave_group::leave(&state.groups, version, r),
        SupportedRequest::OffsetCommit(r) => {
            handlers::groups::offset_commit::offset_commit(&state.groups, &state.topics, r)
        }
        SupportedRequest::OffsetFetch(r) => Reply::now(ResponseKind::OffsetFetch(
            handlers::groups::offset_fetch::offset_fetch(&state.groups, version, r),
        )),
        SupportedRequest::OffsetDelete(r) => handlers::groups::offset_delete::offset_delete(&state.groups, r),
        SupportedRequest::DescribeGroups(r) => {
            let ops = r.include_authorized_operations;
            let mut resp = handlers::groups::describe_groups::describe(&state.groups, r);
            for g in resp.groups.iter_mut().filter(|g| ops && g.error_code == 0) {
                g.authorized_operations =
                    state.security.authorized_operations(session, Rt::Group, &g.group_id.to_string());
            }
            Reply::now(ResponseKind::DescribeGroups(resp))
        }
        SupportedRequest::ConsumerGroupDescribe(r) => {
            let ops = r.include_authorized_operations;
            let mut resp =
                handlers::groups::consumer_group_describe::consumer_describe(&state.groups, &state.topics, r);
            for g in resp.groups.iter_mut().filter(|g| ops && g.error_code == 0) {
                g.authorized_operations =
                    state.security.authorized_operations(session, Rt::Group, &g.group_id.to_string());
            }
            Reply::now(ResponseKind::ConsumerGroupDescribe(resp))
        }
        SupportedRequest::ListGroups(r) => {
            Reply::now(ResponseKind::ListGroups(handlers::groups::list_groups::list(&state.groups, r)))
        }
        SupportedRequest::DeleteGroups(r) => handlers::groups::delete_groups::delete(&state.groups, r),
        SupportedRequest::WriteTxnMarkers(r) => handlers::write_txn_markers::handle(&state.groups, &state.topics, r),
        SupportedRequest::AddPartitionsToTxn(r) => {
            handlers::txn::add_partitions_to_txn::add_partitions(&state.txns, &state.topics, version, r)
        }
        SupportedRequest::AddOffsetsToTxn(r) => handlers::txn::add_offsets_to_txn::add_offsets(&state.txns, version, r),
        SupportedRequest::EndTxn(r) => handlers::txn::end_txn::end_txn(&state.txns, &state.producer_ids, version, r),
        SupportedRequest::TxnOffsetCommit(r) => handlers::txn::txn_offset_commit::txn_offset_commit(
            &state.txns,
            &state.groups,
            &state.topics,
            state.clone(),
            version,
            r,
        ),
        SupportedRequest::ListTransactions(r) => {
            Reply::now(ResponseKind::ListTransactions(handlers::txn::list_transactions::list(&state.txns, r)))
        }
        SupportedRequest::DescribeTransactions(r) => Reply::now(ResponseKind::DescribeTransactions(
            handlers::txn::describe_transactions::describe(&state.txns, r),
        )),
        SupportedRequest::SaslHandshake(_) | SupportedRequest::SaslAuthenticate(_) => {
            // reached only outside a SASL listener's handshake (see `connection`)
            return Some(illegal_sasl_state(req.api_key));
        }
        SupportedRequest::CreateAcls(r) => Reply::now(ResponseKind::CreateAcls(
            handlers::security::create_acls::create_acls(&state.security, &state.topics, r).await,
        )),
        SupportedRequest::DescribeAcls(r) => {
            Reply::now(ResponseKind::DescribeAcls(handlers::security::describe_acls::describe_acls(&state.security, r)))
        }
        SupportedRequest::DeleteAcls(r) => Reply::now(ResponseKind::DeleteAcls(
            handlers::security::delete_acls::delete_acls(&state.security, &state.topics, r).await,
        )),
        SupportedRequest::DescribeUserScramCredentials(r) => Reply::now(ResponseKind::DescribeUserScramCredentials(
            handlers::security::describe_user_scram_credentials::describe_scram(&state.security, r),
        )),
        SupportedRequest::AlterUserScramCredentials(r) => Reply::now(ResponseKind::AlterUserScramCredentials(
            handlers::security::alter_user_scram_credentials::alter_scram(&state.security, &state.topics, r).await,
        )),
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
    use sluice_protocol::api::{decode_request, decode_response, encode_request, encode_response, SUPPORTED_APIS};

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
        answer_every_version_of(&[], default_request).await;
    }

    /// Every (API, version) with `flags` and requests made by `make`: (key, version, request,
    /// answer), each answer encoded at its version and decoded again with the API's own response
    /// schema (nothing left over), so an answer of another API's shape cannot pass.
    async fn answer_every_version_of(
        flags: &[(&str, &str)],
        make: fn(ApiKey, i16, uuid::Uuid) -> RequestKind,
    ) -> Vec<(ApiKey, i16, RequestKind, ResponseKind)> {
        let dir = tempfile::tempdir().unwrap();
        let mut map = std::collections::BTreeMap::new();
        map.insert("log.dirs".to_string(), dir.path().display().to_string());
        map.insert("group.initial.rebalance.delay.ms".to_string(), "0".to_string());
        for (k, v) in flags {
            map.insert(k.to_string(), v.to_string());
        }
        let cfg = crate::config::resolve(&map, &Default::default(), None).unwrap();
        let state = crate::broker::open_services(cfg).unwrap();
        state.topics.create_topic("t", 2, 1, Default::default(), false).await.unwrap();
        let mut answers = Vec::new();
        for spec in SUPPORTED_APIS {
            for v in spec.served_min..=spec.max {
                let header = RequestHeader::default()
                    .with_request_api_key(spec.key as i16)
                    .with_request_api_version(v)
                    .with_correlation_id(7);
                let topic_id = state.topics.topic("t").unwrap().id;
                let frame = encode_request(&header, &make(spec.key, v, topic_id)).unwrap();
                let req = decode_request(frame.freeze().slice(4..)).unwrap();
                let asked = req.body.clone();
                let body = match dispatch(&state, req).await {
                    Some(Reply::Now(b)) => *b,
                    Some(Reply::Later(f)) => f.await,
                    Some(Reply::None) => continue,
                    None => panic!("{:?} v{v} has no handler", spec.key),
                };
                let frame = match encode_response(spec.key, v, 7, &body) {
                    Ok(f) => f.freeze(),
                    Err(e) => panic!("{:?} v{v}: {e}", spec.key),
                };
                let body = match decode_response(spec.key, v, frame.slice(4..)) {
                    Ok((7, decoded)) => decoded,
                    other => panic!("{:?} v{v}: the answer does not decode as its API's: {other:?}", spec.key),
                };
                answers.push((spec.key, v, asked, body));
            }
        }
        answers
    }

    /// `default_request` with named items where the default names none, so that every refusal
    /// has something to echo.
    fn named_request(key: ApiKey, v: i16, topic_id: uuid::Uuid) -> RequestKind {
        let t = || TopicName(StrBytes::from_static_str("t"));
        let g = || GroupId(StrBytes::from_static_str("g"));
        match default_request(key, v, topic_id) {
            RequestKind::CreateTopics(mut r) => {
                let mut x = create_topics_request::CreatableTopic::default();
                x.name = TopicName(StrBytes::from_static_str("t-new"));
                x.num_partitions = 1;
                x.replication_factor = 1;
                r.topics = vec![x];
                RequestKind::CreateTopics(r)
            }
            RequestKind::DeleteTopics(mut r) => {
                if v >= 6 {
                    let mut x = delete_topics_request::DeleteTopicState::default();
                    x.name = Some(t());
                    r.topics = vec![x];
                } else {
                    r.topic_names = vec![t()];
                }
                RequestKind::DeleteTopics(r)
            }
            RequestKind::CreatePartitions(mut r) => {
                let mut x = create_partitions_request::CreatePartitionsTopic::default();
                x.name = t();
                x.count = 3;
                r.topics = vec![x];
                RequestKind::CreatePartitions(r)
            }
            RequestKind::DeleteRecords(mut r) => {
                let mut p = delete_records_request::DeleteRecordsPartition::default();
                p.partition_index = 1;
                let mut x = delete_records_request::DeleteRecordsTopic::default();
                x.name = t();
                x.partitions = vec![p];
                r.topics = vec![x];
                RequestKind::DeleteRecords(r)
            }
            RequestKind::SyncGroup(mut r) => {
                r.group_id = g();
                r.member_id = StrBytes::from_static_str("m");
                RequestKind::SyncGroup(r)
            }
            RequestKind::Heartbeat(mut r) => {
                r.group_id = g();
                r.member_id = StrBytes::from_static_str("m");
                RequestKind::Heartbeat(r)
            }
            RequestKind::LeaveGroup(mut r) => {
                r.group_id = g();
                if v >= 3 {
                    let mut m = leave_group_request::MemberIdentity::default();
                    m.member_id = StrBytes::from_static_str("m");
                    r.members = vec![m];
                } else {
                    r.member_id = StrBytes::from_static_str("m");
                }
                RequestKind::LeaveGroup(r)
            }
            RequestKind::OffsetDelete(mut r) => {
                let mut x = offset_delete_request::OffsetDeleteRequestTopic::default();
                x.name = t();
                x.partitions = vec![offset_delete_request::OffsetDeleteRequestPartition::default()];
                r.topics = vec![x];
                RequestKind::OffsetDelete(r)
            }
            RequestKind::DescribeUserScramCredentials(mut r) => {
                let mut u = describe_user_scram_credentials_request::UserName::default();
                u.name = StrBytes::from_static_str("u");
                r.users = Some(vec![u]);
                RequestKind::DescribeUserScramCredentials(r)
            }
            RequestKind::OffsetFetch(mut r) if v < 8 => {
                let mut x = offset_fetch_request::OffsetFetchRequestTopic::default();
                x.name = t();
                x.partition_indexes = vec![0, 1];
                r.topics = Some(vec![x]);
                RequestKind::OffsetFetch(r)
            }
            RequestKind::DescribeLogDirs(mut r) => {
                let mut x = describe_log_dirs_request::DescribableLogDirTopic::default();
                x.topic = t();
                x.partitions = vec![0];
                r.topics = Some(vec![x]);
                RequestKind::DescribeLogDirs(r)
            }
            other => other,
        }
    }

    fn tp(topic: &str, p: i32) -> String {
        format!("{topic}/{p}")
    }

    /// The items a request names that Kafka's refusal answers one by one ("t/0", "g", ...).
    fn asked_items(body: &RequestKind, v: i16) -> Vec<String> {
        let topic_id = |name: &str, id: &uuid::Uuid| if id.is_nil() { name.to_string() } else { id.to_string() };
        match body {
            RequestKind::Produce(r) => r
                .topic_data
                .iter()
                .flat_map(|t| t.partition_data.iter().map(|p| tp(&topic_id(&t.name, &t.topic_id), p.index)))
                .collect(),
            RequestKind::Fetch(r) => r
                .topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| tp(&topic_id(&t.topic, &t.topic_id), p.partition)))
                .collect(),
            RequestKind::ListOffsets(r) => {
                r.topics.iter().flat_map(|t| t.partitions.iter().map(|p| tp(&t.name, p.partition_index))).collect()
            }
            RequestKind::Metadata(r) => {
                r.topics.iter().flatten().filter_map(|t| t.name.as_ref()).map(|n| n.to_string()).collect()
            }
            RequestKind::CreateTopics(r) => r.topics.iter().map(|t| t.name.to_string()).collect(),
            RequestKind::DeleteTopics(r) => r
                .topic_names
                .iter()
                .map(|n| n.to_string())
                .chain(r.topics.iter().filter_map(|t| t.name.as_ref()).map(|n| n.to_string()))
                .collect(),
            RequestKind::CreatePartitions(r) => r.topics.iter().map(|t| t.name.to_string()).collect(),
            RequestKind::DeleteRecords(r) => {
                r.topics.iter().flat_map(|t| t.partitions.iter().map(|p| tp(&t.name, p.partition_index))).collect()
            }
            RequestKind::DescribeConfigs(r) => {
                r.resources.iter().map(|x| format!("{}:{}", x.resource_type, x.resource_name)).collect()
            }
            RequestKind::AlterConfigs(r) => {
                r.resources.iter().map(|x| format!("{}:{}", x.resource_type, x.resource_name)).collect()
            }
            RequestKind::IncrementalAlterConfigs(r) => {
                r.resources.iter().map(|x| format!("{}:{}", x.resource_type, x.resource_name)).collect()
            }
            RequestKind::AlterPartitionReassignments(r) => {
                r.topics.iter().flat_map(|t| t.partitions.iter().map(|p| tp(&t.name, p.partition_index))).collect()
            }
            RequestKind::ElectLeaders(r) => r
                .topic_partitions
                .iter()
                .flatten()
                .flat_map(|t| t.partitions.iter().map(|p| tp(&t.topic, *p)))
                .collect(),
            RequestKind::DescribeProducers(r) => {
                r.topics.iter().flat_map(|t| t.partition_indexes.iter().map(|p| tp(&t.name, *p))).collect()
            }
            RequestKind::FindCoordinator(_) if v < 4 => Default::default(),
            RequestKind::FindCoordinator(r) => r.coordinator_keys.iter().map(|k| k.to_string()).collect(),
            RequestKind::OffsetCommit(r) => {
                r.topics.iter().flat_map(|t| t.partitions.iter().map(|p| tp(&t.name, p.partition_index))).collect()
            }
            // v0-v1 have no top-level error: refused on every partition asked
            RequestKind::OffsetFetch(r) if v < 2 => {
                r.topics.iter().flatten().flat_map(|t| t.partition_indexes.iter().map(|p| tp(&t.name, *p))).collect()
            }
            RequestKind::OffsetFetch(_) if v < 8 => Default::default(),
            RequestKind::OffsetFetch(r) => r.groups.iter().map(|g| g.group_id.to_string()).collect(),
            RequestKind::DescribeGroups(r) => r.groups.iter().map(|g| g.to_string()).collect(),
            RequestKind::ConsumerGroupDescribe(r) => r.group_ids.iter().map(|g| g.to_string()).collect(),
            RequestKind::DeleteGroups(r) => r.groups_names.iter().map(|g| g.to_string()).collect(),
            RequestKind::WriteTxnMarkers(r) => r
                .markers
                .iter()
                .flat_map(|m| {
                    m.topics.iter().flat_map(move |t| {
                        t.partition_indexes.iter().map(move |p| format!("{}:{}", m.producer_id.0, tp(&t.name, *p)))
                    })
                })
                .collect(),
            RequestKind::AddPartitionsToTxn(r) if v < 4 => {
                r.v3_and_below_topics.iter().flat_map(|t| t.partitions.iter().map(|p| tp(&t.name, *p))).collect()
            }
            RequestKind::TxnOffsetCommit(r) => {
                r.topics.iter().flat_map(|t| t.partitions.iter().map(|p| tp(&t.name, p.partition_index))).collect()
            }
            RequestKind::DescribeTransactions(r) => r.transactional_ids.iter().map(|t| t.to_string()).collect(),
            RequestKind::CreateAcls(r) => (0..r.creations.len()).map(|i| format!("#{i}")).collect(),
            RequestKind::DeleteAcls(r) => (0..r.filters.len()).map(|i| format!("#{i}")).collect(),
            RequestKind::DescribeUserScramCredentials(r) => {
                r.users.iter().flatten().map(|u| u.name.to_string()).collect()
            }
            RequestKind::AlterUserScramCredentials(r) => r
                .deletions
                .iter()
                .map(|d| d.name.to_string())
                .chain(r.upsertions.iter().map(|u| u.name.to_string()))
                .collect(),
            // answered by a top-level error alone (Kafka's getErrorResponse for these)
            _ => Default::default(),
        }
    }

    /// An answer's top-level error code (where the API and version have one) and its per-item
    /// codes, named as [`asked_items`] names them.
    fn answered_items(body: &ResponseKind, v: i16) -> (Option<i16>, Vec<(String, i16)>) {
        let topic_id = |name: &str, id: &uuid::Uuid| if id.is_nil() { name.to_string() } else { id.to_string() };
        let items = |it: Vec<(String, i16)>| (None, it);
        match body {
            ResponseKind::Produce(r) => items(
                r.responses
                    .iter()
                    .flat_map(|t| {
                        let n = topic_id(&t.name, &t.topic_id);
                        t.partition_responses.iter().map(move |p| (tp(&n, p.index), p.error_code))
                    })
                    .collect(),
            ),
            ResponseKind::Fetch(r) => {
                // per partition; the top level is for fetch sessions (and replicas)
                assert_eq!(r.error_code, 0, "Fetch v{v}: a top-level error for a topic refusal");
                items(
                    r.responses
                        .iter()
                        .flat_map(|t| {
                            let n = topic_id(&t.topic, &t.topic_id);
                            t.partitions.iter().map(move |p| (tp(&n, p.partition_index), p.error_code))
                        })
                        .collect(),
                )
            }
            ResponseKind::ListOffsets(r) => items(
                r.topics
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| (tp(&t.name, p.partition_index), p.error_code)))
                    .collect(),
            ),
            ResponseKind::Metadata(r) => items(
                r.topics
                    .iter()
                    .map(|t| (t.name.as_ref().map(|n| n.to_string()).unwrap_or_default(), t.error_code))
                    .collect(),
            ),
            ResponseKind::CreateTopics(r) => {
                items(r.topics.iter().map(|t| (t.name.to_string(), t.error_code)).collect())
            }
            ResponseKind::DeleteTopics(r) => items(
                r.responses
                    .iter()
                    .map(|t| (t.name.as_ref().map(|n| n.to_string()).unwrap_or_default(), t.error_code))
                    .collect(),
            ),
            ResponseKind::CreatePartitions(r) => {
                items(r.results.iter().map(|t| (t.name.to_string(), t.error_code)).collect())
            }
            ResponseKind::DeleteRecords(r) => items(
                r.topics
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| (tp(&t.name, p.partition_index), p.error_code)))
                    .collect(),
            ),
            ResponseKind::DescribeConfigs(r) => items(
                r.results.iter().map(|x| (format!("{}:{}", x.resource_type, x.resource_name), x.error_code)).collect(),
            ),
            ResponseKind::AlterConfigs(r) => items(
                r.responses
                    .iter()
                    .map(|x| (format!("{}:{}", x.resource_type, x.resource_name), x.error_code))
                    .collect(),
            ),
            ResponseKind::IncrementalAlterConfigs(r) => items(
                r.responses
                    .iter()
                    .map(|x| (format!("{}:{}", x.resource_type, x.resource_name), x.error_code))
                    .collect(),
            ),
            ResponseKind::DescribeLogDirs(r) => {
                assert!(r.results.is_empty(), "DescribeLogDirs v{v} describes log dirs to a refused principal");
                (Some(r.error_code).filter(|_| v >= 3), Vec::new())
            }
            ResponseKind::AlterPartitionReassignments(r) => (
                Some(r.error_code),
                r.responses
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| (tp(&t.name, p.partition_index), p.error_code)))
                    .collect(),
            ),
            ResponseKind::ListPartitionReassignments(r) => (Some(r.error_code), Vec::new()),
            ResponseKind::ElectLeaders(r) => (
                Some(r.error_code).filter(|_| v >= 1),
                r.replica_election_results
                    .iter()
                    .flat_map(|t| t.partition_result.iter().map(|p| (tp(&t.topic, p.partition_id), p.error_code)))
                    .collect(),
            ),
            ResponseKind::UnregisterBroker(r) => (Some(r.error_code), Vec::new()),
            ResponseKind::InitProducerId(r) => (Some(r.error_code), Vec::new()),
            ResponseKind::DescribeProducers(r) => items(
                r.topics
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| (tp(&t.name, p.partition_index), p.error_code)))
                    .collect(),
            ),
            ResponseKind::FindCoordinator(r) if v < 4 => (Some(r.error_code), Vec::new()),
            ResponseKind::FindCoordinator(r) => {
                items(r.coordinators.iter().map(|c| (c.key.to_string(), c.error_code)).collect())
            }
            ResponseKind::JoinGroup(r) => (Some(r.error_code), Vec::new()),
            ResponseKind::SyncGroup(r) => (Some(r.error_code), Vec::new()),
            ResponseKind::Heartbeat(r) => (Some(r.error_code), Vec::new()),
            ResponseKind::LeaveGroup(r) => {
                assert!(r.members.is_empty(), "LeaveGroup v{v}: per-member results with a group refusal");
                (Some(r.error_code), Vec::new())
            }
            ResponseKind::ConsumerGroupHeartbeat(r) => (Some(r.error_code), Vec::new()),
            ResponseKind::OffsetCommit(r) => items(
                r.topics
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| (tp(&t.name, p.partition_index), p.error_code)))
                    .collect(),
            ),
            ResponseKind::OffsetFetch(r) if v < 2 => items(
                r.topics
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| (tp(&t.name, p.partition_index), p.error_code)))
                    .collect(),
            ),
            ResponseKind::OffsetFetch(r) if v < 8 => {
                assert!(r.topics.is_empty(), "OffsetFetch v{v}: partitions shown to a refused principal");
                (Some(r.error_code), Vec::new())
            }
            ResponseKind::OffsetFetch(r) => {
                items(r.groups.iter().map(|g| (g.group_id.to_string(), g.error_code)).collect())
            }
            ResponseKind::OffsetDelete(r) => {
                assert!(r.topics.is_empty(), "OffsetDelete v{v}: per-partition results with a group refusal");
                (Some(r.error_code), Vec::new())
            }
            ResponseKind::DescribeGroups(r) => {
                items(r.groups.iter().map(|g| (g.group_id.to_string(), g.error_code)).collect())
            }
            ResponseKind::ConsumerGroupDescribe(r) => {
                items(r.groups.iter().map(|g| (g.group_id.to_string(), g.error_code)).collect())
            }
            ResponseKind::DeleteGroups(r) => {
                items(r.results.iter().map(|g| (g.group_id.to_string(), g.error_code)).collect())
            }
            ResponseKind::WriteTxnMarkers(r) => items(
                r.markers
                    .iter()
                    .flat_map(|m| {
                        m.topics.iter().flat_map(move |t| {
                            t.partitions.iter().map(move |p| {
                                (format!("{}:{}", m.producer_id.0, tp(&t.name, p.partition_index)), p.error_code)
                            })
                        })
                    })
                    .collect(),
            ),
            ResponseKind::AddPartitionsToTxn(r) if v < 4 => items(
                r.results_by_topic_v3_and_below
                    .iter()
                    .flat_map(|t| {
                        t.results_by_partition.iter().map(|p| (tp(&t.name, p.partition_index), p.partition_error_code))
                    })
                    .collect(),
            ),
            ResponseKind::AddPartitionsToTxn(r) => (Some(r.error_code), Vec::new()),
            ResponseKind::AddOffsetsToTxn(r) => (Some(r.error_code), Vec::new()),
            ResponseKind::EndTxn(r) => (Some(r.error_code), Vec::new()),
            ResponseKind::TxnOffsetCommit(r) => items(
                r.topics
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| (tp(&t.name, p.partition_index), p.error_code)))
                    .collect(),
            ),
            ResponseKind::DescribeTransactions(r) => {
                items(r.transaction_states.iter().map(|t| (t.transactional_id.to_string(), t.error_code)).collect())
            }
            ResponseKind::CreateAcls(r) => {
                items(r.results.iter().enumerate().map(|(i, x)| (format!("#{i}"), x.error_code)).collect())
            }
            ResponseKind::DeleteAcls(r) => {
                items(r.filter_results.iter().enumerate().map(|(i, x)| (format!("#{i}"), x.error_code)).collect())
            }
            ResponseKind::DescribeAcls(r) => {
                assert!(r.resources.is_empty(), "DescribeAcls v{v} lists ACLs to a refused principal");
                (Some(r.error_code), Vec::new())
            }
            // decision 0014: per user, the top level clear (librdkafka aborts on a top-level error)
            ResponseKind::DescribeUserScramCredentials(r) => {
                assert_eq!(r.error_code, 0, "DescribeUserScramCredentials v{v}: top-level error with users named");
                items(r.results.iter().map(|u| (u.user.to_string(), u.error_code)).collect())
            }
            ResponseKind::AlterUserScramCredentials(r) => {
                items(r.results.iter().map(|u| (u.user.to_string(), u.error_code)).collect())
            }
            other => panic!("v{v}: no refusal shape known for {other:?}"),
        }
    }

    /// The sweep of issue 24 item 8. With the authorizer on and no ACL, every API at every
    /// version is asked about named items (topics, partitions, groups, ids, users, ACL filters)
    /// by an unauthorized principal. Each answer is of its own API (decoded with that API's
    /// response schema, nothing left over), carries one result per item asked — each echoing
    /// the item's name and the resource's *_AUTHORIZATION_FAILED code — where Kafka's
    /// `getErrorResponse` answers per item, and the top-level code where it answers at the top.
    /// Listing APIs show nothing; DescribeCluster and ApiVersions answer anyone, as in Kafka.
    #[tokio::test(flavor = "multi_thread")]
    async fn every_refusal_has_its_apis_shape_and_echoes_every_item() {
        let answers = answer_every_version_of(&[("authorizer.class.name", "acl")], named_request).await;
        let (topic, group, txn, cluster) = (29, 30, 53, 31);
        let mut checked = 0;
        for (key, v, request, body) in answers {
            let want = match key {
                ApiKey::ApiVersions | ApiKey::DescribeCluster | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate => {
                    continue
                }
                ApiKey::ListGroups | ApiKey::ListTransactions => {
                    match &body {
                        ResponseKind::ListGroups(r) => assert!(r.groups.is_empty(), "ListGroups v{v}"),
                        ResponseKind::ListTransactions(r) => {
                            assert!(r.transaction_states.is_empty(), "ListTransactions v{v}")
                        }
                        other => panic!("{key:?} v{v} answered {other:?}"),
                    }
                    continue;
                }
                ApiKey::Produce
                | ApiKey::Fetch
                | ApiKey::ListOffsets
                | ApiKey::Metadata
                | ApiKey::CreateTopics
                | ApiKey::DeleteTopics
                | ApiKey::CreatePartitions
                | ApiKey::DeleteRecords
                | ApiKey::DescribeProducers => topic,
                ApiKey::FindCoordinator
                | ApiKey::JoinGroup
                | ApiKey::SyncGroup
                | ApiKey::Heartbeat
                | ApiKey::LeaveGroup
                | ApiKey::OffsetCommit
                | ApiKey::OffsetFetch
                | ApiKey::OffsetDelete
                | ApiKey::DescribeGroups
                | ApiKey::ConsumerGroupDescribe
                | ApiKey::DeleteGroups
                | ApiKey::ConsumerGroupHeartbeat => group,
                ApiKey::AddOffsetsToTxn | ApiKey::EndTxn | ApiKey::TxnOffsetCommit | ApiKey::DescribeTransactions => {
                    txn
                }
                ApiKey::AddPartitionsToTxn if v < 4 => txn,
                _ => cluster,
            };
            let mut asked = asked_items(&request, v);
            let (top, items) = answered_items(&body, v);
            let mut names: Vec<String> = items.iter().map(|(n, _)| n.clone()).collect();
            asked.sort();
            names.sort();
            assert_eq!(names, asked, "{key:?} v{v}: items answered (left) and asked (right), once each");
            let config =
                matches!(key, ApiKey::DescribeConfigs | ApiKey::AlterConfigs | ApiKey::IncrementalAlterConfigs);
            for (name, code) in &items {
                // configs: a topic's refusal is the topic's code, a group's the group's, a
                // broker's the cluster's
                let want = match name.split_once(':') {
                    Some(("2", _)) if config => topic,
                    Some(("32", _)) if config => group,
                    _ => want,
                };
                assert_eq!(*code, want, "{key:?} v{v}: item {name}");
            }
            if let Some(top) = top {
                assert_eq!(top, want, "{key:?} v{v}: top-level code");
            }
            // (DescribeLogDirs v0-v2 has no error field: Kafka answers no log dirs)
            let silent_ok = key == ApiKey::DescribeLogDirs && v < 3;
            assert!(top.is_some() || !items.is_empty() || silent_ok, "{key:?} v{v}: a refusal that says nothing");
            checked += 1;
        }
        assert!(checked > 150, "only {checked} (API, version) pairs checked");
    }
}

#[cfg(test)]
mod restart_tests {
    use sluice_protocol::batch::{BatchBuilder, NewRecord};

    #[test]
    fn producer_state_survives_a_broker_restart() {
        let dir = tempfile::tempdir().unwrap();
        let mut flags = std::collections::BTreeMap::new();
        flags.insert("log.dirs".to_string(), dir.path().display().to_string());
        let cfg = crate::config::resolve(&flags, &Default::default(), None).unwrap();
        let state = crate::broker::open_services(cfg.clone()).unwrap();
        state.topics.create_topic_with_id("t", None, 1, 1, Default::default(), false).unwrap();
        let mut b = BatchBuilder { producer_id: 5, producer_epoch: 0, base_sequence: 0, ..Default::default() }
            .build(&[NewRecord { timestamp: crate::clock::now_ms(), ..Default::default() }])
            .unwrap()
            .to_vec();
        state.topics.partition("t", 0).unwrap().append_batch(&mut b, 0).unwrap();
        assert_eq!(state.topics.partition("t", 0).unwrap().producer_entries().len(), 1);
        drop(state);
        let state = crate::broker::open_services(cfg).unwrap();
        let p = state.topics.partition("t", 0).unwrap();
        assert_eq!(p.producer_entries().len(), 1);
        assert_eq!(p.expire_producers(crate::clock::now_ms(), state.config.producer_id_expiration_ms), 0);
    }
}
