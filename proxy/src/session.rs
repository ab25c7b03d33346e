//! One client connection: requests are read, peeked (API key, version, correlation id) and
//! written to the upstream broker as raw bytes; responses come back in request order and are
//! rewritten only for the APIs that carry broker addresses or versions (see
//! `kmp_protocol::rewrite`, `api_versions`). Pipelining is kept: the request side never waits for
//! a response, the response side follows a queue of what is in flight.
//!
//! Invariants: every forwarded request that expects a response gets exactly one, in order;
//! `acks=0` Produce gets none; a malformed frame closes this connection only. Opening the
//! upstream connection belongs to `upstream`, accepting to `server`.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use kmp_protocol::frame::FrameReader;
use kmp_protocol::kafka_protocol::messages::ApiKey;
use kmp_protocol::{ProtocolError, Side, fillers, mirror_api, peek, rewrite, versions};
use prometheus_client::metrics::counter::Counter;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, watch};
use tracing::{debug, trace, warn};

use crate::api_versions;
use crate::error::ProxyError;
use crate::guard;
use crate::intercept;
use crate::server::Shared;

/// Requests in flight per connection before the request side waits (backpressure).
const MAX_IN_FLIGHT: usize = 1024;

/// What the response side must do next, in request order.
enum Pending {
    /// Read the next upstream response; it must carry `correlation_id`. `merge`: adds back what
    /// the proxy refused (mirror topics taken out of the request) to the broker's response.
    Forwarded {
        api_key: i16,
        api_version: i16,
        correlation_id: i32,
        started: Instant,
        merge: Option<guard::Merge>,
    },
    /// Write a response the proxy produced itself.
    Local { api_key: i16, frame: Bytes, started: Instant },
}

/// A bidirectional stream that splits into independently owned halves. Plain TCP splits without
/// a lock; a TLS stream (later) implements it with `tokio::io::split`.
pub(crate) trait SplitStream: Send + 'static {
    type Read: AsyncRead + Send + Unpin + 'static;
    type Write: AsyncWrite + Send + Unpin + 'static;
    fn split_stream(self) -> (Self::Read, Self::Write);
}

impl SplitStream for TcpStream {
    type Read = OwnedReadHalf;
    type Write = OwnedWriteHalf;
    fn split_stream(self) -> (OwnedReadHalf, OwnedWriteHalf) {
        self.into_split()
    }
}

/// Runs one client connection to completion.
pub(crate) async fn run<C: SplitStream, U: SplitStream>(
    client: C,
    upstream: U,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), ProxyError> {
    let (client_r, client_w) = client.split_stream();
    let (up_r, up_w) = upstream.split_stream();
    let (tx, rx) = mpsc::channel(MAX_IN_FLIGHT);
    let responses = tokio::spawn(response_side(rx, up_r, client_w, shared.clone()));
    let requests = request_side(client_r, up_w, tx, &shared, &mut stop).await;
    // The response side drains what is in flight, then ends (the queue's sender is gone).
    let responses = responses.await.unwrap_or(Ok(()));
    requests.and(responses)
}

async fn request_side<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    client_r: R,
    mut up_w: W,
    tx: mpsc::Sender<Pending>,
    shared: &Shared,
    stop: &mut watch::Receiver<bool>,
) -> Result<(), ProxyError> {
    let m = &shared.metrics;
    let mut reader = FrameReader::new(client_r, shared.config.listener.max_request_frame_bytes, Side::Client);
    loop {
        if *stop.borrow() {
            debug!("draining: no new requests read");
            return Ok(());
        }
        let frame = tokio::select! {
            f = reader.next() => f,
            _ = tx.closed() => return Ok(()),
            r = stop.changed() => {
                if r.is_err() {
                    return Ok(());
                }
                continue;
            }
        };
        let frame = match frame {
            Ok(Some(f)) => f,
            Ok(None) => return Ok(()),
            Err(e) => return Err(client_error(shared, e)),
        };
        let started = Instant::now();
        m.bytes_from_clients.inc_by(frame.len() as u64);
        let p = peek::request(&frame).map_err(|e| client_error(shared, e))?;
        trace!(api_key = p.api_key, version = p.api_version, correlation_id = p.correlation_id, "request");
        if p.api_key == ApiKey::ApiVersions as i16 && p.api_version > api_versions::max_supported() {
            let frame = api_versions::unsupported_version_response(p.correlation_id)?;
            if tx
                .send(Pending::Local {
                    api_key: p.api_key,
                    frame,
                    started,
                })
                .await
                .is_err()
            {
                return Ok(());
            }
            continue;
        }
        // The proxy's own KIP-1279 RPCs (v0) are not in the broker table but are offered.
        let own_rpc = mirror_api::is_answered(p.api_key) && p.api_version == 0;
        if !own_rpc && !versions::is_supported(p.api_key, p.api_version) {
            m.client_frame_errors.inc();
            warn!(
                api_key = p.api_key,
                version = p.api_version,
                "closing connection: request for an API or version the proxy does not offer"
            );
            return Err(ProxyError::UnsupportedRequest {
                api_key: p.api_key,
                api_version: p.api_version,
            });
        }
        let (frame, merge) = match intercept::mirror_request(frame, p.api_key, p.api_version, shared)
            .await
            .map_err(|e| client_error(shared, e))?
        {
            intercept::Outcome::Forward { frame, merge } => (frame, merge),
            intercept::Outcome::Answer(response) => {
                if let Some(frame) = response
                    && tx
                        .send(Pending::Local {
                            api_key: p.api_key,
                            frame,
                            started,
                        })
                        .await
                        .is_err()
                {
                    return Ok(());
                }
                continue;
            }
        };
        let expects_response = p.api_key != ApiKey::Produce as i16 || peek::produce_acks(&frame, &p).map_err(|e| client_error(shared, e))? != 0;
        if expects_response {
            let pending = Pending::Forwarded {
                api_key: p.api_key,
                api_version: p.api_version,
                correlation_id: p.correlation_id,
                started,
                merge,
            };
            if tx.send(pending).await.is_err() {
                return Ok(());
            }
        } else {
            m.api(p.api_key).requests.inc();
        }
        up_w.write_all(&frame)
            .await
            .map_err(|source| ProtocolError::Io { source, side: Side::Broker })?;
    }
}

