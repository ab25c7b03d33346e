//! Errors of the mirror engine, split into the ones worth retrying (a broker restarted, a leader
//! moved) and the ones that turn a partition FAILED.

use kmp_protocol::ProtocolError;
use kmp_protocol::kafka_protocol::ResponseError;

/// Why a partition could not make progress.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    /// Talking to the source cluster failed. Shown as a short class only ([`failure_class`]):
    /// the source address may come from an API caller, and the raw error would tell open,
    /// closed and non-Kafka ports apart and echo bytes the peer sent. [`MirrorError::detail`]
    /// has the full text for debug logs.
    #[error("source: {}", failure_class(.0))]
    Source(ProtocolError),
    /// Talking to the destination cluster failed.
    #[error("destination: {0}")]
    Destination(ProtocolError),
    /// A broker answered with a Kafka error code.
    #[error("{side} {what}: Kafka error code {code}")]
    Broker { side: &'static str, what: String, code: i16 },
    /// The destination wrote a batch at another offset than the source's: the invariant broke.
    #[error("offset drift: batch written at destination offset {got}, expected {expected}")]
    OffsetMismatch { expected: i64, got: i64 },
    /// The destination topic exists and holds data the mirror did not write, or has another
    /// partition count.
    #[error("destination topic {topic} already exists and is not this mirror's: {reason}; refusing to append (delete it or choose another topic)")]
    DestinationConflict { topic: String, reason: String },
    /// A failback cannot take the destination topic back (a loop, partition counts that cannot
    /// match, a quarantine topic it cannot name).
    #[error("destination topic {topic} cannot be failed back: {reason}")]
    Failback { topic: String, reason: String },
    /// The source topic disappeared after mirroring started; the destination data stays.
    #[error("source topic {0} was deleted (or deleted and recreated: its topic id changed); the mirrored data on the destination is kept")]
    SourceTopicDeleted(String),
    /// A run of offsets without visible data is larger than the mirror's `max_fill_offsets`.
    #[error(
        "{count} offsets from {base} have no visible source data, more than max_fill_offsets = {limit}; filling them would take about {minutes} min (at {rate} million offsets/s, measured on a 2-core machine; see docs/mirroring.md): raise max_fill_offsets to fill them"
    )]
    FillTooLarge {
        base: i64,
        count: i64,
        limit: i64,
        minutes: i64,
        rate: i64,
    },
    /// The source has something the engine cannot copy exactly yet.
    #[error("unsupported source data: {0}")]
    Unsupported(String),
    /// What a failed attempt left on the destination is not what it sent there (a later batch
    /// landed where an earlier one should be, or a batch nobody in this mirror wrote): the
    /// destination no longer equals the source from that offset on.
    #[error("the destination differs from the source: {0}")]
    Diverged(String),
    /// A plan broke one of the engine's invariants (a filler over a source record, offsets
    /// skipped or written twice); nothing of it was written.
    #[error("engine invariant violated, nothing written: {0}")]
    Invariant(String),
    /// A source answer contradicts itself or the Fetch it answers (a batch before the offset
    /// asked, batches out of order, data beyond the end offsets the source reports): the source
    /// (or something between it and the engine) is not telling the truth; nothing of the answer
    /// was written.
    #[error("the source's answer cannot be true, nothing of it written: {0}")]
    SourceContradiction(String),
    /// This instance's lease to write ended (another instance is, or may be, the active
    /// engine): nothing more is written; the partition stops without failing.
    #[error("writes fenced: this instance is no longer the active mirror engine")]
    Fenced,
}

