//! A control poll that takes long (a first poll reading millions of schedules) holds
//! up no job in code, and one longer than the store-call bound still ends in the
//! dynamic schedules running.
//!
//! On the in-memory store, its first poll slowed on purpose, on paused tokio time.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use chrono::Timelike;

use scheduler_core::{Controls, ScheduleRow, Scheduler};
use support::{Faulty, Log, Probe, mid_second, runs, store};

/// A lease ttl of 8 s: renewals every 2 s, so a store call is waited for 4 s.
const TTL: Duration = Duration::from_secs(8);

fn slow(memory: &Arc<scheduler_core::MemoryStore>, first_poll_takes: Duration) -> Arc<Faulty> {
    Arc::new(Faulty {
        inner: memory.clone(),
        failing_finishes: AtomicU32::new(0),
        hang_claims: false,
        early: AtomicU32::new(0),
        failing_heartbeats: AtomicBool::new(false),
        beats: AtomicU32::new(0),
        first_poll_takes,
        due_rows: std::sync::atomic::AtomicU64::new(0),
        fail_due_read: std::sync::atomic::AtomicU32::new(0),
        changed_rows: std::sync::atomic::AtomicU64::new(0),
    })
}

#[tokio::test(start_paused = true)]
async fn a_slow_first_poll_holds_up_no_job_in_code() {
    let (memory, log) = (store(), Log::default());
    mid_second(&memory).await;
    let started = memory.clock().now();
    let scheduler = Scheduler::builder(slow(&memory, Duration::from_secs(3)))
        .node_id("node-a")
        .lease_ttl(TTL)
        .control_poll(Some(Duration::from_millis(500)))
        .job(Probe::new("tick", &memory, &log))
        .build()
        .expect("build");
    scheduler
        .run_until(tokio::time::sleep(Duration::from_secs(10)))
        .await;
    let ran = runs(&log, "tick");
    // Every tick from the first second on, each started on time: the loop went on
    // while the poll was read (it held the loop 3 s, and the ticks of those seconds
    // ran late or not at all).
    for s in 1..=8 {
        let tick = started + chrono::TimeDelta::seconds(s);
        let tick = tick.with_nanosecond(0).expect("a whole second");
        let run = ran
            .iter()
            .find(|r| r.tick == tick)
            .unwrap_or_else(|| panic!("tick {tick} did not run: {ran:?}"));
        let late = run.started - run.tick;
        assert!(
            late < chrono::TimeDelta::milliseconds(500),
            "tick {tick} ran {late} late"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_first_poll_longer_than_the_call_bound_still_starts_the_dynamic_schedules() {
    let memory = store();
    mid_second(&memory).await;
    memory
        .register_handlers("node-a", &["count".to_string()])
        .await
        .expect("register");
    memory
        .put_schedule(&ScheduleRow::new("each", "count", "every 1s"), "ops", "")
        .await
        .expect("put");
    let count = Arc::new(AtomicU32::new(0));
    let counted = count.clone();
    // 6 s to read every row, past the 4 s a store call is waited for.
    let scheduler = Scheduler::builder(slow(&memory, Duration::from_secs(6)))
        .node_id("node-a")
        .lease_ttl(TTL)
        .control_poll(Some(Duration::from_millis(500)))
        .handler(
            "count",
            move |_ctx: scheduler_core::JobContext, _args: Arc<str>| {
                let counted = counted.clone();
                async move {
                    counted.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                }
            },
        )
        .build()
        .expect("build");
    scheduler
        .run_until(tokio::time::sleep(Duration::from_secs(120)))
        .await;
    let ran = count.load(Ordering::SeqCst);
    assert!(
        ran > 0,
        "the dynamic schedule never ran: no first poll answered in time"
    );
}
