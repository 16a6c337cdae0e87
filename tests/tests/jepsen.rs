//! The Jepsen-style harness in CI (issue 9): a quick profile of several seeds with every fault
//! (broker kill -9 and SIGSTOP, connection cuts, blackholes, delays, client kill -9 and
//! SIGSTOP, zombies; on three brokers also network partitions between them), over the transactional, idempotent and consume-transform-produce
//! workloads, each run checked to zero anomalies;
//! and proof that the harness finds real bugs — against a deliberately broken broker that
//! ignores the LSO for read_committed, the checker must flag precommitted / intermediate reads.
//!
//! `JEPSEN_PROFILE=long cargo test -p sluice-tests --test jepsen` runs the long profile
//! (2-minute runs, more seeds).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

fn long() -> bool {
    std::env::var("JEPSEN_PROFILE").is_ok_and(|p| p == "long")
}

/// Run the harness; returns (exit code, stdout).
fn jepsen(args: &[&str]) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("history.jsonl");
    let out = Command::new(sluice_tests::jepsen_bin())
        .arg("run")
        .args(args)
        .arg("--history")
        .arg(&history)
        .env("TEST_SLUICE_BIN", sluice_tests::sluice_bin())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    // The history re-checks to the same verdict with `jepsen check`.
    let check = Command::new(sluice_tests::jepsen_bin()).arg("check").arg(&history).output().unwrap();
    assert_eq!(check.status.code(), out.status.code(), "jepsen check agrees with the run");
    (out.status.code().unwrap_or(-1), stdout)
}

fn count(stdout: &str, anomaly: &str) -> usize {
    stdout
        .lines()
        .find_map(|l| {
            let mut it = l.split_whitespace();
            (it.next() == Some(anomaly)).then(|| it.next().and_then(|n| n.parse().ok())).flatten()
        })
        .unwrap_or(0)
}

#[test]
fn transactions_under_faults_show_no_anomaly() {
    let (seeds, secs) = if long() { (vec!["11", "12", "13", "14", "15"], "120") } else { (vec!["1", "2"], "12") };
    for seed in seeds {
        // seed 2 (and every long run) with the bad producer alongside: its malformed and
        // out-of-spec batches are all refused and change nothing for the others
        let bad = seed != "1";
        let mut args = vec!["--workload", "txn", "--seed", seed, "--time-limit", secs, "--fault-interval", "2"];
        if bad {
            args.push("--bad-producer");
        }
        let (code, out) = jepsen(&args);
        assert_eq!(code, 0, "seed {seed}: anomalies or no progress:\n{out}");
        assert!(out.contains("faults injected: ") && !out.contains("faults injected: 0"), "faults were injected");
        if bad {
            assert!(out.contains(" 0 accepted"), "the bad producer ran and nothing of it was accepted:\n{out}");
        }
    }
}

#[test]
fn idempotent_producers_under_faults_show_no_anomaly() {
    let (seeds, secs) = if long() { (vec!["21", "22", "23"], "120") } else { (vec!["3"], "10") };
    for seed in seeds {
        let (code, out) =
            jepsen(&["--workload", "idempotent", "--seed", seed, "--time-limit", secs, "--fault-interval", "2"]);
        assert_eq!(code, 0, "seed {seed}: anomalies or no progress:\n{out}");
    }
}

#[test]
fn consume_transform_produce_chain_under_faults_is_exactly_once() {
    let (seeds, secs) = if long() { (vec!["31", "32", "33"], "120") } else { (vec!["6"], "12") };
    for seed in seeds {
        let (code, out) = jepsen(&[
            "--workload",
            "chain",
            "--workers",
            "4",
            "--seed",
            seed,
            "--time-limit",
            secs,
            "--fault-interval",
            "2",
        ]);
        assert_eq!(code, 0, "seed {seed}: anomalies or no progress:\n{out}");
        assert_eq!(count(&out, "double-consumption"), 0);
    }
}

