//! Broker settings, named like Kafka's broker properties. Each can be given as a flag
//! (`--log-dirs DIR`: dots become dashes), an environment variable (`SLUICE_LOG_DIRS`: upper
//! case, dots become underscores) or a key in a TOML file (`--config FILE`, keys as in Kafka:
//! `"log.dirs" = "…"` or nested `[log] dirs = "…"`). Flags win over the environment, the
//! environment over the file, the file over the defaults. Unknown or malformed settings stop
//! startup with a message that names the setting.

pub mod cluster;
pub mod coordinators;
pub mod security;
pub mod topic_defs;

use coordinators::{CoordinatorSettings, GroupSettings, TxnSettings};
use security::{ClientAuth, ListenerConfig, SecurityProtocol, SecuritySettings};
use sluice_storage::{FlushPolicy, LogConfig};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

/// One setting: its Kafka name, default (as text) and help.
pub struct Setting {
    pub name: &'static str,
    pub default: &'static str,
    pub help: &'static str,
}

pub const SETTINGS: &[Setting] = &[
    Setting {
        name: "listeners",
        default: "PLAINTEXT://127.0.0.1:9092",
        help: "where to listen: comma-separated NAME://host:port (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL, or names mapped by listener.security.protocol.map)",
    },
    Setting {
        name: "advertised.listeners",
        default: "",
        help: "addresses given to clients, NAME://host:port per listener (default: the listener's own)",
    },
    Setting {
        name: "listener.security.protocol.map",
        default: "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        help: "listener name to security protocol",
    },
    Setting {
        name: "ssl.keystore.location",
        default: "",
        help: "PEM file with the broker's certificate chain and unencrypted private key (SSL, SASL_SSL listeners)",
    },
    Setting {
        name: "ssl.truststore.location",
        default: "",
        help: "PEM file of CA certificates that client certificates must chain to",
    },
    Setting { name: "ssl.client.auth", default: "none", help: "client certificates: none, requested or required" },
    Setting {
        name: "sasl.enabled.mechanisms",
        default: "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        help: "SASL mechanisms offered on SASL listeners (PLAIN checks against the SCRAM credentials)",
    },
    Setting {
        name: "sasl.bootstrap.users",
        default: "",
        help: "name:password,... SCRAM users created at start when absent (stored salted; manage later with sluicectl users)",
    },
    Setting {
        name: "sasl.server.max.receive.size",
        default: "524288",
        help: "largest request accepted before a SASL connection has authenticated",
    },
    Setting {
        name: "authorizer.class.name",
        default: "",
        help: "set (e.g. org.apache.kafka.metadata.authorizer.StandardAuthorizer) to enforce ACLs; empty: no authorization",
    },
    Setting { name: "super.users", default: "", help: "principals allowed everything, e.g. User:admin;User:ops" },
    Setting {
        name: "allow.everyone.if.no.acl.found",
        default: "false",
        help: "with an authorizer: allow access to resources that have no ACL at all",
    },
    Setting { name: "max.connections.per.ip", default: "2147483647", help: "open connections allowed per client IP" },
    Setting {
        name: "connections.max.idle.ms",
        default: "600000",
        help: "close connections that send nothing for this long",
    },
    Setting {
        name: "max.connections.per.ip.overrides",
        default: "",
        help: "per-IP exceptions, ip:count,... (e.g. 127.0.0.1:200)",
    },
    Setting {
        name: "quota.producer.default",
        default: "9223372036854775807",
        help: "produce bytes per second allowed per client id (throttle_time_ms beyond it)",
    },
    Setting {
        name: "quota.consumer.default",
        default: "9223372036854775807",
        help: "fetch bytes per second allowed per client id (throttle_time_ms beyond it)",
    },
    Setting { name: "log.dirs", default: "./sluice-data", help: "data directory" },
    Setting { name: "node.id", default: "1", help: "this broker's id" },
    Setting {
        name: "controller.listener",
        default: "",
        help: "cluster mode: this broker's Raft address (ip:port) when it joins a running cluster and is not one of controller.quorum.voters",
    },
    Setting {
        name: "controller.listener.names",
        default: "CONTROLLER",
        help: "cluster mode: the Raft port's listener name; mapped to SSL in listener.security.protocol.map (e.g. CONTROLLER:SSL), brokers talk over mutual TLS with ssl.keystore.location and ssl.truststore.location",
    },
    Setting {
        name: "controller.quorum.voters",
        default: "",
        help: "cluster mode: id@host:port,... the Raft address of every voter of the metadata quorum (empty: single node)",
    },
    Setting { name: "num.partitions", default: "1", help: "partitions of auto-created topics" },
    Setting {
        name: "default.replication.factor",
        default: "-1",
        help: "replication factor of topics created without one (-1: 1 on a single broker, min(3, brokers) in a cluster)",
    },
    Setting { name: "auto.create.topics.enable", default: "true", help: "create topics on first Metadata/Produce" },
    Setting { name: "message.max.bytes", default: "1048588", help: "largest record batch accepted" },
    Setting { name: "socket.request.max.bytes", default: "104857600", help: "largest request frame accepted" },
    Setting { name: "log.segment.bytes", default: "1073741824", help: "segment size before rolling" },
    Setting { name: "log.roll.ms", default: "604800000", help: "segment age before rolling" },
    Setting { name: "log.retention.ms", default: "604800000", help: "delete segments older than this (-1: never)" },
    Setting { name: "log.retention.bytes", default: "-1", help: "delete oldest segments beyond this size (-1: never)" },
    Setting { name: "log.retention.check.interval.ms", default: "300000", help: "how often retention runs" },
    Setting {
        name: "log.scrub.bytes.per.second",
        default: "4194304",
        help: "bytes per second the background scrubber reads to check stored batches' CRCs (0: off)",
    },
    Setting { name: "log.index.size.max.bytes", default: "10485760", help: "preallocated index size" },
    Setting { name: "log.index.interval.bytes", default: "4096", help: "bytes between offset-index entries" },
    Setting {
        name: "log.flush.policy",
        default: "sync",
        help: "sync: fsync (group commit) before acknowledging; interval: fsync every log.flush.interval.ms",
    },
    Setting { name: "log.flush.interval.ms", default: "1000", help: "fsync interval for log.flush.policy=interval" },
    Setting {
        name: "log.page.cache.tail.bytes",
        default: "-1",
        help: "after each fsync, a log's synced bytes further than this from its end are dropped from the page cache, so new writes reuse the pages they held; reads of them then read the disk. On a VM that hands freed memory back to its host this doubled one broker's produce rate (decision 0053). -1: the kernel keeps them, as for Kafka",
    },
    Setting {
        name: "log.cleanup.policy",
        default: "delete",
        help: "default cleanup.policy of topics: delete, compact or both",
    },
    Setting {
        name: "log.cleaner.enable",
        default: "true",
        help: "run the log cleaner, which compacts topics whose cleanup.policy includes compact",
    },
    Setting { name: "log.cleaner.threads", default: "1", help: "partitions the log cleaner compacts at the same time" },
    Setting {
        name: "log.cleaner.dedupe.buffer.size",
        default: "134217728",
        help: "memory for the log cleaner's offset maps, shared by its threads (24 bytes per key; a pass maps as many keys as fit)",
    },
    Setting {
        name: "log.cleaner.io.max.bytes.per.second",
        default: "1.7976931348623157E308",
        help: "bytes per second the log cleaner reads and writes, all threads together",
    },
    Setting {
        name: "log.cleaner.backoff.ms",
        default: "15000",
        help: "how long the log cleaner sleeps when no log needs cleaning",
    },
    Setting {
        name: "log.cleaner.min.cleanable.ratio",
        default: "0.5",
        help: "default min.cleanable.dirty.ratio of topics: the dirty share of a log at which it is cleaned",
    },
    Setting {
        name: "log.cleaner.delete.retention.ms",
        default: "86400000",
        help: "default delete.retention.ms of topics: how long tombstones stay after cleaning",
    },
    Setting {
        name: "log.cleaner.min.compaction.lag.ms",
        default: "0",
        help: "default min.compaction.lag.ms of topics: the least time a record stays uncompacted",
    },
    Setting {
        name: "log.cleaner.max.compaction.lag.ms",
        default: "9223372036854775807",
        help: "default max.compaction.lag.ms of topics: a record is compacted within about this long",
    },
    Setting {
        name: "compression.type",
        default: "producer",
        help: "default compression.type of topics: producer (keep the producer's) or a codec to recompress to",
    },
    Setting { name: "compression.gzip.level", default: "-1", help: "gzip level when recompressing (-1 or 1-9)" },
    Setting { name: "compression.zstd.level", default: "3", help: "zstd level when recompressing (-131072 to 22)" },
    Setting {
        name: "log.message.timestamp.type",
        default: "CreateTime",
        help: "default message.timestamp.type of topics: CreateTime or LogAppendTime",
    },
    Setting {
        name: "log.message.timestamp.before.max.ms",
        default: "9223372036854775807",
        help: "CreateTime records older than this (ms) are refused with INVALID_TIMESTAMP",
    },
    Setting {
        name: "log.message.timestamp.after.max.ms",
        default: "3600000",
        help: "CreateTime records further in the future than this (ms) are refused with INVALID_TIMESTAMP",
    },
    Setting {
        name: "min.insync.replicas",
        default: "1",
        help: "default min.insync.replicas of topics: replicas an acks=all write needs",
    },
    Setting {
        name: "replica.lag.time.max.ms",
        default: "30000",
        help: "a follower that has not caught up for this long is out of sync (for min.insync.replicas)",
    },
    Setting {
        name: "replica.fetch.max.bytes",
        default: "1048576",
        help: "cluster mode: bytes of entries a partition's leader sends a follower per Raft append (at least one entry, however large), so each append finishes within the heartbeat interval",
    },
    Setting {
        name: "replica.page.cache.tail.bytes",
        default: "134217728",
        help: "cluster mode: while this broker follows a partition's leader, that partition's log keeps at most this many bytes of its end in the page cache (the rest is dropped after each fsync, as log.page.cache.tail.bytes does): no consumer reads a follower, and on a VM that hands freed memory back to its host the replicated produce rate rose by a third (decision 0054). Leading, the partition keeps what log.page.cache.tail.bytes says. -1: a follower keeps what log.page.cache.tail.bytes says too",
    },
    Setting {
        name: "raft.log.max.bytes.between.snapshots",
        default: "67108864",
        help: "cluster mode: a partition's replica snapshots its segments after applying this many bytes of batches and purges its Raft log up to the snapshot; a coordinator shard snapshots its live records every this / 16 KiB entries; a replica too far behind (or wiped) catches up from the snapshot",
    },
    Setting {
        name: "replication.log.format",
        default: "single",
        help: "cluster mode: where a new replicated partition keeps its Raft log: single (the partition log itself, each batch written once, a new partition's group born without entries: decisions 0045 and 0052) or double (a Raft log of its own beside the partition log; each batch written twice: the default before decision 0052). A partition keeps the format it was created with, and a new replica takes its group's (decision 0051)",
    },
    Setting {
        name: "replication.in.flight.max.bytes",
        default: "134217728",
        help: "cluster mode: bytes of produce batches this broker has proposed to its partitions' Raft groups and not yet answered, or answered and not yet held by every live follower (decision 0054); a produce request waits for room (its connection is not read meanwhile), so a slow follower or disk holds producers back instead of filling memory or falling behind",
    },
    Setting {
        name: "replication.partition.in.flight.max.bytes",
        default: "33554432",
        help: "cluster mode: the same bound for one partition (so one partition cannot take the whole broker's)",
    },
    Setting { name: "max.connections", default: "10000", help: "open connections allowed" },
    Setting { name: "log.format", default: "text", help: "broker log lines as text or json (filter with SLUICE_LOG)" },
    Setting {
        name: "log.slow.request.ms",
        default: "1000",
        help: "log requests slower than this with their request id (0: every request; never Fetch/JoinGroup/SyncGroup, which wait by design)",
    },
    Setting { name: "metrics.listener", default: "", help: "host:port for the Prometheus endpoint (off when empty)" },
    Setting {
        name: "producer.id.expiration.ms",
        default: "86400000",
        help: "forget idle idempotent producers after this long (never one with an open transaction)",
    },
    Setting {
        name: "group.min.session.timeout.ms",
        default: "6000",
        help: "shortest consumer session timeout allowed",
    },
    Setting {
        name: "group.max.session.timeout.ms",
        default: "1800000",
        help: "longest consumer session timeout allowed",
    },
    Setting {
        name: "group.initial.rebalance.delay.ms",
        default: "3000",
        help: "how long the first rebalance of an empty group waits for more members",
    },
    Setting {
        name: "group.consumer.session.timeout.ms",
        default: "45000",
        help: "session timeout of consumer-protocol (KIP-848) members",
    },
    Setting {
        name: "group.consumer.heartbeat.interval.ms",
        default: "5000",
        help: "heartbeat interval given to consumer-protocol (KIP-848) members",
    },
    Setting { name: "group.max.size", default: "2147483647", help: "most members a consumer group may have" },
    Setting {
        name: "offsets.topic.num.partitions",
        default: "50",
        help: "partitions of the internal offsets log (fixed at first use)",
    },
    Setting {
        name: "offsets.topic.replication.factor",
        default: "3",
        help: "cluster mode: replicas of each offsets-log partition (at most the voters; 1: not replicated)",
    },
    Setting { name: "offsets.topic.segment.bytes", default: "104857600", help: "segment size of the offsets log" },
    Setting {
        name: "offset.metadata.max.bytes",
        default: "4096",
        help: "largest metadata string of a committed offset",
    },
    Setting {
        name: "offsets.retention.ms",
        default: "604800000",
        help: "delete the offsets of a group that has been empty this long (-1: never)",
    },
    Setting {
        name: "transaction.state.log.num.partitions",
        default: "50",
        help: "partitions of the internal transaction-state log (fixed at first use)",
    },
    Setting {
        name: "transaction.state.log.replication.factor",
        default: "3",
        help: "cluster mode: replicas of each transaction-state partition (at most the voters; 1: not replicated)",
    },
    Setting {
        name: "transaction.version",
        default: "2",
        help: "the finalized transaction.version feature (as kafka-storage format --feature): 2 lets Kafka 4.x clients use KIP-890 transactions, 1 or 0 keeps every client to version 1",
    },
    Setting {
        name: "transaction.max.timeout.ms",
        default: "900000",
        help: "longest transaction timeout a producer may ask for",
    },
    Setting {
        name: "transaction.two.phase.commit.enable",
        default: "false",
        help: "let producers with the TWO_PHASE_COMMIT permission use prepared transactions that an external coordinator completes (KIP-939): they are never aborted by their timeout",
    },
    Setting {
        name: "transaction.liveness.missed.heartbeats",
        default: "3",
        help: "Sluice: a transactional producer that heartbeats (Sluice's client, transaction.heartbeat.interval.ms) and misses this many intervals has its unprepared transaction aborted, however long its timeout",
    },
    Setting {
        name: "transactional.id.expiration.ms",
        default: "604800000",
        help: "forget a transactional id idle this long with no open transaction",
    },
    Setting {
        name: "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        default: "10000",
        help: "how often transactions open past their timeout are looked for (and aborted)",
    },
    Setting {
        name: "testing.failpoints",
        default: "",
        help: "tests only: comma-separated failpoints (crash points txn.before_prepare, txn.after_prepare; fetch.ignore_lso makes read_committed ignore the LSO; produce.delay_after_verify holds a verified transactional batch 1.5 s before its replicated append; produce.ack_before_fsync acknowledges produces before their fsync; kv.mend_refuses_copies makes a damaged coordinator log refuse every peer's copy; replica.delay_start waits 3 s between creating a replicated partition's local copy and starting its replica; log.raft_control_batches appends two control batches of types clients do not know after each produce batch on an unreplicated partition; replica.delay_new_term holds a partition replica's apply of a new term's blank entry 3 s)",
    },
    Setting {
        name: "offsets.retention.check.interval.ms",
        default: "600000",
        help: "how often offset expiry and offsets-log compaction run",
    },
];

