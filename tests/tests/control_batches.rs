//! Decision 0045's gate, first part: clients read across control batches of types they do not
//! know. One log per replica would keep Raft's own entries in the partition log as control
//! batches (KRaft's LEADER_CHANGE, type 2, for a new leader's blank entry; a Sluice type for a
//! membership), taking offsets that consumers skip — no offset translation. That holds only if
//! every client skips such batches and reads on across the gap, and if the broker itself (its
//! producer state, its reads, its recovery) takes them in its stride. Here: librdkafka
//! (read_committed and read_uncommitted), Sluice's Rust consumer and kafka-python (from the
//! compatibility suite's venv, which the run-all script makes before the cargo tests). The Java
//! client and franz-go are the gate's second part, not written yet.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use sluice_client::{ClientConfig, Consumer, Producer, ProducerRecord};
use sluice_protocol::batch::{BatchBuilder, NewRecord};
use sluice_protocol::raft_control::RaftControl;
use sluice_tests::Broker;
use std::time::{Duration, Instant};

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// Raft's own entries as one log per replica will keep them (`sluice_protocol::raft_control`):
/// a new leader's LEADER_CHANGE (KRaft's type 2) and a membership (Sluice's type 0x5100).
fn raft_entries() -> [Vec<u8>; 2] {
    let entries = [
        RaftControl::LeaderChange { leader: 1, voters: vec![1, 2, 3] },
        RaftControl::Membership(Bytes::from_static(b"voters 1,2,3")),
    ];
    entries.map(|e| e.build(0, now_ms()).unwrap().to_vec())
}

fn records(values: &[&str]) -> Vec<u8> {
    let recs: Vec<NewRecord> = values
        .iter()
        .map(|v| NewRecord { timestamp: now_ms(), value: Some(Bytes::from(v.to_string())), ..Default::default() })
        .collect();
    BatchBuilder::default().build(&recs).unwrap().to_vec()
}

async fn produce(b: &Broker, values: &[&str]) {
    let p = Producer::new(&ClientConfig::new().set("bootstrap.servers", b.bootstrap())).await.unwrap();
    let mut acks = Vec::new();
    for v in values {
        acks.push(p.send(ProducerRecord::new("gate", v.to_string()).partition(0)).await.unwrap());
    }
    for a in acks {
        a.await.unwrap();
    }
    p.close().await.unwrap();
}

/// librdkafka reads partition 0 of `gate` from the start: (offset, value) until `want` arrived,
/// then half a second more.
fn rdkafka_read(bootstrap: &str, read_committed: bool, want: usize) -> Vec<(i64, String)> {
    let c: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "gate-reader")
        .set("enable.auto.commit", "false")
        .set("isolation.level", if read_committed { "read_committed" } else { "read_uncommitted" })
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset("gate", 0, Offset::Beginning).unwrap();
    c.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut extra: Option<Instant> = None;
    while Instant::now() < deadline && extra.is_none_or(|t| Instant::now() < t) {
        if let Some(m) = c.poll(Duration::from_millis(100)) {
            let m = m.unwrap();
            out.push((m.offset(), String::from_utf8_lossy(m.payload().unwrap_or(b"")).to_string()));
        }
        if out.len() >= want && extra.is_none() {
            extra = Some(Instant::now() + Duration::from_millis(500));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_read_across_control_batches_of_types_they_do_not_know() {
    let mut b = Broker::start_with(&["--num-partitions", "1"]);
    produce(&b, &["a0", "a1", "a2"]).await;
    assert_eq!(b.stop(), Some(0), "clean stop");
    // offline, as a Raft log in the partition log would hold them: a LEADER_CHANGE control
    // batch (offset 3), a control batch of a type no client knows (offset 4), then records
    {
        let dir = b.data_dir.join("gate-0");
        let mut log = sluice_storage::Log::open(&dir, sluice_storage::LogConfig::default()).unwrap();
        assert_eq!(log.log_end_offset(), 3);
        let [leader_change, membership] = raft_entries();
        for mut batch in [leader_change, membership, records(&["b0", "b1"])] {
            log.append(&mut batch, now_ms(), Some(0)).unwrap();
        }
        log.close().unwrap();
    }
    b.spawn();
    // the broker goes on after them: its producer state and log end took them in
    produce(&b, &["c0"]).await;
    let want: Vec<(i64, String)> =
        [(0, "a0"), (1, "a1"), (2, "a2"), (5, "b0"), (6, "b1"), (7, "c0")].map(|(o, v)| (o, v.to_string())).to_vec();
    for read_committed in [true, false] {
        assert_eq!(
            rdkafka_read(&b.bootstrap(), read_committed, want.len()),
            want,
            "librdkafka, read_committed {read_committed}"
        );
    }
    for level in ["read_committed", "read_uncommitted"] {
        let cfg = ClientConfig::new()
            .set("bootstrap.servers", b.bootstrap())
            .set("auto.offset.reset", "earliest")
            .set("isolation.level", level)
            .set("fetch.max.wait.ms", 100);
        let mut c = Consumer::new(&cfg).unwrap();
        c.assign(&[("gate".to_string(), 0)]).unwrap();
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(15);
        while got.len() < want.len() && Instant::now() < deadline {
            for r in c.poll(Duration::from_millis(200)).await.unwrap() {
                got.push((r.offset, String::from_utf8_lossy(r.value.as_deref().unwrap_or(b"")).to_string()));
            }
        }
        assert_eq!(got, want, "Sluice's Rust consumer, {level}");
    }
    match kafka_python_read(&b.bootstrap()) {
        Ok(levels) => {
            for (level, got) in levels {
                assert_eq!(got, want, "kafka-python, {level}");
            }
        }
        Err(why) => sluice_tests::report_skip("control_batches (kafka-python)", &why),
    }
}

/// What a consumer read: (offset, value) in order.
type Read = Vec<(i64, String)>;

/// kafka-python reads partition 0 of `gate` from the start at both isolation levels:
/// (level, [(offset, value)]) each. Err: no venv with kafka-python here.
fn kafka_python_read(bootstrap: &str) -> Result<Vec<(String, Read)>, String> {
    let python = std::env::var("TEST_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/compat-venv/bin/python"));
    if !python.exists() {
        return Err(format!("no Python venv at {} (tests/run-all.sh makes it)", python.display()));
    }
    const SCRIPT: &str = r#"
import json, sys
from kafka import KafkaConsumer, TopicPartition
for level in ("read_committed", "read_uncommitted"):
    c = KafkaConsumer(bootstrap_servers=sys.argv[1], isolation_level=level, enable_auto_commit=False,
                      consumer_timeout_ms=2000)
    tp = TopicPartition("gate", 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    out = [[m.offset, m.value.decode()] for m in c]
    c.close()
    print(json.dumps([level, out]))
"#;
    let out = std::process::Command::new(&python)
        .args(["-c", SCRIPT, bootstrap])
        .output()
        .map_err(|e| format!("{}: {e}", python.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("No module named 'kafka'") {
        return Err("kafka-python is not installed in the venv".into());
    }
    assert!(out.status.success(), "kafka-python failed: {stderr}");
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<(String, Read)>(l).unwrap())
        .collect())
}
