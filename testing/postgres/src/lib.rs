//! Test support that brings its own PostgreSQL, so tests never need a running server.
//!
//! - [`TestDb::new`] gives each test a fresh, empty database. The first call in a test
//!   binary starts one throwaway server for the whole process (a fresh `initdb` in a
//!   temporary directory, listening on a free port of `127.0.0.1`); later calls only
//!   run `CREATE DATABASE` on it. When `DATABASE_URL` is set, no server is started:
//!   the databases are created on that server instead.
//! - [`TestServer::start`] gives a test a server of its own, which it may
//!   [stop](TestServer::stop) and [restart](TestServer::restart) to play a database
//!   restart.
//! - [`TestServer::start_replica`] gives it a streaming replica (a server of its own,
//!   from `pg_basebackup -R`), [`TestServer::replicate`] makes the primary wait for it
//!   ([`Replication::Synchronous`]) or not, and [`TestServer::crash`],
//!   [`TestServer::promote`] and [`TestServer::restart_as_standby`] play a failover
//!   and the old primary's return as a read-only node.
//! - [`PgBouncer::start`] puts PgBouncer (transaction pooling) in front of a server.
//!   [`TestDb::through_pgbouncer`] and [`TestServer::start_through_pgbouncer`] ask for
//!   one explicitly; [`TestDb::new`] and [`TestServer::start`] go through one when the
//!   environment variable [`PGBOUNCER_ENV`] says so ([`pgbouncer_mode`]). Through
//!   PgBouncer, [`TestDb::url`] is PgBouncer's and [`TestDb::direct_url`] the server's,
//!   for a test's own set-up and inspection.
//! - [`through_pgbouncer`] is this crate with `TestDb::new` and `TestServer::start`
//!   going through PgBouncer: a test binary that reruns test files written against
//!   `test_postgres` behind PgBouncer makes that name mean this module (see there).
//!
//! # Quick start
//!
//! ```no_run
//! use sea_orm::{ConnectionTrait, Database};
//! use test_postgres::TestDb;
//!
//! # async fn example() -> Result<(), sea_orm::DbErr> {
//! let db = TestDb::new().await;
//! let conn = Database::connect(db.url()).await?;
//! conn.execute_unprepared("CREATE TABLE job (id bigint PRIMARY KEY)").await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Cleanup
//!
//! libtest has no global teardown and statics are never dropped, so each server runs
//! under a small watchdog shell whose standard input is a pipe held by the test
//! process. However that process ends (success, panic, `std::process::exit`, `SIGKILL`),
//! the kernel closes the pipe; the watchdog then stops the server (fast shutdown) and
//! removes its directory. The watchdog sits in a process group of its own, so a
//! Ctrl-C aimed at the test does not kill it before it has cleaned up. That cleanup
//! runs just after the test process has exited, taking a fraction of a second.
//!
//! When the process runs as root, `initdb` and `postgres` (which refuse to run as
//! root) run as the `postgres` system user, which then owns the temporary directory.
//!
//! The server keeps PostgreSQL's durable defaults (`fsync` and `synchronous_commit`
//! on), so benchmarks measure real commits; it listens on TCP only, with trust
//! authentication for the `postgres` role, `max_connections = 200` and
//! `shared_buffers = 64MB`.

#![warn(missing_docs)]

mod pgbouncer;
mod replication;
pub mod through_pgbouncer;

pub use pgbouncer::{PGBOUNCER_ENV, PgBouncer, direct_url, inspect, pgbouncer_mode};
pub use replication::Replication;

