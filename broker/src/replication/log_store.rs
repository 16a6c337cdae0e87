//! A Raft log on disk, for every Raft group of a broker (the metadata quorum's, each partition's
//! and each coordinator shard's): binary records in `raft-log.bin` — a 4-byte big-endian length,
//! the CRC32C of the payload, the payload (the entry in bincode, bytes raw) — appended and
//! fsynced before openraft is told the entries are durable; a torn or corrupt last record from a
//! crash is dropped on open. The vote, committed and purged ids are in `raft-meta.json`
//! (written atomically). A log written as JSON lines by earlier versions (`raft-log.jsonl`, the
//! bytes in base64) is converted once, on open (decision 0023).

// openraft's traits return its (large) StorageError; the helpers here return the same.
#![allow(clippy::result_large_err)]

use super::types::NodeId;
use crate::sync::OrDie as _;
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{Entry, LogId, OptionalSend, RaftLogReader, RaftTypeConfig, StorageError, StorageIOError, Vote};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io::Write;
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

const LOG_FILE: &str = "raft-log.bin";
/// The JSON-lines log of earlier versions, converted to [`LOG_FILE`] on open.
const JSON_LOG_FILE: &str = "raft-log.jsonl";
const META_FILE: &str = "raft-meta.json";
/// A record's header: the payload's length and its CRC32C, both big-endian `u32`.
const HEADER: usize = 8;
/// A length above this is not a record (a torn or corrupt header): no entry comes near it (a
/// produce batch is bounded by `message.max.bytes`, a Raft RPC frame by 64 MiB).
const RECORD_MAX: usize = 256 * 1024 * 1024;

