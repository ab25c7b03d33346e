//! The KIP-1279 operations that change mirror definitions — create a mirror, start topics,
//! delete a mirror — and the mirror name rules. Declared (config file) and created (API) mirrors
//! are the same objects; only the `origin` in the state topic differs. Launching a mirror and
//! discovering its topics is `mirrors::discovery`'s (asked of the term's command loop, `TermCommand::Launch`).

use std::collections::{HashMap, HashSet};

use kmp_config::MirrorConfig;
use tracing::{debug, info};

use crate::control::settings::{check_endpoints, check_patterns, check_sources, csv, list_config, refuse_configs, security_properties, set_interval};
use tokio::sync::oneshot;

use crate::control::{TermCommand, TermControl, TopicResult, codes};
use crate::error::MirrorError;
use crate::state::records::Desired;
use crate::state::records::{MirrorRecord, Origin};
use crate::topics::select::TopicSelector;

use codes::{
    CLUSTER_MIRROR_ALREADY_EXISTS, CLUSTER_MIRROR_NOT_EMPTY, INVALID_CLUSTER_MIRROR_STATES, INVALID_CONFIG, INVALID_REQUEST, MIRROR_TOPIC_NOT_STOPPED,
    TOPIC_ALREADY_IN_CLUSTER_MIRROR, UNKNOWN_TOPIC_OR_PARTITION,
};

/// Most topics one failback dry run looks up.
pub const MAX_DRY_RUN_TOPICS: usize = 100;

/// Longest mirror name: Kafka's topic-name limit, which mirror names follow.
pub const MAX_MIRROR_NAME_LEN: usize = 249;

/// Why `name` cannot be a mirror name (Kafka's topic name rules: 1 to 249 bytes of ASCII
/// letters, digits, `.`, `_` and `-`), or `None` if it can. CreateClusterMirror refuses such a
/// name, and the topic RPCs refuse one naming no existing mirror before doing any work. The
/// message never repeats a name over the limit.
pub fn invalid_mirror_name(name: &str) -> Option<String> {
    if name.len() > MAX_MIRROR_NAME_LEN {
        return Some(format!(
            "a mirror name of {} bytes is not a valid mirror name (topic name rules: at most {MAX_MIRROR_NAME_LEN} bytes)",
            name.len()
        ));
    }
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)) {
        return Some(format!("`{name}` is not a valid mirror name (topic name rules)"));
    }
    None
}

impl TermControl {
    /// CreateClusterMirror: a new mirror from KIP-1279 configs (`bootstrap.servers` required;
    /// `mirror.topics.include` / `.exclude` comma-separated regexes; the source connection's
    /// `security.protocol`, `ssl.*` and `sasl.*` properties, secrets by `file:`/`env:` reference only).
    /// Returns the error code and message.
    pub(crate) async fn create_mirror(&self, name: &str, configs: &[(String, Option<String>)]) -> (i16, Option<String>) {
        let booted = self.booted_store().await;
        let get = |k: &str| configs.iter().find(|(n, _)| n == k).and_then(|(_, v)| v.as_deref());
        if let Some(message) = invalid_mirror_name(name) {
            return (INVALID_REQUEST, Some(message));
        }
        if self.has_mirror(name) {
            return (CLUSTER_MIRROR_ALREADY_EXISTS, Some(format!("cluster mirror {name} already exists")));
        }
        if let Err(e) = refuse_configs(configs) {
            return e;
        }
        let bootstrap = csv(get("bootstrap.servers"));
        if bootstrap.is_empty() {
            return (INVALID_REQUEST, Some("bootstrap.servers is required".into()));
        }
        // Before anything connects to it: an API caller may only name allowed sources.
        if let Err(e) = check_sources(self.source_allow(), &bootstrap) {
            return (INVALID_CONFIG, Some(e));
        }
        let mut def = MirrorConfig::new(name, bootstrap);
        def.source_properties = security_properties(configs);
        for (key, value) in configs {
            if kmp_config::is_client_security_key(key) {
                continue;
            } else if let Some(list) = list_config(&mut def, key) {
                *list = csv(value.as_deref());
            } else if let Err(e) = set_interval(&mut def, key, value.as_deref()) {
                return (INVALID_CONFIG, Some(e));
            }
        }
        // The token endpoint of OAUTHBEARER source properties too, before anything connects.
        if let Err(e) = check_endpoints(self.source_allow(), &def) {
            return (INVALID_CONFIG, Some(e));
        }
        if let Err(e) = check_patterns(&def) {
            return (INVALID_CONFIG, Some(e.to_string()));
        }
        let Some(store) = booted else {
            return (codes::COORDINATOR_NOT_AVAILABLE, Some("the mirror engine is still starting".into()));
        };
        if let Err(e) = store
            .put_mirror(&MirrorRecord {
                origin: Origin::Api.into(),
                definition: def.clone(),
            })
            .await
        {
            return (codes::COORDINATOR_NOT_AVAILABLE, Some(format!("cannot record the mirror: {e}")));
        }
        let (done, launched) = oneshot::channel();
        if !self.command(TermCommand::Launch { def: Box::new(def), done }).await || launched.await.is_err() {
            return (codes::COORDINATOR_NOT_AVAILABLE, Some("the mirror engine is still starting".into()));
        }
        info!(mirror = name, "cluster mirror created");
        (codes::NONE, None)
    }

