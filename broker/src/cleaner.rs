//! The log cleaner's scheduler: which compacted partitions to clean, when, and how many at a
//! time (`log.cleaner.*`). The cleaning itself is `Partition::clean` over
//! `sluice_storage::cleaner`.
//!
//! Like Kafka's cleaner threads, a loop takes the filthiest due partitions — up to
//! `log.cleaner.threads` at once, each on a blocking thread — and sleeps
//! `log.cleaner.backoff.ms` only when none is due. The dedupe buffer
//! (`log.cleaner.dedupe.buffer.size`) and the I/O rate (`log.cleaner.io.max.bytes.per.second`)
//! are shared by the passes that run together.
//!
//! In cluster mode every replica cleans its own copy: the same records in, the same rules, so
//! the same newest value of every key out (which superseded records and expired tombstones a
//! replica still holds depends on when it last ran; decision record 0034).

use crate::config::CleanerSettings;
use crate::partition::Partition;
use crate::topics::TopicRegistry;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Partitions due for a pass, filthiest first.
fn due(topics: &TopicRegistry, now_ms: i64) -> Vec<(Arc<Partition>, f64)> {
    let mut out: Vec<(Arc<Partition>, f64)> = topics
        .topics()
        .iter()
        .flat_map(|t| t.partitions.iter().cloned())
        .filter_map(|p| {
            let s = p.cleaning_status(now_ms)?;
            s.due.then_some((p, s.dirty_ratio))
        })
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    out
}

/// One pass over `p`, logged and counted. Blocking.
fn clean_one(p: &Partition, settings: &CleanerSettings, share: usize) -> bool {
    let capacity = settings.dedupe_buffer_bytes / share.max(1) / sluice_storage::cleaner::MAP_ENTRY_BYTES;
    let rate = settings.io_max_bytes_per_second.map(|r| r / share.max(1) as f64);
    let labels = [("topic", p.topic.clone())];
    match p.clean(crate::clock::now_ms(), capacity.max(1), rate) {
        Ok(Some(s)) => {
            tracing::info!(
                topic = %p.topic,
                partition = p.index,
                "cleaned offsets {}..{}: {} segments ({} bytes) into {} ({} bytes), {} of {} records kept, {} keys, {:.3} s",
                s.first_dirty, s.end, s.segments_read, s.bytes_read, s.segments_written, s.bytes_written,
                s.records_kept, s.records_read, s.map_entries, s.seconds
            );
            ::metrics::counter!(crate::metrics::CLEANER_PASSES_TOTAL, &labels).increment(1);
            ::metrics::counter!(crate::metrics::CLEANER_BYTES_READ_TOTAL, &labels).increment(s.bytes_read);
            ::metrics::counter!(crate::metrics::CLEANER_BYTES_WRITTEN_TOTAL, &labels).increment(s.bytes_written);
            ::metrics::histogram!(crate::metrics::CLEANER_PASS_SECONDS).record(s.seconds);
            true
        }
        Ok(None) => false,
        Err(e) => {
            tracing::error!(topic = %p.topic, partition = p.index, "log cleaner pass failed (the log is unchanged): {e}");
            ::metrics::counter!(crate::metrics::CLEANER_ERRORS_TOTAL, &labels).increment(1);
            false
        }
    }
}

/// Run the cleaner until `stop` changes.
pub async fn run(topics: Arc<TopicRegistry>, settings: CleanerSettings, mut stop: watch::Receiver<bool>) {
    if !settings.enable {
        return;
    }
    // a partition whose pass failed or found nothing to do rests a backoff before the next try
    let mut resting: std::collections::HashMap<(String, i32), i64> = Default::default();
    loop {
        let now = crate::clock::now_ms();
        resting.retain(|_, until| *until > now);
        let picked: Vec<Arc<Partition>> = due(&topics, now)
            .into_iter()
            .map(|(p, _)| p)
            .filter(|p| !resting.contains_key(&(p.topic.clone(), p.index)))
            .take(settings.threads)
            .collect();
        let mut cleaned_any = false;
        if !picked.is_empty() {
            let share = picked.len();
            let runs: Vec<_> = picked
                .into_iter()
                .map(|p| {
                    let s = settings.clone();
                    tokio::task::spawn_blocking(move || (clean_one(&p, &s, share), p))
                })
                .collect();
            for r in runs {
                match r.await {
                    Ok((true, _)) => cleaned_any = true,
                    Ok((false, p)) => {
                        resting.insert((p.topic.clone(), p.index), now + settings.backoff_ms as i64);
                    }
                    Err(e) => tracing::error!("log cleaner task failed: {e}"),
                }
            }
        }
        if cleaned_any {
            if *stop.borrow() {
                break;
            }
            continue;
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(settings.backoff_ms)) => {}
            _ = stop.changed() => break,
        }
    }
}
