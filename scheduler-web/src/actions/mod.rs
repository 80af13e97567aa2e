//! The operator's actions: pause, resume, trigger now, and dynamic schedules added,
//! changed and removed. Each is a `POST` that acts only when the app enabled actions
//! and the request passes the CSRF check, records the request's [`Actor`], and
//! redirects (303) to a page; the store's refusals are shown as text (`422` for a
//! bad schedule, an unknown handler or input past the store's limits, `404` for an
//! unknown job, `409` for a trigger of a paused job not said to run while paused).
//!
//! The forms' own checks (a reason or an actor over 1 KiB, a paused job's trigger,
//! the schedule form's `every` rules) come first, for their messages; the store's,
//! the same for every entry (API, CLI, dashboard), are the ones that hold
//! (`scheduler_core::control::MAX_TEXT_BYTES`, the store's `min_schedule_period`,
//! `ControlRequest::while_paused`).

use axum::Extension;
use axum::extract::rejection::FormRejection;
use axum::extract::{Form, State};
use axum::http::StatusCode;
use axum::response::Redirect;
use maud::{Markup, html};
use scheduler_core::{ControlRequest, Controls, Error, Scope};
use serde::Deserialize;

use crate::csrf::Session;
use crate::jobs::JobView;
use crate::layout;
use crate::link;
use crate::problem::{Problem, innermost};
use crate::shared::{Actor, Ctx, MAX_BODY, MAX_TEXT, Shared};

mod schedule;

pub(crate) use schedule::{put_schedule, schedule_form};

/// The fields of the pause, resume and trigger forms; all optional, so that a form
/// without its CSRF token is refused as such rather than as malformed.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ControlForm {
    #[serde(default)]
    csrf: Option<String>,
    #[serde(default)]
    name: String,
    /// One node's scope only; empty: every node.
    #[serde(default)]
    node: String,
    #[serde(default)]
    why: String,
    /// Resume: `no` drops the ticks paused over; anything else catches them up.
    #[serde(default)]
    catch_up: String,
    /// `job`: back to the job's page; anything else: the jobs page.
    #[serde(default)]
    back: String,
    /// Trigger: `yes` runs a paused job all the same
    /// ([`ControlRequest::while_paused`], recorded as `trigger_while_paused`).
    #[serde(default)]
    while_paused: String,
}

/// Refuses unless actions are enabled and the CSRF token matches; then the store's
/// controls.
fn guard<'a>(
    shared: &'a Shared,
    session: &Session,
    csrf: Option<&str>,
) -> Result<&'a dyn Controls, Problem> {
    if !shared.actions.is_enabled() {
        return Err(Problem::read_only());
    }
    shared.csrf.check(session, csrf).map_err(|refusal| {
        Problem::new(
            StatusCode::FORBIDDEN,
            format!(
                "refused: {refusal}. Nothing was changed; reload the dashboard's page and submit the form again."
            ),
        )
    })?;
    shared.controls().ok_or_else(Problem::no_controls)
}

/// The form, or a refusal: read-only before anything else (a body that is no form
/// included), then a body that is not one.
fn form<T: Default>(shared: &Shared, form: Result<Form<T>, FormRejection>) -> Result<T, Problem> {
    if !shared.actions.is_enabled() {
        return Err(Problem::read_only());
    }
    form.map(|Form(f)| f).map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Problem::new(
                e.status(),
                format!(
                    "the form is larger than the dashboard reads (64 KiB, {MAX_BODY} bytes), a \
                     schedule's arguments included: shorten it. Nothing was changed"
                ),
            )
        } else {
            Problem::new(
                e.status(),
                format!(
                    "the request is not a form the dashboard reads ({}): submit it from the \
                     dashboard's own page. Nothing was changed",
                    innermost(&e)
                ),
            )
        }
    })
}

/// Who acts, as the app's auth layer says, at most [`MAX_TEXT`] bytes.
fn actor(actor: Option<Extension<Actor>>) -> Result<String, Problem> {
    let by = actor.map(|Extension(a)| a).unwrap_or_default().0;
    if by.len() > MAX_TEXT {
        return Err(Problem::bad_request(format!(
            "the actor the app's auth layer set for this request is {} bytes long; at most 1 KiB \
             ({MAX_TEXT} bytes) is recorded as who acted. Nothing was changed",
            by.len()
        )));
    }
    Ok(by)
}

