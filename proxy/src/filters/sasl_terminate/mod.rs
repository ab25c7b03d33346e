//! Authentication termination (`listener.auth.mode = "terminate"`): the proxy answers SaslHandshake
//! and SaslAuthenticate itself — PLAIN and SCRAM-SHA-256/512 against the salted credentials file,
//! OAUTHBEARER tokens against the identity provider's keys (`[listener.auth.oauthbearer]`) —
//! and the broker connection is already authenticated with the proxy's own credentials. Until a
//! client authenticated, only ApiVersions and SASL requests are served: anything else closes the
//! connection, as a Kafka SASL listener does; after a failed authentication too. The principal
//! (user name) goes where the pass-through observer puts it, for `authz`. With no mechanisms
//! configured, clients are authenticated by their TLS certificate (checked in the handshake) and
//! SASL requests are refused. Reading and reloading the credentials file belongs here too
//! ([`CredentialStore`]), and so does slowing repeated failed logins (`login_backoff`); the SCRAM
//! math to `kmp_protocol::security::scram`.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use kmp_config::SaslMechanism;
use kmp_protocol::codec::{decode_request, encode_response};
use kmp_protocol::kafka_protocol::ResponseError;
use kmp_protocol::kafka_protocol::messages::{ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse};
use kmp_protocol::kafka_protocol::protocol::StrBytes;
use kmp_protocol::security::credentials::Credentials;
use kmp_protocol::security::scram::{Hash, ScramServer, ServerStep};
use kmp_protocol::{ProtocolError, Side};

use super::api::{BoxFuture, Conn, Exchange, Filter, Flow};
use super::identity::{Progress, SaslState};
use crate::error::ProxyError;
use crate::net::tls::Reloadable;

mod login_backoff;

const UNSUPPORTED_SASL_MECHANISM: i16 = ResponseError::UnsupportedSaslMechanism.code();
const ILLEGAL_SASL_STATE: i16 = ResponseError::IllegalSaslState.code();
const SASL_AUTHENTICATION_FAILED: i16 = ResponseError::SaslAuthenticationFailed.code();
/// RFC 7628's error status for a refused token, as Kafka's OAUTHBEARER server sends it (challenge
/// and final error message alike).
const INVALID_TOKEN: &str = r#"{"status":"invalid_token"}"#;

/// The credentials file, reloadable.
pub(crate) struct CredentialStore {
    path: PathBuf,
    /// `limits.max_security_file_bytes`.
    max_bytes: u64,
    current: RwLock<Arc<Credentials>>,
}

impl CredentialStore {
    /// Loads `path` now, refusing a file longer than `max_bytes` (an unreadable or invalid file
    /// stops the proxy at startup).
    pub(crate) fn load(path: PathBuf, max_bytes: u64) -> Result<Arc<Self>, String> {
        let c = read_credentials(&path, max_bytes)?;
        Ok(Arc::new(Self {
            path,
            max_bytes,
            current: RwLock::new(Arc::new(c)),
        }))
    }

