//! The readiness probe's view of the scheduler.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

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
}

impl Heartbeat {
    pub(crate) fn beat(&self) {
        let ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(ms.saturating_add(1), Ordering::Relaxed);
    }

    fn age(&self) -> Option<Duration> {
        match self.last.load(Ordering::Relaxed) {
            0 => None,
            last => Some(
                self.origin
                    .elapsed()
                    .saturating_sub(Duration::from_millis(last - 1)),
            ),
        }
    }
}

/// The result of [`Health::check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthReport {
    /// The store answered within the bound.
    pub database: bool,
    /// The scheduler's loop turned recently (it has started and is not stuck).
    pub scheduler: bool,
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
            .age()
            .is_some_and(|age| age <= self.period.saturating_mul(2) + Duration::from_secs(1));
        HealthReport {
            database,
            scheduler,
        }
    }
}