use std::collections::hash_map::RandomState;
use std::env;
use std::ffi::OsString;
use std::fs;
use std::hash::{BuildHasher, Hasher};
use std::io::{self, BufRead, BufReader, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{self, Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use sea_orm::{ConnectOptions, ConnectionTrait, Database, DbErr};

/// How many free ports to try when a server fails to start (another process may
/// take the port between our probe and the server's bind).
const START_ATTEMPTS: u32 = 5;

/// How many lines of the server log an error message quotes.
const LOG_TAIL_LINES: usize = 40;

/// The watchdog: `sh -c WATCHDOG test-postgres-watchdog DIR [SOURCE_PORT]`, run as the
/// user that owns DIR. It runs `initdb` (or, given `SOURCE_PORT`, takes a base backup
/// of the server on `127.0.0.1:SOURCE_PORT` with `pg_basebackup -R`: a streaming
/// replica of it), replies `initialized` or `failed`, then answers one line per
/// command read from stdin:
///
/// - `start PORT` → `started`, `exited` (the server stopped during start-up, e.g. the
///   port was taken) or `timeout` (not ready after 60 s of polling: generous, as a
///   loaded machine may take several seconds to start a server);
/// - `standby PORT` → as `start`, the server started as a read-only standby
///   (`standby.signal`; it follows nobody unless it already did);
/// - `stop` → `stopped`, once the server has exited after a fast shutdown;
/// - `crash` → `stopped`, once the server has exited after an immediate shutdown
///   (`SIGQUIT`, what `pg_ctl stop -m immediate` sends: no checkpoint, connections
///   dropped, as a crash of the machine would leave it apart from the page cache);
/// - `promote` → `promoted` once a standby has left recovery (`pg_ctl promote -w`),
///   else `failed`.
///
/// On end of input (the test process closed the pipe or exited) or a termination
/// signal, it stops the server and removes DIR. PostgreSQL runs as a child of a
/// subshell of the watchdog, so it is always reaped here and never left to `init`.
const WATCHDOG: &str = r#"
set -u
trap '' PIPE
dir=$1
data=$dir/data
log=$dir/postgres.log
runner=
exec 2>>"$log"

# stop [SIGNAL]: INT (fast shutdown) by default, QUIT for an immediate one.
stop() {
    if [ -n "$runner" ]; then
        pid=$(sed -n 1p "$data/postmaster.pid" 2>/dev/null)
        if [ -n "$pid" ]; then kill -"${1:-INT}" "$pid" 2>/dev/null; fi
        wait "$runner"
        runner=
    fi
}

shutdown() {
    stop
    rm -rf "$dir"
    exit 0
}
trap shutdown HUP INT TERM

start() {
    stop
    rm -f "$dir/exited" "$data/postmaster.pid"
    (postgres -D "$data" -p "$1" </dev/null >>"$log" 2>&1; echo "$?" >"$dir/exited") &
    runner=$!
    i=0
    while [ "$i" -lt 3000 ]; do
        if [ -e "$dir/exited" ]; then
            wait "$runner"
            runner=
            echo exited
            return
        fi
        case $(sed -n 8p "$data/postmaster.pid" 2>/dev/null) in
            ready* | standby*) echo started; return ;;
        esac
        sleep 0.02
        i=$((i + 1))
    done
    echo timeout
}

if [ -n "${2:-}" ]; then
    # A replica: the source's configuration comes with the backup; -R writes
    # standby.signal and primary_conninfo (to the source, as reached here).
    if pg_basebackup -h 127.0.0.1 -p "$2" -U postgres -D "$data" -R -X stream \
        --no-sync --checkpoint=fast </dev/null >>"$log" 2>&1
    then
        echo initialized
    else
        echo failed
    fi
elif initdb -D "$data" -U postgres --auth=trust -E UTF8 --locale=C --no-sync \
    </dev/null >>"$log" 2>&1
then
    cat >>"$data/postgresql.conf" <<'EOF'

# test-postgres
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
max_connections = 200
shared_buffers = 64MB
EOF
    echo initialized
else
    echo failed
fi

while read -r command argument; do
    case $command in
        start) start "$argument" ;;
        standby) stop; touch "$data/standby.signal"; start "$argument" ;;
        stop) stop; echo stopped ;;
        crash) stop QUIT; echo stopped ;;
        promote)
            if pg_ctl promote -w -t 60 -D "$data" >>"$log" 2>&1; then
                echo promoted
            else
                echo failed
            fi
            ;;
    esac
done
shutdown
"#;

/// A database of its own for one test: a fresh, empty database on the shared server.
///
/// Dropping it leaves the database in place; the whole server goes away with the
/// test process.
#[derive(Debug, Clone)]
pub struct TestDb {
    url: String,
    direct_url: String,
    name: String,
}

