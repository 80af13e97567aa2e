//! The run history: an optional table of finished runs, and its retention sweep.
//!
//! [`RunHistory`] keeps one row per finished run in a table named after the lease
//! table (`scheduler_leases_runs` for `scheduler_leases`), in the store's file. It
//! implements [`RunRecorder`]: the runtime hands it each run as it ends, off its
//! loop, and it writes the runs that end together in **one transaction** (group
//! commit: the runs recorded while a write is under way go in the next one, at most
//! [`RECORD_BATCH`] each), queued behind the store's other writes like a lease
//! statement. One sync covers many runs, and a lease statement waits behind one
//! history transaction at most, not one per run. The rows are swept by [`RetentionJob`], itself a
//! scheduled cluster job of the library, so the table stays bounded without any cron
//! outside the app. [`Controls::runs`](scheduler_core::Controls::runs) reads it.
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//! use scheduler_core::Scheduler;
//! use scheduler_sqlite::{HistoryOptions, RunHistory, SqliteOptions, SqliteStore};
//!
//! # async fn demo() -> Result<(), scheduler_core::BoxError> {
//! let store = SqliteStore::open("/var/lib/app/scheduler.db", SqliteOptions::default()).await?;
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
//! The table has the PostgreSQL history's columns (`job`, `tick`, `node`, `holder`,
//! `token`, `started` and `finished` on the database's clock, `outcome`, `error` of
//! at most [`MAX_ERROR_LEN`] bytes, `lease_lost`, `attempt`), with times as integer
//! microseconds: [`scheduler_migrations::sqlite::create_history`] shows it in full.
//! It is not a migration of the lease table: it exists only for apps that ask for
//! it. [`RunHistory::new`] creates it when it is missing, in one `BEGIN IMMEDIATE`
//! transaction (`CREATE … IF NOT EXISTS`), so instances opening one file together
//! create it once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use scheduler_core::history::{self, SweepBatches};
pub use scheduler_core::history::{HistoryOptions, MAX_ERROR_LEN, RETENTION_JOB};
use scheduler_core::{BoxError, RunRecord, RunRecorder};
pub use scheduler_migrations::HistoryTable;
use scheduler_migrations::sqlite as ddl;
use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement, Value};

use crate::error::{Error, Result};
use crate::sql::NOW;
use crate::store::SqliteStore;

/// How many rows one statement of the retention sweep deletes at most (each batch
/// holds the file's write lock while it runs, so lease writes wait for it).
pub const SWEEP_BATCH: i64 = 1_000;

/// How many runs one history transaction records at most (the file's write lock is
/// held while it runs, so lease writes wait for it).
pub const RECORD_BATCH: usize = 500;

/// The run history of one lease table: records runs (those that end together in one
/// transaction) and sweeps old ones with its
/// [retention job](RunHistory::retention_job).
///
/// Cheap to clone (it shares the store's pool and write queue). Hand it to
/// [`SchedulerBuilder::record_runs`](scheduler_core::SchedulerBuilder::record_runs)
/// behind an `Arc`.
#[derive(Debug, Clone)]
pub struct RunHistory {
    store: SqliteStore,
    table: HistoryTable,
    retention: Duration,
    insert: String,
    sweep: String,
    queue: Arc<Queue>,
}

/// Runs waiting to be written, and the turn of whoever writes them.
#[derive(Debug, Default)]
struct Queue {
    /// Each run's values, and where to say whether it was written.
    waiting: Mutex<Vec<Waiting>>,
    /// Held by the one recorder writing (the others wait: their runs are most
    /// likely in its transaction).
    writer: tokio::sync::Mutex<()>,
}

/// A run's values, and where its recorder waits for the outcome.
type Waiting = (
    Vec<Value>,
    tokio::sync::oneshot::Sender<Result<(), Arc<Error>>>,
);

