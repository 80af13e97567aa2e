//! A job's first start in a cluster catches up no tick from before it existed (a
//! nightly job deployed at 23:50 does not run the night's tick 21 hours late), while a
//! job the cluster already knew catches up what an outage missed, as its catch-up
//! window says.
//!
//! On the in-memory store, on paused tokio time.

mod support;

use std::time::Duration;

use chrono::{DateTime, Utc};
use scheduler_core::{LeaseName, Scope, Store};
use support::{Log, Probe, builder, runs};

/// A store on which no job ran yet, its clock half a minute before a minute's
/// tick (on the system's clock, a run of a second started in the last second of a
/// minute saw that minute's tick: one run in sixty failed).
fn store() -> std::sync::Arc<scheduler_core::MemoryStore> {
    let start = "2026-12-04T10:00:30Z"
        .parse()
        .unwrap_or_else(|e| panic!("{e}"));
    let clock = scheduler_core::LocalClock::starting_at(start);
    std::sync::Arc::new(scheduler_core::MemoryStore::with_clock(clock))
}

/// Runs a scheduler with a minute-long job `nightly` (catch-up window: one period)
/// on `store` for `seconds`, returning when it started on the store's clock.
async fn run_for(
    store: &std::sync::Arc<scheduler_core::MemoryStore>,
    log: &Log,
    seconds: u64,
) -> DateTime<Utc> {
    let mut job = Probe::new("nightly", store, log);
    job.every = Duration::from_secs(60);
    let started = store.now().await.unwrap_or_default();
    let scheduler = builder(store)
        .job(job)
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    scheduler
        .run_until(tokio::time::sleep(Duration::from_secs(seconds)))
        .await;
    started
}

#[tokio::test(start_paused = true)]
async fn a_fresh_cluster_runs_no_tick_from_before_the_start() {
    let (store, log) = (store(), Log::default());
    let started = run_for(&store, &log, 5).await;
    let early: Vec<_> = runs(&log, "nightly")
        .into_iter()
        .filter(|r| r.tick < started)
        .collect();
    assert!(
        early.is_empty(),
        "a tick from before the job existed ran: {early:?}"
    );
    // The lease now has a row: the job is known to the cluster from here on.
    let name = LeaseName::for_job("nightly", Scope::Cluster, "").unwrap_or_else(|e| panic!("{e}"));
    let created = store
        .create_missing(&[name])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(created.is_empty(), "the row was not kept: {created:?}");
}

#[tokio::test(start_paused = true)]
async fn a_known_job_catches_up_the_tick_an_outage_missed() {
    let (store, log) = (store(), Log::default());
    // Started, then every instance down before its first tick: the tick that fell
    // while nothing ran is the job's, and is caught up at the next start.
    run_for(&store, &log, 1).await;
    assert!(runs(&log, "nightly").is_empty());
    tokio::time::sleep(Duration::from_secs(90)).await;
    let restarted = run_for(&store, &log, 1).await;
    let caught_up: Vec<_> = runs(&log, "nightly")
        .into_iter()
        .filter(|r| r.tick < restarted)
        .collect();
    assert_eq!(caught_up.len(), 1, "{caught_up:?}");
}
