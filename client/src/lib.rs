//! # sluice-client
//!
//! Sluice's Rust Kafka client (issue 7). What belongs here: the producer (batching,
//! partitioner, idempotence, transactions), the consumer (groups, read_committed with
//! marker-based buffering), the admin client, and the exactly-once processing loop. It depends
//! on `sluice-protocol` only — never on `storage` or `broker` — so it works against any Kafka
//! broker.
//!
//! Present so far: `connection`, one pipelined broker connection (used by `sluicectl`), and
//! `partitioner` (Java-compatible murmur2 for keys, sticky for null keys).

pub mod connection;
pub mod partitioner;

pub use connection::{ConnError, Connection};
