//! Kafka calls to peer brokers (cluster mode), all here: a transaction coordinator's markers to
//! a partition's leader (WriteTxnMarkers), a leader's KIP-890 verification at a transactional
//! id's coordinator (AddPartitionsToTxn v4), a group coordinator adding its group to a
//! transaction (AddOffsetsToTxn). They travel over the peer's cluster (Raft) port, not its
//! client listener: authenticated and encrypted as Raft traffic is (mutual TLS with
//! `CONTROLLER:SSL`), whatever security the client listeners ask of clients, and answered as a
//! peer broker (`Session::peer_broker`). Each call has its own timeout. Connections are pooled
//! per peer and carry one request at a time; a connection that failed is dropped, and a call
//! that failed on a reused connection is tried once more on a fresh one (the peer may have
//! restarted). Every call here may be repeated safely: the coordinator and the leader answer a
//! repeat as they answered the first.

use crate::cluster::network::Conn;
use crate::cluster::ClusterNode;
use crate::sync::OrDie as _;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, OnceLock, Weak};
use std::time::Duration;

/// Idle connections kept per peer.
const IDLE_PER_PEER: usize = 8;

static POOL: LazyLock<Mutex<HashMap<String, Vec<Conn>>>> = LazyLock::new(Default::default);

/// The cluster whose brokers' cluster ports the calls go to (set once when the broker joins it).
static CLUSTER: OnceLock<Weak<ClusterNode>> = OnceLock::new();

/// Send peer calls over `node`'s cluster: each broker's Raft address.
pub fn use_cluster(node: &std::sync::Arc<ClusterNode>) {
    let _ = CLUSTER.set(std::sync::Arc::downgrade(node));
}

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// One request on one connection: send it, read its answer.
async fn exchange(
    conn: &mut Option<Conn>,
    addr: &str,
    frame: &[u8],
    key: ApiKey,
    version: i16,
    ttl: Duration,
) -> anyhow::Result<ResponseKind> {
    let answer = crate::cluster::network::kafka(conn, addr, frame.to_vec(), ttl).await?;
    let (_, resp) = sluice_protocol::api::decode_response(key, version, bytes::Bytes::from(answer))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(resp)
}

/// One Kafka request to broker `peer`, over its cluster port, answered within `ttl`.
pub async fn call(
    peer: i32,
    key: ApiKey,
    version: i16,
    body: RequestKind,
    ttl: Duration,
) -> anyhow::Result<ResponseKind> {
    let node = CLUSTER.get().and_then(Weak::upgrade).ok_or_else(|| anyhow::anyhow!("not in a cluster"))?;
    let addr = u64::try_from(peer)
        .ok()
        .and_then(|id| node.addr_of(id))
        .ok_or_else(|| anyhow::anyhow!("broker {peer} has no cluster address"))?;
    drop(node);
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(1)
        .with_client_id(Some(StrBytes::from_static_str("sluice-broker")));
    let mut frame = sluice_protocol::api::encode_request(&header, &body).map_err(|e| anyhow::anyhow!("{e}"))?;
    let frame = frame.split_off(4); // the size prefix: the cluster port frames it itself
    let started = std::time::Instant::now();
    let pooled = POOL.lock().or_die().get_mut(&addr).and_then(Vec::pop);
    if pooled.is_some() {
        let mut conn = pooled;
        if let Ok(resp) = exchange(&mut conn, &addr, &frame, key, version, ttl).await {
            give_back(&addr, conn);
            return Ok(resp);
        }
    }
    let left = ttl.saturating_sub(started.elapsed());
    if left.is_zero() {
        anyhow::bail!("broker {peer} ({addr}): {key:?} timed out");
    }
    let mut conn = None;
    let resp = exchange(&mut conn, &addr, &frame, key, version, left)
        .await
        .map_err(|e| anyhow::anyhow!("broker {peer} ({addr}): {key:?}: {e}"))?;
    give_back(&addr, conn);
    Ok(resp)
}

fn give_back(addr: &str, conn: Option<Conn>) {
    let Some(conn) = conn else { return };
    let mut pool = POOL.lock().or_die();
    let idle = pool.entry(addr.to_string()).or_default();
    if idle.len() < IDLE_PER_PEER {
        idle.push(conn);
    }
}

/// What a partition's leader answered to a transaction marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerAnswer {
    Written,
    /// UNKNOWN_TOPIC_OR_PARTITION: the partition is gone there.
    NoSuchPartition,
    /// TRANSACTION_COORDINATOR_FENCED: a newer coordinator wrote to it.
    CoordinatorFenced,
    /// Any other error (its Kafka code, -1 for a malformed answer): retried.
    Failed(i16),
}

impl MarkerAnswer {
    fn of(code: i16) -> MarkerAnswer {
        match ResponseError::try_from_code(code) {
            None if code == 0 => MarkerAnswer::Written,
            Some(ResponseError::UnknownTopicOrPartition) => MarkerAnswer::NoSuchPartition,
            Some(ResponseError::TransactionCoordinatorFenced) => MarkerAnswer::CoordinatorFenced,
            _ => MarkerAnswer::Failed(code),
        }
    }
}

