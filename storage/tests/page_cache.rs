//! A log's synced bytes further than `LogConfig::page_cache_tail_bytes` from its end leave the
//! page cache after the fsync that made them durable (decision 0053); with -1 the kernel keeps
//! them, as it does for Kafka. Residency is read with `mincore` over a map of each segment file.
#![allow(unsafe_code, clippy::unwrap_used)]
mod common;

use common::make_batch;
use sluice_storage::{Log, LogConfig};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

const PAGE: usize = 4096;

/// Which pages of the file at `path` the page cache holds.
fn resident(path: &Path) -> Vec<bool> {
    let f = File::open(path).unwrap();
    let len = f.metadata().unwrap().len() as usize;
    if len == 0 {
        return Vec::new();
    }
    let mut v = vec![0u8; len.div_ceil(PAGE)];
    // SAFETY: a read-only shared map of an open file, unmapped before returning; `mincore`
    // writes one byte per page of the map into `v`, which has exactly that many.
    unsafe {
        let p = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, f.as_raw_fd(), 0);
        assert_ne!(p, libc::MAP_FAILED, "mmap {}", path.display());
        assert_eq!(libc::mincore(p, len, v.as_mut_ptr()), 0, "mincore {}", path.display());
        libc::munmap(p, len);
    }
    v.iter().map(|b| b & 1 == 1).collect()
}

/// A log of 6 MiB segments with about 16 MiB appended durably in 64 KiB batches: its segment
/// files, oldest first.
fn filled(dir: &Path, tail: i64) -> Vec<PathBuf> {
    let config =
        LogConfig { segment_bytes: 6 << 20, retention_ms: -1, page_cache_tail_bytes: tail, ..LogConfig::default() };
    let mut log = Log::open(dir, config).unwrap();
    for i in 0..280 {
        log.append_durable(&mut make_batch(60, 1000, i, 1_000), 1_000).unwrap();
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "the log rolled: {files:?}");
    files
}

/// No page of `file` (residency `pages`) below page `behind` is cached.
fn none_cached_before(file: &Path, pages: &[bool], behind: usize) {
    let kept: Vec<usize> = (0..behind).filter(|&i| pages[i]).collect();
    assert!(
        kept.is_empty(),
        "{}: {} pages behind the tail still cached, from {:?}",
        file.display(),
        kept.len(),
        kept.first()
    );
}

#[test]
fn synced_bytes_behind_the_tail_leave_the_page_cache_and_the_tail_stays() {
    let dir = tempfile::tempdir().unwrap();
    let tail = 256 * 1024;
    let files = filled(dir.path(), tail as i64);
    let (active, sealed) = files.split_last().unwrap();
    for f in sealed {
        let pages = resident(f);
        none_cached_before(f, &pages, (pages.len() * PAGE).saturating_sub(tail) / PAGE);
    }
    let pages = resident(active);
    // the active segment drops in whole 2 MiB steps
    let behind = ((pages.len() * PAGE).saturating_sub(tail) & !((2 << 20) - 1)) / PAGE;
    assert!(behind > 0, "the active segment is longer than the tail");
    none_cached_before(active, &pages, behind);
    assert!(pages.last() == Some(&true), "the newest page stays cached");
}

#[test]
fn with_minus_one_the_page_cache_keeps_what_was_written() {
    let dir = tempfile::tempdir().unwrap();
    let files = filled(dir.path(), -1);
    let pages: Vec<bool> = files.iter().flat_map(|f| resident(f)).collect();
    let cached = pages.iter().filter(|&&r| r).count();
    assert!(cached * 10 >= pages.len() * 9, "{cached} of {} pages cached", pages.len());
}
