//! The audit page: every control applied (pause, resume, trigger, schedule put or
//! removed), across the jobs or of one, newest first, paged by id: who, when, why.

use axum::extract::State;
use axum::response::Html;
use chrono::{DateTime, Utc};
use maud::{Markup, html};
use scheduler_core::{ControlAction, ControlRecord, Controls, Page};
use serde::Deserialize;

use crate::jobs::status_line;
use crate::layout::{self, Nav, page};
use crate::link;
use crate::listing;
use crate::problem::Problem;
use crate::query::{Address, Query};
use crate::shared::{Ctx, Shared};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuditQuery {
    #[serde(default)]
    job: Option<String>,
    #[serde(default)]
    before: Option<i64>,
}

impl Address for AuditQuery {
    const USAGE: &'static str = "audit[?job=NAME][&before=ID]: the controls of every job (or of job NAME), newest first, \
         those with an id below ID";
}

/// `GET audit[?job=NAME][&before=ID]`.
pub(crate) async fn show(
    State(shared): Ctx,
    Query(query): Query<AuditQuery>,
) -> Result<Html<String>, Problem> {
    let job = listing::filter(query.job, "job")?;
    let before = listing::id_cursor(query.before, AuditQuery::USAGE)?;
    let controls = shared.controls().ok_or_else(Problem::no_controls)?;
    let now = shared.store.now().await?;
    let limit = listing::text_rows(&shared);
    // One row more than shown, to know whether an older page follows.
    let mut records = controls
        .control_history(
            job.as_deref(),
            Page {
                before,
                limit: limit + 1,
            },
        )
        .await?;
    let more = records.len() > limit as usize;
    records.truncate(limit as usize);
    if let Some(job) = &job
        && records.is_empty()
        && before.is_none()
    {
        known_job(&shared, controls, job).await?;
    }

    let link_to = |before: Option<i64>| {
        let before = before.map(|id| id.to_string());
        listing::query(
            "audit",
            &[("job", job.as_deref()), ("before", before.as_deref())],
        )
    };
    let newest = before.is_some().then(|| link_to(None));
    let older = more
        .then(|| records.last().map(|r| link_to(Some(r.id))))
        .flatten();
    let body = html! {
        (status_line(&shared, now))
        form.filters method="get" action="./audit" style=(listing::FILTERS_STYLE) {
            label.inline style=(listing::FILTER_STYLE) {
                span style="min-width:0" { "Job" }
                input type="text" name="job" value=[job.as_deref()] placeholder="every job";
            }
            button type="submit" { "Filter" }
            @if job.is_some() { " " a href="./audit" data-filter="clear" { "every job" } }
        }
        @if records.is_empty() {
            p.muted data-empty="audit" {
                @if before.is_some() { "No older controls." } @else { "No control recorded." }
            }
        } @else {
            p.small.muted data-count="audit" {
                (records.len()) " control" @if records.len() != 1 { "s" }
                ", ids " (records.last().map_or(0, |r| r.id)) "–" (records.first().map_or(0, |r| r.id))
                @if let Some(job) = &job { " of " code { (listing::short_text(job)) } }
                ", newest first"
            }
            (table(&records, now))
        }
        (listing::pager(&[("newest", "« Newest", newest), ("older", "Older ›", older)]))
    };
    Ok(Html(page("Audit", Nav::Audit, body).into_string()))
}

/// A job filter that matches no control must at least name a job: registered in
/// code or a dynamic schedule. Else it is a `400` (a typo shows no empty page).
pub(crate) async fn known_job(
    shared: &Shared,
    controls: &dyn Controls,
    job: &str,
) -> Result<(), Problem> {
    if shared.job(job).is_some() || controls.schedule(job).await?.is_some() {
        return Ok(());
    }
    Err(Problem::bad_request(format!(
        "no job named {job:?}: it is not registered in code, not a dynamic schedule, and has \
         nothing recorded"
    )))
}

fn table(records: &[ControlRecord], now: DateTime<Utc>) -> Markup {
    html! {
        table {
            thead { tr {
                th.num { "#" } th { "When" } th { "Job" } th { "Action" } th { "Node" }
                th { "By" } th { "Why" } th { "Detail" }
            } }
            tbody {
                @for c in records {
                    tr data-control=(c.id) {
                        td.num { (c.id) }
                        td { (layout::instant(c.at, now)) }
                        td { a href=(link::job(&c.job)) { (listing::short_text(&c.job)) } }
                        td { (c.action) }
                        td { @if let Some(n) = &c.node { (listing::short_text(n)) } @else { span.muted { "every node" } } }
                        td { (listing::short_text(&c.by)) }
                        td { @if !c.why.is_empty() { (listing::long_text(&c.why, "")) } }
                        td {
                            @if c.action == ControlAction::Trigger
                                && let Ok(id) = c.detail.trim().parse::<i64>()
                            {
                                a href=(link::trigger(id)) { "trigger #" (id) }
                            } @else if !c.detail.is_empty() {
                                code.small { (listing::long_text(&c.detail, "")) }
                            }
                        }
                    }
                }
            }
        }
    }
}
