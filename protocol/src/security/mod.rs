//! Transport security toward brokers and the building blocks of client-facing security: TLS
//! configurations from PEM files (`tls`), SCRAM for both ends (`scram`), the salted credentials
//! file of authentication termination (`credentials`), and opening an authenticated broker
//! connection (`stream`). Accepting client connections and answering their SASL requests belong
//! to the proxy; which properties a cluster uses belongs to `kmp_config`.

pub mod credentials;
pub mod scram;
pub mod stream;
pub mod tls;

pub use stream::{BrokerRead, BrokerStream, BrokerWrite, ClientSecurity, SaslLogin, SecurityError};
pub use tls::TlsError;
