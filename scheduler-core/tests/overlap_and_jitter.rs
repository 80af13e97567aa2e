//! A job never overlaps itself (a tick due while it runs is skipped), and jitter
//! delays a run within its bound.
//!
//! On the in-memory store, on paused tokio time.

mod support;

use std::time::Duration;

use chrono::TimeDelta;
use scheduler_core::Outcome;
use support::{Log, Probe, builder, runs, store};

#[tokio::test(start_paused = true)]
async fn a_job_never_overlaps_itself() {
    let (store, log) = (store(), Log::default());
    let mut slow = Probe::new("slow", &store, &log);
    slow.work = Duration::from_millis(2_500);
    let scheduler = builder(&store).job(slow).build().expect("build");
    let stats = scheduler.stats();
    scheduler
        .run_until(tokio::time::sleep(Duration::from_millis(9_900)))
        .await;
    let all = runs(&log, "slow");
    for pair in all.windows(2) {
        assert!(
            pair[1].started >= pair[0].started + TimeDelta::milliseconds(2_500),
            "{all:?}"
        );
    }
    assert!(
        stats.count("slow", Outcome::SkippedOverlap) >= 4,
        "{}",
        stats.count("slow", Outcome::SkippedOverlap)
    );
    assert!(stats.count("slow", Outcome::Ran) >= 2);
}

#[tokio::test(start_paused = true)]
async fn jitter_delays_within_its_bound() {
    let (store, log) = (store(), Log::default());
    let mut jittery = Probe::new("jittery", &store, &log);
    jittery.every = Duration::from_secs(2);
    jittery.jitter = Duration::from_millis(700);
    let scheduler = builder(&store).job(jittery).build().expect("build");
    scheduler
        .run_until(tokio::time::sleep(Duration::from_secs(60)))
        .await;
    let all = runs(&log, "jittery");
    assert!(all.len() >= 25);
    // (The first run catches up the tick due at start.)
    let delays: Vec<i64> = all
        .iter()
        .skip(1)
        .map(|r| (r.started - r.tick).num_milliseconds())
        .collect();
    assert!(delays.iter().all(|d| (0..=710).contains(d)), "{delays:?}");
    assert!(
        delays.iter().any(|d| *d > 50),
        "jitter never delayed anything: {delays:?}"
    );
}
