//! DescribeUserScramCredentials.

use super::*;

pub fn describe_scram(
    security: &Security,
    req: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let mut resp = DescribeUserScramCredentialsResponse::default();
    let all = security.credentials.describe();
    let info = |user: &str, creds: &[(Mechanism, i32)]| {
        let mut r = describe_user_scram_credentials_response::DescribeUserScramCredentialsResult::default();
        r.user = sb(user);
        r.credential_infos = creds
            .iter()
            .map(|(m, i)| {
                let mut c = describe_user_scram_credentials_response::CredentialInfo::default();
                c.mechanism = m.code();
                c.iterations = *i;
                c
            })
            .collect();
        r
    };
    match req.users.filter(|u| !u.is_empty()) {
        None => resp.results = all.iter().map(|(u, c)| info(u, c)).collect(),
        Some(users) => {
            let mut seen = HashSet::new();
            let dups: HashSet<String> =
                users.iter().map(|u| u.name.to_string()).filter(|u| !seen.insert(u.clone())).collect();
            let mut done = HashSet::new();
            for u in users {
                let name = u.name.to_string();
                if !done.insert(name.clone()) {
                    continue;
                }
                let mut r = match all.get(&name) {
                    Some(c) => info(&name, c),
                    None => {
                        let mut r =
                            describe_user_scram_credentials_response::DescribeUserScramCredentialsResult::default();
                        r.user = u.name.clone();
                        r.error_code = E::ResourceNotFound.code();
                        r.error_message =
                            Some(sb(&format!("Attempt to describe a user credential that does not exist: {name}")));
                        r
                    }
                };
                if dups.contains(&name) {
                    r.credential_infos.clear();
                    r.error_code = E::DuplicateResource.code();
                    r.error_message = Some(sb(&format!(
                        "Cannot describe SCRAM credentials for the same user twice in a single request: {name}"
                    )));
                }
                resp.results.push(r);
            }
        }
    }
    resp
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

    pub fn describe_user_scram_credentials(
        c: &Authz<'_>,
        r: &mut DescribeUserScramCredentialsRequest,
        _version: i16,
    ) -> Gate {
        if c.cluster(Op::Describe) {
            return Gate::Pass;
        }
        // Kafka answers a top-level error (and, per user asked for, a result with the
        // error but no name). librdkafka (2.12 and since) frees a static or stack string on
        // any top-level error here and aborts the client process; so when users are named,
        // each gets its own result, named, carrying the refusal, and the top level stays
        // clear (decision 0014). Asked for every user, only the top level can carry it.
        let mut x = DescribeUserScramCredentialsResponse::default();
        let users: Vec<StrBytes> = r.users.iter().flatten().map(|u| u.name.clone()).collect();
        if users.is_empty() {
            x.error_code = E::ClusterAuthorizationFailed.code();
            x.error_message = msg("Cluster authorization failed.");
        }
        x.results = users
            .into_iter()
            .map(|u| {
                let mut e = describe_user_scram_credentials_response::DescribeUserScramCredentialsResult::default();
                e.user = u;
                e.error_code = E::ClusterAuthorizationFailed.code();
                e.error_message = msg("Cluster authorization failed.");
                e
            })
            .collect();
        Gate::Deny(Box::new(ResponseKind::DescribeUserScramCredentials(x)))
    }
}
