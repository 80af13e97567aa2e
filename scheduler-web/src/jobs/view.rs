//! [`JobView`]: one job as the pages show it, registered in code or a dynamic
//! schedule, with what the store says of it (pauses, recent runs, its lease), and
//! whether it is late.

use std::collections::HashMap;

use chrono::{DateTime, TimeDelta, Utc};
use chrono_tz::Tz;
use scheduler_core::{
    Controls, Duplicate, LeaseRow, ListQuery, Page, Pause, Policy, RunRow, Schedule, ScheduleRow,
    Scope, UpcomingTick, upcoming_ticks,
};

use crate::words::{self, Described};

/// Runs read per job for its last run and lateness.
pub(crate) const RECENT_RUNS: u32 = 10;

/// How long a tick may wait to be taken before its job counts as late.
pub(crate) const LATE_GRACE: TimeDelta = TimeDelta::minutes(1);

/// The most leases read (in pages of the largest size) to find the leases of one
/// page of schedules; beyond, their lateness is not judged.
const LEASE_WINDOW_PAGES: usize = 3;

/// One job as the pages show it, registered in code or a dynamic schedule.
#[derive(Debug)]
pub(crate) struct JobView {
    pub(crate) name: String,
    pub(crate) schedule: Described,
    /// The schedule itself, when it reads.
    pub(crate) compiled: Option<Schedule>,
    /// The zone its times are shown in (with UTC beside); `None`: UTC only.
    pub(crate) zone: Option<Tz>,
    /// The next tick; `Err` when the schedule is invalid.
    pub(crate) next: Result<Option<UpcomingTick>, String>,
    pub(crate) scope: Scope,
    /// `Err` when a dynamic schedule's policy does not parse.
    pub(crate) policy: Result<Policy, String>,
    /// The fencing declaration (jobs registered in code only).
    pub(crate) fencing: Option<Duplicate>,
    /// The pauses in force.
    pub(crate) pauses: Vec<Pause>,
    /// Its most recent runs, newest first.
    pub(crate) runs: Vec<RunRow>,
    /// Its lease with the newest tick, when known.
    pub(crate) lease: Option<LeaseRow>,
    /// The row, for a dynamic schedule.
    pub(crate) dynamic: Option<ScheduleRow>,
}

impl JobView {
    /// A job registered in code.
    pub(crate) fn code(info: &scheduler_core::JobInfo, now: DateTime<Utc>) -> Self {
        let schedule = words::schedule(&info.schedule);
        Self {
            name: info.name.clone(),
            zone: zone(&schedule),
            schedule,
            compiled: Some(info.schedule.clone()),
            next: next_tick(&info.schedule, now),
            scope: info.scope,
            policy: Ok(info.policy),
            fencing: Some(info.duplicate),
            pauses: Vec::new(),
            runs: Vec::new(),
            lease: None,
            dynamic: None,
        }
    }

    /// A dynamic schedule.
    pub(crate) fn dynamic(row: &ScheduleRow, now: DateTime<Utc>) -> Self {
        // Read once; a row that no longer reads (rows are checked when put) shows
        // each part's own error.
        let (schedule, policy) = match row.parse() {
            Ok(parsed) => (Ok(parsed.schedule), Ok(parsed.policy)),
            Err(_) => (
                row.to_schedule(),
                scheduler_core::control::policy_from_spec(&row.policy),
            ),
        };
        let next = match &schedule {
            Ok(schedule) if row.enabled => next_tick(schedule, now),
            Ok(_) => Ok(None),
            Err(e) => Err(e.to_string()),
        };
        let described = words::schedule_text(&row.schedule, row.zone.as_deref());
        Self {
            name: row.name.clone(),
            zone: zone(&described),
            schedule: described,
            compiled: schedule.ok(),
            next,
            scope: row.scope,
            policy,
            fencing: None,
            pauses: Vec::new(),
            runs: Vec::new(),
            lease: None,
            dynamic: Some(row.clone()),
        }
    }

    /// With its pauses (from every pause in force) and recent runs.
    pub(crate) async fn load(
        self,
        controls: &dyn Controls,
        paused: &[Pause],
    ) -> scheduler_core::Result<Self> {
        let page = Page {
            before: None,
            limit: RECENT_RUNS,
        };
        let runs = controls.runs(Some(&self.name), page).await?;
        Ok(self.with(paused, runs))
    }

