//! [`Controls`] for [`PostgresStore`]: pauses, resumes, triggers and dynamic schedules
//! as rows next to the lease table, each recorded in the audit table and bumping the
//! control version in the statement that applies it.
//!
//! The statements are [`ControlSql`](crate::controls_sql::ControlSql)'s; they run like
//! the lease statements, through the store's session (autocommit, or unnamed in a
//! transaction of their own behind a transaction pooler). A poll that finds the
//! version changed reads the state in one `REPEATABLE READ` transaction, so the
//! version it reports and the rows it returns are one snapshot.
//!
//! The rows are decoded in `rows`; the poll's snapshot read is in `state`; a
//! trigger, a short transaction that reads the job's pauses under the version row's
//! lock, in `trigger`; a batch of schedules put at once, in `batch`; the schedules'
//! bounds (the rows due by an instant, an advance), in `due`.

mod batch;
mod due;
mod instances;
mod listing;
mod rows;
mod state;
mod trigger;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use scheduler_core::control::stored::{
    lease_row_from, pause_from, record_from, run_from, schedule_from, trigger_from,
};
use scheduler_core::control::{
    Advance, ControlTables, DueCursor, DueSchedule, HandlerCheck, HandlersCheck, Heartbeat,
    InstanceRow, TickBounds,
};
use scheduler_core::{
    ControlRecord, ControlRequest, ControlState, FencingToken, Holder, Lease, LeaseName, LeaseRow,
    ListQuery, Listing, Outcome, Page, Pause, RunQuery, RunRow, ScheduleRow, Tick, Trigger,
    TriggerId, Ttl,
};
use sea_orm::{QueryResult, Value};

use self::rows::{Stored, all, first, one_row};

/// The rows per statement of [`Controls::schedules`](scheduler_core::Controls::schedules).
const SCHEDULES_PAGE: u32 = 10_000;
use crate::error::{Error, describe, sqlstate};
use crate::row::{get, name_from_row, time};
use crate::store::PostgresStore;

/// A core error for input the store refuses before asking the database.
fn invalid(reason: String) -> scheduler_core::Error {
    scheduler_core::Error::InvalidControl { reason }
}

/// Refuses text PostgreSQL cannot hold (a NUL character).
fn no_nul(what: &str, text: &str) -> scheduler_core::Result<()> {
    if text.contains('\0') {
        return Err(invalid(format!(
            "{what} holds a NUL character, which the database cannot store"
        )));
    }
    Ok(())
}

/// `text` with every NUL replaced, for text recorded as it comes (a run's error).
fn clean(text: &str) -> String {
    text.replace('\0', "\u{fffd}")
}

/// The node as the controls table keys it: `''` for every node.
fn node_key(node: Option<&String>) -> String {
    node.cloned().unwrap_or_default()
}

/// The one row a control's statement returns, decoded by `decode`.
fn one_of<T>(
    rows: Vec<QueryResult>,
    operation: &'static str,
    decode: impl for<'a> Fn(&Stored<'a>) -> crate::error::Result<T>,
) -> crate::error::Result<T> {
    decode(&Stored {
        row: &one_row(rows, operation)?,
        operation,
    })
}

/// A page's `before` and `limit` as parameters.
fn page_values(page: Page) -> (Value, Value) {
    (
        page.before.unwrap_or(i64::MAX).into(),
        i64::from(page.limit).into(),
    )
}

#[async_trait]
impl ControlTables for PostgresStore {
    fn check_text(&self, what: &str, text: &str) -> scheduler_core::Result<()> {
        no_nul(what, text)
    }

    async fn write_pause(&self, req: &ControlRequest) -> scheduler_core::Result<ControlRecord> {
        const OP: &str = "pause a job";
        let values = vec![
            req.job.clone().into(),
            node_key(req.node.as_ref()).into(),
            req.by.clone().into(),
            req.why.clone().into(),
        ];
        let rows = self.query(OP, &self.control_sql().pause, values).await?;
        Ok(one_of(rows, OP, |row| record_from(row))?)
    }

    async fn write_resume(
        &self,
        req: &ControlRequest,
        catch_up: bool,
    ) -> scheduler_core::Result<ControlRecord> {
        const OP: &str = "resume a job";
        let values = vec![
            req.job.clone().into(),
            node_key(req.node.as_ref()).into(),
            req.by.clone().into(),
            req.why.clone().into(),
            catch_up.into(),
        ];
        let rows = self.query(OP, &self.control_sql().resume, values).await?;
        Ok(one_of(rows, OP, |row| record_from(row))?)
    }

