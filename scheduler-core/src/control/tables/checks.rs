//! The checks every control runs before its write, whichever store keeps it: the
//! request's names and texts, a schedule row (with the store's minimum period) and
//! its texts, a list's query, and the names an instance registers.

use std::collections::HashSet;

use super::ControlTables;
use crate::control::batch::in_batch;
use crate::control::{ControlRequest, Cursor, ListQuery, ScheduleRow};
use crate::error::Result;
use crate::lease::LeaseName;

/// Checks a request ([`ControlRequest::check`]: names, limits) and its texts.
pub(super) fn check_request<T: ControlTables + ?Sized>(
    tables: &T,
    req: &ControlRequest,
) -> Result<()> {
    req.check()?;
    LeaseName::new(req.job.as_str())?;
    if let Some(node) = &req.node {
        LeaseName::new(node.as_str())?;
    }
    check_by_why(tables, &req.by, &req.why)
}

/// `names` checked as names (and `node`), sorted, without duplicates.
pub(super) fn checked_names(node: &str, names: &[String]) -> Result<Vec<String>> {
    LeaseName::new(node)?;
    for name in names {
        LeaseName::new(name.as_str())?;
    }
    let mut names = names.to_vec();
    names.sort();
    names.dedup();
    Ok(names)
}

/// Checks the texts of a list's query.
pub(super) fn check_list_query<T: ControlTables + ?Sized>(
    tables: &T,
    query: &ListQuery,
) -> Result<()> {
    tables.check_text("the search", &query.search)?;
    for (what, text) in [("the handler", &query.handler), ("the node", &query.node)] {
        if let Some(text) = text {
            tables.check_text(what, text)?;
        }
    }
    match &query.cursor {
        Cursor::After(name) | Cursor::Before(name) => tables.check_text("the cursor", name),
        Cursor::First | Cursor::Last => Ok(()),
    }
}

/// A schedule row checked as every put checks it: its schedule (with the store's
/// minimum period) and the texts the store keeps.
pub(super) fn check_row<T: ControlTables + ?Sized>(tables: &T, row: &ScheduleRow) -> Result<()> {
    row.check_with_min_period(tables.min_schedule_period())?;
    check_texts(tables, row)
}

/// [`check_row`] for a row whose schedule, zone and policy another row of the batch
/// passed with: its name and handler, and its texts.
pub(super) fn check_row_names_and_texts<T: ControlTables + ?Sized>(
    tables: &T,
    row: &ScheduleRow,
) -> Result<()> {
    crate::lease::validate_name(&row.name)?;
    crate::lease::validate_name(&row.handler)?;
    check_texts(tables, row)
}

pub(super) fn check_texts<T: ControlTables + ?Sized>(tables: &T, row: &ScheduleRow) -> Result<()> {
    for (what, text) in [
        ("the schedule", row.schedule.as_str()),
        ("the zone", row.zone.as_deref().unwrap_or_default()),
        ("the policy", row.policy.as_str()),
        ("the arguments", row.args.as_str()),
    ] {
        tables.check_text(&format!("schedule {:?}: {what}", row.name), text)?;
    }
    Ok(())
}

/// The actor and reason as texts the store keeps (`prefix` says whose).
pub(super) fn check_by_why_texts<T: ControlTables + ?Sized>(
    tables: &T,
    prefix: &str,
    by: &str,
    why: &str,
) -> Result<()> {
    tables.check_text(&format!("{prefix}the control's actor (`by`)"), by)?;
    tables.check_text(&format!("{prefix}the control's reason (`why`)"), why)
}

pub(super) fn check_by_why<T: ControlTables + ?Sized>(
    tables: &T,
    by: &str,
    why: &str,
) -> Result<()> {
    crate::control::check_by_why(by, why)?;
    tables.check_text("the control's actor (`by`)", by)?;
    tables.check_text("the control's reason (`why`)", why)
}

/// The jobs of [`Controls::recent_runs`](crate::Controls::recent_runs): not too
/// many ([`listing::check_recent`](crate::control::listing::check_recent)), each a
/// text the store keeps.
pub(super) fn recent_runs<T: ControlTables + ?Sized>(tables: &T, jobs: &[String]) -> Result<()> {
    crate::control::listing::check_recent(jobs)?;
    for job in jobs {
        tables.check_text("the job", job)?;
    }
    Ok(())
}

/// Checks every row of a batch ([`check_row`]), naming the first refused one
/// ([`in_batch`]). A schedule, zone and policy checked once are not parsed again
/// (rows per customer share them): the rest of the row is checked every time.
pub(super) fn check_rows<T: ControlTables + ?Sized>(
    tables: &T,
    rows: &[ScheduleRow],
) -> Result<()> {
    let mut checked: HashSet<(&str, Option<&str>, &str)> = HashSet::new();
    for (index, row) in rows.iter().enumerate() {
        let key = (
            row.schedule.as_str(),
            row.zone.as_deref(),
            row.policy.as_str(),
        );
        let result = if checked.contains(&key) {
            check_row_names_and_texts(tables, row)
        } else {
            check_row(tables, row)
        };
        result.map_err(|cause| in_batch(index, row, cause))?;
        checked.insert(key);
    }
    Ok(())
}
