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
    let hist: u64 = p["latency_histogram"].as_array().unwrap().iter().map(|b| b[1].as_u64().unwrap()).sum();
    assert!(hist > 0, "every acknowledged request is in the histogram: {p}");
    let c = ctl(&b, &["perf", "consume", "--topic", "perf", "--num-records", &produced.to_string()]);
    assert_eq!(c["records"].as_u64().unwrap(), produced, "{c}");
    let t = ctl(
        &b,
        &[
            "perf",
            "txn",
            "--topic",
            "perf-txn",
            "--partitions",
            "2",
            "--num-records",
            "20000",
            "--commit-interval-ms",
            "20",
        ],
    );
    assert!(t["records"].as_u64().unwrap() >= 20000, "{t}");
    assert!(t["commits"].as_u64().unwrap() >= 1 && t["commit_ms_p50"].as_f64().unwrap() > 0.0, "{t}");

    assert_eq!(b.stop(), Some(0));
    let seg = b.data_dir.join("perf-0").join("00000000000000000000.log");
    let out = Command::new(sluicectl_bin()).args(["log", "dump"]).arg(&seg).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("all valid") && text.contains("offsets 0..="), "{text}");

    // the other side files decode too
    for ext in ["index", "timeindex", "txnindex", "snapshot"] {
        let f = std::fs::read_dir(b.data_dir.join("perf-0"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == ext));
        if let Some(f) = f {
            let out = Command::new(sluicectl_bin()).args(["log", "dump"]).arg(&f).output().unwrap();
            assert!(out.status.success(), "{ext}: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
    let snap = std::fs::read_dir(b.data_dir.join("perf-0"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "snapshot"))
        .expect("a clean shutdown leaves a producer snapshot");
    let out = Command::new(sluicectl_bin()).args(["log", "dump"]).arg(&snap).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("CRC ok"));
    // a torn copy: exit 1, and the message says where the corruption starts
    let torn = b.data_dir.join("torn.log");
    let bytes = std::fs::read(&seg).unwrap();
    std::fs::write(&torn, &bytes[..bytes.len() - 10]).unwrap();
    let out = Command::new(sluicectl_bin()).args(["log", "dump"]).arg(&torn).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("corruption at byte"));
    // the audit passes on a healthy partition (its findings are unit-tested in tools/src/verify.rs)
    let out = Command::new(sluicectl_bin()).arg("verify").arg(b.data_dir.join("perf-0")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stdout).contains("no findings"));
    // and on every partition of the transactional topic, with its committed transactions
    let out = Command::new(sluicectl_bin())
        .args(["--output", "json", "verify", "--topic", "perf-txn", "--log-dirs"])
        .arg(&b.data_dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let reports: Vec<serde_json::Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(reports.len(), 2);
    assert!(reports.iter().all(|r| r["transactions_committed"].as_u64().unwrap() >= 1), "{reports:?}");
    // bad usage is exit 2
    let out = Command::new(sluicectl_bin()).args(["log", "frobnicate"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

fn ctl_raw(b: &Broker, args: &[&str]) -> std::process::Output {
    Command::new(sluicectl_bin()).args(["--bootstrap-server", &b.bootstrap()]).args(args).output().unwrap()
}

#[test]
fn topics_and_cluster_commands() {
    let b = Broker::start();
    let c = ctl(&b, &["topics", "create", "orders", "--partitions", "3", "--config", "retention.ms=3600000"]);
    assert_eq!(c["partitions"], 3);
    // errors: Kafka's error name, exit 1
    let dup = ctl_raw(&b, &["topics", "create", "orders"]);
    assert_eq!(dup.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&dup.stderr).contains("TopicAlreadyExists"));
    let bad = ctl_raw(&b, &["topics", "create", "x", "--config", "novalue"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("KEY=VALUE"));

    ctl(
        &b,
        &[
            "topics",
            "alter",
            "orders",
            "--partitions",
            "5",
            "--config",
            "segment.bytes=1048576",
            "--delete-config",
            "retention.ms",
        ],
    );
    let list = ctl(&b, &["topics", "list"]);
    assert_eq!(list[0]["name"], "orders");
    assert_eq!(list[0]["partitions"], 5);
    assert_ne!(list[0]["topic_id"], "00000000-0000-0000-0000-000000000000");
    let d = ctl(&b, &["topics", "describe", "orders"]);
    assert_eq!(d["partitions"].as_array().unwrap().len(), 5);
    let overrides: Vec<&str> = d["configs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["override"] == true)
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(overrides, vec!["segment.bytes"]);
    let table = String::from_utf8(ctl_raw(&b, &["topics", "describe", "orders"]).stdout).unwrap();
    assert!(table.contains("Partition: 4") && table.contains("segment.bytes=1048576  (topic override)"), "{table}");

    let dirs = ctl(&b, &["log-dirs", "describe"]);
    let parts = dirs[0]["partitions"].as_array().unwrap();
    assert_eq!(parts.iter().filter(|p| p["topic"] == "orders").count(), 5);
    assert!(dirs[0]["total_bytes"].as_i64().unwrap() > 0);
    let comp = ctl_raw(&b, &["completions", "bash"]);
    assert!(comp.status.success() && String::from_utf8_lossy(&comp.stdout).contains("sluicectl"));
    let cl = ctl(&b, &["cluster", "describe"]);
    assert_eq!(cl["brokers"][0]["port"], b.port);
    let orders: Vec<&serde_json::Value> =
        cl["partitions"].as_array().unwrap().iter().filter(|p| p["topic"] == "orders").collect();
    assert_eq!(orders.len(), 5);
    assert!(orders.iter().all(|p| p["leader"] == 1 && p["replicas"] == serde_json::json!([1])), "{orders:?}");
    assert!(orders.iter().all(|p| p["lag"] == serde_json::json!({"1": 0})), "{orders:?}");
    // a single broker leads everything: a preferred-leader election is not needed (and not an error)
    let el = ctl(&b, &["cluster", "elect-leaders", "--topic", "orders", "--partition", "0"]);
    assert_eq!(el["results"][0]["error_code"], 84, "{el}");
    ctl(&b, &["topics", "delete", "orders"]);
    let gone = ctl_raw(&b, &["topics", "describe", "orders"]);
    assert_eq!(gone.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&gone.stderr).contains("UnknownTopicOrPartition"));
}

#[test]
fn console_produce_and_consume() {
    use std::io::Write;
    let b = Broker::start();
    let mut child = Command::new(sluicectl_bin())
        .args([
            "--bootstrap-server",
            &b.bootstrap(),
            "produce",
            "--topic",
            "con",
            "--key-separator",
            ":",
            "--header",
            "src=test",
        ])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"k1:v1\nk2:v2\nk3:v3\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("produced 3 records"));

    let out =
        ctl_raw(&b, &["--output", "json", "consume", "--topic", "con", "--from-beginning", "--timeout-ms", "500"]);
    assert!(out.status.success());
    let recs: Vec<serde_json::Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(recs.len(), 3);
    assert_eq!(
        (recs[1]["offset"].as_i64(), recs[1]["key"].as_str(), recs[1]["value"].as_str()),
        (Some(1), Some("k2"), Some("v2"))
    );
    assert_eq!(recs[2]["headers"]["src"], "test");

    let out = ctl_raw(&b, &["consume", "--topic", "con", "--offset", "2", "--print-key", "--timeout-ms", "500"]);
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "k3\tv3\n");
    let out = ctl_raw(
        &b,
        &[
            "consume",
            "--topic",
            "con",
            "--from-beginning",
            "--max-messages",
            "1",
            "--isolation-level",
            "read_committed",
        ],
    );
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "v1\n");
    // from the end (the default) there is nothing to print
    let out = ctl_raw(&b, &["consume", "--topic", "con", "--timeout-ms", "300"]);
    assert!(out.stdout.is_empty());
}

/// `sluicectl groups …` against a group driven by librdkafka (the `rdkafka` crate).
#[test]
fn groups_commands() {
    use rdkafka::config::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    use std::time::{Duration, Instant};

    let b = Broker::start_with(&["--group-initial-rebalance-delay-ms", "100"]);
    ctl(&b, &["topics", "create", "gt", "--partitions", "2"]);
    let producer: BaseProducer = ClientConfig::new().set("bootstrap.servers", b.bootstrap()).create().unwrap();
    let send = |n: i32| {
        for i in 0..n {
            producer.send(BaseRecord::<(), str>::to("gt").partition(i % 2).payload("x")).unwrap();
        }
        producer.flush(Duration::from_secs(10)).unwrap();
    };
    send(10);
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", b.bootstrap())
        .set("group.id", "cg")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    consumer.subscribe(&["gt"]).unwrap();
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while got < 10 && Instant::now() < deadline {
        if let Some(Ok(_)) = consumer.poll(Duration::from_millis(200)) {
            got += 1;
        }
    }
    assert_eq!(got, 10);
    consumer.commit_consumer_state(CommitMode::Sync).unwrap();

    let list = ctl(&b, &["groups", "list"]);
    assert_eq!(list[0]["group"], "cg", "{list}");
    assert_eq!(list[0]["state"], "Stable", "{list}");
    assert_eq!(ctl(&b, &["groups", "list", "--state", "Empty"]), serde_json::json!([]));
    send(6);
    let d = ctl(&b, &["groups", "describe", "cg"]);
    assert_eq!(d["members"].as_array().unwrap().len(), 1, "{d}");
    let rows = d["partitions"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{d}");
    assert_eq!(rows.iter().map(|r| r["committed"].as_i64().unwrap()).sum::<i64>(), 10, "{d}");
    assert_eq!(rows.iter().map(|r| r["lag"].as_i64().unwrap()).sum::<i64>(), 6, "{d}");
    assert!(rows.iter().all(|r| r["member"] != "-"), "every partition has an owner: {d}");

    // an active group's offsets cannot be reset
    let out = ctl_raw(&b, &["groups", "reset-offsets", "cg", "--topic", "gt", "--to-earliest", "--execute"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("active members"), "{out:?}");
    let out = ctl_raw(&b, &["groups", "delete", "cg"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("NonEmptyGroup"), "{out:?}");

    drop(consumer); // leaves the group
    let deadline = Instant::now() + Duration::from_secs(15);
    while ctl(&b, &["groups", "list", "--state", "Empty"]).as_array().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "the group never became empty");
        std::thread::sleep(Duration::from_millis(100));
    }
    let dry = ctl(&b, &["groups", "reset-offsets", "cg", "--topic", "gt", "--to-earliest"]);
    assert_eq!(dry["executed"], false);
    let d = ctl(&b, &["groups", "describe", "cg"]);
    assert_eq!(d["partitions"].as_array().unwrap().iter().map(|r| r["committed"].as_i64().unwrap()).sum::<i64>(), 10);
    ctl(&b, &["groups", "reset-offsets", "cg", "--topic", "gt", "--to-offset", "3", "--partitions", "1", "--execute"]);
    ctl(&b, &["groups", "reset-offsets", "cg", "--topic", "gt", "--to-earliest", "--partitions", "0", "--execute"]);
    let d = ctl(&b, &["groups", "describe", "cg"]);
    let committed: Vec<i64> =
        d["partitions"].as_array().unwrap().iter().map(|r| r["committed"].as_i64().unwrap()).collect();
    assert_eq!(committed, vec![0, 3], "{d}");
    ctl(&b, &["groups", "delete", "cg"]);
    assert_eq!(ctl(&b, &["groups", "list"]), serde_json::json!([]));
    let out = ctl_raw(&b, &["groups", "describe", "cg"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
}

/// `sluicectl transactions …`: a transaction left open (its producer gone quiet) is listed,
/// described, found as hanging, and aborted by an operator, which releases read_committed.
#[test]
fn transactions_commands_find_and_abort_a_hanging_transaction() {
    use rdkafka::config::ClientConfig;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    use std::time::Duration;

    let b = Broker::start();
    ctl(&b, &["topics", "create", "hang", "--partitions", "2"]);
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", b.bootstrap())
        .set("transactional.id", "stuck-app")
        .create()
        .unwrap();
    p.init_transactions(Duration::from_secs(10)).unwrap();
    p.begin_transaction().unwrap();
    for i in 0..3 {
        p.send(BaseRecord::<(), str>::to("hang").partition(1).payload(&format!("v{i}"))).unwrap();
    }
    p.flush(Duration::from_secs(10)).unwrap();

    let list = ctl(&b, &["transactions", "list"]);
    assert_eq!(list[0]["transactional_id"], "stuck-app", "{list}");
    assert_eq!(list[0]["state"], "Ongoing", "{list}");
    assert_eq!(ctl(&b, &["transactions", "list", "--state", "CompleteCommit"]), serde_json::json!([]));
    let d = ctl(&b, &["transactions", "describe", "stuck-app"]);
    assert_eq!(d["partitions"], serde_json::json!(["hang-1"]), "{d}");
    let dp = ctl(&b, &["transactions", "describe-producers", "--topic", "hang", "--partition", "1"]);
    assert_eq!(dp[0]["open_txn_start_offset"], 0, "{dp}");
    // not old enough by the default rule; found with --min-age-ms 0
    assert_eq!(ctl(&b, &["transactions", "find-hanging"]), serde_json::json!([]));
    let hanging = ctl(&b, &["transactions", "find-hanging", "--min-age-ms", "0"]);
    assert_eq!(hanging[0]["partition"], 1, "{hanging}");
    assert_eq!(hanging[0]["start_offset"], 0, "{hanging}");

    // read_committed "latest" (the LSO) is held at the transaction's first offset
    let lso = |b: &Broker| -> i64 {
        use kafka_protocol::messages::*;
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let conn = sluice_client::Connection::connect(&b.bootstrap(), "t", 1).await.unwrap();
            let mut lp = list_offsets_request::ListOffsetsPartition::default();
            lp.partition_index = 1;
            lp.timestamp = -1;
            let mut lt = list_offsets_request::ListOffsetsTopic::default();
            lt.name = TopicName(kafka_protocol::protocol::StrBytes::from_static_str("hang"));
            lt.partitions = vec![lp];
            let mut r = ListOffsetsRequest::default();
            r.isolation_level = 1;
            r.topics = vec![lt];
            match conn.call(ApiKey::ListOffsets, 5, RequestKind::ListOffsets(r)).await.unwrap() {
                ResponseKind::ListOffsets(l) => l.topics[0].partitions[0].offset,
                other => panic!("{other:?}"),
            }
        })
    };
    assert_eq!(lso(&b), 0);
    let rc_values = |b: &Broker| -> Vec<String> {
        let out = ctl_raw(
            b,
            &["--output", "json", "consume", "--topic", "hang", "--partition", "1", "--from-beginning"]
                .into_iter()
                .chain(["--isolation-level", "read_committed", "--timeout-ms", "700"])
                .collect::<Vec<_>>(),
        );
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["value"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(rc_values(&b).is_empty(), "a read_committed consumer is stuck behind the open transaction");
    // the operator aborts it: read_committed (LSO) moves past it
    let out = ctl_raw(&b, &["transactions", "abort", "--topic", "hang", "--partition", "1", "--start-offset", "7"]);
    assert_eq!(out.status.code(), Some(1), "no transaction starts at 7");
    ctl(&b, &["transactions", "abort", "--topic", "hang", "--partition", "1", "--start-offset", "0"]);
    assert_eq!(lso(&b), 4, "three records and the ABORT marker are below the LSO now");
    // the producer commits (a marker with nothing open on hang-1), then a real transaction
    p.commit_transaction(Duration::from_secs(10)).unwrap();
    p.begin_transaction().unwrap();
    p.send(BaseRecord::<(), str>::to("hang").partition(1).payload("after")).unwrap();
    p.commit_transaction(Duration::from_secs(10)).unwrap();
    assert_eq!(rc_values(&b), vec!["after"], "the consumer proceeds; the aborted records never appear");
    let dp = ctl(&b, &["transactions", "describe-producers", "--topic", "hang", "--partition", "1"]);
    assert_eq!(dp[0]["open_txn_start_offset"], serde_json::Value::Null, "{dp}");
    assert_eq!(ctl(&b, &["transactions", "find-hanging", "--min-age-ms", "0"]), serde_json::json!([]));
    let out = ctl_raw(&b, &["transactions", "describe", "nobody"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("TransactionalIdNotFound"), "{out:?}");

    // offline: the audit passes on this log of aborted and committed transactions …
    drop(p);
    let mut b = b;
    assert_eq!(b.stop(), Some(0));
    let dir = b.data_dir.join("hang-1");
    let out = Command::new(sluicectl_bin()).args(["--output", "json", "verify"]).arg(&dir).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((r["transactions_aborted"].as_u64(), r["transactions_committed"].as_u64()), (Some(1), Some(1)), "{r}");
    let seg = dir.join("00000000000000000000.log");
    let out = Command::new(sluicectl_bin()).args(["log", "dump"]).arg(&seg).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("marker Abort") && text.contains("marker Commit"), "{text}");
    let out = Command::new(sluicectl_bin())
        .args(["log", "dump"])
        .arg(dir.join("00000000000000000000.txnindex"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("first_offset 0 last_offset 3"), "{out:?}");
    // … and finds a deliberately corrupted copy
    let copy = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(&dir).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), copy.path().join(e.file_name())).unwrap();
    }
    let mut bytes = std::fs::read(copy.path().join("00000000000000000000.log")).unwrap();
    bytes[70] ^= 0xff; // inside the first batch's records (covered by its CRC)
    std::fs::write(copy.path().join("00000000000000000000.log"), bytes).unwrap();
    let out = Command::new(sluicectl_bin()).arg("verify").arg(copy.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("FINDING"), "{out:?}");
}

/// KIP-939 operator tools: `find-hanging` lists a prepared two-phase-commit transaction apart
/// (it has no timeout and waits for its external coordinator, however old), and
/// `force-terminate` aborts it and fences every instance of its producer; with two-phase commit
/// off on the broker it is refused with Kafka's error, readably.
#[test]
fn force_terminate_ends_a_prepared_transaction_that_find_hanging_lists_apart() {
    use sluice_client::{ClientConfig, ErrorKind, Producer, ProducerRecord};
    let mport = sluice_tests::free_port();
    let metrics = format!("127.0.0.1:{mport}");
    let b = Broker::start_with(&["--transaction-two-phase-commit-enable", "true", "--metrics-listener", &metrics]);
    ctl(&b, &["topics", "create", "ledger", "--partitions", "1"]);
    let gauge = |series: &str| -> f64 {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", mport)).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        body.lines()
            .find(|l| l.starts_with(series))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no series {series} in:\n{body}"))
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let config = ClientConfig::new()
        .set("bootstrap.servers", b.bootstrap())
        .set("transactional.id", "lost-job")
        .set("transaction.two.phase.commit.enable", "true");
    let (job, state) = rt.block_on(async {
        let job = Producer::new(&config).await.unwrap();
        job.init_transactions().await.unwrap();
        job.begin_transaction().await.unwrap();
        for i in 0..3 {
            job.send(ProducerRecord::new("ledger", format!("v{i}"))).await.unwrap();
        }
        let state = job.prepare_transaction().await.unwrap();
        (job, state)
    });
    let found = ctl(&b, &["transactions", "find-hanging", "--min-age-ms", "0"]);
    let found = found.as_array().unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["prepared"], true, "{found:?}");
    assert_eq!(found[0]["transactional_id"], "lost-job", "{found:?}");
    assert_eq!(found[0]["partitions"], serde_json::json!(["ledger-0"]), "{found:?}");
    let text = String::from_utf8_lossy(&ctl_raw(&b, &["transactions", "find-hanging"]).stdout).into_owned();
    assert!(text.contains("Prepared two-phase-commit transactions") && text.contains("lost-job"), "{text}");

    let d = ctl(&b, &["transactions", "describe", "lost-job"]);
    assert_eq!((d["state"].as_str(), d["two_phase"].as_bool()), (Some("Ongoing"), Some(true)), "{d}");
    assert!(d["prepared_ms"].as_i64().is_some(), "shown as prepared: {d}");
    let text = String::from_utf8_lossy(&ctl_raw(&b, &["transactions", "describe", "lost-job"]).stdout).into_owned();
    assert!(text.contains("TwoPhaseCommit: prepared"), "{text}");
    std::thread::sleep(std::time::Duration::from_millis(1500)); // gauges update every second
    assert_eq!(gauge("sluice_prepared_transactions"), 1.0);
    assert!(gauge("sluice_oldest_prepared_transaction_seconds") > 0.2);

    let t = ctl(&b, &["transactions", "force-terminate", "--transactional-id", "lost-job"]);
    assert_eq!(t["producer_id"], state.producer_id, "{t}");
    assert!(t["producer_epoch"].as_i64().unwrap() > i64::from(state.epoch), "{t}");
    assert_eq!(ctl(&b, &["transactions", "find-hanging", "--min-age-ms", "0"]), serde_json::json!([]));
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(gauge("sluice_prepared_transactions"), 0.0);
    let d = ctl(&b, &["transactions", "describe", "lost-job"]);
    assert_eq!((d["state"].as_str(), d["partitions"].as_array().map(Vec::len)), (Some("Empty"), Some(0)), "{d}");
    rt.block_on(async {
        // the instance that prepared it is fenced; a new one finds nothing to keep
        let e = job.complete_transaction(state).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Fatal, "{e}");
        let next = Producer::new(&config).await.unwrap();
        assert_eq!(next.init_transactions_keep_prepared().await.unwrap(), None);
    });
    let out = ctl_raw(
        &b,
        &["--output", "json", "consume", "--topic", "ledger", "--from-beginning"]
            .into_iter()
            .chain(["--isolation-level", "read_committed", "--timeout-ms", "700"])
            .collect::<Vec<_>>(),
    );
    assert!(out.status.success() && out.stdout.is_empty(), "aborted: {out:?}");

    let off = Broker::start();
    let out = ctl_raw(&off, &["transactions", "force-terminate", "--transactional-id", "lost-job"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("TransactionalIdAuthorizationFailed"), "{out:?}");
}
