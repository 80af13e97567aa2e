//! The failures page: the recent runs that did not succeed, across the jobs,
//! newest first, paged by id, filtered by job and by node; each with its job, tick,
//! node, attempt and error (long errors folded).

use axum::extract::State;
use axum::response::Html;
use chrono::{DateTime, Utc};
use maud::{Markup, html};
use scheduler_core::{Page, RunQuery, RunRow};
use serde::Deserialize;

use crate::jobs::status_line;
use crate::layout::{self, Nav, page};
use crate::link;
use crate::listing;
use crate::problem::Problem;
use crate::query::{Address, Query};
use crate::shared::Ctx;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FailuresQuery {
    #[serde(default)]
    job: Option<String>,
    #[serde(default)]
    node: Option<String>,
    #[serde(default)]
    before: Option<i64>,
}

impl Address for FailuresQuery {
    const USAGE: &'static str = "failures[?job=NAME][&node=NODE][&before=ID]: the runs that did \
         not succeed, newest first, those with an id below ID";
}

/// `GET failures[?job=NAME][&node=NODE][&before=ID]`.
pub(crate) async fn show(
    State(shared): Ctx,
    Query(query): Query<FailuresQuery>,
) -> Result<Html<String>, Problem> {
    let job = listing::filter(query.job, "job")?;
    let node = listing::filter(query.node, "node")?;
    let before = listing::id_cursor(query.before, FailuresQuery::USAGE)?;
    let controls = shared.controls().ok_or_else(Problem::no_controls)?;
    let now = shared.store.now().await?;
    let limit = listing::text_rows(&shared);
    let failed = |limit: u32, failed: bool| RunQuery {
        job: job.clone(),
        node: node.clone(),
        failed,
        page: Page { before, limit },
    };
    // One row more than shown, to know whether an older page follows.
    let mut runs = controls.runs_where(&failed(limit + 1, true)).await?;
    let more = runs.len() > limit as usize;
    runs.truncate(limit as usize);
    if runs.is_empty() && before.is_none() {
        // A filter that matches no failure must name a job or a node that is known.
        if let Some(job) = &job
            && controls
                .runs(
                    Some(job),
                    Page {
                        before: None,
                        limit: 1,
                    },
                )
                .await?
                .is_empty()
        {
            crate::audit::known_job(&shared, controls, job).await?;
        }
        if let Some(node) = &node {
            let any = RunQuery {
                node: Some(node.clone()),
                page: Page {
                    before: None,
                    limit: 1,
                },
                ..RunQuery::default()
            };
            if controls.runs_where(&any).await?.is_empty() {
                return Err(Problem::bad_request(format!(
                    "no run was recorded on a node {node:?}: the node filter takes a node id \
                     as the runs show it"
                )));
            }
        }
    }

    let link_to = |before: Option<i64>| {
        let before = before.map(|id| id.to_string());
        listing::query(
            "failures",
            &[
                ("job", job.as_deref()),
                ("node", node.as_deref()),
                ("before", before.as_deref()),
            ],
        )
    };
    let newest = before.is_some().then(|| link_to(None));
    let older = more
        .then(|| runs.last().map(|r| link_to(Some(r.id))))
        .flatten();
    let filtered = job.is_some() || node.is_some();
    let body = html! {
        (status_line(&shared, now))
        form.filters method="get" action="./failures" style=(listing::FILTERS_STYLE) {
            label.inline style=(listing::FILTER_STYLE) {
                span style="min-width:0" { "Job" }
                input type="text" name="job" value=[job.as_deref()] placeholder="every job";
            }
            label.inline style=(listing::FILTER_STYLE) {
                span style="min-width:0" { "Node" }
                input type="text" name="node" value=[node.as_deref()] placeholder="any node";
            }
            button type="submit" { "Filter" }
            @if filtered { " " a href="./failures" data-filter="clear" { "every failure" } }
        }
        @if runs.is_empty() {
            p.muted data-empty="failures" {
                @if before.is_some() { "No older failures." }
                @else if filtered { "No run matching these filters failed." }
                @else { "No run has failed (runs are listed when the store keeps a run history)." }
            }
        } @else {
            p.small.muted data-count="failures" {
                (runs.len()) " run" @if runs.len() != 1 { "s" } " that did not succeed"
                ", ids " (runs.last().map_or(0, |r| r.id)) "–" (runs.first().map_or(0, |r| r.id))
                ", newest first"
            }
            (table(&runs, now))
        }
        (listing::pager(&[("newest", "« Newest", newest), ("older", "Older ›", older)]))
    };
    Ok(Html(page("Failures", Nav::Failures, body).into_string()))
}

fn table(runs: &[RunRow], now: DateTime<Utc>) -> Markup {
    html! {
        table {
            thead { tr {
                th.num { "#" } th { "Job" } th { "Tick" } th { "Outcome" } th { "Ended" }
                th { "Node" } th.num { "Attempt" } th { "Error" }
            } }
            tbody {
                @for run in runs {
                    tr data-run=(run.id) {
                        td.num { (run.id) }
                        td { a href=(link::job(&run.job)) { (listing::short_text(&run.job)) } }
                        td { (layout::rfc3339(run.tick)) }
                        td { (layout::outcome(run.outcome)) }
                        td { (layout::instant(run.finished, now)) }
                        td { (listing::short_text(&run.node)) }
                        td.num { (run.attempt) }
                        td { @if let Some(e) = &run.error { (listing::long_text(e, "bad")) } }
                    }
                }
            }
        }
    }
}
