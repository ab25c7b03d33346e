//! Opening a connection to a broker the way `security.protocol` says: TCP, then TLS when SSL or
//! SASL_SSL, then SASL (SaslHandshake v1 + SaslAuthenticate v2, PLAIN or SCRAM, `reauth`) when
//! SASL_*.
//! [`ClientSecurity`] is the resolved, ready-to-use form of a cluster's client properties (TLS
//! configuration built, secrets read); [`BrokerStream`] is what callers read and write and split.
//! What travels on the stream afterwards belongs to the callers (`client`, the proxy's sessions).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::BytesMut;
use kafka_protocol::protocol::{Request, StrBytes};
use kmp_config::{ClientSecurityProps, SaslMechanism, SecretRef, parse_jaas};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::reauth::Session;
use super::scram::SaltedCache;
use super::tls::{TlsError, client_config, server_name};
use crate::client::{decode_sent, request_frame};
use crate::error::ProtocolError;

/// Broker connections this process opened (TCP connected), in total.
static OPENED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many broker connections this process opened with [`ClientSecurity::connect`], in total.
pub fn connections_opened() -> u64 {
    OPENED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Largest SASL response accepted while authenticating (bytes).
const MAX_SASL_RESPONSE: usize = 64 * 1024;

/// The proxy's SASL login toward one cluster. `Debug` hides the password.
#[derive(Clone)]
pub struct SaslLogin {
    pub mechanism: SaslMechanism,
    /// Empty when the user name comes from a referenced `sasl.jaas.config`.
    pub username: String,
    /// Resolved at every connect, so a rotated secret file or variable takes effect without a
    /// restart (the password, or for an empty `username` the whole JAAS line).
    secret: SecretRef,
    /// SCRAM: the salted password of the last exchange (same salt: no PBKDF2 per connection).
    salted: std::sync::Arc<SaltedCache>,
    /// OAUTHBEARER: where the access tokens come from (shared by every connection of the login).
    oauth: Option<std::sync::Arc<super::oauth::TokenSource>>,
}

impl SaslLogin {
    /// The SCRAM salted-password cache of this login.
    pub(crate) fn salted(&self) -> &SaltedCache {
        &self.salted
    }

    /// A PLAIN login of user `u` with password `p`, for unit tests.
    #[cfg(test)]
    pub(crate) fn for_tests() -> Self {
        Self {
            mechanism: SaslMechanism::Plain,
            username: "u".into(),
            secret: SecretRef::Inline("p".into()),
            salted: Default::default(),
            oauth: None,
        }
    }

    /// OAUTHBEARER: the token source (`None` for other mechanisms).
    pub(crate) fn token_source(&self) -> Option<&std::sync::Arc<super::oauth::TokenSource>> {
        self.oauth.as_ref()
    }

    /// OAUTHBEARER: client id, secret and scope as the references say right now.
    pub(crate) fn client_credentials(&self, scope: Option<&str>) -> Result<super::oauth::ClientCredentials, String> {
        let secret = self.secret.resolve()?;
        if self.username.is_empty() {
            // A referenced sasl.jaas.config: the whole line was the secret.
            let (id, secret, jaas_scope) = kmp_config::parse_oauth_jaas(&secret)?;
            return Ok(super::oauth::ClientCredentials {
                id,
                secret,
                scope: scope.map(str::to_owned).or(jaas_scope),
            });
        }
        Ok(super::oauth::ClientCredentials {
            id: self.username.clone(),
            secret,
            scope: scope.map(str::to_owned),
        })
    }

    /// `(user, password)` as the secret reference says right now.
    pub(crate) fn credentials(&self) -> Result<(String, String), String> {
        if self.mechanism == SaslMechanism::OAuthBearer {
            return self.client_credentials(None).map(|c| (c.id, c.secret));
        }
        let secret = self.secret.resolve()?;
        if self.username.is_empty() {
            // A referenced sasl.jaas.config: the whole line was the secret.
            parse_jaas(&secret)
        } else {
            Ok((self.username.clone(), secret))
        }
    }
}

impl std::fmt::Debug for SaslLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslLogin")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// How to connect to one cluster: plaintext, TLS, SASL or both.
#[derive(Clone, Default)]
pub struct ClientSecurity {
    tls: Option<TlsConnector>,
    sasl: Option<SaslLogin>,
}

impl std::fmt::Debug for ClientSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientSecurity")
            .field("tls", &self.tls.is_some())
            .field("sasl", &self.sasl)
            .finish()
    }
}

