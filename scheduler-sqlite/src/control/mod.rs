//! [`Controls`] for [`SqliteStore`]: pauses, resumes, triggers, dynamic schedules
//! and their record, in the tables of migration 3 beside the lease table.
//!
//! Every control is one `BEGIN IMMEDIATE` transaction (after the store's write turn)
//! that bumps the control version, applies the change stamped with that version and
//! appends its audit row: all of it or nothing. Claiming and finishing a trigger
//! bump the version too (the open triggers change), without an audit row. Polling an
//! unchanged version is one read of the version row; a changed one is read in one
//! read transaction, so its parts agree.
//!
//! The statements are in `sql`; running them and decoding their rows in `rows`; the
//! version bump and audit row every control writes in `audit`; the dynamic
//! schedules' writes in `schedules`, a batch of them in `batch`, their bounds (the
//! due read and the advance) in `due`; a poll's read of them all in `state`.

mod audit;
mod batch;
mod due;
mod instances;
mod listing;
mod rows;
mod schedules;
mod state;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use scheduler_core::control::stored::{
    lease_row_from, pause_from, record_from, run_from, schedule_from, trigger_from,
};
use scheduler_core::control::{
    ControlAction, ControlRecord, ControlRequest, ControlState, ControlTables, HandlerCheck,
    HandlersCheck, Heartbeat, InstanceRow, LeaseRow, Page, Pause, RunRow, ScheduleRow, Trigger,
    TriggerId, trigger_action,
};
use scheduler_core::{
    Advance, DueCursor, DueSchedule, FencingToken, Holder, Lease, LeaseName, ListQuery, Listing,
    Outcome, RunQuery, Tick, Ttl,
};
use sea_orm::Value;

use self::rows::{Stored, all, first, one, rows};
use crate::error::Result;
use crate::row::{get, name_from_row, time};
use crate::store::SqliteStore;

