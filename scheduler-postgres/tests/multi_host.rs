//! URLs listing several servers, as libpq reads them: tried in order, a dead one
//! skipped, and with `target_session_attrs=read-write` a read-only one too — at open,
//! and for every new connection of the pool (the store's, or an app's built with
//! `connect_options`), so a server turned read-only costs a reconnect, not a failed
//! write.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use std::time::Duration;

use scheduler_core::Store;
use scheduler_postgres::{Error, PostgresOptions, PostgresStore, connect_options};
use sea_orm::sqlx::{self, Row};
use sea_orm::{Database, DatabaseConnection};
use support::hostile::{admin, exec, store, strings, take, tick};
use test_postgres::{TestDb, TestServer};

/// The database name and port of a `postgres://postgres@127.0.0.1:PORT/NAME` URL.
fn port_and_name(url: &str) -> (u16, String) {
    let rest = url.rsplit('@').next().expect("host");
    let (host, name) = rest.split_once('/').expect("path");
    let port = host
        .rsplit(':')
        .next()
        .expect("port")
        .parse()
        .expect("number");
    (port, name.split('?').next().expect("name").to_owned())
}

/// A port nothing listens on while the test runs: the local port of a connected
/// client socket (kept open by the returned sockets).
fn dead_port() -> (u16, std::net::TcpListener, std::net::TcpStream) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    let client =
        std::net::TcpStream::connect(listener.local_addr().expect("address")).expect("client");
    let port = client.local_addr().expect("client address").port();
    (port, listener, client)
}

/// A server of its own with a database `name` (as on the test's own server), and an
/// admin connection to it.
async fn server_with(name: &str) -> (TestServer, DatabaseConnection) {
    let server = tokio::task::spawn_blocking(TestServer::start)
        .await
        .expect("join")
        .expect("server");
    let admin = admin(&server.direct_url("postgres")).await;
    exec(&admin, &format!("CREATE DATABASE {name}")).await;
    (server, admin)
}

/// A server of its own with a database `name` whose sessions are read-only by
/// default, as every session of a hot standby is.
async fn read_only_server(name: &str) -> TestServer {
    let (server, admin) = server_with(name).await;
    exec(
        &admin,
        &format!("ALTER DATABASE {name} SET default_transaction_read_only = on"),
    )
    .await;
    server
}

/// The port of the server behind `db`.
async fn server_port(db: &DatabaseConnection) -> u16 {
    let port = strings(db, "SELECT inet_server_port()::text").await;
    port[0].as_deref().expect("port").parse().expect("number")
}

async fn pool_of(url: &str) -> DatabaseConnection {
    let options = PostgresOptions::for_url(url).connect_timeout(Duration::from_secs(10));
    let connect = connect_options(url, &options).expect("options");
    Database::connect(connect).await.expect("app pool")
}

#[tokio::test]
async fn a_dead_host_listed_first_is_skipped() {
    let db = TestDb::new().await;
    let (live, name) = port_and_name(db.direct_url());
    let (dead, _listener, _client) = dead_port();
    let url = format!("postgres://postgres@127.0.0.1:{dead},127.0.0.1:{live}/{name}");
    let store = store(&url).await;
    assert_eq!(server_port(store.connection()).await, live);
    let t = tick(&store, 2).await;
    assert_eq!(
        take(&store, &["multi-host"], t).await.expect("take").len(),
        1
    );
    // The libpq query form too.
    let url = format!("postgres://postgres@/{name}?host=127.0.0.1,127.0.0.1&port={dead},{live}");
    let again = support::hostile::store(&url).await;
    assert_eq!(server_port(again.connection()).await, live);
}

#[tokio::test]
async fn read_write_skips_a_read_only_server_listed_first() {
    let db = TestDb::new().await;
    let (primary, name) = port_and_name(db.direct_url());
    let read_only = read_only_server(&name).await;
    let ro = read_only.port();
    let url = format!(
        "postgres://postgres@127.0.0.1:{ro},127.0.0.1:{primary}/{name}?target_session_attrs=read-write"
    );
    // The store opens (its migrations write) on the primary, and writes there.
    let store = store(&url).await;
    assert_eq!(server_port(store.connection()).await, primary);
    let t = tick(&store, 2).await;
    assert_eq!(
        take(&store, &["multi-host"], t).await.expect("take").len(),
        1
    );
    // Its connections still carry the lease bound.
    let timeout = strings(store.connection(), "SHOW statement_timeout").await;
    assert_eq!(timeout[0].as_deref(), Some("2s"));
    // An app's pool built with connect_options as well.
    assert_eq!(server_port(&pool_of(&url).await).await, primary);
    // `any` takes the first server that answers, read-only or not.
    let any = url.replace("read-write", "any");
    assert_eq!(server_port(&pool_of(&any).await).await, ro);
}

