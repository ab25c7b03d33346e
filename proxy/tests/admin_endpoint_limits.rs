//! Unfinished HTTP requests from a remote host cannot take the admin endpoint from loopback
//! health probes (`tests/security/test_admin_endpoint_limits.py`): one address holds at most
//! `limits.max_admin_connections_per_ip` connections, non-loopback callers together leave
//! `limits.admin_loopback_reserve` to loopback ones, and a freed slot is used again. The remote
//! host is this machine's own non-loopback address connecting to an endpoint bound to 0.0.0.0;
//! the held connections send request headers that never end (the header-read timeout is set far
//! beyond the test).
//!
//! Counting without waiting on luck: the endpoint accepts connections in the order they were
//! made and closes one beyond the caps at once, at accept. So once a loopback request made after
//! the held connections has been answered, every held connection was either admitted or already
//! closed, and a non-blocking read tells which.

mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr};

use kmp_config::Config;
use support::{PATIENCE, Proxy, StandIn, connect_from, eventually, http, non_loopback_ipv4};

fn holding(c: &mut Config) {
    c.limits.http_header_read_timeout_ms = 120_000;
}

/// `count` connections from `from` to the admin port, each with request headers that never end.
async fn hold_unfinished_requests(proxy: &Proxy, from: IpAddr, count: usize) -> Vec<std::net::TcpStream> {
    let to = SocketAddr::new(from, proxy.admin.port());
    let mut held = Vec::new();
    for _ in 0..count {
        let s = connect_from(to, Some(from)).await.into_std().expect("a std socket");
        s.set_nonblocking(true).expect("non-blocking");
        // Already closed by the proxy (refused at accept) is what some of them should be.
        let _ = (&s).write_all(b"GET /healthz HTTP/1.1\r\nHost: kmp\r\n");
        held.push(s);
    }
    held
}

/// After a loopback request made later than every held connection has been answered: how many
/// of `held` the proxy still holds open.
async fn still_held(proxy: &Proxy, held: &[std::net::TcpStream]) -> usize {
    let barrier = http(proxy.admin_loopback(), None, "GET", "/healthz", &[], None).await;
    assert_eq!(barrier.status, 200, "a loopback /healthz while requests are held: {}", barrier.body);
    let mut open = 0;
    for (i, mut s) in held.iter().enumerate() {
        let mut byte = [0u8; 1];
        match s.read(&mut byte) {
            Err(e) if e.kind() == ErrorKind::WouldBlock => open += 1,
            Ok(0) => {}
            Err(e) if matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted) => {}
            Ok(_) => panic!("held connection {i}: an answer to request headers that never ended"),
            Err(e) => panic!("held connection {i}: {e}"),
        }
    }
    open
}

/// `probes` loopback health requests, alternating /healthz and /readyz: the ones not answered
/// (any status is an answer: /readyz may say 503 while the stand-in was not probed yet).
async fn loopback_probes_unanswered(proxy: &Proxy, probes: usize) -> Vec<String> {
    let mut failures = Vec::new();
    for i in 0..probes {
        let path = if i % 2 == 0 { "/healthz" } else { "/readyz" };
        let a = http(proxy.admin_loopback(), None, "GET", path, &[], None).await;
        let ok = if path == "/healthz" {
            a.status == 200
        } else {
            a.status == 200 || a.status == 503
        };
        if !ok {
            failures.push(format!("{path}: {} {}", a.status, a.body));
        }
    }
    failures
}

#[tokio::test]
async fn one_remote_address_holds_at_most_max_admin_connections_per_ip_and_loopback_probes_still_answer() {
    const PER_IP: u32 = 4;
    const HOLDERS: usize = 12;
    let remote = non_loopback_ipv4();
    let proxy = Proxy::start_with(StandIn::start().await, "0.0.0.0:0", |c| {
        holding(c);
        c.limits.max_admin_connections_per_ip = PER_IP;
    })
    .await;
    let held = hold_unfinished_requests(&proxy, remote, HOLDERS).await;
    let kept = still_held(&proxy, &held).await;
    assert_eq!(
        kept, PER_IP as usize,
        "{remote} holds exactly limits.max_admin_connections_per_ip = {PER_IP} of {HOLDERS} unfinished requests"
    );
    let failures = loopback_probes_unanswered(&proxy, 20).await;
    assert!(
        failures.is_empty(),
        "loopback health probes failed while {remote} held {kept} unfinished requests: {failures:?}"
    );
    drop(held);
    proxy.stop().await;
}

#[tokio::test]
async fn non_loopback_callers_together_leave_the_loopback_reserve() {
    const TOTAL: u32 = 12;
    const RESERVE: u32 = 4;
    let remote = non_loopback_ipv4();
    let proxy = Proxy::start_with(StandIn::start().await, "0.0.0.0:0", |c| {
        holding(c);
        c.limits.max_admin_connections = TOTAL;
        c.limits.max_admin_connections_per_ip = 1000;
        c.limits.admin_loopback_reserve = RESERVE;
    })
    .await;
    let held = hold_unfinished_requests(&proxy, remote, 20).await;
    let kept = still_held(&proxy, &held).await;
    assert_eq!(
        kept,
        (TOTAL - RESERVE) as usize,
        "non-loopback callers hold max_admin_connections - admin_loopback_reserve = {} connections",
        TOTAL - RESERVE
    );
    let failures = loopback_probes_unanswered(&proxy, 20).await;
    assert!(
        failures.is_empty(),
        "loopback health probes failed with the {kept} non-loopback slots taken ({RESERVE} kept for loopback): {failures:?}"
    );
    drop(held);
    proxy.stop().await;
}

#[tokio::test]
async fn a_freed_remote_slot_is_used_again() {
    const PER_IP: u32 = 4;
    let remote = non_loopback_ipv4();
    let proxy = Proxy::start_with(StandIn::start().await, "0.0.0.0:0", |c| {
        holding(c);
        c.limits.max_admin_connections_per_ip = PER_IP;
    })
    .await;
    let held = hold_unfinished_requests(&proxy, remote, PER_IP as usize + 1).await;
    assert_eq!(
        still_held(&proxy, &held).await,
        PER_IP as usize,
        "the connection beyond the per-address cap is closed at accept"
    );
    drop(held);
    let to = SocketAddr::new(remote, proxy.admin.port());
    eventually(
        &format!("after its {PER_IP} held connections closed, {remote} gets /healthz answered again"),
        PATIENCE,
        || async {
            let mut s = connect_from(to, Some(remote)).await;
            let answered = tokio::time::timeout(std::time::Duration::from_secs(1), async {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                s.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {to}\r\nConnection: close\r\n\r\n").as_bytes())
                    .await
                    .ok()?;
                let mut raw = Vec::new();
                s.read_to_end(&mut raw).await.ok()?;
                Some(raw)
            })
            .await;
            match answered {
                Ok(Some(raw)) if raw.starts_with(b"HTTP/1.1 200") => Some(()),
                _ => None,
            }
        },
    )
    .await;
    proxy.stop().await;
}
