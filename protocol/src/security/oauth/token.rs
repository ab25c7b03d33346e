//! The proxy's own access tokens (OAuth 2 client credentials grant, as Kafka's
//! `OAuthBearerLoginCallbackHandler` gets them): fetched from the token endpoint when a login needs
//! one, kept while most of their lifetime is left, fetched again after 80 % of it (Kafka's
//! `sasl.login.refresh.window.factor`). One fetch at a time per source: connections that log in
//! together wait for the same token.

use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::OAuthError;
use super::http::{HttpClient, excerpt, form_encode};

/// Tokens fetched by every source of this process.
static FETCHED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many access tokens this process fetched from token endpoints, in total.
pub fn tokens_fetched_total() -> u64 {
    FETCHED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Share of a token's lifetime after which it is fetched again.
const REFRESH_AT_PERCENT: u32 = 80;

/// Longest a token endpoint may take to answer.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Client id, secret and scope of one fetch (resolved from their references each time).
pub struct ClientCredentials {
    pub id: String,
    pub secret: String,
    pub scope: Option<String>,
}

struct Held {
    value: String,
    refresh_at: Instant,
    expires_at: Instant,
}

/// Where one login's tokens come from, and the current one.
pub struct TokenSource {
    http: HttpClient,
    header_urlencode: bool,
    held: Mutex<Option<Held>>,
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSource")
            .field("token_endpoint", &self.http.endpoint().url)
            .finish_non_exhaustive()
    }
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
            held: Mutex::new(None),
        })
    }

    /// A token with most of its lifetime left: the one held, or a new one from the endpoint
    /// (`credentials` is called only then).
    pub async fn token(&self, credentials: impl FnOnce() -> Result<ClientCredentials, String>) -> Result<String, OAuthError> {
        let mut held = self.held.lock().await;
        let now = Instant::now();
        if let Some(h) = held.as_ref()
            && now < h.refresh_at
        {
            return Ok(h.value.clone());
        }
        let creds = credentials().map_err(OAuthError::Config)?;
        match self.fetch(&creds).await {
            Ok((value, lifetime)) => {
                FETCHED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let got = Instant::now();
                tracing::debug!(token_endpoint = %self.http.endpoint().url, ?lifetime, "OAuth access token fetched");
                *held = Some(Held {
                    value: value.clone(),
                    refresh_at: got + lifetime * REFRESH_AT_PERCENT / 100,
                    expires_at: got + lifetime,
                });
                Ok(value)
            }
            // The endpoint failing while the held token is still valid: use it (the next login
            // tries the endpoint again).
            Err(e) => match held.as_ref().filter(|h| now < h.expires_at) {
                Some(h) => {
                    tracing::warn!(error = %e, "cannot refresh the OAuth access token; using the current one until it expires");
                    Ok(h.value.clone())
                }
                None => Err(e),
            },
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
        if let Some(scope) = &c.scope {
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
        let lifetime = super::jwt::unverified_expiry(token)
            .and_then(|exp| u64::try_from(exp - super::jwt::now_seconds()).ok())
            .or_else(|| doc.get("expires_in").and_then(|v| v.as_u64()))
            .filter(|s| *s > 0)
            .ok_or_else(|| fail("the token has no expiry (neither a JWT exp claim nor expires_in) or has expired".into()))?;
        Ok((token.to_owned(), Duration::from_secs(lifetime)))
    }
}
