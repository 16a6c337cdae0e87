//! Sparse indexes beside each segment, memory-mapped:
//! - offset index (`.index`): entries `(relative offset: u32, position: u32)`, 8 bytes, mapping
//!   the base offset of a batch to its byte position in the `.log` file;
//! - time index (`.timeindex`): entries `(timestamp: i64, relative offset: u32)`, 12 bytes: the
//!   largest timestamp seen so far and the base offset of the batch where it was reached.
//!
//! While a segment is active its index files are preallocated to `segment.index.bytes` (sparse)
//! and mapped read-write; when it rolls or closes they are trimmed to the entries in use.
//! Entries are strictly increasing in both fields; `open` checks that, and the caller rebuilds
//! an index that fails the check.

use crate::error::{IoContext, Result};
use crate::mmap;
use memmap2::MmapMut;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

pub const OFFSET_ENTRY_BYTES: usize = 8;
pub const TIME_ENTRY_BYTES: usize = 12;

/// A fixed-width-entry index file. `W` is the entry width in bytes.
pub struct Index<const W: usize> {
    path: PathBuf,
    file: File,
    map: Option<MmapMut>,
    entries: usize,
    capacity: usize,
}

pub type OffsetIndex = Index<OFFSET_ENTRY_BYTES>;
pub type TimeIndex = Index<TIME_ENTRY_BYTES>;

