//! The security data the metadata quorum replicates — ACL bindings and filters, SCRAM credential
//! records — as plain types: they import nothing of the crate, so the cluster's metadata image
//! (below the security layer) can hold them. The stores and the authorizer that use them are in
//! `acl.rs`, `credentials.rs` and `mod.rs`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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
    TwoPhaseCommit = 15, "TwoPhaseCommit";
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

    pub fn resource_matches(&self, rtype: ResourceType, name: &str) -> bool {
        self.resource_type == rtype
            && match self.pattern_type {
                PatternType::Literal => self.resource_name == name || self.resource_name == "*",
                PatternType::Prefixed => name.starts_with(&self.resource_name),
                _ => false,
            }
    }

    pub fn applies_to(&self, principal: &str, host: &str) -> bool {
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
pub fn implies(granted: Operation, wanted: Operation) -> bool {
    granted == wanted
        || granted == Operation::All
        || (wanted == Operation::Describe
            && matches!(granted, Operation::Read | Operation::Write | Operation::Delete | Operation::Alter))
        || (wanted == Operation::DescribeConfigs && granted == Operation::AlterConfigs)
}

/// A credential in a serializable form (the quorum's image holds these).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialRecord {
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: i32,
}

/// user → mechanism name → credential.
pub type CredentialMap = BTreeMap<String, BTreeMap<String, CredentialRecord>>;
