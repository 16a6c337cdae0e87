//! Partition reassignment, driven by each partition group's leader (AlterPartitionReassignments
//! records the target in the metadata image; this moves the Raft group's voters to it).

use super::replica::Replica;
use super::{ClusterNode, Command};
use crate::replication::types::{GroupKey, NodeId};
use crate::sync::OrDie as _;
use openraft::BasicNode;
use std::sync::Arc;
use std::time::Duration;

/// Reassignment, on each partition group's leader: when the image assigns the partition to
/// other replicas, add the new ones as learners (they catch up from the Raft log), then make
/// the assigned replicas the voters (joint consensus), then report the move done in the
/// metadata quorum (the replicas left out stop then). Checked every 500 ms.
pub fn spawn_membership_driver(node: &Arc<ClusterNode>) {
    let weak = Arc::downgrade(node);
    let busy: Arc<std::sync::Mutex<std::collections::HashSet<GroupKey>>> = Arc::default();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let Some(node) = weak.upgrade() else { return };
            let me = i32::try_from(node.node_id).unwrap_or(-1);
            let image = node.image();
            let replicas: Vec<Arc<Replica>> = node.replicas.read().or_die().values().cloned().collect();
            for r in replicas {
                if r.leader() != Some(me) {
                    continue;
                }
                let Some(info) = image.topics.get(&r.key.0).filter(|t| t.id == r.topic_id) else { continue };
                let Some(target) = usize::try_from(r.key.1).ok().and_then(|p| info.replicas.get(p)).cloned() else {
                    continue;
                };
                let target_set: std::collections::BTreeSet<i32> = target.iter().copied().collect();
                let settled = r.voters() == target_set;
                if settled && !info.moving.contains_key(&r.key.1) {
                    continue;
                }
                if !busy.lock().or_die().insert(r.key.clone()) {
                    continue;
                }
                let (node, busy) = (node.clone(), busy.clone());
                tokio::spawn(async move {
                    if let Err(e) = move_replicas(&node, &r, &target).await {
                        tracing::warn!(topic = r.key.0.as_str(), partition = r.key.1, "reassignment: {e}; retrying");
                    }
                    busy.lock().or_die().remove(&r.key);
                });
            }
        }
    });
}

async fn move_replicas(node: &ClusterNode, r: &Replica, target: &[i32]) -> anyhow::Result<()> {
    let voters = r.voters();
    for id in target.iter().filter(|id| !voters.contains(id)) {
        let nid = NodeId::try_from(*id)?;
        let addr = node.addr_of(nid).ok_or_else(|| anyhow::anyhow!("broker {id} has no Raft address"))?;
        // blocking: returns once the learner has caught up with the leader's log
        tokio::time::timeout(Duration::from_secs(300), r.raft.add_learner(nid, BasicNode { addr }, true))
            .await
            .map_err(|_| anyhow::anyhow!("broker {id} did not catch up within 300 s"))?
            .map_err(|e| anyhow::anyhow!("adding broker {id}: {e}"))?;
    }
    if r.voters() != target.iter().copied().collect() {
        let members: std::collections::BTreeSet<NodeId> =
            target.iter().filter_map(|id| NodeId::try_from(*id).ok()).collect();
        tokio::time::timeout(Duration::from_secs(60), r.raft.change_membership(members, false))
            .await
            .map_err(|_| anyhow::anyhow!("membership change not committed within 60 s"))?
            .map_err(|e| anyhow::anyhow!("membership change: {e}"))?;
    }
    tracing::info!(topic = r.key.0.as_str(), partition = r.key.1, "replicas moved to {target:?}");
    node.write(
        Command::ReassignmentDone { name: r.key.0.clone(), partition: r.key.1, replicas: target.to_vec() },
        Duration::from_secs(10),
    )
    .await?;
    Ok(())
}
