//! Replication: the openraft glue below partitions, coordinators and the metadata image. It
//! grows into the log stores, state machines, transport and membership of every Raft group
//! (`../shared/BROKER-LAYOUT.md`); today it holds the types they share.

pub mod types;
