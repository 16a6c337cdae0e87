//! # sluice-protocol
//!
//! The Kafka wire protocol, pure: no tokio, no I/O, no clock. What belongs here:
//! - `batch`: the record batch v2 view (header fields, CRC32C), record iteration, control
//!   records, and the batch writer;
//! - `varint`: zig-zag and unsigned varints;
//! - `compression`: gzip, snappy, lz4, zstd codecs for whoever must encode or decode records;
//! - `frame`: length-prefixed frames with a size limit;
//! - `raft_control`: Raft's own entries as control batches of a partition's log (decision 0045);
//! - `chunked`: an encoder target that keeps record data as shared chunks (zero-copy fetch);
//! - `scram`: SCRAM-SHA-256/512 and PLAIN message handling for SASL (nonces come from the caller);
//! - `api`: the one table of supported APIs that drives dispatch and the ApiVersions answer, and
//!   the typed request decoding over the `kafka-protocol` crate's generated structs.
//!
//! What does not: sockets, files, state. The broker and client crates do I/O around this crate.

pub mod api;
pub mod batch;
pub mod chunked;
pub mod compression;
pub mod frame;
pub mod raft_control;
pub mod scram;
pub mod varint;

pub use kafka_protocol;
