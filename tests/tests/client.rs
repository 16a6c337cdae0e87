//! Sluice's own Rust client against a real broker process: producer (batching, partitioner,
//! compression, idempotence), consumer (assign, seek, pause, groups with each assignor,
//! commits), transactions (commit, abort, fencing) and interoperability with librdkafka.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer as _, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use sluice_client::partitioner::partition_for_key;
use sluice_client::{ClientConfig, Consumer, ConsumerRecord, Producer, ProducerRecord};
use sluice_tests::Broker;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

fn broker() -> Broker {
    Broker::start_with(&["--num-partitions", "4"])
}

fn producer_config(b: &Broker) -> ClientConfig {
    ClientConfig::new().set("bootstrap.servers", b.bootstrap()).set("linger.ms", 2)
}

fn consumer_config(b: &Broker) -> ClientConfig {
    ClientConfig::new()
        .set("bootstrap.servers", b.bootstrap())
        .set("auto.offset.reset", "earliest")
        .set("fetch.max.wait.ms", 100)
}

/// Read `tps` from the start until `want` records arrived (or 20 s passed).
async fn read_all(mut c: Consumer, tps: &[(String, i32)], want: usize) -> Vec<ConsumerRecord> {
    c.assign(tps).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while out.len() < want && Instant::now() < deadline {
        out.extend(c.poll(Duration::from_millis(200)).await.unwrap());
    }
    // A little longer, to catch anything that should not be there.
    out.extend(c.poll(Duration::from_millis(300)).await.unwrap());
    out
}

fn tps(topic: &str, n: i32) -> Vec<(String, i32)> {
    (0..n).map(|p| (topic.to_string(), p)).collect()
}

fn text(b: &Option<Bytes>) -> String {
    String::from_utf8_lossy(b.as_deref().unwrap_or(b"")).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_and_consume_with_every_compression() {
    let b = broker();
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let topic = format!("rt-{codec}");
        let p = Producer::new(&producer_config(&b).set("compression.type", codec)).await.unwrap();
        assert!(p.producer_id().0 >= 0, "idempotent by default");
        let mut futs = Vec::new();
        for i in 0..2000 {
            let rec = ProducerRecord::new(topic.clone(), format!("v{i}")).key(format!("k{}", i % 50)).header("h", "x");
            futs.push((i, p.send(rec).await.unwrap()));
        }
        let mut per_partition: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
        for (i, f) in futs {
            let md = f.await.unwrap();
            assert_eq!(md.partition, partition_for_key(format!("k{}", i % 50).as_bytes(), 4), "murmur2 partitioner");
            per_partition.entry(md.partition).or_default().push(md.offset);
        }
        for (part, offs) in &per_partition {
            let want: Vec<i64> = (0..offs.len() as i64).collect();
            assert_eq!(offs, &want, "{codec}: partition {part} offsets are dense and in send order");
        }
        p.close().await.unwrap();
        let got = read_all(Consumer::new(&consumer_config(&b)).unwrap(), &tps(&topic, 4), 2000).await;
        assert_eq!(got.len(), 2000, "{codec}");
        // Per key, values arrive in send order.
        let mut last: HashMap<String, i64> = HashMap::new();
        for r in &got {
            let v: i64 = text(&r.value)[1..].parse().unwrap();
            let k = text(&r.key);
            assert!(last.get(&k).is_none_or(|prev| *prev < v), "{codec}: order within key {k}");
            last.insert(k, v);
            assert_eq!(r.headers, vec![("h".to_string(), Some(Bytes::from_static(b"x")))]);
        }
    }
}

fn rdkafka_consumer(bootstrap: &str, read_committed: bool) -> BaseConsumer {
    rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "rd-reader")
        .set("enable.auto.commit", "false")
        .set("isolation.level", if read_committed { "read_committed" } else { "read_uncommitted" })
        .create()
        .unwrap()
}

