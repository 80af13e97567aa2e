#![allow(clippy::expect_used)]
//! Renew and release lock their rows without `FOR UPDATE`: each row when the UPDATE
//! reaches it. So the order it reaches them in is the lock order, and it must be
//! take's (by name, in the database's collation), or a renewal and a takeover of the
//! same expired leases could each hold a row the other waits for. And a row changed
//! while the UPDATE waited for it is checked again before it is written.
//!
//! RETURNING hands rows back in the order the UPDATE wrote (and locked) them, which the
//! store keeps: that is what is checked, for rows stored in no particular order, under
//! a generic and a custom plan.

use std::time::Duration;

use scheduler_core::{Lease, LeaseName, Release, Store, TakeRequest, Tick, Ttl};
use scheduler_postgres::{PostgresOptions, PostgresStore};
use sea_orm::sqlx::{self, Connection, Executor, PgConnection};
use test_postgres::TestDb;

/// How long a test waits for something that takes moments on an idle machine.
const LIMIT: Duration = Duration::from_secs(60);

const LEASES: usize = 1000;

fn ttl() -> Ttl {
    Ttl::new(Duration::from_secs(600)).expect("ttl")
}

/// Takes `LEASES` leases for `tick` in batches of 100 names picked across the whole
/// range, so that rows sit in the table in no particular order of their names.
async fn take_scattered(store: &PostgresStore, tick: Tick) -> Vec<Lease> {
    // 7 is prime to LEASES: every name once, neighbours far apart.
    let names: Vec<LeaseName> = (0..LEASES)
        .map(|i| LeaseName::new(format!("order-{:04}", (i * 7) % LEASES)).expect("name"))
        .collect();
    let mut won = Vec::new();
    for batch in names.chunks(100) {
        let requests: Vec<_> = batch
            .iter()
            .map(|name| TakeRequest::new(name.clone(), tick))
            .collect();
        won.extend(store.take(&requests, ttl()).await.expect("take").won);
    }
    assert_eq!(won.len(), LEASES);
    won
}

/// The lease names as the server orders them (the order take locks them in).
async fn server_order(conn: &mut PgConnection) -> Vec<String> {
    sqlx::query_scalar("SELECT name FROM scheduler_leases ORDER BY name")
        .fetch_all(conn)
        .await
        .expect("names")
}

