//! The caps every ingest listener shares (CONTRACT: Live media — each client IP has a connection
//! cap over all its connections, publishing ones included): RTMP, RTMPS and SRT draw from one
//! [`Limits`], so an address cannot double its share by switching protocol.

use std::net::IpAddr;
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::slots::{Slot, Slots};

/// Ingest connections served at once, over every protocol; more are refused.
pub const MAX_CONNECTIONS: usize = 512;

/// Connections in all ([`MAX_CONNECTIONS`]) and per client address (`SLUICE_RTMP_MAX_PER_IP`).
pub struct Limits {
    all: Arc<Semaphore>,
    per_ip: Arc<Slots<IpAddr>>,
}

/// One admitted connection's places; given back on drop.
pub struct Admitted {
    _permit: OwnedSemaphorePermit,
    _slot: Slot<IpAddr>,
}

impl Limits {
    pub fn new(max_per_ip: usize) -> Limits {
        Limits { all: Arc::new(Semaphore::new(MAX_CONNECTIONS)), per_ip: Slots::new(max_per_ip) }
    }

    /// Takes a place for a connection from `ip`, or `None` when its address or the whole
    /// server is at the cap. The address is asked first, so one address at its cap cannot use
    /// up the global places.
    pub fn admit(&self, ip: IpAddr) -> Option<Admitted> {
        let slot = self.per_ip.take(ip)?;
        let permit = self.all.clone().try_acquire_owned().ok()?;
        Some(Admitted { _permit: permit, _slot: slot })
    }

    /// Whether a connection from `ip` would be admitted now (SRT asks at the handshake, before
    /// the connection exists, and takes the place once it is accepted).
    pub fn has_room(&self, ip: IpAddr) -> bool {
        self.all.available_permits() > 0 && self.per_ip.has_room(&ip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_capped_and_its_places_come_back() {
        let limits = Limits::new(2);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().expect("ip"), "10.0.0.2".parse().expect("ip"));
        let first = limits.admit(a).expect("first");
        let second = limits.admit(a).expect("second");
        assert!(!limits.has_room(a));
        assert!(limits.admit(a).is_none(), "third from one address");
        assert!(limits.has_room(b) && limits.admit(b).is_some(), "another address is not affected");
        drop((first, second));
        assert!(limits.has_room(a));
        assert!(limits.per_ip.is_empty(), "no address is remembered at zero");
    }
}
