//! The producer: `send` puts a record into its partition's open batch and returns a future for
//! its offset; a background sender drains batches that are full or have waited `linger.ms`,
//! one Produce request per broker, up to `max.in.flight.requests.per.connection` requests per
//! partition in flight.
//!
//! **Idempotence** (on by default, as in Kafka 3+): the producer gets a producer id from
//! InitProducerId, numbers each partition's batches with sequences fixed on first send, and
//! retries a failed batch with the same sequence, so the broker writes it once. Batches behind
//! a retried one come back OUT_OF_ORDER_SEQUENCE and are resent in order. A sequence gap the
//! broker cannot bridge (UNKNOWN_PRODUCER_ID, a batch failed for good) bumps the producer to a
//! new id/epoch once nothing is in flight, and numbering starts again at 0.
//!
//! **Transactions** (`transactional.id`): see [`Producer::init_transactions`] and the
//! `txn` module; partitions are added to the transaction (AddPartitionsToTxn) by the sender
//! before their first batch is sent.

mod sender;
mod txn;

use crate::cluster::Cluster;
use crate::config::{ClientConfig, COMMON};
use crate::error::{Error, ErrorKind, Result};
use crate::partitioner::Sticky;
use crate::sync::Locked as _;
use bytes::Bytes;
use sluice_protocol::batch::{Compression, Header, NewRecord};
use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch, Notify, Semaphore};

pub use txn::{ConsumerGroupMetadata, PreparedTxnState};

/// A record to send.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerRecord {
    /// Topic to write to.
    pub topic: String,
    /// Partition; `None` lets the partitioner choose (murmur2 of the key, sticky without one).
    pub partition: Option<i32>,
    /// Key (may be null).
    pub key: Option<Bytes>,
    /// Value (may be null: a tombstone).
    pub value: Option<Bytes>,
    /// Headers in order.
    pub headers: Vec<(String, Option<Bytes>)>,
    /// Create time in ms since the epoch; `None` means now.
    pub timestamp: Option<i64>,
}

impl ProducerRecord {
    /// A record for `topic` with a value.
    pub fn new(topic: impl Into<String>, value: impl Into<Bytes>) -> ProducerRecord {
        ProducerRecord { topic: topic.into(), value: Some(value.into()), ..Default::default() }
    }

    /// Set the key.
    pub fn key(mut self, key: impl Into<Bytes>) -> ProducerRecord {
        self.key = Some(key.into());
        self
    }

    /// Set the partition.
    pub fn partition(mut self, partition: i32) -> ProducerRecord {
        self.partition = Some(partition);
        self
    }

    /// Add a header.
    pub fn header(mut self, key: impl Into<String>, value: impl Into<Bytes>) -> ProducerRecord {
        self.headers.push((key.into(), Some(value.into())));
        self
    }

    /// Set the timestamp (ms since the epoch).
    pub fn timestamp(mut self, ms: i64) -> ProducerRecord {
        self.timestamp = Some(ms);
        self
    }

    fn size_estimate(&self) -> usize {
        24 + self.key.as_ref().map_or(0, |k| k.len())
            + self.value.as_ref().map_or(0, |v| v.len())
            + self.headers.iter().map(|(k, v)| 8 + k.len() + v.as_ref().map_or(0, |v| v.len())).sum::<usize>()
    }
}

/// Where a record was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordMetadata {
    /// Partition written.
    pub partition: i32,
    /// Offset of the record; -1 when unknown (acks=0, or a duplicate the broker no longer
    /// remembers the offset of).
    pub offset: i64,
    /// Timestamp the broker stored (create time, or the append time for LogAppendTime topics).
    pub timestamp: i64,
}

/// Resolves when the broker has acknowledged (or finally refused) a record.
pub struct DeliveryFuture {
    rx: oneshot::Receiver<Result<RecordMetadata>>,
}

impl Future for DeliveryFuture {
    type Output = Result<RecordMetadata>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.unwrap_or_else(|_| Err(Error::new(ErrorKind::Fatal, "producer dropped the record"))))
    }
}

