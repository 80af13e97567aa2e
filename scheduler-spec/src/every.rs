//! Periodic ticks aligned to the Unix epoch.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::error::{Error, Result};

/// Ticks at whole multiples of a period since the Unix epoch: every 30 s ticks at :00
/// and :30 of each minute, so every instance agrees on tick boundaries without talking
/// to the others. The period counts in whole milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Every {
    ms: i64,
}

impl Every {
    /// Ticks every `period`, truncated to whole milliseconds.
    ///
    /// # Errors
    /// [`Error::PeriodTooShort`] if `period` is shorter than a millisecond.
    pub fn new(period: Duration) -> Result<Self> {
        let ms = i64::try_from(period.as_millis()).unwrap_or(i64::MAX);
        if ms < 1 {
            return Err(Error::PeriodTooShort { period });
        }
        Ok(Self { ms })
    }

    /// The period, in whole milliseconds.
    pub fn period_ms(&self) -> i64 {
        self.ms
    }

    /// The first tick strictly after `after`; `None` only past the range of
    /// [`DateTime`].
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let t = after.timestamp_millis();
        let next = t.div_euclid(self.ms).checked_add(1)?.checked_mul(self.ms)?;
        DateTime::from_timestamp_millis(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn ticks_are_aligned_to_the_epoch() {
        let every = Every::new(Duration::from_secs(30)).unwrap();
        assert_eq!(
            every.next_after(utc("2026-11-30T10:00:07.5Z")),
            Some(utc("2026-11-30T10:00:30Z"))
        );
        assert_eq!(
            every.next_after(utc("2026-11-30T10:00:30Z")),
            Some(utc("2026-11-30T10:01:00Z"))
        );
        assert_eq!(
            every.next_after(utc("1969-12-31T23:59:59Z")),
            Some(DateTime::UNIX_EPOCH)
        );
        assert_eq!(every.next_after(DateTime::<Utc>::MAX_UTC), None);
    }

    #[test]
    fn a_period_needs_a_millisecond() {
        assert_eq!(
            Every::new(Duration::from_micros(999)),
            Err(Error::PeriodTooShort {
                period: Duration::from_micros(999)
            })
        );
        assert_eq!(
            Every::new(Duration::from_millis(1)).map(|e| e.period_ms()),
            Ok(1)
        );
        assert_eq!(
            Every::new(Duration::MAX).map(|e| e.period_ms()),
            Ok(i64::MAX)
        );
    }
}
