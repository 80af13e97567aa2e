//! The chaos scenarios: three `chaos-app` processes against one PostgreSQL, one
//! fault each, then the record checked (the exact definitions are in the crate
//! documentation of `scheduler_chaos`).
//!
//! `cargo test -p scheduler-chaos -- --nocapture` shows each scenario's report row;
//! the rows are also appended to `$CHAOS_REPORT`, or `target/tmp/chaos-report.txt`.
//! The instances' logs are under `target/tmp/chaos/SCENARIO/`. `CHAOS_SOAK_SECS=N`
//! makes the soak scenario inject faults for N seconds (without it: one round).
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use scheduler_chaos::app::FENCING_JOB;
use scheduler_chaos::check::time;
use scheduler_chaos::{Proxy, Scenario, ScenarioConfig, Verdict, url_address, url_via};
use test_postgres::{PgBouncer, TestDb, TestServer};

const BIN: &str = env!("CARGO_BIN_EXE_chaos-app");
const TMP: &str = env!("CARGO_TARGET_TMPDIR");

fn config(name: &str, url: &str, direct_url: &str) -> ScenarioConfig {
    let mut config = ScenarioConfig::new(name, BIN, url, direct_url, &format!("{TMP}/chaos"));
    config.report = Some(
        std::env::var_os("CHAOS_REPORT")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(TMP).join("chaos-report.txt")),
    );
    config
}

/// Starts instances `a`, `b` and `c` with the scenario's defaults.
async fn three(config: ScenarioConfig) -> Scenario {
    let specs = ["a", "b", "c"].map(|name| config.spec(name)).to_vec();
    Scenario::start(config, specs)
        .await
        .expect("start the cluster")
}

fn assert_passed(verdict: &Verdict) {
    assert!(verdict.passed(), "{verdict}");
}

/// How long faults that must outlast the lease (a pause, a cut) last: twice the ttl.
fn outage(config: &ScenarioConfig) -> Duration {
    config.ttl * 2
}

/// Sleeps until `duration` has passed since `since` (database clock).
async fn until(scenario: &Scenario, since: DateTime<Utc>, duration: Duration) {
    let now = scenario.now().await.unwrap();
    let left = since + TimeDelta::from_std(duration).unwrap() - now;
    if let Ok(left) = left.to_std() {
        tokio::time::sleep(left).await;
    }
}

// ---------------------------------------------------------------------------------
// SIGKILL of the instance holding a lease mid-run.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_a_holder_mid_run() {
    let db = TestDb::new().await;
    assert_passed(&sigkill(config("sigkill", db.url(), db.direct_url())).await);
}

async fn sigkill(config: ScenarioConfig) -> Verdict {
    let gap = config.crash_gap();
    let mut s = three(config).await;
    s.set_gap_bound(gap);
    s.hold(Duration::from_secs(3)).await;
    let run = s.mid_run(FENCING_JOB).await.unwrap();
    let killed = s.kill(&run.instance).await.unwrap();
    s.window("SIGKILL", killed, killed);
    let limit = s.config().ttl * 5;
    let next = s.takeover(FENCING_JOB, killed, &run.instance, limit);
    if let Some(next) = next.await.unwrap() {
        s.expect(next.token > run.token, || {
            format!(
                "takeover token {} not above the killed holder's {}",
                next.token, run.token
            )
        });
    }
    s.hold_past_windows(Duration::from_secs(3)).await.unwrap();
    s.finish().await.unwrap()
}

// ---------------------------------------------------------------------------------
// SIGSTOP of a holder for longer than the ttl, then SIGCONT.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigstop_past_the_ttl_then_sigcont() {
    let db = TestDb::new().await;
    assert_passed(&sigstop(config("sigstop", db.url(), db.direct_url())).await);
}