/// Producer settings (Kafka names and defaults).
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub acks: i16,
    pub linger: Duration,
    pub batch_size: usize,
    pub buffer_memory: usize,
    pub compression: Compression,
    pub retry_backoff: Duration,
    pub delivery_timeout: Duration,
    pub request_timeout: Duration,
    pub max_in_flight: usize,
    pub idempotent: bool,
    pub transactional_id: Option<String>,
    pub transaction_timeout: Duration,
    /// `transaction.two.phase.commit.enable` (KIP-939): transactions are completed by an
    /// external coordinator and never aborted by the transaction timeout.
    pub two_phase_commit: bool,
    /// `transaction.heartbeat.interval.ms` (Sluice): heartbeat the transaction coordinator this
    /// often while a transaction is open and unprepared (0: never).
    pub heartbeat_interval: Duration,
    pub max_request_size: usize,
    pub max_block: Duration,
}

const PRODUCER_KEYS: &[&str] = &[
    "acks",
    "linger.ms",
    "batch.size",
    "buffer.memory",
    "compression.type",
    "retries",
    "delivery.timeout.ms",
    "max.in.flight.requests.per.connection",
    "enable.idempotence",
    "transactional.id",
    "transaction.timeout.ms",
    "transaction.two.phase.commit.enable",
    "transaction.heartbeat.interval.ms",
    "max.request.size",
    "max.block.ms",
];

impl Settings {
    fn from_config(c: &ClientConfig) -> Result<Settings> {
        let known: Vec<&str> = COMMON.iter().chain(PRODUCER_KEYS).copied().collect();
        c.check_known(&known)?;
        let acks = match c.get("acks").map(|a| a.trim()) {
            None | Some("all") | Some("-1") => -1,
            Some("0") => 0,
            Some("1") => 1,
            Some(o) => return Err(Error::invalid(format!("acks must be all, -1, 0 or 1, not '{o}'"))),
        };
        let compression = match c.string("compression.type", "none").as_str() {
            "none" => Compression::None,
            "gzip" => Compression::Gzip,
            "snappy" => Compression::Snappy,
            "lz4" => Compression::Lz4,
            "zstd" => Compression::Zstd,
            o => return Err(Error::invalid(format!("compression.type '{o}' is not none, gzip, snappy, lz4 or zstd"))),
        };
        let max_in_flight: usize = c.parse("max.in.flight.requests.per.connection", 5)?;
        let retries: i64 = c.parse("retries", i32::MAX as i64)?;
        let transactional_id = c.get("transactional.id").map(|s| s.to_string()).filter(|s| !s.is_empty());
        // As the Java client: idempotence is on unless the settings conflict with it; if it
        // was asked for explicitly, a conflict is an error.
        let explicit = c.get("enable.idempotence").is_some();
        let mut idempotent = c.boolean("enable.idempotence", true)?;
        let conflict = if acks != -1 {
            Some("acks=all")
        } else if max_in_flight > 5 {
            Some("max.in.flight.requests.per.connection <= 5")
        } else if retries <= 0 {
            Some("retries > 0")
        } else {
            None
        };
        if let (true, Some(need)) = (idempotent, conflict) {
            if explicit || transactional_id.is_some() {
                return Err(Error::invalid(format!("idempotence (and transactions) need {need}")));
            }
            idempotent = false;
        }
        if transactional_id.is_some() && !idempotent {
            return Err(Error::invalid("transactional.id needs enable.idempotence=true"));
        }
        let two_phase_commit = c.boolean("transaction.two.phase.commit.enable", false)?;
        if two_phase_commit && transactional_id.is_none() {
            return Err(Error::invalid("transaction.two.phase.commit.enable needs transactional.id"));
        }
        let s = Settings {
            acks,
            linger: c.ms("linger.ms", 5)?,
            batch_size: c.parse("batch.size", 16384usize)?.max(1),
            buffer_memory: c.parse("buffer.memory", 32 * 1024 * 1024usize)?,
            compression,
            retry_backoff: c.ms("retry.backoff.ms", 100)?,
            delivery_timeout: c.ms("delivery.timeout.ms", 120_000)?,
            request_timeout: c.ms("request.timeout.ms", 30_000)?,
            max_in_flight: max_in_flight.max(1),
            idempotent,
            transactional_id,
            transaction_timeout: c.ms("transaction.timeout.ms", 60_000)?,
            two_phase_commit,
            heartbeat_interval: c.ms("transaction.heartbeat.interval.ms", 0)?,
            max_request_size: c.parse("max.request.size", 1024 * 1024usize)?,
            max_block: c.ms("max.block.ms", 60_000)?,
        };
        if s.buffer_memory < s.max_request_size {
            return Err(Error::invalid("buffer.memory must be at least max.request.size"));
        }
        Ok(s)
    }
}

