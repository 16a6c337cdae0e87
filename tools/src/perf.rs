//! `sluicectl perf produce|consume`: an end-to-end load generator over one pipelined
//! connection, with random payloads (zero-filled data flatters disks and compressors), a live
//! progress line on stderr, and a summary with throughput and request latency percentiles.

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use rand::RngCore;
use sluice_client::Connection;
use sluice_protocol::batch::{BatchBuilder, BatchView, NewRecord};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, clap::Args)]
pub struct ProduceArgs {
    #[arg(long)]
    pub topic: String,
    #[arg(long, default_value_t = 1_000_000)]
    pub num_records: u64,
    #[arg(long, default_value_t = 1024)]
    pub record_size: usize,
    /// Records per batch (what a client's linger/batch.size would gather).
    #[arg(long, default_value_t = 64)]
    pub batch_records: usize,
    /// Partitions to create the topic with if it does not exist.
    #[arg(long, default_value_t = 1)]
    pub partitions: i32,
    /// -1 (all), 1 or 0.
    #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
    pub acks: i16,
    /// Produce requests in flight on the connection (librdkafka's default is 5).
    #[arg(long, default_value_t = 5)]
    pub inflight: usize,
    /// Idempotent producer: InitProducerId, then a sequence per partition in every batch.
    /// (Both modes re-stamp each batch header and CRC, so the client does the same work.)
    #[arg(long)]
    pub idempotent: bool,
}

/// `perf txn`: the produce load inside transactions.
#[derive(Debug, Clone, clap::Args)]
pub struct TxnArgs {
    #[command(flatten)]
    pub produce: ProduceArgs,
    #[arg(long, default_value = "sluicectl-perf-txn")]
    pub transactional_id: String,
    /// Commit every this many milliseconds (waiting for the transaction's records first).
    #[arg(long, default_value_t = 100)]
    pub commit_interval_ms: u64,
}

#[derive(Debug, Clone, clap::Args)]
pub struct ConsumeArgs {
    #[arg(long)]
    pub topic: String,
    #[arg(long, default_value_t = 1_000_000)]
    pub num_records: u64,
    #[arg(long, default_value_t = 0)]
    pub isolation_level: i8,
}

#[derive(Debug, serde::Serialize)]
pub struct Summary {
    pub records: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub records_per_sec: f64,
    pub mib_per_sec: f64,
    pub latency_ms_p50: f64,
    pub latency_ms_p99: f64,
    pub latency_ms_p999: f64,
    pub latency_ms_max: f64,
    /// Request latency histogram: (upper bound in ms, requests); the last bucket is unbounded.
    pub latency_histogram: Vec<(String, u64)>,
    /// `perf txn`: transactions committed and EndTxn latency percentiles.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commits: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit_ms_p50: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit_ms_p99: Option<f64>,
}

impl Summary {
    fn new(records: u64, bytes: u64, seconds: f64, mut latencies_us: Vec<u64>) -> Summary {
        latencies_us.sort_unstable();
        Summary {
            records,
            bytes,
            seconds,
            records_per_sec: records as f64 / seconds,
            mib_per_sec: bytes as f64 / seconds / 1048576.0,
            latency_ms_p50: percentile(&latencies_us, 0.5),
            latency_ms_p99: percentile(&latencies_us, 0.99),
            latency_ms_p999: percentile(&latencies_us, 0.999),
            latency_ms_max: latencies_us.last().map(|l| *l as f64 / 1000.0).unwrap_or(0.0),
            latency_histogram: histogram(&latencies_us),
            commits: None,
            commit_ms_p50: None,
            commit_ms_p99: None,
        }
    }
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// Latency buckets (ms upper bounds) of sorted microsecond samples.
fn histogram(sorted_us: &[u64]) -> Vec<(String, u64)> {
    const BOUNDS_MS: [u64; 10] = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000];
    let mut out = Vec::new();
    let mut below = 0usize;
    for b in BOUNDS_MS {
        let upto = sorted_us.partition_point(|us| *us <= b * 1000);
        out.push((format!("<={b}"), (upto - below) as u64));
        below = upto;
    }
    out.push((">1000".to_string(), (sorted_us.len() - below) as u64));
    out
}

fn percentile(sorted_us: &[u64], p: f64) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    let i = ((sorted_us.len() as f64 - 1.0) * p).round() as usize;
    sorted_us[i.min(sorted_us.len() - 1)] as f64 / 1000.0
}

