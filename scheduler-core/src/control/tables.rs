//! [`Controls`] written once, over what a store's tables do ([`ControlTables`]):
//! the checks of a request, of a schedule row and of its handler, the text a store
//! cannot keep, the one cheap read of a poll while nothing changed, and the
//! handlers' list made a set. Every `T: ControlTables` is [`Controls`]; a store
//! implements only the reads and writes.

mod checks;
mod defaults;
mod polls;

use std::fmt;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use self::checks::{
    check_by_why, check_by_why_texts, check_list_query, check_request, check_row, check_rows,
    checked_names,
};
use super::batch::{HandlerCheck, HandlersCheck, check_unique, in_batch};
use super::due::{Advance, DueCursor, DueSchedule};
use super::listing::{self, ListQuery, Listing, RunQuery};
use super::{
    ControlRecord, ControlRequest, ControlSignal, ControlState, Controls, Heartbeat, InstanceRow,
    LeaseRow, Page, Pause, RunRow, ScheduleRow, Trigger, TriggerId,
};
use crate::error::{Error, Result};
use crate::lease::{Holder, Lease, LeaseName, Ttl};
use crate::outcome::Outcome;

/// What a store's control tables do: each read and write of [`Controls`], the
/// request already checked. Implement it (not [`Controls`]) and the store is
/// [`Controls`], with the same rules as every other store.
///
/// The writes are the store's statements: each bumps the control version and writes
/// its audit record with the change, all or nothing.
#[async_trait]
pub trait ControlTables: Send + Sync + fmt::Debug {
    /// Refuses `text` (`what` names it) if the store cannot keep it as given
    /// (PostgreSQL: a NUL character). Every text a control stores or matches on is
    /// checked before the store is asked. The default keeps any text.
    ///
    /// # Errors
    /// [`Error::InvalidControl`], saying what cannot be kept.
    fn check_text(&self, what: &str, text: &str) -> Result<()> {
        let _ = (what, text);
        Ok(())
    }

    /// [`Controls::pause`], `req` checked.
    async fn write_pause(&self, req: &ControlRequest) -> Result<ControlRecord>;

    /// [`Controls::resume`], `req` checked.
    async fn write_resume(&self, req: &ControlRequest, catch_up: bool) -> Result<ControlRecord>;

    /// [`Controls::trigger`], `req` checked. The store reads the pauses in force
    /// where its write sees them (in its transaction, after the write lock every
    /// control takes: a pause committed meanwhile is seen, none slips in before the
    /// insert) and asks [`trigger_action`](super::trigger_action) what to record
    /// before it inserts the trigger: its refusal is returned, nothing written.
    async fn write_trigger(&self, req: &ControlRequest) -> Result<Trigger>;

    /// [`Controls::trigger_status`].
    async fn read_trigger(&self, id: TriggerId) -> Result<Option<Trigger>>;

    /// [`Controls::claim_trigger`].
    async fn write_claim(
        &self,
        id: TriggerId,
        lease: &LeaseName,
        holder: &Holder,
        ttl: Ttl,
    ) -> Result<Option<Lease>>;

    /// [`Controls::finish_trigger`].
    async fn write_finish(
        &self,
        id: TriggerId,
        holder: Option<&Holder>,
        outcome: Outcome,
        error: Option<&str>,
    ) -> Result<bool>;

    /// [`Controls::control_history`], `job` checked.
    async fn read_control_history(
        &self,
        job: Option<&str>,
        page: Page,
    ) -> Result<Vec<ControlRecord>>;

    /// The control version now: what a poll reads while nothing changed.
    async fn read_version(&self) -> Result<i64>;

    /// Everything a poll returns once the version moved past `since` (`None`:
    /// everything), read in one snapshot.
    async fn read_state(&self, since: Option<i64>) -> Result<ControlState>;

    /// [`read_state`](Self::read_state) without the dynamic schedules
    /// ([`Controls::poll_without_schedules`]). The default reads them and drops them.
    async fn read_state_without_schedules(&self, since: Option<i64>) -> Result<ControlState> {
        let state = self.read_state(since).await?;
        Ok(ControlState {
            schedules: Vec::new(),
            ..state
        })
    }

    /// [`Controls::changed_schedules`]. The default reads every change since `since`.
    async fn read_changed_schedules(
        &self,
        since: i64,
        upto: i64,
        names: &[String],
    ) -> Result<Vec<ScheduleRow>> {
        defaults::changed_schedules(self, since, upto, names).await
    }

    /// [`Controls::paused`].
    async fn read_paused(&self) -> Result<Vec<Pause>>;

    /// [`Controls::open_triggers`].
    async fn read_open_triggers(&self) -> Result<Vec<Trigger>>;