impl RunHistory {
    /// The run history of `store`'s lease table, in the store's file. Creates the
    /// table and its indexes when they are missing.
    ///
    /// # Errors
    /// [`Error::Migrate`] if the table could not be created (a read-only store, a
    /// table of that name with other columns), [`Error::Busy`] if the file stayed
    /// locked beyond the busy timeout.
    pub async fn new(store: &SqliteStore, options: HistoryOptions) -> Result<Self> {
        let table = HistoryTable::for_leases(store.table());
        create(store, &table).await?;
        let t = table.quoted();
        Ok(Self {
            insert: format!(
                "INSERT INTO {t} \
                 (job, tick, node, holder, token, started, finished, outcome, error, lease_lost, attempt) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
            ),
            // Oldest first, by the index on `started`; the rowids found are deleted
            // by primary key.
            sweep: format!(
                "DELETE FROM {t} WHERE id IN ( \
                   SELECT id FROM {t} WHERE started < {NOW} - ?1 * 1000 ORDER BY started LIMIT ?2 \
                 )"
            ),
            store: store.clone(),
            table,
            retention: options.clamped_retention(),
            queue: Arc::default(),
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

    async fn execute(&self, operation: &'static str, sql: &str, values: Vec<Value>) -> Result<u64> {
        let _turn = self.store.write_turn(operation).await?;
        self.store
            .db
            .execute_raw(Statement::from_sql_and_values(
                DbBackend::Sqlite,
                sql,
                values,
            ))
            .await
            .map(|done| done.rows_affected())
            .map_err(|source| self.store.origin.statement_error(operation, source))
    }
}

/// Creates the table and its indexes, if missing (the newest index tells), in one
/// `BEGIN IMMEDIATE` transaction; nothing is written when they exist.
async fn create(store: &SqliteStore, table: &HistoryTable) -> Result<()> {
    const OP: &str = "create the run history table";
    let fail = |source: DbErr| {
        store.origin.error(OP, source, |source| Error::Migrate {
            migration: format!("create run history table {table}"),
            cause: source,
        })
    };
    let look = Statement::from_sql_and_values(
        DbBackend::Sqlite,
        // The newest index: a table created before it gets its indexes again.
        "SELECT 1 AS present FROM sqlite_master WHERE type = 'index' AND name = ?1",
        [table.newest_index_name().into()],
    );
    if !store
        .db
        .query_all_raw(look.clone())
        .await
        .map_err(fail)?
        .is_empty()
    {
        return Ok(());
    }
    let (_turn, txn) = store.begin_write(OP).await?;
    // Read again in the write transaction: another instance starting at the same
    // time may have created it meanwhile; then only that one says so.
    if !txn.query_all_raw(look).await.map_err(fail)?.is_empty() {
        txn.commit().await.map_err(fail)?;
        tracing::debug!(table = %table, "the run history table was created by another instance");
        return Ok(());
    }
    for sql in ddl::create_history(table) {
        txn.execute_unprepared(&sql).await.map_err(fail)?;
    }
    txn.commit().await.map_err(fail)?;
    tracing::info!(table = %table, path = %store.path().display(), "created the run history table (or its new indexes)");
    Ok(())
}

#[async_trait]
impl RunRecorder for RunHistory {
    async fn record(&self, run: &RunRecord) -> Result<(), BoxError> {
        let values = vec![
            run.job.clone().into(),
            run.tick.at().timestamp_micros().into(),
            run.node.clone().into(),
            run.holder.as_str().to_owned().into(),
            run.token.get().into(),
            run.started.timestamp_micros().into(),
            run.finished.timestamp_micros().into(),
            run.outcome.as_str().into(),
            run.error.as_deref().map(history::error_text).into(),
            run.lease_lost.into(),
            i64::from(run.attempt).into(),
        ];
        let (tx, written) = tokio::sync::oneshot::channel();
        self.queue
            .waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((values, tx));
        // Whoever holds the turn writes everything waiting, this run included unless
        // an earlier writer took it already: on a task of its own, so that a
        // recorder that stops waiting (its future dropped) abandons no one's run.
        let history = self.clone();
        tokio::spawn(async move {
            let _writer = history.queue.writer.lock().await;
            history.write_waiting().await;
        });
        match written.await {
            Ok(result) => result.map_err(|e| Box::new(e) as BoxError),
            Err(_) => Err("the history write carrying this run was abandoned".into()),
        }
    }
}

impl RunHistory {
    /// Writes the runs waiting, [`RECORD_BATCH`] per transaction, and tells each
    /// recorder how its transaction ended.
    async fn write_waiting(&self) {
        const OP: &str = "record runs in the history";
        loop {
            let batch: Vec<Waiting> = {
                let mut waiting = self
                    .queue
                    .waiting
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let n = waiting.len().min(RECORD_BATCH);
                waiting.drain(..n).collect()
            };
            if batch.is_empty() {
                return;
            }
            let (rows, senders): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
            let result = self.insert_all(OP, rows).await.map_err(Arc::new);
            for tx in senders {
                // A recorder that stopped waiting does not need the answer.
                let _ = tx.send(result.clone());
            }
        }
    }

    /// Inserts `rows` in one `BEGIN IMMEDIATE` transaction.
    async fn insert_all(&self, operation: &'static str, rows: Vec<Vec<Value>>) -> Result<()> {
        let fail = |source| self.store.origin.statement_error(operation, source);
        let (_turn, txn) = self.store.begin_write(operation).await?;
        for values in rows {
            txn.execute_raw(Statement::from_sql_and_values(
                DbBackend::Sqlite,
                &self.insert,
                values,
            ))
            .await
            .map_err(fail)?;
        }
        txn.commit().await.map_err(fail)
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
        self.execute(
            "delete old runs from the history",
            &self.sweep,
            vec![retention_ms.into(), limit.into()],
        )
        .await
    }
}
