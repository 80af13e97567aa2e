//! The control and history rows as a SQL store reads them, decoded once: a store
//! says how to read a column ([`StoredRow`]), and [`record_from`], [`trigger_from`],
//! [`schedule_from`], [`pause_from`], [`resume_from`], [`run_from`] and
//! [`lease_row_from`] make the values, checking what the columns hold.

use chrono::{DateTime, Utc};

use super::{ControlAction, ControlRecord, LeaseRow, Pause, Resume, RunRow, ScheduleRow, Trigger};
use super::{TriggerId, TriggerState};
use crate::job::Scope;
use crate::lease::Holder;
use crate::outcome::Outcome;

/// One row a store read, column by column: what decoding the controls' rows needs
/// of a dialect (how it stores a flag, a time).
pub trait StoredRow {
    /// The store's error for a column missing, of another type, or out of range.
    type Error;

    /// A nullable text column.
    ///
    /// # Errors
    /// The store's, when the column is missing or not text.
    fn opt_text(&self, col: &str) -> Result<Option<String>, Self::Error>;

    /// A 64-bit integer column.
    ///
    /// # Errors
    /// The store's, when the column is missing, NULL or not an integer.
    fn int(&self, col: &str) -> Result<i64, Self::Error>;

    /// A nullable boolean column.
    ///
    /// # Errors
    /// The store's, when the column is missing or not a boolean.
    fn opt_flag(&self, col: &str) -> Result<Option<bool>, Self::Error>;

    /// A nullable time column.
    ///
    /// # Errors
    /// The store's, when the column is missing or out of range.
    fn opt_time(&self, col: &str) -> Result<Option<DateTime<Utc>>, Self::Error>;

    /// A text column ([`opt_text`](Self::opt_text), not NULL).
    ///
    /// # Errors
    /// The store's, when the column is missing, NULL or not text.
    fn text(&self, col: &str) -> Result<String, Self::Error> {
        self.opt_text(col)?.ok_or_else(|| self.null(col))
    }

    /// A 32-bit integer column (an `integer` in PostgreSQL), widened; by default
    /// read as [`int`](Self::int).
    ///
    /// # Errors
    /// The store's, when the column is missing, NULL or not an integer.
    fn int4(&self, col: &str) -> Result<i64, Self::Error> {
        self.int(col)
    }

    /// A boolean column ([`opt_flag`](Self::opt_flag), not NULL).
    ///
    /// # Errors
    /// The store's, when the column is missing, NULL or not a boolean.
    fn flag(&self, col: &str) -> Result<bool, Self::Error> {
        self.opt_flag(col)?.ok_or_else(|| self.null(col))
    }

    /// A time column ([`opt_time`](Self::opt_time), not NULL).
    ///
    /// # Errors
    /// The store's, when the column is missing, NULL or out of range.
    fn time(&self, col: &str) -> Result<DateTime<Utc>, Self::Error> {
        self.opt_time(col)?.ok_or_else(|| self.null(col))
    }

    /// The error for column `col` found NULL where a value must be.
    fn null(&self, col: &str) -> Self::Error {
        self.bad(format!("{col} is NULL"))
    }

    /// The store's error for a row whose values do not make sense together, `what`
    /// saying why.
    fn bad(&self, what: String) -> Self::Error;
}

/// Every row of `rows` through `decode`.
///
/// # Errors
/// The first row's that does not decode.
pub fn decode_all<R: StoredRow, T>(
    rows: impl IntoIterator<Item = R>,
    decode: fn(&R) -> Result<T, R::Error>,
) -> Result<Vec<T>, R::Error> {
    rows.into_iter().map(|row| decode(&row)).collect()
}

/// A node as stored (`''`: every node) as the API says it.
fn node_from_key(node: String) -> Option<String> {
    (!node.is_empty()).then_some(node)
}

/// An audit row (`id`, `at`, `job`, `node`, `action`, `actor`, `why`, `detail`).
///
/// # Errors
/// The row's, or an unknown action.
pub fn record_from<R: StoredRow>(row: &R) -> Result<ControlRecord, R::Error> {
    let action = row.text("action")?;
    let action = ControlAction::parse(&action)
        .ok_or_else(|| row.bad(format!("unknown control action {action:?}")))?;
    Ok(ControlRecord {
        id: row.int("id")?,
        at: row.time("at")?,
        job: row.text("job")?,
        node: row.opt_text("node")?,
        action,
        by: row.text("actor")?,
        why: row.text("why")?,
        detail: row.text("detail")?,
    })
}

