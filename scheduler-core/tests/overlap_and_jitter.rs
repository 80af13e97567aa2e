//! A job never overlaps itself (a tick due while it runs is skipped), and jitter
//! delays a run within its bound.
//!
//! On the in-memory store, on paused tokio time.

mod support;

use std::time::Duration;

use chrono::{DurationRound, TimeDelta};
use scheduler_core::{Outcome, Scheduler};
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
    assert!(stats.count("slow", Outcome::Succeeded) >= 2);
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

/// Two instances; a job busy for 60 % of its period; a store that takes 210 ms to
/// answer each call (a loaded database). One instance starts late in a second and
/// catches that second's tick up at once, so its run overlaps the next tick: that
/// instance skips the next tick (its own run holds the lease), and the other one takes
/// it when it next asks after the lease is released. The delay carries over from tick
/// to tick; asked again every quarter window (250 ms) plus the round trip, the next run
/// started later each time until one tick missed its window (lateness 580, 712, 769,
/// … 987 ms, then a tick lost, over and over) — what the chaos suite's `report` job
/// did under CI load (runs 0.25, 0.5, 0.75 s late, then a missed tick). Asked every
/// sixteenth of the window, every tick after the catch-up runs, exactly once.
#[tokio::test(start_paused = true)]
async fn ticks_after_an_overrunning_run_are_not_lost_in_a_cluster() {
    let (memory, log) = (store(), Log::default());
    memory.set_latency(Duration::from_millis(210));
    // Started 950 ms into a second: the catch-up run starts about a second late.
    let into = i64::from(memory.clock().now().timestamp_subsec_millis());
    let wait = (950 - into).rem_euclid(1000);
    tokio::time::sleep(Duration::from_millis(u64::try_from(wait).unwrap_or(0))).await;
    let first = memory.clock().now();
    let instance = |node: &'static str| {
        let mut report = Probe::new("report", &memory, &log);
        report.work = Duration::from_millis(600);
        Scheduler::builder(memory.clone())
            .node_id(node)
            .lease_ttl(Duration::from_secs(2))
            .control_poll(None)
            .job(report)
            .build()
            .expect("build")
    };
    let (a, b) = (instance("node-a"), instance("node-b"));
    tokio::join!(
        a.run_until(tokio::time::sleep(Duration::from_secs(90))),
        b.run_until(tokio::time::sleep(Duration::from_secs(90)))
    );

    let all = runs(&log, "report");
    let ticks: Vec<_> = all.iter().map(|r| r.tick).collect();
    // From the first tick after the start to the last one that had time to run.
    let from = first.duration_trunc(TimeDelta::seconds(1)).expect("trunc") + TimeDelta::seconds(1);
    let to = first + TimeDelta::seconds(87);
    let mut expected = Vec::new();
    let mut t = from;
    while t <= to {
        expected.push(t);
        t += TimeDelta::seconds(1);
    }
    let ran: Vec<_> = ticks
        .iter()
        .copied()
        .filter(|t| (from..=to).contains(t))
        .collect();
    let late: Vec<i64> = all
        .iter()
        .map(|r| (r.started - r.tick).num_milliseconds())
        .collect();
    assert_eq!(
        ran, expected,
        "every tick once; lateness of each run (ms): {late:?}"
    );
}
