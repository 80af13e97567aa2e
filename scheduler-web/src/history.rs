//! One job's page (its definition, its runs and the controls applied to it, each
//! paged) and a triggered run's page.

use axum::extract::State;
use axum::response::Html;
use chrono::{DateTime, Utc};
use maud::{Markup, html};
use scheduler_core::{ControlRecord, Page, RunRow, TriggerId, TriggerState};
use serde::Deserialize;

use crate::csrf::Session;
use crate::jobs::{self, JobView, status_line};
use crate::layout::{self, Nav, page, refreshing_page};
use crate::link;
use crate::problem::Problem;
use crate::query::{Address, Query};
use crate::shared::Ctx;
use crate::words;

#[derive(Debug, Deserialize)]
pub(crate) struct JobQuery {
    name: String,
    #[serde(default)]
    runs_before: Option<i64>,
    #[serde(default)]
    controls_before: Option<i64>,
}

impl Address for JobQuery {
    const USAGE: &'static str =
        "job?name=NAME, with &runs_before=ID and &controls_before=ID to page back";
}

/// `GET job?name=NAME[&runs_before=ID][&controls_before=ID]`.
pub(crate) async fn job(
    State(shared): Ctx,
    session: Session,
    Query(query): Query<JobQuery>,
) -> Result<Html<String>, Problem> {
    let name = query.name.as_str();
    let now = shared.store.now().await?;
    let unknown = || {
        Problem::not_found(format!(
            "no job named {name:?}: it is neither registered in code, nor a dynamic schedule, \
             nor in the history"
        ))
    };
    let Some(controls) = shared.controls() else {
        // Without controls there is only what the app registered in code.
        let info = shared.job(name).ok_or_else(unknown)?;
        let view = JobView::code(info, now);
        let body = html! {
            (status_line(&shared, now))
            (summary(&view, now))
            p.notice { "This store keeps no controls: no history or actions here." }
        };
        return Ok(Html(page(name, Nav::None, body).into_string()));
    };

    // A job registered in code, or else the one dynamic schedule of that name.
    let view = match shared.job(name) {
        Some(info) => Some(JobView::code(info, now)),
        None => controls
            .schedule(name)
            .await?
            .map(|row| JobView::dynamic(&row, now)),
    };
    let view = match view {
        Some(v) => {
            let leases = jobs::leases_of(controls, &[name]).await?;
            Some(
                v.load(controls, &controls.paused().await?)
                    .await?
                    .with_lease(&leases),
            )
        }
        None => None,
    };
    let limit = shared.page_size;
    let runs = controls
        .runs(
            Some(name),
            Page {
                before: query.runs_before,
                limit,
            },
        )
        .await?;
    let records = controls
        .control_history(
            Some(name),
            Page {
                before: query.controls_before,
                limit,
            },
        )
        .await?;
    if view.is_none() {
        // A job gone from the code and the schedules is known by its history.
        let first = Page {
            before: None,
            limit: 1,
        };
        let ran = !controls.runs(Some(name), first).await?.is_empty();
        let controlled = !controls
            .control_history(Some(name), first)
            .await?
            .is_empty();
        if !ran && !controlled {
            return Err(unknown());
        }
    }

    let older_runs = (runs.len() == limit as usize)
        .then(|| {
            runs.last()
                .map(|r| link_kept_job_page(name, Some(r.id), query.controls_before))
        })
        .flatten();
    let older_controls = (records.len() == limit as usize)
        .then(|| {
            records
                .last()
                .map(|c| link_kept_job_page(name, query.runs_before, Some(c.id)))
        })
        .flatten();

    let body = html! {
        (status_line(&shared, now))
        @if let Some(view) = &view {
            (summary(view, now))
            @if shared.actions.is_enabled() {
                (crate::actions::job_forms(&shared, &session, view))
            }
        } @else {
            p.notice { "Neither registered in code nor a dynamic schedule any more: its history only." }
        }
        h2 #runs { "Runs" }
        @if runs.is_empty() {
            p.muted {
                @if query.runs_before.is_some() { "No older runs." }
                @else { "None recorded (runs are listed when the store keeps a run history)." }
            }
        } @else {
            (crate::chart::durations(&runs))
            (runs_table(&runs, view.as_ref().and_then(|v| v.zone)))
        }
        p.small {
            @if query.runs_before.is_some() {
                a href=(link_kept_job_page(name, None, query.controls_before)) data-page="newest-runs" { "← Newest runs" } " "
            }
            @if let Some(older) = &older_runs {
                a href=(older) data-page="older-runs" { "Older runs →" }
            }
        }
        h2 #controls { "Controls applied" }
        @if records.is_empty() {
            p.muted { @if query.controls_before.is_some() { "No older controls." } @else { "None." } }
        } @else {
            (controls_table(&records, now))
        }
        p.small {
            @if query.controls_before.is_some() {
                a href=(link_kept_job_page(name, query.runs_before, None)) data-page="newest-controls" { "← Newest controls" } " "
            }
            @if let Some(older) = &older_controls {
                a href=(older) data-page="older-controls" { "Older controls →" }
            }
        }
    };
    Ok(Html(page(name, Nav::None, body).into_string()))
}

