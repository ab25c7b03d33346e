//! Renewing the proxy's SASL login on a client's upstream connection (termination mode, where the
//! proxy logged in to the broker with its own identity): the SaslHandshake and SaslAuthenticate
//! requests are written between the client's requests, and their answers are taken from the
//! response side's queue ([`Pending::Internal`](super::Pending)) instead of reaching the client.
//! The exchange itself is `kmp_protocol::security::reauth`'s.

use std::time::Duration;

use bytes::Bytes;
use kmp_protocol::codec::{decode_response, encode_request};
use kmp_protocol::kafka_protocol::messages::{ApiKey, RequestHeader};
use kmp_protocol::kafka_protocol::protocol::{Request, StrBytes};
use kmp_protocol::security::SaslRoundTrip;
use kmp_protocol::{ProtocolError, Side};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use super::Pending;

/// Longest wait for the answer to one of the login's requests (after the answers of the
/// client's requests sent before it).
const ANSWER_WAIT: Duration = Duration::from_secs(60);

/// Correlation ids of the proxy's own requests: apart from the ones clients commonly use (the
/// response side matches answers by order and checks the id).
const FIRST_ID: i32 = -1_000_000;

/// One renewal's requests on one upstream connection.
pub(super) struct Renewal<'a, W> {
    write: &'a mut W,
    tx: &'a mpsc::Sender<Pending>,
    next_id: i32,
}

impl<'a, W> Renewal<'a, W> {
    pub(super) fn new(write: &'a mut W, tx: &'a mpsc::Sender<Pending>) -> Self {
        Self { write, tx, next_id: FIRST_ID }
    }
}

fn closed(detail: &str) -> ProtocolError {
    ProtocolError::Io {
        source: std::io::Error::new(std::io::ErrorKind::ConnectionAborted, detail.to_owned()),
        side: Side::Broker,
    }
}

impl<W: AsyncWrite + Unpin> SaslRoundTrip for Renewal<'_, W> {
    async fn round_trip<R: Request>(&mut self, req: &R, version: i16) -> Result<R::Response, ProtocolError> {
        let key = ApiKey::try_from(R::KEY).map_err(|_| closed("not a request the proxy sends"))?;
        self.next_id = self.next_id.wrapping_add(1);
        let mut header = RequestHeader::default();
        header.request_api_key = R::KEY;
        header.request_api_version = version;
        header.correlation_id = self.next_id;
        header.client_id = Some(StrBytes::from_static_str("kafka-mirror-proxy"));
        let frame = encode_request(&header, key, req)?;
        let (reply, answer) = oneshot::channel::<Bytes>();
        self.tx
            .send(Pending::Internal {
                correlation_id: self.next_id,
                reply,
            })
            .await
            .map_err(|_| closed("the session ended while renewing its login"))?;
        let io = |source| ProtocolError::Io { source, side: Side::Broker };
        self.write.write_all(&frame).await.map_err(io)?;
        self.write.flush().await.map_err(io)?;
        let frame = match tokio::time::timeout(ANSWER_WAIT, answer).await {
            Ok(Ok(frame)) => frame,
            Ok(Err(_)) => return Err(closed("the upstream connection ended while renewing the login")),
            Err(_) => return Err(closed("no answer to the login renewal in time")),
        };
        Ok(decode_response::<R::Response>(&frame, key, version)?.1)
    }
}
