//! The jobs page: every job registered in code and every dynamic schedule, with its
//! schedule, policy, pause, next tick, last run and recent lateness.

use axum::extract::State;
use axum::response::Html;
use chrono::{DateTime, TimeDelta, Utc};
use maud::{Markup, html};
use scheduler_core::{
    Controls, Duplicate, Page, Pause, Policy, RunRow, Schedule, ScheduleRow, Scope, Trigger,
    TriggerState, UpcomingTick, upcoming_ticks,
};
use serde::Deserialize;

use crate::csrf::Session;
use crate::layout::{self, Nav, page};
use crate::link;
use crate::problem::Problem;
use crate::query::{Address, Query};
use crate::shared::{Ctx, Shared};
use crate::words::{self, Described};

/// Runs read per job for its last run and lateness.
const RECENT_RUNS: u32 = 10;

/// One job as the pages show it, registered in code or a dynamic schedule.
#[derive(Debug)]
pub(crate) struct JobView {
    pub(crate) name: String,
    pub(crate) schedule: Described,
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
    /// The row, for a dynamic schedule.
    pub(crate) dynamic: Option<ScheduleRow>,
}

impl JobView {
    /// A job registered in code.
    pub(crate) fn code(info: &scheduler_core::JobInfo, now: DateTime<Utc>) -> Self {
        Self {
            name: info.name.clone(),
            schedule: words::schedule(&info.schedule),
            next: next_tick(&info.schedule, now),
            scope: info.scope,
            policy: Ok(info.policy),
            fencing: Some(info.duplicate),
            pauses: Vec::new(),
            runs: Vec::new(),
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
        let next = match schedule {
            Ok(schedule) if row.enabled => next_tick(&schedule, now),
            Ok(_) => Ok(None),
            Err(e) => Err(e.to_string()),
        };
        Self {
            name: row.name.clone(),
            schedule: words::schedule_text(&row.schedule, row.zone.as_deref()),
            next,
            scope: row.scope,
            policy,
            fencing: None,
            pauses: Vec::new(),
            runs: Vec::new(),
            dynamic: Some(row.clone()),
        }
    }

    /// With its pauses (from every pause in force) and recent runs.
    pub(crate) async fn load(
        mut self,
        controls: &dyn Controls,
        paused: &[Pause],
    ) -> scheduler_core::Result<Self> {
        self.pauses = paused
            .iter()
            .filter(|p| p.job == self.name)
            .cloned()
            .collect();
        let page = Page {
            before: None,
            limit: RECENT_RUNS,
        };
        self.runs = controls.runs(Some(&self.name), page).await?;
        Ok(self)
    }
}

fn next_tick(schedule: &Schedule, now: DateTime<Utc>) -> Result<Option<UpcomingTick>, String> {
    upcoming_ticks(schedule, now, 1)
        .map(|ticks| ticks.into_iter().next())
        .map_err(|e| e.to_string())
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct JobsQuery {
    /// The dynamic schedules listed start after this name.
    #[serde(default)]
    schedules_after: Option<String>,
}

impl Address for JobsQuery {
    const USAGE: &'static str = "jobs[?schedules_after=NAME]";
}

/// `GET jobs`.
pub(crate) async fn show(
    State(shared): Ctx,
    session: Session,
    Query(query): Query<JobsQuery>,
) -> Result<Html<String>, Problem> {
    let now = shared.store.now().await?;
    let mut code: Vec<JobView> = shared.jobs.iter().map(|j| JobView::code(j, now)).collect();
    let mut dynamic = Vec::new();
    let mut more_after = None;
    let mut open_triggers = Vec::new();
    if let Some(controls) = shared.controls() {
        // The pauses, one page of the schedules (and one row more, to know whether
        // another page follows) and the open triggers: never every schedule.
        let paused = controls.paused().await?;
        for job in std::mem::take(&mut code) {
            code.push(job.load(controls, &paused).await?);
        }
        let limit = shared.page_size;
        let mut rows = controls
            .schedules_page(query.schedules_after.as_deref(), limit.saturating_add(1))
            .await?;
        if rows.len() > limit as usize {
            rows.truncate(limit as usize);
            more_after = rows.last().map(|r| r.name.clone());
        }
        for row in &rows {
            dynamic.push(JobView::dynamic(row, now).load(controls, &paused).await?);
        }
        open_triggers = controls.open_triggers().await?;
    }

    let body = html! {
        (status_line(&shared, now))
        @if shared.controls().is_none() {
            p.notice {
                "This store keeps no controls: pauses, dynamic schedules, leases and \
                 the run history are not available here."
            }
        }
        h2 { "Jobs registered in code" }
        @if code.is_empty() {
            p.muted { "None (the app passes them with Dashboard::jobs)." }
        } @else {
            (table(&shared, &session, &code, now))
        }
        @if shared.controls().is_some() {
            h2 { "Dynamic schedules" }
            @if dynamic.is_empty() {
                p.muted { "None." }
            } @else {
                (table(&shared, &session, &dynamic, now))
            }
            @if let Some(after) = &more_after {
                p { a href={ (link::JOBS) "?schedules_after=" (link::encode(after)) } { "More schedules →" } }
            }
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

fn table(shared: &Shared, session: &Session, jobs: &[JobView], now: DateTime<Utc>) -> Markup {
    let dynamic = jobs.first().is_some_and(|j| j.dynamic.is_some());
    html! {
        table {
            thead { tr {
                th { "Job" }
                th { "Schedule" }
                th { "Next tick" }
                th { "Scope" }
                th { "Policy" }
                @if dynamic { th { "Handler" } } @else { th { "Fencing" } }
                th { "Paused" }
                th { "Last run" }
                th { "Lateness" }
                @if shared.actions.is_enabled() { th { "Actions" } }
            } }
            tbody {
                @for job in jobs {
                    tr data-job=(job.name) {
                        td { a href=(link::job(&job.name)) { (job.name) } }
                        td { (schedule_cell(&job.schedule)) }
                        td { (next_cell(job, now)) }
                        td { (job.scope) }
                        td.small { (policy_cell(&job.policy)) }
                        @if let Some(row) = &job.dynamic {
                            td {
                                code { (row.handler) }
                                @if !row.enabled { " " span.warn { "disabled" } }
                                @if row.args.trim() != "{}" { br; code.small.muted { (row.args) } }
                            }
                        } @else {
                            td { (fencing_cell(job.fencing)) }
                        }
                        td { (paused_cell(&job.pauses, now)) }
                        td { (last_run_cell(&job.runs, now)) }
                        td.small { (lateness_cell(&job.runs)) }
                        @if shared.actions.is_enabled() {
                            td { (compact_actions(shared, session, job)) }
                        }
                    }
                }
            }
        }
    }
}

pub(crate) fn schedule_cell(schedule: &Described) -> Markup {
    html! {
        (schedule.words)
        @if let Some(zone) = &schedule.zone { " " span.muted { "(" (zone) ")" } }
        // A cron expression as written too; a period says it all in words.
        @if schedule.zone.is_some() && schedule.words != schedule.text { br; code.muted { (schedule.text) } }
    }
}

pub(crate) fn next_cell(job: &JobView, now: DateTime<Utc>) -> Markup {
    html! {
        @match &job.next {
            Ok(Some(tick)) => {
                (layout::instant(tick.at, now))
                br;
                span.small.muted { (tick.local) }
                @if let Some(dst) = &tick.dst { br; span.small.warn { (dst) } }
            }
            Ok(None) => span.muted { @if job.dynamic.as_ref().is_some_and(|r| !r.enabled) { "disabled" } @else { "none" } },
            Err(e) => span.bad { "invalid: " (e) },
        }
    }
}

pub(crate) fn policy_cell(policy: &Result<Policy, String>) -> Markup {
    html! {
        @match policy {
            Ok(p) => {
                @for (i, (name, value)) in words::policy(p).iter().enumerate() {
                    @if i > 0 { br; }
                    span.muted { (name) " " } (value)
                }
            }
            Err(e) => span.bad { "invalid: " (e) },
        }
    }
}

pub(crate) fn fencing_cell(fencing: Option<Duplicate>) -> Markup {
    html! {
        @match fencing {
            Some(Duplicate::NeedsFencing) => span.warn title="a duplicate run would do harm: the job runs with a fencing token" { "needs fencing" },
            Some(Duplicate::Harmless) => span.muted title="a duplicate run would do no harm" { "harmless" },
            None => span.muted { "—" },
        }
    }
}

pub(crate) fn paused_cell(pauses: &[Pause], now: DateTime<Utc>) -> Markup {
    html! {
        @if pauses.is_empty() {
            span.muted { "no" }
        }
        @for p in pauses {
            div {
                span.paused {
                    "paused"
                    @if let Some(node) = &p.node { " on " (node) } @else { " everywhere" }
                }
                br;
                span.small { "by " (p.by) ", " (layout::instant(p.since, now)) }
                @if !p.why.is_empty() { br; span.small.muted { (p.why) } }
            }
        }
    }
}

pub(crate) fn last_run_cell(runs: &[RunRow], now: DateTime<Utc>) -> Markup {
    html! {
        @if let Some(run) = runs.first() {
            (layout::outcome(run.outcome))
            " " (layout::instant(run.finished, now))
            br;
            span.small.muted { "took " (words::span(run.finished - run.started)) " on " (run.node) }
            @if let Some(error) = &run.error { br; span.small.bad { (error) } }
        } @else {
            span.muted { "none recorded" }
        }
    }
}

pub(crate) fn lateness_cell(runs: &[RunRow]) -> Markup {
    let late: Vec<TimeDelta> = runs
        .iter()
        .filter(|r| r.attempt <= 1)
        .map(|r| r.started - r.tick)
        .collect();
    let count = late.len();
    html! {
        @if let Some((median, max)) = words::lateness(late) {
            "median " (words::span(median)) br; "max " (words::span(max))
            br; span.muted { "of " (count) " run" @if count != 1 { "s" } }
        } @else {
            span.muted { "—" }
        }
    }
}

/// The buttons of a job's row: pause (everywhere) or resume each pause, trigger,
/// and for a dynamic schedule edit and remove.
fn compact_actions(shared: &Shared, session: &Session, job: &JobView) -> Markup {
    let token = session.token();
    // A node-scoped job's trigger runs on this node.
    let trigger_node = (job.scope == Scope::Node)
        .then_some(shared.node.as_deref())
        .flatten();
    html! {
        @if job.pauses.is_empty() {
            form.inline method="post" action="./pause" data-job=(job.name) data-action="pause" {
                (layout::csrf_field(token))
                input type="hidden" name="name" value=(job.name);
                button type="submit" { "Pause" }
            }
        }
        @for p in &job.pauses {
            form.inline method="post" action="./resume" data-job=(job.name) data-action="resume" {
                (layout::csrf_field(token))
                input type="hidden" name="name" value=(job.name);
                @if let Some(node) = &p.node { input type="hidden" name="node" value=(node); }
                input type="hidden" name="catch_up" value="yes";
                button type="submit" title="the ticks paused over are caught up as the job's catch-up policy says" {
                    "Resume" @if let Some(node) = &p.node { " on " (node) }
                }
            }
            form.inline method="post" action="./resume" data-job=(job.name) data-action="resume-no-catch-up" {
                (layout::csrf_field(token))
                input type="hidden" name="name" value=(job.name);
                @if let Some(node) = &p.node { input type="hidden" name="node" value=(node); }
                input type="hidden" name="catch_up" value="no";
                button type="submit" title="the ticks paused over are dropped" { "Resume, skip missed" }
            }
        }
        form.inline method="post" action="./trigger" data-job=(job.name) data-action="trigger" {
            (layout::csrf_field(token))
            input type="hidden" name="name" value=(job.name);
            @if let Some(node) = trigger_node { input type="hidden" name="node" value=(node); }
            @if job.pauses.is_empty() {
                button type="submit" { "Trigger now" }
            } @else {
                input type="hidden" name="while_paused" value="yes";
                button type="submit" title="the job stays paused; this one run goes ahead" { "Run now, although paused" }
            }
        }
        @if job.dynamic.is_some() {
            a href=(link::schedule(&job.name)) data-action="edit" { "Edit" }
            " "
            form.inline method="post" action="./remove-schedule" data-job=(job.name) data-action="remove" {
                (layout::csrf_field(token))
                input type="hidden" name="name" value=(job.name);
                button type="submit" { "Remove" }
            }
        }
    }
}

pub(crate) fn triggers(triggers: &[Trigger], now: DateTime<Utc>) -> Markup {
    html! {
        table {
            thead { tr { th { "Trigger" } th { "Job" } th { "Asked" } th { "By" } th { "State" } } }
            tbody {
                @for t in triggers {
                    tr {
                        td { a href=(link::trigger(t.id.0)) { "#" (t.id) } }
                        td { a href=(link::job(&t.job)) { (t.job) } @if let Some(n) = &t.node { " on " (n) } }
                        td { (layout::instant(t.requested_at, now)) }
                        td { (t.by) @if !t.why.is_empty() { br; span.small.muted { (t.why) } } }
                        td { (trigger_state(&t.state, now)) }
                    }
                }
            }
        }
    }
}

pub(crate) fn trigger_state(state: &TriggerState, now: DateTime<Utc>) -> Markup {
    html! {
        @match state {
            TriggerState::Pending => span.warn { "pending: no instance has claimed it yet" },
            TriggerState::Running { holder, started_at } => {
                span.ok { "running" } " since " (layout::instant(*started_at, now))
                br; span.small.muted { "holder " (holder) }
            },
            TriggerState::Done { outcome, error, finished_at } => {
                (layout::outcome(*outcome)) " " (layout::instant(*finished_at, now))
                @if let Some(e) = error { br; span.bad { (e) } }
            },
            _ => span.muted { "unknown" },
        }
    }
}
