//! What the group coordinator refuses, typed. `error_map::group_code` is the one place these
//! become Kafka error codes. Every variant but [`GroupError::WriteFailed`] is a refusal before
//! any effect: nothing was changed or stored. `WriteFailed` is a write whose outcome is unknown
//! (its shard was rolled back to what its log holds; the record may still become durable).

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupError {
    /// The shard is not loaded here, or the group is being deleted.
    CoordinatorNotAvailable,
    /// The group's shard is led by another broker.
    NotCoordinator,
    /// The store of a group or an offset failed, or its outcome is unknown.
    WriteFailed,
    UnknownMemberId,
    IllegalGeneration,
    RebalanceInProgress,
    FencedInstanceId,
    InconsistentGroupProtocol,
    InvalidSessionTimeout,
    GroupMaxSizeReached,
    /// JoinGroup v4+: the new member must rejoin with the id it was given.
    MemberIdRequired,
    NonEmptyGroup,
    GroupIdNotFound,
    GroupSubscribedToTopic,
    UnknownTopicOrPartition,
    /// KIP-848 member epochs.
    FencedMemberEpoch,
    StaleMemberEpoch,
    InvalidRequest,
}

impl GroupError {
    /// Did this refusal leave nothing changed (true for all but [`GroupError::WriteFailed`])?
    pub fn effect_known(self) -> bool {
        self != GroupError::WriteFailed
    }
}
