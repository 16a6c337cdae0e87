//! Write records in transactions: each round is committed, except every third, which is
//! aborted (read_committed consumers never see those).
//!
//! `cargo run -p sluice-client --example transactional_producer -- [BOOTSTRAP] [TOPIC] [ROUNDS] [PER_ROUND] [COMPRESSION]`
//! (defaults: 127.0.0.1:9092 demo 3 10 none). Values are `<round>-<i>`; round r is aborted
//! when r % 3 == 1.

use sluice_client::{ClientConfig, Producer, ProducerRecord};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: &'static str| args.get(i).map_or(d.to_string(), |s| s.clone());
    let topic = arg(2, "demo");
    let rounds: usize = arg(3, "3").parse()?;
    let per_round: usize = arg(4, "10").parse()?;
    let producer = Producer::new(
        &ClientConfig::new()
            .set("bootstrap.servers", arg(1, "127.0.0.1:9092"))
            .set("transactional.id", format!("example-{topic}"))
            .set("compression.type", arg(5, "none")),
    )
    .await?;
    producer.init_transactions().await?;
    for round in 0..rounds {
        producer.begin_transaction().await?;
        for i in 0..per_round {
            producer.send(ProducerRecord::new(topic.clone(), format!("{round}-{i}")).key(format!("{i}"))).await?;
        }
        if round % 3 == 1 {
            producer.flush().await?;
            producer.abort_transaction().await?;
            eprintln!("round {round}: aborted");
        } else {
            // A commit that times out is retried, never turned into an abort.
            loop {
                match producer.commit_transaction().await {
                    Ok(()) => break,
                    Err(e) if e.is_retriable() => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            eprintln!("round {round}: committed");
        }
    }
    producer.close().await?;
    Ok(())
}