/// WriteTxnMarkers v1 for one partition at its leader: what it answered.
#[allow(clippy::too_many_arguments)]
pub async fn write_marker(
    peer: i32,
    topic: &str,
    partition: i32,
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    coordinator_epoch: i32,
    ttl: Duration,
) -> anyhow::Result<MarkerAnswer> {
    let mut t = write_txn_markers_request::WritableTxnMarkerTopic::default();
    t.name = TopicName(sb(topic));
    t.partition_indexes = vec![partition];
    let mut m = write_txn_markers_request::WritableTxnMarker::default();
    m.producer_id = ProducerId(producer_id);
    m.producer_epoch = producer_epoch;
    m.transaction_result = commit;
    m.coordinator_epoch = coordinator_epoch;
    m.topics = vec![t];
    let mut req = WriteTxnMarkersRequest::default();
    req.markers = vec![m];
    match call(peer, ApiKey::WriteTxnMarkers, 1, RequestKind::WriteTxnMarkers(req), ttl).await? {
        ResponseKind::WriteTxnMarkers(r) => Ok(MarkerAnswer::of(
            r.markers
                .first()
                .and_then(|m| m.topics.first())
                .and_then(|t| t.partitions.first())
                .map(|p| p.error_code)
                .unwrap_or(-1),
        )),
        _ => Ok(MarkerAnswer::Failed(-1)),
    }
}

/// KIP-890 across brokers: ask `id`'s coordinator (AddPartitionsToTxn v4, the
/// broker-to-coordinator form) whether `topic`/`partition` is in `pid`/`epoch`'s ongoing
/// transaction, or, for transaction version 2's implicit add (`add`), to add it. `Err` carries
/// the coordinator's code (NETWORK_EXCEPTION if it could not be asked).
pub async fn verify_in_txn(
    peer: i32,
    id: &str,
    pid: i64,
    epoch: i16,
    topic: &str,
    partition: i32,
    add: bool,
) -> Result<(), i16> {
    let mut t = add_partitions_to_txn_request::AddPartitionsToTxnTopic::default();
    t.name = TopicName(sb(topic));
    t.partitions = vec![partition];
    let mut x = add_partitions_to_txn_request::AddPartitionsToTxnTransaction::default();
    x.transactional_id = TransactionalId(sb(id));
    x.producer_id = ProducerId(pid);
    x.producer_epoch = epoch;
    x.verify_only = !add;
    x.topics = vec![t];
    let mut req = AddPartitionsToTxnRequest::default();
    req.transactions = vec![x];
    let unreachable = ResponseError::NetworkException.code();
    let ttl = Duration::from_secs(5);
    match call(peer, ApiKey::AddPartitionsToTxn, 4, RequestKind::AddPartitionsToTxn(req), ttl).await {
        Ok(ResponseKind::AddPartitionsToTxn(r)) => {
            if r.error_code != 0 {
                return Err(r.error_code);
            }
            let codes = r.results_by_transaction.iter().flat_map(|x| x.topic_results.iter());
            match codes.flat_map(|t| t.results_by_partition.iter()).find(|p| p.partition_error_code != 0) {
                Some(p) => Err(p.partition_error_code),
                None => Ok(()),
            }
        }
        Ok(_) => Err(unreachable),
        Err(e) => {
            tracing::warn!(txn = id, "transaction verification with broker {peer} failed: {e}");
            Err(unreachable)
        }
    }
}

/// TxnOffsetCommit v5 with the coordinator on another broker: add `group` to the transaction
/// there (AddOffsetsToTxn v3, as the client itself does with transaction version 1).
pub async fn add_offsets(peer: i32, id: &str, pid: i64, epoch: i16, group: &str) -> Result<(), ResponseError> {
    let mut r = AddOffsetsToTxnRequest::default();
    r.transactional_id = TransactionalId(sb(id));
    r.producer_id = ProducerId(pid);
    r.producer_epoch = epoch;
    r.group_id = GroupId(sb(group));
    match call(peer, ApiKey::AddOffsetsToTxn, 3, RequestKind::AddOffsetsToTxn(r), Duration::from_secs(5)).await {
        Ok(ResponseKind::AddOffsetsToTxn(resp)) if resp.error_code == 0 => Ok(()),
        Ok(ResponseKind::AddOffsetsToTxn(resp)) => {
            Err(ResponseError::try_from_code(resp.error_code).unwrap_or(ResponseError::InvalidTxnState))
        }
        Ok(_) => Err(ResponseError::CoordinatorNotAvailable),
        Err(e) => {
            tracing::warn!(txn = id, "adding group {group} at the coordinator, broker {peer}, failed: {e}");
            Err(ResponseError::CoordinatorNotAvailable)
        }
    }
}
