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

use std::fmt;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::error::Result;
use crate::job::Scope;
use crate::lease::{Holder, Lease, LeaseName, Ttl};

/// Who asked for a control, and why: a free-form actor string the app passes (a user
/// name, `cli:alice@host`, `web:admin`), and a reason, both kept in the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlRequest {
    /// The job (a job registered in code, or a dynamic schedule's name).
    pub job: String,
    /// One node's scope only (a node-scoped job on that node), or `None`: every node.
    pub node: Option<String>,
    /// Who asked.
    pub by: String,
    /// Why (may be empty).
    pub why: String,
}

impl ControlRequest {
    /// A request about `job`, asked by `by`, for every node, with no reason given.
    pub fn new(job: impl Into<String>, by: impl Into<String>) -> Self {
        Self {
            job: job.into(),
            node: None,
            by: by.into(),
            why: String::new(),
        }
    }

    /// About node `node`'s scope only.
    pub fn node(mut self, node: impl Into<String>) -> Self {
        self.node = Some(node.into());
        self
    }

    /// With the reason `why`.
    pub fn why(mut self, why: impl Into<String>) -> Self {
        self.why = why.into();
        self
    }
}

/// What a control did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ControlAction {
    /// The job was paused.
    Pause,
    /// The job was resumed; the ticks paused over are caught up.
    Resume,
    /// The job was resumed; the ticks paused over are dropped.
    ResumeWithoutCatchUp,
    /// One extra run was asked for.
    Trigger,
    /// A dynamic schedule was added or changed.
    SchedulePut,
    /// A dynamic schedule was removed.
    ScheduleRemove,
}

impl ControlAction {
    /// Every action.
    pub const ALL: [ControlAction; 6] = [
        ControlAction::Pause,
        ControlAction::Resume,
        ControlAction::ResumeWithoutCatchUp,
        ControlAction::Trigger,
        ControlAction::SchedulePut,
        ControlAction::ScheduleRemove,
    ];

    /// The action's name as stored: `pause`, `resume`, `resume_no_catch_up`,
    /// `trigger`, `schedule_put`, `schedule_remove`.
    pub fn as_str(self) -> &'static str {
        match self {
            ControlAction::Pause => "pause",
            ControlAction::Resume => "resume",
            ControlAction::ResumeWithoutCatchUp => "resume_no_catch_up",
            ControlAction::Trigger => "trigger",
            ControlAction::SchedulePut => "schedule_put",
            ControlAction::ScheduleRemove => "schedule_remove",
        }
    }

    /// The action stored as `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.as_str() == name)
    }
}

impl fmt::Display for ControlAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One control applied: the audit record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlRecord {
    /// Its id, increasing in the order controls were applied.
    pub id: i64,
    /// When, on the store's clock.
    pub at: DateTime<Utc>,
    /// The job (or dynamic schedule).
    pub job: String,
    /// The node it was limited to, if any.
    pub node: Option<String>,
    /// What was done.
    pub action: ControlAction,
    /// Who asked.
    pub by: String,
    /// Why.
    pub why: String,
    /// What else the action carries: the trigger's id, the schedule's text.
    pub detail: String,
}

/// A job paused now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pause {
    /// The job.
    pub job: String,
    /// The node it is paused on, or `None`: every node.
    pub node: Option<String>,
    /// Since when, on the store's clock.
    pub since: DateTime<Utc>,
    /// Who paused it.
    pub by: String,
    /// Why.
    pub why: String,
}

/// A job resumed: the ticks from `paused_since` to `resumed_at` were paused over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resume {
    /// The job.
    pub job: String,
    /// The node it was paused on, or `None`: every node.
    pub node: Option<String>,
    /// When the pause began.
    pub paused_since: DateTime<Utc>,
    /// When it ended.
    pub resumed_at: DateTime<Utc>,
    /// Whether the ticks paused over are caught up, as the job's catch-up policy says.
    pub catch_up: bool,
    /// The control version that recorded it (instances apply each resume once).
    pub version: i64,
}

