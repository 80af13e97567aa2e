//! PgBouncer in front of a test server: it pools in transaction mode, survives a
//! restart of the server behind it, maps back to the server with `direct_url`, and
//! goes away with its handle; and a test goes through one only when it asks to.
//!
//! (This binary talks to its servers directly: run it without `TEST_POSTGRES_PGBOUNCER`.)

use std::net::TcpStream;
use std::time::Duration;

use sea_orm::{ConnectOptions, ConnectionTrait, Database, DbBackend, DbErr, Statement};
use test_postgres::{PgBouncer, TestDb, TestServer, direct_url, pgbouncer_mode};

/// The backend pid behind one simple-protocol statement (fine in transaction mode).
async fn backend_pid(conn: &sea_orm::DatabaseConnection) -> Result<i32, DbErr> {
    let txn = sea_orm::TransactionTrait::begin(conn).await?;
    txn.execute_unprepared("DEALLOCATE ALL").await?;
    let row = txn
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT pg_backend_pid() AS pid",
        ))
        .await?
        .ok_or_else(|| DbErr::Custom("no row".to_owned()))?;
    txn.commit().await?;
    row.try_get("", "pid")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbouncer_pools_transactions_and_goes_away_with_its_handle() -> Result<(), DbErr> {
    assert!(!pgbouncer_mode(), "this binary talks to servers directly");
    let server = TestServer::start().map_err(|e| DbErr::Custom(e.to_string()))?;
    let database = server.create_database().await;
    let name = database.rsplit('/').next().unwrap_or_default().to_owned();
    let bouncer = PgBouncer::start(server.port()).map_err(|e| DbErr::Custom(e.to_string()))?;
    let url = bouncer.url(&name);
    assert!(url.ends_with("?pgbouncer=true"), "{url}");
    assert_ne!(bouncer.port(), server.port());
    // Back to the server itself, for a test's own statements.
    assert_eq!(direct_url(&url), server.url(&name));
    assert_eq!(
        direct_url(&database),
        database,
        "other URLs stay as they are"
    );

    // sqlx does not know `pgbouncer=true`: give it the URL without it, and no
    // statement cache (statements are deallocated at each transaction's start).
    let plain = url.trim_end_matches("?pgbouncer=true").to_owned();
    let pool = || {
        let mut options = ConnectOptions::new(plain.clone());
        options
            .max_connections(1)
            .map_sqlx_postgres_opts(|o| o.statement_cache_capacity(0));
        options
    };
    // Transaction pooling: five client connections, used one after the other, share
    // the server connection(s) PgBouncer keeps idle between their transactions.
    let mut clients = Vec::new();
    for _ in 0..5 {
        clients.push(Database::connect(pool()).await?);
    }
    let mut pids = std::collections::BTreeSet::new();
    for client in &clients {
        pids.insert(backend_pid(client).await?);
    }
    assert!(
        pids.len() < clients.len(),
        "server connections shared: {pids:?}"
    );
    let a = &clients[0];
    let first = backend_pid(a).await?;

    // A role of the test's own logs in through PgBouncer as itself.
    let admin = Database::connect(server.direct_url(&name)).await?;
    admin
        .execute_unprepared("CREATE ROLE bouncer_guest LOGIN")
        .await?;
    admin.close().await?;
    let mut guest = ConnectOptions::new(plain.replace("postgres@", "bouncer_guest@"));
    guest.map_sqlx_postgres_opts(|o| o.statement_cache_capacity(0));
    let guest = Database::connect(guest).await?;
    let txn = sea_orm::TransactionTrait::begin(&guest).await?;
    let who = txn
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT current_user::text AS who",
        ))
        .await?
        .ok_or_else(|| DbErr::Custom("no row".to_owned()))?;
    txn.commit().await?;
    assert_eq!(who.try_get::<String>("", "who")?, "bouncer_guest");
    guest.close().await?;

    // The server restarts under PgBouncer, which reconnects.
    let restart = tokio::task::spawn_blocking(move || server.restart().map(|()| server))
        .await
        .map_err(|e| DbErr::Custom(e.to_string()))?
        .map_err(|e| DbErr::Custom(e.to_string()))?;
    let mut after = Err(DbErr::Custom("not tried".to_owned()));
    for _ in 0..50 {
        after = backend_pid(a).await;
        if after.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_ne!(after?, first, "a new server connection after the restart");
    for client in clients {
        client.close().await?;
    }

    let port = bouncer.port();
    drop(bouncer);
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "PgBouncer stopped with its handle"
    );
    drop(restart);
    Ok(())
}

/// What puts PgBouncer in front of a database is an explicit request, not the name of
/// the test binary: here `TestDb::new` is the server's, while `TestDb::through_pgbouncer`
/// and `through_pgbouncer::TestDb::new` (what the `pgbouncer*` binaries of the
/// PostgreSQL store use) share one PgBouncer in front of the same server.
#[tokio::test]
async fn pgbouncer_is_asked_for_not_implied_by_the_binary_name() {
    assert!(!pgbouncer_mode(), "this binary talks to servers directly");
    let direct = TestDb::new().await;
    assert_eq!(direct.url(), direct.direct_url());

    let bounced = TestDb::through_pgbouncer().await;
    assert_ne!(bounced.url(), bounced.direct_url());
    assert!(
        bounced.url().ends_with("?pgbouncer=true"),
        "{}",
        bounced.url()
    );
    assert_eq!(direct_url(bounced.url()), bounced.direct_url());
    let server = |url: &str| url.rsplit_once('/').map(|(server, _)| server.to_owned());
    assert_eq!(server(bounced.direct_url()), server(direct.url()));

    assert!(test_postgres::through_pgbouncer::pgbouncer_mode());
    let rerun = test_postgres::through_pgbouncer::TestDb::new().await;
    assert!(rerun.url().ends_with("?pgbouncer=true"), "{}", rerun.url());
    assert_eq!(server(rerun.url()), server(bounced.url()), "one PgBouncer");
    assert_eq!(direct_url(rerun.url()), rerun.direct_url());
}
