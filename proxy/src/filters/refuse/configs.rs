//! Refusing some resources of a config request (DescribeConfigs, AlterConfigs,
//! IncrementalAlterConfigs) while the others go to the broker: the policy filters (`authz`,
//! `broker_configs`, `security_admin`, `topics`) say which resources and why; this module takes them out, answers them
//! with an error and merges that answer into the broker's response. What to refuse is not decided
//! here.

use bytes::Bytes;
use kmp_protocol::ProtocolError;
use kmp_protocol::codec::{decode_request, decode_response, encode_request, encode_response};
use kmp_protocol::kafka_protocol::messages::RequestHeader;
use kmp_protocol::kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, ApiKey, DescribeConfigsRequest, DescribeConfigsResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse, alter_configs_response, describe_configs_response, incremental_alter_configs_response,
};
use kmp_protocol::kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::Decision;
use super::text::{Shown, take_refused};

/// `ConfigResource.Type.CLUSTER_MIRROR` in the KIP-1279 prototype.
pub(crate) const CLUSTER_MIRROR: i8 = 64;

/// Whether the request may carry cluster-mirror resources.
pub(crate) fn is_config_api(key: i16) -> bool {
    matches!(
        ApiKey::try_from(key),
        Ok(ApiKey::DescribeConfigs | ApiKey::IncrementalAlterConfigs | ApiKey::AlterConfigs)
    )
}

/// One resource as a policy sees it: type, name and the config keys it names.
pub(crate) struct Resource<'a> {
    pub(crate) kind: i8,
    pub(crate) name: &'a str,
    pub(crate) keys: Vec<&'a str>,
}

