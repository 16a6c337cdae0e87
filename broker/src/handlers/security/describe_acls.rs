//! DescribeAcls.

use super::*;

pub fn describe_acls(security: &Security, req: DescribeAclsRequest) -> DescribeAclsResponse {
    let mut resp = DescribeAclsResponse::default();
    let f = match filter(
        req.resource_type_filter,
        &req.resource_name_filter,
        req.pattern_type_filter,
        &req.principal_filter,
        &req.host_filter,
        req.operation,
        req.permission_type,
    ) {
        Ok(f) => f,
        Err(e) => {
            resp.error_code = E::InvalidRequest.code();
            resp.error_message = Some(sb(&e));
            return resp;
        }
    };
    let mut by_resource: BTreeMap<(i8, String, i8), Vec<AclBinding>> = BTreeMap::new();
    for b in security.acls.describe(&f) {
        by_resource
            .entry((b.resource_type.code(), b.resource_name.clone(), b.pattern_type.code()))
            .or_default()
            .push(b);
    }
    for ((rt, name, pt), acls) in by_resource {
        let mut r = describe_acls_response::DescribeAclsResource::default();
        r.resource_type = rt;
        r.resource_name = sb(&name);
        r.pattern_type = pt;
        r.acls = acls
            .into_iter()
            .map(|b| {
                let mut d = describe_acls_response::AclDescription::default();
                d.principal = sb(&b.principal);
                d.host = sb(&b.host);
                d.operation = b.operation.code();
                d.permission_type = b.permission.code();
                d
            })
            .collect();
        resp.resources.push(r);
    }
    resp
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn describe_acls(c: &Authz<'_>, _r: &mut DescribeAclsRequest, _version: i16) -> Gate {
        if c.cluster(Op::Describe) {
            return Gate::Pass;
        }
        let mut x = DescribeAclsResponse::default();
        x.error_code = E::ClusterAuthorizationFailed.code();
        x.error_message = msg("Cluster authorization failed.");
        Gate::Deny(Box::new(ResponseKind::DescribeAcls(x)))
    }
}
