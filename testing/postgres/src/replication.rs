//! Streaming replication between test servers, to play a failover: a replica of a
//! [`TestServer`] ([`TestServer::start_replica`]), the primary made to wait for it
//! or not ([`TestServer::replicate`]), a crash of the primary
//! ([`TestServer::crash`]), the replica's promotion ([`TestServer::promote`]), and
//! the old primary back as a read-only node ([`TestServer::restart_as_standby`]).
//!
//! A replica is a server of its own (its own directory, watchdog and free port),
//! made from a base backup of the primary taken with `pg_basebackup -R -X stream`:
//! it starts as a hot standby, streaming from the primary, read-only until promoted.
//! The servers' defaults already allow it (`wal_level = replica`, ten WAL senders,
//! `hot_standby = on`, and `initdb`'s trust rule for replication connections from
//! `127.0.0.1`). No replication slot: the replica is never far enough behind for the
//! primary to recycle WAL it still needs.

use std::io;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use sea_orm::{ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbErr, Statement};

use crate::{TestServer, launch};

/// How long [`TestServer::replicate`] waits for a replica to stream.
const STREAMING_PATIENCE: Duration = Duration::from_secs(60);

/// Whether a primary waits for its replica before it acknowledges a commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replication {
    /// A commit is acknowledged once it is durable on the primary; the replica
    /// follows as fast as it can. What the primary acknowledged in the moments
    /// before it crashed may be missing on a promoted replica.
    Asynchronous,
    /// A commit is acknowledged once a replica has flushed it too
    /// (`synchronous_standby_names = '*'`, `synchronous_commit = on`): a promoted
    /// replica holds every acknowledged commit. Commits wait while no replica
    /// answers.
    Synchronous,
}

impl TestServer {
    /// Starts a streaming replica of this server: a base backup of it
    /// (`pg_basebackup -R -X stream`) in a fresh directory, started on a free port of
    /// `127.0.0.1` as a hot standby (read-only until [promoted](Self::promote)). It
    /// has every database of this server, and follows it asynchronously until
    /// [`replicate`](Self::replicate) says otherwise.
    ///
    /// Blocks the calling thread (a second or so); it may be called from inside a
    /// tokio runtime. The replica is reached directly, never through PgBouncer.
    ///
    /// # Errors
    ///
    /// When the base backup fails (e.g. this server is stopped) or the replica does
    /// not start; the message quotes the end of the replica's log.
    pub fn start_replica(&self) -> io::Result<TestServer> {
        self.start_replica_via(self.port)
    }

    /// Like [`start_replica`](Self::start_replica), but the replica reaches this
    /// server through `127.0.0.1:port` (say, a proxy in front of it), for the base
    /// backup and then for streaming: a test can delay or cut replication there.
    ///
    /// # Errors
    ///
    /// As [`start_replica`](Self::start_replica).
    pub fn start_replica_via(&self, port: u16) -> io::Result<TestServer> {
        let (watchdog, replica_port) = launch(Some(port))?;
        Ok(TestServer {
            watchdog: Mutex::new(watchdog),
            port: replica_port,
            bouncer: None,
        })
    }

