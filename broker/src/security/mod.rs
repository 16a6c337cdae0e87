//! Security: listeners and their protocols (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), TLS,
//! SASL (PLAIN, SCRAM-SHA-256/512) with a salted credential store, ACLs and the per-API
//! authorization checks, connection limits and byte-rate quotas.
//!
//! - `tls`: rustls server configuration from PEM files; the client certificate's principal;
//! - `sasl`: one connection's authentication state machine;
//! - `credentials`: SCRAM credentials, persisted in `<log.dirs>/__scram_credentials.json`;
//! - `acl`: ACL bindings, filters and the allow/deny decision, persisted in `__acls.json`;
//! - `quota`: per-client-id produce/fetch byte rates and the throttle time they earn.

pub mod acl;
pub mod credentials;
pub mod model;
pub mod quota;
pub mod sasl;
pub mod tls;

use crate::sync::OrDie as _;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use crate::config::security::{ListenerConfig, SecuritySettings};

/// The principal of an unauthenticated connection (PLAINTEXT, or SSL without a certificate).
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// Who sent a request, from where, on which listener.
#[derive(Debug, Clone)]
pub struct Session {
    /// `User:<name>`.
    pub principal: String,
    pub peer: Option<SocketAddr>,
    pub listener: Arc<ListenerConfig>,
    /// A peer broker's call over the cluster (Raft) port (`interbroker.rs`): allowed
    /// everything, as a super user is — whoever reaches that port can already vote and append
    /// in every Raft group, and with `CONTROLLER:SSL` only a certificate the truststore vouches
    /// for does. No client connection ever has it.
    pub peer_broker: bool,
}

impl Session {
    /// A session for in-process callers (tests): anonymous, on the first listener.
    pub fn internal(listener: &ListenerConfig) -> Session {
        Session { principal: ANONYMOUS.into(), peer: None, listener: Arc::new(listener.clone()), peer_broker: false }
    }

    /// A peer broker's call over the cluster port (see [`Session::peer_broker`]).
    pub fn peer_broker(listener: &ListenerConfig) -> Session {
        Session { principal: ANONYMOUS.into(), peer: None, listener: Arc::new(listener.clone()), peer_broker: true }
    }
    pub fn host(&self) -> String {
        self.peer.map(|p| p.ip().to_string()).unwrap_or_else(|| "127.0.0.1".into())
    }
}

/// The broker's security state: credentials, ACLs, quotas, connection counts.
pub struct Security {
    pub settings: SecuritySettings,
    pub credentials: credentials::CredentialStore,
    pub acls: acl::AclStore,
    pub quotas: quota::Quotas,
    per_ip: Mutex<HashMap<IpAddr, usize>>,
}

impl Security {
    pub fn open(dir: &std::path::Path, settings: SecuritySettings) -> anyhow::Result<Security> {
        let credentials = credentials::CredentialStore::open(dir)?;
        credentials.bootstrap(&settings.bootstrap_users)?;
        let acls = acl::AclStore::open(dir)?;
        let quotas = quota::Quotas::new(settings.producer_byte_rate, settings.consumer_byte_rate);
        Ok(Security { settings, credentials, acls, quotas, per_ip: Mutex::new(HashMap::new()) })
    }

    /// Count a new connection from `ip`; `None` if `max.connections.per.ip` is reached.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<IpPermit> {
        let limit = self
            .settings
            .max_connections_per_ip_overrides
            .get(&ip)
            .copied()
            .unwrap_or(self.settings.max_connections_per_ip);
        let mut m = self.per_ip.lock().or_die();
        let n = m.entry(ip).or_insert(0);
        if *n >= limit {
            return None;
        }
        *n += 1;
        Some(IpPermit { security: self.clone(), ip })
    }

    /// Kafka's `authorizedOperations` (KIP-430): the bitfield (bit = ACL operation code) of the
    /// operations the resource type supports that `session` may perform on it — all of them
    /// without an authorizer. Topic: 8 operations, group: 3, cluster: 7, as Kafka's
    /// `AclEntry.supportedOperations`.
    pub fn authorized_operations(&self, session: &Session, rtype: acl::ResourceType, name: &str) -> i32 {
        use acl::Operation as O;
        let supported: &[O] = match rtype {
            acl::ResourceType::Topic => {
                &[O::Read, O::Write, O::Create, O::Delete, O::Alter, O::Describe, O::DescribeConfigs, O::AlterConfigs]
            }
            acl::ResourceType::Group => &[O::Read, O::Describe, O::Delete],
            acl::ResourceType::Cluster => &[
                O::Create,
                O::ClusterAction,
                O::DescribeConfigs,
                O::AlterConfigs,
                O::IdempotentWrite,
                O::Alter,
                O::Describe,
            ],
            acl::ResourceType::TransactionalId => &[O::Describe, O::Write],
            _ => &[],
        };
        supported.iter().filter(|op| self.allowed(session, **op, rtype, name)).fold(0, |bits, op| bits | 1 << op.code())
    }

    /// Is `principal` (from `host`) allowed `op` on the resource? Always true without an
    /// authorizer.
    pub fn allowed(&self, session: &Session, op: acl::Operation, rtype: acl::ResourceType, name: &str) -> bool {
        if !self.settings.authorizer || session.peer_broker || self.settings.super_users.contains(&session.principal) {
            return true;
        }
        self.acls.authorize(&session.principal, &session.host(), op, rtype, name, self.settings.allow_if_no_acl)
    }
}

/// A connection counted against its IP; released on drop.
pub struct IpPermit {
    security: Arc<Security>,
    ip: IpAddr,
}

impl Drop for IpPermit {
    fn drop(&mut self) {
        let mut m = self.security.per_ip.lock().or_die();
        if let Some(n) = m.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}
