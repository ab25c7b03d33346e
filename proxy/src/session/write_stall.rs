//! The client write-stall bound (`limits.client_write_timeout_ms`): a write to a client that makes
//! no progress for that long fails with `TimedOut`, and the session ends, releasing the response
//! it held and its broker connection. A client that stops reading (issue #35, N6: 20 consumers
//! that never read their answers pinned 1.3 GiB) cannot hold them past it.

use std::future::Future;
use std::io;
use std::time::Duration;

/// Runs `io` (one write, flush or wait for writability), failing it with `TimedOut` when it has
/// not finished after `stall`; `None`: unbounded.
pub(crate) async fn within_stall<T>(stall: Option<Duration>, io: impl Future<Output = io::Result<T>>) -> io::Result<T> {
    match stall {
        None => io.await,
        Some(d) => tokio::time::timeout(d, io).await.unwrap_or_else(|_| {
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client read nothing for limits.client_write_timeout_ms",
            ))
        }),
    }
}

/// Writes all of `buf`, bounding each write by `stall` (`None`: unbounded): a slow client that
/// keeps reading is never cut off, one that reads nothing is. Not flushed.
pub(crate) async fn write_all<W: tokio::io::AsyncWrite + Unpin>(w: &mut W, buf: &[u8], stall: Option<Duration>) -> io::Result<()> {
    use tokio::io::AsyncWriteExt;
    let mut pos = 0;
    while pos < buf.len() {
        match within_stall(stall, w.write(&buf[pos..])).await? {
            0 => return Err(io::ErrorKind::WriteZero.into()),
            n => pos += n,
        }
    }
    Ok(())
}

/// [`write_all`], then a flush bounded the same way.
pub(crate) async fn write_all_flushed<W: tokio::io::AsyncWrite + Unpin>(w: &mut W, buf: &[u8], stall: Option<Duration>) -> io::Result<()> {
    use tokio::io::AsyncWriteExt;
    write_all(w, buf, stall).await?;
    within_stall(stall, w.flush()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_client_that_reads_nothing_fails_the_write_after_the_stall_and_one_that_reads_does_not() {
        let (mut w, mut r) = tokio::io::duplex(1024);
        let big = vec![7u8; 64 * 1024];
        let err = write_all_flushed(&mut w, &big, Some(Duration::from_millis(200)))
            .await
            .expect_err("nobody reads");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);

        let (mut w, r2) = tokio::io::duplex(1024);
        drop(std::mem::replace(&mut r, r2));
        let reader = tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let mut got = Vec::new();
            r.read_to_end(&mut got).await.map(|_| got.len())
        });
        write_all_flushed(&mut w, &big, Some(Duration::from_secs(5)))
            .await
            .expect("a reading client gets everything");
        drop(w);
        assert_eq!(reader.await.unwrap().unwrap(), big.len());
    }
}
