//! The partition log: an ordered set of segments in one directory, the log start offset, the
//! log end offset (LEO), the high-watermark hook, the recovery point, the flush policy, and
//! crash recovery.
//!
//! Ordering of side effects in `append` (why it is safe to crash anywhere):
//! 1. every batch in the request is validated (magic, length, CRC, size limit) — a bad batch
//!    refuses the whole append and nothing is written;
//! 2. the active segment rolls if needed (old segment sealed and fsynced before the new one
//!    receives data);
//! 3. base offsets are assigned in the caller's buffer (outside the CRC) and the bytes are
//!    written with one `pwrite`;
//! 4. indexes are updated in memory-mapped files (rebuilt after a crash, so they need no
//!    ordering against the data);
//! 5. the new LEO is published to the [`Flusher`]; durability is awaited separately with
//!    [`Flusher::sync_to`], outside the caller's log lock, so appends group-commit.
//!
//! Recovery on open: without the clean-shutdown marker, every segment from the one holding the
//! recovery point onward is scanned batch by batch; the first invalid batch and everything
//! after it (including later segments) is removed. Nothing invalid is ever served.

use crate::config::{FlushPolicy, LogConfig};
use crate::error::{IoContext, Result, StorageError};
use crate::segment::{file_name, BatchMeta, Segment, TailGap};
use crate::sidefile;
use crate::sync::OrDie as _;
use crate::txnindex::AbortedTxn;
use bytes::Bytes;
use sluice_protocol::batch::{self, BatchView};
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub const CLEAN_SHUTDOWN_FILE: &str = ".clean_shutdown";
pub const CHECKPOINT_FILE: &str = "partition.checkpoint";
/// Present in a partition directory whose batches carry Raft terms as their partition leader
/// epochs (one log per replica, decision 0045): the log is opened without an epoch of its own
/// (`LogConfig::leader_epoch`).
pub const RAFT_TERMS_FILE: &str = "raft.terms";
const CHECKPOINT_MAGIC: [u8; 4] = *b"SLCP";
const SNAPSHOT_MAGIC: [u8; 4] = *b"SLPS";
pub const SNAPSHOT_VERSION: u16 = 1;
/// The unit in which the active segment's synced bytes leave the page cache (decision 0053).
const DROP_STEP: u64 = 2 * 1024 * 1024;

/// Write each batch's planned base offset, and `leader_epoch` if any, into its header.
fn stamp(batches: &mut [u8], metas: &[BatchMeta], leader_epoch: Option<i32>) {
    for m in metas {
        batch::set_base_offset(&mut batches[m.position..], m.base_offset);
        if let Some(e) = leader_epoch {
            batch::set_partition_leader_epoch(&mut batches[m.position..], e);
        }
    }
}

/// An append's batches placed ([`Log::plan`]): each one's offsets, and whether the active
/// segment rolls before they are written.
struct Plan {
    metas: Vec<BatchMeta>,
    first: i64,
    next: i64,
    max_ts: i64,
    offset_of_max: i64,
    need_roll: bool,
}

/// What an append stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendInfo {
    pub first_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    pub offset_of_max_timestamp: i64,
    pub batches: usize,
    pub bytes: usize,
    /// This append started a new segment (at `first_offset`): the moment to snapshot state
    /// that is derived from the log (producer state), as Kafka does at roll.
    pub rolled: bool,
}

/// What recovery on open did (for logs, metrics and the broker's producer-state rebuild).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The previous process closed the log cleanly; no scan was needed.
    pub clean: bool,
    /// First offset whose batches were re-validated by a scan (None if none were).
    pub scanned_from: Option<i64>,
    pub segments_scanned: usize,
    pub bytes_scanned: u64,
    /// Bytes removed from the end of the log (torn or corrupt tail, and later segments).
    pub truncated_bytes: u64,
    pub segments_deleted: usize,
    pub stop_reason: Option<String>,
}

/// Group commit. Appenders publish the LEO after each write; anyone needing durability up to an
/// offset calls [`Flusher::sync_to`]. Only one fsync runs at a time; it covers everything
/// written before it started, so concurrent waiters share it.
pub struct Flusher {
    target: Mutex<FlushTarget>,
    sync_lock: Mutex<()>,
    durable_end: AtomicI64,
    fsyncs: AtomicU64,
    failed: AtomicBool,
    /// `LogConfig::page_cache_tail_bytes`: after an fsync, synced bytes further than this from
    /// the log's end leave the page cache (-1: none do).
    tail_bytes: AtomicI64,
    /// A tail the log's owner sets for a while ([`Log::set_role_tail`]: a follower replica's
    /// log, decision 0054); -1: none. The smaller of it and `tail_bytes` applies.
    role_tail: AtomicI64,
}

struct FlushTarget {
    file: Arc<File>,
    path: PathBuf,
    written_end: i64,
    /// The active file's size at the last publish, and the prefix of it already dropped from
    /// the page cache after an fsync (`LogConfig::page_cache_tail_bytes`).
    written_bytes: u64,
    dropped_bytes: u64,
    /// Rolled segments not yet known to be synced: a roll does not fsync in the append path
    /// (that would stall producers for the whole dirty segment); the next `sync_to` does.
    sealed: Vec<(Arc<File>, PathBuf)>,
    /// A roll created a file whose directory entry is not yet synced.
    dir_to_sync: Option<PathBuf>,
    /// Bumped by each truncation ([`Log::truncate_to`]): an fsync that began before one cannot
    /// raise the durable end over offsets it removed (they may have been written again since).
    generation: u64,
}

impl Flusher {
    fn new(file: Arc<File>, path: PathBuf, end: i64, tail_bytes: i64) -> Flusher {
        Flusher {
            target: Mutex::new(FlushTarget {
                file,
                path,
                written_end: end,
                written_bytes: 0,
                dropped_bytes: 0,
                sealed: Vec::new(),
                dir_to_sync: None,
                generation: 0,
            }),
            sync_lock: Mutex::new(()),
            durable_end: AtomicI64::new(end),
            fsyncs: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            tail_bytes: AtomicI64::new(tail_bytes),
            role_tail: AtomicI64::new(-1),
        }
    }

    /// The tail kept in the page cache now: the smaller of the configured one and the role's,
    /// where set (-1: the whole log is kept).
    fn tail(&self) -> i64 {
        match (self.tail_bytes.load(Ordering::Relaxed), self.role_tail.load(Ordering::Relaxed)) {
            (t, -1) | (-1, t) => t,
            (a, b) => a.min(b),
        }
    }

    /// Offsets below this are on disk.
    pub fn durable_end(&self) -> i64 {
        self.durable_end.load(Ordering::Acquire)
    }

    /// Offsets below this have been written (to the page cache at least).
    pub fn written_end(&self) -> i64 {
        self.target.lock().or_die().written_end
    }

    /// Number of fsyncs performed (to observe group commit).
    pub fn fsync_count(&self) -> u64 {
        self.fsyncs.load(Ordering::Relaxed)
    }

    fn publish(&self, end: i64, bytes: u64) {
        let mut t = self.target.lock().or_die();
        debug_assert!(end >= t.written_end);
        t.written_end = end;
        t.written_bytes = bytes;
    }

    fn switch_file(&self, file: Arc<File>, path: PathBuf) {
        let mut t = self.target.lock().or_die();
        let old_file = std::mem::replace(&mut t.file, file);
        let old_path = std::mem::replace(&mut t.path, path);
        t.dir_to_sync = old_path.parent().map(Path::to_path_buf);
        t.sealed.push((old_file, old_path));
        t.written_bytes = 0;
        t.dropped_bytes = 0;
    }

