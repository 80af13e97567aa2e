//! Dynamic schedules loaded as they come due
//! ([`SchedulerBuilder::load_schedules_when_due`]): an instance reads only the rows
//! due within its look-ahead, runs them from their bound on, moves the bounds of
//! the rows it runs forward, and loads a row that is not due when it is triggered.
//!
//! On the in-memory store, on paused tokio time.
//!
//! [`SchedulerBuilder::load_schedules_when_due`]: scheduler_core::SchedulerBuilder::load_schedules_when_due
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Timelike, Utc};
use scheduler_core::{
    ControlRequest, Controls, DueSchedule, JobContext, MemoryStore, ScheduleRow, Scheduler,
    SchedulerBuilder,
};
use support::{Faulty, mid_second, store};

const TTL: Duration = Duration::from_secs(8);
const HANDLER: &str = "work";

type Ran = Arc<Mutex<BTreeMap<String, Vec<DateTime<Utc>>>>>;

fn counted(memory: &Arc<MemoryStore>) -> Arc<Faulty> {
    Arc::new(Faulty::over(memory.clone()))
}

fn scheduler(store: &Arc<Faulty>, node: &str, ran: &Ran) -> Scheduler {
    scheduler_in(store, node, ran, true)
}

/// An instance that loads rows as they come due (`when_due`) or all at once.
fn scheduler_in(store: &Arc<Faulty>, node: &str, ran: &Ran, when_due: bool) -> Scheduler {
    scheduler_built(store, node, ran, when_due, 0)
}

/// An instance that loads rows as they come due and holds `held` at least.
fn scheduler_held(store: &Arc<Faulty>, node: &str, ran: &Ran, held: usize) -> Scheduler {
    scheduler_built(store, node, ran, true, held)
}

fn scheduler_built(
    store: &Arc<Faulty>,
    node: &str,
    ran: &Ran,
    when_due: bool,
    held: usize,
) -> Scheduler {
    let builder = Scheduler::builder(store.clone())
        .node_id(node)
        .lease_ttl(TTL)
        .control_poll(Some(Duration::from_millis(500)))
        .load_schedules_when_due(when_due)
        .schedules_held(held);
    recording(builder, ran).build().expect("build")
}

/// `builder` with the handler that records each run's tick in `ran`.
fn recording(builder: SchedulerBuilder, ran: &Ran) -> SchedulerBuilder {
    let ran = ran.clone();
    builder.handler(HANDLER, move |ctx: JobContext, _args: Arc<str>| {
        let ran = ran.clone();
        async move {
            let mut ran = ran.lock().unwrap();
            ran.entry(ctx.job().to_owned())
                .or_default()
                .push(ctx.tick().at());
            Ok(())
        }
    })
}

/// `n` rows due once a day at the hour six hours from `now` (far beyond any
/// look-ahead).
fn daily(n: usize, now: DateTime<Utc>) -> Vec<ScheduleRow> {
    let hour = (now + TimeDelta::hours(6)).hour();
    (0..n)
        .map(|i| {
            ScheduleRow::new(
                format!("daily-{i:04}"),
                HANDLER,
                format!("0 0 {hour} * * *"),
            )
        })
        .collect()
}

async fn setup(memory: &Arc<MemoryStore>, rows: &[ScheduleRow]) {
    mid_second(memory).await;
    memory
        .register_handlers("ops-node", &[HANDLER.to_owned()])
        .await
        .expect("register");
    memory
        .put_schedules(rows, "ops", "test rows")
        .await
        .expect("put");
}

