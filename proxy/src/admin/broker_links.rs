//! The proxy's broker connections on `/metrics`: how many it opened (its own — engine, election,
//! state follower, metadata refresh — and the upstream connections of client sessions) and how
//! many SASL logins it renewed on open connections (KIP-368 re-authentication), and how many
//! OAuth access tokens it fetched for OAUTHBEARER logins. The counts are
//! the protocol crate's (`kmp_protocol::security`); this module only names the families.
//! Collected by `collectors`.

use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::counter::ConstCounter;

use super::collectors::single;

/// The counters of one scrape: `(connections opened, SASL renewals, OAuth tokens fetched)`.
pub(crate) fn sample() -> (u64, u64, u64) {
    (
        kmp_protocol::security::connections_opened(),
        kmp_protocol::security::renewals_total(),
        kmp_protocol::security::oauth::tokens_fetched_total(),
    )
}

/// The three families.
pub(crate) fn encode(&(opened, renewals, tokens): &(u64, u64, u64), e: &mut DescriptorEncoder<'_>) -> fmt::Result {
    single(
        e,
        "broker_connections_opened",
        "Connections the proxy opened to brokers of the destination and the sources (its own, and the upstream connections of client sessions)",
        ConstCounter::new(opened),
    )?;
    single(
        e,
        "sasl_reauthentications",
        "SASL logins the proxy renewed on open broker connections before the broker's session lifetime ended (KIP-368)",
        ConstCounter::new(renewals),
    )?;
    single(
        e,
        "oauth_tokens_fetched",
        "Access tokens the proxy fetched from OAuth token endpoints for its OAUTHBEARER logins (client credentials grant)",
        ConstCounter::new(tokens),
    )
}