    async fn write_trigger(&self, req: &ControlRequest) -> scheduler_core::Result<Trigger> {
        self.trigger_checked(req).await
    }

    fn min_schedule_period(&self) -> std::time::Duration {
        self.min_schedule_period()
    }

    async fn read_trigger(&self, id: TriggerId) -> scheduler_core::Result<Option<Trigger>> {
        const OP: &str = "read a trigger";
        let rows = self
            .query(OP, &self.control_sql().trigger_status, vec![id.0.into()])
            .await?;
        Ok(first(&rows, OP, trigger_from)?)
    }

    async fn write_claim(
        &self,
        id: TriggerId,
        lease: &LeaseName,
        holder: &Holder,
        ttl: Ttl,
    ) -> scheduler_core::Result<Option<Lease>> {
        const OP: &str = "claim a trigger";
        let values = vec![
            id.0.into(),
            lease.as_str().to_owned().into(),
            holder.as_str().to_owned().into(),
            ttl.as_millis().into(),
        ];
        let rows = self
            .session()
            .lease_query(OP, &self.control_sql().claim, values, ttl.get() / 4)
            .await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        Ok(Some(Lease {
            name: name_from_row(row, OP)?,
            holder: Holder::from_stored(get(row, "holder", OP)?),
            tick: Tick::new(time(row, "tick", OP)?),
            token: FencingToken::new(get(row, "token", OP)?),
            expires_at: time(row, "expires_at", OP)?,
        }))
    }

    async fn write_finish(
        &self,
        id: TriggerId,
        holder: Option<&Holder>,
        outcome: Outcome,
        error: Option<&str>,
    ) -> scheduler_core::Result<bool> {
        const OP: &str = "finish a trigger";
        let values = vec![
            id.0.into(),
            holder.map(|h| h.as_str().to_owned()).into(),
            outcome.as_str().into(),
            error.map(clean).into(),
        ];
        let rows = self.query(OP, &self.control_sql().finish, values).await?;
        Ok(!rows.is_empty())
    }

    async fn read_control_history(
        &self,
        job: Option<&str>,
        page: Page,
    ) -> scheduler_core::Result<Vec<ControlRecord>> {
        const OP: &str = "read the control history";
        let (before, limit) = page_values(page);
        let sql = self.control_sql();
        let rows = match job {
            Some(job) => {
                self.query(
                    OP,
                    &sql.job_history,
                    vec![job.to_owned().into(), before, limit],
                )
                .await?
            }
            None => self.query(OP, &sql.history, vec![before, limit]).await?,
        };
        Ok(all(&rows, OP, record_from)?)
    }

    async fn read_version(&self) -> scheduler_core::Result<i64> {
        const OP: &str = "read the control version";
        let rows = self
            .query(OP, &self.control_sql().version, Vec::new())
            .await?;
        Ok(get(&one_row(rows, OP)?, "version", OP)?)
    }

    async fn read_state(&self, since: Option<i64>) -> scheduler_core::Result<ControlState> {
        Ok(self.control_state(since, true).await?)
    }

    async fn read_state_without_schedules(
        &self,
        since: Option<i64>,
    ) -> scheduler_core::Result<ControlState> {
        Ok(self.control_state(since, false).await?)
    }

    async fn read_changed_schedules(
        &self,
        since: i64,
        upto: i64,
        names: &[String],
    ) -> scheduler_core::Result<Vec<ScheduleRow>> {
        const OP: &str = "read the changed schedules";
        let values = vec![names.to_vec().into(), since.into(), upto.into()];
        let rows = self
            .query(OP, &self.control_sql().changed_among, values)
            .await?;
        Ok(all(&rows, OP, schedule_from)?)
    }

    async fn read_paused(&self) -> scheduler_core::Result<Vec<Pause>> {
        const OP: &str = "read the pauses";
        let rows = self
            .query(OP, &self.control_sql().paused, Vec::new())
            .await?;
        Ok(all(&rows, OP, pause_from)?)
    }

    async fn read_open_triggers(&self) -> scheduler_core::Result<Vec<Trigger>> {
        const OP: &str = "read the open triggers";
        let rows = self
            .query(OP, &self.control_sql().open_triggers, Vec::new())
            .await?;
        Ok(all(&rows, OP, trigger_from)?)
    }

