//! The producer's background sender: decides which batches go now, sends them (one Produce
//! request per broker per round), and applies each partition's answer — acknowledge, retry
//! with the same sequence, bump the epoch, or fail.

use super::{txn, Batch, Part, RecordMetadata, Shared, State};
use crate::cluster::{by_topic, sb, Lane};
use crate::error::{Error, ErrorKind};
use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use sluice_protocol::batch::BatchBuilder;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A batch on its way, with what it needs to be put back.
pub(crate) struct Flight {
    pub topic: String,
    pub partition: i32,
    pub batch: Batch,
    /// How to encode the batch (producer id, epoch, sequence fixed by the planner); encoding
    /// and compression happen in `send`, outside the state lock.
    pub builder: BatchBuilder,
    /// The encoded batch (filled in by `send`).
    pub encoded: Bytes,
}

pub(crate) async fn run(sh: Arc<Shared>) {
    loop {
        let (rounds, next, done) = plan(&sh);
        for (node, flights) in rounds {
            // Written here, in order, so a partition's batches reach the broker in sequence
            // order (concurrent writers could swap them); only the waiting is spawned.
            send(sh.clone(), node, flights).await;
        }
        if done {
            return;
        }
        let sleep = next.map(|t| t.saturating_duration_since(Instant::now())).unwrap_or(Duration::from_secs(1));
        tokio::select! {
            _ = sh.wake.notified() => {}
            _ = tokio::time::sleep(sleep) => {}
        }
    }
}

/// Fail every queued (unsent) batch; returns how many bytes were released.
pub(crate) fn fail_queued(sh: &Shared, st: &mut State, e: &Error) {
    let mut freed = Vec::new();
    for part in st.parts.values_mut() {
        for b in part.queue.drain(..) {
            freed.push(b.fail(e));
        }
    }
    for bytes in freed {
        sh.finished(st, bytes);
    }
}

/// A batch past delivery.timeout.ms and, if it had been sent, its partition (a sequence gap).
type Expired = (Batch, Option<(String, i32)>);

