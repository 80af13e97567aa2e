//! A store that announces its control changes ([`Controls::watch`]) is polled when
//! one is announced instead of on the `control_poll` timer: an idle instance sends no
//! control read between changes, a change is seen at once, and the timer takes over
//! whenever the announcements cannot be trusted (the watch is down, a poll failed, a
//! trigger waits for its job's lease).
//!
//! On the in-memory store, on paused tokio time.

mod support;

use std::time::Duration;

use scheduler_core::{ControlRequest, Controls, Outcome, TriggerState};
use support::{Log, Probe, builder, mid_second, runs, store};

/// Where in a minute the idle test starts.
const SECOND_OF_MINUTE: i64 = 10;

async fn sleep(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// A job every minute, 10 ms of work.
fn minutely(store: &std::sync::Arc<scheduler_core::MemoryStore>, log: &Log) -> Probe {
    let mut job = Probe::new("minutely", store, log);
    job.every = Duration::from_secs(60);
    job
}

/// Sleeps until [`SECOND_OF_MINUTE`] of a minute on `store`'s clock.
async fn to_second_of_minute(store: &std::sync::Arc<scheduler_core::MemoryStore>) {
    let into = store.clock().now().timestamp().rem_euclid(60);
    sleep(u64::try_from((SECOND_OF_MINUTE - into).rem_euclid(60)).unwrap_or(0) * 1_000).await;
}

/// Runs `scheduler` until `operator` ends; returns what it returned.
#[allow(clippy::expect_used)]
async fn run_while<T: Send + 'static>(
    scheduler: scheduler_core::Scheduler,
    operator: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    let (tx, rx) = tokio::sync::oneshot::channel();
    scheduler
        .run_until(async move {
            let _ = tx.send(operator.await);
        })
        .await;
    rx.await.expect("operator")
}

