//! Writing dynamic schedules: `put_schedule` and `remove_schedule`, each with its
//! audit row, which keeps the schedule as JSON. A put writes the row's bound
//! ([`TickBounds`]) too.

use chrono::Utc;
use scheduler_core::TickBounds;
use scheduler_core::control::stored::schedule_from;
use scheduler_core::control::{ControlAction, ControlRecord, HandlerCheck, ScheduleRow};

use super::rows::{Stored, all, flag, one, rows};
use crate::batch;
use crate::error::Result;
use crate::row::get;
use crate::store::SqliteStore;

/// The rows per statement when every schedule is read: each page's raw rows are
/// decoded before the next is read, so a million rows are never held twice (raw,
/// about 850 bytes a row, and decoded).
const SCHEDULES_PAGE: u32 = 10_000;

/// Every schedule not removed, in name order, read a page at a time on `conn` (the
/// pool, or the poll's transaction: then one snapshot).
pub(super) async fn every_schedule(
    store: &SqliteStore,
    conn: &impl sea_orm::ConnectionTrait,
    operation: &'static str,
) -> Result<Vec<ScheduleRow>> {
    let mut decoded: Vec<ScheduleRow> = Vec::new();
    loop {
        // Every name sorts after `''` (a name is never empty).
        let after = decoded.last().map(|r| r.name.clone()).unwrap_or_default();
        let values = vec![after.into(), i64::from(SCHEDULES_PAGE).into()];
        let page = rows(
            store,
            conn,
            operation,
            &store.control.schedules_page,
            values,
        )
        .await?;
        decoded.extend(all(&page, operation, schedule_from)?);
        if page.len() < SCHEDULES_PAGE as usize {
            return Ok(decoded);
        }
    }
}

/// What a schedule's audit row keeps of it: the row as JSON (its arguments are JSON
/// already, checked before).
fn schedule_detail(row: &ScheduleRow) -> String {
    let mut out = String::from("{\"handler\":");
    batch::string(&mut out, &row.handler);
    out.push_str(",\"schedule\":");
    batch::string(&mut out, &row.schedule);
    out.push_str(",\"zone\":");
    match &row.zone {
        Some(zone) => batch::string(&mut out, zone),
        None => out.push_str("null"),
    }
    out.push_str(",\"scope\":");
    batch::string(&mut out, &row.scope.to_string());
    out.push_str(",\"policy\":");
    batch::string(&mut out, &row.policy);
    out.push_str(",\"args\":");
    out.push_str(&row.args);
    out.push_str(",\"enabled\":");
    out.push_str(if row.enabled { "true" } else { "false" });
    out.push('}');
    out
}

impl SqliteStore {
    /// Refuses arguments that are not JSON, as SQLite's `json_valid` says.
    pub(super) async fn check_json_args(&self, row: &ScheduleRow) -> scheduler_core::Result<()> {
        const OP: &str = "store a dynamic schedule";
        let valid = one(
            self,
            &self.db,
            OP,
            &self.control.json_valid,
            vec![row.args.clone().into()],
        )
        .await?;
        if !flag(&valid, "valid", OP)? {
            return Err(scheduler_core::Error::InvalidControl {
                reason: format!(
                    "schedule {:?}: its arguments are not JSON: {:?}",
                    row.name,
                    row.args.chars().take(64).collect::<String>()
                ),
            });
        }
        Ok(())
    }

    /// The handlers the registrations name, read in the write's transaction `txn`:
    /// what a put's handler is checked against.
    pub(super) async fn known_handlers(
        &self,
        txn: &sea_orm::DatabaseTransaction,
        operation: &'static str,
    ) -> Result<Vec<String>> {
        rows(self, txn, operation, &self.control.handlers, Vec::new())
            .await?
            .iter()
            .map(|r| get(r, "handler", operation))
            .collect()
    }

    /// [`ControlTables::write_schedule`](scheduler_core::control::ControlTables::write_schedule):
    /// the handler checked against the handlers read in the write's transaction, the
    /// bound from the writer's clock read before the write waits its turn (an earlier
    /// clock only makes it earlier, never late).
    pub(super) async fn put_dynamic_schedule(
        &self,
        row: &ScheduleRow,
        by: &str,
        why: &str,
        handler: &HandlerCheck<'_>,
    ) -> scheduler_core::Result<ControlRecord> {
        const OP: &str = "store a dynamic schedule";
        let next_tick = TickBounds::new(Utc::now()).bound(row).timestamp_micros();
        let (_turn, txn) = self.begin_write(OP).await?;
        let known = self.known_handlers(&txn, OP).await?;
        handler.check(&known)?;
        let at = self.bump(&txn, OP).await?;
        let values = vec![
            row.name.clone().into(),
            row.handler.clone().into(),
            row.schedule.clone().into(),
            row.zone.clone().into(),
            row.scope.to_string().into(),
            row.policy.clone().into(),
            row.args.clone().into(),
            row.enabled.into(),
            at.version.into(),
            by.to_owned().into(),
            at.now.into(),
            next_tick.into(),
        ];
        rows(self, &txn, OP, &self.control.put_schedule, values).await?;
        let record = self
            .audit(
                &txn,
                OP,
                &at,
                &row.name,
                None,
                ControlAction::SchedulePut,
                by,
                why,
                schedule_detail(row),
            )
            .await?;
        txn.commit()
            .await
            .map_err(|source| self.origin.statement_error(OP, source))?;
        Ok(record)
    }

    /// [`ControlTables::write_removal`](scheduler_core::control::ControlTables::write_removal).
    pub(super) async fn remove_dynamic_schedule(
        &self,
        name: &str,
        by: &str,
        why: &str,
    ) -> scheduler_core::Result<Option<ControlRecord>> {
        const OP: &str = "remove a dynamic schedule";
        let (_turn, txn) = self.begin_write(OP).await?;
        let at = self.bump(&txn, OP).await?;
        let values = vec![
            name.to_owned().into(),
            at.version.into(),
            by.to_owned().into(),
            at.now.into(),
        ];
        let removed = rows(self, &txn, OP, &self.control.remove_schedule, values).await?;
        let Some(row) = removed.first() else {
            // Nothing to remove: the bump is rolled back with the transaction.
            return Ok(None);
        };
        let detail = schedule_detail(&schedule_from(&Stored { row, operation: OP })?);
        let record = self
            .audit(
                &txn,
                OP,
                &at,
                name,
                None,
                ControlAction::ScheduleRemove,
                by,
                why,
                detail,
            )
            .await?;
        txn.commit()
            .await
            .map_err(|source| self.origin.statement_error(OP, source))?;
        Ok(Some(record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_detail_is_its_row_as_json() {
        let mut row = ScheduleRow::new("r", "h\"x", "every 30s");
        row.args = r#"{"a": [1, 2]}"#.to_owned();
        assert_eq!(
            schedule_detail(&row),
            r#"{"handler":"h\"x","schedule":"every 30s","zone":null,"scope":"cluster","policy":"","args":{"a": [1, 2]},"enabled":true}"#
        );
    }
}