/// A batch of records for one partition.
pub(crate) struct Batch {
    pub records: Vec<NewRecord>,
    pub deliveries: Vec<oneshot::Sender<Result<RecordMetadata>>>,
    pub bytes: usize,
    pub created: Instant,
    pub deadline: Instant,
    /// Base sequence, fixed when the batch is first sent (idempotent producers).
    pub seq: Option<i32>,
    pub attempts: u32,
    /// An attempt ended without an answer (connection lost, timeout): the broker may have
    /// written it. Such a batch keeps its sequence; it is never re-numbered under a new epoch.
    pub maybe_written: bool,
    /// Why its last attempt was retried (an error code or a lost connection): named in the
    /// error it fails with if `delivery.timeout.ms` runs out, so a retry loop explains itself.
    pub last_failure: Option<String>,
}

impl Batch {
    /// The error for a batch whose `delivery.timeout.ms` ran out: `what` happened, after how
    /// many attempts, and why the last one was retried.
    pub fn expired(&self, what: &str) -> Error {
        let last = self.last_failure.as_deref().map(|f| format!("; the last was retried for {f}")).unwrap_or_default();
        Error::timeout(format!("{what} ({} attempts{last})", self.attempts))
    }

    pub fn fail(self, e: &Error) -> usize {
        for d in self.deliveries {
            let _ = d.send(Err(e.clone()));
        }
        self.bytes
    }
}

/// Per-partition producer state.
#[derive(Default)]
pub(crate) struct Part {
    /// Batches not in flight, in sequence order (retries first); the last may still grow.
    pub queue: VecDeque<Batch>,
    pub in_flight: usize,
    pub next_seq: i32,
    /// The sequence after the last acknowledged batch: the broker's next expected one unless
    /// something in flight was written. An OUT_OF_ORDER answer to a batch past it means an
    /// earlier batch is unresolved (its request lost with a connection, the later one sent on
    /// a new connection), not a gap: retried, as the Java producer does.
    pub acked_seq: i32,
    /// A batch failed and is being retried: later batches' OUT_OF_ORDER answers are expected,
    /// and nothing new is sent until the in-flight ones are back.
    pub recovering: bool,
    pub backoff_until: Option<Instant>,
    /// Added to the current transaction.
    pub added: bool,
}

impl Part {
    /// A new producer epoch: sequences start over at 0.
    pub fn restart_sequences(&mut self) {
        self.next_seq = 0;
        self.acked_seq = 0;
        self.recovering = false;
    }

    /// The batch at `seq` with `records` records ends at or before the acknowledged point: a
    /// batch after it in this epoch was acknowledged. A broker appends a producer's batches
    /// only in sequence order, so this one is in the log, even when the broker no longer
    /// remembers it among its last five (it then answers its retry OUT_OF_ORDER, not
    /// DUPLICATE).
    pub fn written_before_acknowledged(&self, seq: i32, records: usize) -> bool {
        at_or_after(self.acked_seq, seq_end(seq, records))
    }

