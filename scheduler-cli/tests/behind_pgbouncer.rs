//! `status` and `locks` through PgBouncer 1.18 in transaction pooling mode: the reads
//! run through the store's session (unnamed, each in a transaction of its own), so
//! they work there as they do directly, repeatedly, on a pool of one connection.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use std::process::Command;

use scheduler_cli::{Error, LeaseState};
use scheduler_postgres::TableName;
use sea_orm::{ConnectionTrait, Database};
use serde_json::Value;
use support::known_leases;
use test_postgres::TestDb;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_locks_read_through_transaction_pooling() {
    let db = TestDb::through_pgbouncer().await;
    let known = known_leases(db.direct_url(), true).await;
    let url = db.url().to_owned();
    assert!(url.ends_with("?pgbouncer=true"), "{url}");

    let store = scheduler_cli::connect(&url).await.expect("connect");
    assert!(store.transaction_pooling());
    // Twice: a statement prepared under a name would clash (or be gone) the second time.
    for _ in 0..2 {
        let status = scheduler_cli::status(&store, &TableName::default())
            .await
            .expect("status through PgBouncer");
        assert_eq!(
            status.history_table.as_deref(),
            Some("scheduler_leases_runs")
        );
        let names: Vec<&str> = status.leases.iter().map(|l| l.lease.as_str()).collect();
        assert_eq!(names, ["alerts", "reports", "sweep", "uptime:node-a"]);
        let sweep = status.leases.iter().find(|l| l.lease == "sweep").unwrap();
        assert_eq!(sweep.state, LeaseState::Held);
        assert_eq!(sweep.holder, known.sweep_holder);
        assert_eq!(sweep.token, known.sweep_token);
        let run = sweep.last_run.as_ref().expect("sweep ran");
        assert_eq!(
            (run.node.as_str(), run.outcome.as_str()),
            ("node-b", "failed")
        );
    }
    let missing = TableName::new("app_a.leases").unwrap();
    let err = scheduler_cli::status(&store, &missing).await.unwrap_err();
    assert!(matches!(err, Error::NoLeaseTable { .. }), "{err:?}");

    // A session lock taken on the server directly, seen through PgBouncer.
    let holder = Database::connect(db.direct_url()).await.expect("connect");
    holder
        .execute_unprepared("SELECT pg_advisory_lock(42)")
        .await
        .expect("lock");
    for _ in 0..2 {
        let locks = scheduler_cli::locks(&store)
            .await
            .expect("locks through PgBouncer");
        let held: Vec<_> = locks.locks.iter().filter(|l| l.key == Some(42)).collect();
        assert_eq!(held.len(), 1, "{locks:#?}");
        assert!(held[0].granted && held[0].pinned, "{locks:#?}");
        assert_eq!(held[0].state.as_deref(), Some("idle"));
    }

    // The binary, end to end.
    let out = tokio::task::spawn_blocking({
        let url = url.clone();
        move || {
            Command::new(env!("CARGO_BIN_EXE_scheduler-cli"))
                .args(["status", "--json"])
                .env("DATABASE_URL", url)
                .output()
                .expect("run scheduler-cli")
        }
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(json["leases"].as_array().map(Vec::len), Some(4));
}