/// The id of a triggered run: what a caller follows ([`Controls::trigger_status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TriggerId(pub i64);

impl fmt::Display for TriggerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Where a triggered run stands.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TriggerState {
    /// Asked for; no instance has claimed it yet.
    Pending,
    /// Claimed: `holder` holds the job's lease for it.
    Running {
        /// The lease's holder.
        holder: Holder,
        /// When the run began (store clock).
        started_at: DateTime<Utc>,
    },
    /// Ended with `outcome` (`succeeded`, `failed`, `timed_out`, …; `skipped` when the overlap policy
    /// refused it), and the error's text if it failed.
    Done {
        /// The run's outcome.
        outcome: String,
        /// The error, if it failed.
        error: Option<String>,
        /// When it ended (store clock).
        finished_at: DateTime<Utc>,
    },
}

/// A triggered run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trigger {
    /// Its id.
    pub id: TriggerId,
    /// The job.
    pub job: String,
    /// The node it runs on (a node-scoped job), or `None`: any instance.
    pub node: Option<String>,
    /// When it was asked for (store clock): the run's tick.
    pub requested_at: DateTime<Utc>,
    /// Who asked.
    pub by: String,
    /// Why.
    pub why: String,
    /// Where it stands.
    pub state: TriggerState,
}

/// A dynamic schedule: a job defined by a row, bound to a handler the app registered
/// by name ([`SchedulerBuilder::handler`](crate::SchedulerBuilder::handler)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleRow {
    /// The job's name (the same rules as a job registered in code; the two must not
    /// clash).
    pub name: String,
    /// The handler's name.
    pub handler: String,
    /// The schedule as the CLI and `#[job]` write it: a cron expression
    /// (`0 0 9 * * Mon-Fri`) or `every 30s`.
    pub schedule: String,
    /// The time zone of a cron schedule (IANA name), or `None`: UTC.
    pub zone: Option<String>,
    /// Once per tick in the cluster, or once per node.
    pub scope: Scope,
    /// The policy in `#[job]`'s key syntax (`overlap = "skip", retry = 2`), empty
    /// for the default ([`policy_from_spec`]).
    pub policy: String,
    /// The arguments handed to the handler: JSON text (`{}` for none).
    pub args: String,
    /// Whether it runs; a disabled schedule is kept but takes no ticks.
    pub enabled: bool,
    /// The control version that last changed it (set by the store).
    pub version: i64,
    /// When it last changed (set by the store).
    pub updated_at: Option<DateTime<Utc>>,
    /// Removed (only in [`ControlState::schedules`], so instances drop it).
    pub removed: bool,
}

impl ScheduleRow {
    /// A row for job `name` run by `handler` on `schedule` (cron, or `every 30s`),
    /// cluster scope, default policy, no arguments, enabled.
    pub fn new(
        name: impl Into<String>,
        handler: impl Into<String>,
        schedule: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            handler: handler.into(),
            schedule: schedule.into(),
            zone: None,
            scope: Scope::Cluster,
            policy: String::new(),
            args: "{}".to_owned(),
            enabled: true,
            version: 0,
            updated_at: None,
            removed: false,
        }
    }

    /// Checks the row before it is stored: the name, the schedule, the zone and the
    /// policy (the store checks the handler is known and the arguments are JSON).
    ///
    /// # Errors
    /// [`Error::InvalidName`](crate::Error::InvalidName),
    /// [`Error::InvalidSchedule`](crate::Error::InvalidSchedule),
    /// [`Error::InvalidTiming`](crate::Error::InvalidTiming) or
    /// [`Error::InvalidControl`](crate::Error::InvalidControl).
    pub fn check(&self) -> Result<crate::schedule::Schedule> {
        crate::lease::validate_name(&self.name)?;
        crate::lease::validate_name(&self.handler)?;
        let schedule = self.to_schedule()?;
        schedule
            .compile()
            .map_err(|cause| crate::Error::InvalidSchedule {
                job: self.name.clone(),
                cause,
            })?;
        policy_from_spec(&self.policy).map_err(|reason| crate::Error::InvalidControl {
            reason: format!("schedule {:?}: policy: {reason}", self.name),
        })?;
        Ok(schedule)
    }

    /// The row's schedule.
    ///
    /// # Errors
    /// [`Error::InvalidSchedule`](crate::Error::InvalidSchedule) for a bad duration.
    pub fn to_schedule(&self) -> Result<crate::schedule::Schedule> {
        let text = self.schedule.trim();
        let schedule = match text.strip_prefix("every ") {
            Some(every) => {
                let period = crate::schedule::parse_duration(every.trim()).map_err(|cause| {
                    crate::Error::InvalidSchedule {
                        job: self.name.clone(),
                        cause,
                    }
                })?;
                crate::schedule::Schedule::every(period)
            }
            None => crate::schedule::Schedule::cron(text),
        };
        Ok(match &self.zone {
            Some(zone) => schedule.in_time_zone(zone),
            None => schedule,
        })
    }
}

