//! The rules of the dynamic schedules' bounds (`scheduler_store_tests::due`)
//! against a real SQLite file, one new file per test; and a file migrated by the
//! version before the bounds, whose rows read as due once migrated.

#![allow(clippy::expect_used)]

mod support;

use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use scheduler_core::{Advance, ScheduleRow, Store};
use scheduler_sqlite::{SqliteOptions, SqliteStore};
use scheduler_store_tests::SharedStore;
use scheduler_store_tests::due as rules;
use sea_orm::ConnectionTrait;
use support::TempDir;

async fn store(path: &Path) -> SharedStore {
    let store = SqliteStore::open(path, SqliteOptions::default())
        .await
        .expect("open");
    Arc::new(store) as SharedStore
}

#[tokio::test]
async fn a_put_bounds_each_row_no_later_than_its_first_tick() {
    let dir = TempDir::new("due-put");
    let s = store(&dir.join("leases.db")).await;
    rules::a_put_bounds_each_row_no_later_than_its_first_tick(&s).await;
}

#[tokio::test]
async fn the_due_read_filters_orders_and_pages() {
    let dir = TempDir::new("due-read");
    let s = store(&dir.join("leases.db")).await;
    rules::the_due_read_filters_orders_and_pages(&s).await;
}

#[tokio::test]
async fn an_advance_moves_forward_only_at_the_version_read() {
    let dir = TempDir::new("due-advance");
    let s = store(&dir.join("leases.db")).await;
    rules::an_advance_moves_forward_only_at_the_version_read(&s).await;
}

#[tokio::test]
async fn a_poll_without_schedules_reads_the_rest() {
    let dir = TempDir::new("due-poll");
    let s = store(&dir.join("leases.db")).await;
    rules::a_poll_without_schedules_reads_the_rest(&s).await;
}

/// A file whose schedules were written by the version before the bounds (no
/// `next_tick`, no `_due` index, migration 7 not recorded): opened with migrations,
/// it gets both, and its rows read as due from the epoch, until an advance moves
/// them.
#[tokio::test]
async fn rows_stored_before_the_bounds_read_as_due_once_migrated() {
    let dir = TempDir::new("due-migrated");
    let path = dir.join("leases.db");
    let old = SqliteStore::open(&path, SqliteOptions::default())
        .await
        .expect("open");
    let c = old.controls().expect("controls");
    c.register_handlers("n1", &["h".to_owned()])
        .await
        .expect("register");
    let rows = [
        ScheduleRow::new("old-a", "h", "every 1m"),
        ScheduleRow::new("old-b", "h", "0 0 9 * * *"),
    ];
    c.put_schedules(&rows, "ops", "before the bounds")
        .await
        .expect("put");
    old.connection()
        .execute_unprepared(
            "DROP INDEX scheduler_leases_schedules_due; \
             ALTER TABLE scheduler_leases_schedules DROP COLUMN next_tick; \
             DELETE FROM scheduler_leases_migrations WHERE version = 'm20261205_000007_next_tick'",
        )
        .await
        .expect("back to the sixth migration");
    old.close().await.expect("close");

    let store = SqliteStore::open(&path, SqliteOptions::default())
        .await
        .expect("migrating brings it up to date");
    let index = store
        .connection()
        .query_all_raw(sea_orm::Statement::from_string(
            sea_orm::DbBackend::Sqlite,
            "SELECT name FROM sqlite_master WHERE type = 'index' \
             AND name = 'scheduler_leases_schedules_due'",
        ))
        .await
        .expect("read the indexes");
    assert_eq!(index.len(), 1, "the migration creates the _due index");
    let c = store.controls().expect("controls");
    let handlers = ["h".to_owned()];
    let due = c
        .due_schedules(&handlers, DateTime::UNIX_EPOCH, None, 10)
        .await
        .expect("due");
    let names: Vec<&str> = due.iter().map(|d| d.row.name.as_str()).collect();
    assert_eq!(names, ["old-a", "old-b"], "due by the epoch, by name");
    assert!(due.iter().all(|d| d.next_tick == DateTime::UNIX_EPOCH));
    for (due, row) in due.iter().zip(&rows) {
        assert_eq!(due.row.schedule, row.schedule);
    }

    let moved = c
        .advance_schedules(&[Advance {
            name: "old-a".to_owned(),
            version: due[0].row.version,
            next_tick: Utc::now(),
        }])
        .await
        .expect("advance");
    assert_eq!(moved, 1);
    let still = c
        .due_schedules(&handlers, DateTime::UNIX_EPOCH, None, 10)
        .await
        .expect("due");
    let names: Vec<&str> = still.iter().map(|d| d.row.name.as_str()).collect();
    assert_eq!(
        names,
        ["old-b"],
        "an advanced row is due no more by the epoch"
    );
}
