//! # sluice-storage
//!
//! The partition log. It knows record batches and offsets — not Kafka APIs, not transactions,
//! not raft. What belongs here:
//! - `log`: [`Log`], one partition's directory: segments, log start/end offsets, high-watermark
//!   hook, recovery point, retention, group commit ([`Flusher`]), crash recovery;
//! - `cleaner`: log compaction (`cleanup.policy=compact`), Kafka's rules, crash-safe swap;
//! - `segment`: one `.log` file with its indexes;
//! - `index`: memory-mapped sparse offset and time indexes;
//! - `txnindex`: the aborted-transaction index beside each segment;
//! - `sidefile`: small atomically written files with version and CRC (checkpoint, producer
//!   snapshots);
//! - `dir`: the data-directory lock;
//! - `mmap`: the only `unsafe` in the crate;
//! - `config`: per-log settings named like Kafka's topic configs;
//! - `error`: the storage error enum (Kafka codes are chosen at the broker's edge).

pub mod cleaner;
pub mod config;
pub mod dir;
pub mod error;
pub mod index;
pub mod log;
mod mmap;
pub mod segment;
pub mod sidefile;
pub mod snapshot;
pub mod sync;
pub mod txnindex;

pub use config::{FlushPolicy, LogConfig};
pub use dir::DirLock;
pub use error::{Result, StorageError};
pub use log::{AppendInfo, Damage, Flusher, Log, RecoveryReport};
pub use snapshot::LinkedSnapshot;
pub use txnindex::AbortedTxn;
