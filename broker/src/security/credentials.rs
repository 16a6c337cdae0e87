//! SCRAM credentials: per user and mechanism, only the salt, iteration count, StoredKey and
//! ServerKey are kept (never a password). Persisted in `<log.dirs>/__scram_credentials.json`,
//! rewritten atomically on every change.

use crate::sync::OrDie as _;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sluice_protocol::scram::{Credential, Mechanism};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::RwLock;

pub const CREDENTIALS_FILE: &str = "__scram_credentials.json";

/// Iterations used for credentials the broker creates itself (`sasl.bootstrap.users`).
pub const DEFAULT_ITERATIONS: i32 = 8192;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredCredential {
    salt: String,
    stored_key: String,
    server_key: String,
    iterations: i32,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct CredentialsFile {
    /// user → mechanism name → credential
    users: BTreeMap<String, BTreeMap<String, StoredCredential>>,
}

pub struct CredentialStore {
    path: PathBuf,
    users: RwLock<BTreeMap<String, BTreeMap<Mechanism, Credential>>>,
}

fn decode(m: Mechanism, c: &StoredCredential) -> Option<Credential> {
    Some(Credential {
        mechanism: m,
        salt: B64.decode(&c.salt).ok()?,
        stored_key: B64.decode(&c.stored_key).ok()?,
        server_key: B64.decode(&c.server_key).ok()?,
        iterations: c.iterations,
    })
}

pub use super::model::{CredentialMap, CredentialRecord};

/// A change to one user's credential (AlterUserScramCredentials).
pub enum Change {
    Upsert { user: String, credential: Credential },
    Delete { user: String, mechanism: Mechanism },
}

impl CredentialStore {
    pub fn open(dir: &Path) -> anyhow::Result<CredentialStore> {
        let path = dir.join(CREDENTIALS_FILE);
        let file: CredentialsFile = match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b)
                .map_err(|e| anyhow::anyhow!("{} is unreadable ({e}); refusing to start", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => CredentialsFile::default(),
            Err(e) => return Err(e.into()),
        };
        let mut users = BTreeMap::new();
        for (user, creds) in file.users {
            let mut by_mech = BTreeMap::new();
            for (name, c) in creds {
                let m = Mechanism::from_name(&name)
                    .ok_or_else(|| anyhow::anyhow!("{}: unknown mechanism {name}", path.display()))?;
                let c = decode(m, &c)
                    .ok_or_else(|| anyhow::anyhow!("{}: credential of {user} is not base64", path.display()))?;
                by_mech.insert(m, c);
            }
            users.insert(user, by_mech);
        }
        Ok(CredentialStore { path, users: RwLock::new(users) })
    }

    fn persist(&self, users: &BTreeMap<String, BTreeMap<Mechanism, Credential>>) -> anyhow::Result<()> {
        let file = CredentialsFile {
            users: users
                .iter()
                .map(|(u, m)| {
                    let creds = m
                        .iter()
                        .map(|(mech, c)| {
                            let s = StoredCredential {
                                salt: B64.encode(&c.salt),
                                stored_key: B64.encode(&c.stored_key),
                                server_key: B64.encode(&c.server_key),
                                iterations: c.iterations,
                            };
                            (mech.name().to_string(), s)
                        })
                        .collect();
                    (u.clone(), creds)
                })
                .collect(),
        };
        sluice_storage::sidefile::write_atomic(&self.path, &serde_json::to_vec_pretty(&file)?)?;
        Ok(())
    }

    /// Create both SCRAM credentials for each (user, password) that has none yet.
    pub fn bootstrap(&self, users: &[(String, String)]) -> anyhow::Result<()> {
        let mut map = self.users.write().or_die();
        let mut changed = false;
        for (user, password) in users {
            if map.get(user).is_some_and(|m| !m.is_empty()) {
                continue;
            }
            let entry = map.entry(user.clone()).or_default();
            for m in Mechanism::ALL {
                let mut salt = vec![0u8; 16];
                rand::thread_rng().fill_bytes(&mut salt);
                let salted = m.salted_password(password.as_bytes(), &salt, DEFAULT_ITERATIONS as u32);
                entry.insert(m, m.credential(&salted, salt, DEFAULT_ITERATIONS));
            }
            changed = true;
        }
        if changed {
            self.persist(&map)?;
        }
        Ok(())
    }

    /// Every credential, serializable (cluster mode).
    pub fn export(&self) -> CredentialMap {
        let map = self.users.read().or_die();
        map.iter()
            .map(|(u, c)| {
                let creds = c
                    .iter()
                    .map(|(m, x)| {
                        let r = CredentialRecord {
                            salt: x.salt.clone(),
                            stored_key: x.stored_key.clone(),
                            server_key: x.server_key.clone(),
                            iterations: x.iterations,
                        };
                        (m.name().to_string(), r)
                    })
                    .collect();
                (u.clone(), creds)
            })
            .collect()
    }

    /// Replace every credential (cluster mode: from the quorum's image) and persist.
    pub fn replace(&self, next: &CredentialMap) -> anyhow::Result<()> {
        let mut users = BTreeMap::new();
        for (u, creds) in next {
            let mut by_mech = BTreeMap::new();
            for (name, r) in creds {
                if let Some(m) = Mechanism::from_name(name) {
                    let c = Credential {
                        mechanism: m,
                        salt: r.salt.clone(),
                        stored_key: r.stored_key.clone(),
                        server_key: r.server_key.clone(),
                        iterations: r.iterations,
                    };
                    by_mech.insert(m, c);
                }
            }
            users.insert(u.clone(), by_mech);
        }
        let mut map = self.users.write().or_die();
        if *map != users {
            self.persist(&users)?;
            *map = users;
        }
        Ok(())
    }

    pub fn get(&self, user: &str, m: Mechanism) -> Option<Credential> {
        self.users.read().or_die().get(user).and_then(|c| c.get(&m)).cloned()
    }

    /// Any credential of `user` (PLAIN checks the password against it).
    pub fn any(&self, user: &str) -> Option<Credential> {
        self.users.read().or_die().get(user).and_then(|c| c.values().next().cloned())
    }

    /// (user, [(mechanism, iterations)]) for the named users, or all users when `None`.
    pub fn describe(&self) -> BTreeMap<String, Vec<(Mechanism, i32)>> {
        let map = self.users.read().or_die();
        map.iter()
            .filter(|(_, c)| !c.is_empty())
            .map(|(u, c)| (u.clone(), c.iter().map(|(m, x)| (*m, x.iterations)).collect()))
            .collect()
    }

    /// Apply changes (already validated) and persist once. Returns, per change, whether it
    /// applied (a delete of a missing credential does not).
    pub fn apply(&self, changes: Vec<Change>) -> anyhow::Result<Vec<bool>> {
        let mut map = self.users.write().or_die();
        let mut next = map.clone();
        let mut applied = Vec::with_capacity(changes.len());
        for c in changes {
            match c {
                Change::Upsert { user, credential } => {
                    next.entry(user).or_default().insert(credential.mechanism, credential);
                    applied.push(true);
                }
                Change::Delete { user, mechanism } => {
                    let removed = next.get_mut(&user).and_then(|m| m.remove(&mechanism)).is_some();
                    if next.get(&user).is_some_and(|m| m.is_empty()) {
                        next.remove(&user);
                    }
                    applied.push(removed);
                }
            }
        }
        self.persist(&next)?;
        *map = next;
        Ok(applied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_persists_salted_credentials_only() {
        let dir = tempfile::tempdir().unwrap();
        let s = CredentialStore::open(dir.path()).unwrap();
        s.bootstrap(&[("alice".into(), "alice-secret".into())]).unwrap();
        let text = std::fs::read_to_string(dir.path().join(CREDENTIALS_FILE)).unwrap();
        assert!(!text.contains("alice-secret"), "{text}");
        let s = CredentialStore::open(dir.path()).unwrap();
        for m in Mechanism::ALL {
            assert!(s.get("alice", m).unwrap().verify_password(b"alice-secret"));
        }
        // bootstrap never overwrites an existing user
        s.bootstrap(&[("alice".into(), "other".into())]).unwrap();
        assert!(s.any("alice").unwrap().verify_password(b"alice-secret"));
        let applied = s
            .apply(vec![
                Change::Delete { user: "alice".into(), mechanism: Mechanism::Sha256 },
                Change::Delete { user: "bob".into(), mechanism: Mechanism::Sha256 },
            ])
            .unwrap();
        assert_eq!(applied, vec![true, false]);
        let s = CredentialStore::open(dir.path()).unwrap();
        assert!(s.get("alice", Mechanism::Sha256).is_none());
        assert_eq!(s.describe()["alice"], vec![(Mechanism::Sha512, DEFAULT_ITERATIONS)]);
    }

    #[test]
    fn a_corrupt_file_stops_startup() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(CREDENTIALS_FILE), b"{not json").unwrap();
        assert!(CredentialStore::open(dir.path()).is_err());
    }
}
