//! An internal key/value log: the storage crate's `Log` (same CRC, recovery and group-commit
//! fsync) holding records whose latest value per key is the state, and a record without a value
//! deletes its key. Used by the group coordinator (`__consumer_offsets-<n>`) and the transaction
//! coordinator (`__transaction_state-<n>`).
//!
//! Reload time is bounded by compaction by re-append: when the log has taken many more records
//! than there are live keys, the owner re-appends its live state and the log start offset moves
//! to that point, so whole segments behind it are deleted and a replay reads only live state plus
//! the tail written since (docs/decisions/0004-group-coordinator.md).

use bytes::Bytes;
use sluice_protocol::batch::{iter_batches, BatchBuilder, NewRecord};
use sluice_storage::{FlushPolicy, Flusher, Log, LogConfig, StorageError};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Compact when at least this many records were appended since the last compaction and more
/// than twice the live keys.
pub const COMPACT_MIN_RECORDS: u64 = 1000;
/// Records per batch.
const RECORDS_PER_BATCH: usize = 500;

/// A key and its value (`None`: deleted).
pub type KvRecord = (Bytes, Option<Bytes>);

/// What to wait on for durability: the log's flusher and the end offset written.
pub type Durable = Option<(Arc<Flusher>, i64)>;

/// What to wait on before acting on a coordinator-log write: a local fsync, or (cluster mode,
/// replicated coordinator log) the Raft commit of the proposed records.
pub enum LogWait {
    Local(Durable),
    Raft(crate::cluster::replica::PendingWrite<crate::replication::types::ShardConfig>),
}

impl LogWait {
    pub fn none() -> LogWait {
        LogWait::Local(None)
    }

    pub fn is_none(&self) -> bool {
        matches!(self, LogWait::Local(None))
    }

    pub async fn wait(self) -> Result<(), StorageError> {
        match self {
            LogWait::Local(None) => Ok(()),
            LogWait::Local(Some((f, end))) => tokio::task::spawn_blocking(move || f.sync_to(end).map(|_| ()))
                .await
                .unwrap_or_else(|_| Err(StorageError::InvalidConfig("fsync task failed".into()))),
            LogWait::Raft(p) => match p.wait(std::time::Duration::from_secs(10)).await {
                Ok(crate::replication::types::ShardResult::Done) => Ok(()),
                Ok(crate::replication::types::ShardResult::Failed(e)) => {
                    Err(StorageError::InvalidConfig(format!("coordinator log write not applied: {e}")))
                }
                Err(e) => Err(StorageError::InvalidConfig(format!("coordinator log write not committed: {e}"))),
            },
        }
    }

    /// [`LogWait::wait`] from blocking test code (a local log only: a replicated write is
    /// awaited, never blocked on).
    #[cfg(test)]
    pub fn wait_blocking(self) -> Result<(), StorageError> {
        match self {
            LogWait::Local(None) => Ok(()),
            LogWait::Local(Some((f, end))) => f.sync_to(end).map(|_| ()),
            LogWait::Raft(_) => Err(StorageError::InvalidConfig("a replicated write is awaited".into())),
        }
    }
}

pub struct KvLog {
    dir: PathBuf,
    config: LogConfig,
    log: Option<Log>,
    records_since_compaction: u64,
    /// Live keys found by the last fold ([`KvLog::compact_folding`]).
    live_at_last_fold: u64,
    /// Test code: appends write nothing, as if lost before they reached the disk.
    #[cfg(test)]
    pub drop_appends: bool,
}

