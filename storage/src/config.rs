//! Per-log settings, named after Kafka's topic configs, with Kafka's defaults except where
//! Sluice is "durable by default" (the flush policy).

use crate::error::{Result, StorageError};

/// When appended data reaches the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushPolicy {
    /// fdatasync before an append is acknowledged as durable, with group commit: concurrent
    /// appenders that wait for durability share one fsync. Acknowledged writes survive kill -9
    /// and power loss of the node. The default.
    Sync,
    /// fdatasync every `interval_ms` (Kafka's `flush.ms`). Acknowledged writes survive kill -9
    /// (they are in the OS page cache) but up to `interval_ms` of them can be lost on power loss.
    Interval { interval_ms: u64 },
}

#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    /// `segment.bytes`: roll when the active segment would grow past this (default 1 GiB).
    pub segment_bytes: u64,
    /// `segment.ms`: roll when the active segment's first batch is this old (default 7 days).
    pub segment_ms: i64,
    /// `segment.index.bytes`: preallocated size of each index (default 10 MiB).
    pub segment_index_bytes: usize,
    /// `index.interval.bytes`: bytes between offset-index entries (default 4096).
    pub index_interval_bytes: u64,
    /// `retention.ms`: delete segments whose newest record is older (default 7 days; -1 = keep).
    pub retention_ms: i64,
    /// `retention.bytes`: delete oldest segments while the log is larger (default -1 = keep).
    pub retention_bytes: i64,
    /// `max.message.bytes`: largest batch accepted (default 1 MiB + 12 bytes, like Kafka).
    pub max_message_bytes: usize,
    pub flush: FlushPolicy,
    /// `cleanup.policy` includes `delete`: `retention.ms` and `retention.bytes` delete old
    /// segments. A topic that is only `compact` keeps them (as Kafka: its records go only by
    /// compaction, and by DeleteRecords).
    pub cleanup_delete: bool,
    /// `cleanup.policy` includes `compact`: records without a key are refused and the log
    /// cleaner keeps the newest record of each key.
    pub cleanup_compact: bool,
    /// `delete.retention.ms`: how long tombstones (and empty transactions' markers) stay after
    /// the cleaner first reaches them (default 1 day).
    pub delete_retention_ms: i64,
    /// `min.compaction.lag.ms`: a record stays uncompacted at least this long (default 0).
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`: a record is compacted within about this long — the cleaner
    /// takes the log whatever its dirty ratio, and the active segment of a compacted log rolls
    /// at this age (default: never).
    pub max_compaction_lag_ms: i64,
    /// `min.cleanable.dirty.ratio`: the dirty share of the cleanable bytes at which the cleaner
    /// takes the log (default 0.5).
    pub min_cleanable_dirty_ratio: f64,
    /// The partition leader epoch every stored batch carries: appends stamp it, and reads, the
    /// scrubber, recovery and repairs treat a batch with another as damaged — the field is
    /// outside the batch CRC, so this is how a flipped bit there is found (decision 0043).
    /// Sluice writes epoch 0 everywhere (default `Some(0)`); `None` stamps nothing and checks
    /// nothing.
    pub leader_epoch: Option<i32>,
    /// `log.page.cache.tail.bytes` (a broker setting): after each fsync, the log's synced bytes
    /// further than this from its end are dropped from the page cache (`POSIX_FADV_DONTNEED`),
    /// so the cache a log holds stays near this size and new writes reuse the pages it freed
    /// (decision 0053). -1 (the default) leaves the page cache to the kernel, as Kafka does.
    pub page_cache_tail_bytes: i64,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1024 * 1024 * 1024,
            segment_ms: 7 * 24 * 3600 * 1000,
            segment_index_bytes: 10 * 1024 * 1024,
            index_interval_bytes: 4096,
            retention_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: -1,
            max_message_bytes: 1024 * 1024 + 12,
            flush: FlushPolicy::Sync,
            cleanup_delete: true,
            cleanup_compact: false,
            delete_retention_ms: 24 * 3600 * 1000,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            min_cleanable_dirty_ratio: 0.5,
            leader_epoch: Some(0),
            page_cache_tail_bytes: -1,
        }
    }
}

impl LogConfig {
    /// The age at which the active segment rolls: `segment.ms`, or `max.compaction.lag.ms` on a
    /// compacted log when that is shorter (the active segment is never cleaned).
    pub fn roll_ms(&self) -> i64 {
        if self.cleanup_compact {
            self.segment_ms.min(self.max_compaction_lag_ms.max(1))
        } else {
            self.segment_ms
        }
    }

    pub fn validate(&self) -> Result<()> {
        if self.segment_bytes < 100 || self.segment_bytes > i32::MAX as u64 {
            return Err(StorageError::InvalidConfig(format!(
                "segment.bytes must be between 100 and {} (got {})",
                i32::MAX,
                self.segment_bytes
            )));
        }
        if self.segment_ms < 1 {
            return Err(StorageError::InvalidConfig(format!("segment.ms must be ≥ 1 (got {})", self.segment_ms)));
        }
        if self.segment_index_bytes < 4096 {
            return Err(StorageError::InvalidConfig(format!(
                "segment.index.bytes must be ≥ 4096 (got {})",
                self.segment_index_bytes
            )));
        }
        if self.max_message_bytes < 64 {
            return Err(StorageError::InvalidConfig(format!(
                "max.message.bytes must be ≥ 64 (got {})",
                self.max_message_bytes
            )));
        }
        if self.page_cache_tail_bytes < -1 {
            return Err(StorageError::InvalidConfig(format!(
                "log.page.cache.tail.bytes must be ≥ 0, or -1 (got {})",
                self.page_cache_tail_bytes
            )));
        }
        if let FlushPolicy::Interval { interval_ms: 0 } = self.flush {
            return Err(StorageError::InvalidConfig("flush interval must be ≥ 1 ms".into()));
        }
        Ok(())
    }
}
