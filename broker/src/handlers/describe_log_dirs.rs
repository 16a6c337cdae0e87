//! DescribeLogDirs: this broker's log directory, the partitions in it and their sizes (and, in
//! a tagged field of Sluice's, a compacted partition's dirty ratio and last cleaning).

use super::{sb, topic_name};
use crate::topics::TopicRegistry;
use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse};
use std::sync::Arc;

fn disk_bytes(path: &std::path::Path) -> (i64, i64) {
    let total = fs4::total_space(path).map(|b| b as i64).unwrap_or(-1);
    let usable = fs4::available_space(path).map(|b| b as i64).unwrap_or(-1);
    (total, usable)
}

pub fn describe_log_dirs(topics: &Arc<TopicRegistry>, req: DescribeLogDirsRequest) -> DescribeLogDirsResponse {
    let mut resp = DescribeLogDirsResponse::default();
    let mut dir = DescribeLogDirsResult::default();
    let abs = std::fs::canonicalize(topics.data_dir()).unwrap_or_else(|_| topics.data_dir().to_path_buf());
    dir.log_dir = sb(&abs.to_string_lossy());
    let (total, usable) = disk_bytes(&abs);
    dir.total_bytes = total;
    dir.usable_bytes = usable;
    let wanted: Option<Vec<(String, Vec<i32>)>> =
        req.topics.map(|ts| ts.into_iter().map(|t| (t.topic.0.to_string(), t.partitions)).collect());
    for topic in topics.topics() {
        let parts: Vec<i32> = match &wanted {
            None => topic.partitions.iter().map(|p| p.index).collect(),
            Some(w) => match w.iter().find(|(n, _)| *n == topic.name) {
                Some((_, ps)) => ps.clone(),
                None => continue,
            },
        };
        let mut t = DescribeLogDirsTopic::default();
        t.name = topic_name(&topic.name);
        for idx in parts {
            let Some(p) = topic.partition(idx) else { continue };
            let mut dp = DescribeLogDirsPartition::default();
            dp.partition_index = idx;
            dp.partition_size = p.log().size_bytes() as i64;
            dp.offset_lag = 0;
            if let Some(c) = p.cleaning_status(crate::clock::now_ms()) {
                let state = sluice_protocol::api::encode_cleaner_state(c.dirty_ratio, c.last_cleaned_ms);
                dp.unknown_tagged_fields.insert(sluice_protocol::api::CLEANER_STATE_TAG, state);
            }
            t.partitions.push(dp);
        }
        dir.topics.push(t);
    }
    resp.results = vec![dir];
    resp
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn describe_log_dirs(c: &Authz<'_>, _r: &mut DescribeLogDirsRequest, _version: i16) -> Gate {
        if c.cluster(Op::Describe) {
            return Gate::Pass;
        }
        let mut x = DescribeLogDirsResponse::default();
        x.error_code = E::ClusterAuthorizationFailed.code();
        Gate::Deny(Box::new(ResponseKind::DescribeLogDirs(x)))
    }
}