    fn get(&self) -> Arc<Credentials> {
        self.current.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Reloadable for CredentialStore {
    fn name(&self) -> &str {
        "listener.auth.credentials_file"
    }
    fn files(&self) -> Vec<PathBuf> {
        vec![self.path.clone()]
    }
    fn reload(&self) -> Result<(), String> {
        let c = read_credentials(&self.path, self.max_bytes)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(c);
        Ok(())
    }
}

/// The credentials in `path`, read with the size cap ([`crate::net::tls::read_capped`]).
fn read_credentials(path: &std::path::Path, max_bytes: u64) -> Result<Credentials, String> {
    let bytes = crate::net::tls::read_capped(path, "credentials file", max_bytes)?;
    let text = String::from_utf8(bytes).map_err(|_| format!("credentials file {} is not UTF-8", path.display()))?;
    Credentials::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The termination filter.
pub(crate) struct SaslTerminator {
    mechanisms: Vec<SaslMechanism>,
    credentials: Option<Arc<CredentialStore>>,
    backoff: login_backoff::LoginBackoff,
    /// `listener.auth.session_lifetime_ms` (`None`: sessions never end).
    lifetime: Option<std::time::Duration>,
    /// OAUTHBEARER: checks client tokens (`None` when the mechanism is not offered).
    oauth: Option<Arc<kmp_protocol::security::oauth::Validator>>,
}

impl SaslTerminator {
    pub(crate) fn new(
        mechanisms: &[String],
        credentials: Option<Arc<CredentialStore>>,
        session_lifetime_ms: u64,
        oauth: Option<Arc<kmp_protocol::security::oauth::Validator>>,
    ) -> Self {
        Self {
            mechanisms: mechanisms
                .iter()
                .filter_map(|m| SaslMechanism::parse(m))
                .filter(|m| *m != SaslMechanism::OAuthBearer || oauth.is_some())
                .collect(),
            credentials,
            backoff: Default::default(),
            lifetime: (session_lifetime_ms > 0).then(|| std::time::Duration::from_millis(session_lifetime_ms)),
            oauth,
        }
    }

    fn names(&self) -> Vec<StrBytes> {
        self.mechanisms.iter().map(|m| StrBytes::from_static_str(m.name())).collect()
    }
}

fn refuse(detail: &str) -> ProxyError {
    ProxyError::Protocol(ProtocolError::Malformed {
        what: "request",
        detail: detail.to_owned(),
        side: Side::Client,
    })
}

/// Whether `conn` must still authenticate with SASL before it may send anything but ApiVersions
/// and SASL requests (termination mode with mechanisms offered, not authenticated yet).
pub(crate) fn authenticating(conn: &Conn) -> bool {
    let auth = &conn.listener.auth;
    auth.mode == kmp_config::AuthMode::Terminate && !auth.mechanisms.is_empty() && !matches!(*lock(conn), Progress::Authenticated { .. })
}

fn lock(conn: &Conn) -> std::sync::MutexGuard<'_, Progress> {
    conn.auth.lock().unwrap_or_else(|e| e.into_inner())
}

impl Filter for SaslTerminator {
    fn wants_request(&self, x: &Exchange, conn: &Conn) -> bool {
        let sasl_api = x.api_key == ApiKey::SaslHandshake as i16 || x.api_key == ApiKey::SaslAuthenticate as i16;
        // The common case, an authenticated connection's ordinary request, costs one lock (and
        // with a session lifetime, reading the clock).
        sasl_api
            || match &*lock(conn) {
                Progress::Authenticated { until } => until.is_some_and(|t| std::time::Instant::now() >= t),
                _ => !self.mechanisms.is_empty(),
            }
    }

    fn on_request<'a>(&'a self, x: &'a mut Exchange, conn: &'a Conn) -> BoxFuture<'a, Result<Flow, ProxyError>> {
        Box::pin(async move {
            if matches!(*lock(conn), Progress::Failed) {
                return Err(refuse("request after a failed SASL authentication"));
            }
            if x.api_key == ApiKey::SaslHandshake as i16 {
                return self.handshake(x, conn).map(|f| Flow::Answer(Some(f)));
            }
            if x.api_key == ApiKey::SaslAuthenticate as i16 {
                let (frame, version, id) = (x.frame().clone(), x.api_version, x.correlation_id);
                return self.authenticate(frame, version, id, conn).await.map(|f| Flow::Answer(Some(f)));
            }
            if let Progress::Authenticated { until: Some(t) } = &*lock(conn)
                && std::time::Instant::now() >= *t
            {
                // As a Kafka broker does with an expired session (KIP-368).
                conn.shared.metrics.connection_closed("session_expired");
                return Err(refuse(&format!(
                    "api key {} after the client's SASL session ended (listener.auth.session_lifetime_ms) without re-authentication",
                    x.api_key
                )));
            }
            if x.api_key == ApiKey::ApiVersions as i16 {
                return Ok(Flow::Continue);
            }
            conn.shared.metrics.connection_closed("unauthenticated_request");
            Err(refuse(&format!(
                "api key {} before SASL authentication (listener.auth.mode = terminate)",
                x.api_key
            )))
        })
    }
}

