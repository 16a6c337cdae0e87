//! CreateAcls, DescribeAcls, DeleteAcls, DescribeUserScramCredentials,
//! AlterUserScramCredentials (who may call them is checked in `pipeline::authz`).

use super::sb;
use crate::cluster::{Command, CommandResult};
use crate::security::acl::{AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType};
use crate::security::credentials::{Change, CredentialRecord};
use crate::services::Services;
use kafka_protocol::error::ResponseError as E;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use sluice_protocol::scram::{Mechanism, MAX_ITERATIONS, MIN_ITERATIONS};
use std::collections::{BTreeMap, HashSet};

fn filter(
    rt: i8,
    name: &Option<StrBytes>,
    pt: i8,
    principal: &Option<StrBytes>,
    host: &Option<StrBytes>,
    op: i8,
    perm: i8,
) -> Result<AclFilter, String> {
    Ok(AclFilter {
        resource_type: ResourceType::from_code(rt).ok_or(format!("unknown resource type {rt}"))?,
        resource_name: name.as_ref().map(|s| s.to_string()),
        pattern_type: PatternType::from_code(pt).ok_or(format!("unknown pattern type {pt}"))?,
        principal: principal.as_ref().map(|s| s.to_string()),
        host: host.as_ref().map(|s| s.to_string()),
        operation: Operation::from_code(op).ok_or(format!("unknown operation {op}"))?,
        permission: Permission::from_code(perm).ok_or(format!("unknown permission type {perm}"))?,
    })
}

