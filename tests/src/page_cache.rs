//! Which pages of a file the page cache holds (`mincore` over a read-only map of it), for tests
//! of what a broker keeps cached (decisions 0053 and 0054).
#![allow(unsafe_code)]

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

const PAGE: u64 = 4096;

/// Bytes of the file at `path` the page cache holds, and the file's length (0, 0 for a file
/// that cannot be read or mapped).
pub fn cached_bytes(path: &Path) -> (u64, u64) {
    let Ok(f) = File::open(path) else { return (0, 0) };
    let len = f.metadata().map_or(0, |m| m.len());
    let Ok(map_len) = usize::try_from(len) else { return (0, len) };
    if map_len == 0 {
        return (0, 0);
    }
    let mut v = vec![0u8; map_len.div_ceil(PAGE as usize)];
    // SAFETY: a read-only shared map of an open file, unmapped before returning; `mincore`
    // writes one byte per page of the map into `v`, which has exactly that many.
    let ok = unsafe {
        let p = libc::mmap(std::ptr::null_mut(), map_len, libc::PROT_READ, libc::MAP_SHARED, f.as_raw_fd(), 0);
        if p == libc::MAP_FAILED {
            return (0, len);
        }
        let r = libc::mincore(p, map_len, v.as_mut_ptr());
        libc::munmap(p, map_len);
        r == 0
    };
    if !ok {
        return (0, len);
    }
    (v.iter().filter(|b| *b & 1 == 1).count() as u64 * PAGE, len)
}
