//! Ticks fire on the store's clock: neither a clock read stuck behind a pool wait
//! nor a skewed node clock moves the schedule.
//!
//! On the in-memory store, on paused tokio time.

mod support;

use std::time::Duration;

use chrono::TimeDelta;
use scheduler_core::Store;
use support::{Log, Probe, builder, runs, store};

#[tokio::test(start_paused = true)]
async fn a_clock_read_stuck_behind_a_pool_wait_does_not_move_the_schedule() {
    // A clock read that waits 4 s (for a pooled connection, a stalled server) reads
    // the store's clock at its end: taken at face value, the midpoint would put the
    // store 2 s ahead and every tick would be taken 2 s early.
    let (store, log) = (store(), Log::default());
    let scheduler = builder(&store)
        .job(Probe::new("on-time", &store, &log))
        .build()
        .expect("build");
    let stall = async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        store.set_clock_delay(Duration::from_secs(4));
        tokio::time::sleep(Duration::from_secs(9)).await;
        store.set_clock_delay(Duration::ZERO);
    };
    tokio::join!(
        scheduler.run_until(tokio::time::sleep(Duration::from_secs(16))),
        stall
    );
    let all = runs(&log, "on-time");
    assert!(all.len() >= 10, "{all:?}");
    for r in &all {
        let late = (r.started - r.tick).num_milliseconds();
        assert!(late >= 0, "tick {} ran {} ms early", r.tick, -late);
    }
}

#[tokio::test(start_paused = true)]
async fn a_skewed_node_clock_still_fires_on_the_store_clock() {
    let (store, log) = (store(), Log::default());
    let scheduler = builder(&store)
        .clock(scheduler_core::LocalClock::skewed(TimeDelta::seconds(7)))
        .job(Probe::new("skewed", &store, &log))
        .build()
        .expect("build");
    let start = store.now().await.expect("now");
    scheduler
        .run_until(tokio::time::sleep(Duration::from_millis(5_500)))
        .await;
    let all = runs(&log, "skewed");
    assert!(all.len() >= 5, "{all:?}");
    // (The tick due just before start is caught up at once; the rest fire on time.)
    for r in all.iter().filter(|r| r.tick > start) {
        let late = (r.started - r.tick).num_milliseconds();
        assert!(
            (0..100).contains(&late),
            "started {late} ms after its tick on the store clock"
        );
    }
}
