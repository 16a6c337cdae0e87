//! The history of a fault-test run: one JSON object per line, in the order events happened
//! (documented in docs/jepsen.md). Anyone can re-check a history with `jepsen check FILE`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, Write};

/// The kind of a history event, as Jepsen names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpType {
    /// The operation started.
    Invoke,
    /// It completed and took effect.
    Ok,
    /// It definitely did not take effect (e.g. an aborted transaction).
    Fail,
    /// Its outcome is unknown (e.g. a commit that timed out, a crashed client).
    Info,
}

/// What an operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpFn {
    /// A transaction of sends and polls (or a single send/poll outside transactions).
    Txn,
    /// The process's consumer was (re)positioned: later polls may start anywhere. Sent after
    /// an abort rewinds, a rebalance, or a restart of the process.
    Rewind,
    /// A fault the nemesis injected or healed (not a client operation).
    Nemesis,
}

/// One step inside an operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Micro {
    /// Write `value` to `key` (a partition); `offset` is filled in by the completion.
    Send {
        /// Key (partition).
        key: i32,
        /// The value, unique in the run.
        value: i64,
        /// Offset assigned, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        offset: Option<i64>,
    },
    /// What a poll returned: per key, (offset, value) pairs in the order received.
    Poll {
        /// Reads per key.
        reads: BTreeMap<i32, Vec<(i64, i64)>>,
        /// The consumer group whose offsets this transaction commits, if any: within a
        /// group, each record is consumed by at most one committed transaction.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        group: Option<String>,
    },
}

/// A history event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    /// Position in the history.
    pub index: usize,
    /// Nanoseconds since the run started.
    pub time_ns: u64,
    /// The client process (worker) that performed it; -1 for the nemesis.
    pub process: i64,
    /// invoke / ok / fail / info.
    #[serde(rename = "type")]
    pub kind: OpType,
    /// What it is.
    pub f: OpFn,
    /// The steps (for a completion, with offsets and reads filled in).
    #[serde(default)]
    pub value: Vec<Micro>,
    /// For a transaction's completion: when its commit was requested (ns since start); reads
    /// of its values that completed before this saw uncommitted data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_ns: Option<u64>,
    /// Free text (error message, fault description).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Write a history as JSON lines.
pub fn write(ops: &[Op], out: &mut impl Write) -> std::io::Result<()> {
    for op in ops {
        serde_json::to_writer(&mut *out, op)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// Read a history written by [`write`]; a bad line is an error naming its line number.
pub fn read(input: impl BufRead) -> Result<Vec<Op>, String> {
    let mut ops = Vec::new();
    for (n, line) in input.lines().enumerate() {
        let line = line.map_err(|e| format!("line {}: {e}", n + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        ops.push(serde_json::from_str(&line).map_err(|e| format!("line {}: {e}", n + 1))?);
    }
    Ok(ops)
}