/// What to send now; the earliest time something else becomes ready; whether the sender is done.
fn plan(sh: &Arc<Shared>) -> (HashMap<i32, Vec<Flight>>, Option<Instant>, bool) {
    let mut st = sh.lock();
    let st = &mut *st;
    let now = Instant::now();
    let mut rounds: HashMap<i32, Vec<Flight>> = HashMap::new();
    let mut next: Option<Instant> = None;
    let soon = |t: Instant, next: &mut Option<Instant>| *next = Some(next.map_or(t, |n| n.min(t)));
    if let Some(e) = st.fatal.clone() {
        fail_queued(sh, st, &e);
        return (rounds, None, st.closing);
    }
    let transactional = sh.s.transactional_id.is_some();
    // Batches past delivery.timeout.ms fail first, whatever else holds them (a leader, a
    // backoff, a new epoch, AddPartitionsToTxn): one that was sent before leaves a sequence gap.
    let mut expired: Vec<Expired> = Vec::new();
    for ((topic, partition), part) in st.parts.iter_mut() {
        while part.queue.front().is_some_and(|b| b.deadline <= now) {
            if let Some(b) = part.queue.pop_front() {
                let gap_key = b.seq.is_some().then(|| (topic.clone(), *partition));
                expired.push((b, gap_key));
            }
        }
    }
    for (b, gap_key) in expired {
        let e = b.expired(&format!(
            "delivery.timeout.ms ({:?}) expired before the record was acknowledged",
            sh.s.delivery_timeout
        ));
        let bytes = b.fail(&e);
        if let Some(key) = gap_key {
            gap(st, transactional, &key, e);
        } else if transactional && st.abortable.is_none() {
            // never sent, so no gap; but a transaction that lost a record must not commit
            st.abortable = Some(e.with_kind(ErrorKind::Abortable));
        }
        sh.finished(st, bytes);
    }
    let in_flight: usize = st.parts.values().map(|p| p.in_flight).sum();
    if st.closing && st.outstanding == 0 {
        return (rounds, None, true);
    }
    if st.needs_bump {
        if in_flight == 0 && !st.bumping {
            st.bumping = true;
            tokio::spawn(bump(sh.clone()));
        }
        return (rounds, None, false);
    }
    // Partitions whose data waits for AddPartitionsToTxn.
    if transactional {
        let want: Vec<(String, i32)> =
            st.parts.iter().filter(|(_, p)| !p.added && !p.queue.is_empty()).map(|(k, _)| k.clone()).collect();
        if !want.is_empty() && !st.adding && st.abortable.is_none() {
            st.adding = true;
            tokio::spawn(txn::add_partitions(sh.clone(), want));
        }
    }
    let (pid, epoch) = (st.pid, st.epoch);
    let linger = sh.s.linger;
    let flushing = st.flushing > 0 || st.closing;
    let mut need_meta: Vec<String> = Vec::new();
    for ((topic, partition), part) in st.parts.iter_mut() {
        if part.queue.is_empty() || (transactional && !part.added) {
            continue;
        }
        if let Some(t) = part.backoff_until {
            if t > now {
                soon(t, &mut next);
                continue;
            }
            part.backoff_until = None;
        }
        if part.recovering && part.in_flight > 0 {
            continue;
        }
        let Some(leader) = sh.cluster.cached_leader(topic, *partition) else {
            need_meta.push(topic.clone());
            continue;
        };
        while part.in_flight < sh.s.max_in_flight {
            let Some(front) = part.queue.front() else { break };
            let ready = part.queue.len() > 1
                || front.bytes >= sh.s.batch_size
                || front.attempts > 0
                || flushing
                || front.created + linger <= now;
            if !ready {
                soon(front.created + linger, &mut next);
                break;
            }
            let Some(mut batch) = part.queue.pop_front() else { break };
            let seq = if pid >= 0 {
                let s = *batch.seq.get_or_insert(part.next_seq);
                if s == part.next_seq {
                    part.next_seq = part.next_seq.wrapping_add(batch.records.len() as i32) & i32::MAX;
                }
                s
            } else {
                -1
            };
            let builder = BatchBuilder {
                compression: sh.s.compression,
                producer_id: pid,
                producer_epoch: epoch,
                base_sequence: seq,
                transactional,
                ..Default::default()
            };
            batch.attempts += 1;
            part.in_flight += 1;
            rounds.entry(leader).or_default().push(Flight {
                topic: topic.clone(),
                partition: *partition,
                batch,
                builder,
                encoded: Bytes::new(),
            });
        }
    }
    need_meta.sort();
    need_meta.dedup();
    for topic in need_meta {
        if st.refreshing.insert(topic.clone()) {
            let sh2 = sh.clone();
            tokio::spawn(async move {
                let r = sh2.cluster.partitions(&topic).await;
                tokio::time::sleep(if r.is_ok() { Duration::ZERO } else { sh2.s.retry_backoff }).await;
                sh2.lock().refreshing.remove(&topic);
                sh2.wake.notify_one();
            });
        }
        soon(now + sh.s.retry_backoff, &mut next);
    }
    (rounds, next, false)
}

/// Split one node's flights into requests holding at most one batch per partition.
fn requests(flights: Vec<Flight>) -> Vec<Vec<Flight>> {
    let mut out: Vec<Vec<Flight>> = Vec::new();
    for f in flights {
        match out.iter_mut().find(|r| !r.iter().any(|g| g.topic == f.topic && g.partition == f.partition)) {
            Some(r) => r.push(f),
            None => out.push(vec![f]),
        }
    }
    out
}

