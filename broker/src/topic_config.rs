//! Kafka's topic configs: every one Kafka 4.x defines (and the three 3.x ones it removed, which
//! 3.x clients still send), with Kafka's type, default, validation and broker synonym, and what
//! each means here (`Meaning`). `TopicSettings::resolve` turns a topic's overrides, over the
//! broker's defaults, into what the produce path and the log apply.
//!
//! Validation is Kafka's (`LogConfig`'s `ConfigDef`): an unknown name or a value out of range is
//! INVALID_CONFIG at the edge. Overrides stored before a range was tightened (Sluice accepted
//! `segment.bytes` down to 100 before it followed Kafka's 1 MiB minimum) still load: ranges are
//! checked when a config is set, types whenever one is read.

use crate::config::Config;
use crate::dynamic_config::DynamicConfigs;
use sluice_protocol::batch::Compression;
use sluice_storage::{FlushPolicy, LogConfig};
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
const CODECS: &[&str] = &["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"];

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

const NO_CLEANER: &str = "compaction is not built yet (issue 20): compacted topics keep every record";
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
    def("delete.retention.ms", Long, "86400000", AtLeast(0), Some("log.cleaner.delete.retention.ms"), Inert(NO_CLEANER),
        "How long delete tombstones are kept on compacted topics."),
    def("min.compaction.lag.ms", Long, "0", AtLeast(0), Some("log.cleaner.min.compaction.lag.ms"), Inert(NO_CLEANER),
        "The minimum time a record stays uncompacted."),
    def("max.compaction.lag.ms", Long, LONG_MAX, AtLeast(1), Some("log.cleaner.max.compaction.lag.ms"), Inert(NO_CLEANER),
        "The maximum time a record stays ineligible for compaction."),
    def("file.delete.delay.ms", Long, "60000", AtLeast(0), Some("log.segment.delete.delay.ms"),
        Inert("a segment is unlinked at once; readers that have it open keep reading it"),
        "The time to wait before deleting a file from the filesystem."),
    def("min.cleanable.dirty.ratio", Double, "0.5", Ratio, Some("log.cleaner.min.cleanable.ratio"), Inert(NO_CLEANER),
        "How dirty a log must be before the cleaner compacts it."),
    def("cleanup.policy", List, "delete", ListOf(&["compact", "delete"]), Some("log.cleanup.policy"), Applied,
        "delete: retention removes old segments; compact: records need a key (compaction itself: issue 20)."),
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

fn invalid(name: &str, value: &str, why: impl std::fmt::Display) -> InvalidTopicConfig {
    InvalidTopicConfig(name.into(), format!("invalid value '{value}': {why}"))
}

fn parse_int(d: &TopicConfigDef, v: &str) -> Result<i64, InvalidTopicConfig> {
    let x: i64 = v.trim().parse().map_err(|_| invalid(d.name, v, "not a number"))?;
    if d.kind == Kind::Int && i32::try_from(x).is_err() {
        return Err(invalid(d.name, v, "out of range of a 32-bit integer"));
    }
    Ok(x)
}

fn list_items(v: &str) -> Vec<&str> {
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

/// What the broker applies for one topic.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicSettings {
    pub log: LogConfig,
    /// The codec every stored batch must have, with its level; `None`: the producer's.
    pub compression: Option<(Compression, Option<i32>)>,
    pub log_append_time: bool,
    pub timestamp_before_max_ms: i64,
    pub timestamp_after_max_ms: i64,
    pub min_insync_replicas: i32,
}

impl TopicSettings {
    /// Records without a key are refused (`cleanup.policy` includes `compact`).
    pub fn compacted(&self) -> bool {
        self.log.cleanup_compact
    }

