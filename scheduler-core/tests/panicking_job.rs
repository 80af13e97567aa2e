//! A panicking job is reported as failed and releases its lease; the other jobs go
//! on.
//!
//! On the in-memory store, on paused tokio time.

mod support;

use std::time::Duration;

use scheduler_core::Outcome;
use support::{Log, Probe, builder, runs, store};

#[tokio::test(start_paused = true)]
async fn a_panicking_job_is_reported_and_the_others_go_on() {
    let (store, log) = (store(), Log::default());
    let mut bad = Probe::new("bad", &store, &log);
    bad.panic = true;
    let scheduler = builder(&store)
        .job(bad)
        .job(Probe::new("good", &store, &log))
        .build()
        .expect("build");
    let stats = scheduler.stats();
    scheduler
        .run_until(tokio::time::sleep(Duration::from_millis(5_500)))
        .await;
    assert!(stats.count("bad", Outcome::Failed) >= 4);
    assert!(runs(&log, "good").len() >= 5);
    // The panicked runs released their leases: every tick was attempted afresh.
    assert!(stats.count("bad", Outcome::HeldElsewhere) == 0);
}
