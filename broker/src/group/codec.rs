//! Records of the internal offsets log (`<log.dirs>/__consumer_offsets-<n>/`): one record per
//! committed offset and one per group's metadata, keyed so that the latest record for a key is
//! its value and a record with no value deletes it. Keys and values are JSON (readable with
//! `sluicectl log dump`); see docs/decisions/0004-group-coordinator.md.

use bytes::{Buf, Bytes};
use kafka_protocol::messages::ConsumerProtocolSubscription;
use kafka_protocol::protocol::Decodable;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "k", rename_all = "snake_case")]
pub enum RecordKey {
    Group {
        group: String,
    },
    Offset {
        group: String,
        topic: String,
        partition: i32,
    },
    /// An offset committed inside a transaction (TxnOffsetCommit), pending until its marker.
    TxnOffset {
        group: String,
        producer_id: i64,
        topic: String,
        partition: i32,
    },
    /// The marker for a producer's transactional offsets in this group.
    TxnEnd {
        group: String,
        producer_id: i64,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredMember {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    /// Metadata of the group's chosen protocol (the consumer's subscription).
    pub subscription: Vec<u8>,
    pub assignment: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredGroup {
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub members: Vec<StoredMember>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_ms: i64,
}

/// One decoded record: a key and, unless it is a tombstone, its value.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    Group(String, Option<StoredGroup>),
    Offset { group: String, topic: String, partition: i32, value: Option<StoredOffset> },
    TxnOffset { group: String, producer_id: i64, topic: String, partition: i32, value: StoredOffset },
    TxnEnd { group: String, producer_id: i64, commit: bool },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct StoredTxnEnd {
    commit: bool,
}

#[derive(Debug, thiserror::Error)]
#[error("unreadable offsets-log record: {0}")]
pub struct CodecError(String);

fn json<T: Serialize>(v: &T) -> Bytes {
    // serializing these plain structs cannot fail
    Bytes::from(serde_json::to_vec(v).unwrap_or_default())
}

pub fn encode(e: &Entry) -> crate::kvlog::KvRecord {
    match e {
        Entry::Group(g, v) => (json(&RecordKey::Group { group: g.clone() }), v.as_ref().map(json)),
        Entry::Offset { group, topic, partition, value } => (
            json(&RecordKey::Offset { group: group.clone(), topic: topic.clone(), partition: *partition }),
            value.as_ref().map(json),
        ),
        Entry::TxnOffset { group, producer_id, topic, partition, value } => (
            json(&RecordKey::TxnOffset {
                group: group.clone(),
                producer_id: *producer_id,
                topic: topic.clone(),
                partition: *partition,
            }),
            Some(json(value)),
        ),
        Entry::TxnEnd { group, producer_id, commit } => (
            json(&RecordKey::TxnEnd { group: group.clone(), producer_id: *producer_id }),
            Some(json(&StoredTxnEnd { commit: *commit })),
        ),
    }
}

pub fn decode(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<Entry, CodecError> {
    let key = key.ok_or_else(|| CodecError("record without a key".into()))?;
    let key: RecordKey = serde_json::from_slice(key).map_err(|e| CodecError(format!("key: {e}")))?;
    Ok(match key {
        RecordKey::Group { group } => Entry::Group(
            group,
            value
                .map(|v| serde_json::from_slice(v).map_err(|e| CodecError(format!("group value: {e}"))))
                .transpose()?,
        ),
        RecordKey::Offset { group, topic, partition } => Entry::Offset {
            group,
            topic,
            partition,
            value: value
                .map(|v| serde_json::from_slice(v).map_err(|e| CodecError(format!("offset value: {e}"))))
                .transpose()?,
        },
        RecordKey::TxnOffset { group, producer_id, topic, partition } => Entry::TxnOffset {
            group,
            producer_id,
            topic,
            partition,
            value: serde_json::from_slice(value.ok_or_else(|| CodecError("txn offset without value".into()))?)
                .map_err(|e| CodecError(format!("txn offset value: {e}")))?,
        },
        RecordKey::TxnEnd { group, producer_id } => {
            let v: StoredTxnEnd =
                serde_json::from_slice(value.ok_or_else(|| CodecError("txn end without value".into()))?)
                    .map_err(|e| CodecError(format!("txn end value: {e}")))?;
            Entry::TxnEnd { group, producer_id, commit: v.commit }
        }
    })
}

/// Topics of a consumer-protocol subscription (JoinGroup metadata of protocol type "consumer").
pub fn subscription_topics(metadata: &[u8]) -> Option<Vec<String>> {
    let mut buf = Bytes::copy_from_slice(metadata);
    if buf.remaining() < 2 {
        return None;
    }
    let version = buf.get_i16().clamp(0, 3);
    let sub = ConsumerProtocolSubscription::decode(&mut buf, version).ok()?;
    Some(sub.topics.iter().map(|t| t.to_string()).collect())
}

/// A consumer-protocol subscription (version 0) naming `topics`: how a KIP-848 member is shown
/// to the classic DescribeGroups API.
pub fn encode_subscription<'a>(topics: impl Iterator<Item = &'a String>) -> Bytes {
    let mut sub = ConsumerProtocolSubscription::default();
    sub.topics = topics.map(|t| kafka_protocol::protocol::StrBytes::from_string(t.clone())).collect();
    encode_versioned(&sub)
}

/// A consumer-protocol assignment (version 0) of these partitions.
pub fn encode_assignment<'a>(parts: impl Iterator<Item = &'a (String, i32)>) -> Bytes {
    let mut by_topic: std::collections::BTreeMap<&String, Vec<i32>> = Default::default();
    for (t, p) in parts {
        by_topic.entry(t).or_default().push(*p);
    }
    let mut a = kafka_protocol::messages::ConsumerProtocolAssignment::default();
    a.assigned_partitions = by_topic
        .into_iter()
        .map(|(t, ps)| {
            let mut tp = kafka_protocol::messages::consumer_protocol_assignment::TopicPartition::default();
            tp.topic = kafka_protocol::messages::TopicName(kafka_protocol::protocol::StrBytes::from_string(t.clone()));
            tp.partitions = ps;
            tp
        })
        .collect();
    encode_versioned(&a)
}

fn encode_versioned<T: kafka_protocol::protocol::Encodable>(x: &T) -> Bytes {
    let mut buf = bytes::BytesMut::new();
    bytes::BufMut::put_i16(&mut buf, 0);
    // version 0 of these plain structs always encodes
    let _ = x.encode(&mut buf, 0);
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn consumer_protocol_encodings_read_back() {
        let topics = ["a".to_string(), "b".to_string()];
        assert_eq!(subscription_topics(&encode_subscription(topics.iter())), Some(vec!["a".into(), "b".into()]));
        let parts = [("a".to_string(), 1), ("a".to_string(), 3)];
        let bytes = encode_assignment(parts.iter());
        let mut buf = bytes.slice(2..);
        let back = kafka_protocol::messages::ConsumerProtocolAssignment::decode(&mut buf, 0).unwrap();
        assert_eq!(back.assigned_partitions[0].partitions, vec![1, 3]);
    }

    proptest! {
        #[test]
        fn records_round_trip(group in ".{0,20}", topic in "[a-z]{1,10}", partition in 0i32..100, offset in -1i64..i64::MAX, tomb in any::<bool>()) {
            let value = (!tomb).then(|| StoredOffset { offset, leader_epoch: -1, metadata: group.clone(), commit_ms: 5 });
            let e = Entry::Offset { group: group.clone(), topic, partition, value };
            let (k, v) = encode(&e);
            prop_assert_eq!(decode(Some(&k), v.as_deref()).unwrap(), e);
        }

        #[test]
        fn garbage_never_panics(k in proptest::collection::vec(any::<u8>(), 0..64), v in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode(Some(&k), Some(&v));
            let _ = subscription_topics(&v);
        }
    }
}
