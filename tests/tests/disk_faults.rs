//! Disk faults (issue 22) against a real broker process, read by librdkafka:
//! - a bit flipped at rest in a closed segment (below the recovery point, where nothing re-checks
//!   at start) is never served: the consumer, checking CRCs itself, gets every record before
//!   the damaged batch and nothing from it on; the partition goes offline (KAFKA_STORAGE_ERROR),
//!   the broker logs it once and counts it in its metrics;
//! - an fsync that fails (EIO, from `lossyfs`) is never followed by an acknowledgement of the
//!   data it covered: the produce fails, the partition goes offline, and after a power cut the
//!   unacknowledged records are gone while the acknowledged ones stay;
//! - a zeroed page in a closed segment is never served either, and nothing is cut; a rotted
//!   length field under an index entry, found at start, keeps every byte (it used to cut the
//!   segment and delete every later one) and starts the partition offline;
//! - a bit flipped in the active segment below its recovery point, found by the start after a
//!   kill -9, is kept (it used to be cut as a torn tail, with every record after it);
//! - a bit flipped in a consumer-offsets shard's log takes that shard offline, not the broker,
//!   and its group's committed offset is never answered as "none"; the same for a transaction
//!   log shard, whose ids cannot initialize (their epochs would start again).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use sluice_tests::lossyfs::{skip_without_fuse, Mount};
use sluice_tests::{free_port, Broker};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Counts acknowledged sends.
struct Count(Arc<AtomicUsize>);
impl ClientContext for Count {}
impl ProducerContext for Count {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
        if r.is_ok() {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

fn scrape(port: u16) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body
}

fn metric(body: &str, series: &str) -> Option<f64> {
    body.lines().find(|l| l.starts_with(series)).and_then(|l| l.rsplit(' ').next()).and_then(|v| v.parse().ok())
}

/// Record `i`'s value: 500 bytes, so a few thousand fill more than one 1 MiB segment.
fn value(i: usize) -> String {
    format!("v{i:06}-{}", "x".repeat(492))
}

fn produce(bootstrap: &str, topic: &str, from: usize, n: usize) {
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "2")
        .set("batch.num.messages", "20")
        .create()
        .unwrap();
    for i in from..from + n {
        let v = value(i);
        let mut rec = BaseRecord::<(), _>::to(topic).partition(0).payload(&v);
        while let Err((_, r)) = p.send(rec) {
            rec = r;
            p.poll(Duration::from_millis(5));
        }
    }
    p.flush(Duration::from_secs(30)).unwrap();
}

/// What librdkafka (checking CRCs itself) reads from partition 0 within `wait`, and the errors
/// it reports.
fn consume(bootstrap: &str, topic: &str, wait: Duration) -> (Vec<String>, Vec<String>) {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "df")
        .set("enable.auto.commit", "false")
        .set("check.crcs", "true")
        .set("enable.partition.eof", "true")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning).unwrap();
    c.assign(&tpl).unwrap();
    let (mut values, mut errors) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline {
        match c.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => values.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned()),
            Some(Err(KafkaError::PartitionEOF(_))) => break,
            Some(Err(e)) => errors.push(e.to_string()),
            None => {}
        }
    }
    (values, errors)
}

/// The error code of a Fetch of partition 0 at `offset`.
fn fetch_error(bootstrap: &str, topic: &str, offset: i64) -> i16 {
    fetch(bootstrap, topic, offset).0
}

/// A Fetch of partition 0 at `offset`: its error code and how many of the batches served fail
/// their CRC.
fn fetch(bootstrap: &str, topic: &str, offset: i64) -> (i16, usize) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let conn = sluice_client::Connection::connect(bootstrap, "df", 1).await.unwrap();
        let mut fp = fetch_request::FetchPartition::default();
        fp.fetch_offset = offset;
        fp.partition_max_bytes = 1 << 20;
        let mut ft = fetch_request::FetchTopic::default();
        ft.topic = TopicName(StrBytes::from_string(topic.to_string()));
        ft.partitions = vec![fp];
        let mut f = FetchRequest::default();
        f.replica_id = BrokerId(-1);
        f.max_bytes = 1 << 20;
        f.topics = vec![ft];
        match conn.call(ApiKey::Fetch, 11, RequestKind::Fetch(f)).await.unwrap() {
            ResponseKind::Fetch(r) => {
                let p = &r.responses[0].partitions[0];
                let bytes = p.records.clone().unwrap_or_default();
                let (mut pos, mut bad) = (0, 0);
                while pos < bytes.len() {
                    let Ok(b) = sluice_protocol::batch::BatchView::parse_unchecked_crc(&bytes[pos..]) else { break };
                    bad += usize::from(b.crc() != b.compute_crc());
                    pos += b.size();
                }
                (p.error_code, bad)
            }
            other => panic!("{other:?}"),
        }
    })
}

