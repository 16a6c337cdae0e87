//! Produce, in two stages (as Redpanda does) so pipelined requests keep their order while
//! sharing fsyncs:
//! 1. in request order: validate and append every partition's batches (`Partition::append`);
//! 2. concurrently, answered in order by the connection: wait until the appended offsets are
//!    durable (Sync policy) and build the response.
//!
//! A replicated partition (cluster mode, replication factor > 1) proposes the batch to its Raft
//! group in stage 1 instead, and stage 2 waits until a majority committed it and it was applied.
//!
//! acks=0 gets no response, but its data is made durable and the high watermark advanced the
//! same way. Batches are written as produced (only base offset and leader epoch are assigned).

use super::{now_ms, LaterReply, Reply};
use crate::cluster::replica::PendingWrite;
use crate::config::Config;
use crate::error_map;
use crate::partition::producer_state::Refusal;
use crate::partition::Partition;
use crate::partition_handle::{BatchWrite, WriteRefused};
use crate::replication::types::PartResult;
use crate::routing::{CoordinatorKey, Route, Router};
use crate::topic_config::TopicSettings;
use crate::topics::TopicRegistry;
use crate::txn::TxnCoordinator;
use bytes::BytesMut;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse, ResponseKind};
use sluice_protocol::batch::{BatchView, RecordsSummary, NO_PRODUCER_ID};
use std::sync::Arc;

/// A partition result from stage 1: either an error already, or an append to make durable.
enum Staged {
    Error(i16, Option<String>),
    /// KIP-467: the batch was dropped for these records (index in the batch); the response
    /// names them, so a client fails exactly them with the error and the others as retriable.
    RecordErrors(i16, String, Vec<i32>),
    Appended {
        partition: Arc<Partition>,
        base_offset: i64,
        end: i64,
        log_start: i64,
        sync: bool,
        append_time: i64,
    },
    /// Proposed to the partition's Raft group (replicated): answered once applied — and, when
    /// `min.insync.replicas` exceeds the group's majority, once that many replicas hold it.
    Replicated {
        write: PendingWrite,
        append_time: i64,
        min_insync: Option<(Arc<crate::cluster::replica::Replica>, usize)>,
    },
}

/// Stamp every batch in `buf` with the append time (validated batches only).
fn restamp(buf: &mut [u8], now: i64) {
    let mut pos = 0;
    while pos < buf.len() {
        let Some(size) = sluice_protocol::batch::claimed_batch_size(&buf[pos..]) else { break };
        if size > buf.len() - pos {
            break;
        }
        sluice_protocol::batch::set_log_append_time(&mut buf[pos..pos + size], now);
        pos += size;
    }
}

/// Kafka's rule for produce v3+: exactly one v2 batch per partition, whose header agrees with
/// its records (`BatchView::validate_records`). The log validates the CRC (once) when it appends.
/// Why a partition's records were refused: code, message, and (KIP-467) the indexes of the
/// records at fault when the fault is theirs alone.
type Refused = (i16, String, Vec<i32>);

/// On a compacted topic every record needs a key (Kafka: INVALID_RECORD, naming the records);
/// with CreateTime every timestamp must be within the topic's bounds of `now`
/// (`message.timestamp.before.max.ms`, `after.max.ms`: INVALID_TIMESTAMP, naming the records).
fn check_batches(bytes: &[u8], settings: &TopicSettings, now: i64) -> Result<(), Refused> {
    let summary = check_batch(bytes, settings.compacted()).map_err(|(code, msg)| {
        let records = if msg == KEYLESS { keyless_records(bytes) } else { Vec::new() };
        (code, msg, records)
    })?;
    if settings.log_append_time {
        return Ok(());
    }
    let (before, after) = (settings.timestamp_before_max_ms, settings.timestamp_after_max_ms);
    let out_of_range = |ts: i64| ts != -1 && (now.saturating_sub(ts) > before || ts.saturating_sub(now) > after);
    if !out_of_range(summary.min_timestamp) && !out_of_range(summary.max_timestamp) {
        return Ok(());
    }
    let records: Vec<(i32, i64)> = BatchView::parse_unchecked_crc(bytes)
        .and_then(|v| v.records())
        .map(|rs| (0..).zip(rs).filter(|(_, r)| out_of_range(r.timestamp)).map(|(i, r)| (i, r.timestamp)).collect())
        .unwrap_or_default();
    let first = records.first().map_or(summary.max_timestamp, |r| r.1);
    let msg = format!(
        "Timestamp {first} of a record is out of range: it must be within [{}, {}] (message.timestamp.before.max.ms, message.timestamp.after.max.ms)",
        now.saturating_sub(before),
        now.saturating_add(after)
    );
    Err((ResponseError::InvalidTimestamp.code(), msg, records.into_iter().map(|r| r.0).collect()))
}

