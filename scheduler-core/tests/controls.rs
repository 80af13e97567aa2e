//! Operators' controls as the runtime honours them: pause (the take refuses it,
//! ticks counted paused), resume with and without catch-up, trigger now (exactly once
//! across instances, the overlap policy honoured), and dynamic schedules picked up,
//! changed and dropped at run time.
//!
//! On the in-memory store, on paused tokio time.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use scheduler_core::{
    ControlAction, ControlRequest, Controls, JobContext, Outcome, Page, ScheduleRow, TriggerState,
};
use support::{Log, Probe, builder, mid_second, runs, store};

const POLL: Duration = Duration::from_millis(200);

async fn sleep(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

#[tokio::test(start_paused = true)]
async fn a_paused_job_runs_no_tick_until_resumed() {
    let (store, log) = (store(), Log::default());
    mid_second(&store).await;
    let scheduler = builder(&store)
        .control_poll(Some(POLL))
        .job(Probe::new("tick", &store, &log))
        .build()
        .expect("build");
    let stats = scheduler.stats();
    let s = store.clone();
    let operator = async move {
        sleep(3_000).await;
        s.pause(&ControlRequest::new("tick", "alice").why("maintenance"))
            .await
            .expect("pause");
        let paused_at = s.clock().now();
        sleep(5_000).await;
        s.resume(&ControlRequest::new("tick", "alice"), false)
            .await
            .expect("resume");
        let resumed_at = s.clock().now();
        sleep(3_000).await;
        (paused_at, resumed_at)
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    scheduler
        .run_until(async move {
            let _ = tx.send(operator.await);
        })
        .await;
    let (paused_at, resumed_at) = rx.await.expect("operator");
    let all = runs(&log, "tick");
    // No run began while the job was paused; runs before and after.
    assert!(
        !all.iter()
            .any(|r| r.started > paused_at && r.started < resumed_at),
        "{all:?}"
    );
    assert!(all.iter().filter(|r| r.started <= paused_at).count() >= 2);
    assert!(all.iter().filter(|r| r.started >= resumed_at).count() >= 2);
    // Each paused-over tick counted paused, none missed (resumed without catch-up).
    assert!(
        stats.count("tick", Outcome::Paused) >= 4,
        "{}",
        stats.count("tick", Outcome::Paused)
    );
    assert_eq!(stats.count("tick", Outcome::Missed), 0);
    let history = store
        .control_history(Some("tick"), Page::default())
        .await
        .expect("history");
    let actions: Vec<ControlAction> = history.iter().map(|r| r.action).collect();
    assert_eq!(
        actions,
        [ControlAction::ResumeWithoutCatchUp, ControlAction::Pause]
    );
    assert_eq!(history[1].by, "alice");
    assert_eq!(history[1].why, "maintenance");
}

#[tokio::test(start_paused = true)]
async fn a_resume_with_catch_up_runs_the_latest_tick_paused_over() {
    let (store, log) = (store(), Log::default());
    let mut slow = Probe::new("slow", &store, &log);
    slow.every = Duration::from_secs(10);
    // Paused over a whole window: without the resume's catch-up, nothing would run
    // before the next tick.
    slow.catch_up = Some(Duration::from_secs(2));
    // Start half a second into a 10 s period: the resume (25 s later) then falls
    // mid-period, 4.5 s before the next tick.
    let into = store.clock().now().timestamp_millis().rem_euclid(10_000);
    sleep(u64::try_from((10_500 - into).rem_euclid(10_000)).unwrap_or(0)).await;
    store
        .pause(&ControlRequest::new("slow", "ops"))
        .await
        .expect("pause");
    let scheduler = builder(&store)
        .control_poll(Some(POLL))
        .job(slow)
        .build()
        .expect("build");
    let stats = scheduler.stats();
    let s = store.clone();
    let resumed = Arc::new(std::sync::Mutex::new(None));
    let r = resumed.clone();
    scheduler
        .run_until(async move {
            sleep(25_000).await;
            s.resume(&ControlRequest::new("slow", "ops"), true)
                .await
                .expect("resume");
            *r.lock().unwrap_or_else(|e| e.into_inner()) = Some(s.clock().now());
            sleep(1_000).await;
        })
        .await;
    let resumed_at = resumed
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .expect("resumed");
    let all = runs(&log, "slow");
    assert_eq!(all.len(), 1, "{all:?}");
    // The latest tick paused over, run within a poll of the resume.
    let latest = all[0].tick;
    assert!(latest <= resumed_at && resumed_at - latest < chrono::TimeDelta::seconds(10));
    assert!(all[0].started - resumed_at <= chrono::TimeDelta::milliseconds(400));
    assert!(stats.count("slow", Outcome::Paused) >= 2);
}

#[tokio::test(start_paused = true)]
async fn a_trigger_runs_once_across_instances_and_records_its_end() {
    let (store, log) = (store(), Log::default());
    let mut hourly = Probe::new("hourly", &store, &log);
    hourly.every = Duration::from_secs(3_600);
    hourly.catch_up = Some(Duration::from_secs(1));
    let make = |node: &str| {
        let mut job = Probe::new("hourly", &store, &log);
        job.every = Duration::from_secs(3_600);
        job.catch_up = Some(Duration::from_secs(1));
        builder(&store)
            .node_id(node)
            .control_poll(Some(POLL))
            .job(job)
            .build()
            .expect("build")
    };
    let (a, b, c) = (make("node-a"), make("node-b"), make("node-c"));
    drop(hourly);
    // Start between hourly ticks: nothing runs unless triggered.
    let now = store.clock().now();
    let into = now.timestamp() % 3_600;
    tokio::time::sleep(Duration::from_secs(
        u64::try_from(1_800 - into).unwrap_or(0) % 3_600,
    ))
    .await;
    let s = store.clone();
    let stop = async move {
        sleep(1_000).await;
        let first = s
            .trigger(&ControlRequest::new("hourly", "bob").why("rerun after fix"))
            .await
            .expect("trigger");
        sleep(3_000).await;
        let second = s
            .trigger(&ControlRequest::new("hourly", "bob"))
            .await
            .expect("trigger");
        sleep(3_000).await;
        (first, second)
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    let stop = async move {
        let _ = tx.send(stop.await);
    };
    let (stop, _) = futures_lite_join(stop);
    tokio::join!(
        a.run_until(stop.clone().wait()),
        b.run_until(stop.clone().wait()),
        c.run_until(stop.wait()),
    );
    let (first, second) = rx.await.expect("triggers");
    let all = runs(&log, "hourly");
    assert_eq!(all.len(), 2, "{all:?}");
    // Each run's tick is its trigger's instant (no later tick was taken).
    assert_eq!(all[0].tick, first.requested_at);
    assert_eq!(all[1].tick, second.requested_at);
    for t in [first, second] {
        let status = store
            .trigger_status(t.id)
            .await
            .expect("status")
            .expect("trigger");
        assert!(
            matches!(
                &status.state,
                TriggerState::Done {
                    outcome: Outcome::Succeeded,
                    ..
                }
            ),
            "{status:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_trigger_while_the_job_runs_is_skipped_by_the_skip_policy() {
    let (state, runs) = trigger_during_a_long_run(scheduler_core::Overlap::Skip).await;
    assert!(
        matches!(
            &state,
            TriggerState::Done {
                outcome: Outcome::Skipped,
                ..
            }
        ),
        "{state:?}"
    );
    // Only the start-up run.
    assert_eq!(runs.len(), 1, "{runs:?}");
}

#[tokio::test(start_paused = true)]
async fn dynamic_schedules_are_picked_up_changed_and_dropped_at_run_time() {
    let store = store();
    let calls = Arc::new(AtomicU32::new(0));
    let seen_args = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let (c, a) = (calls.clone(), seen_args.clone());
    mid_second(&store).await;
    let scheduler = builder(&store)
        .control_poll(Some(POLL))
        .handler("report", move |_ctx: JobContext, args: Arc<str>| {
            let (c, a) = (c.clone(), a.clone());
            async move {
                c.fetch_add(1, Ordering::SeqCst);
                a.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(args.to_string());
                Ok(())
            }
        })
        .build()
        .expect("build");
    let stats = scheduler.stats();
    let s = store.clone();
    let counts = Arc::new(std::sync::Mutex::new(Vec::new()));
    let k = counts.clone();
    let probe = calls.clone();
    scheduler
        .run_until(async move {
            // The handler registers at the first poll; before that, a row naming it
            // is refused.
            sleep(500).await;
            let mut row = ScheduleRow::new("tenant-1", "report", "every 1s");
            row.args = r#"{"tenant": 1}"#.into();
            s.put_schedule(&row, "dave", "onboarding")
                .await
                .expect("put");
            sleep(4_000).await;
            k.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(probe.load(Ordering::SeqCst));
            // Slower now: every 2 s.
            row.schedule = "every 2s".into();
            s.put_schedule(&row, "dave", "").await.expect("change");
            sleep(6_000).await;
            k.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(probe.load(Ordering::SeqCst));
            s.remove_schedule("tenant-1", "dave", "offboarding")
                .await
                .expect("remove");
            sleep(1_000).await;
            k.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(probe.load(Ordering::SeqCst));
            sleep(4_000).await;
            k.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(probe.load(Ordering::SeqCst));
        })
        .await;
    let counts = counts.lock().unwrap_or_else(|e| e.into_inner()).clone();
    // ~4 runs in the first 4 s (every 1 s), ~3 in the next 6 s (every 2 s), none
    // after the removal.
    assert!((3..=5).contains(&counts[0]), "{counts:?}");
    assert!((2..=4).contains(&(counts[1] - counts[0])), "{counts:?}");
    assert_eq!(counts[3], counts[2], "{counts:?}");
    assert_eq!(
        stats.count("tenant-1", Outcome::Succeeded),
        u64::from(counts[3])
    );
    let args = seen_args.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert!(args.iter().all(|a| a == r#"{"tenant": 1}"#), "{args:?}");
}

#[tokio::test(start_paused = true)]
async fn a_row_this_instance_cannot_run_is_reported_not_a_crash() {
    let (store, log) = (store(), Log::default());
    // Another instance registered a handler this one does not have; and a row
    // clashes with a job registered in code.
    store
        .register_handlers("node-z", &["elsewhere".to_owned()])
        .await
        .expect("register");
    store
        .put_schedule(&ScheduleRow::new("other", "elsewhere", "every 1s"), "e", "")
        .await
        .expect("put");
    store
        .put_schedule(&ScheduleRow::new("tick", "elsewhere", "every 1s"), "e", "")
        .await
        .expect("put");
    let scheduler = builder(&store)
        .control_poll(Some(POLL))
        .job(Probe::new("tick", &store, &log))
        .build()
        .expect("build");
    let stats = scheduler.stats();
    scheduler.run_until(sleep(5_000)).await;
    assert!(runs(&log, "tick").len() >= 4);
    assert_eq!(stats.count("other", Outcome::Succeeded), 0);
}

/// A shutdown signal several schedulers can wait on: resolves when `f` ends.
fn futures_lite_join(f: impl std::future::Future<Output = ()> + Send + 'static) -> (Stop, ()) {
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        f.await;
        let _ = tx.send(true);
    });
    (Stop(rx), ())
}

#[derive(Clone)]
struct Stop(tokio::sync::watch::Receiver<bool>);

impl Stop {
    async fn wait(mut self) {
        let _ = self.0.wait_for(|stopped| *stopped).await;
    }
}

/// A trigger while the job's long run holds its lease, under `overlap`: what became
/// of the trigger, and the runs (tick, cancelled).
#[allow(clippy::expect_used)]
async fn trigger_during_a_long_run(
    overlap: scheduler_core::Overlap,
) -> (TriggerState, Vec<(chrono::DateTime<chrono::Utc>, bool)>) {
    let (store, log) = (store(), Log::default());
    let mut long = Probe::new("long", &store, &log);
    // Hourly, caught up at start-up: the start-up run holds the lease when the
    // trigger comes, and no other tick comes due.
    long.every = Duration::from_secs(3_600);
    long.catch_up = Some(Duration::from_secs(3_600));
    long.work = Duration::from_secs(5);
    let scheduler = builder(&store)
        .control_poll(Some(POLL))
        .job_with_policy(long, scheduler_core::Policy::default().overlap(overlap))
        .build()
        .expect("build");
    let s = store.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    scheduler
        .run_until(async move {
            // Into the start-up run (it runs 5 s).
            sleep(1_000).await;
            let t = s
                .trigger(&ControlRequest::new("long", "erin"))
                .await
                .expect("trigger");
            sleep(12_000).await;
            let _ = tx.send(t);
        })
        .await;
    let t = rx.await.expect("trigger");
    let status = store
        .trigger_status(t.id)
        .await
        .expect("status")
        .expect("trigger");
    let runs = runs(&log, "long")
        .iter()
        .map(|r| (r.tick, r.cancelled))
        .collect();
    assert!(
        matches!(&status.state, TriggerState::Done { .. }),
        "{status:?}"
    );
    (status.state, runs)
}

#[tokio::test(start_paused = true)]
async fn a_trigger_waits_for_the_running_run_under_buffer_one() {
    let (state, runs) = trigger_during_a_long_run(scheduler_core::Overlap::BufferOne).await;
    assert!(
        matches!(
            &state,
            TriggerState::Done {
                outcome: Outcome::Succeeded,
                ..
            }
        ),
        "{state:?}"
    );
    // The start-up run ran to its end, then the triggered one.
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert!(runs.iter().all(|(_, cancelled)| !cancelled), "{runs:?}");
}

#[tokio::test(start_paused = true)]
async fn a_trigger_cancels_the_running_run_under_cancel_running() {
    let (state, runs) = trigger_during_a_long_run(scheduler_core::Overlap::CancelRunning).await;
    assert!(
        matches!(
            &state,
            TriggerState::Done {
                outcome: Outcome::Succeeded,
                ..
            }
        ),
        "{state:?}"
    );
    assert_eq!(runs.len(), 2, "{runs:?}");
    // The start-up run was cancelled for the trigger; the triggered run was not.
    assert!(runs[0].1 && !runs[1].1, "{runs:?}");
}

#[tokio::test(start_paused = true)]
async fn a_triggered_run_is_recorded_done_before_its_lease_is_released() {
    let (memory, log) = (store(), Log::default());
    // Recording the run's end fails twice: its lease must stay held until it is
    // recorded.
    let store = Arc::new(support::Faulty {
        inner: memory.clone(),
        early: AtomicU32::new(0),
        failing_finishes: AtomicU32::new(2),
        hang_claims: false,

        failing_heartbeats: std::sync::atomic::AtomicBool::new(false),
        beats: AtomicU32::new(0),
        first_poll_takes: Duration::ZERO,
        due_rows: std::sync::atomic::AtomicU64::new(0),
        fail_due_read: std::sync::atomic::AtomicU32::new(0),
        changed_rows: std::sync::atomic::AtomicU64::new(0),
    });
    let mut hourly = Probe::new("hourly", &memory, &log);
    hourly.every = Duration::from_secs(3_600);
    hourly.catch_up = Some(Duration::from_secs(1));
    let scheduler = scheduler_core::Scheduler::builder(store.clone())
        .node_id("node-a")
        .lease_ttl(Duration::from_secs(4))
        .control_poll(Some(POLL))
        .job(hourly)
        .build()
        .expect("build");
    let m = memory.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    scheduler
        .run_until(async move {
            sleep(100).await;
            let t = m
                .trigger(&ControlRequest::new("hourly", "frank"))
                .await
                .expect("trigger");
            sleep(3_000).await;
            let _ = tx.send(t);
        })
        .await;
    let t = rx.await.expect("trigger");
    assert_eq!(runs(&log, "hourly").len(), 1);
    assert_eq!(store.early.load(Ordering::SeqCst), 0);
    let status = memory.trigger_status(t.id).await.expect("status");
    assert!(
        matches!(status.map(|t| t.state), Some(TriggerState::Done { .. })),
        "the end was recorded once the store answered"
    );
}

#[tokio::test(start_paused = true)]
async fn many_rows_are_applied_over_several_turns_and_all_run() {
    let store = store();
    store
        .register_handlers("node-a", &["count".to_owned()])
        .await
        .expect("register");
    for k in 0..5_000 {
        store
            .put_schedule(
                &ScheduleRow::new(format!("tenant-{k}"), "count", "every 2s"),
                "loader",
                "",
            )
            .await
            .expect("put");
    }
    let seen = Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
    let s = seen.clone();
    let scheduler = builder(&store)
        .control_poll(Some(POLL))
        .handler("count", move |ctx: JobContext, _args: Arc<str>| {
            let s = s.clone();
            async move {
                s.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(ctx.job().to_owned());
                Ok(())
            }
        })
        .build()
        .expect("build");
    scheduler.run_until(sleep(6_000)).await;
    assert_eq!(seen.lock().unwrap_or_else(|e| e.into_inner()).len(), 5_000);
}

#[tokio::test(start_paused = true)]
async fn a_resume_with_catch_up_all_runs_every_tick_paused_over_once() {
    let (store, log) = (store(), Log::default());
    mid_second(&store).await;
    let make = |node: &str| {
        builder(&store)
            .node_id(node)
            // The default poll interval: the next live tick comes due (and runs)
            // before the resume is seen.
            .control_poll(Some(Duration::from_secs(5)))
            .job_with_policy(
                Probe::new("every1s", &store, &log),
                scheduler_core::Policy::default()
                    .catch_up(scheduler_core::CatchUp::All { max: 100 }),
            )
            .build()
            .expect("build")
    };
    let (a, b) = (make("node-a"), make("node-b"));
    let s = store.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (stop, _) = futures_lite_join(async move {
        sleep(2_000).await;
        s.pause(&ControlRequest::new("every1s", "ops"))
            .await
            .expect("pause");
        let paused_at = s.clock().now();
        sleep(18_100).await;
        s.resume(&ControlRequest::new("every1s", "ops"), true)
            .await
            .expect("resume");
        let resumed_at = s.clock().now();
        sleep(10_000).await;
        let _ = tx.send((paused_at, resumed_at));
    });
    tokio::join!(a.run_until(stop.clone().wait()), b.run_until(stop.wait()));
    let (paused_at, resumed_at) = rx.await.expect("times");
    let all = runs(&log, "every1s");
    let caught_up: Vec<_> = all
        .iter()
        .filter(|r| r.tick > paused_at && r.tick < resumed_at)
        .map(|r| r.tick)
        .collect();
    // About 18 ticks paused over: each run once, by one of the two instances.
    assert!(caught_up.len() >= 17, "{} caught up", caught_up.len());
    let distinct: std::collections::HashSet<_> = caught_up.iter().collect();
    assert_eq!(distinct.len(), caught_up.len(), "a tick ran twice");
}
