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
//! schedules' writes in `schedules`.

mod audit;
mod rows;
mod schedules;

use std::collections::BTreeSet;

use async_trait::async_trait;
use scheduler_core::control::{
    ControlAction, ControlRecord, ControlRequest, ControlState, Controls, LeaseRow, Page, Pause,
    Resume, RunRow, ScheduleRow, Trigger, TriggerId,
};
use scheduler_core::{FencingToken, Holder, Lease, LeaseName, Outcome, Tick, Ttl};
use sea_orm::{TransactionTrait, Value};

use self::rows::{
    bad_row, node_of, one, optional_time, pause_from_row, record_from_row, rows, schedule_from_row,
    trigger_from_row,
};
use crate::batch;
use crate::error::Result;
use crate::row::{get, name_from_row, time};
use crate::store::SqliteStore;

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
        self.put_dynamic_schedule(row, by, why).await
    }

    async fn remove_schedule(
        &self,
        name: &str,
        by: &str,
        why: &str,
    ) -> scheduler_core::Result<Option<ControlRecord>> {
        self.remove_dynamic_schedule(name, by, why).await
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
                    outcome: Outcome::from_stored(&get::<String>(row, "outcome", OP)?),
                    error: get(row, "error", OP)?,
                    attempt: u32::try_from(get::<i64>(row, "attempt", OP)?)
                        .map_err(|_| bad_row(OP, "attempt out of range".to_owned()))?,
                })
            })
            .collect::<Result<_>>()?)
    }
}
