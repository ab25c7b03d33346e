//! Client-facing TLS: the current server configuration of a listener (Kafka listeners, admin
//! endpoint), its reload when the certificate, key or client-CA files change or on SIGHUP, and the
//! handshake with the principal of a client certificate. Open connections keep the configuration
//! they were accepted with; a reload that fails keeps the previous one (and says why). Files
//! are read with a size cap (`limits.max_security_file_bytes`, [`read_capped`]) and, on reload,
//! on a thread of their own: a file that blocks (a FIFO, a hung network mount) never parks a
//! runtime worker, so handshakes and `/healthz` go on; the watcher stops waiting after
//! [`RELOAD_WAIT`] and starts no second reload of that item while the first one hangs. Building
//! the rustls configuration from PEM belongs to `kmp_protocol::security::tls`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use kmp_config::TlsServerConfig;
use kmp_protocol::security::tls::{ServerPem, TlsError, server_config_from_pem, subject_name};
use rustls::ServerConfig;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tracing::{debug, info, warn};

/// How long the watcher waits for a reload to read its files before it says so (the reload goes
/// on in its thread and installs what it read if it ever finishes).
const RELOAD_WAIT: Duration = Duration::from_secs(10);

/// Something reloaded from files: a TLS identity or the credentials file.
pub(crate) trait Reloadable: Send + Sync + 'static {
    /// What it is, for logs.
    fn name(&self) -> &str;
    /// The files whose modification time triggers a reload.
    fn files(&self) -> Vec<PathBuf>;
    /// Reads the files anew (blocking: called off the runtime); on error the previous version
    /// stays in use.
    fn reload(&self) -> Result<(), String>;
}

/// The contents of `path` (`what` names the setting, for errors), refused when longer than
/// `max_bytes` without reading more than that.
pub(crate) fn read_capped(path: &Path, what: &str, max_bytes: u64) -> Result<Vec<u8>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read {what} {}: {e}", path.display()))?;
    let mut data = Vec::new();
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut data)
        .map_err(|e| format!("cannot read {what} {}: {e}", path.display()))?;
    if data.len() as u64 > max_bytes {
        return Err(format!(
            "{what} {} is larger than limits.max_security_file_bytes = {max_bytes} bytes; not read",
            path.display()
        ));
    }
    Ok(data)
}

/// The TLS configuration of one listener, replaceable while connections use the old one.
pub(crate) struct TlsIdentity {
    name: String,
    conf: TlsServerConfig,
    alpn: Vec<Vec<u8>>,
    /// `limits.max_security_file_bytes`.
    max_file_bytes: u64,
    current: RwLock<Arc<ServerConfig>>,
}

