//! A `double` group's conversion to one log per replica (decision 0056).
//!
//! A partition group created with `replication.log.format=double` keeps a Raft log of its own
//! beside the partition log. Raft's own entries (blank, membership) take no offsets there; with
//! one log per replica they are control batches that do. So a group converts at one Raft index
//! every replica agrees on, or its replicas would hold the same records at different offsets:
//!
//! 1. Its leader, on a broker whose `replication.log.format` is `single`, proposes
//!    `PartCommand::Convert` and takes no write after it (`replica::Conversion`'s gate: a write
//!    is refused with NOT_LEADER_OR_FOLLOWER, and the client retries).
//! 2. Each replica that applies it (entry C) records C and its partition log's end E in
//!    `applied.json`, applies nothing more to the partition, takes no snapshot, and its group is
//!    restarted (`reconcile.rs`).
//! 3. At the restart, [`convert`] builds the Raft log kept in the partition log: entry C is its
//!    snapshot point at offset E, and the entries after C in the old Raft log (Raft's own, or
//!    batches a converted leader sent) become its first batches, in order — the same on every
//!    replica, since every replica converts at C. The old Raft log's files are deleted.
//! 4. A replica that was away at C and is sent a converted replica's snapshot (its header says
//!    so) converts at the snapshot's last entry the same way.
//!
//! A conversion cut short by a crash is done again at the next start: `applied.json` keeps C
//! until the new log is complete, and the partition log is cut back to E first.

// openraft's traits return its (large) StorageError.
#![allow(clippy::result_large_err)]

use super::replica::{link_snapshot, own_raft_log_files, read_applied, save_applied, Applied, SINGLE_LOG_STATE};
use crate::replication::log_store::LogStore;
use crate::replication::partition_log_store::{EntryIndex as _, PartitionLogStore, SegmentLog};
use crate::replication::types::{PartConfig, PartitionLog};
use openraft::storage::RaftLogStorage as _;
use openraft::RaftLogReader as _;
use std::path::Path;
use std::sync::Arc;

/// Is a conversion recorded in `dir` and not yet complete (the old Raft log still there)?
pub fn pending(dir: &Path) -> bool {
    read_applied(dir).is_ok_and(|a| a.convert_at.is_some()) && !own_raft_log_files(dir).is_empty()
}

/// A converted replica's leftovers: the old Raft log's files, once the new log is complete.
fn remove_leftovers(dir: &Path) {
    for f in own_raft_log_files(dir) {
        let _ = std::fs::remove_file(f);
    }
}

/// Before the replica in `dir` starts: convert it if it applied its group's conversion and has
/// not converted yet, and delete what a conversion that stopped after its new log was complete
/// left.
pub async fn prepare(dir: &Path, partition: &dyn PartitionLog, segments: &Arc<dyn SegmentLog>) -> anyhow::Result<()> {
    if pending(dir) {
        return convert(dir, partition, segments).await;
    }
    if dir.join(SINGLE_LOG_STATE).exists() {
        remove_leftovers(dir);
    }
    Ok(())
}

