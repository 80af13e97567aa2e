//! The default reads of [`ControlTables`] a store may leave out, built from the
//! reads it must have.

use super::ControlTables;
use crate::control::{Controls, Page, RunRow, ScheduleRow};
use crate::error::Result;

/// [`ControlTables::read_changed_schedules`]: every change since `since` read, the
/// rows named kept.
pub(super) async fn changed_schedules<T: ControlTables + ?Sized>(
    tables: &T,
    since: i64,
    upto: i64,
    names: &[String],
) -> Result<Vec<ScheduleRow>> {
    let changed = tables.read_state(Some(since)).await?.schedules;
    Ok(crate::control::schedules::named_within(
        changed, since, upto, names,
    ))
}

/// [`ControlTables::read_recent_runs`]: [`ControlTables::read_runs`] once per job.
pub(super) async fn recent_runs<T: ControlTables + ?Sized>(
    tables: &T,
    jobs: &[String],
    per_job: u32,
) -> Result<Vec<RunRow>> {
    let (mut found, before) = (Vec::new(), None);
    for job in jobs {
        let page = Page {
            before,
            limit: per_job,
        };
        found.extend(tables.read_runs(Some(job), page).await?);
    }
    Ok(found)
}

/// [`ControlTables::read_failing_jobs`]: the latest run of each job the store knows
/// of ([`Controls::known_jobs`]).
pub(super) async fn failing_jobs<T: ControlTables>(tables: &T) -> Result<Vec<String>> {
    let mut failing = Vec::new();
    let latest_only = Page {
        before: None,
        limit: 1,
    };
    for job in Controls::known_jobs(tables).await? {
        let latest = tables.read_runs(Some(&job), latest_only).await?;
        if latest.first().is_some_and(|run| run.outcome.is_failure()) {
            failing.push(job);
        }
    }
    Ok(failing)
}
