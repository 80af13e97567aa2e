//! Control changes announced by `NOTIFY` and heard by a `LISTEN` on a connection of
//! the store's own: every control statement announces its version; an idle instance
//! sends nothing between its ticks (no control poll), yet a trigger is seen when it is
//! made, not at the next poll; a listener connection that is cut is opened again,
//! and a change made meanwhile is not lost; the server keeps the listener's silent
//! connection alive with TCP keepalives.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use std::time::Duration;

use scheduler_core::{ControlRequest, Controls, Outcome, Schedule, Scheduler, TriggerState};
use scheduler_postgres::{PostgresOptions, PostgresStore};
use sea_orm::sqlx::postgres::{PgConnection, PgListener};
use sea_orm::sqlx::{self, Connection};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};
use support::hostile::Logs;
use support::{LIMIT, Recorder, wait_for};
use test_postgres::TestDb;
use tokio::sync::watch;

async fn scalar(conn: &DatabaseConnection, sql: &str) -> i64 {
    conn.query_one_raw(Statement::from_string(DbBackend::Postgres, sql))
        .await
        .expect("query")
        .expect("row")
        .try_get::<i64>("", "v")
        .expect("v")
}

/// The backend of the store's listener, once it listens.
async fn listener_pid(inspect: &DatabaseConnection) -> Option<i64> {
    let row = inspect
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT pid::int8 AS v FROM pg_stat_activity \
             WHERE datname = current_database() AND application_name LIKE '%controls listener'",
        ))
        .await
        .expect("pg_stat_activity")?;
    row.try_get::<i64>("", "v").ok()
}

/// A scheduler on `store` with `jobs` (name, period), polling the controls on its
/// timer every `poll`; stopped when the sender is dropped or sent `true`.
fn start(
    store: &PostgresStore,
    jobs: &[(&str, Duration)],
    poll: Option<Duration>,
) -> (watch::Sender<bool>, tokio::task::JoinHandle<()>) {
    let mut builder = Scheduler::builder(store.clone())
        .node_id("node-a")
        .lease_ttl(Duration::from_secs(4))
        // The heartbeat is one write per interval, its own rule (tests/instances.rs):
        // a minute apart, it falls outside the windows these tests watch for reads.
        .heartbeat(Duration::from_secs(60));
    for &(job, every) in jobs {
        let mut recorder = Recorder::new(job, store, "a");
        recorder.schedule = Schedule::every(every);
        builder = builder.job(recorder);
    }
    if let Some(poll) = poll {
        builder = builder.control_poll(Some(poll));
    }
    let scheduler = builder.build().expect("build");
    let (stop, mut stopped) = watch::channel(false);
    let task = tokio::spawn(scheduler.run_until(async move {
        let _ = stopped.wait_for(|s| *s).await;
    }));
    (stop, task)
}

async fn connect(db: &TestDb) -> PostgresStore {
    connect_with(db, PostgresOptions::default()).await
}

async fn connect_with(db: &TestDb, options: PostgresOptions) -> PostgresStore {
    let store = PostgresStore::connect(db.url(), options)
        .await
        .expect("connect");
    store
        .connection()
        .execute_unprepared(support::RUNS_TABLE)
        .await
        .expect("runs table");
    store
}