impl TestDb {
    /// Creates a fresh database (unique name) on the shared server of this test
    /// binary, starting the server on first use.
    ///
    /// When the environment variable `DATABASE_URL` is set, no server is started: the
    /// database is created on that server, and [`url`](Self::url) is `DATABASE_URL`
    /// with the database name replaced.
    ///
    /// Works from any tokio runtime, including `#[tokio::test]`'s current-thread
    /// one: no connection is kept between calls.
    ///
    /// In [`pgbouncer_mode`] (the environment variable [`PGBOUNCER_ENV`]) it is
    /// [`TestDb::through_pgbouncer`].
    ///
    /// # Panics
    ///
    /// When the shared server cannot be started (the message quotes the end of the
    /// server log) or the database cannot be created.
    pub async fn new() -> TestDb {
        Self::create(Route::from_env()).await
    }

    /// Like [`TestDb::new`], but [`url`](Self::url) goes through the PgBouncer of this
    /// test binary (transaction pooling, `…?pgbouncer=true`), started in front of the
    /// shared server (or of `DATABASE_URL`'s) on first use; never dropped, cleaned up
    /// by its watchdog when the process exits. [`direct_url`](Self::direct_url) is
    /// the server's.
    ///
    /// # Panics
    ///
    /// As [`TestDb::new`], and when PgBouncer is not installed or does not start.
    pub async fn through_pgbouncer() -> TestDb {
        Self::create(Route::ThroughPgBouncer).await
    }

    async fn create(route: Route) -> TestDb {
        let admin = admin_url().await;
        let name = database_name();
        if let Err(error) = create_database(&admin, &name).await {
            let server = without_credentials(&admin);
            panic!("test-postgres: could not create database {name} on {server}: {error}");
        }
        let direct_url = with_database(&admin, &name);
        let url = match route {
            Route::ThroughPgBouncer => shared_bouncer().await.url(&name),
            Route::Direct => direct_url.clone(),
        };
        TestDb {
            url,
            direct_url,
            name,
        }
    }

    /// The URL of the database, e.g. `postgres://postgres@127.0.0.1:PORT/DBNAME`;
    /// through PgBouncer, PgBouncer's (`…?pgbouncer=true`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The URL of the database on the server itself, never through PgBouncer: for a
    /// test's own statements (set-up, inspection), which need not follow the rules of
    /// transaction pooling.
    pub fn direct_url(&self) -> &str {
        &self.direct_url
    }

    /// The name of the database.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// A server of its own, that a test may stop and start again (to play a database
/// restart).
///
/// The server is stopped and its directory removed on drop (which waits for it) and
/// at process exit, however the process ends.
#[derive(Debug)]
pub struct TestServer {
    watchdog: Mutex<Watchdog>,
    port: u16,
    bouncer: Option<PgBouncer>,
}

impl TestServer {
    /// Starts a fresh server on a free port of `127.0.0.1` and waits until it accepts
    /// connections. Ignores `DATABASE_URL`.
    ///
    /// This blocks the calling thread (a second or so, for `initdb`); it may be called
    /// from inside a tokio runtime.
    ///
    /// # Errors
    ///
    /// When the PostgreSQL binaries cannot be found, `initdb` fails, or the server
    /// does not start; the message quotes the end of the server log.
    ///
    /// In [`pgbouncer_mode`] (the environment variable [`PGBOUNCER_ENV`]) it is
    /// [`TestServer::start_through_pgbouncer`].
    pub fn start() -> io::Result<TestServer> {
        Self::launch(Route::from_env())
    }

    /// Like [`TestServer::start`], and also starts a [`PgBouncer`] in front of the
    /// server, which stays up across restarts of the server: [`url`](Self::url) is
    /// PgBouncer's, [`direct_url`](Self::direct_url) the server's.
    ///
    /// # Errors
    ///
    /// As [`TestServer::start`], and when PgBouncer is not installed or does not start.
    pub fn start_through_pgbouncer() -> io::Result<TestServer> {
        Self::launch(Route::ThroughPgBouncer)
    }

    fn launch(route: Route) -> io::Result<TestServer> {
        let (watchdog, port) = launch(None)?;
        let bouncer = match route {
            Route::ThroughPgBouncer => Some(PgBouncer::start(port)?),
            Route::Direct => None,
        };
        Ok(TestServer {
            watchdog: Mutex::new(watchdog),
            port,
            bouncer,
        })
    }