/// The reason given, trimmed, at most [`MAX_TEXT`] bytes.
fn reason(why: &str) -> Result<&str, Problem> {
    let why = why.trim();
    if why.len() > MAX_TEXT {
        return Err(Problem::bad_request(format!(
            "the reason (why) is {} bytes long; the dashboard keeps at most 1 KiB ({MAX_TEXT} bytes) \
             of it: shorten it and submit the form again. Nothing was changed",
            why.len()
        )));
    }
    Ok(why)
}

/// A job registered in code or a dynamic schedule, or `404`.
async fn known(shared: &Shared, controls: &dyn Controls, name: &str) -> Result<(), Problem> {
    if name.is_empty() {
        return Err(Problem::bad_request("the form names no job"));
    }
    if shared.job(name).is_some() || controls.schedule(name).await?.is_some() {
        Ok(())
    } else {
        Err(Problem::not_found(format!(
            "no job named {name:?}: it is neither registered in code nor a dynamic schedule"
        )))
    }
}

impl ControlForm {
    /// The control asked for, or a refusal of a reason or an actor over 1 KiB.
    fn request(&self, by: Option<Extension<Actor>>) -> Result<ControlRequest, Problem> {
        let mut req = ControlRequest::new(self.name.as_str(), actor(by)?).why(reason(&self.why)?);
        if !self.node.trim().is_empty() {
            req = req.node(self.node.trim());
        }
        Ok(req)
    }

    fn back(&self) -> Redirect {
        if self.back == "job" {
            Redirect::to(&link::job(&self.name))
        } else {
            Redirect::to(link::JOBS)
        }
    }
}

/// What `pause`, `resume` and `trigger` start with: the form (read-only and a body
/// that is no form refused first), the CSRF check, the request (a reason or an actor
/// over 1 KiB refused) and a job that exists.
async fn job_control<'a>(
    shared: &'a Shared,
    by: Option<Extension<Actor>>,
    session: &Session,
    body: Result<Form<ControlForm>, FormRejection>,
) -> Result<(ControlForm, &'a dyn Controls, ControlRequest), Problem> {
    let f = form(shared, body)?;
    let controls = guard(shared, session, f.csrf.as_deref())?;
    let req = f.request(by)?;
    known(shared, controls, &f.name).await?;
    Ok((f, controls, req))
}

/// `POST pause`.
pub(crate) async fn pause(
    State(shared): Ctx,
    by: Option<Extension<Actor>>,
    session: Session,
    body: Result<Form<ControlForm>, FormRejection>,
) -> Result<Redirect, Problem> {
    let (f, controls, req) = job_control(&shared, by, &session, body).await?;
    controls.pause(&req).await?;
    Ok(f.back())
}

/// `POST resume`.
pub(crate) async fn resume(
    State(shared): Ctx,
    by: Option<Extension<Actor>>,
    session: Session,
    body: Result<Form<ControlForm>, FormRejection>,
) -> Result<Redirect, Problem> {
    let (f, controls, req) = job_control(&shared, by, &session, body).await?;
    let catch_up = f.catch_up != "no";
    controls.resume(&req, catch_up).await?;
    Ok(f.back())
}

/// `POST trigger`: redirects to the triggered run's page.
pub(crate) async fn trigger(
    State(shared): Ctx,
    by: Option<Extension<Actor>>,
    session: Session,
    body: Result<Form<ControlForm>, FormRejection>,
) -> Result<Redirect, Problem> {
    let (f, controls, req) = job_control(&shared, by, &session, body).await?;
    let while_paused = f.while_paused == "yes";
    if !while_paused
        && let Some(pause) = controls
            .paused()
            .await?
            .into_iter()
            .find(|p| p.job == f.name)
    {
        return Err(paused(&f.name, pause.node.as_deref(), &pause.by));
    }
    // The store checks again where it writes the trigger: a pause that lands
    // meanwhile is refused the same way.
    match controls.trigger(&req.while_paused(while_paused)).await {
        Ok(trigger) => Ok(Redirect::to(&link::trigger(trigger.id.0))),
        Err(Error::TriggerWhilePaused { job, node, by, .. }) => {
            Err(paused(&job, node.as_deref(), &by))
        }
        Err(err) => Err(err.into()),
    }
}

