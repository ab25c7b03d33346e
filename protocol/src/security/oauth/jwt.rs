//! JSON Web Tokens as a Kafka broker checks them (`OAuthBearerValidatorCallbackHandler`): the
//! signature (RS256/384/512, PS256/384/512, ES256/384) with a key of the identity provider's key
//! set, then `exp` (required), `nbf` and `iat` with a clock skew, `aud` and `iss` when configured,
//! and the principal from the subject claim. `none` and HMAC algorithms are refused: a proxy that
//! accepted them would let anyone mint a principal.

use base64::Engine;
use ring::signature::{self, UnparsedPublicKey};

use super::jwks::{Jwk, KeySet};

/// What a valid token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The subject claim's value.
    pub principal: String,
    /// `exp`, seconds since the epoch.
    pub expires_at: i64,
}

impl Verified {
    /// How long the token has left to live now, in milliseconds, at least `floor`.
    pub fn time_left(&self, floor: std::time::Duration) -> std::time::Duration {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let left_ms = self.expires_at.saturating_mul(1000).saturating_sub(now_ms);
        std::time::Duration::from_millis(u64::try_from(left_ms).unwrap_or(0)).max(floor)
    }
}

/// What a token is checked against.
#[derive(Debug, Clone)]
pub struct Expectations {
    pub audience: Vec<String>,
    pub issuer: Option<String>,
    pub sub_claim: String,
    pub clock_skew_s: i64,
}

/// Why a token was refused (said to the client as Kafka's `invalid_token`, logged in full).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwtError {
    #[error("not a signed JWT: {0}")]
    Malformed(&'static str),
    #[error("algorithm {0} is not accepted")]
    Algorithm(String),
    #[error("no key {0} in the identity provider's key set")]
    UnknownKey(String),
    #[error("the signature does not verify")]
    Signature,
    #[error("{0}")]
    Claims(String),
}

fn b64(part: &str) -> Result<Vec<u8>, JwtError> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part.trim_end_matches('='))
        .map_err(|_| JwtError::Malformed("a part is not base64url"))
}

/// The three parts of a compact JWS.
fn parts(token: &str) -> Result<(&str, &str, &str), JwtError> {
    let mut it = token.split('.');
    match (it.next(), it.next(), it.next(), it.next()) {
        (Some(h), Some(p), Some(s), None) if !h.is_empty() && !p.is_empty() && !s.is_empty() => Ok((h, p, s)),
        _ => Err(JwtError::Malformed("not three dot-separated parts")),
    }
}

/// The key id the token's header names, if any (to look up an unknown key before verifying).
pub fn key_id(token: &str) -> Option<String> {
    let (h, _, _) = parts(token).ok()?;
    let header: serde_json::Value = serde_json::from_slice(&b64(h).ok()?).ok()?;
    header.get("kid")?.as_str().map(str::to_owned)
}

/// `exp` of a JWT without checking anything (the proxy's own token, to know when to refresh it).
pub fn unverified_expiry(token: &str) -> Option<i64> {
    let (_, p, _) = parts(token).ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&b64(p).ok()?).ok()?;
    claims.get("exp")?.as_i64()
}

/// A peer-chosen header value as it may appear in a log line: at most 64 characters, escaped.
fn shown(v: &str) -> String {
    v.chars().take(64).flat_map(char::escape_debug).collect()
}

/// Seconds since the epoch.
pub fn now_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Verifies `token` with `keys` and checks its claims at `now` (seconds).
pub fn verify(token: &str, keys: &KeySet, expect: &Expectations, now: i64) -> Result<Verified, JwtError> {
    let (h, p, s) = parts(token)?;
    let header: serde_json::Value = serde_json::from_slice(&b64(h)?).map_err(|_| JwtError::Malformed("the header is not JSON"))?;
    let alg = header.get("alg").and_then(|a| a.as_str()).ok_or(JwtError::Malformed("no alg"))?;
    if header.get("crit").is_some() {
        // RFC 7515 §4.1.11: extensions this verifier does not know must not be ignored.
        return Err(JwtError::Malformed("a crit header names extensions this proxy does not implement"));
    }
    let kid = header.get("kid").and_then(|k| k.as_str());
    let (key, key_alg) = keys
        .find(kid)
        .ok_or_else(|| JwtError::UnknownKey(kid.map_or("(none named)".to_owned(), shown)))?;
    if key_alg.is_some_and(|a| a != alg) {
        return Err(JwtError::Algorithm(format!("{} with a key for {}", shown(alg), shown(key_alg.unwrap_or("")))));
    }
    let signed = &token.as_bytes()[..h.len() + 1 + p.len()];
    let sig = b64(s)?;
    check_signature(alg, key, signed, &sig)?;
    let claims: serde_json::Value = serde_json::from_slice(&b64(p)?).map_err(|_| JwtError::Malformed("the payload is not JSON"))?;
    check_claims(&claims, expect, now)
}

