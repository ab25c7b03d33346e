//! OAUTHBEARER settings (KIP-255, KIP-768): the proxy's own login toward a cluster with an OAuth
//! client-credentials token, under Kafka's property names (`sasl.oauthbearer.token.endpoint.url`,
//! the client id and secret in `sasl.jaas.config` or in KIP-1139's
//! `sasl.oauthbearer.client.credentials.*`), and the validation of clients' tokens in termination
//! mode (`[listener.auth.oauthbearer]`: the identity provider's JWKS, audience, issuer). Pure data;
//! fetching tokens and keys and checking signatures belong to `kmp_protocol::security::oauth`.

use std::path::PathBuf;

use serde::Deserialize;

use crate::jaas::{jaas_options, parse_oauth_jaas};
use crate::{SaslMechanism, SaslProps, SecretRef};

/// The OAUTHBEARER client properties understood (besides `sasl.mechanism` and `sasl.jaas.config`):
/// the tail of [`crate::CLIENT_SECURITY_KEYS`], from `sasl.oauthbearer.token.endpoint.url` on.
pub const OAUTH_CLIENT_KEYS: &[&str] = crate::CLIENT_SECURITY_KEYS.split_at(crate::client_props::FIRST_OAUTH_KEY).1;

/// Kafka's login callback handler for client-credentials tokens: the only one the proxy's
/// behaviour matches, so the only one accepted in `sasl.login.callback.handler.class`.
pub const KAFKA_OAUTH_LOGIN_HANDLER: &str = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler";

/// Where and how the proxy gets its access tokens (client credentials grant).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthClientProps {
    /// `sasl.oauthbearer.token.endpoint.url` (`http://` or `https://`).
    pub token_endpoint_url: String,
    /// `sasl.oauthbearer.scope` (or `scope` in the JAAS options); `None`: no scope asked for.
    pub scope: Option<String>,
    /// `sasl.oauthbearer.header.urlencode`: URL-encode client id and secret in the Basic
    /// authorization header (Kafka's default `false`).
    pub header_urlencode: bool,
}

