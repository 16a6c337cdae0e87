//! Send records and print where each landed.
//!
//! `cargo run -p sluice-client --example producer -- [BOOTSTRAP] [TOPIC] [COUNT] [COMPRESSION]`
//! (defaults: 127.0.0.1:9092 demo 10 none). Keys are `key-<i>`, values `value-<i>`.

use sluice_client::{ClientConfig, Producer, ProducerRecord};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let bootstrap = args.get(1).map_or("127.0.0.1:9092", |s| s.as_str());
    let topic = args.get(2).map_or("demo", |s| s.as_str());
    let count: usize = args.get(3).map_or(Ok(10), |s| s.parse())?;
    let compression = args.get(4).map_or("none", |s| s.as_str());
    let producer =
        Producer::new(&ClientConfig::new().set("bootstrap.servers", bootstrap).set("compression.type", compression))
            .await?;
    let mut deliveries = Vec::with_capacity(count);
    for i in 0..count {
        let record = ProducerRecord::new(topic, format!("value-{i}")).key(format!("key-{i}"));
        deliveries.push(producer.send(record).await?);
    }
    for d in deliveries {
        let md = d.await?;
        println!("{{\"partition\":{},\"offset\":{}}}", md.partition, md.offset);
    }
    producer.close().await?;
    Ok(())
}
