//! The PostgreSQL store's test suite again, through PgBouncer 1.18 in transaction
//! pooling mode.
//!
//! The three lines below make `test_postgres`, in this file and in every file it
//! includes, mean `test_postgres::through_pgbouncer`: its `TestDb::new()` and
//! `TestServer::start()` put a PgBouncer (`pool_mode = transaction`) in front of the
//! server, so `url()` is PgBouncer's, carrying `pgbouncer=true`, which switches the
//! store to statements that survive transaction pooling. The tests' own set-up and
//! inspection statements go to the server directly (`direct_url`). Every test file of
//! the suite is included below as a module, so each test runs twice in `cargo test`:
//! directly (its own binary) and here. The keyed tests that fill PostgreSQL's shared
//! lock table on purpose run in binaries of their own (`pgbouncer_keyed_*.rs`), each
//! with its own server, as they do directly.

// Each included file brings its own `mod support`, as it does in its own binary.
#![allow(clippy::duplicate_mod)]

extern crate self as test_postgres;
extern crate test_postgres as harness;
use harness::through_pgbouncer::*;

#[path = "lease_invariants.rs"]
mod lease_invariants;

#[path = "batch_take.rs"]
mod batch_take;

#[path = "migrations.rs"]
mod migrations;

#[path = "bad_input.rs"]
mod bad_input;

#[path = "hostile_names.rs"]
mod hostile_names;

#[path = "missing_grants.rs"]
mod missing_grants;

#[path = "read_only_server.rs"]
mod read_only_server;

#[path = "altered_lease_table.rs"]
mod altered_lease_table;

#[path = "sql_is_parameterised.rs"]
mod sql_is_parameterised;

#[path = "runtime_cluster.rs"]
mod runtime_cluster;

#[path = "paused_holder.rs"]
mod paused_holder;

#[path = "leases_hold_no_connection.rs"]
mod leases_hold_no_connection;

#[path = "history.rs"]
mod history;

#[path = "keyed_lock_order.rs"]
mod keyed_lock_order;

#[path = "keyed_pool_not_pinned.rs"]
mod keyed_pool_not_pinned;

#[path = "keyed_rollback.rs"]
mod keyed_rollback;

#[path = "exactly_once.rs"]
mod exactly_once;

#[path = "catch_up_policies.rs"]
mod catch_up_policies;

#[path = "forget_lease.rs"]
mod forget_lease;

#[path = "controls.rs"]
mod controls;

#[path = "controls_conformance.rs"]
mod controls_conformance;

/// A store on `db` through PgBouncer, in transaction pooling mode.
#[allow(clippy::expect_used)]
async fn through_pgbouncer(db: &test_postgres::TestDb) -> scheduler_postgres::PostgresStore {
    let store = scheduler_postgres::PostgresStore::connect(
        db.url(),
        scheduler_postgres::PostgresOptions::default(),
    )
    .await
    .expect("connect through PgBouncer");
    assert!(store.transaction_pooling());
    store
}

#[tokio::test]
async fn this_binary_runs_through_pgbouncer() {
    assert!(test_postgres::pgbouncer_mode());
    let db = test_postgres::TestDb::new().await;
    assert_ne!(db.url(), db.direct_url());
    assert!(db.url().ends_with("?pgbouncer=true"), "{}", db.url());
    through_pgbouncer(&db).await;
    // PgBouncer answers `SHOW` on its admin console only; through it, the server
    // sees PgBouncer's connection, whose client port is not ours.
    let server_port: u16 = db
        .direct_url()
        .rsplit_once(':')
        .and_then(|(_, rest)| rest.split('/').next()?.parse().ok())
        .expect("port");
    let bouncer_port: u16 = db
        .url()
        .rsplit_once(':')
        .and_then(|(_, rest)| rest.split('/').next()?.parse().ok())
        .expect("port");
    assert_ne!(server_port, bouncer_port);
}

/// `LISTEN` is not kept between transactions behind a transaction pooler: such a
/// store hands out no watch of its controls (its instances poll on the timer), and
/// its controls still announce, for instances connected directly.
#[tokio::test]
async fn behind_a_transaction_pooler_the_controls_are_polled_not_watched() {
    use scheduler_core::Controls;
    let db = test_postgres::TestDb::new().await;
    let store = through_pgbouncer(&db).await;
    assert!(store.watch().is_none());
    let mut listener = sea_orm::sqlx::postgres::PgListener::connect(db.direct_url())
        .await
        .expect("listener");
    listener
        .listen("scheduler_leases_controls")
        .await
        .expect("listen");
    store
        .pause(&scheduler_core::ControlRequest::new("report", "alice"))
        .await
        .expect("pause");
    let announced = tokio::time::timeout(std::time::Duration::from_secs(60), listener.recv())
        .await
        .expect("a notification")
        .expect("recv");
    assert_eq!(announced.payload(), "1");
}