/// Fails, naming the first row out of place, unless `written` is `order`.
fn assert_in_order(written: &[String], order: &[String], plans: &str, operation: &str) {
    assert_eq!(
        written.len(),
        order.len(),
        "{plans}: {operation} missed leases"
    );
    if let Some(at) = written.iter().zip(order).position(|(w, o)| w != o) {
        panic!(
            "{plans}: {operation} did not write rows in name order: row {at} is {} \
             where {} belongs (rows {}…)",
            written[at],
            order[at],
            written[at.saturating_sub(2)..(at + 3).min(written.len())].join(", ")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_and_releases_write_rows_in_name_order() {
    let db = TestDb::new().await;
    let direct = test_postgres::direct_url(db.url());
    let mut conn = PgConnection::connect(&direct).await.expect("connect");
    let database: String = sqlx::query_scalar("SELECT current_database()::text")
        .fetch_one(&mut conn)
        .await
        .expect("database");
    let mut tick = None;
    for plans in ["force_generic_plan", "force_custom_plan"] {
        // New sessions of this database plan every statement this way.
        conn.execute(sqlx::AssertSqlSafe(format!(
            "ALTER DATABASE \"{database}\" SET plan_cache_mode = {plans}"
        )))
        .await
        .expect("plan_cache_mode");
        let store = PostgresStore::connect(db.url(), PostgresOptions::default())
            .await
            .expect("connect");
        let next = match tick {
            None => store.now().await.expect("clock"),
            Some(previous) => previous + chrono::TimeDelta::seconds(1),
        };
        tick = Some(next);
        let won = take_scattered(&store, Tick::new(next)).await;
        let order = server_order(&mut conn).await;
        let physical: Vec<String> =
            sqlx::query_scalar("SELECT name FROM scheduler_leases ORDER BY ctid")
                .fetch_all(&mut conn)
                .await
                .expect("names");
        assert_ne!(
            physical, order,
            "the rows should not be stored in name order"
        );

        // Asked for in take's order, renewed in name order.
        let keys: Vec<_> = won.iter().map(|l| l.key()).collect();
        let renewed: Vec<String> = store
            .renew(&keys, ttl())
            .await
            .expect("renew")
            .into_iter()
            .map(|r| r.name.as_str().to_owned())
            .collect();
        assert_in_order(&renewed, &order, plans, "renewal");

        // Asked for in reverse, released in name order.
        let reversed: Vec<_> = keys.iter().rev().cloned().collect();
        let released: Vec<String> = store
            .release(&reversed, Release::Completed)
            .await
            .expect("release")
            .iter()
            .map(|name| name.as_str().to_owned())
            .collect();
        assert_in_order(&released, &order, plans, "release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_waited_for_a_takeover_does_not_renew_the_taken_lease() {
    let db = TestDb::new().await;
    let store = PostgresStore::connect(db.url(), PostgresOptions::default())
        .await
        .expect("connect");
    let direct = test_postgres::direct_url(db.url());
    let tick = Tick::new(store.now().await.expect("clock"));
    let requests: Vec<_> = ["a", "b", "c", "d"]
        .iter()
        .map(|name| TakeRequest::new(LeaseName::new(*name).expect("name"), tick))
        .collect();
    let won = store.take(&requests, ttl()).await.expect("take").won;
    assert_eq!(won.len(), 4);
    let keys: Vec<_> = won.iter().map(|l| l.key()).collect();

    // The renewal waits for `b`, then the release for `c` (`b` is no longer ours: the
    // release does not even look at it).
    for (operation, stolen, ours) in [
        ("renew", "b", &["a", "c", "d"][..]),
        ("release", "c", &["a", "d"][..]),
    ] {
        // Another instance takes the lease over and has not committed yet.
        let mut thief = PgConnection::connect(&direct).await.expect("connect");
        let mut takeover = thief.begin().await.expect("begin");
        sqlx::query(
            "UPDATE scheduler_leases SET holder = 'thief', token = token + 1 WHERE name = $1",
        )
        .bind(stolen)
        .execute(&mut *takeover)
        .await
        .expect("takeover");

        // The store's statement waits for that row…
        let store = store.clone();
        let keys = keys.clone();
        let call = tokio::spawn(async move {
            match operation {
                "renew" => store
                    .renew(&keys, ttl())
                    .await
                    .expect("renew")
                    .into_iter()
                    .map(|r| r.name.as_str().to_owned())
                    .collect::<Vec<_>>(),
                _ => store
                    .release(&keys, Release::Completed)
                    .await
                    .expect("release")
                    .iter()
                    .map(|name| name.as_str().to_owned())
                    .collect(),
            }
        });
        let mut inspect = PgConnection::connect(&direct).await.expect("connect");
        let deadline = tokio::time::Instant::now() + LIMIT;
        loop {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
            )
            .fetch_one(&mut inspect)
            .await
            .expect("activity");
            if waiting > 0 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the {operation} never waited for the row being taken over"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // …and the takeover commits: that lease is no longer ours, the others are.
        takeover.commit().await.expect("commit");
        let done = tokio::time::timeout(LIMIT, call)
            .await
            .expect("the call ended")
            .expect("join");
        assert_eq!(done, ours, "{operation} wrote a lease taken over meanwhile");
        let (holder, released): (String, bool) = sqlx::query_as(
            "SELECT holder, released_at IS NOT NULL FROM scheduler_leases WHERE name = $1",
        )
        .bind(stolen)
        .fetch_one(&mut inspect)
        .await
        .expect("row");
        assert_eq!((holder.as_str(), released), ("thief", false));
    }
}
