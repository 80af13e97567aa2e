//! Failover scenarios on a real Patroni cluster: one etcd member, three Patroni
//! nodes managing PostgreSQL 15 in `synchronous_mode`, HAProxy with the canonical
//! Patroni health check (see `scheduler_chaos::patroni`). Three `chaos-app`
//! instances run against it, either through HAProxy or through a multi-host URL
//! listing the three nodes with `target_session_attrs=read-write`; runs and
//! heartbeats are recorded on a plain server apart, so no failover can lose them.
//!
//! Faults: the leader's machine crashes (`SIGKILL` to its Patroni and its
//! PostgreSQL); a planned switchover (`POST /switchover`); the leader cut off from
//! etcd and from its clients (the proxies on its paths blackholed). Patroni elects,
//! promotes and reconfigures by itself; the driver only waits for the instances'
//! path to reach a writable server again. Asserted: the record's checks (crate
//! documentation of `scheduler_chaos`), no tick run twice, no fenced write lost,
//! every instance back to work by itself. Each scenario prints (and appends to
//! `$CHAOS_REPORT` or `target/tmp/chaos-report.txt`) a row: the time from the fault
//! to a writable server on the path and to the next run, ticks missed, and the
//! WARN lines each instance logged during the outage.
//!
//! The scenarios run one at a time (each starts its own cluster, in about 10 s); the
//! whole file takes 4–5 minutes on two busy cores. Needs `patroni`,
//! `etcd` and `haproxy` (Debian: `patroni`, `etcd-server`, `haproxy`; `.ci/run`
//! installs them).
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use scheduler_chaos::app::FENCING_JOB;
use scheduler_chaos::check::time;
use scheduler_chaos::patroni::{self, Cluster, Role};
use scheduler_chaos::{Record, Scenario, ScenarioConfig, Verdict};
use test_postgres::TestDb;

const BIN: &str = env!("CARGO_BIN_EXE_chaos-app");
const TMP: &str = env!("CARGO_TARGET_TMPDIR");

/// One scenario at a time: each runs a whole cluster on a small machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How the instances reach the leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// Through HAProxy, which follows the leader by Patroni's REST API.
    HaProxy,
    /// A multi-host URL listing every node, `target_session_attrs=read-write`.
    MultiHost,
}

/// What happens to the leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// `SIGKILL` to its Patroni and its PostgreSQL.
    Crash,
    /// A planned switchover to the synchronous standby.
    Switchover,
    /// Cut off from etcd and from its clients, then healed.
    Isolation,
}

/// What happened when (database clock of the record server).
struct Outage {
    fault: DateTime<Utc>,
    /// When the instances' path reached a writable server again.
    recovered: DateTime<Utc>,
    /// The end of the fault: the new leader has a synchronous standby again (after
    /// the heal of an isolation).
    ended: DateTime<Utc>,
}

fn config(name: &str, url: &str, direct_url: &str, record_url: &str) -> ScenarioConfig {
    let mut config = ScenarioConfig::new(name, BIN, url, direct_url, &format!("{TMP}/chaos"));
    config.report = Some(
        std::env::var_os("CHAOS_REPORT")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(TMP).join("chaos-report.txt")),
    );
    config.record_url = Some(record_url.to_owned());
    config
}

