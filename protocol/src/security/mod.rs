//! Transport security toward brokers and the building blocks of client-facing security: TLS
//! configurations from PEM files (`tls`), SCRAM for both ends (`scram`), the salted credentials
//! file of authentication termination (`credentials`), OAUTHBEARER tokens for both ends (`oauth`), and opening an authenticated broker
//! connection (`stream`) and keeping its login alive (`reauth`, KIP-368). Accepting client connections and answering their SASL requests belong
//! to the proxy; which properties a cluster uses belongs to `kmp_config`.

pub mod credentials;
pub mod oauth;
pub mod reauth;
pub mod scram;
pub mod stream;
pub mod tls;

pub use reauth::{SaslRoundTrip, Session, renewals_total};
pub use stream::{BrokerRead, BrokerStream, BrokerWrite, ClientSecurity, SaslLogin, SecurityError, connections_opened};
pub use tls::TlsError;
