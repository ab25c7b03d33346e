//! The proxy's own access tokens (OAuth 2 client credentials grant, as Kafka's
//! `OAuthBearerLoginCallbackHandler` gets them): fetched from the token endpoint when a login needs
//! one, kept while most of their lifetime is left, refreshed after 80 % of it (Kafka's
//! `sasl.login.refresh.window.factor`).
//!
//! A slow or failing endpoint never stalls logins that have a usable token: past the refresh point
//! the held token is handed out at once while one background fetch replaces it, as long as it has
//! [`MIN_LEFT`] to live. Only a login with no such token waits, for the one fetch in flight
//! (single flight; if it fails, a token still valid is used); after a failure the next fetch waits
//! out the back-off (1 s doubling to 60 s) and logins fail fast meanwhile.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use tokio::time::Instant;

use super::OAuthError;
use super::http::{HttpClient, excerpt, form_encode};
use crate::Backoff;

/// Tokens fetched by every source of this process.
static FETCHED: AtomicU64 = AtomicU64::new(0);

/// How many access tokens this process fetched from token endpoints, in total.
pub fn tokens_fetched_total() -> u64 {
    FETCHED.load(Ordering::Relaxed)
}

/// Longest a token endpoint may take to answer.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest lifetime believed (a token that claims more is refreshed after 80 % of a day).
const MAX_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// Least lifetime a token must have left to be used for a login while its replacement is fetched
/// in the background: a broker bounds the session by the token's expiry and refuses a
/// re-authentication within a second of the last one, so a token about to expire would make the
/// next renewal come too soon.
const MIN_LEFT: Duration = Duration::from_secs(5);

/// Pauses after failed fetches.
const RETRY: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(60));

/// Client id, secret and scope of one fetch (resolved from their references each time).
pub struct ClientCredentials {
    pub id: String,
    pub secret: String,
    pub scope: Option<String>,
}

#[derive(Clone)]
struct Held {
    value: String,
    refresh_at: Instant,
    expires_at: Instant,
}

#[derive(Default)]
struct State {
    held: Option<Held>,
    /// A background refresh is running.
    refreshing: bool,
    /// No fetch before this (after failures).
    retry_at: Option<Instant>,
    /// The last failure, told to logins that cannot wait for the back-off.
    last_error: Option<OAuthError>,
    backoff: Option<Backoff>,
}

/// Where one login's tokens come from, and the current one.
pub struct TokenSource {
    http: HttpClient,
    header_urlencode: bool,
    /// `sasl.oauthbearer.scope` (a scope in a referenced JAAS line wins).
    scope: Option<String>,
    state: std::sync::Mutex<State>,
    /// Single flight of the fetches a login waits for.
    fetch: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSource")
            .field("token_endpoint", &self.http.endpoint().url)
            .finish_non_exhaustive()
    }
}

/// What a login does with the state it found.
enum Plan {
    Use(String),
    UseAndRefresh(String),
    Wait,
    Fail(OAuthError),
}

impl TokenSource {
    /// A source for `props` (`tls`: for an https endpoint, the CAs to trust besides the system's).
    pub fn new(props: &kmp_config::OAuthClientProps, tls: Option<&kmp_config::PemSource>) -> Result<Self, OAuthError> {
        let endpoint = super::http::Endpoint::parse(&props.token_endpoint_url)?;
        let config = if endpoint.https {
            Some(crate::security::tls::https_client_config(tls).map_err(|e| OAuthError::Config(e.to_string()))?)
        } else {
            None
        };
        Ok(Self {
            http: HttpClient::new(endpoint, config, FETCH_TIMEOUT)?,
            header_urlencode: props.header_urlencode,
            scope: props.scope.clone(),
            state: Default::default(),
            fetch: tokio::sync::Mutex::new(()),
        })
    }

