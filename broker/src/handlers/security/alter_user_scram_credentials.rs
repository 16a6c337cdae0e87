//! AlterUserScramCredentials (stored in the metadata quorum in a cluster).

use super::*;

pub async fn alter_scram(
    security: &Security,
    topics: &Arc<TopicRegistry>,
    req: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
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
        if security.credentials.get(&user, m).is_none() {
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
        let stored = if topics.cluster.get().is_some() {
            alter_in_cluster(security, topics, changes).await
        } else {
            security.credentials.apply(changes).map(|_| ())
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
async fn alter_in_cluster(
    security: &Security,
    topics: &Arc<TopicRegistry>,
    changes: Vec<Change>,
) -> anyhow::Result<()> {
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
    topics
        .cluster_write(Command::AlterCredentials { upserts, deletes, only_if_absent: false })
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    topics
        .await_cluster(|_| {
            changes
                .iter()
                .all(|c| match c {
                    Change::Upsert { user, credential } => {
                        security.credentials.get(user, credential.mechanism).as_ref() == Some(credential)
                    }
                    Change::Delete { user, mechanism } => security.credentials.get(user, *mechanism).is_none(),
                })
                .then_some(())
        })
        .await
        .map_err(|e| anyhow::anyhow!(e))
}

/// Its authorization rule (Kafka's ACLs, as `KafkaApis` checks them), applied before the handler
/// by `pipeline/authz.rs`.
pub mod acl {
    use crate::handlers::gate::prelude::*;

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