/// FindCoordinator (v3, one key) for a group (0) or transactional id (1): its error code.
fn find_coordinator_error(bootstrap: &str, key: &str, key_type: i8) -> i16 {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let conn = sluice_client::Connection::connect(bootstrap, "df", 1).await.unwrap();
        let mut r = FindCoordinatorRequest::default();
        r.key = StrBytes::from_string(key.to_string());
        r.key_type = key_type;
        match conn.call(ApiKey::FindCoordinator, 3, RequestKind::FindCoordinator(r)).await.unwrap() {
            ResponseKind::FindCoordinator(r) => r.error_code,
            other => panic!("{other:?}"),
        }
    })
}

/// Byte positions of the batches in a segment file.
fn batch_starts(file: &Path) -> Vec<usize> {
    let bytes = std::fs::read(file).unwrap();
    sluice_protocol::batch::iter_batches(&bytes).map(|b| b.unwrap().0).collect()
}

#[test]
fn a_bit_flipped_at_rest_in_a_closed_segment_is_never_served_and_the_partition_goes_offline() {
    let mport = free_port();
    // (the read path alone: the scrubber would find the damage first and take the partition
    // offline before the good prefix is read)
    let mut b = Broker::start_with(&[
        "--log-segment-bytes",
        "1048576",
        "--metrics-listener",
        &format!("127.0.0.1:{mport}"),
        "--log-scrub-bytes-per-second",
        "0",
    ]);
    produce(&b.bootstrap(), "df", 0, 3000);
    assert_eq!(b.stop(), Some(0), "clean stop: the next start scans nothing");
    let dir = b.data_dir.join("df-0");
    let first = dir.join("00000000000000000000.log");
    let starts = batch_starts(&first);
    assert!(starts.len() > 4, "the first segment holds several batches: {starts:?}");
    // a record byte in the middle batch (past its 61-byte header)
    let victim = starts.len() / 2;
    let bytes = std::fs::read(&first).unwrap();
    let header: [u8; 8] = bytes[starts[victim]..starts[victim] + 8].try_into().unwrap();
    let bad_offset = i64::from_be_bytes(header);
    sluice_tests::lossyfs::corrupt(&first, "flip", (starts[victim] + 70) as u64, 3).unwrap();
    b.spawn();

    let (values, errors) = consume(&b.bootstrap(), "df", Duration::from_secs(8));
    let want: Vec<String> = (0..bad_offset as usize).map(value).collect();
    assert!(
        values == want,
        "exactly the {} records before the damaged batch (offset {bad_offset}); got {} ({:.8?} .. {:.8?}), errors {errors:?}",
        want.len(),
        values.len(),
        values.first(),
        values.last()
    );
    assert!(
        !errors.iter().any(|e| e.to_lowercase().contains("crc")),
        "the consumer met a CRC error: the broker served damaged bytes: {errors:?}"
    );
    // the damaged batch itself, asked for directly: refused, no damaged byte served
    assert_eq!(
        fetch(&b.bootstrap(), "df", bad_offset),
        (56, 0),
        "a fetch at the damaged batch: KAFKA_STORAGE_ERROR, nothing served"
    );
    assert_eq!(fetch_error(&b.bootstrap(), "df", 0), 56, "KAFKA_STORAGE_ERROR once offline, even below the damage");
    let log = std::fs::read_to_string(b.data_dir.with_extension("log")).unwrap();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("is offline: damaged data")).collect();
    assert_eq!(lines.len(), 1, "one log line names the damage: {lines:?}");
    assert!(lines[0].contains("00000000000000000000.log") && lines[0].contains("df-0"), "{}", lines[0]);
    std::thread::sleep(Duration::from_millis(1500)); // gauges refresh every second
    let body = scrape(mport);
    assert_eq!(metric(&body, "sluice_storage_corruptions_total{topic=\"df\"}"), Some(1.0), "{body}");
    assert_eq!(metric(&body, "sluice_partition_offline{topic=\"df\",partition=\"0\"}"), Some(1.0));
    assert!(b.panics().is_empty(), "{}", b.panics());
}

