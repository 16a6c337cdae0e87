//! The ONE place where internal errors become Kafka error codes. Exhaustive matches, no
//! catch-all arm: adding an error variant forces a decision here.

use crate::group::error::GroupError;
use crate::partition_handle::WriteRefused;
use crate::producer_ids::IdError;
use crate::replication::types::{ApplyFailure, PartResult, WriteError};
use crate::topics::Unwritable;
use crate::txn::error::TxnError;
use kafka_protocol::error::ResponseError;
use sluice_protocol::batch::BatchError;
use sluice_storage::StorageError;

/// Kafka error code for a storage error on the produce path.
pub fn storage_produce_code(e: &StorageError) -> i16 {
    match e {
        StorageError::InvalidBatch { source, .. } => batch_code(source),
        StorageError::BatchTooLarge { .. } => ResponseError::MessageTooLarge.code(),
        StorageError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange.code(),
        // A corrupt stored batch or an I/O failure: the partition is unusable here. Kafka
        // answers KAFKA_STORAGE_ERROR, which clients treat as retriable (and the effect of a
        // write that failed in fsync is unknown, which is what "retriable" tells them).
        StorageError::Io { .. }
        | StorageError::Corrupt { .. }
        | StorageError::Offline(_)
        | StorageError::Unrepairable { .. } => ResponseError::KafkaStorageError.code(),
        // a write a new leader's log does not have (Raft truncated it): Kafka's answer to a
        // write lost to a leader change
        StorageError::Truncated { .. } => ResponseError::NotLeaderOrFollower.code(),
        StorageError::DirLocked { .. } | StorageError::InvalidConfig(_) => ResponseError::UnknownServerError.code(),
    }
}

/// Kafka error code for an idempotence/transaction refusal of a produced batch.
pub fn refusal_code(r: &crate::partition::producer_state::Refusal) -> i16 {
    use crate::partition::producer_state::Refusal;
    match r {
        Refusal::InvalidProducerEpoch { .. } => ResponseError::InvalidProducerEpoch.code(),
        Refusal::OutOfOrderSequence { .. } => ResponseError::OutOfOrderSequenceNumber.code(),
        Refusal::InvalidTxnState => ResponseError::InvalidTxnState.code(),
        Refusal::UnknownProducerId { .. } => ResponseError::UnknownProducerId.code(),
        Refusal::CoordinatorFenced { .. } => ResponseError::TransactionCoordinatorFenced.code(),
        Refusal::TxnVerification(code) => *code,
        Refusal::NotInTransaction => ResponseError::InvalidTxnState.code(),
    }
}

/// Kafka error code for a replicated write that was not proposed or whose outcome is unknown:
/// NOT_LEADER_OR_FOLLOWER and REQUEST_TIMED_OUT are retriable, and idempotence makes the
/// client's retry safe.
pub fn write_error_code(e: &WriteError) -> i16 {
    match e {
        WriteError::NotLeader | WriteError::LeadershipLost(_) | WriteError::Stopped => {
            ResponseError::NotLeaderOrFollower.code()
        }
        WriteError::TimedOut(_) => ResponseError::RequestTimedOut.code(),
    }
}

/// Kafka error code for a committed command that could not be applied.
pub fn apply_failure_code(f: &ApplyFailure) -> i16 {
    match f {
        ApplyFailure::Storage(e) => storage_produce_code(e),
    }
}

/// A replicated partition's answer that is not a write: its Kafka code and message (None for
/// a write).
pub fn part_result_error(r: &PartResult) -> Option<(i16, String)> {
    match r {
        PartResult::Done | PartResult::Appended { .. } | PartResult::LogStart(_) => None,
        PartResult::Refused(x) => Some((refusal_code(x), format!("{x:?}"))),
        PartResult::Failed(f) => Some((apply_failure_code(f), f.to_string())),
    }
}

/// Kafka error code for a partition this broker cannot write (Produce, WriteTxnMarkers,
/// DeleteRecords): unknown here, or replicated with no replica running here yet (retriable:
/// clients refresh their metadata and go to the leader).
pub fn unwritable_code(why: Unwritable) -> i16 {
    match why {
        Unwritable::NoSuchPartition => ResponseError::UnknownTopicOrPartition.code(),
        Unwritable::NotWrittenHere => ResponseError::NotLeaderOrFollower.code(),
    }
}

/// Kafka error code for a batch or marker a partition did not write (Produce, WriteTxnMarkers).
pub fn write_refused_code(e: &WriteRefused) -> i16 {
    match e {
        WriteRefused::Refused(r) => refusal_code(r),
        WriteRefused::Storage(e) => storage_produce_code(e),
        WriteRefused::Write(e) => write_error_code(e),
    }
}

/// Kafka error code for a group coordinator's refusal.
pub fn group_code(e: GroupError) -> i16 {
    group_response(e).code()
}

