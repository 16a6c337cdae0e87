//! The only module with `unsafe`: memory maps over segment and index files, and page-cache
//! advice (`drop_cached`).
//!
//! Why it is sound here: every mapped file lives in a data directory that this process holds an
//! exclusive lock on (`dir.rs`), so no other process changes it; within the process, log files
//! are append-only while mapped (recovery truncates only before anything is mapped), and a
//! read-only map never extends past the file length at the time it was made. Index files are
//! mapped mutably by exactly one owner (`index.rs`), which truncates them only after dropping
//! its map. Deleting a file (retention) leaves existing maps valid on Linux.
#![allow(unsafe_code)]

use bytes::Bytes;
use memmap2::{MmapMut, MmapOptions};
use std::fs::File;
use std::io;

/// Map the first `len` bytes of `file` read-only and hand them out as `Bytes`, so slices of a
/// segment can be sent to sockets without copying.
pub fn map_read(file: &File, len: usize) -> io::Result<Bytes> {
    if len == 0 {
        return Ok(Bytes::new());
    }
    // SAFETY: see the module comment: `len` ≤ the file's current length, and the region is
    // never truncated or rewritten while any map of it is alive.
    let map = unsafe { MmapOptions::new().len(len).map(file)? };
    Ok(Bytes::from_owner(map))
}

/// Map bytes `[offset, offset + len)` of `file` read-only as `Bytes`. The map lives as long as
/// the returned `Bytes` (and its slices): reads map what they need and the pages leave the
/// process's resident set when the response is sent, so RSS does not grow with stored data.
pub fn map_read_range(file: &File, offset: u64, len: usize) -> io::Result<Bytes> {
    if len == 0 {
        return Ok(Bytes::new());
    }
    const PAGE: u64 = 4096;
    let aligned = offset - offset % PAGE;
    let lead = (offset - aligned) as usize;
    // SAFETY: as for `map_read`: the range lies within the file's current length and is never
    // truncated or rewritten while mapped.
    let map = unsafe { MmapOptions::new().offset(aligned).len(lead + len).map(file)? };
    Ok(Bytes::from_owner(map).slice(lead..))
}

/// Map `len` bytes of `file` read-write (index files, which the caller has sized to `len`).
pub fn map_write(file: &File, len: usize) -> io::Result<MmapMut> {
    // SAFETY: the caller owns the file exclusively and has set its length to at least `len`;
    // the file is not truncated while this map lives.
    unsafe { MmapOptions::new().len(len).map_mut(file) }
}

/// Drop bytes `[offset, offset + len)` of `file` from the page cache (`posix_fadvise`
/// `POSIX_FADV_DONTNEED`): clean pages go, dirty ones are only scheduled for writeback. Nothing
/// stored changes; a later read of the range reads the disk.
pub fn drop_cached(file: &File, offset: u64, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    if len == 0 {
        return Ok(());
    }
    let (Ok(offset), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Ok(());
    };
    // SAFETY: an advice call on an open descriptor the caller holds; it reads and writes no memory
    // of this process.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), offset, len, libc::POSIX_FADV_DONTNEED) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}
