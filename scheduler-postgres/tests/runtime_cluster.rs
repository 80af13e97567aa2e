//! Several runtimes in one test process share one PostgreSQL database (each with its
//! own pool), cluster jobs every second, runs recorded in a table.
//!
//! Nothing here assumes the machine keeps up: a test that needs every tick of a window
//! to run looks at a window in which no instance reported a missed tick, a failed run
//! or a failed store call ([`support::quiet_window`]), and every other wait is for a
//! condition, bounded by [`support::LIMIT`].

mod support;

use std::time::Duration;

use chrono::TimeDelta;
use scheduler_core::{Duplicate, LocalClock, Outcome, Schedule, Scope};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use support::{
    Instance, InstanceConfig, LIMIT, Recorder, assert_once_per_tick, assert_once_per_tick_excusing,
    db_now, lease, quiet_window, runs, wait_for,
};
use test_postgres::{TestDb, TestServer};
use tokio::sync::watch;

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
    let (from, to) = quiet_window(&[&a, &b, &c], &FIVE, &a.inspect, 9).await;
    let conn = a.inspect.clone();
    let (sa, sb, sc) = (a.stats.clone(), b.stats.clone(), c.stats.clone());
    tokio::join!(a.shutdown(), b.shutdown(), c.shutdown());
    let rows = runs(&conn).await;
    let checked = assert_once_per_tick(&rows, &FIVE, &["node-a"], from, to);
    assert!(checked >= 5 * 9, "{checked}");
    // The work was shared: counted outcomes add up to the runs recorded (a failed run
    // may or may not have recorded itself).
    let count = |outcome| -> u64 {
        FIVE.iter()
            .map(|j| sa.count(j, outcome) + sb.count(j, outcome) + sc.count(j, outcome))
            .sum()
    };
    let (ran, failed) = (count(Outcome::Succeeded), count(Outcome::Failed));
    assert!(
        ran as usize <= rows.len() && rows.len() as u64 <= ran + failed,
        "{ran} ran, {failed} failed, {} recorded",
        rows.len()
    );
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
    let (from, to) = quiet_window(&[&a1, &a2, &b1, &b2], &["uptime"], &a1.inspect, 7).await;
    let conn = a1.inspect.clone();
    tokio::join!(a1.shutdown(), a2.shutdown(), b1.shutdown(), b2.shutdown());
    let rows = runs(&conn).await;
    assert_once_per_tick(&rows, &["uptime"], &["node-a", "node-b"], from, to);
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
    // Skews of minutes: a run scheduled on its node's clock would start minutes early
    // or late, far beyond anything a loaded machine does to a run scheduled right.
    let skewed = |secs: i64| InstanceConfig {
        clock: LocalClock::skewed(TimeDelta::seconds(secs)),
        ..InstanceConfig::default()
    };
    let a = Instance::start("ahead", db.url(), skewed(180), five).await;
    let b = Instance::start("behind", db.url(), skewed(-120), five).await;
    let c = Instance::start("right", db.url(), InstanceConfig::default(), five).await;
    let start = db_now(&a.inspect).await;
    let (from, to) = quiet_window(&[&a, &b, &c], &FIVE, &a.inspect, 7).await;
    let conn = a.inspect.clone();
    tokio::join!(a.shutdown(), b.shutdown(), c.shutdown());
    let rows = runs(&conn).await;
    assert_once_per_tick(&rows, &FIVE, &["node-a"], from, to);
    // Every run started near its tick on the database clock, none minutes early or
    // late because of its node's clock (the first second is catch-up). How near
    // depends on the machine (the clock offset is measured over round trips, a run
    // waits for a connection), so the bound only separates that from the skews.
    for r in rows.iter().filter(|r| r.tick > start) {
        let late = r.started - r.tick;
        assert!(
            late > -TimeDelta::seconds(60) && late < TimeDelta::seconds(60),
            "{} tick {} started {} ms after it on {}",
            r.job,
            r.tick,
            late.num_milliseconds(),
            r.instance
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crashed_holders_tick_is_retried_within_its_window_or_superseded() {
    let db = TestDb::new().await;
    // `hourly` has a one-hour catch-up window: its interrupted tick is retried.
    // `brisk` ticks every 2 s with the default window (one period): superseded, as
    // the crashed lease outlives it (a take sets the expiry a ttl of 4 s ahead).
    let jobs = |store: &scheduler_postgres::PostgresStore| {
        let mut hourly = Recorder::new("hourly", store, "");
        hourly.schedule = Schedule::every(Duration::from_secs(3600));
        hourly.catch_up = Some(Duration::from_secs(3600));
        hourly.work = Duration::from_secs(3600);
        let mut brisk = Recorder::new("brisk", store, "");
        brisk.schedule = Schedule::every(Duration::from_secs(2));
        brisk.work = Duration::from_secs(3600);
        vec![hourly, brisk]
    };
    let a = Instance::start("a", db.url(), InstanceConfig::default(), jobs).await;
    let conn = a.inspect.clone();
    wait_for(LIMIT, "a to run both jobs", || {
        let conn = conn.clone();
        async move {
            let rows = runs(&conn).await;
            rows.iter().any(|r| r.job == "hourly") && rows.iter().any(|r| r.job == "brisk")
        }
    })
    .await;
    let b = Instance::start("b", db.url(), InstanceConfig::default(), jobs).await;
    wait_for(LIMIT, "b to find the hourly tick held by a", || {
        let held = b.stats.count("hourly", Outcome::HeldElsewhere);
        async move { held >= 1 }
    })
    .await;
    // b can take the tick over only once this expiry (or a later one a last renewal
    // set) has passed.
    let (held_token, held_until) = lease(&conn, "hourly").await;
    a.crash().await;
    wait_for(LIMIT, "b to retry the hourly tick", || {
        let conn = conn.clone();
        async move {
            runs(&conn)
                .await
                .iter()
                .any(|r| r.job == "hourly" && r.instance == "b")
        }
    })
    .await;
    wait_for(LIMIT, "b to run a brisk tick later than a's", || {
        let conn = conn.clone();
        async move {
            let rows = runs(&conn).await;
            let last_a = rows
                .iter()
                .filter(|r| r.job == "brisk" && r.instance == "a")
                .map(|r| r.tick)
                .max();
            rows.iter()
                .any(|r| r.job == "brisk" && r.instance == "b" && Some(r.tick) > last_a)
        }
    })
    .await;
    let rows = runs(&conn).await;
    b.crash().await;
    let hourly: Vec<_> = rows.iter().filter(|r| r.job == "hourly").collect();
    assert_eq!(hourly.len(), 2, "{hourly:?}");
    assert_eq!(hourly[0].tick, hourly[1].tick, "the same tick was retried");
    assert!(hourly[1].token > hourly[0].token);
    // Taken over only once the crashed lease expired.
    assert_eq!(
        held_token, hourly[0].token,
        "a's run held the hourly lease when a crashed"
    );
    assert!(
        hourly[1].started >= held_until,
        "b took the tick over at {} while a's lease ran until {held_until}",
        hourly[1].started
    );
    eprintln!(
        "hourly tick taken over {} ms after a's lease expired",
        (hourly[1].started - held_until).num_milliseconds()
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
    wait_for(LIMIT, "a to start the long job", || {
        let conn = conn.clone();
        async move { runs(&conn).await.iter().any(|r| r.job == "long") }
    })
    .await;
    let b = Instance::start("b", db.url(), config(), jobs).await;
    wait_for(LIMIT, "b to find the long job held by a", || {
        let held = b.stats.count("long", Outcome::HeldElsewhere);
        async move { held >= 1 }
    })
    .await;
    let (held_token, held_until) = lease(&conn, "long").await;
    let (troubles_a, troubles_b) = (a.troubles.clone(), b.troubles.clone());
    let troubles = || troubles_a.count(&["tick"]) + troubles_b.count(&["tick"]);
    let troubles_before = troubles();
    a.shutdown().await;
    let stopped = db_now(&conn).await;
    let to = stopped + TimeDelta::seconds(4);
    wait_for(
        LIMIT,
        "b to take the long job and run ticks past the hand-over",
        || {
            let conn = conn.clone();
            async move {
                let rows = runs(&conn).await;
                rows.iter().any(|r| r.job == "long" && r.instance == "b")
                    && rows.iter().any(|r| r.job == "tick" && r.tick >= to)
            }
        },
    )
    .await;
    b.shutdown().await;
    let rows = runs(&conn).await;
    // The interrupted long tick was retried by b at once, not when a's lease would
    // have expired.
    let long: Vec<_> = rows.iter().filter(|r| r.job == "long").collect();
    assert_eq!(long.len(), 2, "{long:?}");
    assert_eq!(
        (long[0].instance.as_str(), long[1].instance.as_str()),
        ("a", "b")
    );
    assert_eq!(long[0].outcome.as_deref(), Some("cancelled"));
    assert_eq!(held_token, long[0].token, "the lease read was a's");
    assert!(
        long[1].started < held_until,
        "b waited for the lease to expire (at {held_until}): started {}",
        long[1].started
    );
    // And the 1 s job never missed a tick across the hand-over, unless an instance
    // reported trouble while they were due (a machine that did not keep up).
    let excused = troubles() - troubles_before;
    assert_once_per_tick_excusing(
        &rows,
        &["tick"],
        &["node-a"],
        stopped - TimeDelta::seconds(1),
        to,
        excused,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stolen_lease_cancels_the_fencing_job_and_refuses_its_write() {
    let db = TestDb::new().await;
    // Both runs last until told (payout: until its cancellation), so neither can end
    // before a has noticed the theft, however slowly a turns.
    let (finish, done) = watch::channel(false);
    let jobs = move |store: &scheduler_postgres::PostgresStore| {
        let mut payout = Recorder::new("payout", store, "");
        payout.schedule = Schedule::every(Duration::from_secs(3600));
        payout.catch_up = Some(Duration::from_secs(3600));
        payout.duplicate = Duplicate::NeedsFencing;
        payout.work = Duration::from_secs(3600);
        payout.fenced_write = true;
        let mut sweep = Recorder::new("sweep", store, "");
        sweep.schedule = Schedule::every(Duration::from_secs(3600));
        sweep.catch_up = Some(Duration::from_secs(3600));
        sweep.work = Duration::from_secs(3600);
        sweep.done = Some(done);
        vec![payout, sweep]
    };
    let a = Instance::start("a", db.url(), InstanceConfig::default(), jobs).await;
    let conn = a.inspect.clone();
    wait_for(LIMIT, "both jobs to start", || {
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
    let stats = a.stats.clone();
    wait_for(LIMIT, "a to find both leases lost", || {
        let lost =
            stats.count("payout", Outcome::LeaseLost) + stats.count("sweep", Outcome::LeaseLost);
        async move { lost == 2 }
    })
    .await;
    finish.send(true).expect("sweep running");
    wait_for(LIMIT, "both runs to end", || {
        let conn = conn.clone();
        async move { runs(&conn).await.iter().all(|r| r.outcome.is_some()) }
    })
    .await;
    let rows = runs(&conn).await;
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
    const TWO: [&str; 2] = ["alerts", "sweep"];
    let two = |store: &scheduler_postgres::PostgresStore| {
        TWO.iter().map(|j| Recorder::new(j, store, "")).collect()
    };
    let a = Instance::start("a", &url, InstanceConfig::default(), two).await;
    let b = Instance::start("b", &url, InstanceConfig::default(), two).await;
    let conn = a.inspect.clone();
    wait_for(LIMIT, "both jobs to run before the restart", || {
        let conn = conn.clone();
        async move {
            let rows = runs(&conn).await;
            TWO.iter().all(|j| rows.iter().any(|r| r.job == *j))
        }
    })
    .await;
    let server = std::sync::Arc::new(server);
    let s = server.clone();
    tokio::task::spawn_blocking(move || s.stop())
        .await
        .expect("join")
        .expect("stop");
    // The outage itself: the database stays down for a few ticks.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let s = server.clone();
    tokio::task::spawn_blocking(move || s.restart())
        .await
        .expect("join")
        .expect("restart");
    let conn = test_postgres::inspect(&url).await;
    // Every tick once the pools have reconnected: once neither instance reports a
    // failed store call (or a missed tick) any more.
    let (from, to) = quiet_window(&[&a, &b], &TWO, &conn, 4).await;
    tokio::join!(a.shutdown(), b.shutdown());
    let rows = runs(&conn).await;
    // Never twice, before, during or after.
    assert_once_per_tick(&rows, &TWO, &["node-a"], from, to);
    let mut all: Vec<_> = rows.iter().map(|r| (r.job.clone(), r.tick)).collect();
    let n = all.len();
    all.dedup();
    assert_eq!(all.len(), n, "a tick ran twice around the restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_jobs_on_a_pool_of_one_never_starve_the_app() {
    let db = TestDb::new().await;
    // A 60 s ttl: no renewal is due while the test looks, so the leases stay held
    // however busy the one connection is.
    let config = InstanceConfig {
        pool: 1,
        ttl: Duration::from_secs(60),
        ..InstanceConfig::default()
    };
    // Half the jobs hold their leases (their runs last until told), half come and go
    // every second: had holding a lease pinned a connection, the first long run would
    // keep the only one, and the app's query would never get it.
    let (finish, done) = watch::channel(false);
    let names: Vec<String> = (0..100).map(|i| format!("job-{i:03}")).collect();
    let (holding, churning) = names.split_at(50);
    let jobs = |store: &scheduler_postgres::PostgresStore| {
        names
            .iter()
            .map(|n| {
                let mut r = Recorder::new(n, store, "");
                if holding.contains(n) {
                    r.work = Duration::from_secs(3600);
                    r.done = Some(done.clone());
                } else {
                    r.work = Duration::from_millis(300);
                }
                r
            })
            .collect()
    };
    let a = Instance::start("a", db.url(), config, jobs).await;
    let inspect = a.inspect.clone();
    let started =
        |rows: &[support::RunRow], job: &String| rows.iter().filter(|r| r.job == *job).count();
    wait_for(LIMIT, "the holding jobs' runs to start", || {
        let inspect = inspect.clone();
        async move {
            let rows = runs(&inspect).await;
            holding.iter().all(|j| started(&rows, j) >= 1)
        }
    })
    .await;
    // The app's query runs on the store's own pool of one (a simple-protocol
    // statement, which transaction pooling also allows), again and again until every
    // churning job has run three times meanwhile.
    let conn = a.store.connection().clone();
    let deadline = tokio::time::Instant::now() + LIMIT;
    let mut worst = Duration::ZERO;
    let mut queries = 0;
    loop {
        let began = tokio::time::Instant::now();
        if let Err(e) = conn.execute_unprepared("SELECT 1").await {
            panic!(
                "the app's query got no connection while 50 runs held their leases: the pool was pinned: {e}"
            );
        }
        worst = worst.max(began.elapsed());
        queries += 1;
        if queries >= 50 {
            let rows = runs(&inspect).await;
            if churning.iter().all(|j| started(&rows, j) >= 3) {
                break;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the churning jobs did not run three times each in {LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The holding runs were under way, their leases held, all along.
    let rows = runs(&inspect).await;
    for j in holding {
        let mine: Vec<_> = rows.iter().filter(|r| r.job == *j).collect();
        assert_eq!(mine.len(), 1, "{mine:?}");
        assert_eq!(mine[0].outcome, None, "{j} ended early: {mine:?}");
        assert_eq!(a.stats.count(j, Outcome::LeaseLost), 0, "{j}");
    }
    let held = inspect
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT count(*) AS n FROM scheduler_leases WHERE name = ANY($1) AND expires_at > now()",
            [holding.to_vec().into()],
        ))
        .await
        .expect("count")
        .expect("row")
        .try_get::<i64>("", "n")
        .expect("n");
    assert_eq!(held, 50, "the holding jobs' leases are held");
    finish.send(true).expect("runs under way");
    a.shutdown().await;
    eprintln!(
        "worst app query wait with 100 jobs on a pool of one: {worst:?}; {queries} queries, {} runs",
        rows.len()
    );
}