/// Waits until a node other than `old` leads and the instances' path reaches a
/// writable server on it; returns that node.
async fn new_leader(cluster: &Cluster, route: Route, old: usize) -> usize {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        for i in (0..cluster.nodes.len()).filter(|i| *i != old) {
            if cluster.nodes[i].role().await != Role::Primary {
                continue;
            }
            let url = match route {
                Route::HaProxy => cluster.haproxy_url(),
                Route::MultiHost => cluster.client_url(i),
            };
            if patroni::writable(url).await {
                return i;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no new leader reachable within 90 s; roles {:?}",
            cluster.roles().await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Injects `fault` into the leader `leader`, waits until the path reaches a new
/// leader, and tells the scenario where the lease database is now.
async fn inject(
    s: &mut Scenario,
    cluster: &mut Cluster,
    route: Route,
    fault: Fault,
    leader: usize,
) -> Outage {
    let old = cluster.nodes[leader].name.clone();
    let at = s.now().await.unwrap();
    match fault {
        Fault::Crash => {
            tokio::task::block_in_place(|| cluster.nodes[leader].crash());
            s.event(
                at,
                format!("{old} crashed: SIGKILL to Patroni and PostgreSQL"),
            );
        }
        Fault::Switchover => {
            let candidate = cluster.sync_standby().await.expect("a sync standby");
            let name = cluster.nodes[candidate].name.clone();
            let answer = cluster.switchover(leader, candidate).await.unwrap();
            s.event(at, format!("switchover {old} → {name}: {}", answer.trim()));
        }
        Fault::Isolation => {
            cluster.nodes[leader].isolate();
            s.event(at, format!("{old} cut off from etcd and from its clients"));
        }
    }
    let new = new_leader(cluster, route, leader).await;
    let recovered = s.now().await.unwrap();
    let name = &cluster.nodes[new].name;
    s.event(
        recovered,
        format!("{name} leads, writable through the path"),
    );
    s.lease_database_moved(&cluster.nodes[new].direct_url())
        .await
        .unwrap();
    if fault == Fault::Isolation {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let healed = s.now().await.unwrap();
        cluster.nodes[leader].heal();
        s.event(healed, format!("{old} reachable again"));
    }
    let settled = settled(s, cluster, new).await;
    Outage {
        fault: at,
        recovered,
        ended: settled,
    }
}

/// Waits (up to 30 s) until the new leader `new` has a synchronous standby again:
/// Patroni names one (`synchronous_standby_names`, then the `/sync` key) only once
/// it streams from the new leader, and commits may wait on it while it does. The
/// failover is over then; returns when (or, if none came, now).
async fn settled(s: &mut Scenario, cluster: &Cluster, new: usize) -> DateTime<Utc> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let roles = cluster.roles().await;
        if roles[new] == Role::Primary && roles.contains(&Role::Sync) {
            let at = s.now().await.unwrap();
            let sync = roles.iter().position(|r| *r == Role::Sync).unwrap();
            let name = &cluster.nodes[sync].name;
            s.event(at, format!("{name} is the synchronous standby again"));
            return at;
        }
        if tokio::time::Instant::now() > deadline {
            let at = s.now().await.unwrap();
            s.event(at, format!("no synchronous standby within 30 s: {roles:?}"));
            return at;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// WARN lines each instance (`a`, `b`, `c`) logged from `from` to `to` (by their UTC
/// timestamps).
fn warnings(verdict: &Verdict, from: DateTime<Utc>, to: DateTime<Utc>) -> [usize; 3] {
    ["a", "b", "c"].map(|name| {
        let log = std::fs::read_to_string(verdict.logs.join(format!("{name}.log")));
        log.unwrap_or_default()
            .lines()
            .filter(|line| line.contains(" WARN "))
            .filter_map(|line| {
                line.split_whitespace()
                    .next()?
                    .parse::<DateTime<Utc>>()
                    .ok()
            })
            .filter(|at| *at >= from && *at <= to)
            .count()
    })
}

/// The most WARN lines an instance may log for one outage: the store's first
/// failure, the listener's, a reminder, and, on the instance whose runs were under
/// way when the leader went, two or three per run whose lease was lost (five jobs:
/// 11 measured) — not one per call or per connection attempt (before: about 100 per
/// instance over a multi-host URL).
const MOST_WARNINGS: usize = 20;

/// The scenario's numbers as one row.
fn summary(name: &str, verdict: &Verdict, record: &Record, outage: &Outage) -> String {
    let f = &verdict.findings;
    // The first run of a tick due after the fault.
    let next = record
        .runs
        .iter()
        .filter(|r| r.tick > outage.fault)
        .map(|r| r.started)
        .min();
    let ms = |d: TimeDelta| d.num_milliseconds();
    let next = next.map_or("none".to_owned(), |n| {
        format!("{} ms", ms(n - outage.fault))
    });
    let window_end = outage.ended + TimeDelta::seconds(3);
    format!(
        "{name}: fault→writable {} ms, fault→sync standby again {} ms, fault→next tick run \
         {next}, longest gap {} ms, \
         ticks missed {} ({} in window), duplicates {}, fenced writes lost {}; WARN lines \
         {}..{}: {}; after the fault, first run and runs: {}",
        ms(outage.recovered - outage.fault),
        ms(outage.ended - outage.fault),
        ms(f.longest_gap),
        f.misses,
        f.misses_in_window,
        f.duplicates,
        f.lost_writes,
        time(outage.fault),
        time(window_end),
        {
            let [a, b, c] = warnings(verdict, outage.fault, window_end);
            format!("a {a}, b {b}, c {c}")
        },
        runs_after(record, outage.fault)
    )
}

/// Each instance's first run of a tick due after `fault` (ms after it) and how many
/// such runs it started: back to work by itself.
fn runs_after(record: &Record, fault: DateTime<Utc>) -> String {
    let mut rows = Vec::new();
    for name in ["a", "b", "c"] {
        let runs: Vec<_> = (record.runs.iter())
            .filter(|r| r.instance == name && r.tick > fault)
            .collect();
        let first = runs.iter().map(|r| r.started).min();
        let first = first.map_or("-".to_owned(), |f| {
            format!("{} ms", (f - fault).num_milliseconds())
        });
        rows.push(format!("{name} {first} ({})", runs.len()));
    }
    rows.join(", ")
}

/// A cluster, three instances on `route`, `fault` injected into the leader while
/// a fencing run is under way; the record checked.
async fn scenario(name: &str, route: Route, fault: Fault) {
    let _serial = SERIAL.lock().await;
    let wall = std::time::Instant::now();
    let record = TestDb::new().await;
    let dir = PathBuf::from(TMP).join("patroni").join(name);
    let mut cluster = Cluster::start(&dir)
        .await
        .expect("start the Patroni cluster");
    let leader = cluster.leader().await.expect("a leader");
    let url = match route {
        Route::HaProxy => cluster.haproxy_url(),
        Route::MultiHost => cluster.multi_host_url(),
    };
    let direct = cluster.nodes[leader].direct_url();
    let config = config(name, &url, &direct, record.url());
    let specs = ["a", "b", "c"].map(|n| config.spec(n)).to_vec();
    let started = wall.elapsed();
    let mut s = Scenario::start(config.clone(), specs).await.unwrap();
    s.hold(Duration::from_secs(3)).await;
    s.mid_run(FENCING_JOB).await.unwrap();
    let outage = inject(&mut s, &mut cluster, route, fault, leader).await;
    s.window(&format!("{fault:?}"), outage.fault, outage.ended);
    s.set_gap_bound((outage.ended - outage.fault) + s.config().crash_gap());
    s.takeover(FENCING_JOB, outage.fault, "", Duration::from_secs(30))
        .await
        .unwrap();
    s.hold_past_windows(Duration::from_secs(3)).await.unwrap();
    let runs = s.db().record().await.unwrap();
    let verdict = s.finish().await.unwrap();
    cluster.keep_logs(&verdict.logs);
    drop(cluster);
    let line = summary(name, &verdict, &runs, &outage);
    config
        .report_line(&format!(
            "{line}; cluster up in {started:?}, wall {:?}",
            wall.elapsed()
        ))
        .expect("report");
    assert!(verdict.passed(), "{verdict}");
    let f = &verdict.findings;
    assert_eq!((f.duplicates, f.lost_writes), (0, 0), "{line}");
    let window_end = outage.ended + TimeDelta::seconds(3);
    let warned = warnings(&verdict, outage.fault, window_end);
    assert!(
        warned.iter().all(|&n| n <= MOST_WARNINGS),
        "a flood of warnings: {line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_leader_crash() {
    scenario("patroni-haproxy-crash", Route::HaProxy, Fault::Crash).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_host_leader_crash() {
    scenario("patroni-multihost-crash", Route::MultiHost, Fault::Crash).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_switchover() {
    scenario(
        "patroni-haproxy-switchover",
        Route::HaProxy,
        Fault::Switchover,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_host_switchover() {
    let name = "patroni-multihost-switchover";
    scenario(name, Route::MultiHost, Fault::Switchover).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_leader_isolated() {
    scenario(
        "patroni-haproxy-isolation",
        Route::HaProxy,
        Fault::Isolation,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_host_leader_isolated() {
    let name = "patroni-multihost-isolation";
    scenario(name, Route::MultiHost, Fault::Isolation).await;
}
