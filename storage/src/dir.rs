//! The data-directory lock: one process per `log.dirs` entry. A second broker (or a tool that
//! writes) opening the same directory gets [`StorageError::DirLocked`], not silent corruption.

use crate::error::{IoContext, Result, StorageError};
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

pub const LOCK_FILE: &str = ".lock";

/// Held for as long as the directory is in use; the OS releases the lock when the process
/// exits, even on kill -9.
#[derive(Debug)]
pub struct DirLock {
    path: PathBuf,
    _file: File,
}

impl DirLock {
    /// Create `dir` if needed and take an exclusive, non-blocking lock on `dir/.lock`.
    pub fn acquire(dir: &Path) -> Result<DirLock> {
        crate::sidefile::create_dir_durable(dir)?;
        let path = dir.join(LOCK_FILE);
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path).at(&path)?;
        match file.try_lock() {
            Ok(()) => Ok(DirLock { path: dir.to_path_buf(), _file: file }),
            Err(std::fs::TryLockError::WouldBlock) => Err(StorageError::DirLocked { path: dir.to_path_buf() }),
            Err(std::fs::TryLockError::Error(e)) => Err(StorageError::Io { path, source: e }),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_fails_until_first_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let a = DirLock::acquire(dir.path()).unwrap();
        let err = DirLock::acquire(dir.path()).unwrap_err();
        assert!(matches!(err, StorageError::DirLocked { .. }));
        assert!(err.to_string().contains("locked by another process"));
        drop(a);
        DirLock::acquire(dir.path()).unwrap();
    }
}
