//! The broker crate's layers point one way (issue 18 item 8; `../shared/BROKER-LAYOUT.md`):
//! network → request pipeline → handlers → errors → coordinators and security → partition,
//! topics, routing, metadata, inter-broker calls → replication → settings and metrics (and the
//! storage and protocol crates below them). This test reads every `crate::…` (and, inside
//! `cluster/`, `super::…`) path in `broker/src` outside test modules and fails when a module
//! names one of a higher layer — unless that import is in `KNOWN_UPWARD`, the imports that
//! predate the test. That list only shrinks: an entry the code no longer has fails the test
//! too, so whoever removes an upward import also removes its entry. A new upward import is a
//! design change: move the code to the layer it belongs to instead.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each module's layer: higher layers may use lower ones (and their own).
const LAYERS: &[(&str, u8)] = &[
    // network and the broker's runtime
    ("main", 8),
    ("broker", 8),
    ("lib", 8),
    ("server", 8),
    ("connection", 8),
    ("background", 8),
    // the request pipeline
    ("pipeline", 7),
    // one file per API, and the handles they are given
    ("handlers", 6),
    ("services", 6),
    // the error edge
    ("error_map", 5),
    // coordinators and security
    ("group", 4),
    ("txn", 4),
    ("coordinator", 4),
    ("security", 4),
    // partition, topics, routing, metadata, inter-broker calls
    ("partition", 3),
    ("cleaner", 3),
    ("scrubber", 3),
    ("partition_handle", 3),
    ("topics", 3),
    ("kvlog", 3),
    ("producer_ids", 3),
    ("routing", 3),
    ("interbroker", 3),
    ("cluster/mod", 3),
    ("cluster/store", 3),
    ("cluster/reconcile", 3),
    ("cluster/reassign", 3),
    ("cluster/network", 3),
    ("cluster/failover", 3),
    ("cluster/rpc_health", 3),
    // replication (openraft glue)
    ("cluster/replica", 2),
    ("cluster/mend", 2),
    ("cluster/convert", 2),
    // settings and metrics: leaves
    // the replication layer's own types
    ("replication", 2),
    ("config", 1),
    // pure kernels (`KERNELS`)
    ("partition/producer_state", 1),
    ("txn/machine", 1),
    ("group/machine", 1),
    ("group/consumer", 1),
    ("txn/error", 1),
    ("group/error", 1),
    ("security/model", 1),
    ("topic_config", 1),
    ("dynamic_config", 1),
    ("metrics", 1),
    ("clock", 1),
    ("sync", 1),
    ("failpoints", 1),
];

/// Upward imports that predate this test (module → module of a higher layer). Remove an entry
/// when its import goes; never add one.
const KNOWN_UPWARD: &[(&str, &str)] = &[];

const CLUSTER_MODULES: &[&str] = &["convert", "mend", "network", "reassign", "reconcile", "replica", "store"];

/// Pure kernels inside a module's directory, each a unit of its own (they import nothing of the
/// crate, so they sit at the bottom, where the replication layer's types may name them).
const KERNELS: &[(&str, &str)] = &[
    ("partition", "producer_state"),
    ("txn", "machine"),
    ("txn", "error"),
    ("group", "machine"),
    ("group", "consumer"),
    ("group", "error"),
    ("security", "model"),
];

/// The layering unit a source file belongs to: its top-level module, or `cluster/<file>`.
fn unit_of(rel: &Path) -> String {
    let parts: Vec<String> = rel.with_extension("").iter().map(|p| p.to_string_lossy().into_owned()).collect();
    match parts.as_slice() {
        [c, sub, ..] if c == "cluster" && CLUSTER_MODULES.contains(&sub.as_str()) => format!("cluster/{sub}"),
        [c, ..] if c == "cluster" => "cluster/mod".to_string(),
        [d, sub, ..] if KERNELS.contains(&(d.as_str(), sub.as_str())) => format!("{d}/{sub}"),
        [first, ..] => first.clone(),
        [] => String::new(),
    }
}

/// The unit a path names: `crate::cluster::replica::…` → `cluster/replica`, `crate::state::…` →
/// `state`; inside `cluster/`, `super::replica` → `cluster/replica`.
fn unit_named(first: &str, second: Option<&str>) -> String {
    if first == "cluster" {
        match second {
            Some(s) if CLUSTER_MODULES.contains(&s) => format!("cluster/{s}"),
            _ => "cluster/mod".to_string(),
        }
    } else {
        match second {
            Some(s) if KERNELS.contains(&(first, s)) => format!("{first}/{s}"),
            _ => first.to_string(),
        }
    }
}