const KEYLESS: &str = "Compacted topic cannot accept message without key";

/// Indexes of the records without a key (the refusal path of a compacted topic only: decodes).
fn keyless_records(bytes: &[u8]) -> Vec<i32> {
    BatchView::parse_unchecked_crc(bytes)
        .and_then(|v| v.records())
        .map(|rs| (0..).zip(rs).filter(|(_, r)| r.key.is_none()).map(|(i, _)| i).collect())
        .unwrap_or_default()
}

fn check_batch(bytes: &[u8], compacted: bool) -> Result<RecordsSummary, (i16, String)> {
    let v = BatchView::parse_unchecked_crc(bytes).map_err(|e| (error_map::batch_code(&e), e.to_string()))?;
    if v.size() != bytes.len() {
        return Err((ResponseError::InvalidRecord.code(), "a partition's records must be exactly one batch".into()));
    }
    if v.is_control() {
        return Err((ResponseError::InvalidRecord.code(), "clients may not produce control batches".into()));
    }
    if v.producer_id() != NO_PRODUCER_ID && (v.producer_epoch() < 0 || v.base_sequence() < 0) {
        return Err((ResponseError::InvalidRecord.code(), "an idempotent batch needs an epoch and a sequence".into()));
    }
    // the header's offset range, its record count and the records encoded must agree before
    // anything is appended: offsets, sequences and the LSO are all derived from the header
    let summary = match v.validate_records() {
        Ok(s) => s,
        Err(e) => {
            // Kafka checks the CRC first: a corrupt batch is CORRUPT_MESSAGE whatever its records
            // look like (computed only here, so a valid batch's CRC is still checked once, by the log)
            let computed = v.compute_crc();
            if computed != v.crc() {
                let e = sluice_protocol::batch::BatchError::CrcMismatch { stored: v.crc(), computed };
                return Err((error_map::batch_code(&e), e.to_string()));
            }
            return Err((error_map::batch_code(&e), e.to_string()));
        }
    };
    if compacted && summary.has_null_key {
        return Err((ResponseError::InvalidRecord.code(), KEYLESS.into()));
    }
    Ok(summary)
}

/// The batch in the topic's final codec (`compression.type`): `None` when it already is
/// (or the topic keeps the producer's codec).
fn final_codec(bytes: &[u8], settings: &TopicSettings) -> Result<Option<bytes::Bytes>, Refused> {
    let Some((codec, level)) = settings.compression else { return Ok(None) };
    sluice_protocol::batch::recompress(bytes, codec, level)
        .map_err(|e| (error_map::batch_code(&e), format!("recompressing to {codec:?}: {e}"), Vec::new()))
}

/// For an acks=all write to a replicated partition whose `min.insync.replicas` exceeds its
/// Raft majority: the replica and how many replicas must hold the write before it is answered.
fn beyond_majority(
    rep: &Arc<crate::cluster::replica::Replica>,
    topic: &crate::topics::Topic,
    acks: i16,
) -> Option<(Arc<crate::cluster::replica::Replica>, usize)> {
    let min = usize::try_from(topic.settings.min_insync_replicas).unwrap_or(1);
    let majority = rep.voters().len() / 2 + 1;
    (acks == -1 && min > majority).then(|| (rep.clone(), min))
}

