//! The `sluice` process itself: settings from flags, environment and file (with clear errors),
//! clean shutdown on SIGTERM (marker written, next start skips recovery), metadata persistence.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sluice_tests::{free_port, sluice_bin, Broker};
use std::process::Command;

fn run_expecting_failure(args: &[&str], envs: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(sluice_bin())
        .args(["--log-dirs", dir.path().to_str().unwrap()])
        .args(args)
        .envs(envs.iter().copied())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "bad settings exit with code 2");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn bad_settings_stop_startup_naming_the_setting() {
    let e = run_expecting_failure(&["--num-partitions", "lots"], &[]);
    assert!(e.contains("num.partitions") && e.contains("lots"), "{e}");
    let e = run_expecting_failure(&[], &[("SLUICE_LOG_RETENTION_MS", "-7")]);
    assert!(e.contains("log.retention.ms"), "{e}");
    let e = run_expecting_failure(&[], &[("SLUICE_NO_SUCH_SETTING", "1")]);
    assert!(e.contains("SLUICE_NO_SUCH_SETTING"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("sluice.toml");
    std::fs::write(&cfg, "\"log.retention.hours\" = 5\n").unwrap();
    let e = run_expecting_failure(&["--config", cfg.to_str().unwrap()], &[]);
    assert!(e.contains("log.retention.hours"), "{e}");
    let e = run_expecting_failure(&["--listeners", "PLAINTEXT://not-an-ip:1"], &[]);
    assert!(e.contains("listeners"), "{e}");
}

#[test]
fn settings_from_file_env_and_flags_take_effect_in_that_order() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = dir.path().join("sluice.toml");
    // the file says 3 partitions and a wrong port; env overrides partitions; the flag fixes the port
    std::fs::write(&cfg, "[num]\npartitions = 3\n[log]\ndirs = \"ignored-by-flag\"\n").unwrap();
    let data = dir.path().join("data");
    let mut child = Command::new(sluice_bin())
        .args(["--config", cfg.to_str().unwrap(), "--log-dirs", data.to_str().unwrap()])
        .args(["--listeners", &format!("PLAINTEXT://127.0.0.1:{port}")])
        .env("SLUICE_NUM_PARTITIONS", "5")
        .env("SLUICE_LOG", "warn")
        .spawn()
        .unwrap();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut up = false;
    for _ in 0..200 {
        if std::net::TcpStream::connect(addr).is_ok() {
            up = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    assert!(up, "broker listens on the flag's port");
    // auto-create a topic through Metadata and check it got the env's partition count
    use rdkafka::config::ClientConfig;
    use rdkafka::producer::{BaseProducer, Producer};
    let p: BaseProducer = ClientConfig::new().set("bootstrap.servers", format!("127.0.0.1:{port}")).create().unwrap();
    let md = p.client().fetch_metadata(Some("auto"), std::time::Duration::from_secs(10)).unwrap();
    assert_eq!(md.topics()[0].partitions().len(), 5);
    assert!(data.join("auto-4").is_dir(), "data went to the --log-dirs directory");
    drop(p);
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn sigterm_is_a_clean_shutdown_and_metadata_persists() {
    let mut b = Broker::start();
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::config::ClientConfig;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (id_before, cfg_before) = rt.block_on(async {
        let admin: AdminClient<DefaultClientContext> =
            ClientConfig::new().set("bootstrap.servers", b.bootstrap()).create().unwrap();
        let r = admin
            .create_topics(
                &[NewTopic::new("keep", 3, TopicReplication::Fixed(1)).set("retention.ms", "86400000")],
                &AdminOptions::new(),
            )
            .await
            .unwrap();
        assert!(r[0].is_ok());
        let cfg = admin.describe_configs(&[ResourceSpecifier::Topic("keep")], &AdminOptions::new()).await.unwrap();
        let v = cfg[0].as_ref().unwrap().get("retention.ms").and_then(|e| e.value.clone());
        let meta = std::fs::read_to_string(b.data_dir.join("__sluice_metadata.json")).unwrap();
        (meta, v)
    });
    assert_eq!(b.stop(), Some(0), "SIGTERM exits 0");
    for p in 0..3 {
        assert!(
            b.data_dir.join(format!("keep-{p}/.clean_shutdown")).exists(),
            "partition {p} closed cleanly; the broker's log ends: {}",
            b.log_tail()
        );
    }
    b.spawn();
    for p in 0..3 {
        assert!(!b.data_dir.join(format!("keep-{p}/.clean_shutdown")).exists(), "marker consumed on open");
    }
    let meta_after = std::fs::read_to_string(b.data_dir.join("__sluice_metadata.json")).unwrap();
    assert_eq!(id_before, meta_after, "topic ids and configs unchanged across restart");
    let cfg_after = rt.block_on(async {
        let admin: AdminClient<DefaultClientContext> =
            ClientConfig::new().set("bootstrap.servers", b.bootstrap()).create().unwrap();
        let cfg = admin.describe_configs(&[ResourceSpecifier::Topic("keep")], &AdminOptions::new()).await.unwrap();
        cfg[0].as_ref().unwrap().get("retention.ms").and_then(|e| e.value.clone())
    });
    assert_eq!(cfg_before.as_deref(), Some("86400000"));
    assert_eq!(cfg_after, cfg_before);
}

#[test]
fn a_second_broker_on_the_same_directory_refuses_to_start() {
    let b = Broker::start();
    let out = Command::new(sluice_bin())
        .args(["--log-dirs", b.data_dir.to_str().unwrap()])
        .args(["--listeners", &format!("PLAINTEXT://127.0.0.1:{}", free_port())])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("locked by another process"), "{e}");
}

#[test]
fn metrics_endpoint_reports_plausible_values() {
    use std::io::{Read, Write};
    let mport = free_port();
    let b = Broker::start_with(&["--metrics-listener", &format!("127.0.0.1:{mport}")]);
    use rdkafka::config::ClientConfig;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let p: BaseProducer = ClientConfig::new().set("bootstrap.servers", b.bootstrap()).create().unwrap();
    for i in 0..100 {
        let v = format!("{i}");
        p.send(BaseRecord::<(), _>::to("met").partition(0).payload(&v)).unwrap();
    }
    p.flush(std::time::Duration::from_secs(10)).unwrap();
    // a transaction left open holds the LSO one record back
    let tp: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", b.bootstrap())
        .set("transactional.id", "met-txn")
        .create()
        .unwrap();
    tp.init_transactions(std::time::Duration::from_secs(10)).unwrap();
    tp.begin_transaction().unwrap();
    tp.send(BaseRecord::<(), _>::to("met").partition(0).payload("open")).unwrap();
    tp.flush(std::time::Duration::from_secs(10)).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500)); // gauges update every second
    let scrape = || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", mport)).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
        body
    };
    let value = |body: &str, series: &str| -> f64 {
        body.lines()
            .find(|l| l.starts_with(series))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no series {series} in:\n{body}"))
    };
    let body = scrape();
    assert_eq!(value(&body, "sluice_log_end_offset{topic=\"met\",partition=\"0\"}"), 101.0);
    assert_eq!(value(&body, "sluice_high_watermark{topic=\"met\",partition=\"0\"}"), 101.0);
    assert_eq!(value(&body, "sluice_last_stable_offset{topic=\"met\",partition=\"0\"}"), 100.0);
    assert_eq!(value(&body, "sluice_lso_lag{topic=\"met\",partition=\"0\"}"), 1.0);
    assert_eq!(value(&body, "sluice_open_transactions"), 1.0);
    // open ~1.5 s, gauges refreshed every second
    assert!(value(&body, "sluice_oldest_transaction_seconds") > 0.2);
    assert!(value(&body, "sluice_requests_total{api=\"Produce\"}") >= 1.0);
    assert!(value(&body, "sluice_fsync_seconds_count") >= 1.0);
    assert!(value(&body, "sluice_bytes_in_total") > 1000.0);
    assert!(value(&body, "sluice_connections") >= 1.0, "the producer is still connected");
    tp.commit_transaction(std::time::Duration::from_secs(10)).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let body = scrape();
    assert_eq!(value(&body, "sluice_open_transactions"), 0.0);
    assert_eq!(value(&body, "sluice_lso_lag{topic=\"met\",partition=\"0\"}"), 0.0);
    assert_eq!(value(&body, "sluice_transactions_total{outcome=\"commit\"}"), 1.0);
}

