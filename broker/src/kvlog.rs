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
    /// Why the log is held damaged though no read failed ([`KvLog::suspect_cut`]): nothing is
    /// read from it or written to it until it is rebuilt.
    suspect: Option<String>,
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
        finish_rebuild(&dir);
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
            suspect: None,
            live_at_last_fold: 0,
            #[cfg(test)]
            drop_appends: false,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn log(&mut self) -> Result<&mut Log, StorageError> {
        if self.suspect.is_some() {
            return Err(StorageError::Offline(self.dir.clone()));
        }
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
            let mut buf = kv_batch(chunk, now)?;
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

    /// Whether a read found damaged data in the log (it is offline until rebuilt:
    /// [`KvLog::rebuild`]).
    pub fn is_damaged(&self) -> bool {
        self.suspect.is_some() || self.log.as_ref().is_some_and(|l| l.is_damaged())
    }

    /// A replicated log (cluster mode) whose open cut bytes off its end: held damaged, to be
    /// rebuilt from another replica's copy. Every record in it was fsynced before its entry
    /// counted as applied, so a cut is either a write torn by a crash before that (the entry
    /// is applied again) or damage in acknowledged records — which look alike, and whose loss
    /// the Raft state would not notice (its `applied.json` is past them). A needless repair
    /// costs one copy of the shard's live records. Returns why, if so.
    pub fn suspect_cut(&mut self) -> Option<String> {
        if !self.dir.exists() {
            return None;
        }
        let cut = self.log().ok().map(|l| l.recovery_report().truncated_bytes).unwrap_or(0);
        if cut > 0 {
            self.suspect = Some(format!("its open cut {cut} bytes off its end"));
        }
        self.suspect.clone()
    }

    /// Replace the whole log with one holding exactly `records` (another replica's live records:
    /// a damaged replica's repair, decision 0037). Unlike [`KvLog::compact`] nothing of the old
    /// log is read or kept, so it works on a damaged log. Crash-safe: the new log is written and
    /// fsynced in `<dir>.rebuild`, then swapped in by two renames ([`finish_rebuild`] completes a
    /// swap a crash interrupted). Blocking.
    pub fn rebuild(&mut self, records: &[KvRecord], now: i64) -> Result<(), StorageError> {
        let (fresh, old) = (sibling(&self.dir, REBUILD_SUFFIX), sibling(&self.dir, DAMAGED_SUFFIX));
        remove_dir_if_any(&fresh)?;
        {
            let mut log = Log::open(&fresh, self.config.clone())?;
            for chunk in records.chunks(RECORDS_PER_BATCH) {
                let mut buf = kv_batch(chunk, now)?;
                log.append(&mut buf, now, Some(0))?;
            }
            let end = log.log_end_offset();
            log.flusher().sync_to(end)?;
            log.close()?;
        }
        // the damaged log is not flushed: it is dropped whole
        self.log = None;
        self.suspect = None;
        remove_dir_if_any(&old)?;
        if self.dir.exists() {
            std::fs::rename(&self.dir, &old).map_err(|e| io_at(&self.dir, e))?;
        }
        std::fs::rename(&fresh, &self.dir).map_err(|e| io_at(&fresh, e))?;
        if let Some(parent) = self.dir.parent() {
            sluice_storage::sidefile::sync_dir(parent)?;
        }
        remove_dir_if_any(&old)?;
        self.records_since_compaction = records.len() as u64;
        self.live_at_last_fold = records.len() as u64;
        Ok(())
    }

    /// The base offsets of the log's segments (none if it was never written).
    pub fn segment_bases(&mut self) -> Vec<i64> {
        if !self.dir.exists() {
            return Vec::new();
        }
        self.log().map(|l| l.segment_bases()).unwrap_or_default()
    }

    /// Check about `max_bytes` of segment `segment` from byte `position` (`Log::scrub`: damage
    /// found marks the log damaged).
    pub fn scrub(&mut self, segment: i64, position: u64, max_bytes: usize) -> Result<Option<u64>, StorageError> {
        self.log()?.scrub(segment, position, max_bytes)
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

/// One batch of `records` written at `now`, as the log stores it.
fn kv_batch(records: &[KvRecord], now: i64) -> Result<Vec<u8>, StorageError> {
    let recs: Vec<NewRecord> = records
        .iter()
        .map(|(k, v)| NewRecord { timestamp: now, key: Some(k.clone()), value: v.clone(), headers: Vec::new() })
        .collect();
    let batch = BatchBuilder::default()
        .build(&recs)
        .map_err(|e| StorageError::InvalidConfig(format!("internal log batch: {e}")))?;
    Ok(batch.to_vec())
}

/// `<dir>.rebuild`: a rebuilt log being written; `<dir>.damaged`: the log it replaces.
const REBUILD_SUFFIX: &str = "rebuild";
const DAMAGED_SUFFIX: &str = "damaged";

fn sibling(dir: &Path, suffix: &str) -> PathBuf {
    let mut name = dir.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".");
    name.push(suffix);
    dir.with_file_name(name)
}

fn io_at(path: &Path, source: std::io::Error) -> StorageError {
    StorageError::Io { path: path.to_path_buf(), source }
}

fn remove_dir_if_any(dir: &Path) -> Result<(), StorageError> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_at(dir, e)),
        _ => Ok(()),
    }
}

