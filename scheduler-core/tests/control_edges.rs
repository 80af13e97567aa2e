//! Operators' controls at the edges of a tick: a resume just before a tick that was
//! taken ahead while paused, a pause just after a tick was taken ahead, a catch-up
//! of a dynamic schedule changed before its pause, a trigger made just after the
//! job's run ended, and a triggered run cut by a graceful shutdown.
//!
//! On the in-memory store, on paused tokio time. Each was found by an adversarial
//! review and failed before its fix.

#![allow(clippy::expect_used)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use scheduler_core::{
    CatchUp, ControlRequest, Controls, JobContext, Outcome, Policy, ScheduleRow, TriggerId,
    TriggerState,
};
use support::{Log, Probe, builder, mid_second, runs, store};

const POLL: Duration = Duration::from_millis(200);

/// Each run's tick and arguments, in the order they ran.
type Seen = Arc<Mutex<Vec<(DateTime<Utc>, String)>>>;

async fn sleep(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// An hourly job whose run at start-up takes a second (its window takes in the
/// tick at the top of the hour before).
fn hourly(store: &Arc<scheduler_core::MemoryStore>, log: &Log) -> Probe {
    let mut hourly = Probe::new("hourly", store, log);
    hourly.every = Duration::from_secs(3_600);
    hourly.catch_up = Some(Duration::from_secs(3_600));
    hourly.work = Duration::from_millis(1_000);
    hourly
}

/// Asserts that trigger `id` ended with `outcome`.
async fn assert_ended(store: &scheduler_core::MemoryStore, id: TriggerId, outcome: Outcome) {
    let state = store
        .trigger_status(id)
        .await
        .expect("status")
        .expect("row")
        .state;
    assert!(
        matches!(&state, TriggerState::Done { outcome: o, .. } if *o == outcome),
        "{state:?}"
    );
}

/// Sorts `ticks` and asserts that none ran twice.
fn assert_none_twice(ticks: &mut [DateTime<Utc>]) {
    ticks.sort();
    let mut twice: Vec<_> = ticks
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| w[0])
        .collect();
    twice.dedup();
    assert!(twice.is_empty(), "ticks run twice: {twice:?} of {ticks:?}");
}

/// Sorts `ticks` (of a job every second) and asserts that each second from the first
/// to the last ran once: none twice, none missing.
fn assert_each_tick_once(ticks: &mut [DateTime<Utc>]) {
    assert_none_twice(ticks);
    let (first, last) = (ticks[0], ticks[ticks.len() - 1]);
    assert_eq!(
        i64::try_from(ticks.len()).expect("few"),
        (last - first).num_seconds() + 1,
        "a tick is missing: {ticks:?}"
    );
}

/// A tick is taken a little ahead of its instant. Refused then because the job is
/// paused, it is asked again at its instant: the job resumed meanwhile runs it.
#[tokio::test(start_paused = true)]
async fn the_first_tick_after_a_resume_runs() {
    let (store, log) = (store(), Log::default());
    mid_second(&store).await; // x.500
    let scheduler = builder(&store)
        .control_poll(Some(POLL))
        .job(Probe::new("every1s", &store, &log))
        .build()
        .expect("build");
    let stats = scheduler.stats();
    let s = store.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    scheduler
        .run_until(async move {
            sleep(1_000).await;
            s.pause(&ControlRequest::new("every1s", "ops"))
                .await
                .expect("pause");
            // Resumed 5 ms before a whole second: that tick was asked for already.
            sleep(2_495).await;
            s.resume(&ControlRequest::new("every1s", "ops"), false)
                .await
                .expect("resume");
            let resumed_at = s.clock().now();
            sleep(3_000).await;
            let _ = tx.send(resumed_at);
        })
        .await;
    let resumed_at = rx.await.expect("resumed_at");
    let first_after = resumed_at
        .duration_trunc(TimeDelta::seconds(1))
        .expect("trunc")
        + TimeDelta::seconds(1);
    let ticks: Vec<_> = runs(&log, "every1s").iter().map(|r| r.tick).collect();
    assert!(
        ticks.contains(&first_after),
        "the tick at {first_after}, after the resume at {resumed_at}, never ran: {ticks:?} \
         ({} counted paused)",
        stats.count("every1s", Outcome::Paused)
    );
}

