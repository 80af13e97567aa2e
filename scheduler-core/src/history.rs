//! What every store's run history shares: its options ([`HistoryOptions`]), the
//! bound on a run's error text ([`error_text`]), and the retention sweep in batches
//! run as a job ([`RetentionJob`], over a store's [`SweepBatches`]).
//!
//! The stores keep the table and the statements (`scheduler_postgres::RunHistory`,
//! `scheduler_sqlite::RunHistory`); a run history's rows are read back through
//! [`Controls::runs`](crate::Controls::runs).

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::BoxError;
use crate::job::{Idempotent, JobContext, Scope};
use crate::schedule::Schedule;

/// The longest error text kept for a run, in bytes; longer text is cut at a
/// character boundary and ends with `…`.
pub const MAX_ERROR_LEN: usize = 2000;

/// The retention job's name.
pub const RETENTION_JOB: &str = "scheduler-history-retention";

/// The longest retention honoured (100 years); longer ones are clamped to it.
pub const MAX_RETENTION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// How a store's run history behaves.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HistoryOptions {
    /// How long runs are kept: the retention job deletes runs that started longer
    /// ago than this, on the database's clock. Default 30 days; at most 100 years
    /// (longer is clamped).
    pub retention: Duration,
}

impl Default for HistoryOptions {
    fn default() -> Self {
        Self {
            retention: Duration::from_secs(30 * 24 * 3600),
        }
    }
}

impl HistoryOptions {
    /// Keeps runs for `retention`.
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// The retention honoured: at most [`MAX_RETENTION`].
    pub fn clamped_retention(&self) -> Duration {
        self.retention.min(MAX_RETENTION)
    }
}

/// `text` fit for a history's `error` column: no NUL (PostgreSQL refuses it,
/// SQLite's text functions stop at it), at most [`MAX_ERROR_LEN`] bytes.
pub fn error_text(text: &str) -> String {
    let clean = text.replace('\0', "\u{fffd}");
    if clean.len() <= MAX_ERROR_LEN {
        return clean;
    }
    let mut end = MAX_ERROR_LEN - '…'.len_utf8();
    while !clean.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", clean.get(..end).unwrap_or_default())
}

/// A run history that deletes its old runs in batches: one short statement each.
#[async_trait]
pub trait SweepBatches: fmt::Debug + Clone + Send + Sync + 'static {
    /// The store's error.
    type Error: std::error::Error + Send + Sync + 'static;

    /// How many rows one batch deletes at most.
    const BATCH: i64;

    /// The retention: runs that started longer ago are deleted.
    fn retention(&self) -> Duration;

    /// The table's name, for the log.
    fn table_name(&self) -> String;

    /// Deletes at most `limit` runs that started more than `retention_ms`
    /// milliseconds ago; returns how many it deleted.
    ///
    /// # Errors
    /// The store's, when the statement fails.
    async fn sweep_batch(&self, retention_ms: i64, limit: i64) -> Result<u64, Self::Error>;

    /// Deletes the runs older than the retention, batch after batch, until a batch
    /// deletes fewer than [`BATCH`](Self::BATCH) rows or `stop` says so; returns how
    /// many it deleted.
    ///
    /// # Cancel safety
    /// Dropping the future stops between batches or abandons the statement in
    /// flight; every batch that completed stays deleted.
    ///
    /// # Errors
    /// The first batch's that fails; the batches before it stay deleted.
    async fn sweep_until(
        &self,
        stop: &(dyn Fn() -> bool + Send + Sync),
    ) -> Result<u64, Self::Error> {
        let retention_ms = i64::try_from(self.retention().as_millis()).unwrap_or(i64::MAX);
        let mut deleted = 0;
        loop {
            let batch = self.sweep_batch(retention_ms, Self::BATCH).await?;
            deleted += batch;
            if batch < Self::BATCH.unsigned_abs() || stop() {
                return Ok(deleted);
            }
        }
    }
}

/// The retention sweep as a job: deletes the runs older than the history's retention,
/// in bounded batches. Hourly, cluster scope, harmless if duplicated (a second sweep
/// finds nothing to delete). Made by a store's `RunHistory::retention_job`.
#[derive(Debug, Clone)]
pub struct RetentionJob<H> {
    history: H,
}

impl<H> RetentionJob<H> {
    /// The retention job of `history`.
    pub fn new(history: H) -> Self {
        Self { history }
    }
}

#[async_trait]
impl<H: SweepBatches> Idempotent for RetentionJob<H> {
    fn name(&self) -> &str {
        RETENTION_JOB
    }

    fn schedule(&self) -> Schedule {
        Schedule::every(Duration::from_secs(3600))
    }

    fn scope(&self) -> Scope {
        Scope::Cluster
    }

    async fn run(&self, ctx: JobContext) -> Result<(), BoxError> {
        let stop = || ctx.is_cancelled();
        let deleted = self.history.sweep_until(&stop).await?;
        tracing::debug!(table = %self.history.table_name(), deleted, "swept the run history");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_text_is_bounded_and_holds_no_nul() {
        assert_eq!(error_text("boom"), "boom");
        assert_eq!(error_text("a\0b"), "a\u{fffd}b");
        let long = "é".repeat(MAX_ERROR_LEN);
        let cut = error_text(&long);
        assert!(cut.len() <= MAX_ERROR_LEN);
        assert!(cut.ends_with('…'));
        assert!(cut.starts_with("éé"));
    }
}
