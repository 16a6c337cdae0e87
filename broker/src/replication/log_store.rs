//! A Raft log on disk, for every Raft group of a broker (the metadata quorum's, each partition's
//! and each coordinator shard's): binary records — a 4-byte big-endian length, the CRC32C of the
//! payload, the payload (the entry in bincode, bytes raw) — appended and fsynced before openraft
//! is told the entries are durable; a torn or corrupt last record from a crash is dropped on
//! open. The records are in files of bounded size, `raft-log-<first index>.bin` (a single
//! `raft-log.bin` of earlier versions is the oldest file), so that a purge deletes whole files
//! and copies nothing. The vote and purged id are in `raft-meta.json` (written atomically and
//! fsynced); the commit point, which moves with every commit, is in `raft-progress`, one page
//! rewritten in place and fdatasynced (see [`Progress`]). A log written as JSON lines by earlier
//! versions (`raft-log.jsonl`, the bytes in base64) is converted once, on open (decision 0023).

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

/// The commit point and how far fsyncs reached, rewritten in place at every commit advance.
const PROGRESS_FILE: &str = "raft-progress";
/// The progress file: one side-file frame (magic, version, length, CRC32C, JSON), zero-padded
/// to a fixed size so that each write is one `pwrite` over the last.
const PROGRESS_MAGIC: [u8; 4] = *b"SLRP";
const PROGRESS_BYTES: usize = 256;

/// What a group's log store records at every commit advance: the commit point, and (the double
/// format's log) the highest entry an fsync had covered ([`Durable`]). Rewritten in place (one
/// `pwrite` of one page) and fsynced with `fdatasync`, instead of rewriting the whole state file
/// through a renamed temporary file with two fsyncs: that was a fifth of a partition's Raft task
/// time under a saturating producer (decision 0046). A write a power cut tore fails its CRC
/// and is ignored; the fsynced state file's values then stand. Every fsynced save of the store's
/// own state (vote, purge, truncation) rewrites it first, so a lowered `flushed` stays lowered.
/// (Written without an fsync, the Jepsen power-cut run lost acknowledged writes: `flushed` must
/// be durable, decision 0038.)
#[derive(Debug, Default, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Progress {
    pub committed: Option<LogId<NodeId>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flushed: Option<u64>,
}

impl Progress {
    /// What `dir` holds; nothing when the file is missing or fails its CRC (torn by a power
    /// cut mid-write), as the values in the fsynced state file then stand.
    pub(crate) fn read(dir: &Path) -> Progress {
        let Ok(bytes) = std::fs::read(dir.join(PROGRESS_FILE)) else { return Progress::default() };
        sluice_storage::sidefile::decode_padded(PROGRESS_MAGIC, &bytes)
            .ok()
            .and_then(|(_, payload)| serde_json::from_slice(payload).ok())
            .unwrap_or_default()
    }

    /// The later of two commit points (by index).
    pub(crate) fn later(a: Option<LogId<NodeId>>, b: Option<LogId<NodeId>>) -> Option<LogId<NodeId>> {
        std::cmp::max_by_key(a, b, |l| l.map(|l| l.index))
    }
}

/// The progress file of one group's directory, kept open.
pub(crate) struct ProgressFile {
    dir: PathBuf,
    file: Option<Arc<std::fs::File>>,
    /// Created by this process and its name not yet fsynced into the directory.
    fresh: bool,
}

/// One progress record framed and ready to write: built under the store's lock, written and
/// fsynced after it is released, so the log's readers (the replication streams, apply) do not
/// wait behind the `fdatasync`. Safe because only the Raft task saves, one save at a time.
#[must_use]
pub(crate) struct ProgressWrite {
    file: Arc<std::fs::File>,
    frame: Vec<u8>,
    /// The directory to fsync once the file's first write is durable.
    sync_dir: Option<PathBuf>,
}

impl ProgressWrite {
    /// Write the record over the file's contents, fdatasynced (and its name, once).
    pub(crate) fn finish(self) -> Result<(), StorageError<NodeId>> {
        let (file, sync_dir) = (self.file.clone(), self.sync_dir.clone());
        self.finish_unsynced()?;
        file.sync_data().map_err(io_err)?;
        if let Some(dir) = &sync_dir {
            sluice_storage::sidefile::sync_dir(dir).map_err(io_err)?;
        }
        Ok(())
    }

    /// Write the record over the file's contents, not synced: for a record that is safe to
    /// lose or find torn after a power cut (one log per replica's commit point, decision 0057).
    pub(crate) fn finish_unsynced(self) -> Result<(), StorageError<NodeId>> {
        use std::os::unix::fs::FileExt;
        self.file.write_all_at(&self.frame, 0).map_err(io_err)
    }
}

impl ProgressFile {
    pub(crate) fn new(dir: &Path) -> ProgressFile {
        ProgressFile { dir: dir.to_path_buf(), file: None, fresh: false }
    }