    /// The URL of `database` on this server: `postgres://postgres@127.0.0.1:PORT/DATABASE`;
    /// through PgBouncer, PgBouncer's.
    pub fn url(&self, database: &str) -> String {
        match &self.bouncer {
            Some(bouncer) => bouncer.url(database),
            None => server_url(self.port, database),
        }
    }

    /// The URL of `database` on the server itself, never through PgBouncer.
    pub fn direct_url(&self, database: &str) -> String {
        server_url(self.port, database)
    }

    /// The TCP port the server listens on, the same across restarts.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops the server (fast shutdown: open connections are terminated) and waits
    /// until it has exited. Stopping a stopped server does nothing.
    ///
    /// # Errors
    ///
    /// When the watchdog process has gone away.
    pub fn stop(&self) -> io::Result<()> {
        let mut watchdog = self.watchdog.lock().unwrap_or_else(PoisonError::into_inner);
        match watchdog.request("stop")?.as_str() {
            "stopped" => Ok(()),
            reply => Err(io::Error::other(format!(
                "test-postgres: unexpected reply {reply:?} to stop"
            ))),
        }
    }

    /// Starts the server again on the same port and data directory, and waits until it
    /// accepts connections. Restarting a running server stops it first.
    ///
    /// # Errors
    ///
    /// When the server does not start, e.g. because another process took its port
    /// meanwhile; the message quotes the end of the server log.
    pub fn restart(&self) -> io::Result<()> {
        let mut watchdog = self.watchdog.lock().unwrap_or_else(PoisonError::into_inner);
        watchdog.start(self.port)
    }

    /// Creates a fresh, empty database with a unique name and returns its URL.
    ///
    /// # Panics
    ///
    /// When the database cannot be created, e.g. because the server is stopped.
    pub async fn create_database(&self) -> String {
        let admin = self.direct_url("postgres");
        let name = database_name();
        if let Err(error) = create_database(&admin, &name).await {
            let server = without_credentials(&admin);
            panic!("test-postgres: could not create database {name} on {server}: {error}");
        }
        self.url(&name)
    }
}

/// The URL of the shared server's `postgres` admin database, starting the server on
/// first use; when `DATABASE_URL` is set, that URL itself.
///
/// # Panics
///
/// When the shared server cannot be started; the message quotes the end of the
/// server log.
pub async fn admin_url() -> String {
    match external_url() {
        Some(url) => url,
        None => shared_server().await.url("postgres"),
    }
}

/// The server shared by every [`TestDb`] of the process; never dropped, cleaned up by
/// its watchdog when the process exits.
#[derive(Debug)]
struct SharedServer {
    _watchdog: Watchdog,
    port: u16,
}

impl SharedServer {
    fn url(&self, database: &str) -> String {
        server_url(self.port, database)
    }
}

static SHARED: OnceLock<SharedServer> = OnceLock::new();

static SHARED_BOUNCER: OnceLock<PgBouncer> = OnceLock::new();

/// Whether a [`TestDb`] or [`TestServer`] is reached through PgBouncer.
#[derive(Debug, Clone, Copy)]
enum Route {
    Direct,
    ThroughPgBouncer,
}

impl Route {
    /// What [`TestDb::new`] and [`TestServer::start`] do: [`pgbouncer_mode`].
    fn from_env() -> Route {
        if pgbouncer_mode() {
            Route::ThroughPgBouncer
        } else {
            Route::Direct
        }
    }
}

/// The PgBouncer in front of the shared server (or of `DATABASE_URL`'s), started on
/// first use; never dropped, cleaned up by its watchdog when the process exits.
async fn shared_bouncer() -> &'static PgBouncer {
    if let Some(bouncer) = SHARED_BOUNCER.get() {
        return bouncer;
    }
    let admin = admin_url().await;
    let started = tokio::task::spawn_blocking(move || {
        SHARED_BOUNCER.get_or_init(|| {
            match pgbouncer::Upstream::from_url(&admin).and_then(|up| PgBouncer::start_for(&up)) {
                Ok(bouncer) => bouncer,
                Err(error) => panic!("test-postgres: could not start PgBouncer: {error}"),
            }
        })
    })
    .await;
    match started {
        Ok(bouncer) => bouncer,
        Err(error) => match error.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(error) => panic!("test-postgres: starting PgBouncer failed: {error}"),
        },
    }
}