    /// After a truncation at `end`: nothing at or past it is written, or durable; the segment
    /// `file` at `path` is the one written now, and the sealed segments at `deleted` are gone.
    fn truncated(&self, end: i64, file: Arc<File>, path: PathBuf, deleted: &[PathBuf]) {
        let mut t = self.target.lock().or_die();
        t.generation += 1;
        t.written_end = end;
        t.written_bytes = 0;
        t.dropped_bytes = 0;
        t.sealed.retain(|(_, p)| !deleted.contains(p) && *p != path);
        if t.path != path {
            t.file = file;
            t.path = path;
        }
        // under the target's lock, as an fsync's raise is (which checks the generation)
        self.durable_end.fetch_min(end, Ordering::AcqRel);
    }

    /// After an fsync of `sealed` and of `active` (`bytes` long, its first `dropped` bytes
    /// already dropped): drop from the page cache what lies further than `tail_bytes` from the
    /// log's end (decision 0053). Clean pages only: everything here was just synced, so nothing
    /// stored changes, and a later read of it reads the disk. Returns the active file's new
    /// dropped prefix when it grew. Advice that fails changes nothing and is not an error.
    fn drop_synced(&self, sealed: &[(Arc<File>, PathBuf)], active: &File, bytes: u64, dropped: u64) -> Option<u64> {
        let tail = u64::try_from(self.tail()).ok()?;
        // what of the tail the active file does not hold lies at the end of the sealed ones
        let rest = tail.saturating_sub(bytes);
        for (f, _) in sealed {
            if let Ok(m) = f.metadata() {
                let _ = crate::mmap::drop_cached(f, 0, m.len().saturating_sub(rest));
            }
        }
        // in whole 2 MiB steps: the page cache holds a file in folios of up to 2 MiB, aligned
        // in the file, and a folio the range only partly covers is not dropped
        let to = bytes.saturating_sub(tail) & !(DROP_STEP - 1);
        (to > dropped && crate::mmap::drop_cached(active, dropped, to - dropped).is_ok()).then_some(to)
    }

    /// Block until every offset below `end` is durable. Returns the durable end. After an
    /// fsync failure every later call fails: the state of unsynced data is unknown. Offsets
    /// a truncation removed before they were durable are `Truncated`.
    pub fn sync_to(&self, end: i64) -> Result<i64> {
        let durable = self.durable_end();
        if durable >= end {
            return Ok(durable);
        }
        let _one_at_a_time = self.sync_lock.lock().or_die();
        let (file, path, written, sealed, dir, generation, bytes, dropped) = {
            let t = self.target.lock().or_die();
            (
                t.file.clone(),
                t.path.clone(),
                t.written_end,
                t.sealed.clone(),
                t.dir_to_sync.clone(),
                t.generation,
                t.written_bytes,
                t.dropped_bytes,
            )
        };
        if written < end && generation > 0 {
            // a truncation took what was to be synced (a log never truncated answers with its
            // durable end, as it always has)
            return Err(StorageError::Truncated { end, log_end: written });
        }
        if self.failed.load(Ordering::Acquire) {
            return Err(StorageError::Offline(path));
        }
        let durable = self.durable_end();
        if durable >= end {
            return Ok(durable);
        }
        // Older segments first: durability is a prefix of the log.
        for (f, p) in sealed.iter().chain(std::iter::once(&(file.clone(), path))) {
            if let Err(e) = f.sync_data() {
                self.failed.store(true, Ordering::Release);
                return Err(StorageError::Io { path: p.clone(), source: e });
            }
            self.fsyncs.fetch_add(1, Ordering::Relaxed);
        }
        let dropped_to = self.drop_synced(&sealed, &file, bytes, dropped);
        // A new segment's directory entry must be durable before its data counts as durable.
        if let Some(d) = &dir {
            if let Err(e) = sidefile::sync_dir(d) {
                self.failed.store(true, Ordering::Release);
                return Err(e);
            }
        }
        if !sealed.is_empty() || dir.is_some() {
            let mut t = self.target.lock().or_die();
            t.sealed.retain(|(f, _)| !sealed.iter().any(|(g, _)| Arc::ptr_eq(f, g)));
            if t.dir_to_sync == dir {
                t.dir_to_sync = None;
            }
        }
        let mut t = self.target.lock().or_die();
        if t.generation == generation {
            self.durable_end.fetch_max(written, Ordering::AcqRel);
            if let Some(to) = dropped_to {
                if Arc::ptr_eq(&t.file, &file) {
                    t.dropped_bytes = t.dropped_bytes.max(to);
                }
            }
        }
        let durable = self.durable_end();
        if t.generation != generation && durable < end {
            // a truncation during the fsync took offsets below `end`
            return Err(StorageError::Truncated { end, log_end: t.written_end });
        }
        Ok(durable)
    }
}

pub struct Log {
    dir: PathBuf,
    config: LogConfig,
    pub(crate) segments: BTreeMap<i64, Segment>,
    log_start_offset: i64,
    high_watermark: i64,
    flusher: Arc<Flusher>,
    recovery: RecoveryReport,
    /// Set by a failed write or a corrupt read (a failed fsync sets the flusher's flag): the log
    /// refuses all further work, reads too.
    pub(crate) offline: AtomicBool,
    /// Set by a read (or the scrubber, or the open) that met a batch failing its CRC (decision
    /// 0036): the base offset of the segment that holds it; [`NOT_DAMAGED`] otherwise. The log
    /// is offline while it is set; unlike a failed write, a replica can repair it from a
    /// peer's copy ([`Log::find_damage`], [`Log::repair`]).
    damaged: std::sync::atomic::AtomicI64,
    /// Offsets below the recovery point whose bytes the open found gone from the end of the
    /// last segment (its base, and where they belong): the log is damaged until a replica's
    /// repair appends its peers' copies of them ([`Log::repair`]).
    tail_gap: Option<(i64, TailGap)>,
    /// The log cleaner's record (`cleaner.checkpoint`).
    pub(crate) cleaner: crate::cleaner::CleanerState,
    /// Reused per append so the hot path does not allocate.
    scratch_metas: Vec<BatchMeta>,
    /// Retention keeps every segment holding offsets at or above this (`i64::MAX`: no floor):
    /// a Raft log kept in this log (decision 0045) still needs its entries from here on.
    pub(crate) retention_floor: i64,
    /// The highest partition leader epoch a stored batch may carry ([`Log::set_epoch_ceiling`]).
    epoch_ceiling: Option<i32>,
}

/// `Log::damaged` when no damage is known (segment base offsets are never negative).
const NOT_DAMAGED: i64 = -1;

/// A batch that fails its CRC (or whose header does not parse), found where a read met it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// The base offset of the segment that holds it, and that segment's file.
    pub segment: i64,
    pub path: PathBuf,
    /// Its byte position in the segment file.
    pub position: u64,
    /// The offset it must start at: one past the last offset of the batch before it (the
    /// segment's base offset for its first batch). A compacted log may have a gap there, so
    /// the batch may start later.
    pub base_offset: i64,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log")
            .field("dir", &self.dir)
            .field("log_start_offset", &self.log_start_offset)
            .field("log_end_offset", &self.log_end_offset())
            .field("segments", &self.segments.len())
            .finish()
    }
}

