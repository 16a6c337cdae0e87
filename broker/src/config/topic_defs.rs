//! Kafka's topic configs as definitions: every one Kafka 4.x defines (and the three 3.x ones it
//! removed, which 3.x clients still send), with Kafka's type, default, validation and broker
//! synonym, and what each means here (`Meaning`). Part of the config (a leaf): the broker's own
//! settings are checked against these definitions when the config is resolved, and
//! `topic_config.rs` resolves a topic's settings with them.

use std::collections::BTreeMap;

/// Kafka's `ConfigDef.Type`, as DescribeConfigs v3+ reports it (`config_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Bool,
    Str,
    Int,
    Long,
    Double,
    List,
}

impl Kind {
    pub fn code(self) -> i8 {
        match self {
            Kind::Bool => 1,
            Kind::Str => 2,
            Kind::Int => 3,
            Kind::Long => 5,
            Kind::Double => 6,
            Kind::List => 7,
        }
    }
}

/// Kafka's validator of a config's value.
#[derive(Debug, Clone, Copy)]
pub enum Check {
    Any,
    AtLeast(i64),
    /// Inclusive bounds.
    Between(i64, i64),
    OneOf(&'static [&'static str]),
    /// A non-empty list of these.
    ListOf(&'static [&'static str]),
    /// A fraction in [0, 1].
    Ratio,
    /// `*`, or `partition:broker` pairs (Kafka's `ThrottledReplicaListValidator`).
    ThrottledReplicas,
    /// gzip's levels: -1 (the codec's default) or 1..=9.
    GzipLevel,
    /// Tiered storage is not built: only `false`, as Kafka answers when the broker's
    /// `remote.log.storage.system.enable` is off.
    TieredStorageOff,
}

/// What a config does in Sluice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Meaning {
    /// Applied as Kafka applies it.
    Applied,
    /// Accepted, validated, stored and described, with no effect here, for the reason given
    /// (docs/compatibility.md lists them).
    Inert(&'static str),
    /// Removed in Kafka 4.0; accepted from 3.x clients without effect, described only when set.
    Removed,
}

#[derive(Debug, Clone, Copy)]
pub struct TopicConfigDef {
    pub name: &'static str,
    pub kind: Kind,
    pub default: &'static str,
    pub check: Check,
    /// The broker config whose value is the topic's default (Kafka's `ServerTopicConfigSynonyms`).
    pub synonym: Option<&'static str>,
    pub meaning: Meaning,
    pub doc: &'static str,
}

const LONG_MAX: &str = "9223372036854775807";
pub(crate) const CODECS: &[&str] = &["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"];

const fn def(
    name: &'static str,
    kind: Kind,
    default: &'static str,
    check: Check,
    synonym: Option<&'static str>,
    meaning: Meaning,
    doc: &'static str,
) -> TopicConfigDef {
    TopicConfigDef { name, kind, default, check, synonym, meaning, doc }
}

use Check::*;
use Kind::*;
use Meaning::*;

const NO_TIERED: &str = "tiered storage is not built";
const RAFT: &str = "replication is Raft's";

