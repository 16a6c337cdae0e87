//! What the client knows about the cluster: the brokers, each topic's partitions and leaders,
//! and one pipelined connection per broker (per lane), with the API versions that broker
//! supports. Connections that fail are replaced on next use; metadata is refreshed on demand
//! (after a leader error) and never more often than `retry.backoff.ms` per topic.

use crate::connection::Connection;
use crate::error::{Error, ErrorKind, Result};
use crate::sync::Locked as _;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Versions this client speaks: (lowest accepted, preferred). The version sent is the
/// preferred one capped by the broker's highest; a broker whose highest is below the lowest
/// accepted gets an UNSUPPORTED_VERSION error without a request.
fn client_versions(key: ApiKey) -> (i16, i16) {
    match key {
        ApiKey::Produce => (3, 9),
        ApiKey::Fetch => (4, 12),
        ApiKey::ListOffsets => (1, 7),
        ApiKey::Metadata => (1, 12),
        ApiKey::ApiVersions => (0, 3),
        ApiKey::FindCoordinator => (1, 3),
        // v6: KIP-939 two-phase commit (Enable2Pc, KeepPreparedTxn)
        ApiKey::InitProducerId => (0, 6),
        ApiKey::AddPartitionsToTxn => (0, 3),
        ApiKey::AddOffsetsToTxn => (0, 3),
        ApiKey::EndTxn => (0, 3),
        ApiKey::TxnOffsetCommit => (0, 3),
        ApiKey::JoinGroup => (2, 7),
        ApiKey::SyncGroup => (1, 5),
        ApiKey::Heartbeat => (1, 4),
        ApiKey::LeaveGroup => (3, 4),
        ApiKey::OffsetCommit => (2, 8),
        ApiKey::OffsetFetch => (1, 7),
        ApiKey::CreateTopics => (2, 5),
        ApiKey::DeleteTopics => (1, 5),
        ApiKey::CreatePartitions => (0, 3),
        ApiKey::DescribeConfigs => (1, 4),
        ApiKey::IncrementalAlterConfigs => (0, 1),
        ApiKey::ListGroups => (0, 4),
        ApiKey::DescribeGroups => (0, 5),
        ApiKey::DeleteGroups => (0, 2),
        ApiKey::OffsetDelete => (0, 0),
        ApiKey::ListTransactions => (0, 1),
        ApiKey::DescribeTransactions => (0, 0),
        ApiKey::DescribeProducers => (0, 0),
        ApiKey::WriteTxnMarkers => (1, 1),
        ApiKey::DescribeCluster => (0, 0),
        ApiKey::SaslHandshake => (1, 1),
        ApiKey::SaslAuthenticate => (0, 2),
        ApiKey::CreateAcls => (1, 3),
        ApiKey::DescribeAcls => (1, 3),
        ApiKey::DeleteAcls => (1, 3),
        ApiKey::DescribeUserScramCredentials => (0, 0),
        ApiKey::AlterUserScramCredentials => (0, 0),
        _ => (0, 0),
    }
}

/// A broker the client talks to.
pub struct Broker {
    /// The broker's node id (-1 for a bootstrap address before metadata named it).
    pub node_id: i32,
    conn: Connection,
    versions: HashMap<i16, (i16, i16)>,
}

impl Broker {
    /// The version to use for `key` with this broker.
    pub fn version(&self, key: ApiKey) -> Result<i16> {
        let (min, want) = client_versions(key);
        let (bmin, bmax) = self
            .versions
            .get(&(key as i16))
            .copied()
            .ok_or_else(|| Error::kafka(ResponseError::UnsupportedVersion, format!("{key:?} (broker lacks it)")))?;
        let v = want.min(bmax);
        if v < min.max(bmin) {
            return Err(Error::kafka(
                ResponseError::UnsupportedVersion,
                format!("{key:?} (broker {bmin}..={bmax}, client {min}..={want})"),
            ));
        }
        Ok(v)
    }

    /// Send a request with the negotiated version and wait for the response.
    pub async fn call(&self, key: ApiKey, body: RequestKind) -> Result<ResponseKind> {
        let v = self.version(key)?;
        Ok(self.conn.call(key, v, body).await?)
    }