    /// Refuses arguments that are not JSON before anything is written; the default
    /// leaves it to [`write_schedule`](Self::write_schedule) (a cast in the
    /// statement).
    ///
    /// # Errors
    /// [`Error::InvalidControl`].
    async fn check_args(&self, row: &ScheduleRow) -> Result<()> {
        let _ = row;
        Ok(())
    }

    /// [`Controls::put_schedule`], `row` checked but for its handler: the store
    /// reads the registered handlers where its write sees them and asks `handler`
    /// ([`HandlerCheck::check`]) before it writes.
    async fn write_schedule(
        &self,
        row: &ScheduleRow,
        by: &str,
        why: &str,
        handler: &HandlerCheck<'_>,
    ) -> Result<ControlRecord>;

    /// Refuses the first row of a batch whose arguments are not JSON
    /// ([`Error::InBatch`]), before anything is written. The default asks
    /// [`check_args`](Self::check_args) of each row; a store may check them all in
    /// one read.
    ///
    /// # Errors
    /// [`Error::InBatch`], its cause [`Error::InvalidControl`].
    async fn check_args_batch(&self, rows: &[ScheduleRow]) -> Result<()> {
        for (index, row) in rows.iter().enumerate() {
            self.check_args(row)
                .await
                .map_err(|cause| in_batch(index, row, cause))?;
        }
        Ok(())
    }

    /// [`Controls::put_schedules`], `rows` (not empty) checked but for their
    /// handlers: the store reads the registered handlers where its write sees them
    /// and asks `handlers` ([`HandlersCheck::check`]) before it writes; then writes
    /// every row, one version bump and one audit record
    /// ([`batch_detail`](super::batch_detail)), all or nothing.
    ///
    /// The default writes the rows one by one with
    /// [`write_schedule`](Self::write_schedule) (a version bump and a record each;
    /// not all or nothing if the store fails midway), the handlers checked first.
    async fn write_schedules(
        &self,
        rows: &[ScheduleRow],
        by: &str,
        why: &str,
        handlers: &HandlersCheck<'_>,
    ) -> Result<ControlRecord> {
        handlers.check(&self.read_handlers().await?)?;
        let mut last = None;
        for row in rows {
            last = Some(
                self.write_schedule(row, by, why, &HandlerCheck { row })
                    .await?,
            );
        }
        last.ok_or_else(|| Error::InvalidInput {
            reason: "an empty batch writes nothing".to_owned(),
        })
    }

    /// [`Controls::remove_schedule`], the texts checked.
    async fn write_removal(&self, name: &str, by: &str, why: &str)
    -> Result<Option<ControlRecord>>;

    /// [`Controls::schedules`].
    async fn read_schedules(&self) -> Result<Vec<ScheduleRow>>;

    /// [`Controls::schedule`], `name` checked.
    async fn read_schedule(&self, name: &str) -> Result<Option<ScheduleRow>>;

