//! Checking once at start-up that the advertised host resolves here: clients reach every broker
//! at `advertised_host:(node_port_base + node id)`, so a name copied from an example that resolves
//! nowhere (README's `proxy-host`) makes every client fail after bootstrap. A warning, not an
//! error: the name may resolve only where the clients are (split DNS, another network).

use std::time::Duration;

use tracing::warn;

/// How long the lookup may take before it is given up (and the warning says so).
const LOOKUP_LIMIT: Duration = Duration::from_secs(5);

/// Looks `host` up in the background and logs a warning when it does not resolve here.
pub(crate) fn warn_unless_resolvable(host: String) {
    tokio::spawn(async move {
        let outcome = tokio::time::timeout(LOOKUP_LIMIT, tokio::net::lookup_host((host.as_str(), 0))).await;
        let problem = match outcome {
            Ok(Ok(mut addrs)) => {
                if addrs.next().is_some() {
                    return;
                }
                "it resolves to no address".to_owned()
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("the lookup took longer than {LOOKUP_LIMIT:?}"),
        };
        warn!(
            advertised_host = %host,
            %problem,
            "listener.advertised_host does not resolve on this machine: clients are sent broker addresses with this name \
             and cannot connect unless it resolves where they run (set listener.advertised_host / KMP_ADVERTISED_HOST)"
        );
    });
}
