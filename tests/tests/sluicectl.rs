//! `sluicectl` against a real broker: the load generator reports what it did, and `log dump`
//! decodes segments and reports corruption with a non-zero exit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sluice_tests::{sluicectl_bin, Broker};
use std::process::Command;

fn ctl(b: &Broker, args: &[&str]) -> serde_json::Value {
    let out = Command::new(sluicectl_bin())
        .args(["--bootstrap-server", &b.bootstrap(), "--output", "json"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "sluicectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn perf_produce_then_consume_then_dump() {
    let mut b = Broker::start();
    let p = ctl(
        &b,
        &["perf", "produce", "--topic", "perf", "--partitions", "3", "--num-records", "30000", "--record-size", "200"],
    );
    let produced = p["records"].as_u64().unwrap();
    assert!(produced >= 30000, "{p}");
    assert!(p["latency_ms_p50"].as_f64().unwrap() > 0.0);
    let c = ctl(&b, &["perf", "consume", "--topic", "perf", "--num-records", &produced.to_string()]);
    assert_eq!(c["records"].as_u64().unwrap(), produced, "{c}");

    assert_eq!(b.stop(), Some(0));
    let seg = b.data_dir.join("perf-0").join("00000000000000000000.log");
    let out = Command::new(sluicectl_bin()).args(["log", "dump"]).arg(&seg).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("all valid") && text.contains("offsets 0..="), "{text}");

    // a torn copy: exit 1, and the message says where the corruption starts
    let torn = b.data_dir.join("torn.log");
    let bytes = std::fs::read(&seg).unwrap();
    std::fs::write(&torn, &bytes[..bytes.len() - 10]).unwrap();
    let out = Command::new(sluicectl_bin()).args(["log", "dump"]).arg(&torn).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("corruption at byte"));
    // bad usage is exit 2
    let out = Command::new(sluicectl_bin()).args(["log", "frobnicate"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}
