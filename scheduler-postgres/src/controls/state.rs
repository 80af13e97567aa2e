//! The control state a poll reads, in one snapshot, and the registered handlers.

use scheduler_core::ControlState;
use scheduler_core::control::stored::{pause_from, resume_from, schedule_from, trigger_from};
use sea_orm::{ConnectionTrait, DbBackend, Statement, Value};

use super::rows::{all, one_row};
use crate::error::{Error, Result};
use crate::row::get;
use crate::store::PostgresStore;

impl PostgresStore {
    /// Reads the whole control state in one `REPEATABLE READ` snapshot: the version,
    /// every pause, the resumes and the schedules changed after `since` (removed ones
    /// included; for `None`, every schedule not removed), the open triggers.
    pub(super) async fn control_state(&self, since: Option<i64>) -> Result<ControlState> {
        const OP: &str = "read the controls";
        let fail = |cause| Error::statement(OP, cause);
        let sql = self.control_sql();
        let txn = self.session().begin_repeatable_read().await.map_err(fail)?;
        let read = |sql: &str, values: Vec<Value>| {
            txn.query_all_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                sql,
                values,
            ))
        };
        let version_rows = read(&sql.version, Vec::new()).await.map_err(fail)?;
        let version: i64 = get(&one_row(version_rows, OP)?, "version", OP)?;
        let paused = read(&sql.paused, Vec::new()).await.map_err(fail)?;
        let resumed = read(&sql.resumed, vec![since.unwrap_or(i64::MIN).into()])
            .await
            .map_err(fail)?;
        let triggers = read(&sql.open_triggers, Vec::new()).await.map_err(fail)?;
        let schedules = match since {
            Some(since) => read(&sql.changed_schedules, vec![since.into()]).await,
            None => read(&sql.schedules, Vec::new()).await,
        }
        .map_err(fail)?;
        txn.commit().await.map_err(fail)?;
        Ok(ControlState {
            version,
            paused: all(&paused, OP, pause_from)?,
            resumed: all(&resumed, OP, resume_from)?,
            triggers: all(&triggers, OP, trigger_from)?,
            schedules: all(&schedules, OP, schedule_from)?,
        })
    }

    /// The handlers registered, by name.
    pub(super) async fn registered_handlers(&self) -> Result<Vec<String>> {
        const OP: &str = "read the registered handlers";
        let rows = self
            .query(OP, &self.control_sql().handlers, Vec::new())
            .await?;
        rows.iter().map(|row| get(row, "handler", OP)).collect()
    }
}
