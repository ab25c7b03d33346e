//! AlterClientQuotas entries naming the proxy's identities on the destination (its client ids,
//! its user): refused with POLICY_VIOLATION, one refusal per entry; the other entries go to the
//! broker and both answers are merged.

use bytes::Bytes;
use kmp_protocol::ProtocolError;
use kmp_protocol::kafka_protocol::ResponseError;
use kmp_protocol::kafka_protocol::messages::alter_client_quotas_request::EntryData;
use kmp_protocol::kafka_protocol::messages::alter_client_quotas_response::{EntityData, EntryData as EntryResult};
use kmp_protocol::kafka_protocol::messages::{AlterClientQuotasRequest, AlterClientQuotasResponse, ApiKey};
use kmp_protocol::kafka_protocol::protocol::StrBytes;

use super::Protected;
use crate::filters::refuse::text::Shown;
use crate::filters::refuse::{Decision, split_by};

/// The message of every refused quota entry.
fn quota_text() -> StrBytes {
    StrBytes::from_static_str(
        "this quota entity names kafka-mirror-proxy's own identity on the destination (its client ids or its user); a quota on it would throttle mirroring, so the proxy refuses it",
    )
}

/// AlterClientQuotas: the entries naming the proxy's identities are refused, the others go to
/// the broker.
pub(super) fn check(frame: &Bytes, version: i16, who: &Protected) -> Result<Decision, ProtocolError> {
    split_by::<AlterClientQuotasRequest, AlterClientQuotasResponse, Vec<EntityData>>(
        frame,
        ApiKey::AlterClientQuotas,
        version,
        |req| {
            let mut refused = Vec::new();
            req.entries.retain(|e| {
                let ours = names_proxy(e, who);
                if ours {
                    refused.push((entity(e), quota_text()));
                }
                !ours
            });
            refused
        },
        |req| req.entries.len(),
        |resp, refused| {
            let code = ResponseError::PolicyViolation.code();
            let mut shown = Shown::default();
            for (entity, text) in refused {
                let mut r = EntryResult::default();
                r.error_code = code;
                r.error_message = shown.text(text);
                r.entity = entity.clone();
                resp.entries.push(r);
            }
        },
    )
}

/// Whether any component of the entry's entity names the proxy.
fn names_proxy(e: &EntryData, who: &Protected) -> bool {
    e.entity
        .iter()
        .any(|c| who.quota_entity(c.entity_type.as_str(), c.entity_name.as_ref().map_or("", |n| n.as_str())))
}

/// The entry's entity as the answer names it.
fn entity(e: &EntryData) -> Vec<EntityData> {
    e.entity
        .iter()
        .map(|c| {
            let mut d = EntityData::default();
            d.entity_type = c.entity_type.clone();
            d.entity_name = c.entity_name.clone();
            d
        })
        .collect()
}