impl SaslTerminator {
    fn handshake(&self, x: &Exchange, conn: &Conn) -> Result<Bytes, ProxyError> {
        let (_, req) = decode_request::<SaslHandshakeRequest>(x.frame(), ApiKey::SaslHandshake, x.api_version)?;
        let mut resp = SaslHandshakeResponse::default();
        resp.mechanisms = self.names();
        let mut progress = lock(conn);
        // A handshake on an authenticated connection begins a re-authentication (KIP-368) when
        // sessions have a lifetime; its login must name the same principal.
        let reauth_of = match &*progress {
            Progress::Authenticated { .. } if self.lifetime.is_some() => conn.sasl.lock().unwrap_or_else(|e| e.into_inner()).principal.clone().map(Some),
            Progress::Start => Some(None),
            _ => None,
        };
        match (reauth_of, SaslMechanism::parse(req.mechanism.as_str()).filter(|m| self.mechanisms.contains(m))) {
            (Some(reauth_of), Some(m)) => {
                *progress = Progress::Handshaken(m, Hash::of(m).map(|h| Box::new(ScramServer::new(h))), reauth_of);
                let mut s = conn.sasl.lock().unwrap_or_else(|e| e.into_inner());
                *s = SaslState {
                    started: true,
                    mechanism: m.name().to_owned(),
                    ..SaslState::default()
                };
            }
            (Some(_), None) => resp.error_code = UNSUPPORTED_SASL_MECHANISM,
            _ => resp.error_code = ILLEGAL_SASL_STATE,
        }
        Ok(encode_response(x.correlation_id, ApiKey::SaslHandshake, x.api_version, &resp)?)
    }

    async fn authenticate(&self, frame: Bytes, version: i16, correlation_id: i32, conn: &Conn) -> Result<Bytes, ProxyError> {
        let (_, req) = decode_request::<SaslAuthenticateRequest>(&frame, ApiKey::SaslAuthenticate, version)?;
        let x = (correlation_id, version);
        // An address that failed to log in recently waits before its attempt is checked.
        let wait = self.backoff.delay(conn.peer.ip());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let (challenged, oauth) = match &*lock(conn) {
            Progress::Challenged => (true, false),
            Progress::Handshaken(SaslMechanism::OAuthBearer, _, _) => (false, true),
            _ => (false, false),
        };
        if challenged {
            // The client acknowledged the error challenge: now the failure, worded as Kafka does
            // (its back-off was counted with the refusal).
            return self.failed(x, conn, INVALID_TOKEN.to_owned(), false);
        }
        if oauth {
            return self.oauth_login(x, &req.auth_bytes, conn).await;
        }
        let credentials = self.credentials.as_ref().map(|c| c.get()).unwrap_or_default();
        let step = match self.scram_step(conn, &req.auth_bytes, &credentials) {
            Ok(step) => step,
            Err(()) => return self.answer(x, ILLEGAL_SASL_STATE, "SaslAuthenticate without a successful SaslHandshake", Bytes::new(), None),
        };
        let outcome: Result<(Option<String>, Bytes), String> = match step {
            Some(Ok(ServerStep::Continue(msg))) => Ok((None, Bytes::from(msg))),
            Some(Ok(ServerStep::Done { user, message })) => Ok((Some(user), Bytes::from(message))),
            Some(Err(e)) => Err(e.0),
            None => {
                let bytes = req.auth_bytes.clone();
                tokio::task::spawn_blocking(move || check_plain(&credentials, &bytes))
                    .await
                    .unwrap_or_else(|_| Err("internal error".into()))
                    .map(|user| (Some(user), Bytes::new()))
            }
        };
        match outcome {
            Ok((None, msg)) => self.answer_step(x, msg),
            Ok((Some(user), msg)) => self.authenticated(x, conn, user, msg, self.lifetime),
            Err(why) => self.failed(x, conn, why, true),
        }
    }

