//! What a connection authenticated as: the proxy passes SASL through to the broker and watches
//! it — the mechanism from SaslHandshake, the user name from the client's first SaslAuthenticate
//! (PLAIN: `authzid NUL user NUL password`; SCRAM: `n=user` in client-first), and the broker's
//! verdict from the SaslAuthenticate responses. A connection counts as authenticated only after
//! the broker accepted the final step (PLAIN: the first, SCRAM: the second). Passwords are never
//! kept. Deciding what an authenticated principal may do belongs to `authz`.

use bytes::Bytes;
use kmp_protocol::ProtocolError;
use kmp_protocol::codec::{decode_request, decode_response};
use kmp_protocol::kafka_protocol::messages::{ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest};

use super::api::{BoxFuture, Conn, Exchange, Filter, Flow};
use super::identity::SaslState;
use crate::error::ProxyError;

/// Extracts the user name from a client's first SASL message.
pub(crate) fn claimed_user(mechanism: &str, auth: &[u8]) -> Option<String> {
    if mechanism == "PLAIN" {
        let mut parts = auth.split(|&b| b == 0);
        let (_authzid, user) = (parts.next()?, parts.next()?);
        parts.next()?; // a password must follow
        return String::from_utf8(user.to_vec()).ok().filter(|u| !u.is_empty());
    }
    if mechanism.starts_with("SCRAM-") {
        let text = std::str::from_utf8(auth).ok()?;
        // gs2-header "n,," (or "y,,", "n,a=authzid,") then "n=user,r=nonce".
        let bare = text.splitn(3, ',').nth(2)?;
        let user = bare.split(',').find_map(|a| a.strip_prefix("n="))?;
        return Some(user.replace("=2C", ",").replace("=3D", "=")).filter(|u| !u.is_empty());
    }
    None
}

/// Watches SaslHandshake and SaslAuthenticate.
pub(crate) struct SaslObserver;

impl Filter for SaslObserver {
    fn wants_request(&self, x: &Exchange, _conn: &Conn) -> bool {
        let api_key = x.api_key;
        api_key == ApiKey::SaslHandshake as i16 || api_key == ApiKey::SaslAuthenticate as i16
    }

    fn on_request<'a>(&'a self, x: &'a mut Exchange, conn: &'a Conn) -> BoxFuture<'a, Result<Flow, ProxyError>> {
        Box::pin(async move {
            if x.api_key == ApiKey::SaslHandshake as i16 {
                let (_, req) = decode_request::<SaslHandshakeRequest>(x.frame(), ApiKey::SaslHandshake, x.api_version)?;
                let mut s = lock(conn);
                *s = SaslState {
                    started: true,
                    mechanism: req.mechanism.as_str().to_owned(),
                    ..SaslState::default()
                };
            } else {
                let (_, req) = decode_request::<SaslAuthenticateRequest>(x.frame(), ApiKey::SaslAuthenticate, x.api_version)?;
                let mut s = lock(conn);
                s.started = true;
                if s.claimed.is_none() && s.accepted_steps == 0 {
                    s.claimed = claimed_user(&s.mechanism, &req.auth_bytes);
                }
            }
            Ok(Flow::Continue)
        })
    }

    fn wants_response(&self, api_key: i16, _api_version: i16, _conn: &Conn) -> bool {
        api_key == ApiKey::SaslAuthenticate as i16
    }

    fn on_response(&self, frame: Bytes, api_key: i16, api_version: i16, conn: &Conn) -> Result<Bytes, ProtocolError> {
        let Ok(key) = ApiKey::try_from(api_key) else { return Ok(frame) };
        let (_, resp) = decode_response::<SaslAuthenticateResponse>(&frame, key, api_version)?;
        let mut s = lock(conn);
        if resp.error_code != 0 {
            // Failed: unauthenticated until a new handshake succeeds.
            s.principal = None;
            s.claimed = None;
            s.accepted_steps = u8::MAX;
            return Ok(frame);
        }
        s.accepted_steps = s.accepted_steps.saturating_add(1);
        if s.steps_needed() == Some(s.accepted_steps) {
            s.principal = s.claimed.take();
        }
        Ok(frame)
    }
}

fn lock(conn: &Conn) -> std::sync::MutexGuard<'_, SaslState> {
    conn.sasl.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_names_come_from_plain_and_scram_first_messages_and_nothing_else() {
        assert_eq!(claimed_user("PLAIN", b"\0alice\0secret").as_deref(), Some("alice"));
        assert_eq!(claimed_user("PLAIN", b"admin\0alice\0secret").as_deref(), Some("alice"));
        assert_eq!(claimed_user("PLAIN", b"\0alice"), None, "no password: not a PLAIN message");
        assert_eq!(claimed_user("SCRAM-SHA-256", b"n,,n=bob,r=abc").as_deref(), Some("bob"));
        assert_eq!(claimed_user("SCRAM-SHA-512", b"n,,n=a=2Cb=3Dc,r=x").as_deref(), Some("a,b=c"));
        assert_eq!(claimed_user("SCRAM-SHA-256", b"garbage"), None);
        assert_eq!(claimed_user("OAUTHBEARER", b"n,,\x01auth=Bearer x\x01\x01"), None);
    }

    #[test]
    fn a_principal_counts_only_after_the_final_accepted_step() {
        let mut s = SaslState {
            started: true,
            mechanism: "SCRAM-SHA-256".into(),
            claimed: Some("bob".into()),
            ..SaslState::default()
        };
        assert!(s.in_progress());
        s.accepted_steps = 1;
        assert_ne!(s.steps_needed(), Some(s.accepted_steps), "server-first is not the end of SCRAM");
        s.accepted_steps = 2;
        assert_eq!(s.steps_needed(), Some(2));
    }
}
