//! The instances of the cluster, as each keeps a row of its own alive: a
//! [`Heartbeat`] every [`heartbeat`](crate::SchedulerBuilder::heartbeat) interval,
//! read back as [`InstanceRow`]s ([`Controls::instances`](super::Controls::instances)).
//!
//! The rule the stores keep (and the registrations' expiry follows): an instance is
//! **live** while its row is not marked stopped and its `expires_at` (the last beat's
//! time plus three intervals, both on the store's clock) is still ahead.

use std::time::Duration;

use chrono::{DateTime, Utc};

/// How many heartbeat intervals an instance's row stays live after a beat: two beats
/// may fail or come late before the instance counts as gone.
pub const EXPIRY_BEATS: u32 = 3;

/// What an instance says of itself at each beat
/// ([`Controls::heartbeat`](super::Controls::heartbeat)).
///
/// The handlers and jobs it runs are not part of the beat: they are registered once,
/// at the instance's first control poll ([`register_handlers`], [`register_jobs`]),
/// and an [`InstanceRow`] lists the node's registrations. So a beat writes one row.
///
/// [`register_handlers`]: super::Controls::register_handlers
/// [`register_jobs`]: super::Controls::register_jobs
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    /// The instance's node id (the key of its row).
    pub node: String,
    /// The app's version if the builder was given one
    /// ([`app_version`](crate::SchedulerBuilder::app_version)), else scheduler-core's.
    pub version: String,
    /// When the scheduler started, on the store's clock as the instance knows it.
    pub started_at: DateTime<Utc>,
    /// The interval between beats: the row stays live for [`EXPIRY_BEATS`] of them
    /// after each.
    pub every: Duration,
}

impl Heartbeat {
    /// How long the row stays live after this beat: [`EXPIRY_BEATS`] × `every`, in
    /// whole microseconds (what both SQL stores keep), at most 100 years.
    pub fn expiry(&self) -> chrono::TimeDelta {
        let micros = self.every.saturating_mul(EXPIRY_BEATS).as_micros();
        let cap = 100 * 365 * 86_400 * 1_000_000_i64;
        chrono::TimeDelta::microseconds(i64::try_from(micros).unwrap_or(cap).min(cap))
    }
}

/// One instance, as its last heartbeat left it ([`Controls::instances`](super::Controls::instances)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceRow {
    /// The instance's node id.
    pub node: String,
    /// The version it runs (the app's, or scheduler-core's).
    pub version: String,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// Its last heartbeat, on the store's clock.
    pub seen_at: DateTime<Utc>,
    /// When it stops counting as live without another beat (`seen_at` +
    /// [`EXPIRY_BEATS`] × its interval), on the store's clock.
    pub expires_at: DateTime<Utc>,
    /// Whether it said it stopped (at its shutdown), since its last start.
    pub stopped: bool,
    /// The handlers of dynamic schedules its node registered, sorted.
    pub handlers: Vec<String>,
    /// The jobs (registered in code) its node registered, sorted.
    pub jobs: Vec<String>,
}

impl InstanceRow {
    /// Whether the instance is live at `now` (the store's clock, e.g.
    /// [`Store::now`](crate::Store::now)): not stopped, and not expired.
    pub fn is_live(&self, now: DateTime<Utc>) -> bool {
        !self.stopped && now < self.expires_at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(stopped: bool) -> InstanceRow {
        let at = DateTime::<Utc>::UNIX_EPOCH;
        InstanceRow {
            node: "a".into(),
            version: "1".into(),
            started_at: at,
            seen_at: at,
            expires_at: at + chrono::TimeDelta::seconds(30),
            stopped,
            handlers: Vec::new(),
            jobs: Vec::new(),
        }
    }

    #[test]
    fn an_instance_is_live_until_it_expires_or_stops() {
        let at = DateTime::<Utc>::UNIX_EPOCH;
        assert!(row(false).is_live(at + chrono::TimeDelta::seconds(29)));
        assert!(!row(false).is_live(at + chrono::TimeDelta::seconds(30)));
        assert!(!row(true).is_live(at));
    }

    #[test]
    fn a_beat_keeps_its_row_for_three_intervals() {
        let beat = Heartbeat {
            node: "a".into(),
            version: "1".into(),
            started_at: DateTime::<Utc>::UNIX_EPOCH,
            every: Duration::from_secs(10),
        };
        assert_eq!(beat.expiry(), chrono::TimeDelta::seconds(30));
        let huge = Heartbeat {
            every: Duration::MAX,
            ..beat
        };
        assert!(huge.expiry() > chrono::TimeDelta::days(365));
    }
}
