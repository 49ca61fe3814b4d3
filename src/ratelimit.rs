//! Keyed rate limits (an API key id, a client IP, an e-mail address), in memory, per process.
//!
//! GCRA cells from `governor`, kept in its sharded map (dashmap): a flood of distinct keys
//! contends on one shard at a time, never on one lock, and [`Limiter::sweep`] (called
//! periodically by the app) drops the keys whose cells have all come back, bounding memory.

use std::hash::Hash;
use std::num::NonZeroU32;
use std::time::Duration;

use dashmap::DashMap;
use governor::clock::{Clock, DefaultClock, Reference};
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};

/// A token bucket per key.
pub struct Limiter<K: Hash + Eq + Clone, C: Clock = DefaultClock> {
    cells: RateLimiter<K, DefaultKeyedStateStore<K>, C, NoOpMiddleware<C::Instant>>,
    clock: C,
}

impl<K: Hash + Eq + Clone> Limiter<K> {
    pub fn new(quota: Quota) -> Self {
        Limiter::with_clock(quota, DefaultClock::default())
    }
}

impl<K: Hash + Eq + Clone, C: Clock + Clone> Limiter<K, C> {
    pub fn with_clock(quota: Quota, clock: C) -> Self {
        Limiter { cells: RateLimiter::dashmap_with_clock(quota, clock.clone()), clock }
    }

    /// Takes one cell, or says how many whole seconds (at least 1) until one is free.
    pub fn take(&self, key: &K) -> Result<(), u64> {
        self.cells.check_key(key).map_err(|not_until| whole_secs(not_until.wait_time_from(self.clock.now())))
    }

    /// Forgets the keys whose buckets are full again.
    pub fn sweep(&self) {
        self.cells.retain_recent();
        self.cells.shrink_to_fit();
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.cells.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }
}

/// Failures counted per key; once a key is over its quota it is locked out until a cell comes
/// back, so that further attempts can be refused before they cost anything (a password hash)
/// and without revealing whether they would have succeeded.
pub struct Lockout<K: Hash + Eq + Clone, C: Clock = DefaultClock> {
    failures: Limiter<K, C>,
    locked_until: DashMap<K, C::Instant>,
}

impl<K: Hash + Eq + Clone> Lockout<K> {
    pub fn new(quota: Quota) -> Self {
        Lockout::with_clock(quota, DefaultClock::default())
    }
}

impl<K: Hash + Eq + Clone, C: Clock + Clone> Lockout<K, C> {
    pub fn with_clock(quota: Quota, clock: C) -> Self {
        Lockout { failures: Limiter::with_clock(quota, clock), locked_until: DashMap::new() }
    }

    /// Seconds until `key` may try again, while it is locked out.
    pub fn locked(&self, key: &K) -> Option<u64> {
        let now = self.failures.clock.now();
        let until = *self.locked_until.get(key)?;
        if until > now {
            Some(whole_secs(until.duration_since(now).into()))
        } else {
            self.locked_until.remove_if(key, |_, u| *u <= now);
            None
        }
    }

    /// Counts a failure. `Err(seconds)` when it was one too many: the key is now locked out.
    pub fn fail(&self, key: &K) -> Result<(), u64> {
        self.failures.take(key).inspect_err(|&secs| {
            let until = self.failures.clock.now() + Nanos::from(Duration::from_secs(secs));
            self.locked_until.insert(key.clone(), until);
        })
    }

    /// Forgets full buckets and lapsed lockouts.
    pub fn sweep(&self) {
        self.failures.sweep();
        let now = self.failures.clock.now();
        self.locked_until.retain(|_, until| *until > now);
        self.locked_until.shrink_to_fit();
    }
}

/// `rate` requests a second sustained, `burst` at once.
pub fn per_second(rate: f64, burst: u32) -> Quota {
    let period = Duration::from_secs_f64(1.0 / rate.max(1e-6)).max(Duration::from_nanos(1));
    per_period(period, burst)
}

/// `count` a minute, all of them at once if need be.
pub fn per_minute(count: u32) -> Quota {
    Quota::per_minute(NonZeroU32::new(count).unwrap_or(NonZeroU32::MIN))
}

/// `count` over `window`: bursts of `count`, one cell back every `window / count`.
pub fn per_window(count: u32, window: Duration) -> Quota {
    per_period(window / count.max(1), count)
}

fn per_period(period: Duration, burst: u32) -> Quota {
    let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
    // `with_period` refuses only a zero period, which `per_second` and `per_window` never give.
    Quota::with_period(period).unwrap_or_else(|| Quota::per_second(burst)).allow_burst(burst)
}

fn whole_secs(wait: Duration) -> u64 {
    wait.as_secs_f64().ceil().max(1.0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use governor::clock::FakeRelativeClock;

    #[test]
    fn burst_then_refill() {
        let clock = FakeRelativeClock::default();
        let l = Limiter::with_clock(per_second(2.0, 3), clock.clone());
        for _ in 0..3 {
            assert!(l.take(&"k").is_ok());
        }
        assert_eq!(l.take(&"k"), Err(1));
        assert!(l.take(&"other").is_ok());
        clock.advance(Duration::from_millis(500));
        assert!(l.take(&"k").is_ok());
        assert!(l.take(&"k").is_err());
    }

    #[test]
    fn retry_after_reflects_slow_rates() {
        let l = Limiter::with_clock(per_minute(20), FakeRelativeClock::default());
        for _ in 0..20 {
            assert!(l.take(&"ip").is_ok());
        }
        assert_eq!(l.take(&"ip"), Err(3));
    }

    #[test]
    fn sweep_forgets_full_buckets() {
        let clock = FakeRelativeClock::default();
        let l = Limiter::with_clock(per_second(10.0, 5), clock.clone());
        for i in 0..1000 {
            let _ = l.take(&i);
        }
        assert_eq!(l.len(), 1000);
        clock.advance(Duration::from_secs(1));
        l.sweep();
        assert!(l.is_empty());
    }

    #[test]
    fn a_lockout_starts_after_the_last_allowed_failure_and_lapses() {
        let clock = FakeRelativeClock::default();
        let l = Lockout::with_clock(per_window(10, Duration::from_secs(900)), clock.clone());
        for _ in 0..10 {
            assert_eq!(l.locked(&"a@x"), None);
            assert!(l.fail(&"a@x").is_ok());
        }
        assert_eq!(l.fail(&"a@x"), Err(90));
        assert_eq!(l.locked(&"a@x"), Some(90));
        assert_eq!(l.locked(&"b@x"), None, "per key");
        clock.advance(Duration::from_secs(89));
        assert_eq!(l.locked(&"a@x"), Some(1));
        clock.advance(Duration::from_secs(1));
        assert_eq!(l.locked(&"a@x"), None, "the flood has passed");
        // One more failure is allowed (one cell came back), the next locks again.
        assert!(l.fail(&"a@x").is_ok());
        assert!(l.fail(&"a@x").is_err());
        clock.advance(Duration::from_secs(900));
        l.sweep();
        assert_eq!(l.locked(&"a@x"), None);
    }
}
