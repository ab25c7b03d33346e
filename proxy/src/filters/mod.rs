//! The request pipeline: every request and every response passes an ordered chain of filters.
//! Each filter declares, from the API key and version alone (and what it knows about the
//! connection), whether it must see a frame — its decode predicate. A frame no filter asks for
//! stays raw bytes from client to broker and back; a filter that asks decodes only what it needs.
//!
//! Request filters may answer a request themselves (it is then not forwarded), reduce it (take
//! refused parts out) and register a merge that adds their answer for those parts to the broker's
//! response, or let it continue. Response filters rewrite what the broker answered.
//!
//! Adding a policy means adding one file here and one line in [`Chain::new`]. Moving frames
//! belongs to `session`; what a filter decides belongs to the filter.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use kmp_protocol::ProtocolError;

use crate::error::ProxyError;
use crate::shared::Shared;

pub(crate) mod addresses;
pub(crate) mod api_versions;
pub(crate) mod authz;
pub(crate) mod broker_configs;
pub(crate) mod engine_identity;
pub(crate) mod fillers;
pub(crate) mod mirror_configs;
pub(crate) mod mirror_rpc;
pub(crate) mod mirror_topics;
pub(crate) mod refuse;
pub(crate) mod sasl;
pub(crate) mod sasl_terminate;
pub(crate) mod security_admin;
pub(crate) mod startup;
pub(crate) mod state_topic;
pub(crate) mod topic_ids;

pub(crate) use refuse::topics::Merge;

/// A boxed future borrowed from the filter and the exchange.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What one client connection is known to be: where it comes from and whom it authenticated as.
pub(crate) struct Conn {
    pub(crate) shared: Arc<Shared>,
    pub(crate) peer: SocketAddr,
    /// SASL progress and principal (observed in pass-through, decided in termination).
    pub(crate) sasl: Mutex<sasl::SaslState>,
    /// Termination mode: where this connection's own authentication stands.
    pub(crate) auth: Mutex<sasl_terminate::Progress>,
    /// The subject of the client's TLS certificate (mutual TLS), RFC 4514.
    pub(crate) tls_principal: Option<String>,
}

impl Conn {
    pub(crate) fn new(shared: Arc<Shared>, peer: SocketAddr, tls_principal: Option<String>) -> Self {
        Self {
            shared,
            peer,
            sasl: Mutex::new(sasl::SaslState::default()),
            auth: Mutex::new(sasl_terminate::Progress::default()),
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
    merges: Vec<Merge>,
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
    fn apply(merges: Vec<Merge>, mut response: Bytes) -> Result<Bytes, ProtocolError> {
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

    /// Rewrites a response it asked for (prefix included).
    fn on_response(&self, frame: Bytes, _api_key: i16, _api_version: i16, _conn: &Conn) -> Result<Bytes, ProtocolError> {
        Ok(frame)
    }
}

/// The ordered filters.
pub(crate) struct Chain {
    filters: Vec<Box<dyn Filter>>,
}

impl Chain {
    /// The proxy's chain. Order matters: versions first (unsupported requests close the
    /// connection before anything is decoded), then what the connection is (SASL), then policies
    /// that refuse, then what the proxy answers itself, then the guards of mirror topics; on the
    /// way back ApiVersions clamping, SASL outcome, filler masking, then address rewriting.
    /// `terminate`: the proxy authenticates clients itself (`sasl_terminate`) instead of
    /// watching their exchange with the broker (`sasl`).
    pub(crate) fn new(terminate: Option<sasl_terminate::SaslTerminator>) -> Self {
        let terminating = terminate.is_some();
        let sasl: Box<dyn Filter> = match terminate {
            Some(t) => Box::new(t),
            None => Box::new(sasl::SaslObserver),
        };
        let mut filters: Vec<Box<dyn Filter>> = vec![Box::new(api_versions::Versions), sasl];
        if terminating {
            // Every client acts as the proxy toward the brokers: security administration is
            // for the configured admin principals only.
            filters.push(Box::new(security_admin::SecurityAdminGuard));
        }
        filters.extend([
            Box::new(startup::StartupGate) as Box<dyn Filter>,
            Box::new(authz::MirrorAdminAuthz),
            Box::new(mirror_rpc::MirrorRpc),
            Box::new(state_topic::StateTopicGuard),
            Box::new(engine_identity::EngineIdentityGuard),
            Box::new(mirror_configs::MirrorConfigs),
            Box::new(broker_configs::BrokerConfigGuard),
            Box::new(mirror_topics::MirrorTopicWrites),
            Box::new(fillers::FillerMasking),
            Box::new(topic_ids::TopicIdLearner),
            Box::new(addresses::AddressRewrite),
        ]);
        Self { filters }
    }

    /// Runs a request through the chain.
    pub(crate) async fn request(&self, mut x: Exchange, conn: &Conn) -> Result<Outcome, ProxyError> {
        for f in &self.filters {
            if !f.wants_request(&x, conn) {
                continue;
            }
            if let Flow::Answer(response) = f.on_request(&mut x, conn).await? {
                let response = match response {
                    Some(r) => Some(Exchange::apply(std::mem::take(&mut x.merges), r)?),
                    None => None,
                };
                return Ok(Outcome::Answer(response));
            }
        }
        let merges = std::mem::take(&mut x.merges);
        let merge: Option<Merge> = if merges.is_empty() {
            None
        } else {
            Some(Box::new(move |resp| Exchange::apply(merges, resp)))
        };
        Ok(Outcome::Forward { frame: x.frame, merge })
    }

    /// Whether any filter may change the response to this forwarded request (see
    /// [`Filter::may_change_response`]).
    pub(crate) fn may_change_response(&self, api_key: i16, api_version: i16, request: Option<&Bytes>, conn: &Conn) -> bool {
        self.filters.iter().any(|f| f.may_change_response(api_key, api_version, request, conn))
    }

    /// Runs a broker's response through the chain.
    pub(crate) fn response(&self, mut frame: Bytes, api_key: i16, api_version: i16, conn: &Conn) -> Result<Bytes, ProtocolError> {
        for f in &self.filters {
            if f.wants_response(api_key, api_version, conn) {
                frame = f.on_response(frame, api_key, api_version, conn)?;
            }
        }
        Ok(frame)
    }
}
