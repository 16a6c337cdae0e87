//! One file per Kafka API: its answer, its authorization rule (module `acl`, applied by
//! `pipeline/authz.rs`) and, where it has one, its cluster routing rule (module `route`, applied
//! by `pipeline/route.rs`). APIs of one family share a directory whose `mod.rs` holds what they
//! share (`groups/`, `txn/`, `configs/`, `topics/`, `security/`, `reassign/`); `gate.rs` is the
//! toolkit the rules are written with, `refuse.rs` the refusal shapes they build. Each handler
//! takes the handles it uses — the topic registry, a coordinator, security, the config, the
//! `Router`, producer ids; never the whole `Services` — and its request struct, and returns a
//! [`Reply`]: answered now,
//! answered later (after durability or a long poll; the connection still writes responses in
//! request order), or not at all (produce with acks=0).

pub mod api_versions;
pub mod configs;
pub mod delete_records;
pub mod describe_cluster;
pub mod describe_log_dirs;
pub mod describe_producers;
pub mod elect_leaders;
pub mod fetch;
pub mod gate;
pub mod groups;
pub mod init_producer_id;
pub mod list_offsets;
pub mod metadata;
pub mod produce;
pub mod reassign;
pub mod refuse;
pub mod security;
pub mod topics;
pub mod txn;
pub mod write_txn_markers;

use kafka_protocol::messages::{ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;
use std::future::Future;
use std::pin::Pin;

pub type LaterReply = Pin<Box<dyn Future<Output = ResponseKind> + Send + 'static>>;

pub enum Reply {
    Now(Box<ResponseKind>),
    Later(LaterReply),
    None,
}

impl Reply {
    pub fn now(r: ResponseKind) -> Reply {
        Reply::Now(Box::new(r))
    }
}

pub fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

pub fn topic_name(s: &str) -> TopicName {
    TopicName(sb(s))
}

pub use crate::clock::now_ms;