    /// StartMirrorTopics: adds topics (and include/exclude patterns) to a mirror and starts them.
    pub(crate) async fn start_topics(&self, name: &str, topics: &[String], include: &[String], exclude: &[String]) -> (i16, Option<String>, Vec<TopicResult>) {
        let _ = self.booted_store().await;
        let Some(mut def) = self.definition(name) else {
            // A name no mirror could have is refused alone; an unknown one is named once, at
            // the top: never copied into every topic's result (a long name times many topics
            // made an answer thousands of times the request's size).
            if let Some(message) = invalid_mirror_name(name) {
                return (INVALID_REQUEST, Some(message), Vec::new());
            }
            let results = topics
                .iter()
                .map(|t| TopicResult {
                    topic: t.clone(),
                    error_code: codes::UNKNOWN_CLUSTER_MIRROR,
                    message: None,
                })
                .collect();
            return (codes::UNKNOWN_CLUSTER_MIRROR, Some(format!("cluster mirror {name} does not exist")), results);
        };
        let source = self.source_client(&def);
        // Several topics are looked up on the source with one Metadata request naming them all,
        // not one request per named topic (a request naming many topics, or one topic many
        // times, cost as many source round trips). A topic named again gets its first answer
        // again.
        let distinct: Vec<&str> = topics.iter().map(String::as_str).collect::<HashSet<_>>().into_iter().collect();
        let on_source: Option<Result<HashSet<String>, String>> = if distinct.len() > 1 {
            Some(source.existing_topics(&distinct).await.map_err(|e| e.to_string()))
        } else {
            None
        };
        let mut answered: HashMap<&str, usize> = HashMap::new();
        let mut results: Vec<TopicResult> = Vec::new();
        for t in topics {
            if let Some(&first) = answered.get(t.as_str()) {
                let again = results[first].clone();
                results.push(again);
                continue;
            }
            answered.insert(t.as_str(), results.len());
            let r = |code: i16, msg: String| TopicResult {
                topic: t.clone(),
                error_code: code,
                message: Some(msg),
            };
            match (self.claimed_by(t), self.desired(t)) {
                (Some(m), _) if m != name => {
                    results.push(r(TOPIC_ALREADY_IN_CLUSTER_MIRROR, format!("topic {t} already belongs to cluster mirror {m}")));
                    continue;
                }
                (Some(_), Some(Desired::Stopped)) => {
                    // Started again after a stop: a failback when the source is the proxy in front
                    // of the other cluster (it knows the line); a plain broker cannot tell.
                    match crate::failback::lookup::source_is_proxy(&source).await {
                        Ok(true) => {}
                        Ok(false) => {
                            results.push(r(
                                INVALID_CLUSTER_MIRROR_STATES,
                                format!(
                                    "topic {t} was stopped (failed over); mirroring it again needs the mirror's source to be the proxy in front of the other cluster (a failback: docs/disaster-recovery.md), or the destination topic deleted first"
                                ),
                            ));
                            continue;
                        }
                        Err(e) => {
                            results.push(r(codes::REQUEST_TIMED_OUT, format!("cannot reach the source cluster: {e}")));
                            continue;
                        }
                    }
                    if self
                        .store()
                        .and_then(|s| s.topic_owner(t))
                        .is_some_and(|o| o.offset_shifts.iter().any(|&d| d != 0))
                    {
                        results.push(r(
                            INVALID_CLUSTER_MIRROR_STATES,
                            format!("topic {t} is shifted (its offsets here differ from the source's); failing a shifted topic back is not supported yet"),
                        ));
                        continue;
                    }
                    if let Err(e) = self.restart_stopped(name, t).await {
                        results.push(r(codes::COORDINATOR_NOT_AVAILABLE, format!("cannot start {t} again: {e}")));
                        continue;
                    }
                }
                // Preparing it failed for good: started again, it is prepared again (the
                // discovery below takes it up once the definition is set).
                (Some(_), None) if self.release_failed_preparation(t, name) => {
                    info!(mirror = name, topic = %t, "topic whose preparation had failed started again");
                }
                (Some(_), _) => {
                    results.push(r(MIRROR_TOPIC_NOT_STOPPED, format!("topic {t} is already mirrored by {name}")));
                    continue;
                }
                (None, _) => {}
            }
            let exists = match &on_source {
                Some(Ok(names)) => Ok(names.contains(t)),
                Some(Err(e)) => Err(e.clone()),
                None => source.layout(t).await.map(|l| l.error_code == 0).map_err(|e| {
                    debug!(topic = %t, error = %e.detail(), "cannot read the topic from the source cluster");
                    e.to_string()
                }),
            };
            match exists {
                Ok(true) => {}
                Ok(false) => {
                    results.push(r(UNKNOWN_TOPIC_OR_PARTITION, format!("topic {t} does not exist on the source cluster")));
                    continue;
                }
                Err(e) => {
                    results.push(r(codes::REQUEST_TIMED_OUT, format!("cannot reach the source cluster: {e}")));
                    continue;
                }
            }
            if !def.topics.contains(t) {
                def.topics.push(t.clone());
            }
            results.push(TopicResult {
                topic: t.clone(),
                error_code: codes::NONE,
                message: None,
            });
        }
        def.include.extend(include.iter().cloned());
        def.exclude.extend(exclude.iter().cloned());
        if let Err(e) = TopicSelector::new(&def.topics, &def.include, &def.exclude) {
            return (INVALID_CONFIG, Some(e.to_string()), results);
        }
        if let Some(store) = self.store() {
            let origin = store
                .mirrors()
                .into_iter()
                .find(|m| m.definition.name == name)
                .map_or(Origin::Api.into(), |m| m.origin);
            if let Err(e) = store
                .put_mirror(&MirrorRecord {
                    origin,
                    definition: def.clone(),
                })
                .await
            {
                return (codes::COORDINATOR_NOT_AVAILABLE, Some(format!("cannot record the mirror: {e}")), results);
            }
        }
        self.set_definition(def);
        (codes::NONE, None, results)
    }

