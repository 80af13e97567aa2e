//! The record the instances leave in the database, as the driver reads it.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, QueryResult,
    Statement, TransactionTrait, Value,
};

use crate::error::{Error, Result};

/// One run, as recorded in `runs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// The row's id.
    pub id: i64,
    /// The job.
    pub job: String,
    /// The tick it ran.
    pub tick: DateTime<Utc>,
    /// The node of the instance that ran it.
    pub node: String,
    /// The instance that ran it.
    pub instance: String,
    /// The lease's fencing token.
    pub token: i64,
    /// When it started (database clock).
    pub started: DateTime<Utc>,
    /// When its end was recorded (database clock); `None` if never (the process was
    /// killed, or the run is still under way).
    pub finished: Option<DateTime<Utc>>,
    /// How it ended (see [`crate::app::outcome`]).
    pub outcome: Option<String>,
}

impl Run {
    /// Whether its outcome says it was cancelled.
    pub fn cancelled(&self) -> bool {
        self.outcome
            .as_deref()
            .is_some_and(|o| o.starts_with(crate::app::outcome::CANCELLED))
    }

    /// Whether its outcome says its fenced write was refused.
    pub fn refused(&self) -> bool {
        self.outcome
            .as_deref()
            .is_some_and(|o| o.ends_with(crate::app::outcome::REFUSED))
    }

    /// Whether its outcome says its fenced write committed.
    pub fn paid(&self) -> bool {
        self.outcome
            .as_deref()
            .is_some_and(|o| o.ends_with(crate::app::outcome::PAID))
    }
}

/// One committed fenced write, as recorded in `payouts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payout {
    /// The job.
    pub job: String,
    /// The tick it paid for.
    pub tick: DateTime<Utc>,
    /// The fencing token it carried.
    pub token: i64,
    /// The instance that wrote it.
    pub instance: String,
    /// When it was written, inside the fenced transaction (database clock).
    pub written: DateTime<Utc>,
}

/// One heartbeat of an instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    /// The instance.
    pub instance: String,
    /// When it landed (database clock).
    pub at: DateTime<Utc>,
    /// How many tick attempts the store had answered the instance so far.
    pub answered: i64,
    /// The readiness probe's verdict.
    pub healthy: bool,
}

/// Everything the instances recorded.
#[derive(Debug, Clone, Default)]
pub struct Record {
    /// Every run, by job, tick and start.
    pub runs: Vec<Run>,
    /// Every committed fenced write.
    pub payouts: Vec<Payout>,
    /// Every heartbeat, by instance and time.
    pub heartbeats: Vec<Heartbeat>,
}

/// The driver's own connection to the database the instances record into: always
/// straight to the server, never through the proxy or PgBouncer.
///
/// When the instances record runs and heartbeats apart from the lease database (see
/// [`Inspector::apart`]), it has a second connection, to the lease database, for
/// the fenced writes in `payouts`.
#[derive(Debug, Clone)]
pub struct Inspector {
    db: DatabaseConnection,
    leases: Option<DatabaseConnection>,
}

const RUN_COLUMNS: &str = "id, job, tick, node, instance, token, started, finished, outcome";

impl Inspector {
    /// Connects to `url`, retrying for up to 30 s (the server may be restarting).
    ///
    /// # Errors
    /// [`Error::Database`] if no connection could be made by then.
    pub async fn connect(url: &str) -> Result<Inspector> {
        Ok(Inspector {
            db: connect(url).await?,
            leases: None,
        })
    }

    /// Connects to `record_url`, where the instances record runs and heartbeats (and
    /// whose clock the driver reads), and to `lease_url`, the lease database, where
    /// the fenced writes are; each retried for up to 30 s.
    ///
    /// # Errors
    /// [`Error::Database`] if either cannot be reached by then.
    pub async fn apart(record_url: &str, lease_url: &str) -> Result<Inspector> {
        Ok(Inspector {
            db: connect(record_url).await?,
            leases: Some(connect(lease_url).await?),
        })
    }

    /// Reads the fenced writes from `lease_url` from now on (the lease database moved:
    /// a failover), retrying for up to 30 s.
    ///
    /// # Errors
    /// [`Error::Database`] if it cannot be reached by then.
    pub async fn lease_database_moved(&mut self, lease_url: &str) -> Result<()> {
        self.leases = Some(connect(lease_url).await?);
        Ok(())
    }

