//! The credentials file of authentication termination (`listener.auth.credentials_file`): users
//! with salted SCRAM credentials, never passwords. One `[[user]]` entry per user and mechanism:
//!
//! ```toml
//! [[user]]
//! name = "alice"
//! mechanism = "SCRAM-SHA-512"
//! iterations = 8192
//! salt = "base64…"
//! stored_key = "base64…"
//! server_key = "base64…"
//! ```
//!
//! [`entry`] renders one (the `scram-credential` command). PLAIN logins are checked against any of
//! the user's SCRAM credentials. Reloading the file belongs to the proxy.

use std::collections::HashMap;
use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use kmp_config::SaslMechanism;

use super::scram::{Hash, MAX_ITERATIONS, MIN_ITERATIONS, ScramCredential};

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    user: Vec<Entry>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    mechanism: String,
    iterations: u32,
    salt: String,
    stored_key: String,
    server_key: String,
}

/// Users and their SCRAM credentials, by mechanism.
#[derive(Debug, Default, Clone)]
pub struct Credentials {
    users: HashMap<(String, Hash), ScramCredential>,
}

impl Credentials {
    /// Parses a credentials file's text; every bad entry is reported (by user name and line
    /// position, never by key material).
    pub fn parse(text: &str) -> Result<Self, String> {
        let file: File = toml::from_str(text).map_err(|e| format!("credentials file: {}", e.message()))?;
        let mut users = HashMap::new();
        let mut errs = Vec::new();
        for (i, e) in file.user.into_iter().enumerate() {
            let what = format!("user[{i}] ({})", e.name);
            let Some(hash) = SaslMechanism::parse(&e.mechanism).and_then(Hash::of) else {
                errs.push(format!("{what}: mechanism `{}` is not SCRAM-SHA-256 or SCRAM-SHA-512", e.mechanism));
                continue;
            };
            if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&e.iterations) {
                errs.push(format!("{what}: iterations must be {MIN_ITERATIONS}..={MAX_ITERATIONS}"));
                continue;
            }
            let key_len = if hash == Hash::Sha256 { 32 } else { 64 };
            let decode = |v: &str| B64.decode(v.trim()).ok();
            match (decode(&e.salt), decode(&e.stored_key), decode(&e.server_key)) {
                (Some(salt), Some(stored_key), Some(server_key)) if !salt.is_empty() && stored_key.len() == key_len && server_key.len() == key_len => {
                    if users
                        .insert(
                            (e.name.clone(), hash),
                            ScramCredential {
                                salt,
                                iterations: e.iterations,
                                stored_key,
                                server_key,
                            },
                        )
                        .is_some()
                    {
                        errs.push(format!("{what}: a second entry for {}", e.mechanism));
                    }
                }
                _ => errs.push(format!("{what}: salt, stored_key and server_key must be base64 ({key_len}-byte keys)")),
            }
        }
        if errs.is_empty() { Ok(Self { users }) } else { Err(errs.join("; ")) }
    }

    /// Reads and parses `path`.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read credentials file {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// `user`'s credential for the SCRAM mechanism `hash`.
    pub fn scram(&self, user: &str, hash: Hash) -> Option<ScramCredential> {
        self.users.get(&(user.to_owned(), hash)).cloned()
    }

    /// Whether `password` is `user`'s (PLAIN), checked against the user's SCRAM credentials. An
    /// unknown user costs the same derivation as a known one (against a decoy credential), so
    /// the time an answer takes does not tell which users exist.
    pub fn check_plain(&self, user: &str, password: &str) -> bool {
        match [Hash::Sha512, Hash::Sha256].into_iter().find_map(|h| self.scram(user, h).map(|c| (h, c))) {
            Some((h, c)) => c.matches_password(h, password),
            None => {
                let _ = ScramCredential::decoy(Hash::Sha512, user).matches_password(Hash::Sha512, password);
                false
            }
        }
    }

    /// Number of (user, mechanism) entries.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// Whether the file holds no users.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }
}

/// One `[[user]]` entry for `user` with a fresh random salt.
pub fn entry(user: &str, mechanism: SaslMechanism, password: &str, iterations: u32) -> Result<String, String> {
    let hash = Hash::of(mechanism).ok_or("only SCRAM-SHA-256 and SCRAM-SHA-512 credentials are stored (PLAIN logins use them)")?;
    if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
        return Err(format!("iterations must be {MIN_ITERATIONS}..={MAX_ITERATIONS}"));
    }
    let mut salt = [0u8; 24];
    getrandom::fill(&mut salt).map_err(|e| e.to_string())?;
    let c = ScramCredential::derive(hash, password, &salt, iterations);
    let name = toml::Value::String(user.to_owned());
    Ok(format!(
        "[[user]]\nname = {name}\nmechanism = \"{}\"\niterations = {iterations}\nsalt = \"{}\"\nstored_key = \"{}\"\nserver_key = \"{}\"\n",
        mechanism.name(),
        B64.encode(&c.salt),
        B64.encode(&c.stored_key),
        B64.encode(&c.server_key)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_entries_verify_plain_and_scram_and_hold_no_password() {
        let text = format!(
            "{}\n{}",
            entry("alice", SaslMechanism::ScramSha512, "wonderland", 4096).unwrap(),
            entry("bob", SaslMechanism::ScramSha256, "builder", 4096).unwrap()
        );
        assert!(!text.contains("wonderland") && !text.contains("builder"));
        let c = Credentials::parse(&text).unwrap();
        assert_eq!(c.len(), 2);
        assert!(c.check_plain("alice", "wonderland") && c.check_plain("bob", "builder"));
        assert!(!c.check_plain("alice", "builder") && !c.check_plain("carol", "x"));
        assert!(c.scram("alice", Hash::Sha512).is_some() && c.scram("alice", Hash::Sha256).is_none());
    }

    #[test]
    fn a_plain_login_of_an_unknown_user_costs_a_derivation_like_a_known_users() {
        let c = Credentials::parse(&entry("alice", SaslMechanism::ScramSha512, "pw", super::super::scram::DEFAULT_ITERATIONS).unwrap()).unwrap();
        let time = |user: &str| {
            let started = std::time::Instant::now();
            for _ in 0..3 {
                assert!(!c.check_plain(user, "wrong"));
            }
            started.elapsed()
        };
        let (known, unknown) = (time("alice"), time("mallory"));
        assert!(
            unknown * 3 >= known,
            "an unknown user's PLAIN check took {unknown:?} against {known:?} for a known one: the time tells users apart"
        );
    }

    #[test]
    fn bad_entries_are_all_reported() {
        let e = Credentials::parse(
            "[[user]]\nname=\"a\"\nmechanism=\"PLAIN\"\niterations=4096\nsalt=\"AA==\"\nstored_key=\"AA==\"\nserver_key=\"AA==\"\n\
             [[user]]\nname=\"b\"\nmechanism=\"SCRAM-SHA-256\"\niterations=10\nsalt=\"AA==\"\nstored_key=\"AA==\"\nserver_key=\"AA==\"\n\
             [[user]]\nname=\"c\"\nmechanism=\"SCRAM-SHA-256\"\niterations=4096\nsalt=\"AA==\"\nstored_key=\"AA==\"\nserver_key=\"AA==\"\n",
        )
        .unwrap_err();
        assert!(e.contains("user[0]") && e.contains("user[1]") && e.contains("user[2]"), "{e}");
    }
}
