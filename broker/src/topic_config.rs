//! A topic's settings: `TopicSettings::resolve` turns a topic's overrides, over the broker's
//! defaults and dynamic configs, into what the produce path and the log apply. The definitions
//! of Kafka's topic configs (types, defaults, validation, synonyms, meanings) are part of the
//! config (`config/topic_defs.rs`) and re-exported here.
//!
//! Validation is Kafka's (`LogConfig`'s `ConfigDef`): an unknown name or a value out of range is
//! INVALID_CONFIG at the edge. Overrides stored before a range was tightened (Sluice accepted
//! `segment.bytes` down to 100 before it followed Kafka's 1 MiB minimum) still load: ranges are
//! checked when a config is set, types whenever one is read.

pub use crate::config::topic_defs::*;
use crate::config::topic_defs::{invalid, list_items, parse_int, CODECS};
use crate::config::Config;
use crate::dynamic_config::DynamicConfigs;
use sluice_protocol::batch::Compression;
use sluice_storage::{FlushPolicy, LogConfig};
use std::collections::BTreeMap;

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
        log.delete_retention_ms = int("delete.retention.ms")?.max(0);
        log.min_compaction_lag_ms = int("min.compaction.lag.ms")?.max(0);
        log.max_compaction_lag_ms = int("max.compaction.lag.ms")?.max(1);
        let ratio = value("min.cleanable.dirty.ratio");
        log.min_cleanable_dirty_ratio = ratio
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|r| (0.0..=1.0).contains(r))
            .ok_or_else(|| invalid("min.cleanable.dirty.ratio", &ratio, "expected a number between 0 and 1"))?;
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
