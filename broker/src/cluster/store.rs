//! The metadata quorum's storage: its Raft log in `<log.dirs>/__cluster/`
//! (`replication::log_store::LogStore`, shared with every Raft group) and its state machine —
//! the [`MetadataImage`] — with its snapshot in `raft-snapshot.bin` (bincode; a
//! `raft-snapshot.json` of an earlier version is read and replaced by it).

// openraft's traits return its (large) StorageError; the helpers here return the same.
#![allow(clippy::result_large_err)]

use super::{CommandResult, MetadataImage, NodeId, SharedImage, TypeConfig};
use crate::sync::OrDie as _;
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, SnapshotMeta, StorageError, StoredMembership,
};
use serde::{Deserialize, Serialize};
use std::fmt::Debug;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const SNAPSHOT_FILE: &str = "raft-snapshot.bin";
/// The snapshot file of earlier versions (JSON, its state JSON too): read when no binary one
/// exists, removed once one is written.
const JSON_SNAPSHOT_FILE: &str = "raft-snapshot.json";

pub use crate::replication::log_store::{io_err, write_atomic, LogStore};

/// Which Raft group a log directory belongs to, for [`dump`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupKind {
    /// The metadata quorum's (`<log.dirs>/__cluster`).
    Metadata,
    /// A replicated partition's (`__cluster/replicas/<topic id>-<partition>`).
    Partition,
    /// A coordinator shard's (`__cluster/replicas/__consumer_offsets-<n>`, `__transaction_state-<n>`).
    Shard,
}

impl GroupKind {
    /// The kind a directory's name tells: a shard by its internal topic's name, a partition by
    /// being under `replicas/`, else the metadata quorum.
    pub fn of(dir: &Path) -> GroupKind {
        let name = dir.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        if name.starts_with("__consumer_offsets-") || name.starts_with("__transaction_state-") {
            GroupKind::Shard
        } else if dir.parent().and_then(|p| p.file_name()).is_some_and(|p| p == "replicas") {
            GroupKind::Partition
        } else {
            GroupKind::Metadata
        }
    }
}

