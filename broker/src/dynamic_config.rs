//! Configs changed at run time (issue 24 item 6): Kafka's dynamic broker configs, cluster-wide
//! (resource name "") and per broker, and group configs (KIP-848's `consumer.*`). They persist
//! with the topics (`__sluice_metadata.json`; in cluster mode in the metadata quorum's image,
//! which every broker copies). A dynamic log config — the broker synonym of a topic config, e.g.
//! `log.retention.ms`, `compression.type`, `min.insync.replicas` — is the default of every topic
//! that does not override it, at once; other dynamic broker configs Kafka has are accepted,
//! validated, kept and described, with no effect here for the reason their entry gives.

use crate::config::topic_defs::{self as topic_config, Check, Kind, Meaning};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The dynamic configs of the cluster's resources.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DynamicConfigs {
    /// Broker configs by resource name: "" is the cluster-wide default, "<id>" one broker's.
    #[serde(default)]
    pub brokers: BTreeMap<String, BTreeMap<String, String>>,
    /// Group configs by group id.
    #[serde(default)]
    pub groups: BTreeMap<String, BTreeMap<String, String>>,
}

impl DynamicConfigs {
    /// Set one resource's dynamic configs (resource type 32: a group, otherwise a broker); an
    /// empty map removes the resource.
    pub fn set_resource(&mut self, resource_type: i8, name: &str, configs: BTreeMap<String, String>) {
        let map = if resource_type == 32 { &mut self.groups } else { &mut self.brokers };
        if configs.is_empty() {
            map.remove(name);
        } else {
            map.insert(name.to_string(), configs);
        }
    }

    /// Broker config `name` as this broker (`node_id`) sees it: its own, else the cluster's
    /// default; with the DescribeConfigs source (2 per broker, 3 cluster default).
    pub fn broker_value(&self, node_id: i32, name: &str) -> Option<(String, i8)> {
        if let Some(v) = self.brokers.get(&node_id.to_string()).and_then(|m| m.get(name)) {
            return Some((v.clone(), SOURCE_DYNAMIC_BROKER));
        }
        self.brokers.get("").and_then(|m| m.get(name)).map(|v| (v.clone(), SOURCE_DYNAMIC_DEFAULT_BROKER))
    }
}

pub const SOURCE_DYNAMIC_BROKER: i8 = 2;
pub const SOURCE_DYNAMIC_DEFAULT_BROKER: i8 = 3;
pub const SOURCE_GROUP: i8 = 8;

/// A dynamic config that is not a topic config's synonym.
#[derive(Debug, Clone, Copy)]
pub struct DynamicDef {
    pub name: &'static str,
    pub kind: Kind,
    pub default: &'static str,
    pub check: Check,
    /// Only per broker (Kafka refuses it at the cluster-default level).
    pub per_broker: bool,
    pub sensitive: bool,
    pub meaning: Meaning,
}

const fn dd(name: &'static str, kind: Kind, default: &'static str, check: Check, why: &'static str) -> DynamicDef {
    DynamicDef { name, kind, default, check, per_broker: false, sensitive: false, meaning: Meaning::Inert(why) }
}
const fn per_broker(mut d: DynamicDef) -> DynamicDef {
    d.per_broker = true;
    d
}
const fn sensitive(mut d: DynamicDef) -> DynamicDef {
    d.sensitive = true;
    d
}

const THREADS: &str = "Sluice runs every task on its async runtime's workers, one per core";
const CLEANER: &str = "the log cleaner is not built yet (issue 20)";
const KERBEROS: &str = "GSSAPI (Kerberos) is not supported";
const RESTART: &str = "Sluice reads listeners, TLS material and connection limits at start: restart to change them";
const THROTTLE: &str = "replication is Raft's, not throttled";

use Check::*;
use Kind::*;

