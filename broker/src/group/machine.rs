//! The classic consumer-group state machine, as pure functions over a [`Group`] value.
//!
//! No I/O, no clock, no channels: every operation takes `now` and the group settings, mutates
//! the group, and returns [`Effect`]s — answers owed to parked JoinGroup/SyncGroup requests and
//! "store the group" orders. The runtime (`group/mod.rs`) persists first, then delivers. This is
//! Kafka's GroupCoordinator (classic protocol) rule for rule; where it differs it says so.
//!
//! States and their allowed predecessors:
//! - Empty ← PreparingRebalance (everyone left), or new / reloaded without members;
//! - PreparingRebalance ← Empty, CompletingRebalance, Stable;
//! - CompletingRebalance ← PreparingRebalance;
//! - Stable ← CompletingRebalance, or reloaded with members;
//! - Dead ← Empty (DeleteGroups, offsets expired).

use crate::config::coordinators::GroupSettings;
use crate::group::consumer::Tp;
use crate::group::error::GroupError;
use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    /// Kafka's names (DescribeGroups, ListGroups).
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }

    fn may_follow(self, prev: GroupState) -> bool {
        use GroupState::*;
        match self {
            Empty => matches!(prev, PreparingRebalance | Empty),
            PreparingRebalance => matches!(prev, Empty | CompletingRebalance | Stable),
            CompletingRebalance => prev == PreparingRebalance,
            Stable => prev == CompletingRebalance,
            Dead => matches!(prev, Empty | Dead),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    /// (name, metadata) in the member's order of preference.
    pub protocols: Vec<(String, Vec<u8>)>,
    pub assignment: Vec<u8>,
    pub awaiting_join: bool,
    pub awaiting_sync: bool,
    pub last_heartbeat_ms: i64,
}

impl Member {
    pub fn metadata_for(&self, protocol: &str) -> Vec<u8> {
        self.protocols.iter().find(|(n, _)| n == protocol).map(|(_, m)| m.clone()).unwrap_or_default()
    }
}

/// A committed offset (OffsetCommit, or a committed transaction's TxnOffsetCommit).
#[derive(Debug, Clone, PartialEq)]
pub struct CommittedOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_ms: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    pub id: String,
    pub state: GroupState,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub members: BTreeMap<String, Member>,
    /// group.instance.id → member id (KIP-345).
    pub static_members: HashMap<String, String>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, not yet joined, and when they lapse (KIP-394).
    pub pending_members: HashMap<String, i64>,
    pub offsets: BTreeMap<(String, i32), CommittedOffset>,
    /// TxnOffsetCommit offsets by producer id, pending until the transaction's marker.
    pub pending_txn: HashMap<i64, BTreeMap<(String, i32), CommittedOffset>>,
    /// Set when the group uses the KIP-848 consumer protocol (ConsumerGroupHeartbeat).
    pub consumer: Option<super::consumer::ConsumerGroup>,
    /// PreparingRebalance: when the join phase ends even if not everyone rejoined.
    pub join_deadline_ms: Option<i64>,
    /// The first rebalance of an empty group waits `group.initial.rebalance.delay.ms` for more
    /// members, extended per joiner up to this bound.
    pub initial_delay_limit_ms: Option<i64>,
    /// CompletingRebalance: when members that have not sent SyncGroup are removed.
    pub sync_deadline_ms: Option<i64>,
    /// When the group last changed state (offset expiry of empty groups).
    pub state_since_ms: i64,
    /// Completed rebalances (metrics).
    pub rebalances: u64,
}

/// What the leader (and everyone else) learns from a completed join phase.
#[derive(Debug, Clone, PartialEq)]
pub struct JoinResult {
    pub error: Option<GroupError>,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// Only for the leader: (member id, instance id, metadata of the chosen protocol).
    pub members: Vec<(String, Option<String>, Vec<u8>)>,
    pub skip_assignment: bool,
}

impl JoinResult {
    pub fn error(code: GroupError, member_id: &str) -> JoinResult {
        JoinResult {
            error: Some(code),
            generation: -1,
            protocol_type: None,
            protocol: None,
            leader: String::new(),
            member_id: member_id.to_string(),
            members: Vec::new(),
            skip_assignment: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SyncResult {
    pub error: Option<GroupError>,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub assignment: Vec<u8>,
}

impl SyncResult {
    pub fn error(code: GroupError) -> SyncResult {
        SyncResult { error: Some(code), protocol_type: None, protocol: None, assignment: Vec::new() }
    }
}

/// What the runtime must do after a transition, in this order: persist (if `Store`), then
/// deliver the answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Persist the group's metadata (generation, protocol, members, assignments).
    Store,
    Join(String, JoinResult),
    Sync(String, SyncResult),
}

pub struct JoinArgs {
    /// Empty for a new member.
    pub member_id: String,
    pub instance_id: Option<String>,
    pub protocol_type: String,
    pub protocols: Vec<(String, Vec<u8>)>,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub client_id: String,
    pub client_host: String,
    /// JoinGroup v4+: a new member first gets MEMBER_ID_REQUIRED and its id (KIP-394).
    pub require_known_member_id: bool,
    /// A fresh member id (the runtime supplies randomness: `client_id-uuid`).
    pub new_member_id: String,
}

/// A SyncGroup request (the leader's carries everyone's assignment).
pub struct SyncArgs<'a> {
    pub member_id: &'a str,
    pub instance_id: Option<&'a str>,
    pub generation: i32,
    /// v5+: must match the group's.
    pub protocol_type: Option<&'a str>,
    pub protocol: Option<&'a str>,
    pub assignments: Vec<(String, Vec<u8>)>,
}

/// The joiner's member id (to park its request under) and the effects. The joiner's own answer
/// may be among the effects, or come later.
pub struct JoinOutcome {
    pub member_id: String,
    pub effects: Vec<Effect>,
}

impl Group {
    pub fn new(id: &str, now: i64) -> Group {
        Group {
            id: id.to_string(),
            state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            static_members: HashMap::new(),
            pending_members: HashMap::new(),
            offsets: BTreeMap::new(),
            pending_txn: HashMap::new(),
            consumer: None,
            join_deadline_ms: None,
            initial_delay_limit_ms: None,
            sync_deadline_ms: None,
            state_since_ms: now,
            rebalances: 0,
        }
    }

    fn transition(&mut self, to: GroupState, now: i64) {
        assert!(to.may_follow(self.state), "group {}: illegal transition {:?} -> {:?}", self.id, self.state, to);
        self.state = to;
        self.state_since_ms = now;
    }

