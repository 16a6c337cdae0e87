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

use super::model::implies;
pub use super::model::{AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType, CLUSTER};

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
