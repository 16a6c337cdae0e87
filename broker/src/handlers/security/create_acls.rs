//! CreateAcls.

use super::*;

pub async fn create_acls(
    security: &Security,
    topics: &Arc<TopicRegistry>,
    req: CreateAclsRequest,
) -> CreateAclsResponse {
    let mut resp = CreateAclsResponse::default();
    let mut valid = Vec::new();
    let mut slots = Vec::new();
    for c in &req.creations {
        let binding = (|| -> Result<AclBinding, String> {
            let b = AclBinding {
                resource_type: ResourceType::from_code(c.resource_type)
                    .ok_or(format!("unknown resource type {}", c.resource_type))?,
                resource_name: c.resource_name.to_string(),
                pattern_type: PatternType::from_code(c.resource_pattern_type)
                    .ok_or(format!("unknown pattern type {}", c.resource_pattern_type))?,
                principal: c.principal.to_string(),
                host: c.host.to_string(),
                operation: Operation::from_code(c.operation).ok_or(format!("unknown operation {}", c.operation))?,
                permission: Permission::from_code(c.permission_type)
                    .ok_or(format!("unknown permission type {}", c.permission_type))?,
            };
            b.validate()?;
            Ok(b)
        })();
        let mut r = create_acls_response::AclCreationResult::default();
        match binding {
            Ok(b) => {
                slots.push(Some(valid.len()));
                valid.push(b);
            }
            Err(e) => {
                slots.push(None);
                r.error_code = E::InvalidRequest.code();
                r.error_message = Some(sb(&e));
            }
        }
        resp.results.push(r);
    }
    if !valid.is_empty() {
        let stored = if topics.cluster.get().is_some() {
            // cluster mode: through the quorum, then this broker's copy
            match topics.cluster_write(Command::CreateAcls { acls: valid.clone() }).await {
                Ok(_) => topics
                    .await_cluster(|_| {
                        let all = security.acls.all();
                        valid.iter().all(|b| all.contains(b)).then_some(())
                    })
                    .await
                    .map_err(|e| anyhow::anyhow!(e)),
                Err(e) => Err(anyhow::anyhow!(e)),
            }
        } else {
            security.acls.create(&valid)
        };
        if let Err(e) = stored {
            tracing::error!("cannot persist ACLs: {e}");
            for (r, slot) in resp.results.iter_mut().zip(&slots) {
                if slot.is_some() {
                    r.error_code = E::KafkaStorageError.code();
                    r.error_message = Some(sb("the ACLs could not be stored"));
                }
            }
        }
    }
    resp
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn create_acls(c: &Authz<'_>, r: &mut CreateAclsRequest, _version: i16) -> Gate {
        if c.cluster(Op::Alter) {
            return Gate::Pass;
        }
        let mut x = CreateAclsResponse::default();
        x.results = r
            .creations
            .iter()
            .map(|_| {
                let mut e = create_acls_response::AclCreationResult::default();
                e.error_code = E::ClusterAuthorizationFailed.code();
                e.error_message = msg("Cluster authorization failed.");
                e
            })
            .collect();
        Gate::Deny(Box::new(ResponseKind::CreateAcls(x)))
    }
}
