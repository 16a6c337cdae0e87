//! The storage error enum. Kafka error codes are chosen from these only at the broker's edge
//! (`broker/src/error_map.rs`); nothing here knows about the wire.

use sluice_protocol::batch::BatchError;
use std::io;
use std::path::PathBuf;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum StorageError {
    /// An operating-system I/O error on `path`. After a failed fsync the effect of earlier
    /// writes is *unknown*: the caller must not report them as either stored or not stored.
    #[error("I/O error on {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    /// Stored bytes failed validation (found by recovery or by a read).
    #[error("corrupt data in {path} at byte {position}: {reason}")]
    Corrupt { path: PathBuf, position: u64, reason: String },
    /// An append was refused because the input is not a valid batch; nothing was written.
    #[error("invalid record batch at byte {position} of the input: {source}")]
    InvalidBatch { position: usize, source: BatchError },
    /// An append was refused because one batch is larger than `max.message.bytes`.
    #[error("batch of {size} bytes exceeds max.message.bytes {max}")]
    BatchTooLarge { size: usize, max: usize },
    /// A read or seek below the log start offset or above the log end offset.
    #[error("offset {offset} out of range [{log_start}, {log_end}]")]
    OffsetOutOfRange { offset: i64, log_start: i64, log_end: i64 },
    /// The data directory is locked by another process.
    #[error("data directory {path} is locked by another process (is another broker running on it?)")]
    DirLocked { path: PathBuf },
    /// A configuration value that cannot work.
    #[error("invalid log configuration: {0}")]
    InvalidConfig(String),
    /// A damaged batch could not be replaced with the copy offered (nothing was written).
    #[error("cannot repair {path} at byte {position}: {why}")]
    Unrepairable { path: PathBuf, position: u64, why: String },
    /// Offsets below `end` were waited on, but a truncation ([`crate::Log::truncate_to`])
    /// removed some of them before they were durable: the log now ends at `log_end`.
    #[error("offsets below {end} were truncated before they were durable (the log ends at {log_end})")]
    Truncated { end: i64, log_end: i64 },
    /// An earlier I/O failure left this log in an unknown state; it refuses further work.
    #[error("log at {0} is offline after an earlier I/O error")]
    Offline(PathBuf),
}

pub type Result<T, E = StorageError> = std::result::Result<T, E>;

/// Attach a path to an `io::Error`.
pub(crate) trait IoContext<T> {
    fn at(self, path: &std::path::Path) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn at(self, path: &std::path::Path) -> Result<T> {
        self.map_err(|source| StorageError::Io { path: path.to_path_buf(), source })
    }
}
