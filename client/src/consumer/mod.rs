//! The consumer: manual assignment or group membership (classic protocol), positions from
//! committed offsets or `auto.offset.reset`, Fetch from each partition's leader, seek,
//! pause/resume, commits, and read_committed with marker buffering (see [`fetch`]).
//!
//! Like the Java consumer it is driven by `poll`: joining, rebalancing, position lookup and
//! auto-commit happen inside it. A background task heartbeats; if the application stops
//! polling for `max.poll.interval.ms`, the member leaves the group (its partitions move on).

pub mod assignor;
pub mod fetch;
pub(crate) mod group;

use crate::cluster::{by_topic, sb, Cluster, Lane};
use crate::config::{ClientConfig, COMMON};
use crate::error::{Error, ErrorKind, Result};
use crate::producer::ConsumerGroupMetadata;
use fetch::PartitionReader;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use fetch::ConsumerRecord;
pub use group::GroupState;

/// A finished background fetch: the (partition, offset) pairs asked for, and the answer.
type FetchDone = (Vec<(TopicPartition, i64)>, Result<FetchResponse>);

/// Records a partition may hold undelivered before it is left out of prefetching.
const PREFETCH_RECORDS_MAX: usize = 20_000;
/// How many times a retriable ListOffsets refusal (a leader moving or just elected) is asked
/// again, 50 ms apart, before it is returned.
const LIST_OFFSETS_RETRIES: u32 = 40;

/// A topic and partition.
pub type TopicPartition = (String, i32);

/// Which records a consumer sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsolationLevel {
    /// Everything up to the high watermark, including open and aborted transactions.
    ReadUncommitted,
    /// Only committed transactions (and non-transactional records), up to the LSO.
    ReadCommitted,
}

/// Where to start when there is no committed offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetReset {
    /// The log start.
    Earliest,
    /// The end (the LSO for read_committed).
    Latest,
    /// Fail.
    None,
}

#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub group_id: Option<String>,
    pub group_instance_id: Option<String>,
    pub auto_commit: bool,
    pub auto_commit_interval: Duration,
    pub reset: OffsetReset,
    pub isolation: IsolationLevel,
    pub session_timeout: Duration,
    pub heartbeat_interval: Duration,
    pub max_poll_interval: Duration,
    pub max_poll_records: usize,
    pub fetch_min_bytes: i32,
    pub fetch_max_bytes: i32,
    pub fetch_max_wait: Duration,
    pub partition_max_bytes: i32,
    pub assignors: Vec<String>,
    pub retry_backoff: Duration,
}

const CONSUMER_KEYS: &[&str] = &[
    "group.id",
    "group.instance.id",
    "group.protocol",
    "enable.auto.commit",
    "auto.commit.interval.ms",
    "auto.offset.reset",
    "isolation.level",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "max.poll.records",
    "fetch.min.bytes",
    "fetch.max.bytes",
    "fetch.max.wait.ms",
    "max.partition.fetch.bytes",
    "partition.assignment.strategy",
];

