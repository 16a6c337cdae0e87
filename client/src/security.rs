//! Connection security, configured with Kafka's client properties:
//! `security.protocol` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), `sasl.mechanism` (PLAIN,
//! SCRAM-SHA-256, SCRAM-SHA-512), `sasl.username`, `sasl.password`, `ssl.ca.location` (PEM CA
//! certificates; the system's are not used), `ssl.certificate.location` and `ssl.key.location`
//! (a PEM client certificate and key), `ssl.endpoint.identification.algorithm` (only `https`,
//! the default: the broker's certificate must name the host connected to).

use crate::config::ClientConfig;
use crate::connection::Connection;
use crate::error::{Error, ErrorKind, Result};
use kafka_protocol::messages::*;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use sluice_protocol::scram::{ClientExchange, Mechanism};
use std::collections::HashMap;
use std::sync::Arc;

/// SASL credentials and mechanism.
#[derive(Clone)]
pub struct Sasl {
    mechanism: String,
    username: String,
    password: String,
}

impl std::fmt::Debug for Sasl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sasl({}, {})", self.mechanism, self.username)
    }
}

/// How connections are secured.
#[derive(Clone, Default)]
pub struct Security {
    tls: Option<tokio_rustls::TlsConnector>,
    sasl: Option<Sasl>,
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Security(tls: {}, sasl: {:?})", self.tls.is_some(), self.sasl)
    }
}

fn pem_error(what: &str, path: &str, e: impl std::fmt::Display) -> Error {
    Error::invalid(format!("{what} {path}: {e}"))
}

