//! The identity provider's signing keys (a JWKS, RFC 7517): parsed with bounds (at most
//! [`MAX_KEYS`] signing keys; RSA and EC P-256/P-384 kept, other key types skipped), fetched on
//! the first login, again every `jwks_refresh_ms` (in the background: the held keys serve
//! meanwhile), and — at most once per [`UNKNOWN_KEY_REFETCH`] — when a token names a key the set
//! does not hold (the provider rotated its keys). A failed fetch keeps the keys held and backs
//! off; no login waits behind another one's fetch except the very first ones.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use tokio::time::Instant;

use super::OAuthError;
use super::http::{Endpoint, HttpClient, excerpt};
use crate::Backoff;

/// Most keys kept from one key set.
pub const MAX_KEYS: usize = 64;

/// Shortest interval between fetches caused by unknown key ids (a client naming made-up keys
/// must not make the proxy hammer the provider).
pub const UNKNOWN_KEY_REFETCH: Duration = Duration::from_secs(10);

/// Longest pause after failed fetches (doubling from [`UNKNOWN_KEY_REFETCH`]).
const RETRY_MAX: Duration = Duration::from_secs(300);

/// One public key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Jwk {
    /// Modulus and exponent, big-endian.
    Rsa { n: Vec<u8>, e: Vec<u8> },
    /// Uncompressed point (`0x04 || x || y`) on P-256 or P-384.
    Ec { curve: u16, point: Vec<u8> },
}

/// One key of a set: its id, the algorithm it is for (when the set says), the key.
#[derive(Debug, Clone)]
struct Entry {
    kid: Option<String>,
    alg: Option<String>,
    key: Jwk,
}

/// Keys by id.
#[derive(Debug, Clone, Default)]
pub struct KeySet {
    keys: Vec<Entry>,
}

impl KeySet {
    /// Parses a JWKS document; keys that are not for signatures or of other types are skipped.
    pub fn parse(doc: &[u8]) -> Result<Self, String> {
        let v: serde_json::Value = serde_json::from_slice(doc).map_err(|e| format!("not JSON: {e}"))?;
        let list = v.get("keys").and_then(|k| k.as_array()).ok_or("no `keys` array")?;
        let b64 = |s: Option<&serde_json::Value>| {
            s.and_then(|v| v.as_str())
                .and_then(|s| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s.trim_end_matches('=')).ok())
        };
        let mut keys = Vec::new();
        for k in list {
            if keys.len() == MAX_KEYS {
                break;
            }
            if k.get("use").and_then(|u| u.as_str()).is_some_and(|u| u != "sig") {
                continue;
            }
            let kid = k.get("kid").and_then(|v| v.as_str()).map(str::to_owned);
            let alg = k.get("alg").and_then(|v| v.as_str()).map(str::to_owned);
            let key = match k.get("kty").and_then(|v| v.as_str()) {
                Some("RSA") => match (b64(k.get("n")), b64(k.get("e"))) {
                    (Some(n), Some(e)) if !n.is_empty() && !e.is_empty() => Jwk::Rsa { n, e },
                    _ => continue,
                },
                Some("EC") => {
                    let (curve, len) = match k.get("crv").and_then(|v| v.as_str()) {
                        Some("P-256") => (256, 32),
                        Some("P-384") => (384, 48),
                        _ => continue,
                    };
                    match (b64(k.get("x")), b64(k.get("y"))) {
                        (Some(x), Some(y)) if x.len() == len && y.len() == len => {
                            let mut point = Vec::with_capacity(1 + 2 * len);
                            point.push(4);
                            point.extend_from_slice(&x);
                            point.extend_from_slice(&y);
                            Jwk::Ec { curve, point }
                        }
                        _ => continue,
                    }
                }
                _ => continue,
            };
            keys.push(Entry { kid, alg, key });
        }
        Ok(Self { keys })
    }

    /// The key named `kid` (with no id named, the only key of the set) and the algorithm the
    /// set restricts it to, if any.
    pub fn find(&self, kid: Option<&str>) -> Option<(&Jwk, Option<&str>)> {
        let e = match kid {
            Some(id) => self.keys.iter().find(|e| e.kid.as_deref() == Some(id)),
            None if self.keys.len() == 1 => self.keys.first(),
            None => None,
        }?;
        Some((&e.key, e.alg.as_deref()))
    }

    /// How many keys are held.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[derive(Default)]