    /// What starting `topics` of mirror `name` would do, per topic (a failback's dry run: which
    /// path each partition takes, how many offsets would be quarantined); nothing changes. At
    /// most [`MAX_DRY_RUN_TOPICS`] topics: each is looked up on both clusters.
    pub(crate) async fn failback_plan(&self, name: &str, topics: &[String]) -> Result<Vec<crate::failback::Preview>, (i16, String)> {
        let _ = self.booted_store().await;
        let Some(def) = self.definition(name) else {
            return Err((codes::UNKNOWN_CLUSTER_MIRROR, format!("cluster mirror {name} does not exist")));
        };
        if topics.len() > MAX_DRY_RUN_TOPICS {
            return Err((
                INVALID_REQUEST,
                format!("a dry run takes at most {MAX_DRY_RUN_TOPICS} topics, not {}", topics.len()),
            ));
        }
        let (done, planned) = oneshot::channel();
        let command = TermCommand::FailbackPlan {
            def: Box::new(def),
            topics: topics.to_vec(),
            done,
        };
        if !self.command(command).await {
            return Err((codes::COORDINATOR_NOT_AVAILABLE, "the mirror engine is still starting".into()));
        }
        planned
            .await
            .map_err(|_| (codes::COORDINATOR_NOT_AVAILABLE, "the mirror engine term ended".into()))
    }

    /// Lets go of stopped topic `topic` of mirror `name` so that the mirror takes it up again
    /// like a new one (the failback's checks decide how): its records are dropped — the line
    /// it recorded served the other side's failback, which this start follows — and this term
    /// forgets it.
    async fn restart_stopped(&self, name: &str, topic: &str) -> Result<(), MirrorError> {
        let store = self.store().ok_or(MirrorError::Fenced)?;
        self.detach(&store, name, topic).await?;
        info!(mirror = name, topic, "stopped topic started again: taken up as a new mirror topic (a failback)");
        Ok(())
    }

