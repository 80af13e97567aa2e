//! The run history: an optional table of finished runs, and its retention sweep.
//!
//! [`RunHistory`] keeps one row per finished run in a table named after the lease
//! table (`scheduler_leases_runs` for `scheduler_leases`). It implements
//! [`RunRecorder`]: the runtime hands it each run as it ends, off its loop, and it
//! writes it with **one `INSERT`** on a pooled connection. The rows are swept by
//! [`RetentionJob`], itself a scheduled cluster job of the library, so the table stays
//! bounded without any cron outside the app.
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//! use scheduler_core::Scheduler;
//! use scheduler_postgres::{HistoryOptions, PostgresOptions, PostgresStore, RunHistory};
//!
//! # async fn demo() -> Result<(), scheduler_core::BoxError> {
//! let store = PostgresStore::connect("postgres://app@db/app", PostgresOptions::default()).await?;
//! let options = HistoryOptions::default().retention(Duration::from_secs(7 * 24 * 3600));
//! let history = Arc::new(RunHistory::new(&store, options).await?);
//! let scheduler = Scheduler::builder(store)
//!     .record_runs(history.clone())
//!     .job(history.retention_job())
//!     .build()?;
//! # Ok(())
//! # }
//! ```
//!
//! The table (`job`, `tick`, `node`, `holder`, `token`, `started` and `finished` on
//! the database's clock, `outcome`, `error` of at most [`MAX_ERROR_LEN`] bytes,
//! `lease_lost`) and its two indexes, by job and by start time, are
//! [`scheduler_migrations::postgres::create_history`], which shows them in full. The
//! index by job serves "the last run of each job" (`scheduler-cli status`), the one
//! by time the retention sweep.
//!
//! The table is not a migration of the lease table: it exists only for apps that ask
//! for it, and only PostgreSQL has it (every lease migration has a SQLite twin).
//! [`RunHistory::new`] creates it when it is missing, in one transaction under the
//! same transaction-level advisory lock as the migrations
//! ([`scheduler_migrations::postgres::LOCK`]), so instances starting together create
//! it once and no lock outlives the transaction.

use std::time::Duration;

use async_trait::async_trait;
use scheduler_core::history::{self, SweepBatches};
pub use scheduler_core::history::{HistoryOptions, MAX_ERROR_LEN, RETENTION_JOB};
use scheduler_core::{BoxError, RunRecord, RunRecorder};
pub use scheduler_migrations::HistoryTable;
use scheduler_migrations::postgres as ddl;
use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement, Value};

use crate::error::{Error, Result, sqlstate};
use crate::store::PostgresStore;

/// How many rows one statement of the retention sweep deletes at most.
pub const SWEEP_BATCH: i64 = 10_000;

/// The run history of one lease table: records runs, one `INSERT` each, and sweeps
/// old ones with its [retention job](RunHistory::retention_job).
///
/// Cheap to clone (it shares the store's pool). Hand it to
/// [`SchedulerBuilder::record_runs`](scheduler_core::SchedulerBuilder::record_runs)
/// behind an `Arc`.
#[derive(Debug, Clone)]
pub struct RunHistory {
    store: PostgresStore,
    table: HistoryTable,
    retention: Duration,
    insert: String,
    sweep: String,
}

impl RunHistory {
    /// The run history of `store`'s lease table, on the store's pool. Creates the
    /// table and its indexes when they are missing.
    ///
    /// When the table exists already nothing is locked or created, so a database user
    /// without `CREATE` can record runs into a table created once by one that has it.
    ///
    /// # Errors
    /// [`Error::Connect`] if no connection could be had, [`Error::Migrate`] if the
    /// table could not be created.
    pub async fn new(store: &PostgresStore, options: HistoryOptions) -> Result<Self> {
        let table = HistoryTable::for_leases(store.table());
        if !exists(store, &table).await? {
            create(store, &table).await?;
        }
        let t = table.quoted();
        Ok(Self {
            insert: format!(
                "INSERT INTO {t} \
                 (job, tick, node, holder, token, started, finished, outcome, error, lease_lost, attempt) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
            ),
            // `ctid = ANY(ARRAY(…))` deletes by TID scan (an `IN (subquery)` may be
            // planned as a join over the whole table). Rows are never updated, and the
            // statement's snapshot keeps a TID from being reused under it.
            sweep: format!(
                "DELETE FROM {t} WHERE ctid = ANY(ARRAY( \
                   SELECT ctid FROM {t} \
                   WHERE started < now() - $1::bigint * interval '1 millisecond' \
                   LIMIT $2 \
                 ))"
            ),
            store: store.clone(),
            table,
            retention: options.clamped_retention(),
        })
    }

    /// The history table.
    pub fn table(&self) -> &HistoryTable {
        &self.table
    }

    /// How long runs are kept.
    pub fn retention(&self) -> Duration {
        self.retention
    }

    /// The job that deletes runs older than the retention: named
    /// [`RETENTION_JOB`], hourly, cluster scope, harmless if duplicated. Register it
    /// with the scheduler that records the runs.
    pub fn retention_job(&self) -> RetentionJob {
        RetentionJob::new(self.clone())
    }