/// Returns the shared server, starting it on a blocking thread on first use. A failed
/// start panics, and the next caller tries again.
async fn shared_server() -> &'static SharedServer {
    if let Some(server) = SHARED.get() {
        return server;
    }
    match tokio::task::spawn_blocking(start_shared_server).await {
        Ok(server) => server,
        Err(error) => match error.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(error) => panic!("test-postgres: starting the shared server failed: {error}"),
        },
    }
}

fn start_shared_server() -> &'static SharedServer {
    SHARED.get_or_init(|| match launch(None) {
        Ok((watchdog, port)) => SharedServer {
            _watchdog: watchdog,
            port,
        },
        Err(error) => {
            panic!("test-postgres: could not start the shared PostgreSQL server: {error}")
        }
    })
}

/// A running watchdog process and the two ends of its command pipe.
///
/// Dropping it closes the command pipe and waits until the watchdog has stopped the
/// server and removed the directory.
#[derive(Debug)]
struct Watchdog {
    child: Child,
    commands: Option<ChildStdin>,
    replies: BufReader<ChildStdout>,
    dir: PathBuf,
}

impl Watchdog {
    /// Creates a fresh directory, spawns the watchdog in it and waits until `initdb`
    /// has finished (or, given a `source` port, the base backup of that server).
    fn spawn(source: Option<u16>) -> io::Result<Watchdog> {
        let bin = postgres_bin_dir()?;
        let owner = postgres_owner()?;
        let dir = fresh_dir(owner)?;
        let child = match spawn_watchdog(&dir, &bin, owner, source) {
            Ok(child) => child,
            Err(error) => {
                let _ = fs::remove_dir_all(&dir);
                return Err(error);
            }
        };
        let mut watchdog = Watchdog::from_child(child, dir)?;
        match watchdog.read_reply()?.as_str() {
            "initialized" => Ok(watchdog),
            reply => Err(io::Error::other(format!(
                "test-postgres: {} failed ({reply}) in {}; server log:\n{}",
                if source.is_some() {
                    "pg_basebackup"
                } else {
                    "initdb"
                },
                watchdog.dir.display(),
                watchdog.log_tail()
            ))),
        }
    }

    fn from_child(mut child: Child, dir: PathBuf) -> io::Result<Watchdog> {
        let (Some(commands), Some(replies)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            let _ = fs::remove_dir_all(&dir);
            return Err(io::Error::other(
                "test-postgres: watchdog spawned without pipes",
            ));
        };
        Ok(Watchdog {
            child,
            commands: Some(commands),
            replies: BufReader::new(replies),
            dir,
        })
    }

    /// Starts the server on `port` and waits until it accepts connections.
    fn start(&mut self, port: u16) -> io::Result<()> {
        self.start_as("start", port)
    }

    /// Sends `command PORT` (`start`, or `standby`: read-only) and waits until the
    /// server accepts connections.
    fn start_as(&mut self, command: &str, port: u16) -> io::Result<()> {
        let reply = self.request(&format!("{command} {port}"))?;
        if reply == "started" {
            return Ok(());
        }
        let kind = if reply == "exited" {
            io::ErrorKind::AddrInUse // the likely cause, and the one worth a retry
        } else {
            io::ErrorKind::TimedOut
        };
        Err(io::Error::new(
            kind,
            format!(
                "test-postgres: postgres did not start on port {port} ({reply}); server log:\n{}",
                self.log_tail()
            ),
        ))
    }

    /// Sends one command line and returns the reply line.
    fn request(&mut self, command: &str) -> io::Result<String> {
        let commands = self.commands.as_mut().ok_or_else(|| {
            io::Error::new(io::ErrorKind::BrokenPipe, "test-postgres: watchdog closed")
        })?;
        writeln!(commands, "{command}")?;
        commands.flush()?;
        self.read_reply()
    }

