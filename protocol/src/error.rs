//! Errors of the protocol crate, each classified by the side that caused it.

/// Which side of the proxy caused an error; decides what is logged and what is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The client sent something invalid: close that client connection.
    Client,
    /// A broker sent something invalid or went away.
    Broker,
    /// A bug or limit of the proxy itself.
    Internal,
}

/// A protocol-level failure.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// A frame announced a size larger than allowed.
    #[error("frame of {size} bytes exceeds the limit of {max} bytes")]
    FrameTooLarge { size: i64, max: u32, side: Side },
    /// A frame announced a negative size.
    #[error("frame announces a negative size ({size})")]
    NegativeFrameSize { size: i32, side: Side },
    /// The peer closed the connection in the middle of a frame.
    #[error("connection closed in the middle of a frame ({have} of {want} bytes)")]
    TruncatedFrame { have: usize, want: usize, side: Side },
    /// A frame is too short or its header fields are inconsistent.
    #[error("malformed {what}: {detail}")]
    Malformed { what: &'static str, detail: String, side: Side },
    /// Decoding or encoding with kafka-protocol failed.
    #[error("cannot {op} {api} v{version}: {detail}")]
    Codec {
        op: &'static str,
        api: &'static str,
        version: i16,
        detail: String,
        side: Side,
    },
    /// A response carried a correlation id other than the one expected next.
    #[error("response correlation id {got} does not match the expected {expected}")]
    CorrelationMismatch { expected: i32, got: i32 },
    /// Socket error.
    #[error("i/o error: {source}")]
    Io { source: std::io::Error, side: Side },
    /// The broker answered with an error code where success was needed.
    #[error("broker returned error code {code} for {what}")]
    BrokerError { what: String, code: i16 },
    /// The broker refused the proxy's SASL credentials (or the exchange broke down). The detail
    /// never contains a secret.
    #[error("authentication to {addr} failed: {detail}")]
    Authentication { addr: String, detail: String },
    /// No broker could be reached.
    #[error("cannot connect to {addr}: {detail}")]
    Connect { addr: String, detail: String },
}

impl ProtocolError {
    /// The side responsible for this error.
    pub fn side(&self) -> Side {
        match self {
            Self::FrameTooLarge { side, .. }
            | Self::NegativeFrameSize { side, .. }
            | Self::TruncatedFrame { side, .. }
            | Self::Malformed { side, .. }
            | Self::Codec { side, .. }
            | Self::Io { side, .. } => *side,
            Self::CorrelationMismatch { .. } | Self::BrokerError { .. } | Self::Connect { .. } | Self::Authentication { .. } => Side::Broker,
        }
    }
}