struct State {
    keys: Arc<KeySet>,
    /// When the keys held were fetched (`None`: never).
    fetched: Option<Instant>,
    /// A background refresh is running.
    refreshing: bool,
    /// No fetch before this: [`MIN_REFETCH`] after a fetch ended, the back-off after a failure.
    next_attempt: Option<Instant>,
    last_error: Option<OAuthError>,
    backoff: Option<Backoff>,
}

/// The provider's keys, fetched as needed.
pub struct JwksSource {
    http: HttpClient,
    refresh: Duration,
    state: std::sync::Mutex<State>,
    /// Single flight of the fetches.
    fetch: tokio::sync::Mutex<()>,
}

impl JwksSource {
    /// A source for `url`; `extra_ca`: CAs trusted for an https endpoint besides the system's.
    pub fn new(url: &str, refresh: Duration, extra_ca: Option<&kmp_config::PemSource>) -> Result<Self, OAuthError> {
        let endpoint = Endpoint::parse(url)?;
        let tls = if endpoint.https {
            Some(crate::security::tls::https_client_config(extra_ca).map_err(|e| OAuthError::Config(e.to_string()))?)
        } else {
            None
        };
        Ok(Self {
            http: HttpClient::new(endpoint, tls, Duration::from_secs(10))?,
            refresh,
            state: Default::default(),
            fetch: tokio::sync::Mutex::new(()),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The keys to verify a token naming `kid` with. Only the first logins wait (for the one
    /// fetch in flight); later, stale keys are refreshed in the background while the held ones
    /// serve, and an unknown `kid` makes the login that finds the fetch slot free fetch again (at
    /// most every [`UNKNOWN_KEY_REFETCH`]) — the others are answered with the keys held.
    pub async fn keys(self: &Arc<Self>, kid: Option<&str>) -> Result<Arc<KeySet>, OAuthError> {
        let now = Instant::now();
        let (keys, have, stale, unknown, may) = {
            let st = self.state();
            let may = st.next_attempt.is_none_or(|t| now >= t);
            let stale = st.fetched.is_some_and(|t| now.duration_since(t) >= self.refresh) && !st.refreshing;
            (st.keys.clone(), st.fetched.is_some(), stale, kid.is_some() && st.keys.find(kid).is_none(), may)
        };
        if !have {
            let _one = self.fetch.lock().await;
            // The fetch this login waited for may have brought keys, or failed just now.
            let settled = {
                let st = self.state();
                if st.fetched.is_some() {
                    Some(Ok(st.keys.clone()))
                } else if st.next_attempt.is_some_and(|t| Instant::now() < t) {
                    Some(Err(st.last_error.clone().unwrap_or_else(|| self.unavailable())))
                } else {
                    None
                }
            };
            return match settled {
                Some(r) => r,
                None => self.fetch_and_keep().await,
            };
        }
        if stale && may {
            self.state().refreshing = true;
            let me = self.clone();
            tokio::spawn(async move {
                let _one = me.fetch.lock().await;
                let _ = me.fetch_and_keep().await;
                me.state().refreshing = false;
            });
        } else if unknown
            && may
            && let Ok(_one) = self.fetch.try_lock()
        {
            return Ok(self.fetch_and_keep().await.unwrap_or(keys));
        }
        Ok(keys)
    }

    fn unavailable(&self) -> OAuthError {
        OAuthError::Endpoint {
            url: self.http.endpoint().url.clone(),
            detail: "keys not fetched yet".into(),
        }
    }

    /// One fetch; its keys (or its failure and the back-off) are kept.
    async fn fetch_and_keep(&self) -> Result<Arc<KeySet>, OAuthError> {
        let result = self.fetch().await;
        let mut st = self.state();
        let now = Instant::now();
        match result {
            Ok(set) => {
                tracing::info!(jwks = %self.http.endpoint().url, keys = set.len(), "identity provider keys fetched");
                st.keys = Arc::new(set);
                st.fetched = Some(now);
                st.next_attempt = Some(now + UNKNOWN_KEY_REFETCH);
                st.last_error = None;
                if let Some(b) = st.backoff.as_mut() {
                    b.reset();
                }
                Ok(st.keys.clone())
            }
            Err(e) => {
                let pause = st.backoff.get_or_insert_with(|| Backoff::new(UNKNOWN_KEY_REFETCH, RETRY_MAX)).next_pause();
                tracing::warn!(error = %e, retry_in = ?pause, keys_held = st.keys.len(), "cannot fetch the identity provider's keys");
                st.next_attempt = Some(now + pause);
                st.last_error = Some(e.clone());
                Err(e)
            }
        }
    }

    async fn fetch(&self) -> Result<KeySet, OAuthError> {
        let (status, body): (u16, Bytes) = self.http.send("GET", &[("accept", "application/json")], Bytes::new()).await?;
        let fail = |detail: String| OAuthError::Endpoint {
            url: self.http.endpoint().url.clone(),
            detail,
        };
        if status != 200 {
            return Err(fail(format!("HTTP {status}: {}", excerpt(&body))));
        }
        let set = KeySet::parse(&body).map_err(|e| fail(format!("not a key set: {e}")))?;
        if set.is_empty() {
            return Err(fail("the key set holds no RSA or EC P-256/P-384 signing key".into()));
        }
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_sets_keep_signing_keys_of_known_types_and_skip_the_rest() {
        let doc = br#"{"keys":[
            {"kty":"RSA","kid":"r1","use":"sig","n":"AQAB","e":"AQAB"},
            {"kty":"RSA","kid":"enc","use":"enc","n":"AQAB","e":"AQAB"},
            {"kty":"oct","kid":"h1","k":"c2VjcmV0"},
            {"kty":"EC","kid":"e1","crv":"P-521","x":"AA","y":"AA"},
            {"kty":"RSA","kid":"bad","n":"!!"}
        ]}"#;
        let set = KeySet::parse(doc).unwrap();
        assert_eq!(set.len(), 1);
        assert!(set.find(Some("r1")).is_some());
        assert!(set.find(Some("h1")).is_none(), "symmetric keys are never used");
        assert!(set.find(None).is_some(), "the only key serves a token naming none");
        assert!(KeySet::parse(b"[]").is_err());
        assert!(KeySet::parse(b"{\"keys\":1}").is_err());
    }

    #[test]
    fn a_key_set_keeps_at_most_max_keys() {
        let one = r#"{"kty":"RSA","n":"AQAB","e":"AQAB"}"#;
        let doc = format!("{{\"keys\":[{}]}}", vec![one; MAX_KEYS + 10].join(","));
        assert_eq!(KeySet::parse(doc.as_bytes()).unwrap().len(), MAX_KEYS);
    }

    const ONE_KEY: &str = r#"{"keys":[{"kty":"RSA","kid":"k1","n":"AQAB","e":"AQAB"}]}"#;

    #[tokio::test]
    async fn tokens_naming_unknown_keys_do_not_make_the_proxy_hammer_the_provider() {
        let idp = super::super::test_server::TestServer::start(200, ONE_KEY.into(), false).await;
        let source = Arc::new(JwksSource::new(&format!("{}/certs", idp.url), Duration::from_secs(3600), None).unwrap());
        assert!(source.keys(Some("k1")).await.unwrap().find(Some("k1")).is_some());
        for i in 0..50 {
            let keys = source.keys(Some(&format!("made-up-{i}"))).await.unwrap();
            assert!(keys.find(Some("k1")).is_some(), "the held keys answer");
        }
        assert_eq!(idp.requests(), 1, "no refetch within {UNKNOWN_KEY_REFETCH:?} of the last one");
    }

    #[tokio::test]
    async fn a_provider_that_never_answers_costs_the_first_logins_one_timeout_and_later_ones_nothing() {
        let idp = super::super::test_server::TestServer::start(200, ONE_KEY.into(), true).await;
        let source = Arc::new(JwksSource::new(&format!("{}/certs", idp.url), Duration::from_secs(3600), None).unwrap());
        let started = Instant::now();
        let first = tokio::join!(source.keys(Some("k1")), source.keys(Some("k1")));
        assert!(first.0.is_err() && first.1.is_err(), "no keys: refused");
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "one 10 s timeout for both, not one each: {:?}",
            started.elapsed()
        );
        assert_eq!(idp.requests(), 1, "single flight");
        let again = Instant::now();
        assert!(source.keys(Some("k1")).await.is_err());
        assert!(again.elapsed() < Duration::from_millis(100), "inside the back-off a login fails at once");
        assert_eq!(idp.requests(), 1);
    }
}