    /// Makes this server (a primary) acknowledge commits as `replication` says, and
    /// waits until a replica streams from it (and for [`Replication::Synchronous`],
    /// until one is its synchronous standby). Call it once the replica has started:
    /// a base backup taken after it would copy the setting into the replica, which
    /// would then wait for a standby of its own once promoted.
    ///
    /// # Errors
    ///
    /// When the setting cannot be changed, or no replica streams within 60 s.
    pub async fn replicate(&self, replication: Replication) -> io::Result<()> {
        let setting = match replication {
            Replication::Asynchronous => "ALTER SYSTEM RESET synchronous_standby_names",
            Replication::Synchronous => "ALTER SYSTEM SET synchronous_standby_names = '*'",
        };
        let db = self.admin().await?;
        let result = async {
            db.execute_unprepared(setting).await?;
            db.execute_unprepared("ALTER SYSTEM SET synchronous_commit = on")
                .await?;
            db.execute_unprepared("SELECT pg_reload_conf()").await?;
            let wanted = match replication {
                Replication::Asynchronous => "state = 'streaming'",
                Replication::Synchronous => "state = 'streaming' AND sync_state = 'sync'",
            };
            let query = format!("SELECT count(*) AS n FROM pg_stat_replication WHERE {wanted}");
            let deadline = tokio::time::Instant::now() + STREAMING_PATIENCE;
            loop {
                let row = db
                    .query_one_raw(Statement::from_string(db.get_database_backend(), &query))
                    .await?;
                let streaming: i64 = match row {
                    Some(row) => row.try_get("", "n")?,
                    None => 0,
                };
                if streaming > 0 {
                    return Ok(());
                }
                if tokio::time::Instant::now() > deadline {
                    return Err(DbErr::Custom(format!(
                        "no replica streams ({wanted}) after {STREAMING_PATIENCE:?}"
                    )));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        .await;
        let closed = db.close().await;
        result.and(closed).map_err(|error| {
            io::Error::other(format!(
                "test-postgres: could not set up {replication:?} replication on port {}: {error}",
                self.port
            ))
        })
    }

    /// Whether the server is in recovery (a standby: read-only).
    ///
    /// # Errors
    ///
    /// When the server does not answer.
    pub async fn in_recovery(&self) -> io::Result<bool> {
        let db = self.admin().await?;
        let row = db
            .query_one_raw(Statement::from_string(
                db.get_database_backend(),
                "SELECT pg_is_in_recovery() AS standby",
            ))
            .await;
        let _ = db.close().await;
        let standby = row.and_then(|row| match row {
            Some(row) => row.try_get::<bool>("", "standby"),
            None => Err(DbErr::RecordNotFound("pg_is_in_recovery()".to_owned())),
        });
        standby.map_err(|error| {
            io::Error::other(format!(
                "test-postgres: could not ask the server on port {} whether it is a standby: {error}",
                self.port
            ))
        })
    }

    /// A crash: an immediate shutdown (`SIGQUIT` to the postmaster, as `pg_ctl stop
    /// -m immediate`: no checkpoint, every connection dropped, WAL not yet sent to a
    /// replica never sent), waiting until the server has exited.
    /// [`restart`](Self::restart) brings it back (after crash recovery), as does
    /// [`restart_as_standby`](Self::restart_as_standby).
    ///
    /// # Errors
    ///
    /// When the watchdog process has gone away.
    pub fn crash(&self) -> io::Result<()> {
        match self.watchdog().request("crash")?.as_str() {
            "stopped" => Ok(()),
            reply => Err(io::Error::other(format!(
                "test-postgres: unexpected reply {reply:?} to crash"
            ))),
        }
    }

    /// Promotes a replica to a primary (`pg_ctl promote -w`): it stops following,
    /// and accepts writes once this returns. Its open connections stay open and may
    /// write too.
    ///
    /// # Errors
    ///
    /// When the server is not a standby, or is not out of recovery within 60 s.
    pub fn promote(&self) -> io::Result<()> {
        let mut watchdog = self.watchdog();
        match watchdog.request("promote")?.as_str() {
            "promoted" => Ok(()),
            reply => Err(io::Error::other(format!(
                "test-postgres: promotion failed ({reply}); server log:\n{}",
                watchdog.log_tail()
            ))),
        }
    }

    /// Starts the server again on the same port as a read-only standby
    /// (`standby.signal`), stopping it first if it runs: an old primary back after a
    /// failover, before anyone has made it follow the new one. It replays its own
    /// WAL, then accepts read-only connections; every write fails with SQLSTATE
    /// 25006 (`read_only_sql_transaction`).
    ///
    /// # Errors
    ///
    /// As [`restart`](Self::restart).
    pub fn restart_as_standby(&self) -> io::Result<()> {
        self.watchdog().start_as("standby", self.port)
    }

    /// The server's log so far (`initdb` or `pg_basebackup`, then `postgres`), for a
    /// test to keep when it fails; empty if it cannot be read.
    pub fn log_text(&self) -> String {
        let dir = self.watchdog().dir.clone();
        std::fs::read_to_string(dir.join("postgres.log")).unwrap_or_default()
    }

    fn watchdog(&self) -> std::sync::MutexGuard<'_, crate::Watchdog> {
        self.watchdog.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn admin(&self) -> io::Result<DatabaseConnection> {
        let mut options = ConnectOptions::new(self.direct_url("postgres"));
        options
            .max_connections(1)
            .min_connections(0)
            .connect_timeout(Duration::from_secs(30))
            .sqlx_logging(false);
        Database::connect(options).await.map_err(|error| {
            io::Error::other(format!(
                "test-postgres: could not connect to the server on port {}: {error}",
                self.port
            ))
        })
    }
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used)]
mod tests {
    //! A replica follows its primary, holds every commit the primary acknowledged
    //! under synchronous replication, takes over when promoted after a crash of the
    //! primary, and the old primary comes back read-only.

    use std::sync::Arc;

    use super::*;

    async fn count(url: &str) -> Result<i64, DbErr> {
        let db = Database::connect(url).await?;
        let row = db
            .query_one_raw(Statement::from_string(
                db.get_database_backend(),
                "SELECT count(*) AS n FROM t",
            ))
            .await?
            .ok_or_else(|| DbErr::Custom("count(*) returned no row".to_owned()))?;
        let n: i64 = row.try_get("", "n")?;
        db.close().await?;
        Ok(n)
    }

    async fn execute(url: &str, sql: &str) -> Result<(), DbErr> {
        let db = Database::connect(url).await?;
        let done = db.execute_unprepared(sql).await.map(drop);
        db.close().await?;
        done
    }

    async fn blocking<T: Send + 'static>(
        f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
    ) -> std::io::Result<T> {
        tokio::task::spawn_blocking(f).await.expect("join")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_synchronous_replica_survives_its_primary_and_the_old_one_comes_back_read_only() {
        let primary = Arc::new(
            blocking(TestServer::start)
                .await
                .expect("start the primary"),
        );
        let url = primary.create_database().await;
        let database = url.rsplit('/').next().unwrap().to_owned();
        let source = primary.clone();
        let replica = Arc::new(
            blocking(move || source.start_replica())
                .await
                .expect("start the replica"),
        );
        assert_ne!(replica.port(), primary.port());
        assert!(replica.in_recovery().await.unwrap());
        assert!(!primary.in_recovery().await.unwrap());
        primary
            .replicate(Replication::Synchronous)
            .await
            .expect("a synchronous standby");

        let on_primary = primary.direct_url(&database);
        let on_replica = replica.direct_url(&database);
        execute(
            &on_primary,
            "CREATE TABLE t (x int); INSERT INTO t SELECT generate_series(1, 100)",
        )
        .await
        .unwrap();
        // Synchronous: flushed on the replica before the primary acknowledged it.
        let err = execute(&on_replica, "INSERT INTO t VALUES (0)").await;
        assert!(
            err.as_ref()
                .is_err_and(|e| e.to_string().contains("read-only")),
            "{err:?}"
        );

        let crashed = primary.clone();
        blocking(move || crashed.crash()).await.unwrap();
        let promoted = replica.clone();
        blocking(move || promoted.promote()).await.unwrap();
        assert!(!replica.in_recovery().await.unwrap());
        assert_eq!(count(&on_replica).await.unwrap(), 100);
        execute(&on_replica, "INSERT INTO t VALUES (101)")
            .await
            .expect("the promoted replica takes writes");

        let back = primary.clone();
        blocking(move || back.restart_as_standby()).await.unwrap();
        assert!(primary.in_recovery().await.unwrap());
        assert_eq!(count(&on_primary).await.unwrap(), 100);
        let err = execute(&on_primary, "INSERT INTO t VALUES (102)").await;
        assert!(
            err.as_ref()
                .is_err_and(|e| e.to_string().contains("read-only")),
            "{err:?}"
        );
    }
}
