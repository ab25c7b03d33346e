//! Mirror configs as Kafka config resources of type 64 (KIP-1279 CLUSTER_MIRROR): DescribeConfigs
//! and IncrementalAlterConfigs for such resources are answered by the proxy (the other resources
//! of the same request go to the broker and the answers are merged); AlterConfigs (the
//! non-incremental, deprecated form) is refused for them. The configs themselves are the
//! engine's (`Control::mirror_configs` / `alter_mirror`); secrets (`sasl.password`,
//! `sasl.jaas.config`, `ssl.keystore.key`) are described as sensitive with no value, as Kafka does.

use std::collections::HashSet;

use bytes::Bytes;
use kmp_mirror_engine::Control;
use kmp_protocol::ProtocolError;
use kmp_protocol::codec::decode_request;
use kmp_protocol::kafka_protocol::messages::describe_configs_response::{DescribeConfigsResourceResult, DescribeConfigsResult};
use kmp_protocol::kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, ApiKey, DescribeConfigsRequest, DescribeConfigsResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
};
use kmp_protocol::kafka_protocol::protocol::StrBytes;
use kmp_protocol::mirror_api::errors;

use super::api::{BoxFuture, Conn, Exchange, Filter, Flow};
use super::refuse::configs::{CLUSTER_MIRROR, is_config_api};
use super::refuse::{self, Decision, split, take};
use crate::error::ProxyError;

/// The filter answering cluster-mirror config resources (after `authz` let them through).
pub(crate) struct MirrorConfigs;

impl Filter for MirrorConfigs {
    fn wants_request(&self, x: &Exchange, _conn: &Conn) -> bool {
        let api_key = x.api_key;
        is_config_api(api_key)
    }

    fn on_request<'a>(&'a self, x: &'a mut Exchange, conn: &'a Conn) -> BoxFuture<'a, Result<Flow, ProxyError>> {
        Box::pin(async move {
            let decision = check(x.frame(), x.api_key, x.api_version, &conn.shared.mirrors.control()).await?;
            refuse::apply(decision, x, |_| {})
        })
    }
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// Answers the cluster-mirror resources of a config request; `Forward` when it has none.
pub(crate) async fn check(frame: &Bytes, key: i16, version: i16, control: &Control) -> Result<Decision, ProtocolError> {
    match ApiKey::try_from(key) {
        Ok(ApiKey::DescribeConfigs) => {
            let (_, req) = decode_request::<DescribeConfigsRequest>(frame, ApiKey::DescribeConfigs, version)?;
            let mut named = HashSet::new();
            let results: Vec<DescribeConfigsResult> = req
                .resources
                .iter()
                .filter(|r| r.resource_type == CLUSTER_MIRROR && named.insert(r.resource_name.as_str()))
                .map(|r| describe(control, r.resource_name.as_str(), r.configuration_keys.as_deref()))
                .collect();
            split::<DescribeConfigsRequest, DescribeConfigsResponse>(
                frame,
                ApiKey::DescribeConfigs,
                version,
                |req| take_mirrors(&mut req.resources, |r| (r.resource_type, r.resource_name.as_str().to_owned())),
                |req| req.resources.len(),
                move |resp, _| resp.results.extend(results),
            )
        }
        Ok(ApiKey::IncrementalAlterConfigs) => {
            let (_, req) = decode_request::<IncrementalAlterConfigsRequest>(frame, ApiKey::IncrementalAlterConfigs, version)?;
            let mut results = Vec::new();
            let mut named = HashSet::new();
            for r in req
                .resources
                .iter()
                .filter(|r| r.resource_type == CLUSTER_MIRROR && named.insert(r.resource_name.as_str()))
            {
                let ops: Vec<(String, i8, Option<String>)> = r
                    .configs
                    .iter()
                    .map(|c| (c.name.as_str().to_owned(), c.config_operation, c.value.as_ref().map(|v| v.as_str().to_owned())))
                    .collect();
                let (code, message) = if let Some((code, message)) = control.follower_refusal() {
                    (code, Some(message))
                } else if req.validate_only {
                    (errors::NONE, None)
                } else {
                    control.alter_mirror(r.resource_name.as_str(), &ops).await
                };
                let mut out = kmp_protocol::kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse::default();
                out.resource_type = CLUSTER_MIRROR;
                out.resource_name = r.resource_name.clone();
                out.error_code = code;
                out.error_message = message.map(StrBytes::from_string);
                results.push(out);
            }
            split::<IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse>(
                frame,
                ApiKey::IncrementalAlterConfigs,
                version,
                |req| take_mirrors(&mut req.resources, |r| (r.resource_type, r.resource_name.as_str().to_owned())),
                |req| req.resources.len(),
                move |resp, _| resp.responses.extend(results),
            )
        }
        Ok(ApiKey::AlterConfigs) => split::<AlterConfigsRequest, AlterConfigsResponse>(
            frame,
            ApiKey::AlterConfigs,
            version,
            |req| take_mirrors(&mut req.resources, |r| (r.resource_type, r.resource_name.as_str().to_owned())),
            |req| req.resources.len(),
            |resp, refused| {
                for (name, _) in refused {
                    let mut out = kmp_protocol::kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse::default();
                    out.resource_type = CLUSTER_MIRROR;
                    out.resource_name = s(name);
                    out.error_code = errors::INVALID_REQUEST;
                    out.error_message = Some(s("cluster mirror configs are changed with IncrementalAlterConfigs"));
                    resp.responses.push(out);
                }
            },
        ),
        _ => Ok(Decision::Forward),
    }
}

/// Takes the cluster-mirror resources out of a request (once per distinct name: a mirror named
/// twice is answered once).
fn take_mirrors<T>(items: &mut Vec<T>, what: impl Fn(&T) -> (i8, String)) -> Vec<(String, StrBytes)> {
    take(items, |i| {
        let (kind, name) = what(i);
        (kind == CLUSTER_MIRROR).then(|| (name, String::new()))
    })
}

fn describe(control: &Control, name: &str, keys: Option<&[StrBytes]>) -> DescribeConfigsResult {
    let mut r = DescribeConfigsResult::default();
    r.resource_type = CLUSTER_MIRROR;
    r.resource_name = s(name);
    let Some(configs) = control.mirror_configs(name) else {
        r.error_code = errors::UNKNOWN_CLUSTER_MIRROR;
        r.error_message = Some(s(&format!("cluster mirror {name} does not exist")));
        return r;
    };
    r.configs = configs
        .into_iter()
        .filter(|(k, _, _)| keys.is_none_or(|ks| ks.is_empty() || ks.iter().any(|w| w.as_str() == k.as_str())))
        .map(|(k, v, sensitive)| {
            let mut c = DescribeConfigsResourceResult::default();
            c.name = s(&k);
            c.value = v.as_deref().map(s);
            c.is_sensitive = sensitive;
            c.config_source = 0; // UNKNOWN: mirror configs have no Kafka config source
            c.config_type = 2; // STRING
            c
        })
        .collect();
    r
}
