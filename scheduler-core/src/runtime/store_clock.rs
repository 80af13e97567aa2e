//! The store's clock as seen from here: an offset estimated from timed clock reads.
//! Each read bounds the offset from below (the read happened before its answer
//! arrived) and from above (after the request was sent); the estimate is the
//! tightest lower bound, loosened as it ages by what the two clocks may drift apart,
//! so it errs late, never early.

use chrono::{DateTime, TimeDelta, Utc};

/// How fast the two clocks may drift apart, in millionths: a bound loosens by this
/// much of its age (0.1 ms a second), up to [`DRIFT_MOST`]. (The engine reads the
/// store's clock on its own when no sample has been taken for a minute.)
const DRIFT_PPM: i64 = 100;

/// The most a bound loosens with age, in microseconds: a tick's take samples the
/// clock again anyway, and a sample at most this much looser than an old bound
/// replaces it (an idle instance's hourly take keeps the estimate fresh without a
/// read of its own).
const DRIFT_MOST: i64 = 10_000;

/// The offset of the store's clock from the local one.
#[derive(Debug, Clone, Default)]
pub(crate) struct StoreClock {
    /// The tightest lower bound of (store clock − local clock) known, and the local
    /// time it was read at.
    bound: Option<(TimeDelta, DateTime<Utc>)>,
}

/// What became of a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sample {
    /// Taken: the offset is now this.
    Taken { offset: TimeDelta, moved: bool },
    /// Looser than the estimate (a longer round trip, or the read early in a long
    /// one): the estimate stands.
    Looser { rtt: TimeDelta },
}

impl StoreClock {
    /// The store's time when the local clock reads `local`.
    pub(crate) fn store_time(&self, local: DateTime<Utc>) -> DateTime<Utc> {
        local + self.offset_at(local)
    }

    /// The estimated offset at local time `local`: the bound, loosened by its age.
    fn offset_at(&self, local: DateTime<Utc>) -> TimeDelta {
        match self.bound {
            None => TimeDelta::zero(),
            Some((offset, at)) => {
                let age = (local - at).max(TimeDelta::zero());
                let drift = age
                    .num_microseconds()
                    .unwrap_or(i64::MAX)
                    .saturating_mul(DRIFT_PPM)
                    / 1_000_000;
                let drift = drift.min(DRIFT_MOST);
                offset - TimeDelta::microseconds(drift)
            }
        }
    }

