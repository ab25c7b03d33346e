//! Shared refusals: how a request is answered for the parts a policy refuses, so that the
//! policies (one file or folder each in `filters/`) only say what to refuse and why, and never
//! import each other. Here: a refusal's [`Decision`] and how the chain applies it ([`apply`]),
//! the set of [`Protected`] topics a guard is given, taking refused items out of a request and
//! merging their answer into the broker's ([`split`], [`take`]) and the code refused topics get
//! ([`REFUSED_CODE`]). Below: `topics` decides and builds the refusal of the admin and
//! transaction requests that would change a protected topic (with `layout` for the requests that
//! recreate it or move its data), `produce` that of a Produce, `configs` that of config
//! resources, `mirror` the read-only mirror topics as a protected set, and `text` bounds the
//! refusal messages one answer carries (a mirror RPC's error answer is `mirror_api::error_response`).

use std::collections::HashMap;

use bytes::Bytes;
use kmp_protocol::ProtocolError;
use kmp_protocol::codec::{decode_request, decode_response, encode_request, encode_response};
use kmp_protocol::kafka_protocol::ResponseError;
use kmp_protocol::kafka_protocol::messages::{ApiKey, RequestHeader};
use kmp_protocol::kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::api::{Exchange, Flow, Merge};
use crate::error::ProxyError;

pub(crate) mod configs;
pub(crate) mod layout;
pub(crate) mod mirror;
pub(crate) mod produce;
pub(crate) mod text;
pub(crate) mod topics;

/// The code refused topics get (a Produce to a mirror topic: `produce::READ_ONLY_CODE`).
pub(crate) const REFUSED_CODE: i16 = ResponseError::TopicAuthorizationFailed.code();

/// What to do with a request.
pub(crate) enum Decision {
    Forward,
    /// Answer with this response (empty: an acks=0 Produce, which gets none); `u64` = topics
    /// (Produce: partitions) refused.
    Refuse(Bytes, u64),
    /// Forward `frame`, then `merge` the broker's response; `u64` = topics refused.
    Split(Bytes, Merge, u64),
}

/// Which topics a guard protects, and the refusal message for each.
pub(crate) trait Protected: Sync {
    /// The refusal message when `topic` is protected.
    fn by_name(&self, topic: &str) -> Option<String>;
    /// `(topic name, message)` when the topic with this id is protected.
    fn by_id(&self, id: &[u8; 16]) -> Option<(String, String)>;
    /// The refusal message when it cannot be told yet whether the topic with this id (not
    /// protected as far as is known) is protected: some protected topic's id is not known yet.
    /// Such a refusal is retriable.
    fn pending_id(&self, _id: &[u8; 16]) -> Option<String> {
        None
    }
    /// Whether any topic is protected at all.
    fn any(&self) -> bool {
        true
    }
    /// The code a Produce's refused partitions get (`produce`).
    fn produce_code(&self) -> i16 {
        REFUSED_CODE
    }
}

/// Turns a guard's decision into the chain's flow: a refusal answers (an empty answer means
/// "no response", acks=0), a split reduces the request and registers the merge; `count` gets the
/// number of refused parts.
pub(crate) fn apply(decision: Decision, x: &mut Exchange, count: impl FnOnce(u64)) -> Result<Flow, ProxyError> {
    match decision {
        Decision::Forward => Ok(Flow::Continue),
        Decision::Refuse(response, n) => {
            count(n);
            Ok(Flow::Answer((!response.is_empty()).then_some(response)))
        }
        Decision::Split(rest, merge, n) => {
            count(n);
            x.set_frame(rest);
            x.merge(merge);
            Ok(Flow::Continue)
        }
    }
}

/// Removes the items `hit` refuses and returns, once per distinct name, the name and the
/// (shared) message (see `text`).
pub(crate) fn take<T>(items: &mut Vec<T>, hit: impl Fn(&T) -> Option<(String, String)>) -> Vec<(String, StrBytes)> {
    text::take_refused(items, hit)
}

