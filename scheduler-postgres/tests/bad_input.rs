//! Bad input gets a typed error with a clear message, never a panic.

use std::time::Duration;

use scheduler_core::{LeaseName, Ttl};
use scheduler_postgres::{Error, PostgresOptions, PostgresStore};

#[tokio::test]
async fn a_url_that_does_not_parse_is_refused_before_connecting() {
    for url in [
        "",
        "not a url",
        "mysql://u@h/db",
        "postgres://u@h:notaport/db",
    ] {
        let err = PostgresStore::connect(url, PostgresOptions::default())
            .await
            .err();
        assert!(
            matches!(err, Some(Error::InvalidUrl { .. })),
            "{url:?}: {err:?}"
        );
        let msg = err.map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.starts_with("invalid database URL"), "{msg}");
    }
}

#[tokio::test]
async fn an_unreachable_server_is_a_connect_error() {
    // Nothing listens on a port we just bound and released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    let url = format!("postgres://postgres@127.0.0.1:{port}/none");
    let options = PostgresOptions::default().connect_timeout(Duration::from_secs(2));
    let err = PostgresStore::connect(&url, options).await.err();
    assert!(matches!(err, Some(Error::Connect { .. })), "{err:?}");
    let msg = err.map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains("cannot connect to the database"), "{msg}");
}

#[test]
fn bad_names_ttls_and_tables_are_typed_errors() {
    assert!(matches!(
        LeaseName::new(""),
        Err(scheduler_core::Error::InvalidName { .. })
    ));
    assert!(matches!(
        LeaseName::new("n".repeat(LeaseName::MAX_LEN + 1)),
        Err(scheduler_core::Error::InvalidName { .. })
    ));
    assert!(matches!(
        Ttl::new(Duration::ZERO),
        Err(scheduler_core::Error::InvalidTtl { .. })
    ));
    let err = PostgresOptions::default()
        .table("leases; DROP TABLE x")
        .err();
    assert!(matches!(err, Some(Error::InvalidTableName(_))), "{err:?}");
}

/// A URL without a database name would have the server pick the user's own database
/// (`postgres`): a second, silent cluster. It is refused in words before any
/// connection is tried; one that names its database in `?dbname=`, or with a socket
/// directory in `?host=`, is read as written.
#[tokio::test]
async fn a_url_without_a_database_is_refused_in_words() {
    // Nothing listens here: a URL that passes the checks fails to connect instead.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    let options = || PostgresOptions::default().connect_timeout(Duration::from_secs(1));
    for url in [
        format!("postgres://postgres@127.0.0.1:{port}"),
        format!("postgres://postgres@127.0.0.1:{port}/"),
        format!("postgresql://postgres@127.0.0.1:{port}/?sslmode=disable"),
        format!("postgres://postgres@127.0.0.1:{port},127.0.0.1:{port}"),
        format!("postgres://postgres@/?host=127.0.0.1&port={port}&target_session_attrs=any"),
    ] {
        let err = PostgresStore::connect(&url, options()).await.err();
        let msg = err.as_ref().map(ToString::to_string).unwrap_or_default();
        assert!(
            matches!(err, Some(Error::InvalidUrl { .. })),
            "{url:?}: {err:?}"
        );
        assert!(
            msg.contains("names no database") && msg.contains("postgres://host/DBNAME"),
            "{msg}"
        );
    }
    for url in [
        format!("postgres://postgres@127.0.0.1:{port}/app"),
        format!("postgres://postgres@127.0.0.1:{port}/app?options=-c%20search_path%3Dx"),
        format!("postgres://postgres@127.0.0.1:{port}?dbname=app"),
        format!("postgres:///app?host=127.0.0.1&port={port}&user=postgres"),
    ] {
        let err = PostgresStore::connect(&url, options()).await.err();
        assert!(
            matches!(err, Some(Error::Connect { .. })),
            "{url:?}: {err:?}"
        );
    }
}
