//! OAUTHBEARER (RFC 7628; Kafka's KIP-255 and KIP-768): the client side gets access tokens with the
//! client credentials grant from an identity provider's token endpoint (`token`) and sends them in
//! the SASL client message (`message`); the server side (termination mode) checks a client's JWT
//! (`jwt`) against the provider's signing keys (`jwks`) — [`Validator`] puts the two together. All
//! HTTP to the provider goes through `http` (bounded in time and size). Which listener offers
//! the mechanism belongs to the proxy; the settings to `kmp_config`.

mod http;
pub mod jwks;
pub mod jwt;
pub mod message;
#[cfg(test)]
mod test_server;
pub mod token;

use std::time::Duration;

pub use jwt::{Expectations, JwtError, Verified};
pub use token::{ClientCredentials, TokenSource, tokens_fetched_total};

/// Longest token accepted or sent (a JWT is a few KiB; Kafka's SASL frames are bounded anyway).
pub const MAX_TOKEN_BYTES: usize = 64 * 1024;

/// A failure talking to the identity provider or in its settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OAuthError {
    #[error("OAuth settings: {0}")]
    Config(String),
    #[error("identity provider {url}: {detail}")]
    Endpoint { url: String, detail: String },
}

/// `host:port` of an identity-provider URL (to check it against an allow-list before anything
/// connects to it).
pub fn endpoint_address(url: &str) -> Result<String, OAuthError> {
    let e = http::Endpoint::parse(url)?;
    Ok(if e.host.contains(':') {
        format!("[{}]:{}", e.host, e.port)
    } else {
        format!("{}:{}", e.host, e.port)
    })
}

/// Why a client's token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The token itself (signature, claims): the client's fault.
    #[error(transparent)]
    Token(#[from] JwtError),
    /// The provider's keys could not be fetched: the proxy's or the provider's.
    #[error(transparent)]
    Keys(#[from] OAuthError),
}

/// Checks client tokens for one listener (`[listener.auth.oauthbearer]`).
pub struct Validator {
    keys: std::sync::Arc<jwks::JwksSource>,
    expect: Expectations,
}

impl Validator {
    /// A validator for `config` (nothing is fetched yet).
    pub fn new(config: &kmp_config::OAuthValidationConfig) -> Result<Self, OAuthError> {
        let ca = config.ca_file.as_ref().map(|p| kmp_config::PemSource::File(p.clone()));
        Ok(Self {
            keys: std::sync::Arc::new(jwks::JwksSource::new(
                &config.jwks_endpoint_url,
                Duration::from_millis(config.jwks_refresh_ms),
                ca.as_ref(),
            )?),
            expect: Expectations {
                audience: config.expected_audience.clone(),
                issuer: config.expected_issuer.clone(),
                sub_claim: config.sub_claim_name.clone(),
                clock_skew_s: i64::try_from(config.clock_skew_seconds).unwrap_or(i64::MAX),
            },
        })
    }

    /// Verifies `token` now.
    pub async fn verify(&self, token: &str) -> Result<Verified, Refusal> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(Refusal::Token(JwtError::Malformed("longer than 64 KiB")));
        }
        let kid = jwt::key_id(token);
        let keys = self.keys.keys(kid.as_deref()).await?;
        Ok(jwt::verify(token, &keys, &self.expect, jwt::now_seconds())?)
    }
}
