//! The dynamic schedule form: `GET schedule[?name=NAME]` shows it, `POST schedule`
//! adds or replaces the schedule; a refusal shows the form again, filled in.

use std::time::Duration;

use axum::Extension;
use axum::extract::rejection::FormRejection;
use axum::extract::{Form, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use maud::{Markup, html};
use scheduler_core::{ScheduleRow, Scope};
use serde::Deserialize;

use super::{actor, form, guard, reason};
use crate::csrf::Session;
use crate::layout::{self, Nav, page};
use crate::link;
use crate::problem::Problem;
use crate::query::{Address, Query};
use crate::shared::{Actor, Ctx, MAX_TEXT};

/// The fields of the dynamic schedule form.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ScheduleForm {
    #[serde(default)]
    csrf: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    handler: String,
    #[serde(default)]
    schedule: String,
    #[serde(default)]
    zone: String,
    #[serde(default)]
    scope: String,
    #[serde(default)]
    policy: String,
    #[serde(default)]
    args: String,
    /// A checkbox: present when checked.
    #[serde(default)]
    enabled: Option<String>,
    #[serde(default)]
    why: String,
}

impl ScheduleForm {
    fn from_row(row: &ScheduleRow) -> Self {
        Self {
            csrf: None,
            name: row.name.clone(),
            handler: row.handler.clone(),
            schedule: row.schedule.clone(),
            zone: row.zone.clone().unwrap_or_default(),
            scope: row.scope.to_string(),
            policy: row.policy.clone(),
            args: row.args.clone(),
            enabled: row.enabled.then(|| "on".to_owned()),
            why: String::new(),
        }
    }

    fn blank() -> Self {
        Self {
            args: "{}".to_owned(),
            scope: Scope::Cluster.to_string(),
            enabled: Some("on".to_owned()),
            ..Self::default()
        }
    }

    fn to_row(&self, min_period: Duration) -> Result<ScheduleRow, Problem> {
        let scope = match self.scope.trim() {
            "" | "cluster" => Scope::Cluster,
            "node" => Scope::Node,
            other => {
                return Err(Problem::bad_request(format!(
                    "scope {other:?}: cluster or node"
                )));
            }
        };
        let mut row = ScheduleRow::new(self.name.trim(), self.handler.trim(), self.schedule.trim());
        row.zone = Some(self.zone.trim())
            .filter(|z| !z.is_empty())
            .map(str::to_owned);
        row.scope = scope;
        row.policy = self.policy.trim().to_owned();
        row.args = match self.args.trim() {
            "" => "{}".to_owned(),
            args => args.to_owned(),
        };
        row.enabled = self.enabled.is_some();
        every_rules(&row, min_period)?;
        Ok(row)
    }
}