/// A trigger row; its state (`pending`, `running`, `done`) with the columns it needs.
///
/// # Errors
/// The row's, an unknown state, or a state without its columns.
pub fn trigger_from<R: StoredRow>(row: &R) -> Result<Trigger, R::Error> {
    let id = row.int("id")?;
    let state = row.text("state")?;
    let state = match state.as_str() {
        "pending" => TriggerState::Pending,
        "running" => {
            let (Some(holder), Some(started_at)) =
                (row.opt_text("holder")?, row.opt_time("started_at")?)
            else {
                return Err(row.bad(format!(
                    "trigger {id} is running without a holder or a start"
                )));
            };
            TriggerState::Running {
                holder: Holder::from_stored(holder),
                started_at,
            }
        }
        "done" => {
            let (Some(outcome), Some(finished_at)) =
                (row.opt_text("outcome")?, row.opt_time("finished_at")?)
            else {
                return Err(row.bad(format!("trigger {id} is done without an outcome or an end")));
            };
            TriggerState::Done {
                outcome: Outcome::from_stored(&outcome),
                error: row.opt_text("error")?,
                finished_at,
            }
        }
        other => {
            return Err(row.bad(format!("trigger {id} is in an unknown state {other:?}")));
        }
    };
    Ok(Trigger {
        id: TriggerId(id),
        job: row.text("job")?,
        node: row.opt_text("node")?,
        requested_at: row.time("requested_at")?,
        by: row.text("actor")?,
        why: row.text("why")?,
        state,
    })
}

/// A dynamic schedule's row.
///
/// # Errors
/// The row's, or an unknown scope.
pub fn schedule_from<R: StoredRow>(row: &R) -> Result<ScheduleRow, R::Error> {
    let scope = row.text("scope")?;
    let scope = match scope.as_str() {
        "cluster" => Scope::Cluster,
        "node" => Scope::Node,
        other => return Err(row.bad(format!("unknown scope {other:?}"))),
    };
    Ok(ScheduleRow {
        name: row.text("name")?,
        handler: row.text("handler")?,
        schedule: row.text("schedule")?,
        zone: row.opt_text("zone")?,
        scope,
        policy: row.text("policy")?,
        args: row.text("args")?,
        enabled: row.flag("enabled")?,
        version: row.int("version")?,
        updated_at: row.opt_time("updated_at")?,
        removed: row.flag("removed")?,
    })
}

/// A pause in force.
///
/// # Errors
/// The row's.
pub fn pause_from<R: StoredRow>(row: &R) -> Result<Pause, R::Error> {
    Ok(Pause {
        job: row.text("job")?,
        node: node_from_key(row.text("node")?),
        since: row.time("since")?,
        by: row.text("actor")?,
        why: row.text("why")?,
    })
}

/// A resume (a `catch_up` left NULL reads as a catch-up, the API's default).
///
/// # Errors
/// The row's.
pub fn resume_from<R: StoredRow>(row: &R) -> Result<Resume, R::Error> {
    Ok(Resume {
        job: row.text("job")?,
        node: node_from_key(row.text("node")?),
        paused_since: row.time("since")?,
        resumed_at: row.time("resumed_at")?,
        catch_up: row.opt_flag("catch_up")?.unwrap_or(true),
        version: row.int("version")?,
    })
}

/// A run of the run history.
///
/// # Errors
/// The row's, or an attempt out of range.
pub fn run_from<R: StoredRow>(row: &R) -> Result<RunRow, R::Error> {
    let attempt = row.int4("attempt")?;
    Ok(RunRow {
        id: row.int("id")?,
        job: row.text("job")?,
        tick: row.time("tick")?,
        node: row.text("node")?,
        token: row.int("token")?,
        started: row.time("started")?,
        finished: row.time("finished")?,
        outcome: Outcome::from_stored(&row.text("outcome")?),
        error: row.opt_text("error")?,
        attempt: u32::try_from(attempt)
            .map_err(|_| row.bad(format!("attempt {attempt} is out of range")))?,
    })
}

/// A lease, as a dashboard shows it.
///
/// # Errors
/// The row's.
pub fn lease_row_from<R: StoredRow>(row: &R) -> Result<LeaseRow, R::Error> {
    Ok(LeaseRow {
        name: row.text("name")?,
        // `''`: the row start-up created for a job new to the cluster, never held.
        holder: row.opt_text("holder")?.filter(|h| !h.is_empty()),
        tick: row.time("tick")?,
        token: row.int("token")?,
        expires_at: row.time("expires_at")?,
        released_at: row.opt_time("released_at")?,
    })
}
