//! The jobs page: the jobs registered in code and the dynamic schedules, a compact
//! row each (its details folded, or on its page), filtered by state, handler and
//! node, searched by name, the schedules paged both ways with their total.

mod cells;
mod filters;
mod select;
mod triggers;
mod view;

use axum::extract::State;
use axum::response::Html;
use chrono::{DateTime, Utc};
use maud::{Markup, html};
use scheduler_core::{Cursor, Pause};

pub(crate) use cells::{
    badges, fencing_cell, lateness_cell, next_cell, paused_cell, policy_cell, schedule_cell,
};
pub(crate) use triggers::{trigger_state, triggers};
pub(crate) use view::{JobView, leases_of};

use self::filters::{Filters, JobsQuery, State as JobState};
use self::select::{LATE_SCAN, Selected};
use crate::csrf::Session;
use crate::frame::Frame;
use crate::layout::{self, Nav, page};
use crate::link;
use crate::problem::Problem;
use crate::query::Query;
use crate::shared::{Ctx, Shared};
use crate::words;

/// `GET jobs`.
pub(crate) async fn show(
    State(shared): Ctx,
    session: Session,
    Query(query): Query<JobsQuery>,
) -> Result<Html<String>, Problem> {
    let filters = query.filters()?;
    let now = shared.store.now().await?;
    let mut code: Vec<JobView> = shared
        .jobs
        .iter()
        .filter(|j| filters.handler.is_none() && filters.matches_name(&j.name))
        .map(|j| JobView::code(j, now))
        .collect();
    let mut dynamic = Selected::default();
    let mut open_triggers = Vec::new();
    if let Some(controls) = shared.controls() {
        // The pauses, one page of the schedules and the open triggers: never every
        // schedule.
        let paused = controls.paused().await?;
        code = select::load(controls, code, &paused).await?;
        let failing = match filters.state {
            Some(JobState::Failing) => controls.failing_jobs().await?,
            _ => Vec::new(),
        };
        code.retain(|job| code_matches(job, &filters, &paused, &failing, now));
        dynamic = select::dynamic(&shared, controls, &filters, &paused, now).await?;
        open_triggers = controls.open_triggers().await?;
    } else if filters.state.is_some() || filters.node.is_some() {
        code.clear();
    }

    let body = html! {
        (status_line(&shared, now))
        @if shared.controls().is_none() {
            p.notice {
                "This store keeps no controls: pauses, dynamic schedules, leases and \
                 the run history are not available here."
            }
        }
        (filter_form(&filters))
        @if filters.state == Some(JobState::Late) {
            p.small.muted {
                "Late: not paused, and the tick after the one it last took was due more than "
                (words::span(view::LATE_GRACE)) " ago (a job that never took a tick is not judged)."
            }
        }
        @if !code.is_empty() || !filters.any() {
            h2 { "Jobs registered in code" }
            @if code.is_empty() {
                p.muted { "None (the app passes them with Dashboard::jobs)." }
            } @else {
                (table(&shared, &session, &code, now))
            }
        }
        @if shared.controls().is_some() {
            h2 { "Dynamic schedules" }
            (pager(&filters, &dynamic))
            @if dynamic.jobs.is_empty() {
                p.muted { @if filters.any() { "None matching." } @else { "None." } }
            } @else {
                (table(&shared, &session, &dynamic.jobs, now))
            }
            @if dynamic.jobs.len() > 10 { (pager(&filters, &dynamic)) }
            @if shared.actions.is_enabled() {
                p { a href=(link::NEW_SCHEDULE) data-action="new-schedule" { "Add a dynamic schedule" } }
            }
            @if !open_triggers.is_empty() {
                h2 { "Triggered runs not yet done" }
                (triggers(&open_triggers, now))
            }
        }
    };
    Ok(Html(page("Jobs", Nav::Jobs, body).into_string()))
}

/// Whether a job registered in code passes the filters (its name and handler are
/// checked before it is loaded).
fn code_matches(
    job: &JobView,
    filters: &Filters,
    paused: &[Pause],
    failing: &[String],
    now: DateTime<Utc>,
) -> bool {
    let node = filters
        .node
        .as_deref()
        .is_none_or(|node| job.lease.as_ref().is_some_and(|l| l.node() == Some(node)));
    let state = match filters.state {
        None => true,
        Some(JobState::Paused) => paused.iter().any(|p| p.job == job.name),
        Some(JobState::Failing) => failing.contains(&job.name),
        Some(JobState::Running) => job.is_running(now),
        Some(JobState::Late) => job.late_since(now).is_some(),
    };
    node && state
}