/// Kafka's dynamic broker configs other than the log configs (`DynamicBrokerConfig`).
pub const DYNAMIC_BROKER_CONFIGS: &[DynamicDef] = &[
    dd("background.threads", Int, "10", AtLeast(1), THREADS),
    dd("num.io.threads", Int, "8", AtLeast(1), THREADS),
    dd("num.network.threads", Int, "3", AtLeast(1), THREADS),
    dd("num.replica.fetchers", Int, "1", AtLeast(1), THREADS),
    dd("num.recovery.threads.per.data.dir", Int, "2", AtLeast(1), THREADS),
    dd("log.cleaner.threads", Int, "1", AtLeast(0), CLEANER),
    dd("log.cleaner.io.max.bytes.per.second", Double, "1.7976931348623157E308", Any, CLEANER),
    dd("log.cleaner.dedupe.buffer.size", Long, "134217728", Any, CLEANER),
    dd("log.cleaner.io.buffer.size", Int, "524288", AtLeast(0), CLEANER),
    dd("log.cleaner.io.buffer.load.factor", Double, "0.9", Any, CLEANER),
    dd("log.cleaner.backoff.ms", Long, "15000", AtLeast(0), CLEANER),
    dd("max.connections", Int, "2147483647", AtLeast(0), RESTART),
    dd("max.connections.per.ip", Int, "2147483647", AtLeast(0), RESTART),
    dd("max.connections.per.ip.overrides", Str, "", Any, RESTART),
    dd("max.connection.creation.rate", Int, "2147483647", AtLeast(0), RESTART),
    dd("follower.replication.throttled.rate", Long, "9223372036854775807", AtLeast(0), THROTTLE),
    dd("leader.replication.throttled.rate", Long, "9223372036854775807", AtLeast(0), THROTTLE),
    dd("replica.alter.log.dirs.io.max.bytes.per.second", Long, "9223372036854775807", AtLeast(0), THROTTLE),
    dd("metric.reporters", List, "", Any, "metrics are served in Prometheus format (metrics.listener)"),
    dd("producer.id.expiration.ms", Int, "86400000", AtLeast(1), RESTART),
    dd("transaction.partition.verification.enable", Bool, "true", Any, "Sluice always verifies (KIP-890)"),
    per_broker(dd("sasl.kerberos.kinit.cmd", Str, "/usr/bin/kinit", Any, KERBEROS)),
    per_broker(dd("sasl.kerberos.min.time.before.relogin", Long, "60000", Any, KERBEROS)),
    per_broker(dd("sasl.kerberos.principal.to.local.rules", List, "DEFAULT", Any, KERBEROS)),
    per_broker(dd("sasl.kerberos.service.name", Str, "", Any, KERBEROS)),
    per_broker(dd("sasl.kerberos.ticket.renew.jitter", Double, "0.05", Any, KERBEROS)),
    per_broker(dd("sasl.kerberos.ticket.renew.window.factor", Double, "0.8", Any, KERBEROS)),
    per_broker(sensitive(dd("sasl.jaas.config", Str, "", Any, RESTART))),
    per_broker(dd("sasl.enabled.mechanisms", List, "GSSAPI", Any, RESTART)),
    per_broker(dd("listeners", List, "", Any, RESTART)),
    per_broker(dd("advertised.listeners", List, "", Any, RESTART)),
    per_broker(dd("listener.security.protocol.map", List, "", Any, RESTART)),
    per_broker(dd("ssl.keystore.location", Str, "", Any, RESTART)),
    per_broker(sensitive(dd("ssl.keystore.password", Str, "", Any, RESTART))),
    per_broker(sensitive(dd("ssl.key.password", Str, "", Any, RESTART))),
    per_broker(dd("ssl.keystore.type", Str, "JKS", Any, RESTART)),
    per_broker(dd("ssl.truststore.location", Str, "", Any, RESTART)),
    per_broker(sensitive(dd("ssl.truststore.password", Str, "", Any, RESTART))),
    per_broker(dd("ssl.truststore.type", Str, "JKS", Any, RESTART)),
    per_broker(dd("ssl.client.auth", Str, "none", OneOf(&["required", "requested", "none"]), RESTART)),
    per_broker(dd("ssl.enabled.protocols", List, "TLSv1.2,TLSv1.3", Any, RESTART)),
    per_broker(dd("ssl.cipher.suites", List, "", Any, RESTART)),
    per_broker(dd("ssl.endpoint.identification.algorithm", Str, "https", Any, RESTART)),
];