/// Partition count of `topic`, creating it with `create_partitions` if it does not exist.
pub async fn ensure_topic(conn: &Connection, topic: &str, create_partitions: i32) -> Result<i32> {
    let mut t = metadata_request::MetadataRequestTopic::default();
    t.name = Some(name(topic));
    let mut r = MetadataRequest::default();
    r.topics = Some(vec![t]);
    r.allow_auto_topic_creation = false; // create it below with the partitions asked for
    let ResponseKind::Metadata(m) = conn.call(ApiKey::Metadata, 9, RequestKind::Metadata(r)).await? else {
        bail!("unexpected response to Metadata");
    };
    if let Some(t) = m.topics.first() {
        if t.error_code == 0 && !t.partitions.is_empty() {
            return Ok(t.partitions.len() as i32);
        }
    }
    let mut ct = create_topics_request::CreatableTopic::default();
    ct.name = name(topic);
    ct.num_partitions = create_partitions;
    ct.replication_factor = -1;
    let mut r = CreateTopicsRequest::default();
    r.topics = vec![ct];
    r.timeout_ms = 30_000;
    let ResponseKind::CreateTopics(c) = conn.call(ApiKey::CreateTopics, 5, RequestKind::CreateTopics(r)).await? else {
        bail!("unexpected response to CreateTopics");
    };
    match c.topics.first().map(|t| t.error_code) {
        Some(0) | Some(36) => Ok(create_partitions),
        Some(code) => Err(anyhow!("cannot create topic {topic}: error code {code}")),
        None => Err(anyhow!("empty CreateTopics response")),
    }
}

fn progress(done: Arc<AtomicU64>, bytes: Arc<AtomicU64>, stop: Arc<AtomicBool>, what: &'static str) {
    std::thread::spawn(move || {
        let start = Instant::now();
        let (mut last_n, mut last_t) = (0u64, Instant::now());
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(250));
            if last_t.elapsed() >= Duration::from_secs(1) {
                let n = done.load(Ordering::Relaxed);
                let rate = (n - last_n) as f64 / last_t.elapsed().as_secs_f64();
                eprint!(
                    "\r{what}: {n} records, {rate:.0} records/s now, {:.1} MiB total, {:.0}s   ",
                    bytes.load(Ordering::Relaxed) as f64 / 1048576.0,
                    start.elapsed().as_secs_f64()
                );
                last_n = n;
                last_t = Instant::now();
            }
        }
        eprintln!();
    });
}

async fn call_ok(conn: &Connection, key: ApiKey, version: i16, body: RequestKind) -> Result<ResponseKind> {
    let resp = conn.call(key, version, body).await?;
    let code = match &resp {
        ResponseKind::InitProducerId(r) => r.error_code,
        ResponseKind::EndTxn(r) => r.error_code,
        ResponseKind::AddPartitionsToTxn(r) => r
            .results_by_topic_v3_and_below
            .iter()
            .flat_map(|t| t.results_by_partition.iter().map(|p| p.partition_error_code))
            .find(|c| *c != 0)
            .unwrap_or(0),
        ResponseKind::FindCoordinator(r) => r.error_code,
        _ => 0,
    };
    if code != 0 {
        bail!("{key:?} failed with error code {code}");
    }
    Ok(resp)
}

/// Transactional producer state for `perf txn`.
struct Txn {
    id: String,
    interval: Duration,
    commits: Vec<u64>,
}

impl Txn {
    async fn add_partitions(
        &self,
        conn: &Connection,
        topic: &str,
        partitions: i32,
        pid: i64,
        epoch: i16,
    ) -> Result<()> {
        let mut t = add_partitions_to_txn_request::AddPartitionsToTxnTopic::default();
        t.name = name(topic);
        t.partitions = (0..partitions).collect();
        let mut r = AddPartitionsToTxnRequest::default();
        r.v3_and_below_transactional_id = TransactionalId(StrBytes::from_string(self.id.clone()));
        r.v3_and_below_producer_id = ProducerId(pid);
        r.v3_and_below_producer_epoch = epoch;
        r.v3_and_below_topics = vec![t];
        call_ok(conn, ApiKey::AddPartitionsToTxn, 3, RequestKind::AddPartitionsToTxn(r)).await.map(|_| ())
    }

    async fn commit(&mut self, conn: &Connection, pid: i64, epoch: i16) -> Result<()> {
        let mut r = EndTxnRequest::default();
        r.transactional_id = TransactionalId(StrBytes::from_string(self.id.clone()));
        r.producer_id = ProducerId(pid);
        r.producer_epoch = epoch;
        r.committed = true;
        let t = Instant::now();
        call_ok(conn, ApiKey::EndTxn, 3, RequestKind::EndTxn(r)).await?;
        self.commits.push(t.elapsed().as_micros() as u64);
        Ok(())
    }
}

