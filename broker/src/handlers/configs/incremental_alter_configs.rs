//! IncrementalAlterConfigs (SET, DELETE, APPEND, SUBTRACT per config).

use super::*;

pub async fn incremental_alter(
    topics: &Arc<TopicRegistry>,
    config: &Arc<Config>,
    req: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut resp = IncrementalAlterConfigsResponse::default();
    for res in req.resources {
        let mut r =
            kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse::default();
        r.resource_type = res.resource_type;
        r.resource_name = res.resource_name.clone();
        let kind = res.resource_type;
        let dynamic = topics.dynamic();
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
        let (in_force, resource) = (config.clone(), res.resource_name.to_string());
        let current = move |m: &BTreeMap<String, String>, name: &str| -> String {
            if let Some(v) = m.get(name) {
                return v.clone();
            }
            match kind {
                RESOURCE_TOPIC => topic_config::effective(&in_force, &dynamic, m, name).0,
                _ => match dynamic_config::broker_config(name) {
                    Some(dynamic_config::BrokerConfig::Log(d)) => broker_log_value(&in_force, &dynamic, d, &resource).0,
                    Some(dynamic_config::BrokerConfig::Other(d)) => d.default.to_string(),
                    None => String::new(),
                },
            }
        };
        let ops = res.configs.clone();
        let f: ConfigEdit = Arc::new(move |m: &mut BTreeMap<String, String>| apply_ops(m, &ops, &is_list, &current));
        if let Err((code, msg)) = alter_resource(topics, config, kind, &res.resource_name, f, req.validate_only).await {
            r.error_code = code;
            r.error_message = Some(sb(&msg));
        }
        resp.responses.push(r);
    }
    resp
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

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
