//! SASL logins and their re-authentication (KIP-368). A broker with `connections.max.reauth.ms`
//! (or credentials that expire) answers the last SaslAuthenticate (v1+) with a session lifetime,
//! and closes the connection when a request other than SaslHandshake arrives after the session
//! expired. A [`Session`] remembers the login and when to renew it: at 85 % of the lifetime (as
//! Kafka's Java client does, at the low end of its 85–95 % window), the connection's owner runs
//! the SASL exchange again on the same connection, between two requests, before the next request
//! goes out ([`Session::renew`]). The exchange itself ([`login`]) is the same for the first login
//! on a fresh connection and for every renewal; only how its requests travel differs
//! ([`SaslRoundTrip`]: straight on a fresh stream, inline on a pipelined connection).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse};
use kafka_protocol::protocol::{Request, StrBytes};
use tokio::time::Instant;

use super::scram::{Hash, ScramClient};
use super::stream::SaslLogin;
use crate::error::ProtocolError;

/// Renewals done by every session of this process.
static RENEWALS: AtomicU64 = AtomicU64::new(0);

/// How many SASL logins this process renewed on their connections (KIP-368), in total.
pub fn renewals_total() -> u64 {
    RENEWALS.load(Ordering::Relaxed)
}

/// How one SASL request reaches the broker and its response comes back (implemented by each
/// connection type for its own framing; used with static dispatch only).
#[allow(async_fn_in_trait)]
pub trait SaslRoundTrip {
    /// Sends `req` at `version` and returns its response.
    async fn round_trip<R: Request>(&mut self, req: &R, version: i16) -> Result<R::Response, ProtocolError>;
}

/// Which share of the broker's session lifetime passes before the login is renewed.
const RENEW_AT_PERCENT: u32 = 85;

/// When a session that began at `began` and lasts `lifetime` is renewed.
fn renew_at(lifetime: Option<Duration>, began: Instant) -> Option<Instant> {
    lifetime.map(|l| began + l * RENEW_AT_PERCENT / 100)
}

/// A login's session with one broker: what to log in with again, and when.
#[derive(Clone, Debug)]
pub struct Session {
    login: SaslLogin,
    /// When to renew (`None`: the broker set no lifetime, the session never expires).
    renew_at: Option<Instant>,
    /// Renewals done on this connection.
    renewals: u64,
}

impl Session {
    /// A session that began at `began` and lasts `lifetime` (as the broker said).
    pub(crate) fn new(login: SaslLogin, lifetime: Option<Duration>, began: Instant) -> Self {
        Self {
            login,
            renew_at: renew_at(lifetime, began),
            renewals: 0,
        }
    }

    /// Whether the login must be renewed before the next request (at `now`).
    pub fn due(&self, now: Instant) -> bool {
        self.renew_at.is_some_and(|t| now >= t)
    }

    /// How many times this session was renewed.
    pub fn renewals(&self) -> u64 {
        self.renewals
    }

    /// Logs in again over `t` (the connection, with no request of its own in flight) and starts
    /// the new session's clock.
    pub async fn renew<T: SaslRoundTrip>(&mut self, t: &mut T) -> Result<(), ProtocolError> {
        let began = Instant::now();
        let lifetime = login(t, &self.login).await?;
        self.renew_at = renew_at(lifetime, began);
        self.renewals += 1;
        RENEWALS.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(renewals = self.renewals, ?lifetime, "SASL session renewed (KIP-368 re-authentication)");
        Ok(())
    }
}

