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
use sluice_storage::{AppendInfo, FlushPolicy, Flusher, Log, LogConfig, StorageError};
use std::sync::{Arc, Mutex, MutexGuard};

pub struct Partition {
    pub topic: String,
    pub index: i32,
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
        Partition { topic, index, log: Mutex::new(log), flusher, hw_changed }
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
