//! Security APIs, one file each: CreateAcls, DescribeAcls, DeleteAcls,
//! DescribeUserScramCredentials, AlterUserScramCredentials. Each file holds its API's answer and
//! its ACL rule (`acl`); this module, what they share.

use super::sb;
use crate::cluster::{Command, CommandResult};
use crate::security::acl::{AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType};
use crate::security::credentials::{Change, CredentialRecord};
use crate::security::Security;
use crate::topics::TopicRegistry;
use kafka_protocol::error::ResponseError as E;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use sluice_protocol::scram::{Mechanism, MAX_ITERATIONS, MIN_ITERATIONS};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

pub mod alter_user_scram_credentials;
pub mod create_acls;
pub mod delete_acls;
pub mod describe_acls;
pub mod describe_user_scram_credentials;

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
