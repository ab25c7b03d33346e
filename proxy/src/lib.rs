//! kafka-mirror-proxy: a layer-7 Kafka proxy in front of an unmodified destination cluster.
//!
//! Module map: `server` (entry point, accept loops, drain), `session` (one client connection),
//! `upstream` (connecting to brokers), `cluster` (broker view and per-node listeners),
//! `api_versions` (version clamping), `refresh` (background metadata), `admin` (HTTP),
//! `metrics`. The binary's CLI lives in `main.rs`.

mod admin;
mod api_versions;
mod cluster;
mod error;
mod guard;
mod intercept;
mod metrics;
mod mirror_configs;
mod mirror_metrics;
mod mirror_rpc;
mod readonly;
mod refresh;
mod rest;
mod server;
mod session;
mod upstream;

pub use error::ProxyError;
pub use server::{Listeners, serve};
