//! Exponential backoff with full jitter, for retrying the store.

use std::time::Duration;

/// Delays of `base * 2^n`, capped, each drawn uniformly from zero to that bound
/// ("full jitter"), so instances that lost the database together do not all come
/// back in the same instant.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    base: Duration,
    cap: Duration,
    failures: u32,
}

impl Backoff {
    pub(crate) fn new(base: Duration, cap: Duration) -> Self {
        Self {
            base,
            cap,
            failures: 0,
        }
    }

    /// The bound of the next delay (before jitter).
    pub(crate) fn ceiling(&self) -> Duration {
        let factor = 1u32.checked_shl(self.failures.min(16)).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// Records a failure and returns how long to wait before retrying.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let ceiling = self.ceiling();
        self.failures = self.failures.saturating_add(1);
        let ms = u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX);
        // Never zero: at least a millisecond, so a retry loop always yields.
        Duration::from_millis(crate::random::range(1..=ms.max(1)))
    }

    /// Records a success.
    pub(crate) fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_to_its_cap_with_jitter_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        let mut ceilings = Vec::new();
        for _ in 0..10 {
            let ceiling = b.ceiling();
            let delay = b.next_delay();
            assert!(
                delay >= Duration::from_millis(1) && delay <= ceiling,
                "{delay:?} > {ceiling:?}"
            );
            ceilings.push(ceiling.as_millis());
        }
        assert_eq!(
            ceilings,
            [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000, 5000]
        );
        b.reset();
        assert_eq!(b.ceiling(), Duration::from_millis(100));
        // Jitter: many draws are not all the same.
        let draws: std::collections::HashSet<_> = (0..50)
            .map(|_| {
                let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(1));
                b.next_delay()
            })
            .collect();
        assert!(draws.len() > 10);
    }
}