/// The log cleaner's broker settings (`log.cleaner.*`; the per-topic ones are in `LogConfig`).
#[derive(Debug, Clone, PartialEq)]
pub struct CleanerSettings {
    /// `log.cleaner.enable`
    pub enable: bool,
    /// `log.cleaner.threads`
    pub threads: usize,
    /// `log.cleaner.dedupe.buffer.size`
    pub dedupe_buffer_bytes: usize,
    /// `log.cleaner.io.max.bytes.per.second` (`None`: unlimited)
    pub io_max_bytes_per_second: Option<f64>,
    /// `log.cleaner.backoff.ms`
    pub backoff_ms: u64,
}

/// The resolved configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Every listener; the first is the one in-process callers and single-address logs use.
    pub listeners: Vec<ListenerConfig>,
    /// Cluster mode: the voters of the metadata quorum (empty: a single node).
    pub voters: BTreeMap<u64, String>,
    /// Cluster mode: this broker's Raft address if it is not among the voters (joining later).
    pub controller_listener: Option<String>,
    /// Cluster mode: the Raft port and every RPC to peers use mutual TLS (the
    /// `controller.listener.names` listener is SSL in `listener.security.protocol.map`).
    pub controller_tls: bool,
    pub security: SecuritySettings,
    pub listener: SocketAddr,
    pub advertised_host: String,
    pub advertised_port: i32,
    pub log_dir: PathBuf,
    pub node_id: i32,
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    pub auto_create_topics: bool,
    pub message_max_bytes: usize,
    pub request_bytes_max: usize,
    pub log: LogConfig,
    pub retention_check_interval_ms: u64,
    /// `log.scrub.bytes.per.second` (0: no scrubber)
    pub scrub_bytes_per_second: u64,
    pub cleaner: CleanerSettings,
    pub max_connections: usize,
    pub producer_id_expiration_ms: i64,
    pub metrics_listener: Option<SocketAddr>,
    pub log_json: bool,
    pub slow_request_ms: u64,
    pub groups: CoordinatorSettings,
    pub offsets_retention_check_interval_ms: u64,
    pub txns: TxnSettings,
    /// `testing.failpoints` (tests only; armed at start by `broker`, read through `failpoints`).
    pub failpoints: Vec<crate::failpoints::Failpoint>,
    /// `replica.lag.time.max.ms`: a follower behind the leader for longer is out of sync.
    pub replica_lag_time_max_ms: u64,
    /// `replica.fetch.max.bytes`: bytes of entries per Raft append to a follower (at least one).
    pub replica_fetch_max_bytes: usize,
    /// `raft.log.max.bytes.between.snapshots`: bytes applied between a partition replica's
    /// snapshots (its Raft log is purged up to each).
    pub raft_snapshot_bytes: u64,
    /// `replica.page.cache.tail.bytes`: a follower's partition log keeps at most this many
    /// bytes of its end in the page cache (-1: as `log.page.cache.tail.bytes` says).
    pub replica_page_cache_tail_bytes: i64,
    /// `replication.log.format=single` (the default): new partition groups keep their Raft log
    /// in the partition log.
    pub single_log: bool,
    /// `replication.in.flight.max.bytes` and `replication.partition.in.flight.max.bytes`.
    pub in_flight_max_bytes: u64,
    pub partition_in_flight_max_bytes: u64,
    /// Every setting's resolved value as text (for DescribeConfigs).
    pub values: BTreeMap<String, String>,
}

