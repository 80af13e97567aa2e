//! `locks` shows a session that took `pg_advisory_lock(42)` and went idle as idle,
//! holding the lock, and flags it as a pinned connection; a session waiting for the
//! same lock shows as waiting, not pinned.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use scheduler_cli::{AdvisoryLock, Locks};
use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement,
};
use serde_json::Value;
use test_postgres::TestDb;

/// A pool of one connection named `app`: every statement runs on the same session.
async fn session(url: &str, app: &str) -> DatabaseConnection {
    let sep = if url.contains('?') { '&' } else { '?' };
    let mut options = ConnectOptions::new(format!("{url}{sep}application_name={app}"));
    options
        .max_connections(1)
        .min_connections(1)
        .sqlx_logging(false);
    Database::connect(options).await.expect("connect")
}

async fn pid(db: &DatabaseConnection) -> i32 {
    db.query_one_raw(Statement::from_string(
        DbBackend::Postgres,
        "SELECT pg_backend_pid() AS pid",
    ))
    .await
    .unwrap()
    .unwrap()
    .try_get("", "pid")
    .unwrap()
}

fn of(locks: &Locks, pid: i32) -> &AdvisoryLock {
    locks
        .locks
        .iter()
        .find(|l| l.pid == pid)
        .unwrap_or_else(|| panic!("no lock of pid {pid}: {locks:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_holding_an_advisory_lock_is_flagged() {
    let db = TestDb::new().await;
    let cli = scheduler_cli::connect(db.url()).await.expect("connect");
    let none = scheduler_cli::locks(&cli).await.expect("locks");
    assert!(none.locks.is_empty(), "{none:#?}");
    assert!(
        none.human().starts_with("no advisory locks in database"),
        "{}",
        none.human()
    );

    // The textbook pattern: take a session lock, hand the connection back to the pool.
    let holder = session(db.url(), "pinned-app").await;
    let holder_pid = pid(&holder).await;
    holder
        .execute_unprepared("SELECT pg_advisory_lock(42)")
        .await
        .expect("lock");
    // Another instance asks for the same lock and waits.
    let waiter = session(db.url(), "waiting-app").await;
    let waiter_pid = pid(&waiter).await;
    let wait = tokio::spawn({
        let waiter = waiter.clone();
        async move {
            waiter
                .execute_unprepared("SELECT pg_advisory_lock(42)")
                .await
        }
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let locks = loop {
        let locks = scheduler_cli::locks(&cli).await.expect("locks");
        if locks.locks.iter().any(|l| l.pid == waiter_pid) {
            break locks;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the waiter never showed: {locks:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    let held = of(&locks, holder_pid);
    assert_eq!(held.state.as_deref(), Some("idle"));
    assert!(held.granted && held.pinned, "{held:#?}");
    assert_eq!(held.key, Some(42));
    assert_eq!(held.key_pair, None);
    assert_eq!(held.application_name.as_deref(), Some("pinned-app"));
    assert_eq!(held.client_addr.as_deref(), Some("127.0.0.1"));
    assert_eq!(held.mode, "ExclusiveLock");
    assert!(
        held.query
            .as_deref()
            .unwrap()
            .contains("pg_advisory_lock(42)")
    );
    assert!(held.state_for_ms.unwrap() >= 0);
    let waiting = of(&locks, waiter_pid);
    assert_eq!(waiting.state.as_deref(), Some("active"));
    assert!(!waiting.granted && !waiting.pinned, "{waiting:#?}");
    assert_eq!(waiting.key, Some(42));
    // Granted first.
    assert_eq!(locks.locks[0].pid, holder_pid);

    let human = locks.human();
    eprintln!("{human}");
    let header = human.lines().next().unwrap();
    for column in [
        "PID",
        "APPLICATION",
        "CLIENT",
        "STATE",
        "FOR",
        "KEY",
        "GRANTED",
        "PINNED",
        "QUERY",
    ] {
        assert!(header.contains(column), "{header}");
    }
    let line = |pid: i32| {
        human
            .lines()
            .find(|l| l.split_whitespace().next() == Some(&pid.to_string()))
            .unwrap_or_else(|| panic!("no line for {pid} in\n{human}"))
    };
    let cells: Vec<&str> = line(holder_pid).split_whitespace().collect();
    assert_eq!(cells[1..3], ["pinned-app", "127.0.0.1"], "{human}");
    assert!(cells.contains(&"idle") && cells.contains(&"42"), "{human}");
    assert!(
        cells.contains(&"yes") && cells.contains(&"PINNED"),
        "{human}"
    );
    let cells: Vec<&str> = line(waiter_pid).split_whitespace().collect();
    assert!(
        cells.contains(&"waiting") && !cells.contains(&"PINNED"),
        "{human}"
    );
    assert!(
        human.contains(&format!(
            "warning: pid {holder_pid} (pinned-app) has been idle for"
        )),
        "{human}"
    );
    assert_eq!(human.matches("warning:").count(), 1, "{human}");

    let json: Value = serde_json::from_str(&locks.json().expect("json")).expect("valid JSON");
    let entry = json["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["pid"] == holder_pid)
        .unwrap();
    assert_eq!(entry["state"], "idle");
    assert_eq!(entry["granted"], true);
    assert_eq!(entry["pinned"], true);
    assert_eq!(entry["key"], 42);
    assert_eq!(entry["objsubid"], 1);
    assert_eq!(entry["application_name"], "pinned-app");
    assert!(entry["state_for_ms"].is_i64());
    assert!(
        entry["query"]
            .as_str()
            .unwrap()
            .contains("pg_advisory_lock(42)")
    );
    assert_eq!(json["database"], locks.database.as_str());

    // Unlocking frees it: the waiter gets it, and the holder no longer shows.
    holder
        .execute_unprepared("SELECT pg_advisory_unlock(42)")
        .await
        .expect("unlock");
    wait.await.unwrap().expect("the waiter got the lock");
    let after = scheduler_cli::locks(&cli).await.expect("locks");
    assert_eq!(after.locks.len(), 1, "{after:#?}");
    assert_eq!(after.locks[0].pid, waiter_pid);
    assert!(after.locks[0].pinned, "now the waiter is the idle holder");
}
