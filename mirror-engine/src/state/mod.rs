//! Durable state and what is derived from it: the state topic's key schema and records
//! (`records`, including the operator's [`records::Desired`] state), the one reader of the topic
//! (`reader`), the store that loads and writes it (`store`), per-partition progress (`status`)
//! and metadata sync results (`sync_status`), the gate that opens once the stored state is
//! loaded (`boot_gate`), and the instance's catalog of mirror topics — who owns each and whether
//! clients may write it (`catalog`).

pub(crate) mod boot_gate;
pub(crate) mod catalog;
pub(crate) mod reader;
pub(crate) mod records;
pub(crate) mod status;
pub(crate) mod store;
pub(crate) mod sync_status;
