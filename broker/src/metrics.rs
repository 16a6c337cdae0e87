//! Metrics: every name in one place (documented in docs/metrics.md), recorded with the
//! `metrics` crate and served in Prometheus text format on `metrics.listener` (off by default).
//! The endpoint is a minimal HTTP/1.1 responder: any GET gets the current exposition.

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Log cleaner (compacted topics): passes finished, label `topic`.
pub const CLEANER_PASSES_TOTAL: &str = "sluice_log_cleaner_passes_total";
/// Bytes of segments the cleaner read / wrote, label `topic`.
pub const CLEANER_BYTES_READ_TOTAL: &str = "sluice_log_cleaner_bytes_read_total";
pub const CLEANER_BYTES_WRITTEN_TOTAL: &str = "sluice_log_cleaner_bytes_written_total";
/// Duration of one cleaner pass, seconds.
pub const CLEANER_PASS_SECONDS: &str = "sluice_log_cleaner_pass_seconds";
/// Passes that failed (I/O or corrupt input; the log is left as it was).
pub const CLEANER_ERRORS_TOTAL: &str = "sluice_log_cleaner_errors_total";
/// A compacted partition's dirty ratio (dirty / cleanable bytes), labels `topic`, `partition`.
pub const CLEANER_DIRTY_RATIO: &str = "sluice_log_cleaner_dirty_ratio";
/// Age of a compacted partition's oldest dirty record (seconds; 0 when nothing is dirty):
/// the cleaner's lag, labels `topic`, `partition`.
pub const CLEANER_LAG_SECONDS: &str = "sluice_log_cleaner_lag_seconds";

/// Requests handled, label `api`.
pub const REQUESTS_TOTAL: &str = "sluice_requests_total";
/// Request latency from decode to answer, seconds, label `api`.
pub const REQUEST_SECONDS: &str = "sluice_request_seconds";
/// Bytes of request frames received.
pub const BYTES_IN_TOTAL: &str = "sluice_bytes_in_total";
/// Bytes of response frames sent.
pub const BYTES_OUT_TOTAL: &str = "sluice_bytes_out_total";
/// Open client connections.
pub const CONNECTIONS: &str = "sluice_connections";
/// fdatasync latency on the durability path, seconds: a partition's own log on one broker, a
/// Raft log's flush (one per merged append, [`RAFT_LOG_FLUSHES_TOTAL`]) in a cluster.
pub const FSYNC_SECONDS: &str = "sluice_fsync_seconds";
/// Per partition (labels `topic`, `partition`): log end offset, high watermark, last stable
/// offset, and LSO lag (high watermark − LSO).
pub const LOG_END_OFFSET: &str = "sluice_log_end_offset";
pub const HIGH_WATERMARK: &str = "sluice_high_watermark";
pub const LAST_STABLE_OFFSET: &str = "sluice_last_stable_offset";
pub const LSO_LAG: &str = "sluice_lso_lag";
/// Idempotent producers with state on a partition (labels `topic`, `partition`).
pub const PRODUCERS: &str = "sluice_producers";
/// Batches refused by the idempotence check, label `reason`.
pub const PRODUCE_REFUSED_TOTAL: &str = "sluice_produce_refused_total";
/// Retries answered as duplicates (nothing written).
pub const PRODUCE_DUPLICATES_TOTAL: &str = "sluice_produce_duplicates_total";
/// Transactions open now (Ongoing, PrepareCommit, PrepareAbort) on this coordinator.
pub const OPEN_TRANSACTIONS: &str = "sluice_open_transactions";
/// Age in seconds of the oldest open transaction (0 when none): a hanging transaction shows here.
pub const OLDEST_TRANSACTION_SECONDS: &str = "sluice_oldest_transaction_seconds";
/// Two-phase-commit (KIP-939) transactions open now on this coordinator: each waits for its
/// external coordinator's decision and is never aborted by a timeout.
pub const PREPARED_TRANSACTIONS: &str = "sluice_prepared_transactions";
/// Age in seconds of the oldest open two-phase-commit transaction (0 when none).
pub const OLDEST_PREPARED_TRANSACTION_SECONDS: &str = "sluice_oldest_prepared_transaction_seconds";
/// Requests refused because a newer instance (or the coordinator's timeout abort) fenced the
/// producer, label `api`.
pub const PRODUCERS_FENCED_TOTAL: &str = "sluice_producers_fenced_total";
/// Transactions ended, label `outcome` (commit, abort).
pub const TRANSACTIONS_TOTAL: &str = "sluice_transactions_total";
/// Consumer groups by state, label `state` (Empty, PreparingRebalance, CompletingRebalance, Stable).
pub const GROUPS: &str = "sluice_groups";
/// Completed rebalances (join phases that started a new generation with members).
pub const GROUP_REBALANCES_TOTAL: &str = "sluice_group_rebalances_total";

