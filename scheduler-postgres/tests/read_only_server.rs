//! A read-only server, a real hot standby or a database whose transactions are
//! read-only by default, is refused when the store opens, and each write on a store
//! opened without migrating names the primary; the clock still reads.
//!
//! `pgbouncer.rs` runs these tests again through PgBouncer in transaction pooling
//! mode: the stores under test connect to `db.url()`, while the tests' own set-up and
//! inspection statements go to the server directly (`admin`).
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use std::io::{self, BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use scheduler_core::{
    BoxError, Idempotent, JobContext, LeaseKey, Release, Schedule, Scheduler, Store, StoreFailure,
};
use scheduler_postgres::{Error, PostgresOptions, PostgresStore};
use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement,
};
use support::hostile::{admin, connect, exec, exists, pg, store, take, tick, ttl};
use test_postgres::{TestDb, TestServer};

/// The database name at the end of a URL.
fn database_of(url: &str) -> &str {
    let path = url.rsplit('/').next().expect("path");
    path.split('?').next().expect("name")
}

/// Asserts that take, renew and release all fail as statements on a read-only
/// server, and that the clock still reads.
async fn assert_writes_refused(store: &PostgresStore, keys: &[LeaseKey]) {
    let t = tick(store, 2).await;
    let read_only_hint = "; the server is read-only (a hot standby or a read-only replica): point the URL at the primary";
    let err = take(store, &["read-only job"], t)
        .await
        .expect_err("take refused");
    let msg = err.to_string();
    assert!(
        matches!(
            pg(&err),
            Error::Statement {
                operation: "take leases",
                ..
            }
        ),
        "{msg}"
    );
    // (PostgreSQL names the statement's top level: the take is a SELECT over an INSERT.)
    assert!(
        msg.contains("cannot execute SELECT in a read-only transaction"),
        "{msg}"
    );
    assert!(msg.ends_with(read_only_hint), "{msg}");
    assert_eq!(err.store_failure(), Some(StoreFailure::ReadOnly), "{msg}");
    println!("take on a read-only server: {msg}");
    let err = store.renew(keys, ttl()).await.expect_err("renew refused");
    let msg = err.to_string();
    assert!(
        matches!(
            pg(&err),
            Error::Statement {
                operation: "renew leases",
                ..
            }
        ),
        "{msg}"
    );
    assert!(msg.contains("in a read-only transaction"), "{msg}");
    assert!(msg.ends_with(read_only_hint), "{msg}");
    let err = store
        .release(keys, Release::Completed)
        .await
        .expect_err("release refused");
    assert!(err.to_string().ends_with(read_only_hint), "{err}");
    store
        .now()
        .await
        .expect("the clock reads on a read-only server");
}

/// A hot standby of a [`TestServer`]: `pg_basebackup -R` of the primary into a
/// directory of its own, started on another port. Like test-postgres' servers it
/// runs under a small shell that stops it and removes its directory when our end of
/// its stdin closes, however this process ends.
struct Standby {
    shell: Child,
    stdin: Option<ChildStdin>,
    dir: PathBuf,
    port: u16,
}

const STANDBY: &str = r#"
set -u
dir=$1 primary=$2 port=$3 postgres=$4 basebackup=$5
pg=
cleanup() {
    if [ -n "$pg" ]; then kill -INT "$pg" 2>/dev/null; wait "$pg"; fi
    rm -rf "$dir"
    exit 0
}
trap cleanup HUP INT TERM
if "$basebackup" -h 127.0.0.1 -p "$primary" -U postgres -D "$dir/data" -R -X stream -c fast \
    </dev/null >>"$dir/log" 2>&1
then
    "$postgres" -D "$dir/data" -p "$port" </dev/null >>"$dir/log" 2>&1 &
    pg=$!
    echo started
else
    echo failed
fi
while read -r _; do :; done
cleanup
"#;

