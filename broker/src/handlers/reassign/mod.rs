//! Reassignment APIs, one file each: AlterPartitionReassignments (v0–1),
//! ListPartitionReassignments (v0), as `kafka-reassign-partitions` uses them, and
//! UnregisterBroker. Each file holds its API's answer and its ACL rule (`acl`).

use super::{sb, topic_name};
use crate::topics::TopicRegistry;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::*;
use std::sync::Arc;

pub mod alter_partition_reassignments;
pub mod list_partition_reassignments;
pub mod unregister_broker;