    /// The settings of a topic with `overrides`, over this broker's defaults. `strict`: the
    /// overrides are being set now, so Kafka's ranges apply too (not only their types).
    pub fn resolve(
        config: &Config,
        dynamic: &DynamicConfigs,
        overrides: &BTreeMap<String, String>,
        strict: bool,
    ) -> Result<TopicSettings, InvalidTopicConfig> {
        for (k, v) in overrides {
            let d = find(k).ok_or_else(|| InvalidTopicConfig(k.clone(), format!("Unknown topic config name: {k}")))?;
            if strict {
                d.validate(v)?;
            }
        }
        let value = |name: &str| effective(config, dynamic, overrides, name).0;
        let int = |name: &str| -> Result<i64, InvalidTopicConfig> {
            let d = find(name).ok_or_else(|| InvalidTopicConfig(name.into(), "unknown".into()))?;
            parse_int(d, &value(name))
        };
        let mut log = config.log.clone();
        log.retention_ms = int("retention.ms")?;
        log.retention_bytes = int("retention.bytes")?;
        log.segment_bytes = int("segment.bytes")?.max(100) as u64;
        log.segment_ms = int("segment.ms")?.max(1);
        log.segment_index_bytes = int("segment.index.bytes")?.max(4096) as usize;
        log.index_interval_bytes = int("index.interval.bytes")?.max(0) as u64;
        log.max_message_bytes = int("max.message.bytes")?.max(64) as usize;
        let policy = value("cleanup.policy");
        let items = list_items(&policy);
        if items.is_empty() || items.iter().any(|x| *x != "delete" && *x != "compact") {
            return Err(invalid("cleanup.policy", &policy, "expected a list of delete and compact"));
        }
        log.cleanup_delete = items.contains(&"delete");
        log.cleanup_compact = items.contains(&"compact");
        let flush_ms = int("flush.ms")?.max(1) as u64;
        log.flush = match value("flush.policy").trim() {
            "sync" => FlushPolicy::Sync,
            "interval" => FlushPolicy::Interval { interval_ms: flush_ms },
            other => return Err(invalid("flush.policy", other, "expected sync or interval")),
        };
        log.validate().map_err(|e| InvalidTopicConfig("config".into(), e.to_string()))?;
        let compression = match value("compression.type").trim() {
            "producer" => None,
            "uncompressed" => Some((Compression::None, None)),
            "gzip" => Some((Compression::Gzip, Some(int("compression.gzip.level")? as i32))),
            "snappy" => Some((Compression::Snappy, None)),
            "lz4" => Some((Compression::Lz4, None)),
            "zstd" => Some((Compression::Zstd, Some(int("compression.zstd.level")? as i32))),
            other => return Err(invalid("compression.type", other, format!("expected one of {}", CODECS.join(", ")))),
        };
        let log_append_time = match value("message.timestamp.type").trim() {
            "CreateTime" => false,
            "LogAppendTime" => true,
            other => return Err(invalid("message.timestamp.type", other, "expected CreateTime or LogAppendTime")),
        };
        // Kafka 3.x: message.timestamp.difference.max.ms is the default of both bounds
        let difference = overrides.get("message.timestamp.difference.max.ms");
        let bound = |name: &str| -> Result<i64, InvalidTopicConfig> {
            match (overrides.contains_key(name), difference) {
                (false, Some(d)) => parse_int(find(name).unwrap_or(&TOPIC_CONFIGS[0]), d),
                _ => int(name),
            }
        };
        Ok(TopicSettings {
            log,
            compression,
            log_append_time,
            timestamp_before_max_ms: bound("message.timestamp.before.max.ms")?,
            timestamp_after_max_ms: bound("message.timestamp.after.max.ms")?,
            min_insync_replicas: int("min.insync.replicas")? as i32,
        })
    }
}

/// DescribeConfigs config sources.
pub const SOURCE_TOPIC: i8 = 1;
pub const SOURCE_STATIC_BROKER: i8 = 4;
pub const SOURCE_DEFAULT: i8 = 5;

/// The value of topic config `name` for a topic with `overrides`, and where it comes from: the
/// override, the dynamic broker config of its synonym (this broker's, then the cluster's), the
/// broker's setting of it (when Sluice has that setting), or the default.
pub fn effective(
    config: &Config,
    dynamic: &DynamicConfigs,
    overrides: &BTreeMap<String, String>,
    name: &str,
) -> (String, i8) {
    if let Some(v) = overrides.get(name) {
        return (v.clone(), SOURCE_TOPIC);
    }
    let Some(d) = find(name) else { return (String::new(), SOURCE_DEFAULT) };
    if let Some(found) = d.synonym.and_then(|s| dynamic.broker_value(config.node_id, s)) {
        return found;
    }
    if let Some((value, set)) = d.synonym.and_then(|s| broker_value(config, s)) {
        return (value, if set { SOURCE_STATIC_BROKER } else { SOURCE_DEFAULT });
    }
    (d.default.to_string(), SOURCE_DEFAULT)
}

/// A broker setting's value and whether it was set (differs from its default).
pub fn broker_value(config: &Config, name: &str) -> Option<(String, bool)> {
    let s = crate::config::SETTINGS.iter().find(|s| s.name == name)?;
    let v = config.values.get(name).cloned().unwrap_or_else(|| s.default.to_string());
    let set = v != s.default;
    Some((v, set))
}

