//! Raw Kafka requests for tests that must send what no well-behaved client sends: batches whose
//! header disagrees with their records, transactional batches with the wrong epoch, requests
//! at exact API versions. Used by the conformance tests and by the Jepsen harness's
//! bad-producer worker. Each call returns the Kafka error code (and what the answer carried);
//! a connection failure is `Err`.

use bytes::Bytes;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use sluice_client::{ConnError, Connection};
use sluice_protocol::batch::{BatchBuilder, Compression, NewRecord};

pub fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// Byte offsets of the batch header fields the malformations rewrite.
const OFF_LAST_OFFSET_DELTA: usize = 23;
const OFF_RECORDS_COUNT: usize = 57;

/// A v2 batch of `values` (timestamps, values): idempotent when `pid` ≥ 0, transactional if `txn`.
pub fn batch(pid: i64, epoch: i16, seq: i32, txn: bool, values: &[(i64, String)], compression: Compression) -> Vec<u8> {
    let records: Vec<NewRecord> = values
        .iter()
        .map(|(ts, v)| NewRecord { timestamp: *ts, value: Some(Bytes::from(v.clone())), ..Default::default() })
        .collect();
    let b = BatchBuilder {
        compression,
        producer_id: pid,
        producer_epoch: if pid >= 0 { epoch } else { -1 },
        base_sequence: if pid >= 0 { seq } else { -1 },
        transactional: txn,
        ..Default::default()
    };
    b.build(&records).map(|b| b.to_vec()).unwrap_or_default()
}

/// How a malicious or broken producer's batch lies about its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformation {
    /// `lastOffsetDelta` 0 over several records: they would share one offset.
    DeltaZero,
    /// `lastOffsetDelta` 999: offsets and sequences burnt beyond the records.
    DeltaTooLarge,
    /// The header counts one record more than are encoded (the delta agrees with the count).
    CountAboveRecords,
    /// The header counts one record fewer than are encoded.
    CountBelowRecords,
}

pub const MALFORMATIONS: [Malformation; 4] = [
    Malformation::DeltaZero,
    Malformation::DeltaTooLarge,
    Malformation::CountAboveRecords,
    Malformation::CountBelowRecords,
];

/// `good` (a batch of at least two records) with its header rewritten as `m` says and a valid
/// CRC: only the broker's validation of the records can tell.
pub fn malformed(good: &[u8], m: Malformation) -> Vec<u8> {
    let mut b = good.to_vec();
    let count = i32::from_be_bytes([b[57], b[58], b[59], b[60]]);
    let (delta, n) = match m {
        Malformation::DeltaZero => (0, count),
        Malformation::DeltaTooLarge => (999, count),
        Malformation::CountAboveRecords => (count, count + 1),
        Malformation::CountBelowRecords => (count - 2, count - 1),
    };
    b[OFF_LAST_OFFSET_DELTA..OFF_LAST_OFFSET_DELTA + 4].copy_from_slice(&delta.to_be_bytes());
    b[OFF_RECORDS_COUNT..OFF_RECORDS_COUNT + 4].copy_from_slice(&n.to_be_bytes());
    // setting the producer fields to what they are recomputes the CRC
    let v = sluice_protocol::batch::BatchView::parse_unchecked_crc(&b)
        .map(|v| (v.producer_id(), v.producer_epoch(), v.base_sequence()));
    if let Ok((pid, epoch, seq)) = v {
        sluice_protocol::batch::set_producer(&mut b, pid, epoch, seq);
    }
    b
}

