//! A state store for unit tests of what waits for a booted engine.

use tokio::sync::Mutex;

use super::{RequestsAtLoad, StateStore};
use crate::cluster::client::ClusterClient;

impl StateStore {
    /// A store that loaded nothing and cannot write (its destination does not exist).
    pub(crate) fn empty_for_tests() -> Self {
        Self {
            destination: ClusterClient::new("destination", vec!["127.0.0.1:1".into()], std::time::Duration::from_millis(50)),
            topic: "__kmp_test_state".into(),
            entries: std::sync::Mutex::default(),
            writer: Mutex::new(None),
            lease: crate::lease::Lease::forever(),
            requests_at_load: RequestsAtLoad::default(),
            topic_changed: std::sync::OnceLock::new(),
        }
    }
}
