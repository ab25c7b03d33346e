//! Mirrors at runtime: launching a mirror and discovering its topics, again whenever its
//! definition changes (`discovery`), and one topic's life — preparing the destination topic,
//! starting and restarting its partition tasks (`lifecycle`).

pub(crate) mod discovery;
pub(crate) mod lifecycle;
