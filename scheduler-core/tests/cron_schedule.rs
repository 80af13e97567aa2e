//! Cron schedules through the runtime, on the in-memory store and paused tokio time:
//! an every-second expression is accepted and fires every second, a job limited to
//! night hours fires again the next night, and `#[job]` and `build()` agree on what
//! they accept.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use scheduler_core::{
    BoxError, Idempotent, JobContext, LocalClock, MemoryStore, Schedule, Scheduler, job,
};

type Log = Arc<Mutex<Vec<DateTime<Utc>>>>;

/// A job on a cron expression that records the ticks it ran for.
struct Cron {
    expr: &'static str,
    log: Log,
}

#[scheduler_core::async_trait]
impl Idempotent for Cron {
    fn name(&self) -> &str {
        "cron"
    }
    fn schedule(&self) -> Schedule {
        Schedule::cron(self.expr)
    }
    async fn run(&self, ctx: JobContext) -> Result<(), BoxError> {
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(ctx.tick().at());
        Ok(())
    }
}

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .map(|d| d.with_timezone(&Utc))
        .unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// Runs the job on `expr` from `start` for `run_for` of paused time; the ticks it ran.
async fn run_cron(expr: &'static str, start: &str, run_for: Duration) -> Vec<DateTime<Utc>> {
    let clock = LocalClock::starting_at(utc(start));
    let store = Arc::new(MemoryStore::with_clock(clock));
    // As if the job ran before: start-up catches up the tick before it.
    store.set_jobs_known(true);
    let log = Log::default();
    let scheduler = Scheduler::builder(store)
        .clock(clock)
        .node_id("node-a")
        .lease_ttl(Duration::from_secs(4))
        .job(Cron {
            expr,
            log: log.clone(),
        })
        .build()
        .unwrap_or_else(|e| panic!("{expr:?} was refused: {e}"));
    scheduler.run_until(tokio::time::sleep(run_for)).await;
    log.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

#[tokio::test(start_paused = true)]
async fn every_second_cron_is_accepted_and_fires_every_second() {
    for expr in ["* * * * * *", "0-58 * * * * *"] {
        assert_eq!(Schedule::cron(expr).validate(), Ok(()), "{expr}");
        assert_eq!(
            expr.parse::<Schedule>().map(|s| s.to_string()),
            Ok(format!("cron \"{expr}\" in UTC"))
        );
    }
    let ticks = run_cron(
        "* * * * * *",
        "2026-06-01T10:00:00.500Z",
        Duration::from_millis(5_800),
    )
    .await;
    // The tick half a second before the start is caught up (within its window of
    // one period), then every second.
    let want: Vec<_> = (0..=6)
        .map(|s| utc("2026-06-01T10:00:00Z") + TimeDelta::seconds(s))
        .collect();
    assert_eq!(ticks, want);
}

#[tokio::test(start_paused = true)]
async fn a_windowed_cron_fires_again_the_next_night() {
    // Every second from 00:00:00 to 02:59:59; started just before the night's last
    // ticks (the one half a second before the start is caught up), it must run them
    // and then again from midnight.
    let ticks = run_cron(
        "* * 0-2 * * *",
        "2026-06-01T02:59:57.500Z",
        Duration::from_secs(21 * 3600 + 4),
    )
    .await;
    assert_eq!(
        ticks,
        [
            utc("2026-06-01T02:59:57Z"),
            utc("2026-06-01T02:59:58Z"),
            utc("2026-06-01T02:59:59Z"),
            utc("2026-06-02T00:00:00Z"),
            utc("2026-06-02T00:00:01Z"),
        ]
    );
}

/// Fires every second, accepted by `#[job]`.
#[job(cron = "* * * * * *")]
async fn every_second(_: JobContext) -> Result<(), BoxError> {
    Ok(())
}

/// Fires on all seconds but the last of each minute, accepted by `#[job]`.
#[job(cron = "0-58 * * * * *", tz = "Europe/Berlin")]
async fn almost_every_second(_: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[test]
fn the_macro_and_build_accept_the_same_cron() {
    let scheduler = Scheduler::builder(MemoryStore::new())
        .job(every_second)
        .job(almost_every_second)
        .build();
    assert!(scheduler.is_ok(), "{:?}", scheduler.err());
}
