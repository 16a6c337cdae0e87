//! Log compaction (`cleanup.policy=compact`): Kafka's log cleaner for one partition.
//!
//! A pass has three steps, so that the slow middle one runs without the log's lock:
//! 1. [`Log::prepare_clean`] (under the lock) picks the cleanable range `[log start, end)`:
//!    sealed segments only, below the last stable offset, the high watermark and the durable
//!    end, and not newer than `min.compaction.lag.ms`. It opens its own handles on those files.
//! 2. [`clean`] (no lock) builds the offset map — key → newest offset — from the dirty part
//!    `[first dirty, end)`, then rewrites every segment below `end` into a staging directory
//!    (`cleaner.tmp/`), merging neighbours while they fit in `segment.bytes`:
//!    - a record is kept when no newer record has its key (offsets are never rewritten: the
//!      removed ones become gaps); records without a key go, as in Kafka;
//!    - records of aborted transactions go (the aborted-transaction index says which);
//!    - a tombstone (null value) or a COMMIT/ABORT marker whose transaction has no batch left
//!      goes only once it lies below the end of a pass that finished `delete.retention.ms` ago;
//!    - the last batch of each live producer stays, empty if none of its records does (even an
//!      aborted one), so its sequence and epoch survive a restart that replays the log (Kafka's
//!      rule), and so does its transaction's marker;
//!    - a batch that keeps every record is copied byte for byte; one that keeps some is
//!      rewritten with [`sluice_protocol::batch::filtered`] (same base and last offset, same
//!      producer fields, the kept records' bytes copied as they are); one that keeps none is
//!      dropped.
//! 3. [`Log::install_clean`] (under the lock) checks that the segments it read are still the
//!    log's (retention, DeleteRecords or a snapshot install may have replaced them meanwhile; the
//!    pass is then dropped), records in `cleaner.checkpoint` that segments below `end` may have
//!    offset gaps, writes the swap manifest `cleaner.swap`, moves the staged files over the old
//!    ones and deletes the merged-away segments, then records the new clean end and removes the
//!    manifest.
//!
//! Crash safety: staged files are fsynced before the manifest is written. With no manifest, a
//! crash leaves the old segments untouched and [`recover`] deletes the staging directory. With a
//! manifest, [`recover`] redoes the moves and deletes (both idempotent). Either way every segment
//! is old or new as a whole, and a mix of old and new segments from one pass is still a valid
//! compaction: a record is removed only when a newer one with its key is kept, and segments are
//! swapped oldest first, so a removed tombstone's older values are gone before it is.

use crate::error::{IoContext, Result, StorageError};
use crate::log::Log;
use crate::mmap;
use crate::segment::{file_name, BatchMeta, Segment};
use crate::sidefile;
use crate::txnindex::AbortedTxn;
use sluice_protocol::batch::{self, BatchView, NO_PRODUCER_ID};
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const CLEANER_FILE: &str = "cleaner.checkpoint";
pub const SWAP_FILE: &str = "cleaner.swap";
pub const STAGING_DIR: &str = "cleaner.tmp";
const STATE_MAGIC: [u8; 4] = *b"SLCS";
const SWAP_MAGIC: [u8; 4] = *b"SLCW";
/// Bytes of dedupe buffer one offset-map entry costs (Kafka: a 16-byte hash and an offset).
pub const MAP_ENTRY_BYTES: usize = 24;
/// Passes remembered for the tombstone horizon.
const MAX_PASSES: usize = 64;
const EXTS: [&str; 4] = ["log", "index", "timeindex", "txnindex"];

/// What the cleaner remembers about a partition (`cleaner.checkpoint`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CleanerState {
    /// Offsets below this have been cleaned (Kafka's first dirty offset).
    pub clean_end: i64,
    /// Segments whose base is below this may have offset gaps (recovery allows them there).
    pub gaps_below: i64,
    /// Finished passes, oldest first: (clean end, finished at, ms since the epoch).
    pub passes: Vec<(i64, i64)>,
    /// The lowest offset of a tombstone or marker the last pass kept only because its horizon
    /// had not come (`i64::MAX`: none): a pass is due once the horizon passes it, even with
    /// nothing dirty, so tombstones go on time (as Kafka's KIP-534 cleaner does).
    pub pending_deletes_from: i64,
}

