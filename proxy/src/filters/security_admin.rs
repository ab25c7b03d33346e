//! Termination mode lends every client the proxy's own identity toward the brokers, so the APIs
//! that administer security would act as the proxy: a delegation token owned by the proxy, a new
//! SCRAM user, an ACL granting it all on a mirror topic, a quota on the engine — issue #35, N4,
//! where an ordinary user did exactly that and then wrote into a read-only topic directly. In
//! termination mode these APIs are refused with an authorization error unless the client
//! authenticated as one of `listener.auth.admin_principals`:
//!
//! * ACLs: DescribeAcls, CreateAcls, DeleteAcls (CLUSTER_AUTHORIZATION_FAILED);
//! * delegation tokens: Create/Renew/Expire/DescribeDelegationToken
//!   (DELEGATION_TOKEN_AUTHORIZATION_FAILED);
//! * SCRAM credentials: Describe/AlterUserScramCredentials; client quotas:
//!   Describe/AlterClientQuotas; features: UpdateFeatures (CLUSTER_AUTHORIZATION_FAILED);
//! * broker-level configs: BROKER and BROKER_LOGGER resources of AlterConfigs and
//!   IncrementalAlterConfigs (listener secrets, super users, log levels), the other resources of
//!   the request go on.
//!
//! Broker and controller registration never reach a broker through the proxy (`versions`: not
//! offered). In pass-through mode the broker sees the client's own identity and decides itself,
//! so this filter is not in the chain.

use bytes::Bytes;
use kmp_protocol::ProtocolError;
use kmp_protocol::codec::{decode_request, encode_response};
use kmp_protocol::kafka_protocol::ResponseError;
use kmp_protocol::kafka_protocol::messages::*;
use kmp_protocol::kafka_protocol::protocol::{Encodable, StrBytes};

use super::api::{BoxFuture, Conn, Exchange, Filter, Flow};
use super::refuse::Decision;
use super::refuse::configs;
use crate::error::ProxyError;

const BROKER_RESOURCE: i8 = 4;
const BROKER_LOGGER_RESOURCE: i8 = 8;

const MESSAGE: &str = "kafka-mirror-proxy: security administration (ACLs, delegation tokens, SCRAM credentials, quotas, features, \
                       broker configs) acts as the proxy's own principal toward the brokers in termination mode, and is allowed only \
                       to listener.auth.admin_principals";

/// The APIs refused whole (the config APIs are refused per resource).
fn is_security_api(key: ApiKey) -> bool {
    matches!(
        key,
        ApiKey::DescribeAcls
            | ApiKey::CreateAcls
            | ApiKey::DeleteAcls
            | ApiKey::CreateDelegationToken
            | ApiKey::RenewDelegationToken
            | ApiKey::ExpireDelegationToken
            | ApiKey::DescribeDelegationToken
            | ApiKey::DescribeUserScramCredentials
            | ApiKey::AlterUserScramCredentials
            | ApiKey::DescribeClientQuotas
            | ApiKey::AlterClientQuotas
            | ApiKey::UpdateFeatures
    )
}

/// Whether the client of `conn` is one of `listener.auth.admin_principals` (`User:name` or the
/// bare name; a certificate subject as written).
fn is_admin(conn: &Conn) -> bool {
    let admins = &conn.listener.auth.admin_principals;
    if admins.is_empty() {
        return false;
    }
    let user = conn.sasl.lock().unwrap_or_else(|e| e.into_inner()).principal.clone();
    let Some(p) = user.or_else(|| conn.tls_principal.clone()) else {
        return false;
    };
    admins.iter().any(|a| a == &p || a.strip_prefix("User:") == Some(p.as_str()))
}

/// The filter; in the chain in termination mode only.
pub(crate) struct SecurityAdminGuard;

impl Filter for SecurityAdminGuard {
    fn wants_request(&self, x: &Exchange, conn: &Conn) -> bool {
        match ApiKey::try_from(x.api_key) {
            Ok(k) if is_security_api(k) => !is_admin(conn),
            Ok(ApiKey::AlterConfigs | ApiKey::IncrementalAlterConfigs) => !is_admin(conn),
            _ => false,
        }
    }

