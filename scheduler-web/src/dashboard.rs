//! [`Dashboard`]: what the app configures, and the router it mounts.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, OriginalUri, Request, State};
use axum::http::{HeaderValue, Method, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use scheduler_core::{JobInfo, Store};

use crate::counts::Counts;
use crate::csrf::{Csrf, Key};
use crate::problem::Problem;
use crate::shared::{Actions, MAX_BODY, MAX_TEXT, Shared};

/// The dashboard an app mounts: the store it reads, the jobs registered in code,
/// and whether operators may act.
///
/// Built with [`Dashboard::new`] and its setters, turned into an axum router by
/// [`Dashboard::router`]; see the [crate docs](crate) for mounting it behind the
/// app's authentication.
#[derive(Debug, Clone)]
pub struct Dashboard {
    store: Arc<dyn Store>,
    jobs: Vec<JobInfo>,
    node: Option<String>,
    actions: Actions,
    page_size: u32,
    min_period: Duration,
    csrf_key: Option<Key>,
    secure_cookies: bool,
    counts_max_age: Duration,
}

impl Dashboard {
    /// Rows per page of a history (runs, controls) unless [`Dashboard::page_size`]
    /// says otherwise.
    pub const DEFAULT_PAGE_SIZE: u32 = 50;

    /// The shortest `every` period the schedule form accepts unless
    /// [`Dashboard::min_period`] says otherwise: 1 s.
    pub const DEFAULT_MIN_PERIOD: Duration = Duration::from_secs(1);

    /// The most bytes of a reason (`why`) or an actor (`by`) an action records
    /// (1 KiB); a longer one is refused with `400`, changing nothing.
    pub const MAX_TEXT_BYTES: usize = MAX_TEXT;

    /// The most bytes of a request body the dashboard reads (64 KiB, a schedule's
    /// arguments included); a larger one is refused with `413`.
    pub const MAX_BODY_BYTES: usize = MAX_BODY;

    /// How old the header's counts may be when a page shows them unless
    /// [`Dashboard::counts_max_age`] says otherwise: 5 s.
    pub const DEFAULT_COUNTS_MAX_AGE: Duration = Duration::from_secs(5);

    /// A dashboard of `store` (the one the scheduler runs on; `Arc<S>` and
    /// `Arc<dyn Store>` are stores too), read-only, knowing no job yet.
    pub fn new(store: impl Store) -> Self {
        Self {
            store: Arc::new(store),
            jobs: Vec::new(),
            node: None,
            actions: Actions::default(),
            page_size: Self::DEFAULT_PAGE_SIZE,
            min_period: Self::DEFAULT_MIN_PERIOD,
            csrf_key: None,
            secure_cookies: false,
            counts_max_age: Self::DEFAULT_COUNTS_MAX_AGE,
        }
    }

    /// The jobs registered in code, as [`Scheduler::jobs`](scheduler_core::Scheduler::jobs)
    /// describes them (call it before `run_until` consumes the scheduler). Dynamic
    /// schedules are read from the store on each page.
    pub fn jobs(mut self, jobs: impl IntoIterator<Item = JobInfo>) -> Self {
        self.jobs = jobs.into_iter().collect();
        self
    }

    /// This instance's node id ([`Scheduler::node_id`](scheduler_core::Scheduler::node_id)):
    /// shown on the pages, and offered for pausing or triggering a node-scoped job on
    /// this node only.
    pub fn node(mut self, node: impl Into<String>) -> Self {
        self.node = Some(node.into());
        self
    }

    /// Whether operators may act ([`Actions::enabled`]); read-only by default.
    pub fn actions(mut self, actions: Actions) -> Self {
        self.actions = actions;
        self
    }

    /// Rows per page of a history, 1 to 1,000 (values outside are clamped).
    pub fn page_size(mut self, rows: u32) -> Self {
        self.page_size = rows.clamp(1, 1000);
        self
    }

    /// The key that signs the forms' CSRF tokens (at least 32 random bytes; e.g.
    /// read by the app from an environment variable or a secret store). Replicas
    /// given the same key accept each other's forms, and a restart keeps the open
    /// forms valid.
    ///
    /// Without one, a random key is drawn when the router is built: fine for one
    /// replica, but a form served by one replica is refused by another, and a
    /// restart refuses every form opened before it.
    pub fn csrf_key(mut self, key: impl AsRef<[u8]>) -> Self {
        self.csrf_key = Some(Key::new(key.as_ref()));
        self
    }

    /// The shortest period of an `every` schedule the schedule form accepts
    /// ([`Dashboard::DEFAULT_MIN_PERIOD`] unless said otherwise): `every 1ms`, a
    /// typo of `every 1m`, would run a thousand times a second, each run a lease and
    /// a history row. Lower it only for jobs meant to run that often. (The store
    /// itself accepts any period of at least 1 ms: this guards the form only.)
    pub fn min_period(mut self, period: Duration) -> Self {
        self.min_period = period;
        self
    }

    /// Whether the dashboard is served over HTTPS (directly or behind a proxy that
    /// ends TLS): its session cookie is then `Secure`, never sent over plain HTTP.
    /// Off by default.
    pub fn secure_cookies(mut self, secure: bool) -> Self {
        self.secure_cookies = secure;
        self
    }

    /// How old the counts of the header (jobs, paused, running, failing) may be
    /// when a page shows them ([`Dashboard::DEFAULT_COUNTS_MAX_AGE`] unless said
    /// otherwise). They take four reads of the store, which at 100,000 schedules
    /// cost more than most pages, so each replica reads them at most this often and
    /// shows them in between; an action taken through this replica reads them again
    /// on the next page. `Duration::ZERO` reads them on every page.
    pub fn counts_max_age(mut self, max_age: Duration) -> Self {
        self.counts_max_age = max_age;
        self
    }

    /// The dashboard at `path` (`/admin/scheduler`), as a router the app merges
    /// into its own (`app.merge(dashboard.mount("/admin/scheduler"))`): both
    /// `/admin/scheduler` and `/admin/scheduler/` lead to the jobs page. (Axum's
    /// `Router::nest` of a router routes `/admin/scheduler` but leaves
    /// `/admin/scheduler/` to the app's fallback; `nest_service`, used here, routes
    /// both.) Wrap the returned router in the app's auth layer like any other.
    ///
    /// # Panics
    /// As axum's `nest_service` does, when `path` is empty, `/`, or holds a
    /// wildcard.
    pub fn mount<S>(self, path: &str) -> Router<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        Router::new().nest_service(path, self.router::<()>())
    }

    /// The router to nest under a path of the app's choice
    /// (`Router::new().nest_service("/scheduler", dashboard.router::<()>())`, which
    /// [`Dashboard::mount`] does), for a router of any state type. Its CSRF key, when
    /// the app gave none, is drawn here, once. (With `Router::nest` instead, axum
    /// routes `/scheduler` but leaves `/scheduler/` to the app's fallback.)
    pub fn router<S>(self) -> Router<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        let shared = Arc::new(Shared {
            store: self.store,
            jobs: self.jobs,
            node: self.node,
            actions: self.actions,
            page_size: self.page_size,
            min_period: self.min_period,
            csrf: Csrf::new(self.csrf_key.as_ref(), self.secure_cookies),
            counts: Counts::new(self.counts_max_age),
        });
        Router::new()
            .route("/", get(home))
            .route("/jobs", get(crate::jobs::show))
            .route("/leases", get(crate::leases::show))
            .route("/audit", get(crate::audit::show))
            .route("/failures", get(crate::failures::show))
            .route("/instances", get(crate::instances::show))
            .route("/job", get(crate::history::job))
            .route(
                "/trigger",
                get(crate::history::trigger).post(crate::actions::trigger),
            )
            .route(
                "/schedule",
                get(crate::actions::schedule_form).post(crate::actions::put_schedule),
            )
            .route("/pause", post(crate::actions::pause))
            .route("/resume", post(crate::actions::resume))
            .route("/remove-schedule", post(crate::actions::remove_schedule))
            .fallback(crate::problem::not_found)
            .layer(DefaultBodyLimit::max(MAX_BODY))
            .layer(middleware::from_fn_with_state(shared.clone(), headers))
            .with_state(shared)
    }
}