    /// A batch at `seq` with `records` records was acknowledged (written, or a duplicate).
    pub fn acknowledged(&mut self, seq: i32, records: usize) {
        // (answers come in sequence order but for retries of batches written before: never
        // move back)
        let end = seq_end(seq, records);
        if at_or_after(end, self.acked_seq) {
            self.acked_seq = end;
        }
    }
}

/// The sequence after a batch at `seq` with `records` records (sequences wrap at i32::MAX).
fn seq_end(seq: i32, records: usize) -> i32 {
    seq.wrapping_add(records as i32) & i32::MAX
}

/// Sequence `a` is `b` or after it: sequences wrap at i32::MAX, so "after" is a distance
/// below 2^30.
fn at_or_after(a: i32, b: i32) -> bool {
    a.wrapping_sub(b) & i32::MAX < 1 << 30
}

/// Transaction state (see `txn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TxnPhase {
    Uninitialized,
    Ready,
    InTransaction,
    /// EndTxn(commit) was sent but not acknowledged: only `commit_transaction` may follow.
    Committing,
    /// EndTxn(abort) was sent but not acknowledged: only `abort_transaction` may follow.
    Aborting,
    /// Prepared for two-phase commit (`prepare_transaction`, or a prepared transaction kept by
    /// `init_transactions_keep_prepared`): only commit, abort or `complete_transaction` follow.
    Prepared,
}

pub(crate) struct State {
    pub parts: HashMap<(String, i32), Part>,
    pub sticky: Sticky,
    pub partition_counts: HashMap<String, i32>,
    pub pid: i64,
    pub epoch: i16,
    /// A sequence gap: get a new epoch once nothing is in flight (idempotent, not transactional).
    pub needs_bump: bool,
    pub bumping: bool,
    pub closing: bool,
    pub flushing: usize,
    /// Batches queued or in flight.
    pub outstanding: usize,
    pub fatal: Option<Error>,
    pub refreshing: HashSet<String>,
    // Transactions
    pub phase: TxnPhase,
    /// Why the current transaction can only be aborted.
    pub abortable: Option<Error>,
    pub adding: bool,
    pub offsets_added: bool,
    /// A batch of this transaction failed after being sent: bump the epoch after the abort.
    pub txn_seq_gap: bool,
    /// The prepared transaction this producer must complete (KIP-939): the one it prepared, or
    /// the one an earlier instance left prepared and `init_transactions_keep_prepared` kept.
    pub prepared: Option<PreparedTxnState>,
    /// The coordinator serves Sluice's explicit prepares and heartbeats (it said so in its
    /// InitProducerId answer).
    pub liveness_served: bool,
}

pub(crate) struct Shared {
    pub cluster: Arc<Cluster>,
    pub s: Settings,
    pub st: Mutex<State>,
    pub wake: Notify,
    pub memory: Arc<Semaphore>,
    pub progress: watch::Sender<u64>,
}

impl Shared {
    /// A producer's shared state before its first request (no producer id yet).
    pub fn new(s: Settings, cluster: Cluster) -> Shared {
        Shared {
            cluster: Arc::new(cluster),
            memory: Arc::new(Semaphore::new(s.buffer_memory)),
            st: Mutex::new(State {
                parts: HashMap::new(),
                sticky: Sticky::default(),
                partition_counts: HashMap::new(),
                pid: -1,
                epoch: -1,
                needs_bump: false,
                bumping: false,
                closing: false,
                flushing: 0,
                outstanding: 0,
                fatal: None,
                refreshing: HashSet::new(),
                phase: TxnPhase::Uninitialized,
                abortable: None,
                adding: false,
                offsets_added: false,
                txn_seq_gap: false,
                prepared: None,
                liveness_served: false,
            }),
            wake: Notify::new(),
            progress: watch::channel(0).0,
            s,
        }
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.st.locked()
    }

    /// Give back buffer memory and count a batch as finished.
    pub fn finished(&self, st: &mut State, bytes: usize) {
        self.memory.add_permits(bytes);
        st.outstanding = st.outstanding.saturating_sub(1);
        self.progress.send_modify(|v| *v += 1);
    }
}