/// librdkafka reads `topic` (partitions 0..n) from the start for `secs`; returns values.
fn rdkafka_read(bootstrap: &str, topic: &str, n: i32, read_committed: bool, want: usize) -> Vec<String> {
    let c = rdkafka_consumer(bootstrap, read_committed);
    let mut tpl = TopicPartitionList::new();
    for p in 0..n {
        tpl.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    while out.len() < want && Instant::now() < deadline {
        if let Some(m) = c.poll(Duration::from_millis(100)) {
            let m = m.unwrap();
            out.push(String::from_utf8_lossy(m.payload().unwrap_or(b"")).to_string());
        }
    }
    // A little longer, to catch anything that should not be there.
    let until = Instant::now() + Duration::from_millis(500);
    while Instant::now() < until {
        if let Some(m) = c.poll(Duration::from_millis(100)) {
            out.push(String::from_utf8_lossy(m.unwrap().payload().unwrap_or(b"")).to_string());
        }
    }
    out
}

fn txn_config(b: &Broker, id: &str) -> ClientConfig {
    producer_config(b).set("transactional.id", id).set("transaction.timeout.ms", 10_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_commit_abort_and_both_consumers_agree() {
    let b = broker();
    let p = Producer::new(&txn_config(&b, "tx-a").set("compression.type", "zstd")).await.unwrap();
    assert!(p.send(ProducerRecord::new("tx", "x")).await.is_err(), "send before init/begin is refused");
    p.init_transactions().await.unwrap();
    for (round, commit) in [(0, true), (1, false), (2, true), (3, false), (4, true)] {
        p.begin_transaction().await.unwrap();
        let mut futs = Vec::new();
        for i in 0..100 {
            futs.push(p.send(ProducerRecord::new("tx", format!("r{round}-{i}")).partition(i % 4)).await.unwrap());
        }
        if commit {
            p.commit_transaction().await.unwrap();
            for f in futs {
                f.await.unwrap();
            }
        } else if round == 1 {
            // Written, then aborted: in the log, invisible to read_committed.
            p.flush().await.unwrap();
            p.abort_transaction().await.unwrap();
            for f in futs {
                f.await.unwrap();
            }
        } else {
            // Aborted before the sender ran: unsent records fail, sent ones are aborted.
            p.abort_transaction().await.unwrap();
            for f in futs {
                let _ = f.await;
            }
        }
    }
    let committed: Vec<String> =
        [0, 2, 4].iter().flat_map(|r| (0..100).map(move |i| format!("r{r}-{i}"))).collect::<Vec<_>>();
    // Ours, read_committed: exactly the committed rounds.
    let rc = Consumer::new(&consumer_config(&b).set("isolation.level", "read_committed")).unwrap();
    let mut got: Vec<String> = read_all(rc, &tps("tx", 4), 300).await.iter().map(|r| text(&r.value)).collect();
    got.sort();
    let mut want = committed.clone();
    want.sort();
    assert_eq!(got, want, "read_committed sees committed rounds only");
    // Ours, read_uncommitted: everything, markers never surface.
    let ru = Consumer::new(&consumer_config(&b)).unwrap();
    let all = read_all(ru, &tps("tx", 4), 400).await;
    assert!(all.len() >= 400, "read_uncommitted also sees aborted round 1: {}", all.len());
    assert!(all.iter().filter(|r| text(&r.value).starts_with("r1-")).count() == 100);
    // librdkafka agrees.
    let bootstrap = b.bootstrap();
    let mut rd = tokio::task::spawn_blocking(move || rdkafka_read(&bootstrap, "tx", 4, true, 300)).await.unwrap();
    rd.sort();
    assert_eq!(rd, want, "librdkafka read_committed agrees");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_instance_fences_the_old_one_and_aborts_its_open_transaction() {
    let b = broker();
    let old = Producer::new(&txn_config(&b, "tx-fence")).await.unwrap();
    old.init_transactions().await.unwrap();
    old.begin_transaction().await.unwrap();
    for i in 0..10 {
        old.send(ProducerRecord::new("fence", format!("zombie-{i}")).partition(0)).await.unwrap();
    }
    old.flush().await.unwrap();
    // The replacement starts: the zombie's open transaction is aborted, its epoch fenced.
    let new = Producer::new(&txn_config(&b, "tx-fence")).await.unwrap();
    new.init_transactions().await.unwrap();
    assert!(new.producer_id().1 > old.producer_id().1, "new epoch");
    let err = old.commit_transaction().await.expect_err("the zombie cannot commit");
    assert!(err.is_fatal() && err.is_fenced(), "fenced is fatal: {err}");
    assert!(old.begin_transaction().await.is_err(), "and stays unusable");
    new.begin_transaction().await.unwrap();
    new.send(ProducerRecord::new("fence", "live").partition(0)).await.unwrap();
    new.commit_transaction().await.unwrap();
    let rc = Consumer::new(&consumer_config(&b).set("isolation.level", "read_committed")).unwrap();
    let got: Vec<String> = read_all(rc, &tps("fence", 1), 1).await.iter().map(|r| text(&r.value)).collect();
    assert_eq!(got, ["live"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_what_librdkafka_wrote_and_librdkafka_reads_what_we_wrote() {
    let b = broker();
    // librdkafka → Sluice client: compressed transactional batches, one transaction aborted.
    let bootstrap = b.bootstrap();
    tokio::task::spawn_blocking(move || {
        for (codec, commit) in [("gzip", true), ("lz4", false), ("zstd", true), ("snappy", true)] {
            let p: ThreadedProducer<DefaultProducerContext> = rdkafka::ClientConfig::new()
                .set("bootstrap.servers", &bootstrap)
                .set("transactional.id", format!("rd-{codec}"))
                .set("compression.codec", codec)
                .set("linger.ms", "5")
                .create()
                .unwrap();
            p.init_transactions(Duration::from_secs(10)).unwrap();
            p.begin_transaction().unwrap();
            for i in 0..250 {
                let v = format!("{codec}-{i}");
                let k = format!("key-{i}");
                p.send(BaseRecord::to("interop").payload(&v).key(&k)).map_err(|(e, _)| e).unwrap();
            }
            p.flush(Duration::from_secs(10)).unwrap();
            if commit {
                p.commit_transaction(Duration::from_secs(10)).unwrap();
            } else {
                p.abort_transaction(Duration::from_secs(10)).unwrap();
            }
        }
    })
    .await
    .unwrap();
    let rc = Consumer::new(&consumer_config(&b).set("isolation.level", "read_committed")).unwrap();
    let got = read_all(rc, &tps("interop", 4), 750).await;
    assert_eq!(got.len(), 750);
    assert!(got.iter().all(|r| !text(&r.value).starts_with("lz4")), "the aborted transaction stays hidden");
    for r in &got {
        // librdkafka's default partitioner for keyed records is consistent_random (crc32), so
        // only check what is partitioner-independent: keys and values belong together.
        let (codec, i) = text(&r.value).split_once('-').map(|(a, b)| (a.to_string(), b.to_string())).unwrap();
        assert!(["gzip", "zstd", "snappy"].contains(&codec.as_str()));
        assert_eq!(text(&r.key), format!("key-{i}"));
    }
    // Sluice client → librdkafka: transactional, compressed, one transaction aborted.
    let p = Producer::new(&txn_config(&b, "ours").set("compression.type", "lz4")).await.unwrap();
    p.init_transactions().await.unwrap();
    for (round, commit) in [(0, true), (1, false), (2, true)] {
        p.begin_transaction().await.unwrap();
        for i in 0..200 {
            p.send(ProducerRecord::new("ours", format!("{round}-{i}")).key(format!("{i}"))).await.unwrap();
        }
        p.flush().await.unwrap();
        if commit {
            p.commit_transaction().await.unwrap();
        } else {
            p.abort_transaction().await.unwrap();
        }
    }
    let bootstrap = b.bootstrap();
    let (rc, ru) = tokio::task::spawn_blocking(move || {
        (rdkafka_read(&bootstrap, "ours", 4, true, 400), rdkafka_read(&bootstrap, "ours", 4, false, 600))
    })
    .await
    .unwrap();
    assert_eq!(rc.len(), 400);
    assert!(rc.iter().all(|v| !v.starts_with("1-")), "librdkafka read_committed skips our aborted transaction");
    assert_eq!(ru.len(), 600, "and read_uncommitted sees all of it, without control records");
}

/// Two members of one group, each polling in its own task until told to stop; returns what
/// each consumed.
async fn run_group(b: &Broker, topic: &str, group: &str, strategy: &str, total: usize) -> Vec<Vec<(i32, i64)>> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(AtomicUsize::new(0));
    // Both members record their final assignment before either leaves (a leave triggers a
    // rebalance that would change the other's view).
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let mut tasks = Vec::new();
    for member in 0..2 {
        let cfg = consumer_config(b)
            .set("group.id", group)
            .set("partition.assignment.strategy", strategy)
            .set("heartbeat.interval.ms", 200)
            .set("session.timeout.ms", 6000)
            .set("auto.commit.interval.ms", 200);
        let (stop, seen, topic, barrier) = (stop.clone(), seen.clone(), topic.to_string(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            // The second member arrives once the first is consuming.
            if member == 1 {
                tokio::time::sleep(Duration::from_millis(700)).await;
            }
            let mut c = Consumer::new(&cfg).unwrap();
            c.subscribe(&[&topic]).unwrap();
            let mut got = Vec::new();
            let mut assignments = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let recs = c.poll(Duration::from_millis(100)).await.unwrap();
                seen.fetch_add(recs.len(), Ordering::Relaxed);
                got.extend(recs.iter().map(|r| (r.partition, r.offset)));
                assignments.push(c.assignment());
                if member == 0 && got.len() < 40 {
                    // Slow start so the second member joins while partitions are in use.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            let last = c.assignment();
            barrier.wait().await;
            c.close().await.unwrap();
            (got, last)
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(40);
    // Wait for every record, then for a settled split, then stop.
    while seen.load(std::sync::atomic::Ordering::Relaxed) < total && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut out = Vec::new();
    let mut finals = Vec::new();
    for t in tasks {
        let (got, last) = t.await.unwrap();
        out.push(got);
        finals.push(last);
    }
    let mut union: Vec<(String, i32)> = finals.iter().flatten().cloned().collect();
    union.sort();
    assert_eq!(union, tps(topic, 4), "{strategy}: the members split the partitions without overlap: {finals:?}");
    assert!(finals.iter().all(|f| !f.is_empty()), "{strategy}: both members got partitions: {finals:?}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_share_partitions_with_each_assignor_and_commit_exactly_what_was_consumed() {
    let b = broker();
    for strategy in ["range", "roundrobin", "cooperative-sticky"] {
        let topic = format!("grp-{strategy}");
        let p = Producer::new(&producer_config(&b)).await.unwrap();
        for i in 0..400 {
            p.send(ProducerRecord::new(topic.clone(), format!("{i}")).partition(i % 4)).await.unwrap();
        }
        p.flush().await.unwrap();
        let group = format!("g-{strategy}");
        let per_member = run_group(&b, &topic, &group, strategy, 400).await;
        let mut all: Vec<(i32, i64)> = per_member.iter().flatten().cloned().collect();
        all.sort();
        let want: Vec<(i32, i64)> = (0..4).flat_map(|p| (0..100).map(move |o| (p, o))).collect();
        assert_eq!(all, want, "{strategy}: every record consumed exactly once across the rebalance");
        // Everything was committed: a new member starts at the end.
        for i in 0..4 {
            p.send(ProducerRecord::new(topic.clone(), format!("late-{i}")).partition(i)).await.unwrap();
        }
        p.flush().await.unwrap();
        let mut c = Consumer::new(&consumer_config(&b).set("group.id", &group)).unwrap();
        c.subscribe(&[&topic]).unwrap();
        let mut late = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(15);
        while late.len() < 4 && Instant::now() < deadline {
            late.extend(c.poll(Duration::from_millis(200)).await.unwrap().into_iter().map(|r| text(&r.value)));
        }
        late.sort();
        assert_eq!(late, ["late-0", "late-1", "late-2", "late-3"], "{strategy}: resumes from the committed offsets");
        c.close().await.unwrap();
    }
}

fn words(line: &str) -> impl Iterator<Item = &str> {
    line.split_whitespace()
}

/// Per-batch word counts: the sum of every committed output is the exact word count.
fn count_batch(batch: &[ConsumerRecord]) -> Vec<ProducerRecord> {
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for r in batch {
        for w in words(&text(&r.value)) {
            *counts.entry(w.to_string()).or_default() += 1;
        }
    }
    counts.into_iter().map(|(w, n)| ProducerRecord::new("counts", n.to_string()).key(w)).collect()
}

async fn sum_counts(b: &Broker, read_committed: bool) -> BTreeMap<String, u64> {
    let level = if read_committed { "read_committed" } else { "read_uncommitted" };
    let mut c = Consumer::new(&consumer_config(b).set("isolation.level", level)).unwrap();
    c.assign(&tps("counts", 4)).unwrap();
    let mut out: BTreeMap<String, u64> = BTreeMap::new();
    let mut idle = 0;
    while idle < 5 {
        let recs = c.poll(Duration::from_millis(200)).await.unwrap();
        idle = if recs.is_empty() { idle + 1 } else { 0 };
        for r in recs {
            *out.entry(text(&r.key)).or_default() += text(&r.value).parse::<u64>().unwrap();
        }
    }
    out
}

fn lines(n: usize) -> Vec<String> {
    let vocab = ["sluice", "gate", "log", "offset", "commit", "abort", "marker", "fence"];
    (0..n).map(|i| (0..1 + i % 5).map(|j| vocab[(i * 7 + j * 3) % vocab.len()]).collect::<Vec<_>>().join(" ")).collect()
}

async fn write_lines(b: &Broker, lines: &[String]) {
    let p = Producer::new(&producer_config(b)).await.unwrap();
    for (i, l) in lines.iter().enumerate() {
        p.send(ProducerRecord::new("lines", l.clone()).partition(i as i32 % 4)).await.unwrap();
    }
    p.close().await.unwrap();
}

fn eos_configs(b: &Broker, txn_id: &str) -> (ClientConfig, ClientConfig) {
    (
        consumer_config(b)
            .set("group.id", "wordcount")
            .set("max.poll.records", 40)
            .set("heartbeat.interval.ms", 200)
            .set("max.poll.interval.ms", 20_000),
        txn_config(b, txn_id),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_word_count_survives_an_abort_in_the_middle() {
    use sluice_client::{ExactlyOnce, Step};
    let b = broker();
    let input = lines(600);
    write_lines(&b, &input).await;
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for l in &input {
        for w in words(l) {
            *want.entry(w.to_string()).or_default() += 1;
        }
    }
    let (cc, pc) = eos_configs(&b, "wc-1");
    let mut eos = ExactlyOnce::new(&cc, &pc, &["lines"]).await.unwrap();
    let mut calls = 0;
    let mut aborted = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while eos.stats().inputs < input.len() as u64 && Instant::now() < deadline {
        let step = eos
            .step(|batch| {
                calls += 1;
                let mut out = count_batch(batch);
                if calls == 3 || calls == 7 {
                    // A poison output (a partition that does not exist) after real ones: the
                    // send fails, the transaction aborts, the batch is processed again.
                    out.push(ProducerRecord::new("counts", "1").partition(99));
                }
                Ok(out)
            })
            .await
            .unwrap();
        if let Step::Aborted(_) = step {
            aborted += 1;
        }
    }
    assert_eq!(aborted, 2, "both poisoned transactions aborted");
    assert_eq!(eos.stats().inputs, input.len() as u64, "every line processed once in committed transactions");
    let committed = eos.consumer().committed(&tps("lines", 4)).await.unwrap();
    assert_eq!(committed.values().sum::<i64>(), input.len() as i64, "input offsets committed in the transactions");
    eos.close().await.unwrap();
    assert_eq!(sum_counts(&b, true).await, want, "read_committed output = exact word counts");
    let dirty: u64 = sum_counts(&b, false).await.values().sum();
    assert!(dirty > want.values().sum::<u64>(), "the aborted outputs were written (and hidden from read_committed)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_zombie_is_fenced_and_stops() {
    use sluice_client::ExactlyOnce;
    let b = broker();
    let input = lines(200);
    write_lines(&b, &input[..100]).await;
    let (cc, pc) = eos_configs(&b, "wc-z");
    let mut zombie = ExactlyOnce::new(&cc, &pc, &["lines"]).await.unwrap();
    while zombie.stats().inputs < 100 {
        zombie.step(|batch| Ok(count_batch(batch))).await.unwrap();
    }
    // A replacement with the same transactional id starts (not yet polling).
    let mut fresh = ExactlyOnce::new(&cc, &pc, &["lines"]).await.unwrap();
    write_lines(&b, &input[100..]).await;
    let err = loop {
        match zombie.step(|batch| Ok(count_batch(batch))).await {
            Ok(_) => continue,
            Err(e) => break e,
        }
    };
    assert!(err.is_fatal(), "the zombie stops with a fatal error: {err}");
    drop(zombie);
    let deadline = Instant::now() + Duration::from_secs(60);
    while fresh.stats().inputs < 100 && Instant::now() < deadline {
        fresh.step(|batch| Ok(count_batch(batch))).await.unwrap();
    }
    fresh.close().await.unwrap();
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for l in &input {
        for w in words(l) {
            *want.entry(w.to_string()).or_default() += 1;
        }
    }
    assert_eq!(sum_counts(&b, true).await, want, "no loss and no duplicate across the takeover");
}

/// A produce refused by the broker fails with the broker's own explanation in the error (here
/// MESSAGE_TOO_LARGE against the topic's `max.message.bytes`), not the bare error code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_produce_carries_the_brokers_message() {
    use sluice_client::Admin;
    let b = broker();
    let admin = Admin::new(&ClientConfig::new().set("bootstrap.servers", b.bootstrap())).unwrap();
    admin.create_topic("small", 1, -1, &[("max.message.bytes", "1000")]).await.unwrap();
    let p = Producer::new(&producer_config(&b)).await.unwrap();
    let delivery = p.send(ProducerRecord::new("small", "x".repeat(5000))).await.unwrap();
    let err = delivery.await.expect_err("larger than max.message.bytes");
    assert_eq!(err.code(), Some(kafka_protocol::error::ResponseError::MessageTooLarge));
    assert!(err.to_string().contains("larger than max.message.bytes 1000"), "{err}");
    p.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_manages_topics_groups_and_transactions() {
    use sluice_client::Admin;
    let b = broker();
    let admin = Admin::new(&ClientConfig::new().set("bootstrap.servers", b.bootstrap())).unwrap();
    // Topics and configs.
    admin.create_topic("adm", 2, -1, &[("retention.ms", "3600000")]).await.unwrap();
    let err = admin.create_topic("adm", 2, -1, &[]).await.expect_err("exists");
    assert_eq!(err.code(), Some(kafka_protocol::error::ResponseError::TopicAlreadyExists));
    assert!(admin.list_topics().await.unwrap().contains(&"adm".to_string()));
    assert_eq!(admin.describe_topic("adm").await.unwrap().partitions.len(), 2);
    assert_eq!(admin.describe_topic_configs("adm").await.unwrap()["retention.ms"], "3600000");
    admin.alter_topic_configs("adm", &[("max.message.bytes", "2000000")], &["retention.ms"]).await.unwrap();
    let cfg = admin.describe_topic_configs("adm").await.unwrap();
    assert_eq!(cfg["max.message.bytes"], "2000000");
    assert_ne!(cfg["retention.ms"], "3600000", "override removed");
    admin.create_partitions("adm", 3).await.unwrap();
    assert_eq!(admin.describe_topic("adm").await.unwrap().partitions.len(), 3);
    assert!(admin.create_partitions("adm", 1).await.is_err(), "cannot shrink");
    let cl = admin.describe_cluster().await.unwrap();
    assert_eq!(cl.brokers.len(), 1);
    // Groups: a live member, its assignment, offsets.
    let p = Producer::new(&producer_config(&b)).await.unwrap();
    for i in 0..30 {
        p.send(ProducerRecord::new("adm", format!("{i}")).partition(i % 3)).await.unwrap();
    }
    p.flush().await.unwrap();
    let mut c = Consumer::new(&consumer_config(&b).set("group.id", "adm-g")).unwrap();
    c.subscribe(&["adm"]).unwrap();
    let mut n = 0;
    while n < 30 {
        n += c.poll(Duration::from_millis(200)).await.unwrap().len();
    }
    c.commit_sync().await.unwrap();
    let g = admin.describe_group("adm-g").await.unwrap();
    assert_eq!(g.state, "Stable");
    assert_eq!(g.members.len(), 1);
    assert_eq!(g.members[0].assignment.len(), 3);
    assert!(admin.list_groups().await.unwrap().iter().any(|l| l.group_id == "adm-g"));
    assert_eq!(admin.list_group_offsets("adm-g").await.unwrap().values().sum::<i64>(), 30);
    assert!(admin.delete_group("adm-g").await.is_err(), "a group with members cannot be deleted");
    c.close().await.unwrap();
    admin.alter_group_offsets("adm-g", &[("adm".into(), 0, 0)]).await.unwrap();
    assert_eq!(admin.list_group_offsets("adm-g").await.unwrap()[&("adm".to_string(), 0)], 0);
    admin.delete_group_offsets("adm-g", &[("adm".into(), 1)]).await.unwrap();
    assert!(!admin.list_group_offsets("adm-g").await.unwrap().contains_key(&("adm".to_string(), 1)));
    admin.delete_group("adm-g").await.unwrap();
    // Transactions: a hanging one, found and aborted from the admin client.
    let t = Producer::new(&txn_config(&b, "adm-tx").set("transaction.timeout.ms", 60_000)).await.unwrap();
    t.init_transactions().await.unwrap();
    t.begin_transaction().await.unwrap();
    t.send(ProducerRecord::new("adm", "open").partition(0)).await.unwrap();
    t.flush().await.unwrap();
    let listed = admin.list_transactions().await.unwrap();
    assert!(listed.iter().any(|l| l.transactional_id == "adm-tx" && l.state == "Ongoing"), "{listed:?}");
    let d = admin.describe_transaction("adm-tx").await.unwrap();
    assert_eq!(d.partitions, vec![("adm".to_string(), 0)]);
    let prods = admin.describe_producers("adm", 0).await.unwrap();
    let open = prods.iter().find(|s| s.current_txn_start_offset >= 0).expect("an open transaction");
    assert_eq!(open.producer_id, d.producer_id);
    admin
        .abort_transaction("adm", 0, open.producer_id, open.producer_epoch as i16, open.coordinator_epoch)
        .await
        .unwrap();
    assert!(admin.describe_producers("adm", 0).await.unwrap().iter().all(|s| s.current_txn_start_offset < 0));
    admin.delete_topic("adm").await.unwrap();
    assert!(!admin.list_topics().await.unwrap().contains(&"adm".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_stays_correct_against_a_broker_that_ignores_the_lso() {
    // A deliberately broken broker: read_committed fetches go up to the high watermark.
    let b = Broker::start_with(&["--num-partitions", "1", "--testing-failpoints", "fetch.ignore_lso"]);
    let plain = Producer::new(&producer_config(&b)).await.unwrap();
    plain.send(ProducerRecord::new("nolso", "before")).await.unwrap().await.unwrap();
    let open = Producer::new(&txn_config(&b, "nolso-open")).await.unwrap();
    open.init_transactions().await.unwrap();
    open.begin_transaction().await.unwrap();
    open.send(ProducerRecord::new("nolso", "open-1")).await.unwrap();
    open.flush().await.unwrap();
    plain.send(ProducerRecord::new("nolso", "after")).await.unwrap().await.unwrap();
    // librdkafka trusts the broker's bound: it hands out the open transaction's record.
    let bootstrap = b.bootstrap();
    let rd = tokio::task::spawn_blocking(move || rdkafka_read(&bootstrap, "nolso", 1, true, 3)).await.unwrap();
    assert!(rd.contains(&"open-1".to_string()), "the broker really is broken: {rd:?}");
    // Ours holds it until the marker, and everything after it too.
    let mut c = Consumer::new(&consumer_config(&b).set("isolation.level", "read_committed")).unwrap();
    c.assign(&tps("nolso", 1)).unwrap();
    let mut got: Vec<String> = Vec::new();
    for _ in 0..10 {
        got.extend(c.poll(Duration::from_millis(100)).await.unwrap().iter().map(|r| text(&r.value)));
    }
    assert_eq!(got, ["before"], "nothing at or after an undecided transaction is released");
    open.abort_transaction().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < 2 && Instant::now() < deadline {
        got.extend(c.poll(Duration::from_millis(100)).await.unwrap().iter().map(|r| text(&r.value)));
    }
    got.extend(c.poll(Duration::from_millis(300)).await.unwrap().iter().map(|r| text(&r.value)));
    assert_eq!(got, ["before", "after"], "the aborted record never appears");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seek_pause_resume_and_async_commit() {
    let b = broker();
    let p = Producer::new(&producer_config(&b)).await.unwrap();
    for i in 0..20 {
        p.send(ProducerRecord::new("ctl", format!("{i}")).partition(i % 2)).await.unwrap();
    }
    p.flush().await.unwrap();
    let mut c =
        Consumer::new(&consumer_config(&b).set("group.id", "ctl-g").set("enable.auto.commit", "false")).unwrap();
    c.assign(&tps("ctl", 2)).unwrap();
    let p0 = ("ctl".to_string(), 0);
    let p1 = ("ctl".to_string(), 1);
    c.pause(std::slice::from_ref(&p1));
    let mut got = Vec::new();
    for _ in 0..5 {
        got.extend(c.poll(Duration::from_millis(100)).await.unwrap());
    }
    assert!(got.iter().all(|r| r.partition == 0) && got.len() == 10, "paused partition is not fetched");
    c.resume(std::slice::from_ref(&p1));
    c.seek(&p0, 7).unwrap();
    let mut more = Vec::new();
    for _ in 0..5 {
        more.extend(c.poll(Duration::from_millis(100)).await.unwrap());
    }
    let p0_offsets: Vec<i64> = more.iter().filter(|r| r.partition == 0).map(|r| r.offset).collect();
    assert_eq!(p0_offsets, [7, 8, 9], "seek rewinds");
    assert_eq!(more.iter().filter(|r| r.partition == 1).count(), 10, "resumed partition is read");
    assert_eq!(c.position(&p1), Some(10));
    c.commit_async().await.unwrap().unwrap();
    let committed = c.committed(&tps("ctl", 2)).await.unwrap();
    assert_eq!((committed[&p0], committed[&p1]), (10, 10));
    c.seek_to(std::slice::from_ref(&p0), true).await.unwrap();
    assert_eq!(c.position(&p0), Some(0));
    assert!(c.seek(&("other".into(), 0), 1).is_err(), "seek on an unassigned partition is refused");
}
