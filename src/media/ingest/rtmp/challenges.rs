//! The Adobe challenges handed out and not yet answered (the answer comes on a new connection).
//!
//! Handing one out needs no credential, so the table is bounded: at most [`PER_IP`] pending
//! per client address and [`MAX_PENDING`] in all, the oldest giving way to the newest; each
//! lives [`TTL`]. A challenge is answered within a round trip by real clients, so only a flood
//! of [`MAX_PENDING`] new challenges inside that round trip could push a real one out. Every
//! operation is O(1) amortised: challenges expire in the order they were made.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::slots::{Slot, Slots};

pub const MAX_PENDING: usize = 10_000;
pub const PER_IP: usize = 32;
pub const TTL: Duration = Duration::from_secs(60);

struct Pending {
    user: String,
    until: Instant,
    /// The asking address's place; given back when the challenge is taken or dropped.
    _place: Slot<IpAddr>,
}

struct Table {
    by_opaque: HashMap<String, Pending>,
    /// Opaques in the order they were made; some may have been taken already.
    order: VecDeque<String>,
    per_ip: Arc<Slots<IpAddr>>,
}

impl Default for Table {
    fn default() -> Table {
        Table { by_opaque: HashMap::new(), order: VecDeque::new(), per_ip: Slots::new(PER_IP) }
    }
}

impl Table {
    fn forget(&mut self, opaque: &str) -> Option<Pending> {
        self.by_opaque.remove(opaque)
    }

    /// Drops expired challenges, and the oldest while more than `keep` are pending.
    fn prune(&mut self, now: Instant, keep: usize) {
        while let Some(oldest) = self.order.front() {
            let expired = self.by_opaque.get(oldest).is_none_or(|p| p.until <= now);
            if !expired && self.by_opaque.len() <= keep {
                break;
            }
            if let Some(o) = self.order.pop_front() {
                self.forget(&o);
            }
        }
    }
}

#[derive(Default)]
pub struct Challenges {
    table: Mutex<Table>,
}

impl Challenges {
    /// Remembers a challenge for `user` asked from `ip`; false when `ip` has too many pending.
    pub fn remember(&self, opaque: &str, user: &str, ip: IpAddr, now: Instant) -> bool {
        let mut t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        t.prune(now, MAX_PENDING - 1);
        let Some(place) = t.per_ip.take(ip) else { return false };
        t.order.push_back(opaque.to_string());
        t.by_opaque
            .insert(opaque.to_string(), Pending { user: user.to_string(), until: now + TTL, _place: place });
        true
    }

    /// Uses up a challenge: true when it was handed out to `user` and has not expired.
    pub fn take(&self, opaque: &str, user: &str, now: Instant) -> bool {
        let mut t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        matches!(t.forget(opaque), Some(p) if p.user == user && p.until > now)
    }

    pub fn pending(&self) -> usize {
        self.table.lock().unwrap_or_else(|p| p.into_inner()).by_opaque.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u32) -> IpAddr {
        IpAddr::from(std::net::Ipv4Addr::from(0x0A00_0000 + n))
    }

    #[test]
    fn a_challenge_is_taken_once_by_its_user_before_it_expires() {
        let c = Challenges::default();
        let t0 = Instant::now();
        assert!(c.remember("o1", "alice", ip(1), t0));
        assert!(!c.take("o1", "bob", t0), "another user");
        assert!(!c.take("o1", "alice", t0), "used up by the failed attempt");
        assert!(c.remember("o2", "alice", ip(1), t0));
        assert!(!c.take("o2", "alice", t0 + TTL), "expired");
        assert!(c.remember("o3", "alice", ip(1), t0));
        assert!(c.take("o3", "alice", t0 + Duration::from_secs(1)));
        assert_eq!(c.pending(), 0);
    }

    #[test]
    fn one_address_cannot_fill_the_table() {
        let c = Challenges::default();
        let t0 = Instant::now();
        for i in 0..PER_IP {
            assert!(c.remember(&format!("a{i}"), "u", ip(1), t0));
        }
        assert!(!c.remember("over", "u", ip(1), t0));
        assert!(c.remember("other", "u", ip(2), t0), "another address still gets one");
        // Once its challenges are used or expire, the address gets new ones.
        assert!(c.take("a0", "u", t0));
        assert!(c.remember("again", "u", ip(1), t0));
        assert!(c.remember("later", "u", ip(1), t0 + TTL + Duration::from_secs(1)));
    }

    #[test]
    fn the_table_is_bounded_and_the_oldest_give_way() {
        let c = Challenges::default();
        let t0 = Instant::now();
        for i in 0..(MAX_PENDING as u32 + 100) {
            assert!(c.remember(&format!("o{i}"), "u", ip(i), t0));
        }
        assert_eq!(c.pending(), MAX_PENDING);
        assert!(!c.take("o0", "u", t0), "the oldest gave way");
        assert!(c.take(&format!("o{}", MAX_PENDING + 99), "u", t0), "the newest is there");
    }
}