impl KvLog {
    /// A log in `dir`, opened on first use. Always fsynced before acknowledging (`sync`), never
    /// trimmed by time or size: only compaction moves its start.
    pub fn new(dir: PathBuf, base: &LogConfig, segment_bytes: u64) -> KvLog {
        let mut config = base.clone();
        config.segment_bytes = segment_bytes;
        config.retention_ms = -1;
        config.retention_bytes = -1;
        config.flush = FlushPolicy::Sync;
        KvLog {
            dir,
            config,
            log: None,
            records_since_compaction: 0,
            live_at_last_fold: 0,
            #[cfg(test)]
            drop_appends: false,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn log(&mut self) -> Result<&mut Log, StorageError> {
        if self.log.is_none() {
            self.log = Some(Log::open(&self.dir, self.config.clone())?);
        }
        match self.log.as_mut() {
            Some(l) => Ok(l),
            None => Err(StorageError::Offline(self.dir.clone())),
        }
    }

    /// Append records in order; returns what to wait on for their durability.
    pub fn append(&mut self, records: &[KvRecord], now: i64) -> Result<Durable, StorageError> {
        #[cfg(test)]
        if self.drop_appends {
            return Ok(None);
        }
        if records.is_empty() {
            return Ok(None);
        }
        let log = self.log()?;
        let mut end = log.log_end_offset();
        for chunk in records.chunks(RECORDS_PER_BATCH) {
            let recs: Vec<NewRecord> = chunk
                .iter()
                .map(|(k, v)| NewRecord { timestamp: now, key: Some(k.clone()), value: v.clone(), headers: Vec::new() })
                .collect();
            let batch = BatchBuilder::default()
                .build(&recs)
                .map_err(|e| StorageError::InvalidConfig(format!("internal log batch: {e}")))?;
            let mut buf = batch.to_vec();
            let info = log.append(&mut buf, now, Some(0))?;
            end = info.last_offset + 1;
        }
        let flusher = log.flusher();
        self.records_since_compaction += records.len() as u64;
        Ok(Some((flusher, end)))
    }

    /// Every record from the log start, in order (reload). Unreadable batches are skipped with
    /// a warning (their CRC was valid, so this is a format problem, not corruption).
    pub fn read_all(&mut self) -> Result<Vec<KvRecord>, StorageError> {
        if !self.dir.exists() {
            return Ok(Vec::new());
        }
        let dir = self.dir.clone();
        let log = self.log()?;
        let durable = log.flusher().durable_end();
        log.set_high_watermark(durable);
        let mut offset = log.log_start_offset();
        let end = log.log_end_offset();
        let mut out = Vec::new();
        while offset < end {
            let chunk = log.read(offset, 1 << 20, None, true)?;
            if chunk.is_empty() {
                break;
            }
            for b in iter_batches(&chunk) {
                let (_, b) = b.map_err(|e| StorageError::Corrupt {
                    path: dir.clone(),
                    position: 0,
                    reason: format!("internal log batch at {offset}: {e}"),
                })?;
                offset = b.last_offset() + 1;
                match b.records() {
                    Ok(rs) => out.extend(rs.into_iter().filter_map(|r| r.key.map(|k| (k, r.value)))),
                    Err(e) => tracing::warn!(dir = %dir.display(), "skipping unreadable internal-log batch: {e}"),
                }
            }
        }
        self.records_since_compaction = out.len() as u64;
        Ok(out)
    }

    /// The live records: the newest value of each key, deleted keys dropped, in the order keys
    /// were last written (a replicated shard's snapshot).
    pub fn live(&mut self) -> Result<Vec<KvRecord>, StorageError> {
        Ok(fold(self.read_all()?))
    }

    /// Whether the log has grown enough beyond `live_keys` to be worth compacting.
    pub fn wants_compaction(&self, live_keys: usize) -> bool {
        let n = self.records_since_compaction;
        n >= COMPACT_MIN_RECORDS && n > 2 * live_keys as u64
    }

    /// Compaction for an owner that keeps no state of its own here (a replica of a coordinator
    /// log it does not lead): when enough was appended since the last look, fold the log itself —
    /// the newest value of each key, deleted keys dropped, in the order keys were last written —
    /// and, if that is less than half of it, re-append the live records and drop the rest.
    /// Returns the live records kept, if it compacted. Blocking.
    pub fn compact_folding(&mut self, now: i64) -> Result<Option<usize>, StorageError> {
        let n = self.records_since_compaction;
        if n < COMPACT_MIN_RECORDS || n <= 2 * self.live_at_last_fold {
            return Ok(None);
        }
        let records = self.read_all()?;
        let total = records.len() as u64;
        let live = fold(records);
        self.live_at_last_fold = live.len() as u64;
        if total <= 2 * live.len() as u64 {
            return Ok(None);
        }
        self.compact(&live, now)?;
        Ok(Some(live.len()))
    }

    /// Re-append the live state and drop everything before it (blocking: waits for the fsync):
    /// the log then holds exactly `live` (nothing, if it is empty). The active segment is rolled
    /// first, so every segment of the old records is deleted.
    pub fn compact(&mut self, live: &[KvRecord], now: i64) -> Result<(), StorageError> {
        self.log()?.roll()?;
        let start = self.log()?.log_end_offset();
        match self.append(live, now)? {
            Some((flusher, end)) => {
                let durable = flusher.sync_to(end)?;
                let log = self.log()?;
                log.set_high_watermark(durable);
                log.delete_records(start)?;
            }
            None => {
                let log = self.log()?;
                let durable = log.flusher().sync_to(start)?;
                log.set_high_watermark(durable);
                log.delete_records(start)?;
            }
        }
        self.records_since_compaction = 0;
        self.live_at_last_fold = live.len() as u64;
        Ok(())
    }

    /// Flush and close (clean shutdown).
    pub fn close(&mut self) -> Result<(), StorageError> {
        match self.log.take() {
            Some(log) => log.close(),
            None => Ok(()),
        }
    }

    /// Bytes on disk in the log's segments.
    pub fn size_bytes(&mut self) -> u64 {
        self.log().map(|l| l.size_bytes()).unwrap_or(0)
    }

    #[cfg(test)]
    pub fn log_start_and_segments(&self) -> Option<(i64, usize)> {
        self.log.as_ref().map(|l| (l.log_start_offset(), l.segment_count()))
    }
}

/// The newest value of each key, without deleted keys, ordered by each key's last write.
pub fn fold(records: Vec<KvRecord>) -> Vec<KvRecord> {
    let mut last: std::collections::HashMap<Bytes, usize> = std::collections::HashMap::new();
    for (i, (k, _)) in records.iter().enumerate() {
        last.insert(k.clone(), i);
    }
    records
        .into_iter()
        .enumerate()
        .filter(|(i, (k, v))| v.is_some() && last.get(k) == Some(i))
        .map(|(_, r)| r)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(k: &str, v: Option<&str>) -> KvRecord {
        (Bytes::copy_from_slice(k.as_bytes()), v.map(|v| Bytes::copy_from_slice(v.as_bytes())))
    }

    #[test]
    fn fold_keeps_the_newest_value_and_drops_deleted_keys() {
        let out = fold(vec![rec("a", Some("1")), rec("b", Some("1")), rec("a", Some("2")), rec("b", None)]);
        assert_eq!(out, vec![rec("a", Some("2"))]);
    }

    #[test]
    fn folding_compaction_bounds_the_log_and_keeps_the_state() {
        let dir = tempfile::tempdir().unwrap();
        let base = LogConfig::default();
        let mut log = KvLog::new(dir.path().join("kv"), &base, 1 << 20);
        for i in 0..5_000u32 {
            let key = format!("id-{}", i % 10);
            let (f, end) = log.append(&[rec(&key, Some(&format!("v{i}")))], 0).unwrap().unwrap();
            f.sync_to(end).unwrap();
        }
        log.append(&[rec("id-9", None)], 0).unwrap();
        let before = log.size_bytes();
        assert_eq!(log.compact_folding(0).unwrap(), Some(9));
        let after = log.size_bytes();
        assert!(after * 10 < before, "{after} bytes left of {before}");
        assert_eq!(log.compact_folding(0).unwrap(), None, "nothing new to compact");
        drop(log); // unclean: reopen reads the compacted log
        let mut log = KvLog::new(dir.path().join("kv"), &base, 1 << 20);
        let mut state = fold(log.read_all().unwrap());
        state.sort();
        let want: Vec<KvRecord> = (0..9).map(|k| rec(&format!("id-{k}"), Some(&format!("v{}", 4990 + k)))).collect();
        assert_eq!(state, want);
    }
}
