//! CreateTopics, DeleteTopics, CreatePartitions.

use super::{sb, topic_name};
use crate::services::Services;
use crate::topics::TopicError;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::{CreatableTopicConfigs, CreatableTopicResult};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest,
    DeleteTopicsResponse,
};
use std::collections::BTreeMap;

pub fn topic_error_code(e: &TopicError) -> i16 {
    match e {
        TopicError::Exists(_) => ResponseError::TopicAlreadyExists.code(),
        TopicError::Unknown(_) => ResponseError::UnknownTopicOrPartition.code(),
        TopicError::InvalidName(..) => ResponseError::InvalidTopicException.code(),
        TopicError::InvalidPartitions(_) => ResponseError::InvalidPartitions.code(),
        TopicError::InvalidReplicationFactor(_) | TopicError::ReplicationFactorTooLarge(..) => {
            ResponseError::InvalidReplicationFactor.code()
        }
        TopicError::InvalidConfig(..) => ResponseError::InvalidConfig.code(),
        TopicError::InvalidReplicaAssignment(_) => ResponseError::InvalidReplicaAssignment.code(),
        TopicError::InvalidRequest(_) => ResponseError::InvalidRequest.code(),
        TopicError::Storage(e) => crate::error_map::storage_produce_code(e),
        TopicError::Cluster(_) => ResponseError::NotController.code(),
        TopicError::TimedOut(_) => ResponseError::RequestTimedOut.code(),
    }
}

/// A topic's replication factor: its first partition's replica count (one on a single broker).
fn replication_factor(state: &Services, topic: &crate::topics::Topic) -> i16 {
    let n = state
        .topics
        .cluster
        .get()
        .and_then(|c| c.image().topics.get(&topic.name).and_then(|i| i.replicas.first().map(Vec::len)));
    n.and_then(|n| i16::try_from(n).ok()).unwrap_or(1)
}

/// A CreateTopics manual assignment in partition order, with Kafka's checks of its shape.
fn assignment(
    t: &kafka_protocol::messages::create_topics_request::CreatableTopic,
) -> Result<Vec<Vec<i32>>, TopicError> {
    if t.num_partitions != -1 {
        return Err(TopicError::InvalidRequest(
            "A manual partition assignment was specified, but numPartitions was not set to -1.".into(),
        ));
    }
    if t.replication_factor != -1 {
        return Err(TopicError::InvalidRequest(
            "A manual partition assignment was specified, but replicationFactor was not set to -1.".into(),
        ));
    }
    let mut by_index: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for a in &t.assignments {
        by_index.insert(a.partition_index, a.broker_ids.iter().map(|b| b.0).collect());
    }
    if by_index.len() != t.assignments.len() || by_index.keys().copied().ne(0..by_index.len() as i32) {
        return Err(TopicError::InvalidReplicaAssignment(
            "Partitions should be a consecutive 0-based integer sequence.".into(),
        ));
    }
    Ok(by_index.into_values().collect())
}

