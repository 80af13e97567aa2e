//! The dynamic schedules' bounds ([`scheduler_core::control::due`]): the rows due by
//! an instant, read a page at a time through the `_due` partial index, and the
//! bounds moved forward by one update. Both are one statement; an advance bumps no
//! version and writes no audit row (it changes no row as the operators see it).

use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use scheduler_core::control::stored::schedule_from;
use scheduler_core::{Advance, DueCursor, DueSchedule, ScheduleRow};
use sea_orm::{ConnectionTrait, DbBackend, Statement, Value};

use super::rows::{Stored, all, rows};
use crate::batch;
use crate::error::Result;
use crate::row::time;
use crate::store::SqliteStore;

/// A row of the due read: the schedule's columns and its bound.
fn due_from(stored: &Stored<'_>) -> Result<DueSchedule> {
    Ok(DueSchedule {
        row: schedule_from(stored)?,
        next_tick: time(stored.row, "next_tick", stored.operation)?,
    })
}

/// `handlers` (or any texts) as a JSON array of strings.
fn handlers_json(handlers: &[String]) -> String {
    let mut out = String::with_capacity(2 + handlers.len() * 16);
    out.push('[');
    for (i, handler) in handlers.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        batch::string(&mut out, handler);
    }
    out.push(']');
    out
}

/// `[[name, version, next_tick],…]`, `next_tick` in microseconds (a finer instant
/// rounded down: a bound never moves past it).
fn advances_json(advances: &[Advance]) -> String {
    let mut out = String::with_capacity(2 + advances.len() * 48);
    out.push('[');
    for (i, advance) in advances.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('[');
        batch::string(&mut out, &advance.name);
        // Writing to a String cannot fail.
        let _ = write!(
            out,
            ",{},{}]",
            advance.version,
            advance.next_tick.timestamp_micros()
        );
    }
    out.push(']');
    out
}

/// The cursor as the statement compares it, in whole microseconds: a cursor finer
/// than a microsecond `t` is after exactly the rows from the next microsecond on,
/// which is `(that microsecond, '')` (a name is never empty).
fn cursor_values(after: &DueCursor) -> (i64, String) {
    let micros = after.next_tick.timestamp_micros();
    if after
        .next_tick
        .timestamp_subsec_nanos()
        .is_multiple_of(1000)
    {
        (micros, after.name.clone())
    } else {
        (micros.saturating_add(1), String::new())
    }
}

impl SqliteStore {
    /// [`ControlTables::read_due_schedules`](scheduler_core::control::ControlTables::read_due_schedules).
    pub(super) async fn due(
        &self,
        handlers: &[String],
        until: DateTime<Utc>,
        after: Option<&DueCursor>,
        limit: u32,
    ) -> Result<Vec<DueSchedule>> {
        const OP: &str = "read the due dynamic schedules";
        let sql = &self.control.due;
        // `until` rounded down: the bounds are whole microseconds.
        let mut values: Vec<Value> = vec![
            handlers_json(handlers).into(),
            until.timestamp_micros().into(),
        ];
        let statement = match after {
            Some(after) => {
                let (next_tick, name) = cursor_values(after);
                values.extend([next_tick.into(), name.into()]);
                &sql.after
            }
            None => &sql.first,
        };
        values.push(i64::from(limit).into());
        let found = rows(self, &self.db, OP, statement, values).await?;
        all(&found, OP, due_from)
    }

    /// [`ControlTables::read_changed_schedules`](scheduler_core::control::ControlTables::read_changed_schedules).
    pub(super) async fn changed_among(
        &self,
        since: i64,
        upto: i64,
        names: &[String],
    ) -> Result<Vec<ScheduleRow>> {
        const OP: &str = "read the changed schedules";
        let values: Vec<Value> = vec![handlers_json(names).into(), since.into(), upto.into()];
        let found = rows(self, &self.db, OP, &self.control.changed_among, values).await?;
        all(&found, OP, schedule_from)
    }

