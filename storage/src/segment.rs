//! One segment: a `.log` file of v2 record batches plus its offset index, time index and
//! aborted-transaction index, all named by the segment's base offset (20 digits, zero-padded).
//!
//! Invariants (asserted where cheap):
//! - batches are stored back to back, offsets strictly increasing, each batch's base offset
//!   ≥ the segment's base offset and < the next segment's base offset;
//! - `size` is the byte length of whole, valid batches (the file has no bytes past it once
//!   recovery or an append completes);
//! - positions fit in u32 (`segment.bytes` ≤ i32::MAX is enforced by the config).

use crate::error::{IoContext, Result, StorageError};
use crate::index::{OffsetIndex, TimeIndex};
use crate::mmap;
use crate::txnindex::TxnIndex;
use bytes::Bytes;
use sluice_protocol::batch::{iter_batches, BatchView, BATCH_HEADER_BYTES};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Kafka's file naming: the base offset as 20 zero-padded digits.
pub fn file_name(base_offset: i64, ext: &str) -> String {
    format!("{base_offset:020}.{ext}")
}

/// What the log learned about one batch while validating it, passed to the segment's append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMeta {
    /// Byte position of the batch within the appended buffer.
    pub position: usize,
    pub size: usize,
    pub base_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
}

/// Offsets a segment must hold but whose bytes are gone: the file was cut (or zeroed to its
/// end) below the recovery point ([`Segment::recover_keeping_synced`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TailGap {
    /// Where the first missing batch belongs in the file, and its offset.
    pub position: u64,
    pub next: i64,
    /// The offset the segment ends at once the gap is filled (the recovery point).
    pub to: i64,
}

/// The max timestamp of the first batch in `map` that has one (>= 0), or of its first batch
/// when none has; `None` when it holds no batch. Reads batch headers only.
fn first_timestamp(map: &[u8]) -> Option<i64> {
    let mut first = None;
    let mut pos = 0usize;
    while let Some(rest) = map.get(pos..).filter(|r| !r.is_empty()) {
        let Ok(b) = BatchView::parse_unchecked_crc(rest) else { break };
        if b.max_timestamp() >= 0 {
            return Some(b.max_timestamp());
        }
        first.get_or_insert(b.max_timestamp());
        pos += b.size();
    }
    first
}

/// The first valid batch at or after byte `from` of `map` that starts past offset `after`
/// (its CRC checked): where the scan resumes after damage it cannot step over. Byte by byte:
/// the damaged batch's own length may be what rotted.
fn resync(map: &[u8], from: usize, after: i64) -> Option<(usize, i64)> {
    (from..map.len().saturating_sub(BATCH_HEADER_BYTES - 1)).find_map(|at| match BatchView::parse(&map[at..]) {
        Ok((b, _)) if b.base_offset() > after => Some((at, b.base_offset())),
        _ => None,
    })
}

/// What [`Segment::recover_keeping_synced`] did.
#[derive(Debug, Clone)]
pub struct SyncedRecovery {
    /// The first scan's (its `truncated_bytes`: what a cut of a torn tail removed).
    pub outcome: ScanOutcome,
    /// The first damaged batch kept below the recovery point: its byte position and offset.
    pub damage: Option<(u64, i64)>,
    /// Missing offsets at the segment's end (only when allowed).
    pub gap: Option<TailGap>,
    /// A torn tail past the recovery point was cut.
    pub cut: bool,
}

/// What a full scan of a segment found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanOutcome {
    /// Bytes of valid batches from the start of the file.
    pub valid_bytes: u64,
    /// Bytes cut off after the last valid batch (0 if the file was intact).
    pub truncated_bytes: u64,
    /// Why the scan stopped early, if it did.
    pub stop_reason: Option<String>,
}

pub struct Segment {
    base_offset: i64,
    log_path: PathBuf,
    file: File,
    size: u64,
    next_offset: i64,
    max_timestamp: i64,
    offset_of_max_timestamp: i64,
    /// Max timestamp of the first batch that has one (of the first batch when none has): what
    /// `segment.ms` rolling is measured from. A Raft control batch carries no timestamp
    /// (decision 0045); a segment it starts must still roll in record time.
    first_batch_timestamp: Option<i64>,
    bytes_since_index: u64,
    index_interval_bytes: u64,
    index_max_bytes: usize,
    /// The partition leader epoch every batch here carries (`LogConfig::leader_epoch`): a batch
    /// with another is damaged (the field is outside the CRC; decision 0043). `None`: unchecked.
    leader_epoch: Option<i32>,
    /// The highest partition leader epoch a batch here may carry (`Log::set_epoch_ceiling`): a
    /// log whose epochs are Raft terms holds none above the highest term its replica voted in,
    /// and none below 0. `None`: unchecked.
    epoch_ceiling: Option<i32>,
    pub(crate) index: OffsetIndex,
    pub(crate) time_index: TimeIndex,
    pub(crate) txn_index: TxnIndex,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("base_offset", &self.base_offset)
            .field("size", &self.size)
            .field("next_offset", &self.next_offset)
            .finish()
    }
}

