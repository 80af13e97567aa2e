//! Operators' hands: pause, resume, trigger now, schedules as data, and the record
//! of who did what.
//!
//! Every control is a row in the store, next to the leases, so every instance
//! honours it — including one that has not yet read it:
//! - a **pause** is a condition of the batched take itself ([`TakeRequest::control`]):
//!   a paused job's take is refused ([`Taken::paused`]) and its tick counted
//!   `paused`, not run and not missed;
//! - a **resume** records whether the ticks paused over are caught up (as the job's
//!   catch-up policy says) or dropped;
//! - a **trigger** is one extra run of a job under the job's own lease, exactly once
//!   in the cluster: the instance that claims it ([`Controls::claim_trigger`]) takes
//!   the lease when it is free (so the job's overlap policy holds), and the run's
//!   tick is the instant it was requested. It never touches the job's scheduled
//!   ticks: the lease keeps its tick, and the trigger's finish
//!   ([`Controls::finish_trigger`]) hands the lease back completed or not as it was
//!   before the claim;
//! - a **dynamic schedule** ([`ScheduleRow`]) is a job defined by a row, bound to a
//!   handler the app registered by name.
//!
//! Each of them is recorded ([`ControlRecord`]: who, when, why) and bumps the
//! store's control version, which instances poll ([`Controls::poll`]) — one cheap
//! read while nothing changed. A store that can announce the bumps
//! ([`Controls::watch`], PostgreSQL's `LISTEN`/`NOTIFY`) is polled when one is
//! announced instead of on a timer.
//!
//! [`TakeRequest::control`]: crate::TakeRequest::control
//! [`Taken::paused`]: crate::Taken::paused

mod batch;
mod dashboard;
pub mod due;
mod instances;
mod limits;
pub mod listing;
mod records;
mod schedules;
mod state;
pub mod stored;
mod tables;

use std::fmt;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

pub use self::batch::{HandlerCheck, HandlersCheck, batch_detail};
pub use self::dashboard::{LeaseRow, Page, RunRow};
pub use self::due::{Advance, DueCursor, DueSchedule, TickBounds};
pub use self::instances::{EXPIRY_BEATS, Heartbeat, InstanceRow};
pub use self::limits::{DEFAULT_MIN_SCHEDULE_PERIOD, MAX_TEXT_BYTES, check_by_why, trigger_action};
pub use self::listing::{Cursor, ListQuery, Listing, RunQuery};
pub use self::records::{ControlAction, ControlRecord, ControlRequest};
pub use self::schedules::{ParsedSchedule, ScheduleRow, policy_from_spec};
pub use self::state::{
    ControlSignal, ControlState, Pause, Resume, Trigger, TriggerId, TriggerState,
};
pub use self::tables::ControlTables;
use crate::error::Result;
use crate::lease::{Holder, Lease, LeaseName, Ttl};
use crate::outcome::Outcome;

/// The control side of a store: what operators do, and what instances poll.
///
/// Implemented by the PostgreSQL and SQLite stores (and the memory store for unit
/// tests); a store hands it out with [`Store::controls`](crate::Store::controls).
///
/// Every write keeps the same limits, whoever calls it (the API, the CLI, the
/// dashboard), and refuses before anything is written: a request as
/// [`ControlRequest::check`] says (an actor and a reason of at most
/// [`MAX_TEXT_BYTES`] each, the actor not empty), a schedule as
/// [`ScheduleRow::check_with_min_period`] says with the store's minimum period, and
/// a trigger of a paused job only when asked for as such
/// ([`ControlRequest::while_paused`]). Refusals are [`Error::InvalidInput`],
/// [`Error::InvalidName`] and [`Error::TriggerWhilePaused`].
///
/// [`Error::InvalidInput`]: crate::Error::InvalidInput
/// [`Error::InvalidName`]: crate::Error::InvalidName
/// [`Error::TriggerWhilePaused`]: crate::Error::TriggerWhilePaused
#[async_trait]
pub trait Controls: Send + Sync + fmt::Debug {
    /// Pauses `req.job` (on `req.node` only, or everywhere). Takes of its ticks are
    /// refused from now on, by every instance, and the ticks counted `paused`.
    /// Pausing a paused job records the request and changes nothing else.
    async fn pause(&self, req: &ControlRequest) -> Result<ControlRecord>;

