//! A proxy served in-process on port-0 listeners in front of a [`StandIn`] (engine off, admin
//! endpoint on), a free node-port block, and reading a series out of `/metrics` text.

use std::net::{IpAddr, SocketAddr};

use kafka_mirror_proxy::{Listeners, ProxyError, serve};
use kmp_config::Config;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::{BROKER_ID, PATIENCE, StandIn, http};

/// A node port base whose broker-7 port was free a moment ago: the port is taken from the
/// kernel (bound to port 0, then released), so the proxy's node listener for broker 7 does not
/// depend on a guessed block of ports being free (a guessed block failed about 1 run in 20 when
/// another process held a port in it).
pub fn free_block() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a port-0 listener to find a free port");
    let port = l.local_addr().expect("the free port").port();
    drop(l);
    port.checked_sub(BROKER_ID as u16).expect("an ephemeral port above 7")
}

/// A proxy served in-process in front of a [`StandIn`], with the mirror engine off (it would
/// create its state topic through the stand-in) and the admin endpoint on.
pub struct Proxy {
    /// The bootstrap listener.
    pub kafka: SocketAddr,
    /// The admin endpoint's listener.
    pub admin: SocketAddr,
    /// `listener.node_port_base`: broker 7's node listener is on this port + 7.
    pub node_port_base: u16,
    pub broker: StandIn,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<Result<(), ProxyError>>>,
}

impl Proxy {
    /// A proxy in front of a new stand-in, admin endpoint on 127.0.0.1; `adjust` changes the
    /// configuration before it is validated.
    pub async fn start(adjust: impl FnOnce(&mut Config)) -> Self {
        Self::start_with(StandIn::start().await, "127.0.0.1:0", adjust).await
    }

    /// Like [`Proxy::start`], in front of `broker` and with the admin endpoint bound to `admin`.
    pub async fn start_with(broker: StandIn, admin: &str, adjust: impl FnOnce(&mut Config)) -> Self {
        let bootstrap = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy's bootstrap listener");
        let kafka = bootstrap.local_addr().expect("the bootstrap listener's address");
        let admin_listener = TcpListener::bind(admin)
            .await
            .unwrap_or_else(|e| panic!("bind the admin listener on {admin}: {e}"));
        let admin = admin_listener.local_addr().expect("the admin listener's address");
        let mut config = Config::default();
        config.upstream.bootstrap_servers = vec![broker.addr.to_string()];
        config.listener.listen = kafka.to_string();
        config.listener.node_port_base = Some(free_block());
        config.admin.listen = Some(admin.to_string());
        config.engine.enabled = false;
        adjust(&mut config);
        config.validate().expect("the test's configuration is valid");
        let node_port_base = config.listener.effective_node_port_base().expect("a node port base");
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let listeners = Listeners {
            bootstrap: vec![bootstrap],
            admin: Some(admin_listener),
        };
        let server = tokio::spawn(serve(config, listeners, async move {
            let _ = stop_rx.await;
        }));
        Self {
            kafka,
            admin,
            node_port_base,
            broker,
            stop: Some(stop_tx),
            server: Some(server),
        }
    }

    /// Whether `serve` is still running.
    pub fn alive(&self) -> bool {
        self.server.as_ref().is_some_and(|s| !s.is_finished())
    }

    /// The admin endpoint as seen from loopback (an admin listener on a wildcard address is
    /// reached at 127.0.0.1 or ::1).
    pub fn admin_loopback(&self) -> SocketAddr {
        let ip: IpAddr = match self.admin.ip() {
            IpAddr::V4(v4) if v4.is_unspecified() => [127, 0, 0, 1].into(),
            IpAddr::V6(v6) if v6.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
            ip => ip,
        };
        SocketAddr::new(ip, self.admin.port())
    }

    /// The value of the `/metrics` series `series` (name and labels as printed, e.g.
    /// `kmp_frame_errors_total{side="client"}`), asked from loopback; 0 when it is not printed.
    pub async fn metric(&self, series: &str) -> f64 {
        let answer = http(self.admin_loopback(), None, "GET", "/metrics", &[], None).await;
        assert_eq!(answer.status, 200, "GET /metrics from loopback: {}", answer.body);
        metric_in(&answer.body, series).unwrap_or(0.0)
    }

    /// Stops the proxy and checks that `serve` returns without an error.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let server = self.server.take().expect("the proxy was started");
        let result = tokio::time::timeout(PATIENCE, server)
            .await
            .expect("serve returns within 10 s of the shutdown signal");
        result.expect("serve did not panic").expect("serve returns Ok after shutdown");
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The value of `series` in Prometheus / OpenMetrics text.
pub fn metric_in(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter_map(|l| l.rsplit_once(' '))
        .find(|(name, _)| *name == series)
        .and_then(|(_, v)| v.parse().ok())
}