/// The production code of a source file: everything before its test module (`#[cfg(test)]` on
/// a `mod`, at the end of a file here), without the other `#[cfg(test)]` items (a test-only
/// `use`, fn or field: the item after the attribute, to the end of its braces or its `;`).
fn production_part(src: &str) -> String {
    let mut out = String::new();
    let mut lines = src.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() != "#[cfg(test)]" {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let next = lines.peek().map(|l| l.trim_start()).unwrap_or_default();
        if next.starts_with("mod ") || next.starts_with("pub mod ") {
            break;
        }
        // skip the item: its attributes and doc lines, then up to where its braces close or
        // its statement ends
        let mut depth = 0i32;
        for item in lines.by_ref() {
            let t = item.trim();
            depth += t.matches('{').count() as i32 - t.matches('}').count() as i32;
            let attribute = t.starts_with("#[") || t.starts_with("///") || t.starts_with("//");
            if !attribute && depth <= 0 && (t.ends_with(';') || t.ends_with('}') || t.ends_with("},")) {
                break;
            }
            if !attribute && depth <= 0 && t.ends_with(',') {
                break; // a field
            }
        }
    }
    out
}

/// Identifier characters of a path segment.
fn segment(s: &str) -> &str {
    let end = s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(s.len());
    &s[..end]
}

/// Every unit each unit names (itself excluded).
fn imports(src_dir: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut stack = vec![src_dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read broker/src") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src_dir).expect("under src");
            let unit = unit_of(rel);
            let text = std::fs::read_to_string(&path).expect("read source");
            let code = production_part(&text);
            let code = code.as_str();
            let mut named = BTreeSet::new();
            let mut prefixes = vec!["crate::"];
            if unit.starts_with("cluster/") && unit != "cluster/mod" {
                prefixes.push("super::");
            }
            for prefix in prefixes {
                for (i, _) in code.match_indices(prefix) {
                    let rest = &code[i + prefix.len()..];
                    let first = segment(rest);
                    if first.is_empty() {
                        continue;
                    }
                    let target = if prefix == "super::" {
                        // a cluster child naming its sibling, or an item of cluster/mod
                        unit_named("cluster", Some(first))
                    } else if first.starts_with(|c: char| c.is_ascii_uppercase()) {
                        continue; // an item of the crate root (lib.rs)
                    } else {
                        unit_named(first, rest[first.len()..].strip_prefix("::").map(segment))
                    };
                    named.insert(target);
                }
            }
            named.remove(&unit);
            out.entry(unit).or_default().extend(named);
        }
    }
    out
}

#[test]
fn modules_import_only_their_layer_and_below() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let layer: BTreeMap<&str, u8> = LAYERS.iter().copied().collect();
    let known: BTreeSet<(String, String)> = KNOWN_UPWARD.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
    let edges = imports(&src);
    let mut unplaced = Vec::new();
    let mut upward = BTreeSet::new();
    for (from, tos) in &edges {
        let Some(&lf) = layer.get(from.as_str()) else {
            unplaced.push(from.clone());
            continue;
        };
        for to in tos {
            let Some(&lt) = layer.get(to.as_str()) else {
                unplaced.push(to.clone());
                continue;
            };
            if lt > lf {
                upward.insert((from.clone(), to.clone()));
            }
        }
    }
    unplaced.sort();
    unplaced.dedup();
    assert!(unplaced.is_empty(), "modules without a layer (add them to LAYERS): {unplaced:?}");
    let new: Vec<_> = upward.difference(&known).collect();
    assert!(new.is_empty(), "modules importing a higher layer (move the code down, or the import up): {new:?}");
    let gone: Vec<_> = known.difference(&upward).collect();
    assert!(gone.is_empty(), "upward imports no longer in the code: remove them from KNOWN_UPWARD: {gone:?}");
}

