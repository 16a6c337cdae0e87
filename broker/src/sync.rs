//! Locks whose poisoning is fatal: `.lock().or_die()` (the trait lives in the storage crate,
//! whose flusher needs it too; see `sluice_storage::sync`).

pub use sluice_storage::sync::OrDie;
