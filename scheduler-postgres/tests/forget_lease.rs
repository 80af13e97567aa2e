//! `diagnostics::forget_lease` against a real server: a held lease is refused unless
//! forced, an expired or released one is left as it is, a missing name (or table) is
//! reported as such; the row is never deleted, so a name forgotten and taken again
//! gets a greater fencing token. Unforced, the statement locks nothing; forced, it
//! ends whoever holds the row when it gets the row's lock.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use scheduler_core::{Lease, LeaseName, Release, Store, TakeRequest, Tick, Ttl};
use scheduler_postgres::diagnostics::{self, Forgotten, LeaseState};
use scheduler_postgres::{Fence, PostgresOptions, PostgresStore, TableName};
use sea_orm::sqlx::{self, Connection, Executor, PgConnection};
use test_postgres::TestDb;

/// How long a test waits for something that takes moments on an idle machine.
const LIMIT: Duration = Duration::from_secs(60);

async fn store(db: &TestDb) -> PostgresStore {
    PostgresStore::connect(db.url(), PostgresOptions::default())
        .await
        .expect("connect")
}

fn ttl() -> Ttl {
    Ttl::new(Duration::from_secs(600)).expect("ttl")
}

/// Takes `name` for a tick on the store's clock; it must be won.
async fn take(store: &PostgresStore, name: &str) -> Lease {
    let tick = Tick::new(store.now().await.expect("now"));
    let request = TakeRequest::new(LeaseName::new(name).expect("name"), tick);
    let mut taken = store.take(&[request], ttl()).await.expect("take");
    taken.won.pop().unwrap_or_else(|| panic!("{name} not won"))
}

async fn forget(store: &PostgresStore, name: &str, force: bool) -> Forgotten {
    diagnostics::forget_lease(store, store.table(), name, force)
        .await
        .expect("forget")
        .expect("the lease table exists")
}

/// `name`'s row as the status reads it.
async fn row(store: &PostgresStore, name: &str) -> diagnostics::LeaseStatus {
    let status = diagnostics::lease_status(store, store.table())
        .await
        .expect("status")
        .expect("table");
    status
        .leases
        .into_iter()
        .find(|l| l.lease == name)
        .unwrap_or_else(|| panic!("no row {name}"))
}

/// Whether the fenced transaction of `lease` may still write.
async fn fenced_write_passes(store: &PostgresStore, lease: &Lease) -> bool {
    let fence = Fence {
        name: lease.name.clone(),
        holder: lease.holder.clone(),
        token: lease.token,
    };
    match store
        .fenced(&fence, |_| Box::pin(async { Ok::<_, sea_orm::DbErr>(()) }))
        .await
    {
        Ok(()) => true,
        Err(e) if e.is_lease_lost() => false,
        Err(e) => panic!("fenced: {e}"),
    }
}

#[tokio::test]
async fn a_held_lease_is_refused_unless_forced() {
    let db = TestDb::new().await;
    let store = store(&db).await;
    let lease = take(&store, "sweep").await;

    let refused = forget(&store, "sweep", false).await;
    assert_eq!(
        refused,
        Forgotten::Held {
            holder: lease.holder.as_str().to_owned(),
            token: lease.token.get(),
            until: lease.expires_at,
        }
    );
    // Nothing was written: the holder still holds it.
    let kept = row(&store, "sweep").await;
    assert_eq!(kept.state, LeaseState::Held);
    assert_eq!(kept.expires_at, lease.expires_at);
    assert!(fenced_write_passes(&store, &lease).await);

    let Forgotten::Ended {
        holder,
        token,
        expired_at,
    } = forget(&store, "sweep", true).await
    else {
        panic!("forced forget did not end the lease");
    };
    assert_eq!(
        (holder.as_str(), token),
        (lease.holder.as_str(), lease.token.get())
    );
    assert!(expired_at < lease.expires_at);
    // The row is kept, expired, with its token; the holder's fenced writes are refused.
    let ended = row(&store, "sweep").await;
    assert_eq!(ended.state, LeaseState::Expired);
    assert_eq!(ended.token, lease.token.get());
    assert_eq!(ended.expires_at, expired_at);
    assert!(!fenced_write_passes(&store, &lease).await);

    // Ended already: forced again, there is nothing to end.
    assert!(matches!(
        forget(&store, "sweep", true).await,
        Forgotten::NotHeld {
            state: LeaseState::Expired,
            ..
        }
    ));
}

#[tokio::test]
async fn expired_and_released_leases_are_left_as_they_are() {
    let db = TestDb::new().await;
    let store = store(&db).await;
    let interrupted = take(&store, "reports").await;
    let completed = take(&store, "alerts").await;
    store
        .release(&[interrupted.key()], Release::Interrupted)
        .await
        .expect("release");
    store
        .release(&[completed.key()], Release::Completed)
        .await
        .expect("release");
    let before = [row(&store, "reports").await, row(&store, "alerts").await];
    let mut conn = PgConnection::connect(db.direct_url())
        .await
        .expect("connect");
    let versions = "SELECT xmin::text || ctid::text FROM scheduler_leases ORDER BY name";
    let written: Vec<String> = sqlx::query_scalar(versions)
        .fetch_all(&mut conn)
        .await
        .expect("row versions");

    for force in [false, true] {
        let Forgotten::NotHeld {
            holder,
            token,
            state,
            expired_at,
        } = forget(&store, "reports", force).await
        else {
            panic!("an expired lease is not held");
        };
        assert_eq!(state, LeaseState::Expired);
        assert_eq!(holder, interrupted.holder.as_str());
        assert_eq!(token, interrupted.token.get());
        assert_eq!(expired_at, before[0].expires_at);
        assert!(matches!(
            forget(&store, "alerts", force).await,
            Forgotten::NotHeld {
                state: LeaseState::Released,
                ..
            }
        ));
    }
    // Not a row version was written.
    let rewritten: Vec<String> = sqlx::query_scalar(versions)
        .fetch_all(&mut conn)
        .await
        .expect("row versions");
    assert_eq!(rewritten, written, "a lease not held is not written");
}

