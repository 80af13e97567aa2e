//! PgBouncer in transaction pooling mode in front of a test server.

use std::fmt::Write as _;
use std::fs;
use std::io::{self, BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, PoisonError};

use super::{START_ATTEMPTS, free_port, fresh_dir, postgres_owner};

/// The environment variable that puts PgBouncer in front of every server of the
/// process (`1` or `true`), to rerun any test binary through it; see [`pgbouncer_mode`].
pub const PGBOUNCER_ENV: &str = "TEST_POSTGRES_PGBOUNCER";

/// The watchdog of one PgBouncer: `sh -c BOUNCER test-postgres-pgbouncer DIR BIN`, run as
/// the user that owns DIR (PgBouncer refuses to run as root). It starts PgBouncer on
/// `DIR/pgbouncer.ini` and replies `started` once it listens, `exited`, or `timeout`
/// (not listening after 60 s of polling, generous for a loaded machine); then it
/// waits for the end of its input (the test process closed the pipe or exited) or a
/// termination signal, stops PgBouncer and removes DIR.
const BOUNCER: &str = r#"
set -u
trap '' PIPE
dir=$1
bin=$2
log=$dir/pgbouncer.log
exec 2>>"$log"
"$bin" "$dir/pgbouncer.ini" </dev/null >>"$log" 2>&1 &
pid=$!

shutdown() {
    # SIGTERM: immediate shutdown (SIGINT would wait for clients still inside a
    # transaction, e.g. a paused test instance).
    kill -TERM "$pid" 2>/dev/null
    wait "$pid"
    rm -rf "$dir"
    exit 0
}
trap shutdown HUP INT TERM

i=0
while :; do
    if ! kill -0 "$pid" 2>/dev/null; then echo exited; break; fi
    if grep -q "listening on 127.0.0.1" "$log"; then echo started; break; fi
    i=$((i + 1))
    if [ "$i" -gt 3000 ]; then echo timeout; break; fi
    sleep 0.02
done
while read -r _; do :; done
shutdown
"#;

/// PgBouncer 1.18+ in `pool_mode = transaction` in front of a PostgreSQL server,
/// listening on a free port of `127.0.0.1` with trust authentication.
///
/// Its URLs carry `pgbouncer=true`, which `scheduler_postgres::PostgresStore::connect`
/// understands (no named prepared statement outside the store's transactions). It is
/// stopped and its directory removed on drop and at process exit, however the
/// process ends.
#[derive(Debug)]
pub struct PgBouncer {
    child: Child,
    commands: Option<ChildStdin>,
    port: u16,
    user: String,
}

impl PgBouncer {
    /// Starts PgBouncer in front of the server on `127.0.0.1:server_port`, for the
    /// `postgres` user, and waits until it listens.
    ///
    /// # Errors
    /// When `pgbouncer` is not installed (`apt-get install pgbouncer`) or does not
    /// start; the message quotes its log.
    pub fn start(server_port: u16) -> io::Result<PgBouncer> {
        Self::start_for(&Upstream {
            host: "127.0.0.1".to_owned(),
            port: server_port,
            user: "postgres".to_owned(),
            password: None,
        })
    }

    pub(crate) fn start_for(upstream: &Upstream) -> io::Result<PgBouncer> {
        let mut attempt = 1;
        loop {
            match Self::try_start(upstream) {
                Ok(bouncer) => {
                    BOUNCERS
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push((bouncer.port, upstream.clone()));
                    return Ok(bouncer);
                }
                Err(error)
                    if error.kind() == io::ErrorKind::AddrInUse && attempt < START_ATTEMPTS =>
                {
                    attempt += 1;
                }
                started => return started,
            }
        }
    }