/// A tick taken ahead just before a pause runs at its instant under the job's live
/// lease; the catch-up after the resume does not run it again.
#[tokio::test(start_paused = true)]
async fn a_tick_taken_ahead_of_a_pause_is_not_caught_up_again() {
    let (store, log) = (store(), Log::default());
    mid_second(&store).await; // x.500
    let scheduler = builder(&store)
        .control_poll(Some(POLL))
        .job_with_policy(
            Probe::new("every1s", &store, &log),
            Policy::default().catch_up(CatchUp::All { max: 100 }),
        )
        .build()
        .expect("build");
    let s = store.clone();
    scheduler
        .run_until(async move {
            // 5 ms before a whole second: that tick is taken already.
            sleep(2_495).await;
            s.pause(&ControlRequest::new("every1s", "ops"))
                .await
                .expect("pause");
            sleep(3_000).await;
            s.resume(&ControlRequest::new("every1s", "ops"), true)
                .await
                .expect("resume");
            sleep(3_000).await;
        })
        .await;
    let mut ticks: Vec<_> = runs(&log, "every1s").iter().map(|r| r.tick).collect();
    assert_each_tick_once(&mut ticks);
}

/// A tick just before a resume with a catch-up, whose take reaches the store just
/// after it (a slow round trip), runs once: the take leaves it to the catch-up,
/// whose range reaches the resume. (It ran live, and again in the catch-up under a
/// lease of its own.)
#[tokio::test(start_paused = true)]
async fn a_tick_taken_just_after_a_resume_runs_once_not_also_in_the_catch_up() {
    let (store, log) = (store(), Log::default());
    mid_second(&store).await; // x.500
    store.set_take_delay(Duration::from_millis(400));
    let scheduler = builder(&store)
        .control_poll(Some(POLL))
        .job_with_policy(
            Probe::new("every1s", &store, &log),
            Policy::default().catch_up(CatchUp::All { max: 100 }),
        )
        .build()
        .expect("build");
    let stats = scheduler.stats();
    let s = store.clone();
    scheduler
        // On a task of its own: `run_until` polls its future between the loop's
        // turns, which wait for the take.
        .run_until(async move {
            let operator = tokio::spawn(async move {
                sleep(1_000).await;
                s.pause(&ControlRequest::new("every1s", "ops"))
                    .await
                    .expect("pause");
                // 100 ms after the third whole second from here. That tick's take is sent
                // at its instant by the scheduler's estimate of the store's clock, which
                // takes half of each take's 400 ms as the way there: 200 ms before it,
                // reaching the store 200 ms after it, 100 ms after the resume.
                let now = s.clock().now();
                let resume_at = now.duration_trunc(TimeDelta::seconds(1)).expect("trunc")
                    + TimeDelta::milliseconds(3_100);
                sleep(u64::try_from((resume_at - now).num_milliseconds()).expect("ahead")).await;
                s.resume(&ControlRequest::new("every1s", "ops"), true)
                    .await
                    .expect("resume");
                sleep(3_000).await;
            });
            operator.await.expect("operator");
        })
        .await;
    let mut ticks: Vec<_> = runs(&log, "every1s").iter().map(|r| r.tick).collect();
    assert_each_tick_once(&mut ticks);
    assert!(
        stats.count("every1s", Outcome::Backfilled) >= 3,
        "the ticks paused over were not caught up: {ticks:?}"
    );
}

