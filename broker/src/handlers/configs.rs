//! DescribeConfigs, AlterConfigs, IncrementalAlterConfigs for topics (resource type 2), brokers
//! (type 4: the cluster default "" and each broker's dynamic configs over its static settings)
//! and groups (type 32, KIP-848's group configs).

use super::sb;
use crate::dynamic_config::{self, DynamicConfigs};
use crate::handlers::topics::topic_error_code;
use crate::services::Services;
use crate::topic_config::{self, Meaning, SOURCE_DEFAULT, SOURCE_STATIC_BROKER, SOURCE_TOPIC};
use crate::topics::{ConfigEdit, TopicError};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use std::collections::BTreeMap;
use std::sync::Arc;

pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;
pub const RESOURCE_GROUP: i8 = 32;

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
    state: &Services,
    overrides: &BTreeMap<String, String>,
    wanted: &dyn Fn(&str) -> bool,
    synonyms: bool,
    documentation: bool,
) -> Vec<DescribeConfigsResourceResult> {
    let dynamic = state.topics.dynamic();
    let mut out = Vec::new();
    for d in topic_config::TOPIC_CONFIGS {
        if !wanted(d.name) || (d.meaning == Meaning::Removed && !overrides.contains_key(d.name)) {
            continue;
        }
        let (value, source) = topic_config::effective(&state.config, &dynamic, overrides, d.name);
        let mut e = DescribeConfigsResourceResult::default();
        e.name = sb(d.name);
        e.value = Some(sb(&value));
        e.config_source = source;
        e.config_type = d.kind.code();
        if synonyms {
            if let Some(v) = overrides.get(d.name) {
                e.synonyms.push(synonym(d.name, v, SOURCE_TOPIC));
            }
            let broker = d.synonym.and_then(|s| topic_config::broker_value(&state.config, s).map(|b| (s, b)));
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

pub fn describe(state: &Services, req: DescribeConfigsRequest) -> DescribeConfigsResponse {
    let mut resp = DescribeConfigsResponse::default();
    for res in req.resources {
        let mut r = DescribeConfigsResult::default();
        r.resource_type = res.resource_type;
        r.resource_name = res.resource_name.clone();
        let keys: Option<Vec<String>> = res.configuration_keys.map(|ks| ks.iter().map(|k| k.to_string()).collect());
        let wanted = |k: &str| keys.as_ref().is_none_or(|ks| ks.iter().any(|x| x == k));
        match res.resource_type {
            RESOURCE_TOPIC => match state.topics.topic(&res.resource_name) {
                None => r.error_code = ResponseError::UnknownTopicOrPartition.code(),
                Some(t) => {
                    r.configs =
                        describe_topic(state, &t.configs, &wanted, req.include_synonyms, req.include_documentation)
                }
            },
            RESOURCE_BROKER => {
                if broker_resource_ok(state, &res.resource_name, false) {
                    r.configs = describe_broker(state, &res.resource_name, &wanted, req.include_synonyms);
                } else {
                    r.error_code = ResponseError::InvalidRequest.code();
                    r.error_message = Some(sb("unknown broker id"));
                }
            }
            RESOURCE_GROUP => r.configs = describe_group(state, &res.resource_name, &wanted),
            _ => {
                r.error_code = ResponseError::InvalidRequest.code();
                r.error_message = Some(sb("only topic, broker and group resources are supported"));
            }
        }
        resp.results.push(r);
    }
    resp
}

/// The broker resource names this broker answers for: "" (the cluster default), its own id,
/// and (cluster mode, altering) any registered broker's.
fn broker_resource_ok(state: &Services, name: &str, altering: bool) -> bool {
    if name.is_empty() {
        return true;
    }
    let Ok(id) = name.parse::<i32>() else { return false };
    id == state.config.node_id
        || (altering && state.topics.cluster.get().is_some_and(|c| c.image().brokers.contains_key(&id)))
}

/// Apply IncrementalAlterConfigs operations to `m`: SET, DELETE, and APPEND/SUBTRACT on the
/// list configs (`is_list`), which start from `current(name)` (the value in force).
fn apply_ops(
    m: &mut BTreeMap<String, String>,
    ops: &[kafka_protocol::messages::incremental_alter_configs_request::AlterableConfig],
    is_list: &dyn Fn(&str) -> bool,
    current: &dyn Fn(&BTreeMap<String, String>, &str) -> String,
) -> Result<(), TopicError> {
    for op in ops {
        let name = op.name.to_string();
        match op.config_operation {
            0 => match &op.value {
                Some(v) => {
                    m.insert(name, v.to_string());
                }
                None => return Err(TopicError::InvalidConfig(name, "SET needs a value".into())),
            },
            1 => {
                m.remove(&name);
            }
            kind @ (2 | 3) if is_list(&name) => {
                let now = current(m, &name);
                let mut items: Vec<String> =
                    now.split(',').map(|x| x.trim().to_string()).filter(|x| !x.is_empty()).collect();
                for item in op.value.as_deref().unwrap_or_default().split(',').map(str::trim) {
                    if item.is_empty() {
                        continue;
                    }
                    if kind == 2 && !items.iter().any(|x| x == item) {
                        items.push(item.to_string());
                    } else if kind == 3 {
                        items.retain(|x| x != item);
                    }
                }
                m.insert(name, items.join(","));
            }
            2 | 3 => return Err(TopicError::InvalidConfig(name, "APPEND/SUBTRACT apply to list configs only".into())),
            other => return Err(TopicError::InvalidConfig(name, format!("unknown operation {other}"))),
        }
    }
    Ok(())
}

/// Change one resource's configs with `f` (validated as its type requires): a topic's
/// overrides, a broker resource's or a group's dynamic configs.
async fn alter_resource(
    state: &Services,
    resource_type: i8,
    name: &str,
    f: ConfigEdit,
    validate_only: bool,
) -> Result<(), (i16, String)> {
    let err = |e: TopicError| (topic_error_code(&e), e.to_string());
    match resource_type {
        RESOURCE_TOPIC => state.topics.alter_topic_configs(name, f, validate_only).await.map_err(err),
        RESOURCE_BROKER | RESOURCE_GROUP => {
            if resource_type == RESOURCE_BROKER && !broker_resource_ok(state, name, true) {
                return Err((ResponseError::InvalidRequest.code(), format!("unknown broker id '{name}'")));
            }
            if resource_type == RESOURCE_GROUP && name.is_empty() {
                return Err((ResponseError::InvalidRequest.code(), "a group config needs a group id".into()));
            }
            let dynamic = state.topics.dynamic();
            let all = if resource_type == RESOURCE_GROUP { &dynamic.groups } else { &dynamic.brokers };
            let mut m = all.get(name).cloned().unwrap_or_default();
            f(&mut m).map_err(err)?;
            for (k, v) in &m {
                let checked = if resource_type == RESOURCE_GROUP {
                    dynamic_config::check_group_config(&state.config, k, v).map(|_| ())
                } else {
                    dynamic_config::check_broker_config(name, k, v)
                };
                checked.map_err(|m| (ResponseError::InvalidConfig.code(), m))?;
            }
            if validate_only {
                return Ok(());
            }
            state.topics.set_resource_configs(resource_type, name, m).await.map_err(err)
        }
        _ => {
            Err((ResponseError::InvalidRequest.code(), "only topic, broker and group resources can be altered".into()))
        }
    }
}

pub async fn alter(state: &Services, req: AlterConfigsRequest) -> AlterConfigsResponse {
    let mut resp = AlterConfigsResponse::default();
    for res in req.resources {
        let mut r = kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse::default();
        r.resource_type = res.resource_type;
        r.resource_name = res.resource_name.clone();
        // AlterConfigs replaces every config of the resource with those given
        let new: BTreeMap<String, String> =
            res.configs.iter().filter_map(|c| c.value.as_ref().map(|v| (c.name.to_string(), v.to_string()))).collect();
        let replace: ConfigEdit = Arc::new(move |m: &mut BTreeMap<String, String>| {
            *m = new.clone();
            Ok(())
        });
        if let Err((code, msg)) =
            alter_resource(state, res.resource_type, &res.resource_name, replace, req.validate_only).await
        {
            r.error_code = code;
            r.error_message = Some(sb(&msg));
        }
        resp.responses.push(r);
    }
    resp
}

pub async fn incremental_alter(
    state: &Services,
    req: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut resp = IncrementalAlterConfigsResponse::default();
    for res in req.resources {
        let mut r =
            kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse::default();
        r.resource_type = res.resource_type;
        r.resource_name = res.resource_name.clone();
        let kind = res.resource_type;
        let dynamic = state.topics.dynamic();
        let is_list = move |name: &str| match kind {
            RESOURCE_TOPIC => topic_config::is_list(name),
            RESOURCE_BROKER => match dynamic_config::broker_config(name) {
                Some(dynamic_config::BrokerConfig::Log(d)) => d.kind == topic_config::Kind::List,
                Some(dynamic_config::BrokerConfig::Other(d)) => d.kind == topic_config::Kind::List,
                None => false,
            },
            _ => false,
        };
        // the value in force, where APPEND and SUBTRACT start
        let (config, resource) = (state.config.clone(), res.resource_name.to_string());
        let current = move |m: &BTreeMap<String, String>, name: &str| -> String {
            if let Some(v) = m.get(name) {
                return v.clone();
            }
            match kind {
                RESOURCE_TOPIC => topic_config::effective(&config, &dynamic, m, name).0,
                _ => match dynamic_config::broker_config(name) {
                    Some(dynamic_config::BrokerConfig::Log(d)) => broker_log_value(&config, &dynamic, d, &resource).0,
                    Some(dynamic_config::BrokerConfig::Other(d)) => d.default.to_string(),
                    None => String::new(),
                },
            }
        };
        let ops = res.configs.clone();
        let f: ConfigEdit = Arc::new(move |m: &mut BTreeMap<String, String>| apply_ops(m, &ops, &is_list, &current));
        if let Err((code, msg)) = alter_resource(state, kind, &res.resource_name, f, req.validate_only).await {
            r.error_code = code;
            r.error_message = Some(sb(&msg));
        }
        resp.responses.push(r);
    }
    resp
}

/// A log config's broker-level value (the topic default) at broker resource `resource`, beneath
/// that resource's own dynamic value: for a broker, the cluster default's, its static setting,
/// or Kafka's default; for the cluster default, the static setting or Kafka's default.
fn broker_log_value(
    config: &crate::config::Config,
    dynamic: &DynamicConfigs,
    d: &topic_config::TopicConfigDef,
    resource: &str,
) -> (String, i8) {
    let synonym = d.synonym.unwrap_or(d.name);
    if !resource.is_empty() {
        if let Some(v) = dynamic.brokers.get("").and_then(|m| m.get(synonym)) {
            return (v.clone(), dynamic_config::SOURCE_DYNAMIC_DEFAULT_BROKER);
        }
    }
    match topic_config::broker_value(config, synonym) {
        Some((v, true)) => (v, SOURCE_STATIC_BROKER),
        Some((v, false)) => (v, SOURCE_DEFAULT),
        None => (d.default.to_string(), SOURCE_DEFAULT),
    }
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
    state: &Services,
    resource: &str,
    wanted: &dyn Fn(&str) -> bool,
    synonyms: bool,
) -> Vec<DescribeConfigsResourceResult> {
    let dynamic = state.topics.dynamic();
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
            Some(dynamic_config::BrokerConfig::Log(d)) => broker_log_value(&state.config, &dynamic, d, resource),
            _ => match topic_config::broker_value(&state.config, name) {
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
fn describe_group(state: &Services, group: &str, wanted: &dyn Fn(&str) -> bool) -> Vec<DescribeConfigsResourceResult> {
    let dynamic = state.topics.dynamic();
    let set = dynamic.groups.get(group).cloned().unwrap_or_default();
    dynamic_config::GROUP_CONFIGS
        .iter()
        .filter(|d| wanted(d.name))
        .map(|d| match set.get(d.name) {
            Some(v) => entry(d.name, Some(v.clone()), dynamic_config::SOURCE_GROUP, false, false, 3),
            None => {
                entry(d.name, Some(dynamic_config::group_default(&state.config, d)), SOURCE_DEFAULT, false, false, 3)
            }
        })
        .collect()
}

/// This file's APIs' authorization rules (Kafka's ACLs, as `KafkaApis` checks them), applied
/// before the handler by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    /// AlterConfigs and IncrementalAlterConfigs: the same rule and answer shape, different types.
    macro_rules! alter_configs_gate {
        ($c:expr, $r:expr, $Resp:ident, $module:ident, $variant:ident) => {{
            let denied = split_off(&mut $r.resources, |x| {
                config_allowed(&$c, Op::AlterConfigs, x.resource_type, &x.resource_name)
            });
            if denied.is_empty() {
                return Gate::Pass;
            }
            let denied: Vec<(i8, StrBytes)> = denied.into_iter().map(|d| (d.resource_type, d.resource_name)).collect();
            patch(
                move |resp: &mut $Resp| {
                    for (t, n) in denied {
                        let mut x = $module::AlterConfigsResourceResponse::default();
                        x.error_code = config_error(t);
                        x.error_message = msg("Authorization failed.");
                        x.resource_type = t;
                        x.resource_name = n;
                        resp.responses.push(x);
                    }
                },
                pick!($variant),
            )
        }};
    }

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

    pub fn alter_configs(c: &Authz<'_>, r: &mut AlterConfigsRequest, _version: i16) -> Gate {
        alter_configs_gate!(c, r, AlterConfigsResponse, alter_configs_response, AlterConfigs)
    }

    pub fn incremental_alter_configs(c: &Authz<'_>, r: &mut IncrementalAlterConfigsRequest, _version: i16) -> Gate {
        alter_configs_gate!(
            c,
            r,
            IncrementalAlterConfigsResponse,
            incremental_alter_configs_response,
            IncrementalAlterConfigs
        )
    }
}
