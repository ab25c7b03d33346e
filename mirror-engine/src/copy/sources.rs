//! The engine's reach into its source clusters: one client (with its shared connections) and
//! one set of fetch sessions per source setting (bootstrap servers plus source properties),
//! shared by every mirror of that source — its topics' copy tasks, its sync passes, the checks
//! of StartMirrorTopics and the graceful stop's end-offset reads. A source broker answers one
//! connection's requests one at a time, so two sets of sessions on the same connections would
//! queue behind each other's long polls; and a mirror operation opens no connection of its own.
//!
//! A setting no mirror uses any more (its last mirror was deleted) is dropped, which closes its
//! connections once the last task holding them has ended. What is fetched belongs to
//! `copy::fetch::session`; how a client connects belongs to `cluster`.

use std::time::Duration;

use dashmap::DashMap;
use kmp_config::MirrorConfig;

use crate::cluster::client::ClusterClient;
use crate::copy::budget::Budget;
use crate::copy::fetch::session::{FetchSessions, SessionSettings};

/// Source clients and fetch sessions by source setting.
pub(crate) struct Sources {
    by_setting: DashMap<String, (ClusterClient, FetchSessions)>,
    budget: Budget,
    /// Request timeout of the source clients.
    timeout: Duration,
}

/// The setting a mirror reaches its source with: mirrors with the same one share everything.
fn setting(def: &MirrorConfig) -> String {
    format!("{:?}|{:?}", def.source_bootstrap_servers, def.source_properties)
}

impl Sources {
    pub(crate) fn new(budget: Budget, timeout: Duration) -> Self {
        Self {
            by_setting: DashMap::new(),
            budget,
            timeout,
        }
    }

    /// The client and fetch sessions of mirror `def`'s source, made on first use.
    pub(crate) fn reach(&self, def: &MirrorConfig) -> (ClusterClient, FetchSessions) {
        self.by_setting
            .entry(setting(def))
            .or_insert_with(|| {
                let client = ClusterClient::source_of(def, self.timeout);
                let sessions = FetchSessions::new(client.clone(), self.budget.clone(), SessionSettings::default());
                (client, sessions)
            })
            .clone()
    }

    /// The client of mirror `def`'s source.
    pub(crate) fn client(&self, def: &MirrorConfig) -> ClusterClient {
        self.reach(def).0
    }

    /// Drops every setting none of `remaining` (the mirrors still defined) uses.
    pub(crate) fn keep_only(&self, remaining: &[MirrorConfig]) {
        let used: std::collections::HashSet<String> = remaining.iter().map(setting).collect();
        self.by_setting.retain(|k, _| used.contains(k));
    }

    /// How many source settings have a client now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_setting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mirror(name: &str, servers: &str) -> MirrorConfig {
        MirrorConfig::new(name, vec![servers.to_owned()])
    }

    #[tokio::test]
    async fn mirrors_of_one_source_share_a_client_and_an_unused_source_is_dropped() {
        let sources = Sources::new(Budget::new(1 << 20), Duration::from_secs(1));
        let (a, b, c) = (mirror("a", "127.0.0.1:1"), mirror("b", "127.0.0.1:1"), mirror("c", "127.0.0.1:2"));
        sources.reach(&a);
        sources.reach(&b);
        assert_eq!(sources.len(), 1, "a and b reach the same source with the same setting");
        sources.reach(&c);
        assert_eq!(sources.len(), 2);
        sources.keep_only(&[a.clone(), b.clone()]);
        assert_eq!(sources.len(), 1, "c was deleted: its source is dropped");
        sources.keep_only(&[b]);
        assert_eq!(sources.len(), 1, "b still uses the first source");
        sources.keep_only(&[]);
        assert_eq!(sources.len(), 0);
    }
}
