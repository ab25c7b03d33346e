//! What the in-process tests share: a scripted single-broker stand-in, `serve` started on port-0
//! listeners with the mirror engine off, hand-built Kafka frames, a raw HTTP/1.1 client for the
//! admin endpoint, waiting on a condition with a deadline, and a watch for panics in the proxy's
//! tasks (a panic in a connection task is the in-process form of a crash: tokio catches it and
//! only that task ends).
//!
//! The stand-in is node 7 at its own address. It answers ApiVersions (announcing the versions in
//! [`ANNOUNCED`], one newer than the proxy knows, and a finalized-features epoch that grows with
//! every answer, so a test can tell which answer it got) and Metadata; it records every frame it
//! receives and closes a connection that sends anything else, as a broker closes one it cannot
//! parse. Everything beyond that is covered against real Kafka in `tests/integration`.

// Each test file compiles this module and uses part of it.
#![allow(dead_code)]

mod admin_http;
mod broker;
mod frames;
mod proxy;
mod wait;

// Re-exported whole; a test file that uses none of a part's items would warn without this.
#[allow(unused_imports)]
pub use {admin_http::*, broker::*, frames::*, proxy::*, wait::*};
