//! DescribeConfigs, AlterConfigs, IncrementalAlterConfigs for topics (resource type 2); broker
//! configs (type 4) can be described (they are static: set at startup).

use super::sb;
use crate::handlers::topics::topic_error_code;
use crate::state::{log_config_for, BrokerState, TopicError, TOPIC_CONFIGS};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_response::{DescribeConfigsResourceResult, DescribeConfigsResult};
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use sluice_storage::{FlushPolicy, LogConfig};
use std::collections::BTreeMap;

/// Topic configs whose value is a list (IncrementalAlterConfigs APPEND and SUBTRACT).
const LIST_CONFIGS: &[&str] = &["cleanup.policy"];

pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;
/// DescribeConfigs config sources.
const SOURCE_DYNAMIC_TOPIC: i8 = 1;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;

/// The effective value of each topic config, from a resolved `LogConfig`.
fn effective(c: &LogConfig, overrides: &BTreeMap<String, String>) -> Vec<(String, String)> {
    TOPIC_CONFIGS
        .iter()
        .map(|k| {
            let v = match *k {
                "retention.ms" => c.retention_ms.to_string(),
                "retention.bytes" => c.retention_bytes.to_string(),
                "segment.bytes" => c.segment_bytes.to_string(),
                "segment.ms" => c.segment_ms.to_string(),
                "max.message.bytes" => c.max_message_bytes.to_string(),
                "cleanup.policy" => match (c.cleanup_compact, c.cleanup_delete) {
                    (true, true) => "compact,delete".to_string(),
                    (true, false) => "compact".to_string(),
                    _ => "delete".to_string(),
                },
                "message.timestamp.type" => overrides.get(*k).cloned().unwrap_or_else(|| "CreateTime".into()),
                "flush.policy" => match c.flush {
                    FlushPolicy::Sync => "sync".into(),
                    FlushPolicy::Interval { .. } => "interval".into(),
                },
                _ => String::new(),
            };
            (k.to_string(), v)
        })
        .collect()
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
                Some(t) => match log_config_for(&state.config.log, &t.configs) {
                    Ok(c) => {
                        for (k, v) in effective(&c, &t.configs) {
                            if !wanted(&k) {
                                continue;
                            }
                            let mut e = DescribeConfigsResourceResult::default();
                            e.config_source =
                                if t.configs.contains_key(&k) { SOURCE_DYNAMIC_TOPIC } else { SOURCE_DEFAULT };
                            e.name = sb(&k);
                            e.value = Some(sb(&v));
                            r.configs.push(e);
                        }
                    }
                    Err(e) => r.error_code = topic_error_code(&e),
                },
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
                            // APPEND, SUBTRACT: list configs (of the topic configs Sluice
                            // knows, `cleanup.policy`), from the current value or the default
                            kind @ (2 | 3) if LIST_CONFIGS.contains(&name.as_str()) => {
                                let current = m.get(&name).cloned().unwrap_or_else(|| "delete".to_string());
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
                                if items.is_empty() {
                                    return Err(TopicError::InvalidConfig(name, "the list would be empty".into()));
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