struct Handle {
    shared: Arc<Shared>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.lock().closing = true;
        self.shared.wake.notify_one();
    }
}

/// An asynchronous Kafka producer. Cheap to clone; clones share batches and connections.
/// Dropping the last clone delivers what is queued, then stops the sender.
#[derive(Clone)]
pub struct Producer {
    h: Arc<Handle>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

impl Producer {
    /// A producer from Kafka-style properties; `bootstrap.servers` is required. Must be
    /// called inside a tokio runtime. Idempotent producers get their producer id here.
    pub async fn new(config: &ClientConfig) -> Result<Producer> {
        let s = Settings::from_config(config)?;
        let mut cluster = Cluster::new(
            &config.bootstrap()?,
            &config.string("client.id", "sluice-producer"),
            s.max_in_flight.max(1) * 4,
        )?;
        cluster.retry_backoff = s.retry_backoff;
        cluster.request_timeout = s.request_timeout;
        cluster.security = crate::security::Security::from_config(config)?;
        let shared = Arc::new(Shared::new(s, cluster));
        if shared.s.idempotent && shared.s.transactional_id.is_none() {
            let (pid, epoch) = txn::init_producer_id(&shared, None).await?;
            let mut st = shared.lock();
            st.pid = pid;
            st.epoch = epoch;
        }
        tokio::spawn(sender::run(shared.clone()));
        txn::spawn_heartbeats(&shared);
        Ok(Producer { h: Arc::new(Handle { shared }) })
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.h.shared
    }

    /// The producer id and epoch in use (-1, -1 when not idempotent).
    pub fn producer_id(&self) -> (i64, i16) {
        let st = self.shared().lock();
        (st.pid, st.epoch)
    }

    /// Queue a record. Waits (up to `max.block.ms`) for metadata and buffer space; the
    /// returned future resolves once the broker acknowledged the record. A transactional
    /// producer must be inside a transaction.
    pub async fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture> {
        let sh = self.shared();
        {
            let st = sh.lock();
            if let Some(e) = &st.fatal {
                return Err(e.clone());
            }
            if st.closing {
                return Err(Error::invalid("the producer is closed"));
            }
            if sh.s.transactional_id.is_some() {
                if st.phase != TxnPhase::InTransaction {
                    return Err(Error::invalid("send outside a transaction: call begin_transaction first"));
                }
                if let Some(e) = &st.abortable {
                    return Err(e.clone());
                }
            }
        }
        let size = record.size_estimate();
        if size > sh.s.max_request_size {
            return Err(Error::kafka(
                kafka_protocol::error::ResponseError::MessageTooLarge,
                format!("record of {size} bytes exceeds max.request.size {}", sh.s.max_request_size),
            )
            .with_kind(ErrorKind::Invalid));
        }
        let cached = sh.lock().partition_counts.get(&record.topic).copied();
        let count = match cached {
            Some(n) => n,
            None => {
                let parts = tokio::time::timeout(sh.s.max_block, sh.cluster.partitions(&record.topic))
                    .await
                    .map_err(|_| Error::timeout(format!("no metadata for {} within max.block.ms", record.topic)))??;
                let n = parts.len() as i32;
                sh.lock().partition_counts.insert(record.topic.clone(), n);
                n
            }
        };
        if count == 0 {
            return Err(Error::invalid(format!("topic {} has no partitions", record.topic)));
        }
        if let Some(p) = record.partition {
            if p < 0 || p >= count {
                return Err(Error::invalid(format!("partition {p} of {} does not exist (has {count})", record.topic)));
            }
        }
        let permit = tokio::time::timeout(sh.s.max_block, sh.memory.clone().acquire_many_owned(size as u32))
            .await
            .map_err(|_| Error::timeout("buffer.memory is full: no room within max.block.ms"))?
            .map_err(|_| Error::invalid("the producer is closed"))?;
        permit.forget();
        let (tx, rx) = oneshot::channel();
        let (wake, full);
        {
            let mut st = sh.lock();
            let st = &mut *st;
            let partition =
                record.partition.unwrap_or_else(|| st.sticky.partition(&record.topic, record.key.as_deref(), count));
            let rec = NewRecord {
                timestamp: record.timestamp.unwrap_or_else(now_ms),
                key: record.key,
                value: record.value,
                headers: record.headers.into_iter().map(|(key, value)| Header { key, value }).collect(),
            };
            let part = st.parts.entry((record.topic.clone(), partition)).or_default();
            let open = part.queue.back_mut().filter(|b| {
                b.seq.is_none()
                    && b.attempts == 0
                    && b.bytes + size <= sh.s.batch_size.max(size)
                    && b.bytes + size <= sh.s.max_request_size
            });
            match open {
                Some(b) => {
                    b.records.push(rec);
                    b.deliveries.push(tx);
                    b.bytes += size;
                    full = b.bytes >= sh.s.batch_size;
                    wake = full;
                }
                None => {
                    let now = Instant::now();
                    part.queue.push_back(Batch {
                        records: vec![rec],
                        deliveries: vec![tx],
                        bytes: size,
                        created: now,
                        deadline: now + sh.s.delivery_timeout,
                        seq: None,
                        attempts: 0,
                        maybe_written: false,
                        last_failure: None,
                    });
                    st.outstanding += 1;
                    full = part.queue.len() > 1 || size >= sh.s.batch_size;
                    // A new batch: the sender must learn its linger deadline.
                    wake = true;
                }
            }
            // Unkeyed records move to another partition once this one's batch is full.
            if full && record.partition.is_none() {
                st.sticky.batch_sent(&record.topic, partition, count);
            }
        }
        if wake {
            sh.wake.notify_one();
        }
        Ok(DeliveryFuture { rx })
    }

