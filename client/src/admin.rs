//! The admin client: topics, configs, partitions, offsets, groups, transactions and the
//! cluster, over the Kafka admin APIs. Errors carry the Kafka error code and the broker's
//! message.

use crate::cluster::{by_topic, sb, Broker, Cluster, Lane, PartitionInfo};
use crate::config::{ClientConfig, COMMON};
use crate::consumer::TopicPartition;
use crate::error::{Error, Result};
use bytes::{Buf, Bytes};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, StrBytes};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A topic and its partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicDescription {
    /// Topic name.
    pub name: String,
    /// Partitions in index order.
    pub partitions: Vec<PartitionInfo>,
}

/// A group as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    /// Group id.
    pub group_id: String,
    /// State (Empty, Stable, …).
    pub state: String,
    /// Protocol type ("consumer" for consumer groups).
    pub protocol_type: String,
}

/// A group member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    /// Member id.
    pub member_id: String,
    /// Static instance id.
    pub group_instance_id: Option<String>,
    /// Client id.
    pub client_id: String,
    /// Client host.
    pub host: String,
    /// Partitions assigned (decoded from the consumer protocol).
    pub assignment: Vec<TopicPartition>,
}

/// A group described.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    /// Group id.
    pub group_id: String,
    /// State.
    pub state: String,
    /// Protocol type.
    pub protocol_type: String,
    /// The chosen protocol (assignor name for consumer groups).
    pub protocol: String,
    /// Members.
    pub members: Vec<MemberDescription>,
}

/// A transaction as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionListing {
    /// Transactional id.
    pub transactional_id: String,
    /// Producer id.
    pub producer_id: i64,
    /// State (Empty, Ongoing, PrepareCommit, …).
    pub state: String,
}

/// A transaction described.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionDescription {
    /// Transactional id.
    pub transactional_id: String,
    /// State.
    pub state: String,
    /// Producer id and epoch.
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i16,
    /// Transaction timeout.
    pub timeout_ms: i32,
    /// Start time of the current transaction (-1 if none).
    pub start_time_ms: i64,
    /// Partitions in the current transaction.
    pub partitions: Vec<TopicPartition>,
    /// Sluice: when the producer marked the (two-phase-commit) transaction prepared; `None` if
    /// it has not (or the broker does not say). A prepared transaction waits for its outcome.
    pub prepared_ms: Option<i64>,
}

impl TransactionDescription {
    /// A two-phase-commit transaction (KIP-939: Kafka stores `Integer.MAX_VALUE` as its
    /// timeout), open and waiting for its external coordinator.
    pub fn is_two_phase_and_open(&self) -> bool {
        self.timeout_ms == i32::MAX && self.state == "Ongoing"
    }
}

/// A producer active on a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerState {
    /// Producer id.
    pub producer_id: i64,
    /// Epoch.
    pub producer_epoch: i32,
    /// Last sequence written.
    pub last_sequence: i32,
    /// Last write time.
    pub last_timestamp: i64,
    /// Coordinator epoch of its last marker.
    pub coordinator_epoch: i32,
    /// First offset of its open transaction, -1 when none.
    pub current_txn_start_offset: i64,
}

/// The cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterDescription {
    /// Cluster id.
    pub cluster_id: String,
    /// Controller node id.
    pub controller_id: i32,
    /// Brokers: (node id, host, port).
    pub brokers: Vec<(i32, String, i32)>,
}

/// An admin client.
pub struct Admin {
    cluster: Arc<Cluster>,
    timeout_ms: i32,
}

pub(crate) fn unexpected(what: &str) -> Error {
    Error::invalid(format!("unexpected response to {what}"))
}

pub(crate) fn check_msg(code: i16, message: Option<&StrBytes>, what: impl std::fmt::Display) -> Result<()> {
    match message.filter(|m| !m.is_empty()) {
        Some(m) => Error::check(code, format!("{what} ({})", &**m)),
        None => Error::check(code, what),
    }
}

