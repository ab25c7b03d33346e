//! The filter API: what a filter is ([`Filter`]), what it sees of one request ([`Exchange`]) and of
//! its connection ([`Conn`]), and what it may decide ([`Flow`], a [`Merge`] for the response).
//! The chain that runs the filters is `filters/mod.rs`; every filter imports this file, never
//! that one.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use kmp_protocol::{ProtocolError, peek};

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
    /// The client listener the connection came in on: its authentication and whether mirror
    /// management is allowed on it.
    pub(crate) listener: Arc<kmp_config::ClientListener>,
    /// That listener's index among the configured ones (its broker addresses in `cluster`).
    pub(crate) exposure: usize,
}

impl Conn {
    pub(crate) fn new(
        shared: Arc<Shared>,
        peer: SocketAddr,
        tls_principal: Option<String>,
        listener: Arc<kmp_config::ClientListener>,
        exposure: usize,
    ) -> Self {
        Self {
            shared,
            peer,
            sasl: Mutex::new(SaslState::default()),
            auth: Mutex::new(Progress::default()),
            tls_principal,
            listener,
            exposure,
        }
    }
}

/// One request on its way through the chain.
pub(crate) struct Exchange {
    pub(crate) api_key: i16,
    pub(crate) api_version: i16,
    pub(crate) correlation_id: i32,
    /// The request as it will be forwarded (filters may reduce it: [`Exchange::set_frame`]).
    frame: Bytes,
    /// Applied to the broker's response (or to a filter's answer), last registered first.
    pub(super) merges: Vec<Merge>,
    /// A Produce's topics, scanned once for every filter that asks ([`Exchange::produce_topics`])
    /// and forgotten when the frame is reduced.
    produce_topics: OnceLock<Option<Vec<ProducedTopic>>>,
}

/// A topic a Produce request names: by name (v3-12, the bytes of the frame) or by id (v13+).
pub(crate) enum ProducedTopic {
    Name(Bytes),
    Id([u8; 16]),
}

impl Exchange {
    pub(crate) fn new(frame: Bytes, api_key: i16, api_version: i16, correlation_id: i32) -> Self {
        Self {
            api_key,
            api_version,
            correlation_id,
            frame,
            merges: Vec::new(),
            produce_topics: OnceLock::new(),
        }
    }

    /// The request as it will be forwarded.
    pub(crate) fn frame(&self) -> &Bytes {
        &self.frame
    }

    /// Replaces the request to forward (a filter took refused parts out of it).
    pub(crate) fn set_frame(&mut self, frame: Bytes) {
        self.frame = frame;
        self.produce_topics = OnceLock::new();
    }

    /// The request to forward, once the chain is through with it.
    pub(super) fn into_frame(self) -> Bytes {
        self.frame
    }

    /// The topics this Produce request names, from one allocation-free scan of the frame (the
    /// records are skipped by their length) shared by every filter that asks: `None` when it
    /// cannot be scanned (its decode then gives the error). Only for Produce requests.
    pub(crate) fn produce_topics(&self) -> Option<&[ProducedTopic]> {
        self.produce_topics
            .get_or_init(|| {
                let mut topics = Vec::new();
                peek::produce_names_any(&self.frame, &self.peek(), |t| {
                    topics.push(match t {
                        peek::ProduceTopic::Name(n) => ProducedTopic::Name(self.frame.slice_ref(n)),
                        peek::ProduceTopic::Id(id) => ProducedTopic::Id(*id),
                    });
                    false
                })
                .ok()
                .map(|_| topics)
            })
            .as_deref()
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

/// Whether the response to this Fetch request may answer a partition of a topic the predicates
/// pick (`by_name` before v13, `by_id` from v13 on): the request names one, or it is an
/// incremental fetch (the session's other partitions answer too; epoch 0 opens a session and -1
/// fetches without one, and then exactly the partitions asked for answer), or it cannot be
/// decoded. For response filters that act on some topics only (`may_change_response`).
pub(crate) fn fetch_may_answer(request: &Bytes, api_version: i16, by_name: impl Fn(&str) -> bool, by_id: impl Fn(&[u8; 16]) -> bool) -> bool {
    use kmp_protocol::kafka_protocol::messages::{ApiKey, FetchRequest};
    let Ok((_, fetch)) = kmp_protocol::codec::decode_request::<FetchRequest>(request, ApiKey::Fetch, api_version) else {
        return true;
    };
    fetch.session_epoch > 0
        || fetch.topics.iter().any(|t| {
            if api_version >= 13 {
                by_id(t.topic_id.as_bytes())
            } else {
                by_name(t.topic.as_str())
            }
        })
}

#[cfg(test)]
mod tests {
    use kmp_protocol::codec::encode_request;
    use kmp_protocol::kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kmp_protocol::kafka_protocol::messages::{ApiKey, ProduceRequest, RequestHeader, TopicName};
    use kmp_protocol::kafka_protocol::protocol::StrBytes;

    use super::*;

    fn produce(topics: &[&str]) -> Bytes {
        let mut req = ProduceRequest::default();
        req.acks = -1;
        for t in topics {
            let mut td = TopicProduceData::default();
            td.name = TopicName(StrBytes::from_string((*t).to_owned()));
            let mut pd = PartitionProduceData::default();
            pd.records = Some(Bytes::from_static(b"batch"));
            td.partition_data.push(pd);
            req.topic_data.push(td);
        }
        let mut h = RequestHeader::default();
        h.request_api_key = ApiKey::Produce as i16;
        h.request_api_version = 9;
        encode_request(&h, ApiKey::Produce, &req).unwrap()
    }

    fn names(x: &Exchange) -> Option<Vec<String>> {
        x.produce_topics().map(|ts| {
            ts.iter()
                .map(|t| match t {
                    ProducedTopic::Name(n) => String::from_utf8_lossy(n).into_owned(),
                    ProducedTopic::Id(_) => "id".to_owned(),
                })
                .collect()
        })
    }

    #[test]
    fn a_produce_is_scanned_once_and_again_only_after_its_frame_is_reduced() {
        let mut x = Exchange::new(produce(&["a", "b"]), ApiKey::Produce as i16, 9, 1);
        assert_eq!(names(&x), Some(vec!["a".to_owned(), "b".to_owned()]));
        let first = x.produce_topics().map(<[ProducedTopic]>::as_ptr);
        assert_eq!(
            x.produce_topics().map(<[ProducedTopic]>::as_ptr),
            first,
            "the same scan is handed to every filter"
        );
        x.set_frame(produce(&["b"]));
        assert_eq!(names(&x), Some(vec!["b".to_owned()]), "a reduced frame is scanned anew");
        let mut cut = produce(&["a"]).to_vec();
        cut.truncate(cut.len() - 8);
        x.set_frame(Bytes::from(cut));
        assert_eq!(names(&x), None, "a frame that cannot be scanned");
    }
}
