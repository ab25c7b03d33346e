//! The one place a session asks "must the proxy act on this request for mirroring?", decided on
//! the API key before anything is decoded: KIP-1279 mirror RPCs are answered here
//! (`mirror_rpc`), cluster-mirror config resources are the proxy's (`mirror_configs`), and writes
//! or admin changes to read-only mirror topics are refused (`readonly`, `guard`) while the rest
//! of the request is forwarded with a merge for the response. Everything else passes untouched.

use bytes::Bytes;
use kmp_protocol::ProtocolError;
use kmp_protocol::kafka_protocol::messages::ApiKey;
use kmp_protocol::mirror_api;

use crate::guard::{self, Decision, Merge};
use crate::server::Shared;
use crate::{mirror_configs, mirror_rpc, readonly};

/// What the session does with a request.
pub(crate) enum Outcome {
    /// Forward `frame` (maybe reduced) and apply `merge` to the broker's response.
    Forward { frame: Bytes, merge: Option<Merge> },
    /// Answer with this response without forwarding (`None`: acks=0 Produce, no response).
    Answer(Option<Bytes>),
}

/// Decides what to do with one request frame.
pub(crate) async fn mirror_request(frame: Bytes, api_key: i16, api_version: i16, shared: &Shared) -> Result<Outcome, ProtocolError> {
    if mirror_api::is_answered(api_key) && api_version == 0 {
        return Ok(Outcome::Answer(Some(mirror_rpc::answer(&frame, &shared.mirrors.control).await?)));
    }
    let mut frame = frame;
    let mut merge: Option<Merge> = None;
    if shared.masks_fillers && mirror_configs::is_config_api(api_key) {
        match mirror_configs::check(&frame, api_key, api_version, &shared.mirrors.control).await? {
            Decision::Forward => {}
            Decision::Refuse(response, _) => return Ok(Outcome::Answer(Some(response))),
            Decision::Split(rest, f, _) => {
                frame = rest;
                merge = Some(f);
            }
        }
    }
    if shared.mirrors.topics.is_empty() {
        return Ok(Outcome::Forward { frame, merge });
    }
    let decision = if api_key == ApiKey::Produce as i16 {
        readonly::check(&frame, api_version, &shared.mirrors.topics)?
    } else if guard::is_guarded(api_key, api_version) {
        guard::check(&frame, api_key, api_version, &shared.mirrors.topics)?
    } else {
        Decision::Forward
    };
    match decision {
        Decision::Forward => Ok(Outcome::Forward { frame, merge }),
        Decision::Refuse(response, n) => {
            shared.metrics.refused_mirror_topic_changes.inc_by(n);
            if response.is_empty() {
                return Ok(Outcome::Answer(None)); // acks=0 Produce
            }
            // A response that also answers cluster-mirror configs gets those merged in.
            Ok(Outcome::Answer(Some(match merge {
                Some(first) => first(response)?,
                None => response,
            })))
        }
        Decision::Split(rest, f, n) => {
            shared.metrics.refused_mirror_topic_changes.inc_by(n);
            let merge: Merge = match merge {
                Some(first) => Box::new(move |resp| first(f(resp)?)),
                None => f,
            };
            Ok(Outcome::Forward {
                frame: rest,
                merge: Some(merge),
            })
        }
    }
}