/// Parses a policy written in `#[job]`'s key syntax: comma-separated `key = value`
/// pairs, values quoted or not — `catch_up` (`skip`, `latest`, `all`),
/// `catch_up_max`, `overlap` (`skip`, `buffer_one`, `cancel_running`, `concurrent`),
/// `max_concurrent`, `retry`, `retry_backoff`, `timeout`. Empty: the default. As in
/// `#[job]`, `catch_up = "all"` without `catch_up_max` keeps at most
/// [`scheduler_spec::DEFAULT_CATCH_UP_MAX`] (10) ticks, and a value `#[job]` refuses
/// (a zero, or a `catch_up_max` above [`scheduler_spec::MAX_CATCH_UP`]) is refused.
///
/// # Errors
/// A message naming the key or value that is wrong.
pub fn policy_from_spec(spec: &str) -> std::result::Result<crate::Policy, String> {
    use crate::policy::{CatchUp, Overlap, Policy, Retry};
    let mut policy = Policy::default();
    let mut catch_up = None;
    let mut catch_up_max = None;
    let mut overlap = None;
    let mut max_concurrent = None;
    let mut retry = None;
    let mut backoff = None;
    for pair in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("{pair:?} is not `key = value`"))?;
        let key = key.trim();
        let value = value.trim().trim_matches('"');
        let number = |v: &str| {
            v.parse::<u32>()
                .map_err(|_| format!("{key} = {v:?} is not a whole number"))
        };
        let duration =
            |v: &str| crate::schedule::parse_duration(v).map_err(|e| format!("{key} = {v:?}: {e}"));
        match key {
            "catch_up" => catch_up = Some(value.to_owned()),
            "catch_up_max" => catch_up_max = Some(number(value)?),
            "overlap" => overlap = Some(value.to_owned()),
            "max_concurrent" => max_concurrent = Some(number(value)?),
            "retry" => retry = Some(number(value)?),
            "retry_backoff" => backoff = Some(duration(value)?),
            "timeout" => policy.timeout = Some(duration(value)?),
            other => return Err(format!("unknown key {other:?}")),
        }
    }
    policy.catch_up = match (catch_up.as_deref(), catch_up_max) {
        (None | Some("latest"), None) => CatchUp::Latest,
        (Some("skip"), None) => CatchUp::Skip,
        (Some("all"), max) => CatchUp::All {
            max: max.unwrap_or(scheduler_spec::DEFAULT_CATCH_UP_MAX),
        },
        (_, Some(_)) => return Err("catch_up_max needs catch_up = \"all\"".into()),
        (Some(other), None) => return Err(format!("catch_up = {other:?}: skip, latest or all")),
    };
    policy.overlap = match (overlap.as_deref(), max_concurrent) {
        (None | Some("skip"), None) => Overlap::Skip,
        (Some("buffer_one"), None) => Overlap::BufferOne,
        (Some("cancel_running"), None) => Overlap::CancelRunning,
        (Some("concurrent"), Some(max)) => Overlap::Concurrent { max },
        (Some("concurrent"), None) => {
            return Err("overlap = \"concurrent\" needs max_concurrent".into());
        }
        (_, Some(_)) => return Err("max_concurrent needs overlap = \"concurrent\"".into()),
        (Some(other), None) => {
            return Err(format!(
                "overlap = {other:?}: skip, buffer_one, cancel_running or concurrent"
            ));
        }
    };
    policy.retry = match (retry, backoff) {
        (Some(attempts), backoff) => Some(Retry {
            attempts,
            backoff: backoff.unwrap_or(std::time::Duration::from_secs(1)),
        }),
        (None, Some(_)) => return Err("retry_backoff needs retry".into()),
        (None, None) => None,
    };
    // What `build()` refuses in a job's timing that the policy alone decides (the
    // rules that need the period are checked when the schedule becomes a job).
    scheduler_spec::check_timing(&policy.timing()).map_err(|e| e.to_string())?;
    if policy.overlap == (Overlap::Concurrent { max: 0 }) {
        return Err(scheduler_spec::TimingError::ZeroConcurrency.to_string());
    }
    Ok(policy)
}

