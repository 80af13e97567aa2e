//! Bad input gets a typed error with a clear message, never a panic and never a
//! damaged file.

#![allow(clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use scheduler_core::{LeaseName, Release, Store, TakeRequest, Tick, Ttl};
use scheduler_sqlite::{Error, SqliteOptions, SqliteStore};
use sea_orm::{SqliteTransactionMode, TransactionOptions, TransactionTrait};
use support::{TempDir, integrity, sqlite_error};

fn ttl() -> Ttl {
    Ttl::new(Duration::from_secs(60)).expect("ttl")
}

fn request(name: &str, tick: Tick) -> TakeRequest {
    TakeRequest::new(LeaseName::new(name).expect("name"), tick)
}

#[tokio::test]
async fn a_missing_directory_is_reported_and_not_created() {
    let dir = TempDir::new("missing-dir");
    let missing = dir.join("no/such/dir");
    let err = SqliteStore::open(missing.join("leases.db"), SqliteOptions::default())
        .await
        .err();
    assert!(
        matches!(&err, Some(Error::MissingDirectory { directory, .. }) if *directory == missing),
        "{err:?}"
    );
    let msg = err.map(|e| e.to_string()).unwrap_or_default();
    assert!(
        msg.contains("does not exist") && msg.contains("no/such/dir"),
        "{msg}"
    );
    assert!(!dir.join("no").exists(), "the store created the directory");
}

#[tokio::test]
async fn a_directory_is_not_a_database_file() {
    let dir = TempDir::new("dir-as-file");
    let err = SqliteStore::open(dir.path(), SqliteOptions::default())
        .await
        .err();
    assert!(matches!(err, Some(Error::Open { .. })), "{err:?}");
    let msg = err.map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains("the path is a directory"), "{msg}");
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_refused_and_left_untouched() {
    let dir = TempDir::new("not-a-db");
    let path = dir.join("notes.txt");
    let text = "these are my notes, not a database\n".repeat(200);
    std::fs::write(&path, &text).expect("write");
    let err = SqliteStore::open(&path, SqliteOptions::default())
        .await
        .err();
    assert!(matches!(err, Some(Error::Open { .. })), "{err:?}");
    let msg = err.map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains("not a SQLite database"), "{msg}");
    assert_eq!(std::fs::read_to_string(&path).expect("read"), text);
}

#[tokio::test]
async fn paths_that_are_not_files_and_qualified_tables_are_refused() {
    for path in ["", ":memory:"] {
        let err = SqliteStore::open(path, SqliteOptions::default())
            .await
            .err();
        assert!(
            matches!(err, Some(Error::InvalidPath { .. })),
            "{path:?}: {err:?}"
        );
    }
    let err = SqliteOptions::default().table("leases; DROP TABLE x").err();
    assert!(matches!(err, Some(Error::InvalidTableName(_))), "{err:?}");
    let err = SqliteOptions::default().table("app_a.leases").err();
    assert!(matches!(err, Some(Error::InvalidTableName(_))), "{err:?}");
}

