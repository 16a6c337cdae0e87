//! Config APIs, one file each: DescribeConfigs, AlterConfigs, IncrementalAlterConfigs, for
//! topics (resource type 2), brokers (type 4: the cluster default "" and each broker's dynamic
//! configs over its static settings) and groups (type 32, KIP-848's group configs). Each file
//! holds its API's answer and its ACL rule (`acl`); this module, what they share.

use super::sb;
use crate::config::Config;
use crate::dynamic_config::{self, DynamicConfigs};
use crate::handlers::topics::topic_error_code;
use crate::topic_config::{self, Meaning, SOURCE_DEFAULT, SOURCE_STATIC_BROKER, SOURCE_TOPIC};
use crate::topics::TopicRegistry;
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

/// AlterConfigs and IncrementalAlterConfigs: the same rule and answer shape, different types.
macro_rules! alter_configs_gate {
    ($c:expr, $r:expr, $Resp:ident, $module:ident, $variant:ident) => {{
        let denied =
            split_off(&mut $r.resources, |x| config_allowed(&$c, Op::AlterConfigs, x.resource_type, &x.resource_name));
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

pub mod alter_configs;
pub mod describe_configs;
pub mod incremental_alter_configs;

pub const RESOURCE_TOPIC: i8 = 2;

pub const RESOURCE_BROKER: i8 = 4;

pub const RESOURCE_GROUP: i8 = 32;

/// The broker resource names this broker answers for: "" (the cluster default), its own id,
/// and (cluster mode, altering) any registered broker's.
fn broker_resource_ok(topics: &Arc<TopicRegistry>, config: &Arc<Config>, name: &str, altering: bool) -> bool {
    if name.is_empty() {
        return true;
    }
    let Ok(id) = name.parse::<i32>() else { return false };
    id == config.node_id || (altering && topics.cluster.get().is_some_and(|c| c.image().brokers.contains_key(&id)))
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
    topics: &Arc<TopicRegistry>,
    config: &Arc<Config>,
    resource_type: i8,
    name: &str,
    f: ConfigEdit,
    validate_only: bool,
) -> Result<(), (i16, String)> {
    let err = |e: TopicError| (topic_error_code(&e), e.to_string());
    match resource_type {
        RESOURCE_TOPIC => topics.alter_topic_configs(name, f, validate_only).await.map_err(err),
        RESOURCE_BROKER | RESOURCE_GROUP => {
            if resource_type == RESOURCE_BROKER && !broker_resource_ok(topics, config, name, true) {
                return Err((ResponseError::InvalidRequest.code(), format!("unknown broker id '{name}'")));
            }
            if resource_type == RESOURCE_GROUP && name.is_empty() {
                return Err((ResponseError::InvalidRequest.code(), "a group config needs a group id".into()));
            }
            let dynamic = topics.dynamic();
            let all = if resource_type == RESOURCE_GROUP { &dynamic.groups } else { &dynamic.brokers };
            let mut m = all.get(name).cloned().unwrap_or_default();
            f(&mut m).map_err(err)?;
            for (k, v) in &m {
                let checked = if resource_type == RESOURCE_GROUP {
                    dynamic_config::check_group_config(config, k, v).map(|_| ())
                } else {
                    dynamic_config::check_broker_config(name, k, v)
                };
                checked.map_err(|m| (ResponseError::InvalidConfig.code(), m))?;
            }
            if validate_only {
                return Ok(());
            }
            topics.set_resource_configs(resource_type, name, m).await.map_err(err)
        }
        _ => {
            Err((ResponseError::InvalidRequest.code(), "only topic, broker and group resources can be altered".into()))
        }
    }
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