impl TlsIdentity {
    /// Loads `conf` now, reading no file longer than `max_file_bytes` (errors stop the proxy at
    /// startup).
    pub(crate) fn load(name: &str, conf: &TlsServerConfig, alpn: &[&[u8]], max_file_bytes: u64) -> Result<Arc<Self>, TlsError> {
        let current = read_config(conf, alpn, max_file_bytes)?;
        Ok(Arc::new(Self {
            name: name.to_owned(),
            conf: conf.clone(),
            alpn: alpn.iter().map(|a| a.to_vec()).collect(),
            max_file_bytes,
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
        let fresh = read_config(&self.conf, &alpn, self.max_file_bytes).map_err(|e| e.to_string())?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = fresh;
        Ok(())
    }
}

/// The server configuration from `conf`'s files, each read with the size cap.
fn read_config(conf: &TlsServerConfig, alpn: &[&[u8]], max_bytes: u64) -> Result<Arc<ServerConfig>, TlsError> {
    let read = |path: &Path, what: &str| read_capped(path, what, max_bytes).map_err(TlsError);
    let pem = ServerPem {
        cert: read(&conf.cert_file, "cert_file")?,
        key: read(&conf.key_file, "key_file")?,
        client_ca: conf.client_ca_file.as_deref().map(|ca| read(ca, "client_ca_file")).transpose()?,
    };
    server_config_from_pem(&pem, alpn)
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

/// One reloadable item under watch: the modification times last seen, and whether a reload of it
/// is still running (then no second one starts).
struct Watched {
    item: Arc<dyn Reloadable>,
    seen: Mutex<Vec<Option<SystemTime>>>,
    busy: AtomicBool,
}

/// Clears [`Watched::busy`] when the reload thread ends, however it ends.
struct Done(Arc<Watched>);

impl Drop for Done {
    fn drop(&mut self) {
        self.0.busy.store(false, Ordering::Release);
    }
}

impl Watched {
    fn new(item: Arc<dyn Reloadable>) -> Arc<Self> {
        let seen = Mutex::new(stamps(&item.files()));
        Arc::new(Self {
            item,
            seen,
            busy: AtomicBool::new(false),
        })
    }

    /// Reloads when the files changed (`always`: in any case), on a thread of its own: stat and
    /// read may block. A task waits for it at most `wait` (and says so when it did not finish);
    /// it answers whether the reload finished by then. Nothing here waits on the caller's task.
    fn check(self: &Arc<Self>, why: &'static str, always: bool, wait: Duration) -> tokio::task::JoinHandle<bool> {
        let what = self.item.name().to_owned();
        if self.busy.swap(true, Ordering::AcqRel) {
            // Said once a poll would be noise every `reload_interval_ms`; a SIGHUP is asked for.
            if always {
                warn!(what, why, "the previous reload still waits for its files; not started again");
            } else {
                debug!(what, why, "the previous reload still waits for its files; not started again");
            }
            return tokio::spawn(async { false });
        }
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        let done = Done(self.clone());
        // A thread of our own rather than spawn_blocking: a read that never returns must not
        // hold up the runtime's shutdown either.
        let spawned = std::thread::Builder::new().name("kmp-reload".into()).spawn(move || {
            let watched = done.0.clone();
            let now = stamps(&watched.item.files());
            let changed = {
                let mut seen = watched.seen.lock().unwrap_or_else(|e| e.into_inner());
                let changed = *seen != now;
                *seen = now;
                changed
            };
            if always || changed {
                reload_one(watched.item.as_ref(), why);
            }
            drop(done);
            let _ = done_tx.send(());
        });
        if let Err(e) = spawned {
            // The closure (and its `Done`) was dropped with the error.
            warn!(what, why, error = %e, "cannot start a reload thread; the previous version stays in use");
            return tokio::spawn(async { false });
        }
        tokio::spawn(async move {
            match tokio::time::timeout(wait, done_rx).await {
                Ok(_) => true,
                Err(_) => {
                    warn!(
                        what,
                        why,
                        waited_ms = wait.as_millis() as u64,
                        "reload still reading its files (a FIFO or a hung mount?); the previous version stays in use until it finishes"
                    );
                    false
                }
            }
        })
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
/// them on SIGHUP (`hup`), until `stop`. Files are stat'ed and read off the runtime
/// ([`Watched::check`]).
#[cfg_attr(not(unix), allow(unused_mut))]
pub(crate) async fn watch(items: Vec<Arc<dyn Reloadable>>, interval: Duration, mut hup: Hangup, mut stop: tokio::sync::watch::Receiver<bool>) {
    let watched: Vec<Arc<Watched>> = match tokio::task::spawn_blocking(move || items.into_iter().map(Watched::new).collect()).await {
        Ok(w) => w,
        Err(e) => {
            warn!(error = %e, "cannot stat the reloadable files; reloads are off");
            return;
        }
    };
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
                if interval.is_zero() {
                    continue;
                }
                for w in &watched {
                    w.check("files changed", false, RELOAD_WAIT);
                }
            }
            _ = hangup => {
                if watched.is_empty() {
                    info!("SIGHUP: nothing to reload (no TLS files or credentials file configured)");
                }
                for w in &watched {
                    w.check("SIGHUP", true, RELOAD_WAIT);
                }
            }
            _ = stop.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kmp-tls-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_file_longer_than_the_cap_is_refused_naming_the_setting_and_one_at_the_cap_is_read() {
        let dir = scratch("cap");
        let file = dir.join("cert.pem");
        std::fs::write(&file, vec![b'x'; 4097]).unwrap();
        let err = read_capped(&file, "cert_file", 4096).unwrap_err();
        assert!(err.contains("larger than limits.max_security_file_bytes = 4096"), "{err}");
        assert_eq!(read_capped(&file, "cert_file", 4097).unwrap().len(), 4097);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Counts its reloads; each reads `path` (blocking while it is a FIFO nobody writes).
    struct Counting {
        path: PathBuf,
        reloads: std::sync::atomic::AtomicU32,
    }

    impl Reloadable for Counting {
        fn name(&self) -> &str {
            "test"
        }
        fn files(&self) -> Vec<PathBuf> {
            vec![self.path.clone()]
        }
        fn reload(&self) -> Result<(), String> {
            read_capped(&self.path, "test file", 1024)?;
            self.reloads.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

    #[cfg(unix)]
    #[tokio::test(flavor = "current_thread")]
    async fn a_reload_blocked_on_a_fifo_leaves_the_runtime_free_and_is_not_started_twice() {
        let dir = scratch("fifo");
        let path = dir.join("cert.pem");
        let made = std::process::Command::new("mkfifo").arg(&path).status().unwrap();
        assert!(made.success(), "mkfifo");
        let item = Arc::new(Counting {
            path: path.clone(),
            reloads: Default::default(),
        });
        let watched = Watched::new(item.clone());
        // One runtime thread: had the read run on it, this test could not go on.
        let first = watched.check("SIGHUP", true, Duration::from_millis(300));
        let again = watched.check("SIGHUP", true, Duration::from_millis(300));
        assert!(!again.await.unwrap(), "a second reload is not started while the first one waits");
        assert!(!first.await.unwrap(), "the watcher stops waiting for a reload that blocks");
        // A writer lets the blocked read finish (empty, read at once).
        drop(std::fs::OpenOptions::new().write(true).open(&path).unwrap());
        for _ in 0..100 {
            if !watched.busy.load(Ordering::Acquire) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!watched.busy.load(Ordering::Acquire), "the reload thread ended once the file could be read");
        assert_eq!(item.reloads.load(Ordering::SeqCst), 1, "the one reload finished");
        let _ = std::fs::remove_dir_all(dir);
    }
}