#[tokio::test]
async fn a_read_only_store_refuses_writes_with_a_clear_error() {
    let dir = TempDir::new("ro");
    let path = dir.join("leases.db");
    let writer = SqliteStore::open(&path, SqliteOptions::default())
        .await
        .expect("open");
    let tick = Tick::new(writer.now().await.expect("clock"));
    let lease = writer
        .take(&[request("held", tick)], ttl())
        .await
        .expect("take")
        .won
        .pop()
        .expect("free");

    let reader = SqliteStore::open(&path, SqliteOptions::default().read_only(true))
        .await
        .expect("open read-only");
    // Reading works: the clock.
    reader.now().await.expect("clock");
    // Every write fails, saying why.
    let err = reader
        .take(&[request("other", tick)], ttl())
        .await
        .expect_err("take on a read-only store");
    let sqlite = sqlite_error(&err);
    assert!(
        matches!(
            sqlite,
            Error::ReadOnly {
                operation: "take leases",
                ..
            }
        ),
        "{sqlite:?}"
    );
    let msg = sqlite.to_string();
    assert!(
        msg.contains("is read-only") && msg.contains("read_only(true)"),
        "{msg}"
    );
    let err = reader
        .renew(&[lease.key()], ttl())
        .await
        .expect_err("renew");
    assert!(
        matches!(sqlite_error(&err), Error::ReadOnly { .. }),
        "{err:?}"
    );
    let err = reader
        .release(&[lease.key()], Release::Completed)
        .await
        .expect_err("release");
    assert!(
        matches!(sqlite_error(&err), Error::ReadOnly { .. }),
        "{err:?}"
    );
    assert_eq!(
        err.store_failure(),
        Some(scheduler_core::StoreFailure::ReadOnly),
        "the health report's kind"
    );

    // Nothing changed: the writer still holds its lease and the file is sound.
    assert_eq!(
        writer
            .renew(&[lease.key()], ttl())
            .await
            .expect("renew")
            .len(),
        1
    );
    assert_eq!(integrity(&writer).await, "ok");
}

#[tokio::test]
async fn a_read_only_store_does_not_create_a_missing_file() {
    let dir = TempDir::new("ro-missing");
    let path = dir.join("leases.db");
    let err = SqliteStore::open(&path, SqliteOptions::default().read_only(true))
        .await
        .err();
    assert!(matches!(err, Some(Error::Open { .. })), "{err:?}");
    let msg = err.map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains("does not exist"), "{msg}");
    assert!(!path.exists());
}

/// Permission bits stop an ordinary user, not root (who is refused nothing by them).
/// Whichever this process is, the outcome must be clean: a clear error for a user the
/// directory refuses, a working store for one it admits.
#[tokio::test]
async fn a_read_only_directory_is_reported_when_it_refuses_this_user() {
    use std::os::unix::fs::PermissionsExt;

    let dir = TempDir::new("ro-dir");
    let locked = dir.join("locked");
    std::fs::create_dir(&locked).expect("mkdir");
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o555)).expect("chmod");
    let probe = locked.join("probe");
    let refused = std::fs::write(&probe, b"x").is_err();
    let _ = std::fs::remove_file(&probe);

    let result = SqliteStore::open(locked.join("leases.db"), SqliteOptions::default()).await;
    if refused {
        let err = result.err();
        assert!(
            matches!(err, Some(Error::Open { .. } | Error::ReadOnly { .. })),
            "{err:?}"
        );
        let msg = err.map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("is read-only"), "{msg}");
    } else {
        let store = result.expect("permission bits do not bind this user, so the store opens");
        assert_eq!(integrity(&store).await, "ok");
    }
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).expect("chmod back");
}

/// A read-only file in a writable directory: refused writes for a user the bits
/// bind, a working store for root.
#[tokio::test]
async fn a_read_only_file_is_reported_when_it_refuses_this_user() {
    use std::os::unix::fs::PermissionsExt;

    let dir = TempDir::new("ro-file");
    let path = dir.join("leases.db");
    // Closed, not merely dropped: SQLite hands a closing connection's file handle to
    // the next connection of the same process, which would bypass the new bits.
    let creator = SqliteStore::open(&path, SqliteOptions::default())
        .await
        .expect("create");
    creator.close().await.expect("close");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).expect("chmod");
    let refused = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .is_err();

    let result = SqliteStore::open(&path, SqliteOptions::default()).await;
    if refused {
        // Found out at open, not at the first take the runtime would retry forever.
        let err = result.err();
        assert!(
            matches!(
                &err,
                Some(Error::ReadOnly {
                    operation: "open the database for writing",
                    ..
                })
            ),
            "{err:?}"
        );
        let msg = err.map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("is read-only"), "{msg}");
    } else {
        let store = result.expect("permission bits do not bind this user, so the store opens");
        let tick = Tick::new(store.now().await.expect("clock"));
        let taken = store
            .take(&[request("file", tick)], ttl())
            .await
            .expect("take");
        assert_eq!(taken.won.len(), 1);
    }
}