/// Where a value came from, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Flag,
    Env,
    File,
    Default,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("unknown setting '{0}'{1}")]
    Unknown(String, String),
    #[error("invalid value '{value}' for setting '{name}' (from {origin:?}): {reason}")]
    Invalid { name: String, value: String, origin: Source, reason: String },
    #[error("cannot read config file {0}: {1}")]
    File(String, String),
}

pub fn flag_name(setting: &str) -> String {
    setting.replace('.', "-")
}
pub fn env_name(setting: &str) -> String {
    format!("SLUICE_{}", setting.replace('.', "_").to_uppercase())
}

fn flatten(prefix: &str, table: &toml::Table, out: &mut BTreeMap<String, String>) -> Result<(), ConfigError> {
    for (k, v) in table {
        let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
        match v {
            toml::Value::Table(t) => flatten(&key, t, out)?,
            toml::Value::String(s) => {
                out.insert(key, s.clone());
            }
            toml::Value::Integer(i) => {
                out.insert(key, i.to_string());
            }
            toml::Value::Boolean(b) => {
                out.insert(key, b.to_string());
            }
            toml::Value::Float(f) => {
                out.insert(key, f.to_string());
            }
            toml::Value::Array(a) => {
                let parts: Vec<String> =
                    a.iter().map(|x| x.as_str().map(str::to_string).unwrap_or_else(|| x.to_string())).collect();
                out.insert(key, parts.join(","));
            }
            toml::Value::Datetime(d) => {
                out.insert(key, d.to_string());
            }
        }
    }
    Ok(())
}

