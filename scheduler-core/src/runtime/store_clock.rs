//! The store's clock as seen from here: an offset estimated from timed clock reads,
//! with reads whose round trip was too long to trust discarded.

use chrono::{DateTime, TimeDelta, Utc};

/// Clock samples with round trips up to this long are always taken.
const MAX_CLOCK_RTT: TimeDelta = TimeDelta::milliseconds(250);
/// How many long-round-trip samples in a row are discarded before one is taken anyway.
const CLOCK_DISCARDS: u32 = 5;

/// The offset of the store's clock from the local one.
#[derive(Debug, Clone, Default)]
pub(crate) struct StoreClock {
    /// Store clock minus local clock.
    offset: TimeDelta,
    /// The shortest round trip of a sample taken so far.
    best_rtt: Option<TimeDelta>,
    /// How many samples in a row were discarded for a long round trip.
    discarded: u32,
    /// How many samples were taken.
    taken: u32,
}

/// What became of a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sample {
    /// Taken: the offset is now this.
    Taken { offset: TimeDelta, moved: bool },
    /// Discarded: its round trip was too long compared with the best one.
    Discarded { rtt: TimeDelta, best: TimeDelta },
}

impl StoreClock {
    /// The store's time when the local clock reads `local`.
    pub(crate) fn store_time(&self, local: DateTime<Utc>) -> DateTime<Utc> {
        local + self.offset
    }

    /// A clock read: the local clock read `before` and `after` the call, the store
    /// answered `store`. The read happened somewhere within the round trip; it is
    /// taken to have happened at its end, so the estimate of the store's time errs
    /// late, by at most the round trip, and never early: a tick is not taken, nor
    /// its run begun, before its instant on the store's clock. (A take's `now()` is
    /// read at the statement's start: a midpoint would put the store ahead by half
    /// the statement.) A read stuck behind a pool wait or a
    /// stalled server would shift the schedule by seconds (and take ticks early): such
    /// a sample is discarded while a good offset is known, unless round trips stay
    /// long (the network changed).
    pub(crate) fn sample(
        &mut self,
        before: DateTime<Utc>,
        after: DateTime<Utc>,
        store: DateTime<Utc>,
    ) -> Sample {
        let rtt = after - before;
        if let Some(best) = self.best_rtt
            && rtt > best
            // The second sample (on a warm connection) replaces the first (which paid
            // for the connection's set-up) only if it is quicker.
            && (rtt > (best * 4).max(MAX_CLOCK_RTT) || (self.discarded == 0 && self.taken == 1))
            && self.discarded < CLOCK_DISCARDS
        {
            self.discarded += 1;
            return Sample::Discarded { rtt, best };
        }
        // After a run of long round trips the one taken becomes the new best.
        self.best_rtt = Some(match self.best_rtt {
            Some(best) if self.discarded < CLOCK_DISCARDS => best.min(rtt),
            _ => rtt,
        });
        self.discarded = 0;
        self.taken = self.taken.saturating_add(1);
        let offset = store - after;
        let moved = (offset - self.offset).num_milliseconds().abs() > 1000;
        self.offset = offset;
        Sample::Taken { offset, moved }
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
        assert_eq!(c.store_time(ms(0)), ms(2500));
    }

    #[test]
    fn a_read_stuck_behind_a_pool_wait_is_discarded() {
        let mut c = StoreClock::default();
        read(&mut c, 0, 10, 0);
        read(&mut c, 100, 4, 0);
        // 4 s in the pool, answered at the end: it would move the clock by 2 s.
        let stuck = c.sample(ms(1000), ms(5000), ms(5000));
        assert!(matches!(stuck, Sample::Discarded { .. }), "{stuck:?}");
        assert_eq!(c.store_time(ms(0)), ms(0));
    }

    #[test]
    fn long_round_trips_that_persist_are_taken_after_five() {
        let mut c = StoreClock::default();
        read(&mut c, 0, 6, 0);
        read(&mut c, 10, 4, 0);
        for i in 0..5 {
            assert!(matches!(
                read(&mut c, 1000 * (i + 1), 600, 100),
                Sample::Discarded { .. }
            ));
        }
        assert!(matches!(read(&mut c, 9000, 600, 100), Sample::Taken { .. }));
        assert_eq!(c.store_time(ms(0)), ms(100));
    }

    #[test]
    fn the_warm_second_read_replaces_a_slower_first() {
        let mut c = StoreClock::default();
        read(&mut c, 0, 40, 0);
        // Slower than the first: discarded.
        assert!(matches!(read(&mut c, 100, 50, 0), Sample::Discarded { .. }));
        let mut c = StoreClock::default();
        read(&mut c, 0, 40, 30);
        assert!(matches!(read(&mut c, 100, 4, 7), Sample::Taken { .. }));
        assert_eq!(c.store_time(ms(0)), ms(7));
    }
}
