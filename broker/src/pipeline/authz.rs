//! What each API needs, as Kafka checks it (KafkaApis), applied before dispatch.
//!
//! A check either passes the request, denies it whole (an answer built here with the
//! *_AUTHORIZATION_FAILED code), or removes the resources the principal may not touch from the
//! request and patches their errors into the handler's answer — so a Produce to one allowed and
//! one denied topic writes the first and answers TOPIC_AUTHORIZATION_FAILED for the second.
//! Listing APIs (Metadata for all topics, ListGroups, ListTransactions, OffsetFetch of all
//! topics) drop what the principal may not Describe.
//!
//! Admin APIs with per-resource answers (CreateTopics, DeleteTopics, CreatePartitions,
//! DeleteRecords, configs, DeleteGroups) are filtered per resource as well.

use super::Gate;
use crate::handlers::refuse;
use crate::security::acl::{Operation as Op, ResourceType as Rt, CLUSTER};
use crate::security::Session;
use crate::services::Services;
use kafka_protocol::error::ResponseError as E;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use sluice_protocol::api::SupportedRequest;
use std::collections::HashSet;

struct Ctx<'a> {
    state: &'a Services,
    session: &'a Session,
}

impl Ctx<'_> {
    fn ok(&self, op: Op, rt: Rt, name: &str) -> bool {
        self.state.security.allowed(self.session, op, rt, name)
    }
    fn cluster(&self, op: Op) -> bool {
        self.ok(op, Rt::Cluster, CLUSTER)
    }
    fn topic(&self, op: Op, name: &str) -> bool {
        self.ok(op, Rt::Topic, name)
    }
}

fn patch<R: 'static>(f: impl FnOnce(&mut R) + Send + 'static, pick: fn(&mut ResponseKind) -> Option<&mut R>) -> Gate {
    Gate::Patch(Box::new(move |r: &mut ResponseKind| {
        if let Some(r) = pick(r) {
            f(r)
        }
    }))
}

macro_rules! pick {
    ($variant:ident) => {
        |r: &mut ResponseKind| match r {
            ResponseKind::$variant(x) => Some(x),
            _ => None,
        }
    };
}

/// AlterConfigs and IncrementalAlterConfigs: the same rule and answer shape, different types.
macro_rules! alter_configs_gate {
    ($c:expr, $r:expr, $Resp:ident, $module:ident, $variant:ident) => {{
        let denied =
            split_off(&mut $r.resources, |x| config_allowed(&$c, Op::AlterConfigs, x.resource_type, &x.resource_name));
        if denied.is_empty() {
            return Gate::Pass;
        }
        let denied: Vec<(i8, StrBytes)> = denied.into_iter().map(|d| (d.resource_type, d.resource_name)).collect();
        patch(
            move |resp: &mut $Resp| {
                for (t, n) in denied {
                    let mut x = $module::AlterConfigsResourceResponse::default();
                    x.error_code = config_error(t);
                    x.error_message = msg("Authorization failed.");
                    x.resource_type = t;
                    x.resource_name = n;
                    resp.responses.push(x);
                }
            },
            pick!($variant),
        )
    }};
}

/// Split `items` into kept and removed by `keep`.
fn split_off<T>(items: &mut Vec<T>, mut keep: impl FnMut(&T) -> bool) -> Vec<T> {
    let (k, removed): (Vec<T>, Vec<T>) = std::mem::take(items).into_iter().partition(|x| keep(x));
    *items = k;
    removed
}

fn msg(s: &str) -> Option<StrBytes> {
    Some(StrBytes::from_string(s.to_string()))
}

