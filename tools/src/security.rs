//! `sluicectl users` (SCRAM credentials) and `sluicectl acls`, and the connection settings
//! every admin command shares (`--command-config FILE`: Kafka client properties such as
//! `security.protocol`, `sasl.mechanism`, `sasl.username`, `sasl.password`, `ssl.ca.location`).

use anyhow::{anyhow, bail, Context, Result};
use serde_json::json;
use sluice_client::acl::{names, Acl, AclFilter};
use sluice_client::{Admin, ClientConfig, Connection};
use sluice_protocol::scram::Mechanism;
use std::sync::OnceLock;

static COMMAND_CONFIG: OnceLock<ClientConfig> = OnceLock::new();

/// Load `--command-config` (Java properties: `key=value`, `#`/`!` comments).
pub fn load_command_config(path: Option<&std::path::Path>) -> Result<()> {
    let mut c = ClientConfig::new();
    if let Some(path) = path {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
                continue;
            }
            let (k, v) = line
                .split_once('=')
                .or_else(|| line.split_once(':'))
                .ok_or_else(|| anyhow!("{}:{}: expected key=value", path.display(), n + 1))?;
            c.insert(k.trim(), v.trim());
        }
    }
    let _ = COMMAND_CONFIG.set(c);
    Ok(())
}

/// The client properties for `bootstrap` (with the command config's settings).
pub fn client_config(bootstrap: &str) -> ClientConfig {
    COMMAND_CONFIG.get().cloned().unwrap_or_default().set("bootstrap.servers", bootstrap)
}

/// One connection to `bootstrap`, secured and authenticated per the command config.
pub async fn connect(bootstrap: &str) -> Result<Connection> {
    sluice_client::security::connect(bootstrap, "sluicectl", &client_config(bootstrap))
        .await
        .map_err(|e| anyhow!("connect to {bootstrap}: {e}"))
}

