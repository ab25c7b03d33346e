//! Versions: a request for an API or version the audited table does not offer closes the
//! connection before anything is decoded; ApiVersions handling: the broker's answer is intersected with the audited table
//! (`kmp_protocol::versions`) plus the mirror RPCs the proxy answers itself, and a request newer than the proxy understands gets the proxy's
//! own v0 UNSUPPORTED_VERSION answer (as a broker does, KIP-511) so the client retries lower.
//! Which versions are audited is decided in the table, not here.

use bytes::Bytes;
use kmp_protocol::ProtocolError;
use kmp_protocol::codec::{decode_response, encode_response};
use kmp_protocol::frame::PREFIX;
use kmp_protocol::kafka_protocol::ResponseError;
use kmp_protocol::kafka_protocol::messages::ApiKey;
use kmp_protocol::kafka_protocol::messages::api_versions_response::{ApiVersion, ApiVersionsResponse};
use kmp_protocol::{mirror_api, versions};
use tracing::warn;

use super::api::{BoxFuture, Conn, Exchange, Filter, Flow};
use crate::error::ProxyError;

/// The version filter (first in the chain).
pub(crate) struct Versions;

fn offered(api_key: i16, api_version: i16) -> bool {
    // The proxy's own KIP-1279 RPCs (v0) are not in the broker table but are offered.
    (mirror_api::is_answered(api_key) && api_version == 0) || versions::is_supported(api_key, api_version)
}

impl Filter for Versions {
    fn wants_request(&self, x: &Exchange, _conn: &Conn) -> bool {
        let (api_key, api_version) = (x.api_key, x.api_version);
        !offered(api_key, api_version) || (api_key == ApiKey::ApiVersions as i16 && api_version > max_supported())
    }

    fn on_request<'a>(&'a self, x: &'a mut Exchange, conn: &'a Conn) -> BoxFuture<'a, Result<Flow, ProxyError>> {
        Box::pin(async move {
            if x.api_key == ApiKey::ApiVersions as i16 {
                return Ok(Flow::Answer(Some(unsupported_version_response(x.correlation_id)?)));
            }
            conn.shared.metrics.client_frame_errors.inc();
            warn!(
                api_key = x.api_key,
                version = x.api_version,
                "closing connection: request for an API or version the proxy does not offer"
            );
            Err(ProxyError::UnsupportedRequest {
                api_key: x.api_key,
                api_version: x.api_version,
            })
        })
    }

    fn wants_response(&self, api_key: i16, _api_version: i16, _conn: &Conn) -> bool {
        api_key == ApiKey::ApiVersions as i16
    }

    fn on_response(&self, frame: Bytes, _api_key: i16, api_version: i16, _conn: &Conn) -> Result<Bytes, ProtocolError> {
        clamp_response(frame, api_version)
    }
}

/// Kafka's UNSUPPORTED_VERSION error code.
const UNSUPPORTED_VERSION: i16 = ResponseError::UnsupportedVersion.code();

/// Highest ApiVersions version the proxy can decode.
pub(crate) fn max_supported() -> i16 {
    versions::lookup(ApiKey::ApiVersions as i16).map_or(0, |a| a.max)
}

/// The proxy's own answer to an ApiVersions request it cannot decode the response of.
pub(crate) fn unsupported_version_response(correlation_id: i32) -> Result<Bytes, ProtocolError> {
    let mut resp = ApiVersionsResponse::default();
    resp.error_code = UNSUPPORTED_VERSION;
    let mut own = ApiVersion::default();
    own.api_key = ApiKey::ApiVersions as i16;
    own.min_version = 0;
    own.max_version = max_supported();
    resp.api_keys.push(own);
    encode_response(correlation_id, ApiKey::ApiVersions, 0, &resp)
}

/// Clamps a broker's ApiVersions response (frame with prefix) to the audited table.
pub(crate) fn clamp_response(frame: Bytes, request_version: i16) -> Result<Bytes, ProtocolError> {
    // The response header of ApiVersions is always v0 (correlation id only) and error_code is
    // the first body field in every version. A broker that rejects the version answers in v0.
    let error_code = frame.get(PREFIX + 4..PREFIX + 6).map(|b| i16::from_be_bytes([b[0], b[1]])).unwrap_or(0);
    let version = if error_code == UNSUPPORTED_VERSION { 0 } else { request_version };
    let (header, mut resp) = decode_response::<ApiVersionsResponse>(&frame, ApiKey::ApiVersions, version)?;
    resp.api_keys.retain_mut(|k| match versions::clamp(k.api_key, k.min_version, k.max_version) {
        Some((min, max)) => {
            k.min_version = min;
            k.max_version = max;
            true
        }
        None => false,
    });
    if resp.error_code == 0 {
        // The KIP-1279 mirror RPCs the proxy answers itself (provisional keys, see mirror_api).
        for &(key, min, max) in mirror_api::ANSWERED {
            let mut v = ApiVersion::default();
            v.api_key = key;
            v.min_version = min;
            v.max_version = max;
            resp.api_keys.push(v);
        }
    }
    encode_response(header.correlation_id, ApiKey::ApiVersions, version, &resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: i16, min: i16, max: i16) -> ApiVersion {
        let mut v = ApiVersion::default();
        v.api_key = key;
        v.min_version = min;
        v.max_version = max;
        v
    }

    #[test]
    fn broker_versions_are_clamped_and_unknown_keys_dropped() {
        for version in 0..=4 {
            let mut resp = ApiVersionsResponse::default();
            resp.api_keys = vec![entry(3, 0, 99), entry(52, 0, 2), entry(18, 0, 4), entry(500, 0, 1)];
            let frame = encode_response(9, ApiKey::ApiVersions, version, &resp).unwrap();
            let out = clamp_response(frame, version).unwrap();
            let (h, got) = decode_response::<ApiVersionsResponse>(&out, ApiKey::ApiVersions, version).unwrap();
            assert_eq!(h.correlation_id, 9);
            let keys: Vec<_> = got.api_keys.iter().map(|k| (k.api_key, k.min_version, k.max_version)).collect();
            let mut want = vec![(3, 0, 13), (18, 0, 4)];
            want.extend_from_slice(mirror_api::ANSWERED);
            assert_eq!(
                keys, want,
                "v{version}: Metadata clamped to 13, Vote(52) and 500 dropped, the mirror RPCs 94-104 added"
            );
        }
    }

    #[test]
    fn too_new_request_gets_a_v0_unsupported_version_answer() {
        let frame = unsupported_version_response(4).unwrap();
        let (_, got) = decode_response::<ApiVersionsResponse>(&frame, ApiKey::ApiVersions, 0).unwrap();
        assert_eq!(got.error_code, UNSUPPORTED_VERSION);
        assert_eq!((got.api_keys[0].api_key, got.api_keys[0].max_version), (18, 4));
        // And a broker's own v0 rejection passes through the clamp decoded as v0.
        let again = clamp_response(frame, 4).unwrap();
        let (_, got) = decode_response::<ApiVersionsResponse>(&again, ApiKey::ApiVersions, 0).unwrap();
        assert_eq!(got.error_code, UNSUPPORTED_VERSION);
    }
}
