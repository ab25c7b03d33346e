//! The filter API: what a filter is ([`Filter`]), what it sees of one request ([`Exchange`]) and of
//! its connection ([`Conn`]), and what it may decide ([`Flow`], a [`Merge`] for the response).
//! The chain that runs the filters is `filters/mod.rs`; every filter imports this file, never
//! that one.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use kmp_protocol::ProtocolError;

use super::identity::{Progress, SaslState};
use crate::error::ProxyError;
use crate::shared::Shared;

/// Merges the refused part into the broker's response to the rest.
pub(crate) type Merge = Box<dyn FnOnce(Bytes) -> Result<Bytes, ProtocolError> + Send>;

/// A boxed future borrowed from the filter and the exchange.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What one client connection is known to be: where it comes from and whom it authenticated as.
pub(crate) struct Conn {
    pub(crate) shared: Arc<Shared>,
    pub(crate) peer: SocketAddr,
    /// SASL progress and principal (observed in pass-through, decided in termination).
    pub(crate) sasl: Mutex<SaslState>,
    /// Termination mode: where this connection's own authentication stands.
    pub(crate) auth: Mutex<Progress>,
    /// The subject of the client's TLS certificate (mutual TLS), RFC 4514.
    pub(crate) tls_principal: Option<String>,
}

impl Conn {
    pub(crate) fn new(shared: Arc<Shared>, peer: SocketAddr, tls_principal: Option<String>) -> Self {
        Self {
            shared,
            peer,
            sasl: Mutex::new(SaslState::default()),
            auth: Mutex::new(Progress::default()),
            tls_principal,
        }
    }
}

/// One request on its way through the chain.
pub(crate) struct Exchange {
    pub(crate) api_key: i16,
    pub(crate) api_version: i16,
    pub(crate) correlation_id: i32,
    /// The request as it will be forwarded (filters may reduce it).
    pub(crate) frame: Bytes,
    /// Applied to the broker's response (or to a filter's answer), last registered first.
    pub(super) merges: Vec<Merge>,
}

impl Exchange {
    pub(crate) fn new(frame: Bytes, api_key: i16, api_version: i16, correlation_id: i32) -> Self {
        Self {
            api_key,
            api_version,
            correlation_id,
            frame,
            merges: Vec::new(),
        }
    }

    /// The peeked header, for the allocation-free scanners of `kmp_protocol::peek`.
    pub(crate) fn peek(&self) -> kmp_protocol::peek::RequestPeek {
        kmp_protocol::peek::RequestPeek {
            api_key: self.api_key,
            api_version: self.api_version,
            correlation_id: self.correlation_id,
        }
    }

    /// Registers a merge for the response.
    pub(crate) fn merge(&mut self, merge: Merge) {
        self.merges.push(merge);
    }

    /// Applies the merges `x` collected to a response, last registered first.
    pub(super) fn apply(merges: Vec<Merge>, mut response: Bytes) -> Result<Bytes, ProtocolError> {
        for m in merges.into_iter().rev() {
            response = m(response)?;
        }
        Ok(response)
    }
}

/// What a request filter decided.
pub(crate) enum Flow {
    /// Pass the (maybe reduced) request on to the next filter.
    Continue,
    /// Answer with this response instead of forwarding (`None`: no response, acks=0 Produce).
    Answer(Option<Bytes>),
}

/// What the session does with a request after the chain.
pub(crate) enum Outcome {
    /// Forward `frame` and apply `merge` (if any) to the broker's response.
    Forward { frame: Bytes, merge: Option<Merge> },
    /// Answer without forwarding (`None`: no response at all).
    Answer(Option<Bytes>),
}

/// One policy or rewrite.
pub(crate) trait Filter: Send + Sync {
    /// Decode predicate for requests: whether this filter must see this request. Decided on the
    /// API key and version, at most with an allocation-free scan of the raw frame.
    fn wants_request(&self, _x: &Exchange, _conn: &Conn) -> bool {
        false
    }

    /// Handles a request it asked for.
    fn on_request<'a>(&'a self, _x: &'a mut Exchange, _conn: &'a Conn) -> BoxFuture<'a, Result<Flow, ProxyError>> {
        Box::pin(async { Ok(Flow::Continue) })
    }

    /// Decode predicate for responses.
    fn wants_response(&self, _api_key: i16, _api_version: i16, _conn: &Conn) -> bool {
        false
    }

    /// Whether this filter may change the broker's response to a forwarded request (`request`:
    /// the forwarded frame, `None` once it is no longer at hand). `false` from every filter lets
    /// the session stream the response without reading it whole (`stream_copy`). Defaults to
    /// [`Filter::wants_response`]; a filter overrides it to look closer (content, state).
    fn may_change_response(&self, api_key: i16, api_version: i16, _request: Option<&Bytes>, conn: &Conn) -> bool {
        self.wants_response(api_key, api_version, conn)
    }

    /// Whether this filter's [`Filter::may_change_response`] must see the forwarded request
    /// again when the response arrives (a response that may be streamed is asked again then, and
    /// the request is no longer at hand unless the session kept a copy of it).
    fn keeps_request(&self, _api_key: i16, _api_version: i16, _conn: &Conn) -> bool {
        false
    }

    /// Rewrites a response it asked for (prefix included).
    fn on_response(&self, frame: Bytes, _api_key: i16, _api_version: i16, _conn: &Conn) -> Result<Bytes, ProtocolError> {
        Ok(frame)
    }
}
