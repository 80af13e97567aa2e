//! Dynamic schedules: [`ScheduleRow`], and its policy in `#[job]`'s key syntax
//! ([`policy_from_spec`]).

use chrono::{DateTime, Utc};

#[cfg(doc)]
use super::ControlState;
use crate::error::Result;
use crate::job::Scope;

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
        let compiled = schedule
            .compile()
            .map_err(|cause| crate::Error::InvalidSchedule {
                job: self.name.clone(),
                cause,
            })?;
        let policy =
            policy_from_spec(&self.policy).map_err(|reason| crate::Error::InvalidControl {
                reason: format!("schedule {:?}: policy: {reason}", self.name),
            })?;
        // The rules that need the period, as every instance checks them when the
        // row becomes a job: a row they would all refuse is refused here (a cron
        // schedule's gaps measured from a fixed instant, as its lease slots are).
        let timing = scheduler_spec::Timing {
            period: compiled.shortest_gap(crate::runtime::SLOT_ANCHOR),
            ..policy.timing()
        };
        scheduler_spec::check_timing(&timing).map_err(|cause| crate::Error::InvalidTiming {
            job: self.name.clone(),
            cause,
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
