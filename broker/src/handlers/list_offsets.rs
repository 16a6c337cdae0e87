//! ListOffsets: earliest (-2), latest (-1: high watermark, or LSO for read_committed), max
//! timestamp (-3), or the first offset whose timestamp is ≥ the given one.

use crate::error_map;
use crate::topics::TopicRegistry;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use std::sync::Arc;

pub const EARLIEST: i64 = -2;
pub const LATEST: i64 = -1;
pub const MAX_TIMESTAMP: i64 = -3;

pub fn handle(topics: &Arc<TopicRegistry>, version: i16, req: ListOffsetsRequest) -> ListOffsetsResponse {
    let read_committed = req.isolation_level == 1;
    // replica id -2 (debugging): this replica's own log end, leader or not
    let debugging = req.replica_id.0 == -2;
    let mut resp = ListOffsetsResponse::default();
    for t in req.topics {
        let topic = topics.topic(&t.name.0);
        let mut tr = ListOffsetsTopicResponse::default();
        tr.name = t.name.clone();
        for p in t.partitions {
            let mut pr = ListOffsetsPartitionResponse::default();
            pr.partition_index = p.partition_index;
            pr.timestamp = -1;
            pr.offset = -1;
            // (v4+) the leader epoch: for the end, the current one (a replicated partition's
            // Raft term, as Metadata answers it); for an offset looked up, the epoch of its
            // batch — known without a read only where every batch's is 0 (no Raft group); a
            // replicated partition answers -1 there (unknown, as Kafka does without an epoch
            // cache entry: clients then skip validating it)
            if version >= 4 {
                pr.leader_epoch = match topics.replica_term(&t.name.0, p.partition_index) {
                    Some(term) if p.timestamp == LATEST => term,
                    Some(_) => -1,
                    None => 0,
                };
            }
            match topic.as_ref().and_then(|t| t.partition(p.partition_index)) {
                None => pr.error_code = ResponseError::UnknownTopicOrPartition.code(),
                // a leader just elected: its high watermark may be below the previous leader's
                // until it applies an entry of its term, and a client comparing its position
                // with the end answered would take records as lost (franz-go did). Kafka
                // answers OFFSET_NOT_AVAILABLE then (KIP-207), which clients retry
                Some(_)
                    if !debugging
                        && p.timestamp != EARLIEST
                        && topics.leader_unsettled(&t.name.0, p.partition_index) =>
                {
                    pr.error_code = ResponseError::OffsetNotAvailable.code()
                }
                Some(part) => {
                    let log = part.log();
                    // read_committed sees offsets below the LSO only
                    let bound = if debugging {
                        log.log_end_offset()
                    } else if read_committed {
                        part.last_stable_offset_of(&log)
                    } else {
                        log.high_watermark()
                    };
                    match p.timestamp {
                        EARLIEST => pr.offset = log.log_start_offset(),
                        LATEST => pr.offset = bound,
                        // as Kafka's `fetchOffsetForTimestamp`: only an offset the isolation
                        // level may read (an open transaction's is not answered to read_committed)
                        // (the offset of the record with the newest timestamp, as Kafka 3.8+)
                        MAX_TIMESTAMP => match log.max_timestamp() {
                            Ok(Some((ts, off))) if off < bound => {
                                pr.timestamp = ts;
                                pr.offset = off;
                            }
                            Ok(_) => {}
                            Err(e) => pr.error_code = error_map::storage_read_code(&e),
                        },
                        ts if ts >= 0 => match log.offset_for_timestamp(ts) {
                            Ok(Some((off, found_ts))) => {
                                if off < bound {
                                    pr.offset = off;
                                    pr.timestamp = found_ts;
                                }
                            }
                            Ok(None) => {}
                            Err(e) => pr.error_code = error_map::storage_read_code(&e),
                        },
                        _ => pr.error_code = ResponseError::InvalidRequest.code(),
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

    pub fn authorize(c: &Authz<'_>, r: &mut ListOffsetsRequest, _version: i16) -> Gate {
        let denied = split_off(&mut r.topics, |t| c.topic(Op::Describe, &t.name));
        if denied.is_empty() {
            return Gate::Pass;
        }
        patch(
            move |resp: &mut ListOffsetsResponse| {
                for t in denied {
                    let parts = t.partitions.iter().map(|p| p.partition_index);
                    resp.topics.push(refuse::list_offsets_topic(
                        t.name.clone(),
                        parts,
                        E::TopicAuthorizationFailed.code(),
                    ));
                }
            },
            pick!(ListOffsets),
        )
    }
}

/// Its routing rule in a cluster (a partition's requests reach only its leader, a
/// key's only its coordinator), applied before the handler by `pipeline/route.rs`.
pub mod route {
    use crate::handlers::gate::prelude::*;
    use crate::handlers::gate::routing::*;
    use crate::routing::Router;

    pub fn list_offsets(router: &dyn Router, r: &mut ListOffsetsRequest, _version: i16) -> Gate {
        // replica id -2 (Kafka's "debugging" replica): any replica answers with its own log,
        // e.g. `sluicectl cluster describe` measuring each follower's lag
        if r.replica_id.0 == -2 {
            return Gate::Pass;
        }
        let mut moved: Vec<(TopicName, Vec<i32>)> = Vec::new();
        for t in r.topics.iter_mut() {
            let (keep, away): (Vec<_>, Vec<_>) = std::mem::take(&mut t.partitions)
                .into_iter()
                .partition(|p| !not_mine(router, &t.name, p.partition_index));
            t.partitions = keep;
            if !away.is_empty() {
                moved.push((t.name.clone(), away.iter().map(|p| p.partition_index).collect()));
            }
        }
        r.topics.retain(|t| !t.partitions.is_empty());
        if moved.is_empty() {
            return Gate::Pass;
        }
        patch_answer(move |resp| {
            if let ResponseKind::ListOffsets(resp) = resp {
                for (name, parts) in moved {
                    resp.topics.push(refuse::list_offsets_topic(name, parts, NOT_LEADER));
                }
            }
        })
    }
}