async fn bounds(memory: &MemoryStore) -> BTreeMap<String, DueSchedule> {
    let far = memory.clock().now() + TimeDelta::days(3);
    memory
        .due_schedules(&[HANDLER.to_owned()], far, None, 100_000)
        .await
        .expect("due")
        .into_iter()
        .map(|due| (due.row.name.clone(), due))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn start_up_reads_only_the_rows_due_and_runs_them() {
    let memory = store();
    let now = memory.clock().now();
    let mut rows = daily(500, now);
    rows.extend((0..5).map(|i| ScheduleRow::new(format!("second-{i}"), HANDLER, "every 1s")));
    setup(&memory, &rows).await;
    let put = bounds(&memory).await;
    let store = counted(&memory);
    let ran = Ran::default();
    let started = memory.clock().now();
    scheduler(&store, "node-a", &ran)
        .run_until(tokio::time::sleep(Duration::from_secs(20)))
        .await;

    let ran = ran.lock().unwrap().clone();
    for i in 0..5 {
        let name = format!("second-{i}");
        let ticks = ran.get(&name).cloned().unwrap_or_default();
        // Every second from the first poll on, each once.
        let mut unique = ticks.clone();
        unique.dedup();
        assert_eq!(unique.len(), ticks.len(), "{name} ran a tick twice");
        assert!(
            ticks.len() >= 17,
            "{name} ran {} ticks: {ticks:?}",
            ticks.len()
        );
    }
    assert!(
        !ran.keys().any(|name| name.starts_with("daily-")),
        "no daily row is due"
    );
    // The due reads returned the every-second rows, never the daily ones: 40 polls
    // of 5 rows at most (rows run here are read again while due, and skipped).
    let read = store.due_rows.load(Ordering::SeqCst);
    assert!((5..=5 * 45).contains(&read), "{read} rows read as due");

    // The every-second rows' bounds moved with their ticks; the daily rows' stayed.
    let after = bounds(&memory).await;
    for (name, due) in &after {
        if name.starts_with("second-") {
            assert!(
                due.next_tick > started + TimeDelta::seconds(15),
                "{name}: bound {} left behind",
                due.next_tick
            );
            assert!(due.next_tick <= memory.clock().now() + TimeDelta::seconds(1));
        } else {
            assert_eq!(due.next_tick, put[name].next_tick, "{name}");
        }
    }
}

/// Loading as they come due is the default of an instance with handlers: built
/// with no word about it, it reads the rows due and none of the rest.
#[tokio::test(start_paused = true)]
async fn rows_load_as_they_come_due_by_default() {
    let memory = store();
    let now = memory.clock().now();
    let mut rows = daily(200, now);
    rows.push(ScheduleRow::new("second", HANDLER, "every 1s"));
    setup(&memory, &rows).await;
    let store = counted(&memory);
    let ran = Ran::default();
    let builder = Scheduler::builder(store.clone())
        .node_id("node-a")
        .lease_ttl(TTL);
    let scheduler = recording(builder, &ran).build().expect("build");
    scheduler
        .run_until(tokio::time::sleep(Duration::from_secs(12)))
        .await;
    let read = store.due_rows.load(Ordering::SeqCst);
    assert!(
        (1..=10).contains(&read),
        "{read} rows read as due: the every-second row, once a poll"
    );
    let ran = ran.lock().unwrap().clone();
    assert!(ran.get("second").is_some_and(|t| t.len() >= 5), "{ran:?}");
}

#[tokio::test(start_paused = true)]
async fn an_instance_started_later_runs_from_the_bound_each_tick_once() {
    let memory = store();
    let rows = vec![ScheduleRow::new("each", HANDLER, "every 1s")];
    setup(&memory, &rows).await;
    let ran = Ran::default();
    let store = counted(&memory);
    scheduler(&store, "node-a", &ran)
        .run_until(tokio::time::sleep(Duration::from_secs(10)))
        .await;
    let first_end = memory.clock().now();
    // The bound stands where node-a left it: past the ticks it ran.
    let bound = bounds(&memory).await["each"].next_tick;
    assert!(bound > first_end - TimeDelta::seconds(2), "bound {bound}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let restarted = memory.clock().now();
    scheduler(&store, "node-b", &ran)
        .run_until(tokio::time::sleep(Duration::from_secs(10)))
        .await;
    let ticks = ran.lock().unwrap()["each"].clone();
    let mut unique = ticks.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), ticks.len(), "a tick ran twice: {ticks:?}");
    // Every whole second node-b was up for, from its first poll on, ran.
    for s in 1..=8 {
        let tick = (restarted + TimeDelta::seconds(s))
            .with_nanosecond(0)
            .unwrap();
        assert!(ticks.contains(&tick), "tick {tick} did not run: {ticks:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_triggered_row_that_is_not_due_is_loaded_and_runs_once() {
    let memory = store();
    let now = memory.clock().now();
    setup(&memory, &daily(3, now)).await;
    let ran = Ran::default();
    let store = counted(&memory);
    let trigger = memory
        .trigger(&ControlRequest::new("daily-0001", "ops").why("now, please"))
        .await
        .expect("trigger");
    scheduler(&store, "node-a", &ran)
        .run_until(tokio::time::sleep(Duration::from_secs(10)))
        .await;
    let ran = ran.lock().unwrap().clone();
    assert_eq!(ran.get("daily-0001").map(Vec::len), Some(1), "{ran:?}");
    assert_eq!(ran.len(), 1, "only the triggered row ran: {ran:?}");
    let status = memory
        .trigger_status(trigger.id)
        .await
        .expect("status")
        .expect("there");
    assert!(
        matches!(status.state, scheduler_core::TriggerState::Done { .. }),
        "{status:?}"
    );
}

/// A trigger of a row not loaded, announced by the store, is not kept waiting for
/// the poll timer: its row is read by name at once.
#[tokio::test(start_paused = true)]
async fn a_trigger_of_a_row_not_loaded_does_not_wait_for_the_timer() {
    let memory = store();
    memory.announce_controls(true);
    let now = memory.clock().now();
    setup(&memory, &daily(3, now)).await;
    let ran = Ran::default();
    let builder = Scheduler::builder(memory.clone())
        .node_id("node-a")
        .lease_ttl(TTL)
        .control_poll(Some(Duration::from_secs(30)))
        .load_schedules_when_due(true);
    let scheduler = recording(builder, &ran).build().expect("build");
    let operator = {
        let memory = memory.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            memory
                .trigger(&ControlRequest::new("daily-0001", "ops").why("now, please"))
                .await
                .expect("trigger");
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    };
    scheduler.run_until(operator).await;
    let ran = ran.lock().unwrap().clone();
    assert_eq!(
        ran.get("daily-0001").map(Vec::len),
        Some(1),
        "ran within two seconds of the trigger, the timer's poll 30 s away: {ran:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn rows_put_or_changed_while_running_are_seen() {
    let memory = store();
    let now = memory.clock().now();
    setup(&memory, &daily(2, now)).await;
    let ran = Ran::default();
    let store = counted(&memory);
    let changer = {
        let memory = memory.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(3)).await;
            // A new row, due at once: loaded by the next due read.
            let each = ScheduleRow::new("each", HANDLER, "every 1s");
            memory.put_schedule(&each, "ops", "new").await.expect("put");
            // A daily row made every second: its put wrote a bound due now.
            let faster = ScheduleRow::new("daily-0000", HANDLER, "every 1s");
            memory
                .put_schedule(&faster, "ops", "faster")
                .await
                .expect("put");
            tokio::time::sleep(Duration::from_secs(5)).await;
            // A row run here, disabled: the poll's change stops it.
            let mut off = each.clone();
            off.enabled = false;
            memory.put_schedule(&off, "ops", "off").await.expect("put");
            memory.clock().now()
        }
    };
    let handle = tokio::spawn(changer);
    scheduler(&store, "node-a", &ran)
        .run_until(tokio::time::sleep(Duration::from_secs(15)))
        .await;
    let disabled_at = handle.await.expect("changer");
    let ran = ran.lock().unwrap().clone();
    let each = ran.get("each").cloned().unwrap_or_default();
    assert!(each.len() >= 3, "the new row ran: {each:?}");
    assert!(
        each.iter()
            .all(|t| *t <= disabled_at + TimeDelta::seconds(2)),
        "the disabled row stopped: {each:?} (disabled at {disabled_at})"
    );
    let faster = ran.get("daily-0000").cloned().unwrap_or_default();
    assert!(
        faster.len() >= 5,
        "the changed row runs every second: {faster:?}"
    );
    assert!(!ran.contains_key("daily-0001"));
}

/// A million rows put while the instances run must not reach each of them: a poll
/// reads the changes of the rows it holds (or was refused), not every row changed.
#[tokio::test(start_paused = true)]
async fn rows_put_while_running_are_not_read_until_due() {
    let memory = store();
    let now = memory.clock().now();
    let mut rows = daily(2, now);
    rows.push(ScheduleRow::new("each", HANDLER, "every 1s"));
    setup(&memory, &rows).await;
    let ran = Ran::default();
    let store = counted(&memory);
    let putter = {
        let memory = memory.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(3)).await;
            let many: Vec<ScheduleRow> = daily(2_002, now).split_off(2);
            memory
                .put_schedules(&many, "ops", "import")
                .await
                .expect("put");
            tokio::time::sleep(Duration::from_secs(2)).await;
            // A row held here, changed: still read.
            let slower = ScheduleRow::new("each", HANDLER, "every 2s");
            memory
                .put_schedule(&slower, "ops", "slower")
                .await
                .expect("put");
        }
    };
    let handle = tokio::spawn(putter);
    scheduler(&store, "node-a", &ran)
        .run_until(tokio::time::sleep(Duration::from_secs(12)))
        .await;
    handle.await.expect("putter");
    let read = store.changed_rows.load(Ordering::SeqCst);
    assert!(
        read <= 2,
        "the polls read {read} changed rows; only the one held here changed"
    );
    let ran = ran.lock().unwrap().clone();
    let each = ran.get("each").cloned().unwrap_or_default();
    let late: Vec<_> = each
        .iter()
        .filter(|t| **t > now + TimeDelta::seconds(8))
        .collect();
    assert!(
        !late.is_empty()
            && late
                .windows(2)
                .all(|w| *w[1] - *w[0] >= TimeDelta::seconds(2)),
        "the change of the row held here applied: {each:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn rows_not_due_soon_are_let_go_and_loaded_again_before_each_tick() {
    minutely_rows(0).await;
}

