//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka uses them in
//! SaslAuthenticate: the key derivation, the message grammar, and both sides of the exchange.
//! Pure: nonces and salts come from the caller.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};

/// Kafka's bounds on SCRAM iterations (AlterUserScramCredentials refuses others).
pub const MIN_ITERATIONS: i32 = 4096;
pub const MAX_ITERATIONS: i32 = 16384;

/// The two SCRAM mechanisms Kafka defines, with their Kafka mechanism numbers (the `mechanism`
/// field of the user-credential APIs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mechanism {
    Sha256,
    Sha512,
}

impl Mechanism {
    pub const ALL: [Mechanism; 2] = [Mechanism::Sha256, Mechanism::Sha512];

    /// The SASL mechanism name.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Sha256 => "SCRAM-SHA-256",
            Mechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Kafka's numbering in Describe/AlterUserScramCredentials (0 is UNKNOWN).
    pub fn code(self) -> i8 {
        match self {
            Mechanism::Sha256 => 1,
            Mechanism::Sha512 => 2,
        }
    }

    pub fn from_code(code: i8) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.code() == code)
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::Sha256 => {
                let Ok(mut m) = Hmac::<Sha256>::new_from_slice(key) else { return Vec::new() };
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
            Mechanism::Sha512 => {
                let Ok(mut m) = Hmac::<Sha512>::new_from_slice(key) else { return Vec::new() };
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::Sha256 => Sha256::digest(data).to_vec(),
            Mechanism::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// SaltedPassword = Hi(password, salt, iterations) (PBKDF2 with this HMAC).
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            Mechanism::Sha256 => {
                let mut out = [0u8; 32];
                pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out);
                out.to_vec()
            }
            Mechanism::Sha512 => {
                let mut out = [0u8; 64];
                pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out);
                out.to_vec()
            }
        }
    }

    /// The stored form of a credential derived from a salted password (the only form a broker
    /// keeps: the password itself is never stored).
    pub fn credential(self, salted_password: &[u8], salt: Vec<u8>, iterations: i32) -> Credential {
        let client_key = self.hmac(salted_password, b"Client Key");
        Credential {
            mechanism: self,
            salt,
            stored_key: self.hash(&client_key),
            server_key: self.hmac(salted_password, b"Server Key"),
            iterations,
        }
    }
}

/// A user's SCRAM credential as the server keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    pub mechanism: Mechanism,
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: i32,
}