/// A job paused before the scheduler started and resumed with a catch-up just after
/// (a slow store: its start-up takes are answered after the resume) runs each tick
/// once: start-up leaves the ticks paused over to the resume's catch-up, which the
/// first poll of the controls runs. (Start-up ran them live and the catch-up again.)
#[tokio::test(start_paused = true)]
async fn a_resume_just_after_start_up_runs_each_tick_paused_over_once() {
    let (store, log) = (store(), Log::default());
    mid_second(&store).await; // x.500
    let since = store
        .pause(&ControlRequest::new("every1s", "ops"))
        .await
        .expect("pause")
        .at;
    sleep(3_000).await;
    store.set_take_delay(Duration::from_millis(400));
    // Ticks to catch up at start-up: the first turn takes them (refused, paused)
    // before it polls the controls.
    let mut job = Probe::new("every1s", &store, &log);
    job.catch_up = Some(Duration::from_secs(10));
    let scheduler = builder(&store)
        .control_poll(Some(POLL))
        .job_with_policy(job, Policy::default().catch_up(CatchUp::All { max: 100 }))
        .build()
        .expect("build");
    let stats = scheduler.stats();
    let s = store.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    scheduler
        // On a task of its own: `run_until` polls its future between the loop's
        // turns, which wait for the take.
        .run_until(async move {
            let operator = tokio::spawn(async move {
                sleep(100).await;
                let resumed = s
                    .resume(&ControlRequest::new("every1s", "ops"), true)
                    .await
                    .expect("resume");
                sleep(3_000).await;
                resumed.at
            });
            let _ = tx.send(operator.await.expect("operator"));
        })
        .await;
    let resumed_at = rx.await.expect("resumed_at");
    let mut ticks: Vec<_> = runs(&log, "every1s").iter().map(|r| r.tick).collect();
    assert_none_twice(&mut ticks);
    // Each tick paused over ran, in the catch-up. (Later ticks a slow store held up
    // past their window may be missed: that is the catch-up policy, not this edge.)
    let paused_over: Vec<_> = (1..=3)
        .map(|s| {
            since.duration_trunc(TimeDelta::seconds(1)).expect("trunc") + TimeDelta::seconds(s)
        })
        .collect();
    assert!(paused_over.iter().all(|t| *t <= resumed_at));
    for tick in &paused_over {
        assert!(
            ticks.contains(tick),
            "{tick} paused over never ran: {ticks:?}"
        );
    }
    assert!(
        stats.count("every1s", Outcome::Backfilled) >= 3,
        "the ticks paused over were not caught up: {ticks:?}"
    );
}

/// A pause that ended with a catch-up while no scheduler ran (nobody caught it up)
/// is caught up by the next scheduler to start, each tick once: start-up leaves the
/// ticks it covered, within the catch-up window, to the first poll's catch-up.
#[tokio::test(start_paused = true)]
async fn a_resume_nobody_saw_is_caught_up_at_start_up_once() {
    let (store, log) = (store(), Log::default());
    mid_second(&store).await; // x.500
    let ops = ControlRequest::new("every1s", "ops");
    store.pause(&ops).await.expect("pause");
    sleep(3_000).await;
    store.resume(&ops, true).await.expect("resume");
    sleep(1_000).await;
    let mut job = Probe::new("every1s", &store, &log);
    job.catch_up = Some(Duration::from_secs(10));
    let scheduler = builder(&store)
        .control_poll(Some(POLL))
        .job_with_policy(job, Policy::default().catch_up(CatchUp::All { max: 100 }))
        .build()
        .expect("build");
    let stats = scheduler.stats();
    scheduler.run_until(sleep(3_000)).await;
    let mut ticks: Vec<_> = runs(&log, "every1s").iter().map(|r| r.tick).collect();
    assert_each_tick_once(&mut ticks);
    // The window's ten ticks before the start, and some after.
    assert!(ticks.len() >= 12, "{ticks:?}");
    assert_eq!(
        stats.count("every1s", Outcome::Backfilled),
        3,
        "the three ticks paused over, caught up: {ticks:?}"
    );
}

/// Without control polling nothing catches a resume up, so no take leaves a tick to
/// it: a tick from just before a resume whose take reaches the store just after it
/// runs live. (It was refused as left to a catch-up that never came.)
#[tokio::test(start_paused = true)]
async fn without_control_polling_a_tick_just_before_a_resume_runs() {
    let (store, log) = (store(), Log::default());
    mid_second(&store).await; // x.500
    store.set_take_delay(Duration::from_millis(400));
    let scheduler = builder(&store)
        .control_poll(None)
        .job_with_policy(
            Probe::new("every1s", &store, &log),
            Policy::default().catch_up(CatchUp::All { max: 100 }),
        )
        .build()
        .expect("build");
    let s = store.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    scheduler
        .run_until(async move {
            let operator = tokio::spawn(async move {
                sleep(1_000).await;
                s.pause(&ControlRequest::new("every1s", "ops"))
                    .await
                    .expect("pause");
                // As in the test above: the take of the tick 100 ms before the
                // resume reaches the store 100 ms after it.
                let now = s.clock().now();
                let resume_at = now.duration_trunc(TimeDelta::seconds(1)).expect("trunc")
                    + TimeDelta::milliseconds(3_100);
                sleep(u64::try_from((resume_at - now).num_milliseconds()).expect("ahead")).await;
                let resumed = s
                    .resume(&ControlRequest::new("every1s", "ops"), true)
                    .await
                    .expect("resume");
                sleep(2_000).await;
                resumed.at
            });
            let _ = tx.send(operator.await.expect("operator"));
        })
        .await;
    let resumed_at = rx.await.expect("resumed_at");
    let just_before = resumed_at
        .duration_trunc(TimeDelta::seconds(1))
        .expect("trunc");
    let ticks: Vec<_> = runs(&log, "every1s").iter().map(|r| r.tick).collect();
    assert_eq!(
        ticks.iter().filter(|t| **t == just_before).count(),
        1,
        "the tick at {just_before}, 100 ms before the resume at {resumed_at}: {ticks:?}"
    );
}

