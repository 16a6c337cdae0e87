//! Producer ids: allocated from a durable, monotonic source in blocks, never reused after a
//! restart. The end of the current block is persisted (atomically, CRC-framed) *before* any id
//! in it is handed out, so a crash can only skip ids, never repeat them.

use crate::sync::OrDie as _;
use sluice_storage::{sidefile, StorageError};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub const PRODUCER_IDS_FILE: &str = "__producer_ids";
const MAGIC: [u8; 4] = *b"SLPI";
/// Ids reserved per durable write.
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;

pub struct ProducerIds {
    path: PathBuf,
    state: Arc<Mutex<Ids>>,
    /// Cluster mode: blocks come from the metadata quorum instead of the local file.
    remote: std::sync::OnceLock<Arc<dyn BlockSource>>,
}

#[derive(Default)]
struct Ids {
    /// The next id to hand out.
    next: i64,
    /// End (exclusive) of the current block: persisted locally, or granted by the quorum.
    end: i64,
    /// Cluster mode: the first id of a block already granted, taken when the current one ends.
    spare: Option<i64>,
    /// Cluster mode: a block request is on its way to the quorum.
    fetching: bool,
}

/// Why no id could be handed out.
#[derive(Debug)]
pub enum IdError {
    /// The local block file could not be written (KAFKA_STORAGE_ERROR).
    Storage(StorageError),
    /// Cluster mode: the next block has not come from the metadata quorum yet. Kafka's
    /// `RPCProducerIdManager` answers COORDINATOR_LOAD_IN_PROGRESS then, and clients retry.
    NotReady,
}

/// What the transaction coordinator answers when it needs an id and none can be had.
impl From<IdError> for crate::txn::error::TxnError {
    fn from(e: IdError) -> crate::txn::error::TxnError {
        match e {
            IdError::Storage(e) => {
                tracing::error!("cannot allocate a producer id: {e}");
                crate::txn::error::TxnError::ProducerIdStorage
            }
            IdError::NotReady => crate::txn::error::TxnError::ProducerIdsLoading,
        }
    }
}

impl std::fmt::Display for IdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IdError::Storage(e) => write!(f, "{e}"),
            IdError::NotReady => f.write_str("the next producer id block has not come from the metadata quorum yet"),
        }
    }
}

/// Where blocks come from in cluster mode (the metadata quorum): never the same block twice,
/// whichever broker asks, across failovers.
pub trait BlockSource: Send + Sync {
    /// Reserve `count` ids; resolves to the first.
    fn allocate(&self, count: i64) -> BoxFuture<Result<i64, String>>;
    /// Every id below this has been handed out to some broker.
    fn high_water(&self) -> i64;
}

pub type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'static>>;

/// Cluster mode asks for the next block once this few ids of the current one are left (Kafka
/// prefetches at 90% of a block), so handing out an id never waits for the quorum.
const PREFETCH_WHEN_LEFT: i64 = PRODUCER_ID_BLOCK_SIZE / 10;

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
        let ids = Ids { next: reserved_end, end: reserved_end, ..Ids::default() };
        Ok(ProducerIds { path, state: Arc::new(Mutex::new(ids)), remote: Default::default() })
    }

    /// Take blocks from `source` from now on (cluster mode); the first block is asked for at
    /// once. Call from within the runtime.
    pub fn use_source(&self, source: Arc<dyn BlockSource>) {
        let mut s = lock(&self.state);
        if self.remote.set(source.clone()).is_ok() {
            *s = Ids::default(); // the next id comes from the first remote block
            prefetch(&mut s, &self.state, source.as_ref());
        }
    }

    /// Whether `id` was handed out by this allocator (now or before a restart): below the
    /// persisted high-water mark.
    pub fn was_allocated(&self, id: i64) -> bool {
        if let Some(r) = self.remote.get() {
            return id >= 0 && id < r.high_water();
        }
        let s = lock(&self.state);
        id >= 0 && id < s.next
    }

    /// A producer id never returned before, by this process or an earlier one. Never waits
    /// for the network: in cluster mode an exhausted block without a granted successor is
    /// [`IdError::NotReady`] (and the successor is asked for).
    pub fn next(&self) -> Result<i64, IdError> {
        let mut s = lock(&self.state);
        if let Some(source) = self.remote.get() {
            if s.next >= s.end {
                if let Some(first) = s.spare.take() {
                    (s.next, s.end) = (first, first + PRODUCER_ID_BLOCK_SIZE);
                }
            }
            if s.end - s.next <= PREFETCH_WHEN_LEFT {
                prefetch(&mut s, &self.state, source.as_ref());
            }
            if s.next >= s.end {
                return Err(IdError::NotReady);
            }
        } else if s.next >= s.end {
            let end = s.end + PRODUCER_ID_BLOCK_SIZE;
            sidefile::write_atomic(&self.path, &sidefile::encode(MAGIC, 1, &end.to_be_bytes()))
                .map_err(IdError::Storage)?;
            s.end = end;
        }
        let id = s.next;
        s.next += 1;
        Ok(id)
    }
}