impl<const W: usize> Index<W> {
    /// Open (or create) an index file. Existing content is kept; `entries` is derived from the
    /// file length (rounded down to whole entries). Call `validate` before trusting it.
    pub fn open(path: &Path, max_bytes: usize) -> Result<Self> {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).at(path)?;
        let len = file.metadata().at(path)?.len() as usize;
        let entries = len / W;
        let capacity = (max_bytes / W).max(entries).max(1);
        let mut idx = Index { path: path.to_path_buf(), file, map: None, entries, capacity };
        idx.remap(capacity)?;
        Ok(idx)
    }

    fn remap(&mut self, capacity: usize) -> Result<()> {
        self.map = None;
        self.file.set_len((capacity * W) as u64).at(&self.path)?;
        self.capacity = capacity;
        self.map = Some(mmap::map_write(&self.file, capacity * W).at(&self.path)?);
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn len(&self) -> usize {
        self.entries
    }
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }
    pub fn is_full(&self) -> bool {
        self.entries >= self.capacity
    }

    fn entry(&self, i: usize) -> &[u8] {
        match &self.map {
            Some(m) => &m[i * W..(i + 1) * W],
            None => &[],
        }
    }

    fn push_raw(&mut self, bytes: [u8; W]) {
        if self.is_full() {
            return; // a full index only makes lookups coarser; the log is still correct
        }
        if let Some(m) = &mut self.map {
            m[self.entries * W..(self.entries + 1) * W].copy_from_slice(&bytes);
            self.entries += 1;
        }
    }

    /// Drop every entry.
    pub fn clear(&mut self) {
        self.entries = 0;
    }

    /// Keep only the first `n` entries.
    pub fn truncate_entries(&mut self, n: usize) {
        self.entries = self.entries.min(n);
    }

    /// Write the mapped pages back to the file.
    pub fn flush(&self) -> Result<()> {
        if let Some(m) = &self.map {
            m.flush().at(&self.path)?;
        }
        Ok(())
    }

    /// Flush and shrink the file to the entries in use (at roll and close). The index stays
    /// usable for lookups; appends after a trim grow it again.
    /// With `durable`, the pages and the new length are synced too (clean close); without
    /// (a roll on the append path), the kernel writes them back later and recovery validates
    /// the index against the log before trusting it.
    pub fn trim(&mut self, durable: bool) -> Result<()> {
        if durable {
            self.flush()?;
        }
        let cap = self.entries.max(1);
        self.map = None;
        self.file.set_len((self.entries * W) as u64).at(&self.path)?;
        if self.entries > 0 {
            self.capacity = self.entries;
            self.map = Some(mmap::map_write(&self.file, cap * W).at(&self.path)?);
        } else {
            self.capacity = 0;
        }
        if durable {
            self.file.sync_all().at(&self.path)?;
        }
        Ok(())
    }

    /// Re-grow a trimmed index for appends (a segment that becomes active again on reopen).
    pub fn reserve(&mut self, max_bytes: usize) -> Result<()> {
        let cap = (max_bytes / W).max(self.entries + 1);
        if cap > self.capacity {
            self.remap(cap)?;
        }
        Ok(())
    }

    /// Largest entry index `i` with `key(i) <= target`, by binary search.
    fn floor_by(&self, target: i64, key: impl Fn(&[u8]) -> i64) -> Option<usize> {
        let (mut lo, mut hi) = (0usize, self.entries);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if key(self.entry(mid)) <= target {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo.checked_sub(1)
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn i64_at(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

impl OffsetIndex {
    pub fn append(&mut self, relative_offset: u32, position: u32) {
        let mut e = [0u8; OFFSET_ENTRY_BYTES];
        e[..4].copy_from_slice(&relative_offset.to_be_bytes());
        e[4..].copy_from_slice(&position.to_be_bytes());
        self.push_raw(e);
    }

    pub fn get(&self, i: usize) -> (u32, u32) {
        let e = self.entry(i);
        (u32_at(e, 0), u32_at(e, 4))
    }

    pub fn last(&self) -> Option<(u32, u32)> {
        self.entries.checked_sub(1).map(|i| self.get(i))
    }

    /// Position of the last indexed batch whose relative base offset is ≤ `relative_offset`
    /// (0 if none): where a scan for that offset starts.
    pub fn lookup(&self, relative_offset: u32) -> u32 {
        match self.floor_by(i64::from(relative_offset), |e| i64::from(u32_at(e, 0))) {
            Some(i) => self.get(i).1,
            None => 0,
        }
    }

    /// The last entry whose relative base offset is ≤ `relative_offset`: (relative offset,
    /// position) of the batch it names.
    pub fn floor_entry(&self, relative_offset: u32) -> Option<(u32, u32)> {
        self.floor_by(i64::from(relative_offset), |e| i64::from(u32_at(e, 0))).map(|i| self.get(i))
    }

    /// The last entry whose position is ≤ `position` (positions grow with offsets).
    pub fn floor_by_position(&self, position: u64) -> Option<(u32, u32)> {
        let target = i64::try_from(position).unwrap_or(i64::MAX);
        self.floor_by(target, |e| i64::from(u32_at(e, 4))).map(|i| self.get(i))
    }

    /// Entries strictly increasing and positions inside the log file.
    pub fn validate(&self, log_bytes: u64) -> bool {
        let mut prev: Option<(u32, u32)> = None;
        for i in 0..self.entries {
            let (o, p) = self.get(i);
            if u64::from(p) >= log_bytes.max(1) {
                return false;
            }
            if let Some((po, pp)) = prev {
                if o <= po || p <= pp {
                    return false;
                }
            }
            prev = Some((o, p));
        }
        true
    }
}

impl TimeIndex {
    pub fn append(&mut self, timestamp: i64, relative_offset: u32) {
        let mut e = [0u8; TIME_ENTRY_BYTES];
        e[..8].copy_from_slice(&timestamp.to_be_bytes());
        e[8..].copy_from_slice(&relative_offset.to_be_bytes());
        self.push_raw(e);
    }

    pub fn get(&self, i: usize) -> (i64, u32) {
        let e = self.entry(i);
        (i64_at(e, 0), u32_at(e, 8))
    }

    pub fn last(&self) -> Option<(i64, u32)> {
        self.entries.checked_sub(1).map(|i| self.get(i))
    }

    /// Relative offset of the last entry whose timestamp is < `timestamp` (a safe place to
    /// start scanning for the first batch with max timestamp ≥ `timestamp`), or 0.
    pub fn lookup_before(&self, timestamp: i64) -> u32 {
        match self.floor_by(timestamp.saturating_sub(1), |e| i64_at(e, 0)) {
            Some(i) => self.get(i).1,
            None => 0,
        }
    }

    pub fn validate(&self, max_relative_offset: u32) -> bool {
        let mut prev: Option<(i64, u32)> = None;
        for i in 0..self.entries {
            let (t, o) = self.get(i);
            if o > max_relative_offset {
                return false;
            }
            if let Some((pt, po)) = prev {
                if t <= pt || o < po {
                    return false;
                }
            }
            prev = Some((t, o));
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_index_lookup_trim_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("0.index");
        let mut idx = OffsetIndex::open(&p, 1024).unwrap();
        assert_eq!(idx.lookup(5), 0);
        idx.append(10, 100);
        idx.append(20, 200);
        idx.append(30, 300);
        assert_eq!(idx.lookup(9), 0);
        assert_eq!(idx.lookup(10), 100);
        assert_eq!(idx.lookup(25), 200);
        assert_eq!(idx.lookup(1000), 300);
        idx.trim(true).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 24);
        drop(idx);
        let idx = OffsetIndex::open(&p, 1024).unwrap();
        assert_eq!(idx.len(), 3);
        assert!(idx.validate(301));
        assert!(!idx.validate(300));
        assert_eq!(idx.lookup(25), 200);
    }

    #[test]
    fn time_index() {
        let dir = tempfile::tempdir().unwrap();
        let mut idx = TimeIndex::open(&dir.path().join("0.timeindex"), 1200).unwrap();
        idx.append(1000, 0);
        idx.append(2000, 5);
        idx.append(3000, 9);
        assert_eq!(idx.lookup_before(500), 0);
        assert_eq!(idx.lookup_before(2000), 0);
        assert_eq!(idx.lookup_before(2001), 5);
        assert!(idx.validate(9));
        assert!(!idx.validate(8));
    }
}
