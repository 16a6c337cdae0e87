//! ACLs as Kafka defines them: a binding is (resource type, name, pattern type) × (principal,
//! host, operation, allow/deny). Deny wins; Read/Write/Delete/Alter imply Describe and
//! AlterConfigs implies DescribeConfigs; `*` as a literal name, principal `User:*` and host `*`
//! are wildcards; prefixed patterns match names that start with them. Persisted in
//! `<log.dirs>/__acls.json`, rewritten atomically on every change.

use crate::sync::OrDie as _;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::RwLock;

pub const ACLS_FILE: &str = "__acls.json";
/// The name of the one Cluster resource.
pub const CLUSTER: &str = "kafka-cluster";

macro_rules! kafka_enum {
    ($name:ident { $($variant:ident = $code:expr, $text:expr;)* }) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name { $($variant),* }
        impl $name {
            pub fn code(self) -> i8 { match self { $($name::$variant => $code),* } }
            pub fn from_code(c: i8) -> Option<$name> { match c { $($code => Some($name::$variant),)* _ => None } }
            pub fn text(self) -> &'static str { match self { $($name::$variant => $text),* } }
            pub fn parse(s: &str) -> Option<$name> {
                let s = s.replace(['-', '_'], "").to_ascii_lowercase();
                [$($name::$variant),*].into_iter().find(|v| v.text().to_ascii_lowercase() == s)
            }
        }
    };
}

kafka_enum!(ResourceType {
    Any = 1, "Any";
    Topic = 2, "Topic";
    Group = 3, "Group";
    Cluster = 4, "Cluster";
    TransactionalId = 5, "TransactionalId";
    DelegationToken = 6, "DelegationToken";
    User = 7, "User";
});

kafka_enum!(PatternType {
    Any = 1, "Any";
    Match = 2, "Match";
    Literal = 3, "Literal";
    Prefixed = 4, "Prefixed";
});

kafka_enum!(Operation {
    Any = 1, "Any";
    All = 2, "All";
    Read = 3, "Read";
    Write = 4, "Write";
    Create = 5, "Create";
    Delete = 6, "Delete";
    Alter = 7, "Alter";
    Describe = 8, "Describe";
    ClusterAction = 9, "ClusterAction";
    DescribeConfigs = 10, "DescribeConfigs";
    AlterConfigs = 11, "AlterConfigs";
    IdempotentWrite = 12, "IdempotentWrite";
    CreateTokens = 13, "CreateTokens";
    DescribeTokens = 14, "DescribeTokens";
});

kafka_enum!(Permission {
    Any = 1, "Any";
    Deny = 2, "Deny";
    Allow = 3, "Allow";
});

/// One ACL.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AclBinding {
    pub resource_type: ResourceType,
    pub resource_name: String,
    pub pattern_type: PatternType,
    pub principal: String,
    pub host: String,
    pub operation: Operation,
    pub permission: Permission,
}

impl AclBinding {
    /// Kafka's rules for a binding that may be stored; the error text goes to the client.
    pub fn validate(&self) -> Result<(), String> {
        if matches!(self.resource_type, ResourceType::Any) {
            return Err("resource type must be specific".into());
        }
        if !matches!(self.pattern_type, PatternType::Literal | PatternType::Prefixed) {
            return Err("pattern type must be LITERAL or PREFIXED".into());
        }
        if matches!(self.operation, Operation::Any) {
            return Err("operation must be specific".into());
        }
        if matches!(self.permission, Permission::Any) {
            return Err("permission type must be ALLOW or DENY".into());
        }
        if self.resource_name.is_empty() {
            return Err("resource name must not be empty".into());
        }
        if self.resource_type == ResourceType::Cluster && self.resource_name != CLUSTER {
            return Err(format!("the cluster resource is named '{CLUSTER}'"));
        }
        match self.principal.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {}
            _ => return Err(format!("principal '{}' must be of the form User:<name>", self.principal)),
        }
        if self.host.is_empty() {
            return Err("host must be an address or '*'".into());
        }
        Ok(())
    }

    fn resource_matches(&self, rtype: ResourceType, name: &str) -> bool {
        self.resource_type == rtype
            && match self.pattern_type {
                PatternType::Literal => self.resource_name == name || self.resource_name == "*",
                PatternType::Prefixed => name.starts_with(&self.resource_name),
                _ => false,
            }
    }

    fn applies_to(&self, principal: &str, host: &str) -> bool {
        (self.principal == principal || self.principal == "User:*") && (self.host == host || self.host == "*")
    }
}

/// A filter (DescribeAcls, DeleteAcls): `None` fields match anything.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclFilter {
    pub resource_type: ResourceType,
    pub resource_name: Option<String>,
    pub pattern_type: PatternType,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: Operation,
    pub permission: Permission,
}