    /// Deletes the runs older than the retention now, in batches of at most
    /// [`SWEEP_BATCH`] rows, one short statement each; returns how many it deleted.
    ///
    /// # Cancel safety
    /// Dropping the future stops between batches or abandons the statement in
    /// flight; every batch that completed stays deleted.
    ///
    /// # Errors
    /// [`Error::Statement`] if a batch fails; the batches before it stay deleted.
    pub async fn sweep(&self) -> Result<u64> {
        self.sweep_until(&|| false).await
    }
}

/// Whether `table` exists with every column and index of the current version (and
/// is visible to this user).
async fn exists(store: &PostgresStore, table: &HistoryTable) -> Result<bool> {
    const OP: &str = "look for the run history table";
    let rows = store
        .query(
            OP,
            "SELECT EXISTS (SELECT FROM pg_catalog.pg_attribute \
                            WHERE attrelid = to_regclass($1) AND attname = $2 AND NOT attisdropped) \
                    AND to_regclass($3) IS NOT NULL AS present",
            vec![
                table.quoted().into(),
                ddl::HISTORY_NEWEST_COLUMN.to_owned().into(),
                table.newest_index().into(),
            ],
        )
        .await?;
    match rows.first() {
        Some(row) => row
            .try_get::<bool>("", "present")
            .map_err(|source| Error::BadRow {
                operation: OP,
                cause: source,
            }),
        None => Ok(false),
    }
}

/// Creates the table and its indexes in one transaction, under the migrations'
/// advisory lock of the lease table.
async fn create(store: &PostgresStore, table: &HistoryTable) -> Result<()> {
    let leases = store.table();
    let fail = |source: DbErr| {
        let hint = match sqlstate(&source).as_deref() {
            Some("42501") => {
                "; the database user needs CREATE on the schema (or create the history once as a user that has it)"
            }
            Some("25006") => crate::hints::READ_ONLY,
            _ => "",
        };
        Error::Migrate {
            migration: format!("create run history table {table}"),
            cause: source,
            hint: hint.to_owned(),
        }
    };
    let txn = store.begin().await.map_err(Error::connect)?;
    txn.execute_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        ddl::LOCK,
        [ddl::lock_key(leases).into()],
    ))
    .await
    .map_err(fail)?;
    // Read again under the lock: another instance starting at the same time may
    // have created it meanwhile; then only that one says so.
    let found = txn
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT to_regclass($1) IS NOT NULL AS table, \
                    EXISTS (SELECT FROM pg_catalog.pg_attribute \
                            WHERE attrelid = to_regclass($1) AND attname = $2 \
                              AND NOT attisdropped) \
                    AND to_regclass($3) IS NOT NULL AS current",
            [
                table.quoted().into(),
                ddl::HISTORY_NEWEST_COLUMN.to_owned().into(),
                table.newest_index().into(),
            ],
        ))
        .await
        .map_err(fail)?;
    let flag = |col: &str| {
        found
            .first()
            .map_or(Ok(false), |row| row.try_get::<bool>("", col))
            .map_err(fail)
    };
    let (had_table, current) = (flag("table")?, flag("current")?);
    if !current {
        // `IF NOT EXISTS` on what exists is a NOTICE, which the driver logs at INFO
        // on every start: none is wanted here.
        txn.execute_unprepared("SET LOCAL client_min_messages = warning")
            .await
            .map_err(fail)?;
        for sql in ddl::create_history(table) {
            txn.execute_unprepared(&sql).await.map_err(fail)?;
        }
    }
    txn.commit().await.map_err(fail)?;
    match (had_table, current) {
        (false, _) => tracing::info!(table = %table, "created the run history table"),
        (true, false) => tracing::info!(
            table = %table,
            column = ddl::HISTORY_NEWEST_COLUMN,
            "brought the run history table up to date (its newest column and indexes)"
        ),
        (true, true) => {
            tracing::debug!(table = %table, "the run history table was created by another instance");
        }
    }
    Ok(())
}

#[async_trait]
impl RunRecorder for RunHistory {
    async fn record(&self, run: &RunRecord) -> Result<(), BoxError> {
        let values: [Value; 11] = [
            run.job.clone().into(),
            run.tick.at().into(),
            run.node.clone().into(),
            run.holder.as_str().to_owned().into(),
            run.token.get().into(),
            run.started.into(),
            run.finished.into(),
            run.outcome.as_str().into(),
            run.error.as_deref().map(history::error_text).into(),
            run.lease_lost.into(),
            i32::try_from(run.attempt).unwrap_or(i32::MAX).into(),
        ];
        self.store
            .execute("record a run in the history", &self.insert, values.into())
            .await?;
        Ok(())
    }
}

/// The retention sweep of a [`RunHistory`] as a job: deletes the runs older than the
/// history's retention, in batches of at most [`SWEEP_BATCH`] rows. Hourly, cluster
/// scope, harmless if duplicated. Made by [`RunHistory::retention_job`].
pub type RetentionJob = history::RetentionJob<RunHistory>;

#[async_trait]
impl SweepBatches for RunHistory {
    type Error = Error;
    const BATCH: i64 = SWEEP_BATCH;

    fn retention(&self) -> Duration {
        self.retention
    }

    fn table_name(&self) -> String {
        self.table.to_string()
    }

    async fn sweep_batch(&self, retention_ms: i64, limit: i64) -> Result<u64> {
        self.store
            .execute(
                "delete old runs from the history",
                &self.sweep,
                vec![retention_ms.into(), limit.into()],
            )
            .await
    }
}