pub async fn create(state: &Services, req: CreateTopicsRequest) -> CreateTopicsResponse {
    let mut resp = CreateTopicsResponse::default();
    let mut names_seen = BTreeMap::new();
    // every topic is proposed first, then all are waited for: in cluster mode their replica
    // groups start and elect together (librdkafka's 0081 creates ~100 replicated partitions in
    // one request, answered within its 10 s timeout only so)
    let mut proposed = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let name = t.name.0.to_string();
        let mut r = CreatableTopicResult::default();
        r.name = t.name.clone();
        r.num_partitions = -1;
        r.replication_factor = -1;
        if names_seen.insert(name.clone(), ()).is_some() {
            r.error_code = ResponseError::InvalidRequest.code();
            r.error_message = Some(sb("topic named twice in one request"));
            resp.topics.push(r);
            continue;
        }
        let mut configs = BTreeMap::new();
        let mut bad = None;
        for c in &t.configs {
            match &c.value {
                Some(v) => {
                    configs.insert(c.name.to_string(), v.to_string());
                }
                None => bad = Some(format!("config {} has no value", &*c.name)),
            }
        }
        let result = match bad {
            Some(m) => Err(TopicError::InvalidConfig("request".into(), m)),
            None if !t.assignments.is_empty() => match assignment(&t) {
                Ok(a) => state.topics.propose_topic_assigned(&name, a, configs, req.validate_only).await,
                Err(e) => Err(e),
            },
            None => {
                state
                    .topics
                    .propose_topic(&name, t.num_partitions, t.replication_factor, configs, req.validate_only)
                    .await
            }
        };
        proposed.push((t, r, result));
    }
    for (t, mut r, result) in proposed {
        let created = match result {
            Ok(p) => state.topics.await_created(p).await,
            Err(e) => Err(e),
        };
        match created {
            Ok(topic) => {
                r.topic_id = topic.id;
                r.num_partitions = if t.num_partitions == -1 { state.config.num_partitions } else { t.num_partitions };
                r.replication_factor = replication_factor(state, &topic);
                // Kafka (v5+): every config of the new topic, as DescribeConfigs gives it
                let all = super::configs::describe_topic(state, &topic.configs, &|_| true, false, false);
                r.configs = Some(
                    all.into_iter()
                        .map(|d| {
                            let mut c = CreatableTopicConfigs::default();
                            c.name = d.name;
                            c.value = d.value;
                            c.read_only = d.read_only;
                            c.config_source = d.config_source;
                            c.is_sensitive = d.is_sensitive;
                            c
                        })
                        .collect(),
                );
            }
            Err(e) => {
                r.error_code = topic_error_code(&e);
                r.error_message = Some(sb(&e.to_string()));
            }
        }
        resp.topics.push(r);
    }
    resp
}

pub async fn delete(state: &Services, req: DeleteTopicsRequest) -> DeleteTopicsResponse {
    let mut resp = DeleteTopicsResponse::default();
    let mut targets: Vec<(Option<String>, uuid::Uuid)> =
        req.topic_names.iter().map(|n| (Some(n.0.to_string()), uuid::Uuid::nil())).collect();
    targets.extend(req.topics.iter().map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id)));
    for (name, id) in targets {
        let mut r = DeletableTopicResult::default();
        r.topic_id = id;
        let resolved = match &name {
            Some(n) => Some(n.clone()),
            None => state.topics.topic_by_id(id).map(|t| t.name.clone()),
        };
        r.name = resolved.as_deref().map(topic_name);
        match resolved {
            None => r.error_code = ResponseError::UnknownTopicId.code(),
            Some(n) => {
                if let Some(t) = state.topics.topic(&n) {
                    r.topic_id = t.id;
                }
                if let Err(e) = state.topics.delete_topic(&n).await {
                    r.error_code = topic_error_code(&e);
                    r.error_message = Some(sb(&e.to_string()));
                }
            }
        }
        resp.responses.push(r);
    }
    resp
}

pub async fn create_partitions(state: &Services, req: CreatePartitionsRequest) -> CreatePartitionsResponse {
    let mut resp = CreatePartitionsResponse::default();
    for t in req.topics {
        let mut r = CreatePartitionsTopicResult::default();
        r.name = t.name.clone();
        let result = match t.assignments.as_ref().filter(|a| !a.is_empty()) {
            Some(a) => {
                let lists = a.iter().map(|x| x.broker_ids.iter().map(|b| b.0).collect()).collect();
                state.topics.create_partitions_assigned(&t.name.0, t.count, lists, req.validate_only).await
            }
            None => state.topics.create_partitions(&t.name.0, t.count, req.validate_only).await,
        };
        if let Err(e) = result {
            r.error_code = topic_error_code(&e);
            r.error_message = Some(sb(&e.to_string()));
        }
        resp.results.push(r);
    }
    resp
}

/// This file's APIs' authorization rules (Kafka's ACLs, as `KafkaApis` checks them), applied
/// before the handler by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn create_topics(c: &Authz<'_>, r: &mut CreateTopicsRequest, _version: i16) -> Gate {
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

    pub fn delete_topics(c: &Authz<'_>, r: &mut DeleteTopicsRequest, _version: i16) -> Gate {
        let name_of = |t: &delete_topics_request::DeleteTopicState| -> Option<String> {
            match &t.name {
                Some(n) => Some(n.to_string()),
                None => c.state.topics.topic_by_id(t.topic_id).map(|t| t.name.clone()),
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

    pub fn create_partitions(c: &Authz<'_>, r: &mut CreatePartitionsRequest, _version: i16) -> Gate {
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
}
