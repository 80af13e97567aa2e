//! [`Controls`] for [`SqliteStore`]: pauses, resumes, triggers, dynamic schedules
//! and their record, in the tables of migration 3 beside the lease table.
//!
//! Every control is one `BEGIN IMMEDIATE` transaction (after the store's write turn)
//! that bumps the control version, applies the change stamped with that version and
//! appends its audit row: all of it or nothing. Claiming and finishing a trigger
//! bump the version too (the open triggers change), without an audit row. Polling an
//! unchanged version is one read of the version row; a changed one is read in one
//! read transaction, so its parts agree.

mod sql;

use std::collections::BTreeSet;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use scheduler_core::control::{
    ControlAction, ControlRecord, ControlRequest, ControlState, Controls, LeaseRow, Page, Pause,
    Resume, RunRow, ScheduleRow, Trigger, TriggerId, TriggerState,
};
use scheduler_core::{FencingToken, Holder, Lease, LeaseName, Scope, Tick, Ttl};
use sea_orm::{ConnectionTrait, DbBackend, DbErr, QueryResult, Statement, TransactionTrait, Value};

pub(crate) use self::sql::ControlSql;
use crate::batch;
use crate::error::{Error, Result};
use crate::row::{get, name_from_row, time};
use crate::store::SqliteStore;