impl Default for CleanerState {
    fn default() -> Self {
        CleanerState { clean_end: 0, gaps_below: 0, passes: Vec::new(), pending_deletes_from: i64::MAX }
    }
}

impl CleanerState {
    fn encode(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(28 + self.passes.len() * 16);
        p.extend_from_slice(&self.clean_end.to_be_bytes());
        p.extend_from_slice(&self.gaps_below.to_be_bytes());
        p.extend_from_slice(&self.pending_deletes_from.to_be_bytes());
        p.extend_from_slice(&(self.passes.len() as u32).to_be_bytes());
        for (end, at) in &self.passes {
            p.extend_from_slice(&end.to_be_bytes());
            p.extend_from_slice(&at.to_be_bytes());
        }
        sidefile::encode(STATE_MAGIC, 1, &p)
    }

    fn decode(p: &[u8]) -> Option<CleanerState> {
        let i = |at: usize| p.get(at..at + 8).map(|b| i64::from_be_bytes(b.try_into().unwrap_or([0; 8])));
        let n = p.get(24..28).map(|b| u32::from_be_bytes(b.try_into().unwrap_or([0; 4])))? as usize;
        if p.len() != 28 + n * 16 {
            return None;
        }
        let passes = (0..n).map(|k| Some((i(28 + k * 16)?, i(36 + k * 16)?))).collect::<Option<Vec<_>>>()?;
        Some(CleanerState { clean_end: i(0)?, gaps_below: i(8)?, pending_deletes_from: i(16)?, passes })
    }

    /// Read `dir`'s state; a missing file is a log never cleaned. An unreadable one is treated
    /// as "gaps anywhere, nothing cleaned" (recovery must not cut a cleaned log at a gap).
    pub fn load(dir: &Path) -> CleanerState {
        match sidefile::read_framed(&dir.join(CLEANER_FILE), STATE_MAGIC) {
            Ok(Some((_, p))) => CleanerState::decode(&p).unwrap_or_else(|| {
                tracing::warn!("{}: malformed cleaner checkpoint; cleaning from the start", dir.display());
                CleanerState { gaps_below: i64::MAX, ..CleanerState::default() }
            }),
            Ok(None) => CleanerState::default(),
            Err(e) => {
                tracing::warn!("unreadable cleaner checkpoint ({e}); cleaning from the start");
                CleanerState { gaps_below: i64::MAX, ..Default::default() }
            }
        }
    }

    fn store(&self, dir: &Path) -> Result<()> {
        sidefile::write_atomic(&dir.join(CLEANER_FILE), &self.encode())
    }

    /// Tombstones and empty transactions' markers below this offset may be removed at `now`:
    /// they were already below the end of a pass that finished `delete_retention_ms` ago.
    pub fn horizon(&self, now_ms: i64, delete_retention_ms: i64) -> i64 {
        self.passes
            .iter()
            .filter(|(_, at)| at.saturating_add(delete_retention_ms) <= now_ms)
            .map(|(end, _)| *end)
            .max()
            .unwrap_or(i64::MIN)
    }

    /// When the last pass finished (ms), if any.
    pub fn last_cleaned_ms(&self) -> Option<i64> {
        self.passes.last().map(|(_, at)| *at)
    }

    /// A tombstone or marker the last pass kept has reached its horizon.
    pub fn deletes_due(&self, now_ms: i64, delete_retention_ms: i64) -> bool {
        self.horizon(now_ms, delete_retention_ms) > self.pending_deletes_from
    }

    fn record_pass(&mut self, end: i64, now_ms: i64, pending_deletes_from: i64) {
        self.clean_end = end;
        self.pending_deletes_from = pending_deletes_from;
        self.passes.push((end, now_ms));
        // a pass that ended lower than a later, older-or-equal one is never the horizon again
        while self.passes.len() > MAX_PASSES {
            self.passes.remove(0);
        }
    }
}