/// Check the broker-level defaults of topic configs (`compression.type`, `min.insync.replicas`,
/// ...) with Kafka's validation: a bad one stops the broker at startup.
pub fn check_broker_defaults(values: &BTreeMap<String, String>) -> Result<(), (String, String, String)> {
    for d in TOPIC_CONFIGS {
        let Some(s) = d.synonym else { continue };
        let Some(v) = values.get(s) else { continue };
        if !crate::config::SETTINGS.iter().any(|x| x.name == s) {
            continue;
        }
        if let Err(e) = d.validate(v) {
            return Err((s.to_string(), v.clone(), e.to_string()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> Config {
        crate::config::resolve(&BTreeMap::new(), &BTreeMap::new(), None).expect("defaults resolve")
    }

    fn with(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn every_kafka_topic_config_is_known_and_its_default_valid() {
        for d in TOPIC_CONFIGS {
            d.validate(d.default).unwrap_or_else(|e| panic!("{}: default {}: {e}", d.name, d.default));
        }
        let c = cfg();
        let s = TopicSettings::resolve(&c, &DynamicConfigs::default(), &BTreeMap::new(), true).expect("defaults");
        assert_eq!(s.compression, None);
        assert_eq!(s.min_insync_replicas, 1);
        assert_eq!(s.timestamp_after_max_ms, 3_600_000);
        assert_eq!(s.timestamp_before_max_ms, i64::MAX);
        assert!(!s.log_append_time && !s.compacted());
    }

    #[test]
    fn kafka_validation() {
        let c = cfg();
        let ok = |p: &[(&str, &str)]| TopicSettings::resolve(&c, &DynamicConfigs::default(), &with(p), true);
        assert!(ok(&[("compression.type", "lz4"), ("delete.retention.ms", "900")]).is_ok());
        assert_eq!(ok(&[("compression.type", "zstd")]).unwrap().compression, Some((Compression::Zstd, Some(3))));
        for bad in [
            ("dummy.doesntexist", "1"),
            ("compression.type", "brotli"),
            ("segment.bytes", "1000"),
            ("segment.bytes", "3000000000"),
            ("min.insync.replicas", "0"),
            ("min.cleanable.dirty.ratio", "1.5"),
            ("unclean.leader.election.enable", "yes"),
            ("cleanup.policy", "shred"),
            ("cleanup.policy", ""),
            ("compression.gzip.level", "0"),
            ("compression.zstd.level", "23"),
            ("leader.replication.throttled.replicas", "0:1,x"),
            ("remote.storage.enable", "true"),
            ("message.timestamp.type", "Now"),
        ] {
            assert!(ok(&[bad]).is_err(), "{bad:?} accepted");
        }
        assert!(ok(&[("leader.replication.throttled.replicas", "0:1, 1:2")]).is_ok());
        assert!(ok(&[("follower.replication.throttled.replicas", "*")]).is_ok());
        // a range tightened since: still loads
        assert!(
            TopicSettings::resolve(&c, &DynamicConfigs::default(), &with(&[("segment.bytes", "1000")]), false).is_ok()
        );
    }

    /// docs/compatibility.md names every config accepted without effect, with its reason.
    #[test]
    fn every_inert_config_is_documented() {
        let doc = include_str!("../../docs/compatibility.md");
        for d in TOPIC_CONFIGS.iter().filter(|d| d.meaning != Meaning::Applied) {
            assert!(doc.contains(&format!("`{}`", d.name)), "{} is not in docs/compatibility.md", d.name);
        }
    }

    #[test]
    fn removed_difference_bounds_both_unless_they_are_set() {
        let c = cfg();
        let s = TopicSettings::resolve(
            &c,
            &DynamicConfigs::default(),
            &with(&[("message.timestamp.difference.max.ms", "5000")]),
            true,
        )
        .expect("valid");
        assert_eq!((s.timestamp_before_max_ms, s.timestamp_after_max_ms), (5000, 5000));
        let s = TopicSettings::resolve(
            &c,
            &DynamicConfigs::default(),
            &with(&[("message.timestamp.difference.max.ms", "5000"), ("message.timestamp.after.max.ms", "7")]),
            true,
        )
        .expect("valid");
        assert_eq!((s.timestamp_before_max_ms, s.timestamp_after_max_ms), (5000, 7));
    }
}
