//! A replica repairs damaged data from the other replicas (issue 22, decision 0037).
//!
//! A read that meets a batch failing its CRC — or an open that finds a closed segment's index
//! naming a batch whose header no longer parses — takes the partition's log offline (decision
//! 0036). On one broker that is where it ends: an operator restores the directory. In a
//! cluster the same batch is stored, byte for byte, by every other replica (each applies the
//! same committed command with the same offsets, timestamps and leader epoch), so this replica
//! asks them for their copy and writes it over the damaged one in place
//! (`sluice_storage::Log::repair`: the copy must pass its CRC, start where the damaged batch
//! must and fit exactly).
//!
//! A coordinator shard's key/value log is repaired the same way, but whole: replicas hold the
//! same state, not the same bytes ([`KvMender`]).
//!
//! Who runs it: the group's state machine before it applies an entry (an entry is never
//! skipped: a replica that skipped one would differ from the others for good), and the
//! group's maintenance task within half a second of the damage being found. A leader that
//! cannot repair hands its leadership to another replica, so clients are served by a whole
//! copy meanwhile.

use crate::replication::types::{KvEntry, NodeId, PartitionLog};
use crate::sync::OrDie as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Each peer's answer to "your copy of the batch at this offset": its bytes, or why not.
pub type Copies = Vec<(NodeId, Result<Vec<u8>, String>)>;
/// Each other voter's format of a group's Raft log ([`Peers::formats`]).
pub type Formats = Vec<(NodeId, Result<Option<bool>, String>)>;
/// Each other voter's answer to "does your replica hold more than a birth" ([`Peers::held`]).
pub type Held = Vec<(NodeId, Result<bool, String>)>;

/// The other replicas of a partition's group, as its repair reaches them
/// (`cluster/network.rs`).
pub trait Peers: Send + Sync + 'static {
    /// Each other voter's copy of the batch holding `offset` (or why it has none).
    fn copies(&self, offset: i64) -> BoxFuture<Copies>;
    /// Ask the other voters to lead instead of this replica, one after another, until one does.
    fn hand_over(&self) -> BoxFuture<()>;
    /// Each other voter's format of the group's Raft log (`Some(true)`: the partition log
    /// itself), `None` where it has no replica yet.
    fn formats(&self) -> BoxFuture<Formats>;
    /// Each other voter's answer to whether its replica (running or on disk) holds more than a
    /// birth without entries (decision 0052); `false` where it has none.
    fn held(&self) -> BoxFuture<Held>;
}

/// Repairs one partition replica's damaged batches; one repair at a time.
pub struct Mender {
    partition: Arc<dyn PartitionLog>,
    pub peers: Arc<dyn Peers>,
    lock: tokio::sync::Mutex<()>,
}

/// Damaged batches one repair replaces at most before it reports (each is one round trip).
const BATCHES_PER_REPAIR: usize = 10_000;

impl Mender {
    pub fn new(partition: Arc<dyn PartitionLog>, peers: Arc<dyn Peers>) -> Mender {
        Mender { partition, peers, lock: tokio::sync::Mutex::new(()) }
    }

    /// Replace every damaged batch the log knows of with another replica's copy. `Ok` when
    /// none is left; `Err` says why the first that could not be replaced was not (no replica
    /// had a copy that fits, or none answered).
    pub async fn mend(&self) -> Result<(), String> {
        let _one = self.lock.lock().await;
        for _ in 0..BATCHES_PER_REPAIR {
            let p = self.partition.clone();
            let found = tokio::task::spawn_blocking(move || p.find_damage()).await.map_err(|e| e.to_string())?;
            let d = match found {
                Ok(Some(d)) => d,
                Ok(None) => return Ok(()),
                Err(e) => return Err(e.to_string()),
            };
            let mut why = Vec::new();
            let mut repaired = false;
            for (peer, copy) in self.peers.copies(d.base_offset).await {
                let result = match copy {
                    Ok(bytes) => {
                        let (p, d) = (self.partition.clone(), d.clone());
                        match tokio::task::spawn_blocking(move || p.repair(&d, &bytes, peer)).await {
                            Ok(r) => r.map_err(|e| e.to_string()),
                            Err(e) => Err(e.to_string()),
                        }
                    }
                    Err(e) => Err(e),
                };
                match result {
                    Ok(_) => {
                        repaired = true;
                        break;
                    }
                    Err(e) => why.push(format!("broker {peer}: {e}")),
                }
            }
            if !repaired {
                if why.is_empty() {
                    why.push("no other replica".into());
                }
                return Err(format!(
                    "the batch at offset {} (byte {} of {}) was not repaired: {}",
                    d.base_offset,
                    d.position,
                    d.path.display(),
                    why.join("; ")
                ));
            }
        }
        Err(format!("more than {BATCHES_PER_REPAIR} damaged batches"))
    }