/// What changed since a control version: what an instance polls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ControlState {
    /// The store's control version now.
    pub version: i64,
    /// Every pause in force (all of them, not only the new ones).
    pub paused: Vec<Pause>,
    /// Resumes recorded after the version asked about.
    pub resumed: Vec<Resume>,
    /// Triggers not yet done (pending, or running), oldest first.
    pub triggers: Vec<Trigger>,
    /// Dynamic schedules changed after the version asked about, removed ones
    /// included ([`ScheduleRow::removed`]); every live schedule (no tombstones)
    /// when asked about no version.
    pub schedules: Vec<ScheduleRow>,
}

/// A page of a history: the records before `before` (an id; `None`: the newest),
/// at most `limit` of them, newest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    /// Only records with an id below this.
    pub before: Option<i64>,
    /// At most this many.
    pub limit: u32,
}

impl Default for Page {
    fn default() -> Self {
        Self {
            before: None,
            limit: 50,
        }
    }
}

/// A finished run, as a run history keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRow {
    /// Its id in the history, increasing.
    pub id: i64,
    /// The job.
    pub job: String,
    /// The tick it ran for.
    pub tick: DateTime<Utc>,
    /// The node that ran it.
    pub node: String,
    /// Its fencing token.
    pub token: i64,
    /// When it began and ended (store clock).
    pub started: DateTime<Utc>,
    /// When it ended.
    pub finished: DateTime<Utc>,
    /// `ran`, `failed`, `timed_out`, …
    pub outcome: String,
    /// The error's text, if it failed.
    pub error: Option<String>,
    /// Which attempt (1 unless retried).
    pub attempt: u32,
}

/// A lease as the store keeps it (for a dashboard).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRow {
    /// The lease's name.
    pub name: String,
    /// Its holder (`node:pid:random`), if any.
    pub holder: Option<String>,
    /// The tick it was last taken for.
    pub tick: DateTime<Utc>,
    /// Its fencing token.
    pub token: i64,
    /// When it expires (or expired).
    pub expires_at: DateTime<Utc>,
    /// When it was released, if it was.
    pub released_at: Option<DateTime<Utc>>,
}

/// The control side of a store: what operators do, and what instances poll.
///
/// Implemented by the PostgreSQL and SQLite stores (and the memory store for unit
/// tests); a store hands it out with [`Store::controls`](crate::Store::controls).
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
    /// interval.
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

    /// Records the end of trigger `id`: `outcome` (`succeeded`, `failed`, `skipped`, …)
    /// and the error's text, and gives its lease back, in one statement.
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
        outcome: &str,
        error: Option<&str>,
    ) -> Result<bool>;

    /// The controls applied, to `job` or to every job, newest first.
    async fn control_history(&self, job: Option<&str>, page: Page) -> Result<Vec<ControlRecord>>;

    /// What changed since control version `since` (`None`: everything). `Ok(None)`
    /// when nothing changed: one cheap read.
    async fn poll(&self, since: Option<i64>) -> Result<Option<ControlState>>;

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

    /// The handlers registered by any instance.
    async fn handlers(&self) -> Result<Vec<String>>;

    /// Every lease, by name.
    async fn leases(&self) -> Result<Vec<LeaseRow>>;

    /// The runs of `job` (or of every job) the run history keeps, newest first; empty
    /// when the store keeps no run history.
    async fn runs(&self, job: Option<&str>, page: Page) -> Result<Vec<RunRow>>;

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

