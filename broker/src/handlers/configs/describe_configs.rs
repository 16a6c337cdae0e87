//! DescribeConfigs.

use super::*;

fn synonym(name: &str, value: &str, source: i8) -> DescribeConfigsSynonym {
    let mut s = DescribeConfigsSynonym::default();
    s.name = sb(name);
    s.value = Some(sb(value));
    s.source = source;
    s
}

/// A topic's configs as Kafka's DescribeConfigs gives them: every topic config (the removed
/// 3.x ones only when set) with its effective value, source, type and (asked for) synonyms —
/// the topic's override, the broker's setting, the default — and documentation.
pub(crate) fn describe_topic(
    topics: &Arc<TopicRegistry>,
    config: &Arc<Config>,
    overrides: &BTreeMap<String, String>,
    wanted: &dyn Fn(&str) -> bool,
    synonyms: bool,
    documentation: bool,
) -> Vec<DescribeConfigsResourceResult> {
    let dynamic = topics.dynamic();
    let mut out = Vec::new();
    for d in topic_config::TOPIC_CONFIGS {
        if !wanted(d.name) || (d.meaning == Meaning::Removed && !overrides.contains_key(d.name)) {
            continue;
        }
        let (value, source) = topic_config::effective(config, &dynamic, overrides, d.name);
        let mut e = DescribeConfigsResourceResult::default();
        e.name = sb(d.name);
        e.value = Some(sb(&value));
        e.config_source = source;
        e.config_type = d.kind.code();
        if synonyms {
            if let Some(v) = overrides.get(d.name) {
                e.synonyms.push(synonym(d.name, v, SOURCE_TOPIC));
            }
            let broker = d.synonym.and_then(|s| topic_config::broker_value(config, s).map(|b| (s, b)));
            match broker {
                Some((s, (v, true))) => {
                    e.synonyms.push(synonym(s, &v, SOURCE_STATIC_BROKER));
                    let default = crate::config::SETTINGS.iter().find(|x| x.name == s).map_or("", |x| x.default);
                    e.synonyms.push(synonym(s, default, SOURCE_DEFAULT));
                }
                Some((s, (v, false))) => e.synonyms.push(synonym(s, &v, SOURCE_DEFAULT)),
                None => e.synonyms.push(synonym(d.synonym.unwrap_or(d.name), d.default, SOURCE_DEFAULT)),
            }
        }
        if documentation {
            let doc = match d.meaning {
                Meaning::Inert(why) => format!("{} Accepted without effect in Sluice: {why}.", d.doc),
                _ => d.doc.to_string(),
            };
            e.documentation = Some(sb(&doc));
        }
        out.push(e);
    }
    out
}

pub fn describe(
    topics: &Arc<TopicRegistry>,
    config: &Arc<Config>,
    req: DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let mut resp = DescribeConfigsResponse::default();
    for res in req.resources {
        let mut r = DescribeConfigsResult::default();
        r.resource_type = res.resource_type;
        r.resource_name = res.resource_name.clone();
        let keys: Option<Vec<String>> = res.configuration_keys.map(|ks| ks.iter().map(|k| k.to_string()).collect());
        let wanted = |k: &str| keys.as_ref().is_none_or(|ks| ks.iter().any(|x| x == k));
        match res.resource_type {
            RESOURCE_TOPIC => match topics.topic(&res.resource_name) {
                None => r.error_code = ResponseError::UnknownTopicOrPartition.code(),
                Some(t) => {
                    r.configs = describe_topic(
                        topics,
                        config,
                        &t.configs,
                        &wanted,
                        req.include_synonyms,
                        req.include_documentation,
                    )
                }
            },
            RESOURCE_BROKER => {
                if broker_resource_ok(topics, config, &res.resource_name, false) {
                    r.configs = describe_broker(topics, config, &res.resource_name, &wanted, req.include_synonyms);
                } else {
                    r.error_code = ResponseError::InvalidRequest.code();
                    r.error_message = Some(sb("unknown broker id"));
                }
            }
            RESOURCE_GROUP => r.configs = describe_group(topics, config, &res.resource_name, &wanted),
            _ => {
                r.error_code = ResponseError::InvalidRequest.code();
                r.error_message = Some(sb("only topic, broker and group resources are supported"));
            }
        }
        resp.results.push(r);
    }
    resp
}

fn entry(
    name: &str,
    value: Option<String>,
    source: i8,
    read_only: bool,
    sensitive: bool,
    kind: i8,
) -> DescribeConfigsResourceResult {
    let mut e = DescribeConfigsResourceResult::default();
    e.name = sb(name);
    e.value = if sensitive { None } else { value.map(|v| sb(&v)) };
    e.config_source = source;
    e.read_only = read_only;
    e.is_sensitive = sensitive;
    e.config_type = kind;
    e
}

