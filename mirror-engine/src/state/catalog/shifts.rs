//! Offset shifts of mirror topics (and of topics that were): per partition, the constant the
//! proxy adds to every destination offset it shows clients (`copy::shift`). Looked up by topic
//! name (older request versions) and by destination topic id (newer ones) on the proxy's hot
//! path; a catalog without shifted topics answers 0 at the cost of one atomic load.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::Catalog;

impl Catalog {
    /// Records the per-partition shifts of `topic` (as its topic record or former-topic record
    /// holds them); nothing when none is set. Shifts never change for the life of a topic.
    pub fn set_shifts(&self, topic: &str, shifts: &[i64]) {
        if shifts.iter().all(|&s| s == 0) {
            return;
        }
        self.shifts.insert(topic.to_owned(), Arc::from(shifts));
        self.shifted.store(true, Ordering::Release);
        if let Some(id) = self.fillers_by_name.get(topic).map(|e| *e.value())
            && id != [0; 16]
        {
            self.shift_ids.insert(id, topic.to_owned());
        }
    }

    /// Links a shifted topic's destination id once it is known (`mark_filler_topic`).
    pub(crate) fn link_shift_id(&self, topic: &str, topic_id: [u8; 16]) {
        if self.shifts.contains_key(topic) {
            self.shift_ids.insert(topic_id, topic.to_owned());
        }
    }

    /// Whether any topic is shifted (a proxy without one never decodes for shifts).
    pub fn has_shifts(&self) -> bool {
        self.shifted.load(Ordering::Acquire)
    }

    /// The shift of `topic`'s partition `partition` (0 when it has none).
    pub fn shift(&self, topic: &str, partition: i32) -> i64 {
        if !self.has_shifts() {
            return 0;
        }
        let Some(s) = self.shifts.get(topic) else { return 0 };
        usize::try_from(partition).ok().and_then(|p| s.get(p).copied()).unwrap_or(0)
    }

    /// The shift of partition `partition` of the topic with destination id `topic_id`.
    pub fn shift_by_id(&self, topic_id: &[u8; 16], partition: i32) -> i64 {
        if !self.has_shifts() {
            return 0;
        }
        let Some(name) = self.shift_ids.get(topic_id).map(|n| n.value().clone()) else {
            return 0;
        };
        self.shift(&name, partition)
    }

    /// Whether some partition of `topic` is shifted.
    pub fn is_shifted(&self, topic: &str) -> bool {
        self.has_shifts() && self.shifts.contains_key(topic)
    }

    /// Whether some partition of the topic with destination id `topic_id` is shifted.
    pub fn is_shifted_id(&self, topic_id: &[u8; 16]) -> bool {
        self.has_shifts() && self.shift_ids.contains_key(topic_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shifted_topic_answers_its_partition_shifts_by_name_and_by_id_once_the_id_is_known() {
        let c = Catalog::default();
        assert!(!c.has_shifts(), "a new catalog has no shifted topic");
        c.register("t", "m", [0; 16]);
        c.set_shifts("t", &[0, 7_000_000_000]);
        assert!(c.has_shifts());
        assert_eq!(c.shift("t", 1), 7_000_000_000, "partition 1 by name");
        assert_eq!(c.shift("t", 0), 0, "partition 0 is not shifted");
        assert_eq!(c.shift("t", 2), 0, "a partition past the recorded ones is not shifted");
        assert_eq!(c.shift("t", -1), 0, "a negative partition is not shifted");
        assert_eq!(c.shift_by_id(&[9; 16], 1), 0, "the id is not known yet");
        c.learn_topic_id("t", [9; 16]);
        assert_eq!(c.shift_by_id(&[9; 16], 1), 7_000_000_000, "partition 1 by id once learned");
        assert_eq!(c.shift("other", 1), 0, "another topic is not shifted");
    }

    #[test]
    fn all_zero_shifts_leave_the_catalog_without_shifted_topics() {
        let c = Catalog::default();
        c.set_shifts("t", &[0, 0]);
        assert!(!c.has_shifts());
        assert!(!c.is_shifted("t"), "all-zero shifts are not recorded");
    }
}