/// The SASL settings of an OAUTHBEARER login from `get` (the trimmed, non-empty properties);
/// problems go to `errs`.
pub(crate) fn parse_client<'a>(get: &dyn Fn(&str) -> Option<&'a str>, errs: &mut Vec<String>) -> Option<SaslProps> {
    let url = match get("sasl.oauthbearer.token.endpoint.url") {
        Some(u) if u.starts_with("http://") || u.starts_with("https://") => Some(u.to_owned()),
        Some(u) => {
            errs.push(format!("sasl.oauthbearer.token.endpoint.url `{u}` is not an http:// or https:// URL"));
            None
        }
        None => {
            errs.push("sasl.mechanism OAUTHBEARER needs sasl.oauthbearer.token.endpoint.url (the identity provider's token endpoint)".into());
            None
        }
    };
    if let Some(h) = get("sasl.login.callback.handler.class")
        && h != KAFKA_OAUTH_LOGIN_HANDLER
    {
        errs.push(format!(
            "sasl.login.callback.handler.class `{h}` is not supported: the proxy gets tokens as {KAFKA_OAUTH_LOGIN_HANDLER} does"
        ));
    }
    let header_urlencode = match get("sasl.oauthbearer.header.urlencode") {
        None | Some("false") => false,
        Some("true") => true,
        Some(v) => {
            errs.push(format!("sasl.oauthbearer.header.urlencode `{v}` is not true or false"));
            false
        }
    };
    for k in ["sasl.username", "sasl.password"] {
        if get(k).is_some() {
            errs.push(format!(
                "{k} is not used by OAUTHBEARER: give the client id and secret in sasl.jaas.config or sasl.oauthbearer.client.credentials.*"
            ));
        }
    }
    let mut scope = get("sasl.oauthbearer.scope").map(str::to_owned);
    let id = get("sasl.oauthbearer.client.credentials.client.id");
    let secret = get("sasl.oauthbearer.client.credentials.client.secret");
    // A JAAS line naming no client id or secret (Kafka 4.1's form): its scope, if any.
    let bare_module: Option<Option<String>> = get("sasl.jaas.config")
        .and_then(|j| jaas_options(j).ok())
        .filter(|o| !o.contains_key("clientId") && !o.contains_key("clientSecret"))
        .map(|mut o| o.remove("scope").filter(|s| !s.is_empty()));
    let (username, password) = match (get("sasl.jaas.config"), id, secret) {
        (Some(jaas), None, None) => match SecretRef::parse(jaas) {
            // Resolved when a token is fetched: the reference holds the whole JAAS line.
            r @ (SecretRef::File(_) | SecretRef::Env(_)) => (String::new(), r),
            SecretRef::Inline(text) => match parse_oauth_jaas(&text) {
                Ok((id, secret, jaas_scope)) => {
                    scope = scope.or(jaas_scope);
                    (id, SecretRef::Inline(secret))
                }
                Err(e) => {
                    errs.push(e);
                    return None;
                }
            },
        },
        (None, Some(id), Some(secret)) => (id.to_owned(), SecretRef::parse(secret)),
        // Kafka 4.1's form: the login module without credentials, they are in the KIP-1139 keys.
        (Some(_), Some(id), Some(secret)) if bare_module.is_some() => {
            scope = scope.or(bare_module.flatten());
            (id.to_owned(), SecretRef::parse(secret))
        }
        (Some(_), _, _) => {
            errs.push(
                "give the client id and secret either in sasl.jaas.config or in sasl.oauthbearer.client.credentials.client.id/client.secret (with a bare `OAuthBearerLoginModule required ;`), not both"
                    .into(),
            );
            return None;
        }
        (None, _, _) => {
            errs.push(
                "sasl.mechanism OAUTHBEARER needs the client id and secret: sasl.jaas.config (OAuthBearerLoginModule required clientId=\"…\" clientSecret=\"…\";) or sasl.oauthbearer.client.credentials.client.id and .client.secret"
                    .into(),
            );
            return None;
        }
    };
    Some(SaslProps {
        mechanism: SaslMechanism::OAuthBearer,
        username,
        password,
        oauth: Some(OAuthClientProps {
            token_endpoint_url: url?,
            scope,
            header_urlencode,
        }),
    })
}

/// How a terminating listener checks OAUTHBEARER tokens (`[listener.auth.oauthbearer]`), as a
/// Kafka broker does with `OAuthBearerValidatorCallbackHandler`: the JWT's signature against the
/// identity provider's keys, its expiry, audience and issuer; the principal is a claim.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OAuthValidationConfig {
    /// The identity provider's JWKS URL (`sasl.oauthbearer.jwks.endpoint.url`), `http://` or
    /// `https://`. Required.
    pub jwks_endpoint_url: String,
    /// `sasl.oauthbearer.expected.audience`: a token's `aud` must contain one of these. Required
    /// (Kafka makes it optional; at the edge a token for any client of the provider must not do).
    #[serde(default)]
    pub expected_audience: Vec<String>,
    /// `sasl.oauthbearer.expected.issuer`: a token's `iss` must equal it. Required.
    #[serde(default)]
    pub expected_issuer: Option<String>,
    /// `sasl.oauthbearer.sub.claim.name`: the claim that names the principal. Default `sub`.
    #[serde(default = "default_sub")]
    pub sub_claim_name: String,
    /// `sasl.oauthbearer.clock.skew.seconds`: tolerance of `exp`, `nbf` and `iat`. Default 30.
    #[serde(default = "default_skew")]
    pub clock_skew_seconds: u64,
    /// `sasl.oauthbearer.jwks.endpoint.refresh.ms`: how often the keys are fetched again (also,
    /// at most every 10 s, when a token names an unknown key). Default 3600000.
    #[serde(default = "default_refresh")]
    pub jwks_refresh_ms: u64,
    /// PEM CA certificates trusted for an `https://` JWKS endpoint besides the system's. Default:
    /// unset.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
}