fn suggestion(name: &str) -> String {
    let close: Vec<&str> = SETTINGS
        .iter()
        .map(|s| s.name)
        .filter(|s| s.contains(name) || name.contains(s) || s.split('.').any(|p| p.len() > 3 && name.contains(p)))
        .collect();
    if close.is_empty() {
        String::new()
    } else {
        format!(" (did you mean: {}?)", close.join(", "))
    }
}

/// Resolve settings from the three sources. `flags` holds `--name value` pairs already parsed
/// (by Kafka name), `env` the process environment, `file` the TOML text if `--config` was given.
pub fn resolve(
    flags: &BTreeMap<String, String>,
    env: &BTreeMap<String, String>,
    file: Option<&str>,
) -> Result<Config, ConfigError> {
    let mut file_values = BTreeMap::new();
    if let Some(text) = file {
        let table: toml::Table =
            text.parse().map_err(|e: toml::de::Error| ConfigError::File("--config".into(), e.to_string()))?;
        flatten("", &table, &mut file_values)?;
    }
    for k in file_values.keys().chain(flags.keys()) {
        if !SETTINGS.iter().any(|s| s.name == k) {
            return Err(ConfigError::Unknown(k.clone(), suggestion(k)));
        }
    }
    for k in env.keys() {
        if k.starts_with("SLUICE_") && k != "SLUICE_LOG" && !SETTINGS.iter().any(|s| env_name(s.name) == *k) {
            return Err(ConfigError::Unknown(k.clone(), String::new()));
        }
    }
    let get = |name: &str| -> (String, Source) {
        if let Some(v) = flags.get(name) {
            return (v.clone(), Source::Flag);
        }
        if let Some(v) = env.get(&env_name(name)) {
            return (v.clone(), Source::Env);
        }
        if let Some(v) = file_values.get(name) {
            return (v.clone(), Source::File);
        }
        let d = SETTINGS.iter().find(|s| s.name == name).map(|s| s.default).unwrap_or("");
        (d.to_string(), Source::Default)
    };
    fn parse<T: std::str::FromStr>(
        name: &str,
        (v, src): (String, Source),
        check: impl Fn(&T) -> Result<(), String>,
    ) -> Result<T, ConfigError>
    where
        T::Err: std::fmt::Display,
    {
        let invalid =
            |reason: String| ConfigError::Invalid { name: name.into(), value: v.clone(), origin: src, reason };
        let parsed: T = v.trim().parse().map_err(|e: T::Err| invalid(e.to_string()))?;
        check(&parsed).map_err(invalid)?;
        Ok(parsed)
    }
    let any = |_: &_| Ok(());
    let positive = |x: &i64| if *x > 0 { Ok(()) } else { Err("must be positive".to_string()) };
    let positive_i32 = |x: &i32| if *x > 0 { Ok(()) } else { Err("must be positive".to_string()) };
    let ms_or_never = |x: &i64| if *x >= -1 { Ok(()) } else { Err("must be -1 or ≥ 0".to_string()) };

    let (map_text, map_src) = get("listener.security.protocol.map");
    let mut protocol_map = BTreeMap::new();
    for pair in map_text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let proto = pair.split_once(':').and_then(|(n, p)| Some((n.trim().to_string(), SecurityProtocol::parse(p)?)));
        let Some((name, proto)) = proto else {
            return Err(ConfigError::Invalid {
                name: "listener.security.protocol.map".into(),
                value: map_text.clone(),
                origin: map_src,
                reason: format!("'{pair}' is not NAME:PROTOCOL (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)"),
            });
        };
        protocol_map.insert(name, proto);
    }
    let (listeners_text, lsrc) = get("listeners");
    let (adv, asrc) = get("advertised.listeners");
    let advertised =
        if adv.trim().is_empty() { Vec::new() } else { split_listeners("advertised.listeners", &adv, asrc)? };
    let mut listeners = Vec::new();
    for (name, host, port) in split_listeners("listeners", &listeners_text, lsrc)? {
        let invalid = |reason: String| ConfigError::Invalid {
            name: "listeners".into(),
            value: listeners_text.clone(),
            origin: lsrc,
            reason,
        };
        let protocol = *protocol_map
            .get(&name)
            .ok_or_else(|| invalid(format!("listener {name} has no entry in listener.security.protocol.map")))?;
        if listeners.iter().any(|l: &ListenerConfig| l.name == name) {
            return Err(invalid(format!("listener name {name} is used twice")));
        }
        let addr = socket_addr("listeners", &listeners_text, lsrc, &host, port)?;
        if port != 0 && listeners.iter().any(|l: &ListenerConfig| l.addr.port() == port) {
            return Err(invalid(format!("port {port} is used twice")));
        }
        let (advertised_host, advertised_port) = match advertised.iter().find(|(n, _, _)| *n == name) {
            Some((_, h, p)) => (h.clone(), i32::from(*p)),
            None => (addr.ip().to_string(), i32::from(port)),
        };
        listeners.push(ListenerConfig { name, protocol, addr, advertised_host, advertised_port });
    }
    if let Some((n, _, _)) = advertised.iter().find(|(n, _, _)| !listeners.iter().any(|l| l.name == *n)) {
        return Err(ConfigError::Invalid {
            name: "advertised.listeners".into(),
            value: adv.clone(),
            origin: asrc,
            reason: format!("{n} is not one of the listeners"),
        });
    }
    let Some(first) = listeners.first().cloned() else {
        return Err(ConfigError::Invalid {
            name: "listeners".into(),
            value: listeners_text,
            origin: lsrc,
            reason: "at least one listener is needed".into(),
        });
    };
    let (listener, advertised_host, advertised_port) = (first.addr, first.advertised_host, first.advertised_port);
    let security = security_settings(&get, &listeners)?;
    let controller_tls = {
        let (names, src) = get("controller.listener.names");
        let name = names.split(',').map(str::trim).find(|n| !n.is_empty()).unwrap_or("CONTROLLER").to_string();
        let invalid = |reason: String| ConfigError::Invalid {
            name: "listener.security.protocol.map".into(),
            value: map_text.clone(),
            origin: map_src,
            reason,
        };
        if listeners.iter().any(|l: &ListenerConfig| l.name == name) {
            return Err(ConfigError::Invalid {
                name: "controller.listener.names".into(),
                value: names.clone(),
                origin: src,
                reason: format!("{name} is a client listener in listeners; the Raft port is controller.quorum.voters'"),
            });
        }
        match protocol_map.get(&name) {
            None | Some(SecurityProtocol::Plaintext) => false,
            Some(SecurityProtocol::Ssl) => {
                if security.keystore.is_none() || security.truststore.is_none() {
                    return Err(invalid(format!(
                        "{name}:SSL (mutual TLS between brokers) needs ssl.keystore.location and ssl.truststore.location"
                    )));
                }
                true
            }
            Some(p) => return Err(invalid(format!("{name}: the Raft port speaks PLAINTEXT or SSL, not {p:?}"))),
        }
    };
    let (dir, _) = get("log.dirs");
    let dir = dir.split(',').next().unwrap_or("").trim().to_string();
    if dir.is_empty() {
        return Err(ConfigError::Invalid {
            name: "log.dirs".into(),
            value: dir,
            origin: Source::Default,
            reason: "must name a directory".into(),
        });
    }
    let message_max_bytes: i64 = parse("message.max.bytes", get("message.max.bytes"), |x: &i64| {
        if (64..=i64::from(i32::MAX)).contains(x) {
            Ok(())
        } else {
            Err("must be between 64 and 2147483647".into())
        }
    })?;
    let policy: String = parse("log.flush.policy", get("log.flush.policy"), |s: &String| match s.as_str() {
        "sync" | "interval" => Ok(()),
        _ => Err("must be 'sync' or 'interval'".into()),
    })?;
    let interval: i64 = parse("log.flush.interval.ms", get("log.flush.interval.ms"), positive)?;
    let flush =
        if policy == "sync" { FlushPolicy::Sync } else { FlushPolicy::Interval { interval_ms: interval as u64 } };
    let segment_bytes: i64 = parse("log.segment.bytes", get("log.segment.bytes"), |x: &i64| {
        if (1024..=i64::from(i32::MAX)).contains(x) {
            Ok(())
        } else {
            Err("must be between 1024 and 2147483647".into())
        }
    })?;
    let index_bytes: i64 = parse("log.index.size.max.bytes", get("log.index.size.max.bytes"), |x: &i64| {
        if *x >= 4096 {
            Ok(())
        } else {
            Err("must be ≥ 4096".into())
        }
    })?;
    let log = LogConfig {
        segment_bytes: segment_bytes as u64,
        segment_ms: parse("log.roll.ms", get("log.roll.ms"), positive)?,
        segment_index_bytes: index_bytes as usize,
        index_interval_bytes: parse::<i64>("log.index.interval.bytes", get("log.index.interval.bytes"), |x: &i64| {
            if *x >= 0 {
                Ok(())
            } else {
                Err("must be ≥ 0".into())
            }
        })? as u64,
        retention_ms: parse("log.retention.ms", get("log.retention.ms"), ms_or_never)?,
        retention_bytes: parse("log.retention.bytes", get("log.retention.bytes"), ms_or_never)?,
        max_message_bytes: message_max_bytes as usize,
        flush,
        cleanup_delete: true,
        cleanup_compact: false,
        page_cache_tail_bytes: parse("log.page.cache.tail.bytes", get("log.page.cache.tail.bytes"), |x: &i64| {
            if *x >= -1 {
                Ok(())
            } else {
                Err("must be ≥ 0, or -1 (keep all)".into())
            }
        })?,
        ..LogConfig::default()
    };
    let cleaner =
        CleanerSettings {
            enable: parse("log.cleaner.enable", get("log.cleaner.enable"), any)?,
            threads: parse::<i64>("log.cleaner.threads", get("log.cleaner.threads"), |x: &i64| {
                if (1..=64).contains(x) {
                    Ok(())
                } else {
                    Err("must be between 1 and 64".into())
                }
            })? as usize,
            dedupe_buffer_bytes: parse::<i64>(
                "log.cleaner.dedupe.buffer.size",
                get("log.cleaner.dedupe.buffer.size"),
                |x: &i64| if *x >= 1024 * 1024 { Ok(()) } else { Err("must be ≥ 1048576".into()) },
            )? as usize,
            io_max_bytes_per_second: {
                let rate: f64 = parse(
                    "log.cleaner.io.max.bytes.per.second",
                    get("log.cleaner.io.max.bytes.per.second"),
                    |x: &f64| if *x > 0.0 { Ok(()) } else { Err("must be > 0".into()) },
                )?;
                (rate < 1e300).then_some(rate)
            },
            backoff_ms: parse::<i64>("log.cleaner.backoff.ms", get("log.cleaner.backoff.ms"), |x: &i64| {
                if *x >= 0 {
                    Ok(())
                } else {
                    Err("must be ≥ 0".into())
                }
            })?
            .max(1) as u64,
        };
    let request_bytes_max: i64 = parse("socket.request.max.bytes", get("socket.request.max.bytes"), |x: &i64| {
        if (1024..=i64::from(i32::MAX)).contains(x) {
            Ok(())
        } else {
            Err("must be between 1024 and 2147483647".into())
        }
    })?;
    let num_partitions: i32 =
        parse(
            "num.partitions",
            get("num.partitions"),
            |x: &i32| {
                if *x >= 1 {
                    Ok(())
                } else {
                    Err("must be ≥ 1".into())
                }
            },
        )?;
    let rf: i16 = parse("default.replication.factor", get("default.replication.factor"), |x: &i16| {
        if *x == -1 || *x >= 1 {
            Ok(())
        } else {
            Err("must be -1 or ≥ 1".into())
        }
    })?;
    let voters = {
        let (v, src) = get("controller.quorum.voters");
        cluster::parse_voters(&v).map_err(|reason| ConfigError::Invalid {
            name: "controller.quorum.voters".into(),
            value: v.clone(),
            origin: src,
            reason,
        })?
    };
    let values: BTreeMap<String, String> = SETTINGS.iter().map(|s| (s.name.to_string(), get(s.name).0)).collect();
    // the broker-level defaults of topic configs, with Kafka's validation of the topic config
    if let Err((name, value, reason)) = topic_defs::check_broker_defaults(&values) {
        let origin = get(&name).1;
        return Err(ConfigError::Invalid { name, value, origin, reason });
    }
    Ok(Config {
        voters,
        controller_tls,
        controller_listener: {
            let (v, src) = get("controller.listener");
            let v = v.trim().to_string();
            if !v.is_empty() && v.parse::<std::net::SocketAddr>().is_err() {
                return Err(ConfigError::Invalid {
                    name: "controller.listener".into(),
                    value: v,
                    origin: src,
                    reason: "expected ip:port".into(),
                });
            }
            (!v.is_empty()).then_some(v)
        },
        listeners,
        security,
        listener,
        advertised_host,
        advertised_port,
        log_dir: PathBuf::from(dir),
        node_id: parse("node.id", get("node.id"), |x: &i32| if *x >= 0 { Ok(()) } else { Err("must be ≥ 0".into()) })?,
        num_partitions,
        default_replication_factor: rf,
        auto_create_topics: parse("auto.create.topics.enable", get("auto.create.topics.enable"), any)?,
        message_max_bytes: message_max_bytes as usize,
        request_bytes_max: request_bytes_max as usize,
        log,
        cleaner,
        retention_check_interval_ms: parse::<i64>(
            "log.retention.check.interval.ms",
            get("log.retention.check.interval.ms"),
            positive,
        )? as u64,
        scrub_bytes_per_second: parse::<i64>(
            "log.scrub.bytes.per.second",
            get("log.scrub.bytes.per.second"),
            |x: &i64| if *x >= 0 { Ok(()) } else { Err("must be >= 0".into()) },
        )? as u64,
        max_connections: parse::<i64>("max.connections", get("max.connections"), positive)? as usize,
        producer_id_expiration_ms: parse("producer.id.expiration.ms", get("producer.id.expiration.ms"), positive)?,
        metrics_listener: {
            let (v, src) = get("metrics.listener");
            if v.trim().is_empty() {
                None
            } else {
                Some(parse_listener("metrics.listener", &v, src)?)
            }
        },
        log_json: match get("log.format").0.as_str() {
            "text" => false,
            "json" => true,
            other => {
                return Err(ConfigError::Invalid {
                    name: "log.format".into(),
                    value: other.into(),
                    origin: get("log.format").1,
                    reason: "expected text or json".into(),
                })
            }
        },
        slow_request_ms: parse::<i64>("log.slow.request.ms", get("log.slow.request.ms"), |x: &i64| {
            if *x >= 0 {
                Ok(())
            } else {
                Err("must be ≥ 0 (0 logs every request)".into())
            }
        })? as u64,
        groups: CoordinatorSettings {
            group: GroupSettings {
                min_session_timeout_ms: parse(
                    "group.min.session.timeout.ms",
                    get("group.min.session.timeout.ms"),
                    positive_i32,
                )?,
                max_session_timeout_ms: parse(
                    "group.max.session.timeout.ms",
                    get("group.max.session.timeout.ms"),
                    positive_i32,
                )?,
                initial_rebalance_delay_ms: parse(
                    "group.initial.rebalance.delay.ms",
                    get("group.initial.rebalance.delay.ms"),
                    |x: &i32| if *x >= 0 { Ok(()) } else { Err("must be ≥ 0".into()) },
                )?,
                max_size: parse::<i32>("group.max.size", get("group.max.size"), |x: &i32| {
                    if *x >= 1 {
                        Ok(())
                    } else {
                        Err("must be ≥ 1".into())
                    }
                })? as usize,
            },
            replication_factor: parse(
                "offsets.topic.replication.factor",
                get("offsets.topic.replication.factor"),
                |x: &i32| if (1..=7).contains(x) { Ok(()) } else { Err("must be between 1 and 7".into()) },
            )?,
            partitions: parse("offsets.topic.num.partitions", get("offsets.topic.num.partitions"), |x: &i32| {
                if (1..=1000).contains(x) {
                    Ok(())
                } else {
                    Err("must be between 1 and 1000".into())
                }
            })?,
            segment_bytes: parse::<i64>(
                "offsets.topic.segment.bytes",
                get("offsets.topic.segment.bytes"),
                |x: &i64| {
                    if (1024..=i64::from(i32::MAX)).contains(x) {
                        Ok(())
                    } else {
                        Err("must be between 1024 and 2147483647".into())
                    }
                },
            )? as u64,
            metadata_max_bytes: parse::<i64>(
                "offset.metadata.max.bytes",
                get("offset.metadata.max.bytes"),
                |x: &i64| {
                    if *x >= 0 {
                        Ok(())
                    } else {
                        Err("must be ≥ 0".into())
                    }
                },
            )? as usize,
            retention_ms: parse("offsets.retention.ms", get("offsets.retention.ms"), ms_or_never)?,
            consumer_session_timeout_ms: parse(
                "group.consumer.session.timeout.ms",
                get("group.consumer.session.timeout.ms"),
                positive_i32,
            )?,
            consumer_heartbeat_interval_ms: parse(
                "group.consumer.heartbeat.interval.ms",
                get("group.consumer.heartbeat.interval.ms"),
                positive_i32,
            )?,
        },
        offsets_retention_check_interval_ms: parse::<i64>(
            "offsets.retention.check.interval.ms",
            get("offsets.retention.check.interval.ms"),
            positive,
        )? as u64,
        txns: TxnSettings {
            partitions: parse(
                "transaction.state.log.num.partitions",
                get("transaction.state.log.num.partitions"),
                |x: &i32| {
                    if (1..=1000).contains(x) {
                        Ok(())
                    } else {
                        Err("must be between 1 and 1000".into())
                    }
                },
            )?,
            segment_bytes: 104_857_600,
            replication_factor: parse(
                "transaction.state.log.replication.factor",
                get("transaction.state.log.replication.factor"),
                |x: &i32| if (1..=7).contains(x) { Ok(()) } else { Err("must be between 1 and 7".into()) },
            )?,
            max_timeout_ms: parse("transaction.max.timeout.ms", get("transaction.max.timeout.ms"), positive_i32)?,
            version: parse("transaction.version", get("transaction.version"), |x: &i16| {
                if (0..=2).contains(x) {
                    Ok(())
                } else {
                    Err("must be 0, 1 or 2".into())
                }
            })?,
            id_expiration_ms: parse("transactional.id.expiration.ms", get("transactional.id.expiration.ms"), positive)?,
            two_phase_commit: parse(
                "transaction.two.phase.commit.enable",
                get("transaction.two.phase.commit.enable"),
                any,
            )?,
            missed_heartbeats: parse::<i64>(
                "transaction.liveness.missed.heartbeats",
                get("transaction.liveness.missed.heartbeats"),
                |x: &i64| if (1..=1000).contains(x) { Ok(()) } else { Err("must be between 1 and 1000".into()) },
            )? as u32,
            abort_check_interval_ms: parse::<i64>(
                "transaction.abort.timed.out.transaction.cleanup.interval.ms",
                get("transaction.abort.timed.out.transaction.cleanup.interval.ms"),
                positive,
            )? as u64,
        },
        failpoints: {
            let (v, src) = get("testing.failpoints");
            let mut list = Vec::new();
            for name in v.split(',').map(str::trim).filter(|f| !f.is_empty()) {
                match crate::failpoints::Failpoint::parse(name) {
                    Some(f) => list.push(f),
                    None => {
                        let known: Vec<&str> = crate::failpoints::Failpoint::ALL.iter().map(|f| f.name()).collect();
                        return Err(ConfigError::Invalid {
                            name: "testing.failpoints".into(),
                            value: v.clone(),
                            origin: src,
                            reason: format!("unknown failpoint '{name}' (known: {})", known.join(", ")),
                        });
                    }
                }
            }
            list
        },
        replica_lag_time_max_ms: parse::<i64>("replica.lag.time.max.ms", get("replica.lag.time.max.ms"), positive)?
            as u64,
        replica_fetch_max_bytes: parse::<i64>("replica.fetch.max.bytes", get("replica.fetch.max.bytes"), positive)?
            as usize,
        raft_snapshot_bytes: parse::<i64>(
            "raft.log.max.bytes.between.snapshots",
            get("raft.log.max.bytes.between.snapshots"),
            positive,
        )? as u64,
        replica_page_cache_tail_bytes: parse(
            "replica.page.cache.tail.bytes",
            get("replica.page.cache.tail.bytes"),
            |x: &i64| if *x >= -1 { Ok(()) } else { Err("must be ≥ 0, or -1 (as log.page.cache.tail.bytes)".into()) },
        )?,
        single_log: match get("replication.log.format").0.as_str() {
            "double" => false,
            "single" => true,
            other => {
                return Err(ConfigError::Invalid {
                    name: "replication.log.format".into(),
                    value: other.into(),
                    origin: get("replication.log.format").1,
                    reason: "expected double or single".into(),
                })
            }
        },
        in_flight_max_bytes: parse::<i64>(
            "replication.in.flight.max.bytes",
            get("replication.in.flight.max.bytes"),
            positive,
        )? as u64,
        partition_in_flight_max_bytes: parse::<i64>(
            "replication.partition.in.flight.max.bytes",
            get("replication.partition.in.flight.max.bytes"),
            positive,
        )? as u64,
        values,
    })
}

