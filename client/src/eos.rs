//! An exactly-once consume-transform-produce loop — what Kafka Streams does for one stage,
//! without the framework. Each step polls a batch (read_committed), lets the caller map it to
//! output records, and commits the outputs together with the input offsets in one transaction.
//! If anything in the step fails the transaction is aborted and the consumer is rewound to the
//! batch's first offsets, so the batch is processed again; a fenced producer (a newer instance
//! took over the transactional id) or a consumer that lost its membership stops the loop with
//! an error instead of writing twice.
//!
//! ```no_run
//! # async fn demo() -> sluice_client::Result<()> {
//! use sluice_client::{ClientConfig, ExactlyOnce, ProducerRecord};
//! let common = ClientConfig::new().set("bootstrap.servers", "127.0.0.1:9092");
//! let mut eos = ExactlyOnce::new(
//!     &common.clone().set("group.id", "upper"),
//!     &common.set("transactional.id", "upper-1"),
//!     &["input"],
//! )
//! .await?;
//! loop {
//!     eos.step(|batch| {
//!         Ok(batch
//!             .iter()
//!             .map(|r| ProducerRecord::new("output", r.value.clone().unwrap_or_default()))
//!             .collect())
//!     })
//!     .await?;
//! }
//! # }
//! ```

use crate::config::ClientConfig;
use crate::consumer::{Consumer, ConsumerRecord};
use crate::error::{Error, ErrorKind, Result};
use crate::producer::{Producer, ProducerRecord};
use std::collections::BTreeMap;
use std::time::Duration;

/// What one [`ExactlyOnce::step`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing to read within the poll timeout.
    Idle,
    /// A transaction committed `inputs` records read and `outputs` records written.
    Committed {
        /// Input records consumed.
        inputs: usize,
        /// Output records produced.
        outputs: usize,
    },
    /// The transaction was aborted (the reason is given); the inputs will be read again.
    Aborted(Error),
}

/// Counters over the loop's life.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Transactions committed.
    pub committed: u64,
    /// Transactions aborted and retried.
    pub aborted: u64,
    /// Input records consumed in committed transactions.
    pub inputs: u64,
    /// Output records written in committed transactions.
    pub outputs: u64,
}

/// The exactly-once processing loop: one consumer, one transactional producer.
pub struct ExactlyOnce {
    consumer: Consumer,
    producer: Producer,
    poll_timeout: Duration,
    stats: Stats,
}

impl ExactlyOnce {
    /// Build the loop: `consumer` needs `group.id` (read_committed and manual commits are
    /// forced), `producer` needs `transactional.id`. Subscribes to `inputs` and initializes
    /// transactions (fencing any older instance with the same transactional id).
    pub async fn new(consumer: &ClientConfig, producer: &ClientConfig, inputs: &[&str]) -> Result<ExactlyOnce> {
        if producer.get("transactional.id").is_none() {
            return Err(Error::invalid("the exactly-once loop needs transactional.id"));
        }
        if consumer.get("group.id").is_none() {
            return Err(Error::invalid("the exactly-once loop needs group.id"));
        }
        let cc = consumer.clone().set("isolation.level", "read_committed").set("enable.auto.commit", "false");
        let mut c = Consumer::new(&cc)?;
        let p = Producer::new(producer).await?;
        p.init_transactions().await?;
        c.subscribe(inputs)?;
        Ok(ExactlyOnce { consumer: c, producer: p, poll_timeout: Duration::from_millis(500), stats: Stats::default() })
    }

    /// How long each step waits for input (default 500 ms).
    pub fn set_poll_timeout(&mut self, t: Duration) {
        self.poll_timeout = t;
    }

    /// Counters so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The consumer (to inspect assignment or positions).
    pub fn consumer(&self) -> &Consumer {
        &self.consumer
    }

    /// Poll once and process what arrived in one transaction. `process` maps the batch to
    /// output records; returning an error aborts the transaction (the batch comes back).
    /// Fatal errors (fenced, unauthorized) are returned; the loop must then stop.
    pub async fn step<F>(&mut self, process: F) -> Result<Step>
    where
        F: FnOnce(&[ConsumerRecord]) -> Result<Vec<ProducerRecord>>,
    {
        let records = self.consumer.poll(self.poll_timeout).await?;
        if records.is_empty() {
            return Ok(Step::Idle);
        }
        // Where each partition's batch began, to rewind to after an abort.
        let mut first: BTreeMap<(String, i32), i64> = BTreeMap::new();
        for r in &records {
            first.entry((r.topic.clone(), r.partition)).or_insert(r.offset);
        }
        match self.transact(&records, process).await {
            Ok(outputs) => {
                self.stats.committed += 1;
                self.stats.inputs += records.len() as u64;
                self.stats.outputs += outputs as u64;
                Ok(Step::Committed { inputs: records.len(), outputs })
            }
            Err(e) if e.is_fatal() => {
                // A zombie: leave the group at once so the partitions move to the live instance.
                let _ = self.consumer.unsubscribe().await;
                Err(e)
            }
            Err(e) => {
                // Abort (flushing first, so what was sent is aborted rather than dropped),
                // then read the batch again.
                let _ = self.producer.flush().await;
                loop {
                    match self.producer.abort_transaction().await {
                        Ok(()) => break,
                        Err(a) if a.is_retriable() => tokio::time::sleep(Duration::from_millis(50)).await,
                        Err(a) if a.kind() == ErrorKind::Invalid => break, // nothing begun
                        Err(a) => return Err(a),
                    }
                }
                for (tp, offset) in first {
                    let _ = self.consumer.seek(&tp, offset);
                }
                self.stats.aborted += 1;
                Ok(Step::Aborted(e))
            }
        }
    }

    async fn transact<F>(&mut self, records: &[ConsumerRecord], process: F) -> Result<usize>
    where
        F: FnOnce(&[ConsumerRecord]) -> Result<Vec<ProducerRecord>>,
    {
        self.producer.begin_transaction().await?;
        let outputs = process(records).map_err(|e| e.with_kind(ErrorKind::Abortable))?;
        let n = outputs.len();
        for o in outputs {
            self.producer
                .send(o)
                .await
                .map_err(|e| if e.is_fatal() { e } else { e.with_kind(ErrorKind::Abortable) })?;
        }
        let group = self.consumer.group_metadata().ok_or_else(|| Error::invalid("no group metadata"))?;
        let mut positions: BTreeMap<(String, i32), i64> = BTreeMap::new();
        for r in records {
            positions.insert((r.topic.clone(), r.partition), r.offset + 1);
        }
        let offsets: Vec<(String, i32, i64)> = positions.into_iter().map(|((t, p), o)| (t, p, o)).collect();
        self.producer.send_offsets_to_transaction(&offsets, &group).await?;
        // A commit whose outcome is unknown is retried as a commit, never aborted.
        loop {
            match self.producer.commit_transaction().await {
                Ok(()) => return Ok(n),
                Err(e) if e.is_retriable() => tokio::time::sleep(Duration::from_millis(50)).await,
                Err(e) => return Err(e),
            }
        }
    }

    /// Stop: close the producer and leave the group (no commit outside a transaction).
    pub async fn close(self) -> Result<()> {
        self.producer.close().await?;
        self.consumer.close().await
    }
}