fn check_signature(alg: &str, key: &Jwk, signed: &[u8], sig: &[u8]) -> Result<(), JwtError> {
    let rsa: Option<&'static signature::RsaParameters> = match alg {
        "RS256" => Some(&signature::RSA_PKCS1_2048_8192_SHA256),
        "RS384" => Some(&signature::RSA_PKCS1_2048_8192_SHA384),
        "RS512" => Some(&signature::RSA_PKCS1_2048_8192_SHA512),
        "PS256" => Some(&signature::RSA_PSS_2048_8192_SHA256),
        "PS384" => Some(&signature::RSA_PSS_2048_8192_SHA384),
        "PS512" => Some(&signature::RSA_PSS_2048_8192_SHA512),
        _ => None,
    };
    let ok = match (rsa, alg, key) {
        (Some(params), _, Jwk::Rsa { n, e }) => signature::RsaPublicKeyComponents { n, e }.verify(params, signed, sig).is_ok(),
        (None, "ES256", Jwk::Ec { curve: 256, point }) => UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point).verify(signed, sig).is_ok(),
        (None, "ES384", Jwk::Ec { curve: 384, point }) => UnparsedPublicKey::new(&signature::ECDSA_P384_SHA384_FIXED, point).verify(signed, sig).is_ok(),
        (None, "ES256" | "ES384", _) | (Some(_), _, _) => return Err(JwtError::Algorithm(format!("{} with a key of another type", shown(alg)))),
        _ => return Err(JwtError::Algorithm(shown(alg))),
    };
    if ok { Ok(()) } else { Err(JwtError::Signature) }
}

