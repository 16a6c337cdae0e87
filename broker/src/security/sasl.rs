//! One SASL connection's authentication, as Kafka's server authenticator runs it: ApiVersions
//! may come first, then SaslHandshake (v1) names the mechanism, then SaslAuthenticate carries
//! the mechanism's messages (PLAIN: one; SCRAM: two). Until it succeeds no other API is served;
//! a failure is answered (SASL_AUTHENTICATION_FAILED with a reason) and the connection closed.
//!
//! PLAIN checks the password against the user's SCRAM credential (one user store for both).

use super::Security;
use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    ResponseKind, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use rand::distributions::{Alphanumeric, DistString};
use sluice_protocol::scram::{self, Mechanism, ServerExchange};

use kafka_protocol::protocol::StrBytes;

enum Stage {
    /// Waiting for SaslHandshake.
    Handshake,
    /// Handshake done; waiting for the first SaslAuthenticate.
    Start { mechanism: String },
    /// SCRAM: server-first sent, waiting for client-final.
    ScramFinal(Box<ServerExchange>),
}

/// What the connection does with an answer.
pub enum Step {
    /// Send and continue the exchange.
    Continue(ResponseKind),
    /// Send; the connection is authenticated as this principal.
    Authenticated(ResponseKind, String),
    /// Send, then close the connection.
    Fail(ResponseKind),
}

pub struct SaslServer {
    stage: Stage,
}

impl Default for SaslServer {
    fn default() -> Self {
        SaslServer { stage: Stage::Handshake }
    }
}

fn auth_response(error: Option<(ResponseError, String)>, bytes: Vec<u8>) -> ResponseKind {
    let mut r = SaslAuthenticateResponse::default();
    if let Some((e, msg)) = error {
        r.error_code = e.code();
        r.error_message = Some(StrBytes::from_string(msg));
    }
    r.auth_bytes = Bytes::from(bytes);
    ResponseKind::SaslAuthenticate(r)
}

fn failed(mechanism: &str, why: &str) -> Step {
    let msg = format!(
        "Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}: {why}"
    );
    Step::Fail(auth_response(Some((ResponseError::SaslAuthenticationFailed, msg)), Vec::new()))
}

impl SaslServer {
    pub fn handshake(&mut self, security: &Security, r: &SaslHandshakeRequest) -> Step {
        let enabled = &security.settings.sasl_mechanisms;
        let mut resp = SaslHandshakeResponse::default();
        resp.mechanisms = enabled.iter().map(|m| StrBytes::from_string(m.clone())).collect();
        if !matches!(self.stage, Stage::Handshake) {
            resp.error_code = ResponseError::IllegalSaslState.code();
            return Step::Fail(ResponseKind::SaslHandshake(resp));
        }
        let mechanism = r.mechanism.to_string();
        if !enabled.contains(&mechanism) {
            resp.error_code = ResponseError::UnsupportedSaslMechanism.code();
            return Step::Fail(ResponseKind::SaslHandshake(resp));
        }
        self.stage = Stage::Start { mechanism };
        Step::Continue(ResponseKind::SaslHandshake(resp))
    }

    pub fn authenticate(&mut self, security: &Security, r: &SaslAuthenticateRequest) -> Step {
        match std::mem::replace(&mut self.stage, Stage::Handshake) {
            Stage::Handshake => Step::Fail(auth_response(
                Some((ResponseError::IllegalSaslState, "SaslAuthenticate before SaslHandshake".into())),
                Vec::new(),
            )),
            Stage::Start { mechanism } if mechanism == "PLAIN" => {
                let (user, password) = match scram::parse_plain(&r.auth_bytes) {
                    Ok(x) => x,
                    Err(e) => return failed("PLAIN", &e.to_string()),
                };
                match security.credentials.any(&user) {
                    Some(c) if c.verify_password(password.as_bytes()) => {
                        Step::Authenticated(auth_response(None, Vec::new()), format!("User:{user}"))
                    }
                    _ => failed("PLAIN", "Invalid username or password"),
                }
            }
            Stage::Start { mechanism } => {
                let Some(m) = Mechanism::from_name(&mechanism) else {
                    return failed(&mechanism, "unsupported mechanism");
                };
                let (user, bare, nonce) = match scram::parse_client_first(&r.auth_bytes) {
                    Ok(x) => x,
                    Err(e) => return failed(&mechanism, &e.to_string()),
                };
                let Some(credential) = security.credentials.get(&user, m) else {
                    return failed(&mechanism, "Invalid user credentials");
                };
                let server_nonce = Alphanumeric.sample_string(&mut rand::thread_rng(), 32);
                let (x, reply) = ServerExchange::start(credential, user, bare, &nonce, &server_nonce);
                self.stage = Stage::ScramFinal(Box::new(x));
                Step::Continue(auth_response(None, reply))
            }
            Stage::ScramFinal(x) => match x.finish(&r.auth_bytes) {
                Ok(reply) => Step::Authenticated(auth_response(None, reply), format!("User:{}", x.user)),
                Err(e) => failed("SCRAM", &e.to_string()),
            },
        }
    }
}
