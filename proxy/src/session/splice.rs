//! Zero-copy relay of a byte range from a broker's socket to a client's socket: Linux `splice(2)`
//! through a pipe of the connection's own, so the bytes of a large response body (a Fetch
//! response's record batches) move from one socket to the other inside the kernel and never
//! through the proxy's memory. Only between two plain TCP sockets: TLS on either side needs the
//! bytes in user space, and so does anything a filter or scan must look at. `stream_copy`
//! decides which ranges come here (it has already checked the frame's size, correlation id and
//! structure up to the range); this module only moves exactly the bytes it is told to.
//!
//! Hostile peers: the count moved is the caller's, bounded by the frame the broker announced and
//! checked against what is left in it; a broker that closes early ends the relay with
//! [`SpliceError::Eof`]; a client that stops reading blocks only this connection (the pipe holds
//! at most [`PIPE_BYTES`]).

use std::io;
use std::os::fd::OwnedFd;

use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

/// The pipe's capacity asked for (Linux's default limit for an unprivileged process,
/// `/proc/sys/fs/pipe-max-size`, is 1 MiB): the most moved per pair of `splice` calls. If the
/// kernel refuses, the pipe keeps its default (64 KiB).
pub(crate) const PIPE_BYTES: usize = 1024 * 1024;

/// Ranges shorter than this are copied through the proxy's buffer as before: the two extra
/// system calls per range cost more than the copy.
pub(crate) const MIN_SPLICE_BYTES: usize = 64 * 1024;

/// The plain TCP socket under one half of a connection, if it is one (a TLS half is not).
pub(crate) trait SpliceSocket {
    fn splice_socket(&self) -> Option<&TcpStream> {
        None
    }
}

impl SpliceSocket for OwnedReadHalf {
    fn splice_socket(&self) -> Option<&TcpStream> {
        Some(self.as_ref())
    }
}

impl SpliceSocket for OwnedWriteHalf {
    fn splice_socket(&self) -> Option<&TcpStream> {
        Some(self.as_ref())
    }
}

impl SpliceSocket for kmp_protocol::security::BrokerRead {
    fn splice_socket(&self) -> Option<&TcpStream> {
        match self {
            Self::Plain(r) => Some(r.as_ref()),
            Self::Tls(_) => None,
        }
    }
}

impl SpliceSocket for kmp_protocol::security::BrokerWrite {
    fn splice_socket(&self) -> Option<&TcpStream> {
        match self {
            Self::Plain(w) => Some(w.as_ref()),
            Self::Tls(_) => None,
        }
    }
}

impl<T> SpliceSocket for tokio::io::WriteHalf<T> {}
impl<T> SpliceSocket for tokio::io::ReadHalf<T> {}

/// Why a relay stopped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SpliceError {
    /// The broker's socket ended before the range was complete; `left` bytes of it never came.
    #[error("the broker's connection ended {left} bytes before the end of a response")]
    Eof { left: usize },
    #[error("reading from the broker: {0}")]
    Broker(#[source] io::Error),
    #[error("writing to the client: {0}")]
    Client(#[source] io::Error),
}

/// A connection's pipe (both ends non-blocking).
pub(crate) struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    capacity: usize,
}

impl Pipe {
    /// A new pipe; `Err` when the process is out of file descriptors (the caller then copies).
    pub(crate) fn new() -> io::Result<Self> {
        use rustix::pipe::{PipeFlags, fcntl_setpipe_size, pipe_with};
        let (read, write) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        let capacity = fcntl_setpipe_size(&write, PIPE_BYTES).unwrap_or(64 * 1024);
        Ok(Self { read, write, capacity })
    }

    /// Moves exactly `n` bytes from `from` to `to`: fills the pipe from the broker's socket, then
    /// empties it into the client's, until `n` have reached the client.
    pub(crate) async fn relay(&self, from: &TcpStream, to: &TcpStream, n: usize, stall: Option<std::time::Duration>) -> Result<(), SpliceError> {
        use rustix::pipe::{SpliceFlags, splice};
        let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
        let mut left = n;
        while left > 0 {
            let want = left.min(self.capacity);
            let got = loop {
                from.readable().await.map_err(SpliceError::Broker)?;
                match from.try_io(Interest::READABLE, || Ok(splice(from, None, &self.write, None, want, flags)?)) {
                    Ok(0) => return Err(SpliceError::Eof { left }),
                    Ok(k) => break k,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Err(SpliceError::Broker(e)),
                }
            };
            let mut in_pipe = got;
            while in_pipe > 0 {
                crate::session::write_stall::within_stall(stall, to.writable())
                    .await
                    .map_err(SpliceError::Client)?;
                match to.try_io(Interest::WRITABLE, || Ok(splice(&self.read, None, to, None, in_pipe, flags)?)) {
                    Ok(0) => return Err(SpliceError::Client(io::ErrorKind::WriteZero.into())),
                    Ok(k) => in_pipe -= k,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Err(SpliceError::Client(e)),
                }
            }
            left -= got;
        }
        Ok(())
    }
}
