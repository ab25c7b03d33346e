//! Shared refusals: how a request is answered for the parts a policy refuses, so that the
//! policies (one file each in `filters/`) only say what to refuse and why. `topics` decides and
//! builds the refusal of the admin and transaction requests that would change a protected topic
//! (with `layout` for the requests that recreate it or move its data), `produce` that of a
//! Produce, `configs` that of config resources, and `text` bounds the refusal messages one
//! answer carries.

pub(crate) mod configs;
pub(crate) mod layout;
pub(crate) mod produce;
pub(crate) mod text;
pub(crate) mod topics;
