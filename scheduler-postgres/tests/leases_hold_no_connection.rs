//! Invariant 1: holding leases costs no connection. A pool of one connection serves
//! four held leases and the app's own readiness write; the advisory-lock pattern the
//! product replaces starves the same write.

use std::sync::Arc;
use std::time::Duration;

use scheduler_core::{LeaseName, Store, TakeRequest, Tick, Ttl};
use scheduler_postgres::{PostgresOptions, PostgresStore};
use sea_orm::{ConnectOptions, ConnectionTrait, Database};
use test_postgres::TestDb;

const JOBS: [&str; 4] = ["sweep", "alerts", "mail-checks", "uptime:node-a"];

/// How long a test waits for something that takes moments on an idle machine.
const LIMIT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn leases_hold_no_connection() {
    let db = TestDb::new().await;
    // The connect timeout is also the pool's acquire timeout: generous, as only a
    // pinned pool should make the app's write wait for good.
    let options = PostgresOptions::default()
        .max_connections(1)
        .connect_timeout(LIMIT);
    let store = PostgresStore::connect(db.url(), options)
        .await
        .expect("connect");
    let conn = store.connection().clone();
    conn.execute_unprepared(
        "CREATE TABLE readiness (id serial PRIMARY KEY, at timestamptz NOT NULL DEFAULT now())",
    )
    .await
    .expect("app table");

    let tick = Tick::new(store.now().await.expect("clock"));
    let ttl = Ttl::new(Duration::from_secs(120)).expect("ttl");
    let requests: Vec<_> = JOBS
        .iter()
        .map(|job| TakeRequest::new(LeaseName::new(*job).expect("name"), tick))
        .collect();
    let held = store.take(&requests, ttl).await.expect("take").won;
    assert_eq!(held.len(), 4, "all four leases are taken and stay held");

    // The app's readiness write commits on the same one-connection pool. The leases
    // are never released here: had they pinned the connection, it would never commit.
    let store = Arc::new(store);
    let write = tokio::time::timeout(
        LIMIT,
        conn.execute_unprepared("INSERT INTO readiness DEFAULT VALUES"),
    )
    .await;
    assert!(
        matches!(write, Ok(Ok(_))),
        "readiness write did not commit while four leases were held: {write:?}"
    );
    // And renewals of all four still go through while the app uses the pool.
    let keys: Vec<_> = held.iter().map(|l| l.key()).collect();
    assert_eq!(store.renew(&keys, ttl).await.expect("renew").len(), 4);
}

#[tokio::test]
async fn advisory_locks_pin_the_pool_and_starve_the_app() {
    // The failure mode we exist to remove, written out: a pool of four, one session
    // advisory lock per job, each held on its connection for the job's whole run.
    // On the server itself: behind PgBouncer's transaction pooling a session lock
    // does not even stay with its session.
    let db = TestDb::new().await;
    let mut options = ConnectOptions::new(db.direct_url().to_owned());
    options
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(3))
        .sqlx_logging(false);
    let conn = Database::connect(options).await.expect("connect");
    conn.execute_unprepared("CREATE TABLE readiness (id serial PRIMARY KEY)")
        .await
        .expect("app table");
    let pool = conn.get_postgres_connection_pool();
    let mut pinned = Vec::new();
    for job in JOBS {
        let mut c = pool.acquire().await.expect("acquire");
        let (locked,): (bool,) =
            sea_orm::sqlx::query_as("SELECT pg_try_advisory_lock(hashtext($1))")
                .bind(job)
                .fetch_one(&mut *c)
                .await
                .expect("lock");
        assert!(locked);
        pinned.push(c); // held for the duration of the "run"
    }
    // The pool gives up after its 3 s acquire timeout; the outer bound only keeps a
    // pool that never gives up from hanging the test.
    let write = tokio::time::timeout(
        LIMIT,
        conn.execute_unprepared("INSERT INTO readiness DEFAULT VALUES"),
    )
    .await;
    match write {
        Ok(Err(err)) => assert!(
            err.to_string().to_lowercase().contains("pool") || err.to_string().contains("acquire"),
            "expected a pool timeout, got {err}"
        ),
        other => {
            panic!("the app write should not get a connection while four locks are held: {other:?}")
        }
    }
    drop(pinned);
    conn.execute_unprepared("INSERT INTO readiness DEFAULT VALUES")
        .await
        .expect("the write goes through once the locks' connections are returned");
}
