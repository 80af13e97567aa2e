//! Shutdown waits for running jobs up to the grace, then cancels the rest and
//! releases every lease at once.
//!
//! On the in-memory store, on paused tokio time.

mod support;

use std::time::Duration;

use scheduler_core::{LeaseName, Outcome, Store};
use support::{Log, Probe, builder, runs, store};

#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_the_grace_then_cancels_and_releases_at_once() {
    let (store, log) = (store(), Log::default());
    let mut long = Probe::new("long", &store, &log);
    long.every = Duration::from_secs(3600);
    long.catch_up = Some(Duration::from_secs(3600));
    long.work = Duration::from_secs(600);
    let mut short = Probe::new("short", &store, &log);
    short.every = Duration::from_secs(3600);
    short.catch_up = Some(Duration::from_secs(3600));
    short.work = Duration::from_secs(2);
    let scheduler = builder(&store)
        .shutdown_grace(Duration::from_secs(5))
        .job(long)
        .job(short)
        .build()
        .expect("build");
    let stats = scheduler.stats();
    let began = tokio::time::Instant::now();
    scheduler
        .run_until(tokio::time::sleep(Duration::from_millis(500)))
        .await;
    let took = began.elapsed();
    assert_eq!(
        (
            stats.count("short", Outcome::Succeeded),
            stats.count("long", Outcome::Failed)
        ),
        (1, 1)
    );
    assert!(
        took >= Duration::from_millis(5_400) && took < Duration::from_secs(8),
        "{took:?}"
    );
    assert!(
        !runs(&log, "short")[0].cancelled,
        "the short job finished within the grace"
    );
    assert!(
        runs(&log, "long")[0].cancelled,
        "the long job was cancelled"
    );
    let now = store.now().await.expect("now");
    for name in ["long", "short"] {
        let row = store.row(&LeaseName::new(name).expect("n")).expect("row");
        assert!(row.expires_at <= now, "{name} was not released");
    }
    // The finished tick is done; the interrupted one can be retried at once.
    assert!(
        store
            .row(&LeaseName::new("short").expect("n"))
            .expect("row")
            .completed
    );
    assert!(
        !store
            .row(&LeaseName::new("long").expect("n"))
            .expect("row")
            .completed
    );
}