    /// Frame `p` for writing over the file's contents (opening the file the first time), to be
    /// written and fdatasynced by [`ProgressWrite::finish`].
    pub(crate) fn prepare(&mut self, p: &Progress) -> Result<ProgressWrite, StorageError<NodeId>> {
        let mut frame = sluice_storage::sidefile::encode(PROGRESS_MAGIC, 1, &serde_json::to_vec(p).map_err(io_err)?);
        if frame.len() > PROGRESS_BYTES {
            return Err(io_err(std::io::Error::other(format!("a progress record of {} bytes", frame.len()))));
        }
        frame.resize(PROGRESS_BYTES, 0);
        let file = match &self.file {
            Some(file) => Arc::clone(file),
            None => {
                let path = self.dir.join(PROGRESS_FILE);
                self.fresh = !path.exists();
                let file = Arc::new(
                    std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(path).map_err(io_err)?,
                );
                self.file = Some(Arc::clone(&file));
                file
            }
        };
        let sync_dir = std::mem::take(&mut self.fresh).then(|| self.dir.clone());
        Ok(ProgressWrite { file, frame, sync_dir })
    }
}

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

/// The highest entry index in the whole records of the log file at `path` (`None` if none).
fn highest_index(path: &Path) -> Option<u64> {
    let file = std::fs::File::open(path).ok()?;
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
    let mut record = Vec::new();
    let mut highest = None;
    while let Ok(Some(())) = next_record(&mut reader, &mut record) {
        if let Some(id) = record_payload(&record).and_then(|p| bincode::deserialize::<LogId<NodeId>>(p).ok()) {
            highest = highest.max(Some(id.index));
        }
    }
    highest
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
    /// The highest entry index whose fsync had completed when this file was written (see
    /// [`Durable`]); absent in files of earlier versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    flushed: Option<u64>,
}

/// How far the log is known durable: the highest entry index an fsync covered. An entry below
/// it cannot be torn by a crash (its bytes reached the disk), so when opening the log cuts
/// such an entry, that is damage at rest, not a torn end, even when it is the log's last
/// record and no whole record follows it to tell. `meta.json` records it each time it is
/// written (every commit advance, vote and purge). A truncation lowers it and starts a new
/// generation, so an fsync that completes after the truncation cannot raise it over entries
/// the truncation removed.
#[derive(Default)]
struct Durable {
    generation: u64,
    index: u64,
}

/// Where one entry's record is: in which file of the log (its key in `LogInner::segments`), at
/// which byte (entries are read back on demand, not kept in memory: a partition's Raft log holds
/// every batch since its last snapshot).
#[derive(Clone, Copy)]
struct Slot {
    log_id: LogId<NodeId>,
    seg: u64,
    pos: u64,
    len: usize,
}

/// One file of the log.
struct Segment {
    path: PathBuf,
    /// Appends (O_APPEND) and reads (pread); shared with the fsync tasks.
    file: Arc<std::fs::File>,
    len: u64,
}

/// A new file is started once the newest one holds this many bytes (unless set otherwise:
/// [`LogStore::roll_at`]): a purge deletes whole files, and copies nothing.
const SEGMENT_BYTES: u64 = 16 << 20;

/// The name of the log file whose first entry is `first`.
fn segment_name(first: u64) -> String {
    format!("raft-log-{first:020}.bin")
}

/// The log's files in `dir`, oldest first: the single file of earlier versions ([`LOG_FILE`],
/// older than any other), then the segments by their first entry.
fn log_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let (mut legacy, mut numbered) = (None, Vec::new());
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if name == LOG_FILE {
            legacy = Some(e.path());
        } else if let Some(n) =
            name.strip_prefix("raft-log-").and_then(|r| r.strip_suffix(".bin")).and_then(|n| n.parse::<u64>().ok())
        {
            numbered.push((n, e.path()));
        }
    }
    numbered.sort();
    Ok(legacy.into_iter().chain(numbered.into_iter().map(|(_, p)| p)).collect())
}

/// Bytes (of encoded records) of the newest entries kept decoded in memory: replication to the
/// followers and the state machine read entries right after they were appended, and decoding
/// them back from the file cost as much CPU as writing them (profiled on a three-broker run).
const RECENT_BYTES: usize = 1 << 20;