/// Kafka's check before an acks=all append: at least `min.insync.replicas` replicas in sync
/// (NOT_ENOUGH_REPLICAS). A partition that is not replicated has one; a replicated one's
/// leader counts itself and the followers that caught up within `replica.lag.time.max.ms`.
fn enough_replicas(
    topics: &Arc<TopicRegistry>,
    config: &Arc<Config>,
    topic: &crate::topics::Topic,
    index: i32,
    acks: i16,
) -> Result<(), Refused> {
    let min = topic.settings.min_insync_replicas;
    if acks != -1 || min <= 1 {
        return Ok(());
    }
    let lag = std::time::Duration::from_millis(config.replica_lag_time_max_ms);
    let in_sync = match topics.replica(&topic.name, index) {
        Some(rep) => rep.in_sync(lag).len(),
        None => 1,
    };
    if in_sync as i32 >= min {
        return Ok(());
    }
    Err((
        ResponseError::NotEnoughReplicas.code(),
        format!(
            "The size of the current ISR {in_sync} is insufficient to satisfy the min.isr requirement of {min} for partition {}-{index}",
            topic.name
        ),
        Vec::new(),
    ))
}

/// Produce v12+ (transaction version 2): a transactional batch's producer id and epoch, for
/// the implicit add of its partition to the transaction.
fn implicit_add(version: i16, batch: &[u8]) -> Option<(i64, i16)> {
    if version < 12 {
        return None;
    }
    let v = BatchView::parse_unchecked_crc(batch).ok()?;
    v.is_transactional().then(|| (v.producer_id(), v.producer_epoch()))
}

/// Cluster mode: the address of `id`'s transaction coordinator if it is another broker.
fn remote_coordinator(router: &dyn Router, id: &str) -> Option<i32> {
    match router.coordinator_of(CoordinatorKey::Transaction(id)) {
        Route::Broker(b) => Some(b.node_id),
        Route::Here | Route::Electing => None,
    }
}

/// The producer id and epoch of a transactional batch.
fn transactional(batch: &[u8]) -> Option<(i64, i16)> {
    let v = BatchView::parse_unchecked_crc(batch).ok()?;
    v.is_transactional().then(|| (v.producer_id(), v.producer_epoch()))
}

/// The produce answer for a transaction coordinator's refusal of a batch (verification or the
/// implicit add of transaction version 2): a fenced epoch is INVALID_PRODUCER_EPOCH, as Kafka's
/// `AddPartitionsToTxnManager` answers it. Transaction version 2's implicit add (Produce v12,
/// `tv2`) refused with CONCURRENT_TRANSACTIONS — the previous transaction's markers are still
/// being written — is answered CONCURRENT_TRANSACTIONS, which clients retry, as Kafka 4 answers
/// it (franz-go's TestTxnEtl on three brokers failed on the INVALID_TXN_STATE it got before;
/// decision 0033). Otherwise a coordinator that cannot answer now (ending the transaction,
/// moving, unreachable) is INVALID_TXN_STATE, so the client aborts and starts over at once;
/// Kafka answers the retriable NOT_ENOUGH_REPLICAS there, which makes a client retry the batch
/// until its delivery timeout while the coordinator is away (decision 0011).
/// The refusal for a coordinator's answer `code` (see [`verification_code`]): not in the
/// transaction (INVALID_TXN_STATE) is `Refusal::NotInTransaction`, which a replicated partition
/// decides again when the batch is applied (an exact retry of a stored batch stays a duplicate).
fn coordinator_refusal(code: i16, tv2: bool) -> Refusal {
    match verification_code(code, tv2) {
        c if c == ResponseError::InvalidTxnState.code() => Refusal::NotInTransaction,
        c => Refusal::TxnVerification(c),
    }
}

