//! TLS for SSL and SASL_SSL listeners (rustls with the ring provider). The keystore is one PEM
//! file holding the certificate chain and the (unencrypted) private key, as Kafka's
//! `ssl.keystore.type=PEM`; the truststore is a PEM file of CA certificates used to verify
//! client certificates when `ssl.client.auth` is `requested` or `required`.

use crate::config::security::{ClientAuth, SecuritySettings};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use std::sync::Arc;

/// Build the server configuration, or say clearly what is wrong with the files.
pub fn server_config(s: &SecuritySettings) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let keystore = s.keystore.as_ref().ok_or_else(|| {
        anyhow::anyhow!("an SSL listener needs ssl.keystore.location (PEM: certificate chain and key)")
    })?;
    let (certs, key) = load_keystore(keystore)?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| anyhow::anyhow!("TLS: {e}"))?;
    let builder = match s.client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        auth => {
            let path = s.truststore.as_ref().ok_or_else(|| {
                anyhow::anyhow!("ssl.client.auth={auth:?} needs ssl.truststore.location (PEM CA certificates)")
            })?;
            let v = WebPkiClientVerifier::builder_with_provider(Arc::new(load_truststore(path)?), provider);
            let v = if auth == ClientAuth::Requested { v.allow_unauthenticated() } else { v };
            builder.with_client_cert_verifier(v.build().map_err(|e| anyhow::anyhow!("ssl.truststore.location: {e}"))?)
        }
    };
    let config = builder
        .with_single_cert(certs, key)
        .map_err(|e| anyhow::anyhow!("ssl.keystore.location {}: {e}", keystore.display()))?;
    Ok(Arc::new(config))
}

/// The certificate chain and private key of a PEM keystore (`ssl.keystore.location`).
fn load_keystore(keystore: &std::path::Path) -> anyhow::Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(keystore)
        .map_err(|e| anyhow::anyhow!("ssl.keystore.location {}: {e}", keystore.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("ssl.keystore.location {}: {e}", keystore.display()))?;
    if certs.is_empty() {
        anyhow::bail!("ssl.keystore.location {}: no CERTIFICATE in the file", keystore.display());
    }
    let key = PrivateKeyDer::from_pem_file(keystore).map_err(|e| {
        anyhow::anyhow!(
            "ssl.keystore.location {}: no usable private key ({e}); encrypted keys are not supported",
            keystore.display()
        )
    })?;
    Ok((certs, key))
}

/// The CA certificates of a PEM truststore (`ssl.truststore.location`).
fn load_truststore(path: &std::path::Path) -> anyhow::Result<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(path)
        .map_err(|e| anyhow::anyhow!("ssl.truststore.location {}: {e}", path.display()))?
    {
        let c = c.map_err(|e| anyhow::anyhow!("ssl.truststore.location {}: {e}", path.display()))?;
        roots.add(c).map_err(|e| anyhow::anyhow!("ssl.truststore.location {}: {e}", path.display()))?;
    }
    Ok(roots)
}

/// Kafka's default principal for a client certificate: `User:` + the subject's distinguished
/// name in RFC 2253 order (most specific first, e.g. `User:CN=alice,O=Example`).
pub fn principal_of(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, x509) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let mut parts = Vec::new();
    for rdn in x509.subject().iter() {
        for attr in rdn.iter() {
            let key = x509_parser::objects::oid2abbrev(attr.attr_type(), x509_parser::objects::oid_registry())
                .map(str::to_string)
                .unwrap_or_else(|_| attr.attr_type().to_id_string());
            let value = attr.as_str().ok()?;
            parts.push(format!("{key}={value}"));
        }
    }
    parts.reverse();
    Some(format!("User:{}", parts.join(",")))
}

/// Mutual TLS between brokers on the Raft port (`listener.security.protocol.map` maps the
/// `controller.listener.names` listener to SSL), from the broker's `ssl.keystore.location` and
/// `ssl.truststore.location`: each broker presents its certificate as server and as client and
/// accepts only peers whose certificate chains to the truststore (client certificates
/// required). Or say what is missing.
pub fn peer_tls(s: &SecuritySettings) -> anyhow::Result<(tokio_rustls::TlsAcceptor, tokio_rustls::TlsConnector)> {
    let truststore = s.truststore.as_ref().ok_or_else(|| {
        anyhow::anyhow!("CONTROLLER:SSL needs ssl.truststore.location (PEM CA certificates that peers' chain to)")
    })?;
    let server = SecuritySettings { client_auth: ClientAuth::Required, ..s.clone() };
    let acceptor = tokio_rustls::TlsAcceptor::from(server_config(&server)?);
    let keystore = s.keystore.as_ref().ok_or_else(|| anyhow::anyhow!("CONTROLLER:SSL needs ssl.keystore.location"))?;
    let (certs, key) = load_keystore(keystore)?;
    let roots = load_truststore(truststore)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| anyhow::anyhow!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, key)
        .map_err(|e| anyhow::anyhow!("ssl.keystore.location {}: {e}", keystore.display()))?;
    Ok((acceptor, tokio_rustls::TlsConnector::from(Arc::new(client))))
}
