//! ACLs and SCRAM users through the admin API (CreateAcls, DescribeAcls, DeleteAcls,
//! DescribeUserScramCredentials, AlterUserScramCredentials).

use crate::admin::{check_msg, unexpected, Admin};
use crate::cluster::sb;
use crate::error::{Error, Result};
use kafka_protocol::messages::*;
use sluice_protocol::scram::Mechanism;

/// Kafka's names and codes for ACL fields, as `kafka-acls` spells them (case-insensitive;
/// `-` and `_` ignored when parsing).
pub mod names {
    /// Resource types.
    pub const RESOURCE_TYPES: &[(&str, i8)] = &[
        ("Any", 1),
        ("Topic", 2),
        ("Group", 3),
        ("Cluster", 4),
        ("TransactionalId", 5),
        ("DelegationToken", 6),
        ("User", 7),
    ];
    /// Pattern types.
    pub const PATTERN_TYPES: &[(&str, i8)] = &[("Any", 1), ("Match", 2), ("Literal", 3), ("Prefixed", 4)];
    /// Operations.
    pub const OPERATIONS: &[(&str, i8)] = &[
        ("Any", 1),
        ("All", 2),
        ("Read", 3),
        ("Write", 4),
        ("Create", 5),
        ("Delete", 6),
        ("Alter", 7),
        ("Describe", 8),
        ("ClusterAction", 9),
        ("DescribeConfigs", 10),
        ("AlterConfigs", 11),
        ("IdempotentWrite", 12),
        ("CreateTokens", 13),
        ("DescribeTokens", 14),
        ("TwoPhaseCommit", 15),
    ];
    /// Permission types.
    pub const PERMISSIONS: &[(&str, i8)] = &[("Any", 1), ("Deny", 2), ("Allow", 3)];

    fn norm(s: &str) -> String {
        s.replace(['-', '_'], "").to_ascii_lowercase()
    }

    /// The code of `name` in `table`.
    pub fn code(table: &[(&str, i8)], name: &str) -> Option<i8> {
        table.iter().find(|(n, _)| norm(n) == norm(name)).map(|(_, c)| *c)
    }

    /// The name of `code` in `table` ("Unknown" if absent).
    pub fn name(table: &[(&'static str, i8)], code: i8) -> &'static str {
        table.iter().find(|(_, c)| *c == code).map(|(n, _)| *n).unwrap_or("Unknown")
    }
}

/// One ACL binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl {
    /// Resource type code (see [`names::RESOURCE_TYPES`]).
    pub resource_type: i8,
    /// Resource name (`kafka-cluster` for the cluster; `*` for every resource).
    pub resource_name: String,
    /// Pattern type code: 3 literal, 4 prefixed.
    pub pattern_type: i8,
    /// `User:<name>` (or `User:*`).
    pub principal: String,
    /// Client host, `*` for any.
    pub host: String,
    /// Operation code.
    pub operation: i8,
    /// Permission code: 3 allow, 2 deny.
    pub permission: i8,
}

/// A filter over ACL bindings: `None` matches anything; codes 1 (Any) match any value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclFilter {
    /// Resource type code (1: any).
    pub resource_type: i8,
    /// Resource name.
    pub resource_name: Option<String>,
    /// Pattern type code (1: any, 2: match).
    pub pattern_type: i8,
    /// Principal.
    pub principal: Option<String>,
    /// Host.
    pub host: Option<String>,
    /// Operation code (1: any).
    pub operation: i8,
    /// Permission code (1: any).
    pub permission: i8,
}

impl AclFilter {
    /// A filter matching every ACL.
    pub fn any() -> AclFilter {
        AclFilter {
            resource_type: 1,
            resource_name: None,
            pattern_type: 1,
            principal: None,
            host: None,
            operation: 1,
            permission: 1,
        }
    }
}

/// A user's SCRAM credentials: (mechanism name, iterations).
pub type UserCredentials = (String, Vec<(String, i32)>);

impl Admin {
    /// Create ACLs (Alter on the cluster needed).
    pub async fn create_acls(&self, acls: &[Acl]) -> Result<()> {
        let mut r = CreateAclsRequest::default();
        r.creations = acls
            .iter()
            .map(|a| {
                let mut c = create_acls_request::AclCreation::default();
                c.resource_type = a.resource_type;
                c.resource_name = sb(&a.resource_name);
                c.resource_pattern_type = a.pattern_type;
                c.principal = sb(&a.principal);
                c.host = sb(&a.host);
                c.operation = a.operation;
                c.permission_type = a.permission;
                c
            })
            .collect();
        let b = self.any().await?;
        let ResponseKind::CreateAcls(resp) = self.call(&b, ApiKey::CreateAcls, RequestKind::CreateAcls(r)).await?
        else {
            return Err(unexpected("CreateAcls"));
        };
        for x in &resp.results {
            check_msg(x.error_code, x.error_message.as_ref(), "create ACL")?;
        }
        Ok(())
    }