/// The prefix itself: a redirect to `jobs`, relative to where the request came in
/// (`/scheduler` → `scheduler/jobs`, `/scheduler/` → `jobs`), so that every page is
/// a sibling of every other and their links are plain relative ones.
async fn home(OriginalUri(original): OriginalUri) -> Redirect {
    Redirect::to(&crate::link::home_to_jobs(original.path()))
}

/// The browser's session for the handlers; read-only refusals before the body is
/// read; and headers on every answer: no caching, no framing, no script, and the
/// session cookie when actions are enabled and the request carried none.
async fn headers(State(shared): State<Arc<Shared>>, mut req: Request, next: Next) -> Response {
    let session = shared.csrf.session(req.headers());
    let read = matches!(*req.method(), Method::GET | Method::HEAD);
    let mut res = if !shared.actions.is_enabled() && !read {
        // Neither `100 Continue` nor a byte of the body: the answer is known.
        Problem::read_only().into_response()
    } else if read {
        // A page: its frame (refresh, header counts) first.
        match crate::header::read(&shared, req.uri().path(), req.uri().query()).await {
            Ok(frame) => {
                req.extensions_mut().insert(session.clone());
                frame.scope(next.run(req)).await.into_response()
            }
            Err(problem) => problem.into_response(),
        }
    } else {
        req.extensions_mut().insert(session.clone());
        let res = next.run(req).await.into_response();
        // An action may have changed what the header counts.
        shared.counts.forget();
        res
    };
    let h = res.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; \
             frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    if shared.actions.is_enabled()
        && let Some(cookie) = shared.csrf.set_cookie(&session)
        && let Ok(cookie) = HeaderValue::from_str(&cookie)
    {
        h.append(header::SET_COOKIE, cookie);
    }
    res
}
