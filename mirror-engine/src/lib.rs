//! The mirror engine: background streams that fetch record batches from a remote source cluster
//! and produce them into the destination at identical offsets.
//!
//! Not built yet (issue "Mirror engine"): this crate holds the place in the dependency chain
//! `config ← protocol ← mirror-engine ← proxy` so the proxy links against it from the start.
//! Client-facing proxying does not belong here.

/// Engine version, reported by the proxy's `/healthz`.
pub const ENGINE_VERSION: &str = env!("CARGO_PKG_VERSION");
