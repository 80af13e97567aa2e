//! The dynamic schedules' bounds (`scheduler_core::control::due`): the rows due by
//! an instant, read a page at a time from the partial index on
//! `(next_tick, name)`, and the advances that move bounds forward. Each is one
//! statement ([`DueSql`](crate::controls_sql::DueSql)); neither is a control (no
//! version bump, no audit row, nothing announced).

use chrono::{DateTime, Utc};
use scheduler_core::control::stored::{StoredRow, schedule_from};
use scheduler_core::control::{Advance, DueCursor, DueSchedule};
use sea_orm::Value;

use super::rows::{Stored, all};
use crate::error::Result;
use crate::store::PostgresStore;

/// A row of the due read: the schedule as every read decodes it, and its bound.
fn due_from(row: &Stored<'_>) -> Result<DueSchedule> {
    Ok(DueSchedule {
        row: schedule_from(row)?,
        next_tick: row.time("next_tick")?,
    })
}

impl PostgresStore {
    /// [`ControlTables::read_due_schedules`](scheduler_core::control::ControlTables::read_due_schedules).
    pub(super) async fn due_rows(
        &self,
        handlers: &[String],
        until: DateTime<Utc>,
        after: Option<&DueCursor>,
        limit: u32,
    ) -> Result<Vec<DueSchedule>> {
        const OP: &str = "read the dynamic schedules due";
        let sql = &self.control_sql().due;
        let (handlers, until): (Value, Value) = (handlers.to_vec().into(), until.into());
        let limit: Value = i64::from(limit).into();
        let rows = match after {
            None => {
                self.query(OP, &sql.due, vec![handlers, until, limit])
                    .await?
            }
            Some(after) => {
                let values = vec![
                    handlers,
                    until,
                    after.next_tick.into(),
                    after.name.clone().into(),
                    limit,
                ];
                self.query(OP, &sql.due_after, values).await?
            }
        };
        all(&rows, OP, due_from)
    }

    /// [`ControlTables::write_advances`](scheduler_core::control::ControlTables::write_advances):
    /// how many rows moved (a row advanced twice in one call, once).
    pub(super) async fn advance_rows(&self, advances: &[Advance]) -> Result<u64> {
        const OP: &str = "advance the dynamic schedules' bounds";
        let names: Vec<String> = advances.iter().map(|a| a.name.clone()).collect();
        let versions: Vec<i64> = advances.iter().map(|a| a.version).collect();
        let bounds: Vec<DateTime<Utc>> = advances.iter().map(|a| a.next_tick).collect();
        let values = vec![names.into(), versions.into(), bounds.into()];
        self.execute(OP, &self.control_sql().due.advance, values)
            .await
    }
}