fn check_claims(c: &serde_json::Value, x: &Expectations, now: i64) -> Result<Verified, JwtError> {
    let claim = |m: &str| JwtError::Claims(m.to_owned());
    let exp = c
        .get("exp")
        .and_then(|v| v.as_i64())
        .ok_or_else(|| claim("the token has no numeric exp claim"))?;
    if now >= exp.saturating_add(x.clock_skew_s) {
        return Err(claim("the token has expired"));
    }
    for name in ["nbf", "iat"] {
        match c.get(name).map(|v| v.as_i64()) {
            None => {}
            Some(None) => return Err(JwtError::Claims(format!("the token's {name} is not a number"))),
            Some(Some(t)) if t > now.saturating_add(x.clock_skew_s) => return Err(JwtError::Claims(format!("the token's {name} is in the future"))),
            Some(Some(_)) => {}
        }
    }
    if !x.audience.is_empty() {
        let aud: Vec<&str> = match c.get("aud") {
            Some(serde_json::Value::String(s)) => vec![s.as_str()],
            Some(serde_json::Value::Array(a)) => a.iter().filter_map(|v| v.as_str()).collect(),
            _ => Vec::new(),
        };
        if !aud.iter().any(|a| x.audience.iter().any(|e| e == a)) {
            return Err(claim("the token is not for an expected audience"));
        }
    }
    if let Some(iss) = &x.issuer
        && c.get("iss").and_then(|v| v.as_str()) != Some(iss.as_str())
    {
        return Err(claim("the token is not from the expected issuer"));
    }
    let principal = c
        .get(&x.sub_claim)
        .and_then(|v| v.as_str())
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| JwtError::Claims(format!("the token has no {} claim", x.sub_claim)))?;
    Ok(Verified {
        principal: principal.to_owned(),
        expires_at: exp,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};

    fn b64e(b: &[u8]) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
    }

    /// A P-256 key pair, its JWKS and a signer of compact JWTs.
    fn keys() -> (EcdsaKeyPair, KeySet) {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap();
        let point = pair.public_key().as_ref();
        let jwks = format!(
            r#"{{"keys":[{{"kty":"EC","crv":"P-256","kid":"k1","x":"{}","y":"{}"}}]}}"#,
            b64e(&point[1..33]),
            b64e(&point[33..65])
        );
        (pair, KeySet::parse(jwks.as_bytes()).unwrap())
    }

    fn sign(pair: &EcdsaKeyPair, header: &str, claims: &str) -> String {
        let input = format!("{}.{}", b64e(header.as_bytes()), b64e(claims.as_bytes()));
        let sig = pair.sign(&SystemRandom::new(), input.as_bytes()).unwrap();
        format!("{input}.{}", b64e(sig.as_ref()))
    }

    fn expect() -> Expectations {
        Expectations {
            audience: vec!["kafka".into()],
            issuer: Some("http://idp/realms/kmp".into()),
            sub_claim: "sub".into(),
            clock_skew_s: 30,
        }
    }

    const HEADER: &str = r#"{"alg":"ES256","kid":"k1","typ":"JWT"}"#;

    #[test]
    fn a_signed_token_for_the_audience_and_issuer_names_its_subject() {
        let (pair, set) = keys();
        let t = sign(
            &pair,
            HEADER,
            r#"{"sub":"svc-1","aud":["account","kafka"],"iss":"http://idp/realms/kmp","exp":2000,"iat":900}"#,
        );
        assert_eq!(
            verify(&t, &set, &expect(), 1000),
            Ok(Verified {
                principal: "svc-1".into(),
                expires_at: 2000
            })
        );
        assert_eq!(key_id(&t).as_deref(), Some("k1"));
        assert_eq!(unverified_expiry(&t), Some(2000));
    }

    #[test]
    fn expired_foreign_unsigned_and_tampered_tokens_are_refused() {
        let (pair, set) = keys();
        let good = r#"{"sub":"svc","aud":"kafka","iss":"http://idp/realms/kmp","exp":2000}"#;
        let cases = [
            (sign(&pair, HEADER, good), 2031, "expired"),
            (sign(&pair, HEADER, &good.replace("\"aud\":\"kafka\"", "\"aud\":\"other\"")), 1000, "audience"),
            (sign(&pair, HEADER, &good.replace("realms/kmp", "realms/evil")), 1000, "issuer"),
            (sign(&pair, HEADER, &good.replace("\"sub\":\"svc\",", "")), 1000, "no sub claim"),
            (sign(&pair, HEADER, &good.replace(",\"exp\":2000", "")), 1000, "no numeric exp"),
            (sign(&pair, HEADER, &good.replace("}", ",\"nbf\":1500}")), 1000, "nbf is in the future"),
            (sign(&pair, r#"{"alg":"ES256","kid":"k2"}"#, good), 1000, "no key k2"),
            (sign(&pair, r#"{"alg":"HS256","kid":"k1"}"#, good), 1000, "not accepted"),
            (sign(&pair, r#"{"alg":"ES256","kid":"k1","crit":["exp"]}"#, good), 1000, "crit"),
            (sign(&pair, HEADER, &good.replace("}", ",\"iat\":\"soon\"}")), 1000, "iat is not a number"),
            (sign(&pair, r#"{"alg":"RS256","kid":"k1"}"#, good), 1000, "another type"),
            (format!("{}.{}.", b64e(br#"{"alg":"none"}"#), b64e(good.as_bytes())), 1000, "not three"),
            ("a.b".to_owned(), 1000, "not three"),
        ];
        for (token, now, want) in cases {
            let err = verify(&token, &set, &expect(), now).expect_err(want).to_string();
            assert!(err.contains(want), "{want}: got {err}");
        }
        // Another subject under the same signature.
        let t = sign(&pair, HEADER, good);
        let mut p: Vec<&str> = t.split('.').collect();
        let forged = b64e(good.replace("svc", "admin").as_bytes());
        p[1] = &forged;
        assert_eq!(verify(&p.join("."), &set, &expect(), 1000), Err(JwtError::Signature));
    }
}
