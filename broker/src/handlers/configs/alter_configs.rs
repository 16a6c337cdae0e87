//! AlterConfigs (replaces a resource's dynamic configs).

use super::*;

pub async fn alter(
    topics: &Arc<TopicRegistry>,
    config: &Arc<Config>,
    req: AlterConfigsRequest,
) -> AlterConfigsResponse {
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
            alter_resource(topics, config, res.resource_type, &res.resource_name, replace, req.validate_only).await
        {
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

    pub fn alter_configs(c: &Authz<'_>, r: &mut AlterConfigsRequest, _version: i16) -> Gate {
        alter_configs_gate!(c, r, AlterConfigsResponse, alter_configs_response, AlterConfigs)
    }
}