impl Settings {
    fn from_config(c: &ClientConfig) -> Result<Settings> {
        let known: Vec<&str> = COMMON.iter().chain(CONSUMER_KEYS).copied().collect();
        c.check_known(&known)?;
        let reset = match c.string("auto.offset.reset", "latest").as_str() {
            "earliest" | "smallest" | "beginning" => OffsetReset::Earliest,
            "latest" | "largest" | "end" => OffsetReset::Latest,
            "none" | "error" => OffsetReset::None,
            o => return Err(Error::invalid(format!("auto.offset.reset must be earliest, latest or none, not '{o}'"))),
        };
        let isolation = match c.string("isolation.level", "read_uncommitted").as_str() {
            "read_uncommitted" => IsolationLevel::ReadUncommitted,
            "read_committed" => IsolationLevel::ReadCommitted,
            o => {
                return Err(Error::invalid(format!("isolation.level '{o}' is not read_committed or read_uncommitted")))
            }
        };
        if c.string("group.protocol", "classic") != "classic" {
            return Err(Error::invalid("group.protocol: this client implements 'classic' only"));
        }
        let mut assignors = Vec::new();
        for a in c.string("partition.assignment.strategy", "range,cooperative-sticky").split(',') {
            let a = a.trim();
            let name = match a.rsplit('.').next().unwrap_or(a) {
                "range" | "RangeAssignor" => "range",
                "roundrobin" | "RoundRobinAssignor" => "roundrobin",
                "cooperative-sticky" | "CooperativeStickyAssignor" => "cooperative-sticky",
                "" => continue,
                o => return Err(Error::invalid(format!("unknown partition.assignment.strategy '{o}'"))),
            };
            assignors.push(name.to_string());
        }
        if assignors.is_empty() {
            return Err(Error::invalid("partition.assignment.strategy is empty"));
        }
        let s = Settings {
            group_id: c.get("group.id").map(|s| s.to_string()).filter(|s| !s.is_empty()),
            group_instance_id: c.get("group.instance.id").map(|s| s.to_string()).filter(|s| !s.is_empty()),
            auto_commit: c.boolean("enable.auto.commit", true)?,
            auto_commit_interval: c.ms("auto.commit.interval.ms", 5000)?,
            reset,
            isolation,
            session_timeout: c.ms("session.timeout.ms", 45_000)?,
            heartbeat_interval: c.ms("heartbeat.interval.ms", 3000)?,
            max_poll_interval: c.ms("max.poll.interval.ms", 300_000)?,
            max_poll_records: c.parse("max.poll.records", 500usize)?.max(1),
            fetch_min_bytes: c.parse("fetch.min.bytes", 1)?,
            fetch_max_bytes: c.parse("fetch.max.bytes", 52_428_800)?,
            fetch_max_wait: c.ms("fetch.max.wait.ms", 500)?,
            partition_max_bytes: c.parse("max.partition.fetch.bytes", 1_048_576)?,
            assignors,
            retry_backoff: c.ms("retry.backoff.ms", 100)?,
        };
        if s.heartbeat_interval >= s.session_timeout {
            return Err(Error::invalid("heartbeat.interval.ms must be lower than session.timeout.ms"));
        }
        Ok(s)
    }
}

/// A Kafka consumer. Not shared between tasks: drive it with `poll` from one task.
pub struct Consumer {
    pub(crate) cluster: Arc<Cluster>,
    pub(crate) s: Settings,
    pub(crate) subscription: Vec<String>,
    pub(crate) readers: BTreeMap<TopicPartition, PartitionReader>,
    pub(crate) unpositioned: BTreeSet<TopicPartition>,
    paused: HashSet<TopicPartition>,
    pub(crate) group: GroupState,
    last_auto_commit: Instant,
    rotate: usize,
    inflight: Option<tokio::task::JoinSet<FetchDone>>,
    marks: HashMap<TopicPartition, (i64, i64)>,
}

impl Consumer {
    /// A consumer from Kafka-style properties; `bootstrap.servers` is required, `group.id`
    /// is needed for `subscribe` and commits.
    pub fn new(config: &ClientConfig) -> Result<Consumer> {
        let s = Settings::from_config(config)?;
        let mut cluster = Cluster::new(&config.bootstrap()?, &config.string("client.id", "sluice-consumer"), 1)?;
        cluster.retry_backoff = s.retry_backoff;
        cluster.request_timeout = config.ms("request.timeout.ms", 30_000)?;
        cluster.security = crate::security::Security::from_config(config)?;
        Ok(Consumer {
            cluster: Arc::new(cluster),
            group: GroupState::new(&s),
            s,
            subscription: Vec::new(),
            readers: BTreeMap::new(),
            unpositioned: BTreeSet::new(),
            paused: HashSet::new(),
            last_auto_commit: Instant::now(),
            rotate: 0,
            inflight: None,
            marks: HashMap::new(),
        })
    }

