//! Transaction APIs, one file each: AddPartitionsToTxn (v0–3 from clients, v4+ between
//! brokers), AddOffsetsToTxn, EndTxn, TxnOffsetCommit, ListTransactions, DescribeTransactions
//! (InitProducerId, with or without a transactional id, is `handlers/init_producer_id.rs`).
//! Each file holds its API's answer, its ACL rule (`acl`) and its cluster routing rule
//! (`route`); this module, what they share. Translation only: decisions in `txn/machine.rs`,
//! their execution in `txn/mod.rs`.

use super::{now_ms, sb, LaterReply, Reply};
use crate::group;
use crate::group::GroupCoordinator;
use crate::producer_ids::ProducerIds;
use crate::routing::Router;
use crate::routing::{CoordinatorKey, Route};
use crate::topics::TopicRegistry;
use crate::txn::error::TxnError;
use crate::txn::machine;
use crate::txn::Outcome;
use crate::txn::TxnCoordinator;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use std::sync::Arc;

pub mod add_offsets_to_txn;
pub mod add_partitions_to_txn;
pub mod describe_transactions;
pub mod end_txn;
pub mod list_transactions;
pub mod txn_offset_commit;

/// The code of a coordinator's refusal `e` for a request of `version` (PRODUCER_FENCED is newer
/// than some clients: older request versions get INVALID_PRODUCER_EPOCH).
pub(crate) fn code(e: TxnError, version: i16, fenced_since: i16) -> i16 {
    kafka_code(crate::error_map::txn_response(e), version, fenced_since)
}

/// `e` for a request of `version`: PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before
/// `fenced_since` (KIP-588).
fn kafka_code(e: ResponseError, version: i16, fenced_since: i16) -> i16 {
    if e == ResponseError::ProducerFenced {
        ::metrics::counter!(crate::metrics::PRODUCERS_FENCED_TOTAL, "api" => "coordinator").increment(1);
    }
    if e == ResponseError::ProducerFenced && version < fenced_since {
        ResponseError::InvalidProducerEpoch.code()
    } else {
        e.code()
    }
}

pub(crate) fn valid_id(id: &str) -> bool {
    !id.is_empty()
}

/// Allocates a producer id only when the coordinator's decision needs one (a new id, or a
/// rotation at epoch exhaustion), as Kafka's `producerIdManager.generateProducerId` calls.
pub(crate) fn fresh_pid(ids: &crate::producer_ids::ProducerIds) -> impl FnMut() -> Result<i64, TxnError> + '_ {
    move || ids.next().map_err(TxnError::from)
}
