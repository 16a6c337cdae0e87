//! Raft's own entries as control batches of a partition's log (decision 0045: one log per
//! replica keeps them in the partition log, where they take offsets that consumers skip, as
//! KRaft keeps them in its metadata log). Two kinds:
//!
//! - a new leader's first entry (Raft's blank entry): KRaft's LEADER_CHANGE control record
//!   (type 2), its value KRaft's `LeaderChangeMessage` (version 0): the leader and the voters.
//!   Within a term only one broker leads, so this batch is also where a reader of the log finds
//!   which broker led the term (the batch's partition leader epoch) — the node id in a Raft log
//!   id, which a produce batch has no field for;
//! - a membership change: a control record of a Sluice type ([`MEMBERSHIP`], 0x5100), its value
//!   the replication layer's own encoding of the membership, carried as bytes;
//! - a replicated command that writes no batch of its own (DeleteRecords): a control record of
//!   a Sluice type ([`COMMAND`], 0x5101), its value the replication layer's encoding of it.
//!
//! Clients skip control batches whatever their type (decision 0045's gate: seven clients
//! checked). Transaction markers (types 0 and 1) are not Raft control batches.

use crate::batch::{BatchBuilder, BatchError, BatchView, NewRecord};
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::leader_change_message::{LeaderChangeMessage, Voter};
use kafka_protocol::messages::BrokerId;
use kafka_protocol::protocol::{Decodable, Encodable};

/// KRaft's LEADER_CHANGE control record type.
pub const LEADER_CHANGE: i16 = 2;
/// Sluice's control record type for a Raft membership (outside Kafka's range of types).
pub const MEMBERSHIP: i16 = 0x5100;
/// Sluice's control record type for a replicated command that is not a batch.
pub const COMMAND: i16 = 0x5101;

/// Raft's own entry, as a control batch holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RaftControl {
    /// The first entry of `leader`'s term (the batch's partition leader epoch); `voters` are
    /// the group's voters then.
    LeaderChange { leader: i32, voters: Vec<i32> },
    /// A membership change: the replication layer's encoding of it.
    Membership(Bytes),
    /// A replicated command that writes no batch of its own: the replication layer's encoding.
    Command(Bytes),
}

impl RaftControl {
    /// A control batch (one record, no producer) holding this entry, written in term
    /// `leader_epoch` at `timestamp`. Its base offset is the log's to assign.
    pub fn build(&self, leader_epoch: i32, timestamp: i64) -> Result<Bytes, BatchError> {
        let (kind, value) = match self {
            RaftControl::LeaderChange { leader, voters } => {
                let mut m = LeaderChangeMessage::default();
                m.version = 0;
                m.leader_id = BrokerId(*leader);
                m.voters = voters.iter().map(|v| voter(*v)).collect();
                let mut out = BytesMut::new();
                m.encode(&mut out, 0).map_err(|_| BatchError::MalformedRecord("leader change message"))?;
                (LEADER_CHANGE, out.freeze())
            }
            RaftControl::Membership(m) => (MEMBERSHIP, m.clone()),
            RaftControl::Command(c) => (COMMAND, c.clone()),
        };
        let mut key = Vec::with_capacity(4);
        key.extend_from_slice(&0i16.to_be_bytes());
        key.extend_from_slice(&kind.to_be_bytes());
        let b = BatchBuilder { control: true, partition_leader_epoch: leader_epoch, ..Default::default() };
        b.build(&[NewRecord { timestamp, key: Some(Bytes::from(key)), value: Some(value), headers: vec![] }])
    }

