//! On a fresh database a job runs no tick from before its start (an hourly job
//! deployed at 10:40 waits for 11:00, it does not run 10:00 forty minutes late),
//! while a job the database already knew catches up the tick it missed, as its
//! catch-up window says.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::{TimeDelta, Utc};
use scheduler_core::{
    BoxError, Idempotent, JobContext, LeaseName, Release, Schedule, Scheduler, Store, TakeRequest,
    Tick, Ttl,
};
use scheduler_sqlite::{SqliteOptions, SqliteStore};
use support::TempDir;

/// An hourly job (catch-up window: one period) that counts its runs.
struct Hourly(Arc<AtomicUsize>);

#[scheduler_core::async_trait]
impl Idempotent for Hourly {
    fn name(&self) -> &str {
        "hourly"
    }
    fn schedule(&self) -> Schedule {
        Schedule::every(Duration::from_secs(3600))
    }
    async fn run(&self, _ctx: JobContext) -> Result<(), BoxError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// Runs the hourly job on `store` for two seconds; how many times it ran.
async fn runs_in_two_seconds(store: &SqliteStore) -> usize {
    let ran = Arc::new(AtomicUsize::new(0));
    let scheduler = Scheduler::builder(store.clone())
        .node_id("node-a")
        .job(Hourly(ran.clone()))
        .build()
        .expect("build");
    scheduler
        .run_until(tokio::time::sleep(Duration::from_secs(2)))
        .await;
    ran.load(Ordering::SeqCst)
}

/// Waits past the top of the hour if it is a few seconds away (the next tick would
/// then fall during the test and run, rightly).
async fn away_from_the_hour() {
    let to_the_hour = 3_600 - Utc::now().timestamp().rem_euclid(3_600);
    if to_the_hour < 10 {
        tokio::time::sleep(Duration::from_secs(to_the_hour.unsigned_abs() + 1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_database_runs_no_tick_from_before_the_start() {
    away_from_the_hour().await;
    let dir = TempDir::new("first-start");
    let store = SqliteStore::open(dir.join("leases.db"), SqliteOptions::default())
        .await
        .expect("open");
    let before = store.now().await.expect("clock");
    assert_eq!(
        runs_in_two_seconds(&store).await,
        0,
        "the hour's tick ran late"
    );
    // The job is known from its start on: a row held by nobody, its tick the start.
    let leases = store
        .controls()
        .expect("controls")
        .leases()
        .await
        .expect("leases");
    let row = leases.iter().find(|l| l.name == "hourly").expect("a row");
    assert_eq!(row.holder, None, "{row:?}");
    assert!(row.tick >= before, "{row:?}");
    // A restart still runs nothing from before: the tick is older than the job.
    assert_eq!(runs_in_two_seconds(&store).await, 0, "ran at the restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_ran_before_catches_up_the_tick_it_missed() {
    away_from_the_hour().await;
    let dir = TempDir::new("known-start");
    let store = SqliteStore::open(dir.join("leases.db"), SqliteOptions::default())
        .await
        .expect("open");
    // Its tick of two hours ago ran; the last hour's fell while no instance ran.
    let now = store.now().await.expect("clock");
    let name = LeaseName::new("hourly").unwrap();
    let ttl = Ttl::new(Duration::from_secs(60)).unwrap();
    let request = TakeRequest::new(name, Tick::new(now - TimeDelta::hours(2)));
    let taken = store.take(&[request], ttl).await.expect("take");
    let keys: Vec<_> = taken.won.iter().map(|l| l.key()).collect();
    assert_eq!(keys.len(), 1);
    store
        .release(&keys, Release::Completed)
        .await
        .expect("release");
    assert_eq!(runs_in_two_seconds(&store).await, 1, "the missed tick");
}
