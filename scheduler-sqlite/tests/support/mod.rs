//! What the integration tests share: a fresh directory per test, and the SQLite
//! error behind a `scheduler_core::Error`.
#![allow(dead_code, clippy::expect_used, clippy::unwrap_used, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use sea_orm::{ConnectionTrait, DbBackend, Statement};

/// A directory under the system's temp dir, unique to one test, removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(label: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!(
            "scheduler-sqlite-{label}-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst),
        ));
        std::fs::create_dir_all(&dir).expect("create the test directory");
        Self(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The store's own error inside the `scheduler_core::Error` the `Store` trait returns.
pub fn sqlite_error(err: &scheduler_core::Error) -> &scheduler_sqlite::Error {
    match err {
        scheduler_core::Error::Store { cause, .. } => cause
            .downcast_ref::<scheduler_sqlite::Error>()
            .unwrap_or_else(|| panic!("not a SQLite store error: {cause:?}")),
        other => panic!("not a store error: {other:?}"),
    }
}

/// `PRAGMA integrity_check` on the store's file: `"ok"` when the file is sound.
pub async fn integrity(store: &scheduler_sqlite::SqliteStore) -> String {
    let row = store
        .connection()
        .query_one_raw(Statement::from_string(
            DbBackend::Sqlite,
            "PRAGMA integrity_check",
        ))
        .await
        .expect("integrity check")
        .expect("a row");
    row.try_get_by_index::<String>(0).expect("text")
}