/// Kafka error codes that clear up by themselves (leader moves, restarts, timeouts).
const RETRIABLE: &[ResponseError] = &[
    ResponseError::UnknownTopicOrPartition, // metadata not propagated yet
    ResponseError::LeaderNotAvailable,
    ResponseError::NotLeaderOrFollower,
    ResponseError::RequestTimedOut,
    ResponseError::BrokerNotAvailable,
    ResponseError::NetworkException,
    ResponseError::CoordinatorLoadInProgress,
    ResponseError::CoordinatorNotAvailable,
    ResponseError::NotEnoughReplicas,
    ResponseError::NotEnoughReplicasAfterAppend,
    ResponseError::NotController,
    ResponseError::OutOfOrderSequenceNumber, // producer is re-initialised
    ResponseError::ConcurrentTransactions,
    ResponseError::NotCoordinator, // a transactional id's coordinator moved
    ResponseError::KafkaStorageError,
    ResponseError::FetchSessionIdNotFound,
    ResponseError::InvalidFetchSessionEpoch,
    ResponseError::FencedLeaderEpoch,
    ResponseError::UnknownLeaderEpoch,
    ResponseError::OffsetNotAvailable, // a new leader's high watermark not caught up yet
    ResponseError::ThrottlingQuotaExceeded,
];

/// What every reachability failure of a source shows: a refused connection, one closed or timed
/// out, and a peer that is not a Kafka broker look the same, so a caller who may create mirrors
/// cannot use the answers to tell closed ports from open ones inside `mirror_source_allow`
/// (issue #35, L-f). Configuration failures (DNS, TLS, authentication, the proxy's own settings)
/// keep their own classes.
pub const UNREACHABLE: &str = "no Kafka broker answered at the source address";

/// A short class of a failure toward a cluster, without addresses, sizes or bytes the peer sent:
/// what users see of a source's connect and decode errors.
pub fn failure_class(e: &ProtocolError) -> String {
    match e {
        // The proxy's own settings (unreadable file, missing secret): safe and needed in full.
        ProtocolError::Connect { detail, .. } if detail.starts_with("source security settings") => detail.clone(),
        ProtocolError::Connect { detail, .. } => connect_class(detail).to_owned(),
        ProtocolError::Authentication { .. } => "authentication failed (SASL credentials refused or exchange failed)".to_owned(),
        ProtocolError::Io { .. }
        | ProtocolError::TruncatedFrame { .. }
        | ProtocolError::FrameTooLarge { .. }
        | ProtocolError::NegativeFrameSize { .. }
        | ProtocolError::CorrelationMismatch { .. }
        | ProtocolError::Malformed { .. }
        | ProtocolError::Codec { .. } => UNREACHABLE.to_owned(),
        ProtocolError::BrokerError { code, .. } => format!("Kafka error code {code}"),
    }
}

/// The class of a connect failure from its text (the protocol crate keeps only the text).
fn connect_class(detail: &str) -> &'static str {
    let d = detail.to_ascii_lowercase();
    if d.contains("tls handshake") {
        if d.contains("certificate") {
            "TLS handshake failed (certificate not accepted)"
        } else {
            "TLS handshake failed"
        }
    } else if [
        "lookup",
        "name or service not known",
        "nodename nor servname",
        "no address associated",
        "name resolution",
    ]
    .iter()
    .any(|m| d.contains(m))
    {
        "DNS lookup failed"
    } else if d.contains("no bootstrap servers") {
        "no bootstrap servers"
    } else {
        UNREACHABLE
    }
}

impl MirrorError {
    /// The error as operators see it in a partition's status (REST, dashboard, describe): a
    /// failure toward the source also names the mirror's configured source bootstrap servers —
    /// the setting its creator gave, never which of them answered how (#35 L-f) — so a failed
    /// partition says where the engine looked.
    pub fn shown(&self, source_bootstrap: &[String]) -> String {
        match self {
            Self::Source(_) => format!("{self} (source bootstrap servers {})", source_bootstrap.join(",")),
            _ => self.to_string(),
        }
    }

    /// The engine's own connection or task toward `side` ("source" or "destination") went away
    /// under a request (a fetch session or produce lane ended, a shared connection closed).
    pub(crate) fn aborted(side: &str, detail: impl Into<String>) -> Self {
        let e = ProtocolError::Io {
            source: std::io::Error::new(std::io::ErrorKind::ConnectionAborted, detail.into()),
            side: kmp_protocol::Side::Broker,
        };
        Self::on(side, e)
    }

    /// A protocol failure toward `side` ("source" or "destination").
    pub(crate) fn on(side: &str, e: ProtocolError) -> Self {
        if side == "source" { Self::Source(e) } else { Self::Destination(e) }
    }

