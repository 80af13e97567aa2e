//! The harness itself: a shared server with a database per test, and a dedicated
//! server that can be stopped and restarted.

use std::time::Duration;

use sea_orm::{ConnectOptions, ConnectionTrait, Database, DbErr, Statement};
use test_postgres::{TestDb, TestServer, admin_url};

/// Connects to `url`, runs `SELECT 1` and disconnects.
async fn select_one(url: &str) -> Result<i32, DbErr> {
    let connection = Database::connect(url).await?;
    let row = connection
        .query_one_raw(Statement::from_string(
            connection.get_database_backend(),
            "SELECT 1 AS one",
        ))
        .await?
        .ok_or_else(|| DbErr::Custom("SELECT 1 returned no row".to_owned()))?;
    let one: i32 = row.try_get("", "one")?;
    connection.close().await?;
    Ok(one)
}

async fn current_database(url: &str) -> Result<String, DbErr> {
    let connection = Database::connect(url).await?;
    let row = connection
        .query_one_raw(Statement::from_string(
            connection.get_database_backend(),
            "SELECT current_database() AS name",
        ))
        .await?
        .ok_or_else(|| DbErr::Custom("current_database() returned no row".to_owned()))?;
    let name: String = row.try_get("", "name")?;
    connection.close().await?;
    Ok(name)
}

#[tokio::test]
async fn test_dbs_share_the_server_but_not_the_database() -> Result<(), DbErr> {
    let first = TestDb::new().await;
    let second = TestDb::new().await;

    assert_ne!(first.name(), second.name());
    assert_ne!(first.url(), second.url());
    assert!(
        first.url().contains(&format!("/{}", first.name())),
        "{}",
        first.url()
    );
    assert_eq!(select_one(first.url()).await?, 1);
    assert_eq!(select_one(second.url()).await?, 1);
    assert_eq!(current_database(first.url()).await?, first.name());
    assert_eq!(current_database(second.url()).await?, second.name());

    // Same server: the admin database sees both.
    let server = |url: &str| url.rsplit_once('/').map(|(server, _)| server.to_owned());
    assert_eq!(server(first.url()), server(second.url()));
    assert_eq!(server(&admin_url().await), server(first.url()));
    Ok(())
}

#[tokio::test]
async fn a_test_db_is_empty_and_writable() -> Result<(), DbErr> {
    let db = TestDb::new().await;
    let connection = Database::connect(db.url()).await?;
    let tables = connection
        .query_one_raw(Statement::from_string(
            connection.get_database_backend(),
            "SELECT count(*) AS n FROM pg_tables WHERE schemaname = 'public'",
        ))
        .await?
        .ok_or_else(|| DbErr::Custom("count returned no row".to_owned()))?
        .try_get::<i64>("", "n")?;
    assert_eq!(tables, 0);
    connection
        .execute_unprepared("CREATE TABLE job (id bigint PRIMARY KEY); INSERT INTO job VALUES (1)")
        .await?;
    connection.close().await?;
    Ok(())
}

#[test]
fn test_dbs_from_many_threads_and_runtimes() -> Result<(), Box<dyn std::error::Error>> {
    let threads: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(|| -> Result<(i32, String), String> {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|error| error.to_string())?;
                runtime.block_on(async {
                    let db = TestDb::new().await;
                    let one = select_one(db.url())
                        .await
                        .map_err(|error| error.to_string())?;
                    Ok((one, db.name().to_owned()))
                })
            })
        })
        .collect();
    let mut names = Vec::new();
    for thread in threads {
        let Ok(result) = thread.join() else {
            return Err("a thread panicked".into());
        };
        let (one, name) = result?;
        assert_eq!(one, 1);
        names.push(name);
    }
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 8, "database names must be unique");
    Ok(())
}

#[tokio::test]
async fn a_test_server_stops_and_restarts() -> Result<(), Box<dyn std::error::Error>> {
    let server = TestServer::start()?;
    let url = server.create_database().await;
    assert!(url.starts_with(&format!("postgres://postgres@127.0.0.1:{}/", server.port())));
    assert_eq!(select_one(&url).await?, 1);

    server.stop()?;
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", server.port())).is_err(),
        "a stopped server still listens"
    );
    // sqlx retries refused connections until its acquire timeout: keep it short.
    let mut options = ConnectOptions::new(url.clone());
    options.connect_timeout(Duration::from_millis(500));
    assert!(
        Database::connect(options).await.is_err(),
        "a stopped server accepted a connection"
    );
    server.stop()?; // stopping twice is harmless

    server.restart()?;
    assert_eq!(select_one(&url).await?, 1);
    assert_eq!(select_one(&server.url("postgres")).await?, 1);
    Ok(())
}

#[test]
fn dropping_a_test_server_stops_it_and_removes_its_directory() -> std::io::Result<()> {
    let server = TestServer::start()?;
    let port = server.port();
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    let Some(dir) = server_dir(port) else {
        panic!("no directory found for the server on port {port}");
    };
    drop(server);
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the server still listens after drop"
    );
    // Drop waits for the watchdog, so the directory is gone already.
    assert!(!dir.exists(), "{} is left behind", dir.display());
    Ok(())
}

/// The directory of this process's running server on `port`, found through the
/// port line of its `postmaster.pid`.
fn server_dir(port: u16) -> Option<std::path::PathBuf> {
    let prefix = format!("test-postgres-{}-", std::process::id());
    std::fs::read_dir(std::env::temp_dir())
        .ok()?
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().starts_with(&prefix))
        .map(|entry| entry.path())
        .find(|dir| {
            std::fs::read_to_string(dir.join("data/postmaster.pid"))
                .is_ok_and(|pid| pid.lines().nth(3) == Some(port.to_string().as_str()))
        })
}