/// The admin client, secured and authenticated per the command config.
pub fn admin(bootstrap: &str) -> Result<Admin> {
    Ok(Admin::new(&client_config(bootstrap))?)
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum UsersCmd {
    /// Users and their SCRAM mechanisms (iterations only; secrets are never shown).
    List,
    /// Create a user or change its password (both SCRAM mechanisms unless --mechanism).
    Add {
        #[arg(long)]
        user: String,
        #[arg(long)]
        password: String,
        /// SCRAM-SHA-256 or SCRAM-SHA-512 (default: both).
        #[arg(long)]
        mechanism: Option<String>,
        #[arg(long, default_value_t = 8192)]
        iterations: i32,
    },
    /// Delete a user's credentials (both mechanisms unless --mechanism).
    Delete {
        #[arg(long)]
        user: String,
        #[arg(long)]
        mechanism: Option<String>,
    },
}

fn mechanisms(m: &Option<String>) -> Result<Vec<Mechanism>> {
    match m {
        None => Ok(Mechanism::ALL.to_vec()),
        Some(name) => Mechanism::from_name(&name.to_ascii_uppercase())
            .map(|m| vec![m])
            .ok_or_else(|| anyhow!("unknown mechanism '{name}' (SCRAM-SHA-256 or SCRAM-SHA-512)")),
    }
}

pub async fn users(bootstrap: &str, cmd: UsersCmd) -> Result<(serde_json::Value, String)> {
    let a = admin(bootstrap)?;
    match cmd {
        UsersCmd::List => {
            let users = a.describe_users(&[]).await?;
            let mut text = format!("{:<24} MECHANISMS\n", "USER");
            for (u, creds) in &users {
                let m: Vec<String> = creds.iter().map(|(m, i)| format!("{m} (iterations {i})")).collect();
                text.push_str(&format!("{u:<24} {}\n", m.join(", ")));
            }
            let j = users
                .iter()
                .map(|(u, c)| json!({"user": u, "credentials": c.iter().map(|(m, i)| json!({"mechanism": m, "iterations": i})).collect::<Vec<_>>()}))
                .collect::<Vec<_>>();
            Ok((json!(j), text))
        }
        UsersCmd::Add { user, password, mechanism, iterations } => {
            if password.is_empty() {
                bail!("--password must not be empty");
            }
            let ms = mechanisms(&mechanism)?;
            for m in &ms {
                a.upsert_user(&user, &password, *m, iterations).await?;
            }
            let names: Vec<&str> = ms.iter().map(|m| m.name()).collect();
            Ok((json!({"user": user, "mechanisms": names}), format!("user {user}: {} set\n", names.join(", "))))
        }
        UsersCmd::Delete { user, mechanism } => {
            let ms = mechanisms(&mechanism)?;
            let have: Vec<String> = a
                .describe_users(&[&user])
                .await?
                .into_iter()
                .flat_map(|(_, c)| c.into_iter().map(|(m, _)| m))
                .collect();
            let mut deleted = Vec::new();
            for m in ms.iter().filter(|m| mechanism.is_some() || have.iter().any(|h| h == m.name())) {
                a.delete_user(&user, *m).await?;
                deleted.push(m.name());
            }
            Ok((json!({"user": user, "deleted": deleted}), format!("user {user}: {} deleted\n", deleted.join(", "))))
        }
    }
}

/// Which resource an ACL command names (one of them; none means any in `list`/`remove`).
#[derive(Debug, Clone, clap::Args)]
pub struct ResourceArgs {
    #[arg(long, group = "resource")]
    topic: Option<String>,
    #[arg(long, group = "resource")]
    group: Option<String>,
    #[arg(long, group = "resource")]
    transactional_id: Option<String>,
    /// The cluster resource (cluster-wide operations: Create, Alter, ClusterAction, IdempotentWrite, Describe…).
    #[arg(long, group = "resource")]
    cluster: bool,
    /// literal (default for add), prefixed, or (list/remove) any, match.
    #[arg(long)]
    resource_pattern_type: Option<String>,
}

#[derive(Debug, Clone, clap::Args)]
pub struct AclArgs {
    #[command(flatten)]
    resource: ResourceArgs,
    /// Principal to allow, e.g. User:alice (repeatable).
    #[arg(long)]
    allow_principal: Vec<String>,
    /// Principal to deny (repeatable).
    #[arg(long)]
    deny_principal: Vec<String>,
    /// Operation: Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs,
    /// AlterConfigs, IdempotentWrite, All (repeatable).
    #[arg(long)]
    operation: Vec<String>,
    /// Client host the ACL applies to.
    #[arg(long, default_value = "*")]
    host: String,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum AclsCmd {
    /// ACLs, optionally only those on one resource or of one principal.
    List {
        #[command(flatten)]
        resource: ResourceArgs,
        #[arg(long)]
        principal: Option<String>,
    },
    /// Add ACLs: every (principal, operation) pair on the resource.
    Add(AclArgs),
    /// Remove ACLs: every (principal, operation) pair on the resource.
    Remove(AclArgs),
}

fn resource(r: &ResourceArgs) -> (i8, Option<String>) {
    if let Some(t) = &r.topic {
        (2, Some(t.clone()))
    } else if let Some(g) = &r.group {
        (3, Some(g.clone()))
    } else if let Some(t) = &r.transactional_id {
        (5, Some(t.clone()))
    } else if r.cluster {
        (4, Some("kafka-cluster".into()))
    } else {
        (1, None)
    }
}

fn lookup(table: &[(&'static str, i8)], what: &str, v: &str) -> Result<i8> {
    names::code(table, v).ok_or_else(|| {
        let all: Vec<&str> = table.iter().map(|(n, _)| *n).collect();
        anyhow!("unknown {what} '{v}' (one of {})", all.join(", "))
    })
}

fn acl_text(acls: &[Acl]) -> String {
    let mut t = format!(
        "{:<16} {:<24} {:<9} {:<28} {:<6} {:<16} PERMISSION\n",
        "RESOURCE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION"
    );
    for a in acls {
        t.push_str(&format!(
            "{:<16} {:<24} {:<9} {:<28} {:<6} {:<16} {}\n",
            names::name(names::RESOURCE_TYPES, a.resource_type),
            a.resource_name,
            names::name(names::PATTERN_TYPES, a.pattern_type),
            a.principal,
            a.host,
            names::name(names::OPERATIONS, a.operation),
            names::name(names::PERMISSIONS, a.permission)
        ));
    }
    t
}

fn acl_json(acls: &[Acl]) -> serde_json::Value {
    json!(acls
        .iter()
        .map(|a| json!({
            "resource_type": names::name(names::RESOURCE_TYPES, a.resource_type),
            "resource_name": a.resource_name,
            "pattern_type": names::name(names::PATTERN_TYPES, a.pattern_type),
            "principal": a.principal,
            "host": a.host,
            "operation": names::name(names::OPERATIONS, a.operation),
            "permission": names::name(names::PERMISSIONS, a.permission),
        }))
        .collect::<Vec<_>>())
}

/// The (principal, operation, permission) triples of an add/remove.
fn bindings(a: &AclArgs, default_pattern: &str) -> Result<Vec<Acl>> {
    let (rtype, name) = resource(&a.resource);
    let Some(name) = name else { bail!("name a resource: --topic, --group, --transactional-id or --cluster") };
    if a.operation.is_empty() {
        bail!("give at least one --operation");
    }
    if a.allow_principal.is_empty() && a.deny_principal.is_empty() {
        bail!("give --allow-principal or --deny-principal");
    }
    let pattern = lookup(
        names::PATTERN_TYPES,
        "pattern type",
        a.resource.resource_pattern_type.as_deref().unwrap_or(default_pattern),
    )?;
    let mut out = Vec::new();
    for (principals, permission) in [(&a.allow_principal, 3), (&a.deny_principal, 2)] {
        for p in principals {
            if !p.contains(':') {
                bail!("principal '{p}' must be of the form User:<name>");
            }
            for op in &a.operation {
                out.push(Acl {
                    resource_type: rtype,
                    resource_name: name.clone(),
                    pattern_type: pattern,
                    principal: p.clone(),
                    host: a.host.clone(),
                    operation: lookup(names::OPERATIONS, "operation", op)?,
                    permission,
                });
            }
        }
    }
    Ok(out)
}

pub async fn acls(bootstrap: &str, cmd: AclsCmd) -> Result<(serde_json::Value, String)> {
    let a = admin(bootstrap)?;
    match cmd {
        AclsCmd::List { resource: r, principal } => {
            let (rtype, name) = resource(&r);
            let mut f = AclFilter::any();
            f.resource_type = rtype;
            f.resource_name = name;
            f.pattern_type =
                lookup(names::PATTERN_TYPES, "pattern type", r.resource_pattern_type.as_deref().unwrap_or("any"))?;
            f.principal = principal;
            let acls = a.describe_acls(&f).await?;
            Ok((acl_json(&acls), acl_text(&acls)))
        }
        AclsCmd::Add(args) => {
            let b = bindings(&args, "literal")?;
            a.create_acls(&b).await?;
            Ok((acl_json(&b), format!("added:\n{}", acl_text(&b))))
        }
        AclsCmd::Remove(args) => {
            let mut removed = Vec::new();
            for b in bindings(&args, "literal")? {
                let f = AclFilter {
                    resource_type: b.resource_type,
                    resource_name: Some(b.resource_name.clone()),
                    pattern_type: b.pattern_type,
                    principal: Some(b.principal.clone()),
                    host: Some(b.host.clone()),
                    operation: b.operation,
                    permission: b.permission,
                };
                removed.extend(a.delete_acls(&f).await?);
            }
            Ok((acl_json(&removed), format!("removed:\n{}", acl_text(&removed))))
        }
    }
}
