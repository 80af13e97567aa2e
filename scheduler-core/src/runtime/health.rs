//! The readiness probe's view of the scheduler.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::StoreFailure;
use crate::store::Store;

/// A cloneable handle an app's readiness probe calls. A check is one short store
/// read plus an atomic load: it never waits on the scheduler's own work.
#[derive(Debug, Clone)]
pub struct Health {
    store: Arc<dyn Store>,
    beat: Arc<Heartbeat>,
    /// The loop wakes at least this often while it runs.
    period: Duration,
}

#[derive(Debug)]
pub(crate) struct Heartbeat {
    origin: Instant,
    /// Milliseconds since `origin` of the loop's last turn, plus one; 0: never.
    last: AtomicU64,
    /// Milliseconds since `origin` of the first failure of the loop's store operations
    /// since the last success, plus one; 0: not failing.
    failing_since: AtomicU64,
    /// The kind of the latest failure of the streak ([`failure_code`]).
    failure: AtomicU8,
}

fn failure_code(failure: StoreFailure) -> u8 {
    match failure {
        StoreFailure::Unreachable => 1,
        StoreFailure::ReadOnly => 2,
        StoreFailure::Other => 3,
    }
}

fn failure_of(code: u8) -> Option<StoreFailure> {
    match code {
        1 => Some(StoreFailure::Unreachable),
        2 => Some(StoreFailure::ReadOnly),
        3 => Some(StoreFailure::Other),
        _ => None,
    }
}

impl Heartbeat {
    fn stamp(&self) -> u64 {
        let ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        ms.saturating_add(1)
    }

    pub(crate) fn beat(&self) {
        self.last.store(self.stamp(), Ordering::Relaxed);
    }

    /// A store operation of the loop failed with `failure` (the first of a streak
    /// starts the clock).
    pub(crate) fn store_failed(&self, failure: StoreFailure) {
        self.failure.store(failure_code(failure), Ordering::Relaxed);
        let _ = self.failing_since.compare_exchange(
            0,
            self.stamp(),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// A store operation of the loop succeeded: the streak is over.
    pub(crate) fn store_ok(&self) {
        self.failing_since.store(0, Ordering::Relaxed);
        self.failure.store(0, Ordering::Relaxed);
    }

    fn since(&self, stamp: &AtomicU64) -> Option<Duration> {
        match stamp.load(Ordering::Relaxed) {
            0 => None,
            at => Some(
                self.origin
                    .elapsed()
                    .saturating_sub(Duration::from_millis(at - 1)),
            ),
        }
    }
}

/// The result of [`Health::check`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HealthReport {
    /// The store answered within the bound.
    pub database: bool,
    /// The scheduler's loop turned recently (it has started and is not stuck). It
    /// stays true while the loop only backs off from a failing store: backing off is
    /// the loop working as designed (it turns at least once a renewal period, and no
    /// retry waits longer than a quarter of the ttl); `store_failing_for` and
    /// `store_problem` say why.
    pub scheduler: bool,
    /// How long the loop's own store operations (takes, renewals, releases) have been
    /// failing, if they are; `None` while they succeed. A database that answers the
    /// clock read while every take fails (a lease table altered or dropped by hand, a
    /// read-only server, a missing grant) shows here, not in `database`. It is not
    /// part of [`is_healthy`](Self::is_healthy): taking every instance out of rotation
    /// because the scheduler cannot take leases would stop the app too; alert on it
    /// (or on the `scheduler.store.errors` metric) instead.
    pub store_failing_for: Option<Duration>,
    /// What the loop's failing store operations met, while they fail: the database
    /// unreachable, the database read-only (a standby, or an old primary back after
    /// a failover: `database` is true, it answers reads), or something else.
    pub store_problem: Option<StoreFailure>,
}

impl HealthReport {
    /// Both parts are healthy.
    pub fn is_healthy(&self) -> bool {
        self.database && self.scheduler
    }
}

impl Health {
    pub(crate) fn new(store: Arc<dyn Store>, period: Duration) -> Self {
        Self {
            store,
            beat: Arc::new(Heartbeat {
                origin: Instant::now(),
                last: AtomicU64::new(0),
                failing_since: AtomicU64::new(0),
                failure: AtomicU8::new(0),
            }),
            period,
        }
    }

    pub(crate) fn heartbeat(&self) -> Arc<Heartbeat> {
        self.beat.clone()
    }

    /// Checks that the store answers within `bound` and that the loop turned within
    /// two of its wake-up periods.
    pub async fn check(&self, bound: Duration) -> HealthReport {
        let database = matches!(
            tokio::time::timeout(bound, self.store.now()).await,
            Ok(Ok(_))
        );
        let scheduler = self
            .beat
            .since(&self.beat.last)
            .is_some_and(|age| age <= self.period.saturating_mul(2) + Duration::from_secs(1));
        let store_failing_for = self.beat.since(&self.beat.failing_since);
        HealthReport {
            database,
            scheduler,
            store_failing_for,
            store_problem: store_failing_for
                .and_then(|_| failure_of(self.beat.failure.load(Ordering::Relaxed))),
        }
    }
}
