//! # sluice-broker
//!
//! The Sluice broker (the `sluice` binary) as a library. Where code goes:
//! - `broker`: the composition root — `Broker::start(Config)` wires every service, `run` serves;
//! - `config`: settings (flags, environment, TOML), named like Kafka's;
//! - `server`: the accept loop, connection limit, graceful shutdown;
//! - `connection`: the only code touching a socket: frames in, responses out, in order;
//! - `pipeline`: the authorization and routing gates, then `dispatch` — one arm per API,
//!   calling `handlers/` (one file per API: its answer, its `acl` rule, its `route` rule);
//! - `services`: the handles the pipeline holds (config, topic registry, coordinators,
//!   security, producer ids) and the `Router` over them; each handler is given only those it
//!   uses;
//! - `topics`: the topic registry — topics, partitions, their persisted metadata, this
//!   broker's view of the cluster (knows no coordinator);
//! - `partition`: one partition's log, high watermark and append path (`producer_state`: the
//!   pure idempotence and transaction checks);
//! - `partition_handle`: a partition as this broker writes it, local or through its Raft group;
//! - `group`: the group coordinator (consumer groups, committed offsets, the offsets log;
//!   `GroupError`, what it refuses with);
//! - `background`: interval flush, checkpoints, retention, group timers;
//! - `cleaner`: the log cleaner's scheduler (compacted topics; the cleaning is the storage
//!   crate's, a pass is `Partition::clean`);
//! - `error_map`: the ONE place internal errors become Kafka error codes;
//! - `metrics`: every metric name, and the Prometheus endpoint (`metrics.listener`);
//! - `interbroker`: every Kafka call to a peer broker (markers, KIP-890 verification,
//!   AddOffsetsToTxn), pooled connections, a timeout per call;
//! - `sync`: `OrDie` — a poisoned lock stops the broker (a restart recovers from the logs).
//!
//! - `txn`: the transaction coordinator (transaction-state log, markers through its
//!   `MarkerWriter` port, timeouts; `TxnError`, what it refuses with);
//! - `coordinator`: the shard runtime both coordinators share (replicated log partitions,
//!   loading a shard when this broker leads it);
//! - `kvlog`: the internal key/value log under both coordinators;
//! - `security`: listeners, TLS, SASL, credentials, ACLs and authorization, limits, quotas.
//!
//! - `cluster`: cluster mode — the metadata quorum on openraft, partition and coordinator-log
//!   replication (one Raft group each), the reconciler, reassignment;
//! - `routing`: where a partition's leader or a key's coordinator is (`Router`);
//! - `config::{security, coordinators, cluster}`: the settings each service receives;
//! - `replication`: the openraft layer's own types (node ids, group keys; a partition's and a
//!   coordinator shard's commands and results, two Raft type configurations; the Raft log store
//!   — no Kafka codes).

pub mod background;
pub mod broker;
pub mod cleaner;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod connection;
pub mod coordinator;
pub mod dynamic_config;
pub mod error_map;
pub mod failpoints;
pub mod group;
pub mod handlers;
pub mod interbroker;
pub mod kvlog;
pub mod metrics;
pub mod partition;
pub mod partition_handle;
pub mod pipeline;
pub mod producer_ids;
pub mod replication;
pub mod routing;
pub mod scrubber;
pub mod security;
pub mod server;
pub mod services;
pub mod sync;
pub mod topic_config;
pub mod topics;
pub mod txn;
