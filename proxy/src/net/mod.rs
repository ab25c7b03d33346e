//! Transport toward clients: binding the listeners (`listen`), client-facing TLS with its
//! reloading (`tls`), and the connection counts and request-byte budget (`limits`). Nothing here
//! knows Kafka; accepting a connection and serving it belong to `session`.

pub(crate) mod limits;
pub mod listen;
pub(crate) mod tls;