    /// Ends the pause of `req.job` (on `req.node`, or everywhere): with `catch_up`,
    /// the ticks paused over are caught up as the job's catch-up policy says;
    /// without, they are dropped. Without a node every pause of the job ends (the
    /// one for every node and each node's own); with one, only that node's (a pause
    /// for every node stays in force). Resuming a job that is not paused records the
    /// request and changes nothing.
    async fn resume(&self, req: &ControlRequest, catch_up: bool) -> Result<ControlRecord>;

    /// Asks for one extra run of `req.job` (on `req.node` for a node-scoped job):
    /// returns its id at once; an instance running the job claims it within a poll
    /// interval. A job paused everywhere, or on `req.node`, is triggered only with
    /// [`ControlRequest::while_paused`], and recorded as
    /// [`ControlAction::TriggerWhilePaused`]; without it the trigger is refused
    /// ([`Error::TriggerWhilePaused`](crate::Error::TriggerWhilePaused)), nothing
    /// written. The pauses are read where the trigger is written: no pause slips in
    /// between.
    async fn trigger(&self, req: &ControlRequest) -> Result<Trigger>;

    /// A trigger, as it stands.
    async fn trigger_status(&self, id: TriggerId) -> Result<Option<Trigger>>;

    /// Claims trigger `id` for a run under lease `lease` as `holder`, in one
    /// statement: when the trigger is claimable and the lease is free, takes the
    /// lease and marks the trigger running under `holder`. `None`: someone else
    /// claimed it, or the lease is held (the job runs).
    ///
    /// - **Claimable**: pending; or running under this same lease name while its
    ///   claimant no longer holds it (the lease expired unreleased, or was taken since
    ///   by another holder: the claimant ended without finishing it).
    /// - **Free**: the lease row is absent, or expired or released (`expires_at` is
    ///   past), whatever its tick.
    /// - **Taken**: the row gets `holder`, a new fencing token (the next one; 1 for a
    ///   new row), `ttl` from now, and is no longer released; **its tick is left as
    ///   it was** (a new row gets 1970-01-01T00:00:00Z, earlier than any real tick),
    ///   so a scheduled tick due but not yet taken is still taken after the run, and
    ///   one that ran stays done. A request to stop
    ///   ([`Store::request_cancel`](crate::Store::request_cancel)) from a tick no later
    ///   than the trigger's instant is dropped: it was meant for the run before (the
    ///   trigger's own, under `cancel running`); a later tick's is kept. The trigger
    ///   keeps the row's completion from before the claim (from before its first
    ///   claim, when it takes over a vanished claimant's lease), which
    ///   [`finish_trigger`](Self::finish_trigger) puts back.
    ///
    /// The returned [`Lease`]'s tick is the row's, not the run's: the run's tick is
    /// the trigger's [`requested_at`](Trigger::requested_at). The lease is renewed
    /// like any other, and given back by [`finish_trigger`](Self::finish_trigger),
    /// never by [`Store::release`](crate::Store::release).
    async fn claim_trigger(
        &self,
        id: TriggerId,
        lease: &LeaseName,
        holder: &Holder,
        ttl: Ttl,
    ) -> Result<Option<Lease>>;

    /// Records the end of trigger `id`: `outcome` (how its run ended, or
    /// [`Outcome::Skipped`] when the job's overlap policy refused it) and the error's
    /// text, and gives its lease back, in one statement.
    ///
    /// A trigger that is pending (refused before a claim; `holder` is `None`) or
    /// running under `holder` is ended; any other is left alone (returns `false`).
    /// With `holder`, the lease the trigger was claimed under, if `holder` still holds
    /// it, is handed back as the claim found it: released as completed again if it
    /// was (a tick that ran stays done), unreleased if not (a tick not yet run, or
    /// not finished, may still be taken), and expired now. A claimant finishes its
    /// trigger instead of releasing the run's lease; once the lease has passed to
    /// another holder, an unfinished trigger may be claimed again.
    async fn finish_trigger(
        &self,
        id: TriggerId,
        holder: Option<&Holder>,
        outcome: Outcome,
        error: Option<&str>,
    ) -> Result<bool>;