/// A page of the job's history, the refresh kept.
fn link_kept_job_page(name: &str, runs: Option<i64>, controls: Option<i64>) -> String {
    link::kept(&link::job_page(name, runs, controls))
}

fn summary(job: &JobView, now: DateTime<Utc>) -> Markup {
    html! {
        dl {
            dt { "State" } dd data-state {
                @if job.pauses.is_empty() && !job.is_running(now) && job.late_since(now).is_none() && !job.is_failing() {
                    span.muted { "nothing to report" }
                }
                (jobs::badges(job, now))
            }
            dt { "Schedule" } dd {
                (jobs::schedule_cell(&job.schedule))
                @if job.schedule.zone.is_some() && job.schedule.words != job.schedule.text { " " code.muted { (job.schedule.text) } }
            }
            dt { "Next tick" } dd { (jobs::next_cell(job, now)) }
            dt { "Scope" } dd { (job.scope) }
            dt { "Policy" } dd { (jobs::policy_cell(&job.policy)) }
            @if let Some(row) = &job.dynamic {
                dt { "Handler" } dd { code { (row.handler) } }
                dt { "Arguments" } dd { code { (row.args) } }
                dt { "Enabled" } dd { @if row.enabled { "yes" } @else { span.warn { "no" } } }
                @if let Some(at) = row.updated_at {
                    dt { "Changed" } dd { (layout::instant(at, now)) }
                }
            } @else {
                dt { "Fencing" } dd { (jobs::fencing_cell(job.fencing)) }
            }
            dt { "Paused" } dd { (jobs::paused_cell(&job.pauses, now)) }
            dt { "Lateness" } dd { (jobs::lateness_cell(job)) }
        }
    }
}

fn runs_table(runs: &[RunRow], zone: Option<chrono_tz::Tz>) -> Markup {
    html! {
        table {
            thead { tr {
                th.num { "#" } th { "Tick" } th { "Outcome" } th.num { "Attempt" }
                th { "Started" } th.num { "Duration" } th.num { "Late" } th { "Node" } th.num { "Token" } th { "Error" }
            } }
            tbody {
                @for run in runs {
                    tr data-run=(run.id) {
                        td.num { (run.id) }
                        td.small { (layout::zoned(run.tick, zone)) }
                        td { (layout::outcome(run.outcome)) }
                        td.num { (run.attempt) }
                        td.small { (layout::zoned(run.started, zone)) }
                        td.num { (words::span(run.finished - run.started)) }
                        td.num { (words::span(run.started - run.tick)) }
                        td { (run.node) }
                        td.num { (run.token) }
                        td { @if let Some(e) = &run.error { pre.bad { (e) } } }
                    }
                }
            }
        }
    }
}

fn controls_table(records: &[ControlRecord], now: DateTime<Utc>) -> Markup {
    html! {
        table {
            thead { tr {
                th.num { "#" } th { "When" } th { "Action" } th { "Node" } th { "By" } th { "Why" } th { "Detail" }
            } }
            tbody {
                @for c in records {
                    tr data-control=(c.id) {
                        td.num { (c.id) }
                        td { (layout::instant(c.at, now)) }
                        td { (c.action) }
                        td { @if let Some(n) = &c.node { (n) } @else { span.muted { "every node" } } }
                        td { (c.by) }
                        td { (c.why) }
                        td {
                            @if c.action == scheduler_core::ControlAction::Trigger
                                && let Ok(id) = c.detail.trim().parse::<i64>()
                            {
                                a href=(link::trigger(id)) { "trigger #" (id) }
                            } @else {
                                code.small { (c.detail) }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct TriggerQuery {
    id: i64,
}

impl Address for TriggerQuery {
    const USAGE: &'static str = "trigger?id=N, N a number";
}

/// `GET trigger?id=N`: where a triggered run stands; reloads itself until done.
pub(crate) async fn trigger(
    State(shared): Ctx,
    Query(query): Query<TriggerQuery>,
) -> Result<Html<String>, Problem> {
    let controls = shared.controls().ok_or_else(Problem::no_controls)?;
    let now = shared.store.now().await?;
    let trigger = controls
        .trigger_status(TriggerId(query.id))
        .await?
        .ok_or_else(|| Problem::not_found(format!("no triggered run #{}", query.id)))?;
    let done = matches!(trigger.state, TriggerState::Done { .. });
    let nobody = crate::instances::no_live_runner(controls, &trigger, now).await?;
    let body = html! {
        (status_line(&shared, now))
        @if let Some(warning) = nobody { (warning) }
        dl data-trigger=(trigger.id) data-done=(done) {
            dt { "Job" } dd { a href=(link::job(&trigger.job)) { (trigger.job) } }
            @if let Some(node) = &trigger.node { dt { "Node" } dd { (node) } }
            dt { "Asked" } dd { (layout::instant(trigger.requested_at, now)) " by " (trigger.by) }
            @if !trigger.why.is_empty() { dt { "Why" } dd { (trigger.why) } }
            dt { "State" } dd { (jobs::trigger_state(&trigger.state, now)) }
        }
        @if !done { p.small.muted { "This page reloads every 2 s until the run is done." } }
    };
    let title = format!("Triggered run #{}", trigger.id);
    Ok(Html(
        refreshing_page(&title, Nav::None, body, (!done).then_some(2)).into_string(),
    ))
}