impl AclFilter {
    pub fn matches(&self, b: &AclBinding) -> bool {
        let rtype = self.resource_type == ResourceType::Any || self.resource_type == b.resource_type;
        let pattern = match (self.pattern_type, &self.resource_name) {
            (PatternType::Any, None) => true,
            (PatternType::Any, Some(n)) => b.resource_name == *n,
            (PatternType::Match, None) => true,
            (PatternType::Match, Some(n)) => match b.pattern_type {
                PatternType::Literal => b.resource_name == *n || b.resource_name == "*",
                PatternType::Prefixed => n.starts_with(&b.resource_name),
                _ => false,
            },
            (p, n) => b.pattern_type == p && n.as_ref().is_none_or(|n| b.resource_name == *n),
        };
        rtype
            && pattern
            && self.principal.as_ref().is_none_or(|p| *p == b.principal)
            && self.host.as_ref().is_none_or(|h| *h == b.host)
            && (self.operation == Operation::Any || self.operation == b.operation)
            && (self.permission == Permission::Any || self.permission == b.permission)
    }
}

/// Does an ACL granting `granted` allow `wanted`?
fn implies(granted: Operation, wanted: Operation) -> bool {
    granted == wanted
        || granted == Operation::All
        || (wanted == Operation::Describe
            && matches!(granted, Operation::Read | Operation::Write | Operation::Delete | Operation::Alter))
        || (wanted == Operation::DescribeConfigs && granted == Operation::AlterConfigs)
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct AclsFile {
    acls: Vec<AclBinding>,
}

pub struct AclStore {
    path: PathBuf,
    acls: RwLock<Vec<AclBinding>>,
}

impl AclStore {
    pub fn open(dir: &Path) -> anyhow::Result<AclStore> {
        let path = dir.join(ACLS_FILE);
        let file: AclsFile = match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b)
                .map_err(|e| anyhow::anyhow!("{} is unreadable ({e}); refusing to start", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => AclsFile::default(),
            Err(e) => return Err(e.into()),
        };
        Ok(AclStore { path, acls: RwLock::new(file.acls) })
    }

    fn persist(&self, acls: &[AclBinding]) -> anyhow::Result<()> {
        let bytes = serde_json::to_vec_pretty(&AclsFile { acls: acls.to_vec() })?;
        sluice_storage::sidefile::write_atomic(&self.path, &bytes)?;
        Ok(())
    }

    /// Add bindings (already validated; duplicates are kept once) and persist.
    pub fn create(&self, new: &[AclBinding]) -> anyhow::Result<()> {
        let mut acls = self.acls.write().or_die();
        let mut next = acls.clone();
        for b in new {
            if !next.contains(b) {
                next.push(b.clone());
            }
        }
        self.persist(&next)?;
        *acls = next;
        Ok(())
    }

    /// Every binding (cluster mode: the copy the quorum's image is compared with).
    pub fn all(&self) -> Vec<AclBinding> {
        self.acls.read().or_die().clone()
    }

    /// Replace every binding (cluster mode: from the quorum's image) and persist.
    pub fn replace(&self, next: Vec<AclBinding>) -> anyhow::Result<()> {
        let mut acls = self.acls.write().or_die();
        if *acls != next {
            self.persist(&next)?;
            *acls = next;
        }
        Ok(())
    }

    pub fn describe(&self, f: &AclFilter) -> Vec<AclBinding> {
        self.acls.read().or_die().iter().filter(|b| f.matches(b)).cloned().collect()
    }

    /// Delete what each filter matches; returns the deleted bindings per filter.
    pub fn delete(&self, filters: &[AclFilter]) -> anyhow::Result<Vec<Vec<AclBinding>>> {
        let mut acls = self.acls.write().or_die();
        let out: Vec<Vec<AclBinding>> =
            filters.iter().map(|f| acls.iter().filter(|b| f.matches(b)).cloned().collect()).collect();
        let next: Vec<AclBinding> = acls.iter().filter(|b| !filters.iter().any(|f| f.matches(b))).cloned().collect();
        if next.len() != acls.len() {
            self.persist(&next)?;
            *acls = next;
        }
        Ok(out)
    }

    /// Does some ALLOW binding give `principal` `op` on some resource of type `rtype` (Kafka's
    /// `authorizeByResourceType`, used for idempotent producers without IdempotentWrite)?
    pub fn any_allow(&self, principal: &str, host: &str, op: Operation, rtype: ResourceType) -> bool {
        let acls = self.acls.read().or_die();
        acls.iter().any(|b| {
            b.resource_type == rtype
                && b.permission == Permission::Allow
                && b.applies_to(principal, host)
                && implies(b.operation, op)
        })
    }

    /// Kafka's decision: a matching DENY wins; then a matching ALLOW (with implications);
    /// with no ACL at all on the resource, `allow_if_none`.
    pub fn authorize(
        &self,
        principal: &str,
        host: &str,
        op: Operation,
        rtype: ResourceType,
        name: &str,
        allow_if_none: bool,
    ) -> bool {
        let acls = self.acls.read().or_die();
        let on_resource: Vec<&AclBinding> = acls.iter().filter(|b| b.resource_matches(rtype, name)).collect();
        if on_resource.is_empty() {
            return allow_if_none;
        }
        let mine = || on_resource.iter().filter(|b| b.applies_to(principal, host));
        if mine().any(|b| b.permission == Permission::Deny && (b.operation == op || b.operation == Operation::All)) {
            return false;
        }
        mine().any(|b| b.permission == Permission::Allow && implies(b.operation, op))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn acl(rt: ResourceType, name: &str, pt: PatternType, who: &str, op: Operation, perm: Permission) -> AclBinding {
        AclBinding {
            resource_type: rt,
            resource_name: name.into(),
            pattern_type: pt,
            principal: who.into(),
            host: "*".into(),
            operation: op,
            permission: perm,
        }
    }

    #[test]
    fn kafka_rules() {
        let dir = tempfile::tempdir().unwrap();
        let s = AclStore::open(dir.path()).unwrap();
        use Operation::*;
        use PatternType::*;
        use Permission::*;
        use ResourceType::*;
        s.create(&[
            acl(Topic, "orders", Literal, "User:alice", Write, Allow),
            acl(Topic, "pay-", Prefixed, "User:alice", Read, Allow),
            acl(Topic, "pay-secret", Literal, "User:alice", All, Deny),
            acl(Topic, "*", Literal, "User:bob", Describe, Allow),
            acl(TransactionalId, "tx-alice", Literal, "User:alice", Write, Allow),
            acl(Group, "g", Literal, "User:*", Read, Allow),
        ])
        .unwrap();
        let a = |who: &str, op, rt, name: &str| s.authorize(who, "10.0.0.1", op, rt, name, false);
        assert!(a("User:alice", Write, Topic, "orders"));
        assert!(a("User:alice", Describe, Topic, "orders"), "Write implies Describe");
        assert!(!a("User:alice", Read, Topic, "orders"));
        assert!(a("User:alice", Read, Topic, "pay-in"), "prefixed");
        assert!(!a("User:alice", Read, Topic, "pay-secret"), "deny wins");
        assert!(!a("User:alice", Describe, Topic, "pay-secret"));
        assert!(a("User:bob", Describe, Topic, "anything"), "wildcard name");
        assert!(!a("User:bob", Read, Topic, "orders"));
        assert!(a("User:carol", Read, Group, "g"), "wildcard principal");
        assert!(!a("User:bob", Write, TransactionalId, "tx-alice"));
        assert!(!a("User:alice", Read, Topic, "no-acls"), "no ACL: denied unless allow.everyone.if.no.acl.found");
        assert!(s.authorize("User:x", "h", Read, TransactionalId, "no-acls", true));
        // persisted, and deletion by filter
        let s = AclStore::open(dir.path()).unwrap();
        let f = AclFilter {
            resource_type: Topic,
            resource_name: Some("pay-in".into()),
            pattern_type: Match,
            principal: None,
            host: None,
            operation: Operation::Any,
            permission: Permission::Any,
        };
        assert_eq!(s.describe(&f).len(), 2, "the prefixed ACL and the wildcard");
        let deleted = s.delete(&[f]).unwrap();
        assert_eq!(deleted[0].len(), 2);
        assert!(!s.authorize("User:alice", "10.0.0.1", Read, Topic, "pay-in", false));
        assert!(AclStore::open(dir.path())
            .unwrap()
            .describe(&AclFilter {
                resource_type: ResourceType::Any,
                resource_name: None,
                pattern_type: PatternType::Any,
                principal: None,
                host: None,
                operation: Operation::Any,
                permission: Permission::Any,
            })
            .iter()
            .all(|b| b.resource_name != "pay-" && b.resource_name != "*"));
    }

    #[test]
    fn invalid_bindings_are_refused() {
        let ok = acl(ResourceType::Topic, "t", PatternType::Literal, "User:a", Operation::Read, Permission::Allow);
        assert!(ok.validate().is_ok());
        for bad in [
            AclBinding { principal: "alice".into(), ..ok.clone() },
            AclBinding { pattern_type: PatternType::Match, ..ok.clone() },
            AclBinding { operation: Operation::Any, ..ok.clone() },
            AclBinding { resource_type: ResourceType::Cluster, ..ok.clone() },
            AclBinding { resource_name: String::new(), ..ok.clone() },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }

    proptest! {
        /// A DENY for a principal on a resource always wins over any set of ALLOWs.
        #[test]
        fn deny_always_wins(names in proptest::collection::vec("[a-c]{1,3}", 1..6), target in "[a-c]{1,3}") {
            let dir = tempfile::tempdir().unwrap();
            let s = AclStore::open(dir.path()).unwrap();
            let mut acls: Vec<AclBinding> = names.iter().map(|n|
                acl(ResourceType::Topic, n, PatternType::Prefixed, "User:u", Operation::All, Permission::Allow)).collect();
            acls.push(acl(ResourceType::Topic, &target, PatternType::Literal, "User:u", Operation::Read, Permission::Deny));
            s.create(&acls).unwrap();
            prop_assert!(!s.authorize("User:u", "h", Operation::Read, ResourceType::Topic, &target, true));
            // and a name no prefix matches is decided by the ACLs alone, not the default
            let allowed = names.iter().any(|n| "zz".starts_with(n.as_str()));
            prop_assert_eq!(s.authorize("User:u", "h", Operation::Write, ResourceType::Topic, "zz", false), allowed);
        }
    }
}