#[test]
fn zombies_are_fenced_and_write_nothing_visible() {
    let secs = if long() { "120" } else { "10" };
    let (code, out) = jepsen(&["--workload", "zombie", "--seed", "7", "--time-limit", secs, "--fault-interval", "2"]);
    assert_eq!(code, 0, "anomalies or no progress:\n{out}");
    assert!(out.contains("after zombie"), "zombies were staged:\n{out}");
}

#[test]
fn the_checker_catches_a_broker_that_ignores_the_lso() {
    let (code, out) = jepsen(&[
        "--workload",
        "txn",
        "--seed",
        "4",
        "--time-limit",
        "8",
        "--nemesis",
        "none",
        "--broker-arg=--testing-failpoints",
        "--broker-arg=fetch.ignore_lso",
    ]);
    assert_eq!(code, 1, "the broken broker must fail the check:\n{out}");
    assert!(
        count(&out, "precommitted-read") + count(&out, "G1b") + count(&out, "G1a") > 0,
        "uncommitted reads are reported:\n{out}"
    );
}

/// Three brokers in cluster mode (replicated partitions and coordinators; markers and KIP-890
/// verification between brokers), faults on a random broker each time — including network
/// partitions between the brokers (one cut off from the other two through the Raft link
/// proxies): transactional and consume-transform-produce workloads show no anomaly.
#[test]
fn a_three_broker_cluster_under_faults_shows_no_anomaly() {
    // every fault, and a run where network partitions between the brokers (one broker cut off
    // from the other two, clients still reaching it) are the main fault
    const ALL: &str = "kill,pause,cut,blackhole,delay,client-kill,client-pause,partition";
    // (the seeded schedule picks faults by position: with seed 9 this order starts with two
    // partitions, well inside the 15 s of the quick profile)
    const SPLIT: &str = "pause,kill,partition";
    let (runs, secs): (Vec<(&str, &str, &str)>, &str) = if long() {
        (
            vec![
                ("txn", "31", ALL),
                ("txn", "32", SPLIT),
                ("chain", "33", ALL),
                ("chain", "35", SPLIT),
                ("idempotent", "34", ALL),
            ],
            "120",
        )
    } else {
        (vec![("txn", "5", ALL), ("chain", "7", ALL), ("txn", "9", SPLIT)], "15")
    };
    for (workload, seed, nemesis) in runs {
        let mut args = vec![
            "--nodes",
            "3",
            "--workload",
            workload,
            "--seed",
            seed,
            "--time-limit",
            secs,
            "--fault-interval",
            "2",
            "--nemesis",
            nemesis,
        ];
        // the transactional runs with every fault also carry the bad producer
        if workload == "txn" && nemesis == ALL {
            args.push("--bad-producer");
        }
        let (code, out) = jepsen(&args);
        assert_eq!(code, 0, "{workload} seed {seed}: anomalies or no progress:\n{out}");
        assert!(!out.contains("faults injected: 0"), "faults were injected");
        if nemesis == SPLIT {
            assert!(out.contains("after partition:"), "brokers were partitioned from each other:\n{out}");
        }
    }
}

/// Power cuts (issue 22): the broker's data directory is a `lossyfs` mount that forgets every
/// write not fsynced when the nemesis cuts the power (all of it, a seeded prefix, or a prefix
/// with a torn last page), and the broker restarts on what was synced. A single broker under
/// the transactional and idempotent workloads, and one broker at a time of three (in the long
/// profile with kill -9 and SIGSTOP of others between): no anomaly.
#[test]
fn power_cuts_lose_nothing_acknowledged() {
    if sluice_tests::lossyfs::skip_without_fuse("jepsen::power_cuts_lose_nothing_acknowledged") {
        return;
    }
    let runs: Vec<(&str, &str, &str, &str)> = if long() {
        vec![
            ("1", "txn", "41", "120"),
            ("1", "txn", "42", "120"),
            ("1", "idempotent", "43", "120"),
            ("1", "chain", "44", "120"),
            ("3", "txn", "45", "120"),
            ("3", "idempotent", "46", "120"),
        ]
    } else {
        vec![("1", "txn", "1", "12"), ("1", "idempotent", "3", "10"), ("3", "txn", "5", "20")]
    };
    // (the seeded schedule picks faults by position and the quick runs see three or four:
    // mixed with kill -9 they might not include a power cut, so the quick runs cut only)
    for (_, out) in fault_runs(&runs, "power-cut") {
        assert!(out.contains("after powercut:"), "the power was cut:\n{out}");
    }
}