/// The line above every job list: this node, the store's clock, and the mode.
pub(crate) fn status_line(shared: &Shared, now: DateTime<Utc>) -> Markup {
    html! {
        p.muted.small {
            @if let Some(node) = &shared.node { "node " code { (node) } " · " }
            "store clock " (layout::rfc3339(now)) " · "
            @if shared.actions.is_enabled() { "actions enabled" } @else { "read-only" }
        }
    }
}

/// The filters, as a form that reloads the page with them (no script).
fn filter_form(filters: &Filters) -> Markup {
    let refresh = Frame::current().refresh;
    html! {
        form.filters method="get" action=(link::JOBS) data-form="filters" {
            input type="search" name="q" value=(filters.search) placeholder="search by name" aria-label="search by name";
            select name="state" aria-label="state" {
                option value="" { "any state" }
                @for state in JobState::ALL {
                    option value=(state.as_str()) selected[filters.state == Some(state)] { (state.as_str()) }
                }
            }
            input type="text" name="handler" value=[filters.handler.as_deref()] placeholder="handler" aria-label="handler";
            input type="text" name="node" value=[filters.node.as_deref()] placeholder="node" aria-label="node";
            @if let Some(seconds) = refresh { input type="hidden" name="refresh" value=(seconds); }
            button type="submit" { "Filter" }
            @if filters.any() { " " a href=(link::kept(link::JOBS)) data-action="clear-filters" { "clear" } }
        }
    }
}

/// Where the page stands (`1–50 of 100,000 schedules`) and the links to the first,
/// previous, next and last pages, the filters kept.
fn pager(filters: &Filters, page: &Selected) -> Markup {
    let rows = page.jobs.len() as u64;
    let at = match &filters.cursor {
        Cursor::First => Some(1),
        Cursor::Last => page.total.map(|t| t.saturating_sub(rows) + 1),
        _ => filters.at,
    };
    let previous = page
        .first
        .as_ref()
        .filter(|_| page.more_before)
        .map(|first| {
            let back = at.map(|a| a.saturating_sub(rows.max(1)).max(1));
            filters.link(&Cursor::Before(first.clone()), back)
        });
    let next = page
        .last
        .as_ref()
        .filter(|_| page.more_after)
        .map(|last| filters.link(&Cursor::After(last.clone()), at.map(|a| a + rows)));
    html! {
        p.pager.small data-pager {
            span data-position {
                @match (at, page.total) {
                    (Some(a), Some(total)) if rows > 0 => {
                        (words::count(a)) "–" (words::count(a + rows - 1)) " of " (words::count(total)) " " (page.unit)
                    }
                    (_, Some(total)) => { (words::count(rows)) " shown of " (words::count(total)) " " (page.unit) }
                    (_, None) => { (words::count(rows)) " shown" }
                }
                @if let Some(scanned) = page.scanned {
                    span.muted { " (" (words::count(scanned)) " schedules judged, at most " (words::count(u64::from(LATE_SCAN))) " a page)" }
                }
            }
            " "
            @if page.more_before {
                a href=(filters.link(&Cursor::First, None)) data-page="first" { "« first" } " "
            }
            @if let Some(href) = &previous { a href=(href) data-page="previous" { "‹ previous" } " " }
            @if let Some(href) = &next { a href=(href) data-page="next" { "next ›" } " " }
            @if page.more_after && page.total.is_some() {
                a href=(filters.link(&Cursor::Last, None)) data-page="last" { "last »" }
            }
        }
    }
}

fn table(shared: &Shared, session: &Session, jobs: &[JobView], now: DateTime<Utc>) -> Markup {
    html! {
        table.jobs {
            thead { tr {
                th { "Job" }
                th { "Schedule" }
                th { "Next tick" }
                th { "Last run" }
                th { "Lateness" }
                th { "Details" }
                @if shared.actions.is_enabled() { th { "Actions" } }
            } }
            tbody {
                @for job in jobs {
                    tr data-job=(job.name) {
                        td { (cells::name_cell(job, now)) }
                        td { (schedule_cell(&job.schedule)) }
                        td.small { (next_cell(job, now)) }
                        td.small { (cells::last_run_cell(job, now)) }
                        td.small { (lateness_cell(job)) }
                        td { (cells::details_cell(job)) }
                        @if shared.actions.is_enabled() {
                            td.small { (cells::compact_actions(shared, session, job)) }
                        }
                    }
                }
            }
        }
    }
}