#[tokio::test(start_paused = true)]
async fn an_idle_instance_polls_the_controls_only_when_a_change_is_announced() {
    let (store, log) = (store(), Log::default());
    store.announce_controls(true);
    mid_second(&store).await;
    // Ten and a half seconds into a minute: the trigger, 182 s later, and its second
    // of grace do not meet a minutely tick (from the 58th second of a minute they
    // did, and that tick's run counted as the trigger's).
    to_second_of_minute(&store).await;
    // The default poll interval (5 s): without the watch, 36 polls in three minutes.
    let scheduler = builder(&store)
        .job(minutely(&store, &log))
        .build()
        .expect("build");
    let s = store.clone();
    let (idle, asked, status) = run_while(scheduler, async move {
        sleep(2_000).await;
        let settled = s.control_polls();
        sleep(180_000).await;
        let idle = s.control_polls() - settled;
        let asked = s.clock().now();
        let trigger = s
            .trigger(&ControlRequest::new("minutely", "alice"))
            .await
            .expect("trigger");
        sleep(1_000).await;
        let status = s.trigger_status(trigger.id).await.expect("status");
        (idle, asked, status)
    })
    .await;
    assert_eq!(idle, 0, "control polls in three idle minutes");
    // The trigger was announced, polled, claimed and run within the second.
    assert!(matches!(
        &status.map(|t| t.state),
        Some(TriggerState::Done {
            outcome: Outcome::Succeeded,
            ..
        })
    ),);
    let triggered: Vec<_> = runs(&log, "minutely")
        .into_iter()
        .filter(|r| r.started >= asked)
        .collect();
    assert_eq!(triggered.len(), 1, "{triggered:?}");
    assert!(
        triggered[0].started - asked < chrono::TimeDelta::milliseconds(100),
        "{triggered:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_timer_polls_while_the_watch_is_down_and_stops_when_it_is_back() {
    let (store, log) = (store(), Log::default());
    store.announce_controls(true);
    mid_second(&store).await;
    let scheduler = builder(&store)
        .control_poll(Some(Duration::from_secs(1)))
        .job(minutely(&store, &log))
        .build()
        .expect("build");
    let s = store.clone();
    let (live, down, seen_down, back) = run_while(scheduler, async move {
        sleep(2_000).await;
        let a = s.control_polls();
        sleep(10_000).await;
        let live = s.control_polls() - a;
        // The listener goes down: changes go unannounced, the timer polls.
        s.announce_controls(false);
        let b = s.control_polls();
        sleep(10_000).await;
        let down = s.control_polls() - b;
        // A resume made meanwhile is seen by a timer's poll.
        s.pause(&ControlRequest::new("minutely", "bob"))
            .await
            .expect("pause");
        sleep(1_500).await;
        let seen_down = s.control_polls() - b - down;
        // Back: one poll for what went unannounced, then none.
        s.announce_controls(true);
        sleep(1_000).await;
        let c = s.control_polls();
        sleep(10_000).await;
        let back = s.control_polls() - c;
        (live, down, seen_down, back)
    })
    .await;
    assert_eq!(live, 0, "polls in 10 s of a live watch");
    assert!(
        (9..=11).contains(&down),
        "{down} polls in 10 s of a watch down"
    );
    assert!(seen_down >= 1, "{seen_down}");
    assert_eq!(back, 0, "polls in 10 s once the watch is back");
}

#[tokio::test(start_paused = true)]
async fn a_trigger_waiting_for_its_jobs_lease_is_claimed_by_the_timer() {
    let (store, log) = (store(), Log::default());
    store.announce_controls(true);
    mid_second(&store).await;
    // Hourly, caught up at start-up, working 5 s: a trigger requested during the
    // start-up run waits for its lease (overlap policy "buffer one"), and nothing
    // announces the run's end.
    let mut long = minutely(&store, &log);
    long.every = Duration::from_secs(3_600);
    long.catch_up = Some(Duration::from_secs(3_600));
    long.work = Duration::from_secs(5);
    let scheduler = builder(&store)
        .control_poll(Some(Duration::from_millis(500)))
        .job_with_policy(
            long,
            scheduler_core::Policy::default().overlap(scheduler_core::Overlap::BufferOne),
        )
        .build()
        .expect("build");
    let s = store.clone();
    let status = run_while(scheduler, async move {
        // Into the start-up run (until about 5 s in).
        sleep(1_000).await;
        let trigger = s
            .trigger(&ControlRequest::new("minutely", "carol"))
            .await
            .expect("trigger");
        sleep(12_000).await;
        s.trigger_status(trigger.id).await.expect("status")
    })
    .await;
    let all = runs(&log, "minutely");
    assert!(
        matches!(
            &status.map(|t| t.state),
            Some(TriggerState::Done {
                outcome: Outcome::Succeeded,
                ..
            })
        ),
        "{all:?}"
    );
    assert_eq!(all.len(), 2, "{all:?}");
}

#[tokio::test(start_paused = true)]
async fn a_failed_poll_is_asked_again_by_the_timer_not_at_every_turn() {
    let (store, log) = (store(), Log::default());
    store.announce_controls(true);
    mid_second(&store).await;
    let mut hourly = minutely(&store, &log);
    hourly.every = Duration::from_secs(3_600);
    let scheduler = builder(&store)
        .control_poll(Some(Duration::from_secs(1)))
        .job(hourly)
        .build()
        .expect("build");
    let s = store.clone();
    let (failing, polled, after) = run_while(scheduler, async move {
        sleep(2_000).await;
        // A pause goes unannounced (the watch is down), the store fails, and the
        // watch comes back: the poll that prompts fails.
        s.announce_controls(false);
        s.pause(&ControlRequest::new("minutely", "erin"))
            .await
            .expect("pause");
        sleep(1_000).await;
        let polls = s.control_polls();
        s.set_failing(true);
        s.announce_controls(true);
        let calls = s.calls();
        sleep(3_000).await;
        let failing = s.calls() - calls;
        s.set_failing(false);
        sleep(1_500).await;
        let polled = s.control_polls() - polls;
        sleep(10_000).await;
        let after = s.control_polls() - polls;
        (failing, polled, after)
    })
    .await;
    // About one attempt a second (the timer), not one per turn of the loop.
    assert!(
        (1..=5).contains(&failing),
        "{failing} calls in 3 s of failing"
    );
    // The store answers again: the timer's next poll reads the controls, and the
    // live watch then stops the timer.
    assert_eq!(polled, 1, "polls once the store answers");
    assert_eq!(after, 1, "polls in the 10 s after");
}

/// An instance that loads its dynamic schedules as they come due polls on its timer
/// for the rows coming due, and at once when a change is announced: a trigger does
/// not wait for the timer.
#[tokio::test(start_paused = true)]
async fn an_instance_loading_rows_as_they_come_due_polls_when_a_change_is_announced() {
    let (store, log) = (store(), Log::default());
    store.announce_controls(true);
    mid_second(&store).await;
    to_second_of_minute(&store).await;
    let scheduler = builder(&store)
        .control_poll(Some(Duration::from_secs(60)))
        .load_schedules_when_due(true)
        .job(minutely(&store, &log))
        .build()
        .expect("build");
    let s = store.clone();
    let (asked, status) = run_while(scheduler, async move {
        sleep(2_000).await;
        let asked = s.clock().now();
        let trigger = s
            .trigger(&ControlRequest::new("minutely", "alice"))
            .await
            .expect("trigger");
        sleep(1_000).await;
        let status = s.trigger_status(trigger.id).await.expect("status");
        (asked, status)
    })
    .await;
    assert!(
        matches!(
            &status.as_ref().map(|t| &t.state),
            Some(TriggerState::Done {
                outcome: Outcome::Succeeded,
                ..
            })
        ),
        "{status:?}"
    );
    let triggered: Vec<_> = runs(&log, "minutely")
        .into_iter()
        .filter(|r| r.started >= asked)
        .collect();
    assert_eq!(triggered.len(), 1, "{triggered:?}");
    assert!(
        triggered[0].started - asked < chrono::TimeDelta::milliseconds(100),
        "{triggered:?}"
    );
}