/// Under the rows an instance holds at least
/// ([`SchedulerBuilder::schedules_held`](scheduler_core::SchedulerBuilder::schedules_held)),
/// no row is let go: each keeps its counts.
#[tokio::test(start_paused = true)]
async fn rows_within_the_held_budget_are_not_let_go() {
    minutely_rows(20).await;
}

/// Twenty rows every minute for five minutes, `held` rows held at least.
async fn minutely_rows(held: usize) {
    let memory = store();
    // Twenty rows each once a minute, at second `3 i` of the minute; every other
    // one runs its ticks concurrently, two lease slots taking turns.
    let rows: Vec<ScheduleRow> = (0..20)
        .map(|i| {
            let mut row = ScheduleRow::new(
                format!("minute-{i:02}"),
                HANDLER,
                format!("{} * * * * *", i * 3),
            );
            if i % 2 == 1 {
                row.policy = r#"overlap = "concurrent", max_concurrent = 2"#.to_owned();
            }
            row
        })
        .collect();
    setup(&memory, &rows).await;
    let ran = Ran::default();
    let store = counted(&memory);
    let started = memory.clock().now();
    let running = scheduler_held(&store, "node-a", &ran, held);
    let stats = running.stats();
    running
        .run_until(tokio::time::sleep(Duration::from_secs(300)))
        .await;
    let ended = memory.clock().now();
    let ran = ran.lock().unwrap().clone();
    for (i, row) in rows.iter().enumerate() {
        let ticks = ran.get(&row.name).cloned().unwrap_or_default();
        // Every tick of the row from its first minute on (a tick before the first
        // poll is the row's start-up's) ran once, in order, none missed.
        let expected: Vec<DateTime<Utc>> = (0..6)
            .map(|m| {
                let minute = (started + TimeDelta::minutes(m)).with_second(0).unwrap();
                minute.with_nanosecond(0).unwrap() + TimeDelta::seconds(i as i64 * 3)
            })
            .filter(|t| *t > started + TimeDelta::seconds(1) && *t < ended - TimeDelta::seconds(2))
            .collect();
        let got: Vec<DateTime<Utc>> = ticks
            .iter()
            .copied()
            .filter(|t| expected.contains(t))
            .collect();
        assert_eq!(got, expected, "{}: ran {ticks:?}", row.name);
        assert!(ticks.len() <= got.len() + 1, "{}: {ticks:?}", row.name);
        // Let go after each tick (its counts with it) and loaded again before the
        // next: the counts hold at most the last minute's run, not every run.
        let counted = stats.count(&row.name, scheduler_core::Outcome::Succeeded);
        if held == 0 {
            assert!(
                counted <= 1 && ticks.len() >= 4,
                "{}: {counted} runs counted of {}: never let go",
                row.name,
                ticks.len()
            );
        } else {
            assert_eq!(counted, ticks.len() as u64, "{}: let go", row.name);
        }
    }
}

