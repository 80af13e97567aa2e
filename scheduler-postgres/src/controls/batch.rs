//! A batch of dynamic schedules put at once
//! ([`Controls::put_schedules`](scheduler_core::Controls::put_schedules)), in one
//! short `READ COMMITTED` transaction: the version row bumped first (every control's
//! first lock, so two controls never wait on each other in a cycle; the bump is
//! announced at commit), the handlers read and checked, the rows written in chunks
//! (`INSERT … SELECT FROM unnest(…) ON CONFLICT (name) DO UPDATE`, each chunk's
//! columns bound as arrays, each row's bound among them: [`TickBounds`], one for
//! the batch, so each schedule and zone is computed once), then the one audit row.
//!
//! The arguments are checked as JSON before anything is sent (`serde_json`, naming
//! the row); the few texts `jsonb` still refuses (a `\u0000` escape) refuse the
//! batch in the statement, rolled back, without naming the row.

use chrono::{DateTime, Utc};
use scheduler_core::control::stored::record_from;
use scheduler_core::control::{HandlersCheck, TickBounds, batch_detail};
use scheduler_core::{ControlRecord, ScheduleRow};
use sea_orm::Value;
use sea_orm::{ConnectionTrait, DatabaseTransaction, DbBackend, DbErr, QueryResult, Statement};

use super::invalid;
use super::rows::{Stored, one_row};
use crate::error::{Error, describe, sqlstate};
use crate::row::get;
use crate::store::PostgresStore;

/// Rows per statement: 10,000 rows, a few megabytes of parameters.
const CHUNK: usize = 10_000;

/// A chunk's columns, as the nine arrays `put_schedules` binds (the last the rows'
/// bounds, from `bounds`), then the version and the actor.
fn chunk_values(
    chunk: &[ScheduleRow],
    bounds: &mut TickBounds,
    version: i64,
    by: &str,
) -> Vec<Value> {
    let column = |f: &dyn Fn(&ScheduleRow) -> String| -> Value {
        chunk.iter().map(f).collect::<Vec<String>>().into()
    };
    vec![
        column(&|r| r.name.clone()),
        column(&|r| r.handler.clone()),
        column(&|r| r.schedule.clone()),
        column(&|r| r.zone.clone().unwrap_or_default()),
        column(&|r| r.scope.to_string()),
        column(&|r| r.policy.clone()),
        column(&|r| r.args.clone()),
        chunk
            .iter()
            .map(|r| r.enabled)
            .collect::<Vec<bool>>()
            .into(),
        chunk
            .iter()
            .map(|r| bounds.bound(r))
            .collect::<Vec<DateTime<Utc>>>()
            .into(),
        version.into(),
        by.to_owned().into(),
    ]
}

async fn run(
    txn: &DatabaseTransaction,
    sql: &str,
    values: Vec<Value>,
) -> Result<Vec<QueryResult>, DbErr> {
    txn.query_all_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        sql,
        values,
    ))
    .await
}

impl PostgresStore {
    /// [`ControlTables::check_args_batch`](scheduler_core::control::ControlTables::check_args_batch):
    /// every row's arguments parsed as JSON here, before the database is asked.
    pub(super) fn check_json_args_batch(rows: &[ScheduleRow]) -> scheduler_core::Result<()> {
        for (index, row) in rows.iter().enumerate() {
            if let Err(cause) = serde_json::from_str::<serde::de::IgnoredAny>(&row.args) {
                return Err(scheduler_core::Error::InBatch {
                    index,
                    name: row.name.clone(),
                    cause: Box::new(invalid(format!(
                        "schedule {:?}: its arguments are not JSON ({cause}); pass JSON text, \
                         `{{}}` for none",
                        row.name
                    ))),
                });
            }
        }
        Ok(())
    }

    /// [`ControlTables::write_schedules`](scheduler_core::control::ControlTables::write_schedules).
    pub(super) async fn put_schedules_checked(
        &self,
        rows: &[ScheduleRow],
        by: &str,
        why: &str,
        handlers: &HandlersCheck<'_>,
    ) -> scheduler_core::Result<ControlRecord> {
        const OP: &str = "store a batch of dynamic schedules";
        let fail = |cause: DbErr| -> scheduler_core::Error {
            // invalid_text_representation, untranslatable_character: the `jsonb`
            // cast of some row's arguments.
            if matches!(sqlstate(&cause).as_deref(), Some("22P02" | "22P05")) {
                return invalid(format!(
                    "a row's arguments are not JSON as PostgreSQL reads them ({}); nothing was \
                     written",
                    describe(&cause)
                ));
            }
            Error::statement(OP, cause).into()
        };
        let sql = self.control_sql();
        let txn = self
            .session()
            .begin_read_committed()
            .await
            .map_err(|cause| Error::statement(OP, cause))?;
        let bumped = one_row(run(&txn, &sql.bump, Vec::new()).await.map_err(fail)?, OP)?;
        let version: i64 = get(&bumped, "version", OP)?;
        let known = run(&txn, &sql.handlers, Vec::new())
            .await
            .map_err(fail)?
            .iter()
            .map(|row| get(row, "handler", OP))
            .collect::<crate::error::Result<Vec<String>>>()?;
        // A refusal drops the transaction: rolled back, nothing written.
        handlers.check(&known)?;
        let mut bounds = TickBounds::new(Utc::now());
        for chunk in rows.chunks(CHUNK) {
            let values = chunk_values(chunk, &mut bounds, version, by);
            run(&txn, &sql.put_schedules, values).await.map_err(fail)?;
        }
        let first = rows.first().map(|row| row.name.clone()).unwrap_or_default();
        let values = vec![
            first.into(),
            by.to_owned().into(),
            why.to_owned().into(),
            batch_detail(rows).into(),
        ];
        let audit = one_row(
            run(&txn, &sql.audit_schedules, values)
                .await
                .map_err(fail)?,
            OP,
        )?;
        let record = record_from(&Stored {
            row: &audit,
            operation: OP,
        })?;
        txn.commit()
            .await
            .map_err(|cause| Error::statement(OP, cause))?;
        Ok(record)
    }
}
