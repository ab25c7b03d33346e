//! The server: shared state, the bootstrap and per-node accept loops, and graceful drain.
//!
//! Entry point [`serve`] takes already-bound listeners and a shutdown future, so tests bind port
//! 0 and stop the proxy in-process. Per-connection forwarding belongs to `session`, broker
//! discovery to `cluster` and `refresh`, HTTP to `admin`.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

use kmp_config::{AuthMode, Config, EngineRole, PropsOrigin};
use kmp_mirror_engine::EngineSlot;
use kmp_protocol::security::ClientSecurity;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tracing::{error, info, warn};

use crate::error::ProxyError;
use crate::filters::Chain;
use crate::filters::sasl_terminate::{CredentialStore, SaslTerminator};
use crate::metrics::Metrics;
use crate::net::limits;
use crate::net::tls::{Reloadable, TlsIdentity};
use crate::session::accept;
use crate::shared::Shared;
use crate::upstream::cluster::{ClusterView, NewListener};
use crate::upstream::connect::{Connector, Target};
use crate::{admin, refresh};

/// Listeners bound by the caller.
pub struct Listeners {
    /// Bootstrap listener for Kafka clients.
    pub bootstrap: TcpListener,
    /// Admin HTTP listener, if the admin endpoint is enabled.
    pub admin: Option<TcpListener>,
}

/// Longest wait for the mirror engine's final state write at shutdown.
const MIRROR_STATE_FLUSH: Duration = Duration::from_secs(5);

/// Runs the proxy until `shutdown` completes, then drains in-flight requests (bounded by
/// `listener.drain_timeout_ms`) and returns.
pub async fn serve(config: Config, listeners: Listeners, shutdown: impl Future<Output = ()>) -> Result<(), ProxyError> {
    let bind_host = listeners
        .bootstrap
        .local_addr()
        .map(|a| a.ip().to_string())
        .map_err(|source| ProxyError::Listener {
            addr: config.listener.listen.clone(),
            source,
        })?;
    let node_port_base = config.listener.effective_node_port_base().unwrap_or(9193);
    let security = Security::load(&config)?;
    // Before anything is served: a SIGHUP at any time reloads, never terminates.
    let hangup = crate::net::tls::hangup_handler();
    let (new_tx, mut new_rx) = mpsc::unbounded_channel::<NewListener>();
    let (stop_tx, stop_rx) = watch::channel(false);
    let links = kmp_mirror_engine::EngineLinks {
        destination_bootstrap: config.upstream.bootstrap_servers.clone(),
        destination_security: security.upstream.clone(),
        timeout: Duration::from_millis(config.upstream.connect_timeout_ms),
        source_allow: config.security.mirror_source_allow.clone(),
    };
    let mirrors = if !config.engine.enabled {
        EngineSlot::fixed(kmp_mirror_engine::Engine::idle(&config.engine))
    } else if config.engine.role == EngineRole::Follower {
        if !config.mirrors.is_empty() {
            info!(
                mirrors = config.mirrors.len(),
                "engine.role = follower: the declared mirrors are run by the engine instance; this one follows the state topic"
            );
        }
        EngineSlot::fixed(kmp_mirror_engine::follow(&config.engine, links, stop_rx.clone()))
    } else {
        // `auto` and `engine` both take part in the election: instances sharing a state topic
        // never both copy or both write it, whatever their configuration.
        kmp_mirror_engine::auto(&config.engine, config.mirrors.clone(), links, stop_rx.clone())
    };
    let shared = Arc::new(Shared {
        cluster: ClusterView::new(
            config.listener.effective_advertised_host(),
            bind_host,
            config.listener.listen_backlog,
            node_port_base,
            new_tx,
        ),
        metrics: Metrics::new(),
        connector: Connector::new(
            config.upstream.bootstrap_servers.clone(),
            Duration::from_millis(config.upstream.connect_timeout_ms),
            security.upstream.clone(),
            config.listener.auth.mode == AuthMode::Terminate,
        ),
        tls: security.listener_tls.clone(),
        ready: AtomicBool::new(false),
        mirrors,
        next_connection_id: AtomicU64::new(1),
        limits: limits::Limits::new(&config.limits),
        early_versions: crate::upstream::early_versions::EarlyVersions::new(Duration::from_millis(config.upstream.api_versions_cache_ms)),
        config,
    });
    // Every session holds a clone; when all are gone the drain is complete.
    let (drain_tx, mut drain_rx) = mpsc::channel::<()>(1);
    let chain = Arc::new(Chain::new(&shared.config, security.terminator(&shared.config)));
    tokio::spawn(crate::net::tls::watch(security.reloadable(), security.reload_interval, hangup, stop_rx.clone()));

    tokio::spawn(refresh::run(shared.clone(), stop_rx.clone()));
    if let Some(admin) = listeners.admin {
        tokio::spawn(admin::serve(admin, shared.clone(), security.admin_tls.clone(), stop_rx.clone()));
    }
    tokio::spawn(accept::run(
        listeners.bootstrap,
        Target::Bootstrap,
        shared.clone(),
        chain.clone(),
        stop_rx.clone(),
        drain_tx.clone(),
    ));
    {
        let (shared, chain, mut stop_rx, drain_tx) = (shared.clone(), chain.clone(), stop_rx.clone(), drain_tx.clone());
        tokio::spawn(async move {
            loop {
                let NewListener { node_id, listener } = tokio::select! {
                    l = new_rx.recv() => match l {
                        Some(l) => l,
                        None => return,
                    },
                    _ = stop_rx.changed() => return,
                };
                match TcpListener::from_std(listener) {
                    Ok(l) => {
                        tokio::spawn(accept::run(
                            l,
                            Target::Node(node_id),
                            shared.clone(),
                            chain.clone(),
                            stop_rx.clone(),
                            drain_tx.clone(),
                        ));
                    }
                    Err(err) => error!(node_id, %err, "cannot serve the listener for broker"),
                }
            }
        });
    }
    drop(drain_tx);
    info!(listen = %shared.config.listener.listen, advertised_host = %shared.config.listener.effective_advertised_host(), node_port_base, "kafka-mirror-proxy started");
    crate::net::advertised::warn_unless_resolvable(shared.config.listener.effective_advertised_host());

    shutdown.await;
    info!("shutdown requested: draining in-flight requests");
    let _ = stop_tx.send(true);
    let drain = Duration::from_millis(shared.config.listener.drain_timeout_ms);
    if tokio::time::timeout(drain, drain_rx.recv()).await.is_err() {
        warn!(?drain, "drain timeout reached; closing remaining connections");
    }
    if tokio::time::timeout(MIRROR_STATE_FLUSH, shared.mirrors.stopped()).await.is_err() {
        warn!(timeout = ?MIRROR_STATE_FLUSH, "mirror state not written before shutdown; partitions resume from the destination anyway");
    }
    info!("kafka-mirror-proxy stopped");
    Ok(())
}