async fn send(sh: Arc<Shared>, node: i32, flights: Vec<Flight>) {
    // Encode (and compress) here, outside the state lock that `send` callers need.
    let mut ready = Vec::with_capacity(flights.len());
    for mut f in flights {
        match f.builder.build(&f.batch.records) {
            Ok(bytes) => {
                f.encoded = bytes;
                ready.push(f);
            }
            Err(e) => {
                let err = Error::kafka(ResponseError::InvalidRecord, format!("encoding a batch: {e}"));
                complete(&sh, f, Err(err));
            }
        }
    }
    let broker = sh.cluster.broker(node, Lane::Data).await;
    for req in requests(ready) {
        let broker = match &broker {
            Ok(b) => b.clone(),
            Err(e) => {
                for f in req {
                    complete(&sh, f, Err(e.clone()));
                }
                continue;
            }
        };
        let topic_data = by_topic(req.iter().map(|f| {
            let mut pd = produce_request::PartitionProduceData::default();
            pd.index = f.partition;
            pd.records = Some(f.encoded.clone());
            (f.topic.clone(), pd)
        }))
        .into_iter()
        .map(|(t, partition_data)| {
            let mut x = produce_request::TopicProduceData::default();
            x.name = TopicName(sb(&t));
            x.partition_data = partition_data;
            x
        })
        .collect();
        let mut r = ProduceRequest::default();
        r.transactional_id = sh.s.transactional_id.as_deref().map(|t| TransactionalId(sb(t)));
        r.acks = sh.s.acks;
        r.timeout_ms = sh.s.request_timeout.as_millis().min(i32::MAX as u128) as i32;
        r.topic_data = topic_data;
        if sh.s.acks == 0 {
            let res = broker.send_oneway(ApiKey::Produce, RequestKind::Produce(r)).await;
            for f in req {
                complete(
                    &sh,
                    f,
                    res.clone().map(|()| ProduceAnswer { code: 0, base_offset: -1, append_time: -1, message: None }),
                );
            }
            continue;
        }
        let rx = broker.send(ApiKey::Produce, RequestKind::Produce(r)).await;
        let timeout = sh.s.request_timeout;
        let sh2 = sh.clone();
        tokio::spawn(async move {
            let resp: Result<ResponseKind, Error> = match rx {
                Err(e) => Err(e),
                Ok(rx) => match tokio::time::timeout(timeout, rx).await {
                    Err(_) => {
                        broker.close();
                        Err(Error::timeout("produce request timed out"))
                    }
                    Ok(Err(_)) => Err(Error::new(ErrorKind::Retriable, "connection closed")),
                    Ok(Ok(r)) => r.map_err(Error::from),
                },
            };
            let mut answers: HashMap<(String, i32), ProduceAnswer> = HashMap::new();
            let resp = match resp {
                Ok(ResponseKind::Produce(p)) => Ok(p),
                Ok(_) => Err(Error::new(ErrorKind::Fatal, "unexpected response to Produce")),
                Err(e) => Err(e),
            };
            if let Ok(p) = &resp {
                for t in &p.responses {
                    for pr in &t.partition_responses {
                        answers.insert(
                            (t.name.0.to_string(), pr.index),
                            ProduceAnswer {
                                code: pr.error_code,
                                base_offset: pr.base_offset,
                                append_time: pr.log_append_time_ms,
                                message: pr.error_message.as_ref().map(|m| m.to_string()).filter(|m| !m.is_empty()),
                            },
                        );
                    }
                }
            }
            for f in req {
                let a = match &resp {
                    Err(e) => Err(e.clone()),
                    Ok(_) => answers.remove(&(f.topic.clone(), f.partition)).ok_or_else(|| {
                        Error::new(ErrorKind::Retriable, format!("no answer for {}-{}", f.topic, f.partition))
                    }),
                };
                complete(&sh2, f, a);
            }
        });
    }
}

#[derive(Debug, Clone)]
struct ProduceAnswer {
    code: i16,
    base_offset: i64,
    append_time: i64,
    /// The broker's error message, if it gave one (carried into the error it explains).
    message: Option<String>,
}

/// Apply the answer for one batch.
fn complete(sh: &Arc<Shared>, f: Flight, answer: Result<ProduceAnswer, Error>) {
    let Flight { topic, partition, batch, .. } = f;
    apply(sh, &mut sh.lock(), topic, partition, batch, answer);
    sh.wake.notify_one();
}

