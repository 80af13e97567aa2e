//! Races between triggers, scheduled ticks and a failing or hanging controls table
//! (a review's tests of issue 17's runtime; each failed before its fix).
//!
//! On the in-memory store, on paused tokio time.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use scheduler_core::{CatchUp, ControlRequest, Controls, Outcome, Overlap, Policy, TriggerState};
use support::{Faulty, Log, Probe, builder, mid_second, runs, store};

async fn sleep(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// The store's clock rounded up to the next multiple of `secs`.
fn next_multiple(now: DateTime<Utc>, secs: i64) -> DateTime<Utc> {
    let t = now.timestamp();
    DateTime::from_timestamp((t / secs + 1) * secs, 0).unwrap()
}

/// An instance on `node` running an hourly job (catch-up window 1 s, 4 s ttl,
/// controls polled every 200 ms) whose runs work `work` (the probe's default if
/// `None`).
fn hourly(
    store: &Arc<Faulty>,
    memory: &Arc<scheduler_core::MemoryStore>,
    log: &Log,
    node: &str,
    work: Option<Duration>,
) -> scheduler_core::Scheduler {
    let mut job = Probe::new("hourly", memory, log);
    job.every = Duration::from_secs(3_600);
    job.catch_up = Some(Duration::from_secs(1));
    if let Some(work) = work {
        job.work = work;
    }
    scheduler_core::Scheduler::builder(store.clone())
        .node_id(node)
        .lease_ttl(Duration::from_secs(4))
        .control_poll(Some(Duration::from_millis(200)))
        .job(job)
        .build()
        .expect("build")
}

/// Sleeps until half past the store's hour: between hourly ticks.
async fn half_past(memory: &scheduler_core::MemoryStore) {
    let into = memory.clock().now().timestamp() % 3_600;
    tokio::time::sleep(Duration::from_secs(
        u64::try_from((1_800 - into).rem_euclid(3_600)).unwrap(),
    ))
    .await;
}

// ---------------------------------------------------------------------------
// 2. A trigger of a concurrent job whose slots are all busy is recorded skipped
//    (engine/controls.rs says "run beside, once a slot frees").
// ---------------------------------------------------------------------------
#[tokio::test(start_paused = true)]
async fn a_trigger_of_a_busy_concurrent_job_waits_for_a_slot() {
    let (store, log) = (store(), Log::default());
    let mut long = Probe::new("conc", &store, &log);
    long.every = Duration::from_secs(3_600);
    long.catch_up = Some(Duration::from_secs(3_600));
    long.work = Duration::from_secs(5);
    let scheduler = builder(&store)
        .control_poll(Some(Duration::from_millis(200)))
        .job_with_policy(
            long,
            Policy::default().overlap(Overlap::Concurrent { max: 2 }),
        )
        .build()
        .expect("build");
    let s = store.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    scheduler
        .run_until(async move {
            // The start-up run holds one slot; the first trigger takes the other.
            sleep(1_000).await;
            let first = s
                .trigger(&ControlRequest::new("conc", "erin"))
                .await
                .unwrap();
            sleep(1_000).await;
            let second = s
                .trigger(&ControlRequest::new("conc", "erin"))
                .await
                .unwrap();
            sleep(15_000).await;
            let _ = tx.send((first, second));
        })
        .await;
    let (first, second) = rx.await.unwrap();
    for t in [first, second] {
        let state = store.trigger_status(t.id).await.unwrap().unwrap().state;
        assert!(
            matches!(
                &state,
                TriggerState::Done {
                    outcome: Outcome::Succeeded,
                    ..
                }
            ),
            "trigger {}: {state:?}; runs: {:?}",
            t.id,
            runs(&log, "conc")
                .iter()
                .map(|r| r.tick)
                .collect::<Vec<_>>()
        );
    }
}

// ---------------------------------------------------------------------------
// 3. A triggered run whose end cannot be recorded for longer than the ttl runs
//    again on another instance: its lease is no longer renewed once the run ended.
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_triggered_run_whose_end_is_recorded_late_does_not_run_again() {
    let (memory, log) = (store(), Log::default());
    // Recording the end fails 30 times in a row (full-jitter backoff capped at 1 s: several seconds) on a 4 s ttl:
    // a store statement that keeps failing (a deadlock retry storm, a constraint,
    // a NUL byte in the error text on PostgreSQL) or a partition of this instance.
    let store = Arc::new(Faulty {
        failing_finishes: AtomicU32::new(30),
        ..Faulty::over(memory.clone())
    });
    let make = |node: &str| hourly(&store, &memory, &log, node, None);
    let (a, b) = (make("node-a"), make("node-b"));
    half_past(&memory).await;
    let m = memory.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        sleep(100).await;
        let t = m
            .trigger(&ControlRequest::new("hourly", "frank"))
            .await
            .unwrap();
        sleep(15_000).await;
        let _ = tx.send(t);
        let _ = stop_tx.send(true);
    });
    let stop = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    tokio::join!(
        a.run_until(stop(stop_rx.clone())),
        b.run_until(stop(stop_rx))
    );
    let t = rx.await.unwrap();
    let all = runs(&log, "hourly");
    let status = memory.trigger_status(t.id).await.unwrap().unwrap();
    assert_eq!(
        all.len(),
        1,
        "one trigger, {} runs: {:?}; trigger now {:?}",
        all.len(),
        all.iter().map(|r| (&r.node, r.started)).collect::<Vec<_>>(),
        status.state
    );
}

