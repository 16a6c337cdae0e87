//! Byte-rate quotas per client id (`quota.producer.default`, `quota.consumer.default`), as
//! Kafka applies them: the request is served, the response carries `throttle_time_ms`, and the
//! broker reads nothing more from that connection until the throttle time has passed.
//!
//! Each client id has a bucket that refills at the quota rate and holds at most one second of
//! it; bytes beyond the bucket are debt, and the throttle time is the time the refill needs to
//! pay the debt back.

use crate::sync::OrDie as _;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

/// What a quota meters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Produce,
    Fetch,
}

struct Bucket {
    /// Bytes available (negative: debt).
    tokens: f64,
    at: Instant,
}

pub struct Quotas {
    produce: Option<u64>,
    fetch: Option<u64>,
    buckets: Mutex<HashMap<(Kind, String), Bucket>>,
}

/// Longest throttle answered (Kafka caps throttle at the quota window; ours is 30 s).
const THROTTLE_MAX_MS: f64 = 30_000.0;

impl Quotas {
    pub fn new(produce: Option<u64>, fetch: Option<u64>) -> Quotas {
        Quotas { produce, fetch, buckets: Mutex::new(HashMap::new()) }
    }

    pub fn enabled(&self, kind: Kind) -> bool {
        self.rate(kind).is_some()
    }

    fn rate(&self, kind: Kind) -> Option<u64> {
        match kind {
            Kind::Produce => self.produce,
            Kind::Fetch => self.fetch,
        }
    }

    /// Record `bytes` for `client_id` now; returns the throttle time in ms (0 within quota).
    pub fn record(&self, kind: Kind, client_id: &str, bytes: u64) -> i32 {
        self.record_at(kind, client_id, bytes, Instant::now())
    }

    fn record_at(&self, kind: Kind, client_id: &str, bytes: u64, now: Instant) -> i32 {
        let Some(rate) = self.rate(kind).filter(|r| *r > 0) else { return 0 };
        let rate = rate as f64;
        let mut m = self.buckets.lock().or_die();
        if m.len() > 100_000 {
            // forget idle clients rather than grow without bound
            m.retain(|_, b| now.duration_since(b.at).as_secs() < 60);
        }
        let b = m.entry((kind, client_id.to_string())).or_insert(Bucket { tokens: rate, at: now });
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + elapsed * rate).min(rate);
        b.at = now;
        b.tokens -= bytes as f64;
        if b.tokens >= 0.0 {
            0
        } else {
            ((-b.tokens / rate) * 1000.0).min(THROTTLE_MAX_MS).ceil() as i32
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn throttle_time_pays_back_the_debt() {
        let q = Quotas::new(Some(1000), None);
        let t0 = Instant::now();
        assert_eq!(q.record_at(Kind::Produce, "c", 1000, t0), 0, "one second of burst");
        assert_eq!(q.record_at(Kind::Produce, "c", 500, t0), 500);
        assert_eq!(q.record_at(Kind::Produce, "other", 500, t0), 0, "per client id");
        // after the throttle time the debt is paid
        assert_eq!(q.record_at(Kind::Produce, "c", 0, t0 + Duration::from_millis(500)), 0);
        assert_eq!(q.record_at(Kind::Fetch, "c", 1 << 30, t0), 0, "no fetch quota configured");
        assert_eq!(q.record_at(Kind::Produce, "c", 1 << 40, t0), 30_000, "capped");
    }
}
