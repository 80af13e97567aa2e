//! What the handler tests share: a store with controls kept in memory (the lease
//! rules are `MemoryStore`'s), a dashboard router over it, and requests sent with
//! `tower::ServiceExt::oneshot`.
#![allow(dead_code, clippy::expect_used, clippy::unwrap_used, unreachable_pub)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, Response, StatusCode, header};
use chrono::{DateTime, TimeDelta, Utc};
use scheduler_core::control::DEFAULT_MIN_SCHEDULE_PERIOD;
use scheduler_core::{
    BoxError, ControlAction, ControlRecord, ControlRequest, ControlState, Controls, Error, Holder,
    Idempotent, InstanceRow, JobContext, Lease, LeaseKey, LeaseName, LeaseRow, ListQuery, Listing,
    MemoryStore, Outcome, Page, Pause, Release, Renewed, Result, Resume, RunRow, Schedule,
    ScheduleRow, Scheduler, Store, TakeRequest, Taken, Trigger, TriggerId, TriggerState, Ttl,
    async_trait,
};
use scheduler_web::{Actions, Dashboard};
use tower::ServiceExt as _;

pub mod browser;

/// A store whose controls live in memory: pauses, triggers, schedules, handlers,
/// the record of controls, and runs and leases the test puts there.
#[derive(Debug, Default)]
pub struct FakeStore {
    leases: MemoryStore,
    pub state: Mutex<FakeState>,
    /// Reads of every dynamic schedule (`schedules()`, `poll(None)`): what no page
    /// may make.
    pub full_reads: AtomicUsize,
    /// The shortest `every` period a put may have, as a store's
    /// `min_schedule_period` (default 1 s).
    pub min_period: Mutex<Option<std::time::Duration>>,
}

#[derive(Debug, Default)]
pub struct FakeState {
    pub version: i64,
    pub paused: Vec<Pause>,
    pub records: Vec<ControlRecord>,
    pub triggers: Vec<Trigger>,
    pub schedules: Vec<ScheduleRow>,
    pub handlers: Vec<String>,
    /// The jobs instances registered (`register_jobs`).
    pub registered: Vec<String>,
    pub runs: Vec<RunRow>,
    pub leases: Vec<LeaseRow>,
    pub instances: Vec<InstanceRow>,
}

impl FakeStore {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn now() -> DateTime<Utc> {
        Utc::now()
    }

    /// A run of `job`, `late` after its tick, taking `took`.
    pub fn add_run(&self, job: &str, outcome: Outcome, error: Option<&str>) -> i64 {
        let mut s = self.state.lock().unwrap();
        let id = s.runs.len() as i64 + 1;
        let tick = Utc::now() - TimeDelta::seconds(60) + TimeDelta::seconds(id);
        s.runs.push(RunRow {
            id,
            job: job.to_owned(),
            tick,
            node: "node-a".to_owned(),
            token: id,
            started: tick + TimeDelta::milliseconds(3),
            finished: tick + TimeDelta::milliseconds(250),
            outcome,
            error: error.map(str::to_owned),
            attempt: 1,
        });
        id
    }

    pub fn add_lease(&self, name: &str, holder: Option<&str>) {
        let now = Utc::now();
        self.state.lock().unwrap().leases.push(LeaseRow {
            name: name.to_owned(),
            holder: holder.map(str::to_owned),
            tick: now,
            token: 7,
            expires_at: now + TimeDelta::seconds(30),
            released_at: None,
        });
    }

    pub fn register(&self, handler: &str) {
        self.state.lock().unwrap().handlers.push(handler.to_owned());
    }

    pub fn records(&self) -> Vec<ControlRecord> {
        self.state.lock().unwrap().records.clone()
    }

    pub fn paused(&self) -> Vec<Pause> {
        self.state.lock().unwrap().paused.clone()
    }

    fn record(
        s: &mut FakeState,
        req: &ControlRequest,
        action: ControlAction,
        detail: String,
    ) -> ControlRecord {
        s.version += 1;
        let record = ControlRecord {
            id: s.records.len() as i64 + 1,
            at: Utc::now(),
            job: req.job.clone(),
            node: req.node.clone(),
            action,
            by: req.by.clone(),
            why: req.why.clone(),
            detail,
        };
        s.records.push(record.clone());
        record
    }
}

fn newest_first<T: Clone>(
    items: &[T],
    id: impl Fn(&T) -> i64,
    keep: impl Fn(&T) -> bool,
    page: Page,
) -> Vec<T> {
    let mut out: Vec<T> = items
        .iter()
        .filter(|i| keep(i) && page.before.is_none_or(|b| id(i) < b))
        .cloned()
        .collect();
    out.sort_by_key(|i| std::cmp::Reverse(id(i)));
    out.truncate(page.limit as usize);
    out
}

