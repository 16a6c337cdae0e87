//! `sluicectl produce` and `sluicectl consume`: the console producer and consumer.
//!
//! produce: one record per stdin line (`--key-separator` splits key and value), `--header
//! k=v` repeatable, acks=all, one batch per request, answered offsets checked.
//! consume: from `--from-beginning`, `--offset N` or `--timestamp MS`, `--isolation-level`,
//! printing value (and with `--print-key`, `--print-headers`, `--print-offset` the rest), or one
//! JSON object per record with `--output json`; stops after `--max-messages` or when the end of
//! every partition is reached (`--timeout-ms` of no new data).

use anyhow::{anyhow, bail, Result};
use bytes::Bytes;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use sluice_protocol::batch::{BatchBuilder, BatchView, Header, NewRecord};
use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, clap::Args)]
pub struct ProduceArgs {
    #[arg(long)]
    pub topic: String,
    #[arg(long, default_value_t = 0)]
    pub partition: i32,
    /// Split each line into key and value at the first occurrence of this string.
    #[arg(long)]
    pub key_separator: Option<String>,
    /// A header for every record, repeatable: --header source=cli
    #[arg(long = "header", value_name = "KEY=VALUE")]
    pub headers: Vec<String>,
}

#[derive(Debug, Clone, clap::Args)]
pub struct ConsumeArgs {
    #[arg(long)]
    pub topic: String,
    /// Partitions to read (default: all).
    #[arg(long)]
    pub partition: Option<i32>,
    #[arg(long, conflicts_with_all = ["offset", "timestamp"])]
    pub from_beginning: bool,
    #[arg(long)]
    pub offset: Option<i64>,
    /// Start at the first record with a timestamp at or after this (ms since the epoch).
    #[arg(long)]
    pub timestamp: Option<i64>,
    /// read_uncommitted or read_committed.
    #[arg(long, default_value = "read_uncommitted")]
    pub isolation_level: String,
    #[arg(long)]
    pub max_messages: Option<u64>,
    /// Stop after this long without new records.
    #[arg(long, default_value_t = 2000)]
    pub timeout_ms: u64,
    #[arg(long)]
    pub print_key: bool,
    #[arg(long)]
    pub print_headers: bool,
    #[arg(long)]
    pub print_offset: bool,
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

pub async fn produce(bootstrap: &str, a: &ProduceArgs) -> Result<u64> {
    let conn = crate::security::connect(bootstrap).await?;
    crate::perf::ensure_topic(&conn, &a.topic, 1).await?;
    let headers: Vec<Header> = a
        .headers
        .iter()
        .map(|h| {
            h.split_once('=')
                .map(|(k, v)| Header { key: k.to_string(), value: Some(Bytes::from(v.to_string())) })
                .ok_or_else(|| anyhow!("header '{h}' must be KEY=VALUE"))
        })
        .collect::<Result<_>>()?;
    let mut sent = 0u64;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let (key, value) = match &a.key_separator {
            Some(sep) => match line.split_once(sep.as_str()) {
                Some((k, v)) => (Some(Bytes::from(k.to_string())), v.to_string()),
                None => bail!("line {} has no key separator '{sep}'", sent + 1),
            },
            None => (None, line),
        };
        let batch = BatchBuilder::default().build(&[NewRecord {
            timestamp: now_ms(),
            key,
            value: Some(Bytes::from(value)),
            headers: headers.clone(),
        }])?;
        let mut pd = produce_request::PartitionProduceData::default();
        pd.index = a.partition;
        pd.records = Some(batch);
        let mut td = produce_request::TopicProduceData::default();
        td.name = TopicName(s(&a.topic));
        td.partition_data = vec![pd];
        let mut r = ProduceRequest::default();
        r.acks = -1;
        r.timeout_ms = 30_000;
        r.topic_data = vec![td];
        match conn.call(ApiKey::Produce, 9, RequestKind::Produce(r)).await? {
            ResponseKind::Produce(p) => {
                let pr = p
                    .responses
                    .first()
                    .and_then(|t| t.partition_responses.first())
                    .ok_or_else(|| anyhow!("empty produce response"))?;
                if pr.error_code != 0 {
                    bail!("produce failed with error code {} after {sent} records", pr.error_code);
                }
            }
            _ => bail!("unexpected response to Produce"),
        }
        sent += 1;
    }
    Ok(sent)
}

