//! A raw HTTP/1.1 client for the admin endpoint, a bearer header, and the machine's
//! non-loopback address (a caller the proxy sees as remote).

use std::net::{IpAddr, SocketAddr};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{PATIENCE, connect_from};

/// An HTTP answer: status and body.
#[derive(Debug)]
pub struct HttpAnswer {
    pub status: u16,
    pub body: String,
}

/// One HTTP/1.1 request on a new connection to `to` (from source address `from` when given),
/// `Host` naming `to`, with `headers` and an optional body; the connection is closed after it.
pub async fn http(to: SocketAddr, from: Option<IpAddr>, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&str>) -> HttpAnswer {
    let mut s = connect_from(to, from).await;
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {to}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    let body = body.unwrap_or("");
    if !body.is_empty() {
        req.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    req.push_str(body);
    let exchange = async {
        s.write_all(req.as_bytes()).await?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = match tokio::time::timeout(PATIENCE, exchange).await {
        Ok(Ok(raw)) => raw,
        Ok(Err(e)) => panic!("{method} {path} to {to} from {from:?}: {e}"),
        Err(_) => panic!("{method} {path} to {to} from {from:?}: no answer within {PATIENCE:?}"),
    };
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{method} {path} to {to} from {from:?}: not an HTTP answer: {text:?}"));
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    HttpAnswer { status, body }
}

/// `Authorization: Bearer <token>`, as a header pair.
pub fn bearer(token: &str) -> (&'static str, String) {
    ("Authorization", format!("Bearer {token}"))
}

/// This machine's first non-loopback IPv4 address: the source address from which the proxy sees
/// a caller as remote. Fails (never skips) without one, so a test meant to check a remote caller
/// cannot pass without having checked one.
pub fn non_loopback_ipv4() -> IpAddr {
    let probe = std::net::UdpSocket::bind("0.0.0.0:0").expect("bind a UDP socket to find the outgoing address");
    // No packet is sent: connecting only picks the outgoing address.
    let picked = probe.connect("10.255.255.255:1").ok().and_then(|_| probe.local_addr().ok()).map(|a| a.ip());
    match picked {
        Some(ip) if !ip.is_loopback() && !ip.is_unspecified() => ip,
        other => panic!(
            "this test needs a non-loopback IPv4 address on the machine (a UDP-connect probe found {other:?}): a connection from it is what the proxy must treat as remote"
        ),
    }
}
