//! # sluice-client
//!
//! Sluice's Rust Kafka client (issue 7). What will belong here: the producer (batching,
//! partitioner, idempotence, transactions), the consumer (groups, read_committed with
//! marker-based buffering), the admin client, and the exactly-once processing loop. It depends
//! on `sluice-protocol` only — never on `storage` or `broker` — so it works against any Kafka
//! broker.
//!
//! Nothing is implemented yet; the crate exists so the workspace has its final shape.
