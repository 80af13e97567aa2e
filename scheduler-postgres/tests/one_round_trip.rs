//! A store statement is one round trip: on a pool the store opened itself, a lease
//! statement or clock read runs on the connection the store keeps between its
//! statements, so no connection goes back to sqlx's pool after each call (which tests
//! it there with a round trip of its own). Counted on the wire, through a proxy that
//! counts what the client sends; and the kept connection is given up when it breaks
//! or when a call is dropped half-way, never reused in between.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use scheduler_core::{Release, Store};
use scheduler_postgres::{PostgresOptions, PostgresStore};
use support::hostile::{admin, store, store_with, strings, take, tick};
use test_postgres::TestDb;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Forwards connections from a port of `127.0.0.1` to the server and counts the
/// reads of what clients send (one per batch of messages a client flushes: on
/// loopback, one per request).
struct Counting {
    port: u16,
    sent: Arc<AtomicU64>,
}

impl Counting {
    async fn start(upstream: u16) -> Counting {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let sent = Arc::new(AtomicU64::new(0));
        let counter = sent.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect((Ipv4Addr::LOCALHOST, upstream))
                    .await
                    .unwrap();
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                let counter = counter.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0; 64 * 1024];
                    while let Ok(n @ 1..) = client_read.read(&mut buf).await {
                        counter.fetch_add(1, Ordering::SeqCst);
                        if server_write.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
                tokio::spawn(async move {
                    let mut buf = vec![0; 64 * 1024];
                    while let Ok(n @ 1..) = server_read.read(&mut buf).await {
                        if client_write.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        Counting { port, sent }
    }

    fn sent(&self) -> u64 {
        self.sent.load(Ordering::SeqCst)
    }

    /// `url` with its host and port replaced by the proxy's.
    fn url(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").unwrap();
        let (authority, path) = rest.split_at(rest.find('/').unwrap());
        let credentials = authority.rsplit_once('@').map_or("", |(c, _)| c);
        let at = if credentials.is_empty() { "" } else { "@" };
        format!("{scheme}://{credentials}{at}127.0.0.1:{}{path}", self.port)
    }
}

fn port_of(url: &str) -> u16 {
    let rest = url.split_once("://").unwrap().1;
    let authority = &rest[..rest.find('/').unwrap()];
    authority.rsplit(':').next().unwrap().parse().unwrap()
}

/// What the client sends during `calls`, after what it sent before has settled
/// (sqlx tests a connection returned to its pool from a task of its own, after the
/// call that used it has returned).
async fn sent_during<F: std::future::Future<Output = ()>>(proxy: &Counting, calls: F) -> u64 {
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = proxy.sent();
    calls.await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.sent() - before
}

#[tokio::test]
async fn lease_statements_and_clock_reads_are_one_round_trip_each() {
    let db = TestDb::new().await;
    let proxy = Counting::start(port_of(db.direct_url())).await;
    let store = PostgresStore::connect(&proxy.url(db.direct_url()), PostgresOptions::default())
        .await
        .expect("connect through the proxy");
    // Prepare the statements first (sqlx prepares a statement on its first use on a
    // connection, one round trip more).
    let t = tick(&store, 0).await;
    let keys = take(&store, &["round trip"], t).await.unwrap();
    store.release(&keys, Release::Completed).await.unwrap();

    let reads = sent_during(&proxy, async {
        for _ in 0..100 {
            store.now().await.unwrap();
        }
    })
    .await;
    assert!(
        reads <= 105,
        "100 clock reads sent {reads} times (two per read: the pool's test of a returned connection)"
    );

    let reads = sent_during(&proxy, async {
        for i in 1..=50 {
            let keys = take(&store, &["round trip"], tick(&store, i).await)
                .await
                .unwrap();
            assert_eq!(keys.len(), 1);
            store.release(&keys, Release::Completed).await.unwrap();
        }
    })
    .await;
    // 50 × (clock read for the tick, take, release).
    assert!(
        reads <= 155,
        "150 store calls sent {reads} times (two per call: the pool's test of a returned connection)"
    );
}

#[tokio::test]
async fn a_kept_connection_the_server_closed_is_given_up() {
    let db = TestDb::new().await;
    let name = "kept connection under test";
    let url = format!(
        "{}?application_name={}",
        db.direct_url(),
        name.replace(' ', "%20")
    );
    let store = store(&url).await;
    let admin = admin(db.direct_url()).await;
    store.now().await.unwrap();
    // Every connection of the store's (the kept one, and any idle in the pool) is
    // ended by the server, which tells each client so (FATAL 57P01) as it goes.
    let ended = strings(
        &admin,
        &format!(
            "SELECT pg_terminate_backend(pid)::text FROM pg_stat_activity \
             WHERE application_name = '{name}'"
        ),
    )
    .await
    .len();
    assert!(ended >= 1, "the store has a connection");
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A call on an ended connection fails (nothing pings it first), once per
    // connection: each is given up at its first failure, the kept one too. So calls
    // succeed again soon after, and go on succeeding.
    let mut failed = 0;
    while store.now().await.is_err() {
        failed += 1;
        assert!(
            failed <= ended,
            "{failed} calls failed on {ended} ended connections: one was used again"
        );
    }
    for _ in 0..20 {
        store.now().await.expect("calls after the recovery succeed");
    }
    println!("calls failed after the server ended {ended} connections: {failed}");
}

#[tokio::test]
async fn a_call_dropped_half_way_leaves_no_connection_behind_to_answer_the_next() {
    let db = TestDb::new().await;
    // The lease statements' bound, shorter than the lock below is held: a statement
    // left running on a connection ends in a timeout, which would be the next call's
    // answer if that connection were used again.
    let options = PostgresOptions::default().statement_timeout(Duration::from_millis(500));
    let store = store_with(db.direct_url(), options).await;
    let admin = admin(db.direct_url()).await;
    let t = tick(&store, 0).await;
    let keys = take(&store, &["held up"], t).await.unwrap();
    store.release(&keys, Release::Completed).await.unwrap();
    // The next take of the lease waits on its row, locked by another transaction;
    // the caller gives up on it half-way.
    let blocker = lock_held_up(&admin).await;
    let next = tick(&store, 1).await;
    let cut =
        tokio::time::timeout(Duration::from_millis(200), take(&store, &["held up"], next)).await;
    assert!(cut.is_err(), "the take waited on the locked row");
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    blocker.rollback().await.unwrap();
    // The next calls are answered by their own statements: a clock read reads a
    // time, a take of another lease wins that lease.
    for i in 0..5 {
        let now = store
            .now()
            .await
            .expect("a clock read after the dropped call");
        assert!((now - chrono::Utc::now()).num_seconds().abs() < 60, "{now}");
        let name = format!("after {i}");
        let won = take(&store, &[name.as_str()], tick(&store, 2).await)
            .await
            .unwrap();
        assert_eq!(
            won.len(),
            1,
            "the take after the dropped one wins its lease"
        );
        assert_eq!(won[0].name.as_str(), name);
    }
}

/// A transaction of the test's that holds the lease row `held up` locked.
async fn lock_held_up(admin: &sea_orm::DatabaseConnection) -> sea_orm::DatabaseTransaction {
    use sea_orm::{ConnectionTrait, TransactionTrait};
    let txn = admin.begin().await.unwrap();
    txn.execute_unprepared("SELECT 1 FROM scheduler_leases WHERE name = 'held up' FOR UPDATE")
        .await
        .unwrap();
    txn
}

/// Inserts `chunk` into `keyed_events`; how many rows were new.
fn insert_chunk<'c>(
    txn: &'c scheduler_postgres::KeyedTransaction,
    chunk: &'c [String],
) -> scheduler_postgres::FencedFuture<'c, u64, sea_orm::DbErr> {
    use sea_orm::{ConnectionTrait, DbBackend, Statement};
    let ids = chunk.to_vec();
    Box::pin(async move {
        let insert = Statement::from_sql_and_values(
            DbBackend::Postgres,
            "INSERT INTO keyed_events (id) SELECT unnest($1::text[]) ON CONFLICT (id) DO NOTHING",
            [ids.into()],
        );
        Ok(txn.execute_raw(insert).await?.rows_affected())
    })
}

async fn events_table(admin: &sea_orm::DatabaseConnection) {
    support::hostile::exec(admin, "CREATE TABLE keyed_events (id text PRIMARY KEY)").await;
}

/// A store connected through a counting proxy, its keyed handle, and the table it
/// inserts into, after a first batch: the handle's first batch reads the server's
/// settings, and prepares the locking statement and the insert on their connection.
async fn keyed_through_proxy(db: &TestDb) -> (Counting, PostgresStore, scheduler_postgres::Keyed) {
    events_table(&admin(db.direct_url()).await).await;
    let proxy = Counting::start(port_of(db.direct_url())).await;
    let store = PostgresStore::connect(&proxy.url(db.direct_url()), PostgresOptions::default())
        .await
        .expect("connect through the proxy");
    let keyed = store.keyed(scheduler_postgres::KeyedOptions::default());
    keyed
        .process(&["warm".to_owned()], insert_chunk)
        .await
        .unwrap();
    (proxy, store, keyed)
}

#[tokio::test]
async fn a_keyed_chunk_sends_begin_its_locks_its_work_and_commit_and_nothing_else() {
    let db = TestDb::new().await;
    let (proxy, _store, keyed) = keyed_through_proxy(&db).await;
    let sent = sent_during(&proxy, async {
        for i in 0..50 {
            let done = keyed
                .process(&[format!("event {i}")], insert_chunk)
                .await
                .unwrap();
            assert_eq!(done.values, [1]);
        }
    })
    .await;
    assert!(
        sent <= 4 * 50 + 5,
        "50 chunks sent {sent} times: more than BEGIN, the locks, the insert and COMMIT \
         (sqlx tests a connection handed back to its pool with a round trip of its own)"
    );
}

/// A store on a pool of 8 whose connections carry `name` as their
/// `application_name`.
async fn store_named(db: &TestDb, name: &str) -> PostgresStore {
    let url = format!(
        "{}?application_name={}",
        db.direct_url(),
        name.replace(' ', "%20")
    );
    store_with(&url, PostgresOptions::default().max_connections(8)).await
}

/// How many connections named `name` the server has.
async fn connections_named(admin: &sea_orm::DatabaseConnection, name: &str) -> usize {
    let count =
        format!("SELECT count(*)::text FROM pg_stat_activity WHERE application_name = '{name}'");
    strings(admin, &count).await[0]
        .as_deref()
        .unwrap()
        .parse()
        .unwrap()
}

/// How many connections named `name` the server has once they are gone, or after 5 s:
/// the server sees a closed connection go moments after the client closed it.
async fn connections_left(admin: &sea_orm::DatabaseConnection, name: &str) -> usize {
    let mut left = usize::MAX;
    for _ in 0..100 {
        left = connections_named(admin, name).await;
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    left
}

/// A task processing the single key `key`, whose work inserts it and then holds its
/// chunk open (its connection, its lock) until the sender returned is told to finish;
/// returned once the insert is done.
async fn held_chunk(
    keyed: &scheduler_postgres::Keyed,
    key: &str,
) -> (
    tokio::task::JoinHandle<
        Result<scheduler_postgres::Processed<u64>, scheduler_postgres::KeyedError<sea_orm::DbErr>>,
    >,
    tokio::sync::oneshot::Sender<()>,
) {
    let (finish, finished) = tokio::sync::oneshot::channel::<()>();
    let (started, running) = tokio::sync::oneshot::channel::<()>();
    let (mut started, mut finished) = (Some(started), Some(finished));
    let (keyed, keys) = (keyed.clone(), vec![key.to_owned()]);
    let chunk = tokio::spawn(async move {
        keyed
            .process(&keys, move |txn, chunk| {
                let inserted = insert_chunk(txn, chunk);
                // One chunk: the channels are taken by its call.
                let (started, finished) = (started.take(), finished.take());
                Box::pin(async move {
                    let n = inserted.await?;
                    if let (Some(started), Some(finished)) = (started, finished) {
                        let _ = started.send(());
                        let _ = finished.await;
                    }
                    Ok::<_, sea_orm::DbErr>(n)
                })
            })
            .await
    });
    running.await.unwrap();
    (chunk, finish)
}

/// Starts `workers` tasks that each process `batches` batches of `keys` new keys.
fn process_concurrently(
    keyed: &scheduler_postgres::Keyed,
    workers: usize,
    batches: usize,
    keys: usize,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..workers)
        .map(|w| {
            let keyed = keyed.clone();
            tokio::spawn(async move {
                for i in 0..batches {
                    let batch: Vec<String> = (0..keys).map(|k| format!("{w}-{i}-{k}")).collect();
                    keyed.process(&batch, insert_chunk).await.unwrap();
                }
            })
        })
        .collect()
}

#[tokio::test]
async fn keyed_workers_keep_at_most_a_quarter_of_the_pool_out_of_it() {
    let db = TestDb::new().await;
    let admin = admin(db.direct_url()).await;
    events_table(&admin).await;
    let name = "keyed connections under test";
    let store = store_named(&db, name).await;
    let keyed = store.keyed(scheduler_postgres::KeyedOptions::default());
    let workers = process_concurrently(&keyed, 12, 40, 10);
    let mut most = 0;
    while workers.iter().any(|w| !w.is_finished()) {
        most = most.max(connections_named(&admin, name).await);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for worker in workers {
        worker.await.unwrap();
    }
    // 8 in the pool, 2 kept out of it between keyed chunks (and none between lease
    // statements: there were none).
    assert!(
        most <= 10,
        "the store held {most} connections with max_connections 8"
    );
    let rows = strings(&admin, "SELECT count(*)::text FROM keyed_events").await;
    assert_eq!(rows[0].as_deref(), Some("4800"));
}

/// Options under which the server never ends a transaction for idling (an hour): a
/// transaction left open on a connection kept or handed back to the pool would keep
/// its locks past every wait of these tests.
fn patient() -> PostgresOptions {
    PostgresOptions::default().idle_transaction_timeout(Duration::from_secs(3600))
}

#[tokio::test]
async fn a_keyed_chunk_dropped_half_way_on_a_kept_connection_leaves_no_transaction_behind() {
    let db = TestDb::new().await;
    events_table(&admin(db.direct_url()).await).await;
    let store = store_with(db.direct_url(), patient().max_connections(4)).await;
    dropped_chunk(&store, true).await;
}

#[tokio::test]
async fn a_keyed_chunk_dropped_half_way_on_a_pool_connection_leaves_no_transaction_behind() {
    let db = TestDb::new().await;
    events_table(&admin(db.direct_url()).await).await;
    // An app's own pool: no connection is kept out of it.
    let pool = sea_orm::Database::connect(db.direct_url()).await.unwrap();
    let store = PostgresStore::open(pool, patient()).await.unwrap();
    dropped_chunk(&store, false).await;
}

/// Drops a chunk of `store`'s half-way (after its insert, while its locks are held),
/// then processes the same key again on the same store.
async fn dropped_chunk(store: &PostgresStore, kept: bool) {
    let keyed = store.keyed(scheduler_postgres::KeyedOptions::default());
    let keys = vec!["dropped".to_owned()];
    // A first batch leaves its connection kept, if the store keeps one: the next
    // chunk runs on it.
    keyed
        .process(&["first".to_owned()], insert_chunk)
        .await
        .unwrap();
    // The work inserts its key, then waits; the caller gives up on it half-way.
    let cut = tokio::time::timeout(
        Duration::from_millis(500),
        keyed.process(&keys, |txn, chunk| {
            let inserted = insert_chunk(txn, chunk);
            Box::pin(async move {
                inserted.await?;
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok::<_, sea_orm::DbErr>(0)
            })
        }),
    )
    .await;
    assert!(cut.is_err(), "the chunk was still working");
    // Its connection is closed, neither kept nor handed back to the pool inside the
    // open transaction: the next batches, on the same store, run in transactions of
    // their own, take the same key (its lock is gone with the connection) and commit.
    let mut new = Vec::new();
    for _ in 0..3 {
        let done =
            tokio::time::timeout(Duration::from_secs(20), keyed.process(&keys, insert_chunk))
                .await
                .unwrap_or_else(|_| {
                    panic!("the key's lock is still held (kept connection: {kept})")
                })
                .unwrap();
        new.extend(done.values);
    }
    assert_eq!(
        new,
        [1, 0, 0],
        "the dropped chunk's insert was rolled back; the next batch's committed"
    );
}

#[tokio::test]
async fn clock_reads_stay_one_round_trip_while_a_keyed_chunk_runs() {
    let db = TestDb::new().await;
    let (proxy, store, keyed) = keyed_through_proxy(&db).await;
    store.now().await.unwrap();
    // A chunk holds its connection (and its key's lock) until told to finish.
    let (chunk, finish) = held_chunk(&keyed, "held").await;
    let reads = sent_during(&proxy, async {
        for _ in 0..100 {
            store.now().await.unwrap();
        }
    })
    .await;
    finish.send(()).unwrap();
    assert_eq!(chunk.await.unwrap().unwrap().values, [1]);
    assert!(
        reads <= 105,
        "100 clock reads during a keyed chunk sent {reads} times (the chunk took the \
         connection kept for them)"
    );
}

#[tokio::test]
async fn closing_the_store_closes_its_kept_connections_too() {
    let db = TestDb::new().await;
    let admin = admin(db.direct_url()).await;
    events_table(&admin).await;
    let name = "closed store under test";
    let store = store_named(&db, name).await;
    let keyed = store.keyed(scheduler_postgres::KeyedOptions::default());
    for worker in process_concurrently(&keyed, 4, 10, 1) {
        worker.await.unwrap();
    }
    store.now().await.unwrap();
    assert_ne!(
        connections_named(&admin, name).await,
        0,
        "the store has connections"
    );
    store.close().await.unwrap();
    assert_eq!(
        connections_left(&admin, name).await,
        0,
        "connections left after close"
    );
    assert!(store.now().await.is_err(), "a statement after close fails");
}

#[tokio::test]
async fn closing_the_store_waits_for_a_running_chunk_and_keeps_nothing_after() {
    let db = TestDb::new().await;
    let admin = admin(db.direct_url()).await;
    events_table(&admin).await;
    let name = "store closed while busy";
    let store = store_named(&db, name).await;
    let keyed = store.keyed(scheduler_postgres::KeyedOptions::default());
    // A first batch leaves its connection kept: the next chunk runs on it.
    keyed
        .process(&["first".to_owned()], insert_chunk)
        .await
        .unwrap();
    let (chunk, finish) = held_chunk(&keyed, "busy").await;
    let closing = tokio::spawn({
        let store = store.clone();
        async move { store.close().await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!closing.is_finished(), "close waits for the running chunk");
    finish.send(()).unwrap();
    let done = chunk.await.unwrap().expect("the chunk under way commits");
    assert_eq!(done.values, [1]);
    tokio::time::timeout(Duration::from_secs(60), closing)
        .await
        .expect("close returns once the chunk is done")
        .unwrap()
        .unwrap();
    // Its connection was closed, not kept: the store has none left.
    assert_eq!(
        connections_left(&admin, name).await,
        0,
        "connections left after close"
    );
}

#[tokio::test]
async fn closing_a_store_on_the_apps_pool_leaves_that_pool_open() {
    let db = TestDb::new().await;
    let pool = sea_orm::Database::connect(db.direct_url()).await.unwrap();
    let store = PostgresStore::open(pool.clone(), PostgresOptions::default())
        .await
        .unwrap();
    store.now().await.unwrap();
    store.close().await.unwrap();
    let rows = strings(&pool, "SELECT 'still open'").await;
    assert_eq!(rows[0].as_deref(), Some("still open"));
}