/// The paused holder's lease is taken over; after `SIGCONT` it notices at its next
/// renewal, its fencing run is cancelled and its late fenced write refused.
async fn sigstop(config: ScenarioConfig) -> Verdict {
    let (gap, pause) = (config.crash_gap(), outage(&config));
    let mut s = three(config).await;
    s.set_gap_bound(gap);
    s.hold(Duration::from_secs(3)).await;
    let run = s.mid_run(FENCING_JOB).await.unwrap();
    let stopped = s.pause(&run.instance).await.unwrap();
    // Taken over while the holder is still paused.
    let next = s.takeover(FENCING_JOB, stopped, &run.instance, pause);
    let next = next.await.unwrap();
    until(&s, stopped, pause).await;
    let resumed = s.resume(&run.instance).await.unwrap();
    s.window("SIGSTOP", stopped, resumed);
    let ended = s.detect(run.id, resumed).await.unwrap();
    if let Some(next) = next {
        s.expect(next.token > run.token, || {
            format!(
                "takeover token {} not above the paused holder's {}",
                next.token, run.token
            )
        });
    }
    s.expect(ended.cancelled() && ended.refused(), || {
        format!("the paused holder's run was not cancelled with its write refused: {ended:?}")
    });
    s.expect(ended.finished.is_some_and(|f| f > resumed), || {
        format!(
            "the paused run ended before SIGCONT at {}: {ended:?}",
            time(resumed)
        )
    });
    s.hold_past_windows(Duration::from_secs(3)).await.unwrap();
    s.finish().await.unwrap()
}

// ---------------------------------------------------------------------------------
// PostgreSQL restarted under load (fast shutdown, then start).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restart_under_load() {
    let server = Arc::new(
        tokio::task::spawn_blocking(TestServer::start)
            .await
            .unwrap()
            .expect("start a server of its own"),
    );
    let url = server.create_database().await;
    let direct = test_postgres::direct_url(&url);
    let mut s = three(config("postgres-restart", &url, &direct)).await;
    s.hold(Duration::from_secs(3)).await;
    let run = s.mid_run(FENCING_JOB).await.unwrap();
    let stopped = s.now().await.unwrap();
    let server2 = server.clone();
    tokio::task::spawn_blocking(move || server2.stop())
        .await
        .unwrap()
        .expect("stop the server");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let server2 = server.clone();
    tokio::task::spawn_blocking(move || server2.restart())
        .await
        .unwrap()
        .expect("restart the server");
    let up = s.now().await.unwrap();
    s.event(stopped, "PostgreSQL fast shutdown");
    s.event(up, "PostgreSQL up again");
    s.window("PostgreSQL restart", stopped, up);
    let down = (up - stopped).to_std().unwrap();
    s.set_gap_bound(TimeDelta::from_std(down).unwrap() + s.config().crash_gap());
    // Every instance lost the database: the takeover is the first run after the
    // fault by any of them. There is no lost lease to detect: every holder lost its
    // connection, not its lease to another instance.
    let limit = Duration::from_secs(30);
    s.takeover(FENCING_JOB, stopped, "", limit).await.unwrap();
    // Its fenced write may commit after the restart, if its first renewal then found
    // the lease still its own (nobody took it over during the outage); the checks of
    // the record refuse it if a newer token had been in use before it.
    let ended = s.ended(run.id).await.unwrap();
    let outcome = ended.outcome.clone().unwrap_or_default();
    s.event(
        ended.finished.unwrap(),
        format!("{} ended its run: {outcome}", run.instance),
    );
    s.hold_past_windows(Duration::from_secs(3)).await.unwrap();
    assert_passed(&s.finish().await.unwrap());
}

