//! The history checker: finds, with the offending operations, the anomalies Jepsen looks for in
//! Kafka-like systems. Independent of the broker and of the clients: it only reads a history.
//!
//! - **lost-write**: an acknowledged send at offset o on key k, never read, although some poll
//!   read k beyond o. **unseen**: an acknowledged send never read and beyond every read (the
//!   final drain should read everything, so any is an anomaly).
//! - **duplicate**: one value at two offsets. **inconsistent-offsets**: one offset of a key
//!   seen with two values.
//! - **G1a aborted read**: a read of a value from a transaction that failed (aborted).
//! - **G1b intermediate read**: a read, completed before its writer asked to commit, of a
//!   value that is not the writer's last write to that key. **precommitted-read**: the same for
//!   the writer's last write (the whole uncommitted write visible before the commit).
//! - **poll-skip**: a process's next poll of a key jumps over offsets holding committed values
//!   (without a rewind in between). **nonmonotonic-poll**: it goes back (or repeats).
//!   **nonmonotonic-send**: a process's acknowledged sends to a key get decreasing offsets.
//! - **double-consumption**: one record (key, offset) consumed by two committed transactions
//!   of the same consumer group (offsets committed in the transaction should make each
//!   record's consumption happen exactly once — the consume-transform-produce guarantee).
//! - **G1c**: circular information flow — a cycle of write-read edges among committed
//!   transactions (T1 read T2's write and T2 read T1's, directly or around a longer loop).
//!   Never legitimate under read_committed: each read sees only committed writes.
//! - **G0** and **G1c-ww**: cycles that need write-write edges (from the order of two
//!   transactions' writes in a partition). Kafka does not order concurrent transactions across
//!   partitions — their writes interleave in each log in whatever order they arrive — so such
//!   cycles occur in correct Kafka (and Sluice) runs. They are reported, and count against the
//!   verdict only in strict mode ([`Mode::Strict`]). Cycles are found by Tarjan's SCC search.

use super::history::{Micro, Op, OpFn, OpType};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Every anomaly name the checker reports, in report order.
pub const ANOMALIES: &[&str] = &[
    "lost-write",
    "unseen",
    "duplicate",
    "inconsistent-offsets",
    "G1a",
    "G1b",
    "precommitted-read",
    "poll-skip",
    "nonmonotonic-poll",
    "nonmonotonic-send",
    "double-consumption",
    "G0",
    "G1c",
    "G1c-ww",
];

/// Anomalies Kafka's transaction model allows (see the module docs): reported, but only a
/// strict check counts them.
pub const KAFKA_ALLOWED: &[&str] = &["G0", "G1c-ww"];

/// How to judge cycles that need write-write edges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Kafka's model: G0 and G1c-ww are reported but allowed.
    #[default]
    Kafka,
    /// Every anomaly counts.
    Strict,
}

/// The checker's verdict.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Report {
    /// Count per anomaly (every name in [`ANOMALIES`], zero included).
    pub counts: BTreeMap<String, usize>,
    /// Up to 5 explanations per anomaly, naming the operations (history indexes).
    pub examples: BTreeMap<String, Vec<String>>,
    /// Acknowledged sends, reads, committed transactions seen.
    pub acked_sends: usize,
    /// Values read.
    pub reads: usize,
    /// Transactions that committed.
    pub committed_txns: usize,
    /// Anomalies reported but not counted against the verdict (see [`Mode`]).
    pub allowed: Vec<String>,
}

impl Report {
    fn flag(&mut self, name: &str, why: String) {
        *self.counts.entry(name.to_string()).or_default() += 1;
        let ex = self.examples.entry(name.to_string()).or_default();
        if ex.len() < 5 {
            ex.push(why);
        }
    }

    /// True when no anomaly that counts was found.
    pub fn valid(&self) -> bool {
        self.counts.iter().all(|(name, c)| *c == 0 || self.allowed.contains(name))
    }

    /// Count of one anomaly.
    pub fn count(&self, name: &str) -> usize {
        self.counts.get(name).copied().unwrap_or(0)
    }
}