pub async fn create_acls(state: &Services, req: CreateAclsRequest) -> CreateAclsResponse {
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
        let stored = if state.topics.cluster.get().is_some() {
            // cluster mode: through the quorum, then this broker's copy
            match state.topics.cluster_write(Command::CreateAcls { acls: valid.clone() }).await {
                Ok(_) => state
                    .topics
                    .await_cluster(|_| {
                        let all = state.security.acls.all();
                        valid.iter().all(|b| all.contains(b)).then_some(())
                    })
                    .await
                    .map_err(|e| anyhow::anyhow!(e)),
                Err(e) => Err(anyhow::anyhow!(e)),
            }
        } else {
            state.security.acls.create(&valid)
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

pub fn describe_acls(state: &Services, req: DescribeAclsRequest) -> DescribeAclsResponse {
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
    for b in state.security.acls.describe(&f) {
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

pub async fn delete_acls(state: &Services, req: DeleteAclsRequest) -> DeleteAclsResponse {
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
    let deleted = if state.topics.cluster.get().is_some() {
        match state.topics.cluster_write(Command::DeleteAcls { filters: good.clone() }).await {
            Ok(CommandResult::DeletedAcls(d)) => {
                let gone: Vec<AclBinding> = d.iter().flatten().cloned().collect();
                state
                    .topics
                    .await_cluster(|_| {
                        let all = state.security.acls.all();
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
        state.security.acls.delete(&good)
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

pub fn describe_scram(
    state: &Services,
    req: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let mut resp = DescribeUserScramCredentialsResponse::default();
    let all = state.security.credentials.describe();
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

pub async fn alter_scram(state: &Services, req: AlterUserScramCredentialsRequest) -> AlterUserScramCredentialsResponse {
    let mut resp = AlterUserScramCredentialsResponse::default();
    // Kafka: a user named twice (any mechanism, deletion or upsertion) is refused whole
    let mut count: BTreeMap<(String, i8), usize> = BTreeMap::new();
    for (n, m) in req
        .deletions
        .iter()
        .map(|d| (d.name.to_string(), d.mechanism))
        .chain(req.upsertions.iter().map(|u| (u.name.to_string(), u.mechanism)))
    {
        *count.entry((n, m)).or_default() += 1;
    }
    let dup_users: HashSet<String> = count.iter().filter(|(_, c)| **c > 1).map(|((u, _), _)| u.clone()).collect();
    let mut errors: BTreeMap<String, (i16, String)> = BTreeMap::new();
    let mut changes = Vec::new();
    let mut change_users = Vec::new();
    let fail = |user: &str, code: i16, msg: String, errors: &mut BTreeMap<String, (i16, String)>| {
        errors.entry(user.to_string()).or_insert((code, msg));
    };
    for d in &req.deletions {
        let user = d.name.to_string();
        if dup_users.contains(&user) {
            fail(
                &user,
                E::DuplicateResource.code(),
                format!("A user credential cannot be altered twice in the same request: {user}"),
                &mut errors,
            );
            continue;
        }
        let Some(m) = Mechanism::from_code(d.mechanism) else {
            fail(
                &user,
                E::UnsupportedSaslMechanism.code(),
                format!("Unknown SCRAM mechanism {}", d.mechanism),
                &mut errors,
            );
            continue;
        };
        if state.security.credentials.get(&user, m).is_none() {
            fail(
                &user,
                E::ResourceNotFound.code(),
                format!("Attempt to delete a user credential that does not exist: {user}"),
                &mut errors,
            );
            continue;
        }
        changes.push(Change::Delete { user: user.clone(), mechanism: m });
        change_users.push(user);
    }
    for u in &req.upsertions {
        let user = u.name.to_string();
        if dup_users.contains(&user) {
            fail(
                &user,
                E::DuplicateResource.code(),
                format!("A user credential cannot be altered twice in the same request: {user}"),
                &mut errors,
            );
            continue;
        }
        if user.is_empty() {
            fail(&user, E::UnacceptableCredential.code(), "Username must not be empty".into(), &mut errors);
            continue;
        }
        let Some(m) = Mechanism::from_code(u.mechanism) else {
            fail(
                &user,
                E::UnsupportedSaslMechanism.code(),
                format!("Unknown SCRAM mechanism {}", u.mechanism),
                &mut errors,
            );
            continue;
        };
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&u.iterations) {
            fail(
                &user,
                E::UnacceptableCredential.code(),
                format!("Iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}"),
                &mut errors,
            );
            continue;
        }
        if u.salt.is_empty() || u.salted_password.is_empty() {
            fail(
                &user,
                E::UnacceptableCredential.code(),
                "Salt and salted password must not be empty".into(),
                &mut errors,
            );
            continue;
        }
        changes.push(Change::Upsert {
            user: user.clone(),
            credential: m.credential(&u.salted_password, u.salt.to_vec(), u.iterations),
        });
        change_users.push(user);
    }
    // a user with any refused change has none applied
    let keep: Vec<bool> = change_users.iter().map(|u| !errors.contains_key(u)).collect();
    let changes: Vec<Change> = changes.into_iter().zip(&keep).filter(|(_, k)| **k).map(|(c, _)| c).collect();
    if !changes.is_empty() {
        let stored = if state.topics.cluster.get().is_some() {
            alter_in_cluster(state, changes).await
        } else {
            state.security.credentials.apply(changes).map(|_| ())
        };
        if let Err(e) = stored {
            tracing::error!("cannot persist SCRAM credentials: {e}");
            for u in &change_users {
                errors
                    .entry(u.clone())
                    .or_insert((E::KafkaStorageError.code(), "credentials could not be stored".into()));
            }
        }
    }
    let users: std::collections::BTreeSet<String> = req
        .deletions
        .iter()
        .map(|d| d.name.to_string())
        .chain(req.upsertions.iter().map(|u| u.name.to_string()))
        .collect();
    for u in users {
        let mut r = alter_user_scram_credentials_response::AlterUserScramCredentialsResult::default();
        r.user = sb(&u);
        if let Some((code, msg)) = errors.get(&u) {
            r.error_code = *code;
            r.error_message = Some(sb(msg));
        }
        resp.results.push(r);
    }
    resp
}

/// Cluster mode: credential changes through the quorum, then wait for this broker's copy.
async fn alter_in_cluster(state: &Services, changes: Vec<Change>) -> anyhow::Result<()> {
    let mut upserts = Vec::new();
    let mut deletes = Vec::new();
    for c in &changes {
        match c {
            Change::Upsert { user, credential: cr } => {
                let r = CredentialRecord {
                    salt: cr.salt.clone(),
                    stored_key: cr.stored_key.clone(),
                    server_key: cr.server_key.clone(),
                    iterations: cr.iterations,
                };
                upserts.push((user.clone(), cr.mechanism.name().to_string(), r));
            }
            Change::Delete { user, mechanism } => deletes.push((user.clone(), mechanism.name().to_string())),
        }
    }
    state
        .topics
        .cluster_write(Command::AlterCredentials { upserts, deletes, only_if_absent: false })
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    state
        .topics
        .await_cluster(|_| {
            changes
                .iter()
                .all(|c| match c {
                    Change::Upsert { user, credential } => {
                        state.security.credentials.get(user, credential.mechanism).as_ref() == Some(credential)
                    }
                    Change::Delete { user, mechanism } => state.security.credentials.get(user, *mechanism).is_none(),
                })
                .then_some(())
        })
        .await
        .map_err(|e| anyhow::anyhow!(e))
}

/// This file's APIs' authorization rules (Kafka's ACLs, as `KafkaApis` checks them), applied
/// before the handler by `pipeline/authz.rs`.
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

    pub fn describe_acls(c: &Authz<'_>, _r: &mut DescribeAclsRequest, _version: i16) -> Gate {
        if c.cluster(Op::Describe) {
            return Gate::Pass;
        }
        let mut x = DescribeAclsResponse::default();
        x.error_code = E::ClusterAuthorizationFailed.code();
        x.error_message = msg("Cluster authorization failed.");
        Gate::Deny(Box::new(ResponseKind::DescribeAcls(x)))
    }

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

    pub fn alter_user_scram_credentials(
        c: &Authz<'_>,
        r: &mut AlterUserScramCredentialsRequest,
        _version: i16,
    ) -> Gate {
        if c.cluster(Op::Alter) {
            return Gate::Pass;
        }
        let users: Vec<StrBytes> =
            r.deletions.iter().map(|d| d.name.clone()).chain(r.upsertions.iter().map(|u| u.name.clone())).collect();
        let mut x = AlterUserScramCredentialsResponse::default();
        x.results = users
            .into_iter()
            .map(|u| {
                let mut e = alter_user_scram_credentials_response::AlterUserScramCredentialsResult::default();
                e.user = u;
                e.error_code = E::ClusterAuthorizationFailed.code();
                e.error_message = msg("Cluster authorization failed.");
                e
            })
            .collect();
        Gate::Deny(Box::new(ResponseKind::AlterUserScramCredentials(x)))
    }
}