/// Append `e` to `out` as one record.
fn encode_record<T: Serialize>(out: &mut Vec<u8>, e: &T) -> std::io::Result<()> {
    let start = out.len();
    out.extend_from_slice(&[0u8; HEADER]);
    bincode::serialize_into(&mut *out, e).map_err(std::io::Error::other)?;
    let len = u32::try_from(out.len() - start - HEADER).map_err(|_| std::io::Error::other("entry too large"))?;
    let crc = crc32c::crc32c(&out[start + HEADER..]);
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
    out[start + 4..start + HEADER].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// The payload of one whole record, if its CRC matches.
fn record_payload(record: &[u8]) -> Option<&[u8]> {
    let header = record.get(..HEADER)?;
    let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let crc = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
    let payload = record.get(HEADER..HEADER + len)?;
    (crc32c::crc32c(payload) == crc).then_some(payload)
}

/// Read the next record from `r`: its bytes (header included), `None` at a clean end, `Err`
/// with the reason for a torn or corrupt one.
fn next_record(r: &mut impl std::io::Read, buf: &mut Vec<u8>) -> Result<Option<()>, String> {
    buf.clear();
    buf.resize(HEADER, 0);
    let mut got = 0;
    while got < HEADER {
        match r.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err("a torn record header".into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if len > RECORD_MAX {
        return Err(format!("a record length of {len} bytes"));
    }
    buf.resize(HEADER + len, 0);
    r.read_exact(&mut buf[HEADER..]).map_err(|_| "a torn record".to_string())?;
    if record_payload(buf).is_none() {
        return Err("a record whose CRC does not match".into());
    }
    Ok(Some(()))
}

/// A Raft type config whose log this store can hold: the metadata quorum's and each
/// partition's or coordinator shard's (`cluster/replica.rs`).
pub trait Logged:
    RaftTypeConfig<
    NodeId = NodeId,
    Node = openraft::BasicNode,
    Entry = Entry<Self>,
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

/// Where one entry's record is in the log file (entries are read back on demand, not kept in
/// memory: a partition's Raft log holds every batch).
#[derive(Clone, Copy)]
struct Slot {
    log_id: LogId<NodeId>,
    pos: u64,
    len: usize,
}

/// Bytes (of encoded records) of the newest entries kept decoded in memory: replication to the
/// followers and the state machine read entries right after they were appended, and decoding
/// them back from the file cost as much CPU as writing them (profiled on a three-broker run).
const RECENT_BYTES: usize = 1 << 20;

struct LogInner<C: Logged> {
    dir: PathBuf,
    entries: BTreeMap<u64, Slot>,
    /// The newest entries, decoded (at most [`RECENT_BYTES`] of their records).
    recent: BTreeMap<u64, (Entry<C>, usize)>,
    recent_bytes: usize,
    meta: Meta,
    /// Appends (O_APPEND) and reads (pread) on the log file; shared with the fsync tasks.
    file: Arc<std::fs::File>,
    end: u64,
    /// The bytes of records one bounded read returns at most (at least one entry): see
    /// [`LogStore::limit_reads`].
    read_bytes_max: usize,
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

    fn record(&self, slot: &Slot) -> Result<Vec<u8>, StorageError<NodeId>> {
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
        let record = self.record(slot)?;
        let payload = record_payload(&record)
            .ok_or_else(|| io_err(std::io::Error::other(format!("Raft log entry {index}: its CRC does not match"))))?;
        bincode::deserialize(payload).map_err(io_err)
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

    /// Rewrite the log file with the entries kept (after purges), copying them record by record
    /// into a new file (fsynced, then renamed over the old one): memory stays one record.
    fn rewrite(&mut self) -> Result<(), StorageError<NodeId>> {
        let path = self.dir.join(LOG_FILE);
        let tmp = self.dir.join(format!("{LOG_FILE}.tmp"));
        let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&tmp).map_err(io_err)?);
        let mut slots = BTreeMap::new();
        let mut at = 0u64;
        for (i, slot) in &self.entries {
            let record = self.record(slot)?;
            out.write_all(&record).map_err(io_err)?;
            slots.insert(*i, Slot { log_id: slot.log_id, pos: at, len: record.len() });
            at += record.len() as u64;
        }
        let file = out.into_inner().map_err(|e| io_err(e.into_error()))?;
        file.sync_all().map_err(io_err)?;
        drop(file);
        std::fs::rename(&tmp, &path).map_err(io_err)?;
        sluice_storage::sidefile::sync_dir(&self.dir).map_err(io_err)?;
        self.file = Arc::new(open_log_file(&path).map_err(io_err)?);
        self.end = at;
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
        let json = dir.join(JSON_LOG_FILE);
        if json.exists() {
            if path.exists() {
                // converted before a crash kept the old file: the new one is complete
                // (written atomically), so the old one goes
                std::fs::remove_file(&json)?;
            } else {
                Self::convert_json_log(dir)?;
            }
        }
        let file = open_log_file(&path)?;
        let total = file.metadata()?.len();
        let mut entries = BTreeMap::new();
        let mut good = 0u64;
        {
            let mut reader = std::io::BufReader::with_capacity(1 << 20, &file);
            let mut record = Vec::new();
            loop {
                match next_record(&mut reader, &mut record) {
                    Ok(None) => break,
                    // a torn or corrupt record is the end of what was durably written: stop
                    Err(why) => {
                        tracing::warn!("{}: {why} at byte {good}", path.display());
                        break;
                    }
                    Ok(Some(())) => {}
                }
                // the entry's log id leads its encoding (bincode ignores what follows)
                let Some(log_id) = record_payload(&record).and_then(|p| bincode::deserialize::<LogId<NodeId>>(p).ok())
                else {
                    break;
                };
                entries.insert(log_id.index, Slot { log_id, pos: good, len: record.len() });
                good += record.len() as u64;
            }
        }
        if good < total {
            tracing::warn!("{}: dropping {} bytes of a torn last entry", path.display(), total - good);
            file.set_len(good)?;
            file.sync_all()?;
        }
        // a purge leaves purged entries in the file until the next rewrite (`LogStore::purge`)
        if let Some(p) = meta.last_purged {
            entries.retain(|i, _| *i > p.index);
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
                read_bytes_max: usize::MAX,
                _entries: std::marker::PhantomData,
            })),
        })
    }

    /// Convert the JSON-lines log of earlier versions in `dir` to binary records: every whole
    /// line (a torn last one is dropped, as opening it would have), written atomically, then the
    /// old file removed.
    fn convert_json_log(dir: &Path) -> anyhow::Result<()> {
        use std::io::BufRead;
        let json = dir.join(JSON_LOG_FILE);
        let mut reader = std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(&json)?);
        let mut line = Vec::new();
        let (mut out, mut count) = (Vec::new(), 0usize);
        loop {
            line.clear();
            let n = reader.read_until(b'\n', &mut line)?;
            if n == 0 || !line.ends_with(b"\n") {
                break;
            }
            match serde_json::from_slice::<Entry<C>>(&line) {
                Ok(e) => {
                    encode_record(&mut out, &e)?;
                    count += 1;
                }
                Err(_) => break,
            }
        }
        write_atomic(&dir.join(LOG_FILE), &out).map_err(|e| anyhow::anyhow!("{e}"))?;
        std::fs::remove_file(&json)?;
        tracing::info!("{}: converted {count} Raft log entries to binary records", dir.display());
        Ok(())
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
            encode_record(&mut bytes, &e)?;
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

    /// Bound what openraft reads for one append to a follower to `bytes` of records (at least
    /// one entry): it asks for up to `max_payload_entries` (300) entries at a time, which for a
    /// partition's megabyte batches meant reading and holding hundreds of megabytes per
    /// follower (decision 0024).
    pub fn limit_reads(&self, bytes: usize) {
        self.lock().read_bytes_max = bytes;
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

    /// The first entries of `[start, end)` whose records add up to the read limit (at least
    /// one): what openraft sends a follower in one append.
    async fn limited_get_log_entries(&mut self, start: u64, end: u64) -> Result<Vec<Entry<C>>, StorageError<NodeId>> {
        let g = self.lock();
        let mut total = 0usize;
        let mut out = Vec::new();
        for (i, slot) in g.entries.range(start..end) {
            total = total.saturating_add(slot.len);
            if total > g.read_bytes_max && !out.is_empty() {
                break;
            }
            out.push(g.read_entry(*i, slot)?);
        }
        Ok(out)
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
        // the purged entries' bytes are reclaimed once they are at least as many as the kept
        // ones (and a megabyte): each kept byte is copied a bounded number of times, and a
        // purge that keeps a lagging follower's hundreds of megabytes does not copy them each time
        let kept_from = g.entries.values().next().map_or(g.end, |s| s.pos);
        if kept_from >= (g.end - kept_from).max(1 << 20) {
            g.rewrite()?;
        }
        Ok(())
    }
}

