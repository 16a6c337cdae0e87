//! A replica repairs damaged data from the other replicas (issue 22, decision 0037).
//!
//! A read that meets a batch failing its CRC — or an open that finds a closed segment's index
//! naming a batch whose header no longer parses — takes the partition's log offline (decision
//! 0036). On one broker that is where it ends: an operator restores the directory. In a
//! cluster the same batch is stored, byte for byte, by every other replica (each applies the
//! same committed command with the same offsets, timestamps and leader epoch), so this replica
//! asks them for their copy and writes it over the damaged one in place
//! (`sluice_storage::Log::repair`: the copy must pass its CRC, start where the damaged batch
//! must and fit exactly).
//!
//! Who runs it: the group's state machine before it applies an entry (an entry is never
//! skipped: a replica that skipped one would differ from the others for good), and the
//! group's maintenance task within half a second of the damage being found. A leader that
//! cannot repair hands its leadership to another replica, so clients are served by a whole
//! copy meanwhile.

use crate::replication::types::NodeId;
use crate::replication::types::PartitionLog;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Each peer's answer to "your copy of the batch at this offset": its bytes, or why not.
pub type Copies = Vec<(NodeId, Result<Vec<u8>, String>)>;

/// The other replicas of a partition's group, as its repair reaches them
/// (`cluster/network.rs`).
pub trait Peers: Send + Sync + 'static {
    /// Each other voter's copy of the batch holding `offset` (or why it has none).
    fn copies(&self, offset: i64) -> BoxFuture<Copies>;
    /// Ask the other voters to lead instead of this replica, one after another, until one does.
    fn hand_over(&self) -> BoxFuture<()>;
}

/// Repairs one partition replica's damaged batches; one repair at a time.
pub struct Mender {
    partition: Arc<dyn PartitionLog>,
    pub peers: Arc<dyn Peers>,
    lock: tokio::sync::Mutex<()>,
}

/// Damaged batches one repair replaces at most before it reports (each is one round trip).
const BATCHES_PER_REPAIR: usize = 10_000;

impl Mender {
    pub fn new(partition: Arc<dyn PartitionLog>, peers: Arc<dyn Peers>) -> Mender {
        Mender { partition, peers, lock: tokio::sync::Mutex::new(()) }
    }

    /// Replace every damaged batch the log knows of with another replica's copy. `Ok` when
    /// none is left; `Err` says why the first that could not be replaced was not (no replica
    /// had a copy that fits, or none answered).
    pub async fn mend(&self) -> Result<(), String> {
        let _one = self.lock.lock().await;
        for _ in 0..BATCHES_PER_REPAIR {
            let p = self.partition.clone();
            let found = tokio::task::spawn_blocking(move || p.find_damage()).await.map_err(|e| e.to_string())?;
            let d = match found {
                Ok(Some(d)) => d,
                Ok(None) => return Ok(()),
                Err(e) => return Err(e.to_string()),
            };
            let mut why = Vec::new();
            let mut repaired = false;
            for (peer, copy) in self.peers.copies(d.base_offset).await {
                let result = match copy {
                    Ok(bytes) => {
                        let (p, d) = (self.partition.clone(), d.clone());
                        match tokio::task::spawn_blocking(move || p.repair(&d, &bytes, peer)).await {
                            Ok(r) => r.map_err(|e| e.to_string()),
                            Err(e) => Err(e.to_string()),
                        }
                    }
                    Err(e) => Err(e),
                };
                match result {
                    Ok(_) => {
                        repaired = true;
                        break;
                    }
                    Err(e) => why.push(format!("broker {peer}: {e}")),
                }
            }
            if !repaired {
                if why.is_empty() {
                    why.push("no other replica".into());
                }
                return Err(format!(
                    "the batch at offset {} (byte {} of {}) was not repaired: {}",
                    d.base_offset,
                    d.position,
                    d.path.display(),
                    why.join("; ")
                ));
            }
        }
        Err(format!("more than {BATCHES_PER_REPAIR} damaged batches"))
    }
}