/// Each of `runs` (brokers, workload, seed, seconds) with `fault` (on three brokers in the long
/// profile, with kill -9 and SIGSTOP too; one or two seconds between faults): each must end
/// with no anomaly. The run's name and output, in order.
fn fault_runs(runs: &[(&str, &str, &str, &str)], fault: &str) -> Vec<(String, String)> {
    let mut outs = Vec::new();
    for &(nodes, workload, seed, secs) in runs {
        let nemesis = if nodes == "3" && long() { format!("{fault},kill,pause") } else { fault.to_string() };
        let (code, out) = jepsen(&[
            "--nodes",
            nodes,
            "--workload",
            workload,
            "--seed",
            seed,
            "--time-limit",
            secs,
            "--fault-interval",
            if nodes == "1" { "2" } else { "3" },
            "--nemesis",
            &nemesis,
        ]);
        let name = format!("{nodes} broker(s), {workload} seed {seed}");
        assert_eq!(code, 0, "{name}: anomalies or no progress:\n{out}");
        outs.push((name, out));
    }
    outs
}

/// Issue 22, the `corrupt` fault: a bit flipped at rest in a stored batch of one broker's copy
/// of a partition (half the time among the newest batches, which readers have yet to reach).
/// Never served: on one broker the partition goes offline until the heal restores the bit and
/// restarts it; on three the damaged replica repairs the batch from another's copy while the
/// others serve (decision 0037). No anomaly, and the damage is met by reads at least once.
#[test]
fn damaged_data_is_never_served_and_a_replica_repairs_it() {
    let runs: Vec<(&str, &str, &str, &str)> = if long() {
        vec![
            ("1", "txn", "51", "120"),
            ("1", "idempotent", "52", "120"),
            ("3", "txn", "53", "120"),
            ("3", "idempotent", "54", "120"),
            ("3", "chain", "55", "120"),
        ]
    } else {
        vec![("1", "txn", "9", "12"), ("3", "txn", "7", "20")]
    };
    let mut found = 0usize;
    for (name, out) in fault_runs(&runs, "corrupt") {
        let line = out.lines().find(|l| l.contains("damaged batches found by reads")).unwrap_or_default();
        eprintln!("{name}: {}", line.trim());
        let counts: Vec<usize> = line.split_whitespace().filter_map(|w| w.trim_end_matches(',').parse().ok()).collect();
        found += counts.first().copied().unwrap_or(0);
        if name.starts_with('3') {
            // (a repair of damage found at a restart counts too: at least as many)
            assert!(counts.get(1) >= counts.first(), "every damaged batch a read found was repaired:\n{out}");
        }
    }
    assert!(found >= 1, "no read met the damage: the runs proved nothing");
}

/// The power-cut fault can fail: a broker that acknowledges before its fsync (a test-only
/// failpoint) loses acknowledged records to the cuts, and the checker says so.
#[test]
fn the_checker_catches_a_broker_that_acknowledges_before_fsync() {
    if sluice_tests::lossyfs::skip_without_fuse("jepsen::the_checker_catches_a_broker_that_acknowledges_before_fsync") {
        return;
    }
    let (code, out) = jepsen(&[
        "--workload",
        "txn",
        "--seed",
        "1",
        "--time-limit",
        "12",
        "--fault-interval",
        "2",
        "--nemesis",
        "power-cut",
        "--broker-arg=--testing-failpoints",
        "--broker-arg=produce.ack_before_fsync",
    ]);
    assert_eq!(code, 1, "the broker that acknowledges before fsync must fail the check:\n{out}");
    assert!(
        count(&out, "lost-write") + count(&out, "inconsistent-offsets") + count(&out, "unseen") > 0,
        "lost acknowledged records are reported:\n{out}"
    );
}
