//! A partition's snapshot is its files (decision record 0025): [`Log::link_snapshot`] hard-links
//! the segments, their aborted-transaction indexes and the newest producer-state snapshot into a
//! directory, with each file's length at that moment (the active segment keeps growing through
//! the original link; a snapshot covers only the bytes it recorded). Linking costs no copy, and
//! the links keep a segment that retention deletes meanwhile readable until the snapshot goes.
//!
//! A replica that receives a snapshot stages its files in a directory and swaps it in for the
//! partition's with [`swap_in`]: the staged directory is renamed beside the partition's
//! (`<dir>.installing`), the partition's is renamed away (`<dir>.replaced`), the staged one takes
//! its name. A crash anywhere in between is finished by [`Log::open`] through
//! [`recover_swap`]: with no partition directory the installing one (complete: it was fsynced
//! before the first rename) takes its place; leftovers of either kind are removed.

use crate::error::{IoContext, Result};
use crate::log::{Log, CHECKPOINT_FILE};
use crate::segment::file_name;
use crate::sidefile;
use std::path::{Path, PathBuf};

/// What a linked snapshot holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkedSnapshot {
    pub log_start: i64,
    pub log_end: i64,
    /// File name and the bytes of it that belong to the snapshot, oldest segment first.
    pub files: Vec<(String, u64)>,
}

impl Log {
    /// Hard-link this log's files into `into` (created; must be on the same file system) and
    /// say which bytes of each belong to the snapshot. Data written but not yet fsynced is in
    /// the snapshot too (the links share the files): the caller flushes first when the snapshot
    /// must be durable.
    pub fn link_snapshot(&self, into: &Path) -> Result<LinkedSnapshot> {
        self.link_snapshot_upto(into, None)
    }

    /// [`Log::link_snapshot`] of the log below `upto` only (the log end if `None`): a log that
    /// holds entries not yet committed past it (one log per replica, decision 0045) is sent
    /// without them. The segment holding `upto` is linked whole but recorded (and so sent) only
    /// up to its batch there.
    pub fn link_snapshot_upto(&self, into: &Path, upto: Option<i64>) -> Result<LinkedSnapshot> {
        let end = upto.unwrap_or_else(|| self.log_end_offset()).clamp(self.log_start_offset(), self.log_end_offset());
        // damaged data (or a missing tail) is never handed to another replica
        self.check_online()?;
        std::fs::create_dir_all(into).at(into)?;
        let mut files = Vec::new();
        let mut link = |name: String, len: u64| -> Result<()> {
            let from = self.dir().join(&name);
            let to = into.join(&name);
            let _ = std::fs::remove_file(&to);
            std::fs::hard_link(&from, &to).at(&to)?;
            files.push((name, len));
            Ok(())
        };
        for (base, size) in self.segment_sizes() {
            if base >= end && base > self.log_start_offset() {
                break;
            }
            let size = match self.segments.get(&base) {
                Some(seg) if seg.next_offset() > end => seg.cut_position(end)?.0,
                _ => size,
            };
            link(file_name(base, "log"), size)?;
            let txn = file_name(base, "txnindex");
            if let Ok(m) = std::fs::metadata(self.dir().join(&txn)) {
                if m.len() > 0 {
                    link(txn, m.len())?;
                }
            }
        }
        // the cleaner's record says where offsets may have gaps (the receiver's scan needs it)
        let cleaner = crate::cleaner::CLEANER_FILE;
        if let Ok(m) = std::fs::metadata(self.dir().join(cleaner)) {
            link(cleaner.to_string(), m.len())?;
        }
        if let Some(off) = self.producer_snapshot_offsets()?.into_iter().rev().find(|o| *o <= end) {
            let name = file_name(off, "snapshot");
            let len = std::fs::metadata(self.dir().join(&name)).at(&self.dir().join(&name))?.len();
            link(name, len)?;
        }
        sidefile::sync_dir(into)?;
        Ok(LinkedSnapshot { log_start: self.log_start_offset(), log_end: end, files })
    }
}

/// Make a directory of received snapshot files ready to be a partition's: its checkpoint
/// records `log_start` and a recovery point of 0 (the first open scans every segment and
/// rebuilds the indexes, which a snapshot does not carry); every file and the directory are
/// fsynced.
pub fn finish_staging(staged: &Path, log_start: i64) -> Result<()> {
    sidefile::write_atomic(&staged.join(CHECKPOINT_FILE), &crate::log::checkpoint_encode(0, log_start))?;
    for e in std::fs::read_dir(staged).at(staged)? {
        let p = e.at(staged)?.path();
        std::fs::File::open(&p).and_then(|f| f.sync_all()).at(&p)?;
    }
    sidefile::sync_dir(staged)
}

fn sibling(dir: &Path, suffix: &str) -> PathBuf {
    let mut name = dir.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(suffix);
    dir.with_file_name(name)
}

/// Replace partition directory `dir` with `staged` (see the module's comment); the old files
/// are removed last. Open files of the old directory stay readable until closed.
pub fn swap_in(dir: &Path, staged: &Path) -> Result<()> {
    let installing = sibling(dir, ".installing");
    let replaced = sibling(dir, ".replaced");
    let parent = dir.parent().unwrap_or(Path::new("."));
    let _ = std::fs::remove_dir_all(&installing);
    let _ = std::fs::remove_dir_all(&replaced);
    std::fs::rename(staged, &installing).at(&installing)?;
    sidefile::sync_dir(parent)?;
    if dir.exists() {
        std::fs::rename(dir, &replaced).at(dir)?;
    }
    std::fs::rename(&installing, dir).at(dir)?;
    sidefile::sync_dir(parent)?;
    let _ = std::fs::remove_dir_all(&replaced);
    Ok(())
}

/// Finish or undo a [`swap_in`] a crash interrupted (called by [`Log::open`]).
pub fn recover_swap(dir: &Path) -> Result<()> {
    let installing = sibling(dir, ".installing");
    let replaced = sibling(dir, ".replaced");
    if !dir.exists() {
        if installing.exists() {
            std::fs::rename(&installing, dir).at(dir)?;
        } else if replaced.exists() {
            std::fs::rename(&replaced, dir).at(dir)?;
        }
    }
    let _ = std::fs::remove_dir_all(&installing);
    let _ = std::fs::remove_dir_all(&replaced);
    Ok(())
}
