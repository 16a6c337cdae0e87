//! One partition on this broker: its log, the high watermark, and the append path.
//!
//! Lock order: a partition's `log` mutex is taken alone, never while holding another
//! partition's or the topic registry's lock. The mutex is held only for in-memory work and a
//! `pwrite` into the page cache; fsync happens outside it through the log's `Flusher`, so
//! concurrent produce requests share fsyncs (group commit).
//!
//! High watermark: under `FlushPolicy::Sync` it advances only to the durable end (nothing a
//! consumer sees can disappear in a crash); under `Interval` it advances right after the write.

pub mod producer_state;

use bytes::Bytes;
use producer_state::{BatchHeader, Plan, ProducerEntry, Refusal};
use sluice_protocol::batch::{iter_batches, BatchView, NO_PRODUCER_ID};
use sluice_storage::{AppendInfo, FlushPolicy, Flusher, Log, LogConfig, StorageError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// What a produce append did.
#[derive(Debug)]
pub enum Appended {
    /// Written at these offsets; wait for durability up to `last_offset + 1`.
    New { info: AppendInfo, log_start: i64, sync: bool },
    /// An exact retry of a retained batch: nothing written; the original offsets are answered
    /// once they are durable.
    Duplicate { first_offset: i64, last_offset: i64, log_start: i64, sync: bool },
}

#[derive(Debug)]
pub enum AppendError {
    Storage(StorageError),
    Refused(Refusal),
}

pub struct Partition {
    pub topic: String,
    pub index: i32,
    /// Producer state (idempotence). Lock order: `producers` before `log`, so that check,
    /// append and apply are one step for each batch.
    producers: Mutex<HashMap<i64, ProducerEntry>>,
    log: Mutex<Log>,
    flusher: Arc<Flusher>,
    /// Wakes long-polling fetches when the high watermark moves.
    hw_changed: Arc<tokio::sync::Notify>,
}

/// What a read returned, with the offsets a Fetch response reports.
#[derive(Debug, Clone)]
pub struct ReadOutcome {
    pub records: Bytes,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
}

impl Partition {
    pub fn new(topic: String, index: i32, log: Log, hw_changed: Arc<tokio::sync::Notify>) -> Partition {
        let flusher = log.flusher();
        let producers = rebuild_producer_state(&log);
        Partition { topic, index, producers: Mutex::new(producers), log: Mutex::new(log), flusher, hw_changed }
    }

    /// Producer ids with state on this partition (for tests and DescribeProducers).
    pub fn producer_entry(&self, producer_id: i64) -> Option<ProducerEntry> {
        self.producers.lock().unwrap_or_else(|e| e.into_inner()).get(&producer_id).cloned()
    }

    /// Stage 1 of produce for one batch (header already validated): the idempotence check,
    /// the append, then the state update — in that order, under the producer-state lock.
    pub fn append_batch(&self, batch: &mut [u8], now_ms: i64) -> Result<Appended, AppendError> {
        let header = BatchView::parse_unchecked_crc(batch).map(|v| {
            (
                v.producer_id(),
                BatchHeader {
                    epoch: v.producer_epoch(),
                    first_seq: v.base_sequence(),
                    last_seq: v.last_sequence(),
                    transactional: v.is_transactional(),
                    max_timestamp: v.max_timestamp(),
                },
            )
        });
        let (pid, hdr) = match header {
            Ok((pid, hdr)) if pid != NO_PRODUCER_ID => (pid, hdr),
            _ => {
                let (info, log_start, sync) = self.append(batch, now_ms).map_err(AppendError::Storage)?;
                return Ok(Appended::New { info, log_start, sync });
            }
        };
        let mut producers = self.producers.lock().unwrap_or_else(|e| e.into_inner());
        match producer_state::check(producers.get(&pid), &hdr) {
            Plan::Reject(r) => Err(AppendError::Refused(r)),
            Plan::Duplicate { first_offset, last_offset } => {
                let log = self.log();
                let sync = log.config().flush == FlushPolicy::Sync;
                Ok(Appended::Duplicate { first_offset, last_offset, log_start: log.log_start_offset(), sync })
            }
            Plan::Append => {
                let (info, log_start, sync) = self.append(batch, now_ms).map_err(AppendError::Storage)?;
                let entry = producers.remove(&pid);
                producers.insert(pid, producer_state::apply(entry, &hdr, info.first_offset, info.last_offset));
                Ok(Appended::New { info, log_start, sync })
            }
        }
    }

    pub fn log(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn flush_policy(&self) -> FlushPolicy {
        self.log().config().flush
    }

    pub fn set_config(&self, config: LogConfig) -> Result<(), StorageError> {
        self.log().set_config(config)
    }

    /// Stage 1 of produce: validate and write (ordered with other appends to this partition).
    /// Returns what was stored, the log start offset, and whether durability must be awaited.
    pub fn append(&self, batches: &mut [u8], now_ms: i64) -> Result<(AppendInfo, i64, bool), StorageError> {
        let mut log = self.log();
        let info = log.append(batches, now_ms, Some(0))?;
        let log_start = log.log_start_offset();
        match log.config().flush {
            FlushPolicy::Sync => Ok((info, log_start, true)),
            FlushPolicy::Interval { .. } => {
                let leo = log.log_end_offset();
                log.set_high_watermark(leo);
                drop(log);
                self.hw_changed.notify_waiters();
                Ok((info, log_start, false))
            }
        }
    }

    /// Stage 2 of produce under the Sync policy: wait until offsets below `end` are durable,
    /// then advance the high watermark. Blocks: call from a blocking thread.
    pub fn wait_durable(&self, end: i64) -> Result<(), StorageError> {
        let durable = self.flusher.sync_to(end)?;
        self.log().set_high_watermark(durable);
        self.hw_changed.notify_waiters();
        Ok(())
    }

    /// Periodic flush for the Interval policy (and the recovery-point checkpoint).
    pub fn flush(&self) -> Result<(), StorageError> {
        let end = self.flusher.written_end();
        let durable = self.flusher.sync_to(end)?;
        let mut log = self.log();
        if log.config().flush == FlushPolicy::Sync {
            log.set_high_watermark(durable);
        }
        log.write_checkpoint()
    }

    /// Take the log out for a clean close at shutdown.
    pub fn into_log(self) -> Log {
        self.log.into_inner().unwrap_or_else(|e| e.into_inner())
    }

    pub fn high_watermark(&self) -> i64 {
        self.log().high_watermark()
    }

    /// Read up to `max_bytes` from `offset`, bounded by the high watermark (read_uncommitted)
    /// or the last stable offset (read_committed). Until transactions exist, LSO = HW.
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        read_committed: bool,
        min_one: bool,
    ) -> Result<ReadOutcome, StorageError> {
        let log = self.log();
        let hw = log.high_watermark();
        let lso = hw;
        let upper = if read_committed { lso } else { hw };
        let records = log.read(offset, max_bytes, Some(upper), min_one)?;
        Ok(ReadOutcome {
            records,
            high_watermark: hw,
            last_stable_offset: lso,
            log_start_offset: log.log_start_offset(),
        })
    }
}

/// Rebuild producer state by replaying the log from its start: every idempotent batch is
/// applied in offset order, exactly as it was when appended. (Snapshots that bound this replay
/// come with the idempotence issue.)
fn rebuild_producer_state(log: &Log) -> HashMap<i64, ProducerEntry> {
    let mut producers: HashMap<i64, ProducerEntry> = HashMap::new();
    let mut offset = log.log_start_offset();
    let end = log.log_end_offset();
    while offset < end {
        let chunk = match log.read(offset, 4 << 20, None, true) {
            Ok(c) if !c.is_empty() => c,
            Ok(_) => break,
            Err(e) => {
                tracing::error!("producer-state replay stopped at offset {offset}: {e}");
                break;
            }
        };
        for item in iter_batches(&chunk) {
            let Ok((_, v)) = item else { break };
            offset = v.last_offset() + 1;
            if v.producer_id() == NO_PRODUCER_ID || v.is_control() {
                continue;
            }
            let hdr = BatchHeader {
                epoch: v.producer_epoch(),
                first_seq: v.base_sequence(),
                last_seq: v.last_sequence(),
                transactional: v.is_transactional(),
                max_timestamp: v.max_timestamp(),
            };
            let pid = v.producer_id();
            let entry = producers.remove(&pid);
            let stale = entry.as_ref().is_some_and(|e| hdr.epoch < e.epoch);
            if stale {
                tracing::warn!(pid, offset = v.base_offset(), "replay: batch with an older epoch ignored");
                if let Some(e) = entry {
                    producers.insert(pid, e);
                }
                continue;
            }
            producers.insert(pid, producer_state::apply(entry, &hdr, v.base_offset(), v.last_offset()));
        }
    }
    producers
}