/// Complete or undo a [`KvLog::rebuild`] a crash interrupted: with `dir` gone, the rebuilt log
/// (fsynced before the first rename) takes its place; with `dir` still there, the swap never
/// began and the half-written rebuild is dropped (the repair runs again). Best effort: a
/// failure here leaves the log as it is, to be found damaged again.
fn finish_rebuild(dir: &Path) {
    let (fresh, old) = (sibling(dir, REBUILD_SUFFIX), sibling(dir, DAMAGED_SUFFIX));
    if fresh.exists() {
        let done = if dir.exists() { remove_dir_if_any(&fresh).is_ok() } else { std::fs::rename(&fresh, dir).is_ok() };
        if !done {
            tracing::warn!(dir = %dir.display(), "cannot complete an interrupted rebuild of the log");
        }
    }
    if dir.exists() {
        let _ = remove_dir_if_any(&old);
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

    /// A damaged log (a flipped bit: the read fails its CRC) is rebuilt whole from live
    /// records: readable again, holding exactly them, and it takes new appends.
    #[test]
    fn a_damaged_log_is_rebuilt_whole() {
        let dir = tempfile::tempdir().unwrap();
        let base = LogConfig::default();
        let path = dir.path().join("kv");
        let mut log = KvLog::new(path.clone(), &base, 1 << 20);
        for i in 0..20u32 {
            let (f, end) = log.append(&[rec(&format!("k{i}"), Some("v"))], 0).unwrap().unwrap();
            f.sync_to(end).unwrap();
        }
        log.close().unwrap(); // closed cleanly: damage found later is kept, not cut as a torn tail
        let file = path.join("00000000000000000000.log");
        let mut bytes = std::fs::read(&file).unwrap();
        bytes[70] ^= 1;
        std::fs::write(&file, bytes).unwrap();
        let mut log = KvLog::new(path.clone(), &base, 1 << 20);
        assert!(log.read_all().is_err());
        assert!(log.is_damaged());
        let live = vec![rec("a", Some("1")), rec("b", Some("2"))];
        log.rebuild(&live, 0).unwrap();
        assert!(!log.is_damaged());
        assert_eq!(log.read_all().unwrap(), live);
        let (f, end) = log.append(&[rec("c", Some("3"))], 0).unwrap().unwrap();
        f.sync_to(end).unwrap();
        drop(log);
        let mut log = KvLog::new(path.clone(), &base, 1 << 20);
        assert_eq!(log.read_all().unwrap().len(), 3);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(leftovers, vec![std::ffi::OsString::from("kv")]);
    }

    /// A rebuild cut short by a crash: before the swap the old log stays (the half-written
    /// rebuild is dropped); between the two renames the rebuilt log takes its place.
    #[test]
    fn an_interrupted_rebuild_is_undone_or_completed() {
        let dir = tempfile::tempdir().unwrap();
        let base = LogConfig::default();
        let path = dir.path().join("kv");
        let write = |p: &Path, k: &str| {
            let mut log = KvLog::new(p.to_path_buf(), &base, 1 << 20);
            let (f, end) = log.append(&[rec(k, Some("v"))], 0).unwrap().unwrap();
            f.sync_to(end).unwrap();
        };
        write(&path, "old");
        write(&sibling(&path, REBUILD_SUFFIX), "new");
        // crashed before the swap: the old log stays
        let mut log = KvLog::new(path.clone(), &base, 1 << 20);
        assert_eq!(log.read_all().unwrap(), vec![rec("old", Some("v"))]);
        drop(log);
        assert!(!sibling(&path, REBUILD_SUFFIX).exists());
        // crashed between the renames: the rebuilt log takes its place
        write(&sibling(&path, REBUILD_SUFFIX), "new");
        std::fs::rename(&path, sibling(&path, DAMAGED_SUFFIX)).unwrap();
        let mut log = KvLog::new(path.clone(), &base, 1 << 20);
        assert_eq!(log.read_all().unwrap(), vec![rec("new", Some("v"))]);
        assert!(!sibling(&path, REBUILD_SUFFIX).exists() && !sibling(&path, DAMAGED_SUFFIX).exists());
    }
}