    /// Send a request with the negotiated version; the receiver yields the response.
    pub async fn send(
        &self,
        key: ApiKey,
        body: RequestKind,
    ) -> Result<tokio::sync::oneshot::Receiver<Result<ResponseKind, crate::ConnError>>> {
        let v = self.version(key)?;
        Ok(self.conn.send(key, v, body).await?)
    }

    /// Send a request that has no response (acks=0 produce).
    pub async fn send_oneway(&self, key: ApiKey, body: RequestKind) -> Result<()> {
        let v = self.version(key)?;
        Ok(self.conn.send_oneway(key, v, body).await?)
    }

    fn is_closed(&self) -> bool {
        self.conn.is_closed()
    }

    /// Stop using this connection (after a request timed out): the next call opens another.
    pub fn close(&self) {
        self.conn.close();
    }
}

/// One partition's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    /// Partition index.
    pub partition: i32,
    /// Leader's node id, -1 when there is none.
    pub leader: i32,
    /// Replica node ids.
    pub replicas: Vec<i32>,
    /// In-sync replica node ids.
    pub isr: Vec<i32>,
}

#[derive(Debug, Clone)]
struct TopicInfo {
    partitions: Vec<PartitionInfo>,
    fetched: Instant,
}

#[derive(Default)]
struct State {
    brokers: HashMap<i32, String>,
    topics: HashMap<String, TopicInfo>,
    conns: HashMap<(String, u8), Arc<Broker>>,
    controller: i32,
    cluster_id: Option<String>,
}

/// Connection lanes: requests that block (JoinGroup) or that the broker may hold (Fetch) get
/// their own connection so they never delay the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Produce, metadata and admin requests.
    Data = 0,
    /// Group and transaction coordinator requests.
    Coordinator = 1,
    /// Fetch requests.
    Fetch = 2,
}

/// Cluster metadata and connections, shared by one client's tasks.
pub struct Cluster {
    bootstrap: Vec<String>,
    client_id: String,
    inflight: usize,
    /// Wait between metadata refreshes of one topic, and before retrying a failed call.
    pub retry_backoff: Duration,
    /// How long a call to a broker may take before it counts as failed.
    pub request_timeout: Duration,
    /// TLS and SASL settings for every connection.
    pub security: crate::security::Security,
    state: Mutex<State>,
}

/// Group `(topic, item)` pairs by topic, topics in first-seen order (the shape of every
/// request that lists partitions per topic).
pub(crate) fn by_topic<T>(items: impl IntoIterator<Item = (String, T)>) -> Vec<(String, Vec<T>)> {
    let mut out: Vec<(String, Vec<T>)> = Vec::new();
    for (topic, item) in items {
        match out.iter_mut().find(|(t, _)| *t == topic) {
            Some((_, v)) => v.push(item),
            None => out.push((topic, vec![item])),
        }
    }
    out
}

