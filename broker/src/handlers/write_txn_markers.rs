//! WriteTxnMarkers (v1): write COMMIT/ABORT markers to partitions, closing a producer's open
//! transaction there. Sent by a transaction coordinator, and by operators aborting a hanging
//! transaction (`kafka-transactions abort`, `sluicectl transactions abort`). Refused for an older
//! producer epoch (INVALID_PRODUCER_EPOCH) or coordinator epoch (TRANSACTION_COORDINATOR_FENCED).
//! Answered once every marker is durable.

use super::{now_ms, LaterReply, Reply};
use crate::error_map;
use crate::partition::producer_state::MarkerHeader;
use crate::partition::{AppendError, Partition};
use crate::services::Services;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{ResponseKind, WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use std::sync::Arc;

enum Staged {
    Error(i16),
    Written {
        partition: Arc<Partition>,
        end: i64,
        sync: bool,
    },
    /// A marker on the offsets log: pending transactional offsets completed.
    Offsets(Option<crate::kvlog::LogWait>),
    /// Proposed to a replicated partition's Raft group.
    Replicated(crate::cluster::replica::PendingWrite),
}

pub fn handle(state: &Services, req: WriteTxnMarkersRequest) -> Reply {
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
                        let s = match state.groups.complete_txn_in_partition(
                            index,
                            m.producer_id.0,
                            m.transaction_result,
                            now,
                        ) {
                            Ok(w) => Staged::Offsets(w),
                            Err(e) => Staged::Error(e.code()),
                        };
                        (index, s)
                    })
                    .collect();
                topics.push((t.name, parts));
                continue;
            }
            let topic = state.topics.topic(&t.name);
            let mut parts = Vec::new();
            for index in t.partition_indexes {
                let replica = state.topics.replica(&t.name, index);
                let s = match topic.as_ref().and_then(|tp| tp.partition(index)) {
                    None => Staged::Error(ResponseError::UnknownTopicOrPartition.code()),
                    Some(_) if replica.is_some() => {
                        let cmd = crate::replication::types::PartCommand::Marker {
                            producer_id: m.producer_id.0,
                            epoch: m.producer_epoch,
                            coordinator_epoch: m.coordinator_epoch,
                            commit: m.transaction_result,
                            now_ms: now,
                        };
                        match replica.as_ref().map(|r| r.propose(cmd)) {
                            Some(Ok(w)) => Staged::Replicated(w),
                            Some(Err(e)) => Staged::Error(error_map::write_error_code(&e)),
                            None => Staged::Error(ResponseError::UnknownTopicOrPartition.code()),
                        }
                    }
                    Some(p) => match p.write_marker(m.producer_id.0, &header, now) {
                        Ok(w) => Staged::Written { partition: p.clone(), end: w.offset + 1, sync: w.sync },
                        Err(AppendError::Refused(r)) => Staged::Error(error_map::refusal_code(&r)),
                        Err(AppendError::Storage(e)) => Staged::Error(error_map::storage_produce_code(&e)),
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
                        Staged::Replicated(w) => match w.wait(std::time::Duration::from_secs(10)).await {
                            Ok(r) => error_map::part_result_error(&r).map_or(0, |(code, _)| code),
                            Err(e) => error_map::write_error_code(&e),
                        },
                        Staged::Offsets(None) => 0,
                        Staged::Offsets(Some(w)) => match crate::group::wait_durable(w).await {
                            Ok(()) => 0,
                            Err(_) => ResponseError::CoordinatorNotAvailable.code(),
                        },
                        Staged::Written { partition, end, sync } => match partition.wait_durable_async(end, sync).await
                        {
                            Ok(()) => 0,
                            Err(e) => error_map::storage_produce_code(&e),
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
