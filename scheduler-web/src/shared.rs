//! What every page handler shares: the dashboard's settings as the router holds
//! them ([`Shared`]), whether operators may act ([`Actions`]) and who acts
//! ([`Actor`]).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{FromRequestParts, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use scheduler_core::{Controls, JobInfo, Store};

use crate::counts::Counts;
use crate::csrf::{Csrf, Session};
use crate::problem::Problem;

/// The most bytes of a reason (`why`) or an actor (`by`) the dashboard records.
pub(crate) const MAX_TEXT: usize = 1024;

/// The most bytes of a request body the dashboard reads.
pub(crate) const MAX_BODY: usize = 64 * 1024;

/// Whether the dashboard lets operators act (pause, resume, trigger now, edit
/// dynamic schedules). Off by default: the dashboard only reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Actions {
    enabled: bool,
}

impl Actions {
    /// Forms rendered, and their `POST` routes act (each behind its CSRF token).
    pub fn enabled() -> Self {
        Self { enabled: true }
    }

    /// Read-only (the default): no form is rendered and every `POST` answers `403`.
    pub fn disabled() -> Self {
        Self { enabled: false }
    }

    /// Whether actions are enabled.
    pub fn is_enabled(self) -> bool {
        self.enabled
    }
}

/// Who is acting, as the app's auth layer puts it into the request's extensions
/// (`req.extensions_mut().insert(Actor("web:alice".into()))`): recorded as the
/// `by` of every control the request applies. Without one, the actor is `web`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Actor(pub String);

impl Default for Actor {
    fn default() -> Self {
        Actor("web".to_owned())
    }
}

/// What every handler reads.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) jobs: Vec<JobInfo>,
    pub(crate) node: Option<String>,
    pub(crate) actions: Actions,
    pub(crate) page_size: u32,
    /// The shortest `every` period the schedule form accepts.
    pub(crate) min_period: Duration,
    pub(crate) csrf: Csrf,
    /// The header's counts, kept for a few seconds.
    pub(crate) counts: Counts,
}

impl Shared {
    pub(crate) fn controls(&self) -> Option<&dyn Controls> {
        self.store.controls()
    }

    /// The job registered in code named `name`.
    pub(crate) fn job(&self, name: &str) -> Option<&JobInfo> {
        self.jobs.iter().find(|j| j.name == name)
    }
}

pub(crate) type Ctx = State<Arc<Shared>>;

/// The browser's session, as the dashboard's middleware found or started it.
impl<S: Send + Sync> FromRequestParts<S> for Session {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<Session>().cloned().ok_or_else(|| {
            Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the dashboard's session was not set: serve its pages through Dashboard::router",
            )
        })
    }
}