/// The settings of one pass (Kafka's names in the broker's config and topic configs).
#[derive(Debug, Clone)]
pub struct CleanOptions {
    pub now_ms: i64,
    /// `delete.retention.ms`
    pub delete_retention_ms: i64,
    /// `min.compaction.lag.ms`: a segment with a record newer than this is not cleaned yet.
    pub min_compaction_lag_ms: i64,
    /// First offset that must not be cleaned (the last stable offset: open transactions and
    /// anything not yet committed stay as they are).
    pub upper: i64,
    /// `log.cleaner.dedupe.buffer.size` / [`MAP_ENTRY_BYTES`]: keys one pass may map.
    pub map_capacity: usize,
    /// Live producers and the last offset of each one's last batch: that batch is kept (with
    /// no records if none of them stays).
    pub keep_last: HashMap<i64, i64>,
    /// `log.cleaner.io.max.bytes.per.second` (read plus written); `None`: unlimited.
    pub io_bytes_per_second: Option<f64>,
}

/// One segment a pass reads, with the identity it must still have when the pass is installed.
#[derive(Debug)]
struct JobSegment {
    base: i64,
    next_base: i64,
    size: u64,
    ino: u64,
    file: File,
    batches: usize,
}

/// The cleanable range of a log, taken under its lock; read by [`clean`] without it.
#[derive(Debug)]
pub struct CleanJob {
    dir: PathBuf,
    segments: Vec<JobSegment>,
    aborted: Vec<AbortedTxn>,
    first_dirty: i64,
    end: i64,
    state: CleanerState,
    segment_bytes: u64,
    index_interval_bytes: u64,
    index_max_bytes: usize,
    leader_epoch: Option<i32>,
}

impl CleanJob {
    pub fn first_dirty(&self) -> i64 {
        self.first_dirty
    }
    pub fn end(&self) -> i64 {
        self.end
    }
}

/// What a pass did (metrics and logs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CleanStats {
    pub segments_read: usize,
    pub segments_written: usize,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub records_read: u64,
    pub records_kept: u64,
    pub map_entries: usize,
    pub first_dirty: i64,
    pub end: i64,
    pub seconds: f64,
}

/// A finished pass, staged and waiting for [`Log::install_clean`].
#[derive(Debug)]
pub struct Cleaned {
    groups: Vec<Group>,
    end: i64,
    now_ms: i64,
    pending_deletes_from: i64,
    pub stats: CleanStats,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Group {
    base: i64,
    /// (base, inode) of every segment the staged one replaces, oldest first.
    replaced: Vec<(i64, u64)>,
}

/// A key's 128-bit hash: two SipHash-1-3 with keys drawn at random per process (so nobody can
/// aim a collision at another key; two keys colliding by chance among 10^9 have a 10^-21 chance).
/// Kafka's cleaner uses MD5; SHA-256 cost this one a third of a pass's time.
fn key_hash(key: &[u8]) -> u128 {
    use std::hash::{BuildHasher, Hasher};
    static STATES: std::sync::OnceLock<(
        std::collections::hash_map::RandomState,
        std::collections::hash_map::RandomState,
    )> = std::sync::OnceLock::new();
    let (a, b) = STATES.get_or_init(|| (Default::default(), Default::default()));
    let (mut x, mut y) = (a.build_hasher(), b.build_hasher());
    x.write(key);
    y.write(key);
    (u128::from(x.finish()) << 64) | u128::from(y.finish())
}

/// The hash is already uniform: the map uses its low bits as is.
#[derive(Default, Clone, Copy)]
struct Identity(u64);
impl std::hash::Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | u64::from(*b);
        }
    }
    fn write_u128(&mut self, v: u128) {
        self.0 = v as u64;
    }
}
type OffsetMap = HashMap<u128, i64, std::hash::BuildHasherDefault<Identity>>;