/// Per Raft group (labels `group`: the topic, or the coordinator's internal topic, and
/// `partition`): its current term; leader changes this broker saw (counter); entries in its Raft
/// log not yet applied here; on its leader, how many entries the furthest follower trails.
pub const RAFT_TERM: &str = "sluice_raft_term";
pub const RAFT_LEADER_CHANGES_TOTAL: &str = "sluice_raft_leader_changes_total";
pub const RAFT_APPLY_LAG: &str = "sluice_raft_apply_lag";
pub const RAFT_REPLICATION_LAG: &str = "sluice_raft_replication_lag";
/// Per partition group: snapshots of segments this replica took, and installed from a leader
/// (a replica too far behind, or wiped, catches up this way instead of replaying the log).
/// Per partition group, on its leader: bytes of produce batches proposed and not yet answered,
/// or answered and not yet held by every live follower (bounded by
/// `replication.partition.in.flight.max.bytes`; decisions 0026 and 0054).
pub const RAFT_BYTES_IN_FLIGHT: &str = "sluice_raft_bytes_in_flight";
pub const RAFT_SNAPSHOTS_TOTAL: &str = "sluice_raft_snapshots_total";
/// Raft RPCs this broker sent (AppendEntries, Vote, InstallSnapshot of every group), labels
/// `peer` (its node id) and `outcome` (answered, timed_out, refused, failed).
pub const RAFT_RPCS_TOTAL: &str = "sluice_raft_rpcs_total";
pub const RAFT_SNAPSHOTS_INSTALLED_TOTAL: &str = "sluice_raft_snapshots_installed_total";
/// Raft entries read from a partition's log (for a follower, or to apply them), label `from`:
/// `memory` (its batch kept as appended, decision 0057) or `segment`.
pub const RAFT_ENTRY_READS_TOTAL: &str = "sluice_raft_entry_reads_total";
/// Appends to the Raft logs of partitions and coordinator shards (each made durable with one
/// flush) and the entries they wrote: a leader writes the client writes queued while it flushed with one append, a
/// follower the appends queued meanwhile (decision 0060).
pub const RAFT_LOG_FLUSHES_TOTAL: &str = "sluice_raft_log_flushes_total";
pub const RAFT_LOG_ENTRIES_APPENDED_TOTAL: &str = "sluice_raft_log_entries_appended_total";
/// Replicated writes applied with the leader's verdict on them, by `outcome` (`matched`,
/// `differed`): decision 0045, step 2. Any `differed` is a replica judging unlike its leader.
pub const REPLICATION_VERDICTS_TOTAL: &str = "sluice_replication_verdicts_total";

/// Per partition: 1 while its log is offline (a failed write or fsync, or a batch that failed
/// its CRC on a read); 0 otherwise.
pub const PARTITION_OFFLINE: &str = "sluice_partition_offline";
/// Damaged data found on disk (a batch failing its CRC when read), label `topic`.
pub const STORAGE_CORRUPTIONS_TOTAL: &str = "sluice_storage_corruptions_total";
/// Damaged batches replaced by another replica's copy (cluster mode), label `topic`.
pub const STORAGE_REPAIRS_TOTAL: &str = "sluice_storage_repairs_total";

/// Install the recorder (once per process) and return the handle that renders it.
pub fn install() -> Option<PrometheusHandle> {
    let buckets = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];
    let builder = match PrometheusBuilder::new().set_buckets(&buckets) {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!("metrics buckets: {e}");
            PrometheusBuilder::new()
        }
    };
    match builder.install_recorder() {
        Ok(h) => Some(h),
        Err(e) => {
            tracing::warn!("metrics recorder not installed: {e}");
            None
        }
    }
}

/// Serve the exposition on `addr` until the process ends.
pub async fn serve(addr: SocketAddr, handle: PrometheusHandle) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!("metrics on http://{addr}/metrics");
    let handle = Arc::new(handle);
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else { continue };
            let h = handle.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 2048];
                let _ = tokio::time::timeout(std::time::Duration::from_secs(5), sock.read(&mut buf)).await;
                let body = h.render();
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = sock.write_all(head.as_bytes()).await;
                let _ = sock.write_all(body.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    Ok(())
}