    /// [`Controls::schedules_page`], `after` checked.
    async fn read_schedules_page(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<ScheduleRow>>;

    /// [`Controls::due_schedules`], the cursor checked. The default, as
    /// [`Controls`]' own, answers every row with the epoch: always due.
    async fn read_due_schedules(
        &self,
        handlers: &[String],
        until: DateTime<Utc>,
        after: Option<&DueCursor>,
        limit: u32,
    ) -> Result<Vec<DueSchedule>> {
        let _ = until;
        let rows = self.read_schedules().await?;
        Ok(super::due::every_row_due(rows, handlers, after, limit))
    }

    /// [`Controls::advance_schedules`], not empty. The default moves none.
    async fn write_advances(&self, advances: &[Advance]) -> Result<u64> {
        let _ = advances;
        Ok(0)
    }

    /// [`Controls::register_handlers`]: `names` checked as names, sorted, without
    /// duplicates (possibly empty).
    async fn write_handlers(&self, node: &str, names: &[String]) -> Result<()>;

    /// [`Controls::handlers`].
    async fn read_handlers(&self) -> Result<Vec<String>>;

    /// [`Controls::register_jobs`]: `names` checked as names, sorted, without
    /// duplicates (possibly empty).
    async fn write_jobs(&self, node: &str, names: &[String]) -> Result<()>;

    /// [`Controls::jobs`].
    async fn read_jobs(&self) -> Result<Vec<String>>;

    /// [`Controls::heartbeat`], the node checked as a name and the version's text
    /// checked. The default records nothing.
    async fn write_heartbeat(&self, beat: &Heartbeat) -> Result<()> {
        let _ = beat;
        Ok(())
    }

    /// [`Controls::stopped`], `node` checked as a name. The default does nothing.
    async fn write_stopped(&self, node: &str) -> Result<()> {
        let _ = node;
        Ok(())
    }

    /// [`Controls::instances`]. Empty by default.
    async fn read_instances(&self) -> Result<Vec<InstanceRow>> {
        Ok(Vec::new())
    }

    /// [`Controls::leases`].
    async fn read_leases(&self) -> Result<Vec<LeaseRow>>;

    /// [`Controls::runs`], `job` checked.
    async fn read_runs(&self, job: Option<&str>, page: Page) -> Result<Vec<RunRow>>;

    /// The shortest `every` period a dynamic schedule put to this store may have
    /// ([`ScheduleRow::check_with_min_period`]): the store's setting, default
    /// [`DEFAULT_MIN_SCHEDULE_PERIOD`](super::DEFAULT_MIN_SCHEDULE_PERIOD).
    fn min_schedule_period(&self) -> std::time::Duration {
        super::DEFAULT_MIN_SCHEDULE_PERIOD
    }

    /// [`Controls::leases_listing`], the query's texts checked. The default reads
    /// every lease ([`read_leases`](Self::read_leases)) and judges which are held
    /// by this process's clock.
    async fn read_leases_listing(&self, query: &ListQuery) -> Result<Listing<LeaseRow>> {
        Ok(listing::leases_of(
            self.read_leases().await?,
            query,
            chrono::Utc::now(),
        ))
    }

    /// [`Controls::schedules_listing`], the query's texts checked. The default
    /// reads every schedule ([`read_schedules`](Self::read_schedules)).
    async fn read_schedules_listing(&self, query: &ListQuery) -> Result<Listing<ScheduleRow>> {
        Ok(listing::schedules_of(self.read_schedules().await?, query))
    }

    /// [`Controls::runs_where`], the query's texts checked. The default reads pages
    /// of [`read_runs`](Self::read_runs) until the page is full.
    async fn read_runs_where(&self, query: &RunQuery) -> Result<Vec<RunRow>> {
        let mut pages = listing::RunPages::new(query);
        while let Some(page) = pages.next {
            pages.read(self.read_runs(query.job.as_deref(), page).await?);
        }
        Ok(pages.found)
    }

    /// [`Controls::recent_runs`], the names checked. The default reads
    /// [`read_runs`](Self::read_runs) once per job.
    async fn read_recent_runs(&self, jobs: &[String], per_job: u32) -> Result<Vec<RunRow>> {
        defaults::recent_runs(self, jobs, per_job).await
    }

    /// [`Controls::failing_jobs`]. The default reads the latest run of each job
    /// the store knows of ([`Controls::known_jobs`]).
    async fn read_failing_jobs(&self) -> Result<Vec<String>>
    where
        Self: Sized,
    {
        defaults::failing_jobs(self).await
    }

    /// [`Controls::watch`]; `None` by default.
    fn watch_controls(&self) -> Option<tokio::sync::watch::Receiver<ControlSignal>> {
        None
    }
}

#[async_trait]
impl<T: ControlTables> Controls for T {
    async fn pause(&self, req: &ControlRequest) -> Result<ControlRecord> {
        check_request(self, req)?;
        self.write_pause(req).await
    }

    async fn resume(&self, req: &ControlRequest, catch_up: bool) -> Result<ControlRecord> {
        check_request(self, req)?;
        self.write_resume(req, catch_up).await
    }

    async fn trigger(&self, req: &ControlRequest) -> Result<Trigger> {
        check_request(self, req)?;
        self.write_trigger(req).await
    }

    async fn trigger_status(&self, id: TriggerId) -> Result<Option<Trigger>> {
        self.read_trigger(id).await
    }

    async fn claim_trigger(
        &self,
        id: TriggerId,
        lease: &LeaseName,
        holder: &Holder,
        ttl: Ttl,
    ) -> Result<Option<Lease>> {
        self.write_claim(id, lease, holder, ttl).await
    }

    async fn finish_trigger(
        &self,
        id: TriggerId,
        holder: Option<&Holder>,
        outcome: Outcome,
        error: Option<&str>,
    ) -> Result<bool> {
        self.write_finish(id, holder, outcome, error).await
    }

    async fn control_history(&self, job: Option<&str>, page: Page) -> Result<Vec<ControlRecord>> {
        if let Some(job) = job {
            self.check_text("the job", job)?;
        }
        self.read_control_history(job, page).await
    }

    async fn poll(&self, since: Option<i64>) -> Result<Option<ControlState>> {
        polls::poll_state(self, since, true).await
    }

    async fn poll_without_schedules(&self, since: Option<i64>) -> Result<Option<ControlState>> {
        polls::poll_state(self, since, false).await
    }

    async fn changed_schedules(
        &self,
        since: i64,
        upto: i64,
        names: &[String],
    ) -> Result<Vec<ScheduleRow>> {
        self.read_changed_schedules(since, upto, names).await
    }

    async fn paused(&self) -> Result<Vec<Pause>> {
        self.read_paused().await
    }

    async fn open_triggers(&self) -> Result<Vec<Trigger>> {
        self.read_open_triggers().await
    }