#[tokio::test]
async fn a_new_connection_to_a_server_turned_read_only_moves_on() {
    let db = TestDb::new().await;
    let (second, name) = port_and_name(db.direct_url());
    let (first, first_admin) = server_with(&name).await;
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{second}/{name}?target_session_attrs=read-write",
        first.port()
    );
    let app = pool_of(&url).await;
    let pool = app.get_postgres_connection_pool();
    let port = |row: sqlx::postgres::PgRow| row.try_get::<i32, _>(0).expect("port");
    let mut held = pool.acquire().await.expect("connection");
    let on = sqlx::query("SELECT inet_server_port()")
        .fetch_one(&mut *held)
        .await
        .expect("port");
    assert_eq!(port(on), i32::from(first.port()));
    // The first server's sessions turn read-only (a demoted node behind the same
    // address); the pool's next connection lands on the second.
    exec(
        &first_admin,
        &format!("ALTER DATABASE {name} SET default_transaction_read_only = on"),
    )
    .await;
    let mut fresh = pool.acquire().await.expect("a second connection");
    let on = sqlx::query("SELECT inet_server_port()")
        .fetch_one(&mut *fresh)
        .await
        .expect("port");
    assert_eq!(port(on), i32::from(second));
    sqlx::query("CREATE TABLE written (id int)")
        .execute(&mut *fresh)
        .await
        .expect("a write on the new connection");
}

#[tokio::test]
async fn bad_multi_host_urls_are_refused_before_connecting() {
    let options = PostgresOptions::default();
    for (url, says) in [
        (
            "postgres://u@/db?host=a,b,c&port=1,2",
            "the URL lists 3 hosts but 2 ports",
        ),
        (
            "postgres://u@a:1,b:2/db?target_session_attrs=read-only",
            "target_session_attrs=read-only is not supported: use any, read-write or primary",
        ),
        ("postgres://u@a:1,,b:2/db", "an empty host"),
    ] {
        let err = connect_options(url, &options).expect_err(url);
        assert!(matches!(err, Error::InvalidUrl { .. }), "{url}: {err:?}");
        assert!(err.to_string().contains(says), "{url}: {err}");
        let err = PostgresStore::connect(url, options.clone())
            .await
            .expect_err(url);
        assert!(err.to_string().contains(says), "{url}: {err}");
    }
}

#[tokio::test]
async fn a_hot_standby_listed_first_is_skipped_for_primary_and_read_write() {
    let primary = tokio::task::spawn_blocking(TestServer::start)
        .await
        .expect("join")
        .expect("server");
    let url = primary.create_database().await;
    let (_, name) = port_and_name(&url);
    let primary_port = primary.port();
    let standby = tokio::task::spawn_blocking(move || {
        let standby = primary.start_replica().expect("replica");
        (primary, standby)
    })
    .await
    .expect("join");
    let (_primary, standby) = standby;
    let hosts = format!("127.0.0.1:{},127.0.0.1:{primary_port}", standby.port());
    for attrs in ["primary", "read-write"] {
        let url = format!("postgres://postgres@{hosts}/{name}?target_session_attrs={attrs}");
        let store = support::hostile::store(&url).await;
        assert_eq!(
            server_port(store.connection()).await,
            primary_port,
            "{attrs}"
        );
        let t = tick(&store, 2).await;
        assert_eq!(take(&store, &[attrs], t).await.expect("take").len(), 1);
    }
    let any = format!("postgres://postgres@{hosts}/{name}?target_session_attrs=any");
    assert_eq!(server_port(&pool_of(&any).await).await, standby.port());
    // One host that does not suit is refused at once, saying why.
    let only = format!(
        "postgres://postgres@127.0.0.1:{}/{name}?target_session_attrs=primary",
        standby.port()
    );
    let err = PostgresStore::connect(&only, PostgresOptions::default())
        .await
        .expect_err("a standby is not a primary");
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    let text = err.to_string();
    let starts = format!(
        "cannot connect to the database at 127.0.0.1:{port}: no host suits target_session_attrs=primary: 127.0.0.1:{port}: a standby (in recovery); check",
        port = standby.port()
    );
    assert!(text.starts_with(&starts), "{text}");
}