/// The Kafka error of a group coordinator's refusal (for handlers that mix it with their own).
pub fn group_response(e: GroupError) -> ResponseError {
    match e {
        GroupError::CoordinatorNotAvailable | GroupError::WriteFailed => ResponseError::CoordinatorNotAvailable,
        GroupError::NotCoordinator => ResponseError::NotCoordinator,
        GroupError::UnknownMemberId => ResponseError::UnknownMemberId,
        GroupError::IllegalGeneration => ResponseError::IllegalGeneration,
        GroupError::RebalanceInProgress => ResponseError::RebalanceInProgress,
        GroupError::FencedInstanceId => ResponseError::FencedInstanceId,
        GroupError::InconsistentGroupProtocol => ResponseError::InconsistentGroupProtocol,
        GroupError::InvalidSessionTimeout => ResponseError::InvalidSessionTimeout,
        GroupError::GroupMaxSizeReached => ResponseError::GroupMaxSizeReached,
        GroupError::MemberIdRequired => ResponseError::MemberIdRequired,
        GroupError::NonEmptyGroup => ResponseError::NonEmptyGroup,
        GroupError::GroupIdNotFound => ResponseError::GroupIdNotFound,
        GroupError::GroupSubscribedToTopic => ResponseError::GroupSubscribedToTopic,
        GroupError::UnknownTopicOrPartition => ResponseError::UnknownTopicOrPartition,
        GroupError::FencedMemberEpoch => ResponseError::FencedMemberEpoch,
        GroupError::StaleMemberEpoch => ResponseError::StaleMemberEpoch,
        GroupError::InvalidRequest => ResponseError::InvalidRequest,
    }
}

/// [`group_code`] of an answer that may be a success (0).
pub fn group_answer(r: Result<(), GroupError>) -> i16 {
    r.err().map_or(0, group_code)
}

/// [`group_code`] of an error that may be absent (0).
pub fn group_error(e: Option<GroupError>) -> i16 {
    e.map_or(0, group_code)
}

/// Kafka error code for a transaction coordinator's refusal.
pub fn txn_code(e: TxnError) -> i16 {
    txn_response(e).code()
}

/// The Kafka error of a transaction coordinator's refusal (for handlers that mix it with their
/// own, or map it by request version).
pub fn txn_response(e: TxnError) -> ResponseError {
    match e {
        TxnError::NotCoordinator => ResponseError::NotCoordinator,
        TxnError::WriteFailed => ResponseError::CoordinatorNotAvailable,
        TxnError::ProducerIdsLoading => ResponseError::CoordinatorLoadInProgress,
        TxnError::ProducerIdStorage => ResponseError::KafkaStorageError,
        TxnError::InvalidTransactionTimeout => ResponseError::InvalidTransactionTimeout,
        TxnError::ProducerFenced => ResponseError::ProducerFenced,
        TxnError::InvalidProducerIdMapping => ResponseError::InvalidProducerIdMapping,
        TxnError::ConcurrentTransactions => ResponseError::ConcurrentTransactions,
        TxnError::InvalidTxnState => ResponseError::InvalidTxnState,
        TxnError::InvalidRequest => ResponseError::InvalidRequest,
        // Kafka's answer when 2PC is not enabled on the broker
        TxnError::TwoPhaseCommitDisabled => ResponseError::TransactionalIdAuthorizationFailed,
    }
}

/// Kafka error code for a producer id that could not be allocated (InitProducerId without a
/// transactional id); a storage failure is logged.
pub fn id_error_code(e: IdError) -> i16 {
    txn_response(TxnError::from(e)).code()
}

/// Kafka error code for a storage error on the read path (Fetch, ListOffsets).
pub fn storage_read_code(e: &StorageError) -> i16 {
    match e {
        StorageError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange.code(),
        StorageError::Io { .. }
        | StorageError::Corrupt { .. }
        | StorageError::Offline(_)
        | StorageError::Unrepairable { .. } => ResponseError::KafkaStorageError.code(),
        StorageError::InvalidBatch { .. } | StorageError::BatchTooLarge { .. } => ResponseError::CorruptMessage.code(),
        // a write a new leader's log does not have (Raft truncated it): Kafka's answer to a
        // write lost to a leader change
        StorageError::Truncated { .. } => ResponseError::NotLeaderOrFollower.code(),
        StorageError::DirLocked { .. } | StorageError::InvalidConfig(_) => ResponseError::UnknownServerError.code(),
    }
}

/// Kafka error code for an invalid produced batch.
pub fn batch_code(e: &BatchError) -> i16 {
    match e {
        BatchError::CrcMismatch { .. }
        | BatchError::Truncated { .. }
        | BatchError::InvalidLength(_)
        | BatchError::MalformedRecord(_)
        | BatchError::Compression(_) => ResponseError::CorruptMessage.code(),
        BatchError::InvalidRecordCount(_) | BatchError::InvalidRecords(_) => ResponseError::InvalidRecord.code(),
        BatchError::UnsupportedMagic(_) => ResponseError::UnsupportedForMessageFormat.code(),
        BatchError::UnknownCompression(_) => ResponseError::UnsupportedCompressionType.code(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes() {
        let e = StorageError::InvalidBatch { position: 0, source: BatchError::CrcMismatch { stored: 1, computed: 2 } };
        assert_eq!(storage_produce_code(&e), 2); // CORRUPT_MESSAGE
        assert_eq!(storage_produce_code(&StorageError::BatchTooLarge { size: 1, max: 0 }), 10);
        assert_eq!(storage_read_code(&StorageError::OffsetOutOfRange { offset: 1, log_start: 0, log_end: 0 }), 1);
        assert_eq!(storage_read_code(&StorageError::Offline("x".into())), 56);
    }
}