/// The `.log` files of a partition directory with their sizes, by name.
fn segment_sizes(dir: &Path) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.metadata().unwrap().len()))
        .collect();
    out.sort();
    out
}

/// A zeroed 4 KiB page in a closed segment (page-aligned, as a lost or unwritten page reads
/// back). Wherever it falls it is never served: the consumer gets at most the records before
/// the first damaged batch, never a CRC error, a fetch there gets KAFKA_STORAGE_ERROR, the
/// broker says so in one line, and nothing is cut: every segment keeps its size.
#[test]
fn a_zeroed_page_in_a_closed_segment_is_never_served_and_nothing_is_cut() {
    let mut b = Broker::start_with(&["--log-segment-bytes", "1048576"]);
    produce(&b.bootstrap(), "zp", 0, 3000);
    assert_eq!(b.stop(), Some(0));
    let dir = b.data_dir.join("zp-0");
    let first = dir.join("00000000000000000000.log");
    let starts = batch_starts(&first);
    let bytes = std::fs::read(&first).unwrap();
    let page = (bytes.len() / 2) / 4096 * 4096;
    let victim = starts.iter().rposition(|s| *s <= page).unwrap();
    let header: [u8; 8] = bytes[starts[victim]..starts[victim] + 8].try_into().unwrap();
    let bad_offset = i64::from_be_bytes(header);
    let sizes = segment_sizes(&dir);
    assert!(sizes.len() >= 2, "a closed segment and a later one: {sizes:?}");
    sluice_tests::lossyfs::corrupt(&first, "zero", page as u64, 4096).unwrap();
    b.spawn();
    let (values, errors) = consume(&b.bootstrap(), "zp", Duration::from_secs(8));
    let before: Vec<String> = (0..bad_offset as usize).map(value).collect();
    assert!(
        values.len() <= before.len() && values[..] == before[..values.len()],
        "only records before the damaged batch (offset {bad_offset}): got {} ({:.8?} .. {:.8?})",
        values.len(),
        values.first(),
        values.last()
    );
    assert!(!errors.iter().any(|e| e.to_lowercase().contains("crc")), "damaged bytes served: {errors:?}");
    assert_eq!(fetch(&b.bootstrap(), "zp", bad_offset), (56, 0), "a fetch at the damaged batch");
    let log = std::fs::read_to_string(b.data_dir.with_extension("log")).unwrap();
    let said: Vec<&str> =
        log.lines().filter(|l| l.contains("is offline: damaged data") || l.contains("nothing is cut")).collect();
    assert_eq!(said.len(), 1, "one line names the damage: {said:?}");
    assert!(said[0].contains("00000000000000000000.log"), "{}", said[0]);
    assert!(b.panics().is_empty(), "{}", b.panics());
    assert_eq!(b.stop(), Some(0));
    assert_eq!(segment_sizes(&dir), sizes, "nothing cut, no segment deleted");
}

