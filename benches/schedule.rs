//! The cost of computing a job's next tick (`scheduler_spec`, which
//! `scheduler_core`'s runtime calls once per tick and at start-up): a cron expression
//! that fires every 2 s, in UTC and in Europe/Berlin, as a ratio to `every 2s`
//! measured in the same run; and the same next-tick calls from instants around
//! Berlin's daylight saving time transitions (the repeated hour and the gap), where
//! the DST rule has to look around.
//!
//! No database. `cargo bench -p scheduler-benches --bench schedule`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use criterion::{Criterion, criterion_group, criterion_main};
use scheduler_spec::{CronSchedule, Every};

/// Mean time per call, gathered while criterion runs: (name, total, calls).
static ROWS: Mutex<Vec<(String, Duration, u64)>> = Mutex::new(Vec::new());

const BASELINE: &str = "every 2s (baseline)";

fn record(name: &str, total: Duration, iters: u64) {
    let mut rows = ROWS.lock().unwrap();
    match rows.iter_mut().find(|r| r.0 == name) {
        Some(row) => {
            row.1 += total;
            row.2 += iters;
        }
        None => rows.push((name.to_owned(), total, iters)),
    }
}

fn print() {
    let rows = ROWS.lock().unwrap();
    let mean = |r: &(String, Duration, u64)| r.1.as_secs_f64() / r.2.max(1) as f64;
    let Some(base) = rows.iter().find(|r| r.0 == BASELINE).map(mean) else {
        return;
    };
    println!(
        "\n{:<52} {:>12} {:>12}",
        "next tick of", "mean", "× every 2s"
    );
    for r in rows.iter() {
        let m = mean(r);
        println!("{:<52} {:>10.1}ns {:>12.1}", r.0, m * 1e9, m / base);
    }
    println!("(baseline: `{BASELINE}`, measured in the same run)\n");
}

fn utc(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

/// `n` instants from `from`, `step` apart, none on a whole second.
fn instants(from: &str, step: TimeDelta, n: i32) -> Vec<DateTime<Utc>> {
    let from = utc(from) + TimeDelta::milliseconds(250);
    (0..n).map(|i| from + step * i).collect()
}

fn cron(expr: &str, tz: &str) -> CronSchedule {
    CronSchedule::parse(expr, tz).unwrap()
}

/// Benchmarks `next` from each of `starts` in turn.
fn bench(
    c: &mut Criterion,
    name: &str,
    starts: &[DateTime<Utc>],
    next: impl Fn(DateTime<Utc>) -> Option<DateTime<Utc>>,
) {
    // Every start has a next tick (a `None` would measure a different path).
    assert!(
        starts.iter().all(|s| next(*s).is_some_and(|t| t > *s)),
        "{name}"
    );
    c.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for i in 0..iters {
                let start = starts[i as usize % starts.len()];
                black_box(next(black_box(start)));
            }
            let total = t.elapsed();
            record(name, total, iters);
            total
        })
    });
}

fn next_tick(c: &mut Criterion) {
    // A June day, far from any transition: one instant every 97 s.
    let day = instants("2026-06-01T00:00:00Z", TimeDelta::seconds(97), 890);
    let every = Every::new(Duration::from_secs(2)).unwrap();
    bench(c, BASELINE, &day, |t| every.next_after(t));
    let utc_cron = cron("*/2 * * * * *", "UTC");
    bench(c, "cron */2 * * * * * in UTC", &day, |t| {
        utc_cron.next_after(t)
    });
    let berlin = cron("*/2 * * * * *", "Europe/Berlin");
    bench(c, "cron */2 * * * * * in Europe/Berlin", &day, |t| {
        berlin.next_after(t)
    });

    // Around the transitions: every 7 s over the two hours around each.
    let fall_back = instants("2026-10-24T23:30:00Z", TimeDelta::seconds(7), 1030);
    let spring = instants("2026-03-28T23:30:00Z", TimeDelta::seconds(7), 1030);
    bench(
        c,
        "cron */2 * * * * * Berlin, around fall-back",
        &fall_back,
        |t| berlin.next_after(t),
    );
    bench(
        c,
        "cron */2 * * * * * Berlin, around the gap",
        &spring,
        |t| berlin.next_after(t),
    );
    let quarter = cron("0 */15 * * * *", "Europe/Berlin");
    bench(
        c,
        "cron 0 */15 * * * * Berlin, around fall-back",
        &fall_back,
        |t| quarter.next_after(t),
    );
    let nightly = cron("0 30 2 * * *", "Europe/Berlin");
    bench(c, "cron 0 30 2 * * * Berlin, into the gap", &spring, |t| {
        nightly.next_after(t)
    });
    print();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    targets = next_tick
}
criterion_main!(benches);
