//! The background scrubber (`log.scrub.bytes.per.second`, issue 22, decision 0037): it reads
//! every partition's stored batches in turn, at a bounded rate, and checks their CRCs, so that
//! damage at rest is found even where nobody reads — a follower's copy, old data past every
//! consumer. Damage it finds is handled as a read's would be: the partition goes offline (one
//! log line, `sluice_storage_corruptions_total`), and a replicated partition's replica repairs
//! the batch from another replica (`cluster/mend.rs`).

use crate::partition::Partition;
use crate::topics::TopicRegistry;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Bytes checked per step (one lock of the partition's log).
const STEP_BYTES: usize = 1 << 20;
/// The pause between two passes over every partition.
const BETWEEN_PASSES: Duration = Duration::from_secs(10);

/// Scrub until `stop`, at most `bytes_per_second` (0: not at all).
pub async fn run(topics: Arc<TopicRegistry>, bytes_per_second: u64, mut stop: watch::Receiver<bool>) {
    if bytes_per_second == 0 {
        return;
    }
    // not while the broker starts (recovery, coordinators loading)
    tokio::select! {
        _ = tokio::time::sleep(BETWEEN_PASSES) => {}
        _ = stop.changed() => return,
    }
    loop {
        let partitions: Vec<Arc<Partition>> = topics.topics().iter().flat_map(|t| t.partitions.clone()).collect();
        for p in partitions {
            let segments = p.log().segment_sizes();
            for (base, _) in segments {
                let mut position = 0u64;
                loop {
                    let (part, at) = (p.clone(), position);
                    let step = tokio::task::spawn_blocking(move || part.scrub(base, at, STEP_BYTES)).await;
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