/// Decode a consumer-protocol assignment (empty or undecodable gives nothing).
fn assignment(mut data: Bytes) -> Vec<TopicPartition> {
    if data.len() < 2 {
        return Vec::new();
    }
    let v = data.get_i16().min(3);
    ConsumerProtocolAssignment::decode(&mut data, v)
        .map(|a| {
            a.assigned_partitions
                .iter()
                .flat_map(|x| x.partitions.iter().map(move |p| (x.topic.0.to_string(), *p)))
                .collect()
        })
        .unwrap_or_default()
}

impl Admin {
    /// An admin client from Kafka-style properties (`bootstrap.servers` required).
    pub fn new(config: &ClientConfig) -> Result<Admin> {
        config.check_known(COMMON)?;
        let mut cluster = Cluster::new(&config.bootstrap()?, &config.string("client.id", "sluice-admin"), 1)?;
        cluster.request_timeout = config.ms("request.timeout.ms", 30_000)?;
        cluster.security = crate::security::Security::from_config(config)?;
        let timeout_ms = cluster.request_timeout.as_millis().min(i32::MAX as u128) as i32;
        Ok(Admin { cluster: Arc::new(cluster), timeout_ms })
    }

    pub(crate) async fn any(&self) -> Result<Arc<Broker>> {
        self.cluster.any_broker(Lane::Data).await
    }

    pub(crate) async fn call(&self, b: &Broker, key: ApiKey, body: RequestKind) -> Result<ResponseKind> {
        self.cluster.timed(b.call(key, body)).await
    }