fn default_sub() -> String {
    "sub".to_owned()
}

fn default_skew() -> u64 {
    30
}

fn default_refresh() -> u64 {
    3_600_000
}

impl OAuthValidationConfig {
    /// The problems of these settings, keys under `key` (e.g. `listener.auth.oauthbearer`).
    pub(crate) fn errors(&self, key: &str, err: &mut dyn FnMut(&str, String)) {
        if !(self.jwks_endpoint_url.starts_with("http://") || self.jwks_endpoint_url.starts_with("https://")) {
            err(
                &format!("{key}.jwks_endpoint_url"),
                format!("`{}` is not an http:// or https:// URL", self.jwks_endpoint_url),
            );
        }
        if self.expected_audience.iter().all(|a| a.trim().is_empty()) {
            err(
                &format!("{key}.expected_audience"),
                "name the audience your identity provider puts in tokens for Kafka: without it a token issued to any client of the provider is accepted"
                    .to_owned(),
            );
        }
        if self.expected_issuer.as_deref().is_none_or(|i| i.trim().is_empty()) {
            err(
                &format!("{key}.expected_issuer"),
                "name the identity provider's issuer (the iss claim of its tokens)".to_owned(),
            );
        }
        if self.sub_claim_name.is_empty() {
            err(&format!("{key}.sub_claim_name"), "must not be empty".to_owned());
        }
        if self.clock_skew_seconds > 3600 {
            err(&format!("{key}.clock_skew_seconds"), "must be at most 3600".to_owned());
        }
        if self.jwks_refresh_ms < 10_000 {
            err(&format!("{key}.jwks_refresh_ms"), "must be at least 10000".to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::{PropsOrigin, parse_client_props};

    fn props(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn a_terminating_oauthbearer_listener_needs_its_key_set_audience_and_issuer() {
        let base = "[upstream]\nbootstrap_servers = [\"d:1\"]\n[listener.auth]\nmode = \"terminate\"\nmechanisms = [\"OAUTHBEARER\"]\n";
        let crate::ConfigErrors(errs) = crate::parse_toml(base).unwrap().validate().unwrap_err();
        assert!(errs.iter().any(|e| e.key == "listener.auth.oauthbearer"), "{errs:?}");
        assert!(
            !errs.iter().any(|e| e.key == "listener.auth.credentials_file"),
            "no password mechanism offered: {errs:?}"
        );
        let crate::ConfigErrors(errs) = crate::parse_toml(&format!(
            "{base}[listener.auth.oauthbearer]\njwks_endpoint_url = \"idp/certs\"\njwks_refresh_ms = 5\n"
        ))
        .unwrap()
        .validate()
        .unwrap_err();
        for key in ["jwks_endpoint_url", "expected_audience", "expected_issuer", "jwks_refresh_ms"] {
            assert!(errs.iter().any(|e| e.key == format!("listener.auth.oauthbearer.{key}")), "{key}: {errs:?}");
        }
        let ok = format!(
            "{base}[listener.auth.oauthbearer]\njwks_endpoint_url = \"https://idp/certs\"\nexpected_audience = [\"kafka\"]\nexpected_issuer = \"https://idp\"\n"
        );
        crate::parse_toml(&ok).unwrap().validate().unwrap();
        let passthrough = ok.replace("mode = \"terminate\"\n", "");
        let crate::ConfigErrors(errs) = crate::parse_toml(&passthrough).unwrap().validate().unwrap_err();
        assert!(
            errs.iter().any(|e| e.key == "listener.auth.oauthbearer" && e.message.contains("terminate")),
            "{errs:?}"
        );
    }

    #[test]
    fn the_oauth_keys_are_the_oauthbearer_and_login_handler_properties() {
        assert_eq!(OAUTH_CLIENT_KEYS[0], "sasl.oauthbearer.token.endpoint.url");
        assert!(
            OAUTH_CLIENT_KEYS
                .iter()
                .all(|k| k.starts_with("sasl.oauthbearer.") || *k == "sasl.login.callback.handler.class")
        );
        let before = &crate::CLIENT_SECURITY_KEYS[..crate::client_props::FIRST_OAUTH_KEY];
        assert!(
            before.iter().all(|k| !k.starts_with("sasl.oauthbearer.") && !k.starts_with("sasl.login.")),
            "{before:?}"
        );
    }

    #[test]
    fn kafka_oauthbearer_client_properties_parse_from_jaas_or_kip_1139_keys() {
        let base = [
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "OAUTHBEARER"),
            (
                "sasl.oauthbearer.token.endpoint.url",
                "http://idp:8080/realms/kmp/protocol/openid-connect/token",
            ),
            ("sasl.login.callback.handler.class", KAFKA_OAUTH_LOGIN_HANDLER),
        ];
        let jaas =
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required clientId=\"kmp-proxy\" clientSecret=\"s3cr=t\" scope=\"kafka\";";
        let p = parse_client_props(&props(&[&base[..], &[("sasl.jaas.config", jaas)]].concat()), PropsOrigin::ConfigFile).unwrap();
        let s = p.sasl.unwrap();
        assert_eq!((s.mechanism, s.username.as_str()), (SaslMechanism::OAuthBearer, "kmp-proxy"));
        assert_eq!(s.password.resolve().unwrap(), "s3cr=t");
        let o = s.oauth.unwrap();
        assert_eq!((o.scope.as_deref(), o.header_urlencode), (Some("kafka"), false));

        let p = parse_client_props(
            &props(
                &[
                    &base[..],
                    &[
                        ("sasl.oauthbearer.client.credentials.client.id", "kmp-proxy"),
                        ("sasl.oauthbearer.client.credentials.client.secret", "env:KMP_SECRET"),
                    ],
                ]
                .concat(),
            ),
            PropsOrigin::Api,
        )
        .unwrap();
        assert_eq!(p.sasl.unwrap().password, SecretRef::Env("KMP_SECRET".into()));

        // Kafka 4.1: a bare login module beside the KIP-1139 keys.
        let p = parse_client_props(
            &props(
                &[
                    &base[..],
                    &[
                        (
                            "sasl.jaas.config",
                            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required ;",
                        ),
                        ("sasl.oauthbearer.client.credentials.client.id", "kmp-proxy"),
                        ("sasl.oauthbearer.client.credentials.client.secret", "inline-secret"),
                    ],
                ]
                .concat(),
            ),
            PropsOrigin::ConfigFile,
        )
        .unwrap();
        assert_eq!(p.sasl.unwrap().username, "kmp-proxy");
    }

    #[test]
    fn oauthbearer_problems_are_reported_together_and_never_echo_the_secret() {
        let e = parse_client_props(
            &props(&[
                ("security.protocol", "SASL_SSL"),
                ("ssl.truststore.location", "/ca.pem"),
                ("sasl.mechanism", "OAUTHBEARER"),
                ("sasl.oauthbearer.token.endpoint.url", "ftp://idp/token"),
                ("sasl.login.callback.handler.class", "com.example.Custom"),
                ("sasl.oauthbearer.client.credentials.client.id", "x"),
                ("sasl.oauthbearer.client.credentials.client.secret", "hunter2"),
            ]),
            PropsOrigin::Api,
        )
        .unwrap_err();
        let all = e.join("\n");
        for want in ["ftp://idp/token", "com.example.Custom", "by reference"] {
            assert!(all.contains(want), "missing {want}: {all}");
        }
        assert!(!all.contains("hunter2"), "{all}");
        let e = parse_client_props(
            &props(&[
                ("security.protocol", "SASL_PLAINTEXT"),
                ("sasl.oauthbearer.scope", "kafka"),
                ("sasl.mechanism", "PLAIN"),
            ]),
            PropsOrigin::ConfigFile,
        )
        .unwrap_err();
        assert!(e.iter().any(|m| m.contains("sasl.oauthbearer.scope") && m.contains("OAUTHBEARER")), "{e:?}");
    }
}