/// A failure to build a [`ClientSecurity`] (file, PEM or secret reference problems).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecurityError {
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("SASL credentials: {0}")]
    Secret(String),
    #[error(transparent)]
    OAuth(#[from] super::oauth::OAuthError),
}

impl ClientSecurity {
    /// Plain TCP, no authentication.
    pub fn plaintext() -> Self {
        Self::default()
    }

    /// Plain TCP with a SASL PLAIN login (user `u`, password `p`), for unit tests.
    #[cfg(test)]
    pub(crate) fn sasl_for_tests() -> Self {
        Self {
            tls: None,
            sasl: Some(SaslLogin::for_tests()),
        }
    }

    /// Builds the TLS configuration and resolves the secrets of `props` (files are read now).
    pub fn build(props: &ClientSecurityProps) -> Result<Self, SecurityError> {
        let tls = if props.protocol.tls() {
            Some(TlsConnector::from(client_config(props)?))
        } else {
            None
        };
        let sasl = match &props.sasl {
            None => None,
            Some(s) => {
                let oauth = match &s.oauth {
                    Some(o) => Some(std::sync::Arc::new(super::oauth::TokenSource::new(o, props.truststore.as_ref())?)),
                    None => None,
                };
                let login = SaslLogin {
                    mechanism: s.mechanism,
                    username: s.username.clone(),
                    secret: s.password.clone(),
                    salted: Default::default(),
                    oauth,
                };
                // Checked now, so a missing file or variable stops the start with its name.
                login.credentials().map_err(SecurityError::Secret)?;
                Some(login)
            }
        };
        Ok(Self { tls, sasl })
    }

    /// The same transport without SASL (client connections in pass-through mode authenticate
    /// themselves).
    pub fn transport_only(&self) -> Self {
        Self {
            tls: self.tls.clone(),
            sasl: None,
        }
    }

    /// Whether connections use TLS.
    pub fn uses_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The SASL login, if any.
    pub fn sasl(&self) -> Option<&SaslLogin> {
        self.sasl.as_ref()
    }

    /// Connects to `addr` within `timeout` (TCP, TLS handshake and SASL together).
    pub async fn connect(&self, addr: &str, timeout: Duration, client_id: &str) -> Result<BrokerStream, ProtocolError> {
        Ok(self.connect_session(addr, timeout, client_id).await?.0)
    }

    /// [`ClientSecurity::connect`], also returning the SASL login's session with the broker (for
    /// re-authentication before it expires, `reauth`).
    pub async fn connect_session(&self, addr: &str, timeout: Duration, client_id: &str) -> Result<(BrokerStream, Option<Session>), ProtocolError> {
        let fail = |detail: String| ProtocolError::Connect { addr: addr.to_owned(), detail };
        let work = async {
            let tcp = TcpStream::connect(addr).await.map_err(|e| fail(e.to_string()))?;
            OPENED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let _ = tcp.set_nodelay(true);
            let mut stream = match &self.tls {
                None => BrokerStream::Plain(tcp),
                Some(connector) => {
                    let name = server_name(addr).map_err(|e| fail(e.to_string()))?;
                    let tls = connector
                        .connect(name, tcp)
                        .await
                        .map_err(|e| fail(format!("TLS handshake failed: {}", tls_reason(&e))))?;
                    BrokerStream::Tls(Box::new(tls))
                }
            };
            let mut session = None;
            if let Some(login) = &self.sasl {
                let began = tokio::time::Instant::now();
                let mut fresh = Fresh {
                    stream: &mut stream,
                    client_id,
                    next_id: 0,
                };
                let lifetime = super::reauth::login(&mut fresh, login).await.map_err(|e| match e {
                    ProtocolError::Authentication { detail, .. } => ProtocolError::Authentication { addr: addr.to_owned(), detail },
                    e => e,
                })?;
                session = Some(Session::new(login.clone(), lifetime, began));
            }
            Ok((stream, session))
        };
        tokio::time::timeout(timeout, work)
            .await
            .map_err(|_| fail(format!("timed out after {timeout:?}")))?
    }
}

fn tls_reason(e: &io::Error) -> String {
    match e.get_ref() {
        Some(inner) => inner.to_string(),
        None => e.to_string(),
    }
}

/// A fresh stream's SASL requests: written and answered one at a time, correlation ids from 1.
struct Fresh<'a> {
    stream: &'a mut BrokerStream,
    client_id: &'a str,
    next_id: i32,
}

