//! The destination cluster's brokers: opening connections to them (`connect`, TLS and SASL
//! toward brokers included), the broker view with one client-facing listener per broker
//! (`cluster`), and the ApiVersions answers kept to answer new connections early while their
//! upstream opens (`early_versions`).

pub(crate) mod cluster;
pub(crate) mod connect;
pub(crate) mod early_versions;