/// A rotted length field in the batch a closed segment's offset index names: the clean start's
/// index check fails there. The start used to recover the segment like a torn tail — cut at the
/// damage, every later segment deleted: all 3,000 acknowledged records gone. Now the broker
/// keeps every byte and starts with the partition offline (decision 0037); once the byte is
/// restored (as an operator restores a copy), every record is served again.
#[test]
fn a_damaged_header_found_at_start_keeps_every_byte_and_the_partition_offline() {
    let mut b = Broker::start_with(&["--log-segment-bytes", "1048576"]);
    produce(&b.bootstrap(), "dh", 0, 3000);
    assert_eq!(b.stop(), Some(0));
    let dir = b.data_dir.join("dh-0");
    let first = dir.join("00000000000000000000.log");
    let sizes = segment_sizes(&dir);
    assert!(sizes.len() >= 2, "{sizes:?}");
    // a batch the offset index names (entries: relative offset, position; 4 bytes each, big
    // endian); bit 6 of its length's top byte
    let index = std::fs::read(dir.join("00000000000000000000.index")).unwrap();
    let at = index
        .chunks_exact(8)
        .map(|e| u32::from_be_bytes(e[4..8].try_into().unwrap()) as u64)
        .find(|p| *p > 0)
        .expect("an index entry past the first batch");
    sluice_tests::lossyfs::corrupt(&first, "flip", at + 8, 6).unwrap();
    b.spawn();
    assert_eq!(fetch_error(&b.bootstrap(), "dh", 0), 56, "offline from the start");
    let (values, errors) = consume(&b.bootstrap(), "dh", Duration::from_secs(5));
    assert!(values.is_empty(), "nothing served: {} records", values.len());
    assert!(!errors.iter().any(|e| e.to_lowercase().contains("crc")), "{errors:?}");
    let log = std::fs::read_to_string(b.data_dir.with_extension("log")).unwrap();
    assert!(
        log.contains(&format!("is damaged at byte {at}")) && log.contains("nothing is cut"),
        "the start names the damage: {}",
        log.lines().filter(|l| l.contains("dh-0") || l.contains("ERROR")).collect::<Vec<_>>().join("\n")
    );
    assert!(b.panics().is_empty(), "{}", b.panics());
    assert_eq!(b.stop(), Some(0));
    assert_eq!(segment_sizes(&dir), sizes, "nothing cut, no segment deleted");
    // the operator restores the byte: everything is there
    sluice_tests::lossyfs::corrupt(&first, "flip", at + 8, 6).unwrap();
    b.spawn();
    let (values, _) = consume(&b.bootstrap(), "dh", Duration::from_secs(8));
    assert_eq!(values, (0..3000).map(value).collect::<Vec<_>>(), "every acknowledged record");
}

/// A bit flipped in the *active* segment, below its recovery point, found when the broker
/// starts after a kill -9. The start scans that segment (it may end in a torn write) and used
/// to take any damage there for a torn tail: everything from the damaged batch on — records
/// acknowledged long before the crash — was cut, silently. The recovery point says those bytes
/// were synced, so now the damage is kept and the partition starts offline (one line); once
/// the byte is restored, all 1,200 acknowledged records are served.
#[test]
fn damage_in_the_active_segment_below_its_recovery_point_is_kept_after_a_crash() {
    let mut b = Broker::start_with(&["--log-segment-bytes", "1048576", "--log-scrub-bytes-per-second", "0"]);
    produce(&b.bootstrap(), "ar", 0, 1000);
    // a clean stop and start: the recovery point is offset 1000
    assert_eq!(b.stop(), Some(0));
    b.spawn();
    produce(&b.bootstrap(), "ar", 1000, 200);
    b.kill9();
    let dir = b.data_dir.join("ar-0");
    let sizes = segment_sizes(&dir);
    assert_eq!(sizes.len(), 1, "one segment, the active one: {sizes:?}");
    let active = dir.join(&sizes[0].0);
    let bytes = std::fs::read(&active).unwrap();
    let base = |at: usize| i64::from_be_bytes(bytes[at..at + 8].try_into().unwrap());
    let starts = batch_starts(&active);
    let victim = starts.iter().rposition(|s| base(*s) <= 500).unwrap();
    assert!(base(starts[victim + 1]) < 1000, "the damaged batch is well below the recovery point");
    sluice_tests::lossyfs::corrupt(&active, "flip", (starts[victim] + 70) as u64, 2).unwrap();
    b.spawn();
    assert_eq!(fetch_error(&b.bootstrap(), "ar", 0), 56, "offline from the start");
    let log = std::fs::read_to_string(b.data_dir.with_extension("log")).unwrap();
    assert!(
        log.contains(&format!("is damaged at byte {}", starts[victim])) && log.contains("below the recovery point"),
        "the start names the damage: {}",
        log.lines().filter(|l| l.contains("ar-0") || l.contains("ERROR")).collect::<Vec<_>>().join("\n")
    );
    assert!(b.panics().is_empty(), "{}", b.panics());
    assert_eq!(b.stop(), Some(0));
    assert_eq!(segment_sizes(&dir), sizes, "nothing cut");
    // the operator restores the byte: everything acknowledged is there
    sluice_tests::lossyfs::corrupt(&active, "flip", (starts[victim] + 70) as u64, 2).unwrap();
    b.spawn();
    let (values, _) = consume(&b.bootstrap(), "ar", Duration::from_secs(8));
    assert_eq!(values, (0..1200).map(value).collect::<Vec<_>>(), "every acknowledged record");
}