fn apply(
    sh: &Arc<Shared>,
    st: &mut State,
    topic: String,
    partition: i32,
    batch: Batch,
    answer: Result<ProduceAnswer, Error>,
) {
    let transactional = sh.s.transactional_id.is_some();
    let idempotent = sh.s.idempotent;
    let key = (topic.clone(), partition);
    let code = match &answer {
        Ok(a) => ResponseError::try_from_code(a.code),
        Err(e) => Some(e.code().unwrap_or(ResponseError::NetworkException)),
    };
    let mut batch = batch;
    match (&answer, code) {
        (Err(_), _) | (Ok(_), Some(ResponseError::RequestTimedOut | ResponseError::NetworkException)) => {
            batch.maybe_written = true;
        }
        // Refused for its sequence: this attempt was not written, and no earlier one was
        // (a written earlier attempt would make this one a duplicate).
        (Ok(_), Some(ResponseError::OutOfOrderSequenceNumber | ResponseError::UnknownProducerId)) => {
            batch.maybe_written = false;
        }
        _ => {}
    }
    let Some(part) = st.parts.get_mut(&key) else { return };
    part.in_flight = part.in_flight.saturating_sub(1);
    // An OUT_OF_ORDER answer to a batch that later acknowledged batches prove written: its
    // first attempt was written, and batches sent after it on another connection were
    // acknowledged before its connection's loss was handled, pushing it out of the broker's
    // last five. It is done, offset unknown (as a DUPLICATE answer); retried, it would be
    // refused the same way until delivery.timeout.ms (once seen: 7,277 attempts in 170 s).
    let proven_written = matches!(code, Some(ResponseError::OutOfOrderSequenceNumber))
        && batch.seq.is_some_and(|s| part.written_before_acknowledged(s, batch.records.len()));
    let what = match answer.as_ref().ok().and_then(|a| a.message.as_deref()) {
        Some(m) => format!("produce to {topic}-{partition} (the broker said: {m})"),
        None => format!("produce to {topic}-{partition}"),
    };
    // (answered as a duplicate would be)
    let judged = if proven_written { Some(ResponseError::DuplicateSequenceNumber) } else { code };
    let outcome = match (judged, &answer) {
        (None, Ok(a)) | (Some(ResponseError::DuplicateSequenceNumber), Ok(a)) => {
            part.recovering = false;
            if let Some(seq) = batch.seq {
                part.acknowledged(seq, batch.records.len());
            }
            let base = if code.is_some() { -1 } else { a.base_offset };
            Outcome::Done(base, a.append_time)
        }
        (None, Err(_)) => Outcome::Retry,
        // a batch behind an unresolved one: not a gap (yet)
        (Some(c), _)
            if matches!(c, ResponseError::OutOfOrderSequenceNumber)
                && (part.recovering || batch.seq.is_some_and(|s| s != part.acked_seq)) =>
        {
            Outcome::Retry
        }
        (Some(c), _) if c.is_retriable() || answer.as_ref().err().is_some_and(|e| e.is_retriable()) => {
            if matches!(
                c,
                ResponseError::NotLeaderOrFollower
                    | ResponseError::UnknownTopicOrPartition
                    | ResponseError::LeaderNotAvailable
                    | ResponseError::NetworkException
                    | ResponseError::NotEnoughReplicas
                    | ResponseError::RequestTimedOut
            ) {
                sh.cluster.invalidate(&topic);
            }
            Outcome::Retry
        }
        (Some(c @ (ResponseError::OutOfOrderSequenceNumber | ResponseError::UnknownProducerId)), _) => {
            if transactional {
                Outcome::Abortable(Error::kafka(c, &what).with_kind(ErrorKind::Abortable))
            } else {
                // A gap the broker cannot bridge: new epoch, then this batch again.
                Outcome::BumpAndRetry
            }
        }
        (Some(c), _) if matches!(c, ResponseError::ProducerFenced | ResponseError::InvalidProducerEpoch) => {
            Outcome::Fatal(Error::kafka(c, &what).with_kind(ErrorKind::Fatal))
        }
        (Some(c), _) => {
            let e = Error::kafka(c, &what);
            if e.is_fatal() {
                Outcome::Fatal(e)
            } else if transactional {
                Outcome::Abortable(e.with_kind(ErrorKind::Abortable))
            } else {
                Outcome::Fail(e, idempotent)
            }
        }
    };
    let now = Instant::now();
    match outcome {
        Outcome::Done(base, append_time) => {
            for (i, (d, r)) in batch.deliveries.into_iter().zip(batch.records.iter()).enumerate() {
                let _ = d.send(Ok(RecordMetadata {
                    partition,
                    offset: if base >= 0 { base + i as i64 } else { -1 },
                    timestamp: if append_time >= 0 { append_time } else { r.timestamp },
                }));
            }
            sh.finished(st, batch.bytes);
        }
        Outcome::Retry | Outcome::BumpAndRetry => {
            batch.last_failure = Some(match (&answer, code) {
                (Err(e), _) => e.to_string(),
                (Ok(a), Some(c)) => match &a.message {
                    Some(m) => format!("{c:?} (the broker said: {m})"),
                    None => format!("{c:?}"),
                },
                (Ok(_), None) => "no error code".to_string(),
            });
            if batch.deadline <= now {
                let e = batch.expired(&format!("{what}: delivery.timeout.ms expired while retrying"));
                let bytes = batch.fail(&e);
                gap(st, transactional, &key, e);
                sh.finished(st, bytes);
            } else {
                let Some(part) = st.parts.get_mut(&key) else { return };
                part.recovering = true;
                part.backoff_until = Some(now + sh.s.retry_backoff);
                requeue(part, batch);
                if matches!(outcome, Outcome::BumpAndRetry) {
                    st.needs_bump = true;
                }
            }
        }
        Outcome::Abortable(e) => {
            let bytes = batch.fail(&e);
            gap(st, transactional, &key, e);
            sh.finished(st, bytes);
        }
        Outcome::Fail(e, idem) => {
            let bytes = batch.fail(&e);
            if idem {
                gap(st, false, &key, e);
            }
            sh.finished(st, bytes);
        }
        Outcome::Fatal(e) => {
            let bytes = batch.fail(&e);
            st.fatal = Some(e.clone());
            sh.finished(st, bytes);
            fail_queued(sh, st, &e);
        }
    }
}