    /// OAUTHBEARER: the client's token checked against the identity provider's keys; the
    /// session ends no later than the token (when sessions have a lifetime at all, as in Kafka).
    async fn oauth_login(&self, x: (i32, i16), auth: &[u8], conn: &Conn) -> Result<Bytes, ProxyError> {
        let Some(validator) = self.oauth.clone() else {
            return self.failed(x, conn, "OAUTHBEARER is not offered".into(), true);
        };
        let token = match kmp_protocol::security::oauth::message::parse_client_message(auth) {
            Ok(t) => t,
            Err(why) => return self.failed(x, conn, why.to_owned(), true),
        };
        match validator.verify(token).await {
            Ok(v) => {
                // Until the token's exp, at least a second (a token inside its clock-skew window
                // gets one second, then a re-authentication), never 0 ("never ends").
                let session = self.lifetime.map(|l| l.min(v.time_left(std::time::Duration::from_secs(1))));
                self.authenticated(x, conn, v.principal, Bytes::new(), session)
            }
            Err(refusal) => {
                match &refusal {
                    kmp_protocol::security::oauth::Refusal::Keys(e) => {
                        tracing::warn!(peer = %conn.peer, error = %e, "cannot check a client's OAuth token: the identity provider's keys are not available")
                    }
                    kmp_protocol::security::oauth::Refusal::Token(e) => {
                        // Counted now: a client that leaves after the challenge is slowed too.
                        self.backoff.failed(conn.peer.ip());
                        tracing::info!(peer = %conn.peer, why = %e, "client OAuth token refused")
                    }
                }
                // As a Kafka broker answers (RFC 7628 §3.2.2): an error challenge first; the
                // client's acknowledgement then gets the failure.
                *lock(conn) = Progress::Challenged;
                self.answer_step(x, Bytes::from_static(INVALID_TOKEN.as_bytes()))
            }
        }
    }

    /// A login of `user` succeeded: the session starts (`session`: how long it lasts).
    fn authenticated(&self, x: (i32, i16), conn: &Conn, user: String, msg: Bytes, session: Option<std::time::Duration>) -> Result<Bytes, ProxyError> {
        let reauth_of = match &*lock(conn) {
            Progress::Handshaken(_, _, reauth_of) => reauth_of.clone(),
            _ => None,
        };
        if reauth_of.as_ref().is_some_and(|p| *p != user) {
            // Kafka refuses a re-authentication as another principal.
            *lock(conn) = Progress::Failed;
            conn.shared.metrics.refused("sasl_reauthentication_principal_changed", 1);
            tracing::info!(peer = %conn.peer, "client re-authentication named another principal; closing");
            return self.answer(
                x,
                SASL_AUTHENTICATION_FAILED,
                "Cannot change principals during re-authentication",
                Bytes::new(),
                None,
            );
        }
        self.backoff.succeeded(conn.peer.ip());
        if reauth_of.is_some() {
            conn.shared.metrics.client_reauthentications.inc();
        }
        *lock(conn) = Progress::Authenticated {
            until: session.map(|l| std::time::Instant::now() + l),
        };
        let mut s = conn.sasl.lock().unwrap_or_else(|e| e.into_inner());
        s.principal = Some(user.clone());
        s.accepted_steps = 1;
        tracing::debug!(principal = %user, "client authenticated");
        drop(s);
        self.answer(x, 0, "", msg, session)
    }

    /// A login failed for `why`: the connection is closed at its next request. `count`: the
    /// failure slows the peer's next logins (`login_backoff`).
    fn failed(&self, x: (i32, i16), conn: &Conn, why: String, count: bool) -> Result<Bytes, ProxyError> {
        if count {
            self.backoff.failed(conn.peer.ip());
        }
        *lock(conn) = Progress::Failed;
        conn.shared.metrics.refused("sasl_authentication_failed", 1);
        tracing::info!(peer = %conn.peer, %why, "client SASL authentication failed");
        let mechanism = conn.sasl.lock().unwrap_or_else(|e| e.into_inner()).mechanism.clone();
        let msg = broker_message(&mechanism, why);
        self.answer(x, SASL_AUTHENTICATION_FAILED, &msg, Bytes::new(), None)
    }

    /// The SCRAM step for `auth` (`None`: PLAIN, checked by the caller); `Err` when no handshake
    /// preceded (the connection is then failed). Synchronous: no lock is held across an await.
    #[allow(clippy::type_complexity)]
    fn scram_step(
        &self,
        conn: &Conn,
        auth: &[u8],
        credentials: &Credentials,
    ) -> Result<Option<Result<ServerStep, kmp_protocol::security::scram::ScramError>>, ()> {
        let mut progress = lock(conn);
        match &mut *progress {
            Progress::Handshaken(SaslMechanism::Plain, _, _) => Ok(None),
            Progress::Handshaken(mechanism, Some(scram), _) => {
                let hash = Hash::of(*mechanism);
                Ok(Some(scram.step(auth, &|user| hash.and_then(|h| credentials.scram(user, h)))))
            }
            _ => {
                *progress = Progress::Failed;
                Err(())
            }
        }
    }

