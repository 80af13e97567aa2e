//! Overlap policy "cancel running" across a cluster on PostgreSQL: the newest tick
//! wins wherever the previous run is — on this instance at once, on another at its
//! next renewal, through the mark the newer tick's take leaves on the lease row.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use scheduler_core::{Overlap, Policy, Schedule};
use scheduler_postgres::PostgresStore;
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use support::{Instance, InstanceConfig, Recorder, wait_for};
use test_postgres::TestDb;

/// A run of the job as the test reads it back.
#[derive(Debug)]
struct Run {
    tick: DateTime<Utc>,
    instance: String,
    started: DateTime<Utc>,
    finished: Option<DateTime<Utc>>,
    outcome: Option<String>,
}

async fn runs(conn: &sea_orm::DatabaseConnection) -> Vec<Run> {
    conn.query_all_raw(Statement::from_string(
        DbBackend::Postgres,
        "SELECT tick, instance, started, finished, outcome FROM runs ORDER BY tick",
    ))
    .await
    .expect("runs")
    .iter()
    .map(|r| Run {
        tick: r.try_get("", "tick").unwrap(),
        instance: r.try_get("", "instance").unwrap(),
        started: r.try_get("", "started").unwrap(),
        finished: r.try_get("", "finished").unwrap(),
        outcome: r.try_get("", "outcome").unwrap(),
    })
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_newest_tick_cancels_the_running_one_on_any_instance() {
    let db = TestDb::new().await;
    // Every 2 s, each run would take a minute: only cancellation ends it.
    let jobs = |store: &PostgresStore| {
        let mut job = Recorder::new("newest-wins", store, "");
        job.schedule = Schedule::every(Duration::from_secs(2));
        job.catch_up = Some(Duration::from_secs(5));
        job.work = Duration::from_secs(60);
        job.policy = Policy::default().overlap(Overlap::CancelRunning);
        vec![job]
    };
    let instances = Instance::start_nodes(db.url(), &["a", "b"], "", jobs).await;
    let conn = instances[0].inspect.clone();
    wait_for(Duration::from_secs(60), "six ticks", || {
        let conn = conn.clone();
        async move { runs(&conn).await.len() >= 6 }
    })
    .await;
    let stats: Vec<_> = instances.iter().map(|i| i.stats.clone()).collect();
    for instance in instances {
        instance.shutdown().await;
    }
    let runs = runs(&conn).await;
    // Ticks in a row, each cancelled by the next: the old run saw its token fire,
    // and never ran beside the newer one.
    for pair in runs.windows(2) {
        let (old, new) = (&pair[0], &pair[1]);
        assert_eq!(new.tick - old.tick, TimeDelta::seconds(2), "{runs:#?}");
        assert_eq!(old.outcome.as_deref(), Some("cancelled"), "{runs:#?}");
        let ended = old.finished.expect("finished");
        assert!(ended <= new.started, "ran side by side: {old:?} {new:?}");
    }
    let cancelled: u64 = stats
        .iter()
        .map(|s| s.count("newest-wins", scheduler_core::Outcome::CancelledByNewer))
        .sum();
    assert!(cancelled >= 5, "{cancelled}");
    // (The instance whose run is cancelled usually takes the newer tick itself: it
    // cancels at once. The other instance's path is the next test's.)
    // The newer tick starts within about a renewal interval (1 s at this ttl) of its
    // instant, wherever the old run was (generous: a loaded machine).
    for run in &runs[1..] {
        assert!(
            run.started - run.tick < TimeDelta::seconds(4),
            "started {} after its tick: {run:?}",
            run.started - run.tick
        );
    }
}

/// The run is on another instance, whose own policy would let it run on: the newer
/// tick's take asks it to stop through the lease row, and its renewal obeys.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_newer_tick_cancels_a_run_on_another_instance_through_the_lease_row() {
    let db = TestDb::new().await;
    let job = |overlap: Overlap| {
        move |store: &PostgresStore| {
            let mut job = Recorder::new("newest-wins", store, "");
            job.schedule = Schedule::every(Duration::from_secs(2));
            job.catch_up = Some(Duration::from_secs(5));
            job.work = Duration::from_secs(60);
            job.policy = Policy::default().overlap(overlap);
            vec![job]
        }
    };
    let config = |node: &str| InstanceConfig {
        node: node.to_owned(),
        ..InstanceConfig::default()
    };
    // `a` skips overlapping ticks itself; it runs the first tick alone.
    let a = Instance::start("a", db.url(), config("node-a"), job(Overlap::Skip)).await;
    let conn = a.inspect.clone();
    wait_for(Duration::from_secs(60), "a's first run", || {
        let conn = conn.clone();
        async move { !runs(&conn).await.is_empty() }
    })
    .await;
    // `b` wants the newest tick to win: its take of the next tick asks `a` to stop.
    let b = Instance::start("b", db.url(), config("node-b"), job(Overlap::CancelRunning)).await;
    wait_for(Duration::from_secs(60), "b's first run", || {
        let conn = conn.clone();
        async move { runs(&conn).await.iter().any(|r| r.instance == "b") }
    })
    .await;
    let a_stats = a.stats.clone();
    a.shutdown().await;
    b.shutdown().await;
    let runs = runs(&conn).await;
    let first_b = runs.iter().position(|r| r.instance == "b").expect("b ran");
    let (old, new) = (&runs[first_b - 1], &runs[first_b]);
    assert_eq!(old.instance, "a", "{runs:#?}");
    assert_eq!(
        old.outcome.as_deref(),
        Some("cancelled"),
        "a's run saw its token fire: {runs:#?}"
    );
    assert!(
        old.finished.expect("finished") <= new.started,
        "ran side by side: {old:?} {new:?}"
    );
    assert!(
        new.started - new.tick < TimeDelta::seconds(4),
        "the newer tick started {} after its instant (a renewal interval is 1 s)",
        new.started - new.tick
    );
    assert!(a_stats.count("newest-wins", scheduler_core::Outcome::CancelledByNewer) >= 1);
}