/// What the form asks of an `every` schedule, for its message and before the store is
/// asked: no zone (its ticks are instants, not wall-clock times), and a period of at
/// least the dashboard's minimum. The store checks both again, with its own minimum
/// (`min_schedule_period`, 1 s by default), and that check holds: a dashboard minimum
/// below the store's lets the store refuse (`422`, in its words). A period that does
/// not read is left to the store.
fn every_rules(row: &ScheduleRow, min_period: Duration) -> Result<(), Problem> {
    let Some(every) = row.schedule.strip_prefix("every ") else {
        return Ok(());
    };
    let unprocessable = |message| Err(Problem::new(StatusCode::UNPROCESSABLE_ENTITY, message));
    if let Some(zone) = &row.zone {
        return unprocessable(format!(
            "a time zone ({zone}) applies to cron expressions only: an `every` schedule ticks \
             at instants, whatever the zone. Leave the zone empty, or write a cron expression"
        ));
    }
    match scheduler_core::parse_duration(every.trim()) {
        Ok(period) if period < min_period => unprocessable(format!(
            "every {} is more often than this dashboard accepts (at least every {min_period:?}): \
             a typo of a longer period? (The app may lower the minimum: Dashboard::min_period.)",
            every.trim()
        )),
        _ => Ok(()),
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct ScheduleQuery {
    #[serde(default)]
    name: Option<String>,
}

impl Address for ScheduleQuery {
    const USAGE: &'static str = "schedule, or schedule?name=NAME to edit one";
}

/// `GET schedule[?name=NAME]`: the form of a new or an existing dynamic schedule.
pub(crate) async fn schedule_form(
    State(shared): Ctx,
    session: Session,
    Query(query): Query<ScheduleQuery>,
) -> Result<Html<String>, Problem> {
    if !shared.actions.is_enabled() {
        return Err(Problem::read_only());
    }
    let controls = shared.controls().ok_or_else(Problem::no_controls)?;
    let handlers = controls.handlers().await?;
    let (form, editing) = match query.name.filter(|n| !n.is_empty()) {
        Some(name) => {
            let row = controls
                .schedule(&name)
                .await?
                .ok_or_else(|| Problem::not_found(format!("no dynamic schedule named {name:?}")))?;
            (ScheduleForm::from_row(&row), true)
        }
        None => (ScheduleForm::blank(), false),
    };
    Ok(Html(
        schedule_page(&session, &form, &handlers, editing, None).into_string(),
    ))
}

/// `POST schedule`: adds or replaces a dynamic schedule; a refusal shows the form
/// again, filled in, with the store's message.
pub(crate) async fn put_schedule(
    State(shared): Ctx,
    by: Option<Extension<Actor>>,
    session: Session,
    body: Result<Form<ScheduleForm>, FormRejection>,
) -> Result<Response, Problem> {
    let f = form(&shared, body)?;
    let controls = guard(&shared, &session, f.csrf.as_deref())?;
    let refused = |problem: Problem, handlers: &[String]| {
        let markup = schedule_page(&session, &f, handlers, false, Some(problem.message()));
        (problem.status(), Html(markup.into_string())).into_response()
    };
    let (by, why) = match actor(by).and_then(|by| Ok((by, reason(&f.why)?))) {
        Ok(given) => given,
        Err(problem) => return Ok(refused(problem, &[])),
    };
    let row = match f.to_row(shared.min_period) {
        Ok(row) => row,
        Err(problem) => return Ok(refused(problem, &[])),
    };
    if shared.job(&row.name).is_some() {
        let problem = Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!(
                "a job registered in code is named {:?}; a dynamic schedule needs a name of its own",
                row.name
            ),
        );
        return Ok(refused(problem, &[]));
    }
    match controls.put_schedule(&row, &by, why).await {
        Ok(_) => Ok(Redirect::to(link::JOBS).into_response()),
        Err(err) => {
            let handlers = controls.handlers().await.unwrap_or_default();
            Ok(refused(Problem::from_store(err), &handlers))
        }
    }
}

fn schedule_page(
    session: &Session,
    form: &ScheduleForm,
    handlers: &[String],
    editing: bool,
    error: Option<&str>,
) -> Markup {
    let title = if editing {
        format!("Dynamic schedule {}", form.name)
    } else {
        "Add a dynamic schedule".to_owned()
    };
    let body = html! {
        @if let Some(error) = error {
            p.problem role="alert" { (error) }
        }
        form method="post" action="./schedule" data-action="put-schedule" {
            (layout::csrf_field(session.token()))
            label { span { "Name" } input type="text" name="name" value=(form.name) required; }
            label {
                span { "Handler" }
                input type="text" name="handler" value=(form.handler) list="handlers" required;
                datalist #handlers { @for h in handlers { option value=(h) {} } }
                @if !handlers.is_empty() {
                    " " span.small.muted { "registered: " (handlers.join(", ")) }
                }
            }
            label {
                span { "Schedule" }
                input type="text" name="schedule" value=(form.schedule) placeholder="0 0 9 * * Mon-Fri, or every 30s" required;
            }
            label { span { "Time zone" } input type="text" name="zone" value=(form.zone) placeholder="UTC"; }
            label {
                span { "Scope" }
                select name="scope" {
                    option value="cluster" selected[form.scope != "node"] { "once per tick in the cluster" }
                    option value="node" selected[form.scope == "node"] { "once per tick per node" }
                }
            }
            label {
                span { "Policy" }
                input type="text" name="policy" value=(form.policy) placeholder="overlap = \"skip\", retry = 2";
            }
            label { span { "Arguments (JSON)" } textarea name="args" { (form.args) } }
            label { span { "Enabled" } input type="checkbox" name="enabled" checked[form.enabled.is_some()]; }
            label { span { "Why" } input type="text" name="why" maxlength=(MAX_TEXT) value=(form.why); }
            button type="submit" { "Save" }
            " " a href=(link::JOBS) { "Cancel" }
        }
    };
    page(&title, Nav::None, body)
}
