//! A store outage is retried, and each job's catch-up window decides whether the
//! tick that fell in it still runs.
//!
//! On the in-memory store, on paused tokio time.

mod support;

use std::time::Duration;

use chrono::{DateTime, TimeDelta};
use scheduler_core::{Outcome, Store};
use support::{Log, Probe, builder, runs, store};

#[tokio::test(start_paused = true)]
async fn an_outage_is_retried_and_the_catch_up_window_decides_what_runs() {
    let (store, log) = (store(), Log::default());
    let mut wide = Probe::new("wide", &store, &log);
    wide.every = Duration::from_secs(10);
    wide.catch_up = Some(Duration::from_secs(10));
    let mut narrow = Probe::new("narrow", &store, &log);
    narrow.every = Duration::from_secs(10);
    narrow.catch_up = Some(Duration::from_secs(1));
    let scheduler = builder(&store)
        .job(wide)
        .job(narrow)
        .build()
        .expect("build");
    let stats = scheduler.stats();
    let outage = {
        let store = store.clone();
        async move {
            // Let the first ticks pass, then fail for 3 s around the next one.
            let now = store.now().await.unwrap_or_default();
            let next = (now.timestamp() / 10 + 2) * 10;
            let until_next = (DateTime::from_timestamp(next, 0).unwrap_or_default() - now)
                .to_std()
                .unwrap_or_default();
            tokio::time::sleep(until_next - Duration::from_millis(500)).await;
            store.set_failing(true);
            tokio::time::sleep(Duration::from_secs(3)).await;
            store.set_failing(false);
            tokio::time::sleep(Duration::from_secs(15)).await;
        }
    };
    scheduler.run_until(outage).await;
    // The wide window caught up with the tick that fell in the outage, late but once.
    let wide = runs(&log, "wide");
    let late: Vec<_> = wide
        .iter()
        .skip(1)
        .filter(|r| r.started - r.tick > TimeDelta::seconds(2))
        .collect();
    assert_eq!(late.len(), 1, "{wide:?}");
    // The narrow window let it go: counted missed, and the next tick ran on time.
    assert_eq!(stats.count("narrow", Outcome::Missed), 1);
    let narrow = runs(&log, "narrow");
    assert!(
        narrow
            .iter()
            .skip(1)
            .all(|r| r.started - r.tick < TimeDelta::seconds(1)),
        "{narrow:?}"
    );
    assert!(narrow.len() >= 2);
}

/// A take sent in time but answered after the tick's window closed (the statement
/// held up by an outage or a lock) runs nothing: lateness is decided on the store's
/// clock when the answer comes, not when the take was sent.
#[tokio::test(start_paused = true)]
async fn a_take_answered_after_the_window_closed_runs_nothing() {
    let (store, log) = (store(), Log::default());
    // Every second, window one period; each take is applied and answered 1.5 s late.
    store.set_take_delay(Duration::from_millis(1_500));
    let scheduler = builder(&store)
        .job(Probe::new("tick", &store, &log))
        .build()
        .expect("build");
    let stats = scheduler.stats();
    scheduler
        .run_until(tokio::time::sleep(Duration::from_millis(8_500)))
        .await;
    for run in runs(&log, "tick") {
        assert!(
            run.started - run.tick <= TimeDelta::seconds(1),
            "tick {} started {} late, past its 1 s window",
            run.tick,
            run.started - run.tick
        );
    }
    assert!(
        stats.count("tick", Outcome::Missed) >= 3,
        "the late answers count as missed: {:?}",
        stats.count("tick", Outcome::Missed)
    );
}

/// A catch-up window as long as the user likes ("catch up forever":
/// `Duration::MAX`, beyond any date) runs like a long one: the latest missed tick at
/// start-up and after a resume ([`CatchUp::Latest`]), the most recent ones under
/// [`CatchUp::All`], without looking at every tick of the window. (It panicked with
/// "`DateTime - TimeDelta` overflowed" at start-up.)
#[tokio::test(start_paused = true)]
async fn a_catch_up_window_beyond_the_calendar_runs_like_a_long_one() {
    use scheduler_core::{CatchUp, ControlRequest, Controls, Policy};
    let (store, log) = (store(), Log::default());
    let mut forever = Probe::new("forever", &store, &log);
    forever.catch_up = Some(Duration::MAX);
    let mut all = Probe::new("all", &store, &log);
    all.every = Duration::from_millis(1);
    all.catch_up = Some(Duration::from_secs(400_000 * 365 * 86_400));
    let mut long = Probe::new("long", &store, &log);
    long.every = Duration::from_millis(1);
    long.catch_up = Some(Duration::from_secs(1_000 * 365 * 86_400));
    let scheduler = builder(&store)
        .control_poll(Some(Duration::from_millis(200)))
        .job(forever)
        .job_with_policy(all, Policy::default().catch_up(CatchUp::All { max: 3 }))
        .job(long)
        .build()
        .expect("build");
    let stats = scheduler.stats();
    let controls = {
        let store = store.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(2_500)).await;
            store
                .pause(&ControlRequest::new("forever", "test"))
                .await
                .expect("pause");
            tokio::time::sleep(Duration::from_secs(5)).await;
            store
                .resume(&ControlRequest::new("forever", "test"), true)
                .await
                .expect("resume");
            tokio::time::sleep(Duration::from_secs(3)).await;
        }
    };
    scheduler.run_until(controls).await;
    // At start-up the latest tick, then one a second; after the resume the latest
    // tick paused over, then one a second again.
    assert!(
        stats.count("forever", Outcome::Succeeded) >= 5,
        "{:?}",
        runs(&log, "forever")
    );
    assert!(stats.count("all", Outcome::Succeeded) >= 3);
    assert!(stats.count("long", Outcome::Succeeded) >= 3);
}