thread_local! {
    static CRASH_AFTER: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// Tests only: make this thread's next [`Log::install_clean`] stop, as a crash would, after `n`
/// of its file-system steps (`None`: never).
#[doc(hidden)]
pub fn crash_after_steps(n: Option<usize>) {
    CRASH_AFTER.with(|c| c.set(n));
}

/// One file-system step of a swap; fails when the test's crash point is reached.
fn step() -> Result<()> {
    CRASH_AFTER.with(|c| match c.get() {
        Some(0) => Err(StorageError::InvalidConfig("simulated crash".into())),
        Some(n) => {
            c.set(Some(n - 1));
            Ok(())
        }
        None => Ok(()),
    })
}

fn corrupt(path: &Path, e: impl std::fmt::Display) -> StorageError {
    StorageError::Corrupt { path: path.to_path_buf(), position: 0, reason: e.to_string() }
}

fn is_aborted(aborted: &[AbortedTxn], pid: i64, offset: i64) -> bool {
    aborted.iter().any(|t| t.producer_id == pid && t.first_offset <= offset && offset <= t.last_offset)
}

impl Log {
    /// The cleaner's record for this log.
    pub fn cleaner_state(&self) -> &CleanerState {
        &self.cleaner
    }

    /// The end of the range a pass may clean now: the base of the first segment that is the
    /// active one, reaches `upper`, the high watermark or the retention floor (a Raft log kept
    /// in this log still reads its entries from there, as written: `Log::set_retention_floor`),
    /// or holds a record newer than `min_compaction_lag_ms`. (A pass also stops at the durable
    /// end: the records that justify a removal must survive a crash. Sync the log first —
    /// `Flusher::sync_to` — to clean it all.)
    pub fn cleanable_end(&self, upper: i64, now_ms: i64, min_compaction_lag_ms: i64) -> i64 {
        let limit = upper.min(self.high_watermark()).min(self.retention_floor);
        let bases: Vec<i64> = self.segment_bases();
        let mut end = bases.first().copied().unwrap_or(0);
        for pair in bases.windows(2) {
            let (base, next) = (pair[0], pair[1]);
            let Some(seg) = self.segments.get(&base) else { break };
            if next > limit || (min_compaction_lag_ms > 0 && seg.max_timestamp() > now_ms - min_compaction_lag_ms) {
                break;
            }
            end = next;
        }
        end
    }

    /// Bytes already cleaned and bytes dirty (cleanable but not yet cleaned) below `end`: the
    /// dirty ratio is dirty / (clean + dirty), Kafka's `min.cleanable.dirty.ratio` measure.
    pub fn clean_and_dirty_bytes(&self, end: i64) -> (u64, u64) {
        let first_dirty = self.cleaner.clean_end;
        let mut clean = 0;
        let mut dirty = 0;
        let bases = self.segment_bases();
        for (i, base) in bases.iter().enumerate() {
            let next = bases.get(i + 1).copied().unwrap_or(i64::MAX);
            if next > end {
                break;
            }
            let size = self.segments.get(base).map_or(0, Segment::size);
            if next <= first_dirty {
                clean += size;
            } else {
                dirty += size;
            }
        }
        (clean, dirty)
    }

    /// The earliest record timestamp... of the first dirty segment: its first batch's max
    /// timestamp (what `max.compaction.lag.ms` is measured from), if there is a dirty segment.
    pub fn first_dirty_timestamp(&self, end: i64) -> Option<i64> {
        let first_dirty = self.cleaner.clean_end.max(self.log_start_offset());
        self.segments
            .range(..end)
            .filter(|(b, s)| **b >= first_dirty || s.next_offset() > first_dirty)
            .find_map(|(_, s)| s.first_batch_timestamp())
    }

    /// Step 1 of a pass: the segments below [`Log::cleanable_end`], with handles of their own.
    /// `None` when nothing is cleanable or nothing is dirty.
    pub fn prepare_clean(&self, opts: &CleanOptions) -> Result<Option<CleanJob>> {
        self.check_online()?;
        let end =
            self.cleanable_end(opts.upper.min(self.flusher().durable_end()), opts.now_ms, opts.min_compaction_lag_ms);
        let first_base = self.segment_bases().first().copied().unwrap_or(0);
        let mut first_dirty = self.cleaner.clean_end.max(first_base);
        if end <= first_dirty {
            // nothing dirty: a pass only to drop tombstones and markers past their horizon
            if end <= first_base || !self.cleaner.deletes_due(opts.now_ms, opts.delete_retention_ms) {
                return Ok(None);
            }
            first_dirty = end;
        }
        let bases = self.segment_bases();
        let mut segments = Vec::new();
        for (i, base) in bases.iter().enumerate() {
            let next_base = bases.get(i + 1).copied().unwrap_or(i64::MAX);
            if next_base > end {
                break;
            }
            let Some(seg) = self.segments.get(base) else { break };
            let path = seg.log_path().to_path_buf();
            let file = File::open(&path).at(&path)?;
            let meta = file.metadata().at(&path)?;
            if meta.ino() != seg.file().metadata().at(&path)?.ino() || meta.len() < seg.size() {
                return Ok(None); // replaced under us (cannot happen under the lock; be safe)
            }
            segments.push(JobSegment { base: *base, next_base, size: seg.size(), ino: meta.ino(), file, batches: 0 });
        }
        Ok(Some(CleanJob {
            dir: self.dir().to_path_buf(),
            aborted: self.collect_aborted_txns(first_base, end),
            segments,
            first_dirty,
            end,
            state: self.cleaner.clone(),
            segment_bytes: self.config().segment_bytes,
            index_interval_bytes: self.config().index_interval_bytes,
            index_max_bytes: self.config().segment_index_bytes,
            leader_epoch: self.config().leader_epoch,
        }))
    }

    /// Step 3 of a pass: swap the staged segments in. `Ok(false)` (and the staged files removed)
    /// when the log changed meanwhile so that the pass no longer applies.
    pub fn install_clean(&mut self, cleaned: Cleaned) -> Result<bool> {
        self.check_online()?;
        let staging = self.dir().join(STAGING_DIR);
        let still_ours = cleaned.groups.iter().flat_map(|g| &g.replaced).all(|(base, ino)| {
            self.segments.get(base).is_some_and(|s| s.file().metadata().is_ok_and(|m| m.ino() == *ino))
        }) && self.segments.contains_key(&cleaned.end);
        if !still_ours {
            let _ = std::fs::remove_dir_all(&staging);
            return Ok(false);
        }
        let dir = self.dir().to_path_buf();
        let mut state = self.cleaner.clone();
        state.gaps_below = state.gaps_below.max(cleaned.end);
        step()?;
        state.store(&dir)?;
        self.cleaner = state.clone();
        let manifest: Vec<(i64, Vec<i64>)> =
            cleaned.groups.iter().map(|g| (g.base, g.replaced.iter().map(|(b, _)| *b).collect())).collect();
        step()?;
        sidefile::write_atomic(&dir.join(SWAP_FILE), &encode_manifest(&manifest))?;
        for g in &cleaned.groups {
            for (b, _) in &g.replaced {
                // closes the old files (open readers keep their own maps)
                drop(self.segments.remove(b));
            }
        }
        if let Err(e) = finish_swap(&dir, &manifest) {
            self.offline.store(true, std::sync::atomic::Ordering::Release);
            return Err(e);
        }
        for g in &cleaned.groups {
            let mut seg = Segment::open(
                &dir,
                g.base,
                self.config().index_interval_bytes,
                self.config().segment_index_bytes,
                self.config().leader_epoch,
            )?;
            if !seg.load_clean()? {
                seg.recover_allowing_gaps()?;
                seg.seal(true)?;
            }
            seg.set_epoch_ceiling(self.epoch_ceiling());
            self.segments.insert(g.base, seg);
        }
        state.record_pass(cleaned.end.max(state.clean_end), cleaned.now_ms, cleaned.pending_deletes_from);
        step()?;
        state.store(&dir)?;
        self.cleaner = state;
        step()?;
        std::fs::remove_file(dir.join(SWAP_FILE)).at(&dir.join(SWAP_FILE))?;
        let _ = std::fs::remove_dir_all(&staging);
        sidefile::sync_dir(&dir)?;
        Ok(true)
    }
}

fn encode_manifest(groups: &[(i64, Vec<i64>)]) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&(groups.len() as u32).to_be_bytes());
    for (base, replaced) in groups {
        p.extend_from_slice(&base.to_be_bytes());
        p.extend_from_slice(&(replaced.len() as u32).to_be_bytes());
        for b in replaced {
            p.extend_from_slice(&b.to_be_bytes());
        }
    }
    sidefile::encode(SWAP_MAGIC, 1, &p)
}

