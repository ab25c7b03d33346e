//! Connection limits and the request-byte budget (`[limits]`): how many client connections may
//! be open in total and per client address, and how many bytes of request frames all of them may
//! hold together. Timeouts are applied where the waiting happens (`session`, `admin`); this
//! module only counts. The connection limit never exceeds what the open-file limit carries (two
//! descriptors a client connection, after a reserve), so it refuses connections before the
//! process runs out of descriptors and `/healthz`, the engine and accepting fail.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use dashmap::DashMap;
use kmp_config::LimitsConfig;
use kmp_protocol::frame::ByteBudget;

/// Shared counters behind the limits.
pub(crate) struct Limits {
    max_total: u32,
    max_per_ip: u32,
    total: Arc<AtomicU32>,
    per_ip: Arc<DashMap<IpAddr, u32>>,
    /// Bytes of request frames all client connections may hold together.
    pub(crate) budget: ByteBudget,
    /// Bytes of responses read whole that all client connections may hold together until written.
    pub(crate) response_budget: ByteBudget,
}

/// One admitted connection; its slot is released when dropped.
pub(crate) struct Slot {
    ip: IpAddr,
    total: Arc<AtomicU32>,
    per_ip: Arc<DashMap<IpAddr, u32>>,
}

/// Descriptors kept out of the client connections' share: the admin endpoint's connections come
/// on top, this covers the proxy's and the engine's own broker connections, the listeners,
/// logs and files.
const FD_RESERVE: u64 = 512;

/// How many client connections `fd_limit` open files carry: each holds two (client and broker)
/// once its first request is forwarded; `admin` descriptors go to the admin endpoint and
/// [`FD_RESERVE`] to everything else. `None`: no limit.
pub(crate) fn fd_capacity(fd_limit: Option<u64>, admin: u32) -> Option<u32> {
    let limit = fd_limit?;
    let left = limit.saturating_sub(FD_RESERVE + u64::from(admin));
    Some(u32::try_from(left / 2).unwrap_or(u32::MAX))
}

/// The soft open-file limit now (after `limits.raise_fd_limit`); `None` when unlimited or unknown.
#[cfg(unix)]
fn open_file_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

#[cfg(not(unix))]
fn open_file_limit() -> Option<u64> {
    None
}

impl Limits {
    pub(crate) fn new(config: &LimitsConfig) -> Self {
        let mut max_total = config.max_connections;
        if let Some(cap) = fd_capacity(open_file_limit(), config.max_admin_connections)
            && cap < max_total
        {
            tracing::warn!(
                configured = max_total,
                effective = cap,
                "limits.max_connections lowered to what the open-file limit carries (two descriptors a connection); raise the limit (ulimit -n) to allow more"
            );
            max_total = cap;
        }
        Self {
            max_total,
            max_per_ip: config.max_connections_per_ip,
            total: Arc::new(AtomicU32::new(0)),
            per_ip: Arc::new(DashMap::new()),
            budget: ByteBudget::new(usize::try_from(config.buffered_request_bytes).unwrap_or(usize::MAX)),
            response_budget: ByteBudget::new(usize::try_from(config.buffered_response_bytes).unwrap_or(usize::MAX)),
        }
    }

    /// Admits a connection from `ip`, or names the limit that refuses it.
    pub(crate) fn admit(&self, ip: IpAddr) -> Result<Slot, &'static str> {
        if self.total.fetch_add(1, Ordering::AcqRel) >= self.max_total {
            self.total.fetch_sub(1, Ordering::AcqRel);
            return Err("max_connections");
        }
        let mut entry = self.per_ip.entry(ip).or_insert(0);
        if *entry >= self.max_per_ip {
            drop(entry);
            self.total.fetch_sub(1, Ordering::AcqRel);
            return Err("max_connections_per_ip");
        }
        *entry += 1;
        drop(entry);
        Ok(Slot {
            ip,
            total: self.total.clone(),
            per_ip: self.per_ip.clone(),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.total.fetch_sub(1, Ordering::AcqRel);
        self.per_ip.remove_if_mut(&self.ip, |_, n| {
            *n -= 1;
            *n == 0
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_open_file_limit_caps_client_connections_at_two_descriptors_each_after_the_reserve() {
        assert_eq!(fd_capacity(None, 256), None, "unlimited");
        assert_eq!(fd_capacity(Some(20_000), 256), Some((20_000 - 512 - 256) / 2));
        assert_eq!(fd_capacity(Some(100), 256), Some(0), "a tiny limit admits nothing rather than underflowing");
    }

    #[test]
    fn per_address_and_total_limits_refuse_and_free_slots_when_connections_close() {
        let limits = Limits::new(&LimitsConfig {
            max_connections: 3,
            max_connections_per_ip: 2,
            ..LimitsConfig::default()
        });
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let s1 = limits.admit(a).unwrap();
        let _s2 = limits.admit(a).unwrap();
        assert_eq!(limits.admit(a).err(), Some("max_connections_per_ip"));
        let _s3 = limits.admit(b).unwrap();
        assert_eq!(limits.admit(b).err(), Some("max_connections"));
        drop(s1);
        let s4 = limits.admit(a);
        assert!(s4.is_ok(), "a closed connection frees its slot");
        assert_eq!(limits.total.load(Ordering::Relaxed), 3);
    }
}
