//! The readiness probe reports the store and the loop: a failing store, a store
//! call that never answers (abandoned while the loop keeps turning), the recovery.
//!
//! On the in-memory store, on paused tokio time.

mod support;

use std::time::Duration;

use chrono::TimeDelta;
use support::{Log, Probe, builder, runs, store};

#[tokio::test(start_paused = true)]
async fn health_reports_the_store_and_the_loop() {
    let (store, log) = (store(), Log::default());
    let scheduler = builder(&store)
        .job(Probe::new("p", &store, &log))
        .build()
        .expect("build");
    let health = scheduler.health();
    assert!(
        !health.check(Duration::from_secs(1)).await.scheduler,
        "not started yet"
    );
    let probe = async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let up = health.check(Duration::from_secs(1)).await;
        store.set_failing(true);
        let down = health.check(Duration::from_secs(1)).await;
        // The loop's own takes fail from its next tick on, and keep failing.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let failing = health.check(Duration::from_secs(1)).await;
        store.set_failing(false);
        // The loop retries after its backoff (full jitter, up to 10 s): wait for it.
        let mut recovered = health.check(Duration::from_secs(1)).await;
        for _ in 0..40 {
            if recovered.store_failing_for.is_none() && recovered.scheduler {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            recovered = health.check(Duration::from_secs(1)).await;
        }
        (up, down, failing, recovered)
    };
    let (_, (up, down, failing, recovered)) = tokio::join!(
        scheduler.run_until(tokio::time::sleep(Duration::from_secs(40))),
        probe
    );
    assert!(up.is_healthy(), "{up:?}");
    assert_eq!(up.store_failing_for, None);
    assert!(!down.database && down.scheduler, "{down:?}");
    let streak = failing
        .store_failing_for
        .expect("the loop's takes were failing");
    assert!(
        streak >= Duration::from_secs(1) && streak <= Duration::from_secs(3),
        "failing for {streak:?}"
    );
    assert_eq!(
        failing.store_problem,
        Some(scheduler_core::StoreFailure::Unreachable),
        "{failing:?}"
    );
    assert!(recovered.is_healthy(), "{recovered:?}");
    assert_eq!(recovered.store_failing_for, None, "the streak ended");
    assert_eq!(recovered.store_problem, None, "{recovered:?}");
}

#[tokio::test(start_paused = true)]
async fn a_store_call_that_never_answers_is_abandoned_and_the_loop_goes_on() {
    // A connection cut without a close: the clock read never answers (an hour is
    // forever here). The loop abandons it after its call limit (two renewal periods:
    // 2 s with a 4 s ttl), counts a store failure and keeps turning.
    let (store, log) = (store(), Log::default());
    let scheduler = builder(&store)
        .job(Probe::new("cut", &store, &log))
        .build()
        .expect("build");
    let health = scheduler.health();
    let cut = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        store.set_clock_delay(Duration::from_secs(3600));
        tokio::time::sleep(Duration::from_secs(8)).await;
        let during = health.check(Duration::from_millis(100)).await;
        store.set_clock_delay(Duration::ZERO);
        tokio::time::sleep(Duration::from_secs(8)).await;
        let after = health.check(Duration::from_millis(100)).await;
        (during, after)
    };
    let (_, (during, after)) = tokio::join!(
        scheduler.run_until(tokio::time::sleep(Duration::from_secs(20))),
        cut
    );
    assert!(during.scheduler, "the loop kept turning: {during:?}");
    assert!(!during.database, "{during:?}");
    assert!(after.is_healthy(), "{after:?}");
    assert_eq!(after.store_failing_for, None, "{after:?}");
    // Takes kept working while clock reads hung: ticks ran all through the cut (a
    // few are missed while the loop waits out a hung read's limit).
    let all = runs(&log, "cut");
    let first = all.first().map(|r| r.tick).expect("runs");
    let during_cut = all
        .iter()
        .filter(|r| {
            r.tick >= first + TimeDelta::seconds(5) && r.tick <= first + TimeDelta::seconds(10)
        })
        .count();
    assert!(during_cut >= 3, "{all:?}");
}

#[tokio::test(start_paused = true)]
async fn an_hourly_job_keeps_the_loop_beating_between_its_ticks() {
    // An instance that holds nothing sends nothing to the store between ticks, but
    // its loop still turns at least once a renewal period: readiness stays green.
    let (store, log) = (store(), Log::default());
    let mut hourly = Probe::new("hourly", &store, &log);
    hourly.every = Duration::from_secs(3600);
    let scheduler = builder(&store).job(hourly).build().expect("build");
    let health = scheduler.health();
    let probe = async {
        let mut reports = Vec::new();
        for _ in 0..6 {
            tokio::time::sleep(Duration::from_secs(300)).await;
            reports.push(health.check(Duration::from_secs(1)).await);
        }
        reports
    };
    let (_, reports) = tokio::join!(
        scheduler.run_until(tokio::time::sleep(Duration::from_secs(1900))),
        probe
    );
    for (k, r) in reports.iter().enumerate() {
        assert!(r.is_healthy(), "check {k}: {r:?}");
    }
}
