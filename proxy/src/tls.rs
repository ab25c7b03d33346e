//! Client-facing TLS: the current server configuration of a listener (Kafka listeners, admin
//! endpoint), its reload when the certificate, key or client-CA files change or on SIGHUP, and the
//! handshake with the principal of a client certificate. Open connections keep the configuration
//! they were accepted with; a reload that fails keeps the previous one (and says why). Building
//! the rustls configuration from files belongs to `kmp_protocol::security::tls`.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use kmp_config::TlsServerConfig;
use kmp_protocol::security::tls::{TlsError, server_config, subject_name};
use rustls::ServerConfig;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tracing::{info, warn};

/// Something reloaded from files: a TLS identity or the credentials file.
pub(crate) trait Reloadable: Send + Sync {
    /// What it is, for logs.
    fn name(&self) -> &str;
    /// The files whose modification time triggers a reload.
    fn files(&self) -> Vec<PathBuf>;
    /// Reads the files anew; on error the previous version stays in use.
    fn reload(&self) -> Result<(), String>;
}

/// The TLS configuration of one listener, replaceable while connections use the old one.
pub(crate) struct TlsIdentity {
    name: String,
    conf: TlsServerConfig,
    alpn: Vec<Vec<u8>>,
    current: RwLock<Arc<ServerConfig>>,
}

impl TlsIdentity {
    /// Loads `conf` now (errors stop the proxy at startup).
    pub(crate) fn load(name: &str, conf: &TlsServerConfig, alpn: &[&[u8]]) -> Result<Arc<Self>, TlsError> {
        let current = server_config(conf, alpn)?;
        Ok(Arc::new(Self {
            name: name.to_owned(),
            conf: conf.clone(),
            alpn: alpn.iter().map(|a| a.to_vec()).collect(),
            current: RwLock::new(current),
        }))
    }

    /// An acceptor with the current configuration.
    pub(crate) fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.current.read().unwrap_or_else(|e| e.into_inner()).clone())
    }

    pub(crate) fn reload_interval(&self) -> Duration {
        Duration::from_millis(self.conf.reload_interval_ms)
    }
}

impl Reloadable for TlsIdentity {
    fn name(&self) -> &str {
        &self.name
    }

    fn files(&self) -> Vec<PathBuf> {
        let mut f = vec![self.conf.cert_file.clone(), self.conf.key_file.clone()];
        f.extend(self.conf.client_ca_file.clone());
        f
    }

    fn reload(&self) -> Result<(), String> {
        let alpn: Vec<&[u8]> = self.alpn.iter().map(Vec::as_slice).collect();
        let fresh = server_config(&self.conf, &alpn).map_err(|e| e.to_string())?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = fresh;
        Ok(())
    }
}

/// A TLS handshake with a client, bounded by `timeout`; returns the stream and the subject of the
/// client's certificate (mutual TLS), if it presented one.
pub(crate) async fn accept(identity: &TlsIdentity, tcp: TcpStream, timeout: Duration) -> Result<(TlsStream<TcpStream>, Option<String>), String> {
    let stream = tokio::time::timeout(timeout, identity.acceptor().accept(tcp))
        .await
        .map_err(|_| format!("TLS handshake did not complete within {timeout:?}"))?
        .map_err(|e| format!("TLS handshake failed: {}", e.get_ref().map_or_else(|| e.to_string(), ToString::to_string)))?;
    let principal = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .and_then(|c| subject_name(c.as_ref()));
    Ok((stream, principal))
}

fn stamps(files: &[PathBuf]) -> Vec<Option<SystemTime>> {
    files.iter().map(|f| std::fs::metadata(f).and_then(|m| m.modified()).ok()).collect()
}

fn reload_one(r: &dyn Reloadable, why: &str) {
    match r.reload() {
        Ok(()) => info!(what = r.name(), why, "reloaded"),
        Err(e) => warn!(what = r.name(), why, error = %e, "reload failed; the previous version stays in use"),
    }
}

/// The SIGHUP handler, installed by the server before it serves anything: a SIGHUP must never
/// take the default action (terminate), also when there is nothing to reload.
#[cfg(unix)]
pub(crate) type Hangup = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
pub(crate) type Hangup = Option<()>;

/// Installs the SIGHUP handler (call from the runtime, before accepting connections).
pub(crate) fn hangup_handler() -> Hangup {
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
            Ok(s) => Some(s),
            Err(e) => {
                warn!(error = %e, "cannot install the SIGHUP handler; reloads happen by file change only");
                None
            }
        }
    }
    #[cfg(not(unix))]
    None
}

/// Reloads every item when its files change (checked every `interval`; zero: never) and all of
/// them on SIGHUP (`hup`), until `stop`.
#[cfg_attr(not(unix), allow(unused_mut))]
pub(crate) async fn watch(items: Vec<Arc<dyn Reloadable>>, interval: Duration, mut hup: Hangup, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut seen: Vec<Vec<Option<SystemTime>>> = items.iter().map(|r| stamps(&r.files())).collect();
    let poll = if interval.is_zero() { Duration::from_secs(3600 * 24 * 365) } else { interval };
    loop {
        #[cfg(unix)]
        let hangup = async {
            match hup.as_mut() {
                Some(h) => {
                    h.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        #[cfg(not(unix))]
        let hangup = {
            let _ = &mut hup;
            std::future::pending::<()>()
        };
        tokio::select! {
            _ = tokio::time::sleep(poll) => {
                if interval.is_zero() || items.is_empty() {
                    continue;
                }
                for (r, old) in items.iter().zip(seen.iter_mut()) {
                    let now = stamps(&r.files());
                    if now != *old {
                        *old = now;
                        reload_one(r.as_ref(), "files changed");
                    }
                }
            }
            _ = hangup => {
                if items.is_empty() {
                    info!("SIGHUP: nothing to reload (no TLS files or credentials file configured)");
                }
                for (r, old) in items.iter().zip(seen.iter_mut()) {
                    *old = stamps(&r.files());
                    reload_one(r.as_ref(), "SIGHUP");
                }
            }
            _ = stop.changed() => return,
        }
    }
}