    /// An intermediate SCRAM step's answer (no session lifetime yet, as Kafka answers it).
    fn answer_step(&self, (correlation_id, version): (i32, i16), auth: Bytes) -> Result<Bytes, ProxyError> {
        let mut resp = SaslAuthenticateResponse::default();
        resp.error_message = Some(StrBytes::from_static_str(""));
        resp.auth_bytes = auth;
        Ok(encode_response(correlation_id, ApiKey::SaslAuthenticate, version, &resp)?)
    }

    /// The final answer: `code` 0 (authenticated, with the session lifetime) or the failure.
    fn answer(
        &self,
        (correlation_id, version): (i32, i16),
        code: i16,
        message: &str,
        auth: Bytes,
        session: Option<std::time::Duration>,
    ) -> Result<Bytes, ProxyError> {
        let mut resp = SaslAuthenticateResponse::default();
        resp.error_code = code;
        // Kafka's answer carries an empty message on success, not none.
        resp.error_message = Some(StrBytes::from_string(message.to_owned()));
        resp.auth_bytes = auth;
        // Told on success (KIP-368: SaslAuthenticate v1+); 0: the session does not end.
        resp.session_lifetime_ms = match (code, session) {
            (0, Some(l)) => i64::try_from(l.as_millis()).unwrap_or(i64::MAX),
            _ => 0,
        };
        Ok(encode_response(correlation_id, ApiKey::SaslAuthenticate, version, &resp)?)
    }
}

/// The text a Kafka broker sends for a failed login, so clients show the same through the proxy:
/// SCRAM's wrong password or unknown user as Kafka's ScramSaslServer words it, PLAIN's as-is.
fn broker_message(mechanism: &str, why: String) -> String {
    if mechanism == "OAUTHBEARER" && why == INVALID_TOKEN {
        return why;
    }
    if mechanism.starts_with("SCRAM-") && why.contains("Invalid user credentials") {
        return format!("Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}");
    }
    if why.starts_with("Authentication failed") {
        why
    } else {
        format!("Authentication failed: {why}")
    }
}

/// PLAIN (`authzid NUL user NUL password`) checked against the salted credentials; the user on
/// success. The authorization id must be empty or the user itself (Kafka's rule).
fn check_plain(credentials: &Credentials, msg: &[u8]) -> Result<String, String> {
    let mut parts = msg.splitn(3, |&b| b == 0);
    let (authzid, user, password) = match (parts.next(), parts.next(), parts.next()) {
        (Some(a), Some(u), Some(p)) => (a, u, p),
        _ => return Err("Authentication failed: invalid PLAIN message".into()),
    };
    let (Ok(user), Ok(password)) = (std::str::from_utf8(user), std::str::from_utf8(password)) else {
        return Err("Authentication failed: invalid PLAIN message".into());
    };
    if !authzid.is_empty() && authzid != user.as_bytes() {
        return Err("Authentication failed: Client requested an authorization id that is different from username".into());
    }
    if user.is_empty() || !credentials.check_plain(user, password) {
        return Err("Authentication failed: Invalid username or password".into());
    }
    Ok(user.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmp_protocol::security::credentials::entry;

    #[test]
    fn failed_logins_are_worded_as_a_broker_words_them() {
        assert_eq!(
            broker_message("SCRAM-SHA-512", "Authentication failed: Invalid user credentials".into()),
            "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"
        );
        assert_eq!(
            broker_message("PLAIN", "Authentication failed: Invalid username or password".into()),
            "Authentication failed: Invalid username or password"
        );
        assert_eq!(
            broker_message("SCRAM-SHA-256", "nonce mismatch".into()),
            "Authentication failed: nonce mismatch"
        );
    }

    #[test]
    fn plain_logins_are_checked_against_salted_credentials() {
        let c = Credentials::parse(&entry("alice", SaslMechanism::ScramSha256, "pw", 4096).unwrap()).unwrap();
        assert_eq!(check_plain(&c, b"\0alice\0pw"), Ok("alice".to_owned()));
        assert_eq!(check_plain(&c, b"alice\0alice\0pw"), Ok("alice".to_owned()));
        assert!(check_plain(&c, b"\0alice\0nope").is_err());
        assert!(check_plain(&c, b"bob\0alice\0pw").is_err(), "another authorization id");
        assert!(check_plain(&c, b"\0alice").is_err());
        assert!(check_plain(&c, b"\0\0pw").is_err());
    }
}