#[tokio::test]
async fn the_store_moves_to_the_next_host_when_its_own_goes_down() {
    let db = TestDb::new().await;
    let (second, name) = port_and_name(db.direct_url());
    // The second host has the lease table, as a promoted replica would.
    support::hostile::store(db.direct_url()).await;
    let (first, first_admin) = server_with(&name).await;
    drop(first_admin);
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{second}/{name}",
        first.port()
    );
    let options = PostgresOptions::default().connect_timeout(Duration::from_secs(1));
    let store = PostgresStore::connect(&url, options).await.expect("store");
    assert_eq!(server_port(store.connection()).await, first.port());
    let first = tokio::task::spawn_blocking(move || {
        first.stop().expect("stop");
        first
    })
    .await
    .expect("join");
    // Calls fail while the pool still aims at the stopped server (its kept
    // connection is gone, then it cannot connect); after that the store's calls
    // reach the second host. A lease take proves it writes there.
    let mut failures = Vec::new();
    let mut taken = None;
    for _ in 0..6 {
        match store.now().await {
            Err(err) => failures.push(err.to_string()),
            Ok(_) => {
                let t = tick(&store, 2).await;
                taken = Some(take(&store, &["moved"], t).await.expect("take"));
                break;
            }
        }
    }
    assert!(
        taken.is_some(),
        "never reached the second host: {failures:?}"
    );
    println!("calls failed before the move: {failures:?}");
    assert!(failures.len() <= 4, "{failures:?}");
    drop(first);
}

/// A switchover under the app's writes through the store's pool: the pool's
/// connections to the old primary answer every write `25006` once its sessions turn
/// read-only, yet they are live, so a pool hands them out again. Each failed write
/// has the next connections handed out checked: a write retried once is never lost.
#[tokio::test]
async fn the_apps_writes_retried_once_survive_a_switchover() {
    use sea_orm::{ConnectionTrait, DbBackend, Statement};
    let db = TestDb::new().await;
    let (second, name) = port_and_name(db.direct_url());
    let (first, first_admin) = server_with(&name).await;
    let table = "CREATE TABLE app_writes (id int PRIMARY KEY)";
    exec(&admin(&first.direct_url(&name)).await, table).await;
    exec(&admin(db.direct_url()).await, table).await;
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{second}/{name}?target_session_attrs=read-write",
        first.port()
    );
    let options = PostgresOptions::default().max_connections(4);
    let store = PostgresStore::connect(&url, options).await.expect("store");
    // The pool holds four connections to the first server.
    let pool = store.connection().get_postgres_connection_pool();
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(pool.acquire().await.expect("connection"));
    }
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(server_port(store.connection()).await, first.port());
    // The first server turns read-only, its open sessions included (a demoted
    // primary behind the same address); the second is the new primary.
    exec(
        &first_admin,
        "ALTER SYSTEM SET default_transaction_read_only = on",
    )
    .await;
    exec(&first_admin, "SELECT pg_reload_conf()").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let app = store.connection();
    let mut lost = Vec::new();
    let mut retried = 0;
    for id in 0..20 {
        // A statement as sea-orm's entities send it (prepared, with its values).
        let insert = || {
            Statement::from_sql_and_values(
                DbBackend::Postgres,
                "INSERT INTO app_writes (id) VALUES ($1)",
                [id.into()],
            )
        };
        if app.execute_raw(insert()).await.is_err() {
            retried += 1;
            if let Err(err) = app.execute_raw(insert()).await {
                lost.push(format!("{id}: {err}"));
            }
        }
    }
    assert!(lost.is_empty(), "{} writes lost: {lost:?}", lost.len());
    assert!(retried >= 1, "the first write met the read-only server");
    let on_second = strings(
        &admin(db.direct_url()).await,
        "SELECT count(*)::text FROM app_writes",
    )
    .await;
    assert_eq!(on_second[0].as_deref(), Some("20"));
    println!("writes retried: {retried}, lost: 0");
}