/// `perf txn`: the produce load, committed every `--commit-interval-ms`.
pub async fn produce_txn(bootstrap: &str, a: &TxnArgs) -> Result<Summary> {
    let txn = Txn {
        id: a.transactional_id.clone(),
        interval: Duration::from_millis(a.commit_interval_ms),
        commits: Vec::new(),
    };
    produce_inner(bootstrap, &a.produce, Some(txn)).await
}

pub async fn produce(bootstrap: &str, a: &ProduceArgs) -> Result<Summary> {
    produce_inner(bootstrap, a, None).await
}

async fn produce_inner(bootstrap: &str, a: &ProduceArgs, mut txn: Option<Txn>) -> Result<Summary> {
    if a.batch_records == 0 || a.record_size == 0 {
        bail!("--batch-records and --record-size must be positive");
    }
    let conn = Arc::new(Connection::connect(bootstrap, "sluicectl-perf", a.inflight).await.context("connect")?);
    let partitions = ensure_topic(&conn, &a.topic, a.partitions).await?;
    // A pool of distinct random batches, reused round-robin.
    let mut rng = rand::thread_rng();
    let pool: Vec<Bytes> = (0..16)
        .map(|_| {
            let recs: Vec<NewRecord> = (0..a.batch_records)
                .map(|_| {
                    let mut v = vec![0u8; a.record_size];
                    rng.fill_bytes(&mut v);
                    NewRecord { timestamp: now_ms(), value: Some(Bytes::from(v)), ..Default::default() }
                })
                .collect();
            BatchBuilder { transactional: txn.is_some(), ..Default::default() }.build(&recs)
        })
        .collect::<Result<_, _>>()?;
    let (producer_id, producer_epoch) = if a.idempotent || txn.is_some() {
        let mut r = InitProducerIdRequest::default();
        r.transactional_id = txn.as_ref().map(|t| TransactionalId(StrBytes::from_string(t.id.clone())));
        r.transaction_timeout_ms = 60_000;
        r.producer_id = ProducerId(-1);
        r.producer_epoch = -1;
        let ResponseKind::InitProducerId(p) =
            conn.call(ApiKey::InitProducerId, 4, RequestKind::InitProducerId(r)).await?
        else {
            bail!("unexpected response to InitProducerId");
        };
        if p.error_code != 0 {
            bail!("InitProducerId failed with error code {}", p.error_code);
        }
        (p.producer_id.0, p.producer_epoch)
    } else {
        (-1, -1)
    };
    if let Some(t) = &txn {
        t.add_partitions(&conn, &a.topic, partitions, producer_id, producer_epoch).await?;
    }
    let mut txn_started = Instant::now();
    let mut sequences = vec![0i32; partitions as usize];
    let per_request = a.batch_records as u64 * partitions as u64;
    let requests = a.num_records.div_ceil(per_request);
    let done = Arc::new(AtomicU64::new(0));
    let bytes_done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    progress(done.clone(), bytes_done.clone(), stop.clone(), "produce");
    let start = Instant::now();
    let mut waits = Vec::new();
    let mut latencies = Vec::with_capacity(requests as usize);
    for i in 0..requests {
        let mut td = produce_request::TopicProduceData::default();
        td.name = name(&a.topic);
        td.partition_data = (0..partitions)
            .map(|p| {
                let mut pd = produce_request::PartitionProduceData::default();
                pd.index = p;
                let mut batch = bytes::BytesMut::from(&pool[(i as usize + p as usize) % pool.len()][..]);
                let seq = &mut sequences[p as usize];
                if producer_id >= 0 {
                    sluice_protocol::batch::set_producer(&mut batch, producer_id, producer_epoch, *seq);
                    *seq = seq.wrapping_add(a.batch_records as i32);
                } else {
                    sluice_protocol::batch::set_producer(&mut batch, -1, -1, -1);
                }
                pd.records = Some(batch.freeze());
                pd
            })
            .collect();
        let mut r = ProduceRequest::default();
        r.transactional_id = txn.as_ref().map(|t| TransactionalId(StrBytes::from_string(t.id.clone())));
        r.acks = a.acks;
        r.timeout_ms = 30_000;
        r.topic_data = vec![td];
        let sent = Instant::now();
        let (d, b) = (done.clone(), bytes_done.clone());
        let req_bytes: u64 = (0..partitions).map(|p| pool[(i as usize + p as usize) % pool.len()].len() as u64).sum();
        if a.acks == 0 {
            conn.send_oneway(ApiKey::Produce, 9, RequestKind::Produce(r)).await?;
            d.fetch_add(per_request, Ordering::Relaxed);
            b.fetch_add(req_bytes, Ordering::Relaxed);
            continue;
        }
        let rx = conn.send(ApiKey::Produce, 9, RequestKind::Produce(r)).await?;
        waits.push(tokio::spawn(async move {
            let resp = rx.await.map_err(|_| anyhow!("connection closed"))??;
            let lat = sent.elapsed();
            if let ResponseKind::Produce(p) = &resp {
                for t in &p.responses {
                    for pr in &t.partition_responses {
                        if pr.error_code != 0 {
                            bail!("produce error code {} on partition {}", pr.error_code, pr.index);
                        }
                    }
                }
            }
            d.fetch_add(per_request, Ordering::Relaxed);
            b.fetch_add(req_bytes, Ordering::Relaxed);
            Ok::<_, anyhow::Error>(lat.as_micros() as u64)
        }));
        let commit_due = txn.as_ref().is_some_and(|t| txn_started.elapsed() >= t.interval);
        if waits.len() >= 4096 || commit_due {
            for w in waits.drain(..) {
                latencies.push(w.await??);
            }
        }
        if let (true, Some(t)) = (commit_due, txn.as_mut()) {
            t.commit(&conn, producer_id, producer_epoch).await?;
            t.add_partitions(&conn, &a.topic, partitions, producer_id, producer_epoch).await?;
            txn_started = Instant::now();
        }
    }
    for w in waits.drain(..) {
        latencies.push(w.await??);
    }
    if let Some(t) = txn.as_mut() {
        t.commit(&conn, producer_id, producer_epoch).await?;
    }
    let secs = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let records = done.load(Ordering::Relaxed);
    let mut summary = Summary::new(records, records * a.record_size as u64, secs, latencies);
    if let Some(mut t) = txn {
        t.commits.sort_unstable();
        summary.commits = Some(t.commits.len() as u64);
        summary.commit_ms_p50 = Some(percentile(&t.commits, 0.5));
        summary.commit_ms_p99 = Some(percentile(&t.commits, 0.99));
    }
    Ok(summary)
}