/// Convert the replica in `dir` (see the module's comment): from here on its Raft log is its
/// partition's log. Before its group starts.
async fn convert(dir: &Path, partition: &dyn PartitionLog, segments: &Arc<dyn SegmentLog>) -> anyhow::Result<()> {
    let applied = read_applied(dir)?;
    let Some(at) = applied.convert_at else { anyhow::bail!("no conversion recorded") };
    let end = applied.log_end;
    let name = partition.name();
    // the old Raft log: its vote, commit point, and the entries after the conversion
    let mut old = LogStore::<PartConfig>::open(dir)?;
    let vote = old.read_vote().await?;
    let committed = old.read_committed().await?;
    let state = old.get_log_state().await?;
    if state.last_purged_log_id.is_some_and(|p| p.index > at.index) {
        anyhow::bail!("{name}: the Raft log was purged past the conversion's entry {}", at.index);
    }
    let last = state.last_log_id.map_or(0, |l| l.index);
    let entries = if last > at.index { old.try_get_log_entries(at.index + 1..=last).await? } else { Vec::new() };
    drop(old);
    // the partition log as it was at the conversion (a conversion cut short wrote past it)
    let held = segments.segment_log().log_end_offset();
    if held < end {
        anyhow::bail!("{name}: the partition log ends at {held}, before offset {end} where the conversion left it");
    }
    if held > end {
        segments.truncate_entries(end)?;
    }
    segments.use_terms()?;
    let _ = std::fs::remove_file(dir.join(SINGLE_LOG_STATE));
    let store = PartitionLogStore::<PartConfig, dyn SegmentLog>::open(dir, segments.clone())?;
    let mut writer = store.clone();
    if let Some(v) = vote {
        writer.save_vote(&v).await?;
    }
    // entry C is the snapshot point at offset E; the next entry is the batch at E
    store.installed(Some(at), end)?;
    let carried = entries.len();
    store.append_durably(entries)?;
    writer.save_committed(committed).await?;
    // a snapshot at C (a replica that needs entries up to C is sent it), then `applied.json`
    // without the conversion: from here on the new log is complete
    let applied = Applied { convert_at: None, ..applied };
    save_applied(dir, partition, &applied).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    link_snapshot(dir, partition, &applied, Some(end), true).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    remove_leftovers(dir);
    tracing::info!(
        partition = name.as_str(),
        "converted to one log per replica at Raft entry {} (offset {end}), {carried} later entries carried over",
        at.index
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::Partition;
    use crate::replication::types::{NodeId, PartCommand};
    use openraft::{BasicNode, CommittedLeaderId, Entry, EntryPayload, LogId, Membership, StoredMembership, Vote};
    use sluice_protocol::batch::{BatchBuilder, NewRecord};
    use sluice_storage::{Log, LogConfig};

    fn id(term: u64, node: NodeId, index: u64) -> LogId<NodeId> {
        LogId::new(CommittedLeaderId::new(term, node), index)
    }

    fn produce(tag: u8) -> PartCommand {
        let rec = NewRecord { timestamp: 1000, value: Some(bytes::Bytes::from(vec![tag; 20])), ..Default::default() };
        let batch = BatchBuilder::default().build(&[rec]).unwrap().to_vec();
        PartCommand::Produce { batch, now_ms: 5, verified: false, verified_from: None }
    }

    /// A replica of a `double` group that applied the conversion at entry 4 (offset `end`), with
    /// Raft's own entries after it in its Raft log (a new leader's blank, a membership), converts
    /// at its start: entry 4 is its Raft log's snapshot point at `end`, the later entries are its
    /// first batches (control batches at `end` and `end + 1`), its vote and commit point are
    /// kept, a snapshot at entry 4 says it was taken with one log per replica, and the old Raft
    /// log is gone. Here the conversion had been cut short once (a half-written state file, a
    /// batch written past `end`): it is done again from the start.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_entries_after_the_conversion_become_the_first_batches_of_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let rdir = dir.path().join("replica");
        std::fs::create_dir_all(&rdir).unwrap();
        let log = Log::open(&dir.path().join("p"), LogConfig { retention_ms: -1, ..LogConfig::default() }).unwrap();
        let p = Arc::new(Partition::new("t".into(), 0, log, Arc::new(tokio::sync::Notify::new())));
        let partition: Arc<dyn PartitionLog> = p.clone();
        let segments: Arc<dyn SegmentLog> = p.clone();
        let members: std::collections::BTreeMap<NodeId, BasicNode> =
            (1..=3).map(|n| (n, BasicNode { addr: format!("127.0.0.1:{n}") })).collect();
        let membership = Membership::new(vec![members.keys().copied().collect()], members.clone());
        let mut entries = vec![Entry { log_id: id(1, 1, 0), payload: EntryPayload::Membership(membership.clone()) }];
        for i in 1..=3 {
            let mut cmd = produce(i as u8);
            partition.apply(&mut cmd);
            entries.push(Entry { log_id: id(1, 1, i), payload: EntryPayload::Normal(cmd) });
        }
        entries.push(Entry { log_id: id(1, 1, 4), payload: EntryPayload::Normal(PartCommand::Convert) });
        let end = partition.offsets().1;
        assert_eq!(end, 3);
        let after = vec![
            Entry { log_id: id(2, 2, 5), payload: EntryPayload::<PartConfig>::Blank },
            Entry { log_id: id(2, 2, 6), payload: EntryPayload::Membership(membership.clone()) },
        ];
        entries.extend(after.iter().cloned());
        let mut old = LogStore::<PartConfig>::open(&rdir).unwrap();
        old.append_now(entries).unwrap();
        let vote = Vote::new_committed(2, 2);
        old.save_vote(&vote).await.unwrap();
        old.save_committed(Some(id(2, 2, 6))).await.unwrap();
        drop(old);
        let applied = Applied {
            last_applied: Some(id(1, 1, 4)),
            membership: StoredMembership::new(Some(id(1, 1, 0)), membership.clone()),
            log_end: end,
            convert_at: Some(id(1, 1, 4)),
        };
        save_applied(&rdir, &*partition, &applied).unwrap();
        // cut short before: a half-written state file, and a batch past the conversion's end
        std::fs::write(rdir.join(SINGLE_LOG_STATE), b"{").unwrap();
        partition.apply(&mut produce(9));
        assert!(pending(&rdir));

        convert(&rdir, &*partition, &segments).await.unwrap();

        assert!(!pending(&rdir));
        assert!(own_raft_log_files(&rdir).is_empty(), "the old Raft log is gone");
        assert_eq!(partition.offsets().1, end + 2, "the two entries after the conversion, and nothing else");
        let again = read_applied(&rdir).unwrap();
        assert_eq!((again.convert_at, again.last_applied, again.log_end), (None, Some(id(1, 1, 4)), end));
        let mut store = PartitionLogStore::<PartConfig, dyn SegmentLog>::open(&rdir, segments.clone()).unwrap();
        let state = store.get_log_state().await.unwrap();
        assert_eq!((state.last_purged_log_id, state.last_log_id), (Some(id(1, 1, 4)), Some(id(2, 2, 6))));
        assert_eq!(store.read_vote().await.unwrap(), Some(vote));
        assert_eq!(store.read_committed().await.unwrap(), Some(id(2, 2, 6)));
        assert_eq!(store.try_get_log_entries(5..=6).await.unwrap(), after);
        assert_eq!(store.end_of(5), Some(end + 1));
        let snaps: Vec<_> = std::fs::read_dir(rdir.join("snapshots")).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(snaps.len(), 1);
        let snap: serde_json::Value =
            serde_json::from_slice(&std::fs::read(snaps[0].join("snapshot.json")).unwrap()).unwrap();
        assert_eq!(snap["header"]["single_log"], true);
        assert_eq!(snap["header"]["log_end"], end);
        assert_eq!(snap["meta"]["last_log_id"]["index"], 4);
        // the next entry goes after them
        store.append_durably(vec![Entry { log_id: id(2, 2, 7), payload: EntryPayload::Blank }]).unwrap();
        assert_eq!(store.end_of(7), Some(end + 3));
    }
}