    async fn put_schedule(&self, row: &ScheduleRow, by: &str, why: &str) -> Result<ControlRecord> {
        check_row(self, row)?;
        super::check_by_why(by, why)?;
        check_by_why_texts(self, &format!("schedule {:?}: ", row.name), by, why)?;
        self.check_args(row).await?;
        self.write_schedule(row, by, why, &HandlerCheck { row })
            .await
    }

    async fn put_schedules(
        &self,
        rows: &[ScheduleRow],
        by: &str,
        why: &str,
    ) -> Result<Option<ControlRecord>> {
        if rows.is_empty() {
            return Ok(None);
        }
        super::check_by_why(by, why)?;
        check_by_why_texts(self, "", by, why)?;
        check_unique(rows)?;
        check_rows(self, rows)?;
        self.check_args_batch(rows).await?;
        self.write_schedules(rows, by, why, &HandlersCheck { rows })
            .await
            .map(Some)
    }

    async fn remove_schedule(
        &self,
        name: &str,
        by: &str,
        why: &str,
    ) -> Result<Option<ControlRecord>> {
        self.check_text("the schedule's name", name)?;
        check_by_why(self, by, why)?;
        self.write_removal(name, by, why).await
    }

    async fn schedules(&self) -> Result<Vec<ScheduleRow>> {
        self.read_schedules().await
    }

    async fn schedule(&self, name: &str) -> Result<Option<ScheduleRow>> {
        self.check_text("the schedule's name", name)?;
        self.read_schedule(name).await
    }

    async fn schedules_page(&self, after: Option<&str>, limit: u32) -> Result<Vec<ScheduleRow>> {
        if let Some(after) = after {
            self.check_text("the name to page after", after)?;
        }
        self.read_schedules_page(after, limit).await
    }

    async fn due_schedules(
        &self,
        handlers: &[String],
        until: DateTime<Utc>,
        after: Option<&DueCursor>,
        limit: u32,
    ) -> Result<Vec<DueSchedule>> {
        if let Some(after) = after {
            self.check_text("the name to page after", &after.name)?;
        }
        self.read_due_schedules(handlers, until, after, limit).await
    }

    async fn advance_schedules(&self, advances: &[Advance]) -> Result<u64> {
        if advances.is_empty() {
            return Ok(0);
        }
        self.write_advances(advances).await
    }

    async fn register_handlers(&self, node: &str, names: &[String]) -> Result<()> {
        let names = checked_names(node, names)?;
        self.write_handlers(node, &names).await
    }

    async fn handlers(&self) -> Result<Vec<String>> {
        self.read_handlers().await
    }

    async fn register_jobs(&self, node: &str, names: &[String]) -> Result<()> {
        let names = checked_names(node, names)?;
        self.write_jobs(node, &names).await
    }

    async fn jobs(&self) -> Result<Vec<String>> {
        self.read_jobs().await
    }

    async fn heartbeat(&self, beat: &Heartbeat) -> Result<()> {
        LeaseName::new(beat.node.as_str())?;
        self.check_text("the instance's version", &beat.version)?;
        self.write_heartbeat(beat).await
    }

    async fn stopped(&self, node: &str) -> Result<()> {
        LeaseName::new(node)?;
        self.write_stopped(node).await
    }

    async fn instances(&self) -> Result<Vec<InstanceRow>> {
        self.read_instances().await
    }

    async fn leases(&self) -> Result<Vec<LeaseRow>> {
        self.read_leases().await
    }

    async fn runs(&self, job: Option<&str>, page: Page) -> Result<Vec<RunRow>> {
        if let Some(job) = job {
            self.check_text("the job", job)?;
        }
        self.read_runs(job, page).await
    }

    async fn leases_listing(&self, query: &ListQuery) -> Result<Listing<LeaseRow>> {
        check_list_query(self, query)?;
        self.read_leases_listing(query).await
    }

    async fn schedules_listing(&self, query: &ListQuery) -> Result<Listing<ScheduleRow>> {
        check_list_query(self, query)?;
        self.read_schedules_listing(query).await
    }

    async fn runs_where(&self, query: &RunQuery) -> Result<Vec<RunRow>> {
        for (what, text) in [("the job", &query.job), ("the node", &query.node)] {
            if let Some(text) = text {
                self.check_text(what, text)?;
            }
        }
        self.read_runs_where(query).await
    }

    async fn recent_runs(&self, jobs: &[String], per_job: u32) -> Result<Vec<RunRow>> {
        checks::recent_runs(self, jobs)?;
        self.read_recent_runs(jobs, per_job).await
    }

    async fn failing_jobs(&self) -> Result<Vec<String>> {
        self.read_failing_jobs().await
    }

    fn watch(&self) -> Option<tokio::sync::watch::Receiver<ControlSignal>> {
        self.watch_controls()
    }
}
