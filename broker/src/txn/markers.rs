//! The transaction coordinator's port to the partitions and to the group coordinator:
//! [`MarkerWriter`] makes one attempt at writing a transaction marker on a partition, or at
//! completing a group's pending transactional offsets — wherever that partition or group is
//! led. The coordinator (`txn/mod.rs`) decides what to write and retries until it is durable;
//! [`BrokerMarkers`], wired by the composition root, knows where things are: this broker's own
//! partition, its replica's Raft group, or another broker (WriteTxnMarkers v1).

use crate::group::GroupCoordinator;
use crate::interbroker::MarkerAnswer;
use crate::partition::producer_state::{MarkerHeader, Refusal};
use crate::partition::Partition;
use crate::partition_handle::WriteRefused;
use crate::routing::{shard_for, Route};
use crate::topics::{TopicRegistry, Unwritable};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// A boxed future (the port is used as a trait object).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One marker: which producer's transaction, ended how, by which coordinator epoch.
#[derive(Debug, Clone, Copy)]
pub struct Marker {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// The coordinator's epoch for the transaction's shard (fences a deposed coordinator).
    pub coordinator_epoch: i32,
    pub commit: bool,
}

/// What became of one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerDone {
    /// Durable, or nothing of the transaction can be open there (the partition is gone, or it
    /// holds no open transaction of the producer): the transaction may complete.
    Written,
    /// A newer coordinator wrote to the partition: this one must not complete the transaction
    /// (the newer one finishes it).
    Fenced,
    /// Not written yet: try again.
    Retry,
}

/// Where the transaction coordinator's markers go (one attempt per call).
pub trait MarkerWriter: Send + Sync {
    /// Write `marker` on `topic`/`index` (`txn` names the transaction in logs).
    fn write<'a>(&'a self, txn: &'a str, topic: &'a str, index: i32, marker: Marker) -> BoxFuture<'a, MarkerDone>;
    /// Complete the producer's pending offsets in `group` at the group's coordinator: true once
    /// durable.
    fn complete_offsets<'a>(&'a self, txn: &'a str, group: &'a str, marker: Marker) -> BoxFuture<'a, bool>;
}

/// The broker's marker writer: partitions found through the topic registry (and its view of
/// the cluster), groups at the group coordinator. Holds both weakly: it lives in the
/// transaction coordinator, which must not keep them open past shutdown.
pub struct BrokerMarkers {
    topics: Weak<TopicRegistry>,
    groups: Weak<GroupCoordinator>,
}

impl BrokerMarkers {
    pub fn new(topics: &Arc<TopicRegistry>, groups: &Arc<GroupCoordinator>) -> BrokerMarkers {
        BrokerMarkers { topics: Arc::downgrade(topics), groups: Arc::downgrade(groups) }
    }
}

impl MarkerWriter for BrokerMarkers {
    fn write<'a>(&'a self, txn: &'a str, topic: &'a str, index: i32, marker: Marker) -> BoxFuture<'a, MarkerDone> {
        Box::pin(async move {
            let Some(topics) = self.topics.upgrade() else { return MarkerDone::Retry };
            write_once(&topics, txn, topic, index, marker).await
        })
    }

    fn complete_offsets<'a>(&'a self, txn: &'a str, group: &'a str, marker: Marker) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            let (Some(topics), Some(groups)) = (self.topics.upgrade(), self.groups.upgrade()) else { return false };
            let partition = shard_for(group, topics.config.groups.partitions);
            match topics.coordinator_route(groups.as_ref(), partition) {
                Route::Broker(b) => {
                    write_remote(&topics, b.node_id, txn, crate::topics::OFFSETS_TOPIC, partition, marker).await
                        != MarkerDone::Retry
                }
                Route::Electing => false, // its coordinator is being elected
                Route::Here => {
                    let now = crate::clock::now_ms();
                    match groups.complete_txn(group, marker.producer_id, marker.commit, now) {
                        Ok(w) => crate::group::wait_durable(w).await.is_ok(),
                        Err(e) => {
                            tracing::warn!(txn, group, "completing transactional offsets failed: {e:?}");
                            false
                        }
                    }
                }
            }
        })
    }
}

/// Where a partition's marker goes.
enum MarkerTarget {
    /// This broker writes it: its own log, or (replicated) through the partition's Raft group,
    /// which this broker leads.
    Here,
    /// Another broker leads it (its node id).
    Remote(i32),
    /// A replicated partition without a leader right now: try again shortly.
    Wait,
}

/// Who writes the marker for `topic`/`index` (always this broker on one node).
fn marker_target(state: &TopicRegistry, topic: &str, index: i32) -> MarkerTarget {
    let Some(c) = state.cluster.get() else { return MarkerTarget::Here };
    let Some((leader, _)) = state.leader_of(topic, index) else { return MarkerTarget::Here };
    if leader < 0 {
        return MarkerTarget::Wait;
    }
    if leader == state.config.node_id {
        return MarkerTarget::Here;
    }
    match c.image().brokers.get(&leader) {
        Some(_) => MarkerTarget::Remote(leader),
        None => MarkerTarget::Wait,
    }
}

/// A marker was refused with INVALID_PRODUCER_EPOCH at a partition this broker holds: harmless
/// if the producer has no open transaction there (nothing to close), otherwise the transaction
/// must not be called complete — its data would stay open behind the LSO for ever.
fn refused_epoch(partition: Option<&Partition>, id: &str, topic: &str, index: i32, pid: i64) -> MarkerDone {
    let open = partition.is_some_and(|p| p.has_open_transaction(pid));
    if open {
        tracing::error!(
            txn = id,
            topic,
            partition = index,
            pid,
            "marker refused (older producer epoch) while the transaction is open there; retrying"
        );
        MarkerDone::Retry
    } else {
        tracing::warn!(txn = id, topic, partition = index, pid, "marker refused; nothing of the transaction is open");
        MarkerDone::Written
    }
}