impl Segment {
    /// Open the segment at `base_offset` in `dir`, creating empty files if absent. The content
    /// is not yet trusted: call [`Segment::recover`] or [`Segment::load_clean`]. `leader_epoch`:
    /// the partition leader epoch every batch in it must carry (`LogConfig::leader_epoch`).
    pub fn open(
        dir: &Path,
        base_offset: i64,
        index_interval_bytes: u64,
        index_max_bytes: usize,
        leader_epoch: Option<i32>,
    ) -> Result<Segment> {
        let log_path = dir.join(file_name(base_offset, "log"));
        let file =
            OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&log_path).at(&log_path)?;
        let size = file.metadata().at(&log_path)?.len();
        let index = OffsetIndex::open(&dir.join(file_name(base_offset, "index")), index_max_bytes)?;
        let time_index = TimeIndex::open(&dir.join(file_name(base_offset, "timeindex")), index_max_bytes)?;
        let txn_index = TxnIndex::open(&dir.join(file_name(base_offset, "txnindex")))?;
        Ok(Segment {
            base_offset,
            log_path,
            file,
            size,
            next_offset: base_offset,
            max_timestamp: -1,
            offset_of_max_timestamp: base_offset,
            first_batch_timestamp: None,
            bytes_since_index: 0,
            index_interval_bytes,
            index_max_bytes,
            leader_epoch,
            epoch_ceiling: None,
            index,
            time_index,
            txn_index,
        })
    }

    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }
    /// The epoch every batch here must carry from now on (`None`: unchecked).
    pub fn set_leader_epoch(&mut self, epoch: Option<i32>) {
        self.leader_epoch = epoch;
    }
    /// The highest epoch a batch here may carry from now on (`None`: unchecked).
    pub fn set_epoch_ceiling(&mut self, ceiling: Option<i32>) {
        self.epoch_ceiling = ceiling;
    }
    pub fn size(&self) -> u64 {
        self.size
    }
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }
    pub fn max_timestamp(&self) -> i64 {
        self.max_timestamp
    }
    pub fn offset_of_max_timestamp(&self) -> i64 {
        self.offset_of_max_timestamp
    }
    pub fn first_batch_timestamp(&self) -> Option<i64> {
        self.first_batch_timestamp
    }
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }
    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    fn relative(&self, offset: i64) -> u32 {
        debug_assert!(offset >= self.base_offset);
        (offset - self.base_offset).clamp(0, i64::from(u32::MAX)) as u32
    }

    /// A read-only map of bytes `[from, size)`, alive as long as the returned `Bytes`.
    fn view_from(&self, from: u64) -> Result<Bytes> {
        let from = from.min(self.size);
        mmap::map_read_range(&self.file, from, (self.size - from) as usize).at(&self.log_path)
    }

    fn note_batch(&mut self, position: u64, base: i64, last: i64, max_ts: i64, size: u64) {
        assert!(base >= self.next_offset, "offsets must grow: {base} < {}", self.next_offset);
        if self.first_batch_timestamp.is_none_or(|t| t < 0 && max_ts >= 0) {
            self.first_batch_timestamp = Some(max_ts);
        }
        if self.bytes_since_index >= self.index_interval_bytes {
            self.index.append(self.relative(base), position as u32);
            self.bytes_since_index = 0;
        }
        if max_ts > self.max_timestamp {
            self.max_timestamp = max_ts;
            self.offset_of_max_timestamp = base;
            if self.time_index.last().is_none_or(|(t, _)| max_ts > t) {
                self.time_index.append(max_ts, self.relative(base));
            }
        }
        self.bytes_since_index += size;
        self.next_offset = last + 1;
    }

    /// Write already-validated batches (offsets assigned) at the end of the file. On error the
    /// segment is in an unknown state and the caller must take the log offline.
    pub fn append(&mut self, bytes: &[u8], metas: &[BatchMeta]) -> Result<()> {
        self.file.write_all_at(bytes, self.size).at(&self.log_path)?;
        let start = self.size;
        for m in metas {
            self.note_batch(start + m.position as u64, m.base_offset, m.last_offset, m.max_timestamp, m.size as u64);
        }
        self.size += bytes.len() as u64;
        Ok(())
    }

    /// Validate every batch from the start (length, magic, CRC, contiguous offsets), rebuild
    /// the indexes, and truncate the file after the last valid batch.
    pub fn recover(&mut self) -> Result<ScanOutcome> {
        self.recover_with(false)
    }

    /// [`Segment::recover`] for a segment the log cleaner wrote: offsets must grow but may skip
    /// (the removed records' offsets stay unused).
    pub fn recover_allowing_gaps(&mut self) -> Result<ScanOutcome> {
        self.recover_with(true)
    }

    /// Rebuild the indexes of a segment whose bytes were all written and synced before (closed
    /// cleanly, or below the recovery point) but whose indexes did not check out: like
    /// [`Segment::recover`], but damage found on the way is *not* cut off. Everything in the
    /// file was acknowledged, so cutting it would lose acknowledged records (decision 0036).
    /// The segment keeps its bytes and ends at `end` (the next segment's base, or the recovery
    /// point); the outcome's `stop_reason` says where the damage is.
    pub fn reindex_keeping_damage(&mut self, allow_gaps: bool, end: i64) -> Result<ScanOutcome> {
        let file_len = self.file.metadata().at(&self.log_path)?.len();
        let outcome = self.scan(allow_gaps, false)?;
        if outcome.stop_reason.is_some() {
            self.size = file_len;
            self.next_offset = self.next_offset.max(end);
        }
        Ok(ScanOutcome { truncated_bytes: 0, ..outcome })
    }

    fn recover_with(&mut self, allow_gaps: bool) -> Result<ScanOutcome> {
        self.scan(allow_gaps, true)
    }

    /// Recover a segment that holds the recovery point (`synced_to`): bytes before it were
    /// written and synced, so damage there is rot at rest, not a torn write, and every batch
    /// there was acknowledged. Like [`Segment::recover`], a batch that fails at or past
    /// `synced_to` is a torn tail and cut with everything after it; one that fails below it is
    /// kept (decision 0036), and the scan resumes at the next valid batch after it.
    ///
    /// When no valid batch follows the damage (the file was cut or zeroed below `synced_to`)
    /// and `tail_gap` allows it, the segment ends at `synced_to` with the offsets from the
    /// damage on missing: the returned [`TailGap`] says where they belong (a replica fills it
    /// with its peers' copies, [`crate::Log::repair`]). Otherwise the bytes are kept and the
    /// segment ends at `end`.
    pub fn recover_keeping_synced(
        &mut self,
        allow_gaps: bool,
        synced_to: i64,
        tail_gap: bool,
        end: i64,
    ) -> Result<SyncedRecovery> {
        let file_len = self.file.metadata().at(&self.log_path)?.len();
        let first = self.scan(allow_gaps, false)?;
        let mut out = SyncedRecovery { outcome: first.clone(), damage: None, gap: None, cut: false };
        if first.stop_reason.is_none() {
            if tail_gap && self.next_offset < synced_to {
                // the file ends cleanly, but before batches it held synced: cut at a boundary
                out.damage = Some((self.size, self.next_offset));
                out.gap = Some(TailGap { position: self.size, next: self.next_offset, to: synced_to });
                self.next_offset = synced_to;
            } else {
                // an aborted-transaction entry is synced before its marker: one whose marker
                // the crash took points past the end
                self.txn_index.truncate_from(self.next_offset)?;
            }
            return Ok(out);
        }
        if self.next_offset >= synced_to {
            out.outcome = self.cut_at(first.valid_bytes, file_len, first.stop_reason)?;
            out.cut = true;
            return Ok(out);
        }
        out.outcome.truncated_bytes = 0;
        out.damage = Some((first.valid_bytes, self.next_offset));
        let map = mmap::map_read(&self.file, file_len as usize).at(&self.log_path)?;
        let mut damaged_at = first.valid_bytes as usize;
        loop {
            let Some((resume, base)) = resync(&map, damaged_at + 1, self.next_offset) else {
                drop(map);
                if tail_gap {
                    out.gap = Some(TailGap { position: damaged_at as u64, next: self.next_offset, to: synced_to });
                    self.size = damaged_at as u64;
                    self.next_offset = synced_to;
                } else {
                    self.size = file_len;
                    self.next_offset = self.next_offset.max(end);
                }
                return Ok(out);
            };
            // the damaged bytes hold offsets [next_offset, base): index the next batch
            self.next_offset = base;
            self.bytes_since_index = self.index_interval_bytes;
            let (pos, stop) = self.scan_run(&map, resume, allow_gaps);
            if stop.is_none() {
                self.size = file_len;
                drop(map);
                self.txn_index.truncate_from(self.next_offset)?;
                return Ok(out);
            }
            if self.next_offset >= synced_to {
                drop(map);
                out.outcome.truncated_bytes = self.cut_at(pos as u64, file_len, stop)?.truncated_bytes;
                out.cut = true;
                return Ok(out);
            }
            damaged_at = pos;
        }
    }

    /// Cut the file after its valid bytes (a torn tail), as [`Segment::recover`] does.
    fn cut_at(&mut self, valid: u64, file_len: u64, stop_reason: Option<String>) -> Result<ScanOutcome> {
        if valid < file_len {
            self.file.set_len(valid).at(&self.log_path)?;
            self.file.sync_all().at(&self.log_path)?;
        }
        self.size = valid;
        self.txn_index.truncate_from(self.next_offset)?;
        Ok(ScanOutcome { valid_bytes: valid, truncated_bytes: file_len - valid, stop_reason })
    }

    fn scan(&mut self, allow_gaps: bool, truncate: bool) -> Result<ScanOutcome> {
        self.index.clear();
        self.time_index.clear();
        self.next_offset = self.base_offset;
        self.max_timestamp = -1;
        self.offset_of_max_timestamp = self.base_offset;
        self.first_batch_timestamp = None;
        self.bytes_since_index = 0;
        let file_len = self.file.metadata().at(&self.log_path)?.len();
        let map = mmap::map_read(&self.file, file_len as usize).at(&self.log_path)?;
        let (pos, stop_reason) = self.scan_run(&map, 0, allow_gaps);
        drop(map);
        let valid = pos as u64;
        if valid < file_len && truncate {
            self.file.set_len(valid).at(&self.log_path)?;
            self.file.sync_all().at(&self.log_path)?;
        }
        self.size = valid;
        if truncate {
            self.txn_index.truncate_from(self.next_offset)?;
        }
        Ok(ScanOutcome { valid_bytes: valid, truncated_bytes: file_len - valid, stop_reason })
    }

    /// Validate and index batches of `map` from byte `pos` on, the first expected at
    /// `next_offset`: where the valid batches end, and why there if not at the map's end.
    fn scan_run(&mut self, map: &[u8], mut pos: usize, allow_gaps: bool) -> (usize, Option<String>) {
        let mut stop_reason = None;
        while pos < map.len() {
            match BatchView::parse(&map[pos..]) {
                Ok((b, size)) => {
                    // Offsets are contiguous until the cleaner has been here, so a batch must
                    // start exactly where the previous one ended; this also catches a flipped
                    // base offset, which the CRC does not cover. In a cleaned segment they
                    // must only grow.
                    let fits = if allow_gaps {
                        b.base_offset() >= self.next_offset
                            && (b.last_offset() - self.base_offset) <= i64::from(u32::MAX)
                    } else {
                        b.base_offset() == self.next_offset
                    };
                    if !fits {
                        stop_reason = Some(format!(
                            "batch at byte {pos} has base offset {}, expected {}",
                            b.base_offset(),
                            self.next_offset
                        ));
                        break;
                    }
                    if let Some(why) = self.wrong_epoch(&b) {
                        stop_reason = Some(format!("batch at byte {pos} {why}"));
                        break;
                    }
                    self.note_batch(pos as u64, b.base_offset(), b.last_offset(), b.max_timestamp(), size as u64);
                    pos += size;
                }
                Err(e) => {
                    stop_reason = Some(format!("at byte {pos}: {e}"));
                    break;
                }
            }
        }
        (pos, stop_reason)
    }

    /// Load a segment that was closed cleanly: trust the file, check the indexes, and find the
    /// next offset by hopping over batch headers after the last index entry. Returns false if
    /// the indexes are inconsistent (the caller then runs [`Segment::recover`]).
    pub fn load_clean(&mut self) -> Result<bool> {
        if !self.index.validate(self.size) {
            return Ok(false);
        }
        let map = self.view_from(0)?;
        // Every index entry must point at the start of the batch it names (an index written
        // back only partly before a crash can look monotonic yet be wrong).
        for i in 0..self.index.len() {
            let (rel, pos) = self.index.get(i);
            match BatchView::parse_unchecked_crc(&map[pos as usize..]) {
                Ok(b) if b.base_offset() == self.base_offset + i64::from(rel) => {}
                _ => return Ok(false),
            }
        }
        let (rel, mut pos) = self.index.last().unwrap_or((0, 0));
        let mut next = self.base_offset + i64::from(rel);
        // Hop from the last indexed batch to the end. Each hop reads a header only.
        while (pos as usize) < map.len() {
            match BatchView::parse_unchecked_crc(&map[pos as usize..]) {
                Ok(b) => {
                    next = b.last_offset() + 1;
                    pos += b.size() as u32;
                }
                Err(_) => return Ok(false),
            }
        }
        if u64::from(pos) != self.size {
            return Ok(false);
        }
        let last_rel = (next - 1 - self.base_offset).max(0) as u32;
        if !self.time_index.validate(last_rel) {
            return Ok(false);
        }
        self.next_offset = if self.size == 0 { self.base_offset } else { next };
        if let Some((ts, rel)) = self.time_index.last() {
            self.max_timestamp = ts;
            self.offset_of_max_timestamp = self.base_offset + i64::from(rel);
        }
        self.first_batch_timestamp = first_timestamp(&map);
        self.bytes_since_index = self.index_interval_bytes; // index the next append
        self.txn_index.truncate_from(self.next_offset)?;
        Ok(true)
    }

    /// Batches starting with the one that contains `offset`, up to `max_bytes` (at least one
    /// whole batch when `min_one`), stopping before any batch whose base offset is ≥
    /// `max_offset`. Returns a zero-copy slice of the mapped file, or `None` if nothing
    /// qualifies.
    ///
    /// `gaps`: the cleaner has been here, so offsets may skip (otherwise each batch starts
    /// exactly one past the previous one). A batch whose base offset does not fit is damaged
    /// like one that fails its CRC: the base offset lies outside the CRC (decision 0040).
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        max_offset: i64,
        min_one: bool,
        gaps: bool,
    ) -> Result<Option<Bytes>> {
        if self.size == 0 || offset >= self.next_offset {
            return Ok(None);
        }
        // an index entry names the base offset of the batch at its position
        let (start, mut expected) = match self.index.floor_entry(self.relative(offset.max(self.base_offset))) {
            Some((rel, at)) => (u64::from(at), self.base_offset + i64::from(rel)),
            None => (0, self.base_offset),
        };
        let map = self.view_from(start)?;
        let mut pos = 0usize;
        let corrupt = |pos: usize, e: String| StorageError::Corrupt {
            path: self.log_path.clone(),
            position: start + pos as u64,
            reason: e,
        };
        // find the first batch whose last offset ≥ offset
        loop {
            if pos >= map.len() {
                // the batches end before the segment's offsets do: those offsets are missing,
                // never skipped (a read would go on to the next segment's)
                if !gaps && expected < self.next_offset {
                    return Err(corrupt(pos, self.missing_end(expected)));
                }
                return Ok(None);
            }
            let b = BatchView::parse_unchecked_crc(&map[pos..]).map_err(|e| corrupt(pos, e.to_string()))?;
            if let Some(why) = self.misplaced(&b, expected, gaps) {
                return Err(corrupt(pos, why));
            }
            expected = b.last_offset() + 1;
            if b.last_offset() >= offset {
                expected = b.base_offset();
                break;
            }
            pos += b.size();
        }
        let begin = pos;
        while pos < map.len() {
            // never serve a damaged batch: bytes at rest can rot below the recovery point, where
            // nothing re-checks them (decision 0036). The good batches before a damaged one are
            // served; the error comes when the damaged one is the first asked for.
            let b = match BatchView::parse_unchecked_crc(&map[pos..]) {
                Ok(b) => b,
                Err(_) if pos > begin => break,
                Err(e) => return Err(corrupt(pos, e.to_string())),
            };
            if let Some(why) = self.misplaced(&b, expected, gaps) {
                if pos > begin {
                    break;
                }
                return Err(corrupt(pos, why));
            }
            expected = b.last_offset() + 1;
            if b.base_offset() >= max_offset {
                break;
            }
            let end = pos + b.size();
            if end - begin > max_bytes && !(pos == begin && min_one) {
                break;
            }
            let computed = b.compute_crc();
            if b.crc() != computed {
                if pos > begin {
                    break;
                }
                return Err(corrupt(
                    pos,
                    format!(
                        "batch at offset {} fails its CRC (stored {:#010x}, computed {computed:#010x})",
                        b.base_offset(),
                        b.crc()
                    ),
                ));
            }
            pos = end;
        }
        if pos == begin {
            return Ok(None);
        }
        Ok(Some(map.slice(begin..pos)))
    }

    /// Why batch `b` cannot be where it is, when the batch before it ended at `expected - 1`:
    /// its base offset must be `expected` (or past it where the cleaner left gaps), and its
    /// last offset inside the segment. The base offset is outside the CRC, so this is how a
    /// flipped one is found.
    fn misplaced(&self, b: &BatchView<'_>, expected: i64, gaps: bool) -> Option<String> {
        let fits = if gaps { b.base_offset() >= expected } else { b.base_offset() == expected };
        if fits && b.last_offset() < self.next_offset {
            return self.wrong_epoch(b);
        }
        Some(format!(
            "batch has base offset {} (last {}), expected {}{} in a segment ending before {}",
            b.base_offset(),
            b.last_offset(),
            if gaps { "at least " } else { "" },
            expected,
            self.next_offset
        ))
    }

    /// Why batch `b`'s partition leader epoch cannot be what it is: every batch of this log
    /// carries the same one (`LogConfig::leader_epoch`), and the field is outside the CRC, so
    /// this is how a flipped one is found (decision 0043).
    pub(crate) fn wrong_epoch(&self, b: &BatchView<'_>) -> Option<String> {
        let epoch = b.partition_leader_epoch();
        if let Some(max) = self.epoch_ceiling.filter(|max| epoch < 0 || epoch > *max) {
            // a Raft term this replica never voted in: a flipped bit (decision 0050)
            return Some(format!(
                "at offset {} has partition leader epoch {epoch}, outside the terms this replica has seen (0 to {max})",
                b.base_offset()
            ));
        }
        let want = self.leader_epoch?;
        (epoch != want)
            .then(|| format!("at offset {} has partition leader epoch {epoch}, expected {want}", b.base_offset()))
    }

    /// The first batch that fails its CRC, whose header does not parse, or whose base offset
    /// does not fit (see [`Segment::read`]'s `gaps`): its byte position and the offset it must
    /// start at (one past the batch before it). `None` if every batch passes. Reads the whole
    /// segment.
    pub fn first_damage(&self, gaps: bool) -> Result<Option<(u64, i64)>> {
        let map = self.view_from(0)?;
        let (mut end, mut expected) = (0usize, self.base_offset);
        for item in iter_batches(&map) {
            match item {
                Ok((at, b)) if self.misplaced(&b, expected, gaps).is_none() => {
                    expected = b.last_offset() + 1;
                    end = at + b.size();
                }
                _ => return Ok(Some((end as u64, expected))),
            }
        }
        // the batches end before the segment's offsets do: the missing end is the damage
        if !gaps && expected < self.next_offset {
            return Ok(Some((end as u64, expected)));
        }
        Ok(None)
    }

    /// Why the offsets from `expected` to the segment's end are missing.
    fn missing_end(&self, expected: i64) -> String {
        format!(
            "the batches end at offset {expected}, before the segment's end {}: the file lost its end",
            self.next_offset
        )
    }

    /// Check the CRC of the whole batches from byte `position` on, up to `max_bytes` (at least
    /// one batch): the position after the last one checked. A batch that fails (or whose
    /// header does not parse) is `Corrupt` at its position.
    pub fn check_from(&self, position: u64, max_bytes: usize, gaps: bool) -> Result<u64> {
        let mut expected = self.expected_at(position);
        let map = self.view_from(position)?;
        let mut end = 0usize;
        let corrupt = |end: usize, reason: String| StorageError::Corrupt {
            path: self.log_path.clone(),
            position: position + end as u64,
            reason,
        };
        for item in iter_batches(&map) {
            if end > 0 && end >= max_bytes {
                break;
            }
            match item {
                Ok((at, b)) => {
                    if let Some(why) = expected.and_then(|e| self.misplaced(&b, e, gaps)) {
                        return Err(corrupt(end, why));
                    }
                    expected = Some(b.last_offset() + 1);
                    end = at + b.size();
                }
                Err(e) => return Err(corrupt(end, e.to_string())),
            }
        }
        if !gaps && position + end as u64 >= self.size {
            if let Some(e) = expected.filter(|e| *e < self.next_offset) {
                return Err(corrupt(end, self.missing_end(e)));
            }
        }
        Ok(position + end as u64)
    }

    /// The offset the batch at byte `position` must start at: found by hopping over batch
    /// headers from the last index entry at or before it. `None` if the hops do not land on
    /// `position` (then the batch there is not checked against its predecessor).
    fn expected_at(&self, position: u64) -> Option<i64> {
        let (at, mut expected) = match self.index.floor_by_position(position) {
            Some((rel, p)) => (u64::from(p), self.base_offset + i64::from(rel)),
            None => (0, self.base_offset),
        };
        if at == position {
            return Some(expected);
        }
        let map = self.view_from(at).ok()?;
        let mut pos = 0usize;
        while at + (pos as u64) < position {
            let b = BatchView::parse_unchecked_crc(map.get(pos..)?).ok()?;
            expected = b.last_offset() + 1;
            pos += b.size();
        }
        (at + pos as u64 == position).then_some(expected)
    }

    /// The base offset stored in the batch header at byte `position`, if one parses there.
    pub fn base_offset_at(&self, position: u64) -> Option<i64> {
        let map = self.view_from(position).ok()?;
        BatchView::parse_unchecked_crc(&map).ok().map(|b| b.base_offset())
    }

    /// The first valid batch (its CRC checked) at or after byte `from` whose base offset is past
    /// `after`: its position and base offset. Steps byte by byte over damaged bytes.
    pub fn next_valid_batch(&self, from: u64, after: i64) -> Option<(u64, i64)> {
        let map = self.view_from(0).ok()?;
        resync(&map, from as usize, after).map(|(at, base)| (at as u64, base))
    }

    /// Write `bytes` at `position`, past the segment's end if so, and fdatasync (a missing
    /// tail filled: [`crate::Log::repair`]; the segment is indexed again once it is whole).
    pub fn write_synced(&self, position: u64, bytes: &[u8]) -> Result<()> {
        self.file.write_all_at(bytes, position).at(&self.log_path)?;
        self.sync()
    }

    /// The header of the batch at the start of `bytes`, which sit at byte `position` of the file
    /// (its CRC not checked): `Corrupt` there if none parses.
    fn header_at<'a>(&self, bytes: &'a [u8], position: u64) -> Result<BatchView<'a>> {
        BatchView::parse_unchecked_crc(bytes).map_err(|e| StorageError::Corrupt {
            path: self.log_path.clone(),
            position,
            reason: e.to_string(),
        })
    }

    /// Where a truncation at `offset` cuts this segment: the byte position of its first batch
    /// whose base offset is at or past `offset`, and the offset the segment then ends at.
    /// `InvalidConfig` when a batch holds `offset` past its base (the cut would split it).
    pub fn cut_position(&self, offset: i64) -> Result<(u64, i64)> {
        if offset >= self.next_offset {
            return Ok((self.size, self.next_offset));
        }
        if offset <= self.base_offset || self.size == 0 {
            return Ok((0, self.base_offset));
        }
        let (start, mut expected) = match self.index.floor_entry(self.relative(offset)) {
            Some((rel, at)) => (u64::from(at), self.base_offset + i64::from(rel)),
            None => (0, self.base_offset),
        };
        let map = self.view_from(start)?;
        let mut pos = 0usize;
        while pos < map.len() {
            let b = self.header_at(&map[pos..], start + pos as u64)?;
            if b.base_offset() >= offset {
                break;
            }
            if b.last_offset() >= offset {
                return Err(StorageError::InvalidConfig(format!(
                    "cannot truncate {} at offset {offset}: the batch {}..={} holds it",
                    self.log_path.display(),
                    b.base_offset(),
                    b.last_offset()
                )));
            }
            expected = b.last_offset() + 1;
            pos += b.size();
        }
        Ok((start + pos as u64, expected))
    }

    /// Remove every batch whose base offset is at or above `offset` (a tail truncation:
    /// Raft's, of entries a new leader does not have), durably: the file is cut and synced
    /// before this returns, and the indexes and the segment's statistics describe what is
    /// left. A batch that holds `offset` past its base cannot be split: `InvalidConfig`, and
    /// nothing is cut. The bytes cut.
    pub fn truncate_to(&mut self, offset: i64) -> Result<u64> {
        let (cut, end) = self.cut_position(offset)?;
        if cut >= self.size {
            return Ok(0);
        }
        let removed = self.size - cut;
        self.file.set_len(cut).at(&self.log_path)?;
        self.file.sync_all().at(&self.log_path)?;
        self.size = cut;
        // the indexes keep only what names batches below the cut
        let keep = (0..self.index.len()).take_while(|&i| u64::from(self.index.get(i).1) < cut).count();
        self.index.truncate_entries(keep);
        let rel = self.relative(end.max(self.base_offset));
        let keep = (0..self.time_index.len()).take_while(|&i| self.time_index.get(i).1 < rel).count();
        self.time_index.truncate_entries(keep);
        self.txn_index.truncate_from(end)?;
        self.next_offset = end;
        match self.time_index.last() {
            Some((ts, r)) => {
                self.max_timestamp = ts;
                self.offset_of_max_timestamp = self.base_offset + i64::from(r);
            }
            None => {
                self.max_timestamp = -1;
                self.offset_of_max_timestamp = self.base_offset;
            }
        }
        // the batch it came from may be gone
        self.first_batch_timestamp = if cut == 0 { None } else { first_timestamp(&self.view_from(0)?) };
        // index the next append
        self.bytes_since_index = self.index_interval_bytes;
        Ok(removed)
    }

    /// End the file at byte `len`, durably.
    pub fn cut_file(&mut self, len: u64) -> Result<()> {
        self.file.set_len(len).at(&self.log_path)?;
        self.file.sync_all().at(&self.log_path)?;
        self.size = self.size.min(len);
        Ok(())
    }

    /// The segment's batches end before `end`, the offset its successor starts at (the file
    /// lost its end): its offsets run to `end`, the missing ones damaged (see `first_damage`).
    pub fn hold_missing_end(&mut self, end: i64) {
        self.next_offset = self.next_offset.max(end);
    }

    /// After a reindex: the segment still ends where its missing tail `g` starts, and its
    /// offsets run to `g.to`.
    pub fn hold_tail_gap(&mut self, g: &TailGap) {
        self.size = g.position;
        self.next_offset = g.to;
    }

    /// Write `bytes` over the file at `position` (inside what it holds) and fdatasync: a
    /// damaged batch replaced by a replica's copy of it.
    pub fn overwrite(&self, position: u64, bytes: &[u8]) -> Result<()> {
        debug_assert!(position + bytes.len() as u64 <= self.size);
        self.file.write_all_at(bytes, position).at(&self.log_path)?;
        self.sync()
    }

    /// The first batch whose max timestamp is ≥ `timestamp`: its view bytes (zero-copy), or
    /// `None` if every batch here is older.
    pub fn find_batch_by_timestamp(&self, timestamp: i64) -> Result<Option<Bytes>> {
        if self.size == 0 || self.max_timestamp < timestamp {
            return Ok(None);
        }
        let start_rel = self.time_index.lookup_before(timestamp);
        let start = u64::from(self.index.lookup(start_rel));
        let map = self.view_from(start)?;
        let mut pos = 0usize;
        while pos < map.len() {
            let b = self.header_at(&map[pos..], start + pos as u64)?;
            if b.max_timestamp() >= timestamp {
                return Ok(Some(map.slice(pos..pos + b.size())));
            }
            pos += b.size();
        }
        Ok(None)
    }

    /// fdatasync the log file (index files are rebuilt after a crash, so they need none).
    pub fn sync(&self) -> Result<()> {
        self.file.sync_data().at(&self.log_path)
    }

    /// The segment stops being active: final time-index entry, trimmed indexes. The log data
    /// itself is synced by the log's `Flusher`, not here, so a roll never stalls appends.
    /// `durable`: also sync the trimmed indexes (clean close, after recovery).
    pub fn seal(&mut self, durable: bool) -> Result<()> {
        if self.max_timestamp >= 0 && self.time_index.last().is_none_or(|(t, _)| self.max_timestamp > t) {
            let rel = self.relative(self.offset_of_max_timestamp);
            self.time_index.append(self.max_timestamp, rel);
        }
        self.index.trim(durable)?;
        self.time_index.trim(durable)?;
        if durable {
            self.txn_index.sync()?;
        }
        Ok(())
    }

    /// Make a sealed segment appendable again (it is the newest on reopen).
    pub fn unseal(&mut self) -> Result<()> {
        self.index.reserve(self.index_max_bytes)?;
        self.time_index.reserve(self.index_max_bytes)?;
        Ok(())
    }

    /// Remove this segment's files.
    pub fn delete_files(self) -> Result<()> {
        let paths = [
            self.log_path.clone(),
            self.index.path().to_path_buf(),
            self.time_index.path().to_path_buf(),
            self.txn_index.path().to_path_buf(),
        ];
        drop(self);
        for p in paths {
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StorageError::Io { path: p, source: e }),
            }
        }
        Ok(())
    }
}
