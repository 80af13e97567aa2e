//! A connection that fails says why — connection refused, a wrong password — in
//! words, once, without the server's C source line.

use std::time::Duration;

use scheduler_core::error_chain;
use scheduler_postgres::{Error, PostgresOptions, PostgresStore};
use sea_orm::{ConnectionTrait, Database};
use support::hostile::{admin, exec, pg, store, take, tick};
use test_postgres::{TestDb, TestServer};

mod support;

/// Every message of ours is whole: walking the chain adds nothing, and no text is
/// said twice.
fn says_it_once(err: &Error) -> String {
    let text = err.to_string();
    assert_eq!(error_chain(err), text, "the chain repeats the message");
    assert!(!text.contains(" at line "), "server source line: {text}");
    assert!(
        !text.contains("Connection Error:"),
        "sea-orm's prefix: {text}"
    );
    text
}

#[tokio::test]
async fn a_refused_connection_says_refused_not_pool_timed_out() {
    // A port nothing listens on, and that nothing else can take while the test runs:
    // the local port of a connected client socket. (A port bound and released was
    // taken meanwhile, once, by a test server another test of this binary started,
    // and the connection reached it.)
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    let client =
        std::net::TcpStream::connect(listener.local_addr().expect("address")).expect("client");
    let port = client.local_addr().expect("client address").port();
    let url = format!("postgres://postgres@127.0.0.1:{port}/none");
    let options = PostgresOptions::default().connect_timeout(Duration::from_secs(1));
    let err = PostgresStore::connect(&url, options)
        .await
        .expect_err("nothing listens there");
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    let text = says_it_once(&err);
    assert!(
        text.starts_with(&format!(
            "cannot connect to the database at 127.0.0.1:{port}: "
        )),
        "{text}"
    );
    assert!(text.contains("refused"), "{text}");
    assert!(!text.contains("pool timed out"), "{text}");
    assert_eq!(text.matches("cannot connect").count(), 1, "{text}");
}

#[tokio::test]
async fn a_wrong_password_says_so_without_the_server_source_line() {
    // A server of its own, whose pg_hba.conf asks one role for a password.
    let server = TestServer::start().expect("server");
    let admin = Database::connect(server.direct_url("postgres"))
        .await
        .expect("admin");
    admin
        .execute_unprepared("CREATE ROLE pw_user LOGIN PASSWORD 'right'")
        .await
        .expect("role");
    let hba_file: String = admin
        .query_one_raw(sea_orm::Statement::from_string(
            sea_orm::DbBackend::Postgres,
            "SHOW hba_file",
        ))
        .await
        .expect("show")
        .expect("row")
        .try_get("", "hba_file")
        .expect("hba_file");
    let rules = std::fs::read_to_string(&hba_file).expect("read hba");
    std::fs::write(
        &hba_file,
        format!("host all pw_user 127.0.0.1/32 scram-sha-256\n{rules}"),
    )
    .expect("write hba");
    admin
        .execute_unprepared("SELECT pg_reload_conf()")
        .await
        .expect("reload");

    let url = format!(
        "postgres://pw_user:wrong@127.0.0.1:{}/postgres",
        server.port()
    );
    let options = PostgresOptions::default().connect_timeout(Duration::from_secs(2));
    let err = PostgresStore::connect(&url, options)
        .await
        .expect_err("a wrong password is refused");
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    let text = says_it_once(&err);
    assert!(
        text.contains("password authentication failed for user \"pw_user\" [SQLSTATE 28P01]"),
        "{text}"
    );
    assert!(!text.contains("wrong"), "the password leaked: {text}");
}

#[tokio::test]
async fn a_failed_statement_gives_the_servers_message_and_sqlstate_once() {
    let db = TestDb::new().await;
    let store = store(db.url()).await;
    let t = tick(&store, 0).await;
    exec(&admin(db.url()).await, "DROP TABLE scheduler_leases").await;
    let err = take(&store, &["a"], t).await.expect_err("no lease table");
    let text = err.to_string();
    assert_eq!(error_chain(&err), text, "the chain repeats the message");
    assert!(!text.contains(" at line "), "server source line: {text}");
    assert!(text.contains("[SQLSTATE 42P01]"), "{text}");
    assert_eq!(text.matches("42P01").count(), 1, "{text}");
    assert_eq!(
        says_it_once(pg(&err)),
        text.trim_start_matches("lease store failed: ")
    );
}