    /// With its pauses (from every pause in force) and its recent runs (out of
    /// `runs`, newest first).
    pub(crate) fn with(mut self, paused: &[Pause], runs: Vec<RunRow>) -> Self {
        self.pauses = paused
            .iter()
            .filter(|p| p.job == self.name)
            .cloned()
            .collect();
        self.runs = runs;
        self
    }

    /// With its lease (the one with the newest tick) out of `leases`, by job.
    pub(crate) fn with_lease(mut self, leases: &HashMap<String, LeaseRow>) -> Self {
        self.lease = leases.get(&self.name).cloned();
        self
    }

    /// Whether a run holds its lease now.
    pub(crate) fn is_running(&self, now: DateTime<Utc>) -> bool {
        self.lease
            .as_ref()
            .is_some_and(|l| l.released_at.is_none() && l.expires_at > now)
    }

    /// Whether its latest run did not succeed.
    pub(crate) fn is_failing(&self) -> bool {
        self.runs.first().is_some_and(|r| r.outcome.is_failure())
    }

    /// The tick it is behind by: not paused, enabled, and the tick after the one its
    /// lease last took was due more than [`LATE_GRACE`] ago; that tick. A job
    /// without a lease yet is not judged.
    pub(crate) fn late_since(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if !self.pauses.is_empty() || self.dynamic.as_ref().is_some_and(|r| !r.enabled) {
            return None;
        }
        let lease = self.lease.as_ref()?;
        let due = upcoming_ticks(self.compiled.as_ref()?, lease.tick, 1)
            .ok()?
            .into_iter()
            .next()?
            .at;
        (due + LATE_GRACE < now).then_some(due)
    }

    /// Whether `run` ran a tick older than the job's period: its next tick was due
    /// before it started (a catch-up after an outage, a pause or a first start).
    pub(crate) fn caught_up(&self, run: &RunRow) -> bool {
        self.compiled.as_ref().is_some_and(|schedule| {
            upcoming_ticks(schedule, run.tick, 1)
                .ok()
                .and_then(|t| t.into_iter().next())
                .is_some_and(|next| next.at <= run.started)
        })
    }
}

/// The zone a schedule's times are shown in: a cron schedule's, unless UTC.
fn zone(schedule: &Described) -> Option<Tz> {
    schedule
        .zone
        .as_deref()
        .and_then(|z| z.parse::<Tz>().ok())
        .filter(|tz| *tz != Tz::UTC && *tz != Tz::Etc__UTC)
}

fn next_tick(schedule: &Schedule, now: DateTime<Utc>) -> Result<Option<UpcomingTick>, String> {
    upcoming_ticks(schedule, now, 1)
        .map(|ticks| ticks.into_iter().next())
        .map_err(|e| e.to_string())
}

/// The leases of the jobs named `names` (ascending), by job, the newest tick each:
/// read from the index on the lease's name, from just before the first name to past
/// the last (a job's leases are its name, or its name and a suffix), at most
/// [`LEASE_WINDOW_PAGES`] pages.
pub(crate) async fn leases_of(
    controls: &dyn Controls,
    names: &[&str],
) -> scheduler_core::Result<HashMap<String, LeaseRow>> {
    let mut found: HashMap<String, LeaseRow> = HashMap::new();
    let (Some(first), Some(last)) = (names.first(), names.last()) else {
        return Ok(found);
    };
    let wanted: std::collections::HashSet<&str> = names.iter().copied().collect();
    // Every name after this one: `first` without its last character sorts before
    // `first` and before any name starting with `first`.
    let mut from: String = first
        .chars()
        .take(first.chars().count().saturating_sub(1))
        .collect();
    for _ in 0..LEASE_WINDOW_PAGES {
        let page = controls
            .leases_listing(
                &ListQuery::new(scheduler_core::control::listing::MAX_LIMIT).after(from.clone()),
            )
            .await?;
        let mut past = false;
        for row in page.rows {
            if row.name.as_str() > *last && !row.name.starts_with(*last) {
                past = true;
                break;
            }
            let job = row.job();
            if wanted.contains(job.as_str()) && found.get(&job).is_none_or(|l| l.tick < row.tick) {
                found.insert(job, row.clone());
            }
            from = row.name;
        }
        if past || !page.more_after {
            break;
        }
    }
    Ok(found)
}