/// Write every entry of the Raft log in `dir` to `out` as JSON lines, read-only
/// (`sluice raft-log-dump DIR`): the number of entries.
pub fn dump(dir: &Path, kind: GroupKind, out: &mut dyn std::io::Write) -> anyhow::Result<usize> {
    use crate::replication::log_store::dump_as;
    match kind {
        GroupKind::Metadata => dump_as::<TypeConfig>(dir, out),
        GroupKind::Partition => dump_as::<crate::replication::types::PartConfig>(dir, out),
        GroupKind::Shard => dump_as::<crate::replication::types::ShardConfig>(dir, out),
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct SmState {
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, openraft::BasicNode>,
    image: MetadataImage,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<NodeId, openraft::BasicNode>,
    data: Vec<u8>,
}

/// A snapshot's state: bincode, or the JSON of earlier versions (a `{`: bincode's first byte is
/// an `Option` tag, 0 or 1) — from an old file or an old leader.
fn decode_state(data: &[u8]) -> Result<SmState, String> {
    if data.first() == Some(&b'{') {
        serde_json::from_slice(data).map_err(|e| e.to_string())
    } else {
        bincode::deserialize(data).map_err(|e| e.to_string())
    }
}

/// The newest snapshot stored in `dir`: `raft-snapshot.bin`, else an earlier version's
/// `raft-snapshot.json`.
fn read_snapshot(dir: &Path) -> anyhow::Result<Option<StoredSnapshot>> {
    match std::fs::read(dir.join(SNAPSHOT_FILE)) {
        Ok(b) => return Ok(Some(bincode::deserialize(&b)?)),
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
        Err(_) => {}
    }
    match std::fs::read(dir.join(JSON_SNAPSHOT_FILE)) {
        Ok(b) => Ok(Some(serde_json::from_slice(&b)?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Store `s` as the newest snapshot (atomically), and drop an earlier version's JSON file.
fn write_snapshot(dir: &Path, s: &StoredSnapshot) -> Result<(), StorageError<NodeId>> {
    write_atomic(&dir.join(SNAPSHOT_FILE), &bincode::serialize(s).map_err(io_err)?)?;
    match std::fs::remove_file(dir.join(JSON_SNAPSHOT_FILE)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_err(e)),
        _ => Ok(()),
    }
}

/// The state machine: applies commands to the shared [`MetadataImage`].
pub struct StateMachine {
    dir: PathBuf,
    state: SmState,
    image: SharedImage,
    changed: tokio::sync::watch::Sender<u64>,
    snapshot: Option<StoredSnapshot>,
    snapshots_built: u64,
}

impl StateMachine {
    /// Start from the last snapshot, if any (openraft re-applies the committed entries after it).
    pub fn open(
        dir: &Path,
        image: SharedImage,
        changed: tokio::sync::watch::Sender<u64>,
    ) -> anyhow::Result<StateMachine> {
        let snapshot = read_snapshot(dir)?;
        let state = match &snapshot {
            Some(s) => decode_state(&s.data).map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?,
            None => SmState::default(),
        };
        *image.write().or_die() = Arc::new(state.image.clone());
        Ok(StateMachine { dir: dir.to_path_buf(), state, image, changed, snapshot, snapshots_built: 0 })
    }

    fn publish(&self) {
        *self.image.write().or_die() = Arc::new(self.state.image.clone());
        self.changed.send_modify(|v| *v += 1);
    }

    fn save_snapshot(&self, s: &StoredSnapshot) -> Result<(), StorageError<NodeId>> {
        write_snapshot(&self.dir, s)
    }
}

/// Builds a snapshot from a copy of the state taken when asked.
pub struct SnapshotBuilder {
    state: SmState,
    dir: PathBuf,
    id: u64,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let data = bincode::serialize(&self.state).map_err(io_err)?;
        let meta = SnapshotMeta {
            last_log_id: self.state.last_applied,
            last_membership: self.state.membership.clone(),
            snapshot_id: format!("{}-{}", self.state.last_applied.map(|l| l.index).unwrap_or(0), self.id),
        };
        let stored = StoredSnapshot { meta: meta.clone(), data: data.clone() };
        write_snapshot(&self.dir, &stored)?;
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(data)) })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, openraft::BasicNode>), StorageError<NodeId>> {
        Ok((self.state.last_applied, self.state.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<CommandResult>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut out = Vec::new();
        for e in entries {
            self.state.last_applied = Some(e.log_id);
            self.state.image.applied_index = e.log_id.index;
            out.push(match e.payload {
                EntryPayload::Blank => CommandResult::Done,
                EntryPayload::Normal(c) => self.state.image.apply(&c),
                EntryPayload::Membership(m) => {
                    self.state.membership = StoredMembership::new(Some(e.log_id), m);
                    CommandResult::Done
                }
            });
        }
        self.publish();
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.snapshots_built += 1;
        SnapshotBuilder { state: self.state.clone(), dir: self.dir.clone(), id: self.snapshots_built }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, openraft::BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let data = snapshot.into_inner();
        let state = decode_state(&data).map_err(|e| io_err(std::io::Error::other(e)))?;
        let stored = StoredSnapshot { meta: meta.clone(), data };
        self.save_snapshot(&stored)?;
        self.state = state;
        self.snapshot = Some(stored);
        self.publish();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        // the file is the latest built or installed snapshot
        let latest = read_snapshot(&self.dir).ok().flatten().or_else(|| self.snapshot.clone());
        Ok(latest.map(|s| Snapshot { meta: s.meta, snapshot: Box::new(Cursor::new(s.data)) }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::CommittedLeaderId;
    use std::sync::RwLock;

    fn entry(index: u64, cmd: Option<super::super::Command>) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: match cmd {
                Some(c) => EntryPayload::Normal(c),
                None => EntryPayload::Blank,
            },
        }
    }

    #[tokio::test]
    async fn the_state_machine_applies_and_snapshots() {
        let dir = tempfile::tempdir().unwrap();
        let image: SharedImage = Arc::new(RwLock::new(Arc::new(MetadataImage::default())));
        let (tx, _rx) = tokio::sync::watch::channel(0);
        let mut sm = StateMachine::open(dir.path(), image.clone(), tx).unwrap();
        let cmds =
            (1..=2).map(|i| entry(i, Some(super::super::Command::AllocateProducerIds { node_id: 1, count: 10 })));
        let out = sm.apply(cmds).await.unwrap();
        assert_eq!(out[1], CommandResult::ProducerIds { first: 10, count: 10 });
        assert_eq!(image.read().unwrap().next_producer_id, 20);
        let snap = sm.get_snapshot_builder().await.build_snapshot().await.unwrap();
        assert_eq!(snap.meta.last_log_id.map(|l| l.index), Some(2));
        // a new state machine starts from the snapshot
        let image2: SharedImage = Arc::new(RwLock::new(Arc::new(MetadataImage::default())));
        let (tx2, _rx2) = tokio::sync::watch::channel(0);
        let mut sm2 = StateMachine::open(dir.path(), image2.clone(), tx2).unwrap();
        assert_eq!(image2.read().unwrap().next_producer_id, 20);
        assert_eq!(sm2.applied_state().await.unwrap().0.map(|l| l.index), Some(2));
        assert!(dir.path().join(SNAPSHOT_FILE).exists() && !dir.path().join(JSON_SNAPSHOT_FILE).exists());
    }

    /// A snapshot of an earlier version (`raft-snapshot.json`, its state JSON) is read on open
    /// and replaced by a binary one at the next snapshot; a JSON state from an old leader
    /// installs too. The binary file is smaller.
    #[tokio::test]
    async fn a_json_snapshot_of_an_earlier_version_is_read_and_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let mut state = SmState::default();
        state.image.next_producer_id = 77;
        state.image.cluster_id = "c1".into();
        state.last_applied = Some(LogId::new(CommittedLeaderId::new(1, 1), 5));
        let meta = SnapshotMeta {
            last_log_id: state.last_applied,
            last_membership: StoredMembership::default(),
            snapshot_id: "5-1".into(),
        };
        let old = StoredSnapshot { meta: meta.clone(), data: serde_json::to_vec(&state).unwrap() };
        let json = serde_json::to_vec(&old).unwrap();
        std::fs::write(dir.path().join(JSON_SNAPSHOT_FILE), &json).unwrap();
        let image: SharedImage = Arc::new(RwLock::new(Arc::new(MetadataImage::default())));
        let (tx, _rx) = tokio::sync::watch::channel(0);
        let mut sm = StateMachine::open(dir.path(), image.clone(), tx).unwrap();
        assert_eq!(image.read().unwrap().next_producer_id, 77);
        assert_eq!(sm.applied_state().await.unwrap().0.map(|l| l.index), Some(5));
        sm.get_snapshot_builder().await.build_snapshot().await.unwrap();
        assert!(!dir.path().join(JSON_SNAPSHOT_FILE).exists(), "the JSON snapshot is replaced");
        let bin = std::fs::metadata(dir.path().join(SNAPSHOT_FILE)).unwrap().len() as usize;
        assert!(bin < json.len(), "binary {bin} bytes against JSON {}", json.len());
        // an old leader's JSON state installs
        state.image.next_producer_id = 99;
        let data = Box::new(Cursor::new(serde_json::to_vec(&state).unwrap()));
        sm.install_snapshot(&meta, data).await.unwrap();
        assert_eq!(image.read().unwrap().next_producer_id, 99);
    }
}
