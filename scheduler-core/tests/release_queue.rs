//! Releases that fail for a while are all delivered once the store answers again,
//! however many runs of one job ended in between.

use std::sync::Arc;
use std::time::Duration;

use scheduler_core::{
    BoxError, Idempotent, JobContext, LeaseName, LocalClock, MemoryStore, Outcome, Schedule,
    Scheduler,
};

struct Brisk;

#[scheduler_core::async_trait]
impl Idempotent for Brisk {
    fn name(&self) -> &str {
        "brisk"
    }
    fn schedule(&self) -> Schedule {
        Schedule::every(Duration::from_secs(1))
    }
    async fn run(&self, _ctx: JobContext) -> Result<(), BoxError> {
        tokio::time::sleep(Duration::from_millis(10)).await;
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn releases_queued_for_two_runs_of_one_job_are_all_delivered() {
    // The store's clock starts on a whole second, so the row is read at half past (12.5
    // s in), long after the last tick's run was released. (On the system clock, a start
    // late in a second made that read land during the last run: a flake, 3 in 40.)
    let start = chrono::DateTime::from_timestamp(1_774_699_200, 0).unwrap_or_default();
    let store = Arc::new(MemoryStore::with_clock(LocalClock::starting_at(start)));
    // ttl 2 s: a run whose release failed holds its lease 2 s, then the next tick is
    // taken by a new holder, whose release is queued behind the first.
    let scheduler = Scheduler::builder(store.clone())
        .node_id("a")
        .lease_ttl(Duration::from_secs(2))
        .retry_backoff(Duration::from_millis(100), Duration::from_millis(200))
        .job(Brisk)
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let stats = scheduler.stats();
    let health = scheduler.health();
    let name = LeaseName::new("brisk").unwrap_or_else(|e| panic!("{e}"));
    let watch = store.clone();
    let faults = async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        watch.set_failing_releases(true);
        tokio::time::sleep(Duration::from_secs(6)).await;
        let ran_during = stats.count("brisk", Outcome::Succeeded);
        watch.set_failing_releases(false);
        tokio::time::sleep(Duration::from_secs(5)).await;
        let row = watch.row(&name);
        let report = health.check(Duration::from_millis(100)).await;
        (ran_during, row, report)
    };
    let (_, (ran_during, row, report)) = tokio::join!(
        scheduler.run_until(tokio::time::sleep(Duration::from_millis(12_500))),
        faults
    );
    assert!(
        ran_during >= 3,
        "runs went on while releases failed: {ran_during}"
    );
    assert_eq!(
        report.store_failing_for, None,
        "releases still failing after the store recovered: {report:?}"
    );
    let row = row.unwrap_or_else(|| panic!("no row"));
    assert!(
        row.completed,
        "the last run was released as completed: {row:?}"
    );
}