// ---------------------------------------------------------------------------
// 4. A trigger claimed between a tick's instant and its (jittered) take swallows
//    that tick: claim_trigger moves the lease's tick to the trigger's instant,
//    past the tick, which the store then refuses as "a later tick already taken".
// ---------------------------------------------------------------------------
async fn jittered_ticks_with_triggers(trigger: bool) -> (Vec<DateTime<Utc>>, Vec<DateTime<Utc>>) {
    let (store, log) = (store(), Log::default());
    mid_second(&store).await;
    let make = |node: &str| {
        let mut job = Probe::new("ten", &store, &log);
        job.every = Duration::from_secs(10);
        // Starts spread over up to 5 s after each tick.
        job.jitter = Duration::from_secs(5);
        builder(&store)
            .node_id(node)
            .control_poll(Some(Duration::from_millis(200)))
            .job_with_policy(job, Policy::default().catch_up(CatchUp::Skip))
            .build()
            .expect("build")
    };
    let (a, b) = (make("node-a"), make("node-b"));
    let t0 = next_multiple(store.clock().now(), 10);
    let ticks: Vec<DateTime<Utc>> = (1..=4).map(|k| t0 + TimeDelta::seconds(10 * k)).collect();
    let s = store.clone();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let asked = ticks.clone();
    tokio::spawn(async move {
        for t in asked {
            // 50 ms after the tick's instant: an operator's "run it now".
            let wait = (t + TimeDelta::milliseconds(50) - s.clock().now())
                .to_std()
                .unwrap();
            tokio::time::sleep(wait).await;
            if trigger {
                s.trigger(&ControlRequest::new("ten", "grace"))
                    .await
                    .unwrap();
            }
        }
        sleep(9_000).await;
        let _ = stop_tx.send(true);
    });
    let stop = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    tokio::join!(
        a.run_until(stop(stop_rx.clone())),
        b.run_until(stop(stop_rx))
    );
    (ticks, runs(&log, "ten").iter().map(|r| r.tick).collect())
}