/// A short string-bytes value.
pub(crate) fn sb(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

impl Cluster {
    /// A cluster reached through `bootstrap` (comma-separated host:port list). Nothing is
    /// connected until the first call.
    pub fn new(bootstrap: &str, client_id: &str, inflight: usize) -> Result<Cluster> {
        let list: Vec<String> = bootstrap.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
        if list.is_empty() {
            return Err(Error::invalid("bootstrap.servers is empty"));
        }
        Ok(Cluster {
            bootstrap: list,
            client_id: client_id.to_string(),
            inflight: inflight.max(1),
            retry_backoff: Duration::from_millis(100),
            request_timeout: Duration::from_secs(30),
            security: Default::default(),
            state: Mutex::new(State { controller: -1, ..Default::default() }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.locked()
    }

    async fn open(&self, addr: &str, node_id: i32, lane: Lane) -> Result<Arc<Broker>> {
        if let Some(b) = self.lock().conns.get(&(addr.to_string(), lane as u8)) {
            if !b.is_closed() {
                return Ok(b.clone());
            }
        }
        let inflight = if lane == Lane::Data { self.inflight } else { 1 };
        let conn = tokio::time::timeout(
            self.request_timeout,
            Connection::connect_secured(addr, &self.client_id, inflight, &self.security),
        )
        .await
        .map_err(|_| Error::timeout(format!("connect to {addr} timed out")))??;
        let mut req = ApiVersionsRequest::default();
        req.client_software_name = sb("sluice-client");
        req.client_software_version = sb(env!("CARGO_PKG_VERSION"));
        let answer = tokio::time::timeout(
            self.request_timeout,
            conn.call(ApiKey::ApiVersions, 3, RequestKind::ApiVersions(req)),
        )
        .await
        .map_err(|_| Error::timeout(format!("ApiVersions from {addr} timed out")))?;
        let versions = match answer? {
            ResponseKind::ApiVersions(r) if r.error_code == 0 => {
                r.api_keys.iter().map(|k| (k.api_key, (k.min_version, k.max_version))).collect()
            }
            ResponseKind::ApiVersions(r) => {
                return Err(Error::from_code(r.error_code, "ApiVersions").unwrap_or_else(|| Error::invalid("?")))
            }
            _ => return Err(Error::invalid("unexpected response to ApiVersions")),
        };
        tokio::time::timeout(self.request_timeout, self.security.authenticate(&conn, &versions))
            .await
            .map_err(|_| Error::timeout(format!("SASL authentication with {addr} timed out")))??;
        let b = Arc::new(Broker { node_id, conn, versions });
        self.lock().conns.insert((addr.to_string(), lane as u8), b.clone());
        Ok(b)
    }

    /// A connection to broker `node_id` on `lane`.
    pub async fn broker(&self, node_id: i32, lane: Lane) -> Result<Arc<Broker>> {
        let addr = self.lock().brokers.get(&node_id).cloned();
        let addr = match addr {
            Some(a) => a,
            None => {
                self.refresh(&[]).await?;
                self.lock().brokers.get(&node_id).cloned().ok_or_else(|| {
                    Error::new(ErrorKind::Retriable, format!("broker {node_id} is not in the metadata"))
                })?
            }
        };
        self.open(&addr, node_id, lane).await
    }

    /// A connection to any reachable broker: a known one first, then the bootstrap list.
    pub async fn any_broker(&self, lane: Lane) -> Result<Arc<Broker>> {
        let known: Vec<(i32, String)> = self.lock().brokers.iter().map(|(k, v)| (*k, v.clone())).collect();
        let mut last = Error::new(ErrorKind::Retriable, "no broker reachable");
        for (id, addr) in known.into_iter().chain(self.bootstrap.iter().map(|a| (-1, a.clone()))) {
            match self.open(&addr, id, lane).await {
                Ok(b) => return Ok(b),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Fetch metadata for `topics` (all topics when empty) and remember it.
    pub async fn refresh(&self, topics: &[&str]) -> Result<MetadataResponse> {
        let b = self.any_broker(Lane::Data).await?;
        let mut r = MetadataRequest::default();
        r.topics = if topics.is_empty() {
            None
        } else {
            Some(
                topics
                    .iter()
                    .map(|t| {
                        let mut m = metadata_request::MetadataRequestTopic::default();
                        m.name = Some(TopicName(sb(t)));
                        m
                    })
                    .collect(),
            )
        };
        r.allow_auto_topic_creation = true;
        let ResponseKind::Metadata(m) = self.timed(b.call(ApiKey::Metadata, RequestKind::Metadata(r))).await? else {
            return Err(Error::invalid("unexpected response to Metadata"));
        };
        let mut st = self.lock();
        for br in &m.brokers {
            st.brokers.insert(br.node_id.0, format!("{}:{}", &*br.host, br.port));
        }
        st.controller = m.controller_id.0;
        st.cluster_id = m.cluster_id.as_ref().map(|c| c.to_string());
        let now = Instant::now();
        for t in &m.topics {
            let Some(name) = &t.name else { continue };
            if t.error_code != 0 {
                st.topics.remove(&name.0.to_string());
                continue;
            }
            let mut parts: Vec<PartitionInfo> = t
                .partitions
                .iter()
                .map(|p| PartitionInfo {
                    partition: p.partition_index,
                    leader: if p.error_code == 0 { p.leader_id.0 } else { -1 },
                    replicas: p.replica_nodes.iter().map(|n| n.0).collect(),
                    isr: p.isr_nodes.iter().map(|n| n.0).collect(),
                })
                .collect();
            parts.sort_by_key(|p| p.partition);
            st.topics.insert(name.0.to_string(), TopicInfo { partitions: parts, fetched: now });
        }
        Ok(m)
    }

    /// Forget a topic's leaders so the next lookup refreshes them (after NOT_LEADER etc.).
    pub fn invalidate(&self, topic: &str) {
        if let Some(t) = self.lock().topics.get_mut(topic) {
            t.fetched = Instant::now() - Duration::from_secs(3600);
            for p in &mut t.partitions {
                p.leader = -1;
            }
        }
    }

    /// The partitions of `topic`, from the cache or fetched (which may auto-create it).
    /// UNKNOWN_TOPIC_OR_PARTITION when the topic does not exist.
    pub async fn partitions(&self, topic: &str) -> Result<Vec<PartitionInfo>> {
        if let Some(t) = self.lock().topics.get(topic) {
            if t.partitions.iter().all(|p| p.leader >= 0) || t.fetched.elapsed() < self.retry_backoff {
                return Ok(t.partitions.clone());
            }
        }
        let m = self.refresh(&[topic]).await?;
        for t in &m.topics {
            if t.name.as_ref().is_some_and(|n| &*n.0 == topic) && t.error_code != 0 {
                return Err(Error::from_code(t.error_code, format!("metadata for {topic}"))
                    .unwrap_or_else(|| Error::invalid("?")));
            }
        }
        self.lock()
            .topics
            .get(topic)
            .map(|t| t.partitions.clone())
            .ok_or_else(|| Error::kafka(ResponseError::UnknownTopicOrPartition, format!("metadata for {topic}")))
    }

    /// The leader of a partition, if known without a request.
    pub fn cached_leader(&self, topic: &str, partition: i32) -> Option<i32> {
        let st = self.lock();
        let t = st.topics.get(topic)?;
        t.partitions.iter().find(|p| p.partition == partition).map(|p| p.leader).filter(|l| *l >= 0)
    }

    /// The leader of a partition, refreshing metadata if needed.
    pub async fn leader(&self, topic: &str, partition: i32) -> Result<i32> {
        if let Some(l) = self.cached_leader(topic, partition) {
            return Ok(l);
        }
        let parts = self.partitions(topic).await?;
        parts
            .iter()
            .find(|p| p.partition == partition)
            .map(|p| p.leader)
            .filter(|l| *l >= 0)
            .ok_or_else(|| Error::kafka(ResponseError::LeaderNotAvailable, format!("{topic}-{partition}")))
    }

    /// Known broker addresses by node id.
    pub fn brokers(&self) -> HashMap<i32, String> {
        self.lock().brokers.clone()
    }

    /// The controller's node id from the last metadata (-1 if unknown) and the cluster id.
    pub fn controller(&self) -> (i32, Option<String>) {
        let st = self.lock();
        (st.controller, st.cluster_id.clone())
    }

    /// Find the coordinator for a group (`key_type` 0) or transactional id (1).
    pub async fn find_coordinator(&self, key_type: i8, key: &str) -> Result<Arc<Broker>> {
        let b = self.any_broker(Lane::Data).await?;
        let mut r = FindCoordinatorRequest::default();
        r.key = sb(key);
        r.key_type = key_type;
        let ResponseKind::FindCoordinator(f) =
            self.timed(b.call(ApiKey::FindCoordinator, RequestKind::FindCoordinator(r))).await?
        else {
            return Err(Error::invalid("unexpected response to FindCoordinator"));
        };
        Error::check(f.error_code, format!("FindCoordinator({key})"))?;
        let addr = format!("{}:{}", &*f.host, f.port);
        self.lock().brokers.insert(f.node_id.0, addr.clone());
        self.open(&addr, f.node_id.0, Lane::Coordinator).await
    }

    /// Run `fut` under the request timeout (a timeout is a retriable error).
    pub async fn timed<T>(&self, fut: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        tokio::time::timeout(self.request_timeout, fut)
            .await
            .map_err(|_| Error::timeout(format!("request timed out after {:?}", self.request_timeout)))?
    }
}