    fn try_start(upstream: &Upstream) -> io::Result<PgBouncer> {
        let owner = postgres_owner()?;
        let dir = fresh_dir(owner)?;
        let port = free_port()?;
        let written = write_config(&dir, port, upstream);
        let spawned = written.and_then(|()| spawn(&dir, owner));
        let mut child = match spawned {
            Ok(child) => child,
            Err(error) => {
                let _ = fs::remove_dir_all(&dir);
                return Err(error);
            }
        };
        let (Some(commands), Some(replies)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            let _ = fs::remove_dir_all(&dir);
            return Err(io::Error::other(
                "test-postgres: pgbouncer watchdog without pipes",
            ));
        };
        let log = read_log(&dir);
        let mut bouncer = PgBouncer {
            child,
            commands: Some(commands),
            port,
            user: upstream.user.clone(),
        };
        let mut reply = String::new();
        BufReader::new(replies).read_line(&mut reply)?;
        match reply.trim_end() {
            "started" => Ok(bouncer),
            other => {
                // Read the log before the watchdog removes the directory.
                let log = log();
                let kind = if log.contains("Address already in use") {
                    io::ErrorKind::AddrInUse
                } else {
                    io::ErrorKind::Other
                };
                drop(bouncer.commands.take());
                let _ = bouncer.child.wait();
                Err(io::Error::new(
                    kind,
                    format!(
                        "test-postgres: pgbouncer did not start on port {port} ({other:?}); \
                         is it installed (apt-get install pgbouncer)? log:\n{log}"
                    ),
                ))
            }
        }
    }

    /// The URL of `database` through PgBouncer:
    /// `postgres://postgres@127.0.0.1:PORT/DATABASE?pgbouncer=true`.
    pub fn url(&self, database: &str) -> String {
        format!(
            "postgres://{}@127.0.0.1:{}/{database}?pgbouncer=true",
            self.user, self.port
        )
    }

    /// The port PgBouncer listens on.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        BOUNCERS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|(port, _)| *port != self.port);
        drop(self.commands.take());
        let _ = self.child.wait();
    }
}

/// Every PgBouncer started by this process, by port, with the server it forwards to.
static BOUNCERS: Mutex<Vec<(u16, Upstream)>> = Mutex::new(Vec::new());

/// `url` with PgBouncer taken out: when it points at a [`PgBouncer`] of this process,
/// the same database on the server behind it; any other URL unchanged. For a test's
/// own set-up and inspection statements, which need not follow the rules of
/// transaction pooling.
pub fn direct_url(url: &str) -> String {
    let Ok(target) = Upstream::from_url(url) else {
        return url.to_owned();
    };
    let bouncers = BOUNCERS.lock().unwrap_or_else(PoisonError::into_inner);
    let Some((_, upstream)) = bouncers
        .iter()
        .rev()
        .find(|(port, _)| target.host == "127.0.0.1" && *port == target.port)
    else {
        return url.to_owned();
    };
    let after_authority = url
        .find("://")
        .map(|i| i + 3)
        .and_then(|start| url[start..].find(['/', '?']).map(|i| start + i))
        .map_or("", |i| &url[i..]);
    let (path, _) = after_authority
        .split_once('?')
        .unwrap_or((after_authority, ""));
    let credentials = match &upstream.password {
        Some(password) => format!("{}:{password}", upstream.user),
        None => upstream.user.clone(),
    };
    format!(
        "postgres://{credentials}@{}:{}{path}",
        upstream.host, upstream.port
    )
}

/// A connection of a test's own to `url`'s database on the server itself, never
/// through PgBouncer ([`direct_url`]): for set-up and inspection statements.
///
/// # Panics
/// When it cannot connect.
pub async fn inspect(url: &str) -> sea_orm::DatabaseConnection {
    let direct = direct_url(url);
    match sea_orm::Database::connect(direct.as_str()).await {
        Ok(conn) => conn,
        Err(error) => panic!("test-postgres: could not connect to inspect {direct}: {error}"),
    }
}

/// The server PgBouncer forwards to.
#[derive(Debug, Clone)]
pub(crate) struct Upstream {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) user: String,
    pub(crate) password: Option<String>,
}