    /// The configured scope.
    pub fn scope(&self) -> Option<&str> {
        self.scope.as_deref()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn plan(&self, now: Instant) -> Plan {
        let mut st = self.state();
        match st.held.clone() {
            Some(h) if now < h.refresh_at => Plan::Use(h.value),
            Some(h) if now + MIN_LEFT <= h.expires_at => {
                let due = !st.refreshing && st.retry_at.is_none_or(|t| now >= t);
                if due {
                    st.refreshing = true;
                    Plan::UseAndRefresh(h.value)
                } else {
                    Plan::Use(h.value)
                }
            }
            held => match (st.retry_at, &st.last_error) {
                // Inside the back-off: the last few seconds of the held token, or the last error.
                (Some(t), Some(e)) if now < t => match held.filter(|h| now < h.expires_at) {
                    Some(h) => Plan::Use(h.value),
                    None => Plan::Fail(e.clone()),
                },
                _ => Plan::Wait,
            },
        }
    }

    /// A token with time left: the one held (a background refresh replaces it after 80 % of its
    /// life), or a new one from the endpoint when none is valid. `credentials` is asked only when
    /// a fetch happens.
    pub async fn token(self: &Arc<Self>, credentials: impl Fn() -> Result<ClientCredentials, String> + Send + Sync + 'static) -> Result<String, OAuthError> {
        match self.plan(Instant::now()) {
            Plan::Use(t) => Ok(t),
            Plan::UseAndRefresh(t) => {
                let me = self.clone();
                tokio::spawn(async move {
                    let _one = me.fetch.lock().await;
                    let _ = me.fetch_and_keep(&credentials).await;
                    me.state().refreshing = false;
                });
                Ok(t)
            }
            Plan::Fail(e) => Err(e),
            Plan::Wait => {
                let _one = self.fetch.lock().await;
                // The fetch this login waited for may have brought a token.
                match self.plan(Instant::now()) {
                    Plan::Use(t) | Plan::UseAndRefresh(t) => Ok(t),
                    Plan::Fail(e) => Err(e),
                    Plan::Wait => match self.fetch_and_keep(&credentials).await {
                        Ok(t) => Ok(t),
                        // The endpoint failing: a token that is still valid beats none.
                        Err(e) => self
                            .state()
                            .held
                            .as_ref()
                            .filter(|h| Instant::now() < h.expires_at)
                            .map(|h| h.value.clone())
                            .ok_or(e),
                    },
                }
            }
        }
    }

    /// One fetch; its token (or its failure and the back-off) is kept.
    async fn fetch_and_keep<F: Fn() -> Result<ClientCredentials, String> + Sync>(&self, credentials: &F) -> Result<String, OAuthError> {
        let result = match credentials() {
            Ok(creds) => self.fetch(&creds).await,
            Err(e) => Err(OAuthError::Config(e)),
        };
        let mut st = self.state();
        match result {
            Ok((value, lifetime)) => {
                FETCHED.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(token_endpoint = %self.http.endpoint().url, ?lifetime, "OAuth access token fetched");
                let got = Instant::now();
                st.held = Some(Held {
                    value: value.clone(),
                    refresh_at: got + lifetime.mul_f64(0.8),
                    expires_at: got + lifetime,
                });
                st.retry_at = None;
                st.last_error = None;
                if let Some(b) = st.backoff.as_mut() {
                    b.reset();
                }
                Ok(value)
            }
            Err(e) => {
                let pause = st.backoff.get_or_insert_with(|| Backoff::new(RETRY.0, RETRY.1)).next_pause();
                tracing::warn!(error = %e, retry_in = ?pause, held_token_valid = st.held.as_ref().is_some_and(|h| Instant::now() < h.expires_at), "cannot fetch an OAuth access token");
                st.retry_at = Some(Instant::now() + pause);
                st.last_error = Some(e.clone());
                Err(e)
            }
        }
    }

    /// One client-credentials request: the token and its lifetime.
    async fn fetch(&self, c: &ClientCredentials) -> Result<(String, Duration), OAuthError> {
        let url = &self.http.endpoint().url;
        let (id, secret) = if self.header_urlencode {
            (form_encode(&c.id), form_encode(&c.secret))
        } else {
            (c.id.clone(), c.secret.clone())
        };
        let basic = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{id}:{secret}")));
        let mut body = "grant_type=client_credentials".to_owned();
        if let Some(scope) = c.scope.as_deref().or(self.scope.as_deref()) {
            body.push_str("&scope=");
            body.push_str(&form_encode(scope));
        }
        let headers = [
            ("authorization", basic.as_str()),
            ("content-type", "application/x-www-form-urlencoded"),
            ("accept", "application/json"),
        ];
        let (status, answer) = self.http.send("POST", &headers, Bytes::from(body)).await?;
        let fail = |detail: String| OAuthError::Endpoint { url: url.clone(), detail };
        if status != 200 {
            return Err(fail(format!("HTTP {status} for client {}: {}", c.id, excerpt(&answer))));
        }
        let doc: serde_json::Value = serde_json::from_slice(&answer).map_err(|e| fail(format!("the answer is not JSON: {e}")))?;
        let token = doc
            .get("access_token")
            .and_then(|t| t.as_str())
            .filter(|t| !t.is_empty())
            .ok_or_else(|| fail("the answer has no access_token".into()))?;
        if token.len() > super::MAX_TOKEN_BYTES || token.bytes().any(|b| !(0x21..=0x7e).contains(&b)) {
            return Err(fail("the access_token is not a printable token of at most 64 KiB".into()));
        }
        let lifetime = lifetime(
            super::jwt::unverified_expiry(token),
            doc.get("expires_in").and_then(|v| v.as_u64()),
            super::jwt::now_seconds(),
        )
        .map_err(|why| fail(why.to_owned()))?;
        Ok((token.to_owned(), lifetime))
    }
}

/// How long a token lives: from its JWT `exp` (which must lie ahead), else `expires_in`; capped at
/// [`MAX_LIFETIME`].
fn lifetime(exp: Option<i64>, expires_in: Option<u64>, now: i64) -> Result<Duration, &'static str> {
    let secs = match exp {
        Some(exp) => match exp.checked_sub(now) {
            Some(left) if left > 0 => left.unsigned_abs(),
            _ => return Err("the token has already expired (its exp claim is not ahead of this machine's clock)"),
        },
        None => match expires_in {
            Some(s) if s > 0 => s,
            _ => return Err("the token has no expiry (neither a JWT exp claim nor expires_in)"),
        },
    };
    Ok(Duration::from_secs(secs).min(MAX_LIFETIME))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lifetime_comes_from_exp_or_expires_in_and_never_overflows() {
        assert_eq!(lifetime(Some(1060), Some(5), 1000), Ok(Duration::from_secs(60)), "exp wins");
        assert_eq!(lifetime(None, Some(300), 1000), Ok(Duration::from_secs(300)));
        assert!(lifetime(Some(999), Some(300), 1000).is_err(), "an expired token is not kept");
        assert!(lifetime(Some(i64::MIN), None, 1000).is_err());
        assert_eq!(lifetime(Some(i64::MAX), None, 1000), Ok(MAX_LIFETIME));
        assert_eq!(lifetime(None, Some(u64::MAX), 1000), Ok(MAX_LIFETIME));
        assert!(lifetime(None, None, 1000).is_err());
        assert!(lifetime(None, Some(0), 1000).is_err());
    }