    /// Creates the app's tables ([`SCHEMA`](crate::app::SCHEMA)) unless they exist,
    /// under the same lock as the app, in the record's database and, if apart, in the
    /// lease database.
    ///
    /// # Errors
    /// [`Error::Database`] if a statement fails.
    pub async fn prepare(&self) -> Result<()> {
        prepare(&self.db).await?;
        match &self.leases {
            Some(leases) => prepare(leases).await,
            None => Ok(()),
        }
    }

    /// The database's clock, retried for up to 30 s (the server may be restarting).
    ///
    /// # Errors
    /// [`Error::Database`] if the server did not answer by then.
    pub async fn now(&self) -> Result<DateTime<Utc>> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            match self.try_now().await {
                Ok(now) => return Ok(now),
                Err(_) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(err) => return Err(err),
            }
        }
    }

    async fn try_now(&self) -> Result<DateTime<Utc>> {
        let rows = self
            .query("SELECT clock_timestamp() AS now", vec![], "read the clock")
            .await?;
        let row = rows.first().ok_or(Error::Database {
            operation: "read the clock",
            source: sea_orm::DbErr::RecordNotFound("no row".to_owned()),
        })?;
        get(row, "now", "read the clock")
    }

    /// Whether `instance` has written a heartbeat (it is up and its scheduler built).
    ///
    /// # Errors
    /// [`Error::Database`] if the query fails.
    pub async fn has_beaten(&self, instance: &str) -> Result<bool> {
        let rows = self
            .query(
                "SELECT 1 AS one FROM heartbeats WHERE instance = $1 LIMIT 1",
                vec![instance.into()],
                "read heartbeats",
            )
            .await?;
        Ok(!rows.is_empty())
    }

    /// The runs of `job` under way (no end recorded) that started within `within`
    /// of now, newest first.
    ///
    /// # Errors
    /// [`Error::Database`] if the query fails.
    pub async fn running(&self, job: &str, within: Duration) -> Result<Vec<Run>> {
        let within = i64::try_from(within.as_millis()).unwrap_or(i64::MAX);
        let rows = self
            .query(
                &format!(
                    "SELECT {RUN_COLUMNS} FROM runs WHERE job = $1 AND finished IS NULL \
                     AND started > clock_timestamp() - $2::bigint * interval '1 millisecond' \
                     ORDER BY started DESC"
                ),
                vec![job.into(), within.into()],
                "read running runs",
            )
            .await?;
        rows.iter().map(run_from_row).collect()
    }

    /// Runs of `job` that started after `after`, earliest first.
    ///
    /// # Errors
    /// [`Error::Database`] if the query fails.
    pub async fn runs_since(&self, job: &str, after: DateTime<Utc>) -> Result<Vec<Run>> {
        let rows = self
            .query(
                &format!(
                    "SELECT {RUN_COLUMNS} FROM runs WHERE job = $1 AND started > $2 \
                     ORDER BY started"
                ),
                vec![job.into(), after.into()],
                "read recent runs",
            )
            .await?;
        rows.iter().map(run_from_row).collect()
    }

    /// The run with id `id`.
    ///
    /// # Errors
    /// [`Error::Database`] if the query fails or there is no such run.
    pub async fn run(&self, id: i64) -> Result<Run> {
        let rows = self
            .query(
                &format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = $1"),
                vec![id.into()],
                "read a run",
            )
            .await?;
        let row = rows.first().ok_or(Error::Database {
            operation: "read a run",
            source: sea_orm::DbErr::RecordNotFound(format!("run {id}")),
        })?;
        run_from_row(row)
    }

    /// Every session of the lease database waiting for a lock, with the session it waits
    /// on: its state (`idle in transaction`: a client stopped mid-transaction) and
    /// its last statement. Empty when nothing waits.
    ///
    /// # Errors
    /// [`Error::Database`] if the query fails.
    pub async fn blocked(&self) -> Result<Vec<String>> {
        const OP: &str = "read blocked sessions";
        let rows = self
            .query_leases(
                "SELECT w.pid AS waiting, left(regexp_replace(w.query, '\\s+', ' ', 'g'), 60) AS query, \
                        b.pid AS blocker, coalesce(b.state, '?') AS state, \
                        left(regexp_replace(b.query, '\\s+', ' ', 'g'), 80) AS blocker_query \
                 FROM pg_stat_activity w \
                 CROSS JOIN LATERAL unnest(pg_blocking_pids(w.pid)) AS blocking(pid) \
                 JOIN pg_stat_activity b ON b.pid = blocking.pid \
                 WHERE w.datname = current_database() ORDER BY w.pid",
                OP,
            )
            .await?;
        rows.iter()
            .map(|row| {
                Ok(format!(
                    "session {} ({}…) waits for session {}, {}: {}…",
                    get::<i32>(row, "waiting", OP)?,
                    get::<String>(row, "query", OP)?,
                    get::<i32>(row, "blocker", OP)?,
                    get::<String>(row, "state", OP)?,
                    get::<String>(row, "blocker_query", OP)?,
                ))
            })
            .collect()
    }

    /// Everything recorded.
    ///
    /// # Errors
    /// [`Error::Database`] if a query fails or a row does not have the expected shape.
    pub async fn record(&self) -> Result<Record> {
        let runs = self
            .query(
                &format!("SELECT {RUN_COLUMNS} FROM runs ORDER BY job, tick, started"),
                vec![],
                "read runs",
            )
            .await?
            .iter()
            .map(run_from_row)
            .collect::<Result<_>>()?;
        const OP: &str = "read payouts";
        let payouts = self
            .query_leases(
                "SELECT job, tick, token, instance, written FROM payouts ORDER BY job, tick, token",
                OP,
            )
            .await?
            .iter()
            .map(|row| {
                Ok(Payout {
                    job: get(row, "job", OP)?,
                    tick: get(row, "tick", OP)?,
                    token: get(row, "token", OP)?,
                    instance: get(row, "instance", OP)?,
                    written: get(row, "written", OP)?,
                })
            })
            .collect::<Result<_>>()?;
        const HB: &str = "read heartbeats";
        let heartbeats = self
            .query(
                "SELECT instance, at, answered, healthy FROM heartbeats ORDER BY instance, at",
                vec![],
                HB,
            )
            .await?
            .iter()
            .map(|row| {
                Ok(Heartbeat {
                    instance: get(row, "instance", HB)?,
                    at: get(row, "at", HB)?,
                    answered: get(row, "answered", HB)?,
                    healthy: get(row, "healthy", HB)?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Record {
            runs,
            payouts,
            heartbeats,
        })
    }

    /// Runs `sql` on the lease database.
    async fn query_leases(&self, sql: &str, operation: &'static str) -> Result<Vec<QueryResult>> {
        self.leases
            .as_ref()
            .unwrap_or(&self.db)
            .query_all_raw(Statement::from_string(DbBackend::Postgres, sql))
            .await
            .map_err(Error::database(operation))
    }

    async fn query(
        &self,
        sql: &str,
        values: Vec<Value>,
        operation: &'static str,
    ) -> Result<Vec<QueryResult>> {
        self.db
            .query_all_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                sql,
                values,
            ))
            .await
            .map_err(Error::database(operation))
    }
}

