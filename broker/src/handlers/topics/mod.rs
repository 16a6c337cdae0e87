//! Topic APIs, one file each: CreateTopics, DeleteTopics, CreatePartitions. Each file holds its
//! API's answer and its ACL rule (`acl`); this module, what they share.

use super::{sb, topic_name};
use crate::config::Config;
use crate::topics::TopicError;
use crate::topics::TopicRegistry;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::{CreatableTopicConfigs, CreatableTopicResult};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest,
    DeleteTopicsResponse,
};
use std::collections::BTreeMap;
use std::sync::Arc;

pub mod create_partitions;
pub mod create_topics;
pub mod delete_topics;

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
fn replication_factor(topics: &TopicRegistry, topic: &crate::topics::Topic) -> i16 {
    let n = topics
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
