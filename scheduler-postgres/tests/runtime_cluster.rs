//! Several runtimes in one test process share one PostgreSQL database (each with its
//! own pool), cluster jobs every second, runs recorded in a table.

mod support;

use std::time::Duration;

use chrono::TimeDelta;
use scheduler_core::{Duplicate, LocalClock, Outcome, Schedule, Scope};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use support::{Instance, InstanceConfig, Recorder, assert_once_per_tick, db_now, runs, wait_for};
use test_postgres::{TestDb, TestServer};

const FIVE: [&str; 5] = ["sweep", "alerts", "mail-checks", "reports", "cleanup"];

fn five(store: &scheduler_postgres::PostgresStore) -> Vec<Recorder> {
    FIVE.iter().map(|j| Recorder::new(j, store, "")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_instances_run_every_tick_of_five_jobs_exactly_once() {
    let db = TestDb::new().await;
    let a = Instance::start("a", db.url(), InstanceConfig::default(), five).await;
    let b = Instance::start("b", db.url(), InstanceConfig::default(), five).await;
    let c = Instance::start("c", db.url(), InstanceConfig::default(), five).await;
    let start = db_now(&a.inspect).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let end = db_now(&a.inspect).await;
    let conn = a.inspect.clone();
    let (sa, sb, sc) = (a.stats.clone(), b.stats.clone(), c.stats.clone());
    tokio::join!(a.shutdown(), b.shutdown(), c.shutdown());
    let rows = runs(&conn).await;
    let checked = assert_once_per_tick(
        &rows,
        &FIVE,
        &["node-a"],
        start,
        end - TimeDelta::seconds(1),
    );
    assert!(checked >= 5 * 8, "{checked}");
    // The work was shared: counted outcomes add up to the runs recorded.
    let ran: u64 = FIVE
        .iter()
        .map(|j| sa.count(j, Outcome::Ran) + sb.count(j, Outcome::Ran) + sc.count(j, Outcome::Ran))
        .sum();
    assert_eq!(ran as usize, rows.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn node_jobs_run_once_per_tick_per_node() {
    let db = TestDb::new().await;
    let node_job = |store: &scheduler_postgres::PostgresStore| {
        let mut uptime = Recorder::new("uptime", store, "");
        uptime.scope = Scope::Node;
        vec![uptime, Recorder::new("alerts", store, "")]
    };
    let on = |node: &str| InstanceConfig {
        node: node.to_owned(),
        ..InstanceConfig::default()
    };
    let a1 = Instance::start("a1", db.url(), on("node-a"), node_job).await;
    let a2 = Instance::start("a2", db.url(), on("node-a"), node_job).await;
    let b1 = Instance::start("b1", db.url(), on("node-b"), node_job).await;
    let b2 = Instance::start("b2", db.url(), on("node-b"), node_job).await;
    let start = db_now(&a1.inspect).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let end = db_now(&a1.inspect).await;
    let conn = a1.inspect.clone();
    tokio::join!(a1.shutdown(), a2.shutdown(), b1.shutdown(), b2.shutdown());
    let rows = runs(&conn).await;
    assert_once_per_tick(
        &rows,
        &["uptime"],
        &["node-a", "node-b"],
        start,
        end - TimeDelta::seconds(1),
    );
    // The cluster job ran once per tick in the whole cluster, whichever node won.
    let mut alerts: Vec<_> = rows
        .iter()
        .filter(|r| r.job == "alerts")
        .map(|r| r.tick)
        .collect();
    let n = alerts.len();
    alerts.sort();
    alerts.dedup();
    assert_eq!(alerts.len(), n, "a cluster tick ran on two nodes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_instance_with_a_skewed_clock_changes_nothing() {
    let db = TestDb::new().await;
    let skewed = |secs: i64| InstanceConfig {
        clock: LocalClock::skewed(TimeDelta::seconds(secs)),
        ..InstanceConfig::default()
    };
    let a = Instance::start("ahead", db.url(), skewed(7), five).await;
    let b = Instance::start("behind", db.url(), skewed(-5), five).await;
    let c = Instance::start("right", db.url(), InstanceConfig::default(), five).await;
    let start = db_now(&a.inspect).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let end = db_now(&a.inspect).await;
    let conn = a.inspect.clone();
    tokio::join!(a.shutdown(), b.shutdown(), c.shutdown());
    let rows = runs(&conn).await;
    assert_once_per_tick(
        &rows,
        &FIVE,
        &["node-a"],
        start,
        end - TimeDelta::seconds(1),
    );
    // Every run started close to its tick on the database clock (none fired seconds
    // early or late because of its node's clock): the first second is catch-up. The
    // offset is measured over a round trip, so a run may start a few ms early.
    for r in rows.iter().filter(|r| r.tick > start) {
        let late = (r.started - r.tick).num_milliseconds();
        assert!(
            (-250..1000).contains(&late),
            "{} tick {} started {late} ms after it on {}",
            r.job,
            r.tick,
            r.instance
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crashed_holders_tick_is_retried_within_its_window_or_superseded() {
    let db = TestDb::new().await;
    let config = || InstanceConfig {
        ttl: Duration::from_secs(2),
        ..InstanceConfig::default()
    };
    // `hourly` has a one-hour catch-up window: its interrupted tick is retried.
    // `brisk` ticks every 2 s with the default window (one period): superseded.
    let jobs = |store: &scheduler_postgres::PostgresStore| {
        let mut hourly = Recorder::new("hourly", store, "");
        hourly.schedule = Schedule::every(Duration::from_secs(3600));
        hourly.catch_up = Some(Duration::from_secs(3600));
        hourly.work = Duration::from_secs(30);
        let mut brisk = Recorder::new("brisk", store, "");
        brisk.schedule = Schedule::every(Duration::from_secs(2));
        brisk.work = Duration::from_secs(30);
        vec![hourly, brisk]
    };
    let a = Instance::start("a", db.url(), config(), jobs).await;
    let conn = a.inspect.clone();
    wait_for(Duration::from_secs(10), "a to run both jobs", || {
        let conn = conn.clone();
        async move {
            let rows = runs(&conn).await;
            rows.iter().any(|r| r.job == "hourly") && rows.iter().any(|r| r.job == "brisk")
        }
    })
    .await;
    let b = Instance::start("b", db.url(), config(), jobs).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    a.crash().await;
    let crashed_at = db_now(&conn).await;
    wait_for(
        Duration::from_secs(20),
        "b to retry the hourly tick",
        || {
            let conn = conn.clone();
            async move {
                runs(&conn)
                    .await
                    .iter()
                    .any(|r| r.job == "hourly" && r.instance == "b")
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rows = runs(&conn).await;
    b.crash().await;
    let hourly: Vec<_> = rows.iter().filter(|r| r.job == "hourly").collect();
    assert_eq!(hourly.len(), 2, "{hourly:?}");
    assert_eq!(hourly[0].tick, hourly[1].tick, "the same tick was retried");
    assert!(hourly[1].token > hourly[0].token);
    // Taken over only once the crashed lease expired (ttl 2 s after its last renewal).
    let takeover = hourly[1].started - crashed_at;
    assert!(takeover > TimeDelta::milliseconds(0), "{takeover}");
    eprintln!(
        "hourly tick taken over {} ms after the crash",
        takeover.num_milliseconds()
    );
    // The brisk tick a held at the crash was never run again: later ticks superseded it.
    let a_brisk: Vec<_> = rows
        .iter()
        .filter(|r| r.job == "brisk" && r.instance == "a")
        .collect();
    let last_a = a_brisk.last().expect("a ran brisk");
    assert_eq!(
        rows.iter()
            .filter(|r| r.job == "brisk" && r.tick == last_a.tick)
            .count(),
        1
    );
    assert!(
        rows.iter()
            .any(|r| r.job == "brisk" && r.instance == "b" && r.tick > last_a.tick),
        "b went on with later ticks"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_graceful_shutdown_hands_over_without_waiting_for_expiry() {
    let db = TestDb::new().await;
    // A 60 s ttl: had the leases not been released, nobody could take them for a minute.
    let config = || InstanceConfig {
        ttl: Duration::from_secs(60),
        grace: Duration::from_millis(500),
        ..InstanceConfig::default()
    };
    let jobs = |store: &scheduler_postgres::PostgresStore| {
        let mut long = Recorder::new("long", store, "");
        long.schedule = Schedule::every(Duration::from_secs(3600));
        long.catch_up = Some(Duration::from_secs(3600));
        long.work = Duration::from_secs(600);
        vec![long, Recorder::new("tick", store, "")]
    };
    let a = Instance::start("a", db.url(), config(), jobs).await;
    let conn = a.inspect.clone();
    wait_for(Duration::from_secs(10), "a to start the long job", || {
        let conn = conn.clone();
        async move { runs(&conn).await.iter().any(|r| r.job == "long") }
    })
    .await;
    let b = Instance::start("b", db.url(), config(), jobs).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    a.shutdown().await;
    let stopped = db_now(&conn).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let end = db_now(&conn).await;
    let rows = runs(&conn).await;
    b.shutdown().await;
    // The interrupted long tick was retried by b at once, not a minute later.
    let long: Vec<_> = rows.iter().filter(|r| r.job == "long").collect();
    assert_eq!(long.len(), 2, "{long:?}");
    assert_eq!(
        (long[0].instance.as_str(), long[1].instance.as_str()),
        ("a", "b")
    );
    assert_eq!(long[0].outcome.as_deref(), Some("cancelled"));
    assert!(
        long[1].started < stopped + TimeDelta::seconds(30),
        "b waited for the lease to expire"
    );
    // And the 1 s job never missed a tick across the hand-over.
    assert_once_per_tick(
        &rows,
        &["tick"],
        &["node-a"],
        stopped - TimeDelta::seconds(1),
        end - TimeDelta::seconds(1),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stolen_lease_cancels_the_fencing_job_and_refuses_its_write() {
    let db = TestDb::new().await;
    let jobs = |store: &scheduler_postgres::PostgresStore| {
        let mut payout = Recorder::new("payout", store, "");
        payout.schedule = Schedule::every(Duration::from_secs(3600));
        payout.catch_up = Some(Duration::from_secs(3600));
        payout.duplicate = Duplicate::NeedsFencing;
        payout.work = Duration::from_secs(60);
        payout.fenced_write = true;
        let mut sweep = Recorder::new("sweep", store, "");
        sweep.schedule = Schedule::every(Duration::from_secs(3600));
        sweep.catch_up = Some(Duration::from_secs(3600));
        sweep.work = Duration::from_secs(3);
        vec![payout, sweep]
    };
    let a = Instance::start("a", db.url(), InstanceConfig::default(), jobs).await;
    let conn = a.inspect.clone();
    wait_for(Duration::from_secs(10), "both jobs to start", || {
        let conn = conn.clone();
        async move { runs(&conn).await.len() == 2 }
    })
    .await;
    // Another "instance" takes both leases over, in SQL.
    conn.execute_unprepared(
        "UPDATE scheduler_leases SET holder = 'thief', token = token + 1, expires_at = now() + interval '10 minutes' \
         WHERE name IN ('payout', 'sweep')",
    )
    .await
    .expect("steal");
    wait_for(Duration::from_secs(15), "both runs to end", || {
        let conn = conn.clone();
        async move { runs(&conn).await.iter().all(|r| r.outcome.is_some()) }
    })
    .await;
    let rows = runs(&conn).await;
    let stats = a.stats.clone();
    a.shutdown().await;
    let payout = rows.iter().find(|r| r.job == "payout").expect("payout ran");
    assert_eq!(
        payout.outcome.as_deref(),
        Some("cancelled+refused"),
        "cancelled at the next renewal, and its fenced write refused"
    );
    let sweep = rows.iter().find(|r| r.job == "sweep").expect("sweep ran");
    assert_eq!(
        sweep.outcome.as_deref(),
        Some("ok"),
        "the harmless job finished"
    );
    let paid = conn
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT count(*) AS n FROM payouts",
        ))
        .await
        .expect("count")
        .expect("row")
        .try_get::<i64>("", "n")
        .expect("n");
    assert_eq!(paid, 0, "the stale holder's write was refused");
    assert_eq!(stats.count("payout", Outcome::LeaseLost), 1);
    assert_eq!(stats.count("sweep", Outcome::LeaseLost), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_runtimes_recover_from_a_database_restart() {
    let server = tokio::task::spawn_blocking(TestServer::start)
        .await
        .expect("join")
        .expect("server");
    let url = server.create_database().await;
    let two = |store: &scheduler_postgres::PostgresStore| {
        vec![
            Recorder::new("alerts", store, ""),
            Recorder::new("sweep", store, ""),
        ]
    };
    let a = Instance::start("a", &url, InstanceConfig::default(), two).await;
    let b = Instance::start("b", &url, InstanceConfig::default(), two).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let server = std::sync::Arc::new(server);
    let s = server.clone();
    tokio::task::spawn_blocking(move || s.stop())
        .await
        .expect("join")
        .expect("stop");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let s = server.clone();
    tokio::task::spawn_blocking(move || s.restart())
        .await
        .expect("join")
        .expect("restart");
    let conn = test_postgres::inspect(&url).await;
    let back = db_now(&conn).await;
    tokio::time::sleep(Duration::from_secs(7)).await;
    let end = db_now(&conn).await;
    tokio::join!(a.shutdown(), b.shutdown());
    let rows = runs(&conn).await;
    // Never twice, before, during or after; and every tick once the database was back
    // (allowing the pools a few seconds to reconnect).
    assert_once_per_tick(
        &rows,
        &["alerts", "sweep"],
        &["node-a"],
        back + TimeDelta::seconds(3),
        end - TimeDelta::seconds(1),
    );
    let mut all: Vec<_> = rows.iter().map(|r| (r.job.clone(), r.tick)).collect();
    let n = all.len();
    all.dedup();
    assert_eq!(all.len(), n, "a tick ran twice around the restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_jobs_on_a_pool_of_one_never_starve_the_app() {
    let db = TestDb::new().await;
    let config = InstanceConfig {
        pool: 1,
        ..InstanceConfig::default()
    };
    let names: Vec<String> = (0..100).map(|i| format!("job-{i:03}")).collect();
    let jobs = |store: &scheduler_postgres::PostgresStore| {
        names
            .iter()
            .map(|n| {
                let mut r = Recorder::new(n, store, "");
                r.work = Duration::from_millis(300);
                r
            })
            .collect()
    };
    let a = Instance::start("a", db.url(), config, jobs).await;
    // The app's query runs on the store's own pool of one (a simple-protocol
    // statement, which transaction pooling also allows).
    let conn = a.store.connection().clone();
    let mut worst = Duration::ZERO;
    for _ in 0..50 {
        let began = tokio::time::Instant::now();
        conn.execute_unprepared("SELECT 1")
            .await
            .expect("app query");
        worst = worst.max(began.elapsed());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let rows = runs(&a.inspect).await;
    a.shutdown().await;
    eprintln!(
        "worst app query wait with 100 jobs on a pool of one: {worst:?}; {} runs",
        rows.len()
    );
    assert!(
        worst < Duration::from_secs(3),
        "an app query waited {worst:?}: the pool was pinned"
    );
    assert!(rows.len() >= 100 * 3, "{} runs", rows.len());
}
