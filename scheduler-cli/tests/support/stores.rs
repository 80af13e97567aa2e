//! Both stores the CLI opens, migrated as an app would leave them, and the built
//! binary run against them.
#![allow(dead_code, clippy::expect_used, clippy::unwrap_used, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use scheduler_core::{Controls, LeaseName, Store, TakeRequest, Taken, Tick, Ttl};
use scheduler_postgres::{PostgresOptions, PostgresStore};
use scheduler_sqlite::{SqliteOptions, SqliteStore};
use test_postgres::TestDb;

/// A store the app migrated, its URL for the CLI, and what keeps it alive.
pub struct Db {
    /// What the CLI is given: `postgres://…` or `sqlite:///…`.
    pub url: String,
    /// The store, opened by the test as an app would (migrations run).
    pub store: Arc<dyn Store>,
    /// `postgres` or `sqlite`, for messages.
    pub kind: &'static str,
    _keep: Keep,
}

enum Keep {
    Postgres(TestDb),
    Sqlite(TempDir),
}

impl Db {
    /// A fresh PostgreSQL database (the shared throwaway server, or `DATABASE_URL`'s).
    pub async fn postgres() -> Db {
        let db = TestDb::new().await;
        let store = PostgresStore::connect(db.url(), PostgresOptions::default())
            .await
            .expect("open the PostgreSQL store");
        Db {
            url: db.url().to_owned(),
            store: Arc::new(store),
            kind: "postgres",
            _keep: Keep::Postgres(db),
        }
    }

    /// A fresh SQLite file in a directory of its own.
    pub async fn sqlite() -> Db {
        let dir = TempDir::new("cli");
        let path = dir.join("app.db");
        let store = SqliteStore::open(&path, SqliteOptions::default())
            .await
            .expect("open the SQLite store");
        Db {
            url: format!("sqlite://{}", path.display()),
            store: Arc::new(store),
            kind: "sqlite",
            _keep: Keep::Sqlite(dir),
        }
    }

    /// The store's controls.
    pub fn controls(&self) -> &dyn Controls {
        self.store.controls().expect("the store keeps controls")
    }

    /// Registers `jobs` as node `node`'s, as a running instance does: the jobs the
    /// CLI's controls act on without `--force`.
    pub async fn runs(&self, node: &str, jobs: &[&str]) {
        let jobs: Vec<String> = jobs.iter().map(|j| (*j).to_owned()).collect();
        self.controls()
            .register_jobs(node, &jobs)
            .await
            .expect("register the jobs");
    }

    /// Runs the binary with `args` against this store (`DATABASE_URL`), as
    /// `USER=tester` on its own host, off the async workers.
    pub async fn cli(&self, args: &[&str]) -> Output {
        cli(Some(&self.url), args).await
    }

    /// One take of cluster job `job`'s lease for the current second, as node `node`
    /// would ask for it (refused while the job is paused there).
    pub async fn take(&self, job: &str, node: &str) -> Taken {
        self.take_named(job, job, node).await
    }

    /// One take of lease `lease` (`job:node` for a node job) for `job`, as node
    /// `node` would ask for it.
    pub async fn take_named(&self, lease: &str, job: &str, node: &str) -> Taken {
        let now = self.store.now().await.expect("now");
        let tick = Tick::new(chrono::DateTime::from_timestamp(now.timestamp(), 0).unwrap());
        let request =
            TakeRequest::new(LeaseName::new(lease).unwrap(), tick).controlled_by(job, node);
        let ttl = Ttl::new(Duration::from_secs(60)).unwrap();
        self.store.take(&[request], ttl).await.expect("take")
    }
}

/// Runs the binary with `args` and `DATABASE_URL` set to `url` (or unset), as
/// `USER=tester`, off the async workers.
pub async fn cli(url: Option<&str>, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_scheduler-cli"));
    command
        .args(args)
        .env_remove("DATABASE_URL")
        .env("USER", "tester");
    if let Some(url) = url {
        command.env("DATABASE_URL", url);
    }
    tokio::task::spawn_blocking(move || command.output().expect("run scheduler-cli"))
        .await
        .unwrap()
}

pub fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap()
}

/// stdout as JSON, after checking the command succeeded.
pub fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

/// Waits (generously) until `check` holds.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A directory removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(label: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!(
            "scheduler-cli-{label}-{}-{}-{nanos}",
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