    /// [`Mender::mend`], tried every second until it succeeds or `attempts` failed (the
    /// first failure logged): the last failure's reason.
    pub async fn mend_patiently(&self, name: &str, attempts: u32) -> Result<(), String> {
        let mut last = String::new();
        for attempt in 0..attempts {
            match self.mend().await {
                Ok(()) => return Ok(()),
                Err(e) => {
                    if attempt == 0 {
                        tracing::warn!(partition = name, "{e}; trying again every second");
                    }
                    last = e;
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
            }
        }
        Err(last)
    }
}

/// A coordinator shard's key/value log as its Raft state machine (`replica.rs`) uses it
/// (`coordinator.rs` implements it over the shard's log).
pub trait KvStore: Send + Sync + 'static {
    /// Append `records` durably (every replica applies every committed entry).
    fn apply(&self, records: &[KvPair], now_ms: i64) -> Result<(), String>;
    /// The log's live records — the newest value of each key, deleted keys dropped, in the
    /// order they were last written: the shard's snapshot.
    fn live(&self) -> Result<Vec<KvEntry>, String>;
    /// Make the log hold exactly `records`, durably (a snapshot installed, or another
    /// replica's copy replacing a damaged log).
    fn replace(&self, records: Vec<KvEntry>, now_ms: i64) -> Result<(), String>;
    /// Whether a read found damaged data in the log (offline until replaced).
    fn damaged(&self) -> bool;
    /// Hold the log damaged if its open cut bytes off its end (acknowledged records may be
    /// among them); why, if so.
    fn suspect_cut(&self) -> Option<String>;
}

/// A key and its value (`None`: deleted) as the log stores them (`kvlog::KvRecord`).
pub type KvPair = (bytes::Bytes, Option<bytes::Bytes>);

/// An entry's records as the log stores them (their bytes moved, not copied).
pub fn to_pairs(records: Vec<KvEntry>) -> Vec<KvPair> {
    records.into_iter().map(|r| (bytes::Bytes::from(r.key), r.value.map(bytes::Bytes::from))).collect()
}

/// A coordinator shard replica's log and the entries applied to it, read and changed together
/// (one lock): a peer repairing its damaged copy takes the live records and the last entry
/// they include from one moment, and a copy is only swapped in when it holds every entry this
/// replica applied.
///
/// A damaged log is written nothing: the entries applied meanwhile are kept here (up to
/// [`KEPT_WHILE_DAMAGED`] bytes) and written after the copy that replaces the log, so a copy
/// taken before them will do — a leader's followers lag it by a few entries under load. Past
/// that bound only a copy holding every applied entry will do.
pub struct KvGate {
    store: Arc<dyn KvStore>,
    state: std::sync::Mutex<GateState>,
}

/// Bytes of records a replica with a damaged log keeps to write after its repair.
pub const KEPT_WHILE_DAMAGED: usize = 64 << 20;

struct GateState {
    /// The index of the last entry applied (0: none); at start, the one `applied.json` records
    /// (the log may hold later ones, applied again: harmless).
    applied: u64,
    /// Entries applied while the log was damaged, not written (index, records, time).
    kept: Vec<(u64, Vec<KvPair>, i64)>,
    kept_bytes: usize,
    /// Whether `kept` holds every entry applied while the log was damaged.
    complete: bool,
}

impl KvGate {
    pub fn new(store: Arc<dyn KvStore>, applied: u64) -> KvGate {
        let state = GateState { applied, kept: Vec::new(), kept_bytes: 0, complete: true };
        KvGate { store, state: std::sync::Mutex::new(state) }
    }