/// How a dynamic broker config is checked: as its topic config (a log config), or its own.
pub enum BrokerConfig {
    Log(&'static topic_config::TopicConfigDef),
    Other(&'static DynamicDef),
}

/// The dynamic broker config `name`, if Kafka makes it dynamic.
pub fn broker_config(name: &str) -> Option<BrokerConfig> {
    // (message.format.version's synonym is not dynamic in Kafka)
    if let Some(d) =
        topic_config::TOPIC_CONFIGS.iter().find(|d| d.synonym == Some(name) && d.meaning != Meaning::Removed)
    {
        return Some(BrokerConfig::Log(d));
    }
    DYNAMIC_BROKER_CONFIGS.iter().find(|d| d.name == name).map(BrokerConfig::Other)
}

/// Kafka's validation of dynamic broker config `name` = `value` at `resource` ("" or an id).
pub fn check_broker_config(resource: &str, name: &str, value: &str) -> Result<(), String> {
    match broker_config(name) {
        None => Err(format!("Cannot update these configs dynamically: {name}")),
        Some(BrokerConfig::Log(d)) => d.validate(value).map_err(|e| e.to_string()),
        Some(BrokerConfig::Other(d)) => {
            if d.per_broker && resource.is_empty() {
                return Err(format!(
                    "Cannot update these configs at default cluster level, broker id must be specified: {name}"
                ));
            }
            let as_topic = topic_config::TopicConfigDef {
                name: d.name,
                kind: d.kind,
                default: d.default,
                check: d.check,
                synonym: None,
                meaning: d.meaning,
                doc: "",
            };
            as_topic.validate(value).map_err(|e| e.to_string())
        }
    }
}

/// Kafka 4.x's group configs (`GroupConfig`).
pub struct GroupConfigDef {
    pub name: &'static str,
    /// The broker setting whose value is the default.
    pub broker: &'static str,
    pub default: &'static str,
    pub bounds: (i64, i64),
    pub meaning: Meaning,
}

const NO_SHARE: &str = "share groups (KIP-932) are not implemented";
const NO_STREAMS: &str = "streams groups (KIP-1071) are not implemented";

pub const GROUP_CONFIGS: &[GroupConfigDef] = &[
    GroupConfigDef {
        name: "consumer.session.timeout.ms",
        broker: "group.consumer.session.timeout.ms",
        default: "45000",
        bounds: (45_000, 60_000),
        meaning: Meaning::Applied,
    },
    GroupConfigDef {
        name: "consumer.heartbeat.interval.ms",
        broker: "group.consumer.heartbeat.interval.ms",
        default: "5000",
        bounds: (5_000, 15_000),
        meaning: Meaning::Applied,
    },
    GroupConfigDef {
        name: "share.session.timeout.ms",
        broker: "group.share.session.timeout.ms",
        default: "45000",
        bounds: (45_000, 60_000),
        meaning: Meaning::Inert(NO_SHARE),
    },
    GroupConfigDef {
        name: "share.heartbeat.interval.ms",
        broker: "group.share.heartbeat.interval.ms",
        default: "5000",
        bounds: (5_000, 15_000),
        meaning: Meaning::Inert(NO_SHARE),
    },
    GroupConfigDef {
        name: "share.record.lock.duration.ms",
        broker: "group.share.record.lock.duration.ms",
        default: "30000",
        bounds: (15_000, 60_000),
        meaning: Meaning::Inert(NO_SHARE),
    },
    GroupConfigDef {
        name: "streams.session.timeout.ms",
        broker: "group.streams.session.timeout.ms",
        default: "45000",
        bounds: (45_000, 60_000),
        meaning: Meaning::Inert(NO_STREAMS),
    },
    GroupConfigDef {
        name: "streams.heartbeat.interval.ms",
        broker: "group.streams.heartbeat.interval.ms",
        default: "5000",
        bounds: (5_000, 15_000),
        meaning: Meaning::Inert(NO_STREAMS),
    },
    GroupConfigDef {
        name: "streams.num.standby.replicas",
        broker: "group.streams.num.standby.replicas",
        default: "0",
        bounds: (0, 2),
        meaning: Meaning::Inert(NO_STREAMS),
    },
];

pub fn group_config(name: &str) -> Option<&'static GroupConfigDef> {
    GROUP_CONFIGS.iter().find(|d| d.name == name)
}

/// A group config's default here: the broker setting when Sluice has one, else Kafka's.
pub fn group_default(config: &crate::config::Config, d: &GroupConfigDef) -> String {
    config.values.get(d.broker).cloned().unwrap_or_else(|| d.default.to_string())
}

/// Kafka's validation of group config `name` = `value`: an integer within the broker's bounds
/// (Kafka's `group.consumer.min/max.session.timeout.ms` and friends; widened to this broker's
/// own default when that lies outside them).
pub fn check_group_config(config: &crate::config::Config, name: &str, value: &str) -> Result<i64, String> {
    let d = group_config(name).ok_or_else(|| format!("Unknown group config name: {name}"))?;
    let x: i64 = value.trim().parse().map_err(|_| format!("Invalid value {value} for configuration {name}"))?;
    let own: i64 = group_default(config, d).parse().unwrap_or(d.bounds.0);
    let (lo, hi) = (d.bounds.0.min(own), d.bounds.1.max(own));
    if x < lo || x > hi {
        return Err(format!("Invalid value {value} for configuration {name}: must be between {lo} and {hi}"));
    }
    Ok(x)
}

/// The KIP-848 timers of one group: (session timeout, heartbeat interval), where its configs
/// set them.
pub fn group_timers(configs: &BTreeMap<String, String>) -> (Option<i32>, Option<i32>) {
    let get = |k: &str| configs.get(k).and_then(|v| v.trim().parse::<i32>().ok());
    (get("consumer.session.timeout.ms"), get("consumer.heartbeat.interval.ms"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_dynamic_broker_config_checks() {
        assert!(check_broker_config("1", "sasl.kerberos.min.time.before.relogin", "58000").is_ok());
        assert!(check_broker_config("", "sasl.kerberos.min.time.before.relogin", "58000").is_err(), "per broker");
        assert!(check_broker_config("", "background.threads", "9").is_ok());
        assert!(check_broker_config("", "background.threads", "0").is_err());
        assert!(check_broker_config("", "log.cleanup.policy", "compact,delete").is_ok());
        assert!(check_broker_config("", "log.cleanup.policy", "shred").is_err());
        assert!(check_broker_config("", "log.retention.ms", "1000").is_ok());
        assert!(check_broker_config("", "log.dirs", "/x").is_err(), "static");
        assert!(check_broker_config("", "log.message.format.version", "3.0").is_err(), "not dynamic in Kafka");
    }

    #[test]
    fn group_config_bounds() {
        let c = crate::config::resolve(&BTreeMap::new(), &BTreeMap::new(), None).expect("defaults");
        assert_eq!(check_group_config(&c, "consumer.session.timeout.ms", "50000"), Ok(50_000));
        assert!(check_group_config(&c, "consumer.session.timeout.ms", "1000").is_err());
        assert!(check_group_config(&c, "consumer.heartbeat.interval.ms", "16000").is_err());
        assert!(check_group_config(&c, "nope", "1").is_err());
    }
}