/// One value of `sql` on the test's single connection.
async fn one<T>(conn: &mut PgConnection, sql: &str) -> T
where
    T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Unpin,
{
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(conn)
        .await
        .expect("query")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_instance_sends_nothing_between_its_ticks() {
    let db = TestDb::new().await;
    let store = connect(&db).await;
    // The pool's connection and the listener's.
    sends_nothing_between_ticks(&db, store, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_transaction_pooler_with_a_listen_url_an_idle_instance_sends_nothing() {
    let db = TestDb::through_pgbouncer().await;
    let store = connect_with(&db, PostgresOptions::default().listen_url(db.direct_url())).await;
    assert!(store.transaction_pooling());
    // The listener's (PgBouncer's server connections come and go on its own terms).
    sends_nothing_between_ticks(&db, store, 1).await;
}

/// Runs a scheduler on `store` (on `db`) with a job every 20 s and the default
/// control poll, and asserts that between two of its ticks no backend of the
/// database ran a statement or was opened; `connections`: at least how many backends
/// the instance has.
async fn sends_nothing_between_ticks(db: &TestDb, store: PostgresStore, connections: i64) {
    // The test's own reads on one connection, which the check below leaves out.
    let mut inspect = PgConnection::connect(db.direct_url())
        .await
        .expect("inspect");
    // A job every 20 s and the default control poll (5 s): without the listener, an
    // instance would poll the controls twice or more between two ticks.
    let now_us = "SELECT (extract(epoch FROM now()) * 1000000)::int8";
    let started: i64 = one(&mut inspect, now_us).await;
    let (stop, task) = start(&store, &[("every_20s", Duration::from_secs(20))], None);
    // Just after the run of a tick due since the start (not the row start-up
    // creates for a new job, held by nobody: `''`), released: the next tick is 20 s
    // after it.
    let released = format!(
        "SELECT count(*)::int8 FROM scheduler_leases \
         WHERE name = 'every_20s' AND released_at IS NOT NULL AND holder <> '' \
           AND tick > to_timestamp({started} / 1e6)"
    );
    let deadline = tokio::time::Instant::now() + LIMIT;
    while one::<i64>(&mut inspect, &released).await == 0 {
        assert!(tokio::time::Instant::now() < deadline, "no run released");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let from: i64 = one(&mut inspect, now_us).await;
    tokio::time::sleep(Duration::from_secs(12)).await;
    // Every other backend of the test's database: none ran a statement, and none was
    // opened, since `from` (a statement's end moves `state_change`).
    let busy: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT format('%s %s at %s (opened %s)', pid, query, state_change, backend_start) \
         FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid() \
           AND backend_type = 'client backend' \
           AND (state_change >= to_timestamp({from} / 1e6) \
                OR backend_start >= to_timestamp({from} / 1e6))"
    )))
    .fetch_all(&mut inspect)
    .await
    .expect("pg_stat_activity");
    let seen: i64 = one(
        &mut inspect,
        "SELECT count(*)::int8 FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid() \
           AND backend_type = 'client backend'",
    )
    .await;
    let _ = stop.send(true);
    task.await.expect("scheduler");
    assert!(seen >= connections, "the instance's connections: {seen}");
    assert!(
        busy.is_empty(),
        "backends that ran a statement in 12 s between two ticks (from {from} µs): {busy:#?}"
    );
}

/// A scheduler with `jobs` (name, period) whose timer polls the controls an hour
/// apart (so only an announcement brings a change soon), once its store listens.
struct Listening {
    store: PostgresStore,
    /// The test's own pool on the database.
    inspect: DatabaseConnection,
    /// The listener's server process.
    pid: i64,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Listening {
    async fn start(db: &TestDb, jobs: &[(&str, Duration)]) -> Self {
        Self::on(connect(db).await, db, jobs).await
    }

    /// As [`Listening::start`], on `store` (on `db`, with the runs table).
    async fn on(store: PostgresStore, db: &TestDb, jobs: &[(&str, Duration)]) -> Self {
        let inspect = test_postgres::inspect(db.url()).await;
        let (stop, task) = start(&store, jobs, Some(Duration::from_secs(3_600)));
        wait_for(LIMIT, "the listener", || async {
            listener_pid(&inspect).await.is_some()
        })
        .await;
        let pid = listener_pid(&inspect).await.expect("pid");
        Self {
            store,
            inspect,
            pid,
            stop,
            task,
        }
    }

    /// Triggers `job` and waits until the run ended, for at most `limit`.
    async fn trigger_and_wait(&self, job: &str, limit: Duration) {
        let trigger = self
            .store
            .trigger(&ControlRequest::new(job, "alice"))
            .await
            .expect("trigger");
        wait_for(limit, "the triggered run", || async {
            matches!(
                self.store
                    .trigger_status(trigger.id)
                    .await
                    .expect("status")
                    .map(|t| t.state),
                Some(TriggerState::Done {
                    outcome: Outcome::Succeeded,
                    ..
                })
            )
        })
        .await;
    }

    /// Cuts the listener's connection and triggers `job` at once (its announcement
    /// may reach no listener at all); waits for the run and for a new listener.
    async fn cut_and_trigger(&self, job: &str) {
        self.inspect
            .execute_unprepared(&format!("SELECT pg_terminate_backend({})", self.pid))
            .await
            .expect("terminate");
        self.trigger_and_wait(job, LIMIT).await;
        wait_for(LIMIT, "a new listener", || async {
            listener_pid(&self.inspect)
                .await
                .is_some_and(|p| p != self.pid)
        })
        .await;
    }

    async fn stop(self) -> DatabaseConnection {
        let _ = self.stop.send(true);
        self.task.await.expect("scheduler");
        self.inspect
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_is_seen_when_it_is_made_not_at_the_next_poll() {
    let db = TestDb::new().await;
    let s = Listening::start(&db, &[("hourly", Duration::from_secs(3_600))]).await;
    // Past the start-up's own poll.
    tokio::time::sleep(Duration::from_secs(2)).await;
    s.trigger_and_wait("hourly", LIMIT).await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_listener_listens_again_and_loses_no_change() {
    let db = TestDb::new().await;
    let s = Listening::start(&db, &[("hourly", Duration::from_secs(3_600))]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    s.cut_and_trigger("hourly").await;
    // And it hears the next change.
    s.trigger_and_wait("hourly", LIMIT).await;
    let inspect = s.stop().await;
    // The last scheduler stopped: so does the listener.
    wait_for(LIMIT, "the listener to stop", || async {
        listener_pid(&inspect).await.is_none()
    })
    .await;
}

/// A server process (of a test server on this machine) stopped by `SIGSTOP`, until
/// dropped.
struct Stopped(i64);

impl Stopped {
    fn new(pid: i64) -> Self {
        assert!(kill("-STOP", pid), "kill -STOP {pid}");
        Self(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        kill("-CONT", self.0);
    }
}

fn kill(signal: &str, pid: i64) -> bool {
    std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_that_stopped_answering_is_replaced_and_loses_no_change() {
    let db = TestDb::new().await;
    // A job every second (its takes check the listener's connection, at most every
    // 30 s) and one to trigger.
    let s = Listening::start(
        &db,
        &[
            ("every_second", Duration::from_secs(1)),
            ("hourly", Duration::from_secs(3_600)),
        ],
    )
    .await;
    // The listener's server process stops (as a dead link or a vanished host looks
    // to its client: the socket open, nothing answered, no notification delivered).
    let stopped = Stopped::new(s.pid);
    // Within 30 s a take checks the connection, which does not answer within 10 s:
    // a new connection listens, and the poll that prompts finds the trigger.
    s.trigger_and_wait("hourly", LIMIT * 2).await;
    // A new listener listens. (The old server process, stopped, still counts in
    // `pg_stat_activity` until it resumes and finds its client gone.) The failed
    // check prompts the poll at once, while the new session connects only after
    // the listener's backoff: the run can come first, so this waits.
    let others = format!(
        "SELECT count(*) AS v FROM pg_stat_activity WHERE datname = current_database() \
         AND application_name LIKE '%controls listener' AND pid <> {}",
        s.pid
    );
    wait_for(LIMIT, "a new listener", || async {
        scalar(&s.inspect, &others).await == 1
    })
    .await;
    drop(stopped);
    s.stop().await;
}

/// Behind PgBouncer's transaction pooling `LISTEN` is not kept, but a listener given
/// a URL straight to the server hears each control as it is made: a trigger runs
/// although the timer would poll in an hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_transaction_pooler_a_listen_url_hears_each_control() {
    logs();
    let db = TestDb::through_pgbouncer().await;
    let store = connect_with(&db, PostgresOptions::default().listen_url(db.direct_url())).await;
    assert!(store.transaction_pooling());
    let s = Listening::on(store, &db, &[("hourly", Duration::from_secs(3_600))]).await;
    // Past the start-up's own poll.
    tokio::time::sleep(Duration::from_secs(2)).await;
    s.trigger_and_wait("hourly", LIMIT).await;
    // A new connection is verified before it counts.
    s.cut_and_trigger("hourly").await;
    s.trigger_and_wait("hourly", LIMIT).await;
    s.stop().await;
    // Every probe reached the listener: sent as a named prepared statement, a probe
    // clashed with another client's statement of the same name on the server
    // connection PgBouncer handed it, which failed the listener's verification (and
    // left the controls to the timer until the next listener, a second later).
    let failed = logs().find("the probe of the listener could not be sent");
    assert!(failed.is_none(), "{failed:?}");
}

/// Every warning and error logged in this test binary, by any test: the listener
/// runs on tasks of its own, which a subscriber set for one test's thread misses.
fn logs() -> &'static Logs {
    static LOGS: std::sync::OnceLock<Logs> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Logs::default();
        let _ = tracing::subscriber::set_global_default(logs.clone());
        logs
    })
}

/// A listen URL that leads to another database would hear no control: the store's
/// probe does not reach it, so the listener never counts as live and the controls are
/// polled on the timer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_url_to_another_database_is_not_trusted() {
    let db = TestDb::through_pgbouncer().await;
    let elsewhere = TestDb::new().await;
    let store = connect_with(
        &db,
        PostgresOptions::default().listen_url(elsewhere.direct_url()),
    )
    .await;
    let signal = store.watch().expect("a watch");
    let (stop, task) = start(
        &store,
        &[("hourly", Duration::from_secs(3_600))],
        Some(Duration::from_secs(1)),
    );
    // The probe goes unheard for 10 s; the listener is dropped and tried again.
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert!(
        !signal.borrow().live,
        "a listener on another database counted as live"
    );
    let trigger = store
        .trigger(&ControlRequest::new("hourly", "alice"))
        .await
        .expect("trigger");
    wait_for(LIMIT, "the triggered run, polled on the timer", || async {
        matches!(
            store
                .trigger_status(trigger.id)
                .await
                .expect("status")
                .map(|t| t.state),
            Some(TriggerState::Done { .. })
        )
    })
    .await;
    let _ = stop.send(true);
    task.await.expect("scheduler");
}

#[tokio::test]
async fn a_listen_url_that_cannot_listen_is_refused_at_open() {
    let db = TestDb::new().await;
    for url in [
        "mysql://localhost/app".to_owned(),
        format!("{}?pgbouncer=true", db.direct_url()),
    ] {
        let options = PostgresOptions::default().listen_url(&url);
        match PostgresStore::connect(db.url(), options).await {
            Err(scheduler_postgres::Error::InvalidUrl { reason }) => {
                assert!(reason.starts_with("listen_url: "), "{reason}")
            }
            other => panic!("{url}: {other:?}"),
        }
    }
}

/// The timer pending on the server's end of the TCP connection from `client_port` to
/// `server_port` on this machine, as `/proc/net/tcp` shows it: its kind (`02` the
/// keepalive timer; `01` retransmission, pending while data sent waits for its
/// acknowledgement; `00` none) and when it fires, in seconds (clock ticks of 1/100 s).
fn server_timer(server_port: u16, client_port: u16) -> Option<(String, f64)> {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let port = |address: &str| {
        address
            .rsplit(':')
            .next()
            .and_then(|p| u16::from_str_radix(p, 16).ok())
    };
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (local, remote, timer) = (fields.get(1)?, fields.get(2)?, fields.get(5)?);
        if port(local)? != server_port || port(remote)? != client_port {
            return None;
        }
        let (kind, when) = timer.split_once(':')?;
        let when = u64::from_str_radix(when, 16).ok()?;
        Some((kind.to_owned(), when as f64 / 100.0))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_keeps_the_idle_listener_connection_alive() {
    let db = TestDb::new().await;
    let s = Listening::start(&db, &[("hourly", Duration::from_secs(3_600))]).await;
    let ports = |sql: String| {
        let inspect = &s.inspect;
        async move { u16::try_from(scalar(inspect, &sql).await).expect("a port") }
    };
    let server = ports("SELECT inet_server_port()::int8 AS v".to_owned()).await;
    let client = ports(format!(
        "SELECT client_port::int8 AS v FROM pg_stat_activity WHERE pid = {}",
        s.pid
    ))
    .await;
    // The listener's connection stays silent while nothing changes: the server sends
    // a keepalive after a minute of it (the system's default is two hours), so that
    // no NAT or firewall takes the flow for a dead one. (Once the last answer sent on
    // it is acknowledged, the keepalive timer is the one pending.)
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let timer = server_timer(server, client);
        if matches!(&timer, Some((kind, secs)) if kind == "02" && *secs <= 60.0) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the timer of the server's end of the listener's connection: {timer:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    s.stop().await;
}

#[tokio::test]
async fn every_control_announces_its_version() {
    let db = TestDb::new().await;
    let store = connect(&db).await;
    let mut listener = PgListener::connect(db.url()).await.expect("listener");
    listener
        .listen("scheduler_leases_controls")
        .await
        .expect("listen");
    let req = ControlRequest::new("report", "alice");
    store.pause(&req).await.expect("pause");
    store.resume(&req, true).await.expect("resume");
    let trigger = store.trigger(&req).await.expect("trigger");
    let holder = scheduler_core::Holder::generate();
    let lease = scheduler_core::LeaseName::new("report").expect("name");
    let ttl = scheduler_core::Ttl::new(Duration::from_secs(60)).expect("ttl");
    store
        .claim_trigger(trigger.id, &lease, &holder, ttl)
        .await
        .expect("claim")
        .expect("claimed");
    store
        .finish_trigger(trigger.id, Some(&holder), Outcome::Succeeded, None)
        .await
        .expect("finish");
    store
        .register_handlers("node-a", &["send".to_owned()])
        .await
        .expect("register");
    let row = scheduler_core::ScheduleRow::new("tenant-1", "send", "0 0 7 * * *");
    store.put_schedule(&row, "alice", "").await.expect("put");
    store
        .remove_schedule("tenant-1", "alice", "")
        .await
        .expect("remove");
    let mut versions = Vec::new();
    while versions.len() < 7 {
        let n = tokio::time::timeout(LIMIT, listener.recv())
            .await
            .expect("a notification")
            .expect("recv");
        versions.push(n.payload().parse::<i64>().expect("a version"));
    }
    let version = scalar(
        store.connection(),
        "SELECT version AS v FROM scheduler_leases_version",
    )
    .await;
    // Pause, resume, trigger, claim, finish, put, remove: each its own version, in
    // order.
    assert_eq!(
        versions,
        ((version - 6)..=version).collect::<Vec<_>>(),
        "announced versions"
    );
}
