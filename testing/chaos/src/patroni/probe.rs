//! Small helpers of the cluster: HTTP and SQL probes, waiting, ports, directories.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::error::{Error, Result};

/// `GET`/`POST` over HTTP/1.0 to `127.0.0.1:port`: the status and the body, or
/// `None` if it does not answer within 2 s.
pub(super) async fn http(port: u16, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    let exchange = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        let request = format!(
            "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.ok()?;
        let text = String::from_utf8_lossy(&response).into_owned();
        let status = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned());
        Some((status, body.unwrap_or_default()))
    };
    let limit = if method == "POST" { 60 } else { 2 };
    tokio::time::timeout(Duration::from_secs(limit), exchange)
        .await
        .ok()
        .flatten()
}

/// Polls `ready` every 100 ms until it holds, for up to `limit`.
pub(super) async fn wait_for<F, Fut>(what: &str, limit: Duration, mut ready: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    loop {
        if ready().await {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::Timeout {
                what: what.to_owned(),
                waited: limit,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(super) fn local(port: u16) -> (String, u16) {
    ("127.0.0.1".to_owned(), port)
}

/// `count` distinct free ports of `127.0.0.1`, all bound at once then released.
pub(super) fn free_ports(count: usize) -> Result<Vec<u16>> {
    let listeners: Vec<std::net::TcpListener> = (0..count)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<_>>()
        .map_err(Error::io("find free ports"))?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<std::io::Result<_>>()
        .map_err(Error::io("read free ports"))
}

/// The `postgres` system user's uid and gid when we are root, else `None`.
pub(super) fn postgres_owner() -> Option<(u32, u32)> {
    let id = |args: &[&str]| -> Option<u32> {
        let out = Command::new("id").args(args).output().ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    if id(&["-u"])? != 0 {
        return None;
    }
    Some((id(&["-u", "postgres"])?, id(&["-g", "postgres"])?))
}

/// Creates `dir` (mode 700, as PostgreSQL wants its parent private enough), owned
/// by `owner`.
pub(super) fn make_dir(dir: &Path, owner: Option<(u32, u32)>) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).map_err(Error::io("create a daemon directory"))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(Error::io("chmod a daemon directory"))?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(dir, Some(uid), Some(gid))
            .map_err(Error::io("chown a daemon directory"))?;
    }
    Ok(())
}

/// Runs `sql` on `url` (one connection, 5 s to connect).
pub(super) async fn execute(url: &str, sql: &str) -> Result<()> {
    let db = sea_orm::Database::connect(quick(url, 5))
        .await
        .map_err(Error::database("connect to the leader"))?;
    let done = sea_orm::ConnectionTrait::execute_unprepared(&db, sql).await;
    let _ = db.close().await;
    done.map(|_| ())
        .map_err(Error::database("run a statement on the leader"))
}

/// Whether a fresh connection to `url` reaches a server that takes writes (not in
/// recovery), within a second.
pub async fn writable(url: String) -> bool {
    let attempt = async {
        let db = sea_orm::Database::connect(quick(&url, 1)).await.ok()?;
        let statement = sea_orm::Statement::from_string(
            sea_orm::DbBackend::Postgres,
            "SELECT NOT pg_is_in_recovery() AS writable",
        );
        let row = sea_orm::ConnectionTrait::query_one_raw(&db, statement).await;
        let _ = db.close().await;
        row.ok()??.try_get::<bool>("", "writable").ok()
    };
    tokio::time::timeout(Duration::from_secs(2), attempt)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

fn quick(url: &str, connect_secs: u64) -> sea_orm::ConnectOptions {
    let mut options = sea_orm::ConnectOptions::new(url);
    options
        .max_connections(1)
        .min_connections(0)
        .connect_timeout(Duration::from_secs(connect_secs))
        .acquire_timeout(Duration::from_secs(connect_secs))
        .sqlx_logging(false);
    options
}