    async fn write_schedule(
        &self,
        row: &ScheduleRow,
        by: &str,
        why: &str,
        handler: &HandlerCheck<'_>,
    ) -> scheduler_core::Result<ControlRecord> {
        const OP: &str = "store a dynamic schedule";
        handler.check(&self.registered_handlers().await?)?;
        let values = vec![
            row.name.clone().into(),
            row.handler.clone().into(),
            row.schedule.clone().into(),
            row.zone.clone().into(),
            row.scope.to_string().into(),
            row.policy.clone().into(),
            row.args.clone().into(),
            row.enabled.into(),
            by.to_owned().into(),
            why.to_owned().into(),
            TickBounds::new(Utc::now()).bound(row).into(),
        ];
        let rows = match self
            .query(OP, &self.control_sql().put_schedule, values)
            .await
        {
            Ok(rows) => rows,
            // invalid_text_representation: the `jsonb` cast of the arguments.
            Err(Error::Statement { cause, .. }) if sqlstate(&cause).as_deref() == Some("22P02") => {
                return Err(invalid(format!(
                    "schedule {:?}: its arguments are not JSON ({}); pass JSON text, `{{}}` for none",
                    row.name,
                    describe(&cause)
                )));
            }
            Err(err) => return Err(err.into()),
        };
        Ok(one_of(rows, OP, |row| record_from(row))?)
    }

    async fn check_args_batch(&self, rows: &[ScheduleRow]) -> scheduler_core::Result<()> {
        Self::check_json_args_batch(rows)
    }

    async fn write_schedules(
        &self,
        rows: &[ScheduleRow],
        by: &str,
        why: &str,
        handlers: &HandlersCheck<'_>,
    ) -> scheduler_core::Result<ControlRecord> {
        self.put_schedules_checked(rows, by, why, handlers).await
    }

    async fn write_removal(
        &self,
        name: &str,
        by: &str,
        why: &str,
    ) -> scheduler_core::Result<Option<ControlRecord>> {
        const OP: &str = "remove a dynamic schedule";
        let values = vec![
            name.to_owned().into(),
            by.to_owned().into(),
            why.to_owned().into(),
        ];
        let rows = self
            .query(OP, &self.control_sql().remove_schedule, values)
            .await?;
        Ok(first(&rows, OP, record_from)?)
    }

    /// Every schedule, a page of 10,000 rows per statement (by name): one
    /// statement for them all hit the statement bound (2 s) at a million rows. Not a
    /// snapshot: a row put meanwhile before the page under way is read next time.
    async fn read_schedules(&self) -> scheduler_core::Result<Vec<ScheduleRow>> {
        let mut rows: Vec<ScheduleRow> = Vec::new();
        loop {
            let after = rows.last().map(|r| r.name.clone());
            let page = self
                .read_schedules_page(after.as_deref(), SCHEDULES_PAGE)
                .await?;
            let last = page.len() < SCHEDULES_PAGE as usize;
            rows.extend(page);
            if last {
                return Ok(rows);
            }
        }
    }

    async fn read_schedule(&self, name: &str) -> scheduler_core::Result<Option<ScheduleRow>> {
        const OP: &str = "read a dynamic schedule";
        let rows = self
            .query(
                OP,
                &self.control_sql().schedule,
                vec![name.to_owned().into()],
            )
            .await?;
        Ok(first(&rows, OP, schedule_from)?)
    }

