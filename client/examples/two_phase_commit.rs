//! Two-phase commit with an external coordinator (KIP-939), as a Flink-style sink does it: the
//! job writes a transaction and *prepares* it at a checkpoint, the checkpoint records the
//! prepared state, and the transaction is committed only once the checkpoint is complete —
//! possibly by a later instance of the job, after a crash, however long it was down.
//!
//! `cargo run -p sluice-client --example two_phase_commit -- prepare BOOTSTRAP TOPIC TXN_ID COUNT STATE_FILE`
//!   writes COUNT records (values `<TXN_ID>-<i>`) in one transaction, prepares it, records the
//!   prepared state in STATE_FILE (written atomically: the "checkpoint"), prints it, then waits
//!   to be killed (a job that dies before its checkpoint completes).
//!
//! `cargo run -p sluice-client --example two_phase_commit -- complete BOOTSTRAP TXN_ID STATE_FILE`
//!   a new instance: keeps the transaction an earlier instance prepared, and commits it if
//!   STATE_FILE names it (abort otherwise); `abort` instead of `complete` aborts it.
//!
//! Add `--no-2pc` (and a transaction timeout in ms after it) to run the same without two-phase
//! commit: the coordinator then aborts the transaction once its timeout passes, and the new
//! instance finds nothing to commit — the hole two-phase commit closes.
//!
//! Each step prints one JSON line.

use sluice_client::{ClientConfig, PreparedTxnState, Producer, ProducerRecord};
use std::time::Duration;

fn config(bootstrap: &str, txn_id: &str, no_2pc: Option<&str>) -> ClientConfig {
    let c = ClientConfig::new().set("bootstrap.servers", bootstrap).set("transactional.id", txn_id);
    match no_2pc {
        Some(timeout_ms) => c.set("transaction.timeout.ms", timeout_ms),
        // a prepared transaction has no timeout: it outlives this one (Sluice keeps it only
        // until the transaction is marked prepared; the test's broker allows at most 3 s)
        None => c.set("transaction.two.phase.commit.enable", "true").set("transaction.timeout.ms", 2500),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let no_2pc = match args.iter().position(|a| a == "--no-2pc") {
        Some(i) => {
            let timeout = args.get(i + 1).cloned().ok_or("--no-2pc needs a transaction timeout in ms")?;
            args.drain(i..i + 2);
            Some(timeout)
        }
        None => None,
    };
    let arg = |i: usize| args.get(i).cloned().ok_or(format!("missing argument {i}; see the example's header"));
    match arg(0)?.as_str() {
        "prepare" => {
            let (bootstrap, topic, txn_id) = (arg(1)?, arg(2)?, arg(3)?);
            let count: usize = arg(4)?.parse()?;
            let state_file = arg(5)?;
            let producer = Producer::new(&config(&bootstrap, &txn_id, no_2pc.as_deref())).await?;
            producer.init_transactions().await?;
            producer.begin_transaction().await?;
            for i in 0..count {
                producer.send(ProducerRecord::new(topic.clone(), format!("{txn_id}-{i}")).key(i.to_string())).await?;
            }
            let state = if no_2pc.is_some() {
                // without 2PC all a job can do at its checkpoint is flush and hope
                producer.flush().await?;
                let (producer_id, epoch) = producer.producer_id();
                PreparedTxnState { producer_id, epoch }
            } else {
                producer.prepare_transaction().await?
            };
            // the checkpoint: the state, durably and atomically
            let tmp = format!("{state_file}.tmp");
            std::fs::write(&tmp, state.to_string())?;
            std::fs::File::open(&tmp)?.sync_all()?;
            std::fs::rename(&tmp, &state_file)?;
            println!("{{\"prepared\":\"{state}\",\"records\":{count}}}");
            // the job dies here, before the checkpoint completes (the test kills it)
            loop {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
        }
        step @ ("complete" | "abort") => {
            let (bootstrap, txn_id, state_file) = (arg(1)?, arg(2)?, arg(3)?);
            let recorded: PreparedTxnState = std::fs::read_to_string(&state_file)?.parse()?;
            let producer = Producer::new(&config(&bootstrap, &txn_id, no_2pc.as_deref())).await?;
            let ongoing = if no_2pc.is_some() {
                // an ordinary producer aborts whatever the old instance left open
                producer.init_transactions().await?;
                None
            } else {
                producer.init_transactions_keep_prepared().await?
            };
            let committed = match ongoing {
                Some(_) if step == "abort" => {
                    producer.abort_transaction().await?;
                    false
                }
                Some(_) => producer.complete_transaction(recorded).await?,
                None => false,
            };
            let ongoing = ongoing.map_or("null".to_string(), |s| format!("\"{s}\""));
            println!("{{\"recorded\":\"{recorded}\",\"ongoing\":{ongoing},\"committed\":{committed}}}");
            producer.close().await?;
        }
        other => return Err(format!("unknown step '{other}': prepare, complete or abort").into()),
    }
    Ok(())
}