    /// The controls applied, to `job` or to every job, newest first.
    async fn control_history(&self, job: Option<&str>, page: Page) -> Result<Vec<ControlRecord>>;

    /// What changed since control version `since` (`None`: everything). `Ok(None)`
    /// when nothing changed: one cheap read.
    async fn poll(&self, since: Option<i64>) -> Result<Option<ControlState>>;

    /// As [`poll`](Self::poll), without the dynamic schedules: what an instance that
    /// loads them as they come due reads (the rows due:
    /// [`due_schedules`](Self::due_schedules); changes of the rows it holds:
    /// [`changed_schedules`](Self::changed_schedules)). The default drops them.
    async fn poll_without_schedules(&self, since: Option<i64>) -> Result<Option<ControlState>> {
        let mut state = self.poll(since).await?;
        if let Some(state) = &mut state {
            state.schedules = Vec::new();
        }
        Ok(state)
    }

    /// The rows among `names` changed after control version `since` and no later
    /// than `upto`, removed ones included, by name. The default polls and filters;
    /// the stores read the rows named by their key.
    async fn changed_schedules(
        &self,
        since: i64,
        upto: i64,
        names: &[String],
    ) -> Result<Vec<ScheduleRow>> {
        let Some(state) = self.poll(Some(since)).await? else {
            return Ok(Vec::new());
        };
        Ok(schedules::named_within(state.schedules, since, upto, names))
    }

    /// Every pause in force, by job and node ([`ControlState::paused`] without the
    /// rest of a poll).
    ///
    /// The default polls everything ([`poll(None)`](Self::poll), every schedule
    /// included); the stores read the pauses only.
    async fn paused(&self) -> Result<Vec<Pause>> {
        Ok(self.poll(None).await?.unwrap_or_default().paused)
    }

    /// The triggers not yet done (pending, or running), oldest first
    /// ([`ControlState::triggers`] without the rest of a poll).
    ///
    /// The default polls everything ([`poll(None)`](Self::poll), every schedule
    /// included); the stores read the open triggers only.
    async fn open_triggers(&self) -> Result<Vec<Trigger>> {
        Ok(self.poll(None).await?.unwrap_or_default().triggers)
    }

    /// Adds or replaces the dynamic schedule `row.name`, after checking it
    /// ([`ScheduleRow::check`]), that its handler is registered by a running
    /// instance ([`register_handlers`](Self::register_handlers)) and that its
    /// arguments are JSON.
    async fn put_schedule(&self, row: &ScheduleRow, by: &str, why: &str) -> Result<ControlRecord>;

    /// Adds or replaces the dynamic schedules `rows`, all or nothing: what a user
    /// with a schedule per customer or device puts, thousands at once.
    ///
    /// Every row is checked first, as [`put_schedule`](Self::put_schedule) checks
    /// one (its schedule, its handler registered, its arguments JSON, the texts the
    /// store can keep), `by` and `why` as every control's, and no name may appear
    /// twice. One refused row refuses the batch, nothing written:
    /// [`Error::InBatch`](crate::Error::InBatch) names the row (its index and name)
    /// and says what is wrong with it.
    ///
    /// The stores then write every row in one transaction, in chunks (PostgreSQL:
    /// `INSERT … SELECT FROM unnest(…)`; SQLite: `json_each`), with **one** bump of
    /// the control version and **one** audit record
    /// ([`ControlAction::SchedulePut`], its job the first row's name, its detail how
    /// many rows and the first names: [`batch_detail`]). Instances see the whole
    /// batch at their next poll, as they see one put. Returns that record; `None`
    /// for an empty batch, which writes nothing and bumps nothing.
    ///
    /// The default (a store that does not implement it) checks the rows as above
    /// against [`ScheduleRow::check`] and [`handlers`](Self::handlers), then puts
    /// them **one by one** with [`put_schedule`](Self::put_schedule): one version
    /// bump and one record per row, the last record returned, and a store failure
    /// midway leaves the rows before it written. A store that wraps another must
    /// forward it.
    async fn put_schedules(
        &self,
        rows: &[ScheduleRow],
        by: &str,
        why: &str,
    ) -> Result<Option<ControlRecord>> {
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        check_by_why(by, why)?;
        self::batch::check_unique(rows)?;
        for (index, row) in rows.iter().enumerate() {
            row.check()
                .map_err(|cause| self::batch::in_batch(index, row, cause))?;
        }
        HandlersCheck { rows }.check(&self.handlers().await?)?;
        let mut last = self.put_schedule(first, by, why).await?;
        for row in &rows[1..] {
            last = self.put_schedule(row, by, why).await?;
        }
        Ok(Some(last))
    }

