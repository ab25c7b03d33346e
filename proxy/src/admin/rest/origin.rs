//! Whether a request from a loopback peer may have been sent by a browser on behalf of another
//! site. The loopback exemption trusts the local machine, not every web page its browser shows:
//! a page can make the operator's browser POST to `http://127.0.0.1:<admin port>/…` (a
//! cross-site form or `fetch`, no preflight needed for a `text/plain` body), or rebind its own
//! DNS name to 127.0.0.1 and call the endpoint under that name. Browsers always send `Host` and
//! cannot forge it, and they send `Origin` with every cross-origin request and every POST, so:
//! a loopback caller keeps its exemption only while `Host` (when sent) names a loopback host,
//! and a mutation's `Origin` (when sent) is the same host and port as `Host`. Callers that are
//! no browser (curl, Prometheus, the CLI) send no `Origin` and a loopback `Host`. Who is let in
//! is the parent module's; this only says what a browser may have been made to send.

use hyper::header::{HOST, HeaderMap, ORIGIN};

/// Why a loopback caller's request is not taken as the local machine's own.
pub(super) fn foreign(headers: &HeaderMap, mutation: bool) -> Option<&'static str> {
    let host = match headers.get(HOST).map(|h| h.to_str()) {
        None => None,
        Some(Ok(h)) => Some(h.trim()),
        Some(Err(_)) => return Some("the Host header is not text"),
    };
    if let Some(host) = host
        && !loopback_host(host)
    {
        return Some("the Host header names no loopback host (a DNS name rebound to this machine?)");
    }
    if mutation && let Some(origin) = headers.get(ORIGIN) {
        let same = origin
            .to_str()
            .ok()
            .and_then(|o| o.split_once("://"))
            .is_some_and(|(_, authority)| host.is_some_and(|h| authority.eq_ignore_ascii_case(h)));
        if !same {
            return Some("the Origin header is another site's (a cross-site request from a browser)");
        }
    }
    None
}

/// Whether `authority` (`host[:port]`) names this machine's loopback: `localhost`, an IPv4
/// loopback address, or `[::1]` (IPv4-mapped loopback included).
fn loopback_host(authority: &str) -> bool {
    let host = if let Some(rest) = authority.strip_prefix('[') {
        match rest.split_once(']') {
            Some((h, port)) if port.is_empty() || port.starts_with(':') => h,
            _ => return false,
        }
    } else {
        authority.rsplit_once(':').map_or(authority, |(h, _)| h)
    };
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(kmp_config::is_loopback)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(hyper::header::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
        }
        h
    }

    #[test]
    fn loopback_names_with_or_without_a_port_are_loopback_and_nothing_else_is() {
        for h in [
            "127.0.0.1:9644",
            "127.0.0.1",
            "localhost:9644",
            "LOCALHOST",
            "[::1]:9644",
            "[::1]",
            "[::ffff:127.0.0.1]:1",
            "127.8.9.1:2",
        ] {
            assert!(loopback_host(h), "{h}");
        }
        for h in [
            "evil.example:9644",
            "192.0.2.7:9644",
            "[::2]:1",
            "[::1",
            "[::1]x",
            "localhost.evil.example",
            "",
            "0.0.0.0:9644",
        ] {
            assert!(!loopback_host(h), "{h}");
        }
    }

    #[test]
    fn a_rebound_dns_name_loses_the_exemption_for_reads_and_mutations() {
        let h = headers(&[("host", "evil.example:9644"), ("origin", "http://evil.example:9644")]);
        assert!(foreign(&h, false).is_some_and(|w| w.contains("Host")));
        assert!(foreign(&h, true).is_some());
    }

    #[test]
    fn a_cross_site_mutation_is_refused_and_a_same_origin_one_from_the_dashboard_is_not() {
        let cross = headers(&[("host", "127.0.0.1:9644"), ("origin", "https://evil.example")]);
        assert!(foreign(&cross, true).is_some_and(|w| w.contains("Origin")));
        assert_eq!(
            foreign(&cross, false),
            None,
            "a read's answer is not readable cross-site anyway (no CORS headers)"
        );
        let opaque = headers(&[("host", "127.0.0.1:9644"), ("origin", "null")]);
        assert!(foreign(&opaque, true).is_some(), "a sandboxed page's opaque origin");
        let other_port = headers(&[("host", "127.0.0.1:9644"), ("origin", "http://127.0.0.1:8080")]);
        assert!(foreign(&other_port, true).is_some(), "another local web app is another origin");
        let dashboard = headers(&[("host", "127.0.0.1:9644"), ("origin", "http://127.0.0.1:9644")]);
        assert_eq!(foreign(&dashboard, true), None);
        assert_eq!(foreign(&headers(&[("host", "localhost:9644")]), true), None, "curl: no Origin");
        assert_eq!(foreign(&HeaderMap::new(), true), None, "no Host at all (HTTP/1.0 tools)");
    }
}
