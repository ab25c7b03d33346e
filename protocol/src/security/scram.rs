//! SCRAM-SHA-256/512 (RFC 5802, RFC 7677) for both ends: the client side the proxy uses toward
//! brokers, the server side it uses when it terminates client authentication, and the salted
//! credential both derive from a password. Sans-io: messages in, messages out. Sending them in
//! SaslAuthenticate requests belongs to `client_auth` (toward brokers) and to the proxy's
//! termination filter (toward clients).
//!
//! Every message from a peer is untrusted: attributes are parsed without panics, the iteration
//! count a server asks for is bounded ([`MAX_ITERATIONS`]) and proofs are compared in constant time.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;

use kmp_config::SaslMechanism;

/// Iterations Kafka accepts at least and at most for SCRAM credentials; a server asking for more
/// is refused (it could make the proxy compute for minutes).
pub const MIN_ITERATIONS: u32 = 4096;
pub const MAX_ITERATIONS: u32 = 16384;
/// Iterations `kafka-mirror-proxy scram-credential` writes unless told otherwise (and what a
/// decoy credential for an unknown user costs).
pub const DEFAULT_ITERATIONS: u32 = 8192;

/// A SCRAM failure. Messages never contain passwords or keys.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("SCRAM: {0}")]
pub struct ScramError(pub String);

fn err(s: impl Into<String>) -> ScramError {
    ScramError(s.into())
}

/// The hash of a SCRAM mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Hash {
    Sha256,
    Sha512,
}

impl Hash {
    /// The hash of `m`, or `None` for PLAIN.
    pub fn of(m: SaslMechanism) -> Option<Self> {
        match m {
            SaslMechanism::ScramSha256 => Some(Self::Sha256),
            SaslMechanism::ScramSha512 => Some(Self::Sha512),
            SaslMechanism::Plain | SaslMechanism::OAuthBearer => None,
        }
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            Self::Sha256 => {
                let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes keys of any length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
            Self::Sha512 => {
                let mut m = <Hmac<Sha512> as Mac>::new_from_slice(key).expect("HMAC takes keys of any length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
        }
    }

    fn digest(self, data: &[u8]) -> Vec<u8> {
        match self {
            Self::Sha256 => Sha256::digest(data).to_vec(),
            Self::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// SaltedPassword = PBKDF2-HMAC(password, salt, iterations).
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            Self::Sha256 => pbkdf2::pbkdf2_hmac_array::<Sha256, 32>(password, salt, iterations).to_vec(),
            Self::Sha512 => pbkdf2::pbkdf2_hmac_array::<Sha512, 64>(password, salt, iterations).to_vec(),
        }
    }
}

/// What a server stores for one user and mechanism (RFC 5802 §3): never the password.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    pub iterations: u32,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl std::fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramCredential").field("iterations", &self.iterations).finish_non_exhaustive()
    }
}

impl ScramCredential {
    /// Derives the stored credential from a password.
    pub fn derive(hash: Hash, password: &str, salt: &[u8], iterations: u32) -> Self {
        let salted = hash.salted_password(password.as_bytes(), salt, iterations);
        let client_key = hash.hmac(&salted, b"Client Key");
        Self {
            salt: salt.to_vec(),
            iterations,
            stored_key: hash.digest(&client_key),
            server_key: hash.hmac(&salted, b"Server Key"),
        }
    }

    /// A credential for a user who does not exist, so that the exchange goes on as for one who
    /// does and fails only at the proof (RFC 5802 §5.1's advice against user enumeration): the
    /// salt is derived from the name with a key chosen once per process (the same name gets the
    /// same salt every time), the iteration count is [`DEFAULT_ITERATIONS`] (what
    /// `scram-credential` writes by default), and the keys are random (no proof matches them).
    pub fn decoy(hash: Hash, user: &str) -> Self {
        static KEY: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
        let key = KEY.get_or_init(|| {
            let mut k = [0u8; 32];
            // Without randomness the decoy salts are still unique per name, only predictable.
            let _ = getrandom::fill(&mut k);
            k
        });
        let mut salt = hash.hmac(key, user.as_bytes());
        salt.truncate(24);
        let random = |n: usize| {
            let mut b = vec![0u8; n];
            let _ = getrandom::fill(&mut b);
            b
        };
        let n = hash.digest(b"").len();
        Self {
            salt,
            iterations: DEFAULT_ITERATIONS,
            stored_key: random(n),
            server_key: random(n),
        }
    }