pub async fn consume(bootstrap: &str, a: &ConsumeArgs) -> Result<Summary> {
    let conn = Connection::connect(bootstrap, "sluicectl-perf", 1).await.context("connect")?;
    let partitions = ensure_topic(&conn, &a.topic, 1).await?;
    let mut offsets = vec![0i64; partitions as usize];
    let done = Arc::new(AtomicU64::new(0));
    let bytes_done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    progress(done.clone(), bytes_done.clone(), stop.clone(), "consume");
    let start = Instant::now();
    let mut latencies = Vec::new();
    let mut idle_since = Instant::now();
    while done.load(Ordering::Relaxed) < a.num_records {
        let mut ft = fetch_request::FetchTopic::default();
        ft.topic = name(&a.topic);
        ft.partitions = (0..partitions)
            .map(|p| {
                let mut fp = fetch_request::FetchPartition::default();
                fp.partition = p;
                fp.fetch_offset = offsets[p as usize];
                fp.partition_max_bytes = 8 << 20;
                fp
            })
            .collect();
        let mut r = FetchRequest::default();
        r.max_wait_ms = 500;
        r.min_bytes = 1;
        r.max_bytes = 64 << 20;
        r.isolation_level = a.isolation_level;
        r.topics = vec![ft];
        r.replica_id = BrokerId(-1);
        let sent = Instant::now();
        let ResponseKind::Fetch(f) = conn.call(ApiKey::Fetch, 11, RequestKind::Fetch(r)).await? else {
            bail!("unexpected response to Fetch");
        };
        latencies.push(sent.elapsed().as_micros() as u64);
        if f.error_code != 0 {
            bail!("fetch error code {}", f.error_code);
        }
        let mut got = 0u64;
        for t in &f.responses {
            for p in &t.partitions {
                if p.error_code != 0 {
                    bail!("fetch error code {} on partition {}", p.error_code, p.partition_index);
                }
                let Some(records) = &p.records else { continue };
                let mut pos = 0;
                while pos < records.len() {
                    let Ok((b, size)) = BatchView::parse(&records[pos..]) else { break };
                    if b.last_offset() >= offsets[p.partition_index as usize] {
                        got += (b.last_offset() + 1 - b.base_offset().max(offsets[p.partition_index as usize])) as u64;
                        offsets[p.partition_index as usize] = b.last_offset() + 1;
                    }
                    bytes_done.fetch_add(size as u64, Ordering::Relaxed);
                    pos += size;
                }
            }
        }
        if got == 0 {
            if idle_since.elapsed() > Duration::from_secs(10) {
                bail!("no new records for 10 s after {} records", done.load(Ordering::Relaxed));
            }
        } else {
            idle_since = Instant::now();
        }
        done.fetch_add(got, Ordering::Relaxed);
    }
    let secs = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    Ok(Summary::new(done.load(Ordering::Relaxed), bytes_done.load(Ordering::Relaxed), secs, latencies))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}
