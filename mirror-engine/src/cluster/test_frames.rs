//! Test support for the in-process fake brokers of the unit tests: reading one request frame.

use tokio::io::AsyncReadExt;

/// The next request frame (length prefix included) from a client of a fake broker, or `None`
/// once the client closed the connection.
pub(crate) async fn read_request(s: &mut tokio::net::TcpStream) -> Option<bytes::Bytes> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await.ok()?;
    let mut frame = len.to_vec();
    frame.resize(4 + u32::from_be_bytes(len) as usize, 0);
    s.read_exact(&mut frame[4..]).await.ok()?;
    Some(bytes::Bytes::from(frame))
}
