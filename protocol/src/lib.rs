//! Kafka wire-protocol pieces shared by the proxy and the mirror engine.
//!
//! Everything here is sans-io except [`frame`] (async frame cutting) and [`client`] (the small
//! internal Kafka client). Nothing here knows about listeners, sessions or mirrors.

mod backoff;
pub mod batch;
pub mod byte_budget;
pub mod client;
pub mod codec;
mod codecs;
pub mod compact;
pub mod control;
pub mod crc_shift;
mod cursor;
pub mod error;
pub mod fillers;
pub mod frame;
mod frame_pool;
pub mod merge;
pub mod mirror_api;
mod names;
pub mod offset_shift;
pub mod peek;
pub mod produce_frame;
pub mod quarantine;
pub mod records;
pub mod reencode;
pub mod rewrite;
pub mod scan;
pub mod security;
pub mod shared_client;
pub mod versions;

pub use backoff::Backoff;
pub use error::{ProtocolError, Side};
pub use kafka_protocol;