struct LogInner<C: Logged> {
    dir: PathBuf,
    entries: BTreeMap<u64, Slot>,
    /// The log's files by the index of the first entry written to each, oldest first; the
    /// newest takes appends.
    segments: BTreeMap<u64, Segment>,
    /// The newest entries, decoded (at most [`RECENT_BYTES`] of their records).
    recent: BTreeMap<u64, (Entry<C>, usize)>,
    recent_bytes: usize,
    meta: Meta,
    /// See [`LogStore::roll_at`].
    segment_bytes: u64,
    /// The bytes of records one bounded read returns at most (at least one entry): see
    /// [`LogStore::limit_reads`].
    read_bytes_max: usize,
    /// Opening cut the log at a damaged record that whole records followed (rot at rest, not a
    /// torn end): the highest entry index those records held. The log lost entries it had
    /// acknowledged, so this replica must neither vote nor stand until it holds that entry
    /// again (`cluster/replica.rs`, decision 0037).
    damaged_until: Option<u64>,
    /// See [`Durable`]; shared with the fsync tasks.
    durable: Arc<Mutex<Durable>>,
    progress: ProgressFile,
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

/// What makes one append durable: the files written (a segment that was rolled over, then the
/// new one) and, when a file was created, the directory that names it.
#[derive(Default)]
struct Flush {
    files: Vec<Arc<std::fs::File>>,
    dir: Option<PathBuf>,
    /// Raised to the append's last index once its fsync completes (if still the generation).
    durable: Option<(Arc<Mutex<Durable>>, u64, u64)>,
}

impl Flush {
    /// fsync the older file first, then the new file's name, then the new file: an append is
    /// reported durable only with everything before it.
    fn run(&self) -> std::io::Result<()> {
        let n = self.files.len();
        for (i, f) in self.files.iter().enumerate() {
            if i + 1 == n {
                if let Some(dir) = &self.dir {
                    sluice_storage::sidefile::sync_dir(dir).map_err(std::io::Error::other)?;
                }
            }
            f.sync_data()?;
        }
        if let Some((durable, generation, last)) = &self.durable {
            let mut d = durable.lock().unwrap_or_else(|p| p.into_inner());
            if d.generation == *generation {
                d.index = d.index.max(*last);
            }
        }
        Ok(())
    }
}

impl<C: Logged> LogInner<C>
where
    Entry<C>: Serialize + serde::de::DeserializeOwned,
{
    /// Record the commit point and how far fsyncs reached in the progress file, fsynced
    /// (`fdatasync` of one rewritten page), and then everything else in the meta file (so that
    /// a lowered `flushed` is never undone by an older progress file).
    ///
    /// `flushed` must be durable: it is what tells a restart after a power cut that a cut
    /// record had been fsynced (and acknowledged), so the replica must not vote until it has
    /// it again (decision 0038). The Jepsen power-cut run lost acknowledged writes on three
    /// brokers, 3 runs of 3, when it was written without an fsync (decision 0046).
    fn save_meta(&mut self) -> Result<(), StorageError<NodeId>> {
        self.progress_write()?.finish()?;
        write_atomic(&self.dir.join(META_FILE), &serde_json::to_vec(&self.meta).map_err(io_err)?)
    }

    /// The progress record to write now ([`LogInner::save_meta`]), framed under the lock.
    fn progress_write(&mut self) -> Result<ProgressWrite, StorageError<NodeId>> {
        let flushed = self.durable.lock().unwrap_or_else(|p| p.into_inner()).index;
        // while the log still lacks entries lost to damage, the mark stays at them: a restart
        // before the replica holds them again finds the damage again and keeps its vote guard
        let held = self.entries.keys().next_back().copied().or(self.meta.last_purged.map(|p| p.index)).unwrap_or(0);
        let lost = self.damaged_until.filter(|u| *u > held).unwrap_or(0);
        let flushed = flushed.max(lost);
        self.meta.flushed = (flushed > 0).then_some(flushed);
        let p = Progress { committed: self.meta.committed, flushed: self.meta.flushed };
        self.progress.prepare(&p)
    }

    fn record(&self, slot: &Slot) -> Result<Vec<u8>, StorageError<NodeId>> {
        use std::os::unix::fs::FileExt;
        let seg = self.segments.get(&slot.seg).ok_or_else(|| {
            io_err(std::io::Error::other(format!("Raft log entry {}: its file is gone", slot.log_id.index)))
        })?;
        let mut buf = vec![0u8; slot.len];
        seg.file.read_exact_at(&mut buf, slot.pos).map_err(io_err)?;
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

    /// Delete the files that hold no entry any more (after a purge or a truncation), newest
    /// first, so that a crash in between leaves the log a run of files without a hole.
    fn drop_empty_segments(&mut self) -> std::io::Result<()> {
        let keys: Vec<u64> = self.segments.keys().copied().collect();
        let mut removed = false;
        for (n, key) in keys.iter().enumerate().rev() {
            let next = keys.get(n + 1).copied().unwrap_or(u64::MAX);
            if self.entries.range(*key..next).next().is_none() {
                if let Some(seg) = self.segments.remove(key) {
                    std::fs::remove_file(&seg.path)?;
                    removed = true;
                }
            }
        }
        if removed {
            sluice_storage::sidefile::sync_dir(&self.dir).map_err(std::io::Error::other)?;
        }
        Ok(())
    }
}

impl<C: Logged> LogStore<C>
where
    Entry<C>: Serialize + serde::de::DeserializeOwned,
{
    pub fn open(dir: &Path) -> anyhow::Result<LogStore<C>> {
        let mut meta: Meta = match std::fs::read(dir.join(META_FILE)) {
            Ok(b) => serde_json::from_slice(&b)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Meta::default(),
            Err(e) => return Err(e.into()),
        };
        let progress = Progress::read(dir);
        meta.committed = Progress::later(meta.committed, progress.committed);
        meta.flushed = meta.flushed.max(progress.flushed);
        let json = dir.join(JSON_LOG_FILE);
        if json.exists() {
            if dir.join(LOG_FILE).exists() {
                // converted before a crash kept the old file: the new one is complete
                // (written atomically), so the old one goes
                std::fs::remove_file(&json)?;
            } else {
                Self::convert_json_log(dir)?;
            }
        }
        // the copy a purge of earlier versions was writing when it crashed
        let _ = std::fs::remove_file(dir.join(format!("{LOG_FILE}.tmp")));
        let mut entries: BTreeMap<u64, Slot> = BTreeMap::new();
        let mut segments = BTreeMap::new();
        // after a torn or corrupt record, or a file that does not continue the one before it,
        // nothing later was durably part of the log
        let mut ended = false;
        let mut removed = false;
        // the highest entry index found in whole records past a damaged one
        let mut past_damage: Option<u64> = None;
        for path in log_files(dir)? {
            if ended {
                if past_damage.is_some() {
                    past_damage = past_damage.max(highest_index(&path));
                }
                tracing::warn!("{}: removed: it follows the end of the log", path.display());
                std::fs::remove_file(&path)?;
                removed = true;
                continue;
            }
            let file = open_log_file(&path)?;
            let total = file.metadata()?.len();
            let mut slots: Vec<Slot> = Vec::new();
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
                            // whole records after it: not a torn end but damage at rest
                            let mut later = Vec::new();
                            while let Ok(Some(())) = next_record(&mut reader, &mut later) {
                                let id =
                                    record_payload(&later).and_then(|p| bincode::deserialize::<LogId<NodeId>>(p).ok());
                                if let Some(id) = id {
                                    past_damage = past_damage.max(Some(id.index));
                                }
                            }
                            // (a damaged record's frame may hide what follows: a later file
                            // tells as well)
                            past_damage = past_damage.or(Some(0));
                            break;
                        }
                        Ok(Some(())) => {}
                    }
                    // the entry's log id leads its encoding (bincode ignores what follows)
                    let Some(log_id) =
                        record_payload(&record).and_then(|p| bincode::deserialize::<LogId<NodeId>>(p).ok())
                    else {
                        break;
                    };
                    let prev = slots.last().map(|s| s.log_id.index).or(entries.keys().next_back().copied());
                    if prev.is_some_and(|p| p.checked_add(1) != Some(log_id.index)) {
                        tracing::warn!("{}: entry {} does not follow entry {prev:?}", path.display(), log_id.index);
                        break;
                    }
                    slots.push(Slot { log_id, seg: 0, pos: good, len: record.len() });
                    good += record.len() as u64;
                }
            }
            if good < total {
                tracing::warn!("{}: dropping {} bytes after its last whole entry", path.display(), total - good);
                file.set_len(good)?;
                file.sync_all()?;
                ended = true;
            }
            let Some(first) = slots.first().map(|s| s.log_id.index) else {
                std::fs::remove_file(&path)?;
                removed = true;
                continue;
            };
            for s in slots {
                entries.insert(s.log_id.index, Slot { seg: first, ..s });
            }
            segments.insert(first, Segment { path, file: Arc::new(file), len: good });
        }
        if removed {
            sluice_storage::sidefile::sync_dir(dir)?;
        }
        // what this open read may be in the page cache only (a process crash, not a power
        // cut, keeps unsynced writes): make it durable, so that `Durable` starts at its end
        if let Some(last) = segments.values().next_back() {
            last.file.sync_data()?;
        }
        let mut inner = LogInner {
            dir: dir.to_path_buf(),
            entries,
            segments,
            recent: BTreeMap::new(),
            recent_bytes: 0,
            meta,
            segment_bytes: SEGMENT_BYTES,
            read_bytes_max: usize::MAX,
            damaged_until: None,
            durable: Arc::default(),
            progress: ProgressFile::new(dir),
            _entries: std::marker::PhantomData,
        };
        let last_kept = inner.entries.keys().next_back().copied().unwrap_or(0);
        // entries an fsync had covered cannot be torn by a crash: if the open cut any, even the
        // last record with nothing after it to tell, they rotted at rest
        let kept = last_kept.max(inner.meta.last_purged.map_or(0, |p| p.index));
        if let Some(flushed) = inner.meta.flushed.filter(|f| *f > kept) {
            tracing::warn!(
                "{}: the log ends at entry {kept}, but entries up to {flushed} had been fsynced: damage at rest, not a torn end",
                dir.display()
            );
            past_damage = past_damage.max(Some(flushed));
        }
        inner.damaged_until = past_damage.filter(|until| *until > last_kept);
        inner.durable.lock().unwrap_or_else(|p| p.into_inner()).index = kept;
        // entries known committed but not held cannot be applied from this log: openraft would
        // try at start and fail. They were cut away with damage, or (a follower commits entries
        // before its fsync of them ends) lost with the unsynced tail at a power cut. Committed
        // here means "known committed": the leader sends them, and the commit index, again
        // (after damage the replica does not vote meanwhile)
        let held = inner.entries.get(&last_kept).map(|s| s.log_id).or(inner.meta.last_purged);
        if inner.meta.committed.is_some_and(|c| Some(c.index) > held.map(|k| k.index)) {
            let why = if inner.damaged_until.is_some() { "cut away with the damage" } else { "not durable" };
            tracing::warn!(
                "{}: the committed entry {:?} was {why}; committed is now {:?}",
                dir.display(),
                inner.meta.committed.map(|c| c.index),
                held.map(|k| k.index)
            );
            inner.meta.committed = held;
        }
        // a purge deletes its files after recording how far it went: finish one a crash cut
        if let Some(p) = inner.meta.last_purged {
            inner.entries.retain(|i, _| *i > p.index);
            inner.drop_empty_segments()?;
        }
        Ok(LogStore { inner: Arc::new(Mutex::new(inner)) })
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

    /// Test code: write `entries` and make them durable.
    #[cfg(test)]
    pub(crate) fn append_now(&self, entries: impl IntoIterator<Item = Entry<C>>) -> std::io::Result<()>
    where
        Entry<C>: Clone,
    {
        self.write_entries(entries)?.run()
    }

    /// Write `entries` to the newest log file (starting a new one when it is full; not yet
    /// fsynced) and index them; what makes them durable.
    fn write_entries(&self, entries: impl IntoIterator<Item = Entry<C>>) -> std::io::Result<Flush>
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
        let Some(first) = new.first().map(|(e, _, _)| e.log_id.index) else { return Ok(Flush::default()) };
        let mut flush = Flush::default();
        let full = g.segments.values().next_back().map(|s| s.len >= g.segment_bytes);
        if full != Some(false) {
            if let Some(old) = g.segments.values().next_back() {
                flush.files.push(old.file.clone());
            }
            let path = g.dir.join(segment_name(first));
            let file = open_log_file(&path)?;
            file.set_len(0)?; // nothing of a file by this name is part of the log
            g.segments.insert(first, Segment { path, file: Arc::new(file), len: 0 });
            flush.dir = Some(g.dir.clone());
        }
        let Some((&key, seg)) = g.segments.iter_mut().next_back() else {
            return Err(std::io::Error::other("no Raft log file to append to"));
        };
        if let Err(e) = (&*seg.file).write_all(&bytes) {
            // the file may hold part of the write: cut it back so the next append lines up
            let _ = seg.file.set_len(seg.len);
            return Err(e);
        }
        let base = seg.len;
        seg.len += bytes.len() as u64;
        flush.files.push(seg.file.clone());
        let last = new.last().map_or(first, |(e, _, _)| e.log_id.index);
        let generation = g.durable.lock().unwrap_or_else(|p| p.into_inner()).generation;
        flush.durable = Some((g.durable.clone(), generation, last));
        for (e, pos, len) in new {
            let log_id = e.log_id;
            g.entries.insert(log_id.index, Slot { log_id, seg: key, pos: base + pos as u64, len });
            g.remember(e, len);
        }
        Ok(flush)
    }

    /// Bound what openraft reads for one append to a follower to `bytes` of records (at least
    /// one entry): it asks for up to `max_payload_entries` (300) entries at a time, which for a
    /// partition's megabyte batches meant reading and holding hundreds of megabytes per
    /// follower (decision 0024).
    pub fn limit_reads(&self, bytes: usize) {
        self.lock().read_bytes_max = bytes;
    }

    /// Start a new log file once the newest holds `bytes` (a partition's replica rolls at a
    /// quarter of its snapshot interval, so a purge after each snapshot deletes files).
    pub fn roll_at(&self, bytes: u64) {
        self.lock().segment_bytes = bytes.max(1);
    }

    /// Has this node ever voted or held an entry (i.e. been part of an initialized group)?
    /// See `LogInner::damaged_until`.
    pub fn damaged_until(&self) -> Option<u64> {
        self.lock().damaged_until
    }

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
        // framed under the lock, written and fdatasynced outside it: the replication streams'
        // reads do not wait for the disk (`ProgressWrite`)
        let write = {
            let mut g = self.lock();
            g.meta.committed = committed;
            g.progress_write()?
        };
        write.finish()
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
        // wait for the disk. An fsync covers every write to its file before it, and an append
        // that starts a new file fsyncs the one before it first, so completions in any order
        // are correct.
        let mut n = 0u64;
        match self.write_entries(entries.into_iter().inspect(|_| n += 1)) {
            Ok(flush) => {
                ::metrics::counter!(crate::metrics::RAFT_LOG_FLUSHES_TOTAL).increment(1);
                ::metrics::counter!(crate::metrics::RAFT_LOG_ENTRIES_APPENDED_TOTAL).increment(n);
                tokio::task::spawn_blocking(move || {
                    let started = std::time::Instant::now();
                    let synced = flush.run();
                    ::metrics::histogram!(crate::metrics::FSYNC_SECONDS).record(started.elapsed().as_secs_f64());
                    callback.log_io_completed(synced)
                });
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
        {
            let mut d = g.durable.lock().unwrap_or_else(|p| p.into_inner());
            d.generation += 1;
            d.index = d.index.min(log_id.index.saturating_sub(1));
        }
        // lowered on disk before the cut: a crash after it must not find entries "fsynced"
        // that the log no longer has (they would look rotted away)
        if g.meta.flushed.is_some_and(|f| f >= log_id.index) {
            g.save_meta()?;
        }
        let cut = g.entries.range(log_id.index..).next().map(|(_, s)| *s);
        if let Some(slot) = cut {
            g.entries.retain(|i, _| *i < log_id.index);
            // the later files go first (newest first), then the cut: a crash in between leaves
            // a log that ends at or after the cut, never one with a hole
            let later: Vec<u64> = g.segments.range(slot.seg + 1..).map(|(k, _)| *k).collect();
            let mut removed = false;
            for key in later.iter().rev() {
                if let Some(seg) = g.segments.remove(key) {
                    std::fs::remove_file(&seg.path).map_err(io_err)?;
                    removed = true;
                }
            }
            if removed {
                sluice_storage::sidefile::sync_dir(&g.dir).map_err(io_err)?;
            }
            if let Some(seg) = g.segments.get_mut(&slot.seg) {
                seg.file.set_len(slot.pos).and_then(|_| seg.file.sync_data()).map_err(io_err)?;
                seg.len = slot.pos;
            }
            g.drop_empty_segments().map_err(io_err)?;
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
        // whole files only: a file is deleted once every entry in it is purged (nothing is
        // copied; a partition's replica starts a file every quarter snapshot interval)
        g.drop_empty_segments().map_err(io_err)?;
        Ok(())
    }
}

/// Write every entry of the Raft log in `dir` (a group of type `C`) to `out` as one JSON line
/// each (the form the log had before decision 0023), without changing anything on disk; stops
/// at a torn or corrupt record; entries purged but still in a file are left out. The number of entries written (`cluster::store::dump` picks
/// `C` for a directory).
pub fn dump_as<C: Logged>(dir: &Path, out: &mut dyn Write) -> anyhow::Result<usize>
where
    Entry<C>: Serialize + serde::de::DeserializeOwned,
{
    let files = log_files(dir)?;
    if files.is_empty() && dir.join(JSON_LOG_FILE).exists() {
        // not converted yet: the file is already JSON lines
        let text = std::fs::read(dir.join(JSON_LOG_FILE))?;
        out.write_all(&text)?;
        return Ok(text.iter().filter(|b| **b == b'\n').count());
    }
    // entries up to the last purge may still be in a file that holds later ones: not the log
    let purged = match std::fs::read(dir.join(META_FILE)) {
        Ok(b) => serde_json::from_slice::<Meta>(&b)?.last_purged.map(|l| l.index),
        Err(_) => None,
    };
    let (mut record, mut count) = (Vec::new(), 0);
    for path in files {
        let mut reader = std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(&path)?);
        while let Ok(Some(())) = next_record(&mut reader, &mut record) {
            let Some(payload) = record_payload(&record) else { break };
            let e: Entry<C> = bincode::deserialize(payload)?;
            if purged.is_some_and(|p| e.log_id.index <= p) {
                continue;
            }
            serde_json::to_writer(&mut *out, &e)?;
            out.write_all(b"\n")?;
            count += 1;
        }
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

    fn big(index: u64) -> Entry<TypeConfig> {
        Entry::<TypeConfig> {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(Command::AllocateProducerIds { node_id: 1, count: index as i64 }),
        }
    }

    fn files(dir: &Path) -> Vec<String> {
        log_files(dir).unwrap().iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect()
    }

    /// The log rolls to a new file once the newest is full; a purge deletes the files whose
    /// entries are all purged (the file holding the first kept entry stays), copies nothing,
    /// and purged entries never come back on reopen.
    #[tokio::test]
    async fn a_purge_deletes_whole_files_and_purged_entries_stay_purged() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LogStore::<TypeConfig>::open(dir.path()).unwrap();
        let one = records(&[big(1)]).len() as u64;
        log.roll_at(10 * one);
        for i in 1..=35 {
            log.write_entries([big(i)]).unwrap().run().unwrap();
        }
        assert_eq!(files(dir.path()), (0..4).map(|n| segment_name(1 + 10 * n)).collect::<Vec<_>>());
        let kept_before = std::fs::metadata(dir.path().join(segment_name(11))).unwrap();
        log.purge(LogId::new(CommittedLeaderId::new(1, 1), 13)).await.unwrap();
        assert_eq!(files(dir.path()), [11, 21, 31].map(segment_name));
        // the dump leaves out entries purged but still in a kept file (11..=13)
        assert_eq!(dump_as::<TypeConfig>(dir.path(), &mut Vec::new()).unwrap(), 22);
        // the file holding entry 14 is not rewritten
        let kept_after = std::fs::metadata(dir.path().join(segment_name(11))).unwrap();
        assert_eq!(kept_after.len(), kept_before.len());
        assert_eq!(kept_after.modified().unwrap(), kept_before.modified().unwrap());
        drop(log);
        let mut log = LogStore::<TypeConfig>::open(dir.path()).unwrap();
        let got: Vec<u64> = log.try_get_log_entries(0..).await.unwrap().iter().map(|e| e.log_id.index).collect();
        assert_eq!(got, (14..=35).collect::<Vec<_>>());
        assert_eq!(log.get_log_state().await.unwrap().last_purged_log_id.map(|l| l.index), Some(13));
        // a purge past the last entry (a snapshot installed) deletes every file; appends go on
        log.purge(LogId::new(CommittedLeaderId::new(1, 1), 50)).await.unwrap();
        assert!(files(dir.path()).is_empty());
        log.write_entries([big(51)]).unwrap().run().unwrap();
        drop(log);
        let mut log = LogStore::<TypeConfig>::open(dir.path()).unwrap();
        assert_eq!(files(dir.path()), [segment_name(51)]);
        assert_eq!(log.try_get_log_entries(0..).await.unwrap(), vec![big(51)]);
    }

    /// A crash may leave any state a purge or a truncation passes through: files still there
    /// after the purge was recorded (deleted on open), a newer file after a torn end or a gap
    /// (not part of the log: removed), an empty new file (removed). The log opens to the
    /// entries that were durably written, without a hole, and takes appends.
    #[tokio::test]
    async fn a_log_of_several_files_opens_to_its_durable_entries_after_any_crash() {
        // a purge recorded whose files were not deleted yet
        let dir = tempfile::tempdir().unwrap();
        let log = LogStore::<TypeConfig>::open(dir.path()).unwrap();
        let one = records(&[big(1)]).len() as u64;
        log.roll_at(5 * one);
        for i in 1..=12 {
            log.write_entries([big(i)]).unwrap().run().unwrap();
        }
        {
            let mut g = log.lock();
            g.meta.last_purged = Some(LogId::new(CommittedLeaderId::new(1, 1), 7));
            g.save_meta().unwrap();
        }
        drop(log);
        let mut log = LogStore::<TypeConfig>::open(dir.path()).unwrap();
        assert_eq!(files(dir.path()), [6, 11].map(segment_name));
        assert_eq!(log.try_get_log_entries(0..).await.unwrap().first().map(|e| e.log_id.index), Some(8));
        drop(log);
        // a torn end in the middle file: the later file goes, the log ends before the tear
        let middle = dir.path().join(segment_name(6));
        let len = std::fs::metadata(&middle).unwrap().len();
        std::fs::OpenOptions::new().write(true).open(&middle).unwrap().set_len(len - 3).unwrap();
        let mut log = LogStore::<TypeConfig>::open(dir.path()).unwrap();
        assert_eq!(files(dir.path()), [segment_name(6)]);
        let got: Vec<u64> = log.try_get_log_entries(0..).await.unwrap().iter().map(|e| e.log_id.index).collect();
        assert_eq!(got, (8..=9).collect::<Vec<_>>());
        log.write_entries([big(10)]).unwrap().run().unwrap();
        drop(log);
        // a file that does not continue the log (entries 20..) and an empty one are removed
        std::fs::write(dir.path().join(segment_name(20)), records(&[big(20), big(21)])).unwrap();
        std::fs::write(dir.path().join(segment_name(30)), b"").unwrap();
        let mut log = LogStore::<TypeConfig>::open(dir.path()).unwrap();
        assert_eq!(files(dir.path()), [segment_name(6)]);
        assert_eq!(log.get_log_state().await.unwrap().last_log_id.map(|l| l.index), Some(10));
        // a truncation into an older file deletes the newer ones and cuts it
        log.roll_at(one);
        log.write_entries([big(11)]).unwrap().run().unwrap();
        log.write_entries([big(12)]).unwrap().run().unwrap();
        assert_eq!(files(dir.path()), [6, 11, 12].map(segment_name));
        log.truncate(LogId::new(CommittedLeaderId::new(1, 1), 10)).await.unwrap();
        assert_eq!(files(dir.path()), [segment_name(6)]);
        log.write_entries([big(10)]).unwrap().run().unwrap();
        drop(log);
        let mut log = LogStore::<TypeConfig>::open(dir.path()).unwrap();
        let got: Vec<u64> = log.try_get_log_entries(0..).await.unwrap().iter().map(|e| e.log_id.index).collect();
        assert_eq!(got, (8..=10).collect::<Vec<_>>());
        assert_eq!(files(dir.path()), [6, 10].map(segment_name));
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

    /// A follower commits entries before its fsync of them ends: a commit point recorded past
    /// the entries a power cut left is lowered to the last one held, so that openraft's start
    /// (which re-applies up to it) finds every entry it asks for.
    #[tokio::test]
    async fn a_commit_point_past_the_entries_a_crash_left_is_lowered_to_the_last_held() {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = records(&allocations(3));
        bytes.extend_from_slice(&records(&[entry(4, None)]));
        bytes.truncate(bytes.len() - 3);
        std::fs::write(dir.path().join(LOG_FILE), &bytes).unwrap();
        let mut log = LogStore::<TypeConfig>::open(dir.path()).unwrap();
        let third = log.get_log_state().await.unwrap().last_log_id.unwrap();
        assert_eq!(third.index, 3);
        drop(log);
        let fourth = LogId::new(third.leader_id, 4);
        ProgressFile::new(dir.path())
            .prepare(&Progress { committed: Some(fourth), flushed: None })
            .unwrap()
            .finish()
            .unwrap();
        let mut log = LogStore::<TypeConfig>::open(dir.path()).unwrap();
        assert_eq!(log.read_committed().await.unwrap(), Some(third));
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
            // a file left with no whole record is removed
            let len = std::fs::metadata(dir.path().join(LOG_FILE)).map_or(0, |m| m.len());
            assert_eq!(len as usize, ends[whole]);
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

    /// Flip one bit in the last record of the log in `dir`.
    fn flip_last_record(dir: &Path) {
        let path = log_files(dir).unwrap().pop().unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        let at = bytes.len() - 2;
        bytes[at] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
    }

    /// A flipped bit in the last record of entries an fsync covered (and `meta.json` recorded
    /// so) is damage at rest, not a torn end, though no whole record follows it: the replica
    /// must not vote until it holds that entry again. The same flip in an entry written after
    /// the last record of what was fsynced is a torn end, as before; and a truncation lowers
    /// the record first, so entries it removed are never taken for damage.
    #[tokio::test]
    async fn a_rotted_last_record_of_fsynced_entries_is_damage_not_a_torn_end() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LogStore::<TypeConfig>::open(dir.path()).unwrap();
        log.write_entries(allocations(3)).unwrap().run().unwrap();
        log.save_committed(Some(LogId::new(CommittedLeaderId::new(1, 1), 2))).await.unwrap();
        drop(log);
        flip_last_record(dir.path());
        let mut log = LogStore::<TypeConfig>::open(dir.path()).unwrap();
        assert_eq!(log.get_log_state().await.unwrap().last_log_id.map(|l| l.index), Some(2));
        assert_eq!(log.damaged_until(), Some(3), "the rotted last entry is damage");
        // a restart before the entry is back (a vote saved meanwhile) keeps the guard
        log.save_vote(&Vote::new(2, 1)).await.unwrap();
        drop(log);
        let mut log = LogStore::<TypeConfig>::open(dir.path()).unwrap();
        assert_eq!(log.damaged_until(), Some(3), "the guard outlives a restart");
        // once the entry is back (from the leader), a save records it again
        log.write_entries([allocations(3).remove(2)]).unwrap().run().unwrap();
        log.write_entries([entry(4, None)]).unwrap().run().unwrap();
        log.save_committed(Some(LogId::new(CommittedLeaderId::new(1, 1), 3))).await.unwrap();
        // entry 5 is written but meta.json not saved after its fsync: a torn end
        log.write_entries([entry(5, None)]).unwrap().run().unwrap();
        drop(log);
        flip_last_record(dir.path());
        let mut log = LogStore::<TypeConfig>::open(dir.path()).unwrap();
        assert_eq!(log.get_log_state().await.unwrap().last_log_id.map(|l| l.index), Some(4));
        assert_eq!(log.damaged_until(), None, "an entry past the recorded fsync is torn, not rotted");
        // a truncation of fsynced entries: no damage at the next open, even without a new save
        log.write_entries([entry(5, None), entry(6, None)]).unwrap().run().unwrap();
        log.save_committed(Some(LogId::new(CommittedLeaderId::new(1, 1), 4))).await.unwrap();
        log.truncate(LogId::new(CommittedLeaderId::new(1, 1), 5)).await.unwrap();
        drop(log);
        let mut log = LogStore::<TypeConfig>::open(dir.path()).unwrap();
        assert_eq!(log.get_log_state().await.unwrap().last_log_id.map(|l| l.index), Some(4));
        assert_eq!(log.damaged_until(), None, "truncated entries are not damage");
        // an fsync that completes after a truncation does not count the removed entries
        let pending = log.write_entries([entry(5, None), entry(6, None)]).unwrap();
        log.truncate(LogId::new(CommittedLeaderId::new(1, 1), 5)).await.unwrap();
        pending.run().unwrap();
        log.save_vote(&Vote::new(2, 1)).await.unwrap();
        drop(log);
        let log = LogStore::<TypeConfig>::open(dir.path()).unwrap();
        assert_eq!(log.damaged_until(), None, "a late fsync of truncated entries is not durable");
    }

    /// The commit point moves in a file of its own (one page rewritten): a reopen finds it there,
    /// and one a power cut left unreadable gives way to the fsynced meta file's older values
    /// without failing the open.
    #[tokio::test]
    async fn the_commit_point_is_kept_in_its_own_file_and_an_unreadable_one_falls_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LogStore::<TypeConfig>::open(dir.path()).unwrap();
        log.write_entries(allocations(3)).unwrap().run().unwrap();
        let at = |i| Some(LogId::new(CommittedLeaderId::new(1, 1), i));
        log.save_committed(at(0)).await.unwrap();
        log.save_vote(&Vote::new(1, 1)).await.unwrap();
        log.save_committed(at(2)).await.unwrap();
        drop(log);
        let mut log = LogStore::<TypeConfig>::open(dir.path()).unwrap();
        assert_eq!(log.read_committed().await.unwrap(), at(2));
        drop(log);
        std::fs::write(dir.path().join(PROGRESS_FILE), b"{\"commit").unwrap();
        let mut log = LogStore::<TypeConfig>::open(dir.path()).unwrap();
        assert_eq!(log.read_committed().await.unwrap(), at(0), "the meta file's, saved with the vote");
        assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(1, 1)));
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