/// Create `topic` (auto-creation through Metadata) and wait until it has a leader.
pub async fn create_topic(conn: &Connection, topic: &str) -> Result<(), ConnError> {
    for _ in 0..50 {
        let mut m = MetadataRequest::default();
        let mut mt = metadata_request::MetadataRequestTopic::default();
        mt.name = Some(TopicName(s(topic)));
        m.topics = Some(vec![mt]);
        m.allow_auto_topic_creation = true;
        if let ResponseKind::Metadata(r) = conn.call(ApiKey::Metadata, 12, RequestKind::Metadata(m)).await? {
            if r.topics.first().is_some_and(|t| t.error_code == 0 && t.partitions.iter().all(|p| p.leader_id.0 >= 0)) {
                return Ok(());
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Ok(())
}

/// InitProducerId (transaction timeout 60 s): (error, producer id, epoch).
pub async fn init_producer_id(
    conn: &Connection,
    version: i16,
    txn: Option<&str>,
    expected: Option<(i64, i16)>,
) -> Result<(i16, i64, i16), ConnError> {
    init_producer_id_timeout(conn, version, txn, expected, 60_000).await
}

/// InitProducerId with a transaction timeout: (error, producer id, epoch).
pub async fn init_producer_id_timeout(
    conn: &Connection,
    version: i16,
    txn: Option<&str>,
    expected: Option<(i64, i16)>,
    timeout_ms: i32,
) -> Result<(i16, i64, i16), ConnError> {
    let mut r = InitProducerIdRequest::default();
    r.transactional_id = txn.map(|t| TransactionalId(s(t)));
    r.transaction_timeout_ms = timeout_ms;
    let (pid, epoch) = expected.unwrap_or((-1, -1));
    r.producer_id = ProducerId(pid);
    r.producer_epoch = epoch;
    match conn.call(ApiKey::InitProducerId, version, RequestKind::InitProducerId(r)).await? {
        ResponseKind::InitProducerId(r) => Ok((r.error_code, r.producer_id.0, r.producer_epoch)),
        _ => Ok((-1, -1, -1)),
    }
}

/// Produce one batch to one partition (acks=all): (error, base offset).
pub async fn produce(
    conn: &Connection,
    version: i16,
    txn: Option<&str>,
    topic: &str,
    partition: i32,
    batch: Vec<u8>,
) -> Result<(i16, i64), ConnError> {
    let mut p = produce_request::PartitionProduceData::default();
    p.index = partition;
    p.records = Some(Bytes::from(batch));
    let mut t = produce_request::TopicProduceData::default();
    t.name = TopicName(s(topic));
    t.partition_data = vec![p];
    let mut r = ProduceRequest::default();
    r.transactional_id = txn.map(|t| TransactionalId(s(t)));
    r.acks = -1;
    r.timeout_ms = 10_000;
    r.topic_data = vec![t];
    match conn.call(ApiKey::Produce, version, RequestKind::Produce(r)).await? {
        ResponseKind::Produce(resp) => {
            let p = resp.responses.first().and_then(|t| t.partition_responses.first());
            Ok(p.map(|p| (p.error_code, p.base_offset)).unwrap_or((-1, -1)))
        }
        _ => Ok((-1, -1)),
    }
}

/// AddPartitionsToTxn v3 (a client's, transaction version 1).
pub async fn add_partitions(
    conn: &Connection,
    txn: &str,
    pid: i64,
    epoch: i16,
    topic: &str,
    partitions: &[i32],
) -> Result<i16, ConnError> {
    let mut t = add_partitions_to_txn_request::AddPartitionsToTxnTopic::default();
    t.name = TopicName(s(topic));
    t.partitions = partitions.to_vec();
    let mut r = AddPartitionsToTxnRequest::default();
    r.v3_and_below_transactional_id = TransactionalId(s(txn));
    r.v3_and_below_producer_id = ProducerId(pid);
    r.v3_and_below_producer_epoch = epoch;
    r.v3_and_below_topics = vec![t];
    match conn.call(ApiKey::AddPartitionsToTxn, 3, RequestKind::AddPartitionsToTxn(r)).await? {
        ResponseKind::AddPartitionsToTxn(r) => Ok(r
            .results_by_topic_v3_and_below
            .iter()
            .flat_map(|t| t.results_by_partition.iter())
            .map(|p| p.partition_error_code)
            .find(|c| *c != 0)
            .unwrap_or(0)),
        _ => Ok(-1),
    }
}

/// EndTxn: (error, producer id, epoch) — v5 answers the producer's next id and epoch.
pub async fn end_txn(
    conn: &Connection,
    version: i16,
    txn: &str,
    pid: i64,
    epoch: i16,
    commit: bool,
) -> Result<(i16, i64, i16), ConnError> {
    let mut r = EndTxnRequest::default();
    r.transactional_id = TransactionalId(s(txn));
    r.producer_id = ProducerId(pid);
    r.producer_epoch = epoch;
    r.committed = commit;
    match conn.call(ApiKey::EndTxn, version, RequestKind::EndTxn(r)).await? {
        ResponseKind::EndTxn(r) => Ok((r.error_code, r.producer_id.0, r.producer_epoch)),
        _ => Ok((-1, -1, -1)),
    }
}

/// `n` EndTxn v5 aborts with nothing added, from `epoch`: each must succeed and bump the
/// epoch by one. Returns the epoch after the last (`Err` text: the first one that did not).
pub async fn abort_empty(conn: &Connection, txn: &str, pid: i64, epoch: i16, n: usize) -> Result<i16, String> {
    let mut e = epoch;
    for i in 0..n {
        match end_txn(conn, 5, txn, pid, e, false).await {
            Ok((0, _, next)) if next == e + 1 => e = next,
            other => return Err(format!("abort {i} at epoch {e}: {other:?}")),
        }
    }
    Ok(e)
}

/// ListOffsets v7 for one partition: (error, offset, timestamp).
pub async fn list_offset(
    conn: &Connection,
    topic: &str,
    partition: i32,
    timestamp: i64,
    read_committed: bool,
) -> Result<(i16, i64, i64), ConnError> {
    let mut p = list_offsets_request::ListOffsetsPartition::default();
    p.partition_index = partition;
    p.timestamp = timestamp;
    let mut t = list_offsets_request::ListOffsetsTopic::default();
    t.name = TopicName(s(topic));
    t.partitions = vec![p];
    let mut r = ListOffsetsRequest::default();
    r.replica_id = BrokerId(-1);
    r.isolation_level = i8::from(read_committed);
    r.topics = vec![t];
    match conn.call(ApiKey::ListOffsets, 7, RequestKind::ListOffsets(r)).await? {
        ResponseKind::ListOffsets(r) => {
            let p = r.topics.first().and_then(|t| t.partitions.first());
            Ok(p.map(|p| (p.error_code, p.offset, p.timestamp)).unwrap_or((-1, -1, -1)))
        }
        _ => Ok((-1, -1, -1)),
    }
}

/// DescribeTransactions: (state, producer id, epoch); state "" with an error.
pub async fn describe_txn(conn: &Connection, txn: &str) -> Result<(String, i64, i16), ConnError> {
    let mut r = DescribeTransactionsRequest::default();
    r.transactional_ids = vec![TransactionalId(s(txn))];
    match conn.call(ApiKey::DescribeTransactions, 0, RequestKind::DescribeTransactions(r)).await? {
        ResponseKind::DescribeTransactions(d) => Ok(d
            .transaction_states
            .first()
            .map(|t| (t.transaction_state.to_string(), t.producer_id.0, t.producer_epoch))
            .unwrap_or_default()),
        _ => Ok(Default::default()),
    }
}

/// IncrementalAlterConfigs of one resource with SET operations; its error code (-1: no answer).
pub async fn set_configs(conn: &Connection, resource_type: i8, name: &str, pairs: &[(&str, &str)]) -> i16 {
    let mut res = incremental_alter_configs_request::AlterConfigsResource::default();
    res.resource_type = resource_type;
    res.resource_name = s(name);
    for (k, v) in pairs {
        let mut c = incremental_alter_configs_request::AlterableConfig::default();
        c.name = s(k);
        c.config_operation = 0;
        c.value = Some(s(v));
        res.configs.push(c);
    }
    let mut req = IncrementalAlterConfigsRequest::default();
    req.resources = vec![res];
    match conn.call(ApiKey::IncrementalAlterConfigs, 1, RequestKind::IncrementalAlterConfigs(req)).await {
        Ok(ResponseKind::IncrementalAlterConfigs(r)) => r.responses.first().map_or(-1, |x| x.error_code),
        _ => -1,
    }
}

/// DescribeConfigs of one resource: the value and source of `key` (source -1: not answered).
pub async fn config_of(conn: &Connection, resource_type: i8, name: &str, key: &str) -> (String, i8) {
    let mut res = describe_configs_request::DescribeConfigsResource::default();
    res.resource_type = resource_type;
    res.resource_name = s(name);
    res.configuration_keys = None; // all
    let mut req = DescribeConfigsRequest::default();
    req.resources = vec![res];
    match conn.call(ApiKey::DescribeConfigs, 4, RequestKind::DescribeConfigs(req)).await {
        Ok(ResponseKind::DescribeConfigs(r)) => r
            .results
            .first()
            .and_then(|res| res.configs.iter().find(|c| &*c.name == key))
            .map_or((String::new(), -1), |c| (c.value.as_deref().unwrap_or_default().to_string(), c.config_source)),
        _ => (String::new(), -1),
    }
}