    pub fn is_damaged(&self) -> bool {
        self.store.damaged()
    }

    /// Apply entry `index`'s records: written, or kept while the log is damaged. `Err` when
    /// writing failed otherwise (the group must stop here: a replica that skipped an entry
    /// would hold another state for good). Blocking.
    pub fn apply(&self, index: u64, records: Vec<KvPair>, now_ms: i64) -> Result<(), String> {
        let mut st = self.state.lock().or_die();
        if !self.store.damaged() {
            match self.store.apply(&records, now_ms) {
                Ok(()) => {}
                Err(e) if !self.store.damaged() => return Err(e),
                // the write found the damage: nothing was written
                Err(_) => st.keep(index, records, now_ms),
            }
        } else {
            st.keep(index, records, now_ms);
        }
        st.applied = index;
        Ok(())
    }

    /// Entry `index` applied without touching the log (blank, membership).
    pub fn advance(&self, index: u64) {
        self.state.lock().or_die().applied = index;
    }

    /// Install a snapshot through entry `index`: the log replaced by `records`, then `then`
    /// (recording it), all under the lock. Blocking.
    pub fn install(
        &self,
        index: u64,
        records: Vec<KvEntry>,
        then: impl FnOnce() -> Result<(), String>,
    ) -> Result<(), String> {
        let mut st = self.state.lock().or_die();
        self.store.replace(records, crate::clock::now_ms())?;
        then()?;
        st.applied = index;
        st.clear();
        Ok(())
    }

    /// This replica's live records and the last entry they include, for a peer's repair.
    /// Blocking.
    pub fn copy(&self) -> Result<(u64, Vec<KvEntry>), String> {
        let st = self.state.lock().or_die();
        if self.store.damaged() {
            return Err("its own copy is damaged".into());
        }
        Ok((st.applied, self.store.live()?))
    }

    /// Replace this replica's damaged log with a peer's live records as of its entry `index`,
    /// then write the entries kept since the damage that the copy lacks. Refused when the copy
    /// lacks an entry this replica wrote, or applied past what it kept. (Entries the copy holds
    /// that arrive here later are applied to it again: the latest value per key is the state,
    /// so that changes nothing.) Blocking.
    pub fn replace_with(&self, index: u64, records: Vec<KvEntry>) -> Result<(), String> {
        let mut st = self.state.lock().or_die();
        let needed = match st.kept.first() {
            Some((first, _, _)) if st.complete => first - 1,
            _ => st.applied,
        };
        if index < needed {
            return Err(format!("its copy holds entries up to {index}, this replica needs up to {needed}"));
        }
        self.store.replace(records, crate::clock::now_ms())?;
        for (i, recs, now) in std::mem::take(&mut st.kept) {
            if i > index {
                self.store.apply(&recs, now)?;
            }
        }
        st.clear();
        Ok(())
    }
}

impl GateState {
    fn keep(&mut self, index: u64, records: Vec<KvPair>, now_ms: i64) {
        if !self.complete {
            return;
        }
        let bytes: usize = records.iter().map(|(k, v)| k.len() + v.as_ref().map_or(0, |v| v.len())).sum();
        if self.kept_bytes + bytes > KEPT_WHILE_DAMAGED {
            self.kept.clear();
            self.kept_bytes = 0;
            self.complete = false;
            return;
        }
        self.kept.push((index, records, now_ms));
        self.kept_bytes += bytes;
    }

    fn clear(&mut self) {
        self.kept.clear();
        self.kept_bytes = 0;
        self.complete = true;
    }
}

/// Each peer's answer to "your live records of this coordinator shard": the last entry they
/// include and the records, or why not.
pub type KvCopies = Vec<(NodeId, Result<(u64, Vec<KvEntry>), String>)>;

/// The other replicas of a coordinator shard's group, as its repair reaches them
/// (`cluster/network.rs`).
pub trait ShardPeers: Send + Sync + 'static {
    /// Each other voter's live records of the shard (or why it has none).
    fn copies(&self) -> BoxFuture<KvCopies>;
    /// Ask the other voters to lead instead of this replica, one after another, until one does.
    fn hand_over(&self) -> BoxFuture<()>;
}

