//! The identity provider over HTTP(S): one request per connection (token endpoint POSTs, JWKS
//! GETs), bounded in time and in the size of what comes back, so a slow or hostile endpoint
//! costs one timeout and a bounded buffer, never a stuck login or unbounded memory.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::OAuthError;

/// Largest answer body read from an identity provider (a token or a key set is a few KiB).
pub(crate) const MAX_BODY: usize = 1024 * 1024;

/// An `http://` or `https://` URL taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub(crate) https: bool,
    /// Host as written (IPv6 without brackets).
    pub(crate) host: String,
    pub(crate) port: u16,
    /// Path and query, at least `/`.
    pub(crate) path: String,
    /// The URL as configured, for messages.
    pub(crate) url: String,
}

impl Endpoint {
    /// Parses `url` (`http(s)://host[:port][/path][?query]`; no user info, no fragment).
    pub(crate) fn parse(url: &str) -> Result<Self, OAuthError> {
        let bad = |why: &str| OAuthError::Config(format!("`{url}` is not a usable URL: {why}"));
        let (https, rest) = if let Some(r) = url.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = url.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(bad("it must start with http:// or https://"));
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_owned()),
            Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
            None => (rest, "/".to_owned()),
        };
        if authority.contains('@') || path.contains('#') || path.contains(char::is_whitespace) {
            return Err(bad("user info, fragments and spaces are not allowed"));
        }
        let default_port = if https { 443 } else { 80 };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or_else(|| bad("unterminated IPv6 address"))?;
            let port = match after.strip_prefix(':') {
                Some(p) => p.parse().map_err(|_| bad("bad port"))?,
                None if after.is_empty() => default_port,
                None => return Err(bad("bad port")),
            };
            (h.to_owned(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_owned(), p.parse().map_err(|_| bad("bad port"))?),
                None => (authority.to_owned(), default_port),
            }
        };
        // A host name of letters, digits, `-` and `.` (labels of 1-63), an IPv4 address, or an IPv6
        // address in brackets: nothing a resolver or an allow-list glob could read two ways.
        let name_ok = !host.is_empty()
            && host.len() <= 253
            && host
                .split('.')
                .all(|l| !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
        let ok = if authority.starts_with('[') {
            host.parse::<std::net::Ipv6Addr>().is_ok()
        } else {
            name_ok
        };
        if !ok {
            return Err(bad("the host is not a host name, an IPv4 address or a bracketed IPv6 address"));
        }
        Ok(Self {
            https,
            host,
            port,
            path,
            url: url.to_owned(),
        })
    }

    /// The `Host` header value.
    fn authority(&self) -> String {
        let default = if self.https { 443 } else { 80 };
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == default { host } else { format!("{host}:{}", self.port) }
    }
}

/// How to reach one endpoint: its address and, for `https://`, the TLS configuration.
#[derive(Clone)]
pub(crate) struct HttpClient {
    endpoint: Endpoint,
    tls: Option<TlsConnector>,
    timeout: Duration,
}

/// Aborts the connection task when the request is done or abandoned.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

impl HttpClient {
    /// `tls` is required for an `https://` endpoint.
    pub(crate) fn new(endpoint: Endpoint, tls: Option<Arc<rustls::ClientConfig>>, timeout: Duration) -> Result<Self, OAuthError> {
        if !endpoint.https && !crate::security::oauth::http::is_loopback_host(&endpoint.host) {
            tracing::warn!(url = %endpoint.url, "identity provider over plain http: client secrets and tokens cross the network unencrypted and keys can be replaced on the way; use https");
        }
        let tls = match (endpoint.https, tls) {
            (true, Some(c)) => Some(TlsConnector::from(c)),
            (true, None) => return Err(OAuthError::Config(format!("{}: https needs a TLS configuration", endpoint.url))),
            (false, _) => None,
        };
        Ok(Self { endpoint, tls, timeout })
    }

