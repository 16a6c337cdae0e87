//! The background scrubber (`log.scrub.bytes.per.second`, issue 22, decision 0037): it reads
//! every partition's stored batches in turn (and every coordinator shard's log), at a bounded
//! rate, and checks their CRCs, so that
//! damage at rest is found even where nobody reads — a follower's copy, old data past every
//! consumer. Damage it finds is handled as a read's would be: the partition goes offline (one
//! log line, `sluice_storage_corruptions_total`), and a replicated partition's replica repairs
//! the batch from another replica (`cluster/mend.rs`); a replicated coordinator shard's replica
//! replaces its log with another replica's copy.

use crate::partition::Partition;
use crate::topics::TopicRegistry;
use sluice_storage::StorageError;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Bytes checked per step (one lock of the partition's log).
const STEP_BYTES: usize = 1 << 20;
/// The pause between two passes over every partition.
const BETWEEN_PASSES: Duration = Duration::from_secs(10);

/// A stored log the scrubber walks: a partition's, or a coordinator shard's
/// (`coordinator.rs`). Damage a step finds is reported, and the log taken offline, by the
/// implementation.
pub trait Scrubbed: Send + Sync + 'static {
    /// The base offsets of its segments.
    fn segments(&self) -> Vec<i64>;
    /// Check about `max_bytes` of segment `segment` from byte `position` (`Log::scrub`).
    fn scrub(&self, segment: i64, position: u64, max_bytes: usize) -> Result<Option<u64>, StorageError>;
}

impl Scrubbed for Partition {
    fn segments(&self) -> Vec<i64> {
        self.log().segment_sizes().into_iter().map(|(base, _)| base).collect()
    }

    fn scrub(&self, segment: i64, position: u64, max_bytes: usize) -> Result<Option<u64>, StorageError> {
        Partition::scrub(self, segment, position, max_bytes)
    }
}

/// Scrub until `stop`, at most `bytes_per_second` (0: not at all): every partition, then the
/// coordinators' shard logs (`others`), each pass.
pub async fn run(
    topics: Arc<TopicRegistry>,
    others: Vec<Arc<dyn Scrubbed>>,
    bytes_per_second: u64,
    mut stop: watch::Receiver<bool>,
) {
    if bytes_per_second == 0 {
        return;
    }
    // not while the broker starts (recovery, coordinators loading)
    tokio::select! {
        _ = tokio::time::sleep(BETWEEN_PASSES) => {}
        _ = stop.changed() => return,
    }
    loop {
        let mut logs: Vec<Arc<dyn Scrubbed>> = Vec::new();
        for t in topics.topics() {
            logs.extend(t.partitions.iter().map(|p| p.clone() as Arc<dyn Scrubbed>));
        }
        logs.extend(others.iter().cloned());
        for log in logs {
            for base in log.segments() {
                let mut position = 0u64;
                loop {
                    let (l, at) = (log.clone(), position);
                    let step = tokio::task::spawn_blocking(move || l.scrub(base, at, STEP_BYTES)).await;
                    let Ok(Ok(Some(next))) = step else { break };
                    let read = next.saturating_sub(position);
                    position = next;
                    let pause = Duration::from_secs_f64(read as f64 / bytes_per_second as f64);
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = stop.changed() => return,
                    }
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(BETWEEN_PASSES) => {}
            _ = stop.changed() => return,
        }
    }
}
