//! Several instances on one destination: the election of the active instance through a
//! consumer group (`election`), the share of the partitions each member copies with
//! `engine.share_work` (`share`), and management requests a standby forwards to the active
//! instance through the state topic (`forward`). The lease every write is fenced by is the
//! crate root's `lease`; running terms as the election decides is `engine`'s.

pub(crate) mod election;
pub(crate) mod forward;
pub(crate) mod share;
