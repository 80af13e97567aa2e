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