/// A sent batch failed for good: its sequence left a gap. Later batches of the partition
/// will come back OUT_OF_ORDER; an idempotent producer re-numbers after a new epoch, a
/// transactional one can only abort.
fn gap(st: &mut State, transactional: bool, key: &(String, i32), e: Error) {
    if let Some(p) = st.parts.get_mut(key) {
        p.recovering = true;
    }
    if transactional {
        st.txn_seq_gap = true;
        if st.abortable.is_none() {
            st.abortable = Some(e.with_kind(ErrorKind::Abortable));
        }
    } else {
        st.needs_bump = true;
    }
}

enum Outcome {
    Done(i64, i64),
    Retry,
    BumpAndRetry,
    Abortable(Error),
    Fail(Error, bool),
    Fatal(Error),
}

/// Put a batch back in sequence order (ahead of newer batches and unsent ones).
fn requeue(part: &mut Part, batch: Batch) {
    let pos = part.queue.iter().position(|b| match (b.seq, batch.seq) {
        (None, _) => true,
        (Some(s), Some(mine)) => s > mine,
        (Some(_), None) => false,
    });
    match pos {
        Some(i) => part.queue.insert(i, batch),
        None => part.queue.push_back(batch),
    }
}

/// New producer epoch after a sequence gap (idempotent producer, nothing in flight): every
/// partition starts again at sequence 0 and queued batches are re-numbered.
async fn bump(sh: Arc<Shared>) {
    let current = {
        let st = sh.lock();
        (st.pid, st.epoch)
    };
    let r = txn::init_producer_id(&sh, Some(current)).await;
    {
        let mut st = sh.lock();
        st.bumping = false;
        match r {
            Ok((pid, epoch)) => {
                st.pid = pid;
                st.epoch = epoch;
                st.needs_bump = false;
                // Re-number what is known unwritten; a batch that may be in the log already
                // would be written twice under the new epoch, so it fails instead.
                let unknown = Error::new(
                    ErrorKind::Retriable,
                    "delivery outcome unknown: the batch may have been written before the producer epoch was bumped",
                );
                let mut freed = Vec::new();
                for p in st.parts.values_mut() {
                    p.restart_sequences();
                    let (lost, keep): (Vec<Batch>, Vec<Batch>) = p.queue.drain(..).partition(|b| b.maybe_written);
                    freed.extend(lost.into_iter().map(|b| b.fail(&unknown)));
                    p.queue = keep.into_iter().map(|b| Batch { seq: None, ..b }).collect();
                }
                for bytes in freed {
                    sh.finished(&mut st, bytes);
                }
            }
            Err(e) if e.is_fatal() => st.fatal = Some(e),
            Err(_) => {}
        }
    }
    if sh.lock().needs_bump {
        tokio::time::sleep(sh.s.retry_backoff).await;
    }
    sh.wake.notify_one();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Cluster;
    use crate::config::ClientConfig;
    use crate::producer::Settings;
    use sluice_protocol::batch::NewRecord;

    fn batch(seq: i32) -> Batch {
        let now = Instant::now();
        Batch {
            records: vec![NewRecord::default()],
            deliveries: Vec::new(),
            bytes: 0,
            created: now,
            deadline: now + Duration::from_secs(60),
            seq: Some(seq),
            attempts: 1,
            maybe_written: false,
            last_failure: None,
        }
    }

    /// A producer's shared state, its broker never reached (127.0.0.1:1).
    fn shared(config: ClientConfig) -> Arc<Shared> {
        let s = Settings::from_config(&config.set("bootstrap.servers", "127.0.0.1:1")).unwrap();
        Arc::new(Shared::new(s, Cluster::new("127.0.0.1:1", "t", 1).unwrap()))
    }

    /// Producer 7 (idempotent) with partition t-0 in state `part`.
    fn producer_with(part: Part) -> (Arc<Shared>, (String, i32)) {
        let sh = shared(ClientConfig::new());
        let key = ("t".to_string(), 0);
        sh.lock().pid = 7;
        sh.lock().parts.insert(key.clone(), part);
        (sh, key)
    }

    fn answer(e: Option<ResponseError>) -> Result<ProduceAnswer, Error> {
        let code = e.map_or(0, |e| e.code());
        Ok(ProduceAnswer { code, base_offset: 0, append_time: -1, message: None })
    }

    /// Batches 0 and 1 of partition t-0 sent; 0's request was lost with its connection
    /// before the broker read it, and 1 went on a new connection: the broker answers 1
    /// OUT_OF_ORDER before the client learns that 0's connection closed. That is no gap, and
    /// no new epoch (a bump would fail batch 0 as "delivery outcome unknown", as CI once saw
    /// in `lost_responses_never_duplicate_or_reorder`): 1 is retried behind 0. Once 0 is
    /// acknowledged, an OUT_OF_ORDER answer to 1 is a gap the broker cannot bridge.
    #[tokio::test]
    async fn an_out_of_order_answer_behind_an_unresolved_batch_is_retried_not_a_gap() {
        let (sh, key) = producer_with(Part { in_flight: 2, next_seq: 2, ..Part::default() });
        let ooo = Some(ResponseError::OutOfOrderSequenceNumber);
        apply(&sh, &mut sh.lock(), "t".into(), 0, batch(1), answer(ooo));
        assert!(!sh.lock().needs_bump, "batch 0 is unresolved: batch 1's answer is no gap");
        let closed = Err(Error::new(ErrorKind::Retriable, "connection closed"));
        apply(&sh, &mut sh.lock(), "t".into(), 0, batch(0), closed);
        {
            let st = sh.lock();
            let part = &st.parts[&key];
            let queued: Vec<_> = part.queue.iter().map(|b| (b.seq, b.maybe_written)).collect();
            assert_eq!(queued, [(Some(0), true), (Some(1), false)], "both retried, in sequence order");
            assert!(!st.needs_bump && part.recovering);
        }
        // both sent again: 0 is written, and 1 still refused
        sh.lock().parts.get_mut(&key).unwrap().in_flight = 2;
        apply(&sh, &mut sh.lock(), "t".into(), 0, batch(0), answer(None));
        assert_eq!(sh.lock().parts[&key].acked_seq, 1);
        apply(&sh, &mut sh.lock(), "t".into(), 0, batch(1), answer(ooo));
        assert!(sh.lock().needs_bump, "right after an acknowledged batch, OUT_OF_ORDER is a gap");
    }

    /// Batch 0's connection was lost after the broker wrote it; batches 1–5 went on a new
    /// connection and were acknowledged before 0's loss was handled, so the broker's last five
    /// no longer hold 0 and it answers 0's retry OUT_OF_ORDER. The acknowledged batches after
    /// it prove 0 is in the log: it is done (offset unknown), not retried for ever.
    #[tokio::test]
    async fn an_out_of_order_answer_to_a_batch_later_acknowledgements_prove_written_is_done() {
        let (sh, key) =
            producer_with(Part { in_flight: 1, next_seq: 6, acked_seq: 6, recovering: true, ..Part::default() });
        let (tx, rx) = tokio::sync::oneshot::channel();
        let ooo = Some(ResponseError::OutOfOrderSequenceNumber);
        apply(&sh, &mut sh.lock(), "t".into(), 0, Batch { deliveries: vec![tx], attempts: 2, ..batch(0) }, answer(ooo));
        let done = tokio::time::timeout(Duration::from_secs(5), rx).await.expect("answered").unwrap();
        assert_eq!(done.expect("written, so delivered").offset, -1, "its offset is not known");
        let st = sh.lock();
        assert!(st.parts[&key].queue.is_empty() && !st.parts[&key].recovering && !st.needs_bump);
        drop(st);
        // an OUT_OF_ORDER answer to the batch right at the acknowledged point is still a gap
        sh.lock().parts.get_mut(&key).unwrap().in_flight = 1;
        sh.lock().parts.get_mut(&key).unwrap().recovering = false;
        apply(&sh, &mut sh.lock(), "t".into(), 0, batch(6), answer(ooo));
        assert!(sh.lock().needs_bump, "batch 6 follows the acknowledged ones: a gap");
    }

    /// A batch retried until its `delivery.timeout.ms` runs out fails with an error that says
    /// how many attempts it had and why the last was retried, whether it expires as its answer
    /// comes back or while it waits in the queue (an unexplained 170-s expiry was once seen in
    /// `lost_responses_never_duplicate_or_reorder`). It expires in the queue even while the
    /// producer waits for a new epoch: the first expiry left a gap, and the sender once
    /// skipped expiry until the epoch came, so a broker that never gave one kept the record
    /// past its timeout forever.
    #[tokio::test]
    async fn a_batch_that_runs_out_of_time_retrying_says_why() {
        let (sh, key) = producer_with(Part { in_flight: 2, next_seq: 2, recovering: true, ..Part::default() });
        let ooo = Some(ResponseError::OutOfOrderSequenceNumber);
        // expires as its answer comes back
        let (tx, rx) = tokio::sync::oneshot::channel();
        let mut late = Batch { deliveries: vec![tx], attempts: 3, deadline: Instant::now(), ..batch(1) };
        late.last_failure = Some("connection closed".into());
        apply(&sh, &mut sh.lock(), "t".into(), 0, late, answer(ooo));
        let e = rx.await.unwrap().unwrap_err().to_string();
        assert!(e.contains("3 attempts") && e.contains("OutOfOrderSequenceNumber"), "{e}");
        // retried (its deadline ahead), then expires waiting in the queue
        let (tx, rx) = tokio::sync::oneshot::channel();
        apply(&sh, &mut sh.lock(), "t".into(), 0, Batch { deliveries: vec![tx], attempts: 2, ..batch(0) }, answer(ooo));
        {
            let mut st = sh.lock();
            let part = st.parts.get_mut(&key).unwrap();
            assert_eq!(part.queue.len(), 1, "retried");
            part.queue[0].deadline = Instant::now();
        }
        assert!(sh.lock().needs_bump, "the first expiry left a gap: a new epoch is pending");
        let _ = plan(&sh);
        let e = tokio::time::timeout(Duration::from_secs(5), rx)
            .await
            .expect("expired in the queue")
            .unwrap()
            .unwrap_err()
            .to_string();
        assert!(e.contains("2 attempts") && e.contains("OutOfOrderSequenceNumber"), "{e}");
    }

    /// A transactional record that expires before it was ever sent (its partition still
    /// waiting for AddPartitionsToTxn) leaves no sequence gap, but its transaction must not
    /// commit without it: the transaction becomes abortable, as the Java producer's does.
    #[tokio::test]
    async fn an_unsent_transactional_record_that_expires_makes_the_transaction_abortable() {
        let sh = shared(ClientConfig::new().set("transactional.id", "x"));
        let (tx, rx) = tokio::sync::oneshot::channel();
        let unsent = Batch { deliveries: vec![tx], attempts: 0, seq: None, deadline: Instant::now(), ..batch(0) };
        sh.lock().parts.insert(("t".to_string(), 0), Part { queue: [unsent].into(), ..Part::default() });
        let _ = plan(&sh);
        let e = tokio::time::timeout(Duration::from_secs(5), rx).await.expect("expired").unwrap().unwrap_err();
        assert!(e.to_string().contains("0 attempts"), "{e}");
        let st = sh.lock();
        assert!(st.abortable.is_some() && !st.needs_bump, "abortable, and no new epoch for a gap that is not there");
    }
}