    pub(crate) fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Sends `method` with `headers` and `body`; returns the status and the body (at most
    /// [`MAX_BODY`] bytes), all within the timeout.
    pub(crate) async fn send(&self, method: &str, headers: &[(&str, &str)], body: Bytes) -> Result<(u16, Bytes), OAuthError> {
        let url = &self.endpoint.url;
        let fail = |what: String| OAuthError::Endpoint {
            url: url.clone(),
            detail: what,
        };
        let work = async {
            let tcp = TcpStream::connect((self.endpoint.host.as_str(), self.endpoint.port))
                .await
                .map_err(|e| fail(format!("cannot connect: {e}")))?;
            let _ = tcp.set_nodelay(true);
            let io: Box<dyn Io> = match &self.tls {
                None => Box::new(tcp),
                Some(tls) => {
                    let name = rustls::pki_types::ServerName::try_from(self.endpoint.host.clone()).map_err(|e| fail(format!("bad host name: {e}")))?;
                    Box::new(tls.connect(name, tcp).await.map_err(|e| fail(format!("TLS handshake failed: {e}")))?)
                }
            };
            let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(io))
                .await
                .map_err(|e| fail(format!("HTTP: {e}")))?;
            // Ended with this request whatever happens (a timeout drops this future).
            let _driver = AbortOnDrop(tokio::spawn(conn));
            let mut req = Request::builder()
                .method(method)
                .uri(self.endpoint.path.as_str())
                .header("host", self.endpoint.authority())
                .header("user-agent", "kafka-mirror-proxy");
            for (k, v) in headers {
                req = req.header(*k, *v);
            }
            let req = req.body(Full::new(body)).map_err(|e| fail(format!("request: {e}")))?;
            let resp = sender.send_request(req).await.map_err(|e| fail(format!("HTTP: {e}")))?;
            let status = resp.status().as_u16();
            let body = Limited::new(resp.into_body(), MAX_BODY)
                .collect()
                .await
                .map_err(|e| fail(format!("reading the answer (at most {MAX_BODY} bytes): {e}")))?
                .to_bytes();
            Ok((status, body))
        };
        tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| fail(format!("no answer within {:?}", self.timeout)))?
    }
}

/// Whether `host` names this machine (plain http to it crosses no network).
pub(crate) fn is_loopback_host(host: &str) -> bool {
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// `application/x-www-form-urlencoded` encoding of one value (and what Java's `URLEncoder` does,
/// which Kafka uses for the Basic authorization header when asked to).
pub(crate) fn form_encode(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => out.push(b as char),
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// A short, printable excerpt of an error answer for messages (identity providers answer JSON
/// such as `{"error":"unauthorized_client"}`).
pub(crate) fn excerpt(body: &[u8]) -> String {
    let text: String = String::from_utf8_lossy(&body[..body.len().min(200)])
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    text.trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_taken_apart_with_default_ports_and_paths() {
        let e = Endpoint::parse("http://127.0.0.1:8080/realms/kmp/protocol/openid-connect/token").unwrap();
        assert_eq!(
            (e.https, e.host.as_str(), e.port, e.path.as_str()),
            (false, "127.0.0.1", 8080, "/realms/kmp/protocol/openid-connect/token")
        );
        let e = Endpoint::parse("https://idp.example.com").unwrap();
        assert_eq!((e.port, e.path.as_str(), e.authority().as_str()), (443, "/", "idp.example.com"));
        let e = Endpoint::parse("https://[::1]:8443?x=1").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.path.as_str(), e.authority().as_str()),
            ("::1", 8443, "/?x=1", "[::1]:8443")
        );
        for bad in [
            "ftp://x/",
            "http://user:pw@x/",
            "http://:80/",
            "http://x:port/",
            "http://x/a#b",
            "http://::1/",
            "http://127.0.0.1 .idp.example/",
            "http://169.254.169.254#.idp.example/",
            "http://a..b/",
            "http://a%2eb/",
            "http://[not-v6]/",
            "http://x\\y/",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad} must be refused");
        }
    }

    #[test]
    fn form_encoding_matches_java_url_encoder() {
        assert_eq!(form_encode("a b+c/d=é*-._~"), "a+b%2Bc%2Fd%3D%C3%A9*-._%7E");
    }
}