/// Write every entry of the Raft log in `dir` (a group of type `C`) to `out` as one JSON line
/// each (the form the log had before decision 0023), without changing anything on disk; stops
/// at a torn or corrupt record. The number of entries written (`cluster::store::dump` picks
/// `C` for a directory).
pub fn dump_as<C: Logged>(dir: &Path, out: &mut dyn Write) -> anyhow::Result<usize>
where
    Entry<C>: Serialize + serde::de::DeserializeOwned,
{
    let path = dir.join(LOG_FILE);
    if !path.exists() {
        // not converted yet: the file is already JSON lines
        let text = std::fs::read(dir.join(JSON_LOG_FILE))?;
        out.write_all(&text)?;
        return Ok(text.iter().filter(|b| **b == b'\n').count());
    }
    let mut reader = std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(&path)?);
    let (mut record, mut count) = (Vec::new(), 0);
    while let Ok(Some(())) = next_record(&mut reader, &mut record) {
        let Some(payload) = record_payload(&record) else { break };
        let e: Entry<C> = bincode::deserialize(payload)?;
        serde_json::to_writer(&mut *out, &e)?;
        out.write_all(b"\n")?;
        count += 1;
    }
    Ok(count)
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

    /// A purge drops entries at once but reclaims their bytes only once they outweigh the kept
    /// ones (a rewrite copies what is kept): purged entries never come back on reopen.
    #[tokio::test]
    async fn purged_entries_stay_purged_and_the_file_is_rewritten_once_they_outweigh_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LogStore::<TypeConfig>::open(dir.path()).unwrap();
        let big = |index: u64| Entry::<TypeConfig> {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(Command::AllocateProducerIds { node_id: 1, count: index as i64 }),
        };
        log.write_entries((1..=10).map(big)).unwrap();
        let size = || std::fs::metadata(dir.path().join(LOG_FILE)).unwrap().len();
        let full = size();
        // a small purge leaves the bytes in the file (the kept ones outweigh them, and under a
        // megabyte is never worth a rewrite); reopened, the purged entries stay gone
        log.purge(LogId::new(CommittedLeaderId::new(1, 1), 3)).await.unwrap();
        assert_eq!(size(), full);
        drop(log);
        let mut log = LogStore::<TypeConfig>::open(dir.path()).unwrap();
        let first = log.try_get_log_entries(0..).await.unwrap().first().map(|e| e.log_id.index);
        assert_eq!(first, Some(4));
        assert_eq!(log.get_log_state().await.unwrap().last_purged_log_id.map(|l| l.index), Some(3));
        // once the purged bytes outweigh the kept ones (past a megabyte) the file is rewritten
        log.write_entries((11..=60_000).map(big)).unwrap();
        assert!(size() > 1 << 20);
        log.purge(LogId::new(CommittedLeaderId::new(1, 1), 59_990)).await.unwrap();
        assert!(size() < 4096, "rewritten: {} bytes", size());
        let kept: Vec<u64> = log.try_get_log_entries(0..).await.unwrap().iter().map(|e| e.log_id.index).collect();
        assert_eq!(kept, (59_991..=60_000).collect::<Vec<_>>());
        drop(log);
        let mut log = LogStore::<TypeConfig>::open(dir.path()).unwrap();
        assert_eq!(log.try_get_log_entries(0..).await.unwrap().len(), 10);
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

    fn records(entries: &[Entry<TypeConfig>]) -> Vec<u8> {
        let mut out = Vec::new();
        for e in entries {
            encode_record(&mut out, e).unwrap();
        }
        out
    }

    fn allocations(n: u64) -> Vec<Entry<TypeConfig>> {
        (1..=n).map(|i| entry(i, Some(Command::AllocateProducerIds { node_id: 1, count: i as i64 }))).collect()
    }

    #[tokio::test]
    async fn a_torn_last_entry_is_dropped_and_the_rest_kept() {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = records(&allocations(3));
        let whole = bytes.len();
        bytes.extend_from_slice(&records(&[entry(4, None)]));
        bytes.truncate(bytes.len() - 3); // a crash in the middle of the fourth record
        std::fs::write(dir.path().join(LOG_FILE), &bytes).unwrap();
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

    /// A crash may cut the log file at any byte: opening it keeps exactly the whole records
    /// before the cut and drops the rest, and the log takes appends again after it.
    #[tokio::test]
    async fn a_log_cut_at_every_byte_keeps_the_whole_records_before_the_cut() {
        let entries = allocations(4);
        let bytes = records(&entries);
        let mut ends = vec![0usize];
        for e in &entries {
            ends.push(ends.last().unwrap() + records(std::slice::from_ref(e)).len());
        }
        for cut in 0..=bytes.len() {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join(LOG_FILE), &bytes[..cut]).unwrap();
            let mut log = LogStore::<TypeConfig>::open(dir.path()).unwrap();
            let whole = ends.iter().filter(|e| **e <= cut).count() - 1;
            let got = log.try_get_log_entries(1..).await.unwrap();
            assert_eq!(got.len(), whole, "cut at byte {cut}");
            assert_eq!(std::fs::metadata(dir.path().join(LOG_FILE)).unwrap().len() as usize, ends[whole]);
            log.write_entries([entry(whole as u64 + 1, None)]).unwrap();
            let mut again = LogStore::<TypeConfig>::open(dir.path()).unwrap();
            assert_eq!(again.try_get_log_entries(1..).await.unwrap().len(), whole + 1, "cut at byte {cut}");
        }
    }

    /// A flipped bit in the last record is a corrupt write: dropped like a torn one.
    #[tokio::test]
    async fn a_corrupt_last_record_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = records(&allocations(3));
        let last = bytes.len() - 2;
        bytes[last] ^= 0x40;
        std::fs::write(dir.path().join(LOG_FILE), &bytes).unwrap();
        let mut log = LogStore::<TypeConfig>::open(dir.path()).unwrap();
        assert_eq!(log.get_log_state().await.unwrap().last_log_id.map(|l| l.index), Some(2));
    }

    /// A log written as JSON lines by an earlier version (bytes in base64) is converted on
    /// open: every whole entry kept (a torn last line dropped), the old file gone, and the
    /// converted log reopens the same.
    #[tokio::test]
    async fn a_json_log_of_an_earlier_version_is_converted() {
        use crate::replication::types::{PartCommand, PartConfig};
        let dir = tempfile::tempdir().unwrap();
        let produce = |i: u64| Entry::<PartConfig> {
            log_id: LogId::new(CommittedLeaderId::new(2, 1), i),
            payload: EntryPayload::Normal(PartCommand::Produce {
                batch: vec![i as u8; 300],
                now_ms: 7,
                verified: false,
                verified_from: None,
            }),
        };
        let mut text = Vec::new();
        for i in 1..=3 {
            serde_json::to_writer(&mut text, &produce(i)).unwrap();
            text.push(b'\n');
        }
        let json_len = text.len();
        serde_json::to_writer(&mut text, &produce(4)).unwrap();
        text.truncate(text.len() - 5); // torn
        std::fs::write(dir.path().join(JSON_LOG_FILE), &text).unwrap();
        let mut log = LogStore::<PartConfig>::open(dir.path()).unwrap();
        assert!(!dir.path().join(JSON_LOG_FILE).exists(), "the JSON log is gone");
        let got = log.try_get_log_entries(1..).await.unwrap();
        assert_eq!(got, (1..=3).map(produce).collect::<Vec<_>>());
        let bin_len = std::fs::metadata(dir.path().join(LOG_FILE)).unwrap().len() as usize;
        assert!(bin_len * 10 < json_len * 8, "binary {bin_len} bytes against JSON {json_len}");
        drop(log);
        // a JSON file left beside a complete binary one (a crash after the conversion) goes
        std::fs::write(dir.path().join(JSON_LOG_FILE), b"{}\n").unwrap();
        let mut again = LogStore::<PartConfig>::open(dir.path()).unwrap();
        assert!(!dir.path().join(JSON_LOG_FILE).exists());
        assert_eq!(again.try_get_log_entries(1..).await.unwrap().len(), 3);
    }

    /// A bounded read (what openraft sends a follower in one append) stops at the read limit,
    /// but returns at least one entry; unbounded, the whole range.
    #[tokio::test]
    async fn a_bounded_read_returns_entries_up_to_the_limit_and_at_least_one() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LogStore::<TypeConfig>::open(dir.path()).unwrap();
        log.write_entries(allocations(10)).unwrap();
        let one = records(&allocations(1)).len();
        assert_eq!(log.limited_get_log_entries(1, 11).await.unwrap().len(), 10, "no limit set");
        log.limit_reads(3 * one);
        assert_eq!(log.limited_get_log_entries(1, 11).await.unwrap().len(), 3);
        assert_eq!(log.limited_get_log_entries(9, 11).await.unwrap().len(), 2);
        log.limit_reads(1);
        let first = log.limited_get_log_entries(4, 11).await.unwrap();
        assert_eq!(first.iter().map(|e| e.log_id.index).collect::<Vec<_>>(), vec![4], "at least one");
    }

    /// The dump prints every whole entry as JSON and changes nothing on disk (a torn tail stays).
    #[test]
    fn a_dump_prints_the_entries_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = records(&allocations(2));
        bytes.extend_from_slice(&[0, 0, 0]);
        std::fs::write(dir.path().join(LOG_FILE), &bytes).unwrap();
        let mut out = Vec::new();
        assert_eq!(dump_as::<TypeConfig>(dir.path(), &mut out).unwrap(), 2);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 2);
        assert!(text.contains(r#""AllocateProducerIds""#), "{text}");
        assert_eq!(std::fs::read(dir.path().join(LOG_FILE)).unwrap(), bytes);
    }

    /// A measurement, not a check (decision 0023): bytes per entry and encode/decode time, JSON
    /// lines against binary records, for produce batches of 100 B to 1 MiB. Run:
    /// `cargo test --release -p sluice-broker --lib raft_entry_sizes -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn raft_entry_sizes_and_codec_cost() {
        use crate::replication::types::{PartCommand, PartConfig};
        const N: u32 = 200;
        for size in [100usize, 1024, 16 * 1024, 1 << 20] {
            let e = Entry::<PartConfig> {
                log_id: LogId::new(CommittedLeaderId::new(12, 3), 123_456),
                payload: EntryPayload::Normal(PartCommand::Produce {
                    batch: (0..size).map(|i| (i * 7 % 251) as u8).collect(),
                    now_ms: 1_796_000_000_000,
                    verified: true,
                    verified_from: Some(99_999),
                }),
            };
            let json = serde_json::to_vec(&e).unwrap();
            let mut bin = Vec::new();
            encode_record(&mut bin, &e).unwrap();
            let time = |f: &dyn Fn()| {
                let t = std::time::Instant::now();
                for _ in 0..N {
                    f();
                }
                t.elapsed() / N
            };
            let enc_json = time(&|| drop(serde_json::to_vec(&e).unwrap()));
            let enc_bin = time(&|| drop(encode_record(&mut Vec::new(), &e)));
            let dec_json = time(&|| drop(serde_json::from_slice::<Entry<PartConfig>>(&json).unwrap()));
            let dec_bin = time(&|| drop(bincode::deserialize::<Entry<PartConfig>>(record_payload(&bin).unwrap())));
            println!(
                "batch {size} B: JSON line {} B, binary record {} B ({:.3}x); encode {enc_json:?} vs {enc_bin:?}, \
                 decode {dec_json:?} vs {dec_bin:?}",
                json.len() + 1,
                bin.len(),
                bin.len() as f64 / (json.len() + 1) as f64
            );
        }
    }
}