/// Runs `sql` on `conn` (the pool or an open transaction) and returns every row.
async fn rows(
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
async fn one(
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

fn bad_row(operation: &'static str, what: String) -> Error {
    Error::BadRow {
        operation,
        cause: DbErr::Custom(what),
    }
}

/// A job or node name, checked as lease names are.
fn check_name(name: &str) -> Result<()> {
    LeaseName::new(name.to_owned())?;
    Ok(())
}

fn check_request(req: &ControlRequest) -> Result<()> {
    check_name(&req.job)?;
    if let Some(node) = &req.node {
        check_name(node)?;
    }
    Ok(())
}

fn flag(row: &QueryResult, col: &str, operation: &'static str) -> Result<bool> {
    Ok(get::<i64>(row, col, operation)? != 0)
}

fn optional_time(
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
fn node_of(node: String) -> Option<String> {
    Some(node).filter(|n| !n.is_empty())
}

fn page_values(page: Page) -> [Value; 2] {
    [page.before.into(), i64::from(page.limit).into()]
}

fn pause_from_row(row: &QueryResult, operation: &'static str) -> Result<Pause> {
    Ok(Pause {
        job: get(row, "job", operation)?,
        node: node_of(get(row, "node", operation)?),
        since: time(row, "since", operation)?,
        by: get(row, "actor", operation)?,
        why: get(row, "why", operation)?,
    })
}

fn record_from_row(row: &QueryResult, operation: &'static str) -> Result<ControlRecord> {
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

fn trigger_from_row(row: &QueryResult, operation: &'static str) -> Result<Trigger> {
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
            outcome: get::<Option<String>>(row, "outcome", operation)?
                .ok_or_else(|| missing("outcome"))?,
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

fn schedule_from_row(row: &QueryResult, operation: &'static str) -> Result<ScheduleRow> {
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

/// A control's version and instant.
struct Bumped {
    version: i64,
    now: i64,
}

impl SqliteStore {
    /// Bumps the control version in `txn`; returns the new version and the instant
    /// (microseconds) the control's rows are stamped with.
    async fn bump(&self, txn: &impl ConnectionTrait, operation: &'static str) -> Result<Bumped> {
        let row = one(self, txn, operation, &self.control.bump, Vec::new()).await?;
        Ok(Bumped {
            version: get(&row, "version", operation)?,
            now: get(&row, "now", operation)?,
        })
    }

    /// Appends the audit row of `action` in `txn`.
    #[allow(clippy::too_many_arguments)]
    async fn audit(
        &self,
        txn: &impl ConnectionTrait,
        operation: &'static str,
        at: &Bumped,
        job: &str,
        node: Option<&str>,
        action: ControlAction,
        by: &str,
        why: &str,
        detail: String,
    ) -> Result<ControlRecord> {
        let values = vec![
            job.to_owned().into(),
            node.map(str::to_owned).into(),
            action.as_str().into(),
            by.to_owned().into(),
            why.to_owned().into(),
            detail.into(),
            at.now.into(),
        ];
        let row = one(self, txn, operation, &self.control.audit, values).await?;
        record_from_row(&row, operation)
    }

    /// One page of rows, of job `job` (`of_job`: the job, then the page's values)
    /// or of every job (`all`: the page's values).
    async fn paged(
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

    async fn history_exists(&self) -> Result<bool> {
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

#[async_trait]
impl Controls for SqliteStore {
    async fn pause(&self, req: &ControlRequest) -> scheduler_core::Result<ControlRecord> {
        const OP: &str = "pause a job";
        check_request(req)?;
        let (_turn, txn) = self.begin_write(OP).await?;
        let at = self.bump(&txn, OP).await?;
        let values = vec![
            req.job.clone().into(),
            req.node.clone().unwrap_or_default().into(),
            req.by.clone().into(),
            req.why.clone().into(),
            at.version.into(),
            at.now.into(),
        ];
        rows(self, &txn, OP, &self.control.pause, values).await?;
        let record = self
            .audit(
                &txn,
                OP,
                &at,
                &req.job,
                req.node.as_deref(),
                ControlAction::Pause,
                &req.by,
                &req.why,
                String::new(),
            )
            .await?;
        txn.commit()
            .await
            .map_err(|source| self.origin.statement_error(OP, source))?;
        Ok(record)
    }

    async fn resume(
        &self,
        req: &ControlRequest,
        catch_up: bool,
    ) -> scheduler_core::Result<ControlRecord> {
        const OP: &str = "resume a job";
        check_request(req)?;
        let action = if catch_up {
            ControlAction::Resume
        } else {
            ControlAction::ResumeWithoutCatchUp
        };
        let (_turn, txn) = self.begin_write(OP).await?;
        let at = self.bump(&txn, OP).await?;
        let values = vec![
            req.job.clone().into(),
            req.node.clone().into(),
            catch_up.into(),
            at.version.into(),
            at.now.into(),
        ];
        rows(self, &txn, OP, &self.control.resume, values).await?;
        let record = self
            .audit(
                &txn,
                OP,
                &at,
                &req.job,
                req.node.as_deref(),
                action,
                &req.by,
                &req.why,
                String::new(),
            )
            .await?;
        txn.commit()
            .await
            .map_err(|source| self.origin.statement_error(OP, source))?;
        Ok(record)
    }

    async fn trigger(&self, req: &ControlRequest) -> scheduler_core::Result<Trigger> {
        const OP: &str = "trigger a run";
        check_request(req)?;
        let (_turn, txn) = self.begin_write(OP).await?;
        let at = self.bump(&txn, OP).await?;
        let values = vec![
            req.job.clone().into(),
            req.node.clone().into(),
            req.by.clone().into(),
            req.why.clone().into(),
            at.now.into(),
        ];
        let row = one(self, &txn, OP, &self.control.trigger, values).await?;
        let trigger = trigger_from_row(&row, OP)?;
        self.audit(
            &txn,
            OP,
            &at,
            &req.job,
            req.node.as_deref(),
            ControlAction::Trigger,
            &req.by,
            &req.why,
            trigger.id.to_string(),
        )
        .await?;
        txn.commit()
            .await
            .map_err(|source| self.origin.statement_error(OP, source))?;
        Ok(trigger)
    }

    async fn trigger_status(&self, id: TriggerId) -> scheduler_core::Result<Option<Trigger>> {
        const OP: &str = "read a trigger";
        let found = rows(
            self,
            &self.db,
            OP,
            &self.control.trigger_status,
            vec![id.0.into()],
        )
        .await?;
        Ok(found
            .first()
            .map(|row| trigger_from_row(row, OP))
            .transpose()?)
    }

    async fn claim_trigger(
        &self,
        id: TriggerId,
        lease: &LeaseName,
        holder: &Holder,
        ttl: Ttl,
    ) -> scheduler_core::Result<Option<Lease>> {
        const OP: &str = "claim a trigger";
        let (_turn, txn) = self.begin_write(OP).await?;
        let values = vec![id.0.into(), lease.as_str().to_owned().into()];
        let claimable = rows(self, &txn, OP, &self.control.claimable, values).await?;
        let Some(trigger) = claimable.first() else {
            return Ok(None);
        };
        let requested_at: i64 = get(trigger, "requested_at", OP)?;
        let prev_released_at: Option<i64> = get(trigger, "prev_released_at", OP)?;
        let values = vec![
            lease.as_str().to_owned().into(),
            holder.as_str().to_owned().into(),
            ttl.as_millis().into(),
            requested_at.into(),
        ];
        let won = rows(self, &txn, OP, &self.control.claim_lease, values).await?;
        let Some(row) = won.first() else {
            // Held: the job runs. Nothing was written; the trigger stays as it was.
            return Ok(None);
        };
        let lease = Lease {
            name: name_from_row(row, OP)?,
            holder: Holder::from_stored(get(row, "holder", OP)?),
            tick: Tick::new(time(row, "tick", OP)?),
            token: FencingToken::new(get(row, "token", OP)?),
            expires_at: time(row, "expires_at", OP)?,
        };
        let values = vec![
            id.0.into(),
            holder.as_str().to_owned().into(),
            lease.name.as_str().to_owned().into(),
            prev_released_at.into(),
        ];
        rows(self, &txn, OP, &self.control.claim_mark, values).await?;
        self.bump(&txn, OP).await?;
        txn.commit()
            .await
            .map_err(|source| self.origin.statement_error(OP, source))?;
        Ok(Some(lease))
    }

    async fn finish_trigger(
        &self,
        id: TriggerId,
        holder: Option<&Holder>,
        outcome: &str,
        error: Option<&str>,
    ) -> scheduler_core::Result<bool> {
        const OP: &str = "finish a trigger";
        let (_turn, txn) = self.begin_write(OP).await?;
        let holder: Value = holder.map(|h| h.as_str().to_owned()).into();
        // The lease first, while the trigger still says who runs it.
        rows(
            self,
            &txn,
            OP,
            &self.control.give_back,
            vec![id.0.into(), holder.clone()],
        )
        .await?;
        let values = vec![
            id.0.into(),
            holder,
            outcome.to_owned().into(),
            error.map(str::to_owned).into(),
        ];
        let finished = !rows(self, &txn, OP, &self.control.finish, values)
            .await?
            .is_empty();
        if finished {
            self.bump(&txn, OP).await?;
        }
        txn.commit()
            .await
            .map_err(|source| self.origin.statement_error(OP, source))?;
        Ok(finished)
    }

    async fn control_history(
        &self,
        job: Option<&str>,
        page: Page,
    ) -> scheduler_core::Result<Vec<ControlRecord>> {
        const OP: &str = "read the control history";
        let sql = &self.control;
        let found = self
            .paged(OP, job, page, &sql.history_of_job, &sql.history)
            .await?;
        Ok(found
            .iter()
            .map(|row| record_from_row(row, OP))
            .collect::<Result<_>>()?)
    }

    async fn poll(&self, since: Option<i64>) -> scheduler_core::Result<Option<ControlState>> {
        const OP: &str = "poll the controls";
        let row = one(self, &self.db, OP, &self.control.version, Vec::new()).await?;
        let current: i64 = get(&row, "version", OP)?;
        if since == Some(current) {
            return Ok(None);
        }
        // Changed: every part read in one transaction, so they agree with the version.
        let txn = self
            .db
            .begin()
            .await
            .map_err(|source| self.origin.statement_error(OP, source))?;
        let version = get(
            &one(self, &txn, OP, &self.control.version, Vec::new()).await?,
            "version",
            OP,
        )?;
        let after = since.unwrap_or(i64::MIN);
        let paused = rows(self, &txn, OP, &self.control.paused, Vec::new())
            .await?
            .iter()
            .map(|row| pause_from_row(row, OP))
            .collect::<Result<_>>()?;
        let resumed = rows(self, &txn, OP, &self.control.resumed, vec![after.into()])
            .await?
            .iter()
            .map(|row| {
                Ok(Resume {
                    job: get(row, "job", OP)?,
                    node: node_of(get(row, "node", OP)?),
                    paused_since: time(row, "since", OP)?,
                    resumed_at: time(row, "resumed_at", OP)?,
                    catch_up: get::<Option<i64>>(row, "catch_up", OP)?.unwrap_or(0) != 0,
                    version: get(row, "version", OP)?,
                })
            })
            .collect::<Result<_>>()?;
        let triggers = rows(self, &txn, OP, &self.control.open_triggers, Vec::new())
            .await?
            .iter()
            .map(|row| trigger_from_row(row, OP))
            .collect::<Result<_>>()?;
        let schedules = match since {
            Some(since) => {
                rows(
                    self,
                    &txn,
                    OP,
                    &self.control.changed_schedules,
                    vec![since.into()],
                )
                .await?
            }
            None => rows(self, &txn, OP, &self.control.schedules, Vec::new()).await?,
        };
        let schedules = schedules
            .iter()
            .map(|row| schedule_from_row(row, OP))
            .collect::<Result<_>>()?;
        txn.commit()
            .await
            .map_err(|source| self.origin.statement_error(OP, source))?;
        Ok(Some(ControlState {
            version,
            paused,
            resumed,
            triggers,
            schedules,
        }))
    }

    async fn paused(&self) -> scheduler_core::Result<Vec<Pause>> {
        const OP: &str = "read the pauses";
        Ok(rows(self, &self.db, OP, &self.control.paused, Vec::new())
            .await?
            .iter()
            .map(|row| pause_from_row(row, OP))
            .collect::<Result<_>>()?)
    }

    async fn open_triggers(&self) -> scheduler_core::Result<Vec<Trigger>> {
        const OP: &str = "read the open triggers";
        Ok(
            rows(self, &self.db, OP, &self.control.open_triggers, Vec::new())
                .await?
                .iter()
                .map(|row| trigger_from_row(row, OP))
                .collect::<Result<_>>()?,
        )
    }

    async fn put_schedule(
        &self,
        row: &ScheduleRow,
        by: &str,
        why: &str,
    ) -> scheduler_core::Result<ControlRecord> {
        const OP: &str = "store a dynamic schedule";
        row.check()?;
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
        let (_turn, txn) = self.begin_write(OP).await?;
        let known: Vec<String> = rows(self, &txn, OP, &self.control.handlers, Vec::new())
            .await?
            .iter()
            .map(|r| get(r, "handler", OP))
            .collect::<Result<_>>()?;
        if !known.contains(&row.handler) {
            return Err(scheduler_core::Error::UnknownHandler {
                handler: row.handler.clone(),
                known: if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                },
            });
        }
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

    async fn remove_schedule(
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
        let detail = schedule_detail(&schedule_from_row(row, OP)?);
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

    async fn schedules(&self) -> scheduler_core::Result<Vec<ScheduleRow>> {
        const OP: &str = "read the dynamic schedules";
        Ok(
            rows(self, &self.db, OP, &self.control.schedules, Vec::new())
                .await?
                .iter()
                .map(|row| schedule_from_row(row, OP))
                .collect::<Result<_>>()?,
        )
    }

    async fn schedule(&self, name: &str) -> scheduler_core::Result<Option<ScheduleRow>> {
        const OP: &str = "read a dynamic schedule";
        let found = rows(
            self,
            &self.db,
            OP,
            &self.control.schedule,
            vec![name.to_owned().into()],
        )
        .await?;
        Ok(found
            .first()
            .map(|row| schedule_from_row(row, OP))
            .transpose()?)
    }

    async fn schedules_page(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> scheduler_core::Result<Vec<ScheduleRow>> {
        const OP: &str = "read a page of the dynamic schedules";
        // Every name sorts after `''` (a name is never empty).
        let values = vec![
            after.unwrap_or_default().to_owned().into(),
            i64::from(limit).into(),
        ];
        Ok(
            rows(self, &self.db, OP, &self.control.schedules_page, values)
                .await?
                .iter()
                .map(|row| schedule_from_row(row, OP))
                .collect::<Result<_>>()?,
        )
    }

    async fn register_handlers(&self, node: &str, names: &[String]) -> scheduler_core::Result<()> {
        const OP: &str = "register handlers";
        let names: BTreeSet<&String> = names.iter().collect();
        let mut list = String::from("[");
        for (i, name) in names.into_iter().enumerate() {
            if i > 0 {
                list.push(',');
            }
            batch::string(&mut list, name);
        }
        list.push(']');
        let (_turn, txn) = self.begin_write(OP).await?;
        let values = || vec![node.to_owned().into(), list.clone().into()];
        rows(self, &txn, OP, &self.control.forget_handlers, values()).await?;
        rows(self, &txn, OP, &self.control.register_handlers, values()).await?;
        txn.commit()
            .await
            .map_err(|source| self.origin.statement_error(OP, source))?;
        Ok(())
    }

    async fn handlers(&self) -> scheduler_core::Result<Vec<String>> {
        const OP: &str = "read the handlers";
        Ok(rows(self, &self.db, OP, &self.control.handlers, Vec::new())
            .await?
            .iter()
            .map(|row| get(row, "handler", OP))
            .collect::<Result<_>>()?)
    }

    async fn leases(&self) -> scheduler_core::Result<Vec<LeaseRow>> {
        const OP: &str = "read the leases";
        Ok(rows(self, &self.db, OP, &self.control.leases, Vec::new())
            .await?
            .iter()
            .map(|row| {
                Ok(LeaseRow {
                    name: get(row, "name", OP)?,
                    holder: Some(get(row, "holder", OP)?),
                    tick: time(row, "tick", OP)?,
                    token: get(row, "token", OP)?,
                    expires_at: time(row, "expires_at", OP)?,
                    released_at: optional_time(row, "released_at", OP)?,
                })
            })
            .collect::<Result<_>>()?)
    }

    async fn runs(&self, job: Option<&str>, page: Page) -> scheduler_core::Result<Vec<RunRow>> {
        const OP: &str = "read the run history";
        if !self.history_exists().await? {
            return Ok(Vec::new());
        }
        let sql = &self.control;
        let found = self
            .paged(OP, job, page, &sql.runs_of_job, &sql.runs)
            .await?;
        Ok(found
            .iter()
            .map(|row| {
                Ok(RunRow {
                    id: get(row, "id", OP)?,
                    job: get(row, "job", OP)?,
                    tick: time(row, "tick", OP)?,
                    node: get(row, "node", OP)?,
                    token: get(row, "token", OP)?,
                    started: time(row, "started", OP)?,
                    finished: time(row, "finished", OP)?,
                    outcome: get(row, "outcome", OP)?,
                    error: get(row, "error", OP)?,
                    attempt: u32::try_from(get::<i64>(row, "attempt", OP)?)
                        .map_err(|_| bad_row(OP, "attempt out of range".to_owned()))?,
                })
            })
            .collect::<Result<_>>()?)
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