impl Standby {
    fn start(primary: &TestServer) -> io::Result<Standby> {
        let root = Command::new("id").arg("-u").output()?.stdout == b"0\n";
        let owner = if root {
            let id = |flag: &str| -> io::Result<u32> {
                let out = Command::new("id").args([flag, "postgres"]).output()?;
                String::from_utf8_lossy(&out.stdout)
                    .trim()
                    .parse()
                    .map_err(io::Error::other)
            };
            Some((id("-u")?, id("-g")?))
        } else {
            None
        };
        let dir = std::env::temp_dir().join(format!(
            "hostile-standby-{}-{}",
            std::process::id(),
            primary.port()
        ));
        std::fs::create_dir(&dir)?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))?;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let (postgres, basebackup) = binaries()?;
        let mut command = Command::new("sh");
        command
            .args(["-c", STANDBY, "hostile-standby"])
            .arg(&dir)
            .arg(primary.port().to_string())
            .arg(port.to_string())
            .arg(postgres)
            .arg(basebackup)
            .current_dir(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0);
        if let Some((uid, gid)) = owner {
            command.uid(uid).gid(gid);
        }
        let mut shell = command.spawn()?;
        let stdin = shell.stdin.take();
        let mut reply = String::new();
        BufReader::new(shell.stdout.take().expect("stdout")).read_line(&mut reply)?;
        let standby = Standby {
            shell,
            stdin,
            dir,
            port,
        };
        if reply.trim() == "started" {
            Ok(standby)
        } else {
            Err(io::Error::other(format!(
                "pg_basebackup failed ({}):\n{}",
                reply.trim(),
                standby.log()
            )))
        }
    }

    fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    /// Waits until the standby accepts connections (it has replayed to a consistent
    /// state) and checks that it is one.
    async fn ready(&self, database: &str) -> DatabaseConnection {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
        loop {
            let mut options = ConnectOptions::new(self.url(database));
            options
                .max_connections(1)
                .connect_timeout(Duration::from_secs(5))
                .sqlx_logging(false);
            if let Ok(conn) = Database::connect(options).await
                && conn.execute_unprepared("SELECT 1").await.is_ok()
            {
                let row = conn
                    .query_one_raw(Statement::from_string(
                        DbBackend::Postgres,
                        "SELECT pg_is_in_recovery() AS standby",
                    ))
                    .await
                    .expect("query")
                    .expect("row");
                assert!(row.try_get::<bool>("", "standby").expect("bool"));
                return conn;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the standby did not accept connections; its log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Standby {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.shell.wait();
    }
}

/// `postgres` as test-postgres finds it (the first on PATH next to `initdb`, else
/// the newest `/usr/lib/postgresql/*/bin`), and a `pg_basebackup` of the same install
/// if there is one.
fn binaries() -> io::Result<(PathBuf, PathBuf)> {
    let has = |dir: &Path, bin: &str| dir.join(bin).is_file();
    let path: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    let mut installs: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .collect();
    installs.sort();
    let installs: Vec<PathBuf> = installs.into_iter().rev().map(|(_, d)| d).collect();
    let postgres = path
        .iter()
        .chain(&installs)
        .find(|d| has(d, "initdb") && has(d, "postgres"))
        .map(|d| d.join("postgres"));
    let basebackup = postgres
        .as_deref()
        .and_then(Path::parent)
        .into_iter()
        .chain(installs.iter().map(PathBuf::as_path))
        .chain(path.iter().map(PathBuf::as_path))
        .find(|d| has(d, "pg_basebackup"))
        .map(|d| d.join("pg_basebackup"));
    match (postgres, basebackup) {
        (Some(p), Some(b)) => Ok((p, b)),
        _ => Err(io::Error::new(
            io::ErrorKind::NotFound,
            "postgres and pg_basebackup not found on PATH nor in /usr/lib/postgresql/*/bin",
        )),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_standby_is_refused_at_open_and_its_writes_name_the_primary() {
    let primary = tokio::task::spawn_blocking(TestServer::start)
        .await
        .expect("join")
        .expect("primary");
    // One database migrated on the primary (the usual case), one not.
    let migrated_url = primary.create_database().await;
    let fresh_url = primary.create_database().await;
    let on_primary = store(&migrated_url).await;
    let t = tick(&on_primary, 0).await;
    let keys = take(&on_primary, &["replicated job"], t)
        .await
        .expect("take");
    let standby = tokio::task::spawn_blocking(move || {
        let standby = Standby::start(&primary);
        (primary, standby)
    })
    .await
    .expect("join");
    let (_primary, standby) = (standby.0, standby.1.expect("standby"));
    let migrated = database_of(&migrated_url);
    let conn = standby.ready(migrated).await;
    assert!(exists(&conn, "scheduler_leases").await, "replicated");

    let hint = "; point the URL at the primary: the store writes a lease row for every tick";
    for database in [migrated, database_of(&fresh_url)] {
        let err = connect(&standby.url(database), PostgresOptions::default())
            .await
            .expect_err("refused");
        let msg = err.to_string();
        assert!(
            matches!(&err, Error::Migrate { migration, .. } if migration == "setup"),
            "{msg}"
        );
        assert_eq!(
            msg,
            format!(
                "migration setup failed: the server is read-only: it is a hot standby (pg_is_in_recovery() is true){hint}"
            )
        );
        println!("open on a hot standby: {msg}");
    }
    // Without migrations it opens (nothing is written), and every write says why it fails.
    let replica = connect(
        &standby.url(migrated),
        PostgresOptions::default().migrate(false),
    )
    .await
    .expect("opens without migrating");
    assert_writes_refused(&replica, &keys).await;

    // Promoted while a store opens on it (a failover): the store asks again until its
    // connect timeout and opens once the server is writable.
    let url = standby.url(migrated);
    let opening = tokio::spawn(async move {
        connect(
            &url,
            PostgresOptions::default().connect_timeout(Duration::from_secs(30)),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    exec(&conn, "SELECT pg_promote()").await;
    let promoted = opening
        .await
        .expect("join")
        .expect("opens once the standby is promoted");
    let t = tick(&promoted, 10).await;
    take(&promoted, &["after the promotion"], t)
        .await
        .expect("writable");
}

#[tokio::test]
async fn a_database_read_only_by_default_is_refused_at_open_and_its_writes_name_the_primary() {
    let db = TestDb::new().await;
    // The default applies to sessions that start after the ALTER. Behind PgBouncer,
    // the server sessions it opened for a store would stay writable: so the lease is
    // set up on the server directly, and nothing reaches this database through
    // `db.url()` before it is read-only by default.
    let writable = store(db.direct_url()).await;
    let t = tick(&writable, 0).await;
    let keys = take(&writable, &["job"], t).await.expect("take");
    exec(
        &admin(db.url()).await,
        &format!(
            "ALTER DATABASE {} SET default_transaction_read_only = on",
            db.name()
        ),
    )
    .await;
    let err = connect(db.url(), PostgresOptions::default())
        .await
        .expect_err("refused");
    assert_eq!(
        err.to_string(),
        "migration setup failed: the server is read-only: transactions are read-only by default \
         (default_transaction_read_only is on); point the URL at the primary, or turn default_transaction_read_only \
         off for this database and user"
    );
    println!("open on a read-only database: {err}");
    let read_only = connect(db.url(), PostgresOptions::default().migrate(false))
        .await
        .expect("opens without migrating");
    assert_writes_refused(&read_only, &keys).await;
}

struct EverySecond;

#[scheduler_core::async_trait]
impl Idempotent for EverySecond {
    fn name(&self) -> &str {
        "every-second"
    }
    fn schedule(&self) -> Schedule {
        Schedule::every(Duration::from_secs(1))
    }
    async fn run(&self, _ctx: JobContext) -> Result<(), BoxError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_scheduler_on_a_read_only_database_says_so_in_its_health_and_keeps_turning() {
    let db = TestDb::new().await;
    // Migrated while writable, then read-only by default for every new session.
    drop(store(db.direct_url()).await);
    exec(
        &admin(db.url()).await,
        &format!(
            "ALTER DATABASE {} SET default_transaction_read_only = on",
            db.name()
        ),
    )
    .await;
    let read_only = connect(db.url(), PostgresOptions::default().migrate(false))
        .await
        .expect("opens without migrating");
    let scheduler = Scheduler::builder(read_only)
        .node_id("a")
        .lease_ttl(Duration::from_secs(4))
        .job(EverySecond)
        .build()
        .expect("build");
    let health = scheduler.health();
    let probe = async {
        let mut report = health.check(Duration::from_secs(2)).await;
        for _ in 0..40 {
            tokio::time::sleep(Duration::from_millis(250)).await;
            report = health.check(Duration::from_secs(2)).await;
            if report.store_problem.is_some() {
                break;
            }
        }
        // Still turning a few seconds on.
        tokio::time::sleep(Duration::from_secs(2)).await;
        (report, health.check(Duration::from_secs(2)).await)
    };
    let (_, (first, later)) = tokio::join!(
        scheduler.run_until(tokio::time::sleep(Duration::from_secs(15))),
        probe
    );
    assert!(first.database, "the clock still reads: {first:?}");
    assert_eq!(
        first.store_problem,
        Some(StoreFailure::ReadOnly),
        "{first:?}"
    );
    assert!(later.scheduler, "the loop keeps turning: {later:?}");
    assert_eq!(
        later.store_problem,
        Some(StoreFailure::ReadOnly),
        "{later:?}"
    );
}