#[test]
fn an_fsync_that_fails_is_never_followed_by_an_acknowledgement() {
    if skip_without_fuse("disk_faults::fsync_eio") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (disk, mnt) = (tmp.path().join("disk"), tmp.path().join("mnt"));
    let mut fs = Mount::start(&disk, &mnt);
    let mut b = Broker::start_in(mnt.clone(), &[]);
    produce(&b.bootstrap(), "eio", 0, 100);
    fs.command("fail-fsync eio-0/ 1").unwrap();
    // acks=all: the produce waits for an fsync, which fails
    let acked = Arc::new(AtomicUsize::new(0));
    let p: BaseProducer<Count> = ClientConfig::new()
        .set("bootstrap.servers", b.bootstrap())
        .set("message.timeout.ms", "6000")
        .create_with_context(Count(acked.clone()))
        .unwrap();
    for i in 100..110 {
        let v = value(i);
        p.send(BaseRecord::<(), _>::to("eio").partition(0).payload(&v)).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while p.in_flight_count() > 0 && Instant::now() < deadline {
        p.poll(Duration::from_millis(100));
    }
    assert_eq!(p.in_flight_count(), 0, "every send was answered (failed) within its message timeout");
    assert_eq!(acked.load(Ordering::SeqCst), 0, "no send after the failed fsync was acknowledged");
    let status = fs.command("status").unwrap();
    assert!(status.contains("failed_fsyncs=1"), "{status}");
    assert_eq!(fetch_error(&b.bootstrap(), "eio", 0), 56, "offline after the failed fsync");
    let (values, _) = consume(&b.bootstrap(), "eio", Duration::from_secs(3));
    assert!(values.len() <= 100, "nothing written after the failed fsync was served: {}", values.len());
    // power cut, restart on what was synced
    b.kill9();
    fs.cut("all", 1);
    let _fs = Mount::start(&disk, &mnt);
    b.spawn();
    let (values, errors) = consume(&b.bootstrap(), "eio", Duration::from_secs(10));
    let want: Vec<String> = (0..100).map(value).collect();
    assert!(
        values == want,
        "acknowledged records stay, unacknowledged ones are gone: {} read ({:.8?} .. {:.8?}), errors {errors:?}",
        values.len(),
        values.first(),
        values.last()
    );
}

/// Flip a bit in the middle of the first batch of the one `prefix`-N shard directory with data
/// (the broker stopped); that directory.
fn damage_the_shard_with_data(data_dir: &Path, prefix: &str, seed: u64) -> std::path::PathBuf {
    let shards: Vec<_> = std::fs::read_dir(data_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .filter(|p| std::fs::metadata(p.join("00000000000000000000.log")).is_ok_and(|m| m.len() > 0))
        .collect();
    assert_eq!(shards.len(), 1, "{shards:?}");
    let file = shards[0].join("00000000000000000000.log");
    let size = std::fs::metadata(&file).unwrap().len() as usize;
    let end = batch_starts(&file).get(1).copied().unwrap_or(size);
    assert!(end > 70, "a batch with records: {end} bytes");
    sluice_tests::lossyfs::corrupt(&file, "flip", ((61 + end) / 2) as u64, seed).unwrap();
    shards[0].clone()
}

/// A consumer with `group` committing `offset` for `topic`/0, then reading it back; the
/// committed offset it reads, or the error.
fn commit_and_read_back(bootstrap: &str, group: &str, topic: &str, offset: Option<i64>) -> Result<Offset, String> {
    use rdkafka::consumer::CommitMode;
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, 0);
    if let Some(o) = offset {
        tpl.set_partition_offset(topic, 0, Offset::Offset(o)).unwrap();
        c.commit(&tpl, CommitMode::Sync).map_err(|e| e.to_string())?;
    }
    let got = c.committed_offsets(tpl, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    let e = got.elements_for_topic(topic);
    match e.first() {
        Some(e) if e.error().is_err() => Err(format!("{:?}", e.error())),
        Some(e) => Ok(e.offset()),
        None => Err("no partition in the answer".into()),
    }
}

/// A flipped bit in a consumer-offsets shard's log: the broker still starts (it refused to
/// before), the damaged shard is offline — its group's committed offset is never answered
/// wrong or as missing (which would send its consumers back to the start) — every other
/// shard serves, and one log line names it.
#[test]
fn a_damaged_coordinator_log_takes_its_shard_offline_not_the_broker() {
    let mut b = Broker::start_with(&[]);
    produce(&b.bootstrap(), "cg", 0, 10);
    assert_eq!(commit_and_read_back(&b.bootstrap(), "ga", "cg", Some(7)), Ok(Offset::Offset(7)));
    assert_eq!(b.stop(), Some(0));
    // the one offsets shard with data is group ga's
    let shard = damage_the_shard_with_data(&b.data_dir, "__consumer_offsets-", 2);
    b.spawn();
    // another group, on another shard, commits and reads back
    let other = (0..20)
        .map(|i| format!("other-{i}"))
        .find(|g| commit_and_read_back(&b.bootstrap(), g, "cg", Some(3)) == Ok(Offset::Offset(3)));
    assert!(other.is_some(), "no other group could commit: {}", b.log_tail());
    // ga's committed offset: an error, never a wrong one nor "none"
    // FindCoordinator does not name a broker that cannot serve the group:
    // COORDINATOR_NOT_AVAILABLE (15), as Kafka answers for an offline coordinator partition
    assert_eq!(find_coordinator_error(&b.bootstrap(), "ga", 0), 15);
    assert_eq!(find_coordinator_error(&b.bootstrap(), other.as_deref().unwrap_or_default(), 0), 0);
    let ga = commit_and_read_back(&b.bootstrap(), "ga", "cg", None);
    let log = std::fs::read_to_string(b.data_dir.with_extension("log")).unwrap();
    assert!(ga.is_err(), "the damaged shard answered {ga:?}; broker log:\n{log}");
    let shard = shard.file_name().unwrap().to_string_lossy().trim_start_matches("__consumer_offsets-").to_string();
    let lines: Vec<&str> =
        log.lines().filter(|l| l.contains(&format!("offsets-log shard {shard} is offline"))).collect();
    assert_eq!(lines.len(), 1, "one log line: {lines:?}");
    assert!(lines[0].contains("00000000000000000000.log"), "it names the file: {}", lines[0]);
    assert!(b.panics().is_empty(), "{}", b.panics());
}

/// `InitProducerId` for `id` with librdkafka, then (if `commit`) one committed transaction.
fn init_and_commit(bootstrap: &str, id: &str, commit: bool) -> Result<(), String> {
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("transactional.id", id)
        .create()
        .map_err(|e| e.to_string())?;
    p.init_transactions(Duration::from_secs(8)).map_err(|e| e.to_string())?;
    if commit {
        p.begin_transaction().map_err(|e| e.to_string())?;
        let v = value(0);
        p.send(BaseRecord::<(), _>::to("tx").partition(0).payload(&v)).map_err(|(e, _)| e.to_string())?;
        p.commit_transaction(Duration::from_secs(10)).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The same for the transaction log: a flipped bit in the one shard with data. The broker
/// starts; another transactional id initializes and commits; the damaged shard's id cannot
/// initialize (loading an empty state instead would hand it epoch 0 again, and a zombie of it
/// would no longer be fenced); one log line names the shard.
#[test]
fn a_damaged_transaction_log_takes_its_shard_offline_not_the_broker() {
    let mut b = Broker::start_with(&[]);
    init_and_commit(&b.bootstrap(), "ta", true).unwrap();
    assert_eq!(b.stop(), Some(0));
    let shard = damage_the_shard_with_data(&b.data_dir, "__transaction_state-", 5);
    b.spawn();
    let other = (0..20).map(|i| format!("other-{i}")).find(|id| init_and_commit(&b.bootstrap(), id, true).is_ok());
    assert!(other.is_some(), "no other transactional id could commit: {}", b.log_tail());
    assert_eq!(find_coordinator_error(&b.bootstrap(), "ta", 1), 15, "COORDINATOR_NOT_AVAILABLE");
    assert_eq!(find_coordinator_error(&b.bootstrap(), other.as_deref().unwrap_or_default(), 1), 0);
    let ta = init_and_commit(&b.bootstrap(), "ta", false);
    let log = std::fs::read_to_string(b.data_dir.with_extension("log")).unwrap();
    assert!(ta.is_err(), "the damaged shard initialized its id again; broker log:\n{log}");
    let shard = shard.file_name().unwrap().to_string_lossy().trim_start_matches("__transaction_state-").to_string();
    let lines: Vec<&str> =
        log.lines().filter(|l| l.contains(&format!("transaction-log shard {shard} is offline"))).collect();
    assert_eq!(lines.len(), 1, "one log line: {lines:?}");
    assert!(b.panics().is_empty(), "{}", b.panics());
}
