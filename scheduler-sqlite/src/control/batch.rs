//! A batch of dynamic schedules put at once
//! ([`Controls::put_schedules`](scheduler_core::Controls::put_schedules)): one
//! `BEGIN IMMEDIATE` transaction that reads the handlers, bumps the version once,
//! writes the rows in chunks (each chunk one statement, its rows one bound JSON
//! parameter unpacked by `json_each`), each with its bound (`next_tick`, one
//! [`TickBounds`] for the batch), and appends one audit row.

use std::fmt::Write as _;

use chrono::Utc;
use scheduler_core::TickBounds;
use scheduler_core::control::{
    ControlAction, ControlRecord, HandlersCheck, ScheduleRow, batch_detail,
};

use super::rows::rows;
use crate::batch;
use crate::row::get;
use crate::store::SqliteStore;

/// Rows per statement: a chunk's JSON stays a few megabytes.
const CHUNK: usize = 10_000;

/// `[[name, handler, schedule, zone, scope, policy, args, enabled, next_tick],…]`,
/// the arguments as a JSON string (stored as given), `next_tick` the row's bound
/// from `bounds` in microseconds.
fn chunk_json(chunk: &[ScheduleRow], bounds: &mut TickBounds) -> String {
    let mut out = String::with_capacity(2 + chunk.len() * 160);
    out.push('[');
    for (i, row) in chunk.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('[');
        for text in [&row.name, &row.handler, &row.schedule] {
            batch::string(&mut out, text);
            out.push(',');
        }
        match &row.zone {
            Some(zone) => batch::string(&mut out, zone),
            None => out.push_str("null"),
        }
        out.push(',');
        batch::string(&mut out, &row.scope.to_string());
        out.push(',');
        batch::string(&mut out, &row.policy);
        out.push(',');
        batch::string(&mut out, &row.args);
        let next_tick = bounds.bound(row).timestamp_micros();
        // Writing to a String cannot fail.
        let _ = write!(out, ",{},{next_tick}]", u8::from(row.enabled));
    }
    out.push(']');
    out
}

/// The rows' arguments as a JSON array of strings.
fn args_json(rows: &[ScheduleRow]) -> String {
    let mut out = String::with_capacity(2 + rows.len() * 16);
    out.push('[');
    for (i, row) in rows.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        batch::string(&mut out, &row.args);
    }
    out.push(']');
    out
}

impl SqliteStore {
    /// [`ControlTables::check_args_batch`](scheduler_core::control::ControlTables::check_args_batch):
    /// every row's arguments in one read, by SQLite's `json_valid` as one put checks
    /// them.
    pub(super) async fn check_json_args_batch(
        &self,
        batch_rows: &[ScheduleRow],
    ) -> scheduler_core::Result<()> {
        const OP: &str = "check a batch of dynamic schedules";
        let found = rows(
            self,
            &self.db,
            OP,
            &self.control.first_bad_args,
            vec![args_json(batch_rows).into()],
        )
        .await?;
        let Some(found) = found.first() else {
            return Ok(());
        };
        let index: i64 = get(found, "idx", OP)?;
        let index = usize::try_from(index).unwrap_or_default();
        let Some(row) = batch_rows.get(index) else {
            return Ok(());
        };
        Err(scheduler_core::Error::InBatch {
            index,
            name: row.name.clone(),
            cause: Box::new(scheduler_core::Error::InvalidControl {
                reason: format!(
                    "schedule {:?}: its arguments are not JSON: {:?}",
                    row.name,
                    row.args.chars().take(64).collect::<String>()
                ),
            }),
        })
    }

    /// [`ControlTables::write_schedules`](scheduler_core::control::ControlTables::write_schedules).
    pub(super) async fn put_dynamic_schedules(
        &self,
        batch_rows: &[ScheduleRow],
        by: &str,
        why: &str,
        handlers: &HandlersCheck<'_>,
    ) -> scheduler_core::Result<ControlRecord> {
        const OP: &str = "store a batch of dynamic schedules";
        // The writer's clock read before the write waits its turn: an earlier clock
        // only makes a bound earlier, never late.
        let mut bounds = TickBounds::new(Utc::now());
        let (_turn, txn) = self.begin_write(OP).await?;
        let known = self.known_handlers(&txn, OP).await?;
        handlers.check(&known)?;
        let at = self.bump(&txn, OP).await?;
        for chunk in batch_rows.chunks(CHUNK) {
            let values = vec![
                chunk_json(chunk, &mut bounds).into(),
                at.version.into(),
                at.now.into(),
                by.to_owned().into(),
            ];
            rows(self, &txn, OP, &self.control.put_schedules, values).await?;
        }
        let first = batch_rows
            .first()
            .map(|row| row.name.as_str())
            .unwrap_or_default();
        let record = self
            .audit(
                &txn,
                OP,
                &at,
                first,
                None,
                ControlAction::SchedulePut,
                by,
                why,
                batch_detail(batch_rows),
            )
            .await?;
        txn.commit()
            .await
            .map_err(|source| self.origin.statement_error(OP, source))?;
        Ok(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_is_its_rows_as_json_arrays() {
        let mut row = ScheduleRow::new("r\"1", "h", "every 30s");
        row.args = r#"{"a":1}"#.to_owned();
        row.enabled = false;
        let Some(now) = chrono::DateTime::from_timestamp(1_000_040, 500) else {
            panic!("time");
        };
        // The first tick after the clock less the margin (999 980.0000005 s): 999 990 s.
        assert_eq!(
            chunk_json(&[row], &mut TickBounds::new(now)),
            r#"[["r\"1","h","every 30s",null,"cluster","","{\"a\":1}",0,999990000000]]"#
        );
    }
}