/// A row paused just before its tick, its tick refused as paused, then resumed
/// with catch-up: the catch-up runs the tick, though the row was idle with its next
/// tick far off when the poll after the refusal began (before that poll read the
/// pause). It was let go then, its bound moved past the tick, and the resume found
/// nothing to catch up.
#[tokio::test(start_paused = true)]
async fn a_tick_refused_as_paused_is_caught_up_by_the_resume() {
    let memory = store();
    let row = ScheduleRow::new("minute", HANDLER, "0 * * * * *");
    setup(&memory, std::slice::from_ref(&row)).await;
    let now = memory.clock().now();
    // The first whole minute at least 20 s away.
    let tick = (now + TimeDelta::seconds(80))
        .with_second(0)
        .and_then(|t| t.with_nanosecond(0))
        .unwrap();
    let until = |at: DateTime<Utc>| (at - memory.clock().now()).to_std().unwrap_or_default();
    // Polls every 5 s from 8 s before the tick: at -8, -3, +2, +7 s.
    tokio::time::sleep(until(tick - TimeDelta::seconds(8))).await;
    let ran = Ran::default();
    let store = counted(&memory);
    let running = Scheduler::builder(store.clone())
        .node_id("node-a")
        .lease_ttl(TTL)
        .control_poll(Some(Duration::from_secs(5)))
        .load_schedules_when_due(true)
        .schedules_look_ahead(Duration::from_secs(15))
        .handler(HANDLER, {
            let ran = ran.clone();
            move |ctx: JobContext, _args: Arc<str>| {
                let ran = ran.clone();
                async move {
                    ran.lock()
                        .unwrap()
                        .entry(ctx.job().to_owned())
                        .or_default()
                        .push(ctx.tick().at());
                    Ok(())
                }
            }
        })
        .build()
        .expect("build");
    let operator = {
        let memory = memory.clone();
        async move {
            let wait = |at: DateTime<Utc>| (at - memory.clock().now()).to_std().unwrap_or_default();
            tokio::time::sleep(wait(tick - TimeDelta::seconds(1))).await;
            memory
                .pause(&ControlRequest::new("minute", "ops").why("hold"))
                .await
                .expect("pause");
            tokio::time::sleep(wait(tick + TimeDelta::seconds(4))).await;
            memory
                .resume(&ControlRequest::new("minute", "ops").why("go"), true)
                .await
                .expect("resume");
        }
    };
    tokio::spawn(operator);
    running
        .run_until(tokio::time::sleep(Duration::from_secs(25)))
        .await;
    let ran = ran.lock().unwrap().clone();
    let ticks = ran.get("minute").cloned().unwrap_or_default();
    // (The minute before may run too: the row's start-up catches it up.)
    let caught_up = ticks.iter().filter(|t| **t == tick).count();
    assert_eq!(
        caught_up, 1,
        "the paused tick {tick}, caught up once: {ticks:?}"
    );
    assert!(ticks.iter().all(|t| *t <= tick), "{ticks:?}");
}