    /// The static member `instance_id` exists under another member id.
    fn is_fenced(&self, member_id: &str, instance_id: Option<&str>) -> bool {
        match instance_id {
            Some(i) => self.static_members.get(i).is_some_and(|m| m != member_id),
            None => false,
        }
    }

    /// Protocols every member supports (all of `extra`'s too, if given).
    fn candidate_protocols(&self, extra: Option<&[(String, Vec<u8>)]>) -> Vec<String> {
        let mut sets = self.members.values().map(|m| m.protocols.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>());
        let first = match extra {
            Some(p) => p.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
            None => match sets.next() {
                Some(s) => s,
                None => return Vec::new(),
            },
        };
        let rest: Vec<Vec<String>> = sets.collect();
        first.into_iter().filter(|n| rest.iter().all(|s| s.contains(n))).collect()
    }

    /// Kafka's vote: each member votes for its most preferred candidate; most votes wins (ties:
    /// the first candidate in the leader-independent candidate order).
    pub fn select_protocol(&self) -> Option<String> {
        let candidates = self.candidate_protocols(None);
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some((n, _)) = m.protocols.iter().find(|(n, _)| candidates.contains(n)) {
                *votes.entry(n.as_str()).or_default() += 1;
            }
        }
        let best = votes.values().copied().max()?;
        candidates.iter().find(|c| votes.get(c.as_str()) == Some(&best)).cloned()
    }

    fn supports(&self, protocol_type: &str, protocols: &[(String, Vec<u8>)]) -> bool {
        if protocol_type.is_empty() || protocols.is_empty() {
            return false;
        }
        if self.members.is_empty() {
            return true;
        }
        self.protocol_type.as_deref() == Some(protocol_type) && !self.candidate_protocols(Some(protocols)).is_empty()
    }

    fn max_rebalance_timeout(&self) -> i64 {
        self.members.values().map(|m| i64::from(m.rebalance_timeout_ms)).max().unwrap_or(0)
    }

    fn all_joined(&self) -> bool {
        self.pending_members.is_empty() && self.members.values().all(|m| m.awaiting_join)
    }

    fn current_join_result(&self, member_id: &str) -> JoinResult {
        let leader = self.leader.clone().unwrap_or_default();
        let is_leader = leader == member_id;
        let protocol = self.protocol.clone().unwrap_or_default();
        JoinResult {
            error: None,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol: self.protocol.clone(),
            member_id: member_id.to_string(),
            members: if is_leader {
                self.members
                    .values()
                    .map(|m| (m.id.clone(), m.instance_id.clone(), m.metadata_for(&protocol)))
                    .collect()
            } else {
                Vec::new()
            },
            leader,
            skip_assignment: false,
        }
    }

    /// JoinGroup.
    pub fn join(&mut self, a: JoinArgs, now: i64, s: &GroupSettings) -> JoinOutcome {
        let err = |code: GroupError, id: &str| JoinOutcome {
            member_id: id.to_string(),
            effects: vec![Effect::Join(id.to_string(), JoinResult::error(code, id))],
        };
        if self.state == GroupState::Dead {
            return err(GroupError::CoordinatorNotAvailable, &a.member_id);
        }
        if self.has_consumer_members() {
            // the group is in use with the consumer protocol (KIP-848)
            return err(GroupError::InconsistentGroupProtocol, &a.member_id);
        }
        if a.session_timeout_ms < s.min_session_timeout_ms || a.session_timeout_ms > s.max_session_timeout_ms {
            return err(GroupError::InvalidSessionTimeout, &a.member_id);
        }
        if !self.supports(&a.protocol_type, &a.protocols) {
            return err(GroupError::InconsistentGroupProtocol, &a.member_id);
        }
        if a.member_id.is_empty() {
            self.join_unknown(a, now, s)
        } else {
            self.join_known(a, now, s)
        }
    }

    fn new_member(&self, id: &str, a: &JoinArgs, now: i64) -> Member {
        Member {
            id: id.to_string(),
            instance_id: a.instance_id.clone(),
            client_id: a.client_id.clone(),
            client_host: a.client_host.clone(),
            session_timeout_ms: a.session_timeout_ms,
            rebalance_timeout_ms: a.rebalance_timeout_ms,
            protocol_type: a.protocol_type.clone(),
            protocols: a.protocols.clone(),
            assignment: Vec::new(),
            awaiting_join: true,
            awaiting_sync: false,
            last_heartbeat_ms: now,
        }
    }

    fn join_unknown(&mut self, a: JoinArgs, now: i64, s: &GroupSettings) -> JoinOutcome {
        let new_id = a.new_member_id.clone();
        if let Some(instance) = a.instance_id.clone() {
            if let Some(old_id) = self.static_members.get(&instance).cloned() {
                return self.replace_static_member(&old_id, a, now, s);
            }
        }
        if self.members.len() + self.pending_members.len() >= s.max_size {
            return JoinOutcome {
                member_id: new_id.clone(),
                effects: vec![Effect::Join(new_id.clone(), JoinResult::error(GroupError::GroupMaxSizeReached, ""))],
            };
        }
        if a.instance_id.is_none() && a.require_known_member_id {
            // KIP-394: hand out the id; the member joins for real with it.
            self.pending_members.insert(new_id.clone(), now + i64::from(a.session_timeout_ms));
            let mut r = JoinResult::error(GroupError::MemberIdRequired, &new_id);
            r.member_id = new_id.clone();
            return JoinOutcome { member_id: new_id.clone(), effects: vec![Effect::Join(new_id, r)] };
        }
        let effects = self.add_member_and_rebalance(&new_id, &a, now, s);
        JoinOutcome { member_id: new_id, effects }
    }

    fn add_member_and_rebalance(&mut self, id: &str, a: &JoinArgs, now: i64, s: &GroupSettings) -> Vec<Effect> {
        let m = self.new_member(id, a, now);
        if self.members.is_empty() {
            self.protocol_type = Some(a.protocol_type.clone());
        }
        if let Some(i) = &a.instance_id {
            self.static_members.insert(i.clone(), id.to_string());
        }
        self.members.insert(id.to_string(), m);
        self.pending_members.remove(id);
        if self.leader.is_none() {
            self.leader = Some(id.to_string());
        }
        let mut effects = Vec::new();
        match self.state {
            GroupState::PreparingRebalance => {
                if let Some(limit) = self.initial_delay_limit_ms {
                    // each new joiner extends the initial delay, up to the bound
                    let next = (now + i64::from(s.initial_rebalance_delay_ms)).min(limit);
                    self.join_deadline_ms = Some(self.join_deadline_ms.unwrap_or(now).max(next));
                }
            }
            _ => effects.extend(self.prepare_rebalance(now, s)),
        }
        effects.extend(self.try_complete_join(now));
        effects
    }

