//! WriteTxnMarkers (v1): write COMMIT/ABORT markers to partitions, closing a producer's open
//! transaction there. Sent by a transaction coordinator, and by operators aborting a hanging
//! transaction (`kafka-transactions abort`, `sluicectl transactions abort`). Refused for an older
//! producer epoch (INVALID_PRODUCER_EPOCH) or coordinator epoch (TRANSACTION_COORDINATOR_FENCED).
//! Answered once every marker is durable.

use super::{now_ms, LaterReply, Reply};
use crate::error_map;
use crate::group::GroupCoordinator;
use crate::partition::producer_state::MarkerHeader;
use crate::partition_handle::MarkerWrite;
use crate::topics::TopicRegistry;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{ResponseKind, WriteTxnMarkersRequest, WriteTxnMarkersResponse};

enum Staged {
    Error(i16),
    /// Written here, or proposed to the partition's Raft group (`PartitionHandle`).
    Marker(MarkerWrite),
    /// A marker on the offsets log: pending transactional offsets completed.
    Offsets(Option<crate::coordinator::ShardWrite>),
}

pub fn handle(groups: &GroupCoordinator, registry: &TopicRegistry, req: WriteTxnMarkersRequest) -> Reply {
    let now = now_ms();
    let mut staged = Vec::new();
    for m in req.markers {
        let header = MarkerHeader {
            epoch: m.producer_epoch,
            coordinator_epoch: m.coordinator_epoch,
            commit: m.transaction_result,
            timestamp: now,
        };
        let mut topics = Vec::new();
        for t in m.topics {
            if t.name.as_str() == crate::group::OFFSETS_TOPIC {
                let parts = t
                    .partition_indexes
                    .iter()
                    .map(|&index| {
                        let s =
                            match groups.complete_txn_in_partition(index, m.producer_id.0, m.transaction_result, now) {
                                Ok(w) => Staged::Offsets(w),
                                Err(e) => Staged::Error(error_map::group_code(e)),
                            };
                        (index, s)
                    })
                    .collect();
                topics.push((t.name, parts));
                continue;
            }
            let mut parts = Vec::new();
            for index in t.partition_indexes {
                let s = match registry.handle(&t.name, index) {
                    Err(why) => Staged::Error(error_map::unwritable_code(why)),
                    Ok(h) => match h.write_marker(m.producer_id.0, &header, now) {
                        Ok(w) => Staged::Marker(w),
                        Err(e) => Staged::Error(error_map::write_refused_code(&e)),
                    },
                };
                parts.push((index, s));
            }
            topics.push((t.name, parts));
        }
        staged.push((m.producer_id, topics));
    }
    let fut: LaterReply = Box::pin(async move {
        let mut resp = WriteTxnMarkersResponse::default();
        for (pid, topics) in staged {
            let mut mr = WritableTxnMarkerResult::default();
            mr.producer_id = pid;
            for (name, parts) in topics {
                let mut tr = WritableTxnMarkerTopicResult::default();
                tr.name = name;
                for (index, s) in parts {
                    let mut pr = WritableTxnMarkerPartitionResult::default();
                    pr.partition_index = index;
                    pr.error_code = match s {
                        Staged::Error(code) => code,
                        Staged::Marker(w) => match w.wait(std::time::Duration::from_secs(10)).await {
                            Ok(()) => 0,
                            Err(e) => error_map::write_refused_code(&e),
                        },
                        Staged::Offsets(None) => 0,
                        Staged::Offsets(Some(w)) => match crate::group::wait_durable(w).await {
                            Ok(()) => 0,
                            Err(_) => ResponseError::CoordinatorNotAvailable.code(),
                        },
                    };
                    tr.partitions.push(pr);
                }
                mr.topics.push(tr);
            }
            resp.markers.push(mr);
        }
        ResponseKind::WriteTxnMarkers(resp)
    });
    Reply::Later(fut)
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied
/// before the handler by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn authorize(c: &Authz<'_>, r: &mut WriteTxnMarkersRequest, _version: i16) -> Gate {
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
                                let mut pr = write_txn_markers_response::WritableTxnMarkerPartitionResult::default();
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
}
