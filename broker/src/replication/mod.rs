//! Replication: the openraft glue below partitions, coordinators and the metadata image: the
//! types every Raft group shares (`types.rs`: commands, results, the `PartitionLog` a partition's
//! state machine applies to) and the Raft log on disk (`log_store.rs`). The state machines and
//! groups are in `cluster/replica.rs`; the transport, which carries the metadata quorum's RPCs
//! too, is in `cluster/network.rs` and handed to a group when it starts.

pub mod log_store;
pub mod partition_log_store;
pub mod snapshot;
pub mod types;