    /// Whether `password` produces this credential (PLAIN logins against SCRAM credentials).
    pub fn matches_password(&self, hash: Hash, password: &str) -> bool {
        let d = Self::derive(hash, password, &self.salt, self.iterations);
        bool::from(d.stored_key.ct_eq(&self.stored_key))
    }
}

/// `saslname` escaping of RFC 5802 (`,` → `=2C`, `=` → `=3D`).
fn escape_name(u: &str) -> String {
    u.replace('=', "=3D").replace(',', "=2C")
}

fn unescape_name(u: &str) -> Result<String, ScramError> {
    let out = u.replace("=2C", ",").replace("=3D", "=");
    if out.contains('=') && !u.contains("=3D") {
        return Err(err("invalid escape in user name"));
    }
    Ok(out)
}

/// The value of attribute `name` in a comma-separated SCRAM message.
fn attr(msg: &str, name: char) -> Option<&str> {
    msg.split(',').find_map(|a| {
        let mut c = a.chars();
        (c.next() == Some(name) && c.next() == Some('=')).then(|| &a[2..])
    })
}

fn nonce() -> String {
    let mut b = [0u8; 24];
    getrandom::fill(&mut b).expect("the OS random source is available");
    B64.encode(b)
}

/// The last salted password a client computed, keyed by salt and iteration count.
#[derive(Default)]
pub struct SaltedCache(std::sync::Mutex<Option<Salted>>);

/// `(digest of the password, salt, iterations, salted password)`: a changed password misses.
type Salted = (Vec<u8>, Vec<u8>, u32, Vec<u8>);

impl std::fmt::Debug for SaltedCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SaltedCache")
    }
}

impl SaltedCache {
    fn get_or_compute(&self, password: &[u8], salt: &[u8], iterations: u32, compute: impl FnOnce() -> Vec<u8>) -> Vec<u8> {
        let who = Sha256::digest(password).to_vec();
        let hit = {
            let g = self.0.lock().unwrap_or_else(|e| e.into_inner());
            g.as_ref()
                .filter(|(p, s, i, _)| *p == who && s == salt && *i == iterations)
                .map(|(_, _, _, v)| v.clone())
        };
        hit.unwrap_or_else(|| {
            let v = compute();
            *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some((who, salt.to_vec(), iterations, v.clone()));
            v
        })
    }
}

/// The client side of one SCRAM exchange.
pub struct ScramClient {
    hash: Hash,
    password: String,
    client_first_bare: String,
    client_nonce: String,
    /// Set after the server's first message: the expected server signature.
    server_signature: Option<Vec<u8>>,
}

impl ScramClient {
    pub fn new(hash: Hash, username: &str, password: &str) -> Self {
        let client_nonce = nonce();
        Self {
            hash,
            password: password.to_owned(),
            client_first_bare: format!("n={},r={client_nonce}", escape_name(username)),
            client_nonce,
            server_signature: None,
        }
    }

    /// client-first-message.
    pub fn first(&self) -> Vec<u8> {
        format!("n,,{}", self.client_first_bare).into_bytes()
    }

    /// client-final-message for the server's first message.
    pub fn respond(&mut self, server_first: &[u8]) -> Result<Vec<u8>, ScramError> {
        self.respond_cached(server_first, &SaltedCache::default())
    }