/// What a store's [watch of the controls](Controls::watch) says.
///
/// The rule a store keeps: **a poll that begins after `changes` moved sees every
/// change announced up to that move**, and while `live` every change of the control
/// version moves `changes`. So a store bumps `changes` for each change it learns of,
/// and once more each time it (re)starts listening (changes made while it was not
/// listening may not have been announced).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ControlSignal {
    /// Whether every change is announced now. `false` while the store is not
    /// listening (a listener connection down): the runtime then polls on its timer.
    pub live: bool,
    /// How many times the store announced a change, or started listening.
    pub changes: u64,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::policy::{CatchUp, Overlap};

    #[test]
    fn policies_read_the_macro_keys() {
        let p = policy_from_spec(
            r#"catch_up = "all", catch_up_max = 3, overlap = concurrent, max_concurrent = 2, retry = 2, retry_backoff = "5s", timeout = 1m"#,
        )
        .unwrap();
        assert_eq!(p.catch_up, CatchUp::All { max: 3 });
        assert_eq!(p.overlap, Overlap::Concurrent { max: 2 });
        assert_eq!(p.retry.unwrap().attempts, 2);
        assert_eq!(p.timeout, Some(std::time::Duration::from_secs(60)));
        assert_eq!(policy_from_spec("").unwrap(), crate::Policy::default());
        assert!(policy_from_spec("overlap = sometimes").is_err());
        assert!(policy_from_spec("catch_up_max = 2").is_err());
        assert!(policy_from_spec("retry_backoff = 1s").is_err());
        assert!(policy_from_spec("colour = blue").is_err());
    }

    /// `catch_up = "all"` without a `max` means what it means in `#[job]` (10), not
    /// "every tick" (which kept up to four billion ticks at start-up); and what
    /// `build()` refuses in a job's timing is refused when the schedule is stored.
    #[test]
    fn policies_are_bounded_like_the_macros() {
        assert_eq!(
            policy_from_spec("catch_up = all").unwrap().catch_up,
            CatchUp::All { max: 10 }
        );
        for wrong in [
            "catch_up = all, catch_up_max = 0",
            "catch_up = all, catch_up_max = 100001",
            "timeout = 0s",
            "retry = 0",
            "retry = 2, retry_backoff = 0s",
            "overlap = concurrent, max_concurrent = 0",
        ] {
            let err = policy_from_spec(wrong).err();
            assert!(err.is_some(), "{wrong}");
            let mut row = ScheduleRow::new("r", "h", "every 30s");
            row.policy = wrong.into();
            assert!(row.check().is_err(), "{wrong}");
        }
        assert_eq!(
            policy_from_spec("catch_up = all, catch_up_max = 100000")
                .unwrap()
                .catch_up,
            CatchUp::All { max: 100_000 }
        );
    }

    #[test]
    fn rows_are_checked() {
        assert!(ScheduleRow::new("r", "h", "every 30s").check().is_ok());
        assert!(
            ScheduleRow::new("r", "h", "0 0 9 * * Mon-Fri")
                .check()
                .is_ok()
        );
        assert!(ScheduleRow::new("r", "h", "every soon").check().is_err());
        assert!(ScheduleRow::new("r", "h", "not cron").check().is_err());
        assert!(ScheduleRow::new("", "h", "every 1s").check().is_err());
        let mut zoned = ScheduleRow::new("r", "h", "0 0 9 * * *");
        zoned.zone = Some("Mars/Olympus".into());
        assert!(zoned.check().is_err());
    }
}
