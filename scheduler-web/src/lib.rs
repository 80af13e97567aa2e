//! A dashboard for `scheduler-core` that an axum app mounts: server-rendered pages
//! of the jobs, the leases, each job's runs and the controls applied to it, and —
//! only when the app enables them — the operator's actions: pause, resume, trigger
//! now, and dynamic schedules added, changed or removed.
//!
//! The dashboard is an axum [`Router`](axum::Router) the app nests under a path of
//! its choice and wraps in its own authentication: the dashboard has none of its
//! own. Every link and redirect it emits is relative, so it works under any prefix.
//!
//! # Quick start
//!
//! ```
//! use std::sync::Arc;
//!
//! use axum::Router;
//! use scheduler_core::{MemoryStore, Scheduler};
//! use scheduler_web::{Actions, Dashboard};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Arc::new(MemoryStore::new());
//! let scheduler = Scheduler::builder(store.clone()).build()?;
//! let dashboard = Dashboard::new(store)
//!     .jobs(scheduler.jobs()) // before `run_until` consumes the scheduler
//!     .node(scheduler.node_id())
//!     .actions(Actions::enabled()) // read-only without this line
//!     .csrf_key(b"one secret for every replica, from the app's config"); // see CSRF below
//! // `mount` answers `/scheduler` and `/scheduler/` alike (a plain `nest` of
//! // `dashboard.router()` leaves `/scheduler/` to the app's fallback).
//! let app: Router = Router::new().merge(dashboard.mount("/scheduler"));
//! // axum::serve(listener, app).await?; with the scheduler run beside it
//! # let _ = app;
//! # Ok(())
//! # }
//! ```
//!
//! # Authentication, and who did what
//!
//! The app's own auth layer guards the dashboard, and says who the operator is by
//! inserting an [`Actor`] into the request's extensions: every control the
//! dashboard applies is recorded with that actor (`web` when none is set).
//!
//! ```
//! use axum::Router;
//! use axum::extract::Request;
//! use axum::http::StatusCode;
//! use axum::middleware::{self, Next};
//! use axum::response::Response;
//! use scheduler_web::{Actor, Dashboard};
//!
//! async fn operators_only(mut req: Request, next: Next) -> Result<Response, StatusCode> {
//!     // Your session check here; this one trusts a header set by a proxy.
//!     let user = req
//!         .headers()
//!         .get("x-forwarded-user")
//!         .and_then(|v| v.to_str().ok())
//!         .ok_or(StatusCode::UNAUTHORIZED)?
//!         .to_owned();
//!     req.extensions_mut().insert(Actor(format!("web:{user}")));
//!     Ok(next.run(req).await)
//! }
//!
//! fn app(dashboard: Dashboard) -> Router {
//!     Router::new().merge(
//!         dashboard
//!             .mount("/scheduler")
//!             .layer(middleware::from_fn(operators_only)),
//!     )
//! }
//! ```
//!
//! # What it guarantees
//!
//! - **Read-only by default.** Without [`Actions::enabled`] no form is rendered and
//!   every `POST` answers `403 Forbidden` before its body is read, changing nothing.
//! - **CSRF.** Each browser gets a session cookie of its own (`SameSite=Strict`,
//!   `HttpOnly`, and `Secure` with [`Dashboard::secure_cookies`]), and each action
//!   form a token signed for that session with the dashboard's key (HMAC-SHA-256);
//!   a `POST` whose field or cookie is missing, or whose token is not its session's,
//!   is refused with `403`. Give every replica the same [`Dashboard::csrf_key`] so
//!   they accept each other's forms and a restart keeps open forms valid; without
//!   one the key is random (one replica only). Pages are sent with a
//!   `Content-Security-Policy` that allows no script and no framing.
//! - **Escaping.** Every value read from the store or the jobs (names, errors,
//!   reasons, arguments) is HTML-escaped by the templates: a job named `<script>` is
//!   shown as text.
//! - **Limits.** A reason (`why`) or an actor over 1 KiB is refused (`400`), a
//!   request body over 64 KiB too (`413`) ([`Dashboard::MAX_TEXT_BYTES`],
//!   [`Dashboard::MAX_BODY_BYTES`]); an address whose query a page cannot read is
//!   a `400`. The schedule form refuses (`422`) an `every` period under 1 s
//!   ([`Dashboard::min_period`]) and a time zone given with an `every` schedule. A
//!   trigger of a paused job runs only when the form says so (`409` otherwise), and
//!   is recorded as `trigger_while_paused`. The store keeps the same limits for
//!   every entry (API, CLI, dashboard) and its check is the one that holds: its
//!   `min_schedule_period` (1 s by default) refuses a shorter period (`422`) even
//!   when [`Dashboard::min_period`] is lower, so lower both.
//!   Every refusal is a page in words, with the same headers as the others.
//! - **No JavaScript.** Pages are plain HTML with a little inline CSS; a triggered
//!   run's page refreshes itself with a `<meta>` refresh until the run is done.
//!
//! # Pages
//!
//! Every page has the navigation, a header counting the jobs, the paused, running
//! and failing ones (each a link to the jobs page filtered that way), and an
//! auto-refresh the operator opts into: `refresh=5`, `15` or `60` in any page's
//! address (a `<meta>` refresh, kept by the page's links; another value is a `400`).
//!
//! Under the nest prefix: `jobs[?q=TEXT&state=failing|paused|late|running&handler=H&node=N]`
//! (the prefix itself redirects there; the dynamic schedules paged both ways with
//! `after=NAME`, `before=NAME` or `page=last`), `leases` (by name, paged both ways
//! and counted, searched, filtered by node and by held), `failures` (the runs that
//! did not succeed, every job's, newest first, filtered by job and node), `audit`
//! (every control applied: who, when, why), `instances` (live, stopped or gone,
//! with what each runs), `job?name=NAME` (one job's runs and controls, paged),
//! `trigger?id=N` (a triggered run; it warns when no live instance runs the job),
//! `schedule[?name=NAME]` (the form of a dynamic schedule, actions only); the
//! actions `POST` to `pause`, `resume`, `trigger`, `schedule` and
//! `remove-schedule`, then redirect (303) to a page.
//!
//! The history and leases pages need a store with controls
//! ([`Store::controls`](scheduler_core::Store::controls)); runs are listed when the
//! store keeps a run history.
#![deny(missing_docs)]
#![warn(missing_debug_implementations, unreachable_pub)]

mod actions;
mod audit;
mod chart;
mod counts;
mod csrf;
mod dashboard;
mod failures;
mod frame;
mod header;
mod history;
mod instances;
mod jobs;
mod layout;
mod leases;
mod link;
mod listing;
mod problem;
mod query;
mod shared;
mod words;

pub use dashboard::Dashboard;
pub use shared::{Actions, Actor};
