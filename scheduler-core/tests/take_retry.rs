//! A take whose answer never arrives, though the store applied it (the client gave
//! up, the connection broke after the commit), leaves no ghost holder: the retry of
//! the same tick asks as the same holder and is told it won.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use scheduler_core::{
    BoxError, Error, Idempotent, JobContext, LeaseKey, LeaseName, LocalClock, MemoryStore, Outcome,
    Release, Renewed, Schedule, Scheduler, Store, TakeRequest, Taken, Ttl,
};

/// Applies the first `lose` takes but answers them with an error.
#[derive(Debug)]
struct LostAnswers {
    inner: MemoryStore,
    lose: AtomicU32,
}

#[scheduler_core::async_trait]
impl Store for LostAnswers {
    async fn take(&self, requests: &[TakeRequest], ttl: Ttl) -> scheduler_core::Result<Taken> {
        let taken = self.inner.take(requests, ttl).await?;
        let left = self.lose.load(Ordering::SeqCst);
        if left > 0 && !taken.won.is_empty() {
            self.lose.store(left - 1, Ordering::SeqCst);
            return Err(Error::store(
                "the connection broke before the answer arrived",
            ));
        }
        Ok(taken)
    }
    async fn renew(&self, leases: &[LeaseKey], ttl: Ttl) -> scheduler_core::Result<Vec<Renewed>> {
        self.inner.renew(leases, ttl).await
    }
    async fn release(
        &self,
        leases: &[LeaseKey],
        how: Release,
    ) -> scheduler_core::Result<Vec<LeaseName>> {
        self.inner.release(leases, how).await
    }
    async fn now(&self) -> scheduler_core::Result<DateTime<Utc>> {
        self.inner.now().await
    }
}

struct Counted {
    runs: Arc<AtomicU32>,
}

#[scheduler_core::async_trait]
impl Idempotent for Counted {
    fn name(&self) -> &str {
        "hourly"
    }
    fn schedule(&self) -> Schedule {
        Schedule::every(Duration::from_secs(3600))
    }
    fn catch_up(&self) -> Option<Duration> {
        Some(Duration::from_secs(3600))
    }
    async fn run(&self, _ctx: JobContext) -> Result<(), BoxError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_take_applied_but_never_answered_is_won_by_its_retry() {
    // Ten minutes past an hour: the hourly job's next tick is not within the test's
    // 30 s (started at 18:59:55 wall time, its 19:00 tick ran too).
    let clock = LocalClock::starting_at(
        "2026-12-01T18:10:00Z"
            .parse()
            .unwrap_or_else(|e| panic!("{e}")),
    );
    let store = Arc::new(LostAnswers {
        inner: MemoryStore::with_clock(clock),
        lose: AtomicU32::new(1),
    });
    let runs = Arc::new(AtomicU32::new(0));
    // ttl 10 min: a ghost holder would keep the tick from running for that long.
    let scheduler = Scheduler::builder(store.clone())
        .node_id("a")
        .clock(clock)
        .lease_ttl(Duration::from_secs(600))
        .retry_backoff(Duration::from_millis(100), Duration::from_secs(1))
        .job(Counted { runs: runs.clone() })
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let stats = scheduler.stats();
    scheduler
        .run_until(tokio::time::sleep(Duration::from_secs(30)))
        .await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the tick ran once, at once");
    assert_eq!(stats.count("hourly", Outcome::HeldElsewhere), 0);
}
