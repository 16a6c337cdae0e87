//! One partition as this broker writes it: [`PartitionHandle`] is either the local log alone
//! (one node, or a partition without replicas elsewhere) or the log behind its Raft group (a
//! replicated partition this broker holds a replica of). Callers ask for a write and await it;
//! whether that is an append under the partition's locks and an fsync, or a proposal that
//! every replica's state machine applies with the same `Partition` function once a majority
//! has it, is decided here and nowhere else.

use crate::cluster::replica::{PendingWrite, Replica};
use crate::partition::producer_state::{MarkerHeader, Refusal};
use crate::partition::{AppendError, Partition};
use crate::replication::types::{ApplyFailure, PartCommand, PartResult, WriteError};
use sluice_storage::StorageError;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone)]
pub enum PartitionHandle {
    /// Written here: appended under the partition's locks, durable after its fsync.
    Local(Arc<Partition>),
    /// Written through the partition's Raft group, led by this broker or not (a write proposed
    /// on a follower is refused with [`WriteError::NotLeader`]).
    Replicated { partition: Arc<Partition>, replica: Arc<Replica> },
}

/// Why a marker was not written (or is not known to be).
#[derive(Debug, thiserror::Error)]
pub enum MarkerError {
    /// The partition's producer state refused it: nothing was written.
    #[error("refused: {0:?}")]
    Refused(Refusal),
    /// Storage failed: written or not, it is not durable.
    #[error("{0}")]
    Storage(Arc<StorageError>),
    /// Not proposed, or proposed with an unknown outcome (replicated).
    #[error("{0}")]
    Write(WriteError),
    /// Committed but not applied (replicated; a command of the wrong kind).
    #[error("{0}")]
    NotApplied(ApplyFailure),
}

/// A marker write under way: await [`MarkerWrite::wait`].
pub enum MarkerWrite {
    Local { partition: Arc<Partition>, end: i64, sync: bool },
    Replicated(PendingWrite),
}

impl PartitionHandle {
    pub fn partition(&self) -> &Arc<Partition> {
        match self {
            PartitionHandle::Local(p) | PartitionHandle::Replicated { partition: p, .. } => p,
        }
    }

    /// The partition's Raft group, if it is replicated here.
    pub fn replica(&self) -> Option<&Arc<Replica>> {
        match self {
            PartitionHandle::Local(_) => None,
            PartitionHandle::Replicated { replica, .. } => Some(replica),
        }
    }

    /// Write a COMMIT/ABORT marker for `producer_id`: appended now (local), or proposed to the
    /// partition's group. Blocking (the local append takes the partition's locks; a proposal
    /// waits for the group to accept it).
    pub fn write_marker(&self, producer_id: i64, header: &MarkerHeader, now: i64) -> Result<MarkerWrite, MarkerError> {
        match self {
            PartitionHandle::Local(p) => match p.write_marker(producer_id, header, now) {
                Ok(w) => Ok(MarkerWrite::Local { partition: p.clone(), end: w.offset + 1, sync: w.sync }),
                Err(AppendError::Refused(r)) => Err(MarkerError::Refused(r)),
                Err(AppendError::Storage(e)) => Err(MarkerError::Storage(Arc::new(e))),
            },
            PartitionHandle::Replicated { replica, .. } => {
                let cmd = PartCommand::Marker {
                    producer_id,
                    epoch: header.epoch,
                    coordinator_epoch: header.coordinator_epoch,
                    commit: header.commit,
                    now_ms: now,
                };
                replica.propose(cmd).map(MarkerWrite::Replicated).map_err(MarkerError::Write)
            }
        }
    }
}

impl MarkerWrite {
    /// Wait until the marker is durable (local: its fsync; replicated: applied once a majority
    /// has it, waiting at most `timeout`).
    pub async fn wait(self, timeout: Duration) -> Result<(), MarkerError> {
        match self {
            MarkerWrite::Local { partition, end, sync } => {
                partition.wait_durable_async(end, sync).await.map_err(|e| MarkerError::Storage(Arc::new(e)))
            }
            MarkerWrite::Replicated(w) => match w.wait(timeout).await {
                Ok(PartResult::Done | PartResult::Appended { .. }) => Ok(()),
                Ok(PartResult::Refused(r)) => Err(MarkerError::Refused(r)),
                Ok(PartResult::Failed(ApplyFailure::Storage(e))) => Err(MarkerError::Storage(e)),
                Ok(PartResult::Failed(f @ (ApplyFailure::Shard(_) | ApplyFailure::WrongGroup(_)))) => {
                    Err(MarkerError::NotApplied(f))
                }
                Err(e) => Err(MarkerError::Write(e)),
            },
        }
    }
}
