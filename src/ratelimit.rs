//! Token buckets keyed by a string (an API key id, a client IP). In memory, per process.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

/// Refills at `rate` tokens a second up to `burst`.
pub struct RateLimiter {
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, Bucket>>,
}

#[derive(Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Buckets kept before idle (full) ones are dropped, bounding memory under a flood of keys.
const PRUNE_ABOVE: usize = 10_000;

impl RateLimiter {
    pub fn new(rate_per_sec: f64, burst: u32) -> Self {
        RateLimiter { rate: rate_per_sec, burst: f64::from(burst), buckets: Mutex::new(HashMap::new()) }
    }

    fn with_bucket<R>(&self, key: &str, now: Instant, f: impl FnOnce(&mut Bucket) -> R) -> R {
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() > PRUNE_ABOVE {
            let (rate, burst) = (self.rate, self.burst);
            buckets.retain(|_, b| b.tokens + now.duration_since(b.at).as_secs_f64() * rate < burst);
        }
        let bucket = buckets.entry(key.to_string()).or_insert(Bucket { tokens: self.burst, at: now });
        bucket.tokens =
            (bucket.tokens + now.duration_since(bucket.at).as_secs_f64() * self.rate).min(self.burst);
        bucket.at = now;
        f(bucket)
    }

    fn retry_after(&self, tokens: f64) -> u64 {
        ((1.0 - tokens) / self.rate).ceil().max(1.0) as u64
    }

    /// Takes one token, or says how many seconds until one is available.
    pub fn take(&self, key: &str) -> Result<(), u64> {
        self.take_at(key, Instant::now())
    }

    pub fn take_at(&self, key: &str, now: Instant) -> Result<(), u64> {
        self.with_bucket(key, now, |b| {
            if b.tokens >= 1.0 {
                b.tokens -= 1.0;
                Ok(())
            } else {
                Err(self.retry_after(b.tokens))
            }
        })
    }

    /// Whether the bucket is empty now (without taking), with the seconds to wait.
    pub fn exhausted(&self, key: &str) -> Option<u64> {
        self.with_bucket(key, Instant::now(), |b| (b.tokens < 1.0).then(|| self.retry_after(b.tokens)))
    }

    /// Takes a token if there is one (used to count failures after the fact).
    pub fn record(&self, key: &str) {
        let _ = self.take(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn burst_then_refill() {
        let l = RateLimiter::new(2.0, 3);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(l.take_at("k", t0).is_ok());
        }
        assert_eq!(l.take_at("k", t0), Err(1));
        assert!(l.take_at("other", t0).is_ok());
        assert!(l.take_at("k", t0 + Duration::from_millis(500)).is_ok());
        assert!(l.take_at("k", t0 + Duration::from_millis(500)).is_err());
    }

    #[test]
    fn retry_after_reflects_slow_rates() {
        let l = RateLimiter::new(20.0 / 60.0, 1);
        let t0 = Instant::now();
        assert!(l.take_at("ip", t0).is_ok());
        assert_eq!(l.take_at("ip", t0), Err(3));
    }
}
