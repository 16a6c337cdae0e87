//! Listener and security settings (Kafka's `listeners`, `ssl.*`, `sasl.*`, `authorizer.*`,
//! quota and connection-limit settings, resolved in `config`).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

/// Kafka's security protocols, one per listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub fn parse(s: &str) -> Option<SecurityProtocol> {
        match s.trim().to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Some(SecurityProtocol::Plaintext),
            "SSL" => Some(SecurityProtocol::Ssl),
            "SASL_PLAINTEXT" => Some(SecurityProtocol::SaslPlaintext),
            "SASL_SSL" => Some(SecurityProtocol::SaslSsl),
            _ => None,
        }
    }
    pub fn tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }
    pub fn sasl(self) -> bool {
        matches!(self, SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl)
    }
}

/// One configured listener.
#[derive(Debug, Clone, PartialEq)]
pub struct ListenerConfig {
    /// The listener name (`PLAINTEXT`, `SASL_SSL`, or a custom name mapped by
    /// `listener.security.protocol.map`).
    pub name: String,
    pub protocol: SecurityProtocol,
    pub addr: SocketAddr,
    pub advertised_host: String,
    pub advertised_port: i32,
}

/// When a TLS listener asks for a client certificate (`ssl.client.auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    None,
    Requested,
    Required,
}

/// Security settings (see the `ssl.*`, `sasl.*`, `authorizer.*`, `super.users`, quota and
/// connection-limit settings in `config`).
#[derive(Debug, Clone, PartialEq)]
pub struct SecuritySettings {
    /// PEM file with the certificate chain and the private key (`ssl.keystore.location`).
    pub keystore: Option<PathBuf>,
    /// PEM file of CA certificates for client certificates (`ssl.truststore.location`).
    pub truststore: Option<PathBuf>,
    pub client_auth: ClientAuth,
    /// `sasl.enabled.mechanisms`.
    pub sasl_mechanisms: Vec<String>,
    /// `sasl.bootstrap.users`: name:password pairs created at start if absent.
    pub bootstrap_users: Vec<(String, String)>,
    /// `sasl.server.max.receive.size`: largest frame before authentication.
    pub sasl_max_receive: usize,
    /// ACLs are enforced (`authorizer.class.name` set).
    pub authorizer: bool,
    /// `super.users`: principals (`User:name`) allowed everything.
    pub super_users: Vec<String>,
    pub allow_if_no_acl: bool,
    pub max_connections_per_ip: usize,
    /// `connections.max.idle.ms`.
    pub connections_max_idle_ms: u64,
    pub max_connections_per_ip_overrides: HashMap<IpAddr, usize>,
    /// `quota.producer.default` / `quota.consumer.default` in bytes per second per client id.
    pub producer_byte_rate: Option<u64>,
    pub consumer_byte_rate: Option<u64>,
}

impl Default for SecuritySettings {
    fn default() -> Self {
        SecuritySettings {
            keystore: None,
            truststore: None,
            client_auth: ClientAuth::None,
            sasl_mechanisms: vec!["PLAIN".into(), "SCRAM-SHA-256".into(), "SCRAM-SHA-512".into()],
            bootstrap_users: Vec::new(),
            sasl_max_receive: 524_288,
            authorizer: false,
            super_users: Vec::new(),
            allow_if_no_acl: false,
            max_connections_per_ip: usize::MAX,
            connections_max_idle_ms: 600_000,
            max_connections_per_ip_overrides: HashMap::new(),
            producer_byte_rate: None,
            consumer_byte_rate: None,
        }
    }
}
