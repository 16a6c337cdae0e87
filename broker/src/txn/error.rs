//! What the transaction coordinator refuses, typed. `error_map::txn_code` is the one place these
//! become Kafka error codes. Every variant but [`TxnError::WriteFailed`] is a refusal before any
//! effect: nothing was changed or logged. `WriteFailed` is a transition whose log write failed
//! or whose outcome is unknown (its shard was rolled back to what its log holds; a replicated
//! write may still commit, and the next leader finishes whatever it finds decided).

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnError {
    /// The id's shard is not led here (or is loading).
    NotCoordinator,
    /// The transition's log write failed, or its outcome is unknown.
    WriteFailed,
    /// Cluster mode: no producer id block has come from the metadata quorum yet (retriable).
    ProducerIdsLoading,
    /// A producer id block could not be stored.
    ProducerIdStorage,
    InvalidTransactionTimeout,
    /// Another producer instance owns the id (a higher epoch).
    ProducerFenced,
    /// The id is unknown or held by another producer id.
    InvalidProducerIdMapping,
    /// The previous transaction is still completing: retry.
    ConcurrentTransactions,
    /// The request does not fit the transaction's state.
    InvalidTxnState,
    /// A malformed request (KIP-939: `KeepPreparedTxn` without `Enable2Pc`).
    InvalidRequest,
    /// Two-phase commit asked for while `transaction.two.phase.commit.enable` is off.
    TwoPhaseCommitDisabled,
}

impl TxnError {
    /// Did this refusal leave nothing changed (true for all but [`TxnError::WriteFailed`])?
    pub fn effect_known(self) -> bool {
        self != TxnError::WriteFailed
    }
}
