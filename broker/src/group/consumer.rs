//! The consumer group protocol of KIP-848 (`group.protocol=consumer`), as pure functions: the
//! members heartbeat their subscriptions, the broker computes the target assignment (a sticky,
//! balanced "uniform" assignor) and hands each member its share — revoking first, assigning a
//! partition only once its previous owner has confirmed giving it up.
//!
//! Epochs: the group epoch moves with membership, subscriptions or topic metadata; the target
//! assignment is recomputed at that epoch; a member's epoch moves to it once the member has no
//! revocation pending. A heartbeat with another epoch than the member's is FENCED_MEMBER_EPOCH
//! (the client drops its partitions and rejoins with epoch 0).
//!
//! Membership is not persisted: after a broker restart members get UNKNOWN_MEMBER_ID and rejoin
//! (their committed offsets are durable as for classic groups).

use crate::group::error::GroupError;
use std::collections::{BTreeMap, BTreeSet};

pub type Tp = (String, i32);

#[derive(Debug, Clone, PartialEq)]
pub struct CMember {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub subscribed: BTreeSet<String>,
    pub epoch: i32,
    /// What the member owns, as last told (without partitions being revoked).
    pub assigned: BTreeSet<Tp>,
    /// Told to give these up; not yet confirmed.
    pub revoking: BTreeSet<Tp>,
    /// The member epoch at which each partition of `assigned` and `revoking` was given to the
    /// member (KIP-1251's assignment epoch): a commit at an older member epoch stands for the
    /// partitions held since then.
    pub assigned_at: BTreeMap<Tp, i32>,
    pub revoking_since_ms: i64,
    pub last_heartbeat_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ConsumerGroup {
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub members: BTreeMap<String, CMember>,
    pub target: BTreeMap<String, BTreeSet<Tp>>,
}

/// One ConsumerGroupHeartbeat.
pub struct Heartbeat {
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rebalance_timeout_ms: i32,
    /// `None`: unchanged.
    pub subscribed: Option<BTreeSet<String>>,
    /// Partitions the member owns now (`None`: unchanged).
    pub owned: Option<BTreeSet<Tp>>,
    pub client_id: String,
    pub client_host: String,
    /// A fresh member id, used when the member has none (v0).
    pub new_member_id: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HeartbeatAnswer {
    pub member_id: String,
    pub member_epoch: i32,
    /// `None` after leaving.
    pub assignment: Option<BTreeSet<Tp>>,
}

impl ConsumerGroup {
    /// Kafka's state names for consumer groups.
    pub fn state_name(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.assignment_epoch < self.group_epoch {
            "Assigning"
        } else if self.members.values().any(|m| m.epoch != self.assignment_epoch || !m.revoking.is_empty()) {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    fn remove(&mut self, id: &str) {
        if self.members.remove(id).is_some() {
            self.target.remove(id);
            self.group_epoch += 1;
        }
    }

    /// The target assignment for the current members and topics (`partitions`: topic → count).
    fn compute_target(&self, partitions: &dyn Fn(&str) -> Option<i32>) -> BTreeMap<String, BTreeSet<Tp>> {
        let mut all: Vec<Tp> = Vec::new();
        let topics: BTreeSet<&String> = self.members.values().flat_map(|m| m.subscribed.iter()).collect();
        for t in topics {
            for p in 0..partitions(t).unwrap_or(0) {
                all.push((t.clone(), p));
            }
        }
        let mut out: BTreeMap<String, BTreeSet<Tp>> =
            self.members.keys().map(|k| (k.clone(), BTreeSet::new())).collect();
        if self.members.is_empty() {
            return out;
        }
        let quota = all.len().div_ceil(self.members.len());
        let eligible = |tp: &Tp, m: &str| self.members.get(m).is_some_and(|x| x.subscribed.contains(&tp.0));
        let mut unassigned = Vec::new();
        // sticky: a partition stays with its previous owner while that owner is under quota
        for tp in &all {
            let prev = self.target.iter().find(|(_, s)| s.contains(tp)).map(|(m, _)| m.clone());
            match prev {
                Some(m) if eligible(tp, &m) && out.get(&m).is_some_and(|s| s.len() < quota) => {
                    if let Some(s) = out.get_mut(&m) {
                        s.insert(tp.clone());
                    }
                }
                _ => unassigned.push(tp.clone()),
            }
        }
        for tp in unassigned {
            let best = out
                .iter()
                .filter(|(m, _)| eligible(&tp, m))
                .min_by_key(|(m, s)| (s.len(), (*m).clone()))
                .map(|(m, _)| m.clone());
            if let Some(m) = best {
                if let Some(s) = out.get_mut(&m) {
                    s.insert(tp);
                }
            }
        }
        out
    }

    /// Handle one heartbeat.
    pub fn heartbeat(
        &mut self,
        h: Heartbeat,
        partitions: &dyn Fn(&str) -> Option<i32>,
        now: i64,
    ) -> Result<HeartbeatAnswer, GroupError> {
        if h.member_epoch == -1 || h.member_epoch == -2 {
            self.remove(&h.member_id);
            return Ok(HeartbeatAnswer { member_id: h.member_id, member_epoch: h.member_epoch, assignment: None });
        }
        let id = if h.member_id.is_empty() { h.new_member_id.clone() } else { h.member_id.clone() };
        if h.member_epoch == 0 {
            let Some(subscribed) = h.subscribed.clone() else {
                return Err(GroupError::InvalidRequest);
            };
            // a (re)join: whatever the member owned before is gone on its side
            self.remove(&id);
            self.members.insert(
                id.clone(),
                CMember {
                    id: id.clone(),
                    instance_id: h.instance_id.clone(),
                    client_id: h.client_id.clone(),
                    client_host: h.client_host.clone(),
                    rebalance_timeout_ms: h.rebalance_timeout_ms,
                    subscribed,
                    epoch: 0,
                    assigned: BTreeSet::new(),
                    revoking: BTreeSet::new(),
                    assigned_at: BTreeMap::new(),
                    revoking_since_ms: now,
                    last_heartbeat_ms: now,
                },
            );
            self.group_epoch += 1;
        } else {
            let Some(m) = self.members.get_mut(&id) else {
                return Err(GroupError::UnknownMemberId);
            };
            if h.member_epoch != m.epoch {
                return Err(GroupError::FencedMemberEpoch);
            }
            m.last_heartbeat_ms = now;
            if let Some(s) = &h.subscribed {
                if *s != m.subscribed {
                    m.subscribed = s.clone();
                    self.group_epoch += 1;
                }
            }
        }
        // the target follows membership, subscriptions and partition counts
        let target = self.compute_target(partitions);
        if target != self.target {
            self.target = target;
            if self.assignment_epoch == self.group_epoch {
                self.group_epoch += 1;
            }
        }
        self.assignment_epoch = self.group_epoch;
        self.reconcile(&id, h.owned.as_ref(), now);
        let m = self.members.get(&id).ok_or(GroupError::UnknownMemberId)?;
        Ok(HeartbeatAnswer { member_id: id, member_epoch: m.epoch, assignment: Some(m.assigned.clone()) })
    }

    /// Move one member toward its target: revoke first, then take what no one else holds.
    fn reconcile(&mut self, id: &str, owned: Option<&BTreeSet<Tp>>, now: i64) {
        let target = self.target.get(id).cloned().unwrap_or_default();
        let held_by_others: BTreeSet<Tp> = self
            .members
            .values()
            .filter(|m| m.id != id)
            .flat_map(|m| m.assigned.iter().chain(m.revoking.iter()).cloned())
            .collect();
        let epoch = self.assignment_epoch;
        let Some(m) = self.members.get_mut(id) else { return };
        if !m.revoking.is_empty() {
            match owned {
                Some(o) if o.is_disjoint(&m.revoking) => {
                    for tp in std::mem::take(&mut m.revoking) {
                        m.assigned_at.remove(&tp);
                    }
                }
                _ => return, // still waiting for the member to let go
            }
        }
        let to_revoke: BTreeSet<Tp> = m.assigned.difference(&target).cloned().collect();
        if !to_revoke.is_empty() {
            m.assigned.retain(|tp| !to_revoke.contains(tp));
            m.revoking = to_revoke;
            m.revoking_since_ms = now;
            return;
        }
        for tp in target {
            if !held_by_others.contains(&tp) && m.assigned.insert(tp.clone()) {
                m.assigned_at.insert(tp, epoch);
            }
        }
        m.epoch = epoch;
    }

    /// Session expiry (`session_timeout_ms`) and members that never confirm a revocation within
    /// their rebalance timeout: removed, their partitions reassigned.
    pub fn tick(&mut self, now: i64, session_timeout_ms: i64) -> usize {
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| {
                now - m.last_heartbeat_ms > session_timeout_ms
                    || (!m.revoking.is_empty() && now - m.revoking_since_ms > i64::from(m.rebalance_timeout_ms))
            })
            .map(|m| m.id.clone())
            .collect();
        for id in &gone {
            self.remove(id);
        }
        gone.len()
    }

    /// When [`ConsumerGroup::tick`] next removes a member, if nothing else happens first.
    pub fn next_deadline(&self, session_timeout_ms: i64) -> Option<i64> {
        self.members
            .values()
            .map(|m| {
                let session = m.last_heartbeat_ms + session_timeout_ms + 1;
                if m.revoking.is_empty() {
                    session
                } else {
                    session.min(m.revoking_since_ms + i64::from(m.rebalance_timeout_ms) + 1)
                }
            })
            .min()
    }

    /// OffsetCommit (v9+) or TxnOffsetCommit by a member of `committed`, with the member epoch in
    /// place of the generation.
    ///
    /// An epoch older than the member's is accepted when every committed partition has been the
    /// member's since that epoch or before (KIP-1251, Kafka 4.3): the member's epoch moves when
    /// its heartbeat is answered, so a commit sent before that answer arrived carries the old
    /// one. A partition the member gave up, or was given after that epoch, is
    /// STALE_MEMBER_EPOCH: the commit may come from a zombie.
    pub fn validate_commit(&self, member_id: &str, epoch: i32, committed: &[Tp]) -> Result<(), GroupError> {
        if member_id.is_empty() && epoch < 0 {
            return if self.members.is_empty() { Ok(()) } else { Err(GroupError::UnknownMemberId) };
        }
        let m = self.members.get(member_id).ok_or(GroupError::UnknownMemberId)?;
        if epoch < m.epoch && !committed.iter().all(|tp| m.assigned_at.get(tp).is_some_and(|at| *at <= epoch)) {
            return Err(GroupError::StaleMemberEpoch);
        }
        if epoch > m.epoch {
            return Err(GroupError::FencedMemberEpoch);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hb(id: &str, epoch: i32, owned: Option<&[Tp]>) -> Heartbeat {
        Heartbeat {
            member_id: id.into(),
            member_epoch: epoch,
            instance_id: None,
            rebalance_timeout_ms: 30_000,
            subscribed: (epoch == 0).then(|| ["t".to_string()].into_iter().collect()),
            owned: owned.map(|o| o.iter().cloned().collect()),
            client_id: "c".into(),
            client_host: "h".into(),
            new_member_id: id.into(),
        }
    }

    fn six(t: &str) -> Option<i32> {
        (t == "t").then_some(6)
    }

    fn set(a: &HeartbeatAnswer) -> Vec<Tp> {
        a.assignment.clone().unwrap().into_iter().collect()
    }

    #[test]
    fn members_share_and_partitions_move_only_after_revocation() {
        let mut g = ConsumerGroup::default();
        let a = g.heartbeat(hb("a", 0, None), &six, 0).unwrap();
        assert_eq!(set(&a).len(), 6, "alone, a gets everything");
        let ea = a.member_epoch;
        assert_eq!(g.state_name(), "Stable");
        let b = g.heartbeat(hb("b", 0, None), &six, 1).unwrap();
        assert!(set(&b).is_empty(), "b waits until a has given partitions up");
        // a learns it must give up 3; its epoch stays until it confirms
        let a2 = g.heartbeat(hb("a", ea, None), &six, 2).unwrap();
        assert_eq!(set(&a2).len(), 3);
        assert_eq!(a2.member_epoch, ea);
        assert_eq!(g.state_name(), "Reconciling");
        let kept: Vec<Tp> = set(&a2);
        let a3 = g.heartbeat(hb("a", ea, Some(&kept)), &six, 3).unwrap();
        assert!(a3.member_epoch > ea, "revocation confirmed: a moves to the new epoch");
        let b2 = g.heartbeat(hb("b", b.member_epoch, Some(&[])), &six, 4).unwrap();
        assert_eq!(set(&b2).len(), 3);
        let mut all: Vec<Tp> = set(&a3).into_iter().chain(set(&b2)).collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 6, "no overlap, nothing missing");
        assert_eq!(g.state_name(), "Stable");
        // wrong epoch: fenced; unknown: unknown
        assert_eq!(g.heartbeat(hb("a", 99, None), &six, 5), Err(GroupError::FencedMemberEpoch));
        assert_eq!(g.heartbeat(hb("z", 3, None), &six, 5), Err(GroupError::UnknownMemberId));
        // b leaves: a gets everything back
        g.heartbeat(hb("b", -1, None), &six, 6).unwrap();
        let a4 = g.heartbeat(hb("a", a3.member_epoch, Some(&set(&a3))), &six, 7).unwrap();
        assert_eq!(set(&a4).len(), 6);
        assert_eq!(g.validate_commit("a", a4.member_epoch, &set(&a4)), Ok(()));
        assert_eq!(g.validate_commit("a", a4.member_epoch + 1, &[]), Err(GroupError::FencedMemberEpoch));
    }

    /// KIP-1251: a commit sent before the member learnt its new epoch carries the old one. It
    /// stands for partitions the member held at that epoch and still holds; a partition it gave
    /// up, or was given only at the new epoch, is STALE_MEMBER_EPOCH (found by the Java client
    /// 4.4, whose commitSync raced a heartbeat's answer in the JVM suite).
    #[test]
    fn a_commit_at_an_older_epoch_stands_for_the_partitions_held_since_then() {
        let mut g = ConsumerGroup::default();
        let a = g.heartbeat(hb("a", 0, None), &six, 0).unwrap();
        let ea = a.member_epoch;
        let all = set(&a);
        let b = g.heartbeat(hb("b", 0, None), &six, 1).unwrap();
        let a2 = g.heartbeat(hb("a", ea, None), &six, 2).unwrap();
        let kept = set(&a2);
        let given_up: Vec<Tp> = all.iter().filter(|tp| !kept.contains(tp)).cloned().collect();
        // while revoking, a's epoch stands, and it may still commit what it is giving up
        assert_eq!(g.validate_commit("a", ea, &all), Ok(()));
        // a confirms: its epoch moves on, but its next commit may still carry the old one
        let a3 = g.heartbeat(hb("a", ea, Some(&kept)), &six, 3).unwrap();
        assert!(a3.member_epoch > ea);
        assert_eq!(g.validate_commit("a", ea, &kept), Ok(()), "held since the old epoch");
        assert_eq!(g.validate_commit("a", ea, &given_up), Err(GroupError::StaleMemberEpoch), "given up");
        assert_eq!(g.validate_commit("a", ea - 1, &kept), Err(GroupError::StaleMemberEpoch), "before it held them");
        assert_eq!(g.validate_commit("a", a3.member_epoch, &kept), Ok(()));
        // b is given a's old partitions: they count from b's epoch now, not from before
        let b2 = g.heartbeat(hb("b", b.member_epoch, Some(&[])), &six, 4).unwrap();
        assert_eq!(set(&b2), given_up);
        assert_eq!(g.validate_commit("b", b2.member_epoch, &given_up), Ok(()));
        assert_eq!(g.validate_commit("b", ea, &given_up), Err(GroupError::StaleMemberEpoch));
        // b leaves; a is given everything back at a newer epoch: only what it kept stands at ea
        g.heartbeat(hb("b", -1, None), &six, 5).unwrap();
        let a4 = g.heartbeat(hb("a", a3.member_epoch, Some(&kept)), &six, 6).unwrap();
        assert_eq!(set(&a4).len(), 6);
        assert_eq!(g.validate_commit("a", ea, &kept), Ok(()));
        assert_eq!(g.validate_commit("a", a3.member_epoch, &all), Err(GroupError::StaleMemberEpoch));
        assert_eq!(g.validate_commit("a", a4.member_epoch, &all), Ok(()));
    }

    #[test]
    fn silent_members_expire() {
        let mut g = ConsumerGroup::default();
        g.heartbeat(hb("a", 0, None), &six, 0).unwrap();
        let b = g.heartbeat(hb("b", 0, None), &six, 0).unwrap();
        g.heartbeat(hb("b", b.member_epoch, Some(&[])), &six, 40_000).unwrap();
        assert_eq!(g.tick(45_001, 45_000), 1, "a never heartbeated again");
        assert!(!g.members.contains_key("a"));
        let b2 = g.heartbeat(hb("b", g.members["b"].epoch, Some(&[])), &six, 45_002).unwrap();
        assert_eq!(set(&b2).len(), 6);
    }
}