    /// Send every queued record now and wait until all have been acknowledged or failed.
    pub async fn flush(&self) -> Result<()> {
        flush(self.shared()).await
    }

    /// Flush, then stop this producer (other clones stop too).
    pub async fn close(&self) -> Result<()> {
        let r = flush(self.shared()).await;
        self.shared().lock().closing = true;
        self.shared().wake.notify_one();
        r
    }
}

pub(crate) async fn flush(sh: &Arc<Shared>) -> Result<()> {
    let mut rx = sh.progress.subscribe();
    sh.lock().flushing += 1;
    sh.wake.notify_one();
    loop {
        let (outstanding, fatal) = {
            let st = sh.lock();
            (st.outstanding, st.fatal.clone())
        };
        if outstanding == 0 {
            break;
        }
        if fatal.is_some() && outstanding == 0 {
            break;
        }
        if rx.changed().await.is_err() {
            break;
        }
    }
    let mut st = sh.lock();
    st.flushing -= 1;
    match &st.fatal {
        Some(e) => Err(e.clone()),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idempotence_defaults_and_conflicts() {
        let base = ClientConfig::new().set("bootstrap.servers", "127.0.0.1:1");
        let s = Settings::from_config(&base).expect("defaults");
        assert!(s.idempotent && s.acks == -1 && s.max_in_flight == 5);
        let s = Settings::from_config(&base.clone().set("acks", "1")).expect("implicit");
        assert!(!s.idempotent, "acks=1 quietly turns implicit idempotence off, as in Java");
        assert!(Settings::from_config(&base.clone().set("acks", "1").set("enable.idempotence", "true")).is_err());
        assert!(Settings::from_config(&base.clone().set("transactional.id", "t").set("acks", "0")).is_err());
        assert!(Settings::from_config(&base.clone().set("compression.type", "brotli")).is_err());
        assert!(Settings::from_config(&base.clone().set("lingr.ms", "5")).is_err());
        let s = Settings::from_config(&base.set("compression.type", "zstd").set("linger.ms", 0)).expect("zstd");
        assert_eq!(s.compression, Compression::Zstd);
        assert!(s.linger.is_zero());
    }
}
