//! How Raft RPCs to each peer fare, logged as one line per failing peer per interval instead of
//! openraft's four or five lines per failed RPC (issue 19 item 6, decision 0042).
//!
//! Every AppendEntries, Vote and InstallSnapshot this broker sends (for the metadata quorum,
//! every partition and every coordinator shard) is tallied per peer by how it ended: answered,
//! timed out (by the transport's bound or openraft's own timer, which drops the RPC midway),
//! refused (no process listens), or failed otherwise (a connection reset, an undecodable
//! answer). Every [`INTERVAL`], a peer with failures gets one WARN line with the counts and the
//! last error; a peer whose RPCs are answered again after failing gets one INFO line. The same
//! counts are the metric `sluice_raft_rpcs_total{peer, outcome}`.
//!
//! openraft's own lines for the same failures ([`is_per_rpc_noise`]) are left out of the
//! broker's log unless `SLUICE_LOG` names `openraft` (main.rs).

use super::NodeId;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

/// How often failing peers are summarized.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// How one RPC ended (in the order of `PeerState::counters`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Answered,
    TimedOut,
    Refused,
    Failed,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Answered => "answered",
            Outcome::TimedOut => "timed_out",
            Outcome::Refused => "refused",
            Outcome::Failed => "failed",
        }
    }
}

/// One peer's RPCs since the last summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub answered: u64,
    pub timed_out: u64,
    pub refused: u64,
    pub failed: u64,
    pub last_error: Option<String>,
}

impl Tally {
    fn failures(&self) -> u64 {
        self.timed_out + self.refused + self.failed
    }
}

/// Per peer: the current interval's tally, and whether the last summary found it failing.
#[derive(Default)]
struct PeerState {
    now: Tally,
    failing: bool,
    /// `sluice_raft_rpcs_total` for this peer, one per [`Outcome`] (registered at its first RPC,
    /// so no RPC formats labels or looks up the registry).
    counters: Option<[::metrics::Counter; 4]>,
}

/// Tallies per peer (one per broker: [`HEALTH`]).
pub struct Health {
    peers: Mutex<BTreeMap<NodeId, PeerState>>,
}

/// This broker's tallies.
pub static HEALTH: Health = Health::new();

impl Default for Health {
    fn default() -> Health {
        Health::new()
    }
}

impl Health {
    pub const fn new() -> Health {
        Health { peers: Mutex::new(BTreeMap::new()) }
    }

    /// Count one RPC to `peer`.
    pub fn record(&self, peer: NodeId, outcome: Outcome, error: Option<&dyn std::fmt::Display>) {
        let Ok(mut peers) = self.peers.lock() else { return };
        let state = peers.entry(peer).or_default();
        let counters = state.counters.get_or_insert_with(|| {
            [Outcome::Answered, Outcome::TimedOut, Outcome::Refused, Outcome::Failed].map(|o| {
                ::metrics::counter!(crate::metrics::RAFT_RPCS_TOTAL, "peer" => peer.to_string(), "outcome" => o.label())
            })
        });
        counters[outcome as usize].increment(1);
        let t = &mut state.now;
        match outcome {
            Outcome::Answered => t.answered += 1,
            Outcome::TimedOut => t.timed_out += 1,
            Outcome::Refused => t.refused += 1,
            Outcome::Failed => t.failed += 1,
        }
        if let Some(e) = error {
            t.last_error = Some(e.to_string());
        }
    }

    /// Close the current interval: a line for each peer with failures in it, and for each
    /// peer answered without failure after an interval with failures. Peers with nothing to
    /// say are left out.
    pub fn take_summary(&self) -> Vec<Line> {
        let Ok(mut peers) = self.peers.lock() else { return Vec::new() };
        let mut lines = Vec::new();
        for (peer, state) in peers.iter_mut() {
            let t = std::mem::take(&mut state.now);
            if t.failures() > 0 {
                state.failing = true;
                lines.push(Line::Failing(*peer, t));
            } else if state.failing && t.answered > 0 {
                state.failing = false;
                lines.push(Line::Recovered(*peer, t.answered));
            }
        }
        lines
    }
}

/// Counts an RPC as timed out unless [`Pending::finish`] is called first: openraft drops an
/// append's future when its own timer runs out, and a dropped RPC never reaches its end.
pub struct Pending {
    health: &'static Health,
    peer: NodeId,
    done: bool,
}

impl Pending {
    pub fn start(health: &'static Health, peer: NodeId) -> Pending {
        Pending { health, peer, done: false }
    }