    /// A clock read: the local clock read `before` and `after` the call, the store
    /// answered `store`. The read happened somewhere within the round trip, so the
    /// offset is at least `store − after` and at most `store − before`. The estimate
    /// moves to the lower bound when that is tighter than the estimate (loosened by
    /// its age), or when the upper bound shows the estimate wrong (the store's clock
    /// stepped back); else it stands. So the estimate of the store's time errs late,
    /// never early: a tick is not taken, nor its run begun, before its instant on
    /// the store's clock. A read stuck behind a pool wait or a long statement
    /// tightens nothing; a store should read its clock as late in a call as it can
    /// (PostgreSQL's take: the last row's `clock_timestamp()`).
    pub(crate) fn sample(
        &mut self,
        before: DateTime<Utc>,
        after: DateTime<Utc>,
        store: DateTime<Utc>,
    ) -> Sample {
        let (lower, upper) = (store - after, store - before);
        let current = self.bound.map(|_| self.offset_at(after));
        if let Some(current) = current
            && lower < current
            && upper >= current
        {
            return Sample::Looser {
                rtt: after - before,
            };
        }
        self.bound = Some((lower, after));
        let moved = current.is_none_or(|c| (lower - c).num_milliseconds().abs() > 1000);
        Sample::Taken {
            offset: lower,
            moved,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ms(v: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(v).unwrap()
    }

    /// A read sent at local `sent`, taking `rtt` ms, answered by a store whose clock
    /// is `ahead` ms ahead, read at the end of the round trip.
    fn read(c: &mut StoreClock, sent: i64, rtt: i64, ahead: i64) -> Sample {
        c.sample(ms(sent), ms(sent + rtt), ms(sent + rtt + ahead))
    }

    #[test]
    fn the_offset_errs_late_by_at_most_the_round_trip() {
        let mut c = StoreClock::default();
        // Read at the start of a 10 ms round trip (a take's `now()`): estimated 10 ms
        // late, never early.
        assert_eq!(
            c.sample(ms(1000), ms(1010), ms(3500)),
            Sample::Taken {
                offset: TimeDelta::milliseconds(2490),
                moved: true
            }
        );
        let mut c = StoreClock::default();
        assert_eq!(
            read(&mut c, 1000, 10, 2500),
            Sample::Taken {
                offset: TimeDelta::milliseconds(2500),
                moved: true
            }
        );
        assert_eq!(c.store_time(ms(1010)), ms(3510));
    }

    #[test]
    fn a_read_early_in_a_long_round_trip_tightens_nothing() {
        let mut c = StoreClock::default();
        read(&mut c, 0, 10, 0);
        read(&mut c, 100, 4, 0);
        // Read at the start of 4 s (a pool wait after it, or a long statement): as a
        // bound it is 4 s looser.
        let stuck = c.sample(ms(1000), ms(5000), ms(1000));
        assert!(matches!(stuck, Sample::Looser { .. }), "{stuck:?}");
        assert_eq!(c.store_time(ms(104)), ms(104));
    }

    #[test]
    fn a_tighter_read_is_taken_whatever_its_round_trip() {
        let mut c = StoreClock::default();
        // The first read pays for the connection's set-up, read early in it.
        read(&mut c, 0, 40, -40);
        assert_eq!(c.store_time(ms(40)), ms(0));
        // A quick read on the warm connection: tighter.
        assert!(matches!(read(&mut c, 100, 4, 0), Sample::Taken { .. }));
        assert_eq!(c.store_time(ms(104)), ms(104));
        // A long statement's read at its end (PostgreSQL's take of 10,000 names):
        // as tight as its way back, taken although its round trip was 250 ms.
        assert!(matches!(
            c.sample(ms(1000), ms(1250), ms(1250 + 3)),
            Sample::Taken { .. }
        ));
        assert_eq!(c.store_time(ms(1250)), ms(1253));
    }

    #[test]
    fn a_store_clock_stepped_back_is_followed_at_once() {
        let mut c = StoreClock::default();
        read(&mut c, 0, 2, 0);
        // The store's clock is now 500 ms behind: the read's upper bound is below
        // the estimate, which cannot be right any more.
        let stepped = read(&mut c, 1000, 4, -500);
        assert!(matches!(stepped, Sample::Taken { .. }), "{stepped:?}");
        assert_eq!(c.store_time(ms(1004)), ms(504));
    }

    #[test]
    fn the_estimate_loosens_with_its_age_by_the_drift_allowed() {
        let mut c = StoreClock::default();
        read(&mut c, 0, 2, 0);
        // A minute later: 6 ms later than the bound itself (100 millionths of 60 s).
        assert_eq!(c.store_time(ms(60_002)), ms(60_002 - 6));
        // A looser read then does not replace it, a tighter one does.
        assert!(matches!(
            read(&mut c, 60_000, 20, -10),
            Sample::Looser { .. }
        ));
        assert!(matches!(read(&mut c, 60_100, 2, 0), Sample::Taken { .. }));
        assert_eq!(c.store_time(ms(60_102)), ms(60_102));
        // An hour on: 10 ms at most, and a read 8 ms looser than the old bound is
        // taken.
        assert_eq!(c.store_time(ms(3_660_102)), ms(3_660_102 - 10));
        assert!(matches!(
            read(&mut c, 3_660_000, 10, -8),
            Sample::Taken { .. }
        ));
    }
}