/// Connects to `url`, retrying for up to 30 s (the server may be restarting).
async fn connect(url: &str) -> Result<DatabaseConnection> {
    let mut options = ConnectOptions::new(url.to_owned());
    options
        .max_connections(2)
        .min_connections(0)
        .connect_timeout(Duration::from_secs(2))
        .acquire_timeout(Duration::from_secs(5))
        .sqlx_logging(false);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match Database::connect(options.clone()).await {
            Ok(db) => return Ok(db),
            Err(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(source) => {
                return Err(Error::Database {
                    operation: "connect the driver",
                    source,
                });
            }
        }
    }
}

/// Creates the app's tables unless they exist, under the app's lock.
async fn prepare(db: &DatabaseConnection) -> Result<()> {
    let failed = Error::database;
    let txn = db
        .begin()
        .await
        .map_err(failed("begin creating the tables"))?;
    txn.execute_unprepared(crate::app::SCHEMA_LOCK)
        .await
        .map_err(failed("lock the schema"))?;
    txn.execute_unprepared(crate::app::SCHEMA)
        .await
        .map_err(failed("create the tables"))?;
    txn.commit().await.map_err(failed("commit the tables"))
}

fn get<T: sea_orm::TryGetable>(
    row: &QueryResult,
    column: &str,
    operation: &'static str,
) -> Result<T> {
    row.try_get("", column).map_err(Error::database(operation))
}

fn run_from_row(row: &QueryResult) -> Result<Run> {
    const OP: &str = "read runs";
    Ok(Run {
        id: get(row, "id", OP)?,
        job: get(row, "job", OP)?,
        tick: get(row, "tick", OP)?,
        node: get(row, "node", OP)?,
        instance: get(row, "instance", OP)?,
        token: get(row, "token", OP)?,
        started: get(row, "started", OP)?,
        finished: get(row, "finished", OP)?,
        outcome: get(row, "outcome", OP)?,
    })
}
