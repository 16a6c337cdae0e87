//! The replication layer's types: node ids, a Raft group's key, and what a partition's Raft log
//! holds and returns (`PartConfig`), and a coordinator shard's (`ShardConfig`): two type
//! configurations, so neither kind of command can reach the other kind's state machine.

use crate::partition::producer_state::Refusal;
use openraft::BasicNode;
use serde::{Deserialize, Serialize};
use sluice_storage::StorageError;
use std::io::Cursor;
use std::sync::Arc;
use std::time::Duration;

/// A broker's id in every Raft group (its `node.id`).
pub type NodeId = u64;

/// A partition's Raft group is named by its topic and index.
pub type GroupKey = (String, i32);

/// What a partition's Raft log holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PartCommand {
    /// A produce batch (one v2 batch), checked and written when applied. `verified`: the
    /// leader's transaction coordinator confirmed this partition is in the producer's
    /// transaction (KIP-890), so a transactional batch may be appended.
    Produce {
        #[serde(with = "b64")]
        batch: Vec<u8>,
        now_ms: i64,
        verified: bool,
        /// The partition's log end when the leader began the verification: a marker for the
        /// producer at or after it ended the verified transaction, and the batch is refused
        /// (`Partition::marker_since`). None in entries written before this field existed.
        #[serde(default)]
        verified_from: Option<i64>,
    },
    /// A COMMIT or ABORT marker for `producer_id`.
    Marker { producer_id: i64, epoch: i16, coordinator_epoch: i32, commit: bool, now_ms: i64 },
    /// DeleteRecords: move the log start up to `offset` (at most the log end where it is
    /// applied, the same on every replica), deleting the segments wholly below it.
    DeleteRecords { offset: i64 },
    /// A produce batch or a marker with the leader's verdict on it, judged before it was
    /// proposed (`partition::tip`, decision 0045 step 2): applied as `cmd`, and what that did
    /// checked against `verdict` on every replica. (Last, so the logs written before it still
    /// decode.)
    Predicted { cmd: Box<PartCommand>, verdict: Verdict },
    /// A batch (records or a transaction marker) as the leader's log holds it: offsets assigned,
    /// judged by the leader, to be stored as is at its base offset (one log per replica,
    /// `PartitionLogStore`, decision 0045 step 3). Only a partition whose Raft log is its
    /// segment log holds one. (Last, so the logs written before it still decode.)
    /// The bytes are shared, not copied, between the entries the leader's log store reads for
    /// its followers and its state machine (`PartitionLogStore`'s cache of recent entries).
    Stored {
        #[serde(with = "b64shared")]
        batch: bytes::Bytes,
    },
    /// An exact retry of a batch the leader holds (one log per replica): answered with the
    /// offsets it was stored at once this entry commits (and with it every entry before it,
    /// the original among them). Stored as a control batch; writes nothing else.
    Answered { first: i64, last: i64 },
    /// A group that keeps a Raft log of its own (`replication.log.format=double`) keeps it in
    /// the partition's log from this entry on (decision 0056): every replica, once it has
    /// applied it, restarts its group on the partition log. The leader proposes nothing after
    /// it. Writes nothing to the partition.
    Convert,
}

/// What the leader expects applying a proposed write to do (`partition::tip`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    /// Written at these offsets — or, an exact retry of a retained batch, answered with the
    /// offsets it was written at.
    At { first: i64, last: i64 },
    /// Refused: nothing written.
    Refused(Refusal),
}

impl PartCommand {
    /// The write itself, without the leader's verdict on it.
    pub fn inner(&self) -> &PartCommand {
        match self {
            PartCommand::Predicted { cmd, .. } => cmd.inner(),
            other => other,
        }
    }
}

/// What a coordinator shard's Raft log holds (a group of its own type: a partition's command
/// cannot reach a shard's state machine, nor the reverse). The one variant keeps the JSON form
/// (`{"Kv":{...}}`) the shard logs were written in when both kinds shared one command type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ShardCommand {
    /// Records for the shard's key/value log (group or transaction coordinator).
    Kv { records: Vec<KvEntry>, now_ms: i64 },
}

/// What applying a shard's command did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ShardResult {
    #[default]
    Done,
    /// The records could not be stored (the applier's message): the write failed.
    Failed(String),
}

/// One key/value record (no value: the key is deleted).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvEntry {
    #[serde(with = "b64")]
    pub key: Vec<u8>,
    #[serde(with = "b64opt")]
    pub value: Option<Vec<u8>>,
}