    fn read_reply(&mut self) -> io::Result<String> {
        let mut reply = String::new();
        if self.replies.read_line(&mut reply)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "test-postgres: the watchdog exited unexpectedly; server log:\n{}",
                    self.log_tail()
                ),
            ));
        }
        Ok(reply.trim_end().to_owned())
    }

    /// The last lines of the server log (`initdb` and `postgres` output).
    fn log_tail(&self) -> String {
        let path = self.dir.join("postgres.log");
        match fs::read_to_string(&path) {
            Ok(log) => {
                let lines: Vec<&str> = log.lines().collect();
                lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
            }
            Err(error) => format!("(could not read {}: {error})", path.display()),
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.commands.take());
        let _ = self.child.wait();
    }
}

/// Spawns a watchdog, on a free port (retrying with another one when the server
/// exits during start-up): a fresh server, or given a `source` port, a streaming
/// replica of the server there.
fn launch(source: Option<u16>) -> io::Result<(Watchdog, u16)> {
    let mut watchdog = Watchdog::spawn(source)?;
    let mut attempt = 1;
    loop {
        let port = free_port()?;
        match watchdog.start(port) {
            Ok(()) => return Ok((watchdog, port)),
            Err(error) if error.kind() == io::ErrorKind::AddrInUse && attempt < START_ATTEMPTS => {
                attempt += 1;
            }
            Err(error) => return Err(error),
        }
    }
}

fn spawn_watchdog(
    dir: &Path,
    bin: &Path,
    owner: Option<(u32, u32)>,
    source: Option<u16>,
) -> io::Result<Child> {
    let mut path = vec![bin.to_path_buf()];
    // `initdb` may be a link into the installation's own directory, which also
    // holds `pg_basebackup` and `pg_ctl`.
    if let Some(real) = fs::canonicalize(bin.join("initdb"))
        .ok()
        .and_then(|initdb| initdb.parent().map(Path::to_path_buf))
        .filter(|real| real != bin)
    {
        path.push(real);
    }
    path.extend(env::split_paths(&env::var_os("PATH").unwrap_or_default()));
    let path: OsString = env::join_paths(path).map_err(io::Error::other)?;

    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(WATCHDOG)
        .arg("test-postgres-watchdog")
        .arg(dir)
        .args(source.map(|port| port.to_string()))
        .current_dir(dir)
        .env("PATH", path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        // Out of the test's process group, so that a Ctrl-C does not kill the
        // watchdog before it has cleaned up.
        .process_group(0);
    if let Some((uid, gid)) = owner {
        command.uid(uid).gid(gid);
    }
    command.spawn().map_err(|error| {
        io::Error::new(
            error.kind(),
            format!("test-postgres: could not spawn the watchdog shell: {error}"),
        )
    })
}

/// The directory holding `initdb` and `postgres`: the first on `PATH`, else the
/// newest `/usr/lib/postgresql/*/bin`.
fn postgres_bin_dir() -> io::Result<PathBuf> {
    let has_binaries = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    if let Some(dir) = env::var_os("PATH")
        .iter()
        .flat_map(env::split_paths)
        .find(|dir| has_binaries(dir))
    {
        return Ok(dir);
    }
    let newest = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version: u32 = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, dir)| has_binaries(dir))
        .max_by_key(|(version, _)| *version);
    newest.map(|(_, dir)| dir).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            "test-postgres: could not find initdb and postgres on PATH nor in \
             /usr/lib/postgresql/*/bin; install PostgreSQL or set DATABASE_URL",
        )
    })
}

/// The uid and gid to run PostgreSQL as: the `postgres` system user when we are root
/// (PostgreSQL refuses to run as root), else ourselves (`None`).
fn postgres_owner() -> io::Result<Option<(u32, u32)>> {
    if id(&["-u"])? != 0 {
        return Ok(None);
    }
    Ok(Some((id(&["-u", "postgres"])?, id(&["-g", "postgres"])?)))
}

fn id(args: &[&str]) -> io::Result<u32> {
    let output = Command::new("id")
        .args(args)
        .stderr(Stdio::piped())
        .output()?;
    let text = String::from_utf8_lossy(&output.stdout);
    match text.trim().parse() {
        Ok(id) if output.status.success() => Ok(id),
        _ => Err(io::Error::other(format!(
            "test-postgres: `id {}` failed: {}{}",
            args.join(" "),
            text.trim(),
            String::from_utf8_lossy(&output.stderr).trim()
        ))),
    }
}

