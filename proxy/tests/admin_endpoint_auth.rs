//! Who the admin endpoint lets in (`tests/security/test_admin_endpoint.py`), over real sockets:
//! read routes (`GET /v1/...`, `/metrics`) need the admin token from a non-loopback caller (a
//! connection from this machine's own non-loopback address to an endpoint bound to 0.0.0.0) unless
//! `security.admin_read_open`; mutating routes need it from everyone but a loopback caller, and
//! from a loopback caller too with `security.admin_loopback = false` or when a browser on another
//! site may have sent the request; a wrong token is refused like none; `/healthz` and `/readyz`
//! answer anyone; a loopback caller of an endpoint on the IPv6 wildcard is loopback; and a config
//! file that cannot be parsed never has its token printed (the binary is run on it).

mod support;

use std::net::IpAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use support::{HttpAnswer, PATIENCE, Proxy, StandIn, bearer, eventually, http, non_loopback_ipv4};

const TOKEN: &str = "tok-Hd93-admin-secret";
const READS: [&str; 2] = ["/v1/mirrors", "/metrics"];
/// A mutation that reaches its route answers 404: the mirror does not exist.
const MUTATION: &str = "/v1/mirrors/no-such-mirror/pause";
const MUTATION_BODY: &str = r#"{"topics": ["t"]}"#;

async fn get(proxy: &Proxy, from: Option<IpAddr>, path: &str, token: Option<&str>) -> HttpAnswer {
    let to = match from {
        Some(ip) => std::net::SocketAddr::new(ip, proxy.admin.port()),
        None => proxy.admin_loopback(),
    };
    let auth = token.map(bearer);
    let headers: Vec<(&str, &str)> = auth.iter().map(|(k, v)| (*k, v.as_str())).collect();
    http(to, from, "GET", path, &headers, None).await
}

async fn mutate(proxy: &Proxy, from: Option<IpAddr>, token: Option<&str>, extra: &[(&str, &str)]) -> HttpAnswer {
    let to = match from {
        Some(ip) => std::net::SocketAddr::new(ip, proxy.admin.port()),
        None => proxy.admin_loopback(),
    };
    let auth = token.map(bearer);
    let mut headers: Vec<(&str, &str)> = auth.iter().map(|(k, v)| (*k, v.as_str())).collect();
    headers.extend_from_slice(extra);
    http(to, from, "POST", MUTATION, &headers, Some(MUTATION_BODY)).await
}

async fn with_token(admin: &str, adjust: impl FnOnce(&mut kmp_config::Config)) -> Proxy {
    Proxy::start_with(StandIn::start().await, admin, |c| {
        c.admin.token = Some(TOKEN.to_owned());
        adjust(c);
    })
    .await
}

#[tokio::test]
async fn read_routes_need_the_admin_token_from_a_non_loopback_caller() {
    let remote = non_loopback_ipv4();
    let proxy = with_token("0.0.0.0:0", |_| {}).await;
    for path in READS {
        let a = get(&proxy, Some(remote), path, None).await;
        assert_eq!(a.status, 401, "GET {path} from {remote} without a token: {}", a.body);
        let a = get(&proxy, Some(remote), path, Some("wrong-token")).await;
        assert_eq!(a.status, 401, "GET {path} from {remote} with a wrong token: {}", a.body);
        let a = get(&proxy, Some(remote), path, Some(TOKEN)).await;
        assert_eq!(a.status, 200, "GET {path} from {remote} with the admin token: {}", a.body);
        let a = get(&proxy, None, path, None).await;
        assert_eq!(a.status, 200, "GET {path} from loopback without a token: {}", a.body);
    }
    let a = get(&proxy, Some(remote), "/healthz", None).await;
    assert_eq!(a.status, 200, "/healthz stays open to everyone: {}", a.body);
    // Ready once the stand-in answered the first probe; then a remote caller is told so too.
    eventually("/readyz from loopback answers 200", PATIENCE, || async {
        (get(&proxy, None, "/readyz", None).await.status == 200).then_some(())
    })
    .await;
    let a = get(&proxy, Some(remote), "/readyz", None).await;
    assert_eq!(a.status, 200, "/readyz stays open to everyone: {}", a.body);
    proxy.stop().await;
}

#[tokio::test]
async fn admin_read_open_lets_non_loopback_callers_read_without_the_token_but_not_mutate() {
    let remote = non_loopback_ipv4();
    let proxy = with_token("0.0.0.0:0", |c| c.security.admin_read_open = true).await;
    for path in READS {
        let a = get(&proxy, Some(remote), path, None).await;
        assert_eq!(a.status, 200, "GET {path} from {remote} with admin_read_open = true: {}", a.body);
    }
    let a = mutate(&proxy, Some(remote), None, &[]).await;
    assert_eq!(
        a.status, 403,
        "admin_read_open opens reads only: POST from {remote} without the token: {}",
        a.body
    );
    proxy.stop().await;
}