impl Security {
    /// Read the security properties of `config`.
    pub fn from_config(config: &ClientConfig) -> Result<Security> {
        let protocol = config.string("security.protocol", "PLAINTEXT").to_ascii_uppercase();
        let (tls, sasl) = match protocol.as_str() {
            "PLAINTEXT" => (false, false),
            "SSL" => (true, false),
            "SASL_PLAINTEXT" => (false, true),
            "SASL_SSL" => (true, true),
            other => {
                return Err(Error::invalid(format!(
                    "security.protocol '{other}' is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"
                )))
            }
        };
        let mut out = Security::default();
        if sasl {
            let mechanism =
                config.get("sasl.mechanism").or(config.get("sasl.mechanisms")).unwrap_or("PLAIN").to_ascii_uppercase();
            if mechanism != "PLAIN" && Mechanism::from_name(&mechanism).is_none() {
                return Err(Error::invalid(format!(
                    "sasl.mechanism '{mechanism}' is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"
                )));
            }
            let username = config.get("sasl.username").ok_or_else(|| Error::invalid("sasl.username is required"))?;
            let password = config.get("sasl.password").ok_or_else(|| Error::invalid("sasl.password is required"))?;
            out.sasl = Some(Sasl { mechanism, username: username.to_string(), password: password.to_string() });
        }
        if tls {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut roots = rustls::RootCertStore::empty();
            let ca = config
                .get("ssl.ca.location")
                .ok_or_else(|| Error::invalid("ssl.ca.location is required for SSL (a PEM file of CA certificates)"))?;
            for c in CertificateDer::pem_file_iter(ca).map_err(|e| pem_error("ssl.ca.location", ca, e))? {
                let c = c.map_err(|e| pem_error("ssl.ca.location", ca, e))?;
                roots.add(c).map_err(|e| pem_error("ssl.ca.location", ca, e))?;
            }
            let builder = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| Error::invalid(format!("TLS: {e}")))?
                .with_root_certificates(roots);
            let tls_config = match (config.get("ssl.certificate.location"), config.get("ssl.key.location")) {
                (Some(cert), Some(key)) => {
                    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
                        .map_err(|e| pem_error("ssl.certificate.location", cert, e))?
                        .collect::<std::result::Result<_, _>>()
                        .map_err(|e| pem_error("ssl.certificate.location", cert, e))?;
                    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| pem_error("ssl.key.location", key, e))?;
                    builder.with_client_auth_cert(certs, key).map_err(|e| Error::invalid(format!("TLS: {e}")))?
                }
                (None, None) => builder.with_no_client_auth(),
                _ => return Err(Error::invalid("ssl.certificate.location and ssl.key.location go together")),
            };
            let algorithm = config.string("ssl.endpoint.identification.algorithm", "https");
            if algorithm != "https" {
                return Err(Error::invalid(format!(
                    "ssl.endpoint.identification.algorithm '{algorithm}': only https is supported (the broker's name is always checked)"
                )));
            }
            out.tls = Some(tokio_rustls::TlsConnector::from(Arc::new(tls_config)));
        }
        Ok(out)
    }

    /// Wrap a connected socket in TLS if configured (the server name is the host of `addr`).
    pub(crate) async fn wrap(
        &self,
        addr: &str,
        tcp: tokio::net::TcpStream,
    ) -> std::io::Result<crate::connection::Stream> {
        match &self.tls {
            None => Ok(Box::new(tcp)),
            Some(connector) => {
                let host = addr.rsplit_once(':').map(|(h, _)| h).unwrap_or(addr).trim_matches(|c| c == '[' || c == ']');
                let name = ServerName::try_from(host.to_string())
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{host}: {e}")))?;
                Ok(Box::new(connector.connect(name, tcp).await?))
            }
        }
    }

    /// Authenticate a fresh connection (SaslHandshake v1, then SaslAuthenticate) if configured.
    pub(crate) async fn authenticate(&self, conn: &Connection, versions: &HashMap<i16, (i16, i16)>) -> Result<()> {
        let Some(sasl) = &self.sasl else { return Ok(()) };
        let mut hs = SaslHandshakeRequest::default();
        hs.mechanism = crate::cluster::sb(&sasl.mechanism);
        match conn.call(ApiKey::SaslHandshake, 1, RequestKind::SaslHandshake(hs)).await? {
            ResponseKind::SaslHandshake(r) if r.error_code == 0 => {}
            ResponseKind::SaslHandshake(r) => {
                let offered: Vec<String> = r.mechanisms.iter().map(|m| m.to_string()).collect();
                return Err(Error::from_code(r.error_code, format!("SASL handshake ({} offered)", offered.join(", ")))
                    .unwrap_or_else(|| Error::invalid("SASL handshake"))
                    .with_kind(ErrorKind::Fatal));
            }
            _ => return Err(Error::invalid("unexpected answer to SaslHandshake")),
        }
        let version = versions.get(&(ApiKey::SaslAuthenticate as i16)).map(|(_, max)| (*max).min(2)).unwrap_or(0);
        let step = |bytes: Vec<u8>| async move {
            let mut req = SaslAuthenticateRequest::default();
            req.auth_bytes = bytes.into();
            match conn.call(ApiKey::SaslAuthenticate, version, RequestKind::SaslAuthenticate(req)).await? {
                ResponseKind::SaslAuthenticate(r) if r.error_code == 0 => Ok(r.auth_bytes.to_vec()),
                ResponseKind::SaslAuthenticate(r) => Err(Error::new(
                    ErrorKind::Fatal,
                    format!(
                        "SASL authentication failed: {}",
                        r.error_message.map(|m| m.to_string()).unwrap_or_else(|| format!("error {}", r.error_code))
                    ),
                )),
                _ => Err(Error::invalid("unexpected answer to SaslAuthenticate")),
            }
        };
        match Mechanism::from_name(&sasl.mechanism) {
            None => {
                let mut msg = vec![0u8];
                msg.extend_from_slice(sasl.username.as_bytes());
                msg.push(0);
                msg.extend_from_slice(sasl.password.as_bytes());
                step(msg).await?;
            }
            Some(m) => {
                use rand::distributions::{Alphanumeric, DistString};
                let nonce = Alphanumeric.sample_string(&mut rand::thread_rng(), 24);
                let (mut x, first) = ClientExchange::start(m, &sasl.username, &sasl.password, &nonce);
                let server_first = step(first).await?;
                let last = x.respond(&server_first).map_err(|e| Error::new(ErrorKind::Fatal, format!("SCRAM: {e}")))?;
                let server_final = step(last).await?;
                x.verify(&server_final).map_err(|e| Error::new(ErrorKind::Fatal, format!("SCRAM: {e}")))?;
            }
        }
        Ok(())
    }
}

/// A single connection to `addr`, secured and authenticated as `config` says (TLS, then
/// ApiVersions, then SASL): for tools that speak raw requests.
pub async fn connect(addr: &str, client_id: &str, config: &ClientConfig) -> Result<Connection> {
    let security = Security::from_config(config)?;
    let conn = Connection::connect_secured(addr, client_id, 1, &security).await?;
    let versions = match conn.call(ApiKey::ApiVersions, 0, RequestKind::ApiVersions(Default::default())).await? {
        ResponseKind::ApiVersions(r) => {
            r.api_keys.iter().map(|k| (k.api_key, (k.min_version, k.max_version))).collect::<HashMap<_, _>>()
        }
        _ => return Err(Error::invalid("unexpected answer to ApiVersions")),
    };
    security.authenticate(&conn, &versions).await?;
    Ok(conn)
}