fn lock(m: &Mutex<Ids>) -> std::sync::MutexGuard<'_, Ids> {
    m.lock().or_die()
}

/// Ask the quorum for the next block in the background, unless one is granted or on its way.
fn prefetch(s: &mut Ids, state: &Arc<Mutex<Ids>>, source: &dyn BlockSource) {
    if s.spare.is_some() || s.fetching {
        return;
    }
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        tracing::error!("producer id block: no runtime to ask the metadata quorum from");
        return;
    };
    s.fetching = true;
    let state = state.clone();
    let asked = source.allocate(PRODUCER_ID_BLOCK_SIZE);
    rt.spawn(async move {
        let r = asked.await;
        let mut s = lock(&state);
        s.fetching = false;
        match r {
            Ok(first) => s.spare = Some(first),
            // the next id asked for tries again
            Err(e) => tracing::warn!("producer id block from the metadata quorum: {e}"),
        }
    });
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

    /// A block source that grants blocks only when the test lets it.
    struct Gate {
        next: Mutex<i64>,
        open: tokio::sync::Semaphore,
        asked: std::sync::atomic::AtomicUsize,
    }

    impl BlockSource for Arc<Gate> {
        fn allocate(&self, count: i64) -> BoxFuture<Result<i64, String>> {
            let g = self.clone();
            g.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Box::pin(async move {
                g.open.acquire().await.map_err(|e| e.to_string())?.forget();
                let mut n = lock_i64(&g.next);
                let first = *n;
                *n += count;
                Ok(first)
            })
        }
        fn high_water(&self) -> i64 {
            *lock_i64(&self.next)
        }
    }

    fn lock_i64(m: &Mutex<i64>) -> std::sync::MutexGuard<'_, i64> {
        m.lock().or_die()
    }

    /// Cluster mode: handing out an id never waits for the metadata quorum (a worker blocked
    /// there, holding the coordinator's locks, once stalled a whole broker); a missing block is
    /// COORDINATOR_LOAD_IN_PROGRESS, and the next one is asked for before the current ends.
    #[tokio::test]
    async fn quorum_blocks_are_fetched_ahead_and_never_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let ids = ProducerIds::open(dir.path()).unwrap();
        let gate = Arc::new(Gate { next: Mutex::new(5000), open: tokio::sync::Semaphore::new(0), asked: 0.into() });
        ids.use_source(Arc::new(gate.clone()));
        assert!(matches!(ids.next(), Err(IdError::NotReady)), "no block yet: an error, not a wait");
        assert!(matches!(ids.next(), Err(IdError::NotReady)));
        assert_eq!(gate.asked.load(std::sync::atomic::Ordering::SeqCst), 1, "one request on its way, not one per call");
        gate.open.add_permits(1);
        let first = loop {
            tokio::task::yield_now().await;
            if let Ok(id) = ids.next() {
                break id;
            }
        };
        assert_eq!(first, 5000);
        // use the block up to the prefetch point: the next block is asked for, and granted
        // before the current one runs out, so no caller ever sees NotReady
        gate.open.add_permits(1);
        let mut last = first;
        for _ in 1..PRODUCER_ID_BLOCK_SIZE - PREFETCH_WHEN_LEFT + 1 {
            last = ids.next().unwrap();
        }
        assert_eq!(gate.asked.load(std::sync::atomic::Ordering::SeqCst), 2);
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        for _ in 0..PRODUCER_ID_BLOCK_SIZE {
            let id = ids.next().unwrap();
            assert_eq!(id, last + 1, "the second block was there when the first ran out");
            last = id;
        }
        assert!(last > 5000 + PRODUCER_ID_BLOCK_SIZE, "{last}: handed out of the second block");
        assert!(ids.was_allocated(last) && !ids.was_allocated(gate.high_water()));
    }
}
