//! Who may use the admin endpoint (`/v1/…`, `/metrics`, the dashboard): loopback callers that
//! are no browser sent by another site (`origin`), or callers with `Authorization: Bearer
//! <admin.token>`; reads also everyone with `security.admin_read_open`. The refusals (401 / 403
//! with a message saying what would let the caller in) are built here; routing and what the
//! routes do are `rest`'s, the origin checks `origin`'s.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::HeaderMap;
use hyper::{Response, StatusCode};

use super::{error, origin};

/// Who may use the admin endpoint. Loopback callers (IPv4-mapped ones on a `[::]` listener
/// included) may do everything, unless `loopback` is off. Others need `Authorization: Bearer <admin.token>`: without it a
/// read (`GET /v1/…`, `/metrics`) answers 401 when a token is configured and 403 when none is
/// (there is no way in), unless `read_open`; a mutation answers 403 either way.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AdminAuth<'a> {
    /// `admin.token` (`KMP_ADMIN_TOKEN`).
    pub(crate) token: Option<&'a str>,
    /// `security.admin_read_open`.
    pub(crate) read_open: bool,
    /// `security.admin_loopback`: whether loopback callers need no token.
    pub(crate) loopback: bool,
}

/// Why a caller was turned away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Denied {
    /// A token is configured; the caller did not send it (or sent another).
    NoToken,
    /// No token is configured: non-loopback callers cannot be let in.
    NoTokenConfigured,
}

/// A loopback peer whose request a browser may have been made to send for another site
/// (`origin`): let in only with the token, like a remote caller.
struct NotLocal(&'static str);

impl AdminAuth<'_> {
    /// Whether the caller is let in; besides the refusal, the reason a loopback peer was not
    /// exempted, if it was not.
    fn caller(&self, headers: &HeaderMap, peer: SocketAddr, mutation: bool) -> Result<(), (Denied, Option<NotLocal>)> {
        let mut not_local = None;
        if self.loopback && kmp_config::is_loopback(peer.ip()) {
            match origin::foreign(headers, mutation) {
                None => return Ok(()),
                Some(why) => not_local = Some(NotLocal(why)),
            }
        }
        self.bearer(headers).map_err(|d| (d, not_local))
    }

    /// Whether the caller sent the configured token.
    fn bearer(&self, headers: &HeaderMap) -> Result<(), Denied> {
        let Some(token) = self.token else { return Err(Denied::NoTokenConfigured) };
        let given = headers
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if given.is_some_and(|given| constant_time_eq(given.as_bytes(), token.as_bytes())) {
            Ok(())
        } else {
            Err(Denied::NoToken)
        }
    }

    /// A read route (`GET /v1/…`, `/metrics`): the answer to send instead, if the caller is refused.
    pub(crate) fn refuse_read(&self, headers: &HeaderMap, peer: SocketAddr) -> Option<Response<Full<Bytes>>> {
        if self.read_open {
            return None;
        }
        self.caller(headers, peer, false).err().map(|(d, not_local)| match (d, not_local) {
            (_, Some(NotLocal(why))) => not_local_refusal(why),
            (Denied::NoToken, None) => {
                let mut r = error(
                    StatusCode::UNAUTHORIZED,
                    "read routes need a loopback caller or `Authorization: Bearer <admin.token>` (or security.admin_read_open = true)",
                );
                if let Ok(v) = "Bearer realm=\"kafka-mirror-proxy admin\"".parse() {
                    r.headers_mut().insert(hyper::header::WWW_AUTHENTICATE, v);
                }
                r
            }
            (Denied::NoTokenConfigured, None) => error(
                StatusCode::FORBIDDEN,
                "read routes answer non-loopback callers only with admin.token (KMP_ADMIN_TOKEN) set on the proxy and sent as `Authorization: Bearer`, or with security.admin_read_open = true",
            ),
        })
    }

    /// A mutating route: the answer to send instead (403), if the caller is refused.
    pub(super) fn refuse_mutation(&self, headers: &HeaderMap, peer: SocketAddr) -> Option<Response<Full<Bytes>>> {
        self.caller(headers, peer, true).err().map(|(_, not_local)| match not_local {
            Some(NotLocal(why)) => not_local_refusal(why),
            None => error(
                StatusCode::FORBIDDEN,
                "mutating routes need a loopback caller or `Authorization: Bearer <admin.token>`",
            ),
        })
    }
}

/// 403 for a loopback peer not taken as the local machine's own.
fn not_local_refusal(why: &str) -> Response<Full<Bytes>> {
    error(
        StatusCode::FORBIDDEN,
        &format!("a loopback caller is let in without `Authorization: Bearer <admin.token>` only when it is no browser sent by another site: {why}"),
    )
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
