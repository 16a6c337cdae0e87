//! Fetch: long poll honouring `max_wait_ms` and `min_bytes`, woken by high-watermark moves;
//! response and per-partition byte limits, with at least one whole batch for the first
//! partition that has data; isolation level carried through (read_committed stops at the LSO).
//!
//! Fetch sessions (KIP-227): this broker does not create sessions. A full fetch that asks for
//! a new session (`session_id` 0) is answered with session id 0, which tells clients to keep
//! sending full fetches; an incremental fetch is answered FETCH_SESSION_ID_NOT_FOUND.

use super::{LaterReply, Reply};
use crate::error_map;
use crate::topics::TopicRegistry;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{FetchRequest, FetchResponse, ResponseKind};
use std::sync::Arc;
use std::time::Duration;

/// Cap on `max_wait_ms` (a client asking for hours gets this).
pub const FETCH_WAIT_MS_MAX: u64 = 30_000;

struct Wanted {
    topic_index: usize,
    partition: i32,
    offset: i64,
    max_bytes: usize,
}

fn read_all(
    topics: &Arc<TopicRegistry>,
    req: &FetchRequest,
    version: i16,
    wanted: &[Wanted],
) -> (FetchResponse, usize, bool) {
    let read_committed = req.isolation_level == 1;
    let mut resp = FetchResponse::default();
    resp.session_id = 0;
    resp.responses = req
        .topics
        .iter()
        .map(|t| {
            let mut r = FetchableTopicResponse::default();
            r.topic = t.topic.clone();
            r.topic_id = t.topic_id;
            r
        })
        .collect();
    let response_max = if req.max_bytes <= 0 { i32::MAX as usize } else { req.max_bytes as usize };
    let mut total = 0usize;
    let mut any_error = false;
    for w in wanted {
        let t = &req.topics[w.topic_index];
        let topic = if version >= 13 { topics.topic_by_id(t.topic_id) } else { topics.topic(&t.topic.0) };
        let mut pd = PartitionData::default();
        pd.partition_index = w.partition;
        pd.high_watermark = -1;
        pd.last_stable_offset = -1;
        pd.log_start_offset = -1;
        pd.preferred_read_replica = kafka_protocol::messages::BrokerId(-1);
        let partition = topic.as_ref().and_then(|t| t.partition(w.partition));
        match partition {
            None => {
                pd.error_code = if version >= 13 && topic.is_none() {
                    ResponseError::UnknownTopicId.code()
                } else {
                    ResponseError::UnknownTopicOrPartition.code()
                };
                any_error = true;
            }
            Some(p) => {
                let budget = w.max_bytes.min(response_max.saturating_sub(total));
                match p.read(w.offset, budget, read_committed, total == 0) {
                    Ok(out) => {
                        pd.high_watermark = out.high_watermark;
                        pd.last_stable_offset = out.last_stable_offset;
                        pd.log_start_offset = out.log_start_offset;
                        if read_committed {
                            pd.aborted_transactions = Some(
                                out.aborted
                                    .iter()
                                    .map(|(pid, first)| {
                                        let mut a =
                                            kafka_protocol::messages::fetch_response::AbortedTransaction::default();
                                        a.producer_id = kafka_protocol::messages::ProducerId(*pid);
                                        a.first_offset = *first;
                                        a
                                    })
                                    .collect(),
                            );
                        }
                        total += out.records.len();
                        pd.records = Some(out.records);
                    }
                    Err(e) => {
                        pd.error_code = error_map::storage_read_code(&e);
                        let log = p.log();
                        pd.high_watermark = log.high_watermark();
                        pd.log_start_offset = log.log_start_offset();
                        drop(log);
                        pd.last_stable_offset = p.last_stable_offset();
                        any_error = true;
                    }
                }
            }
        }
        resp.responses[w.topic_index].partitions.push(pd);
    }
    (resp, total, any_error)
}