/// The reader itself: a path of a higher layer is found and flagged.
#[test]
fn the_reader_finds_an_upward_import() {
    let dir = tempfile_dir();
    std::fs::create_dir_all(dir.join("cluster")).expect("mkdir");
    std::fs::write(dir.join("config.rs"), "use crate::topics::TopicRegistry;\n#[cfg(test)]\nuse crate::txn::X;\n")
        .expect("write");
    std::fs::write(dir.join("cluster/replica.rs"), "use super::ClusterNode;\nuse super::network::PartNetwork;\n")
        .expect("write");
    let edges = imports(&dir);
    assert_eq!(edges["config"], BTreeSet::from(["topics".to_string()]));
    assert_eq!(edges["cluster/replica"], BTreeSet::from(["cluster/mod".to_string(), "cluster/network".to_string()]));
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("sluice-layering-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Groups of units that import each other, directly or through others (strongly connected
/// components of the import graph with more than one unit), each sorted, the groups sorted.
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(u) = todo.pop() {
            for v in edges.get(&u).into_iter().flatten() {
                if seen.insert(v.clone()) {
                    todo.push(v.clone());
                }
            }
        }
        seen
    };
    let reachable: BTreeMap<&String, BTreeSet<String>> = edges.keys().map(|u| (u, reach(u))).collect();
    let mut groups: BTreeSet<Vec<String>> = BTreeSet::new();
    for (u, r) in &reachable {
        let group: Vec<String> = std::iter::once((*u).clone())
            .chain(r.iter().filter(|v| *v != *u && reachable.get(v).is_some_and(|rv| rv.contains(*u))).cloned())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if group.len() > 1 {
            groups.insert(group);
        }
    }
    groups.into_iter().collect()
}

/// Import cycles between units (issue 18 item 2: none inside `broker/src`): the ones that
/// predate this test. The list must match the code exactly, so it can only shrink: whoever
/// breaks a cycle (or takes a unit out of one) updates it; a new cycle, or a unit joining one,
/// fails the test.
const KNOWN_CYCLES: &[&[&str]] = &[];

#[test]
fn no_new_import_cycles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = cycles(&imports(&src));
    let known: Vec<Vec<String>> =
        KNOWN_CYCLES.iter().map(|c| c.iter().map(|s| s.to_string()).collect::<Vec<_>>()).collect();
    assert_eq!(found, known, "import cycles (units that import each other) differ from KNOWN_CYCLES");
}

/// The cycle finder itself: two units naming each other through a third form one cycle; a unit
/// only imported is in none.
#[test]
fn the_cycle_finder_finds_a_cycle_through_a_third_unit() {
    // not tempfile_dir(): that removes the directory the reader test may be using right now
    let dir = std::env::temp_dir().join(format!("sluice-layering-cycles-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("topics.rs"), "use crate::txn::TxnCoordinator;\n").expect("write");
    std::fs::write(dir.join("txn.rs"), "use crate::group::X;\nuse crate::metrics;\n").expect("write");
    std::fs::write(dir.join("group.rs"), "fn f(s: &crate::topics::TopicRegistry) {}\n").expect("write");
    std::fs::write(dir.join("metrics.rs"), "pub fn m() {}\n").expect("write");
    let found = cycles(&imports(&dir));
    assert_eq!(found, vec![vec!["group".to_string(), "topics".to_string(), "txn".to_string()]]);
}

/// The places allowed to block a thread or re-enter the runtime (`block_in_place`,
/// `block_on(`, `thread::sleep`), each with how many and why: none is on a request path
/// (issue 18 item 6; decision 0019). The list only shrinks, as `KNOWN_UPWARD` does.
const KNOWN_BLOCKING: &[(&str, usize, &str)] = &[
    ("broker.rs", 1, "opening the services at start (recovery reads every log)"),
    ("main.rs", 1, "the process's runtime entry"),
    ("server.rs", 1, "closing the logs at shutdown"),
    ("coordinator.rs", 1, "loading a coordinator shard on leadership, in its watch task"),
    ("cluster/replica.rs", 2, "the replica state machines' apply (openraft's task)"),
    (
        "cluster/reconcile.rs",
        4,
        "the reconciler (a background task) starting and stopping replicas, and the replica.delay_start failpoint's pause",
    ),
];

/// How often each production file under `dir` blocks (see [`KNOWN_BLOCKING`]), comments and
/// test modules aside.
fn blocking_sites(dir: &Path) -> BTreeMap<String, usize> {
    sites(dir, &["block_in_place", "block_on(", "thread::sleep"])
}

/// How often each production file under `dir` names one of `patterns`, comments and test
/// modules aside.
fn sites(dir: &Path, patterns: &[&str]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read src dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let src = std::fs::read_to_string(&path).expect("read source");
            let n: usize = production_part(&src)
                .lines()
                .map(str::trim)
                .filter(|l| !l.starts_with("//"))
                .map(|l| patterns.iter().map(|p| l.matches(p).count()).sum::<usize>())
                .sum();
            if n > 0 {
                let rel = path.strip_prefix(dir).expect("under src").to_string_lossy().replace('\\', "/");
                out.insert(rel, n);
            }
        }
    }
    out
}

