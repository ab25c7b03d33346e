//! Decoding and encoding whole frames with kafka-protocol, for the few APIs the proxy acts on.
//! Frames are always handled with their 4-byte length prefix (see `frame`).
//!
//! Which APIs get decoded is decided by the caller (proxy) before calling in here.
//!
//! Every decode runs under a budget (kafka-protocol's `budget`, a vendored patch): the structs a
//! frame decodes into may take at most [`REQUEST_DECODE_FACTOR`] (requests) or
//! [`RESPONSE_DECODE_FACTOR`] (responses) times the frame's size, plus [`DECODE_SLACK`]. An element
//! of a few bytes can decode into a struct of a hundred; without the budget a frame of empty
//! elements becomes gigabytes. Real clients and brokers stay far below the factors (the property
//! test `protocol/tests/decode_budget.rs` measures both).

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, budget};

use crate::error::{ProtocolError, Side};
use crate::frame::PREFIX;

fn api_name(key: ApiKey) -> &'static str {
    // Debug names are stable identifiers ("Metadata", "Fetch", …) used in errors and metrics.
    key.name()
}

/// Extension giving every [`ApiKey`] a static name.
pub trait ApiKeyName {
    /// `"Metadata"`, `"Produce"`, …
    fn name(&self) -> &'static str;
}

impl ApiKeyName for ApiKey {
    fn name(&self) -> &'static str {
        crate::names::name(*self)
    }
}

/// The most a request frame's decoded structs may take, as a multiple of the frame's size. The
/// leanest real request measured, a reassignment cancel (6 bytes a partition, a 56-byte struct),
/// takes 9×; four-byte hostile elements decoding into 88-byte structs take 22×.
pub const REQUEST_DECODE_FACTOR: usize = 16;
/// The most a response frame's decoded structs may take, as a multiple of the frame's size.
pub const RESPONSE_DECODE_FACTOR: usize = 16;
/// Decoded bytes every frame may take beyond its factor (small frames, fixed-size headers).
pub const DECODE_SLACK: usize = 256 * 1024;

/// The decode budget of a frame of `len` bytes at `factor`.
pub fn decode_limit(len: usize, factor: usize) -> usize {
    len.saturating_mul(factor).saturating_add(DECODE_SLACK)
}

/// Decodes a response frame of `key`/`version`: header and body. Zero-copy for byte fields.
pub fn decode_response<T: Decodable>(frame: &Bytes, key: ApiKey, version: i16) -> Result<(ResponseHeader, T), ProtocolError> {
    let err = |detail: String| ProtocolError::Codec {
        op: "decode",
        api: api_name(key),
        version,
        detail,
        side: Side::Broker,
    };
    let mut body = frame.slice(PREFIX.min(frame.len())..);
    budget::within(decode_limit(frame.len(), RESPONSE_DECODE_FACTOR), || {
        let header = ResponseHeader::decode(&mut body, key.response_header_version(version)).map_err(|e| err(e.to_string()))?;
        let msg = T::decode(&mut body, version).map_err(|e| err(e.to_string()))?;
        Ok((header, msg))
    })
}

/// Decodes a request frame of `key`/`version`: header and body.
pub fn decode_request<T: Decodable>(frame: &Bytes, key: ApiKey, version: i16) -> Result<(RequestHeader, T), ProtocolError> {
    let err = |detail: String| ProtocolError::Codec {
        op: "decode",
        api: api_name(key),
        version,
        detail,
        side: Side::Client,
    };
    let mut body = frame.slice(PREFIX.min(frame.len())..);
    budget::within(decode_limit(frame.len(), REQUEST_DECODE_FACTOR), || {
        let header = RequestHeader::decode(&mut body, key.request_header_version(version)).map_err(|e| err(e.to_string()))?;
        let msg = T::decode(&mut body, version).map_err(|e| err(e.to_string()))?;
        Ok((header, msg))
    })
}

/// Encodes a response frame (prefix, header, body).
pub fn encode_response<T: Encodable>(correlation_id: i32, key: ApiKey, version: i16, msg: &T) -> Result<Bytes, ProtocolError> {
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation_id;
    encode_frame(&header, key.response_header_version(version), msg, key, version)
}

/// Encodes a request frame (prefix, header, body).
pub fn encode_request<T: Encodable>(header: &RequestHeader, key: ApiKey, msg: &T) -> Result<Bytes, ProtocolError> {
    let version = header.request_api_version;
    encode_frame(header, key.request_header_version(version), msg, key, version)
}

/// Length prefix, then `header` at `header_version`, then `msg` at `version`, in one buffer.
fn encode_frame<H: Encodable, T: Encodable>(header: &H, header_version: i16, msg: &T, key: ApiKey, version: i16) -> Result<Bytes, ProtocolError> {
    let err = |detail: String| ProtocolError::Codec {
        op: "encode",
        api: api_name(key),
        version,
        detail,
        side: Side::Internal,
    };
    let size = header.compute_size(header_version).map_err(|e| err(e.to_string()))? + msg.compute_size(version).map_err(|e| err(e.to_string()))?;
    let mut buf = BytesMut::with_capacity(PREFIX + size);
    buf.put_i32(size as i32);
    header.encode(&mut buf, header_version).map_err(|e| err(e.to_string()))?;
    msg.encode(&mut buf, version).map_err(|e| err(e.to_string()))?;
    Ok(buf.freeze())
}
