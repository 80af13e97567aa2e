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
//! The rows are decoded in `rows`; the poll's snapshot read is in `state`.

mod rows;
mod state;

use async_trait::async_trait;
use scheduler_core::{
    ControlRecord, ControlRequest, ControlState, Controls, FencingToken, Holder, Lease, LeaseName,
    LeaseRow, Outcome, Page, Pause, RunRow, ScheduleRow, Tick, Trigger, TriggerId, Ttl,
};
use sea_orm::Value;

use self::rows::{
    all, lease_row_from_row, one_row, pause_from_row, record_from_row, run_from_row,
    schedule_from_row, trigger_from_row,
};
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

/// Checks a request's job, node, actor and reason.
fn check_request(req: &ControlRequest) -> scheduler_core::Result<()> {
    LeaseName::new(req.job.as_str())?;
    if let Some(node) = &req.node {
        LeaseName::new(node.as_str())?;
    }
    no_nul("the control's actor (`by`)", &req.by)?;
    no_nul("the control's reason (`why`)", &req.why)
}

/// The node as the controls table keys it: `''` for every node.
fn node_key(node: Option<&String>) -> String {
    node.cloned().unwrap_or_default()
}

/// A page's `before` and `limit` as parameters.
fn page_values(page: Page) -> (Value, Value) {
    (
        page.before.unwrap_or(i64::MAX).into(),
        i64::from(page.limit).into(),
    )
}

#[async_trait]
impl Controls for PostgresStore {
    async fn pause(&self, req: &ControlRequest) -> scheduler_core::Result<ControlRecord> {
        const OP: &str = "pause a job";
        check_request(req)?;
        let values = vec![
            req.job.clone().into(),
            node_key(req.node.as_ref()).into(),
            req.by.clone().into(),
            req.why.clone().into(),
        ];
        let rows = self.query(OP, &self.control_sql().pause, values).await?;
        Ok(record_from_row(&one_row(rows, OP)?, OP)?)
    }

    async fn resume(
        &self,
        req: &ControlRequest,
        catch_up: bool,
    ) -> scheduler_core::Result<ControlRecord> {
        const OP: &str = "resume a job";
        check_request(req)?;
        let values = vec![
            req.job.clone().into(),
            node_key(req.node.as_ref()).into(),
            req.by.clone().into(),
            req.why.clone().into(),
            catch_up.into(),
        ];
        let rows = self.query(OP, &self.control_sql().resume, values).await?;
        Ok(record_from_row(&one_row(rows, OP)?, OP)?)
    }

    async fn trigger(&self, req: &ControlRequest) -> scheduler_core::Result<Trigger> {
        const OP: &str = "trigger a run";
        check_request(req)?;
        let values = vec![
            req.job.clone().into(),
            req.node.clone().into(),
            req.by.clone().into(),
            req.why.clone().into(),
        ];
        let rows = self.query(OP, &self.control_sql().trigger, values).await?;
        Ok(trigger_from_row(&one_row(rows, OP)?, OP)?)
    }