    pub fn finish(mut self, outcome: Outcome, error: Option<&dyn std::fmt::Display>) {
        self.done = true;
        self.health.record(self.peer, outcome, error);
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.done {
            let why: &dyn std::fmt::Display = &"cancelled by openraft's timer (the heartbeat interval)";
            self.health.record(self.peer, Outcome::TimedOut, Some(why));
        }
    }
}

/// What one summary says about a peer.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    Failing(NodeId, Tally),
    Recovered(NodeId, u64),
}

/// Log each failing peer once per [`INTERVAL`], for as long as the broker runs.
pub async fn summarize() {
    let mut tick = tokio::time::interval(INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        for line in HEALTH.take_summary() {
            match line {
                Line::Failing(peer, t) => tracing::warn!(
                    peer,
                    answered = t.answered,
                    timed_out = t.timed_out,
                    refused = t.refused,
                    failed = t.failed,
                    last_error = t.last_error.as_deref().unwrap_or(""),
                    "Raft RPCs to broker {peer} failing: {} of {} in the last {} s",
                    t.failures(),
                    t.failures() + t.answered,
                    INTERVAL.as_secs()
                ),
                Line::Recovered(peer, answered) => tracing::info!(
                    peer,
                    answered,
                    "Raft RPCs to broker {peer} are answered again (none failed in the last {} s)",
                    INTERVAL.as_secs()
                ),
            }
        }
    }
}

/// openraft 0.9.23's log lines (source file, line of the macro) that each repeat one failed or
/// stale RPC: the summary above counts those failures instead. Its other lines (storage
/// errors, snapshot failures) stay. The version is pinned (`=0.9.23` in Cargo.toml) and
/// vendored with a patch (`broker/vendor/openraft-0.9.23`, decision 0060: the lines of
/// `core/raft_core.rs` are the patched file's, 17 below the package's);
/// `cluster.rs::raft_rpc_failures_are_summarized_per_peer` fails if an upgrade moves them.
const PER_RPC_LINES: &[(&str, u32)] = &[
    // "error replication to target=…" (WARN; a storage error is logged again at ERROR, kept)
    ("replication/mod.rs", 258),
    // "RPCError"
    ("replication/mod.rs", 284),
    // "… backoff mode: drain events without processing them" (after a refused RPC)
    ("replication/mod.rs", 576),
    // "update progress error", "heartbeat error: …, no update to inflight data"
    ("engine/handler/replication_handler/mod.rs", 287),
    ("engine/handler/replication_handler/mod.rs", 294),
    // a vote request that timed out or failed
    ("core/raft_core.rs", 1106),
    ("core/raft_core.rs", 1119),
    // "A message will be ignored because vote changed": an answer to an RPC of an earlier term
    ("core/raft_core.rs", 1556),
];

/// Whether a log event is one of openraft's per-RPC lines ([`PER_RPC_LINES`]).
pub fn is_per_rpc_noise(meta: &tracing::Metadata<'_>) -> bool {
    if !meta.target().starts_with("openraft") {
        return false;
    }
    let (Some(file), Some(line)) = (meta.file(), meta.line()) else { return false };
    let file = file.replace('\\', "/");
    PER_RPC_LINES.iter().any(|(f, l)| *l == line && file.ends_with(&format!("openraft-0.9.23/src/{f}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_peer_is_summarized_once_per_interval_and_its_recovery_once() {
        let h: &'static Health = Box::leak(Box::new(Health::new()));
        h.record(1, Outcome::Answered, None);
        h.record(1, Outcome::Refused, Some(&"connection refused"));
        drop(Pending::start(h, 1));
        Pending::start(h, 1).finish(Outcome::Failed, Some(&"early eof"));
        h.record(2, Outcome::Answered, None);
        let failing = Tally { answered: 1, timed_out: 1, refused: 1, failed: 1, last_error: Some("early eof".into()) };
        assert_eq!(h.take_summary(), vec![Line::Failing(1, failing)]);
        // an interval with nothing: no line; then answered again: one line, once
        assert_eq!(h.take_summary(), vec![]);
        Pending::start(h, 1).finish(Outcome::Answered, None);
        h.record(2, Outcome::Answered, None);
        assert_eq!(h.take_summary(), vec![Line::Recovered(1, 1)]);
        h.record(1, Outcome::Answered, None);
        assert_eq!(h.take_summary(), vec![]);
    }
}