#[test]
fn nothing_blocks_on_a_request_path() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = blocking_sites(&src);
    let known: BTreeMap<String, usize> = KNOWN_BLOCKING.iter().map(|(f, n, _)| (f.to_string(), *n)).collect();
    let new: Vec<_> = found.iter().filter(|(f, n)| known.get(*f).is_none_or(|k| *n > k)).collect();
    assert!(
        new.is_empty(),
        "blocking calls (block_in_place, block_on, thread::sleep) where none is allowed: await instead, or run \
         disk work with spawn_blocking: {new:?}"
    );
    let gone: Vec<_> = known.iter().filter(|(f, n)| found.get(*f).is_none_or(|k| k < *n)).collect();
    assert!(gone.is_empty(), "fewer blocking calls than KNOWN_BLOCKING lists: shrink the list: {gone:?}");
}

/// The counter itself: a blocking call is counted, a comment or a test module is not.
#[test]
fn the_counter_finds_a_blocking_call() {
    // not tempfile_dir(): that removes the directory the reader test may be using right now
    let dir = std::env::temp_dir().join(format!("sluice-layering-blocking-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("handlers")).expect("mkdir");
    std::fs::write(
        dir.join("handlers/x.rs"),
        "fn f() {\n    // block_in_place is not here\n    tokio::task::block_in_place(|| h.block_on(g()));\n}\n\
         #[cfg(test)]\nfn t() {\n    std::thread::sleep(d);\n}\nfn u() {\n    std::thread::sleep(d);\n}\n\
         #[cfg(test)]\nmod tests {\n    fn v() { std::thread::sleep(d); }\n}\n",
    )
    .expect("write");
    // f's two and u's one: not the test-only fn t, nor the test module
    assert_eq!(blocking_sites(&dir), BTreeMap::from([("handlers/x.rs".to_string(), 3)]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Below the request pipeline and the handlers, nothing makes a Kafka error code: coordinators,
/// partitions, topics and replication answer with typed errors (`GroupError`, `TxnError`,
/// `Refusal`, `StorageError`, `WriteError`, ...) and `error_map.rs` turns them into codes
/// (issue 18 item 5). These are the edges that speak Kafka codes themselves, with why.
const KNOWN_KAFKA_ERRORS: &[(&str, &str)] = &[
    ("error_map.rs", "the one place internal errors become Kafka codes"),
    ("connection.rs", "a request header the pipeline cannot decode (UNSUPPORTED_VERSION)"),
    ("interbroker.rs", "reads the codes in peer brokers' answers"),
    ("security/sasl.rs", "the SASL exchange, answered by the connection's session"),
];

#[test]
fn kafka_error_codes_are_made_at_the_edge() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found: BTreeSet<String> = sites(&src, &["ResponseError"])
        .into_keys()
        .filter(|f| !f.starts_with("handlers/") && !f.starts_with("pipeline/"))
        .collect();
    let known: BTreeSet<String> = KNOWN_KAFKA_ERRORS.iter().map(|(f, _)| f.to_string()).collect();
    assert_eq!(
        found, known,
        "Kafka error codes (ResponseError) below the handlers differ from KNOWN_KAFKA_ERRORS: return a typed error \
         and map it in error_map.rs"
    );
}

/// Handlers, their authorization rules and their routing rules receive the handles they use (the
/// topic registry, a coordinator, security, the config, the `Router`), never the whole
/// `Services` (issue 18 item 1): what a handler can reach is in its signature.
#[test]
fn handlers_receive_narrow_handles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found: Vec<String> = sites(&src, &["Services"]).into_keys().filter(|f| f.starts_with("handlers/")).collect();
    assert!(found.is_empty(), "handler files naming Services (give them the handles they use instead): {found:?}");
}
