//! The copy path, fetch → plan → produce, one task per mirrored partition (`partition`): source
//! reads through shared fetch sessions (`fetch`, `sources`), the offset-preserving plan (`plan`),
//! pipelined idempotent writes through per-broker produce lanes (`produce`), and around them the
//! engine-wide memory bound (`budget`), broker quota throttles (`throttle`), checks of what a
//! broker answered (`answer_check`), the watch of a partition that waits for source progress
//! (`progress_watch`), the emptiness check of a destination topic the mirror just created
//! (`fresh_topic`), the replay of source transactions in destination transactions (`txn`), and
//! the offset shift of partitions whose source log starts too far out to fill (`shift`), and the
//! source leader epochs of what a partition copied (`epochs`, the line a stop records).

pub(crate) mod answer_check;
pub(crate) mod budget;
pub(crate) mod epochs;
pub(crate) mod fetch;
pub(crate) mod fresh_topic;
pub(crate) mod partition;
pub(crate) mod plan;
pub(crate) mod produce;
pub(crate) mod progress_watch;
pub(crate) mod shift;
pub(crate) mod sources;
pub(crate) mod throttle;
pub(crate) mod txn;
