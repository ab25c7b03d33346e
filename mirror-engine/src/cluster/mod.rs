//! Reaching a cluster (source or destination) on the wire: the internal client and its shared
//! connections (`client`, `links`), read_uncommitted Fetch (`fetch`), whole Produce requests
//! (`produce`), DescribeProducers (`producers`), where an epoch ends in a log (`epoch_end`), the group requests of offset sync and the election (`groups`), and the
//! engine's I/O counters (`cluster::io_stats`). Nothing here knows about mirrors.

pub(crate) mod client;
pub(crate) mod epoch_end;
pub(crate) mod fetch;
pub(crate) mod groups;
pub(crate) mod io_stats;
pub(crate) mod links;
pub(crate) mod produce;
pub(crate) mod producers;
#[cfg(test)]
pub(crate) mod test_frames;