#[derive(Debug, Clone)]
struct Write {
    key: i32,
    value: i64,
    offset: Option<i64>,
    /// History index of the completion of the writing operation.
    op: usize,
    kind: OpType,
    commit_ns: Option<u64>,
    /// The last of this operation's writes to this key.
    last_for_key: bool,
}

#[derive(Debug, Clone)]
struct Read {
    process: i64,
    key: i32,
    offset: i64,
    value: i64,
    op: usize,
    done_ns: u64,
}

/// Check a history (Kafka mode).
pub fn check(ops: &[Op]) -> Report {
    check_with(ops, Mode::Kafka)
}

/// Check a history.
pub fn check_with(ops: &[Op], mode: Mode) -> Report {
    let mut r = Report::default();
    if mode == Mode::Kafka {
        r.allowed = KAFKA_ALLOWED.iter().map(|s| s.to_string()).collect();
    }
    for a in ANOMALIES {
        r.counts.insert(a.to_string(), 0);
    }
    let mut writes: HashMap<i64, Write> = HashMap::new();
    let mut reads: Vec<Read> = Vec::new();
    // Completions in history order, with per-process rewind markers.
    for op in ops {
        if op.f != OpFn::Txn || op.kind == OpType::Invoke {
            continue;
        }
        let mut per_key_last: HashMap<i32, i64> = HashMap::new();
        for m in &op.value {
            if let Micro::Send { key, value, .. } = m {
                per_key_last.insert(*key, *value);
            }
        }
        for m in &op.value {
            match m {
                Micro::Send { key, value, offset } => {
                    if let Some(prev) = writes.get(value) {
                        if prev.kind == OpType::Ok && op.kind == OpType::Ok {
                            r.flag(
                                "duplicate",
                                format!("value {value} written by two committed ops: {} and {}", prev.op, op.index),
                            );
                        }
                        if prev.kind == OpType::Ok {
                            continue; // a retry of a committed write keeps the committed one
                        }
                    }
                    writes.insert(
                        *value,
                        Write {
                            key: *key,
                            value: *value,
                            offset: if op.kind == OpType::Ok { *offset } else { None },
                            op: op.index,
                            kind: op.kind,
                            commit_ns: op.commit_ns,
                            last_for_key: per_key_last.get(key) == Some(value),
                        },
                    );
                }
                Micro::Poll { reads: rs, .. } if op.kind == OpType::Ok => {
                    for (key, list) in rs {
                        for (offset, value) in list {
                            reads.push(Read {
                                process: op.process,
                                key: *key,
                                offset: *offset,
                                value: *value,
                                op: op.index,
                                done_ns: op.time_ns,
                            });
                        }
                    }
                }
                Micro::Poll { .. } => {}
            }
        }
    }
    r.acked_sends = writes.values().filter(|w| w.kind == OpType::Ok).count();
    r.reads = reads.len();
    r.committed_txns = ops.iter().filter(|o| o.f == OpFn::Txn && o.kind == OpType::Ok).count();

    // Version order: key → offset → values seen there (from acknowledgements and reads).
    let mut at: BTreeMap<(i32, i64), BTreeSet<i64>> = BTreeMap::new();
    for w in writes.values() {
        if let Some(o) = w.offset {
            at.entry((w.key, o)).or_default().insert(w.value);
        }
    }
    let mut offsets_of: HashMap<i64, BTreeSet<(i32, i64)>> = HashMap::new();
    for rd in &reads {
        at.entry((rd.key, rd.offset)).or_default().insert(rd.value);
        offsets_of.entry(rd.value).or_default().insert((rd.key, rd.offset));
    }
    for w in writes.values() {
        if let Some(o) = w.offset {
            offsets_of.entry(w.value).or_default().insert((w.key, o));
        }
    }
    for ((k, o), vals) in &at {
        if vals.len() > 1 {
            r.flag("inconsistent-offsets", format!("key {k} offset {o} holds values {vals:?}"));
        }
    }
    let mut dup_values: Vec<(&i64, &BTreeSet<(i32, i64)>)> = offsets_of.iter().filter(|(_, s)| s.len() > 1).collect();
    dup_values.sort();
    for (v, places) in dup_values {
        r.flag("duplicate", format!("value {v} at {places:?} (key, offset)"));
    }

    // Lost and unseen writes.
    let read_values: BTreeSet<i64> = reads.iter().map(|x| x.value).collect();
    let mut max_read: HashMap<i32, i64> = HashMap::new();
    for rd in &reads {
        let m = max_read.entry(rd.key).or_insert(rd.offset);
        *m = (*m).max(rd.offset);
    }
    let mut acked: Vec<&Write> = writes.values().filter(|w| w.kind == OpType::Ok).collect();
    acked.sort_by_key(|w| (w.key, w.offset, w.value));
    for w in acked {
        if read_values.contains(&w.value) {
            continue;
        }
        let beyond = w.offset.is_some_and(|o| max_read.get(&w.key).is_some_and(|m| *m > o));
        if beyond {
            r.flag(
                "lost-write",
                format!(
                    "value {} acknowledged at key {} offset {:?} (op {}) was never read, though reads passed it",
                    w.value, w.key, w.offset, w.op
                ),
            );
        } else {
            r.flag(
                "unseen",
                format!(
                    "value {} acknowledged at key {} offset {:?} (op {}) was never read",
                    w.value, w.key, w.offset, w.op
                ),
            );
        }
    }

    // Aborted, intermediate and precommitted reads.
    for rd in &reads {
        let Some(w) = writes.get(&rd.value) else { continue };
        if w.op == rd.op {
            continue;
        }
        if w.kind == OpType::Fail {
            r.flag(
                "G1a",
                format!("op {} (process {}) read value {} of aborted op {}", rd.op, rd.process, rd.value, w.op),
            );
            continue;
        }
        if let Some(c) = w.commit_ns {
            if rd.done_ns < c {
                let (name, what) =
                    if w.last_for_key { ("precommitted-read", "final") } else { ("G1b", "intermediate") };
                r.flag(
                    name,
                    format!(
                        "op {} read {what} value {} of op {} on key {} before that transaction asked to commit",
                        rd.op, rd.value, w.op, rd.key
                    ),
                );
            }
        }
    }

    // Per-process poll and send order.
    let committed_at = |key: i32, from: i64, to: i64| -> Option<i64> {
        at.range((key, from)..(key, to)).find_map(|((_, o), vals)| {
            vals.iter().any(|v| writes.get(v).is_some_and(|w| w.kind == OpType::Ok)).then_some(*o)
        })
    };
    let mut last_poll: HashMap<(i64, i32), (i64, usize)> = HashMap::new();
    let mut last_send: HashMap<(i64, i32), (i64, usize)> = HashMap::new();
    for op in ops {
        if op.f == OpFn::Rewind && op.kind != OpType::Invoke {
            last_poll.retain(|(p, _), _| *p != op.process);
            continue;
        }
        if op.f != OpFn::Txn || op.kind != OpType::Ok {
            continue;
        }
        for m in &op.value {
            match m {
                Micro::Poll { reads: rs, .. } => {
                    for (key, list) in rs {
                        for (offset, _) in list {
                            if let Some((prev, prev_op)) = last_poll.get(&(op.process, *key)) {
                                if offset <= prev {
                                    r.flag(
                                        "nonmonotonic-poll",
                                        format!("process {} polled key {key} offset {offset} (op {}) after offset {prev} (op {prev_op})", op.process, op.index),
                                    );
                                } else if let Some(skipped) = committed_at(*key, prev + 1, *offset) {
                                    r.flag(
                                        "poll-skip",
                                        format!("process {} jumped on key {key} from offset {prev} (op {prev_op}) to {offset} (op {}), over committed offset {skipped}", op.process, op.index),
                                    );
                                }
                            }
                            last_poll.insert((op.process, *key), (*offset, op.index));
                        }
                    }
                }
                Micro::Send { key, offset: Some(offset), .. } => {
                    if let Some((prev, prev_op)) = last_send.get(&(op.process, *key)) {
                        if offset <= prev {
                            r.flag(
                                "nonmonotonic-send",
                                format!("process {} sent to key {key} at offset {offset} (op {}) after offset {prev} (op {prev_op})", op.process, op.index),
                            );
                        }
                    }
                    last_send.insert((op.process, *key), (*offset, op.index));
                }
                Micro::Send { .. } => {}
            }
        }
    }

    // Each record consumed once per group by committed transactions.
    let mut consumed: HashMap<(String, i32, i64), usize> = HashMap::new();
    for op in ops.iter().filter(|o| o.f == OpFn::Txn && o.kind == OpType::Ok) {
        for m in &op.value {
            if let Micro::Poll { reads: rs, group: Some(g) } = m {
                for (key, list) in rs {
                    for (offset, _) in list {
                        if let Some(prev) = consumed.insert((g.clone(), *key, *offset), op.index) {
                            if prev != op.index {
                                r.flag(
                                    "double-consumption",
                                    format!(
                                        "group {g}: key {key} offset {offset} consumed by committed ops {prev} and {}",
                                        op.index
                                    ),
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    // Dependency cycles among committed transactions.
    let committed: BTreeSet<usize> = writes.values().filter(|w| w.kind == OpType::Ok).map(|w| w.op).collect();
    let mut ww: BTreeSet<(usize, usize)> = BTreeSet::new();
    let mut per_key: BTreeMap<i32, Vec<(i64, usize)>> = BTreeMap::new();
    for w in writes.values().filter(|w| w.kind == OpType::Ok) {
        if let Some(o) = w.offset {
            per_key.entry(w.key).or_default().push((o, w.op));
        }
    }
    for list in per_key.values_mut() {
        list.sort();
        for pair in list.windows(2) {
            if pair[0].1 != pair[1].1 {
                ww.insert((pair[0].1, pair[1].1));
            }
        }
    }
    let mut wr: BTreeSet<(usize, usize)> = BTreeSet::new();
    let readers: BTreeSet<usize> =
        ops.iter().filter(|o| o.f == OpFn::Txn && o.kind == OpType::Ok).map(|o| o.index).collect();
    for rd in &reads {
        if let Some(w) = writes.get(&rd.value) {
            if w.kind == OpType::Ok && w.op != rd.op && readers.contains(&rd.op) {
                wr.insert((w.op, rd.op));
            }
        }
    }
    let mut nodes: BTreeSet<usize> = committed;
    nodes.extend(readers);
    for scc in sccs(&nodes, &ww) {
        r.flag("G0", format!("write-write cycle among ops {scc:?}"));
    }
    let wr_cycles = sccs(&nodes, &wr);
    for scc in &wr_cycles {
        r.flag("G1c", format!("write-read cycle (circular information flow) among ops {scc:?}"));
    }
    let all: BTreeSet<(usize, usize)> = ww.union(&wr).cloned().collect();
    for scc in sccs(&nodes, &all) {
        let members: BTreeSet<usize> = scc.iter().cloned().collect();
        let has_wr = wr.iter().any(|(a, b)| members.contains(a) && members.contains(b));
        let pure_wr = wr_cycles.iter().any(|c| c.iter().all(|x| members.contains(x)) && c.len() == members.len());
        if has_wr && !pure_wr {
            r.flag("G1c-ww", format!("cycle of write-write and write-read edges among ops {scc:?}"));
        }
    }
    r
}

/// Strongly connected components with more than one node (Tarjan, iterative).
fn sccs(nodes: &BTreeSet<usize>, edges: &BTreeSet<(usize, usize)>) -> Vec<Vec<usize>> {
    let mut adj: HashMap<usize, Vec<usize>> = HashMap::new();
    for (a, b) in edges {
        adj.entry(*a).or_default().push(*b);
    }
    let mut index: HashMap<usize, usize> = HashMap::new();
    let mut low: HashMap<usize, usize> = HashMap::new();
    let mut on_stack: BTreeSet<usize> = BTreeSet::new();
    let mut stack: Vec<usize> = Vec::new();
    let mut out = Vec::new();
    let mut next = 0usize;
    let all: BTreeSet<usize> = nodes.iter().cloned().chain(edges.iter().flat_map(|(a, b)| [*a, *b])).collect();
    for &start in &all {
        if index.contains_key(&start) {
            continue;
        }
        // (node, next child position)
        let mut work: Vec<(usize, usize)> = vec![(start, 0)];
        index.insert(start, next);
        low.insert(start, next);
        next += 1;
        stack.push(start);
        on_stack.insert(start);
        while let Some((v, i)) = work.pop() {
            let children = adj.get(&v).cloned().unwrap_or_default();
            if i < children.len() {
                work.push((v, i + 1));
                let w = children[i];
                if let std::collections::hash_map::Entry::Vacant(e) = index.entry(w) {
                    e.insert(next);
                    low.insert(w, next);
                    next += 1;
                    stack.push(w);
                    on_stack.insert(w);
                    work.push((w, 0));
                } else if on_stack.contains(&w) {
                    let lw = index[&w];
                    let lv = low[&v];
                    low.insert(v, lv.min(lw));
                }
                continue;
            }
            if low[&v] == index[&v] {
                let mut comp = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack.remove(&w);
                    comp.push(w);
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    out.push(comp);
                }
            }
            if let Some(&(parent, _)) = work.last() {
                let lv = low[&v];
                let lp = low[&parent];
                low.insert(parent, lp.min(lv));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny history builder: each call appends an invoke and its completion.
    #[derive(Default)]
    struct H {
        ops: Vec<Op>,
        t: u64,
    }

    fn send(key: i32, value: i64, offset: Option<i64>) -> Micro {
        Micro::Send { key, value, offset }
    }

    fn poll(reads: &[(i32, &[(i64, i64)])]) -> Micro {
        Micro::Poll { reads: reads.iter().map(|(k, v)| (*k, v.to_vec())).collect(), group: None }
    }

    fn group_poll(reads: &[(i32, &[(i64, i64)])]) -> Micro {
        Micro::Poll { reads: reads.iter().map(|(k, v)| (*k, v.to_vec())).collect(), group: Some("g".into()) }
    }

    impl H {
        fn op(&mut self, process: i64, kind: OpType, value: Vec<Micro>) -> usize {
            self.t += 10;
            let i = self.ops.len();
            self.ops.push(Op {
                index: i,
                time_ns: self.t,
                process,
                kind: OpType::Invoke,
                f: OpFn::Txn,
                value: vec![],
                commit_ns: None,
                note: None,
            });
            self.t += 10;
            self.ops.push(Op {
                index: i + 1,
                time_ns: self.t,
                process,
                kind,
                f: OpFn::Txn,
                value,
                commit_ns: Some(self.t - 5),
                note: None,
            });
            i + 1
        }
        fn rewind(&mut self, process: i64) {
            self.t += 1;
            let i = self.ops.len();
            self.ops.push(Op {
                index: i,
                time_ns: self.t,
                process,
                kind: OpType::Ok,
                f: OpFn::Rewind,
                value: vec![],
                commit_ns: None,
                note: None,
            });
        }
        fn only(&self, anomaly: &str) {
            let r = check(&self.ops);
            for a in ANOMALIES {
                let want = usize::from(*a == anomaly);
                assert_eq!(r.count(a) > 0, want > 0, "{a}: {:?}", r.examples);
            }
        }
    }

    /// A clean history: two writers, one reader that reads everything once, in order.
    fn clean() -> H {
        let mut h = H::default();
        h.op(1, OpType::Ok, vec![send(0, 10, Some(0)), send(1, 11, Some(0))]);
        h.op(2, OpType::Ok, vec![send(0, 20, Some(1))]);
        h.op(2, OpType::Fail, vec![send(0, 21, None)]);
        h.op(3, OpType::Ok, vec![poll(&[(0, &[(0, 10), (1, 20)]), (1, &[(0, 11)])])]);
        h
    }

    #[test]
    fn clean_histories_pass() {
        let h = clean();
        let r = check(&h.ops);
        assert!(r.valid(), "{:?}", r.examples);
        assert_eq!((r.acked_sends, r.reads), (3, 3));
        // An info (unknown) write that was read is fine, and one never read too.
        let mut h = clean();
        h.op(4, OpType::Info, vec![send(1, 40, None)]);
        h.op(4, OpType::Info, vec![send(1, 41, None)]);
        h.op(3, OpType::Ok, vec![poll(&[(1, &[(1, 40)])])]);
        assert!(check(&h.ops).valid());
        // A rewind lets a process read again from anywhere.
        let mut h = clean();
        h.rewind(3);
        h.op(3, OpType::Ok, vec![poll(&[(0, &[(0, 10)])])]);
        assert!(check(&h.ops).valid());
        // Aborted records between polls are not skips.
        let mut h = H::default();
        h.op(1, OpType::Ok, vec![send(0, 1, Some(0))]);
        h.op(1, OpType::Fail, vec![send(0, 2, None)]);
        h.op(1, OpType::Ok, vec![send(0, 3, Some(2))]);
        h.op(2, OpType::Ok, vec![poll(&[(0, &[(0, 1)])])]);
        h.op(2, OpType::Ok, vec![poll(&[(0, &[(2, 3)])])]);
        assert!(check(&h.ops).valid(), "{:?}", check(&h.ops).examples);
    }

    #[test]
    fn lost_write() {
        let mut h = clean();
        h.op(1, OpType::Ok, vec![send(0, 30, Some(2))]);
        h.op(2, OpType::Ok, vec![send(0, 31, Some(3))]);
        h.op(5, OpType::Ok, vec![poll(&[(0, &[(0, 10), (1, 20), (3, 31)])])]);
        let r = check(&h.ops);
        assert_eq!(r.count("lost-write"), 1, "{:?}", r.examples);
        // The same reads are also a skip by that poller; nothing else.
        assert_eq!(r.count("poll-skip"), 1);
        assert_eq!(r.counts.values().sum::<usize>(), 2);
    }

    #[test]
    fn unseen() {
        let mut h = clean();
        h.op(1, OpType::Ok, vec![send(0, 30, Some(2))]);
        h.only("unseen");
    }

    #[test]
    fn duplicate() {
        let mut h = clean();
        h.op(4, OpType::Ok, vec![poll(&[(0, &[(0, 10), (1, 20), (2, 20)])])]);
        h.only("duplicate");
    }

    #[test]
    fn inconsistent_offsets() {
        let mut h = clean();
        h.op(1, OpType::Ok, vec![send(1, 12, Some(1))]);
        h.op(4, OpType::Ok, vec![poll(&[(1, &[(0, 11), (1, 99)])])]);
        h.op(6, OpType::Ok, vec![send(1, 99, Some(2))]);
        let r = check(&h.ops);
        assert!(r.count("inconsistent-offsets") > 0, "{:?}", r.examples);
    }

    #[test]
    fn aborted_read() {
        let mut h = clean();
        h.op(4, OpType::Ok, vec![poll(&[(0, &[(2, 21)])])]);
        h.only("G1a");
    }

    #[test]
    fn intermediate_and_precommitted_reads() {
        let mut h = H::default();
        // The reader completes (t=20) before the writer asks to commit (its commit_ns).
        h.op(2, OpType::Ok, vec![poll(&[(0, &[(0, 1)])])]);
        let w = h.op(1, OpType::Ok, vec![send(0, 1, Some(0)), send(0, 2, Some(1))]);
        h.op(3, OpType::Ok, vec![poll(&[(0, &[(0, 1), (1, 2)])])]);
        let _ = w;
        h.only("G1b");
        let mut h = H::default();
        h.op(2, OpType::Ok, vec![poll(&[(0, &[(0, 1), (1, 2)])])]);
        h.op(1, OpType::Ok, vec![send(0, 1, Some(0)), send(0, 2, Some(1))]);
        let r = check(&h.ops);
        assert!(r.count("precommitted-read") > 0 && r.count("G1b") > 0, "{:?}", r.examples);
    }

    #[test]
    fn poll_skip_and_nonmonotonic_poll() {
        let mut h = clean();
        h.op(1, OpType::Ok, vec![send(0, 30, Some(2)), send(0, 31, Some(3))]);
        h.op(4, OpType::Ok, vec![poll(&[(0, &[(0, 10)])])]);
        h.op(4, OpType::Ok, vec![poll(&[(0, &[(3, 31)])])]);
        h.op(5, OpType::Ok, vec![poll(&[(0, &[(0, 10), (1, 20), (2, 30), (3, 31)])])]);
        h.only("poll-skip");
        let mut h = clean();
        h.op(4, OpType::Ok, vec![poll(&[(0, &[(0, 10), (1, 20)])])]);
        h.op(4, OpType::Ok, vec![poll(&[(0, &[(1, 20)])])]);
        h.only("nonmonotonic-poll");
    }

    #[test]
    fn double_consumption() {
        let mut h = clean();
        h.op(4, OpType::Ok, vec![group_poll(&[(0, &[(0, 10)])])]);
        h.op(5, OpType::Fail, vec![group_poll(&[(0, &[(0, 10)])])]);
        assert!(check(&h.ops).valid(), "a failed transaction's reads do not count");
        h.op(5, OpType::Ok, vec![group_poll(&[(0, &[(0, 10), (1, 20)])])]);
        h.only("double-consumption");
        // A retried write of an aborted attempt is not a duplicate; two committed ones are.
        let mut h = clean();
        h.op(1, OpType::Fail, vec![send(1, 50, None)]);
        h.op(1, OpType::Ok, vec![send(1, 50, Some(1))]);
        h.op(3, OpType::Ok, vec![poll(&[(1, &[(1, 50)])])]);
        assert!(check(&h.ops).valid(), "{:?}", check(&h.ops).examples);
        h.op(2, OpType::Ok, vec![send(1, 50, Some(2))]);
        h.op(3, OpType::Ok, vec![poll(&[(1, &[(2, 50)])])]);
        assert!(check(&h.ops).count("duplicate") > 0);
    }

    #[test]
    fn nonmonotonic_send() {
        let mut h = H::default();
        h.op(1, OpType::Ok, vec![send(0, 1, Some(5))]);
        h.op(1, OpType::Ok, vec![send(0, 2, Some(4))]);
        h.op(2, OpType::Ok, vec![poll(&[(0, &[(4, 2), (5, 1)])])]);
        h.only("nonmonotonic-send");
    }

    #[test]
    fn g0_write_cycle() {
        let mut h = H::default();
        // T1 before T2 on key 0, T2 before T1 on key 1.
        h.op(1, OpType::Ok, vec![send(0, 1, Some(0)), send(1, 2, Some(1))]);
        h.op(2, OpType::Ok, vec![send(0, 3, Some(1)), send(1, 4, Some(0))]);
        h.op(3, OpType::Ok, vec![poll(&[(0, &[(0, 1), (1, 3)]), (1, &[(0, 4), (1, 2)])])]);
        let r = check(&h.ops);
        assert!(r.count("G0") > 0, "{:?}", r.examples);
        assert!(r.valid(), "Kafka's model allows write cycles");
        assert!(!check_with(&h.ops, Mode::Strict).valid(), "strict mode does not");
    }

    #[test]
    fn g1c_write_read_cycle() {
        let mut h = H::default();
        // T1 writes k0 then T2 writes k0 after it (T1 →ww T2); T1 read T2's write on k1 (T2 →wr T1).
        h.op(2, OpType::Ok, vec![send(0, 3, Some(1)), send(1, 4, Some(0))]);
        h.op(1, OpType::Ok, vec![send(0, 1, Some(0)), poll(&[(1, &[(0, 4)])])]);
        h.op(3, OpType::Ok, vec![poll(&[(0, &[(0, 1), (1, 3)]), (1, &[(0, 4)])])]);
        let r = check(&h.ops);
        assert!(r.count("G1c-ww") > 0 && r.count("G0") == 0 && r.count("G1c") == 0, "{:?}", r.examples);
        assert!(!check_with(&h.ops, Mode::Strict).valid());
        // Circular information flow: each transaction read the other's write.
        let mut h = H::default();
        h.op(1, OpType::Ok, vec![send(0, 1, Some(0)), poll(&[(1, &[(0, 2)])])]);
        h.op(2, OpType::Ok, vec![send(1, 2, Some(0)), poll(&[(0, &[(0, 1)])])]);
        h.op(3, OpType::Ok, vec![poll(&[(0, &[(0, 1)]), (1, &[(0, 2)])])]);
        let r = check(&h.ops);
        assert!(r.count("G1c") > 0 && !r.valid(), "{:?}", r.examples);
    }

    #[test]
    fn histories_round_trip_through_json_lines() {
        let h = clean();
        let mut buf = Vec::new();
        super::super::history::write(&h.ops, &mut buf).expect("write");
        let back = super::super::history::read(&buf[..]).expect("read");
        assert_eq!(back, h.ops);
        assert!(super::super::history::read(&b"{\"index\": 1}\n"[..]).is_err());
    }
}
