//! The KIP-1279 mirror admin RPCs answered by the proxy itself (never forwarded to a broker):
//! Create, Start, Stop, Pause, Resume, List, Describe and Delete. Deciding that a frame is one of
//! them happens on the API key, in the filter's predicate, before anything is decoded; who may
//! call them is `authz`'s (earlier in the chain). Answering them — decode, the engine's
//! `Control`, encode, with the size bounds and the follower's refusals — is the engine's
//! (`EngineSlot::answer`). What stays here is the proxy's part: an `auto` standby hands the
//! requests that change something, and a failing-back cluster's lookup of recorded lines
//! (`rpc_needs_engine`), to the active instance instead (the engine's `forward`) and
//! relays its answer, or answers with a retriable error when it cannot; the active instance
//! answers what standbys hand it exactly as it answers its own clients (the engine does that
//! itself).

use bytes::Bytes;
use kmp_mirror_engine::{EngineSlot, ForwardError, rpc_needs_engine};
use kmp_protocol::mirror_api::{self as api, error_response, errors};

use super::api::{BoxFuture, Conn, Exchange, Filter, Flow};
use crate::error::ProxyError;

/// The filter answering the mirror RPCs.
pub(crate) struct MirrorRpc;

impl Filter for MirrorRpc {
    fn wants_request(&self, x: &Exchange, _conn: &Conn) -> bool {
        let (api_key, api_version) = (x.api_key, x.api_version);
        api::is_answered(api_key) && api_version == 0
    }

    fn on_request<'a>(&'a self, x: &'a mut Exchange, conn: &'a Conn) -> BoxFuture<'a, Result<Flow, ProxyError>> {
        Box::pin(async move {
            let slot = &conn.shared.mirrors;
            if rpc_needs_engine(x.frame()) && slot.can_forward() && slot.control().follower_refusal().is_some() {
                let (frame, api_key, correlation_id) = (x.frame().clone(), x.api_key, x.correlation_id);
                return Ok(Flow::Answer(Some(forward(frame, api_key, correlation_id, slot).await)));
            }
            Ok(Flow::Answer(Some(slot.answer(x.frame()).await?)))
        })
    }
}

/// A standby's answer to a mutating request: the active instance's, or a retriable error.
async fn forward(frame: Bytes, api_key: i16, correlation_id: i32, slot: &EngineSlot) -> Bytes {
    match slot.forward(frame).await {
        Ok(answer) => answer,
        Err(ForwardError::Refused { code, message }) => error_response(api_key, correlation_id, code, &message),
        Err(e) => {
            tracing::warn!(api_key, error = %e, "management request not forwarded to the active instance");
            let code = match e {
                ForwardError::TooLarge(_) => errors::INVALID_REQUEST,
                _ => errors::REQUEST_TIMED_OUT,
            };
            error_response(api_key, correlation_id, code, &format!("this instance is a standby; {e}"))
        }
    }
}
