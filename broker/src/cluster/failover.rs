//! Failover without waiting out Raft's timers when a leader's process is gone (decision 0028).
//!
//! openraft's follower waits its leader lease (`election_timeout_max`) plus a random election
//! timeout after the last heartbeat before it stands, and a voter refuses every candidate while
//! the lease of its own committed vote runs: 3–4 s for partition groups, and clients then
//! need a metadata round to find the new leader.
//!
//! A killed broker's sockets are closed by its kernel at once, so a follower sees the leader's
//! append connection end. That alone proves nothing (a leader drops a connection whose RPC
//! timed out), so the follower then tries the leader's Raft port: refused means no process
//! listens there. Meanwhile and then, for that group only:
//! - clients are told the partition has no leader (LEADER_NOT_AVAILABLE, leader -1) instead of
//!   being sent to a dead broker (`replica::Lost`); they ask again within 100 ms;
//! - every live voter stands for election at once, then again in a higher term in id order
//!   until one leads (see `elect_without` for why this gets past the voters' leases, and why a
//!   broker started in the last 10 s lets the others win).
//!
//! A leader that is alive but unreachable, or paused, still goes by the timers: its port
//! answers, or its connections stay open.

use super::replica::{Ballots, Lost};
use super::{ClusterNode, NodeId};
use crate::replication::types::GroupKey;
use crate::sync::OrDie as _;
use openraft::{BasicNode, RaftTypeConfig};
use std::sync::Arc;
use std::time::Duration;

/// The Raft group a peer's connection carried appends for, and the leader that sent them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Carried {
    Metadata(NodeId),
    Partition(GroupKey, NodeId),
    Shard(GroupKey, NodeId),
}

/// The leader's connection to this broker ended: find out whether its process is gone, and if
/// so elect a new leader for the group at once (see the module's doc).
pub fn connection_ended(node: Arc<ClusterNode>, carried: Carried) {
    tokio::spawn(async move {
        match carried {
            Carried::Metadata(leader) => {
                let what = "the metadata quorum".to_string();
                elect_without(&node, &node.raft, leader, None, &node.metadata_ballots, what).await
            }
            Carried::Partition(key, leader) => {
                // (a replica healing a damaged Raft log never stands: `replica::heal`)
                let Some(rep) = node.replica(&key).filter(|r| !r.is_healing()) else { return };
                let what = format!("{}-{}", key.0, key.1);
                elect_without(&node, &rep.raft, leader, Some(&rep.lost), &rep.ballots, what).await
            }
            Carried::Shard(key, leader) => {
                let Some(rep) = node.shard_replica(&key).filter(|r| !r.is_healing()) else { return };
                let what = format!("coordinator shard {}-{}", key.0, key.1);
                elect_without(&node, &rep.raft, leader, Some(&rep.lost), &rep.ballots, what).await
            }
        }
    });
}

/// Whether no process listens at `addr`: refused on any of four tries over 300 ms (a dying
/// process may close its connections before its listener, and a killed broker may be started
/// again within that time, so one accepted connection proves nothing: with "accepted twice =
/// alive" failover after a SIGKILL took p50 814 ms instead of 126 ms — decision 0033).
async fn gone(addr: &str) -> bool {
    for wait in [0u64, 50, 100, 150] {
        tokio::time::sleep(Duration::from_millis(wait)).await;
        match tokio::time::timeout(Duration::from_millis(200), tokio::net::TcpStream::connect(addr)).await {
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => return true,
            _ => {}
        }
    }
    false
}