// ---------------------------------------------------------------------------------
// A connection cut without a close: a proxy between each instance and the server,
// the holder's switched to a blackhole, then restored.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_cut_without_a_close() {
    let db = TestDb::new().await;
    let config = config("connection-cut", db.url(), db.direct_url());
    let upstream = url_address(db.url()).unwrap();
    let mut proxies = Vec::new();
    let mut specs = Vec::new();
    for name in ["a", "b", "c"] {
        let proxy = Proxy::start(upstream.clone()).await.unwrap();
        let mut spec = config.spec(name);
        spec.url = url_via(db.url(), proxy.port()).unwrap();
        proxies.push((name, proxy));
        specs.push(spec);
    }
    let (gap, cut_for) = (config.crash_gap(), outage(&config));
    let mut s = Scenario::start(config, specs).await.unwrap();
    s.set_gap_bound(gap);
    s.hold(Duration::from_secs(3)).await;
    let run = s.mid_run(FENCING_JOB).await.unwrap();
    let proxy = &proxies
        .iter()
        .find(|(name, _)| *name == run.instance)
        .unwrap()
        .1;
    let cut = s.now().await.unwrap();
    proxy.cut();
    s.event(cut, format!("proxy of {} cut (blackhole)", run.instance));
    // Taken over while the holder is still cut off.
    let next = s.takeover(FENCING_JOB, cut, &run.instance, cut_for);
    let next = next.await.unwrap();
    until(&s, cut, cut_for).await;
    let restored = s.now().await.unwrap();
    proxy.restore();
    s.event(restored, format!("proxy of {} restored", run.instance));
    s.window("connection cut", cut, restored);
    let ended = s.detect(run.id, restored).await.unwrap();
    if let Some(next) = next {
        s.expect(next.token > run.token, || {
            format!(
                "takeover token {} not above the cut holder's {}",
                next.token, run.token
            )
        });
    }
    s.expect(!ended.paid(), || {
        format!("the cut holder's fenced write committed after the takeover: {ended:?}")
    });
    s.hold_past_windows(Duration::from_secs(3)).await.unwrap();
    let verdict = s.finish().await.unwrap();
    drop(proxies);
    assert_passed(&verdict);
}

// ---------------------------------------------------------------------------------
// A node whose clock is far off.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_clock_far_off() {
    let db = TestDb::new().await;
    let config = config("clock-skew", db.url(), db.direct_url());
    let specs = ["a", "b"].map(|name| config.spec(name)).to_vec();
    // An hour ahead, alone on its node, so it runs every tick of the node job there.
    let mut skewed = config.spec("skewed");
    skewed.node = "node-b".to_owned();
    skewed.clock_offset = TimeDelta::hours(1);
    let period = TimeDelta::from_std(config.period).unwrap();
    let mut s = Scenario::start(config, specs).await.unwrap();
    s.hold(Duration::from_secs(2)).await;
    let joined = s.spawn(skewed).await.unwrap();
    s.event(joined, "skewed (an hour ahead, alone on node-b) ready");
    s.hold(Duration::from_secs(8)).await;
    // The skewed instance started every run close to its tick on the database's
    // clock: never early (beyond the offset's measurement error), never a period late.
    let record = s.db().record().await.unwrap();
    let runs: Vec<_> = record
        .runs
        .iter()
        .filter(|r| r.instance == "skewed")
        .collect();
    let on_its_node = runs
        .iter()
        .filter(|r| r.node == "node-b" && r.tick > joined)
        .count();
    s.expect(on_its_node >= 6, || {
        format!("the skewed instance ran only {on_its_node} ticks on its node")
    });
    for run in runs.iter().filter(|r| r.tick > joined) {
        let late = run.started - run.tick;
        s.expect(
            late > TimeDelta::milliseconds(-250) && late < period,
            || {
                format!(
                    "the skewed instance started {} tick {} {} ms after it",
                    run.job,
                    time(run.tick),
                    late.num_milliseconds()
                )
            },
        );
    }
    assert_passed(&s.finish().await.unwrap());
}

