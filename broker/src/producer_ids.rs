//! Producer ids: allocated from a durable, monotonic source in blocks, never reused after a
//! restart. The end of the current block is persisted (atomically, CRC-framed) *before* any id
//! in it is handed out, so a crash can only skip ids, never repeat them.

use sluice_storage::{sidefile, StorageError};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub const PRODUCER_IDS_FILE: &str = "__producer_ids";
const MAGIC: [u8; 4] = *b"SLPI";
/// Ids reserved per durable write.
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;

pub struct ProducerIds {
    path: PathBuf,
    state: Mutex<(i64, i64)>, // (next id, end of the persisted block, exclusive)
    /// Cluster mode: blocks come from the metadata quorum instead of the local file.
    remote: std::sync::OnceLock<Box<dyn BlockSource>>,
}

/// Where blocks come from in cluster mode (the metadata quorum): never the same block twice,
/// whichever broker asks, across failovers.
pub trait BlockSource: Send + Sync {
    /// Reserve `count` ids; returns the first.
    fn allocate(&self, count: i64) -> Result<i64, String>;
    /// Every id below this has been handed out to some broker.
    fn high_water(&self) -> i64;
}

impl ProducerIds {
    pub fn open(data_dir: &Path) -> Result<ProducerIds, StorageError> {
        let path = data_dir.join(PRODUCER_IDS_FILE);
        let reserved_end = match sidefile::read_framed(&path, MAGIC)? {
            Some((_, p)) if p.len() == 8 => {
                let mut b = [0u8; 8];
                b.copy_from_slice(&p);
                i64::from_be_bytes(b)
            }
            Some(_) => {
                return Err(StorageError::Corrupt { path, position: 0, reason: "bad producer id block record".into() })
            }
            None => 0,
        };
        // Everything below the persisted end may have been handed out: start after it.
        Ok(ProducerIds { path, state: Mutex::new((reserved_end, reserved_end)), remote: Default::default() })
    }

    /// Take blocks from `source` from now on (cluster mode).
    pub fn use_source(&self, source: Box<dyn BlockSource>) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if self.remote.set(source).is_ok() {
            *s = (0, 0); // the next id comes from the first remote block
        }
    }

    /// Whether `id` was handed out by this allocator (now or before a restart): below the
    /// persisted high-water mark.
    pub fn was_allocated(&self, id: i64) -> bool {
        if let Some(r) = self.remote.get() {
            return id >= 0 && id < r.high_water();
        }
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        id >= 0 && id < s.0
    }

    /// A producer id never returned before, by this process or an earlier one.
    pub fn next(&self) -> Result<i64, StorageError> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let (Some(r), true) = (self.remote.get(), s.0 >= s.1) {
            let first = r.allocate(PRODUCER_ID_BLOCK_SIZE).map_err(|e| StorageError::Io {
                path: self.path.clone(),
                source: std::io::Error::other(format!("producer id block from the metadata quorum: {e}")),
            })?;
            *s = (first, first + PRODUCER_ID_BLOCK_SIZE);
        }
        if s.0 >= s.1 {
            let end = s.1 + PRODUCER_ID_BLOCK_SIZE;
            sidefile::write_atomic(&self.path, &sidefile::encode(MAGIC, 1, &end.to_be_bytes()))?;
            s.1 = end;
        }
        let id = s.0;
        s.0 += 1;
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_never_reused_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let a = ProducerIds::open(dir.path()).unwrap();
        let first: Vec<i64> = (0..3).map(|_| a.next().unwrap()).collect();
        assert_eq!(first, vec![0, 1, 2]);
        drop(a); // a crash: the rest of the block is skipped
        let b = ProducerIds::open(dir.path()).unwrap();
        assert!(b.was_allocated(2) && b.was_allocated(PRODUCER_ID_BLOCK_SIZE - 1), "the whole old block counts");
        assert!(!b.was_allocated(PRODUCER_ID_BLOCK_SIZE) && !b.was_allocated(-1));
        let n = b.next().unwrap();
        assert!(n >= PRODUCER_ID_BLOCK_SIZE, "{n}");
        for _ in 0..PRODUCER_ID_BLOCK_SIZE {
            b.next().unwrap();
        }
        let c = ProducerIds::open(dir.path()).unwrap();
        assert!(c.next().unwrap() >= 3 * PRODUCER_ID_BLOCK_SIZE - 1);
        std::fs::write(dir.path().join(PRODUCER_IDS_FILE), b"junk").unwrap();
        assert!(ProducerIds::open(dir.path()).is_err(), "a damaged id file stops startup rather than risk reuse");
    }
}