fn client_error(shared: &Shared, e: ProtocolError) -> ProxyError {
    frame_error(&shared.metrics.client_frame_errors, "bad frame", e)
}

/// Counts and logs a malformed frame (plain I/O errors are neither) and closes the connection.
fn frame_error(counter: &Counter, what: &str, e: ProtocolError) -> ProxyError {
    if !matches!(e, ProtocolError::Io { .. }) {
        counter.inc();
        warn!(error = %e, "closing client connection: {what}");
    }
    e.into()
}

async fn response_side<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    mut rx: mpsc::Receiver<Pending>,
    up_r: R,
    mut client_w: W,
    shared: Arc<Shared>,
) -> Result<(), ProxyError> {
    let m = &shared.metrics;
    let mut reader = FrameReader::new(up_r, shared.config.upstream.max_response_frame_bytes, Side::Broker);
    while let Some(pending) = rx.recv().await {
        let (api_key, frame, started) = match pending {
            Pending::Local { api_key, frame, started } => (api_key, frame, started),
            Pending::Forwarded {
                api_key,
                api_version,
                correlation_id,
                started,
                merge,
            } => {
                let frame = match reader.next().await {
                    Ok(Some(f)) => f,
                    Ok(None) => {
                        debug!("upstream broker closed the connection with requests in flight");
                        return Ok(());
                    }
                    Err(e) => return Err(broker_error(&shared, e)),
                };
                let got = peek::response_correlation_id(&frame).map_err(|e| broker_error(&shared, e))?;
                if got != correlation_id {
                    return Err(broker_error(&shared, ProtocolError::CorrelationMismatch { expected: correlation_id, got }));
                }
                let frame = match merge {
                    Some(merge) => merge(frame).map_err(|e| broker_error(&shared, e))?,
                    None => frame,
                };
                (
                    api_key,
                    adjust_response(frame, api_key, api_version, &shared).map_err(|e| broker_error(&shared, e))?,
                    started,
                )
            }
        };
        client_w.write_all(&frame).await.map_err(ProxyError::ClientIo)?;
        m.bytes_to_clients.inc_by(frame.len() as u64);
        let api = m.api(api_key);
        api.requests.inc();
        api.latency.observe(started.elapsed().as_secs_f64());
    }
    let _ = client_w.flush().await;
    Ok(())
}

fn broker_error(shared: &Shared, e: ProtocolError) -> ProxyError {
    frame_error(&shared.metrics.broker_frame_errors, "bad response from broker", e)
}

/// A Fetch or ShareFetch response with the engine's filler batches masked. Filler records exist
/// only in topics the engine wrote (that are or were mirror topics), so only those are looked
/// at. Until the engine has loaded its stored state it does not know them yet: every topic is
/// looked at then, so no filler ever reaches a client.
fn mask_fillers(frame: Bytes, key: ApiKey, api_version: i16, shared: &Shared) -> Result<Bytes, ProtocolError> {
    let registry = &shared.mirrors.topics;
    let booted = shared.mirrors.control.is_booted();
    if booted && !registry.has_filler_topics() {
        return Ok(frame);
    }
    let maskable = |t: fillers::TopicRef<'_>| {
        !booted
            || match t {
                fillers::TopicRef::Name(n) => std::str::from_utf8(n).is_ok_and(|n| registry.may_hold_fillers(n)),
                fillers::TopicRef::Id(id) => registry.may_hold_fillers_id(&id),
            }
    };
    let masked = if key == ApiKey::Fetch {
        fillers::fetch_has_fillers(&frame, api_version, &maskable)?
            .then(|| fillers::mask_fetch_response(&frame, api_version, &maskable))
            .transpose()?
    } else {
        fillers::mask_share_fetch_response(&frame, api_version, &maskable)?
    };
    Ok(match masked {
        Some(m) => {
            shared.metrics.masked_fetch_responses.inc();
            m
        }
        None => frame,
    })
}

/// Applies the response-side rewrites the API needs; everything else is returned as is.
fn adjust_response(frame: Bytes, api_key: i16, api_version: i16, shared: &Shared) -> Result<Bytes, ProtocolError> {
    let Ok(key) = ApiKey::try_from(api_key) else { return Ok(frame) };
    if key == ApiKey::ApiVersions {
        return api_versions::clamp_response(frame, api_version);
    }
    let frame = match key {
        ApiKey::Fetch | ApiKey::ShareFetch if shared.masks_fillers => mask_fillers(frame, key, api_version, shared)?,
        _ => frame,
    };
    if rewrite::needs_rewrite(key, api_version) {
        return rewrite::rewrite_response(frame, key, api_version, &shared.cluster);
    }
    Ok(frame)
}