    /// Removes the dynamic schedule `name`. `Ok(None)` if there is none.
    async fn remove_schedule(
        &self,
        name: &str,
        by: &str,
        why: &str,
    ) -> Result<Option<ControlRecord>>;

    /// Every dynamic schedule, by name.
    async fn schedules(&self) -> Result<Vec<ScheduleRow>>;

    /// The dynamic schedule `name`, unless there is none (or it was removed).
    ///
    /// What a page about one job reads. The default reads every schedule
    /// ([`schedules`](Self::schedules)); the stores read the one row.
    async fn schedule(&self, name: &str) -> Result<Option<ScheduleRow>> {
        Ok(self
            .schedules()
            .await?
            .into_iter()
            .find(|row| row.name == name && !row.removed))
    }

    /// The dynamic schedules due by `until`, for an instance that runs `handlers`:
    /// enabled, not removed, of one of `handlers`, whose bound
    /// ([`DueSchedule::next_tick`]: no tick of the row before it is still undecided,
    /// see [`due`]) is no later than `until`, ordered by `(next_tick, name)`: the
    /// first `limit` after `after` (`None`: from the first). To read the next page,
    /// pass the last row's [`DueSchedule::cursor`].
    ///
    /// The default (a store that keeps no bounds) reads every schedule
    /// ([`schedules`](Self::schedules)) and answers each with the epoch as its
    /// bound: always due, which is never late.
    async fn due_schedules(
        &self,
        handlers: &[String],
        until: DateTime<Utc>,
        after: Option<&DueCursor>,
        limit: u32,
    ) -> Result<Vec<DueSchedule>> {
        let _ = until;
        Ok(due::every_row_due(
            self.schedules().await?,
            handlers,
            after,
            limit,
        ))
    }

    /// Moves bounds forward, in one statement: each [`Advance`] sets its row's bound
    /// to its `next_tick` when the row is still at the advance's `version` (a put or
    /// removal made since wins) and its bound is earlier (bounds only move forward,
    /// whoever advances them). Returns how many rows moved. An advance is not a
    /// control: no version bump, no audit record, no poll woken.
    ///
    /// The default (a store that keeps no bounds) moves none.
    async fn advance_schedules(&self, advances: &[Advance]) -> Result<u64> {
        let _ = advances;
        Ok(0)
    }

    /// A page of the dynamic schedules, by name: the first `limit` whose name sorts
    /// after `after` (`None`: from the first). Removed schedules are left out. To
    /// read the next page, pass the last name of this one.
    ///
    /// What a dashboard listing schedules reads, however many there are. The default
    /// reads every schedule ([`schedules`](Self::schedules)); the stores read the
    /// page from the index on the name (names compare as the store's text does: by
    /// bytes, or PostgreSQL's collation).
    async fn schedules_page(&self, after: Option<&str>, limit: u32) -> Result<Vec<ScheduleRow>> {
        let mut rows: Vec<ScheduleRow> = self
            .schedules()
            .await?
            .into_iter()
            .filter(|row| !row.removed && after.is_none_or(|after| row.name.as_str() > after))
            .collect();
        rows.sort_by(|a, b| a.name.cmp(&b.name));
        rows.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        Ok(rows)
    }

