//! The one accept loop: takes connections off a listener until told to stop, and after a failed
//! accept (out of file descriptors and the like — the listener stays readable, so retrying at
//! once would spin) pauses with a growing back-off while connections close. What to do with an
//! accepted connection is the caller's (the client listeners' `session::accept`, the admin
//! endpoint's `admin`).

use std::net::SocketAddr;

use kmp_mirror_engine::Backoff;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tracing::warn;

/// Accepts on `listener` until `stop` changes and hands each connection to `accepted`, which
/// must not block (it spawns what serves the connection). `what` names the listener in logs.
pub(crate) async fn accept_loop<F>(listener: TcpListener, what: &str, mut backoff: Backoff, mut stop: watch::Receiver<bool>, mut accepted: F)
where
    F: FnMut(TcpStream, SocketAddr),
{
    loop {
        let result = tokio::select! {
            a = listener.accept() => a,
            _ = stop.changed() => return,
        };
        match result {
            Ok((stream, peer)) => {
                backoff.reset();
                accepted(stream, peer);
            }
            Err(err) => {
                let pause = backoff.next_pause();
                warn!(listener = what, %err, ?pause, "accept failed; pausing");
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = stop.changed() => return,
                }
            }
        }
    }
}
