//! Exactly-once word count between two topics: reads lines from `INPUT` (read_committed),
//! writes per-batch counts keyed by word to `OUTPUT`, and commits them with the input offsets
//! in one transaction. Summing the committed outputs per word gives the exact count, however
//! often this process crashes, restarts or is replaced by another instance.
//!
//! `cargo run -p sluice-client --example word_count -- [BOOTSTRAP] [INPUT] [OUTPUT] [IDLE_MS]`
//! (defaults: 127.0.0.1:9092 lines counts 5000). Stops after `IDLE_MS` without input.

use sluice_client::{ClientConfig, ExactlyOnce, ProducerRecord, Step};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: &'static str| args.get(i).map_or(d.to_string(), |s| s.clone());
    let (input, output) = (arg(2, "lines"), arg(3, "counts"));
    let idle = Duration::from_millis(arg(4, "5000").parse()?);
    let common = ClientConfig::new().set("bootstrap.servers", arg(1, "127.0.0.1:9092"));
    let mut eos = ExactlyOnce::new(
        &common.clone().set("group.id", format!("word-count-{input}")).set("auto.offset.reset", "earliest"),
        &common.set("transactional.id", format!("word-count-{input}")),
        &[&input],
    )
    .await?;
    let (mut last, mut started) = (Instant::now(), false);
    while last.elapsed() < idle {
        let step = eos
            .step(|batch| {
                let mut counts: BTreeMap<String, u64> = BTreeMap::new();
                for r in batch {
                    let line = String::from_utf8_lossy(r.value.as_deref().unwrap_or(b"")).to_string();
                    for w in line.split_whitespace() {
                        *counts.entry(w.to_lowercase()).or_default() += 1;
                    }
                }
                Ok(counts.into_iter().map(|(w, n)| ProducerRecord::new(output.clone(), n.to_string()).key(w)).collect())
            })
            .await?;
        if !started {
            // The idle clock starts once the group has given this member its partitions.
            last = Instant::now();
            started = !eos.consumer().assignment().is_empty();
        }
        match step {
            Step::Idle => {}
            Step::Committed { .. } => last = Instant::now(),
            Step::Aborted(e) => eprintln!("aborted and retrying: {e}"),
        }
    }
    let s = eos.stats();
    eprintln!(
        "{} transactions committed, {} aborted, {} lines, {} counts",
        s.committed, s.aborted, s.inputs, s.outputs
    );
    eos.close().await?;
    Ok(())
}