#[async_trait]
impl Store for FakeStore {
    async fn take(&self, requests: &[TakeRequest], ttl: Ttl) -> Result<Taken> {
        self.leases.take(requests, ttl).await
    }
    async fn renew(&self, leases: &[LeaseKey], ttl: Ttl) -> Result<Vec<Renewed>> {
        self.leases.renew(leases, ttl).await
    }
    async fn release(&self, leases: &[LeaseKey], how: Release) -> Result<Vec<LeaseName>> {
        self.leases.release(leases, how).await
    }
    async fn now(&self) -> Result<DateTime<Utc>> {
        Ok(Utc::now())
    }
    fn controls(&self) -> Option<&dyn Controls> {
        Some(self)
    }
}

#[async_trait]
impl Controls for FakeStore {
    async fn pause(&self, req: &ControlRequest) -> Result<ControlRecord> {
        req.check()?;
        let mut s = self.state.lock().unwrap();
        if !s
            .paused
            .iter()
            .any(|p| p.job == req.job && p.node == req.node)
        {
            s.paused.push(Pause {
                job: req.job.clone(),
                node: req.node.clone(),
                since: Utc::now(),
                by: req.by.clone(),
                why: req.why.clone(),
            });
        }
        Ok(Self::record(
            &mut s,
            req,
            ControlAction::Pause,
            String::new(),
        ))
    }

    async fn resume(&self, req: &ControlRequest, catch_up: bool) -> Result<ControlRecord> {
        req.check()?;
        let mut s = self.state.lock().unwrap();
        s.paused
            .retain(|p| !(p.job == req.job && p.node == req.node));
        let action = if catch_up {
            ControlAction::Resume
        } else {
            ControlAction::ResumeWithoutCatchUp
        };
        Ok(Self::record(&mut s, req, action, String::new()))
    }

    async fn trigger(&self, req: &ControlRequest) -> Result<Trigger> {
        req.check()?;
        let mut s = self.state.lock().unwrap();
        let action = scheduler_core::control::trigger_action(req, &s.paused)?;
        let trigger = Trigger {
            id: TriggerId(s.triggers.len() as i64 + 1),
            job: req.job.clone(),
            node: req.node.clone(),
            requested_at: Utc::now(),
            by: req.by.clone(),
            why: req.why.clone(),
            state: TriggerState::Pending,
        };
        s.triggers.push(trigger.clone());
        Self::record(&mut s, req, action, trigger.id.to_string());
        Ok(trigger)
    }

    async fn trigger_status(&self, id: TriggerId) -> Result<Option<Trigger>> {
        Ok(self
            .state
            .lock()
            .unwrap()
            .triggers
            .iter()
            .find(|t| t.id == id)
            .cloned())
    }

    async fn claim_trigger(
        &self,
        _: TriggerId,
        _: &LeaseName,
        _: &Holder,
        _: Ttl,
    ) -> Result<Option<Lease>> {
        Ok(None)
    }

    async fn finish_trigger(
        &self,
        _: TriggerId,
        _: Option<&Holder>,
        _: Outcome,
        _: Option<&str>,
    ) -> Result<bool> {
        Ok(false)
    }

    async fn control_history(&self, job: Option<&str>, page: Page) -> Result<Vec<ControlRecord>> {
        let s = self.state.lock().unwrap();
        Ok(newest_first(
            &s.records,
            |r| r.id,
            |r| job.is_none_or(|j| r.job == j),
            page,
        ))
    }

    async fn poll(&self, since: Option<i64>) -> Result<Option<ControlState>> {
        if since.is_none() {
            self.full_reads.fetch_add(1, Ordering::Relaxed);
        }
        let s = self.state.lock().unwrap();
        if since.is_some_and(|v| v >= s.version) {
            return Ok(None);
        }
        Ok(Some(ControlState {
            version: s.version,
            paused: s.paused.clone(),
            resumed: Vec::<Resume>::new(),
            triggers: s
                .triggers
                .iter()
                .filter(|t| !matches!(t.state, TriggerState::Done { .. }))
                .cloned()
                .collect(),
            schedules: s.schedules.clone(),
        }))
    }

