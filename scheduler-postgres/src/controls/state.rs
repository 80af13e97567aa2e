//! The control state a poll reads, in one snapshot, and the registered handlers.

use scheduler_core::control::stored::{pause_from, resume_from, schedule_from, trigger_from};
use scheduler_core::{ControlState, ScheduleRow};
use sea_orm::{ConnectionTrait, DbBackend, Statement, Value};

use super::SCHEDULES_PAGE;
use super::rows::{all, one_row};
use crate::error::{Error, Result};
use crate::row::get;
use crate::store::PostgresStore;

impl PostgresStore {
    /// Reads the whole control state in one `REPEATABLE READ` snapshot: the version,
    /// every pause, the resumes and the schedules changed after `since` (removed ones
    /// included; for `None`, every schedule not removed, a page of `SCHEDULES_PAGE` at
    /// a time, unless not `with_schedules`: an instance that loads them as they come
    /// due reads them apart), the open triggers.
    pub(super) async fn control_state(
        &self,
        since: Option<i64>,
        with_schedules: bool,
    ) -> Result<ControlState> {
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
            _ if !with_schedules => Vec::new(),
            Some(since) => {
                let found = read(&sql.changed_schedules, vec![since.into()])
                    .await
                    .map_err(fail)?;
                all(&found, OP, schedule_from)?
            }
            // A page at a time, each decoded before the next is read: a million
            // rows are never held twice (raw and decoded).
            None => {
                let mut decoded: Vec<ScheduleRow> = Vec::new();
                loop {
                    // Every name sorts after `''` (a name is never empty).
                    let after = decoded.last().map(|r| r.name.clone()).unwrap_or_default();
                    let values = vec![after.into(), i64::from(SCHEDULES_PAGE).into()];
                    let page = read(&sql.schedules_page, values).await.map_err(fail)?;
                    decoded.extend(all(&page, OP, schedule_from)?);
                    if page.len() < SCHEDULES_PAGE as usize {
                        break decoded;
                    }
                }
            }
        };
        txn.commit().await.map_err(fail)?;
        Ok(ControlState {
            version,
            paused: all(&paused, OP, pause_from)?,
            resumed: all(&resumed, OP, resume_from)?,
            triggers: all(&triggers, OP, trigger_from)?,
            schedules,
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