    /// Like [`Self::respond`], reusing the salted password of an earlier exchange with the same
    /// salt and iteration count (PBKDF2 is the expensive part; a broker keeps a user's salt).
    pub fn respond_cached(&mut self, server_first: &[u8], cache: &SaltedCache) -> Result<Vec<u8>, ScramError> {
        let sf = std::str::from_utf8(server_first).map_err(|_| err("server-first-message is not UTF-8"))?;
        if let Some(e) = attr(sf, 'e') {
            return Err(err(format!("server refused: {e}")));
        }
        let nonce = attr(sf, 'r').ok_or_else(|| err("server-first-message has no nonce"))?;
        if !nonce.starts_with(&self.client_nonce) || nonce.len() == self.client_nonce.len() {
            return Err(err("server nonce does not extend the client nonce"));
        }
        let salt = B64
            .decode(attr(sf, 's').ok_or_else(|| err("server-first-message has no salt"))?)
            .map_err(|_| err("salt is not base64"))?;
        let iterations: u32 = attr(sf, 'i')
            .and_then(|i| i.parse().ok())
            .ok_or_else(|| err("server-first-message has no valid iteration count"))?;
        if !(1..=MAX_ITERATIONS).contains(&iterations) {
            return Err(err(format!("server asks for {iterations} iterations (at most {MAX_ITERATIONS} accepted)")));
        }
        let h = self.hash;
        let salted = cache.get_or_compute(self.password.as_bytes(), &salt, iterations, || {
            h.salted_password(self.password.as_bytes(), &salt, iterations)
        });
        let client_key = h.hmac(&salted, b"Client Key");
        let stored_key = h.digest(&client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{sf},{without_proof}", self.client_first_bare);
        let signature = h.hmac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&signature).map(|(a, b)| a ^ b).collect();
        let server_key = h.hmac(&salted, b"Server Key");
        self.server_signature = Some(h.hmac(&server_key, auth_message.as_bytes()));
        Ok(format!("{without_proof},p={}", B64.encode(proof)).into_bytes())
    }

    /// Checks the server-final-message (the server proves it knows the credential).
    pub fn verify_final(&self, server_final: &[u8]) -> Result<(), ScramError> {
        let sf = std::str::from_utf8(server_final).map_err(|_| err("server-final-message is not UTF-8"))?;
        if let Some(e) = attr(sf, 'e') {
            return Err(err(format!("server refused: {e}")));
        }
        let got = attr(sf, 'v')
            .and_then(|v| B64.decode(v).ok())
            .ok_or_else(|| err("server-final-message has no verifier"))?;
        match &self.server_signature {
            Some(want) if bool::from(want.ct_eq(&got)) => Ok(()),
            _ => Err(err("the server's signature does not match: it does not hold this user's credential")),
        }
    }
}

/// The server side of one SCRAM exchange (authentication termination).
pub struct ScramServer {
    hash: Hash,
    state: ServerState,
}

enum ServerState {
    Start,
    SentFirst {
        user: String,
        credential: ScramCredential,
        client_first_bare: String,
        server_first: String,
        nonce: String,
    },
    Done,
}

/// What the server answers to one client message.
#[derive(Debug, PartialEq, Eq)]
pub enum ServerStep {
    /// Send this and wait for the next client message.
    Continue(Vec<u8>),
    /// Authenticated as `user`; send the final message.
    Done { user: String, message: Vec<u8> },
}

impl ScramServer {
    pub fn new(hash: Hash) -> Self {
        Self {
            hash,
            state: ServerState::Start,
        }
    }

