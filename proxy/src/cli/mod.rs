//! The binary's management commands (`kafka-mirror-proxy mirrors ...`): talking to a running
//! proxy's mirror API (`mirrors`), summing described partitions into per-topic progress
//! (`progress`) and printing tables (`table`).

pub(crate) mod mirrors;
mod progress;
mod table;
