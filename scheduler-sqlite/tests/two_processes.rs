//! Several processes of one machine coordinate through one SQLite file: two OS
//! processes race for every tick of one lease, and each tick is won exactly once.
//!
//! The test re-runs its own executable twice, with an environment variable that puts
//! the copy in child mode. Each child opens the (new) file itself, so the two also
//! race to create the schema. For each of [`TICKS`] ticks, as the tick comes due on
//! the store's clock, each child asks for the lease with a fresh holder; a winner
//! records `(tick, pid, token)` in a table of the same file, then releases the tick as
//! completed.

#![allow(clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, TimeDelta};
use scheduler_core::{LeaseName, Release, Store, TakeRequest, Tick, Ttl};
use scheduler_sqlite::{SqliteOptions, SqliteStore};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use support::{TempDir, integrity};

const TEST_NAME: &str = "two_processes_take_each_tick_exactly_once";
const CHILD_DB: &str = "SCHEDULER_SQLITE_TEST_CHILD_DB";
const CHILD_START: &str = "SCHEDULER_SQLITE_TEST_CHILD_START_MICROS";
const TICKS: i64 = 15;
const SPACING: TimeDelta = TimeDelta::milliseconds(150);
const RECORD_TABLE: &str = "CREATE TABLE IF NOT EXISTS wins (tick INTEGER NOT NULL, pid INTEGER NOT NULL, token INTEGER NOT NULL) STRICT";

#[test]
fn two_processes_take_each_tick_exactly_once() {
    if let (Ok(db), Ok(start)) = (std::env::var(CHILD_DB), std::env::var(CHILD_START)) {
        let start: i64 = start.parse().expect("start micros");
        runtime().block_on(child(PathBuf::from(db), start));
        return;
    }

    let dir = TempDir::new("two-processes");
    let db = dir.join("leases.db");
    // Far enough ahead for both children to start and open the file.
    let start =
        SystemTime::now().duration_since(UNIX_EPOCH).expect("clock") + Duration::from_millis(1500);
    let start = i64::try_from(start.as_micros()).expect("micros");
    let exe = std::env::current_exe().expect("test executable");
    let children: Vec<_> = (0..2)
        .map(|_| {
            Command::new(&exe)
                .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
                .env(CHILD_DB, &db)
                .env(CHILD_START, start.to_string())
                .spawn()
                .expect("spawn a child")
        })
        .collect();
    let pids: Vec<i64> = children.iter().map(|c| i64::from(c.id())).collect();
    for child in children {
        let Output { status, .. } = child.wait_with_output().expect("wait for a child");
        assert!(status.success(), "a child failed: {status}");
    }

    runtime().block_on(async {
        let store = SqliteStore::open(&db, SqliteOptions::default())
            .await
            .expect("open");
        let rows = store
            .connection()
            .query_all_raw(Statement::from_string(
                DbBackend::Sqlite,
                "SELECT tick, pid, token FROM wins ORDER BY tick, token",
            ))
            .await
            .expect("read the record");
        let wins: Vec<(i64, i64, i64)> = rows
            .iter()
            .map(|r| {
                (
                    r.try_get("", "tick").expect("tick"),
                    r.try_get("", "pid").expect("pid"),
                    r.try_get("", "token").expect("token"),
                )
            })
            .collect();
        let ticks: Vec<i64> = wins.iter().map(|w| w.0).collect();
        let expected: Vec<i64> = (0..TICKS)
            .map(|k| tick(start, k).at().timestamp_micros())
            .collect();
        assert_eq!(ticks, expected, "every tick won exactly once: {wins:?}");
        assert!(
            wins.iter().all(|w| pids.contains(&w.1)),
            "a win by an unknown process: {wins:?}"
        );
        // Each acquisition of the name was one recorded win: tokens 1, 2, 3, … in tick order.
        let tokens: Vec<i64> = wins.iter().map(|w| w.2).collect();
        assert_eq!(tokens, (1..=TICKS).collect::<Vec<_>>(), "{wins:?}");
        let by_first = wins.iter().filter(|w| w.1 == pids[0]).count();
        println!(
            "wins: {by_first} by process {}, {} by process {}",
            pids[0],
            wins.len() - by_first,
            pids[1]
        );
        assert_eq!(integrity(&store).await, "ok");
    });
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn tick(start_micros: i64, k: i64) -> Tick {
    let start = DateTime::from_timestamp_micros(start_micros).expect("in range");
    Tick::new(start + SPACING * i32::try_from(k).expect("small"))
}

async fn child(db: PathBuf, start: i64) {
    let store = open(&db).await;
    store
        .connection()
        .execute_unprepared(RECORD_TABLE)
        .await
        .expect("create the record table");
    let name = LeaseName::new("two-processes").expect("name");
    let ttl = Ttl::new(Duration::from_secs(30)).expect("ttl");
    let pid = i64::from(std::process::id());
    for k in 0..TICKS {
        let tick = tick(start, k);
        // Ask when the tick comes due on the store's clock, as a runtime would.
        loop {
            let now = store.now().await.expect("clock");
            if now >= tick.at() {
                break;
            }
            let left = (tick.at() - now).to_std().unwrap_or_default();
            tokio::time::sleep(left.min(Duration::from_millis(20))).await;
        }
        let taken = store
            .take(&[TakeRequest::new(name.clone(), tick)], ttl)
            .await
            .expect("take");
        for lease in taken.won {
            store
                .connection()
                .execute_raw(Statement::from_sql_and_values(
                    DbBackend::Sqlite,
                    "INSERT INTO wins (tick, pid, token) VALUES (?1, ?2, ?3)",
                    [
                        tick.at().timestamp_micros().into(),
                        pid.into(),
                        lease.token.get().into(),
                    ],
                ))
                .await
                .expect("record the win");
            let released = store
                .release(&[lease.key()], Release::Completed)
                .await
                .expect("release");
            assert_eq!(released.len(), 1);
        }
    }
}

async fn open(db: &Path) -> SqliteStore {
    SqliteStore::open(db, SqliteOptions::default())
        .await
        .expect("open in a child")
}
