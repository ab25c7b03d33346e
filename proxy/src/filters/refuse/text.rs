//! The messages of refused items, bounded: a hostile request can name the same refused resource
//! millions of times, and a message of a few hundred bytes per item turned an 8 MiB request into
//! a 572 MiB answer (issue #35, N1). Here the items of one request are refused once per distinct
//! name ([`take_refused`]), items refused for the same reason share one message buffer
//! ([`Texts`]), and one answer carries at most [`MAX_TEXT_BYTES`] of message text ([`Shown`]);
//! items past that get their error code without a message.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use kmp_protocol::kafka_protocol::protocol::StrBytes;

/// The most message text one answer carries (about 5,000 refusals' worth).
pub(crate) const MAX_TEXT_BYTES: usize = 1024 * 1024;

/// Message texts shared by every item refused for the same reason.
#[derive(Default)]
pub(crate) struct Texts {
    seen: HashMap<String, StrBytes>,
}

impl Texts {
    /// The shared buffer holding `text`.
    pub(crate) fn share(&mut self, text: String) -> StrBytes {
        if let Some(s) = self.seen.get(&text) {
            return s.clone();
        }
        let s = StrBytes::from_string(text.clone());
        self.seen.insert(text, s.clone());
        s
    }
}

/// How much message text an answer still takes.
pub(crate) struct Shown {
    left: usize,
}

impl Default for Shown {
    fn default() -> Self {
        Self { left: MAX_TEXT_BYTES }
    }
}

impl Shown {
    /// The message for one more refused item: `text` while the answer has room, then `None`.
    pub(crate) fn text(&mut self, text: &StrBytes) -> Option<StrBytes> {
        let n = text.len();
        (n <= self.left).then(|| {
            self.left -= n;
            text.clone()
        })
    }
}

/// A refusal message as [`take_refused`]'s `hit` gives it: a text made for the item (equal texts
/// then share one buffer) or a buffer already shared (a fixed message).
pub(crate) trait Message {
    /// The buffer the answer carries.
    fn shared_in(self, texts: &mut Texts) -> StrBytes;
}

impl Message for String {
    fn shared_in(self, texts: &mut Texts) -> StrBytes {
        texts.share(self)
    }
}

impl Message for StrBytes {
    fn shared_in(self, _: &mut Texts) -> StrBytes {
        self
    }
}

/// Removes the items `hit` refuses from `items` and returns, once per distinct `key`, what it
/// said of them, with identical messages sharing one buffer. `hit` returns the item's key and
/// its refusal message.
pub(crate) fn take_refused<T, K: Eq + Hash + Clone, M: Message>(items: &mut Vec<T>, hit: impl Fn(&T) -> Option<(K, M)>) -> Vec<(K, StrBytes)> {
    let mut texts = Texts::default();
    let mut keys = HashSet::new();
    let mut out = Vec::new();
    items.retain(|i| match hit(i) {
        Some((key, text)) => {
            if keys.insert(key.clone()) {
                out.push((key, text.shared_in(&mut texts)));
            }
            false
        }
        None => true,
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_refused_a_million_times_is_answered_once_and_equal_messages_share_one_buffer() {
        let mut items: Vec<String> = (0..1_000_000).map(|i| if i % 2 == 0 { "m".to_owned() } else { "n".to_owned() }).collect();
        items.push("keep".to_owned());
        let refused = take_refused(&mut items, |t| (t != "keep").then(|| (t.clone(), "read-only".to_owned())));
        assert_eq!(items, vec!["keep".to_owned()], "every refused item leaves the request");
        assert_eq!(refused.len(), 2, "one answer per distinct name");
        assert_eq!(
            refused[0].1.as_str().as_ptr(),
            refused[1].1.as_str().as_ptr(),
            "equal messages share one buffer"
        );
    }

    #[test]
    fn an_answer_carries_at_most_max_text_bytes_of_messages() {
        let mut shown = Shown::default();
        let text = StrBytes::from_string("x".repeat(1000));
        let with_text = (0..10_000).filter(|_| shown.text(&text).is_some()).count();
        assert_eq!(with_text, MAX_TEXT_BYTES / 1000, "messages stop once the answer holds MAX_TEXT_BYTES of them");
    }
}
