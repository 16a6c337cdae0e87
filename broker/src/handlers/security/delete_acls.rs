//! DeleteAcls.

use super::*;

pub async fn delete_acls(
    security: &Security,
    topics: &Arc<TopicRegistry>,
    req: DeleteAclsRequest,
) -> DeleteAclsResponse {
    let mut resp = DeleteAclsResponse::default();
    let parsed: Vec<Result<AclFilter, String>> = req
        .filters
        .iter()
        .map(|f| {
            filter(
                f.resource_type_filter,
                &f.resource_name_filter,
                f.pattern_type_filter,
                &f.principal_filter,
                &f.host_filter,
                f.operation,
                f.permission_type,
            )
        })
        .collect();
    let good: Vec<AclFilter> = parsed.iter().filter_map(|f| f.as_ref().ok().cloned()).collect();
    let deleted = if topics.cluster.get().is_some() {
        match topics.cluster_write(Command::DeleteAcls { filters: good.clone() }).await {
            Ok(CommandResult::DeletedAcls(d)) => {
                let gone: Vec<AclBinding> = d.iter().flatten().cloned().collect();
                topics
                    .await_cluster(|_| {
                        let all = security.acls.all();
                        gone.iter().all(|b| !all.contains(b)).then_some(())
                    })
                    .await
                    .map(|_| d)
                    .map_err(|e| anyhow::anyhow!(e))
            }
            Ok(other) => Err(anyhow::anyhow!("unexpected answer {other:?}")),
            Err(e) => Err(anyhow::anyhow!(e)),
        }
    } else {
        security.acls.delete(&good)
    };
    let deleted = match deleted {
        Ok(d) => d,
        Err(e) => {
            tracing::error!("cannot persist ACLs: {e}");
            for _ in &req.filters {
                let mut r = delete_acls_response::DeleteAclsFilterResult::default();
                r.error_code = E::KafkaStorageError.code();
                r.error_message = Some(sb("the ACLs could not be stored"));
                resp.filter_results.push(r);
            }
            return resp;
        }
    };
    let mut deleted = deleted.into_iter();
    for f in parsed {
        let mut r = delete_acls_response::DeleteAclsFilterResult::default();
        match f {
            Err(e) => {
                r.error_code = E::InvalidRequest.code();
                r.error_message = Some(sb(&e));
            }
            Ok(_) => {
                r.matching_acls = deleted
                    .next()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|b| {
                        let mut m = delete_acls_response::DeleteAclsMatchingAcl::default();
                        m.resource_type = b.resource_type.code();
                        m.resource_name = sb(&b.resource_name);
                        m.pattern_type = b.pattern_type.code();
                        m.principal = sb(&b.principal);
                        m.host = sb(&b.host);
                        m.operation = b.operation.code();
                        m.permission_type = b.permission.code();
                        m
                    })
                    .collect();
            }
        }
        resp.filter_results.push(r);
    }
    resp
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn delete_acls(c: &Authz<'_>, r: &mut DeleteAclsRequest, _version: i16) -> Gate {
        if c.cluster(Op::Alter) {
            return Gate::Pass;
        }
        let mut x = DeleteAclsResponse::default();
        x.filter_results = r
            .filters
            .iter()
            .map(|_| {
                let mut e = delete_acls_response::DeleteAclsFilterResult::default();
                e.error_code = E::ClusterAuthorizationFailed.code();
                e.error_message = msg("Cluster authorization failed.");
                e
            })
            .collect();
        Gate::Deny(Box::new(ResponseKind::DeleteAcls(x)))
    }
}