    /// Makes `topic` of mirror `name` an ordinary topic: its ownership and partition records are
    /// replaced by a former-topic record (its fillers stay masked, its shifts applied), and this
    /// term forgets it.
    async fn detach(&self, store: &crate::state::store::StateStore, name: &str, topic: &str) -> Result<(), MirrorError> {
        let owner = store.topic_owner(topic);
        let former = crate::state::records::FormerTopicRecord {
            mirror: name.to_owned(),
            topic_id: self.catalog().topic_id(topic).map(crate::state::records::id_to_hex).unwrap_or_default(),
            at_ms: crate::state::status::now_ms(),
            offset_shifts: owner.as_ref().map(|o| o.offset_shifts.clone()).unwrap_or_default(),
        };
        store.detach_topic(topic, owner.map_or(0, |o| o.partitions), &former).await?;
        self.forget_topic(topic);
        Ok(())
    }

    /// Lets go of `mirror`'s claim on `topic` when preparing it failed for good (an existing
    /// topic that could not be the mirror's, a refused loop): the claim, the term's record of
    /// having taken it up and the failure shown are dropped, so the mirror's discovery prepares
    /// it again — after the operator removed the cause, a start retries without a restart.
    /// False (nothing done) unless that is the topic's state: a topic being prepared or running
    /// keeps its claim.
    fn release_failed_preparation(&self, topic: &str, mirror: &str) -> bool {
        let key = (mirror.to_owned(), topic.to_owned(), -1);
        let failed = self
            .inner
            .common
            .status
            .get(&key)
            .is_some_and(|s| s.state == crate::state::status::PartitionState::Failed);
        let running = self.inner.runtimes.topics.contains_key(topic);
        let recorded = self.store().is_some_and(|s| s.topic_owner(topic).is_some());
        if !failed || running || recorded || self.claimed_by(topic).as_deref() != Some(mirror) {
            return false;
        }
        self.inner.common.catalog.remove(topic);
        self.inner.runtimes.taken.remove(topic);
        self.inner.common.status.remove(&key);
        true
    }

