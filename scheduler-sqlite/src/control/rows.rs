//! The controls' statements run and their rows decoded: pauses, audit records,
//! triggers, schedules, and pages of rows.

use chrono::{DateTime, Utc};
use scheduler_core::control::{
    ControlAction, ControlRecord, Page, Pause, ScheduleRow, Trigger, TriggerId, TriggerState,
};
use scheduler_core::{Holder, Outcome, Scope};
use sea_orm::{ConnectionTrait, DbBackend, DbErr, QueryResult, Statement, Value};

use crate::error::{Error, Result};
use crate::row::{get, time};
use crate::store::SqliteStore;

/// Runs `sql` on `conn` (the pool or an open transaction) and returns every row.
pub(super) async fn rows(
    store: &SqliteStore,
    conn: &impl ConnectionTrait,
    operation: &'static str,
    sql: &str,
    values: Vec<Value>,
) -> Result<Vec<QueryResult>> {
    conn.query_all_raw(Statement::from_sql_and_values(
        DbBackend::Sqlite,
        sql,
        values,
    ))
    .await
    .map_err(|source| store.origin.statement_error(operation, source))
}

/// The one row `sql` must return.
pub(super) async fn one(
    store: &SqliteStore,
    conn: &impl ConnectionTrait,
    operation: &'static str,
    sql: &str,
    values: Vec<Value>,
) -> Result<QueryResult> {
    rows(store, conn, operation, sql, values)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| bad_row(operation, "no row returned".to_owned()))
}

pub(super) fn bad_row(operation: &'static str, what: String) -> Error {
    Error::BadRow {
        operation,
        cause: DbErr::Custom(what),
    }
}

pub(super) fn flag(row: &QueryResult, col: &str, operation: &'static str) -> Result<bool> {
    Ok(get::<i64>(row, col, operation)? != 0)
}

pub(super) fn optional_time(
    row: &QueryResult,
    col: &str,
    operation: &'static str,
) -> Result<Option<DateTime<Utc>>> {
    match get::<Option<i64>>(row, col, operation)? {
        None => Ok(None),
        Some(_) => time(row, col, operation).map(Some),
    }
}

/// `''` (every node) as `None`.
pub(super) fn node_of(node: String) -> Option<String> {
    Some(node).filter(|n| !n.is_empty())
}

fn page_values(page: Page) -> [Value; 2] {
    [page.before.into(), i64::from(page.limit).into()]
}

pub(super) fn pause_from_row(row: &QueryResult, operation: &'static str) -> Result<Pause> {
    Ok(Pause {
        job: get(row, "job", operation)?,
        node: node_of(get(row, "node", operation)?),
        since: time(row, "since", operation)?,
        by: get(row, "actor", operation)?,
        why: get(row, "why", operation)?,
    })
}

pub(super) fn record_from_row(row: &QueryResult, operation: &'static str) -> Result<ControlRecord> {
    let action: String = get(row, "action", operation)?;
    Ok(ControlRecord {
        id: get(row, "id", operation)?,
        at: time(row, "at", operation)?,
        job: get(row, "job", operation)?,
        node: get(row, "node", operation)?,
        action: ControlAction::parse(&action)
            .ok_or_else(|| bad_row(operation, format!("unknown control action {action:?}")))?,
        by: get(row, "actor", operation)?,
        why: get(row, "why", operation)?,
        detail: get(row, "detail", operation)?,
    })
}

pub(super) fn trigger_from_row(row: &QueryResult, operation: &'static str) -> Result<Trigger> {
    let state: String = get(row, "state", operation)?;
    let missing = |col: &str| bad_row(operation, format!("a {state} trigger without {col}"));
    let state = match state.as_str() {
        "pending" => TriggerState::Pending,
        "running" => TriggerState::Running {
            holder: Holder::from_stored(
                get::<Option<String>>(row, "holder", operation)?
                    .ok_or_else(|| missing("holder"))?,
            ),
            started_at: optional_time(row, "started_at", operation)?
                .ok_or_else(|| missing("started_at"))?,
        },
        "done" => TriggerState::Done {
            outcome: Outcome::from_stored(
                &get::<Option<String>>(row, "outcome", operation)?
                    .ok_or_else(|| missing("outcome"))?,
            ),
            error: get(row, "error", operation)?,
            finished_at: optional_time(row, "finished_at", operation)?
                .ok_or_else(|| missing("finished_at"))?,
        },
        other => {
            return Err(bad_row(
                operation,
                format!("unknown trigger state {other:?}"),
            ));
        }
    };
    Ok(Trigger {
        id: TriggerId(get(row, "id", operation)?),
        job: get(row, "job", operation)?,
        node: get(row, "node", operation)?,
        requested_at: time(row, "requested_at", operation)?,
        by: get(row, "actor", operation)?,
        why: get(row, "why", operation)?,
        state,
    })
}

pub(super) fn schedule_from_row(row: &QueryResult, operation: &'static str) -> Result<ScheduleRow> {
    let scope: String = get(row, "scope", operation)?;
    Ok(ScheduleRow {
        name: get(row, "name", operation)?,
        handler: get(row, "handler", operation)?,
        schedule: get(row, "schedule", operation)?,
        zone: get(row, "zone", operation)?,
        scope: match scope.as_str() {
            "cluster" => Scope::Cluster,
            "node" => Scope::Node,
            other => return Err(bad_row(operation, format!("unknown scope {other:?}"))),
        },
        policy: get(row, "policy", operation)?,
        args: get(row, "args", operation)?,
        enabled: flag(row, "enabled", operation)?,
        version: get(row, "version", operation)?,
        updated_at: optional_time(row, "updated_at", operation)?,
        removed: flag(row, "removed", operation)?,
    })
}

impl SqliteStore {
    /// One page of rows, of job `job` (`of_job`: the job, then the page's values)
    /// or of every job (`all`: the page's values).
    pub(super) async fn paged(
        &self,
        operation: &'static str,
        job: Option<&str>,
        page: Page,
        of_job: &str,
        all: &str,
    ) -> Result<Vec<QueryResult>> {
        let mut values: Vec<Value> = job.map(|j| j.to_owned().into()).into_iter().collect();
        values.extend(page_values(page));
        let sql = if job.is_some() { of_job } else { all };
        rows(self, &self.db, operation, sql, values).await
    }

    pub(super) async fn history_exists(&self) -> Result<bool> {
        const OP: &str = "look for the run history table";
        let found = rows(
            self,
            &self.db,
            OP,
            &self.control.history_table,
            vec![self.control.history_name.clone().into()],
        )
        .await?;
        Ok(!found.is_empty())
    }
}