    /// [`ControlTables::write_advances`](scheduler_core::control::ControlTables::write_advances):
    /// how many rows moved.
    pub(super) async fn advance(&self, advances: &[Advance]) -> Result<u64> {
        const OP: &str = "advance the dynamic schedules' bounds";
        let values = vec![advances_json(advances).into()];
        let _turn = self.write_turn(OP).await?;
        let done = self
            .db
            .execute_raw(Statement::from_sql_and_values(
                DbBackend::Sqlite,
                &self.control.due.advance,
                values,
            ))
            .await
            .map_err(|source| self.origin.statement_error(OP, source))?;
        Ok(done.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64, nanos: u32) -> DateTime<Utc> {
        DateTime::from_timestamp(secs, nanos).unwrap_or_else(|| panic!("{secs}.{nanos}"))
    }

    #[test]
    fn advances_are_rows_of_name_version_and_microseconds() {
        let advance = |name: &str, nanos| Advance {
            name: name.to_owned(),
            version: 7,
            next_tick: at(2, nanos),
        };
        assert_eq!(
            advances_json(&[advance("a\"b", 0), advance("c", 1_999)]),
            r#"[["a\"b",7,2000000],["c",7,2000001]]"#
        );
        assert_eq!(advances_json(&[]), "[]");
    }

    #[test]
    fn a_cursor_finer_than_a_microsecond_starts_at_the_next_one() {
        let cursor = |nanos| DueCursor {
            next_tick: at(1, nanos),
            name: "n".to_owned(),
        };
        assert_eq!(cursor_values(&cursor(2_000)), (1_000_002, "n".to_owned()));
        assert_eq!(cursor_values(&cursor(2_001)), (1_000_003, String::new()));
    }

    /// The due read walks the `_due` partial index in its order, with a cursor or
    /// without: no other index, no sort, whatever the handlers.
    #[tokio::test]
    async fn the_due_read_walks_the_due_index() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!(
            "scheduler-sqlite-due-plan-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let store = SqliteStore::open(&dir.join("leases.db"), crate::SqliteOptions::default())
            .await
            .unwrap_or_else(|e| panic!("open: {e}"));
        let sql = &store.control.due;
        let handlers = handlers_json(&["h".to_owned()]);
        let plans = [
            (
                &sql.first,
                vec![handlers.clone().into(), 5_i64.into(), 10_i64.into()],
            ),
            (
                &sql.after,
                vec![
                    handlers.into(),
                    5_i64.into(),
                    1_i64.into(),
                    "a".into(),
                    10_i64.into(),
                ],
            ),
        ];
        for (text, values) in plans {
            let plan: Vec<String> = store
                .db
                .query_all_raw(Statement::from_sql_and_values(
                    DbBackend::Sqlite,
                    format!("EXPLAIN QUERY PLAN {text}"),
                    values,
                ))
                .await
                .unwrap_or_else(|e| panic!("explain: {e}"))
                .iter()
                .map(|row| {
                    row.try_get::<String>("", "detail")
                        .unwrap_or_else(|e| panic!("detail: {e}"))
                })
                .collect();
            let search = plan
                .iter()
                .find(|step| step.contains("scheduler_leases_schedules "))
                .unwrap_or_else(|| panic!("no step reads the schedules: {plan:?}"));
            assert!(
                search.contains("USING INDEX scheduler_leases_schedules_due (")
                    && search.contains("next_tick"),
                "{plan:?}"
            );
            assert!(
                !plan.iter().any(|step| step.contains("ORDER BY")),
                "sorted after the read: {plan:?}"
            );
        }
        store.close().await.unwrap_or_else(|e| panic!("close: {e}"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn handlers_are_a_json_array_of_strings() {
        assert_eq!(
            handlers_json(&["a".to_owned(), "b\"".to_owned()]),
            r#"["a","b\""]"#
        );
        assert_eq!(handlers_json(&[]), "[]");
    }
}