pub fn handle(topics: &Arc<TopicRegistry>, version: i16, req: FetchRequest) -> Reply {
    if version >= 7 && (req.session_id != 0 || req.session_epoch > 0) {
        let mut resp = FetchResponse::default();
        resp.error_code = ResponseError::FetchSessionIdNotFound.code();
        return Reply::now(ResponseKind::Fetch(resp));
    }
    let wanted: Vec<Wanted> = req
        .topics
        .iter()
        .enumerate()
        .flat_map(|(ti, t)| {
            t.partitions.iter().map(move |p| Wanted {
                topic_index: ti,
                partition: p.partition,
                offset: p.fetch_offset,
                max_bytes: p.partition_max_bytes.max(0) as usize,
            })
        })
        .collect();
    let topics = topics.clone();
    let fut: LaterReply = Box::pin(async move {
        let deadline =
            tokio::time::Instant::now() + Duration::from_millis((req.max_wait_ms.max(0) as u64).min(FETCH_WAIT_MS_MAX));
        let min_bytes = req.min_bytes.max(0) as usize;
        loop {
            // Register for wake-ups before reading, so an append between the read and the
            // wait is not missed.
            let notified = topics.hw_changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (resp, total, any_error) = read_all(&topics, &req, version, &wanted);
            if total >= min_bytes || any_error || wanted.is_empty() || tokio::time::Instant::now() >= deadline {
                return ResponseKind::Fetch(resp);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let (resp, _, _) = read_all(&topics, &req, version, &wanted);
                return ResponseKind::Fetch(resp);
            }
        }
    });
    Reply::Later(fut)
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied
/// before the handler by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn authorize(c: &Authz<'_>, r: &mut FetchRequest, version: i16) -> Gate {
        fetch(c, r, version)
    }

    fn fetch(c: &Authz<'_>, r: &mut FetchRequest, version: i16) -> Gate {
        let replica = if version >= 15 { r.replica_state.replica_id.0 } else { r.replica_id.0 };
        if replica >= 0 && !c.cluster(Op::ClusterAction) {
            let mut x = FetchResponse::default();
            x.error_code = E::ClusterAuthorizationFailed.code();
            return Gate::Deny(Box::new(ResponseKind::Fetch(x)));
        }
        let denied = split_off(&mut r.topics, |t| {
            let name = if version >= 13 {
                match c.topics.topic_by_id(t.topic_id) {
                    Some(t) => t.name.clone(),
                    None => return true, // the handler answers UNKNOWN_TOPIC_ID
                }
            } else {
                t.topic.to_string()
            };
            replica >= 0 || c.topic(Op::Read, &name)
        });
        if denied.is_empty() {
            return Gate::Pass;
        }
        patch(
            move |resp: &mut FetchResponse| {
                for t in denied {
                    let parts = t.partitions.iter().map(|p| p.partition);
                    resp.responses.push(refuse::fetch_topic(
                        t.topic.clone(),
                        t.topic_id,
                        parts,
                        E::TopicAuthorizationFailed.code(),
                    ));
                }
            },
            pick!(Fetch),
        )
    }
}

/// Its routing rule in a cluster (a partition's requests reach only its leader, a
/// key's only its coordinator), applied before the handler by `pipeline/route.rs`.
pub mod route {
    use crate::handlers::gate::prelude::*;
    use crate::handlers::gate::routing::*;
    use crate::routing::Router;
    use crate::topics::TopicRegistry;

    /// `topics` names the topic ids of Fetch v13+.
    pub fn fetch(router: &dyn Router, topics: &TopicRegistry, r: &mut FetchRequest, version: i16) -> Gate {
        let mut moved: Vec<(TopicName, uuid::Uuid, Vec<i32>)> = Vec::new();
        for t in r.topics.iter_mut() {
            let name = if version >= 13 {
                match topics.topic_by_id(t.topic_id) {
                    Some(x) => x.name.clone(),
                    None => continue,
                }
            } else {
                t.topic.to_string()
            };
            let (keep, away): (Vec<_>, Vec<_>) =
                std::mem::take(&mut t.partitions).into_iter().partition(|p| !not_mine(router, &name, p.partition));
            t.partitions = keep;
            if !away.is_empty() {
                moved.push((t.topic.clone(), t.topic_id, away.iter().map(|p| p.partition).collect()));
            }
        }
        r.topics.retain(|t| !t.partitions.is_empty());
        if moved.is_empty() {
            return Gate::Pass;
        }
        patch_answer(move |resp| {
            if let ResponseKind::Fetch(resp) = resp {
                for (topic, id, parts) in moved {
                    resp.responses.push(refuse::fetch_topic(topic, id, parts, NOT_LEADER));
                }
            }
        })
    }
}
