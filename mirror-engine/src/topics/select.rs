//! Which source topics a mirror copies: exact names plus `include` patterns, minus `exclude`
//! patterns, never internal topics; and which source groups its offset sync covers
//! ([`GroupFilter`]). Patterns match whole names. Discovering topics on the source and starting
//! them is `mirrors::discovery`'s; this module only decides.

use regex::Regex;

use crate::cluster::groups::ListedGroup;
use crate::error::MirrorError;

/// A compiled topic selection.
#[derive(Debug, Clone)]
pub struct TopicSelector {
    names: Vec<String>,
    include: Vec<Regex>,
    exclude: Vec<Regex>,
}

/// Compiles whole-name patterns (`what` names them in the error: "topic", "group", …).
pub(crate) fn compile(what: &str, patterns: &[String]) -> Result<Vec<Regex>, MirrorError> {
    patterns
        .iter()
        .map(|p| kmp_config::topic_pattern(p).map_err(|e| MirrorError::Unsupported(format!("{what} pattern `{p}`: {e}"))))
        .collect()
}

impl TopicSelector {
    pub fn new(names: &[String], include: &[String], exclude: &[String]) -> Result<Self, MirrorError> {
        Ok(Self {
            names: names.to_vec(),
            include: compile("topic", include)?,
            exclude: compile("topic", exclude)?,
        })
    }

    /// Whether `topic` is mirrored.
    pub fn matches(&self, topic: &str) -> bool {
        if topic.starts_with("__") || self.exclude.iter().any(|r| r.is_match(topic)) {
            return false;
        }
        self.names.iter().any(|n| n == topic) || self.include.iter().any(|r| r.is_match(topic))
    }

    /// Whether the selection can grow as topics appear on the source.
    pub fn has_patterns(&self) -> bool {
        !self.include.is_empty()
    }

    /// Exact names that are not excluded.
    pub fn named(&self) -> impl Iterator<Item = &String> {
        self.names.iter().filter(|n| self.matches(n))
    }
}

/// Which source groups a mirror syncs.
#[derive(Debug, Clone)]
pub struct GroupFilter {
    include: Vec<Regex>,
    exclude: Vec<Regex>,
}

impl GroupFilter {
    pub fn new(include: &[String], exclude: &[String]) -> Result<Self, MirrorError> {
        Ok(Self {
            include: compile("group", include)?,
            exclude: compile("group", exclude)?,
        })
    }

    /// Whether the offsets of `group` are synced: a consumer group (classic or KIP-848, or an
    /// offsets-only group of `assign()` users), included and not excluded.
    pub fn syncs(&self, group: &ListedGroup) -> bool {
        let consumer = match group.group_type.as_str() {
            "consumer" => true,
            "classic" | "" => group.protocol_type.is_empty() || group.protocol_type == "consumer",
            _ => false, // share and streams groups
        };
        consumer && self.matches(&group.id)
    }

    /// Whether the group id is included and not excluded (whatever the group's type).
    pub fn matches(&self, id: &str) -> bool {
        self.include.iter().any(|r| r.is_match(id)) && !self.exclude.iter().any(|r| r.is_match(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| (*x).to_owned()).collect()
    }

    #[test]
    fn names_and_patterns_select_exclusions_and_internal_topics_win() {
        let sel = TopicSelector::new(&s(&["orders", "skip-me"]), &s(&["pay-.*", "logs"]), &s(&["skip-.*", "pay-test"])).unwrap();
        for t in ["orders", "pay-eu", "logs"] {
            assert!(sel.matches(t), "{t} selected");
        }
        for t in ["skip-me", "pay-test", "logs-2", "xorders", "__consumer_offsets", "__kmp_mirror_state"] {
            assert!(!sel.matches(t), "{t} not selected");
        }
        assert_eq!(sel.named().collect::<Vec<_>>(), vec!["orders"]);
        assert!(sel.has_patterns());
    }
}
