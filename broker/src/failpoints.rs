//! Test failpoints (`testing.failpoints`): named places where a test makes the broker crash,
//! stall or misbehave on purpose. The composition root arms them once at start; no production
//! type carries them, and with none armed each check is one relaxed atomic load.

use std::sync::atomic::{AtomicU32, Ordering};

/// Every failpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failpoint {
    /// Die before logging PrepareCommit/PrepareAbort (crash tests).
    TxnBeforePrepare,
    /// Die after logging it, before any marker (crash tests).
    TxnAfterPrepare,
    /// read_committed fetches are bounded by the high watermark, not the LSO: a deliberately
    /// broken broker, so tests can show that clients and checkers notice.
    FetchIgnoreLso,
    /// Hold a verified transactional batch 1.5 s before its replicated append (the KIP-890
    /// race test: a marker may be ordered in between).
    ProduceDelayAfterVerify,
    /// Under `log.flush.policy=sync`, acknowledge a produce without waiting for its fsync: the
    /// bug the power-cut tests (lossyfs) must catch.
    ProduceAckBeforeFsync,
    /// A coordinator shard replica repairing a damaged log refuses every peer's copy: a leader
    /// that cannot repair must hand the shard over (the hand-over test).
    KvMendRefusesCopies,
    /// The reconciler waits 3 s between creating a replicated partition's local copy and
    /// starting its replica: the window in which nothing may write the copy directly.
    ReplicaDelayStart,
    /// After each produce batch appended to an unreplicated partition, append the control
    /// batches one log per replica would hold for Raft's own entries (decision 0045's gate:
    /// every client must skip them).
    LogRaftControlBatches,
    /// A partition replica holds a term's blank entry (a new leader's first) 3 s before
    /// applying it: the window in which a leader just elected has not settled (ListOffsets).
    ReplicaDelayNewTerm,
}

impl Failpoint {
    pub const ALL: [Failpoint; 9] = [
        Failpoint::TxnBeforePrepare,
        Failpoint::TxnAfterPrepare,
        Failpoint::FetchIgnoreLso,
        Failpoint::ProduceDelayAfterVerify,
        Failpoint::ProduceAckBeforeFsync,
        Failpoint::KvMendRefusesCopies,
        Failpoint::ReplicaDelayStart,
        Failpoint::LogRaftControlBatches,
        Failpoint::ReplicaDelayNewTerm,
    ];

    /// Its name in `testing.failpoints`.
    pub fn name(self) -> &'static str {
        match self {
            Failpoint::TxnBeforePrepare => "txn.before_prepare",
            Failpoint::TxnAfterPrepare => "txn.after_prepare",
            Failpoint::FetchIgnoreLso => "fetch.ignore_lso",
            Failpoint::ProduceDelayAfterVerify => "produce.delay_after_verify",
            Failpoint::ProduceAckBeforeFsync => "produce.ack_before_fsync",
            Failpoint::KvMendRefusesCopies => "kv.mend_refuses_copies",
            Failpoint::ReplicaDelayStart => "replica.delay_start",
            Failpoint::LogRaftControlBatches => "log.raft_control_batches",
            Failpoint::ReplicaDelayNewTerm => "replica.delay_new_term",
        }
    }

    pub fn parse(name: &str) -> Option<Failpoint> {
        Self::ALL.into_iter().find(|f| f.name() == name)
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

static ARMED: AtomicU32 = AtomicU32::new(0);

/// Arm `points` for the rest of the process (the composition root, from `testing.failpoints`).
pub fn arm(points: &[Failpoint]) {
    for p in points {
        tracing::error!("failpoint {} armed: this broker misbehaves on purpose, for tests", p.name());
        ARMED.fetch_or(p.bit(), Ordering::Relaxed);
    }
}

/// Is `point` armed?
pub fn armed(point: Failpoint) -> bool {
    ARMED.load(Ordering::Relaxed) & point.bit() != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for f in Failpoint::ALL {
            assert_eq!(Failpoint::parse(f.name()), Some(f));
        }
        assert_eq!(Failpoint::parse("nope"), None);
    }
}