    fn on_request<'a>(&'a self, x: &'a mut Exchange, conn: &'a Conn) -> BoxFuture<'a, Result<Flow, ProxyError>> {
        Box::pin(async move {
            let key = ApiKey::try_from(x.api_key).map_err(|_| ProxyError::Protocol(unknown(x.api_key)))?;
            if is_security_api(key) {
                conn.shared.metrics.refused("security_admin_not_allowed", 1);
                tracing::info!(peer = %conn.peer, api = x.api_key, "refused a security-administration request (termination mode, not an admin principal)");
                return Ok(Flow::Answer(Some(refusal(x.frame(), key, x.api_version, x.correlation_id)?)));
            }
            let code = ResponseError::ClusterAuthorizationFailed.code();
            let pick = |r: &configs::Resource<'_>| matches!(r.kind, BROKER_RESOURCE | BROKER_LOGGER_RESOURCE).then(|| MESSAGE.to_owned());
            Ok(match configs::refuse_any(x.frame(), x.api_key, x.api_version, code, &pick)? {
                Decision::Forward => Flow::Continue,
                Decision::Refuse(frame, n) => {
                    conn.shared.metrics.refused("security_admin_not_allowed", n);
                    Flow::Answer(Some(frame))
                }
                Decision::Split(rest, merge, n) => {
                    conn.shared.metrics.refused("security_admin_not_allowed", n);
                    x.set_frame(rest);
                    x.merge(merge);
                    Flow::Continue
                }
            })
        })
    }
}

fn unknown(key: i16) -> ProtocolError {
    ProtocolError::Malformed {
        what: "request",
        detail: format!("unknown api key {key}"),
        side: kmp_protocol::Side::Client,
    }
}

fn text() -> Option<StrBytes> {
    Some(StrBytes::from_static_str(MESSAGE))
}

fn encode<T: Encodable>(correlation_id: i32, key: ApiKey, version: i16, resp: &T) -> Result<Bytes, ProtocolError> {
    encode_response(correlation_id, key, version, resp)
}

