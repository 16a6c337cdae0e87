//! DeleteRecords: advance a partition's log start offset (offset -1 means the high watermark).
//! A replicated partition's leader proposes it through the partition's Raft group, so every
//! replica moves its log start and deletes the segments below it (issue 19: retention trims
//! every replica).

use crate::error_map;
use crate::partition_handle::PartitionHandle;
use crate::replication::types::{PartCommand, PartResult};
use crate::topics::TopicRegistry;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
use std::sync::Arc;
use std::time::Duration;

pub async fn handle(topics: &Arc<TopicRegistry>, req: DeleteRecordsRequest) -> DeleteRecordsResponse {
    // at least a second: a client sending 0 still gets the change made (Kafka would answer
    // REQUEST_TIMED_OUT unless every replica had already moved)
    let timeout = Duration::from_millis(u64::try_from(req.timeout_ms).unwrap_or(0).max(1000));
    let mut resp = DeleteRecordsResponse::default();
    for t in req.topics {
        let mut tr = DeleteRecordsTopicResult::default();
        tr.name = t.name.clone();
        for p in t.partitions {
            let mut pr = DeleteRecordsPartitionResult::default();
            pr.partition_index = p.partition_index;
            pr.low_watermark = -1;
            match topics.handle(&t.name.0, p.partition_index) {
                Err(why) => pr.error_code = error_map::unwritable_code(why),
                Ok(PartitionHandle::Local(part)) => {
                    let answer = tokio::task::spawn_blocking(move || {
                        let mut log = part.log();
                        let target = if p.offset == -1 { log.high_watermark() } else { p.offset };
                        log.delete_records(target)
                    })
                    .await;
                    match answer {
                        Ok(Ok(low)) => pr.low_watermark = low,
                        Ok(Err(e)) => pr.error_code = error_map::storage_read_code(&e),
                        Err(_) => pr.error_code = ResponseError::UnknownServerError.code(),
                    }
                }
                Ok(PartitionHandle::Replicated { partition, replica }) => {
                    let hw = partition.high_watermark();
                    let target = if p.offset == -1 { hw } else { p.offset };
                    if !(0..=hw).contains(&target) {
                        pr.error_code = ResponseError::OffsetOutOfRange.code();
                    } else {
                        let written = match replica.propose(PartCommand::DeleteRecords { offset: target }) {
                            Ok(w) => w.wait(timeout).await,
                            Err(e) => Err(e),
                        };
                        match written {
                            Ok(PartResult::LogStart(low)) => pr.low_watermark = low,
                            Ok(other) => {
                                pr.error_code = error_map::part_result_error(&other)
                                    .map_or(ResponseError::UnknownServerError.code(), |(c, _)| c)
                            }
                            Err(e) => pr.error_code = error_map::write_error_code(&e),
                        }
                    }
                }
            }
            tr.partitions.push(pr);
        }
        resp.topics.push(tr);
    }
    resp
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied
/// before the handler by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn authorize(c: &Authz<'_>, r: &mut DeleteRecordsRequest, _version: i16) -> Gate {
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
}
