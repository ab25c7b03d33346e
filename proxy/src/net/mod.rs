//! Transport toward clients: binding the listeners (`listen`), the one accept loop with its
//! back-off (`accept`), client-facing TLS with its reloading (`tls`), and the connection counts
//! and request-byte budget (`limits`), and a start-up check that the advertised host resolves
//! (`advertised`). Nothing here knows Kafka; what an accepted connection is
//! served by belongs to `session` (clients) and `admin` (the admin endpoint).

pub(crate) mod accept;
pub(crate) mod advertised;
pub(crate) mod limits;
pub mod listen;
pub(crate) mod tls;