/// Every topic config, in Kafka's order of `LogConfig`.
pub const TOPIC_CONFIGS: &[TopicConfigDef] = &[
    def("segment.bytes", Int, "1073741824", AtLeast(1024 * 1024), Some("log.segment.bytes"), Applied,
        "The segment file size of the log."),
    def("segment.ms", Long, "604800000", AtLeast(1), Some("log.roll.ms"), Applied,
        "The time after which the log rolls a new segment even if the active one is not full."),
    def("segment.jitter.ms", Long, "0", AtLeast(0), Some("log.roll.jitter.ms"),
        Inert("segments roll at segment.ms exactly"),
        "The maximum random jitter subtracted from segment.ms."),
    def("segment.index.bytes", Int, "10485760", AtLeast(4), Some("log.index.size.max.bytes"), Applied,
        "The size of the index that maps offsets to file positions (Sluice's minimum is 4096)."),
    def("flush.messages", Long, LONG_MAX, AtLeast(1), Some("log.flush.interval.messages"),
        Inert("flush.policy governs fsync: with sync (the default) every acknowledged batch is on disk, which meets any flush.messages"),
        "The number of messages written between fsyncs."),
    def("flush.ms", Long, "1000", AtLeast(0), Some("log.flush.interval.ms"), Applied,
        "With flush.policy=interval, the time between fsyncs; with sync (the default) every acknowledged batch is on disk."),
    def("retention.bytes", Long, "-1", Any, Some("log.retention.bytes"), Applied,
        "The size a partition may grow to before old segments are deleted (-1: no limit)."),
    def("retention.ms", Long, "604800000", AtLeast(-1), Some("log.retention.ms"), Applied,
        "How long a segment is kept after its newest record (-1: no limit)."),
    def("max.message.bytes", Int, "1048588", AtLeast(0), Some("message.max.bytes"), Applied,
        "The largest record batch size allowed (after recompression, if compression.type makes one)."),
    def("index.interval.bytes", Int, "4096", AtLeast(0), Some("log.index.interval.bytes"), Applied,
        "How often an offset index entry is added."),
    def("delete.retention.ms", Long, "86400000", AtLeast(0), Some("log.cleaner.delete.retention.ms"), Applied,
        "How long delete tombstones are kept on compacted topics."),
    def("min.compaction.lag.ms", Long, "0", AtLeast(0), Some("log.cleaner.min.compaction.lag.ms"), Applied,
        "The minimum time a record stays uncompacted."),
    def("max.compaction.lag.ms", Long, LONG_MAX, AtLeast(1), Some("log.cleaner.max.compaction.lag.ms"), Applied,
        "The maximum time a record stays ineligible for compaction."),
    def("file.delete.delay.ms", Long, "60000", AtLeast(0), Some("log.segment.delete.delay.ms"),
        Inert("a segment is unlinked at once; readers that have it open keep reading it"),
        "The time to wait before deleting a file from the filesystem."),
    def("min.cleanable.dirty.ratio", Double, "0.5", Ratio, Some("log.cleaner.min.cleanable.ratio"), Applied,
        "How dirty a log must be before the cleaner compacts it."),
    def("cleanup.policy", List, "delete", ListOf(&["compact", "delete"]), Some("log.cleanup.policy"), Applied,
        "delete: retention removes old segments; compact: the log cleaner keeps the newest record of each key (records need a key)."),
    def("unclean.leader.election.enable", Bool, "false", Any, Some("unclean.leader.election.enable"),
        Inert("a Raft leader is always elected from a majority holding every committed record: there is no unclean election"),
        "Whether replicas outside the ISR may become leader."),
    def("min.insync.replicas", Int, "1", AtLeast(1), Some("min.insync.replicas"), Applied,
        "With acks=all, the replicas that must have a write before it is acknowledged (NOT_ENOUGH_REPLICAS when fewer are in sync)."),
    def("compression.type", Str, "producer", OneOf(CODECS), Some("compression.type"), Applied,
        "The topic's final codec: producer keeps the producer's; another recompresses batches that differ."),
    def("compression.gzip.level", Int, "-1", GzipLevel, Some("compression.gzip.level"), Applied,
        "The level of gzip when the broker recompresses."),
    def("compression.lz4.level", Int, "9", Between(1, 17), Some("compression.lz4.level"),
        Inert("the broker's lz4 encoder has one level"),
        "The level of lz4 when the broker recompresses."),
    def("compression.zstd.level", Int, "3", Between(-131072, 22), Some("compression.zstd.level"), Applied,
        "The level of zstd when the broker recompresses."),
    def("preallocate", Bool, "false", Any, Some("log.preallocate"),
        Inert("segments grow as written; their indexes are preallocated"),
        "Whether segment files are preallocated."),
    def("message.timestamp.type", Str, "CreateTime", OneOf(&["CreateTime", "LogAppendTime"]),
        Some("log.message.timestamp.type"), Applied,
        "CreateTime keeps the producer's timestamps; LogAppendTime stamps the broker's."),
    def("message.timestamp.before.max.ms", Long, LONG_MAX, AtLeast(0), Some("log.message.timestamp.before.max.ms"), Applied,
        "With CreateTime, how far in the past a record's timestamp may be (INVALID_TIMESTAMP beyond)."),
    def("message.timestamp.after.max.ms", Long, "3600000", AtLeast(0), Some("log.message.timestamp.after.max.ms"), Applied,
        "With CreateTime, how far in the future a record's timestamp may be (INVALID_TIMESTAMP beyond)."),
    def("leader.replication.throttled.replicas", List, "", ThrottledReplicas, None, Inert(RAFT),
        "Replicas whose replication the leader throttles."),
    def("follower.replication.throttled.replicas", List, "", ThrottledReplicas, None, Inert(RAFT),
        "Replicas whose replication the follower throttles."),
    def("remote.storage.enable", Bool, "false", TieredStorageOff, None, Inert(NO_TIERED),
        "Tiered storage for the topic."),
    def("local.retention.ms", Long, "-2", AtLeast(-2), Some("log.local.retention.ms"), Inert(NO_TIERED),
        "Local retention with tiered storage (-2: retention.ms)."),
    def("local.retention.bytes", Long, "-2", AtLeast(-2), Some("log.local.retention.bytes"), Inert(NO_TIERED),
        "Local retention with tiered storage (-2: retention.bytes)."),
    def("remote.log.copy.disable", Bool, "false", Any, None, Inert(NO_TIERED), "Stop copying to tiered storage."),
    def("remote.log.delete.on.disable", Bool, "false", Any, None, Inert(NO_TIERED),
        "Delete tiered data when tiered storage is disabled."),
    def("flush.policy", Str, "sync", OneOf(&["sync", "interval"]), Some("log.flush.policy"), Applied,
        "Sluice's own: sync fsyncs before acknowledging (the default); interval every flush.ms."),
    def("message.format.version", Str, "3.0-IV1", Any, Some("log.message.format.version"), Removed,
        "Removed in Kafka 4.0 (every batch is v2)."),
    def("message.downconversion.enable", Bool, "true", Any, Some("log.message.downconversion.enable"), Removed,
        "Removed in Kafka 4.0 (no down-conversion)."),
    def("message.timestamp.difference.max.ms", Long, LONG_MAX, AtLeast(0), Some("log.message.timestamp.difference.max.ms"),
        Removed,
        "Removed in Kafka 4.0; before that the default of message.timestamp.before.max.ms and after.max.ms."),
];