    fn replace_static_member(&mut self, old_id: &str, a: JoinArgs, now: i64, s: &GroupSettings) -> JoinOutcome {
        let new_id = a.new_member_id.clone();
        let mut effects = Vec::new();
        let Some(mut m) = self.members.remove(old_id) else {
            // stale mapping: treat as new
            self.static_members.remove(a.instance_id.as_deref().unwrap_or_default());
            let effects = self.add_member_and_rebalance(&new_id, &a, now, s);
            return JoinOutcome { member_id: new_id, effects };
        };
        // The old instance is fenced: any request it has parked gets FENCED_INSTANCE_ID.
        if m.awaiting_join {
            effects.push(Effect::Join(old_id.to_string(), JoinResult::error(GroupError::FencedInstanceId, old_id)));
        }
        if m.awaiting_sync {
            effects.push(Effect::Sync(old_id.to_string(), SyncResult::error(GroupError::FencedInstanceId)));
            m.awaiting_sync = false;
        }
        let protocols_changed = m.protocols != a.protocols;
        m.id = new_id.clone();
        m.protocols = a.protocols.clone();
        m.session_timeout_ms = a.session_timeout_ms;
        m.rebalance_timeout_ms = a.rebalance_timeout_ms;
        m.client_id = a.client_id.clone();
        m.client_host = a.client_host.clone();
        m.last_heartbeat_ms = now;
        if let Some(i) = &a.instance_id {
            self.static_members.insert(i.clone(), new_id.clone());
        }
        if self.leader.as_deref() == Some(old_id) {
            self.leader = Some(new_id.clone());
        }
        match self.state {
            GroupState::Stable if !protocols_changed => {
                // KIP-345: a static member coming back to a stable group gets its old assignment
                // and causes no rebalance.
                m.awaiting_join = false;
                self.members.insert(new_id.clone(), m);
                let mut r = self.current_join_result(&new_id);
                r.skip_assignment = self.leader.as_deref() == Some(new_id.as_str());
                effects.push(Effect::Store);
                effects.push(Effect::Join(new_id.clone(), r));
            }
            GroupState::Stable | GroupState::CompletingRebalance => {
                m.awaiting_join = true;
                self.members.insert(new_id.clone(), m);
                effects.extend(self.prepare_rebalance(now, s));
                effects.extend(self.try_complete_join(now));
            }
            GroupState::PreparingRebalance | GroupState::Empty | GroupState::Dead => {
                m.awaiting_join = true;
                self.members.insert(new_id.clone(), m);
                effects.extend(self.try_complete_join(now));
            }
        }
        JoinOutcome { member_id: new_id, effects }
    }

    fn join_known(&mut self, a: JoinArgs, now: i64, s: &GroupSettings) -> JoinOutcome {
        let id = a.member_id.clone();
        let err = |code: GroupError| JoinOutcome {
            member_id: id.clone(),
            effects: vec![Effect::Join(id.clone(), JoinResult::error(code, &id))],
        };
        if self.pending_members.contains_key(&id) {
            let effects = self.add_member_and_rebalance(&id, &a, now, s);
            return JoinOutcome { member_id: id, effects };
        }
        if self.is_fenced(&id, a.instance_id.as_deref()) {
            return err(GroupError::FencedInstanceId);
        }
        let Some(m) = self.members.get(&id) else {
            return err(GroupError::UnknownMemberId);
        };
        let same = m.protocols == a.protocols;
        let is_leader = self.leader.as_deref() == Some(id.as_str());
        let update = |m: &mut Member| {
            m.protocols = a.protocols.clone();
            m.session_timeout_ms = a.session_timeout_ms;
            m.rebalance_timeout_ms = a.rebalance_timeout_ms;
            m.awaiting_join = true;
            m.last_heartbeat_ms = now;
        };
        let mut effects = Vec::new();
        match self.state {
            GroupState::PreparingRebalance => {
                if let Some(m) = self.members.get_mut(&id) {
                    update(m);
                }
                effects.extend(self.try_complete_join(now));
            }
            GroupState::CompletingRebalance if same => {
                // a retried JoinGroup whose answer was lost: same answer again
                effects.push(Effect::Join(id.clone(), self.current_join_result(&id)));
            }
            GroupState::Stable if same && !is_leader => {
                effects.push(Effect::Join(id.clone(), self.current_join_result(&id)));
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                if let Some(m) = self.members.get_mut(&id) {
                    update(m);
                }
                effects.extend(self.prepare_rebalance(now, s));
                effects.extend(self.try_complete_join(now));
            }
            GroupState::Empty | GroupState::Dead => return err(GroupError::UnknownMemberId),
        }
        JoinOutcome { member_id: id, effects }
    }

    /// Start (or restart) the join phase.
    fn prepare_rebalance(&mut self, now: i64, s: &GroupSettings) -> Vec<Effect> {
        let mut effects = Vec::new();
        if self.state == GroupState::CompletingRebalance {
            // assignments of the aborted generation are void; parked SyncGroups learn so
            for m in self.members.values_mut() {
                m.assignment.clear();
                if m.awaiting_sync {
                    m.awaiting_sync = false;
                    effects.push(Effect::Sync(m.id.clone(), SyncResult::error(GroupError::RebalanceInProgress)));
                }
            }
        }
        self.sync_deadline_ms = None;
        let was_empty = self.state == GroupState::Empty;
        if self.state != GroupState::PreparingRebalance {
            self.transition(GroupState::PreparingRebalance, now);
        }
        let timeout = self.max_rebalance_timeout();
        if was_empty && s.initial_rebalance_delay_ms > 0 {
            let limit = now + timeout;
            self.initial_delay_limit_ms = Some(limit);
            self.join_deadline_ms = Some((now + i64::from(s.initial_rebalance_delay_ms)).min(limit));
        } else {
            self.initial_delay_limit_ms = None;
            self.join_deadline_ms = Some(now + timeout);
        }
        effects
    }

    /// End the join phase if everyone is in (and no initial delay is running).
    fn try_complete_join(&mut self, now: i64) -> Vec<Effect> {
        if self.state == GroupState::PreparingRebalance && self.initial_delay_limit_ms.is_none() && self.all_joined() {
            self.complete_join(now)
        } else {
            Vec::new()
        }
    }

