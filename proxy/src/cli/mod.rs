//! The binary's management commands (`kafka-mirror-proxy mirrors ...`): talking to a running
//! proxy's mirror API (`mirrors`), printing what `--describe` answered (`describe`, its
//! partitions as REST's partition view), summing described partitions into per-topic progress
//! (`progress`), printing tables (`table`), and the audited version table (`versions`).

mod describe;
pub(crate) mod mirrors;
mod progress;
mod table;
pub(crate) mod versions;