/// A job of two concurrent slots keeps `max` ticks of each slot's share at start-up:
/// the catch-up of a pause they lie in, resumed just after the start, runs all of
/// them, not only the most recent `max`. (The older ones, left to it by start-up,
/// were lost.)
#[tokio::test(start_paused = true)]
async fn a_catch_up_runs_every_slots_ticks_left_by_start_up() {
    let (store, log) = (store(), Log::default());
    mid_second(&store).await; // x.500
    let since = store
        .pause(&ControlRequest::new("every1s", "ops"))
        .await
        .expect("pause")
        .at;
    sleep(6_000).await;
    store.set_take_delay(Duration::from_millis(400));
    let mut job = Probe::new("every1s", &store, &log);
    job.catch_up = Some(Duration::from_secs(10));
    let scheduler = builder(&store)
        .control_poll(Some(POLL))
        .job_with_policy(
            job,
            Policy::default()
                .catch_up(CatchUp::All { max: 2 })
                .overlap(scheduler_core::Overlap::Concurrent { max: 2 }),
        )
        .build()
        .expect("build");
    let s = store.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    scheduler
        .run_until(async move {
            let operator = tokio::spawn(async move {
                sleep(100).await;
                let resumed = s
                    .resume(&ControlRequest::new("every1s", "ops"), true)
                    .await
                    .expect("resume");
                sleep(3_000).await;
                resumed.at
            });
            let _ = tx.send(operator.await.expect("operator"));
        })
        .await;
    let resumed_at = rx.await.expect("resumed_at");
    let mut ticks: Vec<_> = runs(&log, "every1s").iter().map(|r| r.tick).collect();
    assert_none_twice(&mut ticks);
    // The four most recent ticks paused over: two of each slot's share.
    let last = resumed_at
        .duration_trunc(TimeDelta::seconds(1))
        .expect("trunc");
    for back in 0..4 {
        let tick = last - TimeDelta::seconds(back);
        assert!(tick > since);
        assert!(
            ticks.contains(&tick),
            "{tick} paused over never ran: {ticks:?}"
        );
    }
}