    /// Records that `node` runs the handlers `names` (what
    /// [`put_schedule`](Self::put_schedule) checks a row's handler against).
    async fn register_handlers(&self, node: &str, names: &[String]) -> Result<()>;

    /// The handlers registered by the instances that count, sorted, once each.
    ///
    /// A node's registrations count while the node is **live**
    /// ([`InstanceRow::is_live`]: it beat within its expiry and did not stop), or
    /// while it has **no instance row** at all: an instance of a version before
    /// heartbeats ([`heartbeat`](Self::heartbeat)) registers once and never beats,
    /// so during a rolling upgrade its registrations count as they always did. A
    /// node that beat once is judged by its row from then on: its registrations
    /// stop counting when it stops or expires, and count again when it beats again
    /// (they are kept, not deleted). A fresh store has neither rows nor
    /// registrations: nothing counts until an instance registers.
    async fn handlers(&self) -> Result<Vec<String>>;

    /// Records that `node` runs the jobs `names` (those registered in code): what
    /// an operator's command is checked against ([`known_jobs`](Self::known_jobs)).
    ///
    /// The default records nothing; the stores keep them. A store that wraps
    /// another must forward it.
    async fn register_jobs(&self, node: &str, names: &[String]) -> Result<()> {
        let _ = (node, names);
        Ok(())
    }

    /// The jobs registered ([`register_jobs`](Self::register_jobs)) by the
    /// instances that count, sorted, once each: the rule of
    /// [`handlers`](Self::handlers) (live nodes, and nodes that never beat). None by
    /// default.
    async fn jobs(&self) -> Result<Vec<String>> {
        Ok(Vec::new())
    }