    /// Join the group for these topics (partitions come from the group's assignor).
    pub fn subscribe(&mut self, topics: &[&str]) -> Result<()> {
        if self.s.group_id.is_none() {
            return Err(Error::invalid("subscribe needs group.id"));
        }
        if topics.is_empty() {
            return Err(Error::invalid("subscribe to at least one topic (or call unsubscribe)"));
        }
        self.subscription = topics.iter().map(|t| t.to_string()).collect();
        self.group.request_rejoin();
        Ok(())
    }

    /// Read exactly these partitions, without group membership.
    pub fn assign(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        if !self.subscription.is_empty() {
            return Err(Error::invalid("assign after subscribe: call unsubscribe first"));
        }
        let want: BTreeSet<TopicPartition> = partitions.iter().cloned().collect();
        self.readers.retain(|tp, _| want.contains(tp));
        self.unpositioned = want.iter().filter(|tp| !self.readers.contains_key(*tp)).cloned().collect();
        self.paused.retain(|tp| want.contains(tp));
        Ok(())
    }

    /// The partitions assigned now.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        let mut v: Vec<TopicPartition> = self.readers.keys().chain(self.unpositioned.iter()).cloned().collect();
        v.sort();
        v
    }

    /// Leave the group (committing first if auto-commit is on) and drop the assignment.
    pub async fn unsubscribe(&mut self) -> Result<()> {
        if self.s.auto_commit && self.group.is_member() {
            let _ = self.commit_sync().await;
        }
        group::leave(self).await;
        self.subscription.clear();
        self.readers.clear();
        self.unpositioned.clear();
        Ok(())
    }

    /// The next offset to hand out (and to commit) for a partition.
    pub fn position(&self, tp: &TopicPartition) -> Option<i64> {
        self.readers.get(tp).map(|r| r.position())
    }

    /// Positions of every positioned partition.
    pub fn positions(&self) -> Vec<(String, i32, i64)> {
        self.readers.iter().map(|((t, p), r)| (t.clone(), *p, r.position())).collect()
    }

    /// The high watermark and last stable offset last reported for a partition.
    pub fn watermarks(&self, tp: &TopicPartition) -> Option<(i64, i64)> {
        self.marks.get(tp).copied()
    }

    /// Start reading `tp` at `offset` on the next poll.
    pub fn seek(&mut self, tp: &TopicPartition, offset: i64) -> Result<()> {
        if !self.readers.contains_key(tp) && !self.unpositioned.contains(tp) {
            return Err(Error::invalid(format!("seek: {}-{} is not assigned", tp.0, tp.1)));
        }
        self.unpositioned.remove(tp);
        let rc = self.s.isolation == IsolationLevel::ReadCommitted;
        self.readers.insert(tp.clone(), PartitionReader::new(offset, rc));
        Ok(())
    }

    /// Seek partitions to their first (`earliest`) or last offsets.
    pub async fn seek_to(&mut self, tps: &[TopicPartition], earliest: bool) -> Result<()> {
        let offsets = self.list_offsets(tps, if earliest { -2 } else { -1 }).await?;
        for (tp, o) in tps.iter().zip(offsets) {
            self.seek(tp, o)?;
        }
        Ok(())
    }

    /// Stop fetching these partitions (their positions are kept).
    pub fn pause(&mut self, tps: &[TopicPartition]) {
        self.paused.extend(tps.iter().cloned());
    }

    /// Fetch these partitions again.
    pub fn resume(&mut self, tps: &[TopicPartition]) {
        for tp in tps {
            self.paused.remove(tp);
        }
    }

    /// The group membership to hand to `Producer::send_offsets_to_transaction`.
    pub fn group_metadata(&self) -> Option<ConsumerGroupMetadata> {
        self.group.metadata(&self.s)
    }

    /// ListOffsets for partitions at a timestamp (-2 earliest, -1 latest), with this
    /// consumer's isolation level.
    pub async fn list_offsets(&self, tps: &[TopicPartition], timestamp: i64) -> Result<Vec<i64>> {
        let mut out = Vec::with_capacity(tps.len());
        for (t, p) in tps {
            let mut attempt = 0;
            loop {
                match self.list_offset(t, *p, timestamp).await {
                    Ok(offset) => {
                        out.push(offset);
                        break;
                    }
                    // a leader moving, or just elected (OFFSET_NOT_AVAILABLE until its high
                    // watermark is established): asked again, as Kafka's clients do
                    Err(e) if e.is_retriable() && attempt < LIST_OFFSETS_RETRIES => {
                        attempt += 1;
                        self.cluster.invalidate(t);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(out)
    }

    /// One partition's ListOffsets at its leader.
    async fn list_offset(&self, t: &str, p: i32, timestamp: i64) -> Result<i64> {
        let leader = self.cluster.leader(t, p).await?;
        let b = self.cluster.broker(leader, Lane::Data).await?;
        let mut lp = list_offsets_request::ListOffsetsPartition::default();
        lp.partition_index = p;
        lp.timestamp = timestamp;
        lp.current_leader_epoch = -1;
        let mut lt = list_offsets_request::ListOffsetsTopic::default();
        lt.name = TopicName(sb(t));
        lt.partitions = vec![lp];
        let mut r = ListOffsetsRequest::default();
        r.replica_id = BrokerId(-1);
        r.isolation_level = i8::from(self.s.isolation == IsolationLevel::ReadCommitted);
        r.topics = vec![lt];
        let ResponseKind::ListOffsets(l) =
            self.cluster.timed(b.call(ApiKey::ListOffsets, RequestKind::ListOffsets(r))).await?
        else {
            return Err(Error::invalid("unexpected response to ListOffsets"));
        };
        let part = l
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .ok_or_else(|| Error::invalid("empty ListOffsets response"))?;
        match Error::from_code(part.error_code, format!("ListOffsets {t}-{p}")) {
            Some(e) => Err(e),
            None => Ok(part.offset),
        }
    }

    /// Records, waiting up to `timeout` for some. Joins or rebalances the group, finds
    /// positions and auto-commits as needed.
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>> {
        let deadline = Instant::now() + timeout;
        self.group.polled();
        loop {
            if let Some(e) = self.group.fatal() {
                return Err(e);
            }
            if !self.subscription.is_empty() && self.group.needs_join() {
                group::join(self).await?;
            }
            if self.s.auto_commit
                && self.group.is_member()
                && self.last_auto_commit.elapsed() >= self.s.auto_commit_interval
            {
                self.last_auto_commit = Instant::now();
                if let Err(e) = self.commit_sync().await {
                    if e.is_fatal() {
                        return Err(e);
                    }
                }
            }
            if !self.unpositioned.is_empty() {
                self.find_positions().await?;
            }
            let mut out = Vec::new();
            let keys: Vec<TopicPartition> = self.readers.keys().cloned().collect();
            if !keys.is_empty() {
                self.rotate = (self.rotate + 1) % keys.len();
                for i in 0..keys.len() {
                    let tp = &keys[(self.rotate + i) % keys.len()];
                    if self.paused.contains(tp) {
                        continue;
                    }
                    if let Some(r) = self.readers.get_mut(tp) {
                        r.take(self.s.max_poll_records, &mut out);
                    }
                }
            }
            if !out.is_empty() {
                // Prefetch while the application works on these.
                if self.inflight.is_none() {
                    self.start_fetch(self.s.fetch_max_wait).await?;
                }
                return Ok(out);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(out);
            }
            if self.inflight.is_none() {
                self.start_fetch(left.min(self.s.fetch_max_wait)).await?;
            }
            self.finish_fetch(deadline).await?;
        }
    }

    async fn find_positions(&mut self) -> Result<()> {
        let tps: Vec<TopicPartition> = self.unpositioned.iter().cloned().collect();
        let rc = self.s.isolation == IsolationLevel::ReadCommitted;
        let committed = if self.s.group_id.is_some() { self.committed(&tps).await? } else { HashMap::new() };
        let mut missing = Vec::new();
        for tp in &tps {
            match committed.get(tp) {
                Some(o) if *o >= 0 => {
                    self.readers.insert(tp.clone(), PartitionReader::new(*o, rc));
                    self.unpositioned.remove(tp);
                }
                _ => missing.push(tp.clone()),
            }
        }
        if !missing.is_empty() {
            let ts = match self.s.reset {
                OffsetReset::Earliest => -2,
                OffsetReset::Latest => -1,
                OffsetReset::None => {
                    return Err(Error::kafka(
                        ResponseError::OffsetOutOfRange,
                        format!("no committed offset for {}-{} and auto.offset.reset=none", missing[0].0, missing[0].1),
                    )
                    .with_kind(ErrorKind::Invalid))
                }
            };
            let offsets = self.list_offsets(&missing, ts).await?;
            for (tp, o) in missing.into_iter().zip(offsets) {
                self.unpositioned.remove(&tp);
                self.readers.insert(tp, PartitionReader::new(o, rc));
            }
        }
        Ok(())
    }

    /// Committed offsets of the group for these partitions (waits while a transaction has
    /// offsets pending for them: UNSTABLE_OFFSET_COMMIT).
    pub async fn committed(&self, tps: &[TopicPartition]) -> Result<HashMap<TopicPartition, i64>> {
        let gid = self.s.group_id.clone().ok_or_else(|| Error::invalid("committed offsets need group.id"))?;
        let deadline = Instant::now() + self.cluster.request_timeout;
        loop {
            let coord = self.cluster.find_coordinator(0, &gid).await?;
            let topics = by_topic(tps.iter().cloned())
                .into_iter()
                .map(|(t, partition_indexes)| {
                    let mut x = offset_fetch_request::OffsetFetchRequestTopic::default();
                    x.name = TopicName(sb(&t));
                    x.partition_indexes = partition_indexes;
                    x
                })
                .collect();
            let mut r = OffsetFetchRequest::default();
            r.group_id = GroupId(sb(&gid));
            r.topics = Some(topics);
            r.require_stable = self.s.isolation == IsolationLevel::ReadCommitted;
            let ResponseKind::OffsetFetch(f) =
                self.cluster.timed(coord.call(ApiKey::OffsetFetch, RequestKind::OffsetFetch(r))).await?
            else {
                return Err(Error::invalid("unexpected response to OffsetFetch"));
            };
            let mut code = f.error_code;
            let mut out = HashMap::new();
            for t in &f.topics {
                for p in &t.partitions {
                    if p.error_code != 0 && code == 0 {
                        code = p.error_code;
                    }
                    out.insert((t.name.0.to_string(), p.partition_index), p.committed_offset);
                }
            }
            match Error::from_code(code, format!("OffsetFetch for group {gid}")) {
                None => return Ok(out),
                Some(e) if e.is_retriable() || e.code() == Some(ResponseError::UnstableOffsetCommit) => {
                    if Instant::now() >= deadline {
                        return Err(e.with_kind(ErrorKind::Retriable));
                    }
                    tokio::time::sleep(self.s.retry_backoff).await;
                }
                Some(e) => return Err(e),
            }
        }
    }

    /// Commit the current positions of every assigned partition.
    pub async fn commit_sync(&mut self) -> Result<()> {
        let offsets = self.positions();
        self.commit_offsets(&offsets).await
    }

    /// Commit these (topic, partition, next offset) positions.
    pub async fn commit_offsets(&mut self, offsets: &[(String, i32, i64)]) -> Result<()> {
        group::commit(&self.cluster, &self.s, &self.group, offsets).await.inspect_err(|e| {
            if matches!(e.code(), Some(ResponseError::UnknownMemberId | ResponseError::IllegalGeneration)) {
                self.group.reset_member();
            }
        })
    }

    /// Commit the current positions in the background; the handle yields the outcome.
    pub fn commit_async(&self) -> tokio::task::JoinHandle<Result<()>> {
        let (cluster, s, group, offsets) = (self.cluster.clone(), self.s.clone(), self.group.clone(), self.positions());
        tokio::spawn(async move { group::commit(&cluster, &s, &group, &offsets).await })
    }

    /// Commit (with auto-commit on) and leave the group.
    pub async fn close(mut self) -> Result<()> {
        self.unsubscribe().await
    }

    /// Send Fetch requests (one per leader) for every fetchable partition, in the background.
    /// Partitions already holding many records are skipped until the application catches up.
    async fn start_fetch(&mut self, wait: Duration) -> Result<()> {
        let mut by_leader: HashMap<i32, Vec<(TopicPartition, i64)>> = HashMap::new();
        let mut unknown = Vec::new();
        for (tp, r) in &self.readers {
            if self.paused.contains(tp) || r.held() > PREFETCH_RECORDS_MAX {
                continue;
            }
            match self.cluster.cached_leader(&tp.0, tp.1) {
                Some(l) => by_leader.entry(l).or_default().push((tp.clone(), r.fetch_offset)),
                None => unknown.push(tp.0.clone()),
            }
        }
        unknown.dedup();
        for t in unknown {
            if let Err(e) = self.cluster.partitions(&t).await {
                if !e.is_retriable() {
                    return Err(e);
                }
            }
        }
        let mut tasks = tokio::task::JoinSet::new();
        for (leader, parts) in by_leader {
            let cluster = self.cluster.clone();
            let s = self.s.clone();
            tasks.spawn(async move {
                let r = fetch_from(&cluster, &s, leader, &parts, wait).await;
                (parts, r)
            });
        }
        if !tasks.is_empty() {
            self.inflight = Some(tasks);
        }
        Ok(())
    }

    /// Wait (until `deadline`) for the fetch in flight and apply what arrived. A fetch still
    /// running at the deadline stays in flight for the next poll.
    async fn finish_fetch(&mut self, deadline: Instant) -> Result<()> {
        let Some(mut tasks) = self.inflight.take() else {
            tokio::time::sleep(deadline.saturating_duration_since(Instant::now()).min(self.s.retry_backoff)).await;
            return Ok(());
        };
        loop {
            let next = tokio::time::timeout_at(deadline.into(), tasks.join_next()).await;
            let done = match next {
                Err(_) => {
                    self.inflight = Some(tasks);
                    return Ok(());
                }
                Ok(None) => return Ok(()),
                Ok(Some(done)) => done,
            };
            let Ok((parts, r)) = done else { continue };
            match r {
                Ok(resp) => self.apply_fetch(resp, &parts)?,
                Err(e) if e.is_retriable() => {
                    for ((t, _), _) in parts {
                        self.cluster.invalidate(&t);
                    }
                    tokio::time::sleep(self.s.retry_backoff).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Apply a Fetch response; `asked` holds the offset each partition was fetched from (an
    /// answer for a partition sought or reassigned since is dropped).
    fn apply_fetch(&mut self, resp: FetchResponse, asked: &[(TopicPartition, i64)]) -> Result<()> {
        Error::check(resp.error_code, "Fetch")?;
        for t in resp.responses {
            let topic = t.topic.0.to_string();
            for p in t.partitions {
                let tp = (topic.clone(), p.partition_index);
                let Some(reader) = self.readers.get_mut(&tp) else { continue };
                if !asked.iter().any(|(a, o)| *a == tp && *o == reader.fetch_offset) {
                    continue;
                }
                match ResponseError::try_from_code(p.error_code) {
                    None => {}
                    Some(ResponseError::OffsetOutOfRange) => {
                        self.readers.remove(&tp);
                        self.unpositioned.insert(tp);
                        continue;
                    }
                    Some(c) if c.is_retriable() => {
                        self.cluster.invalidate(&topic);
                        continue;
                    }
                    Some(c) => return Err(Error::kafka(c, format!("Fetch {topic}-{}", p.partition_index))),
                }
                self.marks.insert(tp.clone(), (p.high_watermark, p.last_stable_offset));
                let aborted: Vec<(i64, i64)> = p
                    .aborted_transactions
                    .as_ref()
                    .map(|v| v.iter().map(|a| (a.producer_id.0, a.first_offset)).collect())
                    .unwrap_or_default();
                if let Some(data) = &p.records {
                    reader.decode(&topic, p.partition_index, data, &aborted).map_err(|e| {
                        Error::new(ErrorKind::Fatal, format!("corrupt data from {topic}-{}: {e}", p.partition_index))
                    })?;
                }
            }
        }
        Ok(())
    }
}

impl Drop for Consumer {
    /// Stops the heartbeat and, inside a tokio runtime, leaves the group in the background
    /// (call `close` to also commit and to wait for the leave).
    fn drop(&mut self) {
        let (member_id, _) = self.group.member();
        self.group.reset_member();
        self.group.request_stop();
        if let (Ok(rt), Some(gid)) = (tokio::runtime::Handle::try_current(), self.s.group_id.clone()) {
            let (cluster, s) = (self.cluster.clone(), self.s.clone());
            rt.spawn(async move { group::send_leave(&cluster, &s, &gid, &member_id).await });
        }
    }
}

async fn fetch_from(
    cluster: &Cluster,
    s: &Settings,
    leader: i32,
    parts: &[(TopicPartition, i64)],
    wait: Duration,
) -> Result<FetchResponse> {
    let b = cluster.broker(leader, Lane::Fetch).await?;
    let topics = by_topic(parts.iter().map(|((t, p), offset)| {
        let mut fp = fetch_request::FetchPartition::default();
        fp.partition = *p;
        fp.fetch_offset = *offset;
        fp.current_leader_epoch = -1;
        fp.last_fetched_epoch = -1;
        fp.log_start_offset = -1;
        fp.partition_max_bytes = s.partition_max_bytes;
        (t.clone(), fp)
    }))
    .into_iter()
    .map(|(t, partitions)| {
        let mut x = fetch_request::FetchTopic::default();
        x.topic = TopicName(sb(&t));
        x.partitions = partitions;
        x
    })
    .collect();
    let mut r = FetchRequest::default();
    r.replica_id = BrokerId(-1);
    r.max_wait_ms = wait.as_millis().min(i32::MAX as u128) as i32;
    r.min_bytes = s.fetch_min_bytes;
    r.max_bytes = s.fetch_max_bytes;
    r.isolation_level = i8::from(s.isolation == IsolationLevel::ReadCommitted);
    r.session_id = 0;
    r.session_epoch = -1;
    r.topics = topics;
    match cluster.timed(b.call(ApiKey::Fetch, RequestKind::Fetch(r))).await? {
        ResponseKind::Fetch(f) => Ok(f),
        _ => Err(Error::invalid("unexpected response to Fetch")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_follow_kafka_names() {
        let base = ClientConfig::new().set("bootstrap.servers", "127.0.0.1:1");
        let s = Settings::from_config(&base).expect("defaults");
        assert_eq!(s.assignors, ["range", "cooperative-sticky"]);
        assert_eq!(s.isolation, IsolationLevel::ReadUncommitted);
        assert_eq!(s.reset, OffsetReset::Latest);
        let s = Settings::from_config(
            &base
                .clone()
                .set("partition.assignment.strategy", "org.apache.kafka.clients.consumer.RoundRobinAssignor")
                .set("isolation.level", "read_committed")
                .set("auto.offset.reset", "earliest"),
        )
        .expect("java names");
        assert_eq!(s.assignors, ["roundrobin"]);
        assert_eq!(s.isolation, IsolationLevel::ReadCommitted);
        assert!(Settings::from_config(&base.clone().set("isolation.level", "dirty")).is_err());
        assert!(Settings::from_config(&base.clone().set("group.protocol", "consumer")).is_err());
        assert!(Settings::from_config(&base.set("heartbeat.interval.ms", 50_000)).is_err());
    }
}