/// A policy: the refusal message for a resource it refuses.
pub(crate) type Pick<'a> = &'a dyn Fn(&Resource<'_>) -> Option<String>;

/// A config request type whose resources can be refused one by one.
pub(crate) trait ConfigRequest: Decodable + Encodable + Sized {
    type Response: Decodable + Encodable + Default + Send + 'static;
    const KEY: ApiKey;
    /// Removes the resources `pick` refuses; returns `((type, name), message)` once per distinct
    /// resource, equal messages sharing one buffer.
    fn take(&mut self, pick: Pick<'_>) -> Vec<((i8, String), StrBytes)>;
    fn remaining(&self) -> usize;
    /// Adds an error entry for a refused resource to the response.
    fn answer(resp: &mut Self::Response, kind: i8, name: &str, code: i16, message: Option<StrBytes>);
}

fn take_from<T>(items: &mut Vec<T>, view: fn(&T) -> Resource<'_>, pick: Pick<'_>) -> Vec<((i8, String), StrBytes)> {
    take_refused(items, |i| {
        let r = view(i);
        pick(&r).map(|msg| ((r.kind, r.name.to_owned()), msg))
    })
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// Implements [`ConfigRequest`] for one request type: its resource type, where the config keys
/// are, and the response's resource-entry type and list.
macro_rules! config_request {
    ($req:ty, $resp:ty, $key:ident, $resource:ty, |$r:ident| $keys:expr, $entry:ty, $list:ident) => {
        impl ConfigRequest for $req {
            type Response = $resp;
            const KEY: ApiKey = ApiKey::$key;
            fn take(&mut self, pick: Pick<'_>) -> Vec<((i8, String), StrBytes)> {
                fn view($r: &$resource) -> Resource<'_> {
                    Resource {
                        kind: $r.resource_type,
                        name: $r.resource_name.as_str(),
                        keys: $keys,
                    }
                }
                take_from(&mut self.resources, view, pick)
            }
            fn remaining(&self) -> usize {
                self.resources.len()
            }
            fn answer(resp: &mut Self::Response, kind: i8, name: &str, code: i16, message: Option<StrBytes>) {
                let mut e = <$entry>::default();
                e.resource_type = kind;
                e.resource_name = s(name);
                e.error_code = code;
                e.error_message = message;
                resp.$list.push(e);
            }
        }
    };
}

config_request!(
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeConfigs,
    kmp_protocol::kafka_protocol::messages::describe_configs_request::DescribeConfigsResource,
    |r| r.configuration_keys.iter().flatten().map(|k| k.as_str()).collect(),
    describe_configs_response::DescribeConfigsResult,
    results
);
config_request!(
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    IncrementalAlterConfigs,
    kmp_protocol::kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource,
    |r| r.configs.iter().map(|c| c.name.as_str()).collect(),
    incremental_alter_configs_response::AlterConfigsResourceResponse,
    responses
);
config_request!(
    AlterConfigsRequest,
    AlterConfigsResponse,
    AlterConfigs,
    kmp_protocol::kafka_protocol::messages::alter_configs_request::AlterConfigsResource,
    |r| r.configs.iter().map(|c| c.name.as_str()).collect(),
    alter_configs_response::AlterConfigsResourceResponse,
    responses
);

/// Refuses the resources `pick` names with `code`: forward untouched, answer alone, or forward
/// the rest and merge.
pub(crate) fn refuse<Req: ConfigRequest>(frame: &Bytes, version: i16, code: i16, pick: Pick<'_>) -> Result<Decision, ProtocolError> {
    let (header, mut req): (RequestHeader, Req) = decode_request(frame, Req::KEY, version)?;
    let refused = req.take(pick);
    if refused.is_empty() {
        return Ok(Decision::Forward);
    }
    let n = refused.len() as u64;
    let add = move |resp: &mut Req::Response| {
        let mut shown = Shown::default();
        for ((kind, name), msg) in &refused {
            Req::answer(resp, *kind, name, code, shown.text(msg));
        }
    };
    if req.remaining() == 0 {
        let mut resp = Req::Response::default();
        add(&mut resp);
        return Ok(Decision::Refuse(encode_response(header.correlation_id, Req::KEY, version, &resp)?, n));
    }
    let rest = encode_request(&header, Req::KEY, &req)?;
    let merge: crate::filters::api::Merge = Box::new(move |broker: Bytes| {
        let (h, mut resp) = decode_response::<Req::Response>(&broker, Req::KEY, version)?;
        add(&mut resp);
        encode_response(h.correlation_id, Req::KEY, version, &resp)
    });
    Ok(Decision::Split(rest, merge, n))
}

/// [`refuse`] for any config API key (`Forward` for other keys).
pub(crate) fn refuse_any(frame: &Bytes, api_key: i16, version: i16, code: i16, pick: Pick<'_>) -> Result<Decision, ProtocolError> {
    match ApiKey::try_from(api_key) {
        Ok(ApiKey::DescribeConfigs) => refuse::<DescribeConfigsRequest>(frame, version, code, pick),
        Ok(ApiKey::IncrementalAlterConfigs) => refuse::<IncrementalAlterConfigsRequest>(frame, version, code, pick),
        Ok(ApiKey::AlterConfigs) => refuse::<AlterConfigsRequest>(frame, version, code, pick),
        _ => Ok(Decision::Forward),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmp_protocol::kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};

    fn request(resources: &[(i8, &str, &[&str])]) -> Bytes {
        let mut req = IncrementalAlterConfigsRequest::default();
        for (kind, name, keys) in resources {
            let mut r = AlterConfigsResource::default();
            r.resource_type = *kind;
            r.resource_name = s(name);
            for k in *keys {
                let mut c = AlterableConfig::default();
                c.name = s(k);
                c.value = Some(s("1000"));
                r.configs.push(c);
            }
            req.resources.push(r);
        }
        let mut h = RequestHeader::default();
        h.request_api_key = ApiKey::IncrementalAlterConfigs as i16;
        h.request_api_version = 1;
        h.correlation_id = 7;
        encode_request(&h, ApiKey::IncrementalAlterConfigs, &req).unwrap()
    }

    #[test]
    fn picked_resources_are_answered_with_the_code_and_the_rest_is_forwarded_and_merged() {
        let pick = |r: &Resource<'_>| (r.kind == 4 && r.keys.contains(&"log.retention.ms")).then(|| "no".to_owned());
        let plain = request(&[(2, "t", &["retention.ms"])]);
        assert!(matches!(
            refuse_any(&plain, ApiKey::IncrementalAlterConfigs as i16, 1, 44, &pick).unwrap(),
            Decision::Forward
        ));
        let only = request(&[(4, "", &["log.retention.ms"])]);
        let Decision::Refuse(frame, 1) = refuse_any(&only, ApiKey::IncrementalAlterConfigs as i16, 1, 44, &pick).unwrap() else {
            panic!("refused whole")
        };
        let (h, resp) = decode_response::<IncrementalAlterConfigsResponse>(&frame, ApiKey::IncrementalAlterConfigs, 1).unwrap();
        assert_eq!((h.correlation_id, resp.responses.len(), resp.responses[0].error_code), (7, 1, 44));
        let mixed = request(&[(2, "t", &["retention.ms"]), (4, "", &["log.retention.ms"])]);
        let Decision::Split(rest, merge, 1) = refuse_any(&mixed, ApiKey::IncrementalAlterConfigs as i16, 1, 44, &pick).unwrap() else {
            panic!("split")
        };
        let (_, fwd) = decode_request::<IncrementalAlterConfigsRequest>(&rest, ApiKey::IncrementalAlterConfigs, 1).unwrap();
        assert_eq!(fwd.resources.len(), 1);
        assert_eq!(fwd.resources[0].resource_type, 2);
        let mut broker = IncrementalAlterConfigsResponse::default();
        let mut ok = incremental_alter_configs_response::AlterConfigsResourceResponse::default();
        ok.resource_type = 2;
        ok.resource_name = s("t");
        broker.responses.push(ok);
        let merged = merge(encode_response(7, ApiKey::IncrementalAlterConfigs, 1, &broker).unwrap()).unwrap();
        let (_, resp) = decode_response::<IncrementalAlterConfigsResponse>(&merged, ApiKey::IncrementalAlterConfigs, 1).unwrap();
        let got: Vec<_> = resp.responses.iter().map(|r| (r.resource_type, r.error_code)).collect();
        assert_eq!(got, vec![(2, 0), (4, 44)]);
    }
}