    /// Create a topic (`partitions` / `replication` -1 for the broker's defaults).
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication: i16,
        configs: &[(&str, &str)],
    ) -> Result<()> {
        let mut t = create_topics_request::CreatableTopic::default();
        t.name = TopicName(sb(name));
        t.num_partitions = partitions;
        t.replication_factor = replication;
        t.configs = configs
            .iter()
            .map(|(k, v)| {
                let mut c = create_topics_request::CreatableTopicConfig::default();
                c.name = sb(k);
                c.value = Some(sb(v));
                c
            })
            .collect();
        let mut r = CreateTopicsRequest::default();
        r.topics = vec![t];
        r.timeout_ms = self.timeout_ms;
        let b = self.any().await?;
        let ResponseKind::CreateTopics(c) = self.call(&b, ApiKey::CreateTopics, RequestKind::CreateTopics(r)).await?
        else {
            return Err(unexpected("CreateTopics"));
        };
        for t in &c.topics {
            check_msg(t.error_code, t.error_message.as_ref(), format!("create topic {name}"))?;
        }
        Ok(())
    }

    /// Delete a topic.
    pub async fn delete_topic(&self, name: &str) -> Result<()> {
        let mut r = DeleteTopicsRequest::default();
        r.topic_names = vec![TopicName(sb(name))];
        r.timeout_ms = self.timeout_ms;
        let b = self.any().await?;
        let ResponseKind::DeleteTopics(d) = self.call(&b, ApiKey::DeleteTopics, RequestKind::DeleteTopics(r)).await?
        else {
            return Err(unexpected("DeleteTopics"));
        };
        for t in &d.responses {
            check_msg(t.error_code, t.error_message.as_ref(), format!("delete topic {name}"))?;
        }
        Ok(())
    }

    /// Every topic name, sorted.
    pub async fn list_topics(&self) -> Result<Vec<String>> {
        let m = self.cluster.refresh(&[]).await?;
        let mut v: Vec<String> = m.topics.iter().filter_map(|t| t.name.as_ref().map(|n| n.0.to_string())).collect();
        v.sort();
        Ok(v)
    }

    /// A topic's partitions, leaders and replicas.
    pub async fn describe_topic(&self, name: &str) -> Result<TopicDescription> {
        let m = self.cluster.refresh(&[name]).await?;
        let t = m
            .topics
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| &*n.0 == name))
            .ok_or_else(|| Error::invalid(format!("no metadata for {name}")))?;
        Error::check(t.error_code, format!("describe topic {name}"))?;
        Ok(TopicDescription { name: name.to_string(), partitions: self.cluster.partitions(name).await? })
    }

    /// A topic's configs (every key, defaults included).
    pub async fn describe_topic_configs(&self, name: &str) -> Result<BTreeMap<String, String>> {
        let mut res = describe_configs_request::DescribeConfigsResource::default();
        res.resource_type = 2;
        res.resource_name = sb(name);
        res.configuration_keys = None;
        let mut r = DescribeConfigsRequest::default();
        r.resources = vec![res];
        let b = self.any().await?;
        let ResponseKind::DescribeConfigs(d) =
            self.call(&b, ApiKey::DescribeConfigs, RequestKind::DescribeConfigs(r)).await?
        else {
            return Err(unexpected("DescribeConfigs"));
        };
        let mut out = BTreeMap::new();
        for res in &d.results {
            check_msg(res.error_code, res.error_message.as_ref(), format!("describe configs of {name}"))?;
            for c in &res.configs {
                out.insert(c.name.to_string(), c.value.as_ref().map(|v| v.to_string()).unwrap_or_default());
            }
        }
        Ok(out)
    }

    /// Set and remove topic config overrides (IncrementalAlterConfigs).
    pub async fn alter_topic_configs(&self, name: &str, set: &[(&str, &str)], delete: &[&str]) -> Result<()> {
        let mut res = incremental_alter_configs_request::AlterConfigsResource::default();
        res.resource_type = 2;
        res.resource_name = sb(name);
        for (k, v) in set {
            let mut c = incremental_alter_configs_request::AlterableConfig::default();
            c.name = sb(k);
            c.config_operation = 0;
            c.value = Some(sb(v));
            res.configs.push(c);
        }
        for k in delete {
            let mut c = incremental_alter_configs_request::AlterableConfig::default();
            c.name = sb(k);
            c.config_operation = 1;
            res.configs.push(c);
        }
        let mut r = IncrementalAlterConfigsRequest::default();
        r.resources = vec![res];
        let b = self.any().await?;
        let ResponseKind::IncrementalAlterConfigs(a) =
            self.call(&b, ApiKey::IncrementalAlterConfigs, RequestKind::IncrementalAlterConfigs(r)).await?
        else {
            return Err(unexpected("IncrementalAlterConfigs"));
        };
        for res in &a.responses {
            check_msg(res.error_code, res.error_message.as_ref(), format!("alter configs of {name}"))?;
        }
        Ok(())
    }

    /// Grow a topic to `total` partitions.
    pub async fn create_partitions(&self, name: &str, total: i32) -> Result<()> {
        let mut t = create_partitions_request::CreatePartitionsTopic::default();
        t.name = TopicName(sb(name));
        t.count = total;
        let mut r = CreatePartitionsRequest::default();
        r.topics = vec![t];
        r.timeout_ms = self.timeout_ms;
        let b = self.any().await?;
        let ResponseKind::CreatePartitions(c) =
            self.call(&b, ApiKey::CreatePartitions, RequestKind::CreatePartitions(r)).await?
        else {
            return Err(unexpected("CreatePartitions"));
        };
        for res in &c.results {
            check_msg(res.error_code, res.error_message.as_ref(), format!("create partitions of {name}"))?;
        }
        self.cluster.invalidate(name);
        Ok(())
    }

    /// Groups on every broker.
    pub async fn list_groups(&self) -> Result<Vec<GroupListing>> {
        let b = self.any().await?;
        let ResponseKind::ListGroups(l) =
            self.call(&b, ApiKey::ListGroups, RequestKind::ListGroups(ListGroupsRequest::default())).await?
        else {
            return Err(unexpected("ListGroups"));
        };
        Error::check(l.error_code, "list groups")?;
        let mut v: Vec<GroupListing> = l
            .groups
            .iter()
            .map(|g| GroupListing {
                group_id: g.group_id.0.to_string(),
                state: g.group_state.to_string(),
                protocol_type: g.protocol_type.to_string(),
            })
            .collect();
        v.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        Ok(v)
    }

    /// A group's state, protocol and members with their assignments.
    pub async fn describe_group(&self, group: &str) -> Result<GroupDescription> {
        let b = self.cluster.find_coordinator(0, group).await?;
        let mut r = DescribeGroupsRequest::default();
        r.groups = vec![GroupId(sb(group))];
        let ResponseKind::DescribeGroups(d) =
            self.call(&b, ApiKey::DescribeGroups, RequestKind::DescribeGroups(r)).await?
        else {
            return Err(unexpected("DescribeGroups"));
        };
        let g = d.groups.into_iter().next().ok_or_else(|| unexpected("DescribeGroups"))?;
        check_msg(g.error_code, g.error_message.as_ref(), format!("describe group {group}"))?;
        Ok(GroupDescription {
            group_id: group.to_string(),
            state: g.group_state.to_string(),
            protocol_type: g.protocol_type.to_string(),
            protocol: g.protocol_data.to_string(),
            members: g
                .members
                .into_iter()
                .map(|m| MemberDescription {
                    member_id: m.member_id.to_string(),
                    group_instance_id: m.group_instance_id.map(|s| s.to_string()),
                    client_id: m.client_id.to_string(),
                    host: m.client_host.to_string(),
                    assignment: assignment(m.member_assignment),
                })
                .collect(),
        })
    }

    /// Delete groups (they must be empty).
    pub async fn delete_group(&self, group: &str) -> Result<()> {
        let b = self.cluster.find_coordinator(0, group).await?;
        let mut r = DeleteGroupsRequest::default();
        r.groups_names = vec![GroupId(sb(group))];
        let ResponseKind::DeleteGroups(d) = self.call(&b, ApiKey::DeleteGroups, RequestKind::DeleteGroups(r)).await?
        else {
            return Err(unexpected("DeleteGroups"));
        };
        for res in &d.results {
            Error::check(res.error_code, format!("delete group {group}"))?;
        }
        Ok(())
    }

    /// A group's committed offsets (all partitions).
    pub async fn list_group_offsets(&self, group: &str) -> Result<BTreeMap<TopicPartition, i64>> {
        let b = self.cluster.find_coordinator(0, group).await?;
        let mut r = OffsetFetchRequest::default();
        r.group_id = GroupId(sb(group));
        r.topics = None;
        let ResponseKind::OffsetFetch(f) = self.call(&b, ApiKey::OffsetFetch, RequestKind::OffsetFetch(r)).await?
        else {
            return Err(unexpected("OffsetFetch"));
        };
        Error::check(f.error_code, format!("offsets of group {group}"))?;
        let mut out = BTreeMap::new();
        for t in &f.topics {
            for p in &t.partitions {
                if p.committed_offset >= 0 {
                    out.insert((t.name.0.to_string(), p.partition_index), p.committed_offset);
                }
            }
        }
        Ok(out)
    }

    /// Set a group's offsets (the group must have no active members).
    pub async fn alter_group_offsets(&self, group: &str, offsets: &[(String, i32, i64)]) -> Result<()> {
        let b = self.cluster.find_coordinator(0, group).await?;
        let mut r = OffsetCommitRequest::default();
        r.group_id = GroupId(sb(group));
        r.generation_id_or_member_epoch = -1;
        r.retention_time_ms = -1;
        r.topics = crate::consumer::group::offset_commit_topics(offsets);
        let ResponseKind::OffsetCommit(c) = self.call(&b, ApiKey::OffsetCommit, RequestKind::OffsetCommit(r)).await?
        else {
            return Err(unexpected("OffsetCommit"));
        };
        for t in &c.topics {
            for p in &t.partitions {
                Error::check(p.error_code, format!("set offset of {group} on {}-{}", &*t.name.0, p.partition_index))?;
            }
        }
        Ok(())
    }

    /// Delete a group's offsets for partitions of topics it no longer consumes.
    pub async fn delete_group_offsets(&self, group: &str, tps: &[TopicPartition]) -> Result<()> {
        let b = self.cluster.find_coordinator(0, group).await?;
        let mut r = OffsetDeleteRequest::default();
        r.group_id = GroupId(sb(group));
        r.topics = by_topic(tps.iter().cloned())
            .into_iter()
            .map(|(t, parts)| {
                let mut x = offset_delete_request::OffsetDeleteRequestTopic::default();
                x.name = TopicName(sb(&t));
                x.partitions = parts
                    .into_iter()
                    .map(|p| {
                        let mut op = offset_delete_request::OffsetDeleteRequestPartition::default();
                        op.partition_index = p;
                        op
                    })
                    .collect();
                x
            })
            .collect();
        let ResponseKind::OffsetDelete(d) = self.call(&b, ApiKey::OffsetDelete, RequestKind::OffsetDelete(r)).await?
        else {
            return Err(unexpected("OffsetDelete"));
        };
        Error::check(d.error_code, format!("delete offsets of {group}"))?;
        for t in &d.topics {
            for p in &t.partitions {
                Error::check(
                    p.error_code,
                    format!("delete offset of {group} on {}-{}", &*t.name.0, p.partition_index),
                )?;
            }
        }
        Ok(())
    }

    /// Transactions known to the coordinators.
    pub async fn list_transactions(&self) -> Result<Vec<TransactionListing>> {
        let b = self.any().await?;
        let ResponseKind::ListTransactions(l) = self
            .call(&b, ApiKey::ListTransactions, RequestKind::ListTransactions(ListTransactionsRequest::default()))
            .await?
        else {
            return Err(unexpected("ListTransactions"));
        };
        Error::check(l.error_code, "list transactions")?;
        let mut v: Vec<TransactionListing> = l
            .transaction_states
            .iter()
            .map(|t| TransactionListing {
                transactional_id: t.transactional_id.0.to_string(),
                producer_id: t.producer_id.0,
                state: t.transaction_state.to_string(),
            })
            .collect();
        v.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        Ok(v)
    }

    /// One transactional id's state.
    pub async fn describe_transaction(&self, id: &str) -> Result<TransactionDescription> {
        let b = self.cluster.find_coordinator(1, id).await?;
        let mut r = DescribeTransactionsRequest::default();
        r.transactional_ids = vec![TransactionalId(sb(id))];
        let ResponseKind::DescribeTransactions(d) =
            self.call(&b, ApiKey::DescribeTransactions, RequestKind::DescribeTransactions(r)).await?
        else {
            return Err(unexpected("DescribeTransactions"));
        };
        let t = d.transaction_states.into_iter().next().ok_or_else(|| unexpected("DescribeTransactions"))?;
        Error::check(t.error_code, format!("describe transaction {id}"))?;
        Ok(TransactionDescription {
            transactional_id: id.to_string(),
            state: t.transaction_state.to_string(),
            producer_id: t.producer_id.0,
            producer_epoch: t.producer_epoch,
            timeout_ms: t.transaction_timeout_ms,
            start_time_ms: t.transaction_start_time_ms,
            partitions: t
                .topics
                .iter()
                .flat_map(|x| x.partitions.iter().map(move |p| (x.topic.0.to_string(), *p)))
                .collect(),
            prepared_ms: t
                .unknown_tagged_fields
                .get(&sluice_protocol::api::TXN_LIVENESS_TAG)
                .and_then(|b| Some(i64::from_be_bytes(b.get(..8)?.try_into().ok()?))),
        })
    }

    /// Force-terminate a transactional id's transaction (KIP-939's `forceTerminateTransaction`,
    /// for prepared transactions an external coordinator lost): InitProducerId with `Enable2Pc`
    /// and not `KeepPreparedTxn`, so the coordinator aborts any ongoing transaction (prepared
    /// or not) and bumps the epoch, fencing every instance of the producer. Needs
    /// `transaction.two.phase.commit.enable` on the broker and the TwoPhaseCommit and Write
    /// permissions on the id. The producer id and its new epoch.
    pub async fn force_terminate_transaction(&self, id: &str) -> Result<(i64, i16)> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let b = self.cluster.find_coordinator(1, id).await?;
            if b.version(ApiKey::InitProducerId)? < 6 {
                return Err(Error::kafka(
                    ResponseError::UnsupportedVersion,
                    "force-terminating a transaction needs InitProducerId v6 (KIP-939)",
                ));
            }
            let mut r = InitProducerIdRequest::default();
            r.transactional_id = Some(TransactionalId(sb(id)));
            r.transaction_timeout_ms = i32::MAX;
            r.enable_2_pc = true;
            r.keep_prepared_txn = false;
            let ResponseKind::InitProducerId(a) =
                self.call(&b, ApiKey::InitProducerId, RequestKind::InitProducerId(r)).await?
            else {
                return Err(unexpected("InitProducerId"));
            };
            let code = ResponseError::try_from_code(a.error_code);
            // the abort is being completed, or the coordinator moved: ask again
            let again = matches!(
                code,
                Some(
                    ResponseError::ConcurrentTransactions
                        | ResponseError::NotCoordinator
                        | ResponseError::CoordinatorLoadInProgress
                        | ResponseError::CoordinatorNotAvailable
                )
            );
            if !again || std::time::Instant::now() >= deadline {
                Error::check(a.error_code, format!("force-terminate transaction {id}"))?;
                return Ok((a.producer_id.0, a.producer_epoch));
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// Producers with state on a partition (for finding hanging transactions).
    pub async fn describe_producers(&self, topic: &str, partition: i32) -> Result<Vec<ProducerState>> {
        let leader = self.cluster.leader(topic, partition).await?;
        let b = self.cluster.broker(leader, Lane::Data).await?;
        let mut t = describe_producers_request::TopicRequest::default();
        t.name = TopicName(sb(topic));
        t.partition_indexes = vec![partition];
        let mut r = DescribeProducersRequest::default();
        r.topics = vec![t];
        let ResponseKind::DescribeProducers(d) =
            self.call(&b, ApiKey::DescribeProducers, RequestKind::DescribeProducers(r)).await?
        else {
            return Err(unexpected("DescribeProducers"));
        };
        let mut out = Vec::new();
        for t in &d.topics {
            for p in &t.partitions {
                check_msg(
                    p.error_code,
                    p.error_message.as_ref(),
                    format!("describe producers of {topic}-{partition}"),
                )?;
                out.extend(p.active_producers.iter().map(|s| ProducerState {
                    producer_id: s.producer_id.0,
                    producer_epoch: s.producer_epoch,
                    last_sequence: s.last_sequence,
                    last_timestamp: s.last_timestamp,
                    coordinator_epoch: s.coordinator_epoch,
                    current_txn_start_offset: s.current_txn_start_offset,
                }));
            }
        }
        Ok(out)
    }

    /// Abort a hanging transaction on one partition by writing its ABORT marker (what
    /// `kafka-transactions.sh abort` does). Take the producer's id, epoch and coordinator
    /// epoch from [`Admin::describe_producers`].
    pub async fn abort_transaction(
        &self,
        topic: &str,
        partition: i32,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
    ) -> Result<()> {
        let leader = self.cluster.leader(topic, partition).await?;
        let b = self.cluster.broker(leader, Lane::Data).await?;
        let mut t = write_txn_markers_request::WritableTxnMarkerTopic::default();
        t.name = TopicName(sb(topic));
        t.partition_indexes = vec![partition];
        let mut m = write_txn_markers_request::WritableTxnMarker::default();
        m.producer_id = ProducerId(producer_id);
        m.producer_epoch = producer_epoch;
        m.transaction_result = false;
        m.coordinator_epoch = coordinator_epoch;
        m.topics = vec![t];
        let mut r = WriteTxnMarkersRequest::default();
        r.markers = vec![m];
        let ResponseKind::WriteTxnMarkers(w) =
            self.call(&b, ApiKey::WriteTxnMarkers, RequestKind::WriteTxnMarkers(r)).await?
        else {
            return Err(unexpected("WriteTxnMarkers"));
        };
        for m in &w.markers {
            for t in &m.topics {
                for p in &t.partitions {
                    Error::check(p.error_code, format!("abort marker on {topic}-{partition}"))?;
                }
            }
        }
        Ok(())
    }

    /// Cluster id, controller and brokers.
    pub async fn describe_cluster(&self) -> Result<ClusterDescription> {
        let b = self.any().await?;
        let ResponseKind::DescribeCluster(d) = self
            .call(&b, ApiKey::DescribeCluster, RequestKind::DescribeCluster(DescribeClusterRequest::default()))
            .await?
        else {
            return Err(unexpected("DescribeCluster"));
        };
        check_msg(d.error_code, d.error_message.as_ref(), "describe cluster")?;
        Ok(ClusterDescription {
            cluster_id: d.cluster_id.to_string(),
            controller_id: d.controller_id.0,
            brokers: d.brokers.iter().map(|b| (b.broker_id.0, b.host.to_string(), b.port)).collect(),
        })
    }
}