fn verification_code(code: i16, tv2: bool) -> i16 {
    tracing::debug!(code, "transactional batch refused by its coordinator");
    match ResponseError::try_from_code(code) {
        Some(ResponseError::ProducerFenced) => ResponseError::InvalidProducerEpoch.code(),
        Some(ResponseError::ConcurrentTransactions) if tv2 => code,
        Some(
            ResponseError::ConcurrentTransactions
            | ResponseError::NetworkException
            | ResponseError::CoordinatorLoadInProgress
            | ResponseError::CoordinatorNotAvailable
            | ResponseError::NotCoordinator,
        ) => ResponseError::InvalidTxnState.code(),
        _ => code,
    }
}

pub async fn handle(
    topics: &Arc<TopicRegistry>,
    config: &Arc<Config>,
    txns: &Arc<TxnCoordinator>,
    router: &dyn Router,
    version: i16,
    req: ProduceRequest,
) -> Reply {
    if ![-1i16, 0, 1].contains(&req.acks) {
        let mut resp = ProduceResponse::default();
        for t in &req.topic_data {
            let mut tr = TopicProduceResponse::default();
            tr.name = t.name.clone();
            tr.partition_responses = t
                .partition_data
                .iter()
                .map(|p| {
                    let mut pr = PartitionProduceResponse::default();
                    pr.index = p.index;
                    pr.error_code = ResponseError::InvalidRequiredAcks.code();
                    pr
                })
                .collect();
            resp.responses.push(tr);
        }
        return Reply::now(ResponseKind::Produce(resp));
    }
    let now = now_ms();
    // how long a replicated write may wait: for room in the budgets of bytes in flight, then
    // for a majority (the request's timeout.ms)
    let replication_timeout = std::time::Duration::from_millis(req.timeout_ms.clamp(100, 300_000) as u64);
    let txn_id = req.transactional_id.as_ref().map(|t| t.to_string()).filter(|t| !t.is_empty());
    let mut staged: Vec<(kafka_protocol::messages::TopicName, Vec<(i32, Staged)>)> = Vec::new();
    for t in req.topic_data {
        let name = t.name.0.to_string();
        let topic = topics.topic(&name);
        let log_append_time = topic.as_ref().is_some_and(|t| t.settings.log_append_time);
        let mut parts = Vec::new();
        for p in t.partition_data {
            let s = match topic.as_ref().and_then(|t| t.partition(p.index).map(|p| (t, p))) {
                None => Staged::Error(ResponseError::UnknownTopicOrPartition.code(), None),
                Some((topic, partition)) => match p.records.as_deref() {
                    None | Some([]) => Staged::Error(ResponseError::CorruptMessage.code(), Some("no records".into())),
                    Some(records) if records.len() > topic.settings.log.max_message_bytes => Staged::Error(
                        ResponseError::MessageTooLarge.code(),
                        Some(format!(
                            "the batch is {} bytes, larger than max.message.bytes {}",
                            records.len(),
                            topic.settings.log.max_message_bytes
                        )),
                    ),
                    Some(records) => match check_batches(records, &topic.settings, now)
                        .and_then(|()| enough_replicas(topics, config, topic, p.index, req.acks))
                        .and_then(|()| final_codec(records, &topic.settings))
                    {
                        Err((code, msg, records)) if !records.is_empty() => Staged::RecordErrors(code, msg, records),
                        Err((code, msg, _)) => Staged::Error(code, Some(msg)),
                        Ok(recompressed) => {
                            let mut buf = match recompressed {
                                Some(b) => BytesMut::from(b),
                                None => BytesMut::from(records),
                            };
                            if log_append_time {
                                restamp(&mut buf, now);
                            }
                            // a transactional batch must belong to its producer's ongoing
                            // transaction, as the coordinator sees it (KIP-890 part 1)
                            // (transaction version 2, Produce v12+: the batch itself adds the
                            // partition to the transaction first)
                            // (cluster mode with the coordinator on another broker: the add
                            // is asked of it below, as the verification is)
                            // (replicated: where the partition's log ends before the
                            // verification begins — a marker applied at or after it ended the
                            // transaction verified, `PartCommand::Produce::verified_from`)
                            // (taken once the leader has applied what was committed before
                            // its term: a marker of an earlier transaction is below it)
                            let handle = match topics.handle_of(&name, p.index, partition.clone()) {
                                Ok(h) => h,
                                Err(why) => {
                                    let msg = "not written here: this broker's replica is not running, or another broker holds it";
                                    parts.push((
                                        p.index,
                                        Staged::Error(error_map::unwritable_code(why), Some(msg.into())),
                                    ));
                                    continue;
                                }
                            };
                            let start = handle.verification_start(txn_id.is_some());
                            let remote = txn_id.as_deref().and_then(|id| remote_coordinator(router, id));
                            let implicit = match (&txn_id, implicit_add(version, &buf)) {
                                (Some(id), Some((pid, epoch))) if remote.is_none() => {
                                    txns.add_durably(id, pid, epoch, &[(name.clone(), p.index)], None).await
                                }
                                _ => Ok(()),
                            };
                            let mut remote_refusal = None;
                            if let (Some(id), Some((pid, epoch))) = (&txn_id, transactional(&buf)) {
                                if let Some(peer) = remote {
                                    if !partition.is_verified(pid, epoch) {
                                        let add = implicit_add(version, &buf).is_some();
                                        // KIP-890 across brokers
                                        let asked = crate::interbroker::verify_in_txn(
                                            peer, id, pid, epoch, &name, p.index, add,
                                        );
                                        match asked.await {
                                            Ok(()) => partition.mark_verified(pid, epoch),
                                            Err(code) => remote_refusal = Some(code),
                                        }
                                    }
                                }
                            }
                            let tv2 = implicit_add(version, &buf).is_some();
                            let verify = |pid: i64, epoch: i16| match (&txn_id, implicit) {
                                (_, Err(e)) => Err(coordinator_refusal(crate::error_map::txn_code(e), tv2)),
                                // cluster mode with the coordinator on another broker: it
                                // confirmed the partition before the append (below), and no
                                // marker has been written here since
                                (Some(id), Ok(())) if remote_coordinator(router, id).is_some() => {
                                    if partition.is_verified(pid, epoch) {
                                        Ok(())
                                    } else {
                                        let code = remote_refusal.unwrap_or(ResponseError::InvalidTxnState.code());
                                        Err(coordinator_refusal(code, tv2))
                                    }
                                }
                                (Some(id), Ok(())) => txns
                                    .verify_partition(id, pid, epoch, &name, p.index)
                                    .map_err(|e| coordinator_refusal(crate::error_map::txn_code(e), tv2)),
                                (None, Ok(())) => Err(Refusal::NotInTransaction),
                            };
                            let append_time = if log_append_time { now } else { -1 };
                            match handle.append_batch(buf, now, &verify, start, replication_timeout).await {
                                Ok(BatchWrite::Local { partition, first, end, log_start, sync }) => Staged::Appended {
                                    partition,
                                    base_offset: first,
                                    end,
                                    log_start,
                                    sync,
                                    append_time,
                                },
                                Ok(BatchWrite::Replicated(write)) => Staged::Replicated {
                                    write,
                                    append_time,
                                    min_insync: handle.replica().and_then(|rep| beyond_majority(rep, topic, req.acks)),
                                },
                                Err(WriteRefused::Refused(r)) => {
                                    Staged::Error(error_map::refusal_code(&r), Some(format!("{r:?}")))
                                }
                                Err(WriteRefused::Storage(e)) => {
                                    Staged::Error(error_map::storage_produce_code(&e), Some(e.to_string()))
                                }
                                Err(WriteRefused::Write(e)) => Staged::Error(error_map::write_error_code(&e), None),
                            }
                        }
                    },
                },
            };
            parts.push((p.index, s));
        }
        staged.push((t.name, parts));
    }
    let acks = req.acks;
    let stage2: LaterReply = Box::pin(async move {
        let mut resp = ProduceResponse::default();
        for (name, parts) in staged {
            let mut tr = TopicProduceResponse::default();
            tr.name = name;
            for (index, s) in parts {
                let mut pr = PartitionProduceResponse::default();
                pr.index = index;
                match s {
                    Staged::Error(code, msg) => {
                        pr.error_code = code;
                        pr.base_offset = -1;
                        pr.error_message = msg.map(|m| super::sb(&m));
                    }
                    Staged::RecordErrors(code, msg, records) => {
                        pr.error_code = code;
                        pr.base_offset = -1;
                        pr.record_errors = records
                            .into_iter()
                            .map(|i| {
                                let mut e =
                                    kafka_protocol::messages::produce_response::BatchIndexAndErrorMessage::default();
                                e.batch_index = i;
                                e.batch_index_error_message = Some(super::sb(&msg));
                                e
                            })
                            .collect();
                        pr.error_message = Some(super::sb(&msg));
                    }
                    Staged::Replicated { write, append_time, min_insync } => {
                        match write.wait_indexed(replication_timeout).await {
                            Ok((PartResult::Appended { first, log_start, .. }, index)) => {
                                let deadline = tokio::time::Instant::now() + replication_timeout;
                                let held = match min_insync {
                                    Some((rep, needed)) => rep.await_replicas(index, needed, deadline).await,
                                    None => true,
                                };
                                if held {
                                    pr.base_offset = first;
                                    pr.log_start_offset = log_start;
                                    pr.log_append_time_ms = append_time;
                                } else {
                                    // Kafka's answer when the write is in the log but fewer than
                                    // min.insync.replicas have it
                                    pr.error_code = ResponseError::NotEnoughReplicasAfterAppend.code();
                                    pr.base_offset = -1;
                                    pr.error_message = Some(super::sb(
                                    "written, but fewer than min.insync.replicas replicas have it within the request timeout",
                                ));
                                }
                            }
                            Ok((other, _)) => {
                                // refused or failed when applied (a batch is never answered Done)
                                let (code, message) = error_map::part_result_error(&other)
                                    .unwrap_or((ResponseError::UnknownServerError.code(), format!("{other:?}")));
                                pr.error_code = code;
                                pr.base_offset = -1;
                                pr.error_message = Some(super::sb(&message));
                            }
                            Err(e) => {
                                pr.error_code = error_map::write_error_code(&e);
                                pr.base_offset = -1;
                                pr.error_message = Some(super::sb(&e.to_string()));
                            }
                        }
                    }
                    Staged::Appended { partition, base_offset, end, log_start, sync, append_time } => {
                        match partition.wait_durable_async(end, sync).await {
                            Ok(()) => {
                                pr.base_offset = base_offset;
                                pr.log_start_offset = log_start;
                                pr.log_append_time_ms = append_time;
                            }
                            Err(e) => {
                                // The write happened; whether it is durable is unknown. A
                                // retriable storage error tells the client exactly that.
                                tracing::error!(topic = %partition.topic, partition = partition.index, "fsync failed: {e}");
                                pr.error_code = error_map::storage_produce_code(&e);
                                pr.base_offset = -1;
                            }
                        }
                    }
                }
                tr.partition_responses.push(pr);
            }
            resp.responses.push(tr);
        }
        ResponseKind::Produce(resp)
    });
    if acks == 0 {
        tokio::spawn(stage2);
        Reply::None
    } else {
        Reply::Later(stage2)
    }
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied
/// before the handler by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn authorize(c: &Authz<'_>, r: &mut ProduceRequest, _version: i16) -> Gate {
        produce(c, r)
    }

    fn produce(c: &Authz<'_>, r: &mut ProduceRequest) -> Gate {
        let txn_denied =
            r.transactional_id.as_ref().is_some_and(|t| !t.is_empty() && !c.ok(Op::Write, Rt::TransactionalId, t));
        // A topic that does not exist would be auto-created by the append: that needs Create.
        let may_create = c.cluster(Op::Create);
        let mut codes = Vec::new();
        let denied = split_off(&mut r.topic_data, |t| {
            let code = if txn_denied {
                Some(E::TransactionalIdAuthorizationFailed)
            } else if !c.topic(Op::Write, &t.name) {
                Some(E::TopicAuthorizationFailed)
            } else if c.topics.topic(&t.name).is_none() && !may_create && !c.topic(Op::Create, &t.name) {
                Some(E::UnknownTopicOrPartition)
            } else {
                None
            };
            if let Some(code) = code {
                codes.push(code.code());
            }
            code.is_none()
        });
        if denied.is_empty() {
            return Gate::Pass;
        }
        patch(
            move |resp: &mut ProduceResponse| {
                for (t, code) in denied.into_iter().zip(codes) {
                    let parts = t.partition_data.iter().map(|p| p.index);
                    resp.responses.push(refuse::produce_topic(t.name.clone(), parts, code));
                }
            },
            pick!(Produce),
        )
    }
}

