//! Binding the client-facing listeners (bootstrap and per-broker) with a configured listen
//! backlog, so a burst of reconnecting clients is queued by the kernel instead of dropped into
//! SYN retries. Accepting and serving connections belong to `session::accept` and `server`.

use std::io;
use std::net::{SocketAddr, TcpListener as StdTcpListener, ToSocketAddrs};

use socket2::{Domain, Protocol, Socket, Type};

/// A non-blocking listener on the first address `addr` (`host:port`) resolves to that binds.
pub fn bind_std(addr: &str, backlog: u32) -> io::Result<StdTcpListener> {
    let mut last = None;
    for sa in addr.to_socket_addrs()? {
        match bind_one(sa, backlog) {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("{addr} resolves to no address"))))
}

/// Like [`bind_std`], registered with the tokio runtime.
pub fn bind(addr: &str, backlog: u32) -> io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::from_std(bind_std(addr, backlog)?)
}

fn bind_one(sa: SocketAddr, backlog: u32) -> io::Result<StdTcpListener> {
    let s = Socket::new(Domain::for_address(sa), Type::STREAM, Some(Protocol::TCP))?;
    // What the standard library does too: a restarted proxy rebinds while old connections linger.
    s.set_reuse_address(true)?;
    s.bind(&sa.into())?;
    s.listen(i32::try_from(backlog).unwrap_or(i32::MAX))?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_burst_larger_than_the_old_default_backlog_is_queued_before_the_first_accept() {
        let listener = bind("127.0.0.1:0", 1024).expect("bound");
        let addr = listener.local_addr().unwrap();
        // Nobody accepts yet: every connect completes only if the kernel queues it.
        let mut conns = Vec::new();
        for _ in 0..600 {
            let c = tokio::time::timeout(std::time::Duration::from_millis(500), tokio::net::TcpStream::connect(addr)).await;
            conns.push(c.expect("connect completes without SYN retries").expect("connected"));
        }
        for _ in 0..600 {
            listener.accept().await.expect("accepted");
        }
    }
}
