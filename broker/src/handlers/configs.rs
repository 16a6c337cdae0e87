//! DescribeConfigs, AlterConfigs, IncrementalAlterConfigs for topics (resource type 2); broker
//! configs (type 4) can be described (they are static: set at startup).

use super::sb;
use crate::handlers::topics::topic_error_code;
use crate::state::{BrokerState, TopicError};
use crate::topic_config::{self, Meaning, SOURCE_DEFAULT, SOURCE_STATIC_BROKER, SOURCE_TOPIC};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use std::collections::BTreeMap;

pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;

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
    state: &BrokerState,
    overrides: &BTreeMap<String, String>,
    wanted: &dyn Fn(&str) -> bool,
    synonyms: bool,
    documentation: bool,
) -> Vec<DescribeConfigsResourceResult> {
    let mut out = Vec::new();
    for d in topic_config::TOPIC_CONFIGS {
        if !wanted(d.name) || (d.meaning == Meaning::Removed && !overrides.contains_key(d.name)) {
            continue;
        }
        let (value, source) = topic_config::effective(&state.config, overrides, d.name);
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

pub fn describe(state: &BrokerState, req: DescribeConfigsRequest) -> DescribeConfigsResponse {
    let mut resp = DescribeConfigsResponse::default();
    for res in req.resources {
        let mut r = DescribeConfigsResult::default();
        r.resource_type = res.resource_type;
        r.resource_name = res.resource_name.clone();
        let keys: Option<Vec<String>> = res.configuration_keys.map(|ks| ks.iter().map(|k| k.to_string()).collect());
        let wanted = |k: &str| keys.as_ref().is_none_or(|ks| ks.iter().any(|x| x == k));
        match res.resource_type {
            RESOURCE_TOPIC => match state.topic(&res.resource_name) {
                None => r.error_code = ResponseError::UnknownTopicOrPartition.code(),
                Some(t) => {
                    r.configs =
                        describe_topic(state, &t.configs, &wanted, req.include_synonyms, req.include_documentation)
                }
            },
            RESOURCE_BROKER => {
                if res.resource_name.is_empty() || res.resource_name.parse::<i32>().ok() == Some(state.config.node_id) {
                    for s in crate::config::SETTINGS {
                        if !wanted(s.name) {
                            continue;
                        }
                        let mut e = DescribeConfigsResourceResult::default();
                        e.name = sb(s.name);
                        e.value = state.config.values.get(s.name).map(|v| sb(v));
                        e.read_only = true;
                        e.config_source = SOURCE_STATIC_BROKER;
                        e.config_type = 2;
                        r.configs.push(e);
                    }
                } else {
                    r.error_code = ResponseError::InvalidRequest.code();
                    r.error_message = Some(sb("unknown broker id"));
                }
            }
            _ => {
                r.error_code = ResponseError::InvalidRequest.code();
                r.error_message = Some(sb("only topic and broker resources are supported"));
            }
        }
        resp.results.push(r);
    }
    resp
}

fn resource_error(resource_type: i8) -> Option<(i16, String)> {
    if resource_type == RESOURCE_TOPIC {
        None
    } else if resource_type == RESOURCE_BROKER {
        Some((ResponseError::InvalidRequest.code(), "broker configs are static in this version".into()))
    } else {
        Some((ResponseError::InvalidRequest.code(), "only topic resources can be altered".into()))
    }
}

pub fn alter(state: &BrokerState, req: AlterConfigsRequest) -> AlterConfigsResponse {
    let mut resp = AlterConfigsResponse::default();
    for res in req.resources {
        let mut r = kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse::default();
        r.resource_type = res.resource_type;
        r.resource_name = res.resource_name.clone();
        if let Some((code, msg)) = resource_error(res.resource_type) {
            r.error_code = code;
            r.error_message = Some(sb(&msg));
        } else {
            let new: BTreeMap<String, String> = res
                .configs
                .iter()
                .filter_map(|c| c.value.as_ref().map(|v| (c.name.to_string(), v.to_string())))
                .collect();
            let result = state.alter_topic_configs(
                &res.resource_name,
                |m| {
                    *m = new;
                    Ok(())
                },
                req.validate_only,
            );
            if let Err(e) = result {
                r.error_code = topic_error_code(&e);
                r.error_message = Some(sb(&e.to_string()));
            }
        }
        resp.responses.push(r);
    }
    resp
}

pub fn incremental_alter(state: &BrokerState, req: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse {
    let mut resp = IncrementalAlterConfigsResponse::default();
    for res in req.resources {
        let mut r =
            kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse::default();
        r.resource_type = res.resource_type;
        r.resource_name = res.resource_name.clone();
        if let Some((code, msg)) = resource_error(res.resource_type) {
            r.error_code = code;
            r.error_message = Some(sb(&msg));
        } else {
            let ops = res.configs.clone();
            let result = state.alter_topic_configs(
                &res.resource_name,
                |m| {
                    for op in ops {
                        let name = op.name.to_string();
                        match op.config_operation {
                            0 => match op.value {
                                Some(v) => {
                                    m.insert(name, v.to_string());
                                }
                                None => return Err(TopicError::InvalidConfig(name, "SET needs a value".into())),
                            },
                            1 => {
                                m.remove(&name);
                            }
                            // APPEND, SUBTRACT: list configs, from the current value (the
                            // override, or the broker's default)
                            kind @ (2 | 3) if topic_config::is_list(&name) => {
                                let current = topic_config::effective(&state.config, m, &name).0;
                                let mut items: Vec<String> = current
                                    .split(',')
                                    .map(|x| x.trim().to_string())
                                    .filter(|x| !x.is_empty())
                                    .collect();
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
                            2 | 3 => {
                                return Err(TopicError::InvalidConfig(
                                    name,
                                    "APPEND/SUBTRACT apply to list configs only".into(),
                                ))
                            }
                            other => return Err(TopicError::InvalidConfig(name, format!("unknown operation {other}"))),
                        }
                    }
                    Ok(())
                },
                req.validate_only,
            );
            if let Err(e) = result {
                r.error_code = topic_error_code(&e);
                r.error_message = Some(sb(&e.to_string()));
            }
        }
        resp.responses.push(r);
    }
    resp
}