#[tokio::test]
async fn a_lock_held_beyond_the_busy_timeout_is_a_typed_error_and_harms_nothing() {
    let dir = TempDir::new("busy");
    let path = dir.join("leases.db");
    let options = SqliteOptions::default().busy_timeout(Duration::from_millis(200));
    let store = SqliteStore::open(&path, options.clone())
        .await
        .expect("open");
    let other = SqliteStore::open(&path, options).await.expect("open");
    let tick = Tick::new(store.now().await.expect("clock"));
    let before = store
        .take(&[request("before", tick)], ttl())
        .await
        .expect("take")
        .won;
    assert_eq!(before.len(), 1);

    // Another connection holds the write lock.
    let exclusive = other
        .connection()
        .begin_with_options(TransactionOptions {
            sqlite_transaction_mode: Some(SqliteTransactionMode::Exclusive),
            ..TransactionOptions::default()
        })
        .await
        .expect("BEGIN EXCLUSIVE");

    let started = Instant::now();
    let err = store
        .take(&[request("blocked", tick)], ttl())
        .await
        .expect_err("take while locked");
    let waited = started.elapsed();
    let sqlite = sqlite_error(&err);
    assert!(
        matches!(sqlite, Error::Busy { operation: "take leases", busy_timeout, .. } if *busy_timeout == Duration::from_millis(200)),
        "{sqlite:?}"
    );
    let msg = sqlite.to_string();
    assert!(
        msg.contains("busy timeout (200ms)") && msg.contains("SqliteOptions::busy_timeout"),
        "{msg}"
    );
    assert!(
        waited >= Duration::from_millis(150),
        "gave up after {waited:?}, before the busy timeout"
    );
    assert!(
        waited < Duration::from_secs(3),
        "waited {waited:?}, far beyond the busy timeout"
    );
    // The release of a held lease fails the same way, and reading the clock does not wait.
    let err = store
        .release(
            &before.iter().map(|l| l.key()).collect::<Vec<_>>(),
            Release::Completed,
        )
        .await;
    assert!(
        matches!(err.as_ref().map_err(sqlite_error), Err(Error::Busy { .. })),
        "{err:?}"
    );
    store
        .now()
        .await
        .expect("reads do not wait for the writer in WAL mode");
    // Writes queued behind each other in the store give up in bounded time too: the
    // first waits for the lock, the next for its turn, at most a busy timeout each.
    let started = Instant::now();
    let (one, two) = ([request("queued-1", tick)], [request("queued-2", tick)]);
    let (first, second) = tokio::join!(store.take(&one, ttl()), store.take(&two, ttl()));
    for result in [first, second] {
        let err = result.expect_err("take while locked");
        assert!(matches!(sqlite_error(&err), Error::Busy { .. }), "{err:?}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "queued writes waited {:?}",
        started.elapsed()
    );

    exclusive.rollback().await.expect("rollback");
    // Nothing was written while locked, nothing is broken after.
    let taken = store
        .take(&[request("blocked", tick)], ttl())
        .await
        .expect("take after the lock");
    assert_eq!(taken.won.len(), 1);
    let held = store
        .take(&[request("before", tick)], ttl())
        .await
        .expect("take");
    assert!(held.won.is_empty(), "the failed release released nothing");
    assert_eq!(integrity(&store).await, "ok");
}

/// Opened without migrations on a schedules table from before the bounds (no
/// `next_tick`: every put would fail), the store refuses at open, naming it.
#[tokio::test]
async fn a_store_without_migrations_refuses_a_schedules_table_without_bounds() {
    use sea_orm::ConnectionTrait;

    let dir = TempDir::new("old-schedules");
    let path = dir.join("leases.db");
    let store = SqliteStore::open(&path, SqliteOptions::default())
        .await
        .expect("migrated");
    store
        .connection()
        .execute_unprepared(
            "DROP INDEX scheduler_leases_schedules_due; \
             ALTER TABLE scheduler_leases_schedules DROP COLUMN next_tick; \
             DELETE FROM scheduler_leases_migrations WHERE version = 'm20261205_000007_next_tick'",
        )
        .await
        .expect("back to the migration before");
    store.close().await.expect("close");
    let err = SqliteStore::open(&path, SqliteOptions::default().migrate(false))
        .await
        .expect_err("refused");
    assert!(
        matches!(&err, Error::Migrate { migration, .. } if migration == "m20261205_000007_next_tick"),
        "{err:?}"
    );
    assert!(err.to_string().contains("column(s) next_tick"), "{err}");
    SqliteStore::open(&path, SqliteOptions::default())
        .await
        .expect("migrating brings it up to date");
}

/// Opened without migrations on a lease table that lacks a column this version
/// needs (renewals read `cancel_tick`), the store refuses at open, naming it.
#[tokio::test]
async fn a_store_without_migrations_refuses_a_table_missing_a_column() {
    use sea_orm::ConnectionTrait;

    let dir = TempDir::new("old-table");
    let path = dir.join("leases.db");
    let store = SqliteStore::open(&path, SqliteOptions::default())
        .await
        .expect("migrated");
    store
        .connection()
        .execute_unprepared(
            "ALTER TABLE scheduler_leases DROP COLUMN cancel_tick; \
             DELETE FROM scheduler_leases_migrations WHERE version = 'm20261201_000002_cancel_requests'",
        )
        .await
        .expect("back to the first migration");
    store.close().await.expect("close");
    let err = SqliteStore::open(&path, SqliteOptions::default().migrate(false))
        .await
        .expect_err("refused");
    assert!(
        matches!(&err, Error::Migrate { migration, .. } if migration == "m20261201_000002_cancel_requests"),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("lacks column(s) cancel_tick"),
        "{err}"
    );
    SqliteStore::open(&path, SqliteOptions::default())
        .await
        .expect("migrating brings it up to date");
}

/// Opened without migrations on a file whose lease table lacks the controls
/// migration's tables (every take reads `_controls`), the store refuses at open,
/// naming the migration and the tables; migrating brings it up to date.
#[tokio::test]
async fn a_store_without_migrations_refuses_a_file_without_the_controls_tables() {
    use sea_orm::ConnectionTrait;

    let dir = TempDir::new("no-controls");
    let path = dir.join("leases.db");
    let store = SqliteStore::open(&path, SqliteOptions::default())
        .await
        .expect("migrated");
    store
        .connection()
        .execute_unprepared(
            "DROP TABLE scheduler_leases_controls; DROP TABLE scheduler_leases_version; \
             DELETE FROM scheduler_leases_migrations WHERE version = 'm20261202_000003_controls'",
        )
        .await
        .expect("back to the second migration");
    store.close().await.expect("close");
    let err = SqliteStore::open(&path, SqliteOptions::default().migrate(false))
        .await
        .expect_err("refused");
    assert!(
        matches!(&err, Error::Migrate { migration, .. } if migration == "m20261202_000003_controls"),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("scheduler_leases_controls, scheduler_leases_version")
            && text.contains("migrate(true)"),
        "{text}"
    );
    // The tables that were left stay; the missing ones are created again.
    let store = SqliteStore::open(&path, SqliteOptions::default())
        .await
        .expect("migrating brings it up to date");
    let tick = Tick::new(store.now().await.expect("clock"));
    let taken = store
        .take(
            &[request("after", tick).controlled_by("after", "n1")],
            ttl(),
        )
        .await
        .expect("take");
    assert_eq!(taken.won.len(), 1, "{taken:?}");
}