    /// DeleteClusterMirror: only when every topic of the mirror is stopped; the topics become
    /// ordinary topics (detached), the definition and their state are removed.
    pub(crate) async fn delete_mirror(&self, name: &str) -> (i16, Option<String>) {
        let _ = self.booted_store().await;
        if !self.has_mirror(name) {
            return (codes::UNKNOWN_CLUSTER_MIRROR, Some(format!("cluster mirror {name} does not exist")));
        }
        let topics = self.claimed_topics(name);
        let active: Vec<&String> = topics.iter().filter(|t| self.desired(t) != Some(Desired::Stopped)).collect();
        if !active.is_empty() {
            return (
                CLUSTER_MIRROR_NOT_EMPTY,
                Some(format!("cluster mirror {name} still has topics that are not stopped: {active:?}")),
            );
        }
        let Some(store) = self.store() else {
            return (codes::COORDINATOR_NOT_AVAILABLE, Some("the mirror engine is still starting".into()));
        };
        for t in &topics {
            if let Err(e) = self.detach(&store, name, t).await {
                return (codes::COORDINATOR_NOT_AVAILABLE, Some(format!("cannot detach {t}: {e}")));
            }
        }
        if let Err(e) = store.delete_mirror(name).await {
            return (codes::COORDINATOR_NOT_AVAILABLE, Some(format!("cannot remove the mirror: {e}")));
        }
        self.remove_mirror(name);
        self.release_unused_sources();
        info!(
            mirror = name,
            topics = topics.len(),
            "cluster mirror deleted; its topics are ordinary topics now"
        );
        (codes::NONE, None)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::control::handle::Control;
    use crate::control::{TermParts, term_for_tests};
    use crate::state::catalog::Catalog;
    use crate::state::status::StatusBoard;

    /// A booted term's control that allows `allow` as API sources (no state store).
    fn term(allow: &[&str]) -> TermControl {
        let allow = allow.iter().map(|s| (*s).to_owned()).collect();
        let control = term_for_tests(StatusBoard::default(), Catalog::default(), TermParts::none(allow));
        control.mark_booted();
        control
    }

    fn configs(bootstrap: &str) -> Vec<(String, Option<String>)> {
        vec![("bootstrap.servers".to_owned(), Some(bootstrap.to_owned()))]
    }

    #[tokio::test]
    async fn api_created_mirrors_need_an_allowed_source_and_nothing_connects_before() {
        let control = term(&[]);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();

        let (code, msg) = control.create_mirror("m", &configs(&addr)).await;
        assert_eq!(code, INVALID_CONFIG, "the default empty list refuses every source");
        let msg = msg.unwrap();
        assert!(msg.contains("security.mirror_source_allow") && msg.contains("KMP_MIRROR_SOURCE_ALLOW"), "{msg}");

        let (code, msg) = control.create_mirror("m", &configs(&format!("admin:hunter2@{addr}"))).await;
        assert_eq!(code, INVALID_CONFIG);
        assert!(!msg.unwrap().contains("hunter2"), "credentials are never echoed");

        let control = term(&["10.0.4.*:*"]);
        let (code, msg) = control.create_mirror("m", &configs(&addr)).await;
        assert_eq!(code, INVALID_CONFIG);
        assert!(msg.unwrap().contains(&addr));
        let accepted = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
        assert!(accepted.is_err(), "a refused source is never connected to");
        assert!(!control.has_mirror("m"));
    }

    #[tokio::test]
    async fn start_topics_on_an_unknown_mirror_names_it_once_and_refuses_an_overlong_name_alone() {
        let control = term(&[]);
        let topics = vec!["t".to_owned(); 1000];

        let (code, msg, results) = control.start_topics("missing", &topics, &[], &[]).await;
        assert_eq!(code, codes::UNKNOWN_CLUSTER_MIRROR);
        assert!(msg.unwrap().contains("missing"));
        assert_eq!(results.len(), topics.len());
        assert!(results.iter().all(|r| r.error_code == codes::UNKNOWN_CLUSTER_MIRROR && r.message.is_none()));

        let long = "m".repeat(MAX_MIRROR_NAME_LEN + 1);
        let (code, msg, results) = control.start_topics(&long, &topics, &[], &[]).await;
        assert_eq!(code, INVALID_REQUEST);
        let msg = msg.unwrap();
        assert!(!msg.contains(&long) && msg.len() < 200, "{msg}");
        assert!(results.is_empty(), "an overlong name is refused once, not per topic");

        let longest = "m".repeat(MAX_MIRROR_NAME_LEN);
        assert!(invalid_mirror_name(&longest).is_none());
        assert_eq!(control.create_mirror(&long, &configs("127.0.0.1:9092")).await.0, INVALID_REQUEST);
    }

    #[tokio::test]
    async fn an_allowed_source_passes_the_check() {
        let control = term(&["127.0.0.1:*"]);
        // No state store in this test: getting as far as storing means the source check passed.
        let (code, _) = control.create_mirror("m", &configs("127.0.0.1:9092")).await;
        assert_eq!(code, codes::COORDINATOR_NOT_AVAILABLE);
    }

    #[tokio::test(start_paused = true)]
    async fn before_its_term_is_built_the_handle_answers_after_the_boot_wait_as_an_empty_engine() {
        let handle = Control::new(StatusBoard::default(), Catalog::default(), vec!["127.0.0.1:*".to_owned()]);
        let start = tokio::time::Instant::now();
        let (code, msg) = handle.create_mirror("m", &configs("127.0.0.1:9092")).await;
        assert_eq!(
            (code, msg.as_deref()),
            (codes::COORDINATOR_NOT_AVAILABLE, Some("the mirror engine is still starting"))
        );
        assert_eq!(start.elapsed(), super::super::BOOT_WAIT, "one boot wait");
        assert_eq!(
            handle.create_mirror("m", &configs("10.0.0.1:9092")).await.0,
            INVALID_CONFIG,
            "the allow-list applies"
        );
        let paused = handle.pause_topics("m", &["a".to_owned()]).await;
        assert_eq!(paused[0].error_code, codes::COORDINATOR_LOAD_IN_PROGRESS);
        assert!(handle.list().is_empty() && !handle.is_follower() && handle.follower_refusal().is_none());

        // The term publishes its control, then opens the gate: requests reach the term.
        let term = handle.build(TermParts::none(Vec::new()));
        term.add_mirror(MirrorConfig::new("m", vec!["127.0.0.1:9092".into()]));
        handle.publish(term, None);
        assert!(handle.has_mirror("m") && !handle.is_booted());
        handle.mark_booted();
        assert_eq!(handle.delete_mirror("x").await.0, codes::UNKNOWN_CLUSTER_MIRROR);
        assert_eq!(handle.create_mirror("m", &configs("127.0.0.1:9092")).await.0, CLUSTER_MIRROR_ALREADY_EXISTS);
    }
}