/// A broker resource's configs: for this broker ("<id>"), every Sluice setting (read-only
/// unless Kafka makes it dynamic) and every dynamic config Kafka has, with the value in force
/// and its source; for the cluster default (""), the dynamic configs set there.
fn describe_broker(
    topics: &Arc<TopicRegistry>,
    config: &Arc<Config>,
    resource: &str,
    wanted: &dyn Fn(&str) -> bool,
    synonyms: bool,
) -> Vec<DescribeConfigsResourceResult> {
    let dynamic = topics.dynamic();
    let own = dynamic.brokers.get(resource).cloned().unwrap_or_default();
    if resource.is_empty() {
        return own
            .iter()
            .filter(|(k, _)| wanted(k))
            .map(|(k, v)| {
                let sensitive = matches!(dynamic_config::broker_config(k), Some(dynamic_config::BrokerConfig::Other(d)) if d.sensitive);
                entry(k, Some(v.clone()), dynamic_config::SOURCE_DYNAMIC_DEFAULT_BROKER, false, sensitive, 2)
            })
            .collect();
    }
    let mut names: Vec<&str> = crate::config::SETTINGS.iter().map(|s| s.name).collect();
    names
        .extend(topic_config::TOPIC_CONFIGS.iter().filter(|d| d.meaning != Meaning::Removed).filter_map(|d| d.synonym));
    names.extend(dynamic_config::DYNAMIC_BROKER_CONFIGS.iter().map(|d| d.name));
    names.sort_unstable();
    names.dedup();
    let mut out = Vec::new();
    for name in names {
        if !wanted(name) {
            continue;
        }
        let def = dynamic_config::broker_config(name);
        let (kind, sensitive) = match &def {
            Some(dynamic_config::BrokerConfig::Log(d)) => (d.kind.code(), false),
            Some(dynamic_config::BrokerConfig::Other(d)) => (d.kind.code(), d.sensitive),
            None => (2, false),
        };
        let below = match &def {
            Some(dynamic_config::BrokerConfig::Log(d)) => broker_log_value(config, &dynamic, d, resource),
            _ => match topic_config::broker_value(config, name) {
                Some((v, true)) => (v, SOURCE_STATIC_BROKER),
                Some((v, false)) => (v, SOURCE_DEFAULT),
                None => match &def {
                    Some(dynamic_config::BrokerConfig::Other(d)) => (d.default.to_string(), SOURCE_DEFAULT),
                    _ => (String::new(), SOURCE_DEFAULT),
                },
            },
        };
        let (value, source) = match own.get(name) {
            Some(v) => (v.clone(), dynamic_config::SOURCE_DYNAMIC_BROKER),
            None if below.1 == SOURCE_DEFAULT || below.1 == SOURCE_STATIC_BROKER => {
                match dynamic.brokers.get("").and_then(|m| m.get(name)) {
                    Some(v) => (v.clone(), dynamic_config::SOURCE_DYNAMIC_DEFAULT_BROKER),
                    None => below.clone(),
                }
            }
            None => below.clone(),
        };
        let mut e = entry(name, Some(value), source, def.is_none(), sensitive, kind);
        if synonyms {
            if let Some(v) = own.get(name) {
                e.synonyms.push(synonym(name, v, dynamic_config::SOURCE_DYNAMIC_BROKER));
            }
            if let Some(v) = dynamic.brokers.get("").and_then(|m| m.get(name)) {
                e.synonyms.push(synonym(name, v, dynamic_config::SOURCE_DYNAMIC_DEFAULT_BROKER));
            }
            if below.1 != dynamic_config::SOURCE_DYNAMIC_DEFAULT_BROKER {
                e.synonyms.push(synonym(name, &below.0, below.1));
            }
        }
        out.push(e);
    }
    out
}

/// A group's configs (KIP-848's and Kafka 4.x's others): set ones with source GROUP_CONFIG,
/// the rest with the broker's default.
fn describe_group(
    topics: &Arc<TopicRegistry>,
    config: &Arc<Config>,
    group: &str,
    wanted: &dyn Fn(&str) -> bool,
) -> Vec<DescribeConfigsResourceResult> {
    let dynamic = topics.dynamic();
    let set = dynamic.groups.get(group).cloned().unwrap_or_default();
    dynamic_config::GROUP_CONFIGS
        .iter()
        .filter(|d| wanted(d.name))
        .map(|d| match set.get(d.name) {
            Some(v) => entry(d.name, Some(v.clone()), dynamic_config::SOURCE_GROUP, false, false, 3),
            None => entry(d.name, Some(dynamic_config::group_default(config, d)), SOURCE_DEFAULT, false, false, 3),
        })
        .collect()
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn describe_configs(c: &Authz<'_>, r: &mut DescribeConfigsRequest, _version: i16) -> Gate {
        let denied =
            split_off(&mut r.resources, |x| config_allowed(c, Op::DescribeConfigs, x.resource_type, &x.resource_name));
        if denied.is_empty() {
            return Gate::Pass;
        }
        patch(
            move |resp: &mut DescribeConfigsResponse| {
                for d in denied {
                    let mut x = describe_configs_response::DescribeConfigsResult::default();
                    x.error_code = config_error(d.resource_type);
                    x.error_message = msg("Authorization failed.");
                    x.resource_type = d.resource_type;
                    x.resource_name = d.resource_name;
                    resp.results.push(x);
                }
            },
            pick!(DescribeConfigs),
        )
    }
}