    /// Every job name the store knows of, sorted, once each: the jobs the instances
    /// registered ([`jobs`](Self::jobs)), the dynamic schedules not removed, and the
    /// job of every lease in the lease table ([`LeaseRow::job`]: a job that ran).
    /// What an operator's pause, resume or trigger of a job nobody runs is refused
    /// by (a typo would otherwise be stored and do nothing).
    async fn known_jobs(&self) -> Result<Vec<String>> {
        let mut names = self.jobs().await?;
        names.extend(
            self.schedules()
                .await?
                .into_iter()
                .filter(|row| !row.removed)
                .map(|row| row.name),
        );
        names.extend(self.leases().await?.iter().map(LeaseRow::job));
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// Records that `beat.node` is alive now: adds or replaces its instance row,
    /// `seen_at` the store's clock and `expires_at` that plus
    /// [`EXPIRY_BEATS`] × `beat.every` ([`Heartbeat::expiry`]), no longer stopped.
    /// What keeps the node's registrations counting ([`handlers`](Self::handlers),
    /// [`jobs`](Self::jobs)).
    ///
    /// The default records nothing (a store without instances: registrations never
    /// expire there); the stores keep the row. A store that wraps another must
    /// forward it.
    async fn heartbeat(&self, beat: &Heartbeat) -> Result<()> {
        let _ = beat;
        Ok(())
    }

    /// Marks `node`'s instance row stopped (what a scheduler says as it shuts down):
    /// its registrations stop counting at once instead of at its expiry. Nothing
    /// happens for a node without a row. A later [`heartbeat`](Self::heartbeat)
    /// (the node started again) clears the mark.
    ///
    /// The default does nothing; the stores keep it. A store that wraps another must
    /// forward it.
    async fn stopped(&self, node: &str) -> Result<()> {
        let _ = node;
        Ok(())
    }

    /// Every instance that ever beat ([`heartbeat`](Self::heartbeat)), by node, live
    /// or not ([`InstanceRow::is_live`] on the store's clock), each with the
    /// handlers and jobs its node registered. Instances that never beat (older
    /// versions) are not listed.
    ///
    /// Empty by default; the stores read their rows. A store that wraps another must
    /// forward it.
    async fn instances(&self) -> Result<Vec<InstanceRow>> {
        Ok(Vec::new())
    }

    /// Every lease, by name.
    async fn leases(&self) -> Result<Vec<LeaseRow>>;

    /// The runs of `job` (or of every job) the run history keeps, newest first; empty
    /// when the store keeps no run history.
    async fn runs(&self, job: Option<&str>, page: Page) -> Result<Vec<RunRow>>;

    /// A page of the leases by name, filtered ([`ListQuery`]: search, node, held),
    /// with how many match and whether more lie either side.
    ///
    /// What a dashboard listing leases reads, however many there are. The default
    /// reads every lease ([`leases`](Self::leases)) and judges which are held by
    /// this process's clock; the stores read the page from the index on the name,
    /// count with the same filters and judge by their own clock.
    async fn leases_listing(&self, query: &ListQuery) -> Result<Listing<LeaseRow>> {
        Ok(listing::leases_of(
            self.leases().await?,
            query,
            chrono::Utc::now(),
        ))
    }

    /// A page of the dynamic schedules by name (removed ones left out), filtered
    /// ([`ListQuery`]: search, handler), with how many match and whether more lie
    /// either side.
    ///
    /// The default reads every schedule ([`schedules`](Self::schedules)); the stores
    /// read the page from the index on the name and count with the same filters.
    async fn schedules_listing(&self, query: &ListQuery) -> Result<Listing<ScheduleRow>> {
        Ok(listing::schedules_of(self.schedules().await?, query))
    }

    /// The runs of the run history that match `query` (job, node, failed only),
    /// newest first: a full page of them unless the history ends first.
    ///
    /// The default reads pages of [`runs`](Self::runs) (of the job, when given) and
    /// filters them until the page is full: as many reads as it takes. The stores
    /// read the page with the filters in one statement.
    async fn runs_where(&self, query: &RunQuery) -> Result<Vec<RunRow>> {
        let mut pages = listing::RunPages::new(query);
        while let Some(page) = pages.next {
            pages.read(self.runs(query.job.as_deref(), page).await?);
        }
        Ok(pages.found)
    }

    /// The latest `per_job` runs of each job of `jobs` (at most
    /// [`MAX_LIMIT`](listing::MAX_LIMIT) jobs), newest first within each job: what a
    /// page of jobs shows of their recent runs, in one read.
    ///
    /// The default reads [`runs`](Self::runs) once per job; the stores read them in
    /// one statement, each job's from the index on (job, id).
    async fn recent_runs(&self, jobs: &[String], per_job: u32) -> Result<Vec<RunRow>> {
        listing::check_recent(jobs)?;
        let mut found = Vec::new();
        for job in jobs {
            let page = Page {
                before: None,
                limit: per_job,
            };
            found.extend(self.runs(Some(job), page).await?);
        }
        Ok(found)
    }

    /// The jobs whose latest run in the run history (the one recorded last) failed
    /// ([`RunQuery::FAILED`]), sorted; none when the store keeps no run history.
    ///
    /// The default reads the latest run of each job it knows of
    /// ([`known_jobs`](Self::known_jobs)): one read per job. The stores read the
    /// latest run of each job in the history from the index on (job, id).
    async fn failing_jobs(&self) -> Result<Vec<String>> {
        let mut failing = Vec::new();
        for job in self.known_jobs().await? {
            let latest = self
                .runs(
                    Some(&job),
                    Page {
                        before: None,
                        limit: 1,
                    },
                )
                .await?;
            if latest.first().is_some_and(|run| run.outcome.is_failure()) {
                failing.push(job);
            }
        }
        Ok(failing)
    }

    /// A watch that announces changes of the control version, so that the runtime
    /// polls the controls when one is announced instead of every
    /// [`control_poll`](crate::SchedulerBuilder::control_poll): while the watch is
    /// [`live`](ControlSignal::live), an instance with nothing else to claim sends no
    /// control read between changes.
    ///
    /// `None` (the default), or a watch that is not live: the runtime polls on its
    /// timer. Called once per scheduler, from within its tokio runtime. A store that
    /// wraps another must forward it.
    fn watch(&self) -> Option<tokio::sync::watch::Receiver<ControlSignal>> {
        None
    }
}

#[cfg(test)]
mod tests;