/// Creates a fresh temporary directory, owned by the user PostgreSQL runs as.
fn fresh_dir(owner: Option<(u32, u32)>) -> io::Result<PathBuf> {
    loop {
        let dir = env::temp_dir().join(format!("test-postgres-{}", unique_suffix('-')));
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(error) => {
                return Err(io::Error::new(
                    error.kind(),
                    format!("test-postgres: could not create {}: {error}", dir.display()),
                ));
            }
        }
        if let Some((uid, gid)) = owner
            && let Err(error) = std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
        {
            let _ = fs::remove_dir(&dir);
            return Err(io::Error::new(
                error.kind(),
                format!(
                    "test-postgres: could not chown {} to postgres: {error}",
                    dir.display()
                ),
            ));
        }
        return Ok(dir);
    }
}

/// A free TCP port on 127.0.0.1, as the kernel hands one out.
fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

fn server_url(port: u16, database: &str) -> String {
    format!("postgres://postgres@127.0.0.1:{port}/{database}")
}

fn external_url() -> Option<String> {
    env::var("DATABASE_URL")
        .ok()
        .filter(|url| !url.trim().is_empty())
}

/// `test_<pid>_<counter>_<random>`, unique within the process and across processes.
fn database_name() -> String {
    format!("test_{}", unique_suffix('_'))
}

fn unique_suffix(separator: char) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let counter = COUNTER.fetch_add(1, Ordering::Relaxed);
    let random = RandomState::new().build_hasher().finish() as u32;
    format!(
        "{}{separator}{counter}{separator}{random:08x}",
        process::id()
    )
}

/// `url` with its database (path) replaced by `database`, keeping any query string.
fn with_database(url: &str, database: &str) -> String {
    let authority_start = url.find("://").map_or(0, |index| index + 3);
    let authority_end = url[authority_start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |index| authority_start + index);
    let (head, tail) = url.split_at(authority_end);
    let query = tail.find(['?', '#']).map_or("", |index| &tail[index..]);
    format!("{head}/{database}{query}")
}

/// `url` without its user and password, fit for an error message.
fn without_credentials(url: &str) -> String {
    let authority_start = url.find("://").map_or(0, |index| index + 3);
    let authority_end = url[authority_start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |index| authority_start + index);
    match url[authority_start..authority_end].rfind('@') {
        Some(at) => format!(
            "{}{}",
            &url[..authority_start],
            &url[authority_start + at + 1..]
        ),
        None => url.to_owned(),
    }
}

/// Connects to `admin_url`, creates `name` and disconnects (no pool outlives the call,
/// so each test's runtime may call it).
async fn create_database(admin_url: &str, name: &str) -> Result<(), DbErr> {
    let mut options = ConnectOptions::new(admin_url);
    options
        .max_connections(1)
        .min_connections(0)
        .connect_timeout(Duration::from_secs(30))
        .sqlx_logging(false);
    let connection = Database::connect(options).await?;
    let created = connection
        .execute_unprepared(&format!("CREATE DATABASE \"{name}\""))
        .await;
    let closed = connection.close().await;
    created?;
    closed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_database_replaces_the_path() {
        assert_eq!(
            with_database("postgres://u:p@h:5432/app", "test_1"),
            "postgres://u:p@h:5432/test_1"
        );
        assert_eq!(with_database("postgres://h", "x"), "postgres://h/x");
        assert_eq!(with_database("postgres://h/", "x"), "postgres://h/x");
        assert_eq!(
            with_database("postgres://h:1/app?sslmode=disable", "x"),
            "postgres://h:1/x?sslmode=disable"
        );
        assert_eq!(
            with_database("postgres://h:1?sslmode=disable", "x"),
            "postgres://h:1/x?sslmode=disable"
        );
    }

    #[test]
    fn error_messages_leave_out_credentials() {
        assert_eq!(
            without_credentials("postgres://u:p@ss@h:5432/app?x=@"),
            "postgres://h:5432/app?x=@"
        );
        assert_eq!(without_credentials("postgres://h/app"), "postgres://h/app");
    }

    #[test]
    fn database_names_are_unique_identifiers() {
        let first = database_name();
        let second = database_name();
        assert_ne!(first, second);
        assert!(
            first
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
            "{first}"
        );
        assert!(
            first.len() < 63,
            "{first} is longer than a PostgreSQL identifier"
        );
    }
}