/// Send the marker to the partition's leader (WriteTxnMarkers v1).
async fn write_remote(state: &TopicRegistry, peer: i32, id: &str, topic: &str, index: i32, m: Marker) -> MarkerDone {
    let ttl = Duration::from_secs(10);
    let answer = match crate::interbroker::write_marker(
        peer,
        topic,
        index,
        m.producer_id,
        m.producer_epoch,
        m.commit,
        m.coordinator_epoch,
        ttl,
    )
    .await
    {
        Ok(answer) => answer,
        Err(e) => {
            tracing::warn!(txn = id, topic, partition = index, "marker to broker {peer}: {e}");
            return MarkerDone::Retry;
        }
    };
    match answer {
        MarkerAnswer::Written => MarkerDone::Written,
        // Kafka retries UNKNOWN_TOPIC_OR_PARTITION too: a broker just started, or one whose
        // metadata lags, may not have created a partition that exists — skipping the marker
        // then would leave the transaction open there for ever
        MarkerAnswer::NoSuchPartition if state.placed_in_cluster(topic, index) => {
            tracing::warn!(
                txn = id,
                topic,
                partition = index,
                "marker: broker {peer} has no such partition yet; retrying"
            );
            MarkerDone::Retry
        }
        MarkerAnswer::NoSuchPartition => {
            tracing::warn!(txn = id, topic, partition = index, "marker skipped: broker {peer} has no such partition");
            MarkerDone::Written
        }
        MarkerAnswer::CoordinatorFenced => {
            tracing::warn!(txn = id, topic, partition = index, "marker refused by broker {peer}: a newer coordinator");
            MarkerDone::Fenced
        }
        // INVALID_PRODUCER_EPOCH included: whether the transaction is open there is not known
        // here, and completing it while it is would leave its data open for ever
        MarkerAnswer::Failed(code) => {
            tracing::warn!(txn = id, topic, partition = index, code, "marker to broker {peer} failed; retrying");
            MarkerDone::Retry
        }
    }
}

/// One attempt at writing a marker where the partition is led.
async fn write_once(state: &TopicRegistry, id: &str, topic: &str, index: i32, m: Marker) -> MarkerDone {
    let pid = m.producer_id;
    match marker_target(state, topic, index) {
        MarkerTarget::Remote(peer) => return write_remote(state, peer, id, topic, index, m).await,
        MarkerTarget::Wait => return MarkerDone::Retry,
        MarkerTarget::Here => {}
    }
    let handle = match state.handle(topic, index) {
        Ok(h) => h,
        // written elsewhere: by its Raft group (the replica here is not running yet), or by
        // the one broker that holds it
        Err(Unwritable::NotWrittenHere) => return MarkerDone::Retry,
        // the cluster has it, this broker has not created it yet
        Err(Unwritable::NoSuchPartition) if state.placed_in_cluster(topic, index) => return MarkerDone::Retry,
        Err(Unwritable::NoSuchPartition) => {
            tracing::warn!(txn = id, topic, partition = index, "marker skipped: partition is gone");
            return MarkerDone::Written;
        }
    };
    let now = crate::clock::now_ms();
    let header = MarkerHeader {
        epoch: m.producer_epoch,
        coordinator_epoch: m.coordinator_epoch,
        commit: m.commit,
        timestamp: now,
    };
    let h = handle.clone();
    let written = match tokio::task::spawn_blocking(move || h.write_marker(pid, &header, now)).await {
        Ok(Ok(w)) => w.wait(Duration::from_secs(10)).await,
        Ok(Err(e)) => Err(e),
        Err(e) => {
            tracing::error!(txn = id, topic, partition = index, "marker write task failed: {e}");
            return MarkerDone::Retry;
        }
    };
    let e = match written {
        Ok(()) => return MarkerDone::Written,
        Err(e) => e,
    };
    match e {
        WriteRefused::Refused(Refusal::CoordinatorFenced { current, got }) => {
            tracing::warn!(txn = id, topic, partition = index, current, got, "marker refused: a newer coordinator");
            MarkerDone::Fenced
        }
        WriteRefused::Refused(Refusal::InvalidProducerEpoch { .. }) => {
            refused_epoch(Some(handle.partition()), id, topic, index, pid)
        }
        // a marker is refused for no other reason (producer_state::check_marker)
        WriteRefused::Refused(
            r @ (Refusal::OutOfOrderSequence { .. }
            | Refusal::InvalidTxnState
            | Refusal::UnknownProducerId { .. }
            | Refusal::TxnVerification(_)
            | Refusal::NotInTransaction),
        ) => {
            tracing::warn!(txn = id, topic, partition = index, "marker refused: {r:?}");
            MarkerDone::Written
        }
        // not durable (an fsync failed, or storage failed on a replica): retried, as Kafka does
        WriteRefused::Storage(e) => {
            tracing::error!(txn = id, topic, partition = index, "marker write failed: {e}");
            MarkerDone::Retry
        }
        // not proposed (leadership moved) or not known to be committed yet
        WriteRefused::Write(e) => {
            tracing::warn!(txn = id, topic, partition = index, "replicated marker: {e}; retrying");
            MarkerDone::Retry
        }
    }
}