fn decode_manifest(p: &[u8]) -> Option<Vec<(i64, Vec<i64>)>> {
    let mut cur = p;
    let mut take = |n: usize| -> Option<&[u8]> {
        let (a, b) = (cur.get(..n)?, cur.get(n..)?);
        cur = b;
        Some(a)
    };
    let u32_ = |b: &[u8]| u32::from_be_bytes(b.try_into().unwrap_or([0; 4])) as usize;
    let i64_ = |b: &[u8]| i64::from_be_bytes(b.try_into().unwrap_or([0; 8]));
    let n = u32_(take(4)?);
    let mut out = Vec::new();
    for _ in 0..n {
        let base = i64_(take(8)?);
        let m = u32_(take(4)?);
        let mut replaced = Vec::new();
        for _ in 0..m {
            replaced.push(i64_(take(8)?));
        }
        out.push((base, replaced));
    }
    Some(out)
}

/// Move the staged files of each group over the log's and delete the segments merged into it.
/// Idempotent: a crash anywhere in it is finished by running it again.
fn finish_swap(dir: &Path, manifest: &[(i64, Vec<i64>)]) -> Result<()> {
    let staging = dir.join(STAGING_DIR);
    for (base, replaced) in manifest {
        for ext in EXTS {
            let from = staging.join(file_name(*base, ext));
            if from.exists() {
                step()?;
                let to = dir.join(file_name(*base, ext));
                std::fs::rename(&from, &to).at(&to)?;
            }
        }
        for b in replaced.iter().filter(|b| *b != base) {
            for ext in EXTS {
                let p = dir.join(file_name(*b, ext));
                step()?;
                match std::fs::remove_file(&p) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(StorageError::Io { path: p, source: e }),
                }
            }
        }
    }
    sidefile::sync_dir(dir)
}