/// The refusal of a whole security-administration request, in its own response type: a top-level
/// error where the response has one, else one error entry per item the request named.
fn refusal(frame: &Bytes, key: ApiKey, v: i16, id: i32) -> Result<Bytes, ProtocolError> {
    let cluster = ResponseError::ClusterAuthorizationFailed.code();
    let token = ResponseError::DelegationTokenAuthorizationFailed.code();
    match key {
        ApiKey::DescribeAcls => {
            let mut r = DescribeAclsResponse::default();
            r.error_code = cluster;
            r.error_message = text();
            encode(id, key, v, &r)
        }
        ApiKey::CreateAcls => {
            let (_, req) = decode_request::<CreateAclsRequest>(frame, key, v)?;
            let mut r = CreateAclsResponse::default();
            r.results = req
                .creations
                .iter()
                .map(|_| {
                    let mut e = create_acls_response::AclCreationResult::default();
                    e.error_code = cluster;
                    e.error_message = text();
                    e
                })
                .collect();
            encode(id, key, v, &r)
        }
        ApiKey::DeleteAcls => {
            let (_, req) = decode_request::<DeleteAclsRequest>(frame, key, v)?;
            let mut r = DeleteAclsResponse::default();
            r.filter_results = req
                .filters
                .iter()
                .map(|_| {
                    let mut e = delete_acls_response::DeleteAclsFilterResult::default();
                    e.error_code = cluster;
                    e.error_message = text();
                    e
                })
                .collect();
            encode(id, key, v, &r)
        }
        ApiKey::CreateDelegationToken => {
            let mut r = CreateDelegationTokenResponse::default();
            r.error_code = token;
            encode(id, key, v, &r)
        }
        ApiKey::RenewDelegationToken => {
            let mut r = RenewDelegationTokenResponse::default();
            r.error_code = token;
            encode(id, key, v, &r)
        }
        ApiKey::ExpireDelegationToken => {
            let mut r = ExpireDelegationTokenResponse::default();
            r.error_code = token;
            encode(id, key, v, &r)
        }
        ApiKey::DescribeDelegationToken => {
            let mut r = DescribeDelegationTokenResponse::default();
            r.error_code = token;
            encode(id, key, v, &r)
        }
        ApiKey::DescribeUserScramCredentials => {
            let mut r = DescribeUserScramCredentialsResponse::default();
            r.error_code = cluster;
            r.error_message = text();
            encode(id, key, v, &r)
        }
        ApiKey::AlterUserScramCredentials => {
            let (_, req) = decode_request::<AlterUserScramCredentialsRequest>(frame, key, v)?;
            let users = req
                .deletions
                .iter()
                .map(|d| d.name.clone())
                .chain(req.upsertions.iter().map(|u| u.name.clone()));
            let mut r = AlterUserScramCredentialsResponse::default();
            r.results = users
                .map(|name| {
                    let mut e = alter_user_scram_credentials_response::AlterUserScramCredentialsResult::default();
                    e.user = name;
                    e.error_code = cluster;
                    e.error_message = text();
                    e
                })
                .collect();
            encode(id, key, v, &r)
        }
        ApiKey::DescribeClientQuotas => {
            let mut r = DescribeClientQuotasResponse::default();
            r.error_code = cluster;
            r.error_message = text();
            r.entries = None;
            encode(id, key, v, &r)
        }
        ApiKey::AlterClientQuotas => {
            let (_, req) = decode_request::<AlterClientQuotasRequest>(frame, key, v)?;
            let mut r = AlterClientQuotasResponse::default();
            r.entries = req
                .entries
                .iter()
                .map(|e| {
                    let mut out = alter_client_quotas_response::EntryData::default();
                    out.error_code = cluster;
                    out.error_message = text();
                    out.entity = e
                        .entity
                        .iter()
                        .map(|d| {
                            let mut ed = alter_client_quotas_response::EntityData::default();
                            ed.entity_type = d.entity_type.clone();
                            ed.entity_name = d.entity_name.clone();
                            ed
                        })
                        .collect();
                    out
                })
                .collect();
            encode(id, key, v, &r)
        }
        ApiKey::UpdateFeatures => {
            let (_, req) = decode_request::<UpdateFeaturesRequest>(frame, key, v)?;
            let mut r = UpdateFeaturesResponse::default();
            r.error_code = cluster;
            r.error_message = text();
            r.results = req
                .feature_updates
                .iter()
                .map(|f| {
                    let mut e = update_features_response::UpdatableFeatureResult::default();
                    e.feature = f.feature.clone();
                    e.error_code = cluster;
                    e.error_message = text();
                    e
                })
                .collect();
            encode(id, key, v, &r)
        }
        _ => Err(unknown(key as i16)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmp_protocol::codec::{decode_response, encode_request};
    use kmp_protocol::kafka_protocol::protocol::Decodable;

    fn frame<T: Encodable>(key: ApiKey, v: i16, req: &T) -> Bytes {
        let mut h = RequestHeader::default();
        h.request_api_key = key as i16;
        h.request_api_version = v;
        h.correlation_id = 9;
        encode_request(&h, key, req).unwrap()
    }

    #[test]
    fn create_acls_is_answered_with_an_authorization_error_per_creation() {
        let mut req = CreateAclsRequest::default();
        req.creations = vec![Default::default(), Default::default()];
        let out = refusal(&frame(ApiKey::CreateAcls, 3, &req), ApiKey::CreateAcls, 3, 9).unwrap();
        let (h, resp) = decode_response::<CreateAclsResponse>(&out, ApiKey::CreateAcls, 3).unwrap();
        assert_eq!(h.correlation_id, 9);
        let codes: Vec<i16> = resp.results.iter().map(|r| r.error_code).collect();
        assert_eq!(codes, vec![ResponseError::ClusterAuthorizationFailed.code(); 2], "one refusal per ACL creation");
    }

    #[test]
    fn scram_credential_changes_are_refused_for_every_user_named() {
        let mut req = AlterUserScramCredentialsRequest::default();
        let mut up = alter_user_scram_credentials_request::ScramCredentialUpsertion::default();
        up.name = StrBytes::from_static_str("mallory");
        req.upsertions.push(up);
        let out = refusal(&frame(ApiKey::AlterUserScramCredentials, 0, &req), ApiKey::AlterUserScramCredentials, 0, 9).unwrap();
        let (_, resp) = decode_response::<AlterUserScramCredentialsResponse>(&out, ApiKey::AlterUserScramCredentials, 0).unwrap();
        assert_eq!(resp.results.len(), 1);
        assert_eq!(resp.results[0].user.as_str(), "mallory");
        assert_eq!(resp.results[0].error_code, ResponseError::ClusterAuthorizationFailed.code());
    }

    #[test]
    fn every_delegation_token_api_gets_the_token_authorization_error() {
        for (key, v) in [
            (ApiKey::CreateDelegationToken, 3),
            (ApiKey::RenewDelegationToken, 2),
            (ApiKey::ExpireDelegationToken, 2),
            (ApiKey::DescribeDelegationToken, 3),
        ] {
            let out = refusal(&Bytes::new(), key, v, 1).unwrap();
            let mut body = out.slice(4..);
            let _ = ResponseHeader::decode(&mut body, key.response_header_version(v)).unwrap();
            let code = i16::from_be_bytes([body[0], body[1]]);
            assert_eq!(code, ResponseError::DelegationTokenAuthorizationFailed.code(), "{key:?}");
        }
    }
}
