//! Classic group membership: JoinGroup / SyncGroup (the leader runs the assignor), the
//! background heartbeat, LeaveGroup, and offset commits with the member's generation.
//! Eager assignors give up every partition before rejoining; `cooperative-sticky` keeps its
//! partitions, gives up only the ones the new assignment moves, and rejoins once more.

use super::assignor::{self, MemberSubscription};
use super::{Consumer, Settings, TopicPartition};
use crate::cluster::{by_topic, sb, Cluster};
use crate::error::{Error, ErrorKind, Result};
use crate::producer::ConsumerGroupMetadata;
use crate::sync::Locked as _;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug)]
struct Inner {
    member_id: String,
    generation: i32,
    protocol: Option<String>,
    rejoin: bool,
    fatal: Option<Error>,
    last_poll: Instant,
    /// Bumped on every (re)join: an older heartbeat task stops when it sees a newer one.
    incarnation: u64,
}

/// The consumer's membership, shared with its heartbeat task.
#[derive(Debug, Clone)]
pub struct GroupState {
    inner: Arc<Mutex<Inner>>,
    instance_id: Option<String>,
}

impl GroupState {
    pub(crate) fn new(s: &Settings) -> GroupState {
        GroupState {
            inner: Arc::new(Mutex::new(Inner {
                member_id: String::new(),
                generation: -1,
                protocol: None,
                rejoin: true,
                fatal: None,
                last_poll: Instant::now(),
                incarnation: 0,
            })),
            instance_id: s.group_instance_id.clone(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.locked()
    }

    /// Stop the heartbeat for good (the consumer is gone).
    pub(crate) fn request_stop(&self) {
        let mut g = self.lock();
        g.incarnation += 1;
        g.rejoin = false;
    }

    pub(crate) fn request_rejoin(&self) {
        self.lock().rejoin = true;
    }

    pub(crate) fn needs_join(&self) -> bool {
        self.lock().rejoin
    }

    /// True while the member has a generation (commits carry it).
    pub fn is_member(&self) -> bool {
        self.lock().generation >= 0
    }

    /// (member id, generation) now.
    pub fn member(&self) -> (String, i32) {
        let g = self.lock();
        (g.member_id.clone(), g.generation)
    }

    pub(crate) fn polled(&self) {
        self.lock().last_poll = Instant::now();
    }

    pub(crate) fn fatal(&self) -> Option<Error> {
        self.lock().fatal.clone()
    }

    pub(crate) fn reset_member(&self) {
        let mut g = self.lock();
        g.member_id.clear();
        g.generation = -1;
        g.rejoin = true;
        g.incarnation += 1;
    }

    pub(crate) fn metadata(&self, s: &Settings) -> Option<ConsumerGroupMetadata> {
        let g = self.lock();
        s.group_id.as_ref().map(|gid| ConsumerGroupMetadata {
            group_id: gid.clone(),
            generation_id: g.generation,
            member_id: g.member_id.clone(),
            group_instance_id: self.instance_id.clone(),
        })
    }
}

fn encode_subscription(topics: &[String], owned: &[TopicPartition]) -> Result<Bytes> {
    let mut sub = ConsumerProtocolSubscription::default();
    sub.topics = topics.iter().map(|t| sb(t)).collect();
    sub.owned_partitions = by_topic(owned.iter().cloned())
        .into_iter()
        .map(|(t, partitions)| {
            let mut x = consumer_protocol_subscription::TopicPartition::default();
            x.topic = TopicName(sb(&t));
            x.partitions = partitions;
            x
        })
        .collect();
    let mut buf = BytesMut::new();
    buf.put_i16(1);
    sub.encode(&mut buf, 1).map_err(|e| Error::invalid(format!("encoding subscription: {e}")))?;
    Ok(buf.freeze())
}

fn decode_subscription(member_id: &str, mut data: Bytes) -> Option<MemberSubscription> {
    if data.len() < 2 {
        return None;
    }
    let version = data.get_i16().min(3);
    let sub = ConsumerProtocolSubscription::decode(&mut data, version).ok()?;
    Some(MemberSubscription {
        member_id: member_id.to_string(),
        topics: sub.topics.iter().map(|t| t.to_string()).collect(),
        owned: sub
            .owned_partitions
            .iter()
            .flat_map(|tp| tp.partitions.iter().map(move |p| (tp.topic.0.to_string(), *p)))
            .collect(),
        generation: if version >= 2 { sub.generation_id } else { -1 },
    })
}

fn encode_assignment(parts: &[TopicPartition]) -> Result<Bytes> {
    let mut a = ConsumerProtocolAssignment::default();
    a.assigned_partitions = by_topic(parts.iter().cloned())
        .into_iter()
        .map(|(t, partitions)| {
            let mut x = consumer_protocol_assignment::TopicPartition::default();
            x.topic = TopicName(sb(&t));
            x.partitions = partitions;
            x
        })
        .collect();
    let mut buf = BytesMut::new();
    buf.put_i16(1);
    a.encode(&mut buf, 1).map_err(|e| Error::invalid(format!("encoding assignment: {e}")))?;
    Ok(buf.freeze())
}

fn decode_assignment(mut data: Bytes) -> Result<Vec<TopicPartition>> {
    if data.is_empty() {
        return Ok(Vec::new());
    }
    if data.len() < 2 {
        return Err(Error::invalid("assignment too short"));
    }
    let version = data.get_i16().min(3);
    let a = ConsumerProtocolAssignment::decode(&mut data, version)
        .map_err(|e| Error::invalid(format!("decoding assignment: {e}")))?;
    Ok(a.assigned_partitions
        .iter()
        .flat_map(|x| x.partitions.iter().map(move |p| (x.topic.0.to_string(), *p)))
        .collect())
}

fn millis(d: Duration) -> i32 {
    d.as_millis().min(i32::MAX as u128) as i32
}

/// Join (or rejoin) the group and take up the assignment.
pub(crate) async fn join(c: &mut Consumer) -> Result<()> {
    let gid = c.s.group_id.clone().ok_or_else(|| Error::invalid("subscribe needs group.id"))?;
    let cooperative = c.group.lock().protocol.as_deref().is_some_and(assignor::is_cooperative);
    if !cooperative && (!c.readers.is_empty() || !c.unpositioned.is_empty()) {
        // Eager: give up everything before rejoining.
        if c.s.auto_commit && c.group.is_member() {
            let _ = c.commit_sync().await;
        }
        c.readers.clear();
        c.unpositioned.clear();
    }
    let mut backoff = c.s.retry_backoff;
    loop {
        let owned = c.assignment();
        let coord = match c.cluster.find_coordinator(0, &gid).await {
            Ok(b) => b,
            Err(e) if e.is_retriable() => {
                tokio::time::sleep(backoff).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let (member_id, incarnation) = {
            let mut g = c.group.lock();
            g.incarnation += 1;
            (g.member_id.clone(), g.incarnation)
        };
        let mut jr = JoinGroupRequest::default();
        jr.group_id = GroupId(sb(&gid));
        jr.session_timeout_ms = millis(c.s.session_timeout);
        jr.rebalance_timeout_ms = millis(c.s.max_poll_interval);
        jr.member_id = sb(&member_id);
        jr.group_instance_id = c.s.group_instance_id.as_deref().map(sb);
        jr.protocol_type = sb("consumer");
        for name in &c.s.assignors {
            let mut p = join_group_request::JoinGroupRequestProtocol::default();
            p.name = sb(name);
            p.metadata = encode_subscription(&c.subscription, &owned)?;
            jr.protocols.push(p);
        }
        // JoinGroup waits for the whole group: up to the rebalance timeout.
        let join = tokio::time::timeout(
            c.s.max_poll_interval + c.cluster.request_timeout,
            coord.call(ApiKey::JoinGroup, RequestKind::JoinGroup(jr)),
        )
        .await
        .map_err(|_| Error::timeout("JoinGroup timed out"))
        .and_then(|r| r);
        let j = match join {
            Ok(ResponseKind::JoinGroup(j)) => j,
            Ok(_) => return Err(Error::invalid("unexpected response to JoinGroup")),
            Err(e) if e.is_retriable() => {
                tokio::time::sleep(backoff).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        match ResponseError::try_from_code(j.error_code) {
            None => {}
            Some(ResponseError::MemberIdRequired) => {
                c.group.lock().member_id = j.member_id.to_string();
                continue;
            }
            Some(ResponseError::UnknownMemberId) => {
                c.group.reset_member();
                continue;
            }
            Some(ResponseError::FencedInstanceId) => {
                let e = Error::kafka(ResponseError::FencedInstanceId, "JoinGroup").with_kind(ErrorKind::Fatal);
                c.group.lock().fatal = Some(e.clone());
                return Err(e);
            }
            Some(code) if code.is_retriable() || code == ResponseError::RebalanceInProgress => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
            Some(code) => return Err(Error::kafka(code, format!("JoinGroup {gid}"))),
        }
        let protocol = j.protocol_name.as_ref().map(|p| p.to_string()).unwrap_or_else(|| c.s.assignors[0].clone());
        {
            let mut g = c.group.lock();
            g.member_id = j.member_id.to_string();
            g.generation = j.generation_id;
            g.protocol = Some(protocol.clone());
        }
        let mut assignments = Vec::new();
        if j.leader == j.member_id {
            let subs: Vec<MemberSubscription> =
                j.members.iter().filter_map(|m| decode_subscription(&m.member_id, m.metadata.clone())).collect();
            let mut counts = HashMap::new();
            let topics: BTreeSet<&String> = subs.iter().flat_map(|s| s.topics.iter()).collect();
            for t in topics {
                if let Ok(p) = c.cluster.partitions(t).await {
                    counts.insert(t.clone(), p.len() as i32);
                }
            }
            for (member, parts) in assignor::assign(&protocol, &subs, &counts) {
                let mut a = sync_group_request::SyncGroupRequestAssignment::default();
                a.member_id = sb(&member);
                a.assignment = encode_assignment(&parts)?;
                assignments.push(a);
            }
        }
        let mut sr = SyncGroupRequest::default();
        sr.group_id = GroupId(sb(&gid));
        sr.generation_id = j.generation_id;
        sr.member_id = j.member_id.clone();
        sr.group_instance_id = c.s.group_instance_id.as_deref().map(sb);
        sr.protocol_type = Some(sb("consumer"));
        sr.protocol_name = Some(sb(&protocol));
        sr.assignments = assignments;
        let sync = tokio::time::timeout(
            c.s.max_poll_interval + c.cluster.request_timeout,
            coord.call(ApiKey::SyncGroup, RequestKind::SyncGroup(sr)),
        )
        .await
        .map_err(|_| Error::timeout("SyncGroup timed out"))
        .and_then(|r| r);
        let s = match sync {
            Ok(ResponseKind::SyncGroup(s)) => s,
            Ok(_) => return Err(Error::invalid("unexpected response to SyncGroup")),
            Err(e) if e.is_retriable() => continue,
            Err(e) => return Err(e),
        };
        match ResponseError::try_from_code(s.error_code) {
            None => {}
            Some(ResponseError::UnknownMemberId | ResponseError::IllegalGeneration) => {
                c.group.reset_member();
                continue;
            }
            Some(code) if code.is_retriable() || code == ResponseError::RebalanceInProgress => continue,
            Some(code) => return Err(Error::kafka(code, format!("SyncGroup {gid}"))),
        }
        let assigned: BTreeSet<TopicPartition> = decode_assignment(s.assignment)?.into_iter().collect();
        let before: BTreeSet<TopicPartition> = c.assignment().into_iter().collect();
        let revoked: Vec<TopicPartition> = before.difference(&assigned).cloned().collect();
        if !revoked.is_empty() {
            if c.s.auto_commit {
                let offs: Vec<(String, i32, i64)> = revoked
                    .iter()
                    .filter_map(|tp| c.readers.get(tp).map(|r| (tp.0.clone(), tp.1, r.position())))
                    .collect();
                let _ = commit(&c.cluster, &c.s, &c.group, &offs).await;
            }
            for tp in &revoked {
                c.readers.remove(tp);
                c.unpositioned.remove(tp);
            }
        }
        for tp in assigned.difference(&before) {
            c.unpositioned.insert(tp.clone());
        }
        // Cooperative: partitions given up go to their new owner in one more round.
        c.group.lock().rejoin = assignor::is_cooperative(&protocol) && !revoked.is_empty();
        tokio::spawn(heartbeat(c.cluster.clone(), c.s.clone(), c.group.clone(), incarnation));
        return Ok(());
    }
}

/// Heartbeat until the membership changes; leave the group if the application stops polling.
async fn heartbeat(cluster: Arc<Cluster>, s: Settings, group: GroupState, incarnation: u64) {
    let Some(gid) = s.group_id.clone() else { return };
    loop {
        tokio::time::sleep(s.heartbeat_interval).await;
        let (member_id, generation, last_poll) = {
            let g = group.lock();
            if g.incarnation != incarnation || g.fatal.is_some() {
                return;
            }
            (g.member_id.clone(), g.generation, g.last_poll)
        };
        if last_poll.elapsed() > s.max_poll_interval {
            // As the Java client: a consumer that stopped polling leaves, so its partitions move.
            let mut g = GroupState { inner: group.inner.clone(), instance_id: group.instance_id.clone() };
            send_leave(&cluster, &s, &gid, &member_id).await;
            g.reset_member();
            g.instance_id = None;
            return;
        }
        let r = async {
            let coord = cluster.find_coordinator(0, &gid).await?;
            let mut h = HeartbeatRequest::default();
            h.group_id = GroupId(sb(&gid));
            h.generation_id = generation;
            h.member_id = sb(&member_id);
            h.group_instance_id = s.group_instance_id.as_deref().map(sb);
            match cluster.timed(coord.call(ApiKey::Heartbeat, RequestKind::Heartbeat(h))).await? {
                ResponseKind::Heartbeat(h) => Ok(h.error_code),
                _ => Err(Error::invalid("unexpected response to Heartbeat")),
            }
        }
        .await;
        let mut g = group.lock();
        if g.incarnation != incarnation {
            return;
        }
        match r.map(ResponseError::try_from_code) {
            Ok(None) => {}
            Ok(Some(ResponseError::RebalanceInProgress)) => g.rejoin = true,
            Ok(Some(ResponseError::UnknownMemberId | ResponseError::IllegalGeneration)) => {
                g.member_id.clear();
                g.generation = -1;
                g.rejoin = true;
                return;
            }
            Ok(Some(ResponseError::FencedInstanceId)) => {
                g.fatal = Some(Error::kafka(ResponseError::FencedInstanceId, "Heartbeat").with_kind(ErrorKind::Fatal));
                return;
            }
            Ok(Some(_)) | Err(_) => {}
        }
    }
}

pub(crate) async fn send_leave(cluster: &Cluster, s: &Settings, gid: &str, member_id: &str) {
    if s.group_instance_id.is_some() || member_id.is_empty() {
        return; // static members keep their place until session.timeout.ms
    }
    let r = async {
        let coord = cluster.find_coordinator(0, gid).await?;
        let mut m = leave_group_request::MemberIdentity::default();
        m.member_id = sb(member_id);
        let mut l = LeaveGroupRequest::default();
        l.group_id = GroupId(sb(gid));
        l.members = vec![m];
        cluster.timed(coord.call(ApiKey::LeaveGroup, RequestKind::LeaveGroup(l))).await
    };
    let _ = r.await;
}

/// Leave the group now (close, unsubscribe).
pub(crate) async fn leave(c: &mut Consumer) {
    let Some(gid) = c.s.group_id.clone() else { return };
    let (member_id, _) = c.group.member();
    send_leave(&c.cluster, &c.s, &gid, &member_id).await;
    c.group.reset_member();
    c.group.lock().rejoin = false;
}

/// The topics of an OffsetCommit request for (topic, partition, offset) triples.
pub(crate) fn offset_commit_topics(
    offsets: &[(String, i32, i64)],
) -> Vec<offset_commit_request::OffsetCommitRequestTopic> {
    by_topic(offsets.iter().map(|(t, p, o)| {
        let mut op = offset_commit_request::OffsetCommitRequestPartition::default();
        op.partition_index = *p;
        op.committed_offset = *o;
        op.committed_leader_epoch = -1;
        op.committed_metadata = Some(sb(""));
        (t.clone(), op)
    }))
    .into_iter()
    .map(|(t, partitions)| {
        let mut x = offset_commit_request::OffsetCommitRequestTopic::default();
        x.name = TopicName(sb(&t));
        x.partitions = partitions;
        x
    })
    .collect()
}

/// OffsetCommit with the member's generation (or as a simple consumer without one).
pub(crate) async fn commit(
    cluster: &Cluster,
    s: &Settings,
    group: &GroupState,
    offsets: &[(String, i32, i64)],
) -> Result<()> {
    let gid = s.group_id.clone().ok_or_else(|| Error::invalid("commits need group.id"))?;
    if offsets.is_empty() {
        return Ok(());
    }
    let deadline = Instant::now() + cluster.request_timeout;
    loop {
        let (member_id, generation) = group.member();
        let attempt = async {
            let coord = cluster.find_coordinator(0, &gid).await?;
            let mut r = OffsetCommitRequest::default();
            r.group_id = GroupId(sb(&gid));
            r.generation_id_or_member_epoch = generation;
            r.member_id = sb(&member_id);
            r.group_instance_id = s.group_instance_id.as_deref().map(sb);
            r.retention_time_ms = -1;
            r.topics = offset_commit_topics(offsets);
            let ResponseKind::OffsetCommit(c) =
                cluster.timed(coord.call(ApiKey::OffsetCommit, RequestKind::OffsetCommit(r))).await?
            else {
                return Err(Error::invalid("unexpected response to OffsetCommit"));
            };
            let code =
                c.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)).find(|c| *c != 0).unwrap_or(0);
            Error::check(code, format!("OffsetCommit for group {gid}"))
        };
        match attempt.await {
            Ok(()) => return Ok(()),
            Err(e) => match e.code() {
                Some(ResponseError::RebalanceInProgress) => {
                    group.request_rejoin();
                    return Err(e.with_kind(ErrorKind::Retriable));
                }
                Some(ResponseError::UnknownMemberId | ResponseError::IllegalGeneration) => {
                    group.request_rejoin();
                    return Err(e.with_kind(ErrorKind::Invalid));
                }
                _ if e.is_retriable() && Instant::now() < deadline => tokio::time::sleep(s.retry_backoff).await,
                _ => return Err(e),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscription_and_assignment_round_trip() {
        let owned = vec![("a".to_string(), 1), ("a".to_string(), 3), ("b".to_string(), 0)];
        let data = encode_subscription(&["a".into(), "b".into()], &owned).expect("encode");
        let s = decode_subscription("m", data).expect("decode");
        assert_eq!(s.topics, ["a", "b"]);
        assert_eq!(s.owned, owned);
        let a = decode_assignment(encode_assignment(&owned).expect("encode")).expect("decode");
        assert_eq!(a, owned);
        assert!(decode_assignment(Bytes::new()).expect("empty").is_empty());
        assert!(decode_subscription("m", Bytes::from_static(&[0, 1, 0xff])).is_none());
    }
}
