//! Read a topic as a group member and print each record as a JSON line; stop after `IDLE_MS`
//! without records (counted from the first assignment).
//!
//! `cargo run -p sluice-client --example consumer -- [BOOTSTRAP] [TOPIC] [GROUP] [ISOLATION] [IDLE_MS]`
//! (defaults: 127.0.0.1:9092 demo demo-group read_committed 3000).

use sluice_client::{ClientConfig, Consumer};
use std::time::{Duration, Instant};

fn text(b: &Option<bytes::Bytes>) -> String {
    String::from_utf8_lossy(b.as_deref().unwrap_or(b"")).replace('\\', "\\\\").replace('"', "\\\"")
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: &'static str| args.get(i).map_or(d.to_string(), |s| s.clone());
    let idle = Duration::from_millis(arg(5, "3000").parse()?);
    let mut consumer = Consumer::new(
        &ClientConfig::new()
            .set("bootstrap.servers", arg(1, "127.0.0.1:9092"))
            .set("group.id", arg(3, "demo-group"))
            .set("isolation.level", arg(4, "read_committed"))
            .set("auto.offset.reset", "earliest"),
    )?;
    consumer.subscribe(&[&arg(2, "demo")])?;
    // The idle clock starts once the group has given this member its partitions.
    let (mut last, mut started) = (Instant::now(), false);
    while last.elapsed() < idle {
        let records = consumer.poll(Duration::from_millis(200)).await?;
        if !started {
            last = Instant::now();
            started = !consumer.assignment().is_empty();
        }
        for r in records {
            last = Instant::now();
            println!(
                "{{\"partition\":{},\"offset\":{},\"key\":\"{}\",\"value\":\"{}\"}}",
                r.partition,
                r.offset,
                text(&r.key),
                text(&r.value)
            );
        }
    }
    consumer.close().await?;
    Ok(())
}