    /// The Raft entry a batch holds: `None` for a batch that is not a Raft control batch (records,
    /// or a transaction marker); an error for one whose record cannot be read.
    pub fn parse(view: &BatchView<'_>) -> Result<Option<RaftControl>, BatchError> {
        let Some((kind, value)) = view.control_record()? else { return Ok(None) };
        let value = || value.clone().ok_or(BatchError::MalformedRecord("control value missing"));
        match kind {
            LEADER_CHANGE => {
                let mut v = value()?;
                let m = LeaderChangeMessage::decode(&mut v, 0)
                    .map_err(|_| BatchError::MalformedRecord("leader change message"))?;
                Ok(Some(RaftControl::LeaderChange {
                    leader: m.leader_id.0,
                    voters: m.voters.iter().map(|v| v.voter_id).collect(),
                }))
            }
            MEMBERSHIP => Ok(Some(RaftControl::Membership(value()?))),
            COMMAND => Ok(Some(RaftControl::Command(value()?))),
            _ => Ok(None),
        }
    }
}

fn voter(id: i32) -> Voter {
    let mut v = Voter::default();
    v.voter_id = id;
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{iter_batches, BatchBuilder, ControlMarker, ControlType};
    use proptest::prelude::*;

    fn round_trip(c: &RaftControl, epoch: i32) -> Option<RaftControl> {
        let b = c.build(epoch, 1234).unwrap();
        let (view, _) = BatchView::parse(&b).unwrap();
        assert!(view.is_control());
        assert_eq!(view.partition_leader_epoch(), epoch);
        assert_eq!(view.producer_id(), crate::batch::NO_PRODUCER_ID);
        // not a transaction marker
        assert_eq!(view.control_marker().unwrap(), None);
        RaftControl::parse(&view).unwrap()
    }

    proptest! {
        #[test]
        fn entries_round_trip(leader in any::<i32>(), voters in proptest::collection::vec(any::<i32>(), 0..7),
                              membership in proptest::collection::vec(any::<u8>(), 0..300), epoch in 0..i32::MAX) {
            let lc = RaftControl::LeaderChange { leader, voters };
            prop_assert_eq!(round_trip(&lc, epoch), Some(lc));
            let m = RaftControl::Membership(Bytes::from(membership.clone()));
            prop_assert_eq!(round_trip(&m, epoch), Some(m));
            let c = RaftControl::Command(Bytes::from(membership));
            prop_assert_eq!(round_trip(&c, epoch), Some(c));
        }

        /// Any bytes: parsing never panics.
        #[test]
        fn any_bytes_parse_without_panic(data in proptest::collection::vec(any::<u8>(), 0..400)) {
            if let Ok(view) = BatchView::parse_unchecked_crc(&data) {
                let _ = RaftControl::parse(&view);
            }
        }
    }

    #[test]
    fn records_and_transaction_markers_are_not_raft_entries() {
        let data = BatchBuilder::default()
            .build(&[NewRecord { timestamp: 1, value: Some(Bytes::from_static(b"v")), ..Default::default() }])
            .unwrap();
        let marker =
            BatchBuilder::control_marker(7, 0, ControlMarker { kind: ControlType::Commit, coordinator_epoch: 3 }, 1)
                .unwrap();
        for b in [data, marker] {
            let (_, view) = iter_batches(&b).next().unwrap().unwrap();
            assert_eq!(RaftControl::parse(&view).unwrap(), None);
        }
    }

    /// A LEADER_CHANGE value as KRaft's schema lays it out (version 0: leader 1, voters [1, 2, 3], no
    /// granting voters; `LeaderChangeMessage.json`, flexible from version 0).
    #[test]
    fn the_leader_change_value_follows_krafts_schema() {
        let b = RaftControl::LeaderChange { leader: 1, voters: vec![1, 2, 3] }.build(4, 0).unwrap();
        let (view, _) = BatchView::parse(&b).unwrap();
        let rec = view.records().unwrap().remove(0);
        assert_eq!(rec.key.as_deref(), Some(&[0u8, 0, 0, 2][..]));
        // version 0, leader id 1, voters: compact array of 3 (each an id and empty tagged
        // fields), granting voters: empty compact array, empty tagged fields
        let want: &[u8] = &[0, 0, 0, 0, 0, 1, 4, 0, 0, 0, 1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 3, 0, 1, 0];
        assert_eq!(rec.value.as_deref(), Some(want));
    }
}