mod b64opt {
    use super::b64::Raw;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            // JSON (the Raft log files): the bare base64 string, or null
            Some(v) if s.is_human_readable() => super::b64::serialize(v, s),
            Some(v) => s.serialize_some(&Raw(v.clone())),
            None => s.serialize_none(),
        }
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        use base64::Engine;
        if !d.is_human_readable() {
            return Ok(Option::<Raw>::deserialize(d)?.map(|r| r.0));
        }
        let text: Option<String> = Option::deserialize(d)?;
        text.map(|t| base64::engine::general_purpose::STANDARD.decode(t).map_err(serde::de::Error::custom)).transpose()
    }
    impl Serialize for Raw {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(&self.0)
        }
    }
}

/// What applying a command did (answered to the produce or marker request on the leader). No
/// Kafka codes here: the error edge (`error_map.rs`) names them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub enum PartResult {
    #[default]
    Done,
    /// Written (or an exact retry of a retained batch) at these offsets.
    Appended { first: i64, last: i64, log_start: i64 },
    /// The partition's producer state refused it: nothing was written (effect known).
    Refused(Refusal),
    /// It could not be applied (see [`ApplyFailure`]).
    Failed(ApplyFailure),
    /// The log start offset after a DeleteRecords.
    LogStart(i64),
}

/// What a replicated partition's state machine applies committed commands to: the partition,
/// as `partition/apply.rs` implements it. The replication layer sees nothing else of it.
pub trait PartitionLog: Send + Sync + 'static {
    /// `topic-index`, for logs.
    fn name(&self) -> String;
    /// The log's start and end offsets.
    fn offsets(&self) -> (i64, i64);
    /// Apply one committed command: what it did, and the log end it wrote up to (0: nothing
    /// written).
    /// Takes the command by reference so a write refused because a read found damaged data
    /// (nothing written) can be applied again after the repair.
    fn apply(&self, cmd: &mut PartCommand) -> (PartResult, i64);
    /// Replay after a restart: is the stored batch at `offset` the one `cmd` wrote there before
    /// the crash? Then what applying it did, and the offset after it.
    /// `Err` when the stored batch cannot be read (damaged: see [`PartitionLog::find_damage`]).
    fn stored(&self, offset: i64, cmd: &PartCommand) -> Result<Option<(PartResult, i64)>, StorageError>;
    /// Make everything applied so far visible (committed on a majority: the high watermark).
    fn publish_committed(&self);
    /// One log per replica: the log holds entries not yet committed past `end`; make the
    /// offsets below it visible (the high watermark, which never moves back).
    fn publish_committed_to(&self, end: i64);
    /// One log per replica: DeleteRecords up to `offset`, at most the high watermark (which it
    /// does not move): the new log start.
    fn delete_records_committed(&self, offset: i64) -> Result<i64, StorageError>;
    /// Make everything applied so far durable (fsync).
    fn flush(&self) -> Result<(), StorageError>;
    /// Keep at most `bytes` of the log's end in the page cache (-1: as its config says): a
    /// follower's log is read by no consumer (decision 0054).
    fn keep_cached_tail(&self, bytes: i64);
    /// Hard-link the partition's files into `into` (everything applied made durable first): a
    /// snapshot of it (`replication::snapshot`).
    /// `upto`: only the log below it (one log per replica: entries past the commit point are
    /// left out).
    fn link_snapshot(
        &self,
        into: &std::path::Path,
        upto: Option<i64>,
    ) -> Result<sluice_storage::LinkedSnapshot, StorageError>;
    /// Replace the partition with a received snapshot's files, staged in `staged`, whose log
    /// starts at `log_start`: the new log's start and end.
    fn install_snapshot(&self, staged: &std::path::Path, log_start: i64) -> Result<(i64, i64), StorageError>;
    /// A restart replays the Raft log over the partition log from `offset` (`applied.json`'s
    /// log end): nothing from there on may be rewritten (the log cleaner stops below it).
    fn replays_from(&self, offset: i64);
    /// The log cleaner would clean more if the replay point moved up (a compacted partition
    /// with batches past it).
    fn cleaner_held_back(&self) -> bool;
    /// Whether a read found a batch that fails its CRC (the log is offline until it is
    /// repaired: decision 0036).
    fn is_damaged(&self) -> bool;
    /// The first damaged batch, if a read found one and it is still there.
    fn find_damage(&self) -> Result<Option<sluice_storage::Damage>, StorageError>;
    /// Replace the damaged batch `d` with broker `from`'s copy of it: `Ok(true)` when the log
    /// is whole and online again.
    fn repair(&self, d: &sluice_storage::Damage, copy: &[u8], from: NodeIdOf) -> Result<bool, StorageError>;
    /// This replica's copy of the batch holding `offset` (its CRC checked), for a peer that
    /// repairs its own.
    fn copy_of(&self, offset: i64) -> Result<bytes::Bytes, StorageError>;
}

/// A broker's node id as the replication layer names it.
pub type NodeIdOf = u64;