/// A trigger of a row that is not loaded, whose read by name went with a poll that
/// failed: asked again at the next poll, not forgotten until the row comes due (a
/// day away) or another control changes.
#[tokio::test(start_paused = true)]
async fn a_triggered_row_is_read_again_after_a_failed_poll() {
    let memory = store();
    let now = memory.clock().now();
    setup(&memory, &daily(3, now)).await;
    let ran = Ran::default();
    let store = counted(&memory);
    // The first poll reads the trigger; the second, which reads its row by name,
    // fails at its due read.
    store.fail_due_read.store(2, Ordering::SeqCst);
    memory
        .trigger(&ControlRequest::new("daily-0002", "ops").why("now, please"))
        .await
        .expect("trigger");
    scheduler(&store, "node-a", &ran)
        .run_until(tokio::time::sleep(Duration::from_secs(20)))
        .await;
    let ran = ran.lock().unwrap().clone();
    assert_eq!(ran.get("daily-0002").map(Vec::len), Some(1), "{ran:?}");
}

/// Rows loaded as they come due catch up a resume made while every instance was
/// down as rows loaded at once do: each instance starts after the pause and the
/// resume (with catch-up) of a row under `catch_up = "all"`, and the ticks the
/// pause covered run, each once.
#[tokio::test(start_paused = true)]
async fn a_resume_made_while_every_instance_was_down_is_caught_up_when_the_row_loads() {
    for when_due in [false, true] {
        resumed_while_down(when_due, 0, false).await;
    }
}