pub async fn consume(bootstrap: &str, a: &ConsumeArgs, json: bool) -> Result<u64> {
    let isolation: i8 = match a.isolation_level.as_str() {
        "read_uncommitted" => 0,
        "read_committed" => 1,
        other => bail!("--isolation-level must be read_uncommitted or read_committed, not '{other}'"),
    };
    let conn = crate::security::connect(bootstrap).await?;
    let count = crate::perf::ensure_topic(&conn, &a.topic, 1).await?;
    let parts: Vec<i32> = match a.partition {
        Some(p) if p >= 0 && p < count => vec![p],
        Some(p) => bail!("topic {} has no partition {p}", a.topic),
        None => (0..count).collect(),
    };
    let list = |ts| crate::admin::list_offsets(&conn, &a.topic, &parts, ts, isolation);
    let mut offsets: Vec<i64> = if a.from_beginning {
        list(-2).await?
    } else if let Some(o) = a.offset {
        vec![o; parts.len()]
    } else if let Some(ts) = a.timestamp {
        // no record at or after the timestamp (-1): start at the end
        let (from, end) = (list(ts).await?, list(-1).await?);
        from.iter().zip(end).map(|(o, e)| if *o < 0 { e } else { *o }).collect()
    } else {
        list(-1).await?
    };
    let mut out = std::io::stdout().lock();
    let mut printed = 0u64;
    let mut last_data = Instant::now();
    let mut txn_state: Vec<AbortedTxns> = parts.iter().map(|_| AbortedTxns::default()).collect();
    loop {
        if a.max_messages.is_some_and(|m| printed >= m) || last_data.elapsed() > Duration::from_millis(a.timeout_ms) {
            break;
        }
        let mut ft = fetch_request::FetchTopic::default();
        ft.topic = TopicName(s(&a.topic));
        ft.partitions = parts
            .iter()
            .zip(&offsets)
            .map(|(p, o)| {
                let mut fp = fetch_request::FetchPartition::default();
                fp.partition = *p;
                fp.fetch_offset = *o;
                fp.partition_max_bytes = 1 << 20;
                fp
            })
            .collect();
        let mut r = FetchRequest::default();
        r.replica_id = BrokerId(-1);
        r.max_wait_ms = 200;
        r.min_bytes = 1;
        r.max_bytes = 8 << 20;
        r.isolation_level = isolation;
        r.topics = vec![ft];
        let ResponseKind::Fetch(f) = conn.call(ApiKey::Fetch, 11, RequestKind::Fetch(r)).await? else {
            bail!("unexpected response to Fetch");
        };
        for t in &f.responses {
            for pd in &t.partitions {
                if pd.error_code != 0 {
                    bail!("fetch failed with error code {} on partition {}", pd.error_code, pd.partition_index);
                }
                let Some(i) = parts.iter().position(|p| *p == pd.partition_index) else { continue };
                let txns = &mut txn_state[i];
                for x in pd.aborted_transactions.iter().flatten() {
                    if !txns.done.contains(&(x.first_offset, x.producer_id.0)) {
                        txns.pending.insert((x.first_offset, x.producer_id.0));
                    }
                }
                let Some(records) = &pd.records else { continue };
                let from = offsets[i];
                let mut pos = 0;
                while pos < records.len() {
                    let Ok((b, size)) = BatchView::parse(&records[pos..]) else { break };
                    pos += size;
                    offsets[i] = offsets[i].max(b.last_offset() + 1);
                    // control batches and (read_committed) aborted batches never reach the user
                    if txns.skip(&b) {
                        continue;
                    }
                    for rec in b.records()? {
                        if rec.offset < from {
                            continue; // the start of a batch that began before the fetch offset
                        }
                        if a.max_messages.is_some_and(|m| printed >= m) {
                            break;
                        }
                        last_data = Instant::now();
                        print_record(&mut out, a, json, pd.partition_index, &rec)?;
                        printed += 1;
                    }
                }
            }
        }
    }
    out.flush()?;
    Ok(printed)
}

/// read_committed filtering, as Kafka's consumer does it: an aborted transaction (from the
/// fetch's aborted list) starts skipping its producer's transactional batches at its first
/// offset, and the producer's ABORT marker ends it.
#[derive(Default)]
struct AbortedTxns {
    /// (first offset, producer id) not reached yet.
    pending: std::collections::BTreeSet<(i64, i64)>,
    /// producer id → first offset of the aborted transaction being skipped.
    active: std::collections::HashMap<i64, i64>,
    /// Aborted transactions already passed (a later fetch may list them again).
    done: std::collections::HashSet<(i64, i64)>,
}

impl AbortedTxns {
    fn skip(&mut self, b: &BatchView<'_>) -> bool {
        while let Some(&(first, pid)) = self.pending.first() {
            if first > b.last_offset() {
                break;
            }
            self.pending.remove(&(first, pid));
            self.active.insert(pid, first);
        }
        let pid = b.producer_id();
        if b.is_control() {
            let abort =
                matches!(b.control_marker(), Ok(Some(m)) if m.kind == sluice_protocol::batch::ControlType::Abort);
            if abort {
                if let Some(first) = self.active.remove(&pid) {
                    self.done.insert((first, pid));
                }
            }
            return true;
        }
        b.is_transactional() && self.active.contains_key(&pid)
    }
}

fn text(b: &Option<Bytes>) -> String {
    b.as_ref().map(|v| String::from_utf8_lossy(v).into_owned()).unwrap_or_else(|| "null".into())
}

fn print_record(
    out: &mut impl Write,
    a: &ConsumeArgs,
    json: bool,
    partition: i32,
    r: &sluice_protocol::batch::Record,
) -> Result<()> {
    if json {
        let headers: serde_json::Map<String, serde_json::Value> =
            r.headers.iter().map(|h| (h.key.clone(), serde_json::Value::String(text(&h.value)))).collect();
        let j = serde_json::json!({
            "partition": partition, "offset": r.offset, "timestamp": r.timestamp,
            "key": r.key.as_ref().map(|k| String::from_utf8_lossy(k).into_owned()),
            "value": r.value.as_ref().map(|v| String::from_utf8_lossy(v).into_owned()),
            "headers": headers,
        });
        writeln!(out, "{j}")?;
        return Ok(());
    }
    let mut line = String::new();
    if a.print_offset {
        line.push_str(&format!("{partition}:{}\t", r.offset));
    }
    if a.print_key {
        line.push_str(&text(&r.key));
        line.push('\t');
    }
    if a.print_headers {
        let hs: Vec<String> = r.headers.iter().map(|h| format!("{}={}", h.key, text(&h.value))).collect();
        line.push_str(&hs.join(","));
        line.push('\t');
    }
    line.push_str(&text(&r.value));
    writeln!(out, "{line}")?;
    Ok(())
}