/// Finish or undo a pass a crash interrupted (called by [`Log::open`] before it reads the
/// directory): with a manifest the swap is completed, without one the staged files go.
pub fn recover(dir: &Path) -> Result<()> {
    let manifest_path = dir.join(SWAP_FILE);
    match sidefile::read_framed(&manifest_path, SWAP_MAGIC) {
        Ok(Some((_, p))) => {
            let manifest = decode_manifest(&p).ok_or_else(|| corrupt(&manifest_path, "malformed swap manifest"))?;
            tracing::warn!("{}: finishing an interrupted log-cleaner swap", dir.display());
            finish_swap(dir, &manifest)?;
            // the swapped segments' indexes are rebuilt: their index files may be older
            std::fs::remove_file(&manifest_path).at(&manifest_path)?;
        }
        Ok(None) => {}
        // a torn manifest was never complete: its write happens before any move
        Err(e) => {
            tracing::warn!("discarding an unreadable log-cleaner swap manifest: {e}");
            let _ = std::fs::remove_file(&manifest_path);
        }
    }
    let staging = dir.join(STAGING_DIR);
    if staging.exists() {
        std::fs::remove_dir_all(&staging).at(&staging)?;
    }
    Ok(())
}

/// Throttle to `log.cleaner.io.max.bytes.per.second`.
struct Throttle {
    rate: Option<f64>,
    started: Instant,
    bytes: f64,
}

impl Throttle {
    fn account(&mut self, bytes: usize) {
        let Some(rate) = self.rate.filter(|r| *r > 0.0 && r.is_finite()) else { return };
        self.bytes += bytes as f64;
        let due = Duration::from_secs_f64(self.bytes / rate);
        let spent = self.started.elapsed();
        if due > spent {
            std::thread::sleep(due - spent);
        }
    }
}

/// A staged output segment and the batches buffered for it.
struct Output {
    seg: Segment,
    buf: Vec<u8>,
    metas: Vec<BatchMeta>,
    batches: usize,
    bytes: u64,
    replaced: Vec<(i64, u64)>,
}

impl Output {
    fn push(&mut self, bytes: &[u8], v: &BatchView<'_>) {
        self.metas.push(BatchMeta {
            position: self.buf.len(),
            size: bytes.len(),
            base_offset: v.base_offset(),
            last_offset: v.last_offset(),
            max_timestamp: v.max_timestamp(),
        });
        self.buf.extend_from_slice(bytes);
        self.batches += 1;
        self.bytes += bytes.len() as u64;
    }