    /// The full error text, for debug logs only (a source error's [`Display`](std::fmt::Display)
    /// is a short class).
    pub fn detail(&self) -> String {
        match self {
            Self::Source(e) => format!("source: {e}"),
            other => other.to_string(),
        }
    }

    /// Whether a FAILED partition must stay FAILED across restarts (the state topic keeps it):
    /// the invariant broke or the source is gone, and only an operator can decide what next.
    pub fn is_sticky(&self) -> bool {
        matches!(self, Self::OffsetMismatch { .. } | Self::SourceTopicDeleted(_) | Self::Diverged(_))
    }

    /// Whether retrying with backoff can help.
    pub fn is_retriable(&self) -> bool {
        match self {
            Self::Source(_) | Self::Destination(_) | Self::Fenced => true,
            Self::Broker { code, .. } => RETRIABLE.iter().any(|e| e.code() == *code),
            Self::OffsetMismatch { .. }
            | Self::DestinationConflict { .. }
            | Self::Failback { .. }
            | Self::SourceTopicDeleted(_)
            | Self::FillTooLarge { .. }
            | Self::Unsupported(_)
            | Self::Diverged(_)
            | Self::SourceContradiction(_)
            | Self::Invariant(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_leaders_unsettled_offsets_are_retried_and_invariant_violations_are_not() {
        let broker = |code| MirrorError::Broker {
            side: "destination",
            what: "ListOffsets".into(),
            code,
        };
        assert!(broker(78).is_retriable(), "OFFSET_NOT_AVAILABLE right after a leader election");
        assert!(broker(74).is_retriable() && broker(75).is_retriable());
        assert!(!broker(29).is_retriable());
        assert!(!MirrorError::Invariant("x".into()).is_retriable());
    }

    #[test]
    fn a_shown_source_failure_names_the_configured_bootstrap_servers_and_nothing_the_peer_said() {
        let configured = ["s1:9092".to_owned(), "s2:9092".to_owned()];
        let refused = MirrorError::Source(ProtocolError::Connect {
            addr: "10.9.9.9:9092".into(),
            detail: "Connection refused (os error 111)".into(),
        });
        assert_eq!(
            refused.shown(&configured),
            "source: no Kafka broker answered at the source address (source bootstrap servers s1:9092,s2:9092)"
        );
        let other = MirrorError::Invariant("x".into());
        assert_eq!(other.shown(&configured), other.to_string(), "only source failures name the source");
    }

    #[test]
    fn source_errors_show_a_short_class_never_bytes_sizes_or_addresses() {
        use kmp_protocol::Side;
        let connect = |detail: &str| {
            MirrorError::Source(ProtocolError::Connect {
                addr: "10.9.9.9:9092".into(),
                detail: detail.into(),
            })
        };
        let cases = [
            (connect("Connection refused (os error 111)"), "source: no Kafka broker answered"),
            (connect("timed out after 10s"), "source: no Kafka broker answered"),
            (
                connect("failed to lookup address information: Name or service not known"),
                "source: DNS lookup failed",
            ),
            (connect("Network is unreachable (os error 101)"), "source: no Kafka broker answered"),
            (
                MirrorError::Source(ProtocolError::FrameTooLarge {
                    size: 1_213_486_160,
                    max: 104_857_600,
                    side: Side::Broker,
                }),
                "source: no Kafka broker answered",
            ),
            (
                MirrorError::Source(ProtocolError::Codec {
                    op: "decode",
                    api: "Metadata",
                    version: 12,
                    detail: "0xdeadbeef".into(),
                    side: Side::Broker,
                }),
                "source: no Kafka broker answered",
            ),
            (
                MirrorError::Source(ProtocolError::Io {
                    source: std::io::ErrorKind::UnexpectedEof.into(),
                    side: Side::Broker,
                }),
                "source: no Kafka broker answered",
            ),
        ];
        for (e, want) in cases {
            assert!(e.to_string().starts_with(want), "{e} is not {want}…");
            assert!(e.is_retriable());
        }
        let e = connect("Connection refused");
        assert!(e.detail().contains("10.9.9.9:9092"), "the detail keeps everything for debug logs");
    }
}