async fn elect_without<C>(
    node: &ClusterNode,
    raft: &openraft::Raft<C>,
    leader: NodeId,
    lost: Option<&Lost>,
    ballots: &Ballots,
    what: String,
) where
    C: RaftTypeConfig<NodeId = NodeId, Node = BasicNode>,
{
    let named = |raft: &openraft::Raft<C>| {
        let m = raft.metrics();
        let m = m.borrow();
        (m.current_leader, m.current_term, m.membership_config.voter_ids().collect::<Vec<NodeId>>())
    };
    let (current, term, voters) = named(raft);
    if current != Some(leader) || leader == node.node_id {
        return;
    }
    let Some(addr) = node.addr_of(leader) else { return };
    // a live leader whose connection merely ended (an RPC timed out under load and the sender
    // dropped it) is never reported lost: only a refused port is (on the first try when the
    // process is gone). Marking it lost before trying the port made Metadata and coordinator
    // routing flap to "no leader" for 300 ms at every dropped connection — franz-go's
    // TestTxnEtl on three brokers got NOT_COORDINATOR from it (decision 0033)
    if !gone(&addr).await {
        return;
    }
    let (current, _, _) = named(raft);
    if current != Some(leader) {
        return;
    }
    // clients are told there is no leader until another is elected (a client that lost its
    // connection to the leader asks at once; told "no leader" it asks again within 100 ms,
    // told the old leader it waits for its next refresh)
    if let Some(lost) = lost {
        lost.set(leader, term);
    }
    // and so for every group it led here, at once: their own connections' ends reach this
    // point one task after another, up to 70 ms apart under a few hundred groups, and a
    // client that asked for metadata meanwhile was sent to the dead broker, which librdkafka
    // then waits out until its next refresh (decision 0049)
    if announce(leader) {
        mark_lost(node, leader);
    }
    // voters in id order, the gone leader left out: this broker's place among them
    let Some(rank) = voters.iter().filter(|v| **v != leader).position(|v| *v == node.node_id) else { return };
    tracing::debug!(term, rank, "raft leader {leader} of {what} is gone: standing for election");
    // A voter refuses candidates while the lease of its *committed* vote runs, but a
    // candidate's vote has no lease: every live voter first stands itself. Votes in one term
    // are ordered by node id (openraft's advanced leader ids), so a broker started in the
    // last 10 s lets the others win: they stand in two terms at once, it stands in one a
    // moment later — its vote request then meets a higher term and it takes that term as
    // its (uncommitted) vote. Clients that saw a restarted broker go down back off from
    // reconnecting to it (librdkafka: up to reconnect.backoff.max.ms, 10 s), and its log is
    // the likelier to be behind.
    let fresh = node.started.elapsed() < Duration::from_secs(10);
    let terms = if fresh {
        tokio::time::sleep(Duration::from_millis(30)).await;
        1
    } else {
        2
    };
    for _ in 0..terms {
        if raft.trigger().elect().await.is_err() {
            return;
        }
    }
    // then stand again in a higher term until some voter leads: the first voter in id order
    // first, the others 150 ms apart (a voter refuses a candidate whose log is shorter than its
    // own: the next one wins) — but not while another live voter holds this broker's vote.
    // That candidate's log is at least as long as this one's and it has a quorum with this
    // vote; when every group the gone broker led elects at once its answers can take a few
    // hundred ms. Standing again then deposed it the moment it won, and as its log was now the
    // longer (its first entry as leader), it refused this broker's every later term: 4.7 s
    // until its own timer made it stand again (decision 0049).
    // But a vote merely adopted does not hold it back when its candidate asked with a shorter
    // log than this broker's: a candidate whose request was refused takes the higher vote the
    // refusal shows it, so the voter with the longer log ended up "voting" for the other,
    // whose requests it refused for their shorter log. Neither stood again until openraft's
    // timer did, 2–4 s later (decision 0055). Standing against every adopted vote instead
    // brought 0049's duel back: the adopted vote was about to be granted.
    let mut wait = Duration::from_millis(100 + 150 * u64::try_from(rank).unwrap_or(8) + if fresh { 300 } else { 0 });
    for _ in 0..4 {
        tokio::time::sleep(wait).await;
        let (current, _, _) = named(raft);
        if current.is_some_and(|l| l != leader) {
            return;
        }
        wait = Duration::from_millis(300);
        let (voted_for, vote_term) = {
            let m = raft.metrics();
            let id = *m.borrow().vote.leader_id();
            (id.node_id, id.term)
        };
        if voted_for != node.node_id && voted_for != leader && ballots.holds_back(voted_for, vote_term) {
            continue;
        }
        if raft.trigger().elect().await.is_err() {
            return;
        }
    }
}

/// One INFO line per gone broker (not one per group it led), at most every 10 s; whether
/// this call said it (the first to find it gone).
fn announce(leader: NodeId) -> bool {
    static SAID: std::sync::Mutex<Option<(NodeId, std::time::Instant)>> = std::sync::Mutex::new(None);
    let Ok(mut said) = SAID.lock() else { return false };
    if said.is_some_and(|(l, at)| l == leader && at.elapsed() < Duration::from_secs(10)) {
        return false;
    }
    *said = Some((leader, std::time::Instant::now()));
    tracing::info!(
        "broker {leader} is gone (its Raft connection ended and its Raft port refuses connections): electing new \
         leaders for the groups it led"
    );
    true
}

/// Report no leader for every partition and coordinator shard group whose leader here is the
/// gone broker `leader` (each until it moves on to a new term).
fn mark_lost(node: &ClusterNode, leader: NodeId) {
    fn mark<C: RaftTypeConfig<NodeId = NodeId>>(raft: &openraft::Raft<C>, lost: &Lost, leader: NodeId) {
        let (current, term) = {
            let m = raft.metrics();
            let m = m.borrow();
            (m.current_leader, m.current_term)
        };
        if current == Some(leader) {
            lost.set(leader, term);
        }
    }
    let partitions: Vec<_> = node.replicas.read().or_die().values().cloned().collect();
    for r in &partitions {
        mark(&r.raft, &r.lost, leader);
    }
    let shards: Vec<_> = node.shards.read().or_die().values().cloned().collect();
    for r in &shards {
        mark(&r.raft, &r.lost, leader);
    }
}