    async fn put_schedule(&self, row: &ScheduleRow, by: &str, why: &str) -> Result<ControlRecord> {
        // The rules every store keeps.
        let min = self
            .min_period
            .lock()
            .unwrap()
            .unwrap_or(DEFAULT_MIN_SCHEDULE_PERIOD);
        row.check_with_min_period(min)?;
        scheduler_core::control::check_by_why(by, why)?;
        let mut s = self.state.lock().unwrap();
        if !s.handlers.contains(&row.handler) {
            let known = if s.handlers.is_empty() {
                "none".to_owned()
            } else {
                s.handlers.join(", ")
            };
            return Err(Error::UnknownHandler {
                handler: row.handler.clone(),
                known,
            });
        }
        s.schedules.retain(|r| r.name != row.name);
        let mut stored = row.clone();
        stored.updated_at = Some(Utc::now());
        s.schedules.push(stored);
        let req = ControlRequest::new(row.name.as_str(), by).why(why);
        Ok(Self::record(
            &mut s,
            &req,
            ControlAction::SchedulePut,
            row.schedule.clone(),
        ))
    }

    async fn remove_schedule(
        &self,
        name: &str,
        by: &str,
        why: &str,
    ) -> Result<Option<ControlRecord>> {
        let mut s = self.state.lock().unwrap();
        let before = s.schedules.len();
        s.schedules.retain(|r| r.name != name);
        if s.schedules.len() == before {
            return Ok(None);
        }
        let req = ControlRequest::new(name, by).why(why);
        Ok(Some(Self::record(
            &mut s,
            &req,
            ControlAction::ScheduleRemove,
            String::new(),
        )))
    }

    async fn schedules(&self) -> Result<Vec<ScheduleRow>> {
        self.full_reads.fetch_add(1, Ordering::Relaxed);
        let mut rows = self.state.lock().unwrap().schedules.clone();
        rows.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(rows)
    }

    async fn paused(&self) -> Result<Vec<Pause>> {
        Ok(self.state.lock().unwrap().paused.clone())
    }

    async fn open_triggers(&self) -> Result<Vec<Trigger>> {
        let s = self.state.lock().unwrap();
        Ok(s.triggers
            .iter()
            .filter(|t| !matches!(t.state, TriggerState::Done { .. }))
            .cloned()
            .collect())
    }

    async fn schedule(&self, name: &str) -> Result<Option<ScheduleRow>> {
        let s = self.state.lock().unwrap();
        Ok(s.schedules.iter().find(|r| r.name == name).cloned())
    }

    async fn schedules_page(&self, after: Option<&str>, limit: u32) -> Result<Vec<ScheduleRow>> {
        let s = self.state.lock().unwrap();
        let mut rows: Vec<ScheduleRow> = s
            .schedules
            .iter()
            .filter(|r| after.is_none_or(|after| r.name.as_str() > after))
            .cloned()
            .collect();
        rows.sort_by(|a, b| a.name.cmp(&b.name));
        rows.truncate(limit as usize);
        Ok(rows)
    }

    async fn register_handlers(&self, _: &str, names: &[String]) -> Result<()> {
        self.state
            .lock()
            .unwrap()
            .handlers
            .extend(names.iter().cloned());
        Ok(())
    }

    async fn handlers(&self) -> Result<Vec<String>> {
        Ok(self.state.lock().unwrap().handlers.clone())
    }

    // As the stores do: a page read from the rows, never a full read.
    async fn schedules_listing(&self, q: &ListQuery) -> Result<Listing<ScheduleRow>> {
        let rows = self.state.lock().unwrap().schedules.clone();
        Ok(scheduler_core::control::listing::schedules_of(rows, q))
    }

    async fn leases_listing(&self, q: &ListQuery) -> Result<Listing<LeaseRow>> {
        let rows = self.state.lock().unwrap().leases.clone();
        Ok(scheduler_core::control::listing::leases_of(
            rows,
            q,
            Utc::now(),
        ))
    }

    async fn failing_jobs(&self) -> Result<Vec<String>> {
        let s = self.state.lock().unwrap();
        let mut latest: std::collections::BTreeMap<&str, &RunRow> = Default::default();
        for run in &s.runs {
            if latest.get(run.job.as_str()).is_none_or(|r| r.id < run.id) {
                latest.insert(&run.job, run);
            }
        }
        Ok(latest
            .into_iter()
            .filter(|(_, r)| r.outcome.is_failure())
            .map(|(job, _)| job.to_owned())
            .collect())
    }

    async fn register_jobs(&self, _: &str, names: &[String]) -> Result<()> {
        let mut s = self.state.lock().unwrap();
        s.registered.extend(names.iter().cloned());
        s.registered.sort();
        s.registered.dedup();
        Ok(())
    }

