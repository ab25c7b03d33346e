//! Who may open one more admin endpoint connection: at most `limits.max_admin_connections` in
//! all, `limits.max_admin_connections_per_ip` from one address (an IPv6 peer counts by its /64
//! network, an IPv4-mapped one as IPv4), and non-loopback peers together leave
//! `limits.admin_loopback_reserve` for loopback ones. So unfinished requests from one remote host
//! (or many) cannot take the connections a liveness probe on the proxy's own host needs, and one
//! remote host cannot take those of the others. Used by `admin`'s accept loop.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// The admission limits of the admin endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AdminCaps {
    /// Connections open at once, from anyone.
    pub(crate) total: u32,
    /// Connections open at once from one address (or IPv6 /64).
    pub(crate) per_ip: u32,
    /// Connections only loopback peers may take.
    pub(crate) loopback_reserve: u32,
}

impl AdminCaps {
    /// The limits from `[limits]`.
    pub(crate) fn from_config(limits: &kmp_config::LimitsConfig) -> Self {
        Self {
            total: limits.max_admin_connections,
            per_ip: limits.max_admin_connections_per_ip,
            loopback_reserve: limits.admin_loopback_reserve,
        }
    }

    /// How many connections non-loopback peers may hold together (at least one).
    fn remote(&self) -> u32 {
        self.total.saturating_sub(self.loopback_reserve).max(1)
    }
}

#[derive(Debug, Default)]
struct Counts {
    total: u32,
    remote: u32,
    by_key: HashMap<IpAddr, u32>,
}

/// The open admin connections, counted by address.
#[derive(Debug, Clone)]
pub(crate) struct AdminSlots {
    caps: AdminCaps,
    counts: Arc<Mutex<Counts>>,
}

/// One admitted connection; dropping it frees its slot.
#[derive(Debug)]
pub(crate) struct AdminSlot {
    key: IpAddr,
    loopback: bool,
    counts: Arc<Mutex<Counts>>,
}

impl AdminSlots {
    pub(crate) fn new(caps: AdminCaps) -> Self {
        Self {
            caps,
            counts: Arc::new(Mutex::new(Counts::default())),
        }
    }

    /// Admits a connection from `ip`, or names the limit that refuses it.
    pub(crate) fn admit(&self, ip: IpAddr) -> Result<AdminSlot, &'static str> {
        let loopback = kmp_config::is_loopback(ip);
        let key = key_of(ip);
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if counts.total >= self.caps.total {
            return Err("max_admin_connections");
        }
        if !loopback && counts.remote >= self.caps.remote() {
            return Err("admin_loopback_reserve");
        }
        let from_key = counts.by_key.entry(key).or_insert(0);
        if *from_key >= self.caps.per_ip {
            return Err("max_admin_connections_per_ip");
        }
        *from_key += 1;
        counts.total += 1;
        if !loopback {
            counts.remote += 1;
        }
        Ok(AdminSlot {
            key,
            loopback,
            counts: self.counts.clone(),
        })
    }
}

impl Drop for AdminSlot {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        counts.total = counts.total.saturating_sub(1);
        if !self.loopback {
            counts.remote = counts.remote.saturating_sub(1);
        }
        if let Some(n) = counts.by_key.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.by_key.remove(&self.key);
            }
        }
    }
}

/// What a peer is counted as: IPv4-mapped IPv6 as its IPv4 address, other IPv6 addresses by
/// their /64 network (one host usually has a whole /64).
fn key_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None if v6.is_loopback() => ip,
            None => IpAddr::V6((u128::from(v6) & (u128::MAX << 64)).into()),
        },
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn one_remote_address_takes_at_most_its_per_ip_share_and_a_closed_connection_frees_it() {
        let slots = AdminSlots::new(AdminCaps {
            total: 10,
            per_ip: 2,
            loopback_reserve: 2,
        });
        let first = slots.admit(ip("192.0.2.1")).unwrap();
        let _second = slots.admit(ip("192.0.2.1")).unwrap();
        assert_eq!(slots.admit(ip("192.0.2.1")).err(), Some("max_admin_connections_per_ip"));
        assert!(slots.admit(ip("192.0.2.2")).is_ok(), "another address is not refused");
        drop(first);
        assert!(slots.admit(ip("192.0.2.1")).is_ok(), "the freed slot is used again");
    }

    #[test]
    fn remote_peers_together_leave_the_reserve_to_loopback_ones() {
        let slots = AdminSlots::new(AdminCaps {
            total: 4,
            per_ip: 10,
            loopback_reserve: 2,
        });
        let _held: Vec<_> = ["192.0.2.1", "192.0.2.2"].iter().map(|a| slots.admit(ip(a)).unwrap()).collect();
        assert_eq!(slots.admit(ip("192.0.2.3")).err(), Some("admin_loopback_reserve"));
        let _l1 = slots.admit(ip("127.0.0.1")).unwrap();
        let _l2 = slots.admit(ip("::ffff:127.0.0.1")).unwrap();
        assert_eq!(slots.admit(ip("127.0.0.1")).err(), Some("max_admin_connections"));
    }

    #[test]
    fn a_reserve_as_large_as_the_total_still_lets_one_remote_caller_in() {
        let slots = AdminSlots::new(AdminCaps {
            total: 4,
            per_ip: 10,
            loopback_reserve: 16,
        });
        let _one = slots.admit(ip("192.0.2.1")).unwrap();
        assert_eq!(slots.admit(ip("192.0.2.2")).err(), Some("admin_loopback_reserve"));
    }

    #[test]
    fn ipv6_peers_count_by_their_64_network_and_mapped_ipv4_as_ipv4() {
        let slots = AdminSlots::new(AdminCaps {
            total: 10,
            per_ip: 1,
            loopback_reserve: 0,
        });
        let _a = slots.admit(ip("2001:db8:1:2::5")).unwrap();
        assert_eq!(slots.admit(ip("2001:db8:1:2::ffff")).err(), Some("max_admin_connections_per_ip"));
        assert!(slots.admit(ip("2001:db8:1:3::5")).is_ok());
        let _b = slots.admit(ip("192.0.2.9")).unwrap();
        assert_eq!(slots.admit(ip("::ffff:192.0.2.9")).err(), Some("max_admin_connections_per_ip"));
    }
}