/// Decide for one request. Without an authorizer everything passes (one branch, no work).
pub fn gate(state: &Services, session: &Session, body: &mut SupportedRequest, version: i16) -> Gate {
    if !state.security.settings.authorizer {
        return Gate::Pass;
    }
    let c = Ctx { state, session };
    if state.security.settings.super_users.contains(&session.principal) {
        return Gate::Pass;
    }
    match body {
        SupportedRequest::ApiVersions(_)
        | SupportedRequest::SaslHandshake(_)
        | SupportedRequest::SaslAuthenticate(_) => Gate::Pass,
        SupportedRequest::Produce(r) => produce(&c, r),
        SupportedRequest::Fetch(r) => fetch(&c, r, version),
        SupportedRequest::Metadata(r) => metadata(&c, r),
        SupportedRequest::ListOffsets(r) => {
            let denied = split_off(&mut r.topics, |t| c.topic(Op::Describe, &t.name));
            if denied.is_empty() {
                return Gate::Pass;
            }
            patch(
                move |resp: &mut ListOffsetsResponse| {
                    for t in denied {
                        let parts = t.partitions.iter().map(|p| p.partition_index);
                        resp.topics.push(refuse::list_offsets_topic(
                            t.name.clone(),
                            parts,
                            E::TopicAuthorizationFailed.code(),
                        ));
                    }
                },
                pick!(ListOffsets),
            )
        }
        SupportedRequest::CreateTopics(r) => {
            let cluster_create = c.cluster(Op::Create);
            let denied = split_off(&mut r.topics, |t| cluster_create || c.topic(Op::Create, &t.name));
            if denied.is_empty() {
                return Gate::Pass;
            }
            patch(
                move |resp: &mut CreateTopicsResponse| {
                    for t in denied {
                        let mut x = create_topics_response::CreatableTopicResult::default();
                        x.name = t.name;
                        x.error_code = E::TopicAuthorizationFailed.code();
                        x.error_message = msg("Authorization failed.");
                        x.num_partitions = -1;
                        x.replication_factor = -1;
                        resp.topics.push(x);
                    }
                },
                pick!(CreateTopics),
            )
        }
        SupportedRequest::DeleteTopics(r) => {
            let name_of = |t: &delete_topics_request::DeleteTopicState| -> Option<String> {
                match &t.name {
                    Some(n) => Some(n.to_string()),
                    None => state.topics.topic_by_id(t.topic_id).map(|t| t.name.clone()),
                }
            };
            let denied_names = split_off(&mut r.topic_names, |n| c.topic(Op::Delete, n));
            let denied_states = split_off(&mut r.topics, |t| name_of(t).is_none_or(|n| c.topic(Op::Delete, &n)));
            if denied_names.is_empty() && denied_states.is_empty() {
                return Gate::Pass;
            }
            patch(
                move |resp: &mut DeleteTopicsResponse| {
                    let names = denied_names.into_iter().map(|n| (Some(n), uuid::Uuid::nil()));
                    for (name, id) in names.chain(denied_states.into_iter().map(|t| (t.name, t.topic_id))) {
                        let mut x = delete_topics_response::DeletableTopicResult::default();
                        x.name = name;
                        x.topic_id = id;
                        x.error_code = E::TopicAuthorizationFailed.code();
                        resp.responses.push(x);
                    }
                },
                pick!(DeleteTopics),
            )
        }
        SupportedRequest::CreatePartitions(r) => {
            let denied = split_off(&mut r.topics, |t| c.topic(Op::Alter, &t.name));
            if denied.is_empty() {
                return Gate::Pass;
            }
            patch(
                move |resp: &mut CreatePartitionsResponse| {
                    for t in denied {
                        let mut x = create_partitions_response::CreatePartitionsTopicResult::default();
                        x.name = t.name;
                        x.error_code = E::TopicAuthorizationFailed.code();
                        resp.results.push(x);
                    }
                },
                pick!(CreatePartitions),
            )
        }
        SupportedRequest::DeleteRecords(r) => {
            let denied = split_off(&mut r.topics, |t| c.topic(Op::Delete, &t.name));
            if denied.is_empty() {
                return Gate::Pass;
            }
            patch(
                move |resp: &mut DeleteRecordsResponse| {
                    for t in denied {
                        let mut out = delete_records_response::DeleteRecordsTopicResult::default();
                        out.name = t.name;
                        out.partitions = t
                            .partitions
                            .iter()
                            .map(|p| {
                                let mut x = delete_records_response::DeleteRecordsPartitionResult::default();
                                x.partition_index = p.partition_index;
                                x.low_watermark = -1;
                                x.error_code = E::TopicAuthorizationFailed.code();
                                x
                            })
                            .collect();
                        resp.topics.push(out);
                    }
                },
                pick!(DeleteRecords),
            )
        }
        SupportedRequest::DescribeConfigs(r) => {
            let denied = split_off(&mut r.resources, |x| {
                config_allowed(&c, Op::DescribeConfigs, x.resource_type, &x.resource_name)
            });
            if denied.is_empty() {
                return Gate::Pass;
            }
            patch(
                move |resp: &mut DescribeConfigsResponse| {
                    for d in denied {
                        let mut x = describe_configs_response::DescribeConfigsResult::default();
                        x.error_code = config_error(d.resource_type);
                        x.error_message = msg("Authorization failed.");
                        x.resource_type = d.resource_type;
                        x.resource_name = d.resource_name;
                        resp.results.push(x);
                    }
                },
                pick!(DescribeConfigs),
            )
        }
        SupportedRequest::AlterConfigs(r) => {
            alter_configs_gate!(c, r, AlterConfigsResponse, alter_configs_response, AlterConfigs)
        }
        SupportedRequest::IncrementalAlterConfigs(r) => alter_configs_gate!(
            c,
            r,
            IncrementalAlterConfigsResponse,
            incremental_alter_configs_response,
            IncrementalAlterConfigs
        ),
        // Kafka answers DescribeCluster to any authenticated principal (as Metadata's broker list)
        SupportedRequest::DescribeCluster(_) => Gate::Pass,
        SupportedRequest::AlterPartitionReassignments(r) => {
            if c.cluster(Op::Alter) {
                return Gate::Pass;
            }
            let mut x = AlterPartitionReassignmentsResponse::default();
            x.error_code = E::ClusterAuthorizationFailed.code();
            for t in &r.topics {
                let mut tr = alter_partition_reassignments_response::ReassignableTopicResponse::default();
                tr.name = t.name.clone();
                for p in &t.partitions {
                    let mut pr = alter_partition_reassignments_response::ReassignablePartitionResponse::default();
                    pr.partition_index = p.partition_index;
                    pr.error_code = E::ClusterAuthorizationFailed.code();
                    tr.partitions.push(pr);
                }
                x.responses.push(tr);
            }
            Gate::Deny(Box::new(ResponseKind::AlterPartitionReassignments(x)))
        }
        SupportedRequest::UnregisterBroker(_) => {
            if c.cluster(Op::Alter) {
                return Gate::Pass;
            }
            let mut x = UnregisterBrokerResponse::default();
            x.error_code = E::ClusterAuthorizationFailed.code();
            Gate::Deny(Box::new(ResponseKind::UnregisterBroker(x)))
        }
        SupportedRequest::ListPartitionReassignments(_) => {
            if c.cluster(Op::Describe) {
                return Gate::Pass;
            }
            let mut x = ListPartitionReassignmentsResponse::default();
            x.error_code = E::ClusterAuthorizationFailed.code();
            Gate::Deny(Box::new(ResponseKind::ListPartitionReassignments(x)))
        }
        SupportedRequest::ElectLeaders(r) => {
            if c.cluster(Op::Alter) {
                return Gate::Pass;
            }
            let mut x = ElectLeadersResponse::default();
            if version >= 1 {
                x.error_code = E::ClusterAuthorizationFailed.code();
            }
            for t in r.topic_partitions.iter().flatten() {
                let mut tr = elect_leaders_response::ReplicaElectionResult::default();
                tr.topic = t.topic.clone();
                for p in &t.partitions {
                    let mut pr = elect_leaders_response::PartitionResult::default();
                    pr.partition_id = *p;
                    pr.error_code = E::ClusterAuthorizationFailed.code();
                    tr.partition_result.push(pr);
                }
                x.replica_election_results.push(tr);
            }
            Gate::Deny(Box::new(ResponseKind::ElectLeaders(x)))
        }
        SupportedRequest::DescribeLogDirs(_) => {
            if c.cluster(Op::Describe) {
                return Gate::Pass;
            }
            let mut x = DescribeLogDirsResponse::default();
            x.error_code = E::ClusterAuthorizationFailed.code();
            Gate::Deny(Box::new(ResponseKind::DescribeLogDirs(x)))
        }
        SupportedRequest::InitProducerId(r) => {
            let allowed = match r.transactional_id.as_ref().filter(|t| !t.is_empty()) {
                Some(t) => c.ok(Op::Write, Rt::TransactionalId, t),
                // Kafka 3.x: IdempotentWrite on the cluster, or Write on any topic
                None => c.cluster(Op::IdempotentWrite) || any_topic_write(&c),
            };
            if allowed {
                return Gate::Pass;
            }
            let mut x = InitProducerIdResponse::default();
            x.error_code = if r.transactional_id.as_ref().is_some_and(|t| !t.is_empty()) {
                E::TransactionalIdAuthorizationFailed.code()
            } else {
                E::ClusterAuthorizationFailed.code()
            };
            x.producer_id = ProducerId(-1);
            x.producer_epoch = -1;
            Gate::Deny(Box::new(ResponseKind::InitProducerId(x)))
        }
        SupportedRequest::DescribeProducers(r) => {
            let denied = split_off(&mut r.topics, |t| c.topic(Op::Read, &t.name));
            if denied.is_empty() {
                return Gate::Pass;
            }
            patch(
                move |resp: &mut DescribeProducersResponse| {
                    for t in denied {
                        let mut out = describe_producers_response::TopicResponse::default();
                        out.name = t.name;
                        out.partitions = t
                            .partition_indexes
                            .iter()
                            .map(|p| {
                                let mut x = describe_producers_response::PartitionResponse::default();
                                x.partition_index = *p;
                                x.error_code = E::TopicAuthorizationFailed.code();
                                x
                            })
                            .collect();
                        resp.topics.push(out);
                    }
                },
                pick!(DescribeProducers),
            )
        }
        SupportedRequest::FindCoordinator(r) => {
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
        SupportedRequest::JoinGroup(r) => group_gate(&c, &r.group_id, |code| {
            let mut x = JoinGroupResponse::default();
            x.error_code = code;
            x.generation_id = -1;
            ResponseKind::JoinGroup(x)
        }),
        SupportedRequest::SyncGroup(r) => group_gate(&c, &r.group_id, |code| {
            let mut x = SyncGroupResponse::default();
            x.error_code = code;
            ResponseKind::SyncGroup(x)
        }),
        SupportedRequest::Heartbeat(r) => group_gate(&c, &r.group_id, |code| {
            let mut x = HeartbeatResponse::default();
            x.error_code = code;
            ResponseKind::Heartbeat(x)
        }),
        SupportedRequest::LeaveGroup(r) => group_gate(&c, &r.group_id, |code| {
            let mut x = LeaveGroupResponse::default();
            x.error_code = code;
            ResponseKind::LeaveGroup(x)
        }),
        SupportedRequest::ConsumerGroupHeartbeat(r) => group_gate(&c, &r.group_id, |code| {
            let mut x = ConsumerGroupHeartbeatResponse::default();
            x.error_code = code;
            x.error_message = msg("Group authorization failed.");
            ResponseKind::ConsumerGroupHeartbeat(x)
        }),
        SupportedRequest::OffsetCommit(r) => {
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
        SupportedRequest::OffsetFetch(r) => offset_fetch(&c, r, version),
        SupportedRequest::OffsetDelete(r) => {
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
        SupportedRequest::DescribeGroups(r) => {
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
        SupportedRequest::ConsumerGroupDescribe(r) => {
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
        SupportedRequest::ListGroups(_) => {
            if c.cluster(Op::Describe) {
                return Gate::Pass;
            }
            let (sec, who) = (state.security.clone(), session.clone());
            patch(
                move |resp: &mut ListGroupsResponse| {
                    resp.groups.retain(|g| sec.allowed(&who, Op::Describe, Rt::Group, &g.group_id))
                },
                pick!(ListGroups),
            )
        }
        SupportedRequest::DeleteGroups(r) => {
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
        SupportedRequest::WriteTxnMarkers(r) => {
            if c.cluster(Op::ClusterAction) {
                return Gate::Pass;
            }
            let mut x = WriteTxnMarkersResponse::default();
            x.markers = r
                .markers
                .iter()
                .map(|m| {
                    let mut out = write_txn_markers_response::WritableTxnMarkerResult::default();
                    out.producer_id = m.producer_id;
                    out.topics = m
                        .topics
                        .iter()
                        .map(|t| {
                            let mut tr = write_txn_markers_response::WritableTxnMarkerTopicResult::default();
                            tr.name = t.name.clone();
                            tr.partitions = t
                                .partition_indexes
                                .iter()
                                .map(|p| {
                                    let mut pr =
                                        write_txn_markers_response::WritableTxnMarkerPartitionResult::default();
                                    pr.partition_index = *p;
                                    pr.error_code = E::ClusterAuthorizationFailed.code();
                                    pr
                                })
                                .collect();
                            tr
                        })
                        .collect();
                    out
                })
                .collect();
            Gate::Deny(Box::new(ResponseKind::WriteTxnMarkers(x)))
        }
        SupportedRequest::AddPartitionsToTxn(r) => add_partitions(&c, r, version),
        SupportedRequest::AddOffsetsToTxn(r) => {
            let code = if !c.ok(Op::Write, Rt::TransactionalId, &r.transactional_id) {
                E::TransactionalIdAuthorizationFailed.code()
            } else if !c.ok(Op::Read, Rt::Group, &r.group_id) {
                E::GroupAuthorizationFailed.code()
            } else {
                return Gate::Pass;
            };
            let mut x = AddOffsetsToTxnResponse::default();
            x.error_code = code;
            Gate::Deny(Box::new(ResponseKind::AddOffsetsToTxn(x)))
        }
        SupportedRequest::EndTxn(r) => {
            if c.ok(Op::Write, Rt::TransactionalId, &r.transactional_id) {
                return Gate::Pass;
            }
            let mut x = EndTxnResponse::default();
            x.error_code = E::TransactionalIdAuthorizationFailed.code();
            x.producer_id = ProducerId(-1);
            x.producer_epoch = -1;
            Gate::Deny(Box::new(ResponseKind::EndTxn(x)))
        }
        SupportedRequest::TxnOffsetCommit(r) => {
            let code = if !c.ok(Op::Write, Rt::TransactionalId, &r.transactional_id) {
                Some(E::TransactionalIdAuthorizationFailed.code())
            } else if !c.ok(Op::Read, Rt::Group, &r.group_id) {
                Some(E::GroupAuthorizationFailed.code())
            } else {
                None
            };
            let denied = split_off(&mut r.topics, |t| code.is_none() && c.topic(Op::Read, &t.name));
            if denied.is_empty() {
                return Gate::Pass;
            }
            let code = code.unwrap_or(E::TopicAuthorizationFailed.code());
            patch(
                move |resp: &mut TxnOffsetCommitResponse| {
                    for t in denied {
                        resp.topics.push(refuse::txn_offset_commit_topic(&t, code));
                    }
                },
                pick!(TxnOffsetCommit),
            )
        }
        SupportedRequest::ListTransactions(_) => {
            let (sec, who) = (state.security.clone(), session.clone());
            patch(
                move |resp: &mut ListTransactionsResponse| {
                    resp.transaction_states
                        .retain(|t| sec.allowed(&who, Op::Describe, Rt::TransactionalId, &t.transactional_id))
                },
                pick!(ListTransactions),
            )
        }
        SupportedRequest::DescribeTransactions(r) => {
            let denied: HashSet<String> = r
                .transactional_ids
                .iter()
                .filter(|t| !c.ok(Op::Describe, Rt::TransactionalId, t))
                .map(|t| t.to_string())
                .collect();
            if denied.is_empty() {
                return Gate::Pass;
            }
            patch(
                move |resp: &mut DescribeTransactionsResponse| {
                    for t in resp.transaction_states.iter_mut().filter(|t| denied.contains(t.transactional_id.as_str()))
                    {
                        let mut x = describe_transactions_response::TransactionState::default();
                        x.transactional_id = t.transactional_id.clone();
                        x.error_code = E::TransactionalIdAuthorizationFailed.code();
                        *t = x;
                    }
                },
                pick!(DescribeTransactions),
            )
        }
        SupportedRequest::CreateAcls(r) => {
            if c.cluster(Op::Alter) {
                return Gate::Pass;
            }
            let mut x = CreateAclsResponse::default();
            x.results = r
                .creations
                .iter()
                .map(|_| {
                    let mut e = create_acls_response::AclCreationResult::default();
                    e.error_code = E::ClusterAuthorizationFailed.code();
                    e.error_message = msg("Cluster authorization failed.");
                    e
                })
                .collect();
            Gate::Deny(Box::new(ResponseKind::CreateAcls(x)))
        }
        SupportedRequest::DeleteAcls(r) => {
            if c.cluster(Op::Alter) {
                return Gate::Pass;
            }
            let mut x = DeleteAclsResponse::default();
            x.filter_results = r
                .filters
                .iter()
                .map(|_| {
                    let mut e = delete_acls_response::DeleteAclsFilterResult::default();
                    e.error_code = E::ClusterAuthorizationFailed.code();
                    e.error_message = msg("Cluster authorization failed.");
                    e
                })
                .collect();
            Gate::Deny(Box::new(ResponseKind::DeleteAcls(x)))
        }
        SupportedRequest::DescribeAcls(_) => {
            if c.cluster(Op::Describe) {
                return Gate::Pass;
            }
            let mut x = DescribeAclsResponse::default();
            x.error_code = E::ClusterAuthorizationFailed.code();
            x.error_message = msg("Cluster authorization failed.");
            Gate::Deny(Box::new(ResponseKind::DescribeAcls(x)))
        }
        SupportedRequest::DescribeUserScramCredentials(r) => {
            if c.cluster(Op::Describe) {
                return Gate::Pass;
            }
            // Kafka answers a top-level error (and, per user asked for, a result with the
            // error but no name). librdkafka (2.12 and since) frees a static or stack string on
            // any top-level error here and aborts the client process; so when users are named,
            // each gets its own result, named, carrying the refusal, and the top level stays
            // clear (decision 0014). Asked for every user, only the top level can carry it.
            let mut x = DescribeUserScramCredentialsResponse::default();
            let users: Vec<StrBytes> = r.users.iter().flatten().map(|u| u.name.clone()).collect();
            if users.is_empty() {
                x.error_code = E::ClusterAuthorizationFailed.code();
                x.error_message = msg("Cluster authorization failed.");
            }
            x.results = users
                .into_iter()
                .map(|u| {
                    let mut e = describe_user_scram_credentials_response::DescribeUserScramCredentialsResult::default();
                    e.user = u;
                    e.error_code = E::ClusterAuthorizationFailed.code();
                    e.error_message = msg("Cluster authorization failed.");
                    e
                })
                .collect();
            Gate::Deny(Box::new(ResponseKind::DescribeUserScramCredentials(x)))
        }
        SupportedRequest::AlterUserScramCredentials(r) => {
            if c.cluster(Op::Alter) {
                return Gate::Pass;
            }
            let users: Vec<StrBytes> =
                r.deletions.iter().map(|d| d.name.clone()).chain(r.upsertions.iter().map(|u| u.name.clone())).collect();
            let mut x = AlterUserScramCredentialsResponse::default();
            x.results = users
                .into_iter()
                .map(|u| {
                    let mut e = alter_user_scram_credentials_response::AlterUserScramCredentialsResult::default();
                    e.user = u;
                    e.error_code = E::ClusterAuthorizationFailed.code();
                    e.error_message = msg("Cluster authorization failed.");
                    e
                })
                .collect();
            Gate::Deny(Box::new(ResponseKind::AlterUserScramCredentials(x)))
        } // no catch-all: every API of the table has its rule above, or this does not compile
    }
}

/// Broker (4) and broker-logger (8) configs need the cluster permission; topics the topic's;
/// group configs (32) the group's (Kafka's `authorizeConfigResource`).
fn config_allowed(c: &Ctx<'_>, op: Op, resource_type: i8, name: &str) -> bool {
    match resource_type {
        2 => c.topic(op, name),
        32 => c.ok(op, Rt::Group, name),
        _ => c.cluster(op),
    }
}

fn config_error(resource_type: i8) -> i16 {
    match resource_type {
        2 => E::TopicAuthorizationFailed.code(),
        32 => E::GroupAuthorizationFailed.code(),
        _ => E::ClusterAuthorizationFailed.code(),
    }
}

/// Does the principal hold Write on some topic (Kafka's `authorizeByResourceType`)?
fn any_topic_write(c: &Ctx<'_>) -> bool {
    c.state.security.acls.any_allow(&c.session.principal, &c.session.host(), Op::Write, Rt::Topic)
}

fn group_gate(c: &Ctx<'_>, group: &str, deny: impl FnOnce(i16) -> ResponseKind) -> Gate {
    if c.ok(Op::Read, Rt::Group, group) {
        Gate::Pass
    } else {
        Gate::Deny(Box::new(deny(E::GroupAuthorizationFailed.code())))
    }
}

fn produce(c: &Ctx<'_>, r: &mut ProduceRequest) -> Gate {
    let txn_denied =
        r.transactional_id.as_ref().is_some_and(|t| !t.is_empty() && !c.ok(Op::Write, Rt::TransactionalId, t));
    // A topic that does not exist would be auto-created by the append: that needs Create.
    let may_create = c.cluster(Op::Create);
    let mut codes = Vec::new();
    let denied = split_off(&mut r.topic_data, |t| {
        let code = if txn_denied {
            Some(E::TransactionalIdAuthorizationFailed)
        } else if !c.topic(Op::Write, &t.name) {
            Some(E::TopicAuthorizationFailed)
        } else if c.state.topics.topic(&t.name).is_none() && !may_create && !c.topic(Op::Create, &t.name) {
            Some(E::UnknownTopicOrPartition)
        } else {
            None
        };
        if let Some(code) = code {
            codes.push(code.code());
        }
        code.is_none()
    });
    if denied.is_empty() {
        return Gate::Pass;
    }
    patch(
        move |resp: &mut ProduceResponse| {
            for (t, code) in denied.into_iter().zip(codes) {
                let parts = t.partition_data.iter().map(|p| p.index);
                resp.responses.push(refuse::produce_topic(t.name.clone(), parts, code));
            }
        },
        pick!(Produce),
    )
}

fn fetch(c: &Ctx<'_>, r: &mut FetchRequest, version: i16) -> Gate {
    let replica = if version >= 15 { r.replica_state.replica_id.0 } else { r.replica_id.0 };
    if replica >= 0 && !c.cluster(Op::ClusterAction) {
        let mut x = FetchResponse::default();
        x.error_code = E::ClusterAuthorizationFailed.code();
        return Gate::Deny(Box::new(ResponseKind::Fetch(x)));
    }
    let denied = split_off(&mut r.topics, |t| {
        let name = if version >= 13 {
            match c.state.topics.topic_by_id(t.topic_id) {
                Some(t) => t.name.clone(),
                None => return true, // the handler answers UNKNOWN_TOPIC_ID
            }
        } else {
            t.topic.to_string()
        };
        replica >= 0 || c.topic(Op::Read, &name)
    });
    if denied.is_empty() {
        return Gate::Pass;
    }
    patch(
        move |resp: &mut FetchResponse| {
            for t in denied {
                let parts = t.partitions.iter().map(|p| p.partition);
                resp.responses.push(refuse::fetch_topic(
                    t.topic.clone(),
                    t.topic_id,
                    parts,
                    E::TopicAuthorizationFailed.code(),
                ));
            }
        },
        pick!(Fetch),
    )
}

fn metadata(c: &Ctx<'_>, r: &mut MetadataRequest) -> Gate {
    let Some(topics) = r.topics.as_mut() else {
        // all topics: list only those the principal may Describe
        let allowed: HashSet<String> =
            c.state.topics.topics().iter().filter(|t| c.topic(Op::Describe, &t.name)).map(|t| t.name.clone()).collect();
        return patch(
            move |resp: &mut MetadataResponse| {
                resp.topics.retain(|t| t.name.as_ref().is_some_and(|n| allowed.contains(n.as_str())))
            },
            pick!(Metadata),
        );
    };
    let name_of = |t: &metadata_request::MetadataRequestTopic| -> Option<String> {
        match &t.name {
            Some(n) => Some(n.to_string()),
            None => c.state.topics.topic_by_id(t.topic_id).map(|t| t.name.clone()),
        }
    };
    let denied = split_off(topics, |t| name_of(t).is_none_or(|n| c.topic(Op::Describe, &n)));
    if r.allow_auto_topic_creation
        && !c.cluster(Op::Create)
        && topics.iter().filter_map(name_of).any(|n| c.state.topics.topic(&n).is_none() && !c.topic(Op::Create, &n))
    {
        r.allow_auto_topic_creation = false;
    }
    // Answer only what was asked and allowed (an emptied list means "all topics" in v0).
    let kept: HashSet<String> = topics.iter().filter_map(name_of).collect();
    if denied.is_empty() {
        return Gate::Pass;
    }
    patch(
        move |resp: &mut MetadataResponse| {
            resp.topics.retain(|t| t.name.as_ref().is_none_or(|n| kept.contains(n.as_str())));
            for t in denied {
                let mut x = metadata_response::MetadataResponseTopic::default();
                x.error_code = E::TopicAuthorizationFailed.code();
                x.name = t.name;
                x.topic_id = t.topic_id;
                x.topic_authorized_operations = i32::MIN;
                resp.topics.push(x);
            }
        },
        pick!(Metadata),
    )
}

fn offset_fetch(c: &Ctx<'_>, r: &mut OffsetFetchRequest, version: i16) -> Gate {
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

fn add_partitions(c: &Ctx<'_>, r: &mut AddPartitionsToTxnRequest, version: i16) -> Gate {
    if version >= 4 {
        // the batched form is broker-to-broker (verification): Kafka requires ClusterAction
        if c.cluster(Op::ClusterAction) {
            return Gate::Pass;
        }
        let mut x = AddPartitionsToTxnResponse::default();
        x.error_code = E::ClusterAuthorizationFailed.code();
        return Gate::Deny(Box::new(ResponseKind::AddPartitionsToTxn(x)));
    }
    let txn_ok = c.ok(Op::Write, Rt::TransactionalId, &r.v3_and_below_transactional_id);
    let denied: HashSet<String> =
        r.v3_and_below_topics.iter().filter(|t| !c.topic(Op::Write, &t.name)).map(|t| t.name.to_string()).collect();
    if txn_ok && denied.is_empty() {
        return Gate::Pass;
    }
    // all or nothing, as Kafka: denied topics get the authorization error, the rest
    // OPERATION_NOT_ATTEMPTED
    let x = refuse::add_partitions_v3(r, |topic| {
        if !txn_ok {
            E::TransactionalIdAuthorizationFailed
        } else if denied.contains(topic) {
            E::TopicAuthorizationFailed
        } else {
            E::OperationNotAttempted
        }
        .code()
    });
    Gate::Deny(Box::new(ResponseKind::AddPartitionsToTxn(x)))
}
