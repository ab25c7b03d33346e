//! Writing the destination: the per-broker produce lanes shared by every mirror (`mux`), the one
//! producer identity and its offset-bound sequences (`copy::produce::producer_id`), a partition's pipelined
//! writer (`sink`) and reading back what an unanswered write left (`landed`).

pub(crate) mod landed;
pub(crate) mod mux;
pub(crate) mod producer_id;
pub(crate) mod sink;
