//! The controls' rows decoded: audit records, triggers, schedules, pauses, resumes,
//! runs and leases.

use scheduler_core::{
    ControlAction, ControlRecord, Holder, LeaseRow, Outcome, Pause, Resume, RunRow, ScheduleRow,
    Scope, Trigger, TriggerId, TriggerState,
};
use sea_orm::{DbErr, QueryResult};

use crate::error::{Error, Result};
use crate::row::{get, optional_time, time};

/// A bad row of `operation`, in words.
fn bad_row(operation: &'static str, what: String) -> Error {
    Error::BadRow {
        operation,
        cause: DbErr::Custom(what),
    }
}

/// The one row a statement must return.
pub(super) fn one_row(rows: Vec<QueryResult>, operation: &'static str) -> Result<QueryResult> {
    rows.into_iter().next().ok_or_else(|| {
        bad_row(
            operation,
            "no row returned (is the version row of the controls missing?)".to_owned(),
        )
    })
}

/// An audit row.
pub(super) fn record_from_row(row: &QueryResult, operation: &'static str) -> Result<ControlRecord> {
    let action: String = get(row, "action", operation)?;
    let action = ControlAction::parse(&action)
        .ok_or_else(|| bad_row(operation, format!("unknown control action {action:?}")))?;
    Ok(ControlRecord {
        id: get(row, "id", operation)?,
        at: time(row, "at", operation)?,
        job: get(row, "job", operation)?,
        node: get(row, "node", operation)?,
        action,
        by: get(row, "actor", operation)?,
        why: get(row, "why", operation)?,
        detail: get(row, "detail", operation)?,
    })
}

/// A trigger row.
pub(super) fn trigger_from_row(row: &QueryResult, operation: &'static str) -> Result<Trigger> {
    let id: i64 = get(row, "id", operation)?;
    let state: String = get(row, "state", operation)?;
    let state = match state.as_str() {
        "pending" => TriggerState::Pending,
        "running" => {
            let holder: Option<String> = get(row, "holder", operation)?;
            let started_at = optional_time(row, "started_at", operation)?;
            let (Some(holder), Some(started_at)) = (holder, started_at) else {
                return Err(bad_row(
                    operation,
                    format!("trigger {id} is running without a holder or a start"),
                ));
            };
            TriggerState::Running {
                holder: Holder::from_stored(holder),
                started_at,
            }
        }
        "done" => {
            let outcome: Option<String> = get(row, "outcome", operation)?;
            let finished_at = optional_time(row, "finished_at", operation)?;
            let (Some(outcome), Some(finished_at)) = (outcome, finished_at) else {
                return Err(bad_row(
                    operation,
                    format!("trigger {id} is done without an outcome or an end"),
                ));
            };
            TriggerState::Done {
                outcome: Outcome::from_stored(&outcome),
                error: get(row, "error", operation)?,
                finished_at,
            }
        }
        other => {
            return Err(bad_row(
                operation,
                format!("trigger {id} is in an unknown state {other:?}"),
            ));
        }
    };
    Ok(Trigger {
        id: TriggerId(id),
        job: get(row, "job", operation)?,
        node: get(row, "node", operation)?,
        requested_at: time(row, "requested_at", operation)?,
        by: get(row, "actor", operation)?,
        why: get(row, "why", operation)?,
        state,
    })
}

/// A schedule row.
pub(super) fn schedule_from_row(row: &QueryResult, operation: &'static str) -> Result<ScheduleRow> {
    let scope: String = get(row, "scope", operation)?;
    let scope = match scope.as_str() {
        "cluster" => Scope::Cluster,
        "node" => Scope::Node,
        other => return Err(bad_row(operation, format!("unknown scope {other:?}"))),
    };
    Ok(ScheduleRow {
        name: get(row, "name", operation)?,
        handler: get(row, "handler", operation)?,
        schedule: get(row, "schedule", operation)?,
        zone: get(row, "zone", operation)?,
        scope,
        policy: get(row, "policy", operation)?,
        args: get(row, "args", operation)?,
        enabled: get(row, "enabled", operation)?,
        version: get(row, "version", operation)?,
        updated_at: Some(time(row, "updated_at", operation)?),
        removed: get(row, "removed", operation)?,
    })
}

/// A node as stored (`''`: every node) as the API says it.
fn node_from_key(node: String) -> Option<String> {
    (!node.is_empty()).then_some(node)
}

/// Every row of `rows` through `decode`.
pub(super) fn all<T>(
    rows: &[QueryResult],
    operation: &'static str,
    decode: fn(&QueryResult, &'static str) -> Result<T>,
) -> Result<Vec<T>> {
    rows.iter().map(|row| decode(row, operation)).collect()
}

pub(super) fn pause_from_row(row: &QueryResult, operation: &'static str) -> Result<Pause> {
    Ok(Pause {
        job: get(row, "job", operation)?,
        node: node_from_key(get(row, "node", operation)?),
        since: time(row, "since", operation)?,
        by: get(row, "actor", operation)?,
        why: get(row, "why", operation)?,
    })
}

pub(super) fn resume_from_row(row: &QueryResult, operation: &'static str) -> Result<Resume> {
    Ok(Resume {
        job: get(row, "job", operation)?,
        node: node_from_key(get(row, "node", operation)?),
        paused_since: time(row, "since", operation)?,
        resumed_at: time(row, "resumed_at", operation)?,
        catch_up: get::<Option<bool>>(row, "catch_up", operation)?.unwrap_or(true),
        version: get(row, "version", operation)?,
    })
}

pub(super) fn run_from_row(row: &QueryResult, operation: &'static str) -> Result<RunRow> {
    let attempt: i32 = get(row, "attempt", operation)?;
    Ok(RunRow {
        id: get(row, "id", operation)?,
        job: get(row, "job", operation)?,
        tick: time(row, "tick", operation)?,
        node: get(row, "node", operation)?,
        token: get(row, "token", operation)?,
        started: time(row, "started", operation)?,
        finished: time(row, "finished", operation)?,
        outcome: Outcome::from_stored(&get::<String>(row, "outcome", operation)?),
        error: get(row, "error", operation)?,
        attempt: u32::try_from(attempt)
            .map_err(|_| bad_row(operation, format!("attempt {attempt} is negative")))?,
    })
}

pub(super) fn lease_row_from_row(row: &QueryResult, operation: &'static str) -> Result<LeaseRow> {
    Ok(LeaseRow {
        name: get(row, "name", operation)?,
        holder: get(row, "holder", operation)?,
        tick: time(row, "tick", operation)?,
        token: get(row, "token", operation)?,
        expires_at: time(row, "expires_at", operation)?,
        released_at: optional_time(row, "released_at", operation)?,
    })
}