    fn write_out(&mut self, throttle: &mut Throttle) -> Result<()> {
        if !self.buf.is_empty() {
            self.seg.append(&self.buf, &self.metas)?;
            throttle.account(self.buf.len());
            self.buf.clear();
            self.metas.clear();
        }
        Ok(())
    }
}

/// The batches of a segment's bytes, hopping from header to header without checking CRCs.
fn headers(mut m: &[u8]) -> impl Iterator<Item = std::result::Result<BatchView<'_>, batch::BatchError>> {
    std::iter::from_fn(move || {
        if m.is_empty() {
            return None;
        }
        match BatchView::parse_unchecked_crc(m) {
            Ok(v) => {
                m = &m[v.size()..];
                Some(Ok(v))
            }
            Err(e) => {
                m = &[];
                Some(Err(e))
            }
        }
    })
}

/// Step 2 of a pass (no lock): build the offset map and write the cleaned segments into the
/// staging directory.
pub fn clean(job: &mut CleanJob, opts: &CleanOptions) -> Result<Cleaned> {
    let started = Instant::now();
    let mut throttle = Throttle { rate: opts.io_bytes_per_second, started, bytes: 0.0 };
    let mut stats = CleanStats { first_dirty: job.first_dirty, ..Default::default() };
    let maps: Vec<bytes::Bytes> = job
        .segments
        .iter()
        .map(|s| mmap::map_read(&s.file, s.size as usize).at(&job.dir.join(file_name(s.base, "log"))))
        .collect::<Result<_>>()?;
    for (s, m) in job.segments.iter_mut().zip(&maps) {
        s.batches = headers(m).count();
    }

    // 1. The offset map of the dirty range (stops at a segment boundary once full, but always
    //    takes the first dirty segment whole).
    let mut map = OffsetMap::default();
    let mut end = job.end;
    for (s, m) in job.segments.iter().zip(&maps) {
        if s.next_base <= job.first_dirty {
            continue;
        }
        if !map.is_empty() && map.len() >= opts.map_capacity {
            end = s.base;
            break;
        }
        let path = job.dir.join(file_name(s.base, "log"));
        // headers only: the rewrite below checks every batch's CRC, once
        for item in headers(m) {
            let v = item.map_err(|e| corrupt(&path, e))?;
            if v.is_control() || (v.is_transactional() && is_aborted(&job.aborted, v.producer_id(), v.base_offset())) {
                continue;
            }
            let (raw, records) = v.raw_records().map_err(|e| corrupt(&path, e))?;
            for r in records {
                if let (Some(k), true) = (r.key, r.offset >= job.first_dirty) {
                    map.insert(key_hash(&raw[k]), r.offset);
                }
            }
        }
        throttle.account(m.len());
    }
    job.end = end;
    stats.map_entries = map.len();
    stats.end = end;
    let horizon = job.state.horizon(opts.now_ms, opts.delete_retention_ms);

    // 2. Rewrite every segment below `end`, oldest first, merging while they fit.
    let staging = job.dir.join(STAGING_DIR);
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging).at(&staging)?;
    let index_entries = job.index_max_bytes / 12;
    let mut outputs: Vec<Output> = Vec::new();
    // producer id → the open committed transaction has a record kept
    let mut txn_kept: HashMap<i64, bool> = HashMap::new();
    let mut kept_markers: Vec<i64> = Vec::new();
    let mut pending_deletes_from = i64::MAX;
    for (s, m) in job.segments.iter().zip(&maps) {
        if s.next_base > end {
            break;
        }
        let path = job.dir.join(file_name(s.base, "log"));
        let fits = outputs.last().is_some_and(|o| {
            o.bytes + s.size <= job.segment_bytes
                && o.batches + s.batches <= index_entries
                && s.next_base - o.seg.base_offset() <= i64::from(u32::MAX)
        });
        if !fits {
            if let Some(o) = outputs.last_mut() {
                o.write_out(&mut throttle)?;
            }
            let seg = Segment::open(&staging, s.base, job.index_interval_bytes, job.index_max_bytes, job.leader_epoch)?;
            outputs.push(Output {
                seg,
                buf: Vec::new(),
                metas: Vec::new(),
                batches: 0,
                bytes: 0,
                replaced: Vec::new(),
            });
        }
        let Some(out) = outputs.last_mut() else { break };
        out.replaced.push((s.base, s.ino));
        stats.segments_read += 1;
        stats.bytes_read += s.size;
        for item in batch::iter_batches(m) {
            let (_, v) = item.map_err(|e| corrupt(&path, e))?;
            let pid = v.producer_id();
            let last_of_live = pid != NO_PRODUCER_ID && opts.keep_last.get(&pid) == Some(&v.last_offset());
            stats.records_read += v.records_count().max(0) as u64;
            if v.is_control() {
                // a marker stays while a batch of its transaction does (a replay must see the
                // transaction close), and until the horizon
                let had_batches = txn_kept.remove(&pid).unwrap_or(false);
                if had_batches || last_of_live || v.base_offset() >= horizon {
                    if !had_batches && !last_of_live {
                        pending_deletes_from = pending_deletes_from.min(v.base_offset());
                    }
                    out.push(v.bytes(), &v);
                    kept_markers.push(v.base_offset());
                    stats.records_kept += 1;
                }
                continue;
            }
            if v.is_transactional() && is_aborted(&job.aborted, pid, v.base_offset()) {
                if last_of_live {
                    let b = batch::filtered(&v, &[], &[]).map_err(|e| corrupt(&path, e))?;
                    let (nv, _) = BatchView::parse(&b).map_err(|e| corrupt(&path, e))?;
                    out.push(&b, &nv);
                    txn_kept.insert(pid, true);
                }
                continue;
            }
            let (raw, records) = v.raw_records().map_err(|e| corrupt(&path, e))?;
            let total = records.len();
            let kept: Vec<&batch::RawRecord> = records
                .iter()
                .filter(|r| {
                    let Some(k) = &r.key else { return false };
                    let newest = map.get(&key_hash(&raw[k.clone()])).is_none_or(|o| *o <= r.offset);
                    newest && (!r.null_value || r.offset >= horizon)
                })
                .collect();
            if let Some(t) = kept.iter().find(|r| r.null_value) {
                pending_deletes_from = pending_deletes_from.min(t.offset);
            }
            if v.is_transactional() {
                let e = txn_kept.entry(pid).or_insert(false);
                *e |= !kept.is_empty() || last_of_live;
            }
            stats.records_kept += kept.len() as u64;
            if kept.len() == total {
                out.push(v.bytes(), &v);
            } else if !kept.is_empty() || last_of_live {
                let b = batch::filtered(&v, &raw, &kept).map_err(|e| corrupt(&path, e))?;
                let (nv, _) = BatchView::parse(&b).map_err(|e| corrupt(&path, e))?;
                out.push(&b, &nv);
            }
            if out.buf.len() >= 1 << 20 {
                out.write_out(&mut throttle)?;
            }
        }
        throttle.account(m.len());
    }
    drop(maps);
    // 3. Aborted-transaction entries whose marker stays; seal and sync everything staged.
    let mut groups = Vec::with_capacity(outputs.len());
    for mut o in outputs {
        o.write_out(&mut throttle)?;
        let (lo, hi) = (o.seg.base_offset(), o.seg.next_offset());
        for t in job.aborted.iter().filter(|t| t.last_offset >= lo && t.last_offset < hi) {
            if kept_markers.binary_search(&t.last_offset).is_ok() {
                o.seg.txn_index.append(*t)?;
            }
        }
        o.seg.seal(true)?;
        o.seg.sync()?;
        stats.bytes_written += o.seg.size();
        stats.segments_written += 1;
        groups.push(Group { base: o.seg.base_offset(), replaced: o.replaced });
    }
    sidefile::sync_dir(&staging)?;
    stats.seconds = started.elapsed().as_secs_f64();
    Ok(Cleaned { groups, end, now_ms: opts.now_ms, pending_deletes_from, stats })
}