#[test]
fn json_logs_name_slow_requests_by_request_id() {
    use rdkafka::config::ClientConfig;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    // 0 ms: every request is logged as slow
    let b = Broker::start_with(&["--log-format", "json", "--log-slow-request-ms", "0"]);
    let p: BaseProducer = ClientConfig::new().set("bootstrap.servers", b.bootstrap()).create().unwrap();
    for i in 0..50 {
        p.send(BaseRecord::<(), _>::to("slowlog").partition(0).payload(&format!("{i}"))).unwrap();
        p.flush(std::time::Duration::from_secs(10)).unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let logs = std::fs::read_to_string(b.data_dir.with_extension("log")).unwrap();
    let lines: Vec<serde_json::Value> = logs.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    assert!(!lines.is_empty() && lines.len() == logs.lines().count(), "every log line is JSON:\n{logs}");
    let slow: Vec<&serde_json::Value> = lines.iter().filter(|l| l["fields"]["message"] == "slow request").collect();
    assert!(slow.iter().any(|l| l["fields"]["api"] == "Produce"), "every produce is logged:\n{logs}");
    let id = slow[0]["fields"]["request_id"].as_str().unwrap();
    assert!(id.split_once('-').is_some_and(|(c, r)| c.parse::<u64>().is_ok() && r.parse::<i32>().is_ok()), "{id}");
    assert!(slow[0]["fields"]["api"].is_string() && slow[0]["fields"]["elapsed_ms"].is_u64(), "{:?}", slow[0]);
    // a bad setting is refused with its name
    let out = std::process::Command::new(sluice_tests::sluice_bin()).args(["--log-format", "xml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("log.format"));
}
