//! The process's own idea of the time, kept apart so tests can skew it or pause it.

use chrono::{DateTime, TimeDelta, Utc};
use tokio::time::Instant;

/// A wall clock that advances with tokio's clock.
///
/// It reads the system time once, at construction, and from then on adds the time
/// elapsed on tokio's monotonic clock. That makes it immune to the system clock
/// being stepped while the process runs, and lets tests drive it with tokio's paused
/// time (`#[tokio::test(start_paused = true)]`). A skew can be injected to play a
/// node whose clock is wrong: nothing that decides ownership reads this clock (the
/// store's clock does), so a skewed node must behave exactly like a correct one.
#[derive(Debug, Clone, Copy)]
pub struct LocalClock {
    wall: DateTime<Utc>,
    mono: Instant,
    skew: TimeDelta,
}

impl LocalClock {
    /// The system's clock.
    pub fn system() -> Self {
        Self::skewed(TimeDelta::zero())
    }

    /// The system's clock, off by `skew` (positive: ahead).
    pub fn skewed(skew: TimeDelta) -> Self {
        Self {
            wall: Utc::now(),
            mono: Instant::now(),
            skew,
        }
    }

    /// A clock that reads `at` now and advances with tokio's clock.
    pub fn starting_at(at: DateTime<Utc>) -> Self {
        Self {
            wall: at,
            mono: Instant::now(),
            skew: TimeDelta::zero(),
        }
    }

    /// The current time on this clock.
    pub fn now(&self) -> DateTime<Utc> {
        let elapsed = TimeDelta::from_std(self.mono.elapsed()).unwrap_or(TimeDelta::MAX);
        self.wall + elapsed + self.skew
    }

    /// The injected skew.
    pub fn skew(&self) -> TimeDelta {
        self.skew
    }
}

impl Default for LocalClock {
    fn default() -> Self {
        Self::system()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn advances_with_tokio_time_and_keeps_its_skew() {
        let at = DateTime::from_timestamp(1_700_000_000, 0).unwrap_or_default();
        let clock = LocalClock::starting_at(at);
        tokio::time::advance(Duration::from_secs(90)).await;
        assert_eq!(clock.now(), at + TimeDelta::seconds(90));

        let skewed = LocalClock::skewed(TimeDelta::seconds(-7));
        let plain = LocalClock::system();
        let diff = skewed.now() - plain.now();
        assert!(
            (diff + TimeDelta::seconds(7)).num_milliseconds().abs() < 50,
            "{diff}"
        );
    }
}
