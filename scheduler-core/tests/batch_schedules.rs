//! A batch of dynamic schedules ([`Controls::put_schedules`]) as the runtime picks it
//! up: one version bump that changed hundreds of rows, every row run at its tick,
//! each once.
//!
//! On the in-memory store, on paused tokio time.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use scheduler_core::{Controls, JobContext, Outcome, ScheduleRow};
use support::{builder, store};

const ROWS: usize = 300;

#[tokio::test(start_paused = true)]
async fn a_batch_put_runs_each_schedule_once_per_tick() {
    let store = store();
    let ran: Arc<Mutex<BTreeMap<String, Vec<i64>>>> = Arc::default();
    let r = ran.clone();
    // The put lands 1.5 s into a 10 s period (at least 500 ms after the start, for
    // the handler to register at the first poll): its window of 9.5 s then holds one
    // tick of every 10 s (put at a period's start, the first tick would come after
    // the window, as it did when the wall clock began 0.5–1.5 s before a period).
    let into = store.clock().now().timestamp_millis().rem_euclid(10_000);
    let mut wait = (1_500 - into).rem_euclid(10_000);
    if wait < 500 {
        wait += 10_000;
    }
    let scheduler = builder(&store)
        .control_poll(Some(Duration::from_millis(200)))
        .handler("per-customer", move |ctx: JobContext, args: Arc<str>| {
            let r = r.clone();
            async move {
                let customer = format!("{}:{args}", ctx.job());
                r.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(customer)
                    .or_default()
                    .push(ctx.tick().at().timestamp());
                Ok(())
            }
        })
        .build()
        .expect("build");
    let stats = scheduler.stats();
    let s = store.clone();
    let put_at = Arc::new(Mutex::new(None));
    let p = put_at.clone();
    scheduler
        .run_until(async move {
            // The handler registers at the first poll.
            tokio::time::sleep(Duration::from_millis(u64::try_from(wait).unwrap_or(0))).await;
            let rows: Vec<ScheduleRow> = (0..ROWS)
                .map(|i| {
                    let mut row =
                        ScheduleRow::new(format!("customer-{i:03}"), "per-customer", "every 10s");
                    row.args = format!("{i}");
                    row
                })
                .collect();
            let record = s
                .put_schedules(&rows, "ops", "today's customers")
                .await
                .expect("put the batch")
                .expect("recorded");
            *p.lock().unwrap_or_else(|e| e.into_inner()) = Some(record.at);
            // Long enough for one tick of every 10 s, not two.
            tokio::time::sleep(Duration::from_millis(9_500)).await;
        })
        .await;
    let ran = ran.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert_eq!(ran.len(), ROWS, "every row of the batch ran");
    for (i, (customer, ticks)) in ran.iter().enumerate() {
        assert_eq!(customer, &format!("customer-{i:03}:{i}"), "its own args");
        assert_eq!(ticks.len(), 1, "{customer} ran once: {ticks:?}");
        assert_eq!(
            stats.count(&format!("customer-{i:03}"), Outcome::Succeeded),
            1
        );
    }
    // Every row runs the same tick: the batch is one change, applied at once.
    let first: Vec<i64> = ran.values().map(|t| t[0]).collect();
    assert!(first.windows(2).all(|w| w[0] == w[1]), "{first:?}");
    let put_at = put_at
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .expect("put");
    assert!(
        first[0] >= put_at.timestamp() - 10,
        "{first:?} put at {put_at}"
    );
}