    async fn jobs(&self) -> Result<Vec<String>> {
        Ok(self.state.lock().unwrap().registered.clone())
    }

    async fn leases(&self) -> Result<Vec<LeaseRow>> {
        Ok(self.state.lock().unwrap().leases.clone())
    }

    async fn instances(&self) -> Result<Vec<InstanceRow>> {
        Ok(self.state.lock().unwrap().instances.clone())
    }

    async fn runs(&self, job: Option<&str>, page: Page) -> Result<Vec<RunRow>> {
        let s = self.state.lock().unwrap();
        Ok(newest_first(
            &s.runs,
            |r| r.id,
            |r| job.is_none_or(|j| r.job == j),
            page,
        ))
    }
}

/// A store that keeps leases and no controls.
#[derive(Debug)]
pub struct NoControls(pub MemoryStore);

#[async_trait]
impl Store for NoControls {
    async fn take(&self, requests: &[TakeRequest], ttl: Ttl) -> Result<Taken> {
        self.0.take(requests, ttl).await
    }
    async fn renew(&self, leases: &[LeaseKey], ttl: Ttl) -> Result<Vec<Renewed>> {
        self.0.renew(leases, ttl).await
    }
    async fn release(&self, leases: &[LeaseKey], how: Release) -> Result<Vec<LeaseName>> {
        self.0.release(leases, how).await
    }
    async fn now(&self) -> Result<DateTime<Utc>> {
        self.0.now().await
    }
}

/// A job that does nothing, every `every`.
#[derive(Debug)]
pub struct Noop {
    pub name: String,
    pub every: Duration,
}

#[async_trait]
impl Idempotent for Noop {
    fn name(&self) -> &str {
        &self.name
    }
    fn schedule(&self) -> Schedule {
        Schedule::every(self.every)
    }
    async fn run(&self, _ctx: JobContext) -> std::result::Result<(), BoxError> {
        Ok(())
    }
}

/// The jobs named `names`, as a scheduler on `store` describes them.
pub fn jobs(store: &Arc<FakeStore>, names: &[&str]) -> Vec<scheduler_core::JobInfo> {
    let mut builder = Scheduler::builder(store.clone()).node_id("node-a");
    for name in names {
        builder = builder.job(Noop {
            name: (*name).to_owned(),
            every: Duration::from_secs(30),
        });
    }
    builder.build().unwrap().jobs()
}

/// The dashboard of `store` with jobs `names`, actions as given, nested at
/// `/scheduler` as an app would.
pub fn app(store: &Arc<FakeStore>, names: &[&str], actions: Actions) -> Router {
    let dashboard = Dashboard::new(store.clone())
        .jobs(jobs(store, names))
        .node("node-a")
        .actions(actions)
        .page_size(3);
    Router::new().nest("/scheduler", dashboard.router())
}

/// The answer to `GET path`: status, headers, body text.
pub async fn get(app: &Router, path: &str) -> (StatusCode, Response<()>, String) {
    let req = Request::get(path).body(Body::empty()).unwrap();
    send(app, req).await
}

/// The answer to a form `POST` of `fields` to `path`, with `cookie` if given.
pub async fn post(
    app: &Router,
    path: &str,
    fields: &[(&str, &str)],
    cookie: Option<&str>,
) -> (StatusCode, Response<()>, String) {
    let body = fields
        .iter()
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect::<Vec<_>>()
        .join("&");
    let mut req =
        Request::post(path).header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    if let Some(cookie) = cookie {
        req = req.header(header::COOKIE, cookie);
    }
    send(app, req.body(Body::from(body)).unwrap()).await
}

/// The answer to `req`: status, headers, body text.
pub async fn send(app: &Router, req: Request<Body>) -> (StatusCode, Response<()>, String) {
    let res = app.clone().oneshot(req).await.unwrap();
    let (parts, body) = res.into_parts();
    let bytes = axum::body::to_bytes(body, 10 << 20).await.unwrap();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    (parts.status, Response::from_parts(parts, ()), text)
}

fn encode(v: &str) -> String {
    v.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The CSRF token of a page: its cookie (`name=value`) and its form field.
pub async fn csrf(app: &Router) -> (String, String) {
    let (status, res, body) = get(app, "/scheduler/jobs").await;
    assert_eq!(status, StatusCode::OK);
    let cookie = res
        .headers()
        .get(header::SET_COOKIE)
        .expect("a CSRF cookie")
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let field = body
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .expect("a CSRF field")
        .split('"')
        .next()
        .unwrap()
        .to_owned();
    (cookie, field)
}
