//! The proxy crate's error type, classified by side like the protocol crate's.

use kmp_protocol::{ProtocolError, Side};

/// Why a connection, listener or the whole proxy stopped.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// A protocol error on a connection.
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    /// An upstream broker could not be reached.
    #[error("cannot connect to upstream broker {addr}: {detail}")]
    UpstreamConnect { addr: String, detail: String },
    /// No bootstrap broker is configured or reachable.
    #[error("no upstream broker is reachable")]
    NoUpstream,
    /// The client sent a request the proxy refuses to forward.
    #[error("unsupported request: api key {api_key} v{api_version}")]
    UnsupportedRequest { api_key: i16, api_version: i16 },
    /// Binding or serving a listener failed.
    #[error("listener {addr}: {source}")]
    Listener { addr: String, source: std::io::Error },
    /// A write arrived before the mirror engine loaded its state (retriable for the client).
    #[error("the mirror state is not loaded yet; closing so the client retries")]
    NotReady,
    /// The connection was idle or sent part of a frame for too long.
    #[error("connection closed: {0}")]
    Timeout(&'static str),
    /// TLS or SASL settings cannot be used (unreadable file, bad PEM, missing secret).
    #[error("security settings: {0}")]
    Security(String),
    /// Writing to the client failed.
    #[error("client connection: {0}")]
    ClientIo(std::io::Error),
}

impl ProxyError {
    /// The side responsible for this error.
    pub fn side(&self) -> Side {
        match self {
            Self::Protocol(e) => e.side(),
            Self::UpstreamConnect { .. } | Self::NoUpstream => Side::Broker,
            Self::UnsupportedRequest { .. } | Self::ClientIo(_) => Side::Client,
            Self::Listener { .. } | Self::NotReady | Self::Security(_) => Side::Internal,
            Self::Timeout(_) => Side::Client,
        }
    }
}
