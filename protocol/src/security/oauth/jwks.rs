//! The identity provider's signing keys (a JWKS, RFC 7517): parsed with bounds (at most
//! [`MAX_KEYS`] keys; RSA and EC P-256/P-384 kept, other key types skipped), fetched on the first
//! login, again every `jwks_refresh_ms`, and — at most once per [`UNKNOWN_KEY_REFETCH`] — when a
//! token names a key the set does not hold (the provider rotated its keys). A failed fetch keeps
//! the keys held.

use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::OAuthError;
use super::http::{Endpoint, HttpClient, excerpt};

/// Most keys kept from one key set.
pub const MAX_KEYS: usize = 64;

/// Shortest interval between fetches caused by unknown key ids (a client naming made-up keys
/// must not make the proxy hammer the provider).
pub const UNKNOWN_KEY_REFETCH: Duration = Duration::from_secs(10);

/// One public key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Jwk {
    /// Modulus and exponent, big-endian.
    Rsa { n: Vec<u8>, e: Vec<u8> },
    /// Uncompressed point (`0x04 || x || y`) on P-256 or P-384.
    Ec { curve: u16, point: Vec<u8> },
}

/// Keys by id.
#[derive(Debug, Clone, Default)]
pub struct KeySet {
    keys: Vec<(Option<String>, Jwk)>,
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
        for k in list.iter().take(MAX_KEYS) {
            if k.get("use").and_then(|u| u.as_str()).is_some_and(|u| u != "sig") {
                continue;
            }
            let kid = k.get("kid").and_then(|v| v.as_str()).map(str::to_owned);
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
            keys.push((kid, key));
        }
        Ok(Self { keys })
    }

    /// The key named `kid`; with no id named, the only key of the set.
    pub fn find(&self, kid: Option<&str>) -> Option<&Jwk> {
        match kid {
            Some(id) => self.keys.iter().find(|(k, _)| k.as_deref() == Some(id)).map(|(_, j)| j),
            None if self.keys.len() == 1 => self.keys.first().map(|(_, j)| j),
            None => None,
        }
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

struct Held {
    keys: std::sync::Arc<KeySet>,
    fetched: Option<Instant>,
    last_attempt: Option<Instant>,
}

/// The provider's keys, fetched as needed.
pub struct JwksSource {
    http: HttpClient,
    refresh: Duration,
    held: Mutex<Held>,
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
            held: Mutex::new(Held {
                keys: Default::default(),
                fetched: None,
                last_attempt: None,
            }),
        })
    }

    /// The keys to verify a token naming `kid` with: fetched first when none are held, when
    /// they are older than the refresh interval, or when `kid` is unknown (rate-limited).
    pub async fn keys(&self, kid: Option<&str>) -> Result<std::sync::Arc<KeySet>, OAuthError> {
        let mut held = self.held.lock().await;
        let now = Instant::now();
        let stale = held.fetched.is_none_or(|t| now.duration_since(t) >= self.refresh);
        let unknown = kid.is_some() && held.keys.find(kid).is_none();
        let may_retry = held.last_attempt.is_none_or(|t| now.duration_since(t) >= UNKNOWN_KEY_REFETCH);
        if (stale || unknown) && may_retry {
            held.last_attempt = Some(now);
            match self.fetch().await {
                Ok(set) => {
                    tracing::info!(jwks = %self.http.endpoint().url, keys = set.len(), "identity provider keys fetched");
                    held.keys = std::sync::Arc::new(set);
                    held.fetched = Some(Instant::now());
                }
                Err(e) if held.fetched.is_some() => tracing::warn!(error = %e, "cannot refresh the identity provider's keys; keeping the ones held"),
                Err(e) => return Err(e),
            }
        }
        Ok(held.keys.clone())
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
}
