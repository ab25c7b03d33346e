//! The binary's management commands (`kafka-mirror-proxy mirrors ...`): talking to a running
//! proxy's mirror API (`mirrors`), printing what `--describe` answered (`describe`, its
//! partitions as REST's partition view), summing described partitions into per-topic progress
//! (`progress`) and printing tables (`table`).

mod describe;
pub(crate) mod mirrors;
mod progress;
mod table;