    /// The join phase ends: drop members that did not rejoin, start the next generation.
    fn complete_join(&mut self, now: i64) -> Vec<Effect> {
        let mut effects = Vec::new();
        let gone: Vec<String> = self.members.values().filter(|m| !m.awaiting_join).map(|m| m.id.clone()).collect();
        for id in gone {
            self.remove_member_entry(&id);
        }
        self.join_deadline_ms = None;
        self.initial_delay_limit_ms = None;
        self.generation += 1;
        if self.members.is_empty() {
            // the protocol type stays (Kafka's `initNextGeneration`): ListGroups and
            // DescribeGroups still call an emptied consumer group `consumer`, not a "simple"
            // offsets-only group; the next first member sets it again
            self.protocol = None;
            self.leader = None;
            self.transition(GroupState::Empty, now);
            effects.push(Effect::Store);
            return effects;
        }
        self.protocol = self.select_protocol();
        if !self.leader.as_ref().is_some_and(|l| self.members.contains_key(l)) {
            self.leader = self.members.keys().next().cloned();
        }
        self.transition(GroupState::CompletingRebalance, now);
        self.rebalances += 1;
        let timeout = self.max_rebalance_timeout();
        self.sync_deadline_ms = Some(now + timeout);
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in ids {
            let r = self.current_join_result(&id);
            if let Some(m) = self.members.get_mut(&id) {
                m.awaiting_join = false;
                m.last_heartbeat_ms = now;
            }
            effects.push(Effect::Join(id, r));
        }
        effects
    }

    fn remove_member_entry(&mut self, id: &str) -> Option<Member> {
        let m = self.members.remove(id)?;
        if let Some(i) = &m.instance_id {
            if self.static_members.get(i).map(String::as_str) == Some(id) {
                self.static_members.remove(i);
            }
        }
        if self.leader.as_deref() == Some(id) {
            self.leader = self.members.keys().next().cloned();
        }
        Some(m)
    }