    /// Handles the next client message; `lookup` finds a user's credential for this mechanism.
    pub fn step(&mut self, msg: &[u8], lookup: &dyn Fn(&str) -> Option<ScramCredential>) -> Result<ServerStep, ScramError> {
        let text = std::str::from_utf8(msg).map_err(|_| err("message is not UTF-8"))?;
        match std::mem::replace(&mut self.state, ServerState::Done) {
            ServerState::Start => {
                let bare = match text.strip_prefix("n,,").or_else(|| text.strip_prefix("y,,")) {
                    Some(b) => b,
                    None if text.starts_with("p=") => return Err(err("channel binding is not supported")),
                    None => return Err(err("client-first-message must start with the gs2 header `n,,`")),
                };
                let user = unescape_name(attr(bare, 'n').ok_or_else(|| err("client-first-message has no user name"))?)?;
                let client_nonce = attr(bare, 'r')
                    .filter(|r| !r.is_empty() && r.len() <= 256)
                    .ok_or_else(|| err("bad client nonce"))?;
                // An unknown user gets a decoy and the same answer shape; the proof fails later.
                let credential = lookup(&user).unwrap_or_else(|| ScramCredential::decoy(self.hash, &user));
                let nonce = format!("{client_nonce}{}", self::nonce());
                let server_first = format!("r={nonce},s={},i={}", B64.encode(&credential.salt), credential.iterations);
                self.state = ServerState::SentFirst {
                    user,
                    credential,
                    client_first_bare: bare.to_owned(),
                    server_first: server_first.clone(),
                    nonce,
                };
                Ok(ServerStep::Continue(server_first.into_bytes()))
            }
            ServerState::SentFirst {
                user,
                credential,
                client_first_bare,
                server_first,
                nonce,
            } => {
                let (without_proof, proof) = text.rsplit_once(",p=").ok_or_else(|| err("client-final-message has no proof"))?;
                if attr(without_proof, 'c') != Some("biws") && attr(without_proof, 'c') != Some("eSws") {
                    return Err(err("unexpected channel binding in client-final-message"));
                }
                if attr(without_proof, 'r') != Some(nonce.as_str()) {
                    return Err(err("nonce mismatch"));
                }
                let proof = B64.decode(proof).map_err(|_| err("proof is not base64"))?;
                let h = self.hash;
                let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
                let signature = h.hmac(&credential.stored_key, auth_message.as_bytes());
                if proof.len() != signature.len() {
                    return Err(err("Authentication failed: Invalid user credentials"));
                }
                let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(a, b)| a ^ b).collect();
                if !bool::from(h.digest(&client_key).ct_eq(&credential.stored_key)) {
                    return Err(err("Authentication failed: Invalid user credentials"));
                }
                let server_signature = h.hmac(&credential.server_key, auth_message.as_bytes());
                Ok(ServerStep::Done {
                    user,
                    message: format!("v={}", B64.encode(server_signature)).into_bytes(),
                })
            }
            ServerState::Done => Err(err("the exchange is already complete")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc7677_sha256_test_vector_is_reproduced() {
        // RFC 7677 §3: user "user", password "pencil".
        let mut c = ScramClient::new(Hash::Sha256, "user", "pencil");
        c.client_nonce = "rOprNGfwEbeRWgbNEkqO".into();
        c.client_first_bare = "n=user,r=rOprNGfwEbeRWgbNEkqO".into();
        let server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let fin = c.respond(server_first).unwrap();
        assert_eq!(
            String::from_utf8(fin).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        c.verify_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=").unwrap();
        assert!(c.verify_final(b"v=AAAA").is_err(), "a wrong server signature is refused");
    }

    #[test]
    fn an_unknown_user_gets_a_first_answer_shaped_like_a_known_ones_and_fails_only_at_the_proof() {
        let hash = Hash::Sha256;
        let cred = ScramCredential::derive(hash, "pw", b"0123456789abcdef01234567", DEFAULT_ITERATIONS);
        let lookup = |u: &str| (u == "alice").then(|| cred.clone());
        let first_of = |user: &str| {
            let c = ScramClient::new(hash, user, "pw");
            let ServerStep::Continue(first) = ScramServer::new(hash).step(&c.first(), &lookup).expect("step 1 answers every user") else {
                panic!("step 1 continues")
            };
            String::from_utf8(first).unwrap()
        };
        let shape = |first: &str| {
            let salt = attr(first, 's').map(|s| B64.decode(s).unwrap().len());
            (salt, attr(first, 'i').map(str::to_owned))
        };
        let (known, unknown) = (first_of("alice"), first_of("mallory"));
        assert_eq!(
            shape(&known),
            shape(&unknown),
            "salt length and iterations tell no user apart: {known} / {unknown}"
        );
        assert_eq!(
            attr(&first_of("mallory"), 's'),
            attr(&unknown, 's'),
            "an unknown user's salt is the same every time"
        );
        let mut c = ScramClient::new(hash, "mallory", "pw");
        let mut s = ScramServer::new(hash);
        let ServerStep::Continue(first) = s.step(&c.first(), &lookup).unwrap() else {
            panic!()
        };
        let fin = c.respond(&first).unwrap();
        assert_eq!(
            s.step(&fin, &lookup).unwrap_err(),
            err("Authentication failed: Invalid user credentials"),
            "the unknown user fails as a wrong password does"
        );
    }

    #[test]
    fn client_and_server_agree_for_both_hashes_and_wrong_passwords_fail() {
        for hash in [Hash::Sha256, Hash::Sha512] {
            let cred = ScramCredential::derive(hash, "s3cret", b"saltsalt", 4096);
            let lookup = |u: &str| (u == "a,b=c").then(|| cred.clone());
            for (password, ok) in [("s3cret", true), ("wrong", false)] {
                let mut c = ScramClient::new(hash, "a,b=c", password);
                let mut s = ScramServer::new(hash);
                let ServerStep::Continue(first) = s.step(&c.first(), &lookup).unwrap() else {
                    panic!()
                };
                let fin = c.respond(&first).unwrap();
                match s.step(&fin, &lookup) {
                    Ok(ServerStep::Done { user, message }) => {
                        assert!(ok, "wrong password accepted");
                        assert_eq!(user, "a,b=c");
                        c.verify_final(&message).unwrap();
                    }
                    Err(e) => assert!(!ok && e.0.contains("Invalid user credentials"), "{e}"),
                    other => panic!("{other:?}"),
                }
            }
            assert!(cred.matches_password(hash, "s3cret") && !cred.matches_password(hash, "s3cre"));
        }
    }

    #[test]
    fn the_salted_password_is_computed_once_per_password_salt_and_iteration_count() {
        let cache = SaltedCache::default();
        let calls = std::cell::Cell::new(0);
        let compute = || {
            calls.set(calls.get() + 1);
            vec![1, 2, 3]
        };
        assert_eq!(cache.get_or_compute(b"pw", b"s", 4096, compute), vec![1, 2, 3]);
        assert_eq!(cache.get_or_compute(b"pw", b"s", 4096, compute), vec![1, 2, 3]);
        assert_eq!(calls.get(), 1, "same salt: cached");
        cache.get_or_compute(b"pw", b"t", 4096, compute);
        cache.get_or_compute(b"pw", b"t", 8192, compute);
        cache.get_or_compute(b"rotated", b"t", 8192, compute);
        assert_eq!(calls.get(), 4, "another salt, count or password: computed");
    }

    #[test]
    fn hostile_server_and_client_messages_are_refused_without_panics() {
        let mut c = ScramClient::new(Hash::Sha512, "u", "p");
        let n = c.client_nonce.clone();
        for bad in [
            "".to_owned(),
            "r=other,s=c2FsdA==,i=4096".to_owned(),
            format!("r={n},s=c2FsdA==,i=4096"), // nonce not extended
            format!("r={n}x,s=!!,i=4096"),
            format!("r={n}x,s=c2FsdA==,i=4294967295"),
            format!("r={n}x,s=c2FsdA==,i=-1"),
            "e=other-error".to_owned(),
        ] {
            assert!(c.respond(bad.as_bytes()).is_err(), "accepted {bad:?}");
        }
        let mut s = ScramServer::new(Hash::Sha512);
        let none = |_: &str| None;
        // (A well-formed first message of an unknown user is not among them: it gets a decoy.)
        for bad in [&b"\xff\xfe"[..], b"", b"n,,", b"n,,n=u", b"p=tls-unique,,n=u,r=x"] {
            assert!(s.step(bad, &none).is_err());
            s = ScramServer::new(Hash::Sha512);
        }
    }
}
