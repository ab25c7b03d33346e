//! Reading the source: incremental fetch sessions shared by every partition of a broker
//! (`session`), one partition's stream of fetched answers (`stream`), and how much each fetch
//! asks for (`size`, `growth`). The Fetch request itself is `cluster::fetch`'s.

pub(crate) mod growth;
pub(crate) mod session;
pub(crate) mod size;
pub(crate) mod stream;