    /// Remove a member (LeaveGroup, session expiry) and rebalance the rest.
    fn remove_member(&mut self, id: &str, now: i64, s: &GroupSettings) -> Vec<Effect> {
        let mut effects = Vec::new();
        let Some(m) = self.remove_member_entry(id) else {
            return effects;
        };
        if m.awaiting_join {
            effects.push(Effect::Join(id.to_string(), JoinResult::error(GroupError::UnknownMemberId, id)));
        }
        if m.awaiting_sync {
            effects.push(Effect::Sync(id.to_string(), SyncResult::error(GroupError::UnknownMemberId)));
        }
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                effects.extend(self.prepare_rebalance(now, s));
                effects.extend(self.try_complete_join(now));
            }
            GroupState::PreparingRebalance => effects.extend(self.try_complete_join(now)),
            GroupState::Empty | GroupState::Dead => {}
        }
        effects
    }

    /// SyncGroup.
    pub fn sync(&mut self, a: SyncArgs<'_>, now: i64) -> Vec<Effect> {
        let SyncArgs { member_id, instance_id, generation, protocol_type, protocol, assignments } = a;
        let err = |code: GroupError| vec![Effect::Sync(member_id.to_string(), SyncResult::error(code))];
        if self.state == GroupState::Dead {
            return err(GroupError::CoordinatorNotAvailable);
        }
        if self.is_fenced(member_id, instance_id) {
            return err(GroupError::FencedInstanceId);
        }
        if !self.members.contains_key(member_id) {
            return err(GroupError::UnknownMemberId);
        }
        if generation != self.generation {
            return err(GroupError::IllegalGeneration);
        }
        if protocol_type.is_some_and(|t| Some(t) != self.protocol_type.as_deref())
            || protocol.is_some_and(|p| Some(p) != self.protocol.as_deref())
        {
            return err(GroupError::InconsistentGroupProtocol);
        }
        match self.state {
            GroupState::Empty | GroupState::Dead => err(GroupError::UnknownMemberId),
            GroupState::PreparingRebalance => err(GroupError::RebalanceInProgress),
            GroupState::Stable => {
                if let Some(m) = self.members.get_mut(member_id) {
                    m.last_heartbeat_ms = now;
                }
                vec![Effect::Sync(member_id.to_string(), self.sync_result(member_id))]
            }
            GroupState::CompletingRebalance => {
                if let Some(m) = self.members.get_mut(member_id) {
                    m.awaiting_sync = true;
                    m.last_heartbeat_ms = now;
                }
                if self.leader.as_deref() != Some(member_id) {
                    return Vec::new();
                }
                let given: HashMap<String, Vec<u8>> = assignments.into_iter().collect();
                for m in self.members.values_mut() {
                    m.assignment = given.get(&m.id).cloned().unwrap_or_default();
                }
                self.sync_deadline_ms = None;
                self.transition(GroupState::Stable, now);
                let mut effects = vec![Effect::Store];
                let waiting: Vec<String> =
                    self.members.values().filter(|m| m.awaiting_sync).map(|m| m.id.clone()).collect();
                for id in waiting {
                    let r = self.sync_result(&id);
                    if let Some(m) = self.members.get_mut(&id) {
                        m.awaiting_sync = false;
                    }
                    effects.push(Effect::Sync(id, r));
                }
                effects
            }
        }
    }

    fn sync_result(&self, member_id: &str) -> SyncResult {
        SyncResult {
            error: None,
            protocol_type: self.protocol_type.clone(),
            protocol: self.protocol.clone(),
            assignment: self.members.get(member_id).map(|m| m.assignment.clone()).unwrap_or_default(),
        }
    }

    /// Heartbeat.
    pub fn heartbeat(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        now: i64,
    ) -> Result<(), GroupError> {
        if self.state == GroupState::Dead {
            return Err(GroupError::CoordinatorNotAvailable);
        }
        if self.is_fenced(member_id, instance_id) {
            return Err(GroupError::FencedInstanceId);
        }
        let state = self.state;
        let current = self.generation;
        let Some(m) = self.members.get_mut(member_id) else {
            return Err(GroupError::UnknownMemberId);
        };
        if generation != current {
            return Err(GroupError::IllegalGeneration);
        }
        match state {
            GroupState::Empty | GroupState::Dead => Err(GroupError::UnknownMemberId),
            GroupState::PreparingRebalance => {
                m.last_heartbeat_ms = now;
                Err(GroupError::RebalanceInProgress)
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                m.last_heartbeat_ms = now;
                Ok(())
            }
        }
    }

    /// LeaveGroup for one member (v3+ batches several): its error code and the effects.
    pub fn leave(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        now: i64,
        s: &GroupSettings,
    ) -> (Result<(), GroupError>, Vec<Effect>) {
        if self.state == GroupState::Dead {
            return (Err(GroupError::CoordinatorNotAvailable), Vec::new());
        }
        let id = match instance_id {
            Some(i) => match self.static_members.get(i) {
                Some(m) if member_id.is_empty() || m == member_id => m.clone(),
                Some(_) => return (Err(GroupError::FencedInstanceId), Vec::new()),
                None => return (Err(GroupError::UnknownMemberId), Vec::new()),
            },
            None => member_id.to_string(),
        };
        if self.pending_members.remove(&id).is_some() {
            return (Ok(()), Vec::new());
        }
        if !self.members.contains_key(&id) {
            return (Err(GroupError::UnknownMemberId), Vec::new());
        }
        (Ok(()), self.remove_member(&id, now, s))
    }

    /// Timers: join and sync deadlines, session expiry, lapsed pending member ids.
    pub fn tick(&mut self, now: i64, s: &GroupSettings) -> Vec<Effect> {
        let mut effects = Vec::new();
        self.pending_members.retain(|_, deadline| *deadline > now);
        if self.state == GroupState::PreparingRebalance {
            if self.join_deadline_ms.is_some_and(|d| now >= d) {
                effects.extend(self.complete_join(now));
            } else if self.initial_delay_limit_ms.is_none() {
                effects.extend(self.try_complete_join(now));
            }
        }
        if self.state == GroupState::CompletingRebalance && self.sync_deadline_ms.is_some_and(|d| now >= d) {
            // members that never sent SyncGroup are dropped, the rest rebalance
            let late: Vec<String> = self.members.values().filter(|m| !m.awaiting_sync).map(|m| m.id.clone()).collect();
            for id in late {
                effects.extend(self.remove_member(&id, now, s));
            }
        }
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| !m.awaiting_join && !m.awaiting_sync)
            // Kafka's `shouldKeepAlive`: alive while last heartbeat + session timeout > now
            .filter(|m| now - m.last_heartbeat_ms >= i64::from(m.session_timeout_ms))
            .map(|m| m.id.clone())
            .collect();
        for id in expired {
            effects.extend(self.remove_member(&id, now, s));
        }
        effects
    }

    /// When [`Group::tick`] next has something to do (the earliest join or sync deadline,
    /// session expiry or lapsed pending member id), so the coordinator can wake exactly then
    /// rather than poll. `None`: nothing is scheduled.
    pub fn next_deadline(&self) -> Option<i64> {
        let pending = self.pending_members.values().copied().min();
        let join = self.join_deadline_ms.filter(|_| self.state == GroupState::PreparingRebalance);
        let sync = self.sync_deadline_ms.filter(|_| self.state == GroupState::CompletingRebalance);
        // a session has expired once its timeout has passed since the last heartbeat
        let sessions = self
            .members
            .values()
            .filter(|m| !m.awaiting_join && !m.awaiting_sync)
            .map(|m| m.last_heartbeat_ms + i64::from(m.session_timeout_ms))
            .min();
        [pending, join, sync, sessions].into_iter().flatten().min()
    }

    /// Members of the KIP-848 consumer protocol are in the group.
    pub fn has_consumer_members(&self) -> bool {
        self.consumer.as_ref().is_some_and(|c| !c.members.is_empty())
    }

    /// State name and group type for ListGroups/DescribeGroups.
    pub fn state_and_type(&self) -> (&'static str, &'static str) {
        match &self.consumer {
            Some(c) if self.members.is_empty() => (c.state_name(), "consumer"),
            _ => (self.state.name(), "classic"),
        }
    }

    /// Who may commit offsets for `committed` (Kafka's order of checks). `Ok(())` to proceed.
    pub fn validate_offset_commit(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        committed: &[Tp],
        now: i64,
    ) -> Result<(), GroupError> {
        if self.state == GroupState::Dead {
            return Err(GroupError::CoordinatorNotAvailable);
        }
        if let Some(c) = &self.consumer {
            if self.members.is_empty() {
                return c.validate_commit(member_id, generation, committed); // the member epoch (v9+)
            }
        }
        if self.is_fenced(member_id, instance_id) {
            return Err(GroupError::FencedInstanceId);
        }
        if generation < 0 && self.state == GroupState::Empty {
            return Ok(()); // a group that uses the broker only to store offsets, or an admin
        }
        if self.state == GroupState::CompletingRebalance {
            return Err(GroupError::RebalanceInProgress);
        }
        let current = self.generation;
        let Some(m) = self.members.get_mut(member_id) else {
            return Err(GroupError::UnknownMemberId);
        };
        if generation != current {
            return Err(GroupError::IllegalGeneration);
        }
        m.last_heartbeat_ms = now;
        Ok(())
    }

    /// TxnOffsetCommit v3 (KIP-447): a zombie consumer that lost its partitions is fenced by
    /// the generation check; v0–2 requests carry no member and are not checked.
    pub fn validate_txn_offset_commit(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        committed: &[Tp],
    ) -> Result<(), GroupError> {
        if self.state == GroupState::Dead {
            return Err(GroupError::CoordinatorNotAvailable);
        }
        if let Some(c) = &self.consumer {
            if self.members.is_empty() && !(member_id.is_empty() && generation < 0) {
                // a KIP-848 group: the member epoch stands in for the generation
                return c.validate_commit(member_id, generation, committed);
            }
        }
        if self.is_fenced(member_id, instance_id) {
            return Err(GroupError::FencedInstanceId);
        }
        if !member_id.is_empty() && !self.members.contains_key(member_id) {
            return Err(GroupError::UnknownMemberId);
        }
        if generation >= 0 && generation != self.generation {
            return Err(GroupError::IllegalGeneration);
        }
        Ok(())
    }

    /// Some transaction has an offset for this partition that is not yet committed or aborted
    /// (OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT).
    pub fn has_pending(&self, topic: &str, partition: i32) -> bool {
        self.pending_txn.values().any(|m| m.contains_key(&(topic.to_string(), partition)))
    }

    /// The transaction of `pid` ended: its pending offsets become committed, or vanish.
    pub fn complete_txn(&mut self, pid: i64, commit: bool) {
        if let Some(pending) = self.pending_txn.remove(&pid) {
            if commit {
                self.offsets.extend(pending);
            }
        }
    }

    /// Make a group empty with the given generation (reload of a stored empty group).
    pub fn is_empty_state(&self) -> bool {
        self.state == GroupState::Empty
    }

    /// DeleteGroups / expiry: only an empty group can die.
    pub fn mark_dead(&mut self, now: i64) -> Result<(), GroupError> {
        if self.state != GroupState::Empty || self.has_consumer_members() {
            return Err(GroupError::NonEmptyGroup);
        }
        self.transition(GroupState::Dead, now);
        Ok(())
    }

    /// Topics the members subscribe to, when the group uses the consumer protocol (OffsetDelete
    /// refuses to delete their offsets). `None` if any subscription is unreadable.
    pub fn subscribed_topics(&self) -> Option<std::collections::BTreeSet<String>> {
        if let Some(c) = &self.consumer {
            if self.members.is_empty() {
                return Some(c.members.values().flat_map(|m| m.subscribed.iter().cloned()).collect());
            }
        }
        if self.protocol_type.as_deref() != Some("consumer") {
            return None;
        }
        let protocol = self.protocol.clone()?;
        let mut out = std::collections::BTreeSet::new();
        for m in self.members.values() {
            out.extend(super::codec::subscription_topics(&m.metadata_for(&protocol))?);
        }
        Some(out)
    }

    /// Rebuild from stored metadata: Stable with members, Empty without.
    pub fn restore(&mut self, stored: super::codec::StoredGroup, now: i64) {
        self.generation = stored.generation;
        self.protocol_type = stored.protocol_type;
        self.protocol = stored.protocol;
        self.leader = stored.leader;
        self.members.clear();
        self.static_members.clear();
        for sm in stored.members {
            let m = Member {
                id: sm.id.clone(),
                instance_id: sm.instance_id.clone(),
                client_id: sm.client_id,
                client_host: sm.client_host,
                session_timeout_ms: sm.session_timeout_ms,
                rebalance_timeout_ms: sm.rebalance_timeout_ms,
                protocol_type: self.protocol_type.clone().unwrap_or_default(),
                protocols: vec![(self.protocol.clone().unwrap_or_default(), sm.subscription)],
                assignment: sm.assignment,
                awaiting_join: false,
                awaiting_sync: false,
                last_heartbeat_ms: now,
            };
            if let Some(i) = sm.instance_id {
                self.static_members.insert(i, sm.id.clone());
            }
            self.members.insert(sm.id, m);
        }
        self.state = if self.members.is_empty() { GroupState::Empty } else { GroupState::Stable };
        self.state_since_ms = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(clippy::too_many_arguments)]
    fn sync(
        g: &mut Group,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        protocol_type: Option<&str>,
        protocol: Option<&str>,
        assignments: Vec<(String, Vec<u8>)>,
        now: i64,
    ) -> Vec<Effect> {
        g.sync(SyncArgs { member_id, instance_id, generation, protocol_type, protocol, assignments }, now)
    }

    fn settings() -> GroupSettings {
        GroupSettings { initial_rebalance_delay_ms: 0, ..Default::default() }
    }

    fn args(member: &str, fresh: &str) -> JoinArgs {
        JoinArgs {
            member_id: member.into(),
            instance_id: None,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), vec![1]), ("roundrobin".into(), vec![2])],
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 30_000,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            require_known_member_id: true,
            new_member_id: fresh.into(),
        }
    }

    fn join_results(effects: &[Effect]) -> Vec<(String, JoinResult)> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::Join(m, r) => Some((m.clone(), r.clone())),
                _ => None,
            })
            .collect()
    }

    /// Join with the KIP-394 round trip; returns the member id and the effects of the real join.
    fn join_new(g: &mut Group, fresh: &str, now: i64) -> (String, Vec<Effect>) {
        let s = settings();
        let out = g.join(args("", fresh), now, &s);
        let r = join_results(&out.effects);
        assert_eq!(r[0].1.error, Some(GroupError::MemberIdRequired));
        let out = g.join(args(&out.member_id, "unused"), now, &s);
        (out.member_id, out.effects)
    }

    #[test]
    fn single_member_joins_syncs_and_is_stable() {
        let mut g = Group::new("g", 0);
        let (id, effects) = join_new(&mut g, "m1", 0);
        let r = join_results(&effects);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].1.error, None);
        assert_eq!(r[0].1.generation, 1);
        assert_eq!(r[0].1.leader, id);
        assert_eq!(r[0].1.members.len(), 1);
        assert_eq!(r[0].1.protocol.as_deref(), Some("range"));
        assert_eq!(g.state, GroupState::CompletingRebalance);
        let effects = sync(&mut g, &id, None, 1, None, None, vec![(id.clone(), vec![9])], 1);
        assert_eq!(effects[0], Effect::Store);
        assert!(matches!(&effects[1], Effect::Sync(m, r) if m == &id && r.assignment == vec![9]));
        assert_eq!(g.state, GroupState::Stable);
        assert_eq!(g.heartbeat(&id, None, 1, 2), Ok(()));
        assert_eq!(g.heartbeat(&id, None, 0, 2), Err(GroupError::IllegalGeneration));
        assert_eq!(g.heartbeat("nobody", None, 1, 2), Err(GroupError::UnknownMemberId));
    }

    #[test]
    fn second_member_triggers_rebalance_and_both_get_answers() {
        let s = settings();
        let mut g = Group::new("g", 0);
        let (a, _) = join_new(&mut g, "a", 0);
        sync(&mut g, &a, None, 1, None, None, vec![(a.clone(), vec![1])], 0);
        let (b, effects) = join_new(&mut g, "b", 10);
        assert!(join_results(&effects).is_empty(), "b waits for a to rejoin");
        assert_eq!(g.state, GroupState::PreparingRebalance);
        assert_eq!(g.heartbeat(&a, None, 1, 11), Err(GroupError::RebalanceInProgress));
        let out = g.join(args(&a, "x"), 12, &s);
        let r = join_results(&out.effects);
        assert_eq!(r.len(), 2);
        assert!(r.iter().all(|(_, r)| r.generation == 2 && r.error.is_none()));
        let leader = r.iter().find(|(m, _)| m == &a).unwrap();
        assert_eq!(leader.1.members.len(), 2, "the leader sees every member");
        let follower = r.iter().find(|(m, _)| m == &b).unwrap();
        assert!(follower.1.members.is_empty());
        // follower syncs first and waits; leader's sync answers both
        assert!(sync(&mut g, &b, None, 2, None, None, vec![], 13).is_empty());
        let effects = sync(&mut g, &a, None, 2, None, None, vec![(a.clone(), vec![1]), (b.clone(), vec![2])], 14);
        let syncs: Vec<_> = effects.iter().filter(|e| matches!(e, Effect::Sync(..))).collect();
        assert_eq!(syncs.len(), 2);
        assert!(effects.contains(&Effect::Sync(b.clone(), g.sync_result(&b))));
        assert_eq!(g.members[&b].assignment, vec![2]);
    }

    #[test]
    fn session_expiry_removes_a_member_and_rebalances() {
        let s = settings();
        let mut g = Group::new("g", 0);
        let (a, _) = join_new(&mut g, "a", 0);
        sync(&mut g, &a, None, 1, None, None, vec![], 0);
        let (b, _) = join_new(&mut g, "b", 0);
        g.join(args(&a, "x"), 0, &s);
        sync(&mut g, &a, None, 2, None, None, vec![], 0);
        assert_eq!(g.state, GroupState::Stable);
        // a keeps heartbeating, b goes silent
        for t in (1000..=9_000).step_by(1000) {
            assert_eq!(g.heartbeat(&a, None, 2, t), Ok(()));
            g.tick(t, &s);
        }
        assert!(g.tick(9_999, &s).is_empty() && g.members.contains_key(&b), "alive until its session ends");
        // Kafka's rule: alive while last heartbeat + session timeout > now
        let effects = g.tick(10_000, &s);
        assert!(!g.members.contains_key(&b));
        assert_eq!(g.state, GroupState::PreparingRebalance);
        assert!(join_results(&effects).is_empty());
        let out = g.join(args(&a, "x"), 11_002, &s);
        let r = join_results(&out.effects);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].1.generation, 3);
    }

    #[test]
    fn join_deadline_drops_members_that_do_not_rejoin() {
        let s = settings();
        let mut g = Group::new("g", 0);
        let (a, _) = join_new(&mut g, "a", 0);
        sync(&mut g, &a, None, 1, None, None, vec![], 0);
        let (b, _) = join_new(&mut g, "b", 100);
        // a keeps heartbeating but never rejoins; its rebalance timeout (30 s) ends the phase
        for t in (5000..=30_000).step_by(5000) {
            assert_eq!(g.heartbeat(&a, None, 1, t), Err(GroupError::RebalanceInProgress));
            assert!(g.tick(t, &s).iter().all(|e| !matches!(e, Effect::Join(..))));
        }
        let effects = g.tick(30_100, &s);
        let r = join_results(&effects);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].0, b);
        assert_eq!(r[0].1.leader, b, "a new leader is chosen when the old one is gone");
        assert!(!g.members.contains_key(&a));
    }

    /// The coordinator wakes at `next_deadline` (no polling tick): each timer must be due
    /// exactly then — nothing a millisecond before, the expiry at it (librdkafka 0081 deletes a
    /// group right when its static members' sessions end).
    #[test]
    fn next_deadline_is_exactly_when_tick_acts() {
        let s = settings();
        let mut g = Group::new("g", 0);
        assert_eq!(g.next_deadline(), None, "an empty group has no timer");
        let (a, _) = join_new(&mut g, "a", 0);
        // a joined and is waiting for SyncGroup: the sync deadline (its session timeout)
        assert_eq!(g.state, GroupState::CompletingRebalance);
        let sync_due = g.next_deadline().unwrap();
        assert!(g.tick(sync_due - 1, &s).is_empty());
        sync(&mut g, &a, None, 1, None, None, vec![], 0);
        assert_eq!(g.state, GroupState::Stable);
        // stable: the member's session, from its last heartbeat
        assert_eq!(g.heartbeat(&a, None, 1, 4_000), Ok(()));
        let due = g.next_deadline().unwrap();
        assert_eq!(due, 4_000 + 10_000);
        assert!(g.tick(due - 1, &s).is_empty() && g.members.contains_key(&a), "not a millisecond early");
        let effects = g.tick(due, &s);
        assert!(!g.members.contains_key(&a), "expired at its deadline: {effects:?}");
        assert_eq!(g.state, GroupState::Empty);
        assert_eq!(g.next_deadline(), None);
    }

    #[test]
    fn leave_of_the_last_member_empties_the_group_and_bumps_generation() {
        let s = settings();
        let mut g = Group::new("g", 0);
        let (a, _) = join_new(&mut g, "a", 0);
        sync(&mut g, &a, None, 1, None, None, vec![], 0);
        let (code, effects) = g.leave(&a, None, 1, &s);
        assert_eq!(code, Ok(()));
        assert_eq!(g.state, GroupState::Empty);
        assert_eq!(g.generation, 2);
        assert!(effects.contains(&Effect::Store));
        assert_eq!(g.leave(&a, None, 2, &s).0, Err(GroupError::UnknownMemberId));
        // still a consumer group (librdkafka 0081: Kafka keeps the type), whose next member
        // may bring any type, as into a new group
        assert_eq!(g.protocol_type.as_deref(), Some("consumer"));
        let mut connect = args("", "c");
        connect.protocol_type = "connect".into();
        let out = g.join(connect, 1, &s);
        assert_eq!(join_results(&out.effects)[0].1.error, Some(GroupError::MemberIdRequired));
    }

    #[test]
    fn inconsistent_protocols_are_refused() {
        let s = settings();
        let mut g = Group::new("g", 0);
        let (_a, _) = join_new(&mut g, "a", 0);
        let mut other = args("", "b");
        other.protocols = vec![("sticky".into(), vec![])];
        let out = g.join(other, 1, &s);
        assert_eq!(join_results(&out.effects)[0].1.error, Some(GroupError::InconsistentGroupProtocol));
        let mut wrong_type = args("", "c");
        wrong_type.protocol_type = "connect".into();
        let out = g.join(wrong_type, 1, &s);
        assert_eq!(join_results(&out.effects)[0].1.error, Some(GroupError::InconsistentGroupProtocol));
    }

    #[test]
    fn protocol_is_chosen_by_vote_among_common_ones() {
        let s = settings();
        let mut g = Group::new("g", 0);
        let mut a = args("", "a");
        a.require_known_member_id = false;
        a.protocols = vec![("cooperative-sticky".into(), vec![]), ("range".into(), vec![])];
        g.join(a, 0, &s);
        let mut b = args("", "b");
        b.require_known_member_id = false;
        b.protocols = vec![("range".into(), vec![]), ("cooperative-sticky".into(), vec![])];
        g.join(b, 0, &s);
        let mut c = args("", "c");
        c.require_known_member_id = false;
        c.protocols =
            vec![("cooperative-sticky".into(), vec![]), ("roundrobin".into(), vec![]), ("range".into(), vec![])];
        g.join(c, 0, &s);
        assert_eq!(g.select_protocol().as_deref(), Some("cooperative-sticky"));
    }

    #[test]
    fn static_member_rejoining_a_stable_group_gets_its_assignment_without_rebalance() {
        let s = settings();
        let mut g = Group::new("g", 0);
        let mut a = args("", "a1");
        a.instance_id = Some("inst-a".into());
        let out = g.join(a, 0, &s);
        let a1 = out.member_id;
        assert_eq!(join_results(&out.effects)[0].1.error, None, "static members skip MEMBER_ID_REQUIRED");
        sync(&mut g, &a1, Some("inst-a"), 1, None, None, vec![(a1.clone(), vec![7])], 0);
        // the process restarts: same instance id, no member id
        let mut again = args("", "a2");
        again.instance_id = Some("inst-a".into());
        let out = g.join(again, 5, &s);
        let r = join_results(&out.effects);
        assert_eq!(r[0].0, "a2");
        assert_eq!(r[0].1.generation, 1, "no new generation");
        assert_eq!(g.state, GroupState::Stable);
        assert_eq!(
            sync(&mut g, "a2", Some("inst-a"), 1, None, None, vec![], 6)[0],
            Effect::Sync("a2".into(), g.sync_result("a2"))
        );
        assert_eq!(g.sync_result("a2").assignment, vec![7]);
        // the old instance is fenced
        assert_eq!(g.heartbeat(&a1, Some("inst-a"), 1, 7), Err(GroupError::FencedInstanceId));
        assert_eq!(g.validate_offset_commit(&a1, Some("inst-a"), 1, &[], 7), Err(GroupError::FencedInstanceId));
    }

    #[test]
    fn offset_commit_checks_generation_and_member() {
        let mut g = Group::new("g", 0);
        assert_eq!(g.validate_offset_commit("", None, -1, &[], 0), Ok(()), "simple commit to an empty group");
        let (a, _) = join_new(&mut g, "a", 0);
        assert_eq!(g.validate_offset_commit("", None, -1, &[], 0), Err(GroupError::RebalanceInProgress));
        sync(&mut g, &a, None, 1, None, None, vec![], 0);
        assert_eq!(g.validate_offset_commit(&a, None, 1, &[], 0), Ok(()));
        assert_eq!(g.validate_offset_commit(&a, None, 0, &[], 0), Err(GroupError::IllegalGeneration));
        assert_eq!(g.validate_offset_commit("x", None, 1, &[], 0), Err(GroupError::UnknownMemberId));
    }

    /// KIP-848 groups: TxnOffsetCommit (sendOffsetsToTransaction of a `group.protocol=consumer`
    /// consumer) checks the member and its epoch, not the classic generation (found by the Java
    /// client 4.4: "The coordinator is not aware of this member").
    #[test]
    fn txn_offset_commits_of_a_consumer_protocol_group_check_the_member_epoch() {
        use crate::group::consumer::{ConsumerGroup, Heartbeat};
        let mut g = Group::new("g", 0);
        let mut c = ConsumerGroup::default();
        let hb = Heartbeat {
            member_id: "m".into(),
            member_epoch: 0,
            instance_id: None,
            rebalance_timeout_ms: 30_000,
            subscribed: Some(["t".to_string()].into_iter().collect()),
            owned: None,
            client_id: "c".into(),
            client_host: "h".into(),
            new_member_id: "m".into(),
        };
        let epoch = c.heartbeat(hb, &|t: &str| (t == "t").then_some(2), 0).unwrap().member_epoch;
        g.consumer = Some(c);
        assert_eq!(g.validate_txn_offset_commit("m", None, epoch, &[]), Ok(()));
        assert_eq!(g.validate_txn_offset_commit("m", None, epoch + 1, &[]), Err(GroupError::FencedMemberEpoch));
        assert_eq!(g.validate_txn_offset_commit("gone", None, epoch, &[]), Err(GroupError::UnknownMemberId));
        assert_eq!(g.validate_txn_offset_commit("", None, -1, &[]), Ok(()), "v0-2: no member to check");
    }

    #[test]
    fn txn_offset_commits_fence_zombie_consumers() {
        let mut g = Group::new("g", 0);
        let (a, _) = join_new(&mut g, "a", 0);
        sync(&mut g, &a, None, 1, None, None, vec![], 0);
        assert_eq!(g.validate_txn_offset_commit(&a, None, 1, &[]), Ok(()));
        assert_eq!(g.validate_txn_offset_commit("", None, -1, &[]), Ok(()), "v0-2: no member to check");
        assert_eq!(g.validate_txn_offset_commit(&a, None, 0, &[]), Err(GroupError::IllegalGeneration));
        assert_eq!(g.validate_txn_offset_commit("gone", None, 1, &[]), Err(GroupError::UnknownMemberId));
        // pending offsets become visible only with a commit marker
        g.pending_txn.entry(9).or_default().insert(
            ("t".into(), 0),
            CommittedOffset { offset: 5, leader_epoch: -1, metadata: String::new(), commit_ms: 0 },
        );
        assert!(g.has_pending("t", 0));
        g.complete_txn(9, false);
        assert!(!g.has_pending("t", 0) && g.offsets.is_empty(), "aborted offsets vanish");
        g.pending_txn.entry(9).or_default().insert(
            ("t".into(), 0),
            CommittedOffset { offset: 6, leader_epoch: -1, metadata: String::new(), commit_ms: 0 },
        );
        g.complete_txn(9, true);
        assert_eq!(g.offsets[&("t".to_string(), 0)].offset, 6);
    }

    #[test]
    fn initial_delay_waits_for_more_members() {
        let s = GroupSettings { initial_rebalance_delay_ms: 3000, ..Default::default() };
        let mut g = Group::new("g", 0);
        let mut a = args("", "a");
        a.require_known_member_id = false;
        assert!(join_results(&g.join(a, 0, &s).effects).is_empty());
        let mut b = args("", "b");
        b.require_known_member_id = false;
        assert!(join_results(&g.join(b, 1000, &s).effects).is_empty());
        assert!(join_results(&g.tick(3500, &s)).is_empty(), "b's join extended the delay");
        let r = join_results(&g.tick(4000, &s));
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].1.generation, 1);
    }

    #[test]
    fn a_rebalance_during_sync_voids_parked_syncs() {
        let s = settings();
        let mut g = Group::new("g", 0);
        let (a, _) = join_new(&mut g, "a", 0);
        sync(&mut g, &a, None, 1, None, None, vec![], 0);
        let (b, _) = join_new(&mut g, "b", 0);
        g.join(args(&a, "x"), 0, &s);
        assert_eq!(g.state, GroupState::CompletingRebalance);
        assert!(sync(&mut g, &b, None, 2, None, None, vec![], 1).is_empty());
        let (_c, effects) = join_new(&mut g, "c", 2);
        assert!(effects.contains(&Effect::Sync(b.clone(), SyncResult::error(GroupError::RebalanceInProgress))));
        assert_eq!(g.state, GroupState::PreparingRebalance);
    }
}
