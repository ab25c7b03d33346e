//! Per-connection filter state that `api::Conn` carries: what the SASL observer
//! (`sasl`) saw of a pass-through authentication ([`SaslState`], read by `authz`), and where a
//! terminated authentication stands (`sasl_terminate`'s [`Progress`], read by the session to bound
//! frames before login). Kept here so that the filter API does not import any filter.

use kmp_config::SaslMechanism;
use kmp_protocol::security::scram::ScramServer;

/// SASL progress of one connection.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct SaslState {
    /// A SaslHandshake was sent: until `principal` is set the connection is unauthenticated.
    pub(crate) started: bool,
    pub(crate) mechanism: String,
    /// The user name the client claims, until the broker accepts it.
    pub(crate) claimed: Option<String>,
    /// Successful SaslAuthenticate responses so far in this exchange.
    pub(crate) accepted_steps: u8,
    /// The principal the broker accepted.
    pub(crate) principal: Option<String>,
}

impl SaslState {
    /// Whether SASL was started and has not (yet) succeeded.
    pub(crate) fn in_progress(&self) -> bool {
        self.started && self.principal.is_none()
    }

    /// SaslAuthenticate steps the broker accepts before the principal is known (`None`: it is
    /// never visible to the proxy).
    pub(crate) fn steps_needed(&self) -> Option<u8> {
        match self.mechanism.as_str() {
            "PLAIN" => Some(1),
            m if m.starts_with("SCRAM-") => Some(2),
            _ => None, // OAUTHBEARER, GSSAPI: the principal is not visible to the proxy
        }
    }
}

/// Where one connection's authentication stands.
#[derive(Default)]
pub(crate) enum Progress {
    #[default]
    Start,
    /// SaslHandshake accepted this mechanism; SaslAuthenticate steps follow. `Some(principal)`:
    /// a re-authentication (KIP-368) of a connection authenticated as `principal`, which the new
    /// login must name again.
    Handshaken(SaslMechanism, Option<Box<ScramServer>>, Option<String>),
    /// Authenticated; `until`: when the session ends (`listener.auth.session_lifetime_ms`), after
    /// which only a re-authentication is accepted.
    Authenticated { until: Option<std::time::Instant> },
    /// OAUTHBEARER: the token was refused and the client told so with RFC 7628's error challenge;
    /// its next SaslAuthenticate (a lone `\x01`) gets the failure.
    Challenged,
    /// Failed: the connection is closed at its next request.
    Failed,
}
