//! kafka-mirror-proxy: a layer-7 Kafka proxy in front of an unmodified destination cluster.
//!
//! Module map, one folder per concern (each folder's `mod.rs` says what it owns):
//!
//! * `server` — the entry point [`serve`]: builds `shared`, the filter chain and the accept
//!   loops, and drains at shutdown. `shared` — the state every task sees. `refresh` — the
//!   background metadata refresh. `metrics` — the proxy's counters. `logging` — log output and
//!   the runtime log filter. `error` — [`ProxyError`].
//! * `net/` — transport toward clients: binding listeners, TLS, connection limits and the
//!   request-byte budget.
//! * `upstream/` — the brokers: connecting to them, the broker view with its per-node
//!   listeners, and the ApiVersions answers kept for early answers.
//! * `session/` — one client connection: accepting it and moving its frames (whole, streamed or
//!   spliced), write stalls included.
//! * `filters/` — the request/response pipeline: the filter API, the chain, the shared refusal
//!   helpers and one file (or folder) per policy or rewrite.
//! * `admin/` — the admin HTTP endpoint: REST API, dashboard, `/metrics` text of the engine,
//!   election and follower status, readiness; and [`PartitionView`], the one serialized
//!   partition view of REST, the dashboard and the binary's `mirrors --describe`.
//!
//! The binary's command line lives in `main.rs` and its `cli/` folder.

mod admin;
mod error;
mod filters;
pub mod logging;
mod metrics;
pub mod net;
mod refresh;
mod server;
mod session;
mod shared;
mod upstream;

pub use admin::PartitionView;
pub use error::ProxyError;
pub use server::{Listeners, serve};