impl Credential {
    /// Does `password` match this credential? (Used by SASL/PLAIN against the SCRAM store.)
    pub fn verify_password(&self, password: &[u8]) -> bool {
        let m = self.mechanism;
        let salted = m.salted_password(password, &self.salt, self.iterations.max(1) as u32);
        let client_key = m.hmac(&salted, b"Client Key");
        constant_time_eq(&m.hash(&client_key), &self.stored_key)
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Why an exchange failed. The text is safe to show a client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    #[error("unknown user or invalid credentials")]
    InvalidCredentials,
    #[error("server nonce does not extend the client nonce")]
    NonceMismatch,
    #[error("server signature does not verify")]
    BadServerSignature,
    #[error("server error: {0}")]
    Server(String),
}

/// `saslname` escaping (RFC 5802 §5.1): ',' → "=2C", '=' → "=3D".
pub fn escape_name(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

fn unescape_name(name: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(ScramError::Malformed("bad escape in user name")),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The value of attribute `key` (e.g. 'r') in a comma-separated SCRAM message.
fn attr(msg: &str, key: char) -> Option<&str> {
    msg.split(',').find_map(|part| {
        let mut chars = part.chars();
        (chars.next() == Some(key) && chars.next() == Some('=')).then(|| &part[2..])
    })
}

/// The server's side of one exchange.
#[derive(Debug)]
pub struct ServerExchange {
    credential: Credential,
    client_first_bare: String,
    server_first: String,
    nonce: String,
    /// The authenticated user name (from the client's first message).
    pub user: String,
}

/// Parse a client-first message: the user name and the bare part (without the GS2 header).
pub fn parse_client_first(msg: &[u8]) -> Result<(String, String, String), ScramError> {
    let msg = std::str::from_utf8(msg).map_err(|_| ScramError::Malformed("not UTF-8"))?;
    // gs2-header: "n,," / "y,," / "n,a=authzid," ; channel binding ("p=") is not offered
    let mut parts = msg.splitn(3, ',');
    let cb = parts.next().ok_or(ScramError::Malformed("no GS2 header"))?;
    if cb != "n" && cb != "y" {
        return Err(ScramError::Malformed("channel binding is not supported"));
    }
    let _authzid = parts.next().ok_or(ScramError::Malformed("no GS2 header"))?;
    let bare = parts.next().ok_or(ScramError::Malformed("no client-first-message-bare"))?;
    if bare.starts_with("m=") {
        return Err(ScramError::Malformed("mandatory extensions are not supported"));
    }
    let user = unescape_name(attr(bare, 'n').ok_or(ScramError::Malformed("no user name"))?)?;
    let nonce = attr(bare, 'r').ok_or(ScramError::Malformed("no client nonce"))?;
    if nonce.is_empty() || nonce.contains(',') {
        return Err(ScramError::Malformed("empty client nonce"));
    }
    Ok((user, bare.to_string(), nonce.to_string()))
}

impl ServerExchange {
    /// Start an exchange for a client-first message whose user has `credential`; returns the
    /// server-first message to send. `server_nonce` must be fresh and printable (no ',').
    pub fn start(
        credential: Credential,
        user: String,
        client_first_bare: String,
        client_nonce: &str,
        server_nonce: &str,
    ) -> (ServerExchange, Vec<u8>) {
        let nonce = format!("{client_nonce}{server_nonce}");
        let server_first = format!("r={nonce},s={},i={}", B64.encode(&credential.salt), credential.iterations);
        let reply = server_first.clone().into_bytes();
        (ServerExchange { credential, client_first_bare, server_first, nonce, user }, reply)
    }

    /// Check the client-final message; on success returns the server-final message.
    pub fn finish(&self, client_final: &[u8]) -> Result<Vec<u8>, ScramError> {
        let msg = std::str::from_utf8(client_final).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        let (without_proof, proof_part) =
            msg.rsplit_once(",p=").ok_or(ScramError::Malformed("no proof in client-final message"))?;
        if attr(without_proof, 'r') != Some(self.nonce.as_str()) {
            return Err(ScramError::NonceMismatch);
        }
        let cb = attr(without_proof, 'c').ok_or(ScramError::Malformed("no channel binding"))?;
        let cb = B64.decode(cb).map_err(|_| ScramError::Malformed("channel binding not base64"))?;
        if !(cb.starts_with(b"n,") || cb.starts_with(b"y,")) {
            return Err(ScramError::Malformed("channel binding is not supported"));
        }
        let proof = B64.decode(proof_part).map_err(|_| ScramError::Malformed("proof not base64"))?;
        let auth_message = format!("{},{},{}", self.client_first_bare, self.server_first, without_proof);
        let m = self.credential.mechanism;
        let client_signature = m.hmac(&self.credential.stored_key, auth_message.as_bytes());
        if proof.len() != client_signature.len() {
            return Err(ScramError::InvalidCredentials);
        }
        let client_key: Vec<u8> = proof.iter().zip(&client_signature).map(|(a, b)| a ^ b).collect();
        if !constant_time_eq(&m.hash(&client_key), &self.credential.stored_key) {
            return Err(ScramError::InvalidCredentials);
        }
        let server_signature = m.hmac(&self.credential.server_key, auth_message.as_bytes());
        Ok(format!("v={}", B64.encode(server_signature)).into_bytes())
    }
}

/// The client's side of one exchange.
#[derive(Debug)]
pub struct ClientExchange {
    mechanism: Mechanism,
    password: String,
    client_first_bare: String,
    client_nonce: String,
    server_signature: Vec<u8>,
}

impl ClientExchange {
    /// The client-first message for `user`, with a fresh printable `client_nonce`.
    pub fn start(mechanism: Mechanism, user: &str, password: &str, client_nonce: &str) -> (ClientExchange, Vec<u8>) {
        let bare = format!("n={},r={client_nonce}", escape_name(user));
        let msg = format!("n,,{bare}").into_bytes();
        let x = ClientExchange {
            mechanism,
            password: password.to_string(),
            client_first_bare: bare,
            client_nonce: client_nonce.to_string(),
            server_signature: Vec::new(),
        };
        (x, msg)
    }

    /// Answer the server-first message with the client-final message.
    pub fn respond(&mut self, server_first: &[u8]) -> Result<Vec<u8>, ScramError> {
        let msg = std::str::from_utf8(server_first).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        if let Some(e) = attr(msg, 'e') {
            return Err(ScramError::Server(e.to_string()));
        }
        let nonce = attr(msg, 'r').ok_or(ScramError::Malformed("no nonce"))?;
        if !nonce.starts_with(&self.client_nonce) || nonce.len() == self.client_nonce.len() {
            return Err(ScramError::NonceMismatch);
        }
        let salt = B64
            .decode(attr(msg, 's').ok_or(ScramError::Malformed("no salt"))?)
            .map_err(|_| ScramError::Malformed("salt not base64"))?;
        let iterations: u32 = attr(msg, 'i')
            .and_then(|i| i.parse().ok())
            .filter(|i| *i >= 1)
            .ok_or(ScramError::Malformed("bad iteration count"))?;
        let m = self.mechanism;
        let salted = m.salted_password(self.password.as_bytes(), &salt, iterations);
        let client_key = m.hmac(&salted, b"Client Key");
        let stored_key = m.hash(&client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{},{}", self.client_first_bare, msg, without_proof);
        let client_signature = m.hmac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&client_signature).map(|(a, b)| a ^ b).collect();
        let server_key = m.hmac(&salted, b"Server Key");
        self.server_signature = m.hmac(&server_key, auth_message.as_bytes());
        Ok(format!("{without_proof},p={}", B64.encode(proof)).into_bytes())
    }

    /// Verify the server-final message (proves the server knows the credential).
    pub fn verify(&self, server_final: &[u8]) -> Result<(), ScramError> {
        let msg = std::str::from_utf8(server_final).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        if let Some(e) = attr(msg, 'e') {
            return Err(ScramError::Server(e.to_string()));
        }
        let v = B64
            .decode(attr(msg, 'v').ok_or(ScramError::Malformed("no verifier"))?)
            .map_err(|_| ScramError::Malformed("verifier not base64"))?;
        if self.server_signature.is_empty() || !constant_time_eq(&v, &self.server_signature) {
            return Err(ScramError::BadServerSignature);
        }
        Ok(())
    }
}

/// Parse a SASL/PLAIN message: `[authzid] NUL authcid NUL passwd` (RFC 4616).
pub fn parse_plain(msg: &[u8]) -> Result<(String, String), ScramError> {
    let mut parts = msg.split(|b| *b == 0);
    let (Some(authzid), Some(user), Some(password), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(ScramError::Malformed("PLAIN expects authzid NUL user NUL password"));
    };
    let user = std::str::from_utf8(user).map_err(|_| ScramError::Malformed("user not UTF-8"))?;
    let password = std::str::from_utf8(password).map_err(|_| ScramError::Malformed("password not UTF-8"))?;
    if user.is_empty() {
        return Err(ScramError::Malformed("empty user name"));
    }
    if !authzid.is_empty() && authzid != user.as_bytes() {
        return Err(ScramError::Malformed("authorization id must be empty or the user name"));
    }
    Ok((user.to_string(), password.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677 §3: the SCRAM-SHA-256 example exchange, byte for byte.
    #[test]
    fn rfc7677_example() {
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let m = Mechanism::Sha256;
        let cred = m.credential(&m.salted_password(b"pencil", &salt, 4096), salt, 4096);
        let (mut client, first) = ClientExchange::start(m, "user", "pencil", "rOprNGfwEbeRWgbNEkqO");
        assert_eq!(first, b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let (user, bare, cnonce) = parse_client_first(&first).unwrap();
        assert_eq!(user, "user");
        let (server, server_first) =
            ServerExchange::start(cred.clone(), user, bare, &cnonce, "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0");
        assert_eq!(
            server_first,
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096".to_vec()
        );
        let client_final = client.respond(&server_first).unwrap();
        assert_eq!(
            String::from_utf8(client_final.clone()).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        let server_final = server.finish(&client_final).unwrap();
        assert_eq!(String::from_utf8(server_final.clone()).unwrap(), "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
        client.verify(&server_final).unwrap();
        assert!(cred.verify_password(b"pencil"));
        assert!(!cred.verify_password(b"pencil2"));
    }

    #[test]
    fn wrong_password_and_tampering_are_refused() {
        for m in Mechanism::ALL {
            let salt = b"0123456789abcdef".to_vec();
            let cred = m.credential(&m.salted_password(b"secret", &salt, 4096), salt, 4096);
            let (mut client, first) = ClientExchange::start(m, "a,b=c", "wrong", "abc");
            let (user, bare, cnonce) = parse_client_first(&first).unwrap();
            assert_eq!(user, "a,b=c");
            let (server, sf) = ServerExchange::start(cred.clone(), user, bare, &cnonce, "xyz");
            let cf = client.respond(&sf).unwrap();
            assert_eq!(server.finish(&cf), Err(ScramError::InvalidCredentials));
            // right password, but the nonce replaced
            let (mut client, first) = ClientExchange::start(m, "u", "secret", "abc");
            let (user, bare, cnonce) = parse_client_first(&first).unwrap();
            let (server, sf) = ServerExchange::start(cred.clone(), user, bare, &cnonce, "xyz");
            let cf = String::from_utf8(client.respond(&sf).unwrap()).unwrap().replace("abcxyz", "abcxyq");
            assert_eq!(server.finish(cf.as_bytes()), Err(ScramError::NonceMismatch));
            assert!(server.finish(b"garbage").is_err());
            // a server that does not know the credential cannot fake the final message
            assert!(client.verify(b"v=AAAA").is_err());
        }
    }

    #[test]
    fn malformed_messages_are_errors_not_panics() {
        for bad in [&b""[..], b"n", b"n,,", b"p=x,,n=u,r=a", b"n,,n=u", b"n,,r=a", b"n,,n=a=2,r=x", b"\xff"] {
            assert!(parse_client_first(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_plain(b"\0alice\0pw").unwrap(), ("alice".into(), "pw".into()));
        assert_eq!(parse_plain(b"alice\0alice\0pw").unwrap(), ("alice".into(), "pw".into()));
        assert!(parse_plain(b"bob\0alice\0pw").is_err());
        assert!(parse_plain(b"alice\0pw").is_err());
        assert!(parse_plain(b"\0\0pw").is_err());
    }
}
