//! The cells of a job's row, and the parts of its page they share: each one line or
//! two, the details folded away.

use chrono::{DateTime, TimeDelta, Utc};
use maud::{Markup, html};
use scheduler_core::{Duplicate, Pause, Policy, Scope};

use super::view::JobView;
use crate::csrf::Session;
use crate::layout;
use crate::link;
use crate::shared::Shared;
use crate::words::{self, Described};

/// The job's name, a link to its page, and what stands out ([`badges`]).
pub(crate) fn name_cell(job: &JobView, now: DateTime<Utc>) -> Markup {
    html! {
        a href=(link::kept(&link::job(&job.name))) { (job.name) }
        (badges(job, now))
    }
}

/// What stands out about a job: paused (where), running, late, failing.
pub(crate) fn badges(job: &JobView, now: DateTime<Utc>) -> Markup {
    html! {
        @for p in &job.pauses {
            " " span.badge.paused data-badge="paused" title={ "by " (p.by) @if !p.why.is_empty() { ": " (p.why) } } {
                "paused " @if let Some(node) = &p.node { "on " (node) } @else { "everywhere" }
            }
        }
        @if job.is_running(now) { " " span.badge.ok data-badge="running" { "running" } }
        @if let Some(due) = job.late_since(now) {
            " " span.badge.warn data-badge="late" title={ "the tick due " (layout::rfc3339(due)) " has not been taken" } { "late" }
        }
        @if job.is_failing() { " " span.badge.bad data-badge="failing" { "failing" } }
    }
}

/// A schedule in words, its zone and (for cron) the expression as written beside.
pub(crate) fn schedule_cell(schedule: &Described) -> Markup {
    html! {
        span title=(schedule.text) { (schedule.words) }
        @if let Some(zone) = &schedule.zone { " " span.muted.small { (zone) } }
    }
}

/// The next tick: how soon, and when in the job's zone with UTC beside.
pub(crate) fn next_cell(job: &JobView, now: DateTime<Utc>) -> Markup {
    html! {
        @match &job.next {
            Ok(Some(tick)) => {
                (layout::instant(tick.at, now))
                " · " span.muted { (layout::zoned(tick.at, job.zone)) }
                @if let Some(dst) = &tick.dst { br; span.small.warn { (dst) } }
            }
            Ok(None) => span.muted { @if job.dynamic.as_ref().is_some_and(|r| !r.enabled) { "disabled" } @else { "none" } },
            Err(e) => span.bad { "invalid: " (e) },
        }
    }
}

/// A policy, one line per part.
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

/// Scope, policy, fencing or handler and arguments: folded, one click away.
pub(crate) fn details_cell(job: &JobView) -> Markup {
    html! {
        details {
            summary.small.muted {
                (job.scope)
                @if let Some(row) = &job.dynamic { " · " code { (row.handler) } @if !row.enabled { " " span.warn { "disabled" } } }
            }
            div.small {
                (policy_cell(&job.policy))
                br;
                @if let Some(row) = &job.dynamic {
                    span.muted { "arguments " } code { (row.args) }
                } @else {
                    span.muted { "fencing " } (fencing_cell(job.fencing))
                }
            }
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
                " " span.small { "by " (p.by) ", " (layout::instant(p.since, now)) }
                @if !p.why.is_empty() { " " span.small.muted { "— " (p.why) } }
            }
        }
    }
}

/// The last run: outcome and age; how long it took and where, its error as text.
pub(crate) fn last_run_cell(job: &JobView, now: DateTime<Utc>) -> Markup {
    html! {
        @if let Some(run) = job.runs.first() {
            (layout::outcome(run.outcome))
            " " (layout::instant(run.finished, now))
            span.muted { " · took " (words::span(run.finished - run.started)) " on " (run.node) }
            @if let Some(error) = &run.error { " " span.bad.clip title=(error) { (error) } }
        } @else {
            span.muted { "none recorded" }
        }
    }
}

/// How late its recent first attempts started (started − tick): the median and the
/// largest of those that ran their tick in time; a run that caught up a tick older
/// than the job's period (after an outage, a pause or a first start) is counted
/// apart and said so, not folded into the median.
pub(crate) fn lateness_cell(job: &JobView) -> Markup {
    let mut on_time: Vec<TimeDelta> = Vec::new();
    let mut caught_up: Vec<TimeDelta> = Vec::new();
    for run in job.runs.iter().filter(|r| r.attempt <= 1) {
        let late = run.started - run.tick;
        if job.caught_up(run) {
            caught_up.push(late);
        } else {
            on_time.push(late);
        }
    }
    let count = on_time.len();
    html! {
        @if let Some((median, max)) = words::lateness(on_time) {
            span title={ "of the last " (count) " run" @if count != 1 { "s" } " that ran their tick in time" } {
                "median " (words::span(median)) ", max " (words::span(max))
            }
        } @else if caught_up.is_empty() {
            span.muted { "—" }
        }
        @if let Some(latest) = caught_up.iter().max() {
            @if count > 0 { " · " }
            span.warn data-catch-up=(caught_up.len())
                title="a tick older than the job's period was run late on purpose: caught up after an outage, a pause or a first start" {
                (caught_up.len()) " caught up"
                " (up to " (words::span(*latest)) " late)"
            }
        }
    }
}

/// The buttons of a job's row: pause (everywhere) or resume each pause, trigger,
/// and for a dynamic schedule edit and remove.
pub(crate) fn compact_actions(shared: &Shared, session: &Session, job: &JobView) -> Markup {
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
