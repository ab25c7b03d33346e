//! The server: shared state, the bootstrap and per-node accept loops, and graceful drain.
//!
//! Entry point [`serve`] takes already-bound listeners and a shutdown future, so tests bind port
//! 0 and stop the proxy in-process. Per-connection forwarding belongs to `session`, broker
//! discovery to `cluster` and `refresh`, HTTP to `admin`.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

use kmp_config::{AuthMode, ClientListener, Config, EngineRole, PropsOrigin};
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
use crate::session::accept::{self, Door};
use crate::shared::Shared;
use crate::upstream::cluster::{ClusterView, Exposure, NewListener};
use crate::upstream::connect::{Connector, Target};
use crate::{admin, refresh};

/// Listeners bound by the caller.
pub struct Listeners {
    /// The bootstrap listener of every client listener, in the order of
    /// [`Config::client_listeners`].
    pub bootstrap: Vec<TcpListener>,
    /// Admin HTTP listener, if the admin endpoint is enabled.
    pub admin: Option<TcpListener>,
}

/// Longest wait for the mirror engine's final state write at shutdown.
const MIRROR_STATE_FLUSH: Duration = Duration::from_secs(5);

/// Runs the proxy until `shutdown` completes, then drains in-flight requests (bounded by
/// `listener.drain_timeout_ms`) and returns.
pub async fn serve(config: Config, listeners: Listeners, shutdown: impl Future<Output = ()>) -> Result<(), ProxyError> {
    let specs = config.client_listeners();
    if specs.len() != listeners.bootstrap.len() {
        return Err(ProxyError::Security(format!(
            "{} client listeners configured but {} bootstrap listeners bound",
            specs.len(),
            listeners.bootstrap.len()
        )));
    }
    for overlap in kmp_config::node_port_overlaps(&specs) {
        warn!("{overlap}");
    }
    let mut exposures = Vec::new();
    for (spec, bound) in specs.iter().zip(&listeners.bootstrap) {
        let bind_host = bound.local_addr().map(|a| a.ip().to_string()).map_err(|source| ProxyError::Listener {
            addr: spec.listen.clone(),
            source,
        })?;
        exposures.push(Exposure {
            name: spec.name.clone(),
            advertised_host: spec.advertised_host.clone(),
            bind_host,
            node_port_base: spec.node_port_base,
        });
    }
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
        cluster: ClusterView::new(exposures, config.listener.listen_backlog, new_tx),
        metrics: Metrics::new(),
        connector: Connector::new(
            config.upstream.bootstrap_servers.clone(),
            Duration::from_millis(config.upstream.connect_timeout_ms),
            security.upstream.clone(),
        ),
        ready: AtomicBool::new(false),
        mirrors,
        next_connection_id: AtomicU64::new(1),
        limits: limits::Limits::new(&config.limits),
        early_versions: crate::upstream::early_versions::EarlyVersions::new(Duration::from_millis(config.upstream.api_versions_cache_ms)),
        config,
    });
    // Every session holds a clone; when all are gone the drain is complete.
    let (drain_tx, mut drain_rx) = mpsc::channel::<()>(1);
    let doors: Vec<Arc<Door>> = specs
        .into_iter()
        .zip(security.listeners.iter())
        .enumerate()
        .map(|(index, (spec, sec))| {
            let chain = Arc::new(Chain::new(&shared.config, sec.terminator(&spec)));
            Arc::new(Door {
                index,
                spec: Arc::new(spec),
                tls: sec.tls.clone(),
                chain,
            })
        })
        .collect();
    tokio::spawn(crate::net::tls::watch(security.reloadable(), security.reload_interval, hangup, stop_rx.clone()));

    tokio::spawn(refresh::run(shared.clone(), stop_rx.clone()));
    if let Some(admin) = listeners.admin {
        tokio::spawn(admin::serve(admin, shared.clone(), security.admin_tls.clone(), stop_rx.clone()));
    }
    for (bootstrap, door) in listeners.bootstrap.into_iter().zip(&doors) {
        tokio::spawn(accept::run(
            bootstrap,
            Target::Bootstrap,
            shared.clone(),
            door.clone(),
            stop_rx.clone(),
            drain_tx.clone(),
        ));
    }
    {
        let (shared, doors, mut stop_rx, drain_tx) = (shared.clone(), doors.clone(), stop_rx.clone(), drain_tx.clone());
        tokio::spawn(async move {
            loop {
                let NewListener { exposure, node_id, listener } = tokio::select! {
                    l = new_rx.recv() => match l {
                        Some(l) => l,
                        None => return,
                    },
                    _ = stop_rx.changed() => return,
                };
                let Some(door) = doors.get(exposure) else { continue };
                match TcpListener::from_std(listener) {
                    Ok(l) => {
                        tokio::spawn(accept::run(
                            l,
                            Target::Node(node_id),
                            shared.clone(),
                            door.clone(),
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
    for door in &doors {
        let l = &door.spec;
        info!(listener = %l.name, listen = %l.listen, advertised_host = %l.advertised_host, node_port_base = l.node_port_base, tls = l.tls.is_some(), auth = ?l.auth.mode, mirror_management = l.mirror_management, "kafka-mirror-proxy listening");
        crate::net::advertised::warn_unless_resolvable(l.advertised_host.clone());
    }
    info!(listeners = doors.len(), "kafka-mirror-proxy started");

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
    /// Per client listener, in configuration order.
    listeners: Vec<ListenerSecurity>,
    admin_tls: Option<Arc<TlsIdentity>>,
    reload_interval: Duration,
}

/// One client listener's TLS identity and SASL credentials.
struct ListenerSecurity {
    tls: Option<Arc<TlsIdentity>>,
    credentials: Option<Arc<CredentialStore>>,
    /// OAUTHBEARER token checks (`[listener.auth.oauthbearer]`).
    oauth: Option<Arc<kmp_protocol::security::oauth::Validator>>,
}

impl ListenerSecurity {
    /// The termination filter when the listener's `auth.mode = "terminate"`.
    fn terminator(&self, spec: &ClientListener) -> Option<SaslTerminator> {
        let auth = &spec.auth;
        (auth.mode == AuthMode::Terminate)
            .then(|| SaslTerminator::new(&auth.mechanisms, self.credentials.clone(), auth.session_lifetime_ms, self.oauth.clone()))
    }
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
        let named = !config.listeners.is_empty();
        let mut listeners = Vec::new();
        for (i, spec) in config.client_listeners().iter().enumerate() {
            let key = if named { format!("listeners[{i}]") } else { "listener".to_owned() };
            let tls = identity(&format!("{key}.tls"), &spec.tls, &[])?;
            let credentials = match (&spec.auth.mode, &spec.auth.credentials_file) {
                (AuthMode::Terminate, Some(path)) => Some(
                    CredentialStore::load(path.clone(), config.limits.max_security_file_bytes)
                        .map_err(|e| ProxyError::Security(format!("{key}.auth.credentials_file: {e}")))?,
                ),
                _ => None,
            };
            let oauth = match (&spec.auth.mode, &spec.auth.oauthbearer) {
                (AuthMode::Terminate, Some(o)) => Some(Arc::new(
                    kmp_protocol::security::oauth::Validator::new(o).map_err(|e| ProxyError::Security(format!("{key}.auth.oauthbearer: {e}")))?,
                )),
                _ => None,
            };
            listeners.push(ListenerSecurity { tls, credentials, oauth });
        }
        let admin_tls = identity("admin.tls", &config.admin.tls, &[b"http/1.1"])?;
        let reload_interval = listeners
            .iter()
            .filter_map(|l| l.tls.as_ref())
            .chain(admin_tls.as_ref())
            .map(|t| t.reload_interval())
            .next()
            .unwrap_or(Duration::from_secs(10));
        Ok(Self {
            upstream,
            listeners,
            admin_tls,
            reload_interval,
        })
    }

    /// Everything reloaded from files.
    fn reloadable(&self) -> Vec<Arc<dyn Reloadable>> {
        let mut v: Vec<Arc<dyn Reloadable>> = Vec::new();
        for l in &self.listeners {
            v.extend(l.tls.clone().map(|t| t as Arc<dyn Reloadable>));
            v.extend(l.credentials.clone().map(|c| c as Arc<dyn Reloadable>));
        }
        v.extend(self.admin_tls.clone().map(|t| t as Arc<dyn Reloadable>));
        v
    }
}