    async fn trigger_status(&self, id: TriggerId) -> scheduler_core::Result<Option<Trigger>> {
        const OP: &str = "read a trigger";
        let rows = self
            .query(OP, &self.control_sql().trigger_status, vec![id.0.into()])
            .await?;
        Ok(rows
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

    async fn finish_trigger(
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

    async fn control_history(
        &self,
        job: Option<&str>,
        page: Page,
    ) -> scheduler_core::Result<Vec<ControlRecord>> {
        const OP: &str = "read the control history";
        let (before, limit) = page_values(page);
        let sql = self.control_sql();
        let rows = match job {
            Some(job) => {
                no_nul("the job", job)?;
                self.query(
                    OP,
                    &sql.job_history,
                    vec![job.to_owned().into(), before, limit],
                )
                .await?
            }
            None => self.query(OP, &sql.history, vec![before, limit]).await?,
        };
        Ok(all(&rows, OP, record_from_row)?)
    }

    async fn poll(&self, since: Option<i64>) -> scheduler_core::Result<Option<ControlState>> {
        const OP: &str = "read the control version";
        if let Some(since) = since {
            let rows = self
                .query(OP, &self.control_sql().version, Vec::new())
                .await?;
            let version: i64 = get(&one_row(rows, OP)?, "version", OP)?;
            if version == since {
                return Ok(None);
            }
        }
        Ok(Some(self.control_state(since).await?))
    }

    async fn paused(&self) -> scheduler_core::Result<Vec<Pause>> {
        const OP: &str = "read the pauses";
        let rows = self
            .query(OP, &self.control_sql().paused, Vec::new())
            .await?;
        Ok(all(&rows, OP, pause_from_row)?)
    }

    async fn open_triggers(&self) -> scheduler_core::Result<Vec<Trigger>> {
        const OP: &str = "read the open triggers";
        let rows = self
            .query(OP, &self.control_sql().open_triggers, Vec::new())
            .await?;
        Ok(all(&rows, OP, trigger_from_row)?)
    }

    async fn put_schedule(
        &self,
        row: &ScheduleRow,
        by: &str,
        why: &str,
    ) -> scheduler_core::Result<ControlRecord> {
        const OP: &str = "store a dynamic schedule";
        row.check()?;
        for (what, text) in [
            ("the schedule", row.schedule.as_str()),
            ("the zone", row.zone.as_deref().unwrap_or_default()),
            ("the policy", row.policy.as_str()),
            ("the arguments", row.args.as_str()),
            ("the control's actor (`by`)", by),
            ("the control's reason (`why`)", why),
        ] {
            no_nul(&format!("schedule {:?}: {what}", row.name), text)?;
        }
        let known = self.registered_handlers().await?;
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
        Ok(record_from_row(&one_row(rows, OP)?, OP)?)
    }

    async fn remove_schedule(
        &self,
        name: &str,
        by: &str,
        why: &str,
    ) -> scheduler_core::Result<Option<ControlRecord>> {
        const OP: &str = "remove a dynamic schedule";
        no_nul("the schedule's name", name)?;
        no_nul("the control's actor (`by`)", by)?;
        no_nul("the control's reason (`why`)", why)?;
        let values = vec![
            name.to_owned().into(),
            by.to_owned().into(),
            why.to_owned().into(),
        ];
        let rows = self
            .query(OP, &self.control_sql().remove_schedule, values)
            .await?;
        Ok(rows
            .first()
            .map(|row| record_from_row(row, OP))
            .transpose()?)
    }

    async fn schedules(&self) -> scheduler_core::Result<Vec<ScheduleRow>> {
        const OP: &str = "read the dynamic schedules";
        let rows = self
            .query(OP, &self.control_sql().schedules, Vec::new())
            .await?;
        Ok(all(&rows, OP, schedule_from_row)?)
    }

    async fn schedule(&self, name: &str) -> scheduler_core::Result<Option<ScheduleRow>> {
        const OP: &str = "read a dynamic schedule";
        no_nul("the schedule's name", name)?;
        let rows = self
            .query(
                OP,
                &self.control_sql().schedule,
                vec![name.to_owned().into()],
            )
            .await?;
        Ok(rows
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
        let after = after.unwrap_or_default();
        no_nul("the name to page after", after)?;
        // Every name sorts after `''` (a name is never empty).
        let values = vec![after.to_owned().into(), i64::from(limit).into()];
        let rows = self
            .query(OP, &self.control_sql().schedules_page, values)
            .await?;
        Ok(all(&rows, OP, schedule_from_row)?)
    }

    async fn register_handlers(&self, node: &str, names: &[String]) -> scheduler_core::Result<()> {
        const OP: &str = "register handlers";
        LeaseName::new(node)?;
        let mut names: Vec<String> = names.to_vec();
        for name in &names {
            LeaseName::new(name.as_str())?;
        }
        names.sort();
        names.dedup();
        if names.is_empty() {
            return Ok(());
        }
        self.execute(
            OP,
            &self.control_sql().register_handlers,
            vec![node.to_owned().into(), names.into()],
        )
        .await?;
        Ok(())
    }

    async fn handlers(&self) -> scheduler_core::Result<Vec<String>> {
        Ok(self.registered_handlers().await?)
    }

    async fn leases(&self) -> scheduler_core::Result<Vec<LeaseRow>> {
        const OP: &str = "read the leases";
        let rows = self
            .query(OP, &self.control_sql().leases, Vec::new())
            .await?;
        Ok(all(&rows, OP, lease_row_from_row)?)
    }

    async fn runs(&self, job: Option<&str>, page: Page) -> scheduler_core::Result<Vec<RunRow>> {
        const OP: &str = "read the run history";
        let (before, limit) = page_values(page);
        let sql = self.control_sql();
        let rows = match job {
            Some(job) => {
                no_nul("the job", job)?;
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
        Ok(all(&rows, OP, run_from_row)?)
    }

    /// Directly on PostgreSQL, a `LISTEN` on one connection of the store's own (not a
    /// pooled one), started by the first scheduler that watches and closed when the
    /// last one stops; `None` behind a transaction pooler.
    fn watch(&self) -> Option<tokio::sync::watch::Receiver<scheduler_core::ControlSignal>> {
        self.watch.subscribe()
    }
}