/// A dynamic schedule changed before its pause is caught up as it reads now: its
/// new schedule's ticks, with its new arguments.
#[tokio::test(start_paused = true)]
async fn a_changed_schedule_is_caught_up_as_it_now_reads() {
    let store = store();
    mid_second(&store).await;
    let seen: Seen = Arc::default();
    let record = seen.clone();
    let scheduler = builder(&store)
        .control_poll(Some(POLL))
        .handler("h", move |ctx: JobContext, args: Arc<str>| {
            let record = record.clone();
            async move {
                record
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((ctx.tick().at(), args.to_string()));
                Ok(())
            }
        })
        .build()
        .expect("build");
    let s = store.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    scheduler
        .run_until(async move {
            sleep(500).await;
            let mut row = ScheduleRow::new("dyn", "h", "every 10s");
            row.policy = r#"catch_up = "all", catch_up_max = 100"#.into();
            row.args = r#"{"v": 1}"#.into();
            s.put_schedule(&row, "ops", "").await.expect("put");
            sleep(1_000).await;
            row.schedule = "every 1s".into();
            row.args = r#"{"v": 2}"#.into();
            s.put_schedule(&row, "ops", "").await.expect("change");
            // Paused and resumed half-way between two ticks (a tick within a take's
            // latency of the resume is an edge of its own, not this test's).
            sleep(2_500).await;
            s.pause(&ControlRequest::new("dyn", "ops"))
                .await
                .expect("pause");
            let paused_at = s.clock().now();
            sleep(20_000).await;
            s.resume(&ControlRequest::new("dyn", "ops"), true)
                .await
                .expect("resume");
            let resumed_at = s.clock().now();
            sleep(3_000).await;
            let _ = tx.send((paused_at, resumed_at));
        })
        .await;
    let (paused_at, resumed_at) = rx.await.expect("times");
    let seen = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let caught_up: Vec<_> = seen
        .iter()
        .filter(|(t, _)| *t > paused_at && *t < resumed_at)
        .collect();
    assert!(
        caught_up.iter().all(|(_, a)| a == r#"{"v": 2}"#),
        "ran with the old row's arguments: {caught_up:?}"
    );
    assert_eq!(caught_up.len(), 20, "{caught_up:?}");
}

/// A trigger made a moment after the job's run ended (its release not yet sent)
/// runs: nothing was running, so the overlap policy has nothing to skip it for.
#[tokio::test(start_paused = true)]
async fn a_trigger_just_after_a_run_ended_runs() {
    let (store, log) = (store(), Log::default());
    store.announce_controls(true);
    let scheduler = builder(&store)
        .control_poll(Some(POLL))
        .job(hourly(&store, &log))
        .build()
        .expect("build");
    let s = store.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    scheduler
        .run_until(async move {
            sleep(1_002).await; // the start-up run ended at 1,000 ms
            let t = s
                .trigger(&ControlRequest::new("hourly", "ops"))
                .await
                .expect("trigger");
            sleep(3_000).await;
            let _ = tx.send(t);
        })
        .await;
    let t = rx.await.expect("trigger");
    assert_ended(&store, t.id, Outcome::Succeeded).await;
    assert_eq!(runs(&log, "hourly").len(), 2);
}

/// The same on another instance's side: while the run's release has not gone out
/// (here: the store refuses releases for a moment), every instance finds the lease
/// held, and a trigger is recorded skipped only if it still is a moment later.
#[tokio::test(start_paused = true)]
async fn a_trigger_while_an_ended_run_is_still_being_released_runs() {
    let (store, log) = (store(), Log::default());
    let make = |node: &str| {
        builder(&store)
            .node_id(node)
            .control_poll(Some(POLL))
            .job(hourly(&store, &log))
            .build()
            .expect("build")
    };
    let (a, b) = (make("node-a"), make("node-b"));
    let s = store.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let both = async move {
        sleep(900).await;
        s.set_failing_releases(true);
        sleep(102).await; // the start-up run ended at 1,000 ms, unreleased
        let t = s
            .trigger(&ControlRequest::new("hourly", "ops"))
            .await
            .expect("trigger");
        sleep(300).await;
        s.set_failing_releases(false);
        sleep(3_000).await;
        let _ = tx.send(t);
    };
    tokio::join!(a.run_until(both), b.run_until(sleep(5_000)));
    let t = rx.await.expect("trigger");
    assert_ended(&store, t.id, Outcome::Succeeded).await;
    assert_eq!(runs(&log, "hourly").len(), 2);
}

/// A triggered run cut short by a graceful shutdown is handed back, like a
/// scheduled tick's run: another instance claims the trigger again and runs it.
#[tokio::test(start_paused = true)]
async fn a_trigger_cut_by_a_shutdown_runs_on_another_instance() {
    let (store, log) = (store(), Log::default());
    let make = |node: &str| {
        let mut daily = Probe::new("daily", &store, &log);
        daily.every = Duration::from_secs(86_400);
        daily.catch_up = Some(Duration::from_secs(1));
        daily.work = Duration::from_secs(10);
        builder(&store)
            .node_id(node)
            .shutdown_grace(Duration::from_millis(500))
            .control_poll(Some(POLL))
            .job(daily)
            .build()
            .expect("build")
    };
    let (a, b) = (make("node-a"), make("node-b"));
    let trigger = store
        .trigger(&ControlRequest::new("daily", "ops"))
        .await
        .expect("trigger");
    // Node a claims it, then shuts down in the middle of the run.
    a.run_until(sleep(2_000)).await;
    let mid = store
        .trigger_status(trigger.id)
        .await
        .expect("status")
        .expect("row");
    assert!(
        matches!(mid.state, TriggerState::Running { .. }),
        "handed back, not ended: {:?}",
        mid.state
    );
    b.run_until(sleep(30_000)).await;
    assert_ended(&store, trigger.id, Outcome::Succeeded).await;
    let nodes: Vec<_> = runs(&log, "daily")
        .iter()
        .map(|r| (r.node.clone(), r.cancelled))
        .collect();
    assert_eq!(
        nodes,
        [("node-a".to_owned(), true), ("node-b".to_owned(), false)]
    );
}
