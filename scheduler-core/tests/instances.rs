//! Each instance's heartbeat as the runtime keeps it: recorded at the first control
//! poll and then once per interval (not per tick), its row marked stopped at
//! shutdown, and a store that refuses heartbeats never stops the ticks.
//!
//! On the in-memory store, on paused tokio time.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use scheduler_core::{Controls, Error, InstanceRow, ScheduleRow, Scheduler, Store};
use support::{Faulty, Log, Probe, builder, mid_second, runs, store};

const POLL: Duration = Duration::from_millis(200);

async fn sleep(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

async fn row(store: &dyn Controls, node: &str) -> Option<InstanceRow> {
    store
        .instances()
        .await
        .expect("instances")
        .into_iter()
        .find(|r| r.node == node)
}

fn faulty(memory: &Arc<scheduler_core::MemoryStore>, failing: bool) -> Arc<Faulty> {
    let faulty = Faulty::over(memory.clone());
    faulty.failing_heartbeats.store(failing, Ordering::SeqCst);
    Arc::new(faulty)
}

#[tokio::test(start_paused = true)]
async fn the_heartbeat_is_refreshed_each_interval_and_says_stopped_at_shutdown() {
    let (memory, log) = (store(), Log::default());
    mid_second(&memory).await;
    let store = faulty(&memory, false);
    let scheduler = Scheduler::builder(store.clone())
        .node_id("node-a")
        .lease_ttl(Duration::from_secs(4))
        .control_poll(Some(POLL))
        .heartbeat(Duration::from_secs(2))
        .app_version("app-7.1")
        .handler(
            "count",
            |_ctx: scheduler_core::JobContext, _args: Arc<str>| async { Ok(()) },
        )
        .job(Probe::new("tick", &memory, &log))
        .build()
        .expect("build");
    let (m, s) = (memory.clone(), store.clone());
    let watcher = async move {
        sleep(500).await;
        let first = row(&*m, "node-a").await.expect("a row at the first poll");
        assert_eq!(first.version, "app-7.1");
        assert!(!first.stopped);
        assert!(first.is_live(m.now().await.expect("clock")));
        assert_eq!(
            first.expires_at - first.seen_at,
            chrono::TimeDelta::seconds(6)
        );
        assert_eq!(first.handlers, ["count"]);
        assert_eq!(first.jobs, ["tick"]);
        let beats = s.beats.load(Ordering::SeqCst);
        sleep(10_000).await;
        let later = row(&*m, "node-a").await.expect("row");
        assert!(
            later.seen_at > first.seen_at,
            "refreshed: {later:?} after {first:?}"
        );
        assert_eq!(later.started_at, first.started_at, "the same start");
        // One beat per 2 s interval, not one per 1 s tick nor per 200 ms poll.
        let sent = s.beats.load(Ordering::SeqCst) - beats;
        assert!((4..=6).contains(&sent), "{sent} beats in 10 s");
    };
    scheduler.run_until(watcher).await;
    assert!(runs(&log, "tick").len() >= 9, "the job ran meanwhile");
    let stopped = row(&*memory, "node-a").await.expect("the row stays");
    assert!(stopped.stopped, "{stopped:?}");
    assert!(!stopped.is_live(memory.now().await.expect("clock")));
    // Its handler no longer counts: no running instance has it.
    let refused = memory
        .put_schedule(&ScheduleRow::new("later", "count", "every 1m"), "ops", "")
        .await;
    assert!(
        matches!(refused, Err(Error::UnknownHandler { .. })),
        "{refused:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn failing_heartbeats_are_retried_and_never_stop_the_ticks() {
    let (memory, log) = (store(), Log::default());
    mid_second(&memory).await;
    let store = faulty(&memory, true);
    let scheduler = Scheduler::builder(store.clone())
        .node_id("node-a")
        .lease_ttl(Duration::from_secs(4))
        .control_poll(Some(POLL))
        .heartbeat(Duration::from_secs(2))
        .job(Probe::new("tick", &memory, &log))
        .build()
        .expect("build");
    let (m, s) = (memory.clone(), store.clone());
    let watcher = async move {
        sleep(10_000).await;
        assert_eq!(row(&*m, "node-a").await, None, "every beat failed");
        let tried = s.beats.load(Ordering::SeqCst);
        assert!(tried >= 5, "retried: {tried} tries in 10 s");
        // The store answers again: the next try records the row.
        s.failing_heartbeats.store(false, Ordering::SeqCst);
        sleep(3_000).await;
        let row = row(&*m, "node-a")
            .await
            .expect("recorded once the store answers");
        assert_eq!(row.version, env!("CARGO_PKG_VERSION"));
        assert!(!row.stopped);
    };
    scheduler.run_until(watcher).await;
    assert!(
        runs(&log, "tick").len() >= 12,
        "ticks ran through the failures: {}",
        runs(&log, "tick").len()
    );
}

#[test]
fn a_heartbeat_under_a_second_or_a_bad_version_is_refused_by_build() {
    let store = store();
    let err = builder(&store)
        .heartbeat(Duration::from_millis(500))
        .build()
        .err()
        .map(|e| e.to_string());
    assert_eq!(
        err.as_deref(),
        Some("the heartbeat interval 500ms is too short: use at least 1s")
    );
    let err = builder(&store)
        .app_version("1.0\n")
        .build()
        .err()
        .map(|e| e.to_string());
    assert_eq!(
        err.as_deref(),
        Some("the app version \"1.0\\n\" cannot be recorded: it holds a control character")
    );
    assert!(
        builder(&store)
            .heartbeat(Duration::from_secs(1))
            .build()
            .is_ok()
    );
}