impl super::reauth::SaslRoundTrip for Fresh<'_> {
    async fn round_trip<R: Request>(&mut self, req: &R, version: i16) -> Result<R::Response, ProtocolError> {
        self.next_id += 1;
        exchange(self.stream, req, version, self.next_id, self.client_id).await
    }
}

/// Sends one request and reads its response, before the stream is handed on: exactly one frame is
/// read (nothing past it, the stream goes on to its user), at most [`MAX_SASL_RESPONSE`] bytes.
async fn exchange<R: Request>(stream: &mut BrokerStream, req: &R, version: i16, correlation_id: i32, client_id: &str) -> Result<R::Response, ProtocolError> {
    let (frame, sent) = request_frame(req, version, correlation_id, &StrBytes::from_string(client_id.to_owned()))?;
    let io = |source| ProtocolError::Io {
        source,
        side: crate::Side::Broker,
    };
    stream.write_all(&frame).await.map_err(io)?;
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).await.map_err(io)?;
    let size = i32::from_be_bytes(len);
    if size < 0 || size as usize > MAX_SASL_RESPONSE {
        return Err(ProtocolError::Malformed {
            what: "SASL response",
            detail: format!("announced size {size} (at most {MAX_SASL_RESPONSE} accepted while authenticating)"),
            side: crate::Side::Broker,
        });
    }
    let mut buf = BytesMut::zeroed(4 + size as usize);
    buf[..4].copy_from_slice(&len);
    stream.read_exact(&mut buf[4..]).await.map_err(io)?;
    decode_sent::<R>(&buf.freeze(), sent)
}

/// A connection to a broker, plain or TLS.
pub enum BrokerStream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// The read half of a [`BrokerStream`].
pub enum BrokerRead {
    Plain(OwnedReadHalf),
    Tls(ReadHalf<TlsStream<TcpStream>>),
}

/// The write half of a [`BrokerStream`].
pub enum BrokerWrite {
    Plain(OwnedWriteHalf),
    Tls(WriteHalf<TlsStream<TcpStream>>),
}

impl BrokerStream {
    /// Splits into independently owned halves (plain TCP without a lock).
    pub fn into_split(self) -> (BrokerRead, BrokerWrite) {
        match self {
            Self::Plain(s) => {
                let (r, w) = s.into_split();
                (BrokerRead::Plain(r), BrokerWrite::Plain(w))
            }
            Self::Tls(s) => {
                let (r, w) = tokio::io::split(*s);
                (BrokerRead::Tls(r), BrokerWrite::Tls(w))
            }
        }
    }
}

macro_rules! delegate_read {
    ($t:ty) => {
        impl AsyncRead for $t {
            fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
                    Self::Tls(s) => Pin::new(s).poll_read(cx, buf),
                }
            }
        }
    };
}

macro_rules! delegate_write {
    ($t:ty) => {
        impl AsyncWrite for $t {
            fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
                match self.get_mut() {
                    Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
                    Self::Tls(s) => Pin::new(s).poll_write(cx, buf),
                }
            }
            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    Self::Plain(s) => Pin::new(s).poll_flush(cx),
                    Self::Tls(s) => Pin::new(s).poll_flush(cx),
                }
            }
            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
                    Self::Tls(s) => Pin::new(s).poll_shutdown(cx),
                }
            }
            fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
                match self.get_mut() {
                    Self::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
                    Self::Tls(s) => Pin::new(s).poll_write_vectored(cx, bufs),
                }
            }
            fn is_write_vectored(&self) -> bool {
                match self {
                    Self::Plain(s) => s.is_write_vectored(),
                    Self::Tls(s) => s.is_write_vectored(),
                }
            }
        }
    };
}

delegate_read!(BrokerStream);
delegate_read!(BrokerRead);
delegate_write!(BrokerStream);
delegate_write!(BrokerWrite);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_never_shows_the_password() {
        let props = kmp_config::parse_client_props(
            &[
                ("security.protocol", "SASL_PLAINTEXT"),
                ("sasl.mechanism", "SCRAM-SHA-512"),
                ("sasl.username", "svc"),
                ("sasl.password", "pa55-word-xyz"),
            ]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
            kmp_config::PropsOrigin::ConfigFile,
        )
        .unwrap();
        let s = ClientSecurity::build(&props).unwrap();
        let shown = format!("{s:?} {:?}", s.sasl());
        assert!(shown.contains("svc") && !shown.contains("pa55"), "{shown}");
    }
}
