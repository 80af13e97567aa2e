//! Catch-up policies across a cluster on PostgreSQL: every instance down for five
//! periods, then started again — `Skip` runs none of the ticks that fell meanwhile,
//! `Latest` exactly one (the most recent), `All { max: 3 }` exactly the last three,
//! oldest first; every tick once in the cluster. And a retry runs on the same lease.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Timelike, Utc};
use scheduler_core::{CatchUp, Policy};
use scheduler_postgres::PostgresStore;
use support::{Instance, Recorder, db_now, runs};
use test_postgres::TestDb;

/// The three jobs, every second with a ten-second window, one per policy.
fn jobs(store: &PostgresStore) -> Vec<Recorder> {
    [
        ("skip", CatchUp::Skip),
        ("latest", CatchUp::Latest),
        ("all", CatchUp::All { max: 3 }),
    ]
    .into_iter()
    .map(|(name, catch_up)| {
        let mut job = Recorder::new(name, store, "");
        job.catch_up = Some(Duration::from_secs(10));
        job.policy = Policy::default().catch_up(catch_up);
        job
    })
    .collect()
}

async fn cluster(url: &str, round: &str) -> Vec<Instance> {
    Instance::start_nodes(url, &["a", "b", "c"], round, jobs).await
}

/// Sleeps until the database's clock is `fraction` of a second past a whole second.
async fn until_fraction(conn: &sea_orm::DatabaseConnection, fraction: f64) {
    let now = db_now(conn).await;
    let into = f64::from(now.nanosecond() % 1_000_000_000) / 1e9;
    let wait = (fraction - into).rem_euclid(1.0);
    tokio::time::sleep(Duration::from_secs_f64(wait)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn after_every_instance_was_down_skip_runs_none_latest_one_and_all_the_last_three() {
    let db = TestDb::new().await;
    let first = cluster(db.url(), "1").await;
    let conn = first[0].inspect.clone();
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    for instance in first {
        instance.shutdown().await;
    }
    let down_from = db_now(&conn).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    // Start again just after a tick, so every instance is up before the next one:
    // the ticks before `up_at` fell while no instance ran.
    until_fraction(&conn, 0.1).await;
    let up_at = db_now(&conn).await;
    let second = cluster(db.url(), "2").await;
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    for instance in second {
        instance.shutdown().await;
    }

    let runs = runs(&conn).await;
    let mut per_tick: BTreeMap<(String, DateTime<Utc>), usize> = BTreeMap::new();
    for run in &runs {
        *per_tick.entry((run.job.clone(), run.tick)).or_default() += 1;
    }
    let twice: Vec<_> = per_tick.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "ticks run more than once: {twice:?}");
    let caught_up = |job: &str| -> Vec<i64> {
        runs.iter()
            .filter(|r| r.job == job && r.tick > down_from && r.tick < up_at)
            .map(|r| r.tick.timestamp())
            .collect()
    };
    let last = up_at.timestamp();
    assert_eq!(
        caught_up("skip"),
        Vec::<i64>::new(),
        "skip runs nothing late"
    );
    assert_eq!(
        caught_up("latest"),
        [last],
        "latest runs the most recent, once"
    );
    let mut all = caught_up("all");
    all.sort_unstable();
    assert_eq!(all, [last - 2, last - 1, last], "all runs the last three");
    // And each job ran its live ticks after the restart.
    for job in ["skip", "latest", "all"] {
        assert!(
            runs.iter().any(|r| r.job == job && r.tick > up_at),
            "{job} runs its live ticks"
        );
    }
}

/// A failed run is retried on the same lease: the same instance, the same fencing
/// token; no other instance takes the tick meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_runs_on_the_same_holder_with_the_same_fencing_token() {
    let db = TestDb::new().await;
    // Hourly, below: the tick due at start-up is the only one in the test, unless it
    // starts in the last seconds of an hour (the next tick then comes due during the
    // retries, and cuts them short: seen in CI at 01:59:58). Then it starts after it.
    let to_the_hour = 3_600 - Utc::now().timestamp().rem_euclid(3_600);
    if to_the_hour < 20 {
        tokio::time::sleep(Duration::from_secs(to_the_hour.unsigned_abs() + 1)).await;
    }
    let flaky = |store: &PostgresStore| {
        let mut job = Recorder::new("flaky", store, "");
        job.schedule = scheduler_core::Schedule::every(Duration::from_secs(3600));
        job.policy = Policy::default().retry(3, Duration::from_millis(300));
        job.fail_attempts = 2;
        vec![job]
    };
    let instances = Instance::start_nodes(db.url(), &["a", "b"], "", flaky).await;
    let conn = instances[0].inspect.clone();
    support::wait_for(Duration::from_secs(60), "three attempts", || {
        let conn = conn.clone();
        async move { runs(&conn).await.len() >= 3 }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    for instance in instances {
        instance.shutdown().await;
    }
    let runs = runs(&conn).await;
    assert_eq!(runs.len(), 3, "{runs:?}");
    assert!(
        runs.iter().all(|r| r.tick == runs[0].tick
            && r.token == runs[0].token
            && r.instance == runs[0].instance),
        "every attempt on one lease: {runs:?}"
    );
}