/// The refusal (`409`) of a trigger of a job paused `node` (`None`: everywhere) by
/// `by`, not said to run while paused.
fn paused(job: &str, node: Option<&str>, by: &str) -> Problem {
    let place = node.map_or_else(|| "everywhere".to_owned(), |node| format!("on {node}"));
    Problem::new(
        StatusCode::CONFLICT,
        format!(
            "{job} is paused ({place}, by {by}): a trigger would run it all the same. Nothing \
             was run; to run it although it is paused, say so on its page"
        ),
    )
}

/// `POST remove-schedule`.
pub(crate) async fn remove_schedule(
    State(shared): Ctx,
    by: Option<Extension<Actor>>,
    session: Session,
    body: Result<Form<ControlForm>, FormRejection>,
) -> Result<Redirect, Problem> {
    let f = form(&shared, body)?;
    let controls = guard(&shared, &session, f.csrf.as_deref())?;
    let (by, why) = (actor(by)?, reason(&f.why)?);
    match controls.remove_schedule(&f.name, &by, why).await? {
        Some(_) => Ok(Redirect::to(link::JOBS)),
        None => Err(Problem::not_found(format!(
            "no dynamic schedule named {:?}",
            f.name
        ))),
    }
}

/// The action forms of a job's page, each with a reason to record.
pub(crate) fn job_forms(shared: &Shared, session: &Session, job: &JobView) -> Markup {
    let token = session.token();
    let node_scoped = job.scope == Scope::Node;
    let hidden = html! {
        (layout::csrf_field(token))
        input type="hidden" name="name" value=(job.name);
        input type="hidden" name="back" value="job";
    };
    let node_choice = |every: &str| {
        html! {
            @if node_scoped {
                select name="node" {
                    @if let Some(node) = &shared.node { option value=(node) { "this node (" (node) ")" } }
                    option value="" { (every) }
                }
            }
        }
    };
    html! {
        h2 { "Actions" }
        @if job.pauses.is_empty() {
            form.inline method="post" action="./pause" data-job=(job.name) data-action="pause" {
                (hidden)
                (node_choice("every node"))
                input type="text" name="why" maxlength=(MAX_TEXT) placeholder="why pause? (optional)";
                button type="submit" { "Pause" }
            }
        }
        @for p in &job.pauses {
            form.inline method="post" action="./resume" data-job=(job.name) data-action="resume" {
                (hidden)
                @if let Some(node) = &p.node { input type="hidden" name="node" value=(node); }
                input type="text" name="why" maxlength=(MAX_TEXT) placeholder="why resume? (optional)";
                select name="catch_up" {
                    option value="yes" { "catch up the ticks paused over" }
                    option value="no" { "drop the ticks paused over" }
                }
                button type="submit" { "Resume" @if let Some(node) = &p.node { " on " (node) } }
            }
        }
        form.inline method="post" action="./trigger" data-job=(job.name) data-action="trigger" {
            (hidden)
            (node_choice("any instance"))
            input type="text" name="why" maxlength=(MAX_TEXT) placeholder="why run it now? (optional)";
            @if !job.pauses.is_empty() {
                label.small {
                    input type="checkbox" name="while_paused" value="yes" required;
                    " run it although it is paused"
                }
                " "
            }
            button type="submit" { "Trigger now" }
        }
        @if job.dynamic.is_some() {
            p {
                a href=(link::schedule(&job.name)) data-action="edit" { "Edit this schedule" }
            }
            form.inline method="post" action="./remove-schedule" data-job=(job.name) data-action="remove" {
                (layout::csrf_field(token))
                input type="hidden" name="name" value=(job.name);
                input type="text" name="why" maxlength=(MAX_TEXT) placeholder="why remove it? (optional)";
                button type="submit" { "Remove this schedule" }
            }
        }
    }
}