// ---------------------------------------------------------------------------------
// A deploy: graceful rolling restart of every instance in turn.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_rolling_restart() {
    let db = TestDb::new().await;
    let mut s = three(config("rolling-restart", db.url(), db.direct_url())).await;
    s.hold(Duration::from_secs(3)).await;
    for name in ["a", "b", "c"] {
        s.terminate(name).await.unwrap();
        let spec = s.config().spec(&format!("{name}2"));
        s.spawn(spec).await.unwrap();
        s.hold(Duration::from_secs(2)).await;
    }
    s.hold(Duration::from_secs(2)).await;
    assert_passed(&s.finish().await.unwrap());
}

// ---------------------------------------------------------------------------------
// PgBouncer in transaction pooling mode between every instance and the server.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigstop_through_pgbouncer() {
    let server = tokio::task::spawn_blocking(TestServer::start)
        .await
        .unwrap()
        .expect("start a server of its own");
    let direct = test_postgres::direct_url(&server.create_database().await);
    let database = direct.rsplit('/').next().unwrap().to_owned();
    let port = server.port();
    let bouncer = tokio::task::spawn_blocking(move || PgBouncer::start(port))
        .await
        .unwrap()
        .expect("start PgBouncer");
    let url = bouncer.url(&database);
    assert!(url.contains("pgbouncer=true"), "{url}");
    assert_passed(&sigstop(config("pgbouncer-sigstop", &url, &direct)).await);
}

// ---------------------------------------------------------------------------------
// A soak: the faults above in turn, for `CHAOS_SOAK_SECS` (default: one round).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak() {
    let soak = std::env::var("CHAOS_SOAK_SECS")
        .ok()
        .map(|s| Duration::from_secs(s.parse().expect("CHAOS_SOAK_SECS is a number of seconds")))
        .unwrap_or_default();
    let db = TestDb::new().await;
    let config = config("soak", db.url(), db.direct_url());
    let (gap, pause) = (config.crash_gap(), outage(&config));
    let mut s = three(config).await;
    s.set_gap_bound(gap);
    s.hold(Duration::from_secs(2)).await;
    let deadline = tokio::time::Instant::now() + soak;
    let mut round = 0;
    loop {
        // A crash of the fencing job's holder, and a replacement.
        let run = s.mid_run(FENCING_JOB).await.unwrap();
        let killed = s.kill(&run.instance).await.unwrap();
        s.window("SIGKILL", killed, killed);
        let limit = s.config().ttl * 5;
        s.takeover(FENCING_JOB, killed, &run.instance, limit)
            .await
            .unwrap();
        let spec = s.config().spec(&format!("{}-{round}", run.instance));
        s.spawn(spec).await.unwrap();
        s.hold(Duration::from_secs(2)).await;
        // A pause past the ttl.
        let run = s.mid_run(FENCING_JOB).await.unwrap();
        let stopped = s.pause(&run.instance).await.unwrap();
        let next = s.takeover(FENCING_JOB, stopped, &run.instance, pause);
        let taken_over = next.await.unwrap().is_some();
        until(&s, stopped, pause).await;
        let resumed = s.resume(&run.instance).await.unwrap();
        s.window("SIGSTOP", stopped, resumed);
        let ended = s.detect(run.id, resumed).await.unwrap();
        s.expect(!(taken_over && ended.paid()), || {
            format!("a paused holder's fenced write committed after a takeover: {ended:?}")
        });
        s.hold(Duration::from_secs(2)).await;
        // A graceful restart of the fencing job's current holder.
        let run = s.mid_run(FENCING_JOB).await.unwrap();
        s.terminate(&run.instance).await.unwrap();
        let spec = s.config().spec(&format!("{}-r{round}", run.instance));
        s.spawn(spec).await.unwrap();
        s.hold(Duration::from_secs(2)).await;
        round += 1;
        if tokio::time::Instant::now() >= deadline {
            break;
        }
    }
    s.hold_past_windows(Duration::from_secs(3)).await.unwrap();
    let verdict = s.finish().await.unwrap();
    println!("soak: {round} rounds of SIGKILL, SIGSTOP and a graceful restart");
    assert_passed(&verdict);
}