/// Parse `NAME://host:port,...` (a bare `host:port` is PLAINTEXT).
fn split_listeners(name: &str, value: &str, source: Source) -> Result<Vec<(String, String, u16)>, ConfigError> {
    let invalid =
        |reason: String| ConfigError::Invalid { name: name.into(), value: value.into(), origin: source, reason };
    let mut out = Vec::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (lname, rest) = match item.split_once("://") {
            Some((n, rest)) => (n.trim().to_ascii_uppercase(), rest),
            None => ("PLAINTEXT".to_string(), item),
        };
        let (host, port) =
            rest.rsplit_once(':').ok_or_else(|| invalid(format!("'{item}': expected NAME://host:port")))?;
        let port: u16 = port.parse().map_err(|_| invalid(format!("'{item}': port must be a number 0-65535")))?;
        out.push((lname, host.trim_matches(|c| c == '[' || c == ']').to_string(), port));
    }
    Ok(out)
}

fn socket_addr(name: &str, value: &str, source: Source, host: &str, port: u16) -> Result<SocketAddr, ConfigError> {
    let host = if host.is_empty() { "0.0.0.0" } else { host };
    let host = if host == "localhost" { "127.0.0.1" } else { host };
    let ip: std::net::IpAddr = host.parse().map_err(|_| ConfigError::Invalid {
        name: name.into(),
        value: value.into(),
        origin: source,
        reason: "host must be an IP address (or localhost)".into(),
    })?;
    Ok(SocketAddr::new(ip, port))
}