    fn props(url: &str) -> kmp_config::OAuthClientProps {
        kmp_config::OAuthClientProps {
            token_endpoint_url: format!("{url}/token"),
            scope: Some("kafka".into()),
            header_urlencode: false,
        }
    }

    fn creds() -> Result<ClientCredentials, String> {
        Ok(ClientCredentials {
            id: "kmp".into(),
            secret: "s".into(),
            scope: None,
        })
    }

    #[tokio::test]
    async fn one_token_serves_every_login_until_it_is_refreshed() {
        let idp = super::super::test_server::TestServer::start(200, r#"{"access_token":"opaque-token","expires_in":3600}"#.into(), false).await;
        let source = Arc::new(TokenSource::new(&props(&idp.url), None).unwrap());
        let got = futures_join(&source, 20).await;
        assert!(got.iter().all(|t| t.as_deref() == Ok("opaque-token")), "{got:?}");
        assert_eq!(idp.requests(), 1, "one fetch for twenty logins");
    }

    #[tokio::test]
    async fn a_failing_endpoint_is_asked_again_only_after_the_back_off() {
        let idp = super::super::test_server::TestServer::start(401, r#"{"error":"unauthorized_client"}"#.into(), false).await;
        let source = Arc::new(TokenSource::new(&props(&idp.url), None).unwrap());
        let e = source.token(creds).await.unwrap_err().to_string();
        assert!(e.contains("HTTP 401") && e.contains("unauthorized_client"), "{e}");
        for _ in 0..10 {
            assert!(source.token(creds).await.is_err());
        }
        assert_eq!(idp.requests(), 1, "logins inside the back-off fail with the last error at once");
    }

    async fn futures_join(source: &Arc<TokenSource>, n: usize) -> Vec<Result<String, OAuthError>> {
        let tasks: Vec<_> = (0..n)
            .map(|_| {
                let s = source.clone();
                tokio::spawn(async move { s.token(creds).await })
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.expect("the login task ends"));
        }
        out
    }
}