#[tokio::test]
async fn a_missing_name_or_table_is_reported_as_such() {
    let db = TestDb::new().await;
    let store = store(&db).await;
    take(&store, "sweep").await;
    for force in [false, true] {
        assert_eq!(forget(&store, "sweeps", force).await, Forgotten::Missing);
        assert_eq!(forget(&store, "swee", force).await, Forgotten::Missing);
    }
    let other = TableName::new("app_a.leases").unwrap();
    let none = diagnostics::forget_lease(&store, &other, "sweep", true)
        .await
        .expect("forget");
    assert_eq!(none, None);
}

#[tokio::test]
async fn a_forgotten_name_taken_again_gets_a_greater_token() {
    let db = TestDb::new().await;
    let store = store(&db).await;
    let first = take(&store, "payout").await;
    assert!(matches!(
        forget(&store, "payout", true).await,
        Forgotten::Ended { .. }
    ));
    let second = take(&store, "payout").await;
    assert!(second.token > first.token, "{second:?} after {first:?}");
    assert!(!fenced_write_passes(&store, &first).await);
    assert!(fenced_write_passes(&store, &second).await);

    // Forgetting a lease released or expired leaves its token too.
    store
        .release(&[second.key()], Release::Interrupted)
        .await
        .expect("release");
    assert!(matches!(
        forget(&store, "payout", false).await,
        Forgotten::NotHeld { .. }
    ));
    let third = take(&store, "payout").await;
    assert!(third.token > second.token, "{third:?} after {second:?}");
}

/// A transaction of the test's own holding `name`'s row lock (as a fenced write or a
/// take does while it runs).
async fn lock_row(db: &TestDb, name: &str) -> PgConnection {
    let mut conn = PgConnection::connect(db.direct_url())
        .await
        .expect("connect");
    conn.execute("BEGIN").await.expect("begin");
    sqlx::query("SELECT 1 FROM scheduler_leases WHERE name = $1 FOR UPDATE")
        .bind(name)
        .execute(&mut conn)
        .await
        .expect("lock");
    conn
}

/// Waits until some session waits for a row lock.
async fn lock_waited_for(db: &TestDb) {
    let mut conn = PgConnection::connect(db.direct_url())
        .await
        .expect("connect");
    tokio::time::timeout(LIMIT, async {
        loop {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
            )
            .fetch_one(&mut conn)
            .await
            .expect("pg_stat_activity");
            if waiting > 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("forget waits for the row lock");
}

#[tokio::test]
async fn unforced_it_locks_nothing_forced_it_ends_the_holder_it_waited_for() {
    let db = TestDb::new().await;
    let store = store(&db).await;
    let lease = take(&store, "sweep").await;

    // Unforced, the row's lock is not waited for: the answer comes from the snapshot.
    let mut locker = lock_row(&db, "sweep").await;
    let refused = tokio::time::timeout(LIMIT, forget(&store, "sweep", false))
        .await
        .expect("an unforced forget does not wait for the row lock");
    assert!(matches!(refused, Forgotten::Held { .. }), "{refused:?}");

    // Forced, it waits; the row is taken over meanwhile (a new holder and token, as a
    // take writes them): the holder ended is the new one, not the one first read.
    let forced = tokio::spawn({
        let store = store.clone();
        async move { forget(&store, "sweep", true).await }
    });
    lock_waited_for(&db).await;
    sqlx::query(
        "UPDATE scheduler_leases SET holder = 'taker', token = token + 1, \
         expires_at = now() + interval '10 minutes' WHERE name = $1",
    )
    .bind("sweep")
    .execute(&mut locker)
    .await
    .expect("take over");
    locker.execute("COMMIT").await.expect("commit");
    let ended = tokio::time::timeout(LIMIT, forced)
        .await
        .expect("forget finishes")
        .expect("task");
    assert_eq!(
        ended,
        Forgotten::Ended {
            holder: "taker".to_owned(),
            token: lease.token.get() + 1,
            expired_at: row(&store, "sweep").await.expires_at,
        }
    );

    // A release while it waits: the row is read again, and found released.
    let again = take(&store, "sweep").await;
    let mut locker = lock_row(&db, "sweep").await;
    let forced = tokio::spawn({
        let store = store.clone();
        async move { forget(&store, "sweep", true).await }
    });
    lock_waited_for(&db).await;
    sqlx::query(
        "UPDATE scheduler_leases SET expires_at = now(), released_at = now() WHERE name = $1",
    )
    .bind("sweep")
    .execute(&mut locker)
    .await
    .expect("release");
    locker.execute("COMMIT").await.expect("commit");
    let found = tokio::time::timeout(LIMIT, forced)
        .await
        .expect("forget finishes")
        .expect("task");
    let Forgotten::NotHeld {
        holder,
        token,
        state,
        ..
    } = found
    else {
        panic!("released while waiting, yet {found:?}");
    };
    assert_eq!(
        (holder.as_str(), token, state),
        (
            again.holder.as_str(),
            again.token.get(),
            LeaseState::Released
        )
    );
}
