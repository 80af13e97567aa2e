//! The instances page: every scheduler instance that keeps a heartbeat row — node
//! id, version, started, last seen, live, stopped or gone, and the handlers and jobs
//! its node registered — and the warning a triggered run's page shows when no live
//! instance runs its job.

use axum::extract::State;
use axum::response::Html;
use chrono::{DateTime, Utc};
use maud::{Markup, html};
use scheduler_core::{Controls, InstanceRow, Trigger, TriggerState};
use serde::Deserialize;

use crate::jobs::status_line;
use crate::layout::{self, Nav, page};
use crate::link;
use crate::listing;
use crate::problem::Problem;
use crate::query::{Address, Query};
use crate::shared::Ctx;

/// The most handlers or jobs listed per instance; the rest are counted.
const MAX_NAMES: usize = 20;

/// The page takes no parameter: any is refused, as on the other pages.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct InstancesQuery {}

impl Address for InstancesQuery {
    const USAGE: &'static str = "instances (no parameters)";
}

/// Where an instance stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    /// Beating: its `expires_at` ahead, not stopped.
    Live,
    /// Said it stopped as it shut down.
    Stopped,
    /// Stopped beating without saying so (crashed, cut off).
    Gone,
}

fn state(row: &InstanceRow, now: DateTime<Utc>) -> Standing {
    if row.is_live(now) {
        Standing::Live
    } else if row.stopped {
        Standing::Stopped
    } else {
        Standing::Gone
    }
}

/// `GET instances`.
pub(crate) async fn show(
    State(shared): Ctx,
    Query(InstancesQuery {}): Query<InstancesQuery>,
) -> Result<Html<String>, Problem> {
    let controls = shared.controls().ok_or_else(Problem::no_controls)?;
    let now = shared.store.now().await?;
    let mut rows = controls.instances().await?;
    // Live ones first, then by node.
    rows.sort_by(|a, b| {
        (state(a, now) != Standing::Live, &a.node).cmp(&(state(b, now) != Standing::Live, &b.node))
    });
    let total = rows.len();
    let live = rows.iter().filter(|r| r.is_live(now)).count();
    let shown = (listing::MAX_ROWS as usize).min(total);
    rows.truncate(shown);
    let body = html! {
        (status_line(&shared, now))
        @if rows.is_empty() {
            p.muted data-empty="instances" {
                "No instance keeps a heartbeat row in this store (instances of an older version, \
                 or none started yet)."
            }
        } @else {
            p.small.muted data-count="instances" {
                (listing::thousands(live as u64)) " live of " (listing::thousands(total as u64))
                " instance" @if total != 1 { "s" }
                @if shown < total { "; the first " (shown) " shown, live ones first" }
            }
            (table(&rows, now))
        }
    };
    Ok(Html(page("Instances", Nav::Instances, body).into_string()))
}

fn table(rows: &[InstanceRow], now: DateTime<Utc>) -> Markup {
    html! {
        table {
            thead { tr {
                th { "Node" } th { "Version" } th { "Started" } th { "Last seen" } th { "State" }
                th { "Handlers" } th { "Jobs" }
            } }
            tbody {
                @for row in rows {
                    @let st = state(row, now);
                    tr data-instance=(row.node) data-state=(match st { Standing::Live => "live", Standing::Stopped => "stopped", Standing::Gone => "gone" }) {
                        td { code { (listing::short_text(&row.node)) } }
                        td { (listing::short_text(&row.version)) }
                        td { (layout::instant(row.started_at, now)) }
                        td { (layout::instant(row.seen_at, now)) }
                        td {
                            @match st {
                                Standing::Live => { span.ok { "live" } br; span.small.muted { "expires " (layout::instant(row.expires_at, now)) } },
                                Standing::Stopped => span.muted { "stopped" },
                                Standing::Gone => { span.bad { "gone" } br; span.small.muted { "expired " (layout::instant(row.expires_at, now)) } },
                            }
                        }
                        td.small { (names(&row.handlers, false)) }
                        td.small { (names(&row.jobs, true)) }
                    }
                }
            }
        }
    }
}

/// At most [`MAX_NAMES`] names, the rest counted; jobs link to their pages.
fn names(names: &[String], jobs: bool) -> Markup {
    html! {
        @if names.is_empty() { span.muted { "none" } }
        @for (i, name) in names.iter().take(MAX_NAMES).enumerate() {
            @if i > 0 { ", " }
            @if jobs {
                a href=(link::job(name)) { (listing::short_text(name)) }
            } @else {
                code { (listing::short_text(name)) }
            }
        }
        @if names.len() > MAX_NAMES { " " span.muted { "and " (names.len() - MAX_NAMES) " more" } }
    }
}

/// A warning for a triggered run not yet done when instances keep heartbeat rows
/// and none of the live ones (on its node, when it was asked for there) runs its
/// job (registered in code there, or the handler of its dynamic schedule): the run
/// waits until one does. `None` when one does, when the run is done, or when the
/// store knows no instance (an older version's instances keep no row: nothing to
/// tell).
pub(crate) async fn no_live_runner(
    controls: &dyn Controls,
    trigger: &Trigger,
    now: DateTime<Utc>,
) -> scheduler_core::Result<Option<Markup>> {
    if matches!(trigger.state, TriggerState::Done { .. }) {
        return Ok(None);
    }
    let (job, node) = (trigger.job.as_str(), trigger.node.as_deref());
    let instances = controls.instances().await?;
    if instances.is_empty() {
        return Ok(None);
    }
    let handler = controls.schedule(job).await?.map(|row| row.handler);
    let live: Vec<&InstanceRow> = instances
        .iter()
        .filter(|i| i.is_live(now) && node.is_none_or(|n| i.node == n))
        .collect();
    let runs = live.iter().any(|i| {
        i.jobs.iter().any(|j| j == job)
            || handler
                .as_ref()
                .is_some_and(|h| i.handlers.iter().any(|ih| ih == h))
    });
    if runs {
        return Ok(None);
    }
    Ok(Some(html! {
        p.notice.warn role="alert" data-warning="no-live-instance" {
            strong { "No live instance runs " code { (job) } "." }
            " "
            @if live.is_empty() {
                @if let Some(n) = node { "No instance is live on node " code { (n) } ": " }
                @else { "No instance is live at all: " }
            } @else {
                (live.len()) " instance" @if live.len() != 1 { "s are" } @else { " is" } " live, none with this job"
                @if let Some(h) = &handler { " or its handler " code { (h) } }
                ": "
            }
            "the run waits until an instance that runs it starts. "
            a href="./instances" { "See the instances" } "."
        }
    }))
}