    /// The ACLs matching `filter`.
    pub async fn describe_acls(&self, filter: &AclFilter) -> Result<Vec<Acl>> {
        let mut r = DescribeAclsRequest::default();
        r.resource_type_filter = filter.resource_type;
        r.resource_name_filter = filter.resource_name.as_deref().map(sb);
        r.pattern_type_filter = filter.pattern_type;
        r.principal_filter = filter.principal.as_deref().map(sb);
        r.host_filter = filter.host.as_deref().map(sb);
        r.operation = filter.operation;
        r.permission_type = filter.permission;
        let b = self.any().await?;
        let ResponseKind::DescribeAcls(resp) =
            self.call(&b, ApiKey::DescribeAcls, RequestKind::DescribeAcls(r)).await?
        else {
            return Err(unexpected("DescribeAcls"));
        };
        check_msg(resp.error_code, resp.error_message.as_ref(), "describe ACLs")?;
        Ok(resp
            .resources
            .iter()
            .flat_map(|res| {
                res.acls.iter().map(move |a| Acl {
                    resource_type: res.resource_type,
                    resource_name: res.resource_name.to_string(),
                    pattern_type: res.pattern_type,
                    principal: a.principal.to_string(),
                    host: a.host.to_string(),
                    operation: a.operation,
                    permission: a.permission_type,
                })
            })
            .collect())
    }

    /// Delete the ACLs matching `filter`; returns what was deleted.
    pub async fn delete_acls(&self, filter: &AclFilter) -> Result<Vec<Acl>> {
        let mut f = delete_acls_request::DeleteAclsFilter::default();
        f.resource_type_filter = filter.resource_type;
        f.resource_name_filter = filter.resource_name.as_deref().map(sb);
        f.pattern_type_filter = filter.pattern_type;
        f.principal_filter = filter.principal.as_deref().map(sb);
        f.host_filter = filter.host.as_deref().map(sb);
        f.operation = filter.operation;
        f.permission_type = filter.permission;
        let mut r = DeleteAclsRequest::default();
        r.filters = vec![f];
        let b = self.any().await?;
        let ResponseKind::DeleteAcls(resp) = self.call(&b, ApiKey::DeleteAcls, RequestKind::DeleteAcls(r)).await?
        else {
            return Err(unexpected("DeleteAcls"));
        };
        let mut out = Vec::new();
        for fr in &resp.filter_results {
            check_msg(fr.error_code, fr.error_message.as_ref(), "delete ACLs")?;
            out.extend(fr.matching_acls.iter().map(|m| Acl {
                resource_type: m.resource_type,
                resource_name: m.resource_name.to_string(),
                pattern_type: m.pattern_type,
                principal: m.principal.to_string(),
                host: m.host.to_string(),
                operation: m.operation,
                permission: m.permission_type,
            }));
        }
        Ok(out)
    }

    /// SCRAM credentials per user (all users when `users` is empty).
    pub async fn describe_users(&self, users: &[&str]) -> Result<Vec<UserCredentials>> {
        let mut r = DescribeUserScramCredentialsRequest::default();
        r.users = None;
        if !users.is_empty() {
            r.users = Some(
                users
                    .iter()
                    .map(|u| {
                        let mut n = describe_user_scram_credentials_request::UserName::default();
                        n.name = sb(u);
                        n
                    })
                    .collect(),
            );
        }
        let b = self.any().await?;
        let ResponseKind::DescribeUserScramCredentials(resp) =
            self.call(&b, ApiKey::DescribeUserScramCredentials, RequestKind::DescribeUserScramCredentials(r)).await?
        else {
            return Err(unexpected("DescribeUserScramCredentials"));
        };
        check_msg(resp.error_code, resp.error_message.as_ref(), "describe users")?;
        let mut out = Vec::new();
        for u in &resp.results {
            check_msg(u.error_code, u.error_message.as_ref(), format!("describe user {}", u.user))?;
            let creds = u
                .credential_infos
                .iter()
                .map(|c| {
                    let m = Mechanism::from_code(c.mechanism).map(|m| m.name()).unwrap_or("UNKNOWN");
                    (m.to_string(), c.iterations)
                })
                .collect();
            out.push((u.user.to_string(), creds));
        }
        Ok(out)
    }

    /// Set `user`'s password for `mechanism` (the salted password is computed here, with a
    /// fresh random salt; the password never leaves the client).
    pub async fn upsert_user(&self, user: &str, password: &str, mechanism: Mechanism, iterations: i32) -> Result<()> {
        use rand::RngCore;
        let mut salt = vec![0u8; 16];
        rand::thread_rng().fill_bytes(&mut salt);
        let salted = mechanism.salted_password(password.as_bytes(), &salt, iterations.max(1) as u32);
        let mut u = alter_user_scram_credentials_request::ScramCredentialUpsertion::default();
        u.name = sb(user);
        u.mechanism = mechanism.code();
        u.iterations = iterations;
        u.salt = salt.into();
        u.salted_password = salted.into();
        let mut r = AlterUserScramCredentialsRequest::default();
        r.upsertions = vec![u];
        self.alter_users(r, user).await
    }

    /// Delete `user`'s credential for `mechanism`.
    pub async fn delete_user(&self, user: &str, mechanism: Mechanism) -> Result<()> {
        let mut d = alter_user_scram_credentials_request::ScramCredentialDeletion::default();
        d.name = sb(user);
        d.mechanism = mechanism.code();
        let mut r = AlterUserScramCredentialsRequest::default();
        r.deletions = vec![d];
        self.alter_users(r, user).await
    }

    async fn alter_users(&self, r: AlterUserScramCredentialsRequest, user: &str) -> Result<()> {
        let b = self.any().await?;
        let ResponseKind::AlterUserScramCredentials(resp) =
            self.call(&b, ApiKey::AlterUserScramCredentials, RequestKind::AlterUserScramCredentials(r)).await?
        else {
            return Err(unexpected("AlterUserScramCredentials"));
        };
        for x in &resp.results {
            check_msg(x.error_code, x.error_message.as_ref(), format!("alter user {user}"))?;
        }
        if resp.results.is_empty() {
            return Err(Error::invalid(format!("alter user {user}: no answer for the user")));
        }
        Ok(())
    }
}
