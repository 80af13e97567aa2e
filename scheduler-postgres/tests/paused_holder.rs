#![allow(clippy::expect_used, clippy::unwrap_used)]
//! A fenced transaction locks its lease row only from its last check to its commit,
//! never while its work runs: a holder paused inside the work (a GC pause, SIGSTOP, a
//! cut network) holds up no other instance's take, and a slow work holds up none of
//! its own instance's renewals. The write of a holder whose lease was taken meanwhile
//! is refused.

use std::sync::Arc;
use std::time::Duration;

use scheduler_core::{LeaseName, Store, TakeRequest, Tick, Ttl};
use scheduler_postgres::{Fence, PostgresOptions, PostgresStore};
use sea_orm::{ConnectionTrait, Database, DbBackend, Statement};
use test_postgres::TestDb;
use tokio::sync::Notify;

/// How long a test waits for something that takes moments on an idle machine.
const LIMIT: Duration = Duration::from_secs(60);

/// The fence of a run holding `lease`.
fn fence_of(lease: &scheduler_core::Lease) -> Fence {
    Fence {
        name: lease.name.clone(),
        holder: lease.holder.clone(),
        token: lease.token,
    }
}

/// What a fenced write returns.
type Written = Result<(), scheduler_postgres::FencedError<sea_orm::DbErr>>;

/// Starts a fenced write into `payouts` under `fence` on `store` whose work waits,
/// inside the transaction, until the returned `Notify` wakes it; returns once the
/// work is waiting.
async fn paused_write(
    store: PostgresStore,
    fence: Fence,
) -> (tokio::task::JoinHandle<Written>, Arc<Notify>) {
    let (entered_tx, entered) = tokio::sync::oneshot::channel();
    let wake = Arc::new(Notify::new());
    let woken = wake.clone();
    let write = tokio::spawn(async move {
        store
            .fenced(&fence, |txn| {
                Box::pin(async move {
                    let _ = entered_tx.send(());
                    woken.notified().await;
                    txn.execute_raw(Statement::from_sql_and_values(
                        DbBackend::Postgres,
                        "INSERT INTO payouts (token) VALUES ($1)",
                        [1i64.into()],
                    ))
                    .await
                    .map(drop)
                })
            })
            .await
    });
    entered.await.expect("in the fenced transaction");
    (write, wake)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_fenced_transaction_holds_up_no_take() {
    let db = TestDb::new().await;
    // The default idle timeout (10 s): A's transaction outlives its pause.
    let options = || PostgresOptions::default().max_connections(2);
    let a = PostgresStore::connect(db.url(), options())
        .await
        .expect("a");
    let b = PostgresStore::connect(db.url(), options())
        .await
        .expect("b");
    let admin = Database::connect(db.direct_url()).await.expect("admin");
    admin
        .execute_unprepared("CREATE TABLE payouts (token bigint NOT NULL)")
        .await
        .expect("table");

    let (x, y) = (LeaseName::new("x").unwrap(), LeaseName::new("y").unwrap());
    let now = a.now().await.expect("now");
    let ttl = Ttl::new(Duration::from_millis(500)).unwrap();
    let held = a
        .take(&[TakeRequest::new(x.clone(), Tick::new(now))], ttl)
        .await
        .expect("take")
        .won;
    assert_eq!(held.len(), 1);
    let fence = fence_of(&held[0]);

    // A enters its fenced transaction and "pauses" in its work until the test wakes
    // it.
    let (paused, wake) = paused_write(a, fence).await;

    // Meanwhile A's lease expires and B asks for x (and y) at a later tick, in one
    // batch. A holds no lock on x's row; A stays paused until the take is done.
    let deadline = tokio::time::Instant::now() + LIMIT;
    let later = loop {
        let now = b.now().await.expect("now");
        if now > held[0].expires_at {
            break Tick::new(now);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the store's clock never passed the lease's expiry"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // A take held up past the store's bound on a lease statement (a quarter of the
    // ttl; a busy machine) fails with a statement timeout, as the runtime's would,
    // and is asked again. (When the work held the row lock, every take failed so
    // until the server ended A's idle transaction.)
    let began = tokio::time::Instant::now();
    let deadline = began + LIMIT;
    let mut timed_out = 0;
    let taken = loop {
        let requests = [
            TakeRequest::new(x.clone(), later),
            TakeRequest::new(y.clone(), later),
        ];
        match b.take(&requests, ttl).await {
            Ok(taken) => break taken,
            Err(e) if e.to_string().contains("statement timeout") => timed_out += 1,
            Err(e) => panic!("take: {e}"),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the take was held up by the paused holder for {LIMIT:?}: its idle transaction was never ended"
        );
    };
    eprintln!(
        "take went through after {:?} ({timed_out} statement timeouts)",
        began.elapsed()
    );
    assert_eq!(taken.won.len(), 2, "{taken:?}");
    assert!(
        !paused.is_finished(),
        "A was still paused when B's take went through"
    );

    // When A wakes, its transaction is still open (the server had no reason to end
    // it), and the check after its work refuses the write: nothing committed.
    wake.notify_one();
    let result = paused.await.expect("join");
    assert!(
        result.as_ref().is_err_and(|e| e.is_lease_lost()),
        "{result:?}"
    );
    let row = admin
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT count(*) AS n FROM payouts",
        ))
        .await
        .expect("count")
        .expect("row");
    assert_eq!(row.try_get::<i64>("", "n").expect("n"), 0);
}

/// A fenced transaction whose work takes longer than the bound on a lease statement
/// does not hold up the renewal of the instance's leases: the renewal of a batch
/// (the held lease and another) goes through while the work runs, and the write
/// commits after it, under the renewed lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_fenced_transaction_does_not_hold_up_renewals() {
    let db = TestDb::new().await;
    let store = PostgresStore::connect(
        db.url(),
        PostgresOptions::default()
            .max_connections(3)
            .statement_timeout(Duration::from_millis(300)),
    )
    .await
    .expect("store");
    let admin = Database::connect(db.direct_url()).await.expect("admin");
    admin
        .execute_unprepared("CREATE TABLE payouts (token bigint NOT NULL)")
        .await
        .expect("table");

    let (x, y) = (LeaseName::new("x").unwrap(), LeaseName::new("y").unwrap());
    let now = store.now().await.expect("now");
    let ttl = Ttl::new(Duration::from_secs(60)).unwrap();
    let held = store
        .take(
            &[
                TakeRequest::new(x.clone(), Tick::new(now)),
                TakeRequest::new(y.clone(), Tick::new(now)),
            ],
            ttl,
        )
        .await
        .expect("take")
        .won;
    assert_eq!(held.len(), 2);
    let on_x = held.iter().find(|l| l.name == x).expect("x");
    let fence = fence_of(on_x);

    // The work waits until the test wakes it: well past the 300 ms bound.
    let (slow, wake) = paused_write(store.clone(), fence).await;

    // Renewals while the work runs, over a few bounds' worth of time.
    let keys: Vec<_> = held.iter().map(|l| l.key()).collect();
    for round in 0..4 {
        let renewed = store
            .renew(&keys, ttl)
            .await
            .unwrap_or_else(|e| panic!("renewal {round} failed while a fenced write ran: {e}"));
        let mut names: Vec<_> = renewed.iter().map(|r| r.name.clone()).collect();
        names.sort();
        assert_eq!(names, vec![x.clone(), y.clone()], "renewal {round}");
        tokio::time::sleep(Duration::from_millis(150)).await;
    }

    wake.notify_one();
    slow.await
        .expect("join")
        .expect("the write commits under the renewed lease");
    let row = admin
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT count(*) AS n FROM payouts",
        ))
        .await
        .expect("count")
        .expect("row");
    assert_eq!(row.try_get::<i64>("", "n").expect("n"), 1);
}