#[tokio::test(start_paused = true)]
async fn without_triggers_every_jittered_tick_runs() {
    let (ticks, ran) = jittered_ticks_with_triggers(false).await;
    assert!(
        ticks.iter().all(|t| ran.contains(t)),
        "ticks {ticks:?}, ran: {ran:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_trigger_does_not_swallow_a_jittered_tick() {
    let (ticks, ran) = jittered_ticks_with_triggers(true).await;
    let lost: Vec<_> = ticks.iter().filter(|t| !ran.contains(t)).collect();
    assert!(
        lost.is_empty(),
        "scheduled ticks never run: {lost:?}; ran: {ran:?}"
    );
}

// ---------------------------------------------------------------------------
// 6. Control calls are awaited in the loop, one per waiting trigger: a control
//    table that does not answer stalls renewals, and held leases are lost.
// ---------------------------------------------------------------------------
#[tokio::test(start_paused = true)]
async fn stuck_trigger_claims_do_not_cost_the_leases_of_running_jobs() {
    let (memory, log) = (store(), Log::default());
    let store = Arc::new(Faulty {
        inner: memory.clone(),
        failing_finishes: AtomicU32::new(0),
        hang_claims: true,
        early: AtomicU32::new(0),

        failing_heartbeats: std::sync::atomic::AtomicBool::new(false),
        beats: AtomicU32::new(0),
        first_poll_takes: Duration::ZERO,
        due_rows: std::sync::atomic::AtomicU64::new(0),
        fail_due_read: std::sync::atomic::AtomicU32::new(0),
        changed_rows: std::sync::atomic::AtomicU64::new(0),
    });
    let mut long = Probe::new("long", &memory, &log);
    long.every = Duration::from_secs(3_600);
    long.catch_up = Some(Duration::from_secs(3_600));
    long.work = Duration::from_secs(20);
    let mut idle = Probe::new("idle", &memory, &log);
    idle.every = Duration::from_secs(3_600);
    idle.catch_up = Some(Duration::from_secs(1));
    let scheduler = scheduler_core::Scheduler::builder(store.clone())
        .node_id("node-a")
        .lease_ttl(Duration::from_secs(4))
        .control_poll(Some(Duration::from_millis(200)))
        .job(long)
        .job(idle)
        .build()
        .expect("build");
    let stats = scheduler.stats();
    let m = memory.clone();
    scheduler
        .run_until(async move {
            sleep(500).await;
            // Three runs of another job asked for while "long" runs.
            for _ in 0..3 {
                m.trigger(&ControlRequest::new("idle", "henry"))
                    .await
                    .unwrap();
            }
            sleep(15_000).await;
        })
        .await;
    assert_eq!(
        stats.count("long", Outcome::LeaseLost),
        0,
        "the running job's lease was lost while the loop waited on trigger claims"
    );
}

/// Steady state: `n` daily schedules plus n/100 every-minute ones; CPU (wall, on
/// paused time) per simulated minute after start-up, and RSS.

// ---------------------------------------------------------------------------
// 7. A trigger claimed after a later tick ran borrows that tick's identity
//    (lease tick = max(row tick, requested_at)); handing the triggered run back
//    interrupted re-opens a tick that already completed.
// ---------------------------------------------------------------------------
#[tokio::test(start_paused = true)]
async fn a_triggered_run_handed_back_does_not_reopen_a_completed_tick() {
    use scheduler_core::{LeaseName, Release, Store, TakeRequest, Tick, Ttl};
    let store = store();
    let lease = LeaseName::new("job").unwrap();
    let ttl = Ttl::new(Duration::from_secs(30)).unwrap();
    // Asked for while the job ran; claimed after its next tick T ran.
    let t = store
        .trigger(&ControlRequest::new("job", "ivy"))
        .await
        .unwrap();
    sleep(1_000).await;
    let tick = Tick::new(store.clock().now());
    let first = store
        .take(&[TakeRequest::new(lease.clone(), tick)], ttl)
        .await
        .unwrap();
    let ran = first.won[0].clone();
    store
        .release(&[ran.key()], Release::Completed)
        .await
        .unwrap();
    let holder = scheduler_core::Holder::generate();
    let claimed = store
        .claim_trigger(t.id, &lease, &holder, ttl)
        .await
        .unwrap()
        .expect("claimed");
    println!(
        "scheduled tick {}, trigger requested {}, triggered run's tick {}",
        tick, t.requested_at, claimed.tick
    );
    // The triggered run is handed back (shutdown past the grace, or the job returned
    // Interrupted): the runtime releases it Interrupted.
    store
        .finish_trigger(t.id, Some(&holder), Outcome::Cancelled, None)
        .await
        .unwrap();
    store
        .release(&[claimed.key()], Release::Interrupted)
        .await
        .unwrap();
    // An instance that still has T pending (started within T's window, or was told
    // "this tick runs elsewhere") asks for T again.
    let again = store
        .take(&[TakeRequest::new(lease.clone(), tick)], ttl)
        .await
        .unwrap();
    assert!(
        again.won.is_empty(),
        "tick {tick} completed once and was granted again: {:?}",
        again.won
    );
}

// ---------------------------------------------------------------------------
// A triggered run whose end failed to record once, then a graceful shutdown before
// the retry's backoff came: the shutdown recorded nothing (it waited for the
// backoff), and the next instance claimed the trigger again once its claim could
// have expired, and ran it a second time (simulator seed 18431's shape).
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_shutdown_records_a_triggered_runs_end_that_failed_once() {
    let (memory, log) = (store(), Log::default());
    let store = Arc::new(Faulty {
        failing_finishes: AtomicU32::new(1),
        ..Faulty::over(memory.clone())
    });
    let make = |node: &str| {
        hourly(
            &store,
            &memory,
            &log,
            node,
            Some(Duration::from_millis(500)),
        )
    };
    half_past(&memory).await;
    let t = memory
        .trigger(&ControlRequest::new("hourly", "frank"))
        .await
        .unwrap();
    // The run ends about 0.7 s in (a poll claims it within 0.2 s); its end fails to
    // record once; the shutdown comes at once after, before the retry's backoff.
    let a = make("node-a");
    let faulty = store.clone();
    a.run_until(async move {
        while faulty
            .failing_finishes
            .load(std::sync::atomic::Ordering::SeqCst)
            > 0
        {
            sleep(1).await;
        }
    })
    .await;
    let status = memory.trigger_status(t.id).await.unwrap().unwrap();
    assert!(
        !matches!(
            status.state,
            TriggerState::Running { .. } | TriggerState::Pending
        ),
        "the shutdown left the trigger {:?}",
        status.state
    );
    // Another instance, later than the claim could have lasted: nothing to run.
    sleep(5_000).await;
    let b = make("node-b");
    b.run_until(sleep(3_000)).await;
    assert_eq!(
        runs(&log, "hourly").len(),
        1,
        "the trigger ran again: {:?} (trigger {t:?}, now {status:?})",
        runs(&log, "hourly")
    );
}