fn parse_listener(name: &str, value: &str, source: Source) -> Result<SocketAddr, ConfigError> {
    let list = split_listeners(name, value, source)?;
    let (_, host, port) = list.first().ok_or_else(|| ConfigError::Invalid {
        name: name.into(),
        value: value.into(),
        origin: source,
        reason: "expected host:port".into(),
    })?;
    socket_addr(name, value, source, host, *port)
}

/// TLS, SASL, authorizer, limits and quotas.
fn security_settings(
    get: &dyn Fn(&str) -> (String, Source),
    listeners: &[ListenerConfig],
) -> Result<SecuritySettings, ConfigError> {
    let invalid = |name: &str, reason: String| {
        let (value, origin) = get(name);
        ConfigError::Invalid { name: name.into(), value, origin, reason }
    };
    let path = |name: &str| {
        let v = get(name).0;
        (!v.trim().is_empty()).then(|| PathBuf::from(v.trim()))
    };
    let number = |name: &str| -> Result<i64, ConfigError> {
        let v = get(name).0;
        v.trim().parse::<i64>().map_err(|e| invalid(name, e.to_string())).and_then(|x| {
            if x > 0 {
                Ok(x)
            } else {
                Err(invalid(name, "must be positive".into()))
            }
        })
    };
    let mut s = SecuritySettings {
        keystore: path("ssl.keystore.location"),
        truststore: path("ssl.truststore.location"),
        ..Default::default()
    };
    s.client_auth = match get("ssl.client.auth").0.trim().to_ascii_lowercase().as_str() {
        "none" | "" => ClientAuth::None,
        "requested" => ClientAuth::Requested,
        "required" => ClientAuth::Required,
        _ => return Err(invalid("ssl.client.auth", "expected none, requested or required".into())),
    };
    if let Some(l) = listeners.iter().find(|l| l.protocol.tls()) {
        if s.keystore.is_none() {
            return Err(invalid("listeners", format!("listener {} uses TLS: set ssl.keystore.location", l.name)));
        }
    }
    if s.client_auth != ClientAuth::None && s.truststore.is_none() {
        return Err(invalid("ssl.client.auth", "needs ssl.truststore.location".into()));
    }
    let mechs: Vec<String> =
        get("sasl.enabled.mechanisms").0.split(',').map(|m| m.trim().to_string()).filter(|m| !m.is_empty()).collect();
    if let Some(bad) = mechs.iter().find(|m| !["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"].contains(&m.as_str())) {
        return Err(invalid(
            "sasl.enabled.mechanisms",
            format!("unsupported mechanism {bad} (supported: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"),
        ));
    }
    s.sasl_mechanisms = mechs;
    for pair in get("sasl.bootstrap.users").0.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match pair.split_once(':') {
            Some((u, p)) if !u.trim().is_empty() && !p.is_empty() => {
                s.bootstrap_users.push((u.trim().to_string(), p.to_string()))
            }
            _ => return Err(invalid("sasl.bootstrap.users", "expected name:password pairs".into())),
        }
    }
    s.sasl_max_receive = number("sasl.server.max.receive.size")? as usize;
    s.authorizer = !get("authorizer.class.name").0.trim().is_empty();
    for p in get("super.users").0.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        if !p.contains(':') {
            return Err(invalid("super.users", format!("'{p}' must be of the form User:<name>")));
        }
        s.super_users.push(p.to_string());
    }
    s.allow_if_no_acl = match get("allow.everyone.if.no.acl.found").0.trim() {
        "true" => true,
        "false" => false,
        _ => return Err(invalid("allow.everyone.if.no.acl.found", "expected true or false".into())),
    };
    s.connections_max_idle_ms = number("connections.max.idle.ms")? as u64;
    s.max_connections_per_ip = number("max.connections.per.ip")?.min(i64::from(i32::MAX)) as usize;
    for pair in get("max.connections.per.ip.overrides").0.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let parsed = pair.rsplit_once(':').and_then(|(ip, n)| Some((ip.trim().parse().ok()?, n.trim().parse().ok()?)));
        let Some((ip, n)) = parsed else {
            return Err(invalid("max.connections.per.ip.overrides", format!("'{pair}' is not ip:count")));
        };
        s.max_connections_per_ip_overrides.insert(ip, n);
    }
    let rate = |name: &str| -> Result<Option<u64>, ConfigError> {
        let x = number(name)?;
        Ok((x < i64::MAX).then_some(x as u64))
    };
    s.producer_byte_rate = rate("quota.producer.default")?;
    s.consumer_byte_rate = rate("quota.consumer.default")?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn defaults() {
        let c = resolve(&m(&[]), &m(&[]), None).unwrap();
        assert_eq!(c.listener.to_string(), "127.0.0.1:9092");
        assert_eq!(c.log_dir, PathBuf::from("./sluice-data"));
        assert_eq!(c.log.flush, FlushPolicy::Sync);
        assert_eq!(c.advertised_port, 9092);
    }

    #[test]
    fn precedence_flag_env_file() {
        let file = "\"log.dirs\" = \"/file\"\nnum.partitions = 3\n[log.flush]\npolicy = \"interval\"\n";
        let c = resolve(&m(&[]), &m(&[]), Some(file)).unwrap();
        assert_eq!(c.log_dir, PathBuf::from("/file"));
        assert_eq!(c.num_partitions, 3);
        assert!(matches!(c.log.flush, FlushPolicy::Interval { .. }));
        let c = resolve(&m(&[]), &m(&[("SLUICE_LOG_DIRS", "/env")]), Some(file)).unwrap();
        assert_eq!(c.log_dir, PathBuf::from("/env"));
        let c = resolve(&m(&[("log.dirs", "/flag")]), &m(&[("SLUICE_LOG_DIRS", "/env")]), Some(file)).unwrap();
        assert_eq!(c.log_dir, PathBuf::from("/flag"));
    }

    #[test]
    fn the_raft_port_is_plaintext_or_mutual_tls() {
        assert!(!resolve(&m(&[]), &m(&[]), None).unwrap().controller_tls);
        let map = "PLAINTEXT:PLAINTEXT,CONTROLLER:SSL";
        let e = resolve(&m(&[("listener.security.protocol.map", map)]), &m(&[]), None).unwrap_err();
        assert!(e.to_string().contains("ssl.truststore.location"), "{e}");
        let both = [
            ("listener.security.protocol.map", map),
            ("ssl.keystore.location", "/k.pem"),
            ("ssl.truststore.location", "/ca.pem"),
        ];
        assert!(resolve(&m(&both), &m(&[]), None).unwrap().controller_tls);
        let sasl = [("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_SSL")];
        let e = resolve(&m(&sasl), &m(&[]), None).unwrap_err();
        assert!(e.to_string().contains("PLAINTEXT or SSL"), "{e}");
        let clash = [("controller.listener.names", "PLAINTEXT")];
        let e = resolve(&m(&clash), &m(&[]), None).unwrap_err();
        assert!(e.to_string().contains("controller.listener.names"), "{e}");
    }

    #[test]
    fn errors_name_the_setting() {
        let e = resolve(&m(&[]), &m(&[]), Some("log.dir = \"x\"")).unwrap_err();
        assert!(e.to_string().contains("log.dir"), "{e}");
        let e = resolve(&m(&[("num.partitions", "zero")]), &m(&[]), None).unwrap_err();
        assert!(e.to_string().contains("num.partitions"), "{e}");
        let e = resolve(&m(&[]), &m(&[("SLUICE_NUM_PARTITONS", "3")]), None).unwrap_err();
        assert!(e.to_string().contains("SLUICE_NUM_PARTITONS"), "{e}");
        let e = resolve(&m(&[("listeners", "SSL://1.2.3.4:1")]), &m(&[]), None).unwrap_err();
        assert!(e.to_string().contains("listeners"), "{e}");
        let e = resolve(&m(&[("log.flush.policy", "sometimes")]), &m(&[]), None).unwrap_err();
        assert!(e.to_string().contains("log.flush.policy"), "{e}");
        assert!(resolve(&m(&[]), &m(&[]), Some("not toml [")).is_err());
    }

    #[test]
    fn the_page_cache_tail_is_kept_whole_unless_set() {
        assert_eq!(resolve(&m(&[]), &m(&[]), None).unwrap().log.page_cache_tail_bytes, -1);
        let c = resolve(&m(&[("log.page.cache.tail.bytes", "134217728")]), &m(&[]), None).unwrap();
        assert_eq!(c.log.page_cache_tail_bytes, 134_217_728);
        let c = resolve(&m(&[]), &m(&[("SLUICE_LOG_PAGE_CACHE_TAIL_BYTES", "0")]), None).unwrap();
        assert_eq!(c.log.page_cache_tail_bytes, 0);
        let e = resolve(&m(&[("log.page.cache.tail.bytes", "-2")]), &m(&[]), None).unwrap_err();
        assert!(e.to_string().contains("log.page.cache.tail.bytes"), "{e}");
    }
}