fn parse_base(name: &str, ext: &str) -> Option<i64> {
    let stem = name.strip_suffix(ext)?.strip_suffix('.')?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// Write a producer-state snapshot into partition directory `dir` without holding the `Log`
/// (the write fsyncs; callers keep it out of their log lock).
pub fn write_producer_snapshot(dir: &Path, offset: i64, payload: &[u8]) -> Result<()> {
    let path = dir.join(file_name(offset, "snapshot"));
    sidefile::write_atomic(&path, &sidefile::encode(SNAPSHOT_MAGIC, SNAPSHOT_VERSION, payload))
}

pub(crate) fn checkpoint_encode(recovery_point: i64, log_start: i64) -> Vec<u8> {
    let mut p = Vec::with_capacity(16);
    p.extend_from_slice(&recovery_point.to_be_bytes());
    p.extend_from_slice(&log_start.to_be_bytes());
    sidefile::encode(CHECKPOINT_MAGIC, 1, &p)
}

impl Log {
    /// Open (creating if needed) the log in `dir`, recovering from an unclean shutdown.
    pub fn open(dir: &Path, config: LogConfig) -> Result<Log> {
        config.validate()?;
        crate::snapshot::recover_swap(dir)?;
        sidefile::create_dir_durable(dir)?;
        crate::cleaner::recover(dir)?;
        let cleaner = crate::cleaner::CleanerState::load(dir);
        let mut bases = Vec::new();
        let mut snapshots_and_orphans = Vec::new();
        for entry in std::fs::read_dir(dir).at(dir)? {
            let entry = entry.at(dir)?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".tmp") {
                let _ = std::fs::remove_file(entry.path());
            } else if let Some(b) = parse_base(&name, "log") {
                bases.push(b);
            } else {
                snapshots_and_orphans.push(name);
            }
        }
        bases.sort_unstable();

        let (mut recovery_point, mut log_start) =
            match sidefile::read_framed(&dir.join(CHECKPOINT_FILE), CHECKPOINT_MAGIC) {
                Ok(Some((_, p))) if p.len() == 16 => {
                    let i = |a: usize| {
                        let mut b = [0u8; 8];
                        b.copy_from_slice(&p[a..a + 8]);
                        i64::from_be_bytes(b)
                    };
                    (i(0), i(8))
                }
                Ok(_) => (0, 0),
                Err(e) => {
                    tracing::warn!("ignoring unreadable checkpoint, scanning the whole log: {e}");
                    (0, 0)
                }
            };
        let clean_marker = dir.join(CLEAN_SHUTDOWN_FILE);
        let clean = clean_marker.exists();
        if clean {
            // From now on a crash must trigger a scan.
            std::fs::remove_file(&clean_marker).at(&clean_marker)?;
            sidefile::sync_dir(dir)?;
        }
        let mut report = RecoveryReport { clean, ..Default::default() };

        if bases.is_empty() {
            bases.push(log_start.max(0));
            recovery_point = log_start.max(0);
        }
        let mut segments = BTreeMap::new();
        let mut truncated_at: Option<usize> = None;
        let mut damaged: Option<i64> = None;
        let mut tail_gap: Option<(i64, TailGap)> = None;
        for (i, &base) in bases.iter().enumerate() {
            if truncated_at.is_some() {
                // everything after a corrupt point is gone
                let seg = Segment::open(
                    dir,
                    base,
                    config.index_interval_bytes,
                    config.segment_index_bytes,
                    config.leader_epoch,
                )?;
                report.truncated_bytes += seg.size();
                report.segments_deleted += 1;
                seg.delete_files()?;
                continue;
            }
            let mut seg =
                Segment::open(dir, base, config.index_interval_bytes, config.segment_index_bytes, config.leader_epoch)?;
            let next_base = bases.get(i + 1).copied();
            let below_recovery_point = next_base.is_some_and(|nb| nb <= recovery_point);
            // the last segment must also reach the recovery point: a file that lost its synced
            // end can still look whole
            let trusted = (clean || below_recovery_point)
                && seg.load_clean()?
                && (next_base.is_some() || seg.next_offset() >= recovery_point);
            if !trusted {
                report.scanned_from.get_or_insert(base);
                report.segments_scanned += 1;
                report.bytes_scanned += seg.size();
                let gaps = base < cleaner.gaps_below;
                // written and synced before (a clean close, or below the recovery point): damage
                // here is rot at rest, not a torn tail, and every byte was acknowledged: keep it
                // and take the log offline (decision 0036) instead of cutting it
                let at_rest = (clean && next_base.is_some()) || below_recovery_point;
                if at_rest {
                    let end = next_base.unwrap_or(recovery_point);
                    let outcome = seg.reindex_keeping_damage(gaps, end)?;
                    if let Some(why) = outcome.stop_reason {
                        tracing::error!(
                            "{} is damaged at byte {} ({why}): nothing is cut; the log stays offline until it is \
                             repaired (docs/storage.md, \"Damaged data\")",
                            seg.log_path().display(),
                            outcome.valid_bytes
                        );
                        damaged.get_or_insert(base);
                    }
                } else if base < recovery_point {
                    // the segment holds the recovery point: damage before it is at rest (every
                    // byte there was synced and acknowledged), only a tear after it is cut
                    let last = next_base.is_none();
                    let r =
                        seg.recover_keeping_synced(gaps, recovery_point, last, next_base.unwrap_or(recovery_point))?;
                    report.truncated_bytes += r.outcome.truncated_bytes;
                    seg.sync()?;
                    if let Some((at, offset)) = r.damage {
                        tracing::error!(
                            "{} is damaged at byte {at} (offset {offset}, below the recovery point {recovery_point}: {}): \
                             nothing synced is cut; the log stays offline until it is repaired (docs/storage.md, \
                             \"Damaged data\")",
                            seg.log_path().display(),
                            r.outcome.stop_reason.as_deref().unwrap_or("")
                        );
                        damaged.get_or_insert(base);
                    }
                    if let Some(g) = r.gap {
                        tracing::error!(
                            "{}: offsets {}..{} below the recovery point are missing from byte {} on (the file was \
                             cut or zeroed after they were synced)",
                            seg.log_path().display(),
                            g.next,
                            g.to,
                            g.position
                        );
                        tail_gap = Some((base, g));
                    }
                    if r.cut {
                        tracing::warn!(
                            "recovered {}: cut {} bytes of a torn tail past the recovery point {recovery_point}",
                            seg.log_path().display(),
                            r.outcome.truncated_bytes
                        );
                        report.stop_reason = r.outcome.stop_reason;
                        truncated_at = Some(i);
                    }
                } else {
                    let outcome = if gaps { seg.recover_allowing_gaps()? } else { seg.recover()? };
                    report.truncated_bytes += outcome.truncated_bytes;
                    seg.sync()?;
                    if outcome.stop_reason.is_some() {
                        tracing::warn!(
                            "recovered {}: kept {} bytes, cut {} ({})",
                            seg.log_path().display(),
                            outcome.valid_bytes,
                            outcome.truncated_bytes,
                            outcome.stop_reason.as_deref().unwrap_or("")
                        );
                        report.stop_reason = outcome.stop_reason;
                        truncated_at = Some(i);
                    }
                }
            }
            if let Some(nb) = next_base {
                // a rolled segment's batches end exactly where the next one starts (unless the
                // cleaner removed its last records): one that ends before lost its end — cut or
                // zeroed after it was synced. Its missing offsets are held as damage (never
                // skipped by a read) and filled from a replica's copies (`Log::repair`).
                let gaps = base < cleaner.gaps_below;
                if truncated_at.is_none() && !gaps && seg.next_offset() < nb {
                    tracing::error!(
                        "{}: offsets {}..{nb} are missing from byte {} on (the file lost its end after it was \
                         synced); the log stays offline until it is repaired (docs/storage.md, \"Damaged data\")",
                        seg.log_path().display(),
                        seg.next_offset(),
                        seg.size()
                    );
                    seg.hold_missing_end(nb);
                    damaged.get_or_insert(base);
                }
                if truncated_at.is_none() && seg.next_offset() > nb {
                    return Err(StorageError::Corrupt {
                        path: seg.log_path().to_path_buf(),
                        position: seg.size(),
                        reason: format!(
                            "segment ends at offset {} past the next segment's base {nb}",
                            seg.next_offset()
                        ),
                    });
                }
            }
            segments.insert(base, seg);
        }
        // Seal every segment but the newest (their indexes may be untrimmed after a scan).
        let newest = *segments.keys().next_back().unwrap_or(&0);
        for (base, seg) in segments.iter_mut() {
            if *base == newest {
                seg.unseal()?;
            } else if !clean {
                seg.seal(true)?;
            }
        }
        // Remove index/side files that have no log file any more.
        for name in snapshots_and_orphans {
            for ext in ["index", "timeindex", "txnindex"] {
                if let Some(b) = parse_base(&name, ext) {
                    if !segments.contains_key(&b) {
                        let _ = std::fs::remove_file(dir.join(&name));
                    }
                }
            }
        }
        let active = segments.get(&newest).ok_or_else(|| StorageError::InvalidConfig("no segment".into()))?;
        let leo = active.next_offset();
        let active_file = Arc::new(active.file().try_clone().at(active.log_path())?);
        let flusher =
            Arc::new(Flusher::new(active_file, active.log_path().to_path_buf(), leo, config.page_cache_tail_bytes));
        let first_base = *segments.keys().next().unwrap_or(&0);
        log_start = log_start.clamp(first_base, leo);
        let log = Log {
            dir: dir.to_path_buf(),
            config,
            segments,
            log_start_offset: log_start,
            high_watermark: leo,
            flusher,
            recovery: report,
            offline: AtomicBool::new(false),
            damaged: std::sync::atomic::AtomicI64::new(damaged.unwrap_or(NOT_DAMAGED)),
            tail_gap,
            cleaner,
            scratch_metas: Vec::with_capacity(8),
            retention_floor: i64::MAX,
            epoch_ceiling: None,
        };
        log.delete_snapshots_after(leo)?;
        log.write_checkpoint()?;
        Ok(log)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn config(&self) -> &LogConfig {
        &self.config
    }
    /// The highest partition leader epoch a stored batch may carry, checked wherever batches
    /// are (reads, the scrubber, the search for damage): for a log whose epochs are Raft terms,
    /// the highest term its replica has voted in. A batch above it, or below 0, is damaged (a
    /// flipped bit: the field is outside the CRC; decision 0050). Never lowered.
    pub fn set_epoch_ceiling(&mut self, ceiling: i32) {
        if self.epoch_ceiling.is_some_and(|c| c >= ceiling) {
            return;
        }
        self.epoch_ceiling = Some(ceiling);
        for seg in self.segments.values_mut() {
            seg.set_epoch_ceiling(Some(ceiling));
        }
    }
    pub fn epoch_ceiling(&self) -> Option<i32> {
        self.epoch_ceiling
    }
    /// Change settings that apply from now on (retention, roll size, flush policy, limits).
    pub fn set_config(&mut self, config: LogConfig) -> Result<()> {
        config.validate()?;
        if config.leader_epoch != self.config.leader_epoch {
            // what every stored batch is checked against (decision 0043), segments included
            for seg in self.segments.values_mut() {
                seg.set_leader_epoch(config.leader_epoch);
            }
        }
        self.flusher.tail_bytes.store(config.page_cache_tail_bytes, Ordering::Relaxed);
        self.config = config;
        Ok(())
    }
    /// Keep at most `bytes` of the log's end in the page cache from the next fsync on, whatever
    /// its config says, until set again (-1: as its config says). A follower replica's log is
    /// read by no consumer, so its broker keeps only the tail (decision 0054).
    pub fn set_role_tail(&self, bytes: i64) {
        self.flusher.role_tail.store(bytes.max(-1), Ordering::Relaxed);
    }
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.recovery
    }
    pub fn flusher(&self) -> Arc<Flusher> {
        self.flusher.clone()
    }
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }
    pub fn log_end_offset(&self) -> i64 {
        self.active().next_offset()
    }
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }
    /// The high-watermark hook: the broker moves it (after durability, or replication later);
    /// retention never deletes at or above it. Clamped to [log start, LEO]; never decreases.
    pub fn set_high_watermark(&mut self, hw: i64) {
        let hw = hw.clamp(self.log_start_offset, self.log_end_offset());
        self.high_watermark = self.high_watermark.max(hw);
    }
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }
    pub fn size_bytes(&self) -> u64 {
        self.segments.values().map(|s| s.size()).sum()
    }
    /// Each segment's base offset and size in bytes, oldest first.
    pub fn segment_sizes(&self) -> Vec<(i64, u64)> {
        self.segments.iter().map(|(b, s)| (*b, s.size())).collect()
    }
    pub fn segment_bases(&self) -> Vec<i64> {
        self.segments.keys().copied().collect()
    }

    fn active(&self) -> &Segment {
        // Invariant: a log always has at least one segment.
        self.segments.values().next_back().expect("log has an active segment")
    }
    fn active_mut(&mut self) -> &mut Segment {
        self.segments.values_mut().next_back().expect("log has an active segment")
    }

    /// Whether a failed write or a corrupt read took this log offline.
    pub fn is_offline(&self) -> bool {
        self.offline.load(Ordering::Acquire) || self.flusher.failed.load(Ordering::Acquire) || self.is_damaged()
    }

    /// Whether a read found damaged data (and nothing else took the log offline): what
    /// [`Log::repair`] can undo.
    pub fn is_damaged(&self) -> bool {
        self.damaged.load(Ordering::Acquire) != NOT_DAMAGED
    }

    /// After a read or scrub of segment `segment` failed with `e`: damaged data marks the log
    /// damaged (the first segment found is the one repaired first).
    fn note_damage(&self, e: &StorageError, segment: i64) {
        if matches!(e, StorageError::Corrupt { .. }) {
            let _ = self.damaged.compare_exchange(NOT_DAMAGED, segment, Ordering::AcqRel, Ordering::Acquire);
        }
    }

    /// Scrub: check the CRCs of segment `segment`'s whole batches from byte `position`, about
    /// `max_bytes` of them. `Ok(Some(next))`: where to go on; `Ok(None)`: the segment is done
    /// (or gone). A damaged batch takes the log offline as a read that met it would
    /// (`Corrupt`, then damaged: [`Log::find_damage`]). An offline log is not scrubbed.
    pub fn scrub(&self, segment: i64, position: u64, max_bytes: usize) -> Result<Option<u64>> {
        self.check_online()?;
        let Some(seg) = self.segments.get(&segment) else { return Ok(None) };
        if position >= seg.size() {
            return Ok(None);
        }
        let gaps = segment < self.cleaner.gaps_below;
        let next = seg.check_from(position, max_bytes, gaps).inspect_err(|e| self.note_damage(e, segment))?;
        Ok(Some(next))
    }

    /// The first damaged batch of the segment a read found damage in: where it is and the
    /// offset it must start at. `None` when no read found damage, or when it is gone (its
    /// segment deleted by retention): then the log is online again unless a write failed.
    pub fn find_damage(&self) -> Result<Option<Damage>> {
        let base = self.damaged.load(Ordering::Acquire);
        if base == NOT_DAMAGED {
            return Ok(None);
        }
        let found = match self.segments.get(&base) {
            Some(seg) => {
                // damage kept in place comes first; the missing tail after it last
                let gap = self.tail_gap.filter(|(b, _)| *b == base).map(|(_, g)| g);
                let (position, base_offset) = match seg.first_damage(base < self.cleaner.gaps_below)? {
                    Some((at, offset)) if gap.is_none_or(|g| at < g.position) => (at, offset),
                    _ => match gap {
                        Some(g) => (g.position, g.next),
                        None => return self.not_damaged(),
                    },
                };
                Some(Damage { segment: base, path: seg.log_path().to_path_buf(), position, base_offset })
            }
            None => None,
        };
        if found.is_none() {
            return self.not_damaged();
        }
        Ok(found)
    }

    /// Replace the damaged batch `d` with `copy`, another replica's copy of it (its first
    /// batch; replicas store the same bytes). The copy must pass its CRC, start at or after
    /// the offset the damaged batch must start at, and fit exactly: the next stored batch
    /// starts right after it (or the segment ends there, before the segment's next offset).
    /// Written in place and fdatasynced (offsets, positions and indexes are unchanged).
    /// `Ok(true)`: the segment holds no other damage and the log is online again (unless a
    /// write failed); `Ok(false)`: another damaged batch follows (call `find_damage` again).
    pub fn repair(&mut self, d: &Damage, copy: &[u8]) -> Result<bool> {
        let refuse = |why: String| Err(StorageError::Unrepairable { path: d.path.clone(), position: d.position, why });
        if let Some((base, g)) = self.tail_gap {
            if base == d.segment && g.position == d.position && g.next == d.base_offset {
                return self.fill_gap(d, g, copy);
            }
        }
        let Some(seg) = self.segments.get(&d.segment) else { return refuse("its segment is gone".into()) };
        if seg.first_damage(d.segment < self.cleaner.gaps_below)? != Some((d.position, d.base_offset)) {
            return refuse("the damage is no longer where it was found".into());
        }
        let b = match batch::BatchView::parse(copy) {
            Ok((b, _)) => b,
            Err(e) => return refuse(format!("the copy is not a valid batch: {e}")),
        };
        if let Some(why) = seg.wrong_epoch(&b) {
            return refuse(format!("the copy {why}"));
        }
        let size = b.size();
        if b.base_offset() < d.base_offset {
            return refuse(format!("the copy starts at offset {}, before {}", b.base_offset(), d.base_offset));
        }
        let end = d.position + size as u64;
        if end > seg.size()
            && self.tail_gap.is_none()
            && d.base_offset < seg.next_offset()
            && seg.next_valid_batch(d.position + 1, d.base_offset.max(1) - 1).is_none()
        {
            // nothing valid follows the damage to the file's end, which comes before the
            // segment's offsets do (its end was cut or zeroed): the copies are written where
            // the missing batches belong, one after another, and the file ends after the last
            let g = TailGap { position: d.position, next: d.base_offset, to: seg.next_offset() };
            return self.fill_gap(d, g, copy);
        }
        if end > seg.size() {
            return refuse(format!("the copy ({size} bytes) runs past the segment's end"));
        }
        if end < seg.size() {
            // the next batch starts right after the copy — or, when damage runs on past the
            // copy's end (a zeroed page over several batches), the next valid batch is at or
            // after it and starts past the copy's offsets; the bytes between stay damaged
            let fits = match seg.base_offset_at(end) {
                Some(next) if next > b.last_offset() => true,
                _ => seg
                    .next_valid_batch(d.position + 1, d.base_offset.max(1) - 1)
                    .map_or(b.last_offset() < seg.next_offset(), |(at, next)| end <= at && next > b.last_offset()),
            };
            if !fits {
                return refuse(format!(
                    "the copy (offsets {}..={}, {size} bytes) does not fit: the next batch here starts at {:?}",
                    b.base_offset(),
                    b.last_offset(),
                    seg.base_offset_at(end)
                ));
            }
        } else if b.last_offset() >= seg.next_offset() {
            return refuse(format!("the copy ends at offset {}, past the segment's end", b.last_offset()));
        }
        seg.overwrite(d.position, &copy[..size])?;
        // indexes rebuilt (a segment found damaged at open has them only up to the damage); the
        // same scan says whether more damage follows
        let gaps = d.segment < self.cleaner.gaps_below;
        let active = self.segments.keys().next_back() == Some(&d.segment);
        let gap = self.tail_gap.filter(|(b, _)| *b == d.segment).map(|(_, g)| g);
        if let Some(seg) = self.segments.get_mut(&d.segment) {
            let end = seg.next_offset();
            let stopped = seg.reindex_keeping_damage(gaps, end)?.stop_reason.is_some();
            if let Some(g) = gap {
                // the missing tail is still to be filled
                seg.hold_tail_gap(&g);
                return Ok(false);
            }
            if stopped {
                return Ok(false);
            }
            if !active {
                seg.seal(true)?;
            }
        }
        self.damaged.store(NOT_DAMAGED, Ordering::Release);
        Ok(!self.is_offline())
    }

    /// No damage is known any more: online again unless a write failed.
    fn not_damaged(&self) -> Result<Option<Damage>> {
        self.damaged.store(NOT_DAMAGED, Ordering::Release);
        Ok(None)
    }

    /// [`Log::repair`] of the missing tail `g`: `copy` is the next missing batch (it must start
    /// exactly at `g.next` and end before `g.to`), written where it belongs and fdatasynced.
    /// Once the last is written the file ends there (whatever the cut or zeroing left after it
    /// is removed) and the segment is indexed again.
    fn fill_gap(&mut self, d: &Damage, mut g: TailGap, copy: &[u8]) -> Result<bool> {
        let refuse = |why: String| Err(StorageError::Unrepairable { path: d.path.clone(), position: d.position, why });
        let b = match batch::BatchView::parse(copy) {
            Ok((b, _)) => b,
            Err(e) => return refuse(format!("the copy is not a valid batch: {e}")),
        };
        if b.base_offset() != g.next || b.last_offset() >= g.to {
            return refuse(format!(
                "the copy holds offsets {}..={}; the missing batch starts at {} and ends before {}",
                b.base_offset(),
                b.last_offset(),
                g.next,
                g.to
            ));
        }
        let size = b.size();
        let Some(seg) = self.segments.get_mut(&d.segment) else { return refuse("its segment is gone".into()) };
        if let Some(why) = seg.wrong_epoch(&b) {
            return refuse(format!("the copy {why}"));
        }
        seg.write_synced(g.position, &copy[..size])?;
        g.position += size as u64;
        g.next = b.last_offset() + 1;
        if g.next < g.to {
            // (the segment now ends after the copy: `first_damage` names the next missing one)
            seg.hold_tail_gap(&g);
            self.tail_gap = Some((d.segment, g));
            return Ok(false);
        }
        seg.cut_file(g.position)?;
        let gaps = d.segment < self.cleaner.gaps_below;
        let scan = seg.reindex_keeping_damage(gaps, g.to)?;
        self.tail_gap = None;
        if scan.stop_reason.is_some() {
            return Ok(false);
        }
        if seg.next_offset() != g.to {
            return refuse(format!("the filled segment ends at offset {}, not {}", seg.next_offset(), g.to));
        }
        self.damaged.store(NOT_DAMAGED, Ordering::Release);
        Ok(!self.is_offline())
    }

    pub(crate) fn check_online(&self) -> Result<()> {
        if self.is_offline() {
            return Err(StorageError::Offline(self.dir.clone()));
        }
        Ok(())
    }

    /// Refuse only what a failed write or fsync took offline, not known damage: for the work a
    /// Raft log kept in this log must go on with while a damaged batch waits for its repair
    /// (appends at the end, truncations, reads of entries, each batch's CRC checked).
    fn check_writable(&self) -> Result<()> {
        if self.offline.load(Ordering::Acquire) || self.flusher.failed.load(Ordering::Acquire) {
            return Err(StorageError::Offline(self.dir.clone()));
        }
        Ok(())
    }

    /// Validate `batches` (one or more v2 batches back to back), assign offsets (rewriting the
    /// base offsets — and, if given, the partition leader epoch — in place), and write them.
    /// Durability is *not* awaited: call `flusher().sync_to(info.last_offset + 1)`.
    pub fn append(&mut self, batches: &mut [u8], now_ms: i64, leader_epoch: Option<i32>) -> Result<AppendInfo> {
        self.check_online()?;
        self.append_checked(batches, now_ms, leader_epoch)
    }

    /// [`Log::append`] to a log whose known damage (a batch at rest failing its CRC, found by a
    /// read or the scrubber) waits for its repair: a Raft log kept in this log (decision 0045)
    /// takes its next entries meanwhile, as a separate Raft log would. Refused only when a
    /// write or fsync failed. (A repair writes in place; the end is not where the damage is.)
    pub fn append_past_damage(
        &mut self,
        batches: &mut [u8],
        now_ms: i64,
        leader_epoch: Option<i32>,
    ) -> Result<AppendInfo> {
        self.check_writable()?;
        self.append_checked(batches, now_ms, leader_epoch)
    }

    fn append_checked(&mut self, batches: &mut [u8], now_ms: i64, leader_epoch: Option<i32>) -> Result<AppendInfo> {
        let plan = self.plan(batches, now_ms)?;
        // the log's own epoch wins: every batch it stores must carry it (decision 0043)
        stamp(batches, &plan.metas, self.config.leader_epoch.or(leader_epoch));
        self.commit(batches, plan)
    }

    /// [`Log::append_past_damage`] of shared bytes: written as they are when every batch in
    /// them already carries the base offset and epoch this append gives it (a replica's copy
    /// of what its leader stored: decision 0062), so a batch shared with a received frame is not
    /// copied; otherwise copied (no copy if `batches` is their only holder), stamped and
    /// written. `batches` ends as what was stored.
    pub fn append_shared(&mut self, batches: &mut Bytes, now_ms: i64, leader_epoch: Option<i32>) -> Result<AppendInfo> {
        self.check_writable()?;
        let plan = self.plan(batches, now_ms)?;
        let leader_epoch = self.config.leader_epoch.or(leader_epoch);
        let stamped = plan.metas.iter().all(|m| {
            BatchView::parse_unchecked_crc(&batches[m.position..]).is_ok_and(|v| {
                v.base_offset() == m.base_offset && leader_epoch.is_none_or(|e| v.partition_leader_epoch() == e)
            })
        });
        if stamped {
            return self.commit(batches, plan);
        }
        let mut owned = Vec::from(std::mem::take(batches));
        stamp(&mut owned, &plan.metas, leader_epoch);
        let info = self.commit(&owned, plan);
        *batches = Bytes::from(owned);
        info
    }

    /// Where each batch of `batches` goes (their CRCs and sizes checked) and whether the active
    /// segment rolls first; nothing written.
    fn plan(&mut self, batches: &[u8], now_ms: i64) -> Result<Plan> {
        if batches.is_empty() {
            return Err(StorageError::InvalidBatch {
                position: 0,
                source: batch::BatchError::Truncated { needed: batch::BATCH_HEADER_BYTES, available: 0 },
            });
        }
        let mut metas = std::mem::take(&mut self.scratch_metas);
        metas.clear();
        let mut pos = 0;
        let mut next = self.log_end_offset();
        let first = next;
        let (mut max_ts, mut offset_of_max) = (-1i64, first);
        while pos < batches.len() {
            let (view, size) = BatchView::parse(&batches[pos..])
                .map_err(|source| StorageError::InvalidBatch { position: pos, source })?;
            if size > self.config.max_message_bytes {
                return Err(StorageError::BatchTooLarge { size, max: self.config.max_message_bytes });
            }
            if view.records_count() < 1 {
                return Err(StorageError::InvalidBatch {
                    position: pos,
                    source: batch::BatchError::InvalidRecordCount(view.records_count()),
                });
            }
            let last = next + i64::from(view.last_offset_delta());
            if view.max_timestamp() > max_ts {
                max_ts = view.max_timestamp();
                offset_of_max = next;
            }
            metas.push(BatchMeta {
                position: pos,
                size,
                base_offset: next,
                last_offset: last,
                max_timestamp: view.max_timestamp(),
            });
            next = last + 1;
            pos += size;
        }
        let bytes = batches.len() as u64;
        // `segment.ms` is measured in record time, as Kafka does (the incoming batch's timestamp
        // against the segment's first), falling back to the clock for batches without one.
        let roll_ts = if max_ts >= 0 { max_ts } else { now_ms };
        let need_roll = {
            let a = self.active();
            !a.is_empty()
                && (a.size() + bytes > self.config.segment_bytes
                    || a.first_batch_timestamp()
                        .is_some_and(|t| t >= 0 && roll_ts.saturating_sub(t) >= self.config.roll_ms())
                    || a.index.is_full()
                    || a.time_index.is_full()
                    || next - a.base_offset() > i64::from(u32::MAX))
        };
        Ok(Plan { metas, first, next, max_ts, offset_of_max, need_roll })
    }

    /// Write planned (and stamped) `batches` at the log end, rolling first if planned.
    fn commit(&mut self, batches: &[u8], plan: Plan) -> Result<AppendInfo> {
        let Plan { metas, first, next, max_ts, offset_of_max, need_roll } = plan;
        if need_roll {
            self.roll()?;
        }
        if let Err(e) = self.active_mut().append(batches, &metas) {
            self.offline.store(true, Ordering::Release);
            return Err(e);
        }
        let size = self.active().size();
        self.flusher.publish(next, size);
        let info = AppendInfo {
            first_offset: first,
            last_offset: next - 1,
            max_timestamp: max_ts,
            offset_of_max_timestamp: offset_of_max,
            batches: metas.len(),
            bytes: batches.len(),
            rolled: need_roll,
        };
        self.scratch_metas = metas;
        Ok(info)
    }

    /// Append and, under the `Sync` policy, wait until it is durable (convenience for tests
    /// and tools; the broker awaits durability outside its lock instead).
    pub fn append_durable(&mut self, batches: &mut [u8], now_ms: i64) -> Result<AppendInfo> {
        let info = self.append(batches, now_ms, None)?;
        if self.config.flush == FlushPolicy::Sync {
            self.flusher.sync_to(info.last_offset + 1)?;
        }
        Ok(info)
    }

    /// Seal the active segment and start a new one at the LEO.
    pub fn roll(&mut self) -> Result<()> {
        self.check_online()?;
        if self.active().is_empty() {
            return Ok(());
        }
        let leo = self.log_end_offset();
        if let Err(e) = self.active_mut().seal(false) {
            self.offline.store(true, Ordering::Release);
            return Err(e);
        }
        let seg = Segment::open(
            &self.dir,
            leo,
            self.config.index_interval_bytes,
            self.config.segment_index_bytes,
            self.config.leader_epoch,
        )?;
        if !seg.is_empty() {
            return Err(StorageError::Corrupt {
                path: seg.log_path().to_path_buf(),
                position: 0,
                reason: "a new segment's file already holds data".into(),
            });
        }
        let file = Arc::new(seg.file().try_clone().at(seg.log_path())?);
        self.flusher.switch_file(file, seg.log_path().to_path_buf());
        let mut seg = seg;
        seg.set_epoch_ceiling(self.epoch_ceiling);
        self.segments.insert(leo, seg);
        // The recovery-point checkpoint is written by the periodic flush, not here: a roll is on
        // the append path, and a stale checkpoint only means a longer scan after a crash.
        Ok(())
    }

    /// Batches from the one containing `offset`, up to `max_bytes` (at least one whole batch
    /// if `min_one`), not past `max_offset` (exclusive; the LEO if `None`). Zero-copy; empty
    /// when there is nothing to return. Errors with `OffsetOutOfRange` outside
    /// [log start, LEO].
    ///
    /// Every batch returned has had its CRC checked: a batch that fails takes the log offline
    /// (`Corrupt`, then `Offline` for every later call) rather than serve damaged bytes.
    pub fn read(&self, offset: i64, max_bytes: usize, max_offset: Option<i64>, min_one: bool) -> Result<Bytes> {
        self.check_online()?;
        let leo = self.log_end_offset();
        if offset < self.log_start_offset || offset > leo {
            return Err(StorageError::OffsetOutOfRange { offset, log_start: self.log_start_offset, log_end: leo });
        }
        let upper = max_offset.unwrap_or(leo).min(leo);
        if offset >= upper {
            return Ok(Bytes::new());
        }
        let first = self.segments.range(..=offset).next_back().map(|(b, _)| *b).unwrap_or(self.log_start_offset);
        self.read_segments(first, offset, max_bytes, upper, min_one)
    }

    /// The batches from `offset` (below `upper`), in the segments from the one based at `from`
    /// on: the first that holds any. A damaged batch met marks the log damaged.
    fn read_segments(&self, from: i64, offset: i64, max_bytes: usize, upper: i64, min_one: bool) -> Result<Bytes> {
        for (base, seg) in self.segments.range(from..) {
            if *base >= upper {
                break;
            }
            match seg.read(offset, max_bytes, upper, min_one, *base < self.cleaner.gaps_below) {
                Ok(Some(b)) => return Ok(b),
                Ok(None) => {}
                Err(e) => {
                    self.note_damage(&e, *base);
                    return Err(e);
                }
            }
        }
        Ok(Bytes::new())
    }

    /// The first offset whose record timestamp is ≥ `timestamp`, with that timestamp
    /// (ListOffsets by time). `None` if every record is older.
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<(i64, i64)>> {
        for seg in self.segments.values() {
            if seg.max_timestamp() < timestamp {
                continue;
            }
            if let Some(bytes) = seg.find_batch_by_timestamp(timestamp)? {
                let (view, _) = BatchView::parse(&bytes).map_err(|e| StorageError::Corrupt {
                    path: seg.log_path().to_path_buf(),
                    position: 0,
                    reason: e.to_string(),
                })?;
                if view.is_log_append_time() {
                    // every record of the batch carries the batch's append time
                    return Ok(Some((view.base_offset().max(self.log_start_offset), view.max_timestamp())));
                }
                let records = view.records().map_err(|e| StorageError::Corrupt {
                    path: seg.log_path().to_path_buf(),
                    position: 0,
                    reason: e.to_string(),
                })?;
                let found = records.iter().find(|r| r.timestamp >= timestamp && r.offset >= self.log_start_offset);
                if let Some(r) = found {
                    return Ok(Some((r.offset, r.timestamp)));
                }
                // only records below the log start qualified: fall back to the batch
                if view.max_timestamp() >= timestamp && view.last_offset() >= self.log_start_offset {
                    return Ok(Some((view.base_offset().max(self.log_start_offset), view.max_timestamp())));
                }
            }
        }
        Ok(None)
    }

    /// The largest timestamp in the log and the offset of the first *record* carrying it
    /// (ListOffsets MAX_TIMESTAMP, as Kafka 3.8+ answers it: the record, not its batch); the
    /// earliest such record when several share it. The segments know the batch; the batch is
    /// read and its records searched (decompressed if need be).
    pub fn max_timestamp(&self) -> Result<Option<(i64, i64)>> {
        let mut best: Option<&Segment> = None;
        for seg in self.segments.values() {
            // strictly greater: the earliest segment wins a tie
            if seg.max_timestamp() >= 0 && best.is_none_or(|b| seg.max_timestamp() > b.max_timestamp()) {
                best = Some(seg);
            }
        }
        let Some(seg) = best else { return Ok(None) };
        let (ts, batch_offset) = (seg.max_timestamp(), seg.offset_of_max_timestamp().max(self.log_start_offset));
        let bytes = match self.read(batch_offset, 1, None, true) {
            Ok(b) => b,
            // trimmed by retention or DeleteRecords meanwhile: the batch's own offset
            Err(StorageError::OffsetOutOfRange { .. }) => return Ok(Some((ts, batch_offset))),
            Err(e) => return Err(e),
        };
        let corrupt = |e: batch::BatchError| StorageError::Corrupt {
            path: seg.log_path().to_path_buf(),
            position: 0,
            reason: e.to_string(),
        };
        let (view, _) = BatchView::parse(&bytes).map_err(corrupt)?;
        if view.is_log_append_time() || view.is_control() {
            // every record of a log-append-time batch carries the batch's timestamp
            return Ok(Some((ts, view.base_offset().max(batch_offset))));
        }
        let offset = view
            .records()
            .map_err(corrupt)?
            .iter()
            .find(|r| r.timestamp == ts && r.offset >= batch_offset)
            .map_or(batch_offset, |r| r.offset);
        Ok(Some((ts, offset)))
    }

    /// Sync everything written so far and record it as the recovery point.
    pub fn flush(&mut self) -> Result<()> {
        let leo = self.log_end_offset();
        self.flusher.sync_to(leo)?;
        self.write_checkpoint()
    }

    /// Persist the recovery point (the durable end) and the log start offset.
    pub fn write_checkpoint(&self) -> Result<()> {
        let rp = self.flusher.durable_end().min(self.log_end_offset());
        sidefile::write_atomic(&self.dir.join(CHECKPOINT_FILE), &checkpoint_encode(rp, self.log_start_offset))
    }

    fn delete_oldest_segment(&mut self) -> Result<()> {
        if let Some((_, seg)) = self.segments.pop_first() {
            seg.delete_files()?;
        }
        let first = *self.segments.keys().next().unwrap_or(&0);
        self.log_start_offset = self.log_start_offset.max(first);
        Ok(())
    }

    /// Delete whole segments by `retention.ms`, `retention.bytes` and the log start offset.
    /// Never the active segment, never a segment holding offsets at or above the high
    /// watermark. Returns the number of segments deleted.
    pub fn enforce_retention(&mut self, now_ms: i64) -> Result<usize> {
        self.check_online()?;
        let mut deleted = 0;
        loop {
            let bases: Vec<i64> = self.segments.keys().take(2).copied().collect();
            let [first, next_base] = bases[..] else { break };
            if next_base > self.high_watermark.min(self.retention_floor) {
                break;
            }
            let Some(seg) = self.segments.get(&first) else {
                break;
            };
            let below_start = next_base <= self.log_start_offset;
            let by_time = self.config.cleanup_delete
                && self.config.retention_ms >= 0
                && now_ms.saturating_sub(seg.max_timestamp()) > self.config.retention_ms;
            let by_size = self.config.cleanup_delete
                && self.config.retention_bytes >= 0
                && self.size_bytes().saturating_sub(seg.size()) >= self.config.retention_bytes as u64;
            if !(below_start || by_time || by_size) {
                break;
            }
            self.delete_oldest_segment()?;
            deleted += 1;
        }
        if deleted > 0 {
            self.write_checkpoint()?;
            sidefile::sync_dir(&self.dir)?;
        }
        Ok(deleted)
    }

    /// DeleteRecords: move the log start offset up to `offset` (≤ high watermark); segments
    /// wholly below it are deleted. Returns the new log start offset.
    pub fn delete_records(&mut self, offset: i64) -> Result<i64> {
        self.check_online()?;
        if offset > self.high_watermark || offset < 0 {
            return Err(StorageError::OffsetOutOfRange {
                offset,
                log_start: self.log_start_offset,
                log_end: self.high_watermark,
            });
        }
        if offset > self.log_start_offset {
            self.log_start_offset = offset;
            self.write_checkpoint()?;
            self.enforce_retention(i64::MIN)?;
        }
        Ok(self.log_start_offset)
    }

    /// Remove every batch whose base offset is at or above `offset`, durably: Raft's truncation
    /// of entries a new leader does not have (decision 0045). `offset` must be in
    /// [log start, LEO] and must not split a batch (`InvalidConfig`, nothing cut); at the LEO it
    /// does nothing. What follows:
    /// - the recovery point is lowered to the cut *before* any file is cut (decision 0038: a
    ///   recovery point above what a segment holds would make the next open call a torn tail
    ///   written after the cut rot); a crash before the cut keeps the old tail, whole, as if
    ///   the truncation had not begun;
    /// - segments wholly at or past the cut are deleted, the one holding it is cut and synced
    ///   and becomes the active segment;
    /// - the flusher's written and durable ends are lowered, and whoever waits on an offset past
    ///   the cut gets `Truncated`;
    /// - the aborted-transaction index loses entries at or past the cut, the high watermark is
    ///   lowered to it, and producer-state snapshots taken past it are deleted (the caller
    ///   rebuilds its producer state from the newest one left: [`Log::latest_producer_snapshot`]).
    ///
    /// Returns the bytes removed.
    /// Known damage does not stop it (a truncation may cut the damaged batch away: the next
    /// [`Log::find_damage`] then finds none); a failed write does.
    pub fn truncate_to(&mut self, offset: i64) -> Result<u64> {
        self.check_writable()?;
        let leo = self.log_end_offset();
        if offset < self.log_start_offset || offset > leo {
            return Err(StorageError::OffsetOutOfRange { offset, log_start: self.log_start_offset, log_end: leo });
        }
        if offset == leo {
            return Ok(0);
        }
        let keep = self.segments.range(..=offset).next_back().map_or(self.log_start_offset, |(b, _)| *b);
        // refuse a split batch before anything changes
        {
            let seg = self.segments.get(&keep).ok_or_else(|| StorageError::InvalidConfig("no segment".into()))?;
            seg.cut_position(offset)?;
        }
        // lowered first: a checkpoint written now (and from now on) has its recovery point at or
        // below the cut
        let file = {
            let seg = self.segments.get(&keep).ok_or_else(|| StorageError::InvalidConfig("no segment".into()))?;
            Arc::new(seg.file().try_clone().at(seg.log_path())?)
        };
        let removed_paths: Vec<PathBuf> =
            self.segments.range(keep + 1..).map(|(_, s)| s.log_path().to_path_buf()).collect();
        let keep_path = self.segments.get(&keep).map(|s| s.log_path().to_path_buf()).unwrap_or_default();
        self.flusher.truncated(offset, file, keep_path, &removed_paths);
        self.high_watermark = self.high_watermark.min(offset);
        if let Err(e) = self.write_checkpoint() {
            self.offline.store(true, Ordering::Release);
            return Err(e);
        }
        let mut removed = 0u64;
        let result = (|| {
            // newest first: a crash part way leaves a log whose segments still follow each other
            while let Some(entry) = self.segments.last_entry() {
                if *entry.key() <= keep {
                    break;
                }
                let seg = entry.remove();
                removed += seg.size();
                seg.delete_files()?;
            }
            let seg = self.segments.get_mut(&keep).ok_or_else(|| StorageError::InvalidConfig("no segment".into()))?;
            removed += seg.truncate_to(offset)?;
            seg.unseal()?;
            sidefile::sync_dir(&self.dir)
        })();
        if let Err(e) = result {
            // the files are between two states: nothing more is written here
            self.offline.store(true, Ordering::Release);
            return Err(e);
        }
        self.delete_snapshots_after(self.log_end_offset())?;
        Ok(removed)
    }

    /// Keep every segment that holds offsets at or above `offset` whatever retention and
    /// DeleteRecords say (the log start still moves; the segments stay until the floor does).
    pub fn set_retention_floor(&mut self, offset: i64) {
        self.retention_floor = offset;
    }
    /// The retention floor (`i64::MAX`: none); the log cleaner stops there too.
    pub fn retention_floor(&self) -> i64 {
        self.retention_floor
    }

    /// [`Log::read`] of batches still held, below the log start too (DeleteRecords moved it,
    /// retention kept the segment): what a Raft log kept in this log reads its entries with.
    /// Known damage elsewhere in the log does not stop it (every batch read is CRC-checked; a
    /// damaged one is `Corrupt`, and marks the log damaged as [`Log::read`] does); a failed
    /// write does.
    pub fn read_retained(&self, offset: i64, max_bytes: usize) -> Result<Bytes> {
        self.check_writable()?;
        let (first, leo) = (*self.segments.keys().next().unwrap_or(&0), self.log_end_offset());
        if offset < first || offset > leo {
            return Err(StorageError::OffsetOutOfRange { offset, log_start: first, log_end: leo });
        }
        let from = self.segments.range(..=offset).next_back().map_or(first, |(b, _)| *b);
        self.read_segments(from, offset, max_bytes, leo, true)
    }

    /// Record an aborted transaction (its ABORT marker must already be appended). The entry is
    /// fsynced before this returns: read_committed consumers depend on it, and aborts are rare
    /// enough that one fsync each costs little. (Should a crash still lose it — the marker
    /// durable, the entry not yet written — the broker's replay of the marker restores it.)
    pub fn append_aborted_txn(&mut self, txn: AbortedTxn) -> Result<()> {
        let active = self.active_mut();
        if txn.last_offset < active.base_offset() || txn.last_offset >= active.next_offset() {
            return Err(StorageError::InvalidConfig(format!(
                "aborted txn marker offset {} is not in the active segment",
                txn.last_offset
            )));
        }
        active.txn_index.append(txn)?;
        active.txn_index.sync()
    }

    /// Aborted transactions that overlap `[start, upper)`.
    pub fn collect_aborted_txns(&self, start: i64, upper: i64) -> Vec<AbortedTxn> {
        let first = self.segments.range(..=start).next_back().map(|(b, _)| *b).unwrap_or(i64::MIN);
        self.segments
            .range(first..)
            .flat_map(|(_, s)| s.txn_index.entries().iter())
            .filter(|t| t.last_offset >= start && t.first_offset < upper)
            .copied()
            .collect()
    }

    /// Write a producer-state snapshot taken at `offset` (the state after every batch below it).
    pub fn write_producer_snapshot(&self, offset: i64, payload: &[u8]) -> Result<()> {
        write_producer_snapshot(&self.dir, offset, payload)
    }

    /// Offsets of the snapshot files present, ascending.
    pub fn producer_snapshot_offsets(&self) -> Result<Vec<i64>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.dir).at(&self.dir)? {
            let name = entry.at(&self.dir)?.file_name().to_string_lossy().into_owned();
            if let Some(o) = parse_base(&name, "snapshot") {
                out.push(o);
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    /// The newest readable snapshot `(offset, payload)`. Corrupt snapshots, and snapshots of a
    /// version this build does not write, are deleted.
    pub fn latest_producer_snapshot(&self) -> Result<Option<(i64, Vec<u8>)>> {
        for off in self.producer_snapshot_offsets()?.into_iter().rev() {
            let path = self.dir.join(file_name(off, "snapshot"));
            match sidefile::read_framed(&path, SNAPSHOT_MAGIC) {
                Ok(Some((SNAPSHOT_VERSION, payload))) => return Ok(Some((off, payload))),
                Ok(None) => {}
                // the frame's version is outside its CRC: a version this build never writes
                // is damage (or a format it cannot read), and the log can rebuild the state
                Ok(Some((v, _))) => {
                    tracing::warn!("deleting producer snapshot {} of unknown version {v}", path.display());
                    let _ = std::fs::remove_file(&path);
                }
                Err(e) => {
                    tracing::warn!("deleting unreadable producer snapshot: {e}");
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        Ok(None)
    }

    /// Delete snapshots taken at offsets below `offset` (keeping newer ones).
    pub fn delete_snapshots_before(&self, offset: i64) -> Result<()> {
        for off in self.producer_snapshot_offsets()? {
            if off < offset {
                let p = self.dir.join(file_name(off, "snapshot"));
                std::fs::remove_file(&p).at(&p)?;
            }
        }
        Ok(())
    }

    fn delete_snapshots_after(&self, offset: i64) -> Result<()> {
        for off in self.producer_snapshot_offsets()? {
            if off > offset {
                let p = self.dir.join(file_name(off, "snapshot"));
                std::fs::remove_file(&p).at(&p)?;
            }
        }
        Ok(())
    }

    /// Clean shutdown: sync, trim indexes, write the checkpoint and the clean-shutdown marker,
    /// so the next open skips the scan.
    pub fn close(mut self) -> Result<()> {
        self.check_online()?;
        self.active_mut().seal(true)?;
        self.flusher.sync_to(self.log_end_offset())?;
        self.write_checkpoint()?;
        let marker = self.dir.join(CLEAN_SHUTDOWN_FILE);
        std::fs::write(&marker, b"").at(&marker)?;
        sidefile::sync_dir(&self.dir)
    }
}