#[tokio::test]
async fn mutating_routes_refuse_a_non_loopback_caller_without_the_right_token_and_accept_it_with_it() {
    let remote = non_loopback_ipv4();
    let proxy = with_token("0.0.0.0:0", |_| {}).await;
    let a = mutate(&proxy, Some(remote), None, &[]).await;
    assert_eq!(a.status, 403, "POST {MUTATION} from {remote} without a token: {}", a.body);
    let a = mutate(&proxy, Some(remote), Some("wrong-token"), &[]).await;
    assert_eq!(a.status, 403, "POST {MUTATION} from {remote} with a wrong token: {}", a.body);
    let a = mutate(&proxy, Some(remote), Some(TOKEN), &[]).await;
    assert_eq!(
        a.status, 404,
        "POST {MUTATION} from {remote} with the token reaches the route (unknown mirror): {}",
        a.body
    );
    let a = mutate(&proxy, None, None, &[]).await;
    assert_eq!(a.status, 404, "POST {MUTATION} from loopback without a token reaches the route: {}", a.body);
    proxy.stop().await;
}

#[tokio::test]
async fn with_admin_loopback_off_a_loopback_caller_needs_the_token_too() {
    let proxy = with_token("127.0.0.1:0", |c| c.security.admin_loopback = false).await;
    let a = get(&proxy, None, "/v1/mirrors", None).await;
    assert_eq!(
        a.status, 401,
        "GET /v1/mirrors from loopback without a token, admin_loopback = false: {}",
        a.body
    );
    let a = get(&proxy, None, "/v1/mirrors", Some(TOKEN)).await;
    assert_eq!(a.status, 200, "GET /v1/mirrors from loopback with the token: {}", a.body);
    let a = mutate(&proxy, None, None, &[]).await;
    assert_eq!(a.status, 403, "POST from loopback without a token, admin_loopback = false: {}", a.body);
    let a = mutate(&proxy, None, Some("wrong-token"), &[]).await;
    assert_eq!(a.status, 403, "POST from loopback with a wrong token, admin_loopback = false: {}", a.body);
    let a = mutate(&proxy, None, Some(TOKEN), &[]).await;
    assert_eq!(a.status, 404, "POST from loopback with the token reaches the route: {}", a.body);
    proxy.stop().await;
}

#[tokio::test]
async fn a_loopback_mutation_a_browser_on_another_site_may_have_sent_needs_the_token() {
    let proxy = with_token("127.0.0.1:0", |_| {}).await;
    let cross_site = [("Origin", "http://attacker.example")];
    let a = mutate(&proxy, None, None, &cross_site).await;
    assert_eq!(a.status, 403, "a loopback POST with another site's Origin: {}", a.body);
    let rebound = [("Host", "attacker.example")];
    let a = mutate(&proxy, None, None, &rebound).await;
    assert_eq!(a.status, 403, "a loopback POST whose Host is a DNS name rebound to this machine: {}", a.body);
    let a = mutate(&proxy, None, Some(TOKEN), &cross_site).await;
    assert_eq!(a.status, 404, "the same cross-site POST with the token reaches the route: {}", a.body);
    proxy.stop().await;
}

#[tokio::test]
async fn a_loopback_caller_may_mutate_when_the_admin_listener_is_the_ipv6_wildcard() {
    let proxy = with_token("[::]:0", |_| {}).await;
    for host in ["127.0.0.1", "::1"] {
        let ip: IpAddr = host.parse().expect("a loopback address");
        let to = std::net::SocketAddr::new(ip, proxy.admin.port());
        let a = http(to, None, "POST", MUTATION, &[], Some(MUTATION_BODY)).await;
        assert_ne!(
            a.status, 403,
            "a POST from {host} to an admin listener on [::] was refused as non-loopback: {}",
            a.body
        );
        assert_eq!(a.status, 404, "the POST from {host} reaches the route (unknown mirror): {}", a.body);
    }
    proxy.stop().await;
}

#[test]
fn a_config_file_that_cannot_be_parsed_never_prints_the_admin_token() {
    let broken = [
        ("trailing garbage after the token", format!("[admin]\ntoken = \"{TOKEN}\" oops\n")),
        ("unterminated token string", format!("[admin]\nlisten = \"127.0.0.1:1\"\ntoken = \"{TOKEN}\n")),
        ("token of the wrong type", format!("[admin]\ntoken = [\"{TOKEN}\"]\n")),
        ("token given twice", format!("[admin]\ntoken = \"{TOKEN}\"\ntoken = \"{TOKEN}\"\n")),
    ];
    for (n, (what, text)) in broken.iter().enumerate() {
        let path = std::env::temp_dir().join(format!("kmp-broken-{}-{n}.toml", std::process::id()));
        std::fs::write(&path, text).expect("write the broken config file");
        // On port 0 of loopback, so that a file wrongly accepted starts no listener others use.
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_kafka-mirror-proxy"));
        cmd.args(["run", "--config"])
            .arg(&path)
            .args(["--upstream", "127.0.0.1:1", "--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (var, _) in kmp_config::ENV_VARS {
            cmd.env_remove(var);
        }
        let mut child = cmd.spawn().expect("run the proxy binary");
        let deadline = Instant::now() + Duration::from_secs(30);
        while child.try_wait().expect("wait for the proxy binary").is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                let _ = std::fs::remove_file(&path);
                panic!("a config file with {what} was accepted: the proxy was still running after 30 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().expect("the proxy binary's output");
        let _ = std::fs::remove_file(&path);
        let printed = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(!out.status.success(), "a config file with {what} was accepted:\n{printed}");
        assert!(
            !printed.contains(TOKEN),
            "the parse error for a config file with {what} prints the admin token:\n{printed}"
        );
        assert!(
            printed.contains(&path.display().to_string()) || printed.to_lowercase().contains("parse"),
            "the parse error for {what} still says what is wrong where:\n{printed}"
        );
    }
}