pub fn find(name: &str) -> Option<&'static TopicConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// The topic configs whose value is a list (IncrementalAlterConfigs APPEND and SUBTRACT).
pub fn is_list(name: &str) -> bool {
    find(name).is_some_and(|d| d.kind == Kind::List)
}

/// A topic config refused: its name and why (INVALID_CONFIG where it reaches a client).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidTopicConfig(pub String, pub String);

impl std::fmt::Display for InvalidTopicConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid config {}: {}", self.0, self.1)
    }
}

impl std::error::Error for InvalidTopicConfig {}

pub(crate) fn invalid(name: &str, value: &str, why: impl std::fmt::Display) -> InvalidTopicConfig {
    InvalidTopicConfig(name.into(), format!("invalid value '{value}': {why}"))
}

pub(crate) fn parse_int(d: &TopicConfigDef, v: &str) -> Result<i64, InvalidTopicConfig> {
    let x: i64 = v.trim().parse().map_err(|_| invalid(d.name, v, "not a number"))?;
    if d.kind == Kind::Int && i32::try_from(x).is_err() {
        return Err(invalid(d.name, v, "out of range of a 32-bit integer"));
    }
    Ok(x)
}

pub(crate) fn list_items(v: &str) -> Vec<&str> {
    v.split(',').map(str::trim).filter(|x| !x.is_empty()).collect()
}

impl TopicConfigDef {
    /// Kafka's validation of `v` for this config: type, then range.
    pub fn validate(&self, v: &str) -> Result<(), InvalidTopicConfig> {
        let t = v.trim();
        match self.kind {
            Kind::Bool if !t.eq_ignore_ascii_case("true") && !t.eq_ignore_ascii_case("false") => {
                return Err(invalid(self.name, v, "expected true or false"))
            }
            Kind::Int | Kind::Long => {
                let x = parse_int(self, v)?;
                match self.check {
                    AtLeast(min) if x < min => return Err(invalid(self.name, v, format!("must be at least {min}"))),
                    Between(lo, hi) if x < lo || x > hi => {
                        return Err(invalid(self.name, v, format!("must be between {lo} and {hi}")))
                    }
                    GzipLevel if x != -1 && !(1..=9).contains(&x) => {
                        return Err(invalid(self.name, v, "must be -1 or between 1 and 9"))
                    }
                    _ => {}
                }
            }
            Kind::Double => {
                let x: f64 = t.parse().map_err(|_| invalid(self.name, v, "not a number"))?;
                if matches!(self.check, Ratio) && !(0.0..=1.0).contains(&x) {
                    return Err(invalid(self.name, v, "must be between 0 and 1"));
                }
            }
            _ => {}
        }
        match self.check {
            OneOf(allowed) if !allowed.contains(&t) => {
                Err(invalid(self.name, v, format!("expected one of {}", allowed.join(", "))))
            }
            ListOf(allowed) => {
                let items = list_items(v);
                if items.is_empty() {
                    return Err(invalid(self.name, v, "the list is empty"));
                }
                match items.iter().find(|x| !allowed.contains(x)) {
                    Some(bad) => Err(invalid(self.name, v, format!("'{bad}' is not one of {}", allowed.join(", ")))),
                    None => Ok(()),
                }
            }
            ThrottledReplicas => {
                let items = list_items(v);
                if items == ["*"] {
                    return Ok(());
                }
                let pair = |x: &str| {
                    x.split_once(':')
                        .is_some_and(|(p, b)| p.trim().parse::<u32>().is_ok() && b.trim().parse::<u32>().is_ok())
                };
                match items.iter().find(|x| !pair(x)) {
                    Some(bad) => {
                        Err(invalid(self.name, v, format!("'{bad}': expected * or a list of partition:broker pairs")))
                    }
                    None => Ok(()),
                }
            }
            TieredStorageOff if t.eq_ignore_ascii_case("true") => Err(InvalidTopicConfig(
                self.name.into(),
                "Tiered Storage functionality is disabled in the broker (Sluice has no tiered storage)".into(),
            )),
            _ => Ok(()),
        }
    }
}

/// Check the broker-level defaults of topic configs (`compression.type`, `min.insync.replicas`,
/// ...) with Kafka's validation: a bad one stops the broker at startup.
pub fn check_broker_defaults(values: &BTreeMap<String, String>) -> Result<(), (String, String, String)> {
    for d in TOPIC_CONFIGS {
        let Some(s) = d.synonym else { continue };
        let Some(v) = values.get(s) else { continue };
        if !super::SETTINGS.iter().any(|x| x.name == s) {
            continue;
        }
        if let Err(e) = d.validate(v) {
            return Err((s.to_string(), v.clone(), e.to_string()));
        }
    }
    Ok(())
}