    async fn read_schedules_page(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> scheduler_core::Result<Vec<ScheduleRow>> {
        const OP: &str = "read a page of the dynamic schedules";
        let after = after.unwrap_or_default();
        // Every name sorts after `''` (a name is never empty).
        let values = vec![after.to_owned().into(), i64::from(limit).into()];
        let rows = self
            .query(OP, &self.control_sql().schedules_page, values)
            .await?;
        Ok(all(&rows, OP, schedule_from)?)
    }

    async fn read_due_schedules(
        &self,
        handlers: &[String],
        until: DateTime<Utc>,
        after: Option<&DueCursor>,
        limit: u32,
    ) -> scheduler_core::Result<Vec<DueSchedule>> {
        Ok(self.due_rows(handlers, until, after, limit).await?)
    }

    async fn write_advances(&self, advances: &[Advance]) -> scheduler_core::Result<u64> {
        Ok(self.advance_rows(advances).await?)
    }

    async fn write_handlers(&self, node: &str, names: &[String]) -> scheduler_core::Result<()> {
        const OP: &str = "register handlers";
        if names.is_empty() {
            return Ok(());
        }
        self.execute(
            OP,
            &self.control_sql().register_handlers,
            vec![node.to_owned().into(), names.to_vec().into()],
        )
        .await?;
        Ok(())
    }

    async fn read_handlers(&self) -> scheduler_core::Result<Vec<String>> {
        Ok(self.registered_handlers().await?)
    }

    async fn write_jobs(&self, node: &str, names: &[String]) -> scheduler_core::Result<()> {
        const OP: &str = "register jobs";
        if names.is_empty() {
            return Ok(());
        }
        self.execute(
            OP,
            &self.control_sql().register_jobs,
            vec![node.to_owned().into(), names.to_vec().into()],
        )
        .await?;
        Ok(())
    }

    async fn read_jobs(&self) -> scheduler_core::Result<Vec<String>> {
        const OP: &str = "read the registered jobs";
        let rows = self.query(OP, &self.control_sql().jobs, Vec::new()).await?;
        Ok(rows
            .iter()
            .map(|row| get(row, "job", OP))
            .collect::<Result<_, _>>()?)
    }

    async fn write_heartbeat(&self, beat: &Heartbeat) -> scheduler_core::Result<()> {
        Ok(self.beat(beat).await?)
    }

    async fn write_stopped(&self, node: &str) -> scheduler_core::Result<()> {
        Ok(self.stop(node).await?)
    }

    async fn read_instances(&self) -> scheduler_core::Result<Vec<InstanceRow>> {
        Ok(self.instance_rows().await?)
    }

    async fn read_leases(&self) -> scheduler_core::Result<Vec<LeaseRow>> {
        const OP: &str = "read the leases";
        let rows = self
            .query(OP, &self.control_sql().leases, Vec::new())
            .await?;
        Ok(all(&rows, OP, lease_row_from)?)
    }

    async fn read_leases_listing(
        &self,
        query: &ListQuery,
    ) -> scheduler_core::Result<Listing<LeaseRow>> {
        Ok(self.lease_listing(query).await?)
    }

    async fn read_schedules_listing(
        &self,
        query: &ListQuery,
    ) -> scheduler_core::Result<Listing<ScheduleRow>> {
        Ok(self.schedule_listing(query).await?)
    }

    async fn read_runs_where(&self, query: &RunQuery) -> scheduler_core::Result<Vec<RunRow>> {
        Ok(self.runs_matching(query).await?)
    }

    async fn read_recent_runs(
        &self,
        jobs: &[String],
        per_job: u32,
    ) -> scheduler_core::Result<Vec<RunRow>> {
        Ok(self.recent(jobs, per_job).await?)
    }

    async fn read_failing_jobs(&self) -> scheduler_core::Result<Vec<String>> {
        Ok(self.failing().await?)
    }

    async fn read_runs(
        &self,
        job: Option<&str>,
        page: Page,
    ) -> scheduler_core::Result<Vec<RunRow>> {
        const OP: &str = "read the run history";
        let (before, limit) = page_values(page);
        let sql = self.control_sql();
        let rows = match job {
            Some(job) => {
                self.query(
                    OP,
                    &sql.job_runs,
                    vec![job.to_owned().into(), before, limit],
                )
                .await
            }
            None => self.query(OP, &sql.runs, vec![before, limit]).await,
        };
        let rows = match rows {
            Ok(rows) => rows,
            // undefined_table: the store keeps no run history (RunHistory::new was
            // never called for this lease table).
            Err(Error::Statement { cause, .. }) if sqlstate(&cause).as_deref() == Some("42P01") => {
                return Ok(Vec::new());
            }
            Err(err) => return Err(err.into()),
        };
        Ok(all(&rows, OP, run_from)?)
    }

    /// Directly on PostgreSQL, a `LISTEN` on one connection of the store's own (not a
    /// pooled one), started by the first scheduler that watches and closed when the
    /// last one stops; `None` behind a transaction pooler.
    fn watch_controls(
        &self,
    ) -> Option<tokio::sync::watch::Receiver<scheduler_core::ControlSignal>> {
        self.watch.subscribe()
    }
}