/// Repairs one coordinator shard replica's damaged key/value log. Replicas do not store the
/// same bytes (each compacts its log when it chooses), but they hold the same state: the
/// newest value of each key. So a damaged log is replaced whole by another replica's live
/// records, taken after an entry this replica had applied too (`KvGate`); the entries it
/// applied since are applied again, which changes nothing. One repair at a time.
pub struct KvMender {
    pub gate: Arc<KvGate>,
    pub peers: Arc<dyn ShardPeers>,
    /// `__consumer_offsets-3`, for log lines.
    name: String,
    /// The internal topic, for the repairs counter.
    topic: String,
    lock: tokio::sync::Mutex<()>,
}

impl KvMender {
    pub fn new(gate: Arc<KvGate>, peers: Arc<dyn ShardPeers>, name: String, topic: String) -> KvMender {
        KvMender { gate, peers, name, topic, lock: tokio::sync::Mutex::new(()) }
    }

    pub fn is_damaged(&self) -> bool {
        self.gate.is_damaged()
    }

    /// Replace the log, if a read found it damaged, with the first peer's copy that holds every
    /// entry applied here. `Err` says why none was taken.
    pub async fn mend(&self) -> Result<(), String> {
        let _one = self.lock.lock().await;
        if !self.is_damaged() {
            return Ok(());
        }
        let mut why = Vec::new();
        for (peer, copy) in self.peers.copies().await {
            let copy = if crate::failpoints::armed(crate::failpoints::Failpoint::KvMendRefusesCopies) {
                Err("refused (failpoint kv.mend_refuses_copies)".to_string())
            } else {
                copy
            };
            let result = match copy {
                Ok((index, records)) => {
                    let (gate, n) = (self.gate.clone(), records.len());
                    match tokio::task::spawn_blocking(move || gate.replace_with(index, records)).await {
                        Ok(r) => r.map(|()| (index, n)),
                        Err(e) => Err(e.to_string()),
                    }
                }
                Err(e) => Err(e),
            };
            match result {
                Ok((index, n)) => {
                    tracing::warn!(
                        "coordinator log {}: the damaged log was replaced by broker {peer}'s copy ({n} live records, \
                         through entry {index}); the shard is online again",
                        self.name
                    );
                    ::metrics::counter!(crate::metrics::STORAGE_REPAIRS_TOTAL, "topic" => self.topic.clone())
                        .increment(1);
                    return Ok(());
                }
                Err(e) => why.push(format!("broker {peer}: {e}")),
            }
        }
        if why.is_empty() {
            why.push("no other replica".into());
        }
        Err(format!("coordinator log {}: the damaged log was not replaced: {}", self.name, why.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;

    /// A key/value log in memory that can be marked damaged (writes then fail, as a damaged
    /// `Log` refuses them).
    #[derive(Default)]
    struct MemStore {
        log: Mutex<Vec<KvEntry>>,
        damaged: AtomicBool,
    }

    impl MemStore {
        fn state(&self) -> BTreeMap<Vec<u8>, Vec<u8>> {
            fold(&self.log.lock().unwrap())
        }
    }

    fn fold(entries: &[KvEntry]) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut m = BTreeMap::new();
        for e in entries {
            match &e.value {
                Some(v) => m.insert(e.key.clone(), v.clone()),
                None => m.remove(&e.key),
            };
        }
        m
    }

    impl KvStore for MemStore {
        fn apply(&self, records: &[KvPair], _now_ms: i64) -> Result<(), String> {
            if self.damaged() {
                return Err("damaged".into());
            }
            let entries =
                records.iter().map(|(k, v)| KvEntry { key: k.to_vec(), value: v.as_ref().map(|v| v.to_vec()) });
            self.log.lock().unwrap().extend(entries);
            Ok(())
        }
        fn live(&self) -> Result<Vec<KvEntry>, String> {
            if self.damaged() {
                return Err("damaged".into());
            }
            Ok(self.state().into_iter().map(|(key, v)| KvEntry { key, value: Some(v) }).collect())
        }
        fn replace(&self, records: Vec<KvEntry>, _now_ms: i64) -> Result<(), String> {
            *self.log.lock().unwrap() = records;
            self.damaged.store(false, Ordering::SeqCst);
            Ok(())
        }
        fn damaged(&self) -> bool {
            self.damaged.load(Ordering::SeqCst)
        }
        fn suspect_cut(&self) -> Option<String> {
            None
        }
    }

    /// Entry `i`: key `k{i % 7}` set to `v{i}`, and every fifth deletes `k{(i + 3) % 7}`.
    fn entry(i: u64) -> Vec<KvEntry> {
        let mut out =
            vec![KvEntry { key: format!("k{}", i % 7).into_bytes(), value: Some(format!("v{i}").into_bytes()) }];
        if i.is_multiple_of(5) {
            out.push(KvEntry { key: format!("k{}", (i + 3) % 7).into_bytes(), value: None });
        }
        out
    }

    /// A peer that applied entries 1..=n.
    fn peer(n: u64) -> (u64, Vec<KvEntry>) {
        let p = Arc::new(MemStore::default());
        let g = KvGate::new(p.clone(), 0);
        for i in 1..=n {
            g.apply(i, to_pairs(entry(i)), 0).unwrap();
        }
        g.copy().unwrap()
    }

    /// For every point of damage, every point the repair runs at and every copy a peer may
    /// offer (older or newer than this replica): once every entry is applied, the repaired
    /// log holds the state of all of them — or the copy was refused, because it lacks an entry
    /// this replica wrote before the damage.
    #[test]
    fn a_repaired_log_holds_every_applied_entry_or_the_copy_is_refused() {
        let total = 30;
        let whole = fold(&(1..=total).flat_map(entry).collect::<Vec<_>>());
        for damaged_after in 0..total {
            for repair_at in damaged_after..=total {
                for copy_at in 0..=total {
                    let store = Arc::new(MemStore::default());
                    let gate = KvGate::new(store.clone(), 0);
                    for i in 1..=repair_at {
                        if i == damaged_after + 1 {
                            store.damaged.store(true, Ordering::SeqCst);
                        }
                        gate.apply(i, to_pairs(entry(i)), 0).unwrap();
                    }
                    if repair_at == damaged_after {
                        store.damaged.store(true, Ordering::SeqCst);
                    }
                    assert!(gate.copy().is_err(), "a damaged replica offers no copy");
                    let (index, records) = peer(copy_at);
                    let case = format!("damage after {damaged_after}, repair at {repair_at}, copy of {copy_at}");
                    match gate.replace_with(index, records) {
                        Ok(()) => {
                            assert!(copy_at >= damaged_after, "taken: {case}");
                            // the rest arrive (openraft applies each entry once, in order)
                            for i in repair_at + 1..=total {
                                gate.apply(i, to_pairs(entry(i)), 0).unwrap();
                            }
                            assert_eq!(store.state(), whole, "{case}");
                        }
                        Err(_) => assert!(copy_at < damaged_after, "refused: {case}"),
                    }
                }
            }
        }
    }

    /// Past [`KEPT_WHILE_DAMAGED`] bytes nothing is kept, and only a copy holding every applied
    /// entry is taken.
    #[test]
    fn past_the_bound_only_a_copy_of_every_applied_entry_will_do() {
        let store = Arc::new(MemStore::default());
        let gate = KvGate::new(store.clone(), 0);
        gate.apply(1, to_pairs(entry(1)), 0).unwrap();
        store.damaged.store(true, Ordering::SeqCst);
        let big = vec![KvEntry { key: b"big".to_vec(), value: Some(vec![0; KEPT_WHILE_DAMAGED]) }];
        gate.apply(2, to_pairs(big.clone()), 0).unwrap();
        gate.apply(3, to_pairs(entry(3)), 0).unwrap();
        assert!(gate.replace_with(2, vec![]).is_err(), "entry 3 would be lost");
        let (index, mut records) = peer(3);
        assert_eq!(index, 3);
        records.push(big[0].clone());
        gate.replace_with(index, records).unwrap();
        assert!(!store.damaged());
        assert_eq!(store.state().len(), 4, "k1, k2, k3 and big");
    }
}