/// Up to two runs at once: runs of 1.5 s on a 1 s schedule overlap their
/// neighbours, never three at once, and every tick runs once in the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_runs_overlap_up_to_max_and_each_tick_runs_once() {
    let db = TestDb::new().await;
    let jobs = |store: &PostgresStore| {
        let mut job = Recorder::new("two-at-once", store, "");
        job.work = Duration::from_millis(1_500);
        job.policy = Policy::default().overlap(Overlap::Concurrent { max: 2 });
        vec![job]
    };
    let instances = Instance::start_nodes(db.url(), &["a", "b"], "", jobs).await;
    let conn = instances[0].inspect.clone();
    wait_for(Duration::from_secs(60), "eight finished runs", || {
        let conn = conn.clone();
        async move {
            runs(&conn)
                .await
                .iter()
                .filter(|r| r.finished.is_some())
                .count()
                >= 8
        }
    })
    .await;
    for instance in instances {
        instance.shutdown().await;
    }
    let runs = runs(&conn).await;
    let mut ticks: Vec<_> = runs.iter().map(|r| r.tick).collect();
    ticks.dedup();
    assert_eq!(ticks.len(), runs.len(), "a tick ran twice: {runs:#?}");
    // At every start, how many runs were under way (itself included)?
    let busiest = runs
        .iter()
        .map(|r| {
            runs.iter()
                .filter(|o| o.started <= r.started && o.finished.is_none_or(|f| f > r.started))
                .count()
        })
        .max()
        .unwrap_or(0);
    assert_eq!(
        busiest, 2,
        "at most two at once, and two did overlap: {runs:#?}"
    );
    // Consecutive ticks kept coming: none skipped for its slot being busy.
    for pair in runs.windows(2) {
        assert_eq!(
            pair[1].tick - pair[0].tick,
            TimeDelta::seconds(1),
            "{runs:#?}"
        );
    }
}