/// Why a committed command could not be applied to a partition.
#[derive(Debug, Clone, Serialize, Deserialize, thiserror::Error)]
pub enum ApplyFailure {
    /// Storage refused the batch or failed to write it (an I/O failure: effect unknown). A
    /// result never leaves the broker that applied it, so this is never serialized.
    #[serde(skip)]
    #[error("{0}")]
    Storage(Arc<StorageError>),
}

/// A proposed write that was not proposed, or whose outcome is not known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// This replica does not lead the group: nothing was proposed.
    #[error("this replica does not lead the group")]
    NotLeader,
    /// Leadership moved before the write committed: it may still commit (effect unknown).
    #[error("leadership moved: {0}")]
    LeadershipLost(String),
    /// The replica stopped before answering (effect unknown).
    #[error("the replica stopped")]
    Stopped,
    /// Not committed by a majority within the timeout (effect unknown).
    #[error("not committed by a majority of replicas within {0:?}")]
    TimedOut(Duration),
}

/// Bytes as base64 text in human-readable formats (the JSON Raft log files) and as raw bytes in
/// binary ones (bincode RPC frames between brokers: no encoding cost).
mod b64 {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};
    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(v))
        } else {
            s.serialize_bytes(v)
        }
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        if !d.is_human_readable() {
            return Ok(Raw::deserialize(d)?.0);
        }
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD.decode(text).map_err(serde::de::Error::custom)
    }

    /// Raw bytes for binary formats.
    pub struct Raw(pub Vec<u8>);

    impl<'de> Deserialize<'de> for Raw {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Raw, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = Raw;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("bytes")
                }
                fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Raw, E> {
                    Ok(Raw(v.to_vec()))
                }
                fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Raw, E> {
                    Ok(Raw(v))
                }
            }
            d.deserialize_byte_buf(V)
        }
    }
}

/// [`b64`] for shared bytes (the same encoding: a `Stored` batch goes between brokers as a
/// `Vec<u8>` did). Decoded from a binary frame inside [`decode_sharing`], a batch is a slice of
/// the frame, not a copy of it.
mod b64shared {
    use serde::{Deserializer, Serializer};
    pub fn serialize<S: Serializer>(v: &bytes::Bytes, s: S) -> Result<S::Ok, S::Error> {
        super::b64::serialize(v, s)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<bytes::Bytes, D::Error> {
        if d.is_human_readable() {
            return super::b64::deserialize(d).map(bytes::Bytes::from);
        }
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = bytes::Bytes;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_borrowed_bytes<E: serde::de::Error>(self, v: &'de [u8]) -> Result<bytes::Bytes, E> {
                Ok(super::FRAME.with(|f| super::share(f.borrow().as_ref(), v)))
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<bytes::Bytes, E> {
                Ok(bytes::Bytes::copy_from_slice(v))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<bytes::Bytes, E> {
                Ok(bytes::Bytes::from(v))
            }
        }
        d.deserialize_bytes(V)
    }
}

thread_local! {
    /// The frame [`decode_sharing`] is decoding on this thread.
    static FRAME: std::cell::RefCell<Option<bytes::Bytes>> = const { std::cell::RefCell::new(None) };
}

/// `v` as a slice of `frame` when it lies in it (no copy), else a copy.
fn share(frame: Option<&bytes::Bytes>, v: &[u8]) -> bytes::Bytes {
    let within = |f: &bytes::Bytes| {
        let (start, at) = (f.as_ptr() as usize, v.as_ptr() as usize);
        at >= start && at + v.len() <= start + f.len()
    };
    match frame {
        Some(f) if !v.is_empty() && within(f) => f.slice_ref(v),
        _ => bytes::Bytes::copy_from_slice(v),
    }
}

/// Run `decode` on `frame` (a bincode decode of it): the `Stored` batches it decodes are slices
/// of `frame`, sharing its memory, instead of copies. A follower's appends are almost all
/// batch bytes, so this is the copy of each replicated byte the follower no longer makes
/// (decision 0062).
pub fn decode_sharing<T>(frame: &bytes::Bytes, decode: impl FnOnce(&[u8]) -> T) -> T {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            FRAME.with(|f| f.borrow_mut().take());
        }
    }
    FRAME.with(|f| *f.borrow_mut() = Some(frame.clone()));
    let _reset = Reset;
    decode(frame)
}

openraft::declare_raft_types!(
    pub PartConfig:
        D = PartCommand,
        R = PartResult,
        NodeId = NodeId,
        Node = BasicNode,
        SnapshotData = crate::replication::snapshot::SnapshotData,
);

pub type PartRaft = openraft::Raft<PartConfig>;

openraft::declare_raft_types!(
    pub ShardConfig:
        D = ShardCommand,
        R = ShardResult,
        NodeId = NodeId,
        Node = BasicNode,
);