impl Upstream {
    /// The server of a `postgres://user[:password]@host[:port]/…` URL.
    pub(crate) fn from_url(url: &str) -> io::Result<Upstream> {
        let bad = || {
            io::Error::other(format!(
                "test-postgres: cannot put PgBouncer in front of {url:?}"
            ))
        };
        let rest = url
            .strip_prefix("postgres://")
            .or_else(|| url.strip_prefix("postgresql://"))
            .ok_or_else(bad)?;
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let (credentials, address) = match authority.rsplit_once('@') {
            Some((credentials, address)) => (credentials, address),
            None => ("postgres", authority),
        };
        let (user, password) = match credentials.split_once(':') {
            Some((user, password)) => (user, Some(password.to_owned())),
            None => (credentials, None),
        };
        let (host, port) = match address.rsplit_once(':') {
            Some((host, port)) => (host, port.parse().map_err(|_| bad())?),
            None => (address, 5432),
        };
        if host.is_empty() || user.is_empty() {
            return Err(bad());
        }
        Ok(Upstream {
            host: host.to_owned(),
            port,
            user: user.to_owned(),
            password,
        })
    }
}

/// Whether [`TestDb::new`](crate::TestDb::new) and
/// [`TestServer::start`](crate::TestServer::start) put PgBouncer in front of this
/// process' servers: the environment variable [`PGBOUNCER_ENV`] is `1` or `true`.
/// (The name of the test binary plays no part; a binary that always goes through
/// PgBouncer says so itself, with [`crate::through_pgbouncer`] or
/// [`TestDb::through_pgbouncer`](crate::TestDb::through_pgbouncer).)
pub fn pgbouncer_mode() -> bool {
    std::env::var(PGBOUNCER_ENV)
        .is_ok_and(|value| value == "1" || value.eq_ignore_ascii_case("true"))
}

fn write_config(dir: &Path, port: u16, upstream: &Upstream) -> io::Result<()> {
    // With a password (an external server), every client logs in as that user; else
    // (the throwaway server, trust on 127.0.0.1) as itself: `auth_user` looks up roles
    // missing from the auth file (a test's own roles) with the default `auth_query`.
    let mut server = format!("host={} port={}", upstream.host, upstream.port);
    if let Some(password) = &upstream.password {
        let _ = write!(server, " user={} password={password}", upstream.user);
    }
    let ini = format!(
        "[databases]\n\
         * = {server}\n\
         \n\
         [pgbouncer]\n\
         listen_addr = 127.0.0.1\n\
         listen_port = {port}\n\
         unix_socket_dir =\n\
         auth_type = trust\n\
         auth_file = {users}\n\
         auth_user = {user}\n\
         pool_mode = transaction\n\
         max_client_conn = 2000\n\
         default_pool_size = 20\n\
         server_idle_timeout = 5\n\
         server_login_retry = 1\n\
         ignore_startup_parameters = extra_float_digits,options\n",
        users = dir.join("userlist.txt").display(),
        user = upstream.user,
    );
    fs::write(dir.join("pgbouncer.ini"), ini)?;
    fs::write(
        dir.join("userlist.txt"),
        format!("\"{}\" \"\"\n", upstream.user),
    )
}

fn spawn(dir: &Path, owner: Option<(u32, u32)>) -> io::Result<Child> {
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(BOUNCER)
        .arg("test-postgres-pgbouncer")
        .arg(dir)
        .arg(pgbouncer_bin()?)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0);
    if let Some((uid, gid)) = owner {
        command.uid(uid).gid(gid);
    }
    command.spawn()
}

/// The `pgbouncer` binary: the first on `PATH`, else Debian's `/usr/sbin/pgbouncer`.
fn pgbouncer_bin() -> io::Result<PathBuf> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .chain([PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join("pgbouncer"))
        .find(|path| path.is_file())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                "test-postgres: pgbouncer is not installed (apt-get install pgbouncer)",
            )
        })
}

/// A reader of the log, for error messages.
fn read_log(dir: &Path) -> impl FnOnce() -> String + use<> {
    let path: PathBuf = dir.join("pgbouncer.log");
    move || fs::read_to_string(&path).unwrap_or_else(|e| format!("(no log: {e})"))
}