#[async_trait]
impl ControlTables for SqliteStore {
    async fn write_pause(&self, req: &ControlRequest) -> scheduler_core::Result<ControlRecord> {
        const OP: &str = "pause a job";
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

    async fn write_resume(
        &self,
        req: &ControlRequest,
        catch_up: bool,
    ) -> scheduler_core::Result<ControlRecord> {
        const OP: &str = "resume a job";
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

    async fn write_trigger(&self, req: &ControlRequest) -> scheduler_core::Result<Trigger> {
        const OP: &str = "trigger a run";
        let (_turn, txn) = self.begin_write(OP).await?;
        // In the write transaction: no pause lands between this read and the insert.
        let paused = rows(
            self,
            &txn,
            OP,
            &self.control.job_paused,
            vec![req.job.clone().into()],
        )
        .await?;
        let action = trigger_action(req, &all(&paused, OP, pause_from)?)?;
        let at = self.bump(&txn, OP).await?;
        let values = vec![
            req.job.clone().into(),
            req.node.clone().into(),
            req.by.clone().into(),
            req.why.clone().into(),
            at.now.into(),
        ];
        let row = one(self, &txn, OP, &self.control.trigger, values).await?;
        let trigger = trigger_from(&Stored {
            row: &row,
            operation: OP,
        })?;
        self.audit(
            &txn,
            OP,
            &at,
            &req.job,
            req.node.as_deref(),
            action,
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

    fn min_schedule_period(&self) -> std::time::Duration {
        self.min_schedule_period
    }

    async fn read_trigger(&self, id: TriggerId) -> scheduler_core::Result<Option<Trigger>> {
        const OP: &str = "read a trigger";
        let found = rows(
            self,
            &self.db,
            OP,
            &self.control.trigger_status,
            vec![id.0.into()],
        )
        .await?;
        Ok(first(&found, OP, trigger_from)?)
    }

    async fn write_claim(
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

    async fn write_finish(
        &self,
        id: TriggerId,
        holder: Option<&Holder>,
        outcome: Outcome,
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
            outcome.as_str().into(),
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

    async fn read_control_history(
        &self,
        job: Option<&str>,
        page: Page,
    ) -> scheduler_core::Result<Vec<ControlRecord>> {
        const OP: &str = "read the control history";
        let sql = &self.control;
        let found = self
            .paged(OP, job, page, &sql.history_of_job, &sql.history)
            .await?;
        Ok(all(&found, OP, record_from)?)
    }

    async fn read_version(&self) -> scheduler_core::Result<i64> {
        const OP: &str = "poll the controls";
        let row = one(self, &self.db, OP, &self.control.version, Vec::new()).await?;
        Ok(get(&row, "version", OP)?)
    }

    /// Every part read in one transaction, so they agree with the version.
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
        Ok(self.changed_among(since, upto, names).await?)
    }

    async fn read_paused(&self) -> scheduler_core::Result<Vec<Pause>> {
        const OP: &str = "read the pauses";
        let found = rows(self, &self.db, OP, &self.control.paused, Vec::new()).await?;
        Ok(all(&found, OP, pause_from)?)
    }

    async fn read_open_triggers(&self) -> scheduler_core::Result<Vec<Trigger>> {
        const OP: &str = "read the open triggers";
        let found = rows(self, &self.db, OP, &self.control.open_triggers, Vec::new()).await?;
        Ok(all(&found, OP, trigger_from)?)
    }

    async fn write_schedule(
        &self,
        row: &ScheduleRow,
        by: &str,
        why: &str,
        handler: &HandlerCheck<'_>,
    ) -> scheduler_core::Result<ControlRecord> {
        self.put_dynamic_schedule(row, by, why, handler).await
    }

    async fn write_schedules(
        &self,
        rows: &[ScheduleRow],
        by: &str,
        why: &str,
        handlers: &HandlersCheck<'_>,
    ) -> scheduler_core::Result<ControlRecord> {
        self.put_dynamic_schedules(rows, by, why, handlers).await
    }

    async fn check_args_batch(&self, rows: &[ScheduleRow]) -> scheduler_core::Result<()> {
        self.check_json_args_batch(rows).await
    }

    async fn check_args(&self, row: &ScheduleRow) -> scheduler_core::Result<()> {
        self.check_json_args(row).await
    }

    async fn write_removal(
        &self,
        name: &str,
        by: &str,
        why: &str,
    ) -> scheduler_core::Result<Option<ControlRecord>> {
        self.remove_dynamic_schedule(name, by, why).await
    }

    async fn read_schedules(&self) -> scheduler_core::Result<Vec<ScheduleRow>> {
        const OP: &str = "read the dynamic schedules";
        Ok(schedules::every_schedule(self, &self.db, OP).await?)
    }

    async fn read_schedule(&self, name: &str) -> scheduler_core::Result<Option<ScheduleRow>> {
        const OP: &str = "read a dynamic schedule";
        let found = rows(
            self,
            &self.db,
            OP,
            &self.control.schedule,
            vec![name.to_owned().into()],
        )
        .await?;
        Ok(first(&found, OP, schedule_from)?)
    }

    async fn read_schedules_page(
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
        let found = rows(self, &self.db, OP, &self.control.schedules_page, values).await?;
        Ok(all(&found, OP, schedule_from)?)
    }

    async fn read_due_schedules(
        &self,
        handlers: &[String],
        until: DateTime<Utc>,
        after: Option<&DueCursor>,
        limit: u32,
    ) -> scheduler_core::Result<Vec<DueSchedule>> {
        Ok(self.due(handlers, until, after, limit).await?)
    }

    async fn write_advances(&self, advances: &[Advance]) -> scheduler_core::Result<u64> {
        Ok(self.advance(advances).await?)
    }

    async fn write_handlers(&self, node: &str, names: &[String]) -> scheduler_core::Result<()> {
        let sql = &self.control;
        let (forget, register) = (&sql.forget_handlers, &sql.register_handlers);
        Ok(self
            .register("register handlers", node, names, forget, register)
            .await?)
    }

    async fn write_jobs(&self, node: &str, names: &[String]) -> scheduler_core::Result<()> {
        let (forget, register) = (&self.control.forget_jobs, &self.control.register_jobs);
        Ok(self
            .register("register jobs", node, names, forget, register)
            .await?)
    }

    async fn read_jobs(&self) -> scheduler_core::Result<Vec<String>> {
        const OP: &str = "read the registered jobs";
        Ok(rows(self, &self.db, OP, &self.control.jobs, Vec::new())
            .await?
            .iter()
            .map(|row| get(row, "job", OP))
            .collect::<Result<_>>()?)
    }

    async fn read_handlers(&self) -> scheduler_core::Result<Vec<String>> {
        const OP: &str = "read the handlers";
        Ok(rows(self, &self.db, OP, &self.control.handlers, Vec::new())
            .await?
            .iter()
            .map(|row| get(row, "handler", OP))
            .collect::<Result<_>>()?)
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
        let found = rows(self, &self.db, OP, &self.control.leases, Vec::new()).await?;
        Ok(all(&found, OP, lease_row_from)?)
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
        if !self.history_exists().await? {
            return Ok(Vec::new());
        }
        let sql = &self.control;
        let found = self
            .paged(OP, job, page, &sql.runs_of_job, &sql.runs)
            .await?;
        Ok(all(&found, OP, run_from)?)
    }
}