/// A database whose default isolation level is `REPEATABLE READ`: a fenced write
/// whose lease is renewed while its work runs still commits (its transaction runs at
/// `READ COMMITTED`; at the database's level, the check after the work failed on the
/// renewal as a serialization conflict).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_write_renewed_meanwhile_commits_whatever_the_default_isolation() {
    let db = TestDb::new().await;
    let admin = Database::connect(db.direct_url()).await.expect("admin");
    admin
        .execute_unprepared("CREATE TABLE payouts (token bigint NOT NULL)")
        .await
        .expect("table");
    admin
        .execute_unprepared(
            "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_isolation \
             TO ''repeatable read''', current_database()); END $$",
        )
        .await
        .expect("default isolation");
    let store = PostgresStore::connect(db.url(), PostgresOptions::default().max_connections(3))
        .await
        .expect("store");
    let x = LeaseName::new("x").unwrap();
    let now = store.now().await.expect("now");
    let ttl = Ttl::new(Duration::from_secs(60)).unwrap();
    let held = store
        .take(&[TakeRequest::new(x.clone(), Tick::new(now))], ttl)
        .await
        .expect("take")
        .won;
    assert_eq!(held.len(), 1);
    let fence = fence_of(&held[0]);
    let (write, wake) = paused_write(store.clone(), fence).await;
    assert_eq!(
        store
            .renew(&[held[0].key()], ttl)
            .await
            .expect("renew")
            .len(),
        1
    );
    wake.notify_one();
    write
        .await
        .expect("join")
        .expect("the write commits under the renewed lease");
}
