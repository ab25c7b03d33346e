//! Destination topics and what a mirror selects: which source topics and groups a mirror covers
//! (`select`), which topic configs are copied and how they are compared (`configs`), and
//! creating, growing and inspecting destination topics (`create`). Who owns a mirror topic is
//! the catalog's (`state::catalog`).

pub(crate) mod configs;
pub(crate) mod create;
pub(crate) mod select;