/// A resume of the row on another node, read by the same first poll, does not
/// take the place of the resume everywhere (a review found it did).
#[tokio::test(start_paused = true)]
async fn a_resume_on_another_node_leaves_the_resume_everywhere_to_catch_up() {
    for (when_due, before) in [(true, 0), (false, 2_500)] {
        resumed_while_down(when_due, before, true).await;
    }
}

/// So do rows loaded at once that a first poll applies over several turns: the
/// resumed row comes after 2,500 others (a turn applies 2,000).
#[tokio::test(start_paused = true)]
async fn a_resume_read_before_its_row_is_applied_is_caught_up_when_it_is() {
    resumed_while_down(false, 2_500, false).await;
}

async fn resumed_while_down(when_due: bool, before: usize, other_node: bool) {
    {
        let memory = store();
        let mut row = ScheduleRow::new("tenner", HANDLER, "every 10s");
        row.policy = "catch_up = \"all\", catch_up_max = 3".into();
        let mut rows: Vec<ScheduleRow> = (0..before)
            .map(|i| ScheduleRow::new(format!("daily-{i:04}"), HANDLER, "0 0 3 * * *"))
            .collect();
        rows.push(row);
        setup(&memory, &rows).await;
        let store = counted(&memory);
        let ran = Ran::default();
        let make = |node: &str| scheduler_in(&store, node, &ran, when_due);
        make("node-a")
            .run_until(tokio::time::sleep(Duration::from_secs(25)))
            .await;
        if other_node {
            let there = ControlRequest::new("tenner", "ops").node("node-z");
            memory.pause(&there).await.expect("pause on node-z");
            tokio::time::sleep(Duration::from_secs(1)).await;
            memory.resume(&there, true).await.expect("resume on node-z");
        }
        let request = ControlRequest::new("tenner", "ops");
        memory.pause(&request).await.expect("pause");
        let since = memory.clock().now();
        tokio::time::sleep(Duration::from_secs(35)).await;
        memory.resume(&request, true).await.expect("resume");
        let resumed = memory.clock().now();
        tokio::time::sleep(Duration::from_secs(2)).await;
        make("node-b")
            .run_until(tokio::time::sleep(Duration::from_secs(20)))
            .await;
        let ticks = ran
            .lock()
            .unwrap()
            .get("tenner")
            .cloned()
            .unwrap_or_default();
        let paused_over: Vec<_> = ticks
            .iter()
            .filter(|t| since <= **t && **t <= resumed)
            .collect();
        assert_eq!(
            paused_over.len(),
            3,
            "when_due {when_due}: the ticks paused over ({since} to {resumed}) that ran: {paused_over:?}; all: {ticks:?}"
        );
        let mut once = ticks.clone();
        once.dedup();
        assert_eq!(once, ticks, "when_due {when_due}: a tick ran twice");
    }
}
