//! DeleteRecords: advance a partition's log start offset (offset -1 means the high watermark).

use crate::error_map;
use crate::topics::TopicRegistry;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
use std::sync::Arc;

pub fn handle(topics: &Arc<TopicRegistry>, req: DeleteRecordsRequest) -> DeleteRecordsResponse {
    let mut resp = DeleteRecordsResponse::default();
    for t in req.topics {
        let topic = topics.topic(&t.name.0);
        let mut tr = DeleteRecordsTopicResult::default();
        tr.name = t.name.clone();
        for p in t.partitions {
            let mut pr = DeleteRecordsPartitionResult::default();
            pr.partition_index = p.partition_index;
            pr.low_watermark = -1;
            match topic.as_ref().and_then(|t| t.partition(p.partition_index)) {
                None => pr.error_code = ResponseError::UnknownTopicOrPartition.code(),
                Some(part) => {
                    let mut log = part.log();
                    let target = if p.offset == -1 { log.high_watermark() } else { p.offset };
                    match log.delete_records(target) {
                        Ok(low) => pr.low_watermark = low,
                        Err(e) => pr.error_code = error_map::storage_read_code(&e),
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
