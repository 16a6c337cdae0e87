//! A Raft log on disk, for every Raft group of a broker (the metadata quorum's, each partition's
//! and each coordinator shard's): JSON lines in `raft-log.jsonl` (appended and fsynced before
//! openraft is told the entries are durable; a torn last line from a crash is dropped on open),
//! and the vote, committed and purged ids in `raft-meta.json` (written atomically).

// openraft's traits return its (large) StorageError; the helpers here return the same.
#![allow(clippy::result_large_err)]

use super::types::NodeId;
use crate::sync::OrDie as _;
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{Entry, LogId, OptionalSend, RaftLogReader, RaftTypeConfig, StorageError, StorageIOError, Vote};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io::{Cursor, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

const LOG_FILE: &str = "raft-log.jsonl";
const META_FILE: &str = "raft-meta.json";

/// A Raft type config whose log this store can hold: the metadata quorum's and each
/// partition's or coordinator shard's (`cluster/replica.rs`).
pub trait Logged:
    RaftTypeConfig<
    NodeId = NodeId,
    Node = openraft::BasicNode,
    Entry = Entry<Self>,
    SnapshotData = Cursor<Vec<u8>>,
    Responder = openraft::impls::OneshotResponder<Self>,
    AsyncRuntime = openraft::TokioRuntime,
>
{
}
impl<C> Logged for C where
    C: RaftTypeConfig<
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = Entry<C>,
        SnapshotData = Cursor<Vec<u8>>,
        Responder = openraft::impls::OneshotResponder<C>,
        AsyncRuntime = openraft::TokioRuntime,
    >
{
}

pub fn io_err(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::write(&e).into()
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Meta {
    vote: Option<Vote<NodeId>>,
    committed: Option<LogId<NodeId>>,
    last_purged: Option<LogId<NodeId>>,
}

/// Where one entry's line is in the log file (entries are read back on demand, not kept in
/// memory: a partition's Raft log holds every batch).
#[derive(Clone, Copy)]
struct Slot {
    log_id: LogId<NodeId>,
    pos: u64,
    len: usize,
}

/// Bytes (of encoded lines) of the newest entries kept decoded in memory: replication to the
/// followers and the state machine read entries right after they were appended, and decoding
/// them back from the file cost as much CPU as writing them (profiled on a three-broker run).
const RECENT_BYTES: usize = 1 << 20;

struct LogInner<C: Logged> {
    dir: PathBuf,
    entries: BTreeMap<u64, Slot>,
    /// The newest entries, decoded (at most [`RECENT_BYTES`] of their lines).
    recent: BTreeMap<u64, (Entry<C>, usize)>,
    recent_bytes: usize,
    meta: Meta,
    /// Appends (O_APPEND) and reads (pread) on the log file; shared with the fsync tasks.
    file: Arc<std::fs::File>,
    end: u64,
    _entries: std::marker::PhantomData<C>,
}

/// The durable Raft log (cheap to clone: a handle).
pub struct LogStore<C: Logged> {
    inner: Arc<Mutex<LogInner<C>>>,
}

impl<C: Logged> Clone for LogStore<C> {
    fn clone(&self) -> Self {
        LogStore { inner: self.inner.clone() }
    }
}

pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StorageError<NodeId>> {
    sluice_storage::sidefile::write_atomic(path, bytes).map_err(io_err)
}

fn open_log_file(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new().create(true).read(true).append(true).open(path)
}

impl<C: Logged> LogInner<C>
where
    Entry<C>: Serialize + serde::de::DeserializeOwned,
{
    fn save_meta(&self) -> Result<(), StorageError<NodeId>> {
        write_atomic(&self.dir.join(META_FILE), &serde_json::to_vec(&self.meta).map_err(io_err)?)
    }

    fn line(&self, slot: &Slot) -> Result<Vec<u8>, StorageError<NodeId>> {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; slot.len];
        self.file.read_exact_at(&mut buf, slot.pos).map_err(io_err)?;
        Ok(buf)
    }

    fn read_entry(&self, index: u64, slot: &Slot) -> Result<Entry<C>, StorageError<NodeId>>
    where
        Entry<C>: Clone,
    {
        if let Some((e, _)) = self.recent.get(&index) {
            return Ok(e.clone());
        }
        serde_json::from_slice(&self.line(slot)?).map_err(io_err)
    }

    fn remember(&mut self, e: Entry<C>, len: usize) {
        self.recent_bytes += len;
        if let Some((_, old)) = self.recent.insert(e.log_id.index, (e, len)) {
            self.recent_bytes -= old;
        }
        while self.recent_bytes > RECENT_BYTES {
            let Some((_, (_, len))) = self.recent.pop_first() else { break };
            self.recent_bytes -= len;
        }
    }

    /// Keep in `recent` only the indexes `keep` accepts.
    fn forget(&mut self, keep: impl Fn(u64) -> bool) {
        self.recent.retain(|i, _| keep(*i));
        self.recent_bytes = self.recent.values().map(|(_, l)| *l).sum();
    }

    /// Rewrite the log file with the entries kept (after a purge: the metadata log only).
    fn rewrite(&mut self) -> Result<(), StorageError<NodeId>> {
        let mut text = Vec::new();
        let mut slots = BTreeMap::new();
        for (i, slot) in &self.entries {
            let line = self.line(slot)?;
            slots.insert(*i, Slot { log_id: slot.log_id, pos: text.len() as u64, len: line.len() });
            text.extend_from_slice(&line);
        }
        let path = self.dir.join(LOG_FILE);
        write_atomic(&path, &text)?;
        self.file = Arc::new(open_log_file(&path).map_err(io_err)?);
        self.end = text.len() as u64;
        self.entries = slots;
        Ok(())
    }
}

impl<C: Logged> LogStore<C>
where
    Entry<C>: Serialize + serde::de::DeserializeOwned,
{
    pub fn open(dir: &Path) -> anyhow::Result<LogStore<C>> {
        let meta: Meta = match std::fs::read(dir.join(META_FILE)) {
            Ok(b) => serde_json::from_slice(&b)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Meta::default(),
            Err(e) => return Err(e.into()),
        };
        let path = dir.join(LOG_FILE);
        let file = open_log_file(&path)?;
        let total = file.metadata()?.len();
        let mut entries = BTreeMap::new();
        let mut good = 0u64;
        {
            use std::io::BufRead;
            let mut reader = std::io::BufReader::with_capacity(1 << 20, &file);
            let mut line = Vec::new();
            loop {
                line.clear();
                let n = reader.read_until(b'\n', &mut line)?;
                // a line without its newline, or one that does not parse, is a torn write: stop
                if n == 0 || !line.ends_with(b"\n") {
                    break;
                }
                match serde_json::from_slice::<Entry<C>>(&line) {
                    Ok(e) => {
                        entries.insert(e.log_id.index, Slot { log_id: e.log_id, pos: good, len: n });
                        good += n as u64;
                    }
                    Err(_) => break,
                }
            }
        }
        if good < total {
            tracing::warn!("{}: dropping {} bytes of a torn last entry", path.display(), total - good);
            file.set_len(good)?;
            file.sync_all()?;
        }
        Ok(LogStore {
            inner: Arc::new(Mutex::new(LogInner {
                dir: dir.to_path_buf(),
                entries,
                recent: BTreeMap::new(),
                recent_bytes: 0,
                meta,
                file: Arc::new(file),
                end: good,
                _entries: std::marker::PhantomData,
            })),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LogInner<C>> {
        self.inner.lock().or_die()
    }

    /// Write `entries` to the log file (not yet fsynced) and index them; the file to fsync.
    fn write_entries(&self, entries: impl IntoIterator<Item = Entry<C>>) -> std::io::Result<Arc<std::fs::File>>
    where
        Entry<C>: Clone,
    {
        let mut g = self.lock();
        let mut bytes = Vec::new();
        let mut new = Vec::new();
        for e in entries {
            let pos = bytes.len();
            serde_json::to_writer(&mut bytes, &e).map_err(std::io::Error::other)?;
            bytes.push(b'\n');
            new.push((e, pos, bytes.len() - pos));
        }
        if let Err(e) = (&*g.file).write_all(&bytes) {
            // the file may hold part of the write: cut it back so the next append lines up
            let end = g.end;
            let _ = g.file.set_len(end);
            return Err(e);
        }
        let base = g.end;
        for (e, pos, len) in new {
            let log_id = e.log_id;
            g.entries.insert(log_id.index, Slot { log_id, pos: base + pos as u64, len });
            g.remember(e, len);
        }
        g.end += bytes.len() as u64;
        Ok(g.file.clone())
    }

    /// Has this node ever voted or held an entry (i.e. been part of an initialized group)?
    pub fn has_vote_or_entries(&self) -> bool {
        let g = self.lock();
        g.meta.vote.is_some() || !g.entries.is_empty() || g.meta.last_purged.is_some()
    }
}

impl<C: Logged> RaftLogReader<C> for LogStore<C>
where
    Entry<C>: Serialize + serde::de::DeserializeOwned + Clone,
{
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<C>>, StorageError<NodeId>> {
        let g = self.lock();
        g.entries.range(range).map(|(i, slot)| g.read_entry(*i, slot)).collect()
    }
}

impl<C: Logged> RaftLogStorage<C> for LogStore<C>
where
    Entry<C>: Serialize + serde::de::DeserializeOwned + Clone,
{
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<C>, StorageError<NodeId>> {
        let g = self.lock();
        let last = g.entries.values().next_back().map(|s| s.log_id).or(g.meta.last_purged);
        Ok(LogState { last_purged_log_id: g.meta.last_purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut g = self.lock();
        g.meta.vote = Some(*vote);
        g.save_meta()
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        Ok(self.lock().meta.vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> Result<(), StorageError<NodeId>> {
        let mut g = self.lock();
        g.meta.committed = committed;
        g.save_meta()
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        Ok(self.lock().meta.committed)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<C>) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<C>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // written now, in order (page cache); fsynced on a blocking thread, and openraft told
        // the entries are durable only then — the Raft task (and its runtime thread) does not
        // wait for the disk. An fsync covers every write before it, so completions in any order
        // are correct.
        match self.write_entries(entries) {
            Ok(file) => {
                tokio::task::spawn_blocking(move || callback.log_io_completed(file.sync_data()));
                Ok(())
            }
            Err(e) => {
                let reported = std::io::Error::new(e.kind(), e.to_string());
                callback.log_io_completed(Err(e));
                Err(io_err(reported))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut g = self.lock();
        let cut = g.entries.range(log_id.index..).next().map(|(_, s)| s.pos);
        if let Some(pos) = cut {
            g.file.set_len(pos).and_then(|_| g.file.sync_data()).map_err(io_err)?;
            g.end = pos;
            g.entries.retain(|i, _| *i < log_id.index);
        }
        g.forget(|i| i < log_id.index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut g = self.lock();
        g.meta.last_purged = Some(log_id);
        g.save_meta()?;
        g.entries.retain(|i, _| *i > log_id.index);
        g.forget(|i| i > log_id.index);
        g.rewrite()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{Command, TypeConfig};
    use openraft::{CommittedLeaderId, EntryPayload};

    fn entry(index: u64, cmd: Option<Command>) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: match cmd {
                Some(c) => EntryPayload::Normal(c),
                None => EntryPayload::Blank,
            },
        }
    }

    /// Entries read back come from the in-memory cache of recent entries or from the file:
    /// after a truncation and new entries of a later term at the same indexes, both give the
    /// new ones (never a stale cached entry), also after a reopen.
    #[tokio::test]
    async fn recent_entries_stay_consistent_with_the_file_across_truncation() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LogStore::<TypeConfig>::open(dir.path()).unwrap();
        let at = |term: u64, index: u64| Entry::<TypeConfig> {
            log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
            payload: EntryPayload::Normal(Command::AllocateProducerIds {
                node_id: 1,
                count: (term * 100 + index) as i64,
            }),
        };
        log.write_entries((1..=5).map(|i| at(1, i))).unwrap();
        log.truncate(LogId::new(CommittedLeaderId::new(1, 1), 3)).await.unwrap();
        log.write_entries((3..=4).map(|i| at(2, i))).unwrap();
        let want: Vec<u64> = vec![101, 102, 203, 204];
        let counts = |es: Vec<Entry<TypeConfig>>| -> Vec<u64> {
            es.into_iter()
                .map(|e| match e.payload {
                    EntryPayload::Normal(Command::AllocateProducerIds { count, .. }) => count as u64,
                    _ => 0,
                })
                .collect()
        };
        assert_eq!(counts(log.try_get_log_entries(1..).await.unwrap()), want);
        // entries older than the cache's budget are read from the file
        log.lock().forget(|_| false);
        assert_eq!(counts(log.try_get_log_entries(1..).await.unwrap()), want);
        drop(log);
        let mut again = LogStore::<TypeConfig>::open(dir.path()).unwrap();
        assert_eq!(counts(again.try_get_log_entries(1..).await.unwrap()), want);
    }

    #[tokio::test]
    async fn a_torn_last_entry_is_dropped_and_the_rest_kept() {
        let dir = tempfile::tempdir().unwrap();
        let mut text = Vec::new();
        for i in 1..=3 {
            let c = Command::AllocateProducerIds { node_id: 1, count: i as i64 };
            serde_json::to_writer(&mut text, &entry(i, Some(c))).unwrap();
            text.push(b'\n');
        }
        let whole = text.len();
        serde_json::to_writer(&mut text, &entry(4, None)).unwrap();
        text.truncate(text.len() - 3); // a crash in the middle of the fourth line
        std::fs::write(dir.path().join(LOG_FILE), &text).unwrap();
        let mut log = LogStore::<TypeConfig>::open(dir.path()).unwrap();
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_log_id.map(|l| l.index), Some(3));
        assert_eq!(std::fs::metadata(dir.path().join(LOG_FILE)).unwrap().len() as usize, whole);
        assert_eq!(log.try_get_log_entries(2..).await.unwrap().len(), 2);
        // the vote survives a reopen
        let vote = Vote::new(3, 2);
        log.save_vote(&vote).await.unwrap();
        let mut again = LogStore::<TypeConfig>::open(dir.path()).unwrap();
        assert_eq!(again.read_vote().await.unwrap(), Some(vote));
        again.truncate(LogId::new(CommittedLeaderId::new(1, 1), 2)).await.unwrap();
        let mut third = LogStore::<TypeConfig>::open(dir.path()).unwrap();
        assert_eq!(third.get_log_state().await.unwrap().last_log_id.map(|l| l.index), Some(1));
        assert!(third.has_vote_or_entries());
    }
}