/// Its routing rule in a cluster (a partition's requests reach only its leader, a
/// key's only its coordinator), applied before the handler by `pipeline/route.rs`.
pub mod route {
    use crate::handlers::gate::prelude::*;
    use crate::handlers::gate::routing::*;
    use crate::routing::Router;

    pub fn produce(router: &dyn Router, r: &mut ProduceRequest, _version: i16) -> Gate {
        let mut moved: Vec<(TopicName, Vec<i32>)> = Vec::new();
        for t in r.topic_data.iter_mut() {
            let (keep, away): (Vec<_>, Vec<_>) =
                std::mem::take(&mut t.partition_data).into_iter().partition(|p| !not_mine(router, &t.name, p.index));
            t.partition_data = keep;
            if !away.is_empty() {
                moved.push((t.name.clone(), away.iter().map(|p| p.index).collect()));
            }
        }
        r.topic_data.retain(|t| !t.partition_data.is_empty());
        if moved.is_empty() {
            return Gate::Pass;
        }
        patch_answer(move |resp| {
            if let ResponseKind::Produce(resp) = resp {
                for (name, parts) in moved {
                    resp.responses.push(refuse::produce_topic(name, parts, NOT_LEADER));
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A coordinator's refusal as the produce answer (decisions 0011, 0033): transaction
    /// version 2's implicit add keeps CONCURRENT_TRANSACTIONS (retriable, as Kafka 4 answers
    /// it); version 1's verification turns it, like a coordinator that cannot answer, into
    /// INVALID_TXN_STATE; a fenced producer is INVALID_PRODUCER_EPOCH in both.
    #[test]
    fn a_coordinators_refusal_becomes_kafkas_produce_answer() {
        let code = |e: ResponseError| e.code();
        let concurrent = code(ResponseError::ConcurrentTransactions);
        assert_eq!(verification_code(concurrent, true), concurrent);
        assert_eq!(verification_code(concurrent, false), code(ResponseError::InvalidTxnState));
        for e in
            [ResponseError::NotCoordinator, ResponseError::CoordinatorNotAvailable, ResponseError::NetworkException]
        {
            for tv2 in [false, true] {
                assert_eq!(verification_code(code(e), tv2), code(ResponseError::InvalidTxnState), "{e:?}");
            }
        }
        for tv2 in [false, true] {
            assert_eq!(
                verification_code(code(ResponseError::ProducerFenced), tv2),
                code(ResponseError::InvalidProducerEpoch)
            );
        }
        assert!(matches!(coordinator_refusal(concurrent, true), Refusal::TxnVerification(c) if c == concurrent));
        assert!(matches!(coordinator_refusal(concurrent, false), Refusal::NotInTransaction));
    }
}