/// Decodes a request, takes the mirror topics out, and decides: forward untouched, refuse it
/// whole, or forward the rest and merge.
pub(crate) fn split<Req, Resp>(
    frame: &Bytes,
    key: ApiKey,
    version: i16,
    take_mirror: impl FnOnce(&mut Req) -> Vec<(String, StrBytes)>,
    remaining: impl Fn(&Req) -> usize,
    add: impl FnOnce(&mut Resp, &[(String, StrBytes)]) + Send + 'static,
) -> Result<Decision, ProtocolError>
where
    Req: Decodable + Encodable,
    Resp: Decodable + Encodable + Default,
{
    split_by(frame, key, version, take_mirror, remaining, add)
}

/// A request naming one protected thing: refused whole (with the answer `fill` makes) when `ours`
/// says it is protected, else forwarded untouched.
pub(crate) fn refuse_whole<Req, Resp>(
    frame: &Bytes,
    key: ApiKey,
    version: i16,
    ours: impl FnOnce(&Req) -> bool,
    fill: impl FnOnce(&Req, &mut Resp),
) -> Result<Decision, ProtocolError>
where
    Req: Decodable,
    Resp: Encodable + Default,
{
    let (header, req): (RequestHeader, Req) = decode_request(frame, key, version)?;
    if !ours(&req) {
        return Ok(Decision::Forward);
    }
    let mut resp = Resp::default();
    fill(&req, &mut resp);
    Ok(Decision::Refuse(encode_response(header.correlation_id, key, version, &resp)?, 1))
}

/// [`split`] of items named by another key than a topic name (a group, a coordinator key, a
/// quota entity): `take_out` takes them out with their messages, `remaining` counts what is
/// left, `add` puts the refusals in the answer.
pub(crate) fn split_by<Req, Resp, K>(
    frame: &Bytes,
    key: ApiKey,
    version: i16,
    take_out: impl FnOnce(&mut Req) -> Vec<(K, StrBytes)>,
    remaining: impl Fn(&Req) -> usize,
    add: impl FnOnce(&mut Resp, &[(K, StrBytes)]) + Send + 'static,
) -> Result<Decision, ProtocolError>
where
    Req: Decodable + Encodable,
    Resp: Decodable + Encodable + Default,
    K: Send + 'static,
{
    let (header, mut req): (RequestHeader, Req) = decode_request(frame, key, version)?;
    let refused = take_out(&mut req);
    if refused.is_empty() {
        return Ok(Decision::Forward);
    }
    let n = refused.len() as u64;
    if remaining(&req) == 0 {
        let mut resp = Resp::default();
        add(&mut resp, &refused);
        return Ok(Decision::Refuse(encode_response(header.correlation_id, key, version, &resp)?, n));
    }
    let rest = encode_request(&header, key, &req)?;
    let merge: Merge = Box::new(move |broker: Bytes| {
        let (h, mut resp): (_, Resp) = decode_response(&broker, key, version)?;
        add(&mut resp, &refused);
        encode_response(h.correlation_id, key, version, &resp)
    });
    Ok(Decision::Split(rest, merge, n))
}

/// The partitions a request names, by topic (a topic named twice gets the partitions of both),
/// for the answer to its refused topics.
pub(crate) fn partitions_by_topic<'a, P: IntoIterator<Item = i32>>(topics: impl Iterator<Item = (&'a str, P)>) -> HashMap<String, Vec<i32>> {
    let mut by_topic: HashMap<String, Vec<i32>> = HashMap::new();
    for (t, ps) in topics {
        by_topic.entry(t.to_owned()).or_default().extend(ps);
    }
    by_topic
}

/// The partitions of `topic` in a map of [`partitions_by_topic`] (none when it is not there).
pub(crate) fn partitions_of<'a>(partitions: &'a HashMap<String, Vec<i32>>, topic: &str) -> &'a [i32] {
    partitions.get(topic).map(Vec::as_slice).unwrap_or(&[])
}
