//! kafka-mirror-proxy: a layer-7 Kafka proxy in front of an unmodified destination cluster.
//!
//! Module map: `server` (entry point, drain), `accept` (accept loops, connection limits),
//! `shared` (state every task sees), `session` (moves one connection's frames), `filters` (the
//! request/response pipeline: every policy and rewrite, one file each), `upstream` (connecting
//! to brokers), `cluster` (broker view and per-node listeners), `limits` (connection counts and
//! the request-byte budget), `refresh` (background metadata), `admin`/`rest` (HTTP),
//! `metrics`. The binary's CLI lives in `main.rs`.

mod accept;
mod admin;
mod admin_slots;
mod cluster;
mod dashboard;
mod early_versions;
mod election_status;
mod error;
mod filters;
mod follower_status;
mod limits;
pub mod listen;
pub mod logging;
mod metrics;
mod mirror_metrics;
mod refresh;
mod rest;
mod server;
mod session;
mod shared;
mod splice;
mod stream_copy;
mod tls;
mod upstream;
mod write_stall;

pub use error::ProxyError;
pub use server::{Listeners, serve};
