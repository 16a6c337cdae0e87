//! # sluice-client
//!
//! Sluice's Rust Kafka client. It depends on `sluice-protocol` only — never on the broker — and
//! speaks the Kafka protocol with version negotiation, so it works against Sluice and Apache
//! Kafka alike.
//!
//! - [`Producer`]: batching (`linger.ms`, `batch.size`, `buffer.memory`), the Java client's
//!   partitioner, compression, retries within `delivery.timeout.ms`, idempotence on by default,
//!   and transactions (`init_transactions` … `commit_transaction`).
//! - [`Consumer`]: group membership (classic protocol; range, round-robin and cooperative-sticky
//!   assignors) or manual assignment, seek, pause/resume, commits, and read_committed that
//!   also buffers a transaction's records until its marker.
//! - [`Admin`]: topics, configs, groups, offsets, transactions, cluster, ACLs and SCRAM users.
//! - [`ExactlyOnce`]: a consume-transform-produce loop that commits output and input offsets
//!   in one transaction.
//!
//! Configuration uses Kafka's property names through [`ClientConfig`], including
//! `security.protocol`, `sasl.*` and `ssl.*` (TLS with rustls; SASL PLAIN and SCRAM).

#![warn(missing_docs)]

pub mod acl;
pub mod admin;
pub mod cluster;
pub mod config;
pub mod connection;
pub mod consumer;
pub mod eos;
pub mod error;
pub mod partitioner;
pub mod producer;
pub mod security;
mod sync;

pub use admin::Admin;
pub use config::ClientConfig;
pub use connection::{ConnError, Connection};
pub use consumer::{Consumer, ConsumerRecord, IsolationLevel, OffsetReset, TopicPartition};
pub use eos::{ExactlyOnce, Stats as EosStats, Step};
pub use error::{Error, ErrorKind, Result};
pub use producer::{ConsumerGroupMetadata, DeliveryFuture, PreparedTxnState, Producer, ProducerRecord, RecordMetadata};
