//! What a state follower writes into the instance's catalog of mirror topics, and holding those
//! writes back while an engine term of the same instance runs beside the follower (shared work).
//!
//! The running term owns the catalog then: it registers what it prepares, opens what it stops
//! and forgets what it deletes, each before the follower reads the matching record. A follower
//! that applied its (older) records at the same time could undo that for a moment: re-register a
//! just-deleted topic under its old mirror, forget a topic re-created since, or hand a topic to
//! another mirror while a delete or a start is deciding. So while the term runs, the follower
//! keeps the last write per topic here and applies them when the term has ended (it then reads
//! the records a new active instance elsewhere writes). Reading the records belongs to
//! `followed`; the catalog itself to `catalog`.

use std::collections::HashMap;

use tokio::sync::watch;

use crate::state::catalog::Catalog;

/// The follower's writes into the catalog, applied at once or held while a term runs beside it.
pub(crate) struct CatalogWrites {
    catalog: Catalog,
    /// True while an engine term of this instance runs (`None`: never).
    held_back: Option<watch::Receiver<bool>>,
    /// Per topic, the last write held: `Some((mirror, writable))` registers, `None` forgets.
    topics: HashMap<String, Option<(String, bool)>>,
    /// Former mirror topics held (their fillers stay masked), with their destination ids.
    former: HashMap<String, [u8; 16]>,
}

impl CatalogWrites {
    pub(crate) fn new(catalog: Catalog, held_back: Option<watch::Receiver<bool>>) -> Self {
        Self {
            catalog,
            held_back,
            topics: HashMap::new(),
            former: HashMap::new(),
        }
    }

    fn holding(&self) -> bool {
        self.held_back.as_ref().is_some_and(|rx| *rx.borrow())
    }

    /// `topic` is `mirror`'s mirror topic, writable or not (`None`: no mirror topic any more).
    pub(crate) fn topic(&mut self, topic: &str, owner: Option<(&str, bool)>) {
        if self.holding() {
            self.topics.insert(topic.to_owned(), owner.map(|(m, w)| (m.to_owned(), w)));
            return;
        }
        self.release();
        self.apply_topic(topic, owner);
    }

    /// `topic`'s offset shifts (fixed before its first record, so applied at once).
    pub(crate) fn shifts(&self, topic: &str, shifts: &[i64]) {
        self.catalog.set_shifts(topic, shifts);
    }

    /// `topic` was a mirror topic (destination id `topic_id`, all zero if unknown).
    pub(crate) fn former(&mut self, topic: &str, topic_id: [u8; 16]) {
        if self.holding() {
            self.former.insert(topic.to_owned(), topic_id);
            return;
        }
        self.release();
        self.catalog.mark_filler_topic(topic, topic_id);
    }

    /// Applies what was held, once no term runs beside the follower any more.
    pub(crate) fn release(&mut self) {
        if self.holding() {
            return;
        }
        for (topic, topic_id) in std::mem::take(&mut self.former) {
            self.catalog.mark_filler_topic(&topic, topic_id);
        }
        for (topic, owner) in std::mem::take(&mut self.topics) {
            self.apply_topic(&topic, owner.as_ref().map(|(m, w)| (m.as_str(), *w)));
        }
    }

    fn apply_topic(&self, topic: &str, owner: Option<(&str, bool)>) {
        match owner {
            Some((mirror, writable)) => {
                self.catalog.register(topic, mirror, [0; 16]);
                self.catalog.set_writable(topic, writable);
            }
            None => self.catalog.remove(topic),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_held_while_a_term_runs_and_applied_last_per_topic_when_it_ends() {
        let catalog = Catalog::default();
        let (term_runs, held_back) = watch::channel(false);
        let mut writes = CatalogWrites::new(catalog.clone(), Some(held_back));
        writes.topic("orders", Some(("dr", false)));
        assert!(catalog.is_read_only("orders"), "no term: applied at once");

        term_runs.send_replace(true);
        // The term deletes the mirror and starts the topic again under another one.
        catalog.remove("orders");
        catalog.register("orders", "dr2", [0; 16]);
        // The follower, behind, reads the old records meanwhile.
        writes.topic("orders", Some(("dr", true)));
        writes.topic("orders", None);
        writes.former("orders", [0; 16]);
        assert_eq!(catalog.owner("orders").as_deref(), Some("dr2"), "the running term's write stands");
        assert!(catalog.is_read_only("orders"));
        assert!(!catalog.may_hold_fillers("payments"));
        writes.topic("orders", Some(("dr2", false)));

        term_runs.send_replace(false);
        writes.release();
        assert_eq!(catalog.owner("orders").as_deref(), Some("dr2"), "the last record read is applied");
        assert!(catalog.is_read_only("orders") && catalog.may_hold_fillers("orders"));
        writes.topic("orders", Some(("dr2", true)));
        assert!(!catalog.is_read_only("orders"), "applied at once again");
    }
}