/// Runs the SASL exchange for `login` over `t` (SaslHandshake v1, then SaslAuthenticate v2: one
/// step for PLAIN, two for SCRAM) and returns the session lifetime the broker set, if any.
pub(crate) async fn login<T: SaslRoundTrip>(t: &mut T, login: &SaslLogin) -> Result<Option<Duration>, ProtocolError> {
    let auth_err = |detail: String| ProtocolError::Authentication { addr: String::new(), detail };
    let mut req = SaslHandshakeRequest::default();
    req.mechanism = StrBytes::from_static_str(login.mechanism.name());
    let resp: SaslHandshakeResponse = t.round_trip(&req, 1).await?;
    if resp.error_code != 0 {
        return Err(auth_err(format!(
            "the broker does not enable SASL mechanism {} (error {}; it offers {})",
            login.mechanism.name(),
            resp.error_code,
            resp.mechanisms.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(", ")
        )));
    }
    let mut lifetime_ms = 0i64;
    let mut step = async |t: &mut T, bytes: Vec<u8>| -> Result<Bytes, ProtocolError> {
        let mut req = SaslAuthenticateRequest::default();
        req.auth_bytes = Bytes::from(bytes);
        let resp: SaslAuthenticateResponse = t.round_trip(&req, 2).await?;
        if resp.error_code != 0 {
            let msg = resp.error_message.as_ref().map(|m| m.as_str().to_owned()).unwrap_or_default();
            return Err(auth_err(format!("authentication failed (error {}): {msg}", resp.error_code)));
        }
        lifetime_ms = resp.session_lifetime_ms;
        Ok(resp.auth_bytes)
    };
    if let Some(source) = login.token_source() {
        let of = login.clone();
        let token = source
            .token(move || of.client_credentials(None))
            .await
            .map_err(|e| auth_err(format!("no OAuth access token: {e}")))?;
        let challenge = step(t, super::oauth::message::client_message(&token)).await?;
        if !challenge.is_empty() {
            // RFC 7628: the server's error is a JSON challenge; the client answers with a lone
            // separator and the server then fails the exchange.
            let status = String::from_utf8_lossy(&challenge[..challenge.len().min(256)]).into_owned();
            return Err(match step(t, vec![0x01]).await {
                Err(e) => auth_err(format!("the broker refused the OAuth token ({status}): {e}")),
                Ok(_) => auth_err(format!("the broker refused the OAuth token ({status})")),
            });
        }
        return Ok(u64::try_from(lifetime_ms).ok().filter(|&ms| ms > 0).map(Duration::from_millis));
    }
    let (username, password) = login.credentials().map_err(|e| auth_err(format!("credentials: {e}")))?;
    match Hash::of(login.mechanism) {
        None => {
            let mut msg = Vec::with_capacity(username.len() + password.len() + 2);
            msg.push(0);
            msg.extend_from_slice(username.as_bytes());
            msg.push(0);
            msg.extend_from_slice(password.as_bytes());
            step(t, msg).await?;
        }
        Some(hash) => {
            let mut scram = ScramClient::new(hash, &username, &password);
            let server_first = step(t, scram.first()).await?;
            let fin = scram.respond_cached(&server_first, login.salted()).map_err(|e| auth_err(e.to_string()))?;
            let server_final = step(t, fin).await?;
            scram.verify_final(&server_final).map_err(|e| auth_err(e.to_string()))?;
        }
    }
    // A lifetime that is not positive (or absurdly large) means none.
    Ok(u64::try_from(lifetime_ms).ok().filter(|&ms| ms > 0).map(Duration::from_millis))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    use bytes::Bytes;
    use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::client::Connection;
    use crate::codec::{decode_request, encode_response};
    use crate::security::ClientSecurity;
    use crate::shared_client::SharedConnection;

    fn login() -> SaslLogin {
        SaslLogin::for_tests()
    }

    #[test]
    fn a_session_is_renewed_at_85_percent_of_its_lifetime_and_one_without_a_lifetime_never() {
        let t0 = Instant::now();
        let s = Session::new(login(), Some(Duration::from_secs(10)), t0);
        assert!(!s.due(t0 + Duration::from_millis(8_499)));
        assert!(s.due(t0 + Duration::from_millis(8_500)));
        let forever = Session::new(login(), None, t0);
        assert!(!forever.due(t0 + Duration::from_secs(1_000_000)));
    }

    /// A broker that behaves as Kafka does with `connections.max.reauth.ms = lifetime`: PLAIN
    /// logins (SaslHandshake v1, SaslAuthenticate v2 answering the session lifetime), ApiVersions
    /// v0 answered while the session holds, and the connection closed when any other request
    /// arrives after it expired. Counts the logins it accepted.
    async fn expiring_broker(lifetime: Duration, logins: Arc<AtomicUsize>) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut expires = None;
            loop {
                let mut len = [0u8; 4];
                if s.read_exact(&mut len).await.is_err() {
                    return;
                }
                let mut frame = len.to_vec();
                frame.resize(4 + u32::from_be_bytes(len) as usize, 0);
                s.read_exact(&mut frame[4..]).await.unwrap();
                let frame = Bytes::from(frame);
                let key = i16::from_be_bytes([frame[4], frame[5]]);
                let answer = if key == ApiKey::SaslHandshake as i16 {
                    let (h, _): (_, SaslHandshakeRequest) = decode_request(&frame, ApiKey::SaslHandshake, 1).unwrap();
                    let mut r = SaslHandshakeResponse::default();
                    r.mechanisms = vec![StrBytes::from_static_str("PLAIN")];
                    encode_response(h.correlation_id, ApiKey::SaslHandshake, 1, &r).unwrap()
                } else if key == ApiKey::SaslAuthenticate as i16 {
                    let (h, _): (_, SaslAuthenticateRequest) = decode_request(&frame, ApiKey::SaslAuthenticate, 2).unwrap();
                    let mut r = SaslAuthenticateResponse::default();
                    r.session_lifetime_ms = i64::try_from(lifetime.as_millis()).unwrap();
                    expires = Some(Instant::now() + lifetime);
                    logins.fetch_add(1, Ordering::SeqCst);
                    encode_response(h.correlation_id, ApiKey::SaslAuthenticate, 2, &r).unwrap()
                } else {
                    if expires.is_none_or(|e| Instant::now() >= e) {
                        return; // Kafka: "Disconnecting expired channel"
                    }
                    let (h, _): (_, ApiVersionsRequest) = decode_request(&frame, ApiKey::ApiVersions, 0).unwrap();
                    encode_response(h.correlation_id, ApiKey::ApiVersions, 0, &ApiVersionsResponse::default()).unwrap()
                };
                if s.write_all(&answer).await.is_err() {
                    return;
                }
            }
        });
        addr
    }

    #[tokio::test]
    async fn a_shared_connection_renews_its_login_before_the_broker_expires_the_session() {
        let logins = Arc::new(AtomicUsize::new(0));
        let addr = expiring_broker(Duration::from_millis(400), logins.clone()).await;
        let conn = Connection::connect_with(&addr, Duration::from_secs(5), "t", &ClientSecurity::sasl_for_tests())
            .await
            .unwrap();
        let shared = SharedConnection::new(conn);
        let req = ApiVersionsRequest::default();
        for i in 0..15 {
            // Several callers at once: the renewal waits for their answers, then goes first.
            let (a, b) = tokio::join!(shared.call(&req, 0), shared.call(&req, 0));
            assert!(a.is_ok() && b.is_ok(), "request pair {i} answered over 1.5 s of 400 ms sessions: {a:?} {b:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            logins.load(Ordering::SeqCst) >= 3,
            "the login was renewed on the connection: {} logins",
            logins.load(Ordering::SeqCst)
        );
    }

    #[tokio::test]
    async fn a_sequential_connection_renews_its_login_before_the_broker_expires_the_session() {
        let logins = Arc::new(AtomicUsize::new(0));
        let addr = expiring_broker(Duration::from_millis(400), logins.clone()).await;
        let mut conn = Connection::connect_with(&addr, Duration::from_secs(5), "t", &ClientSecurity::sasl_for_tests())
            .await
            .unwrap();
        for i in 0..15 {
            conn.send(&ApiVersionsRequest::default(), 0)
                .await
                .unwrap_or_else(|e| panic!("request {i} answered over 1.5 s of 400 ms sessions: {e}"));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(conn.renewals() >= 2, "renewed on the connection: {}", conn.renewals());
        assert_eq!(logins.load(Ordering::SeqCst) as u64, conn.renewals() + 1);
    }
}
