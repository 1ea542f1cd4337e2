//! Retrying after a transient failure: the one exponential backoff with jitter, the one
//! random source behind every jitter, and which HTTP answers are worth sending again.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::Duration;

/// Exponential backoff with equal jitter: the delay before retry `attempt + 1` is a
/// random wait in the upper half of `base · 2^attempt`, capped at `max`, so callers that
/// failed together do not retry together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first delay (before jitter); each retry doubles it.
    pub base: Duration,
    /// The most any delay grows to.
    pub max: Duration,
}

impl Backoff {
    /// The delay before retry `attempt + 1` (`attempt` counts from 0): in
    /// `[full / 2, full]`, `full` being `base · 2^attempt` capped at `max`.
    pub fn delay(&self, attempt: u32) -> Duration {
        let full = self
            .base
            .saturating_mul(1u32 << attempt.min(16))
            .min(self.max);
        let half = full / 2;
        half + random_below(full - half)
    }
}

/// When a failed attempt is tried again: after the backoff's wait (or the server's own,
/// a `Retry-After`), as long as neither limit is reached. The one retry policy of the API
/// client (`retry_for`) and the notifications (`retries`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// How long to wait before each retry.
    pub backoff: Backoff,
    /// The most retries after the first attempt.
    pub retries: u32,
    /// No retry starts later than this after the first attempt.
    pub within: Duration,
}

impl Policy {
    /// The wait before retry `attempt + 1` (`attempt` counts from 0) of an operation that
    /// started `elapsed` ago, or `None` when the policy gives up; `server_wait` replaces the
    /// backoff's wait.
    pub fn next(
        &self,
        attempt: u32,
        elapsed: Duration,
        server_wait: Option<Duration>,
    ) -> Option<Duration> {
        if attempt >= self.retries {
            return None;
        }
        let wait = server_wait.unwrap_or_else(|| self.backoff.delay(attempt));
        (elapsed.saturating_add(wait) <= self.within).then_some(wait)
    }
}

/// A random duration in `[0, max)` (zero when `max` is): the one random source of every
/// jitter. Not for secrets: it only spreads out waits.
pub fn random_below(max: Duration) -> Duration {
    let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    if nanos == 0 {
        return Duration::ZERO;
    }
    // Each RandomState is keyed afresh (per thread from the OS, then incremented), and
    // the instant differs between calls.
    let random = RandomState::new().hash_one(std::time::Instant::now());
    Duration::from_nanos(random % nanos)
}

/// Whether the API server's answer `status` is worth sending again: 429 and the 5xx a
/// busy, restarting or leader-changing API server gives (500, 502, 503, 504). Other 5xx
/// (501 Not Implemented, 505 …) would come back the same.
pub fn transient_status(status: u16) -> bool {
    matches!(status, 429 | 500 | 502 | 503 | 504)
}

/// Whether a notification receiver's answer `status` is worth sending again: 429 or any
/// 5xx. Wider than [`transient_status`] on purpose: a receiver is often behind a proxy
/// whose 5xx says nothing about the next attempt.
pub fn transient_receiver_status(status: u16) -> bool {
    status == 429 || (500..600).contains(&status)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_policy_gives_up_at_either_limit() {
        let backoff = super::Backoff {
            base: std::time::Duration::from_millis(100),
            max: std::time::Duration::from_secs(1),
        };
        let secs = std::time::Duration::from_secs;
        let counted = super::Policy {
            backoff,
            retries: 2,
            within: std::time::Duration::MAX,
        };
        assert!(counted.next(1, secs(0), None).is_some());
        assert_eq!(
            counted.next(2, secs(0), None),
            None,
            "two retries, then none"
        );
        let timed = super::Policy {
            backoff,
            retries: u32::MAX,
            within: secs(10),
        };
        assert_eq!(
            timed.next(0, secs(9), Some(secs(2))),
            None,
            "past the deadline"
        );
        assert_eq!(
            timed.next(0, secs(1), Some(secs(2))),
            Some(secs(2)),
            "the server's wait"
        );
    }

    use super::*;

    #[test]
    fn delays_double_with_jitter_in_the_upper_half_up_to_the_cap() {
        let backoff = Backoff {
            base: Duration::from_millis(200),
            max: Duration::from_secs(5),
        };
        for attempt in 0..10 {
            let full = (backoff.base * 2u32.pow(attempt)).min(backoff.max);
            for _ in 0..20 {
                let d = backoff.delay(attempt);
                assert!(d >= full / 2 && d <= full, "attempt {attempt}: {d:?}");
            }
        }
        assert!(backoff.delay(40) <= backoff.max);
        assert!(backoff.delay(u32::MAX) <= backoff.max);
    }

    #[test]
    fn random_below_stays_below() {
        assert_eq!(random_below(Duration::ZERO), Duration::ZERO);
        for _ in 0..100 {
            assert!(random_below(Duration::from_millis(3)) < Duration::from_millis(3));
        }
    }

    #[test]
    fn transient_statuses() {
        for s in [429, 500, 502, 503, 504] {
            assert!(transient_status(s) && transient_receiver_status(s), "{s}");
        }
        for s in [400, 404, 409, 422] {
            assert!(!transient_status(s) && !transient_receiver_status(s), "{s}");
        }
        assert!(!transient_status(501) && transient_receiver_status(501));
    }
}
