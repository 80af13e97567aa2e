//! Dynamic schedules: [`ScheduleRow`], read once into [`ParsedSchedule`] (its policy
//! in `#[job]`'s key syntax, parsed by [`scheduler_spec::PolicySpec::parse`]).

use chrono::{DateTime, Utc};

#[cfg(doc)]
use super::ControlState;
use crate::error::Result;
use crate::job::Scope;
use crate::policy::Policy;
use crate::schedule::Schedule;

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
    /// The time zone of a cron schedule (IANA name), or `None`: UTC. Refused with an
    /// `every` schedule ([`check`](Self::check)).
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
    /// policy (the store checks the handler is known and the arguments are JSON), and
    /// the limits of an `every` schedule: no time zone, a period of at least
    /// [`DEFAULT_MIN_SCHEDULE_PERIOD`](super::DEFAULT_MIN_SCHEDULE_PERIOD)
    /// ([`check_with_min_period`](Self::check_with_min_period) with another minimum,
    /// as a store whose minimum the app lowered checks it). The schedule, once
    /// checked ([`parse`](Self::parse) gives the policy too).
    ///
    /// # Errors
    /// What [`parse`](Self::parse) finds wrong, or
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) for an `every` schedule
    /// with a zone or more often than the minimum.
    pub fn check(&self) -> Result<Schedule> {
        self.check_with_min_period(super::DEFAULT_MIN_SCHEDULE_PERIOD)
    }

    /// Reads the row, once: checks the name and the handler's, parses the schedule
    /// (and compiles it: a cron expression that never fires is refused) and the
    /// policy.
    ///
    /// # Errors
    /// [`Error::InvalidName`](crate::Error::InvalidName),
    /// [`Error::InvalidSchedule`](crate::Error::InvalidSchedule),
    /// [`Error::InvalidTiming`](crate::Error::InvalidTiming) or
    /// [`Error::InvalidControl`](crate::Error::InvalidControl) (the policy).
    pub fn parse(&self) -> Result<ParsedSchedule> {
        crate::lease::validate_name(&self.name)?;
        crate::lease::validate_name(&self.handler)?;
        let schedule = self.to_schedule()?;
        let compiled = schedule
            .compile()
            .map_err(|cause| crate::Error::InvalidSchedule {
                job: self.name.clone(),
                cause,
            })?;
        let policy = self.to_policy()?;
        // The rules that need the period, as every instance checks them when the
        // row becomes a job: a row they would all refuse is refused here (a cron
        // schedule's gaps measured from a fixed instant, as its lease slots are).
        // The period matters only to a jitter or a retry's backoff (measuring a cron
        // expression's gaps is most of a put's time otherwise).
        let timing = policy.timing();
        let timing = scheduler_spec::Timing {
            period: if timing.jitter.is_zero() && timing.retry.is_none() {
                None
            } else {
                compiled.shortest_gap(crate::schedule::SLOT_ANCHOR)
            },
            ..timing
        };
        scheduler_spec::check_timing(&timing).map_err(|cause| crate::Error::InvalidTiming {
            job: self.name.clone(),
            cause,
        })?;
        Ok(ParsedSchedule {
            schedule,
            policy,
            handler: self.handler.clone(),
        })
    }

    /// The row's policy ([`ParsedSchedule::policy`] without the rest).
    ///
    /// # Errors
    /// [`Error::InvalidControl`](crate::Error::InvalidControl), saying what is
    /// wrong with the policy.
    pub fn to_policy(&self) -> Result<Policy> {
        policy_from_spec(&self.policy).map_err(|reason| crate::Error::InvalidControl {
            reason: format!("schedule {:?}: policy: {reason}", self.name),
        })
    }

    /// The row's schedule.
    ///
    /// # Errors
    /// [`Error::InvalidSchedule`](crate::Error::InvalidSchedule) for a bad duration.
    pub fn to_schedule(&self) -> Result<Schedule> {
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

/// What a [`ScheduleRow`] says, read once ([`ScheduleRow::parse`]): the job its
/// handler runs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ParsedSchedule {
    /// The schedule (checked: it compiles).
    pub schedule: Schedule,
    /// The policy: the row's keys over the default.
    pub policy: Policy,
    /// The handler's name.
    pub handler: String,
}

/// Parses a policy written in `#[job]`'s key syntax, as a dynamic schedule keeps it
/// ([`scheduler_spec::PolicySpec::parse`]: the keys, words and rules of `#[job]`),
/// into a [`Policy`] over the default. Empty: the default.
///
/// # Errors
/// A message naming the key or value that is wrong.
pub fn policy_from_spec(spec: &str) -> std::result::Result<Policy, String> {
    scheduler_spec::PolicySpec::parse(spec)
        .map(Policy::from)
        .map_err(|e| e.to_string())
}

/// The rows of `rows` named in `names` whose version is after `since` and no later
/// than `upto`, by name: [`Controls::changed_schedules`](super::Controls::changed_schedules)
/// out of a poll's changes.
pub(super) fn named_within(
    rows: Vec<ScheduleRow>,
    since: i64,
    upto: i64,
    names: &[String],
) -> Vec<ScheduleRow> {
    let names: std::collections::HashSet<&str> = names.iter().map(String::as_str).collect();
    let mut rows: Vec<ScheduleRow> = rows
        .into_iter()
        .filter(|row| row.version > since && row.version <= upto)
        .filter(|row| names.contains(row.name.as_str()))
        .collect();
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    rows
}
