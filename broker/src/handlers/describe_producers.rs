//! DescribeProducers (v0): the producer state each partition holds — id, epoch, last sequence,
//! last timestamp, coordinator epoch and the start of an open transaction (KIP-664 tooling).

use crate::topics::TopicRegistry;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_producers_response::{PartitionResponse, ProducerState, TopicResponse};
use kafka_protocol::messages::{DescribeProducersRequest, DescribeProducersResponse, ProducerId};
use std::sync::Arc;

pub fn handle(topics: &Arc<TopicRegistry>, req: DescribeProducersRequest) -> DescribeProducersResponse {
    let mut resp = DescribeProducersResponse::default();
    for t in req.topics {
        let topic = topics.topic(&t.name.0);
        let mut tr = TopicResponse::default();
        tr.name = t.name.clone();
        for idx in t.partition_indexes {
            let mut pr = PartitionResponse::default();
            pr.partition_index = idx;
            match topic.as_ref().and_then(|t| t.partition(idx)) {
                None => pr.error_code = ResponseError::UnknownTopicOrPartition.code(),
                Some(p) => {
                    let mut list = p.producer_entries();
                    list.sort_by_key(|(pid, _)| *pid);
                    pr.active_producers = list
                        .into_iter()
                        .map(|(pid, e)| {
                            let mut s = ProducerState::default();
                            s.producer_id = ProducerId(pid);
                            s.producer_epoch = i32::from(e.epoch);
                            s.last_sequence = e.batches.back().map(|b| b.last_seq).unwrap_or(-1);
                            s.last_timestamp = e.last_timestamp;
                            s.coordinator_epoch = e.coordinator_epoch;
                            s.current_txn_start_offset = e.txn_first_offset.unwrap_or(-1);
                            s
                        })
                        .collect();
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

    pub fn authorize(c: &Authz<'_>, r: &mut DescribeProducersRequest, _version: i16) -> Gate {
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
}