/// What the security settings resolve to at startup (files read, secrets resolved): any problem
/// stops the proxy with a message naming the setting.
struct Security {
    upstream: Arc<ClientSecurity>,
    listener_tls: Option<Arc<TlsIdentity>>,
    admin_tls: Option<Arc<TlsIdentity>>,
    credentials: Option<Arc<CredentialStore>>,
    reload_interval: Duration,
}

impl Security {
    fn load(config: &Config) -> Result<Self, ProxyError> {
        let props = config
            .upstream
            .properties
            .parse(PropsOrigin::ConfigFile)
            .map_err(|e| ProxyError::Security(format!("upstream.properties: {}", e.join("; "))))?;
        let upstream = Arc::new(ClientSecurity::build(&props).map_err(|e| ProxyError::Security(format!("upstream.properties: {e}")))?);
        let identity = |what: &str, tls: &Option<kmp_config::TlsServerConfig>, alpn: &[&[u8]]| {
            tls.as_ref()
                .map(|t| TlsIdentity::load(what, t, alpn, config.limits.max_security_file_bytes))
                .transpose()
                .map_err(|e| ProxyError::Security(format!("{what}: {e}")))
        };
        let listener_tls = identity("listener.tls", &config.listener.tls, &[])?;
        let admin_tls = identity("admin.tls", &config.admin.tls, &[b"http/1.1"])?;
        let auth = &config.listener.auth;
        let credentials = match (&auth.mode, &auth.credentials_file) {
            (AuthMode::Terminate, Some(path)) => Some(
                CredentialStore::load(path.clone(), config.limits.max_security_file_bytes)
                    .map_err(|e| ProxyError::Security(format!("listener.auth.credentials_file: {e}")))?,
            ),
            _ => None,
        };
        let reload_interval = listener_tls
            .as_ref()
            .or(admin_tls.as_ref())
            .map_or(Duration::from_secs(10), |t| t.reload_interval());
        Ok(Self {
            upstream,
            listener_tls,
            admin_tls,
            credentials,
            reload_interval,
        })
    }

    /// The termination filter when `listener.auth.mode = "terminate"`.
    fn terminator(&self, config: &Config) -> Option<SaslTerminator> {
        let auth = &config.listener.auth;
        (auth.mode == AuthMode::Terminate).then(|| SaslTerminator::new(&auth.mechanisms, self.credentials.clone(), auth.session_lifetime_ms))
    }

    /// Everything reloaded from files.
    fn reloadable(&self) -> Vec<Arc<dyn Reloadable>> {
        let mut v: Vec<Arc<dyn Reloadable>> = Vec::new();
        v.extend(self.listener_tls.clone().map(|t| t as Arc<dyn Reloadable>));
        v.extend(self.admin_tls.clone().map(|t| t as Arc<dyn Reloadable>));
        v.extend(self.credentials.clone().map(|c| c as Arc<dyn Reloadable>));
        v
    }
}
