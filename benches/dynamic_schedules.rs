//! Issue 17's scale target: 100,000 dynamic schedules on three instances against a
//! real PostgreSQL server.
//!
//! The scenario: 100,000 per-tenant daily reports (cron, UTC, tenant `k` at second
//! `k·86400/100000` of the day), 1,000 hourly reports (spread over the hour) and
//! 1,000 every-minute schedules (cron, spread over the minute's seconds), stored through [`Controls::put_schedule`] before any
//! instance starts (the time that takes is reported). Then three instances, each an
//! OS process of its own (this binary run again with [`CHILD_ENV`] set, connected as
//! a database role of its own), each registering the two handlers; a run does about
//! 1 ms of CPU work and records its job, tick and start in memory.
//!
//! Reported:
//! - start-up per instance: from spawn until its first poll had applied every row
//!   (counted from the runtime's `dynamic schedule running` log events), the first
//!   poll's read, the CPU spent and the memory held by then;
//! - over a measured window (3 minutes by default) opened once all instances are
//!   ready: every tick due in it, computed here from the stored schedule texts with
//!   the `cron` crate (not the scheduler's own arithmetic), checked to have run
//!   exactly once across the instances (expected, ran, duplicates, missed, runs of
//!   no expected tick); lateness (tick instant to the handler's start) p50/p99/max;
//!   per instance the statements per second (`pg_stat_statements`, by the
//!   instance's role; the throwaway server is restarted with the library preloaded),
//!   its store calls by kind, its CPU (utime + stime from `/proc/PID/stat`, what
//!   `getrusage` reports) as a share of one core, and its resident memory (peak).
//!
//! Runs against a throwaway server of its own, or `DATABASE_URL`'s (then without
//! per-role statement counts unless `pg_stat_statements` is already loaded there).
//! Sizes and durations from the environment: `DYNAMIC_SCHEDULES_DAILY` (100000),
//! `DYNAMIC_SCHEDULES_HOURLY` (a hundredth of the daily rows: hourly reports, each at a
//! second of the hour spread over it), `DYNAMIC_SCHEDULES_MINUTELY` (1000),
//! `DYNAMIC_SCHEDULES_INSTANCES` (3),
//! `DYNAMIC_SCHEDULES_WINDOW_SECS` (180), `DYNAMIC_SCHEDULES_PUT_TASKS` (concurrent
//! `put_schedule` callers, 4), `DYNAMIC_SCHEDULES_STARTUP_LIMIT_SECS` (600),
//! `DYNAMIC_SCHEDULES_POLL_MS` (the instances' control poll, 5000: the default).
//! `DYNAMIC_SCHEDULES_LOAD=bulk` stores the rows with the bench's own chunked
//! `INSERT`s instead of `put_schedule` (a quicker set-up; the report says so).
//! Rows whose first tick passes while they are stored are due when the instances
//! start: that backlog (a million rows take about half a minute to store, ten
//! million five) is caught up by the instances as they start, and the report counts
//! it. `DYNAMIC_SCHEDULES_BACKLOG=0` (PostgreSQL) moves those rows' bounds to their
//! next tick instead, as a fleet that had been running would have left them, so that
//! start-up measures loading the rows alone.
//! `DYNAMIC_SCHEDULES_KILL_AT_SECS=N` kills instance 0 (SIGKILL) N seconds into the
//! window and reports the ticks due after it: each run once, by whom, how late.
//! The instances load the rows as they come due (the default:
//! `SchedulerBuilder::load_schedules_when_due`): an instance is ready once the rows
//! of its first look-ahead are read and applied. `DYNAMIC_SCHEDULES_WHEN_DUE=0` has
//! each load every row at start-up instead.
//! `DYNAMIC_SCHEDULES_IMPORT_AT_SECS=N` puts `DYNAMIC_SCHEDULES_IMPORT_ROWS`
//! (1,000,000) more rows through `put_schedules` N seconds into the window, none
//! due in it: a bulk import into running instances.
//! `DYNAMIC_SCHEDULES_STORE=sqlite` runs the instances on one SQLite file instead
//! (the rows stored with `put_schedules` under `bulk`; no statement or transaction
//! counts, which are PostgreSQL's statistics).
//! An instance's warnings and errors go to a log file whose path is printed.
//!
//! `cargo bench -p scheduler-benches --bench dynamic_schedules`; the million-row
//! case on three instances, one killed half-way:
//! `DYNAMIC_SCHEDULES_DAILY=1000000 DYNAMIC_SCHEDULES_MINUTELY=10000
//! DYNAMIC_SCHEDULES_LOAD=bulk DYNAMIC_SCHEDULES_KILL_AT_SECS=90 cargo bench -p
//! scheduler-benches --bench dynamic_schedules`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use scheduler_core::{
    ControlRecord, ControlRequest, ControlState, Controls, Holder, Lease, LeaseKey, LeaseName,
    LeaseRow, Outcome, Page, Pause, Release, Renewed, RunRow, ScheduleRow, Scheduler, Store,
    TakeRequest, Taken, Tick, Trigger, TriggerId, Ttl,
};
use scheduler_postgres::{PostgresOptions, PostgresStore};
use scheduler_sqlite::{SqliteOptions, SqliteStore};
use sea_orm::{ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement};
use serde_json::{Value, json};

/// Set (to the instance's index) when this binary runs as one instance.
const CHILD_ENV: &str = "DYNAMIC_SCHEDULES_INSTANCE";

/// The handler of the daily reports, and of the every-minute schedules.
const REPORT: &str = "report";
const MINUTE: &str = "minute";

/// How long after the window closes the instances keep running, so that the
/// window's last ticks start however late they are.
const GRACE: Duration = Duration::from_secs(10);

/// The CPU work of one run.
const WORK: Duration = Duration::from_millis(1);

/// Clock ticks per second of `/proc/PID/stat`'s CPU times (`USER_HZ`, 100 on Linux).
const USER_HZ: f64 = 100.0;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn now_us() -> i64 {
    Utc::now().timestamp_micros()
}

/// The rows' mix: `daily` reports spread over the day, `hourly` ones spread over
/// the hour, `minutely` schedules spread over the minute. A row's index runs over
/// the daily rows first, then the hourly, then the every-minute ones.
#[derive(Clone, Copy, Debug)]
struct Mix {
    daily: u64,
    hourly: u64,
    minutely: u64,
}

impl Mix {
    fn total(self) -> u64 {
        self.daily + self.hourly + self.minutely
    }

    /// Which of the three a row is: 0 daily, 1 hourly, 2 every minute.
    fn kind(self, index: u64) -> usize {
        if index < self.daily {
            0
        } else if index < self.daily + self.hourly {
            1
        } else {
            2
        }
    }

    /// Row `index`'s name.
    fn name(self, index: u64) -> String {
        match self.kind(index) {
            0 => format!("report-{index:06}"),
            1 => format!("hourly-{:06}", index - self.daily),
            _ => format!("minute-{:04}", index - self.daily - self.hourly),
        }
    }

    /// The index of the row named `name` (see [`Mix::name`]).
    fn index(self, name: &str) -> Option<u32> {
        let (kind, k) = name.split_once('-')?;
        let k = k.parse::<u64>().ok()?;
        let index = match kind {
            "report" => k,
            "hourly" => self.daily + k,
            "minute" => self.daily + self.hourly + k,
            _ => return None,
        };
        u32::try_from(index).ok()
    }

    /// The schedule rows, in index order.
    fn rows(self) -> Vec<ScheduleRow> {
        let mut rows = Vec::with_capacity(usize::try_from(self.total()).unwrap());
        for k in 0..self.daily {
            let second = k * 86_400 / self.daily;
            let cron = format!(
                "{} {} {} * * *",
                second % 60,
                second / 60 % 60,
                second / 3600
            );
            let mut row = ScheduleRow::new(self.name(k), REPORT, cron);
            row.args = format!(r#"{{"tenant": {k}}}"#);
            rows.push(row);
        }
        for h in 0..self.hourly {
            let second = h * 3_600 / self.hourly;
            let cron = format!("{} {} * * * *", second % 60, second / 60);
            let mut row = ScheduleRow::new(self.name(self.daily + h), REPORT, cron);
            row.args = format!(r#"{{"tenant": {h}}}"#);
            rows.push(row);
        }
        for j in 0..self.minutely {
            let cron = format!("{} * * * * *", j * 60 / self.minutely);
            let name = self.name(self.daily + self.hourly + j);
            rows.push(ScheduleRow::new(name, MINUTE, cron));
        }
        rows
    }
}

/// CPU seconds (utime + stime) of process `pid`, from `/proc/PID/stat`.
fn cpu_secs(pid: &str) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return f64::NAN;
    };
    // The fields after the command name (which may hold spaces) in parentheses.
    let Some(rest) = stat.rsplit_once(')').map(|(_, rest)| rest) else {
        return f64::NAN;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after `)`.
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    match (ticks(11), ticks(12)) {
        (Some(user), Some(system)) => (user + system) / USER_HZ,
        _ => f64::NAN,
    }
}

/// A `/proc/PID/status` line's value in kB (`VmHWM`: the peak resident set, what
/// `getrusage` reports as the maximum RSS; `VmRSS`: now).
fn status_kb(pid: &str, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(':').map(str::to_owned))
        })
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn main() {
    if let Ok(index) = std::env::var(CHILD_ENV) {
        instance::run(&index);
        return;
    }
    // `cargo bench -- NAME` runs only the benches whose name matches.
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    if !filters.is_empty()
        && !filters
            .iter()
            .any(|f| "dynamic_schedules".contains(f.as_str()))
    {
        return;
    }
    coordinator::run();
}

/// A store that counts (and for the first changed poll, times) the calls made
/// through it: the instance's own view of what it sends.
#[derive(Debug)]
struct Metered {
    inner: Box<dyn Store>,
    calls: Arc<Calls>,
}

impl Metered {
    /// The inner store's controls (both stores have them).
    fn c(&self) -> &dyn Controls {
        self.inner
            .controls()
            .expect("the bench's stores have controls")
    }
}

#[derive(Debug, Default)]
struct Calls {
    takes: AtomicU64,
    asked: AtomicU64,
    won: AtomicU64,
    renewals: AtomicU64,
    releases: AtomicU64,
    clock_reads: AtomicU64,
    polls: AtomicU64,
    other_controls: AtomicU64,
    /// Due reads (`load_schedules_when_due`) and the rows they returned.
    due_reads: AtomicU64,
    due_rows: AtomicU64,
    /// Advances sent, and the rows they asked to move.
    advances: AtomicU64,
    advanced_rows: AtomicU64,
    /// The rows of the first due reads, summed until one returned less than its
    /// limit (the first look-ahead read whole), once known: what start-up loads.
    first_due: Mutex<(u64, Option<u64>)>,
    /// The first poll that returned a state: its start, its end (µs since the epoch)
    /// and the schedules it returned.
    first_poll: Mutex<Option<(i64, i64, usize)>>,
}

impl Calls {
    fn snapshot(&self) -> Value {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        json!({
            "takes": get(&self.takes),
            "asked": get(&self.asked),
            "won": get(&self.won),
            "renewals": get(&self.renewals),
            "releases": get(&self.releases),
            "clock_reads": get(&self.clock_reads),
            "polls": get(&self.polls),
            "other_controls": get(&self.other_controls),
            "due_reads": get(&self.due_reads),
            "due_rows": get(&self.due_rows),
            "advances": get(&self.advances),
            "advanced_rows": get(&self.advanced_rows),
        })
    }
}

fn add(counter: &AtomicU64, n: usize) {
    counter.fetch_add(n as u64, Ordering::Relaxed);
}

#[scheduler_core::async_trait]
impl Store for Metered {
    async fn take(&self, requests: &[TakeRequest], ttl: Ttl) -> scheduler_core::Result<Taken> {
        add(&self.calls.takes, 1);
        add(&self.calls.asked, requests.len());
        let taken = self.inner.take(requests, ttl).await?;
        add(&self.calls.won, taken.won.len());
        Ok(taken)
    }

    async fn renew(&self, leases: &[LeaseKey], ttl: Ttl) -> scheduler_core::Result<Vec<Renewed>> {
        add(&self.calls.renewals, 1);
        self.inner.renew(leases, ttl).await
    }

    async fn release(
        &self,
        leases: &[LeaseKey],
        how: Release,
    ) -> scheduler_core::Result<Vec<LeaseName>> {
        add(&self.calls.releases, 1);
        self.inner.release(leases, how).await
    }

    async fn now(&self) -> scheduler_core::Result<DateTime<Utc>> {
        add(&self.calls.clock_reads, 1);
        self.inner.now().await
    }

    async fn request_cancel(&self, name: &LeaseName, newer: Tick) -> scheduler_core::Result<bool> {
        add(&self.calls.other_controls, 1);
        self.inner.request_cancel(name, newer).await
    }

    async fn create_missing(&self, names: &[LeaseName]) -> scheduler_core::Result<Vec<LeaseName>> {
        add(&self.calls.other_controls, 1);
        self.inner.create_missing(names).await
    }

    fn controls(&self) -> Option<&dyn Controls> {
        Some(self)
    }
}

#[scheduler_core::async_trait]
impl Controls for Metered {
    async fn pause(&self, req: &ControlRequest) -> scheduler_core::Result<ControlRecord> {
        add(&self.calls.other_controls, 1);
        self.c().pause(req).await
    }

    async fn resume(
        &self,
        req: &ControlRequest,
        catch_up: bool,
    ) -> scheduler_core::Result<ControlRecord> {
        add(&self.calls.other_controls, 1);
        self.c().resume(req, catch_up).await
    }

    async fn trigger(&self, req: &ControlRequest) -> scheduler_core::Result<Trigger> {
        add(&self.calls.other_controls, 1);
        self.c().trigger(req).await
    }

    async fn trigger_status(&self, id: TriggerId) -> scheduler_core::Result<Option<Trigger>> {
        add(&self.calls.other_controls, 1);
        self.c().trigger_status(id).await
    }

    async fn claim_trigger(
        &self,
        id: TriggerId,
        lease: &LeaseName,
        holder: &Holder,
        ttl: Ttl,
    ) -> scheduler_core::Result<Option<Lease>> {
        add(&self.calls.other_controls, 1);
        self.c().claim_trigger(id, lease, holder, ttl).await
    }

    async fn finish_trigger(
        &self,
        id: TriggerId,
        holder: Option<&Holder>,
        outcome: Outcome,
        error: Option<&str>,
    ) -> scheduler_core::Result<bool> {
        add(&self.calls.other_controls, 1);
        self.c().finish_trigger(id, holder, outcome, error).await
    }

    async fn control_history(
        &self,
        job: Option<&str>,
        page: Page,
    ) -> scheduler_core::Result<Vec<ControlRecord>> {
        add(&self.calls.other_controls, 1);
        self.c().control_history(job, page).await
    }

    async fn poll(&self, since: Option<i64>) -> scheduler_core::Result<Option<ControlState>> {
        add(&self.calls.polls, 1);
        let start = now_us();
        let state = self.c().poll(since).await?;
        if let Some(state) = &state {
            let mut first = self.calls.first_poll.lock().unwrap();
            if first.is_none() {
                *first = Some((start, now_us(), state.schedules.len()));
            }
        }
        Ok(state)
    }

    async fn poll_without_schedules(
        &self,
        since: Option<i64>,
    ) -> scheduler_core::Result<Option<ControlState>> {
        add(&self.calls.polls, 1);
        let start = now_us();
        let state = self.c().poll_without_schedules(since).await?;
        if state.is_some() {
            let mut first = self.calls.first_poll.lock().unwrap();
            if first.is_none() {
                *first = Some((start, now_us(), 0));
            }
        }
        Ok(state)
    }

    async fn changed_schedules(
        &self,
        since: i64,
        upto: i64,
        names: &[String],
    ) -> scheduler_core::Result<Vec<ScheduleRow>> {
        add(&self.calls.other_controls, 1);
        self.c().changed_schedules(since, upto, names).await
    }

    async fn due_schedules(
        &self,
        handlers: &[String],
        until: DateTime<Utc>,
        after: Option<&scheduler_core::DueCursor>,
        limit: u32,
    ) -> scheduler_core::Result<Vec<scheduler_core::DueSchedule>> {
        add(&self.calls.due_reads, 1);
        let due = self
            .c()
            .due_schedules(handlers, until, after, limit)
            .await?;
        add(&self.calls.due_rows, due.len());
        let mut first = self.calls.first_due.lock().unwrap();
        if first.1.is_none() {
            first.0 += due.len() as u64;
            if due.len() < limit as usize {
                first.1 = Some(first.0);
            }
        }
        Ok(due)
    }

    async fn advance_schedules(
        &self,
        advances: &[scheduler_core::Advance],
    ) -> scheduler_core::Result<u64> {
        add(&self.calls.advances, 1);
        add(&self.calls.advanced_rows, advances.len());
        self.c().advance_schedules(advances).await
    }

    async fn paused(&self) -> scheduler_core::Result<Vec<Pause>> {
        add(&self.calls.other_controls, 1);
        self.c().paused().await
    }

    async fn open_triggers(&self) -> scheduler_core::Result<Vec<Trigger>> {
        add(&self.calls.other_controls, 1);
        self.c().open_triggers().await
    }

    async fn schedule(&self, name: &str) -> scheduler_core::Result<Option<ScheduleRow>> {
        add(&self.calls.other_controls, 1);
        self.c().schedule(name).await
    }

    async fn schedules_page(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> scheduler_core::Result<Vec<ScheduleRow>> {
        add(&self.calls.other_controls, 1);
        self.c().schedules_page(after, limit).await
    }

    async fn put_schedule(
        &self,
        row: &ScheduleRow,
        by: &str,
        why: &str,
    ) -> scheduler_core::Result<ControlRecord> {
        add(&self.calls.other_controls, 1);
        self.c().put_schedule(row, by, why).await
    }

    async fn put_schedules(
        &self,
        rows: &[ScheduleRow],
        by: &str,
        why: &str,
    ) -> scheduler_core::Result<Option<ControlRecord>> {
        add(&self.calls.other_controls, 1);
        self.c().put_schedules(rows, by, why).await
    }

    async fn remove_schedule(
        &self,
        name: &str,
        by: &str,
        why: &str,
    ) -> scheduler_core::Result<Option<ControlRecord>> {
        add(&self.calls.other_controls, 1);
        self.c().remove_schedule(name, by, why).await
    }

    async fn schedules(&self) -> scheduler_core::Result<Vec<ScheduleRow>> {
        add(&self.calls.other_controls, 1);
        self.c().schedules().await
    }

    async fn register_handlers(&self, node: &str, names: &[String]) -> scheduler_core::Result<()> {
        add(&self.calls.other_controls, 1);
        self.c().register_handlers(node, names).await
    }

    async fn handlers(&self) -> scheduler_core::Result<Vec<String>> {
        add(&self.calls.other_controls, 1);
        self.c().handlers().await
    }

    async fn register_jobs(&self, node: &str, names: &[String]) -> scheduler_core::Result<()> {
        add(&self.calls.other_controls, 1);
        self.c().register_jobs(node, names).await
    }

    async fn jobs(&self) -> scheduler_core::Result<Vec<String>> {
        add(&self.calls.other_controls, 1);
        self.c().jobs().await
    }

    async fn heartbeat(&self, beat: &scheduler_core::Heartbeat) -> scheduler_core::Result<()> {
        add(&self.calls.other_controls, 1);
        self.c().heartbeat(beat).await
    }

    async fn stopped(&self, node: &str) -> scheduler_core::Result<()> {
        add(&self.calls.other_controls, 1);
        self.c().stopped(node).await
    }

    async fn instances(&self) -> scheduler_core::Result<Vec<scheduler_core::InstanceRow>> {
        add(&self.calls.other_controls, 1);
        self.c().instances().await
    }

    async fn leases(&self) -> scheduler_core::Result<Vec<LeaseRow>> {
        add(&self.calls.other_controls, 1);
        self.c().leases().await
    }

    async fn runs(&self, job: Option<&str>, page: Page) -> scheduler_core::Result<Vec<RunRow>> {
        add(&self.calls.other_controls, 1);
        self.c().runs(job, page).await
    }

    async fn leases_listing(
        &self,
        q: &scheduler_core::ListQuery,
    ) -> scheduler_core::Result<scheduler_core::Listing<scheduler_core::LeaseRow>> {
        add(&self.calls.other_controls, 1);
        self.c().leases_listing(q).await
    }
    async fn schedules_listing(
        &self,
        q: &scheduler_core::ListQuery,
    ) -> scheduler_core::Result<scheduler_core::Listing<scheduler_core::ScheduleRow>> {
        add(&self.calls.other_controls, 1);
        self.c().schedules_listing(q).await
    }
    async fn runs_where(
        &self,
        q: &scheduler_core::RunQuery,
    ) -> scheduler_core::Result<Vec<scheduler_core::RunRow>> {
        add(&self.calls.other_controls, 1);
        self.c().runs_where(q).await
    }
    async fn failing_jobs(&self) -> scheduler_core::Result<Vec<String>> {
        add(&self.calls.other_controls, 1);
        self.c().failing_jobs().await
    }

    fn watch(&self) -> Option<tokio::sync::watch::Receiver<scheduler_core::ControlSignal>> {
        self.c().watch()
    }
}

/// The store on a pool of its own (so each lease statement is one round trip):
/// PostgreSQL's at a URL, or SQLite's at a `sqlite:` file path.
async fn open_store(url: &str, connections: u32) -> Box<dyn Store> {
    match url.strip_prefix(SQLITE) {
        Some(path) => Box::new(
            SqliteStore::open(path, SqliteOptions::default().max_connections(connections))
                .await
                .unwrap(),
        ),
        None => Box::new(
            PostgresStore::connect(url, PostgresOptions::default().max_connections(connections))
                .await
                .unwrap(),
        ),
    }
}

/// How the bench names an SQLite database file in its URLs.
const SQLITE: &str = "sqlite:";

/// One instance: an OS process of its own.
mod instance {
    use super::*;

    use tracing::field::{Field, Visit};
    use tracing::{Event, Level};
    use tracing_subscriber::layer::{Context, SubscriberExt};
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{EnvFilter, Layer, filter::LevelFilter};

    /// Watches the runtime's log events: counts the dynamic schedules it started
    /// (`dynamic schedule running`, the one event with an `every` field) and
    /// keeps the warnings and errors.
    struct Watch {
        applied: AtomicU64,
        /// How many rows start-up loads: every row, or (rows loaded as they come
        /// due) the rows of the first look-ahead, once read.
        expect: AtomicU64,
        ready: tokio::sync::Notify,
        ready_us: AtomicI64,
        /// Warnings and errors by level, target and message: how many, and the
        /// first one with its fields.
        warnings: Mutex<std::collections::BTreeMap<String, (u64, String)>>,
    }

    /// An event's message, and its other fields.
    #[derive(Default)]
    struct Message {
        message: String,
        fields: String,
    }

    impl Visit for Message {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            use std::fmt::Write as _;
            if field.name() == "message" {
                let _ = write!(self.message, "{value:?}");
            } else {
                let _ = write!(self.fields, " {}={value:?}", field.name());
            }
        }
    }

    /// The [`Watch`] as a tracing layer.
    struct Watching(Arc<Watch>);

    impl<S: tracing::Subscriber> Layer<S> for Watching {
        fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
            let meta = event.metadata();
            if *meta.level() == Level::INFO
                && meta.target().starts_with("scheduler_core")
                && meta.fields().field("every").is_some()
            {
                let watch = &self.0;
                let n = watch.applied.fetch_add(1, Ordering::Relaxed) + 1;
                if n == watch.expect.load(Ordering::Relaxed) {
                    watch.ready_us.store(now_us(), Ordering::Relaxed);
                    watch.ready.notify_one();
                }
            } else if *meta.level() <= Level::WARN {
                let mut message = Message::default();
                event.record(&mut message);
                let key = format!("{} {}: {}", meta.level(), meta.target(), message.message);
                let mut warnings = self.0.warnings.lock().unwrap();
                warnings.entry(key).or_insert((0, message.fields)).0 += 1;
            }
        }
    }

    /// One run, as the handler saw it start.
    #[derive(Clone, Copy)]
    struct Run {
        job: u32,
        tick_us: i64,
        start_us: i64,
    }

    /// About 1 ms of CPU work.
    fn work() -> u64 {
        let began = Instant::now();
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        while began.elapsed() < WORK {
            for _ in 0..256 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
            }
        }
        std::hint::black_box(x)
    }

    pub(super) fn run(index: &str) {
        let started_us = now_us();
        let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} unset"));
        let url = var("DS_URL");
        let mix: Vec<u64> = var("DS_MIX")
            .split(',')
            .map(|v| v.parse().unwrap())
            .collect();
        let mix = Mix {
            daily: mix[0],
            hourly: mix[1],
            minutely: mix[2],
        };
        let expect: u64 = var("DS_EXPECT").parse().unwrap();
        let records_path = var("DS_RECORDS");
        let poll = Duration::from_millis(var("DS_POLL_MS").parse().unwrap());
        let when_due = std::env::var("DS_WHEN_DUE").is_ok_and(|v| v == "1");

        let watch = Arc::new(Watch {
            applied: AtomicU64::new(0),
            expect: AtomicU64::new(if when_due { u64::MAX } else { expect }),
            ready: tokio::sync::Notify::new(),
            ready_us: AtomicI64::new(0),
            warnings: Mutex::default(),
        });
        let log = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
        tracing_subscriber::registry()
            .with(Watching(watch.clone()).with_filter(LevelFilter::INFO))
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_ansi(false)
                    .with_filter(log),
            )
            .init();

        // The parent writes `mark` to have our counts printed (as the window opens
        // and closes), and closes our stdin to stop us (or dies, which closes it too).
        let calls = Arc::new(Calls::default());
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let c = calls.clone();
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines().map_while(Result::ok) {
                if line == "mark" {
                    let line = json!({"calls": c.snapshot(), "cpu_s": cpu_secs("self")});
                    println!("MARK {line}");
                    let _ = std::io::stdout().flush();
                }
            }
            let _ = stop_tx.send(());
        });

        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let store = Metered {
                inner: open_store(&url, 4).await,
                calls: calls.clone(),
            };
            // Each run is written as it starts (one unbuffered write): an instance
            // killed in the window (`DYNAMIC_SCHEDULES_KILL_AT_SECS`) leaves its runs.
            let file = std::fs::File::create(&records_path).unwrap();
            let runs: Arc<Mutex<(std::fs::File, usize)>> = Arc::new(Mutex::new((file, 0)));
            let handler = |runs: Arc<Mutex<(std::fs::File, usize)>>| {
                move |ctx: scheduler_core::JobContext, _args: Arc<str>| {
                    let runs = runs.clone();
                    async move {
                        let start_us = now_us();
                        if let Some(job) = mix.index(ctx.job()) {
                            let r = Run {
                                job,
                                tick_us: ctx.tick().at().timestamp_micros(),
                                start_us,
                            };
                            let line = format!("{} {} {}\n", r.job, r.tick_us, r.start_us);
                            let mut runs = runs.lock().unwrap();
                            runs.0.write_all(line.as_bytes()).unwrap();
                            runs.1 += 1;
                        }
                        work();
                        Ok(())
                    }
                }
            };
            if when_due {
                // Ready once the first look-ahead's rows are read and applied.
                let (w, c) = (watch.clone(), calls.clone());
                tokio::spawn(async move {
                    loop {
                        let first = c.first_due.lock().unwrap().1;
                        if let Some(rows) = first {
                            w.expect.store(rows.max(1), Ordering::Relaxed);
                            if w.applied.load(Ordering::Relaxed) >= rows.max(1) {
                                w.ready_us.store(now_us(), Ordering::Relaxed);
                                w.ready.notify_one();
                            }
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                });
            }
            let scheduler = Scheduler::builder(store)
                .node_id(format!("instance-{index}"))
                .control_poll(Some(poll))
                .load_schedules_when_due(when_due)
                .handler(REPORT, handler(runs.clone()))
                .handler(MINUTE, handler(runs.clone()))
                .build()
                .unwrap();
            let stats = scheduler.stats();
            let (w, c) = (watch.clone(), calls.clone());
            tokio::spawn(async move {
                w.ready.notified().await;
                let first = *c.first_poll.lock().unwrap();
                let line = json!({
                    "started_us": started_us,
                    "ready_us": w.ready_us.load(Ordering::Relaxed),
                    "first_poll": first.map(|(s, e, n)| json!({"start_us": s, "end_us": e, "rows": n})),
                    "cpu_s": cpu_secs("self"),
                    "max_rss_kb": status_kb("self", "VmHWM"),
                    "calls": c.snapshot(),
                });
                println!("READY {line}");
                let _ = std::io::stdout().flush();
            });
            scheduler
                .run_until(async {
                    let _ = stop_rx.await;
                })
                .await;
            let stopped_us = now_us();

            let outcomes = [
                Outcome::Succeeded,
                Outcome::HeldElsewhere,
                Outcome::Missed,
                Outcome::Coalesced,
                Outcome::SkippedOverlap,
                Outcome::Failed,
                Outcome::LeaseLost,
            ];
            let mut counted = serde_json::Map::new();
            for outcome in outcomes {
                let total: u64 = (0..expect)
                    .map(|i| stats.count(&mix.name(i), outcome))
                    .sum();
                counted.insert(outcome.as_str().to_owned(), total.into());
            }
            let runs = runs.lock().unwrap().1;
            let line = json!({
                "stopped_us": stopped_us,
                "applied": watch.applied.load(Ordering::Relaxed),
                "runs": runs,
                "outcomes": counted,
                "cpu_s": cpu_secs("self"),
                "max_rss_kb": status_kb("self", "VmHWM"),
                "calls": calls.snapshot(),
                "warnings": watch
                    .warnings
                    .lock()
                    .unwrap()
                    .iter()
                    .map(|(message, (n, first))| json!({"message": message, "count": n, "first": first}))
                    .collect::<Vec<_>>(),
            });
            println!("DONE {line}");
            let _ = std::io::stdout().flush();
        });
    }
}

/// The benchmark's own process: the server, the rows, the instances, the verdict.
mod coordinator {
    use super::*;

    /// One instance as the coordinator sees it.
    struct Instance {
        child: Child,
        stdin: Option<ChildStdin>,
        pid: String,
        spawned_us: i64,
        ready: Option<Value>,
        /// The instance's counts as the window opened and as it closed.
        marks: Vec<Value>,
        done: Option<Value>,
        log: std::path::PathBuf,
        records: std::path::PathBuf,
        cpu_window: f64,
        rss_window_kb: u64,
    }

    /// A database and what the bench can read of the server's statistics.
    struct Db {
        url: String,
        /// The URL for instance `i`'s role, when each has one.
        role_urls: Option<Vec<String>>,
        stat_statements: bool,
        /// Keeps a throwaway server alive.
        _server: Option<test_postgres::TestServer>,
    }

    /// Statements by role, and the most frequent ones: (calls, total ms, text).
    type Statements = (HashMap<String, i64>, Vec<(i64, f64, String)>);

    fn role(i: usize) -> String {
        format!("bench_instance_{i}")
    }

    async fn execute(conn: &DatabaseConnection, sql: &str) -> Result<(), sea_orm::DbErr> {
        conn.execute_unprepared(sql).await.map(|_| ())
    }

    async fn query(conn: &DatabaseConnection, sql: &str) -> Vec<sea_orm::QueryResult> {
        conn.query_all_raw(Statement::from_string(DbBackend::Postgres, sql))
            .await
            .unwrap()
    }

    /// A throwaway server restarted with `pg_stat_statements` preloaded, one login
    /// role per instance; or a database on `DATABASE_URL`'s server.
    async fn database(instances: usize) -> Db {
        if std::env::var_os("DATABASE_URL").is_some() {
            let db = test_postgres::TestDb::new().await;
            let conn = Database::connect(db.url()).await.unwrap();
            let stat_statements =
                execute(&conn, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                    .await
                    .is_ok()
                    && execute(&conn, "SELECT pg_stat_statements_reset()")
                        .await
                        .is_ok();
            return Db {
                url: db.url().to_owned(),
                role_urls: None,
                stat_statements,
                _server: None,
            };
        }
        let server = test_postgres::TestServer::start().unwrap();
        let admin = Database::connect(server.direct_url("postgres"))
            .await
            .unwrap();
        execute(
            &admin,
            "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'",
        )
        .await
        .unwrap();
        for i in 0..instances {
            // Superusers: no grants to keep in step with the migrations.
            execute(&admin, &format!("CREATE ROLE {} LOGIN SUPERUSER", role(i)))
                .await
                .unwrap();
        }
        admin.close().await.unwrap();
        server.restart().unwrap();
        let url = server.create_database().await;
        let conn = Database::connect(&url).await.unwrap();
        let stat_statements = match execute(&conn, "CREATE EXTENSION pg_stat_statements").await {
            Ok(()) => true,
            Err(err) => {
                println!(
                    "pg_stat_statements unavailable ({err}): statements counted as store calls only"
                );
                false
            }
        };
        conn.close().await.unwrap();
        let role_urls = (0..instances)
            .map(|i| {
                url.replacen(
                    "postgres://postgres@",
                    &format!("postgres://{}@", role(i)),
                    1,
                )
            })
            .collect();
        Db {
            url,
            role_urls: Some(role_urls),
            stat_statements,
            _server: Some(server),
        }
    }

    /// Statements executed in this database since the last reset, by role, and the
    /// ten most frequent statements of the instances' roles.
    async fn statements(conn: &DatabaseConnection) -> Statements {
        let by_role = query(
            conn,
            "SELECT r.rolname AS role, sum(s.calls)::bigint AS calls \
             FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid \
             WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             GROUP BY r.rolname",
        )
        .await
        .iter()
        .map(|r| {
            (
                r.try_get("", "role").unwrap(),
                r.try_get("", "calls").unwrap(),
            )
        })
        .collect();
        let top = query(
            conn,
            "SELECT sum(s.calls)::bigint AS calls, sum(s.total_exec_time) AS ms, \
                    left(regexp_replace(s.query, '\\s+', ' ', 'g'), 110) AS query \
             FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid \
             WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
               AND r.rolname LIKE 'bench_instance_%' \
             GROUP BY 3 ORDER BY 1 DESC LIMIT 10",
        )
        .await
        .iter()
        .map(|r| {
            (
                r.try_get("", "calls").unwrap(),
                r.try_get("", "ms").unwrap(),
                r.try_get("", "query").unwrap(),
            )
        })
        .collect();
        (by_role, top)
    }

    async fn xact_commit(conn: &DatabaseConnection) -> i64 {
        query(
            conn,
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
        )
        .await[0]
            .try_get("", "xact_commit")
            .unwrap()
    }

    fn load_average() -> String {
        std::fs::read_to_string("/proc/loadavg")
            .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    }

    pub(super) fn run() {
        let daily = env_or("DYNAMIC_SCHEDULES_DAILY", 100_000);
        let minutely = env_or("DYNAMIC_SCHEDULES_MINUTELY", 1_000);
        let hourly = env_or("DYNAMIC_SCHEDULES_HOURLY", daily / 100);
        let mix = Mix {
            daily,
            hourly,
            minutely,
        };
        let count = usize::try_from(env_or("DYNAMIC_SCHEDULES_INSTANCES", 3)).unwrap();
        let window = Duration::from_secs(env_or("DYNAMIC_SCHEDULES_WINDOW_SECS", 180));
        let put_tasks = env_or("DYNAMIC_SCHEDULES_PUT_TASKS", 4).max(1);
        let startup_limit =
            Duration::from_secs(env_or("DYNAMIC_SCHEDULES_STARTUP_LIMIT_SECS", 600));
        let poll_ms = env_or("DYNAMIC_SCHEDULES_POLL_MS", 5_000);
        let when_due = !std::env::var("DYNAMIC_SCHEDULES_WHEN_DUE").is_ok_and(|v| v == "0");
        let bulk = std::env::var("DYNAMIC_SCHEDULES_LOAD").is_ok_and(|v| v == "bulk");
        let total = mix.total();
        println!(
            "dynamic_schedules: {daily} daily + {hourly} hourly + {minutely} every-minute schedules, {count} instances, \
             {}s window; load average at start {}",
            window.as_secs(),
            load_average()
        );

        let rt = tokio::runtime::Runtime::new().unwrap();
        let dir = std::env::temp_dir().join(format!("dynamic_schedules-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sqlite = std::env::var("DYNAMIC_SCHEDULES_STORE").is_ok_and(|v| v == "sqlite");
        let db = if sqlite {
            let path = dir.join("schedules.db");
            println!("store: SQLite, {}", path.display());
            Db {
                url: format!("{SQLITE}{}", path.display()),
                role_urls: None,
                stat_statements: false,
                _server: None,
            }
        } else {
            rt.block_on(database(count))
        };
        // PostgreSQL's statistics, read over a connection of the bench's own.
        let pg = (!sqlite).then(|| rt.block_on(Database::connect(&db.url)).unwrap());
        let conn = || pg.as_ref().expect("PostgreSQL only");

        // The rows, through the API.
        let loader = rt.block_on(open_store(&db.url, u32::try_from(put_tasks).unwrap()));
        rt.block_on(
            loader
                .controls()
                .unwrap()
                .register_handlers("bench-loader", &[REPORT.into(), MINUTE.into()]),
        )
        .unwrap();
        let all_rows = Arc::new(mix.rows());
        let loader = Arc::new(loader);
        let began = Instant::now();
        let load_began_at = Utc::now();
        let load = if bulk {
            if sqlite {
                rt.block_on(async {
                    for chunk in all_rows.chunks(BULK_CHUNK) {
                        let c = loader.controls().unwrap();
                        c.put_schedules(chunk, "bench", "").await.unwrap();
                    }
                });
                format!("put_schedules, {BULK_CHUNK} rows per call (DYNAMIC_SCHEDULES_LOAD=bulk)")
            } else {
                rt.block_on(bulk_load(conn(), &all_rows));
                format!(
                    "the bench's own bulk INSERT (DYNAMIC_SCHEDULES_LOAD=bulk, not the API: rows checked with ScheduleRow::check, {BULK_CHUNK} per statement)"
                )
            }
        } else {
            let next = Arc::new(AtomicUsize::new(0));
            rt.block_on(async {
                let mut tasks = tokio::task::JoinSet::new();
                for _ in 0..put_tasks {
                    let (loader, rows, next) = (loader.clone(), all_rows.clone(), next.clone());
                    tasks.spawn(async move {
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(row) = rows.get(i) else { break };
                            loader
                                .controls()
                                .unwrap()
                                .put_schedule(row, "bench", "")
                                .await
                                .unwrap();
                        }
                    });
                }
                while let Some(done) = tasks.join_next().await {
                    done.unwrap();
                }
            });
            format!("put_schedule, {put_tasks} concurrent callers")
        };
        let put_time = began.elapsed();
        println!(
            "load: {total} rows in {:.1}s ({:.0} rows/s) through {load}",
            put_time.as_secs_f64(),
            total as f64 / put_time.as_secs_f64()
        );
        // The verdict reads the stored rows, not these: at ten million rows the bench
        // holds one copy, not two, beside the instances.
        drop(all_rows);
        let began = Instant::now();
        let stored = rt.block_on(loader.controls().unwrap().schedules()).unwrap();
        let read_time = began.elapsed();
        assert_eq!(stored.len() as u64, total, "rows stored");
        drop(loader);
        let backlog = std::env::var("DYNAMIC_SCHEDULES_BACKLOG").map_or(true, |v| v != "0");
        if !backlog && !sqlite {
            let moved = rt.block_on(skip_backlog(conn(), &stored, load_began_at));
            println!(
                "backlog skipped (DYNAMIC_SCHEDULES_BACKLOG=0): {moved} rows whose first tick passed while the rows were stored start at their next tick"
            );
        } else if !backlog {
            println!("DYNAMIC_SCHEDULES_BACKLOG=0 is PostgreSQL's only: the backlog is kept");
        }

        // The instances.
        if db.stat_statements {
            rt.block_on(execute(conn(), "SELECT pg_stat_statements_reset()"))
                .unwrap();
        }
        let (tx, rx) = std::sync::mpsc::channel::<(usize, String)>();
        let mut instances: Vec<Instance> = (0..count)
            .map(|i| {
                let url = db
                    .role_urls
                    .as_ref()
                    .map_or(db.url.clone(), |u| u[i].clone());
                let log = dir.join(format!("instance-{i}.log"));
                let records = dir.join(format!("instance-{i}.runs"));
                let spawned_us = now_us();
                let mut child = Command::new(std::env::current_exe().unwrap())
                    .env(CHILD_ENV, i.to_string())
                    .env("DS_URL", url)
                    .env("DS_MIX", format!("{daily},{hourly},{minutely}"))
                    .env("DS_EXPECT", total.to_string())
                    .env("DS_RECORDS", &records)
                    .env("DS_POLL_MS", poll_ms.to_string())
                    .env("DS_WHEN_DUE", if when_due { "1" } else { "0" })
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(std::fs::File::create(&log).unwrap())
                    .spawn()
                    .unwrap();
                let stdout = child.stdout.take().unwrap();
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                        if tx.send((i, line)).is_err() {
                            break;
                        }
                    }
                });
                Instance {
                    pid: child.id().to_string(),
                    stdin: child.stdin.take(),
                    child,
                    spawned_us,
                    ready: None,
                    marks: Vec::new(),
                    done: None,
                    log,
                    records,
                    cpu_window: f64::NAN,
                    rss_window_kb: 0,
                }
            })
            .collect();
        let receive = |instances: &mut Vec<Instance>, line: (usize, String)| {
            let (i, line) = line;
            if let Some(json) = line.strip_prefix("READY ") {
                instances[i].ready = Some(serde_json::from_str(json).unwrap());
            } else if let Some(json) = line.strip_prefix("MARK ") {
                instances[i].marks.push(serde_json::from_str(json).unwrap());
            } else if let Some(json) = line.strip_prefix("DONE ") {
                instances[i].done = Some(serde_json::from_str(json).unwrap());
            }
        };
        let deadline = Instant::now() + startup_limit;
        while instances.iter().any(|i| i.ready.is_none()) && Instant::now() < deadline {
            if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
                receive(&mut instances, line);
            }
            for (i, inst) in instances.iter_mut().enumerate() {
                if let Ok(Some(status)) = inst.child.try_wait() {
                    panic!(
                        "instance {i} exited during start-up ({status}); its log: {}",
                        inst.log.display()
                    );
                }
            }
        }
        let all_ready = instances.iter().all(|i| i.ready.is_some());
        if !all_ready {
            println!(
                "FINDING: not every instance applied all {total} rows within {}s; measuring anyway",
                startup_limit.as_secs()
            );
        }
        let startup_statements = db
            .stat_statements
            .then(|| rt.block_on(statements(conn())).0);

        // The window: from the next whole second.
        let opened = Utc::now();
        let from_us = (opened.timestamp_micros() / 1_000_000 + 1) * 1_000_000;
        let to_us = from_us + i64::try_from(window.as_micros()).unwrap();
        std::thread::sleep(Duration::from_micros(
            u64::try_from(from_us - now_us()).unwrap_or(0),
        ));
        if db.stat_statements {
            rt.block_on(execute(conn(), "SELECT pg_stat_statements_reset()"))
                .unwrap();
        }
        let commits_before = pg.as_ref().map(|c| rt.block_on(xact_commit(c)));
        let cpu_before: Vec<f64> = instances.iter().map(|i| cpu_secs(&i.pid)).collect();
        let mark = |instances: &mut Vec<Instance>| {
            for inst in instances {
                if let Some(stdin) = &mut inst.stdin {
                    let _ = stdin.write_all(b"mark\n").and_then(|()| stdin.flush());
                }
            }
        };
        mark(&mut instances);
        println!(
            "window: {} … {} (load average {})",
            DateTime::from_timestamp_micros(from_us).unwrap(),
            DateTime::from_timestamp_micros(to_us).unwrap(),
            load_average()
        );
        let kill_at = env_or("DYNAMIC_SCHEDULES_KILL_AT_SECS", 0);
        let mut killed_us = None;
        let import_at = env_or("DYNAMIC_SCHEDULES_IMPORT_AT_SECS", 0);
        let mut import = None;
        while now_us() < to_us {
            if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
                receive(&mut instances, line);
            }
            if import_at > 0
                && import.is_none()
                && now_us() >= from_us + i64::try_from(import_at).unwrap() * 1_000_000
            {
                import = Some(rt.spawn(import_rows(db.url.clone())));
            }
            if kill_at > 0
                && killed_us.is_none()
                && now_us() >= from_us + i64::try_from(kill_at).unwrap() * 1_000_000
            {
                // SIGKILL: no drain, no stopped row; its leases and row expire.
                instances[0].cpu_window = cpu_secs(&instances[0].pid) - cpu_before[0];
                instances[0].rss_window_kb = status_kb(&instances[0].pid, "VmHWM");
                let _ = instances[0].child.kill();
                let _ = instances[0].child.wait();
                instances[0].stdin = None;
                killed_us = Some(now_us());
                println!("killed instance 0 (SIGKILL) {kill_at} s into the window");
            }
        }
        mark(&mut instances);
        if let Some(import) = import {
            let (rows, took) = rt.block_on(import).unwrap();
            println!(
                "import: {rows} rows put_schedules'd {import_at} s into the window, in {:.1}s, none due in it (the instances' RSS max below includes it)",
                took.as_secs_f64()
            );
        }
        let load_at_end = load_average();
        for (i, (inst, before)) in instances.iter_mut().zip(&cpu_before).enumerate() {
            if killed_us.is_some() && i == 0 {
                continue; // measured as it was killed
            }
            inst.cpu_window = cpu_secs(&inst.pid) - before;
            inst.rss_window_kb = status_kb(&inst.pid, "VmHWM");
        }
        let window_statements = db.stat_statements.then(|| rt.block_on(statements(conn())));
        let commits = pg
            .as_ref()
            .zip(commits_before)
            .map(|(c, before)| rt.block_on(xact_commit(c)) - before);

        // Let the window's last ticks start, then stop the instances gracefully.
        std::thread::sleep(GRACE);
        for inst in &mut instances {
            drop(inst.stdin.take());
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        let killed = killed_us.is_some();
        while instances
            .iter()
            .enumerate()
            .any(|(i, inst)| inst.done.is_none() && !(killed && i == 0))
            && Instant::now() < deadline
        {
            if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
                receive(&mut instances, line);
            }
        }
        for inst in &mut instances {
            if inst.done.is_none() {
                let _ = inst.child.kill();
            }
            let _ = inst.child.wait();
        }

        // The verdict.
        let expected = expected_ticks(&stored, mix, from_us, to_us);
        let mut runs: Vec<(u32, i64, i64, usize)> = Vec::new();
        for (i, inst) in instances.iter().enumerate() {
            let Ok(text) = std::fs::read_to_string(&inst.records) else {
                continue;
            };
            for line in text.lines() {
                let mut f = line.split(' ').map(|v| v.parse::<i64>().unwrap());
                let (job, tick, start) = (f.next().unwrap(), f.next().unwrap(), f.next().unwrap());
                runs.push((u32::try_from(job).unwrap(), tick, start, i));
            }
        }
        let verdict = judge(&expected, &runs, from_us, to_us, mix);
        if let Some(killed_us) = killed_us {
            after_the_kill(&stored, mix, &runs, killed_us, to_us, instances.len());
        }
        // Ticks due while the instances started: from the first spawn (next whole
        // second) until the last instance was ready (or the window opened).
        let spawned_us = instances
            .iter()
            .map(|i| i.spawned_us)
            .min()
            .unwrap_or(from_us);
        // The backlog: ticks due before any instance started (passed while the rows
        // were stored), each row's latest caught up once by its catch-up policy.
        let mut backlog: HashMap<(u32, i64), usize> = HashMap::new();
        for r in runs.iter().filter(|r| r.1 < spawned_us) {
            *backlog.entry((r.0, r.1)).or_default() += 1;
        }
        println!(
            "backlog: {} ticks due before the first instance started ran ({} more than once)",
            backlog.len(),
            backlog.values().filter(|&&n| n > 1).count()
        );
        let spawned_us = (spawned_us / 1_000_000 + 1) * 1_000_000;
        let ready_us = instances
            .iter()
            .map(|i| {
                i.ready
                    .as_ref()
                    .and_then(|r| r["ready_us"].as_i64())
                    .unwrap_or(from_us)
            })
            .max()
            .unwrap_or(from_us)
            .min(from_us);
        let startup = judge(
            &expected_ticks(&stored, mix, spawned_us, ready_us),
            &runs,
            spawned_us,
            ready_us,
            mix,
        );

        print_report(&Report {
            mix,
            window,
            put_time,
            load,
            read_time,
            stored: stored.len(),
            instances: &instances,
            startup_statements,
            window_statements,
            commits,
            verdict,
            startup: (startup, (ready_us - spawned_us) as f64 / 1e6),
            load_at_end,
        });
        for inst in &instances {
            let log = std::fs::read_to_string(&inst.log).unwrap_or_default();
            if !log.trim().is_empty() {
                println!(
                    "instance log {} ({} lines), last lines:",
                    inst.log.display(),
                    log.lines().count()
                );
                let lines: Vec<&str> = log.lines().collect();
                for l in &lines[lines.len().saturating_sub(5)..] {
                    println!("  {l}");
                }
            }
        }
    }

    /// What became of the ticks due after instance 0 was killed: each run once by
    /// the others, their share of the runs, and the lateness in the first ten
    /// seconds after the kill, until 40 s and after that.
    fn after_the_kill(
        stored: &[ScheduleRow],
        mix: Mix,
        runs: &[(u32, i64, i64, usize)],
        killed_us: i64,
        to_us: i64,
        instances: usize,
    ) {
        let from_us = (killed_us / 1_000_000 + 1) * 1_000_000;
        let v = judge(
            &expected_ticks(stored, mix, from_us, to_us),
            runs,
            from_us,
            to_us,
            mix,
        );
        println!(
            "after the kill: ticks due {}, ran {}, duplicates {}, missed {}",
            v.expected,
            v.ran,
            v.duplicates,
            v.missed.len()
        );
        let mut by_instance = vec![0usize; instances];
        // Until the others read the killed instance's row as gone (three heartbeats of
        // 10 s after its last), its share is asked for 500 ms late; then at once.
        let mut late: [Vec<f64>; 3] = Default::default();
        for &(_, tick, start, i) in runs {
            if tick < from_us || tick >= to_us {
                continue;
            }
            by_instance[i] += 1;
            let bucket = match tick - from_us {
                d if d < 10_000_000 => 0,
                d if d < 40_000_000 => 1,
                _ => 2,
            };
            late[bucket].push((start - tick) as f64 / 1000.0);
        }
        println!("after the kill: runs by instance {by_instance:?}");
        let buckets = ["0-10 s", "10-40 s", "40 s on"];
        for (what, mut l) in buckets.into_iter().zip(late) {
            l.sort_by(f64::total_cmp);
            println!(
                "after the kill, {what}: lateness p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms over {} runs",
                quantile(&l, 0.5),
                quantile(&l, 0.99),
                l.last().copied().unwrap_or(f64::NAN),
                l.len()
            );
        }
    }

    /// `DYNAMIC_SCHEDULES_IMPORT_ROWS` (1,000,000) daily rows put through
    /// `put_schedules` in batches of 100,000 while the instances run, each due
    /// twelve hours from now (none in the window): what a bulk import into a
    /// running fleet costs each instance. How many, and how long it took.
    async fn import_rows(url: String) -> (u64, Duration) {
        let count = env_or("DYNAMIC_SCHEDULES_IMPORT_ROWS", 1_000_000);
        let store = open_store(&url, 2).await;
        let c = store.controls().unwrap();
        use chrono::Timelike as _;
        let later = Utc::now() + TimeDelta::hours(12);
        let cron = format!("0 {} {} * * *", later.minute(), later.hour());
        let began = Instant::now();
        let mut batch = Vec::with_capacity(100_000);
        for k in 0..count {
            batch.push(ScheduleRow::new(
                format!("import-{k:08}"),
                REPORT,
                cron.clone(),
            ));
            if batch.len() == 100_000 || k + 1 == count {
                c.put_schedules(&batch, "bench", "import").await.unwrap();
                batch.clear();
            }
        }
        (count, began.elapsed())
    }

    /// Rows per statement of the bulk load.
    const BULK_CHUNK: usize = 5_000;

    /// Stores `rows` with the bench's own statements, as `put_schedule` would leave
    /// them (one version bump and one audit row per row, in chunks of [`BULK_CHUNK`]
    /// rows per statement): a quicker set-up than 101,000 calls, not an API.
    async fn bulk_load(conn: &DatabaseConnection, rows: &[ScheduleRow]) {
        let sql = "WITH r AS ( \
               SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], \
                                    $6::timestamptz[]) \
                 WITH ORDINALITY AS r(name, handler, schedule, args, next_tick, n) \
             ), v AS ( \
               UPDATE scheduler_leases_version SET version = version + $5 WHERE id = 1 \
               RETURNING version - $5 AS base \
             ), s AS ( \
               INSERT INTO scheduler_leases_schedules \
                 (name, handler, schedule, zone, scope, policy, args, enabled, removed, version, \
                  updated_at, actor, next_tick) \
               SELECT r.name, r.handler, r.schedule, NULL, 'cluster', '', r.args::jsonb, true, \
                      false, v.base + r.n, now(), 'bench', r.next_tick \
               FROM r, v \
             ) \
             INSERT INTO scheduler_leases_audit (at, job, node, action, actor, why, detail) \
             SELECT now(), r.name, NULL, 'schedule_put', 'bench', '', r.schedule FROM r ORDER BY r.n";
        // Each row's bound as a put writes it (`TickBounds`).
        let mut bounds = scheduler_core::TickBounds::new(Utc::now());
        for chunk in rows.chunks(BULK_CHUNK) {
            for row in chunk {
                row.check().unwrap();
                assert!(row.zone.is_none() && row.policy.is_empty() && row.enabled);
            }
            let column = |f: fn(&ScheduleRow) -> &String| -> sea_orm::Value {
                chunk
                    .iter()
                    .map(|r| f(r).clone())
                    .collect::<Vec<_>>()
                    .into()
            };
            let values = vec![
                column(|r| &r.name),
                column(|r| &r.handler),
                column(|r| &r.schedule),
                column(|r| &r.args),
                i64::try_from(chunk.len()).unwrap().into(),
                chunk
                    .iter()
                    .map(|r| bounds.bound(r))
                    .collect::<Vec<DateTime<Utc>>>()
                    .into(),
            ];
            conn.execute_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                sql,
                values,
            ))
            .await
            .unwrap();
        }
    }

    /// Moves on the bound of every row whose first tick passed while the rows were
    /// stored (`DYNAMIC_SCHEDULES_BACKLOG=0`) to its first tick after now, as a fleet
    /// that had been running would have left it: start-up then measures loading the
    /// rows, not running the load's backlog. Never moves a bound earlier: every put
    /// came after `loaded_from` and before now. How many rows moved.
    async fn skip_backlog(
        conn: &DatabaseConnection,
        rows: &[ScheduleRow],
        loaded_from: DateTime<Utc>,
    ) -> usize {
        let now = Utc::now();
        let margin = TimeDelta::from_std(scheduler_core::TickBounds::MARGIN).unwrap();
        let mut then = scheduler_core::TickBounds::new(loaded_from);
        let mut next = scheduler_core::TickBounds::new(now + margin);
        let (names, bounds): (Vec<String>, Vec<DateTime<Utc>>) = rows
            .iter()
            .filter(|r| then.bound(r) <= now)
            .map(|r| (r.name.clone(), next.bound(r)))
            .unzip();
        for (names, bounds) in names.chunks(BULK_CHUNK).zip(bounds.chunks(BULK_CHUNK)) {
            conn.execute_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "UPDATE scheduler_leases_schedules s SET next_tick = u.next \
                 FROM unnest($1::text[], $2::timestamptz[]) AS u(name, next) WHERE s.name = u.name",
                vec![names.to_vec().into(), bounds.to_vec().into()],
            ))
            .await
            .unwrap();
        }
        names.len()
    }

    /// Every (job, tick) due in `[from, to)`, from the stored schedule texts, with
    /// the `cron` crate.
    fn expected_ticks(rows: &[ScheduleRow], mix: Mix, from_us: i64, to_us: i64) -> Vec<(u32, i64)> {
        let from = DateTime::from_timestamp_micros(from_us).unwrap();
        let to = DateTime::from_timestamp_micros(to_us).unwrap();
        let mut parsed: HashMap<&str, cron::Schedule> = HashMap::new();
        let mut expected = Vec::new();
        for row in rows {
            assert!(row.zone.is_none() && row.enabled, "{row:?}");
            let job = mix.index(&row.name).expect("a bench row");
            let schedule = parsed
                .entry(row.schedule.as_str())
                .or_insert_with(|| cron::Schedule::from_str(&row.schedule).unwrap());
            for tick in schedule
                .after(&(from - TimeDelta::seconds(1)))
                .take_while(|t| *t < to)
            {
                if tick >= from {
                    expected.push((job, tick.timestamp_micros()));
                }
            }
        }
        expected.sort_unstable();
        expected
    }

    struct Verdict {
        expected: usize,
        /// Of the ticks due: daily, hourly, every minute.
        expected_by_kind: [usize; 3],
        ran: usize,
        runs: usize,
        duplicates: usize,
        missed: Vec<(u32, i64)>,
        unexpected: usize,
        /// Lateness in ms: all, daily, hourly, every-minute.
        late: [Vec<f64>; 4],
        runs_by_instance: Vec<usize>,
        /// Duplicated (job, tick) pairs outside the window too.
        duplicates_all: usize,
    }

    fn judge(
        expected: &[(u32, i64)],
        runs: &[(u32, i64, i64, usize)],
        from_us: i64,
        to_us: i64,
        mix: Mix,
    ) -> Verdict {
        let mut by_tick: HashMap<(u32, i64), usize> = HashMap::new();
        for r in runs {
            *by_tick.entry((r.0, r.1)).or_default() += 1;
        }
        let duplicates_all = by_tick.values().filter(|&&n| n > 1).count();
        let in_window = |tick: i64| (from_us..to_us).contains(&tick);
        let window_runs: Vec<_> = runs.iter().filter(|r| in_window(r.1)).collect();
        let instances = runs.iter().map(|r| r.3 + 1).max().unwrap_or(0);
        let mut runs_by_instance = vec![0; instances];
        let mut late: [Vec<f64>; 4] = Default::default();
        for r in &window_runs {
            runs_by_instance[r.3] += 1;
            let ms = (r.2 - r.1) as f64 / 1e3;
            late[0].push(ms);
            late[1 + mix.kind(u64::from(r.0))].push(ms);
        }
        for l in &mut late {
            l.sort_unstable_by(f64::total_cmp);
        }
        let expected_set: std::collections::HashSet<(u32, i64)> =
            expected.iter().copied().collect();
        let missed: Vec<(u32, i64)> = expected
            .iter()
            .filter(|e| !by_tick.contains_key(e))
            .copied()
            .collect();
        let ran = expected.len() - missed.len();
        let duplicates = by_tick
            .iter()
            .filter(|(k, n)| in_window(k.1) && **n > 1)
            .count();
        let unexpected = by_tick
            .keys()
            .filter(|k| in_window(k.1) && !expected_set.contains(k))
            .count();
        Verdict {
            expected: expected.len(),
            expected_by_kind: [0, 1, 2].map(|k| {
                expected
                    .iter()
                    .filter(|e| mix.kind(u64::from(e.0)) == k)
                    .count()
            }),
            ran,
            runs: window_runs.len(),
            duplicates,
            missed,
            unexpected,
            late,
            runs_by_instance,
            duplicates_all,
        }
    }

    fn quantile(sorted: &[f64], q: f64) -> f64 {
        sorted
            .get(((sorted.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    }

    struct Report<'a> {
        mix: Mix,
        window: Duration,
        put_time: Duration,
        /// How the rows were stored.
        load: String,
        read_time: Duration,
        stored: usize,
        instances: &'a [Instance],
        startup_statements: Option<HashMap<String, i64>>,
        window_statements: Option<Statements>,
        /// Transactions committed over the window (PostgreSQL only).
        commits: Option<i64>,
        verdict: Verdict,
        /// The ticks due while the instances started, and how long that was (s).
        startup: (Verdict, f64),
        load_at_end: String,
    }

    fn print_report(r: &Report<'_>) {
        let secs = r.window.as_secs_f64();
        let v = &r.verdict;
        println!(
            "\n== dynamic schedules: {} daily + {} hourly + {} every-minute rows ==",
            r.mix.daily, r.mix.hourly, r.mix.minutely
        );
        println!(
            "load: {} rows in {:.1}s ({:.0}/s) through {}; all rows read back (Controls::schedules) in {:.2}s",
            r.stored,
            r.put_time.as_secs_f64(),
            r.stored as f64 / r.put_time.as_secs_f64(),
            r.load,
            r.read_time.as_secs_f64()
        );
        println!(
            "\n{:>8} {:>10} {:>12} {:>10} {:>11} {:>12} | {:>10} {:>12} {:>27} {:>10} {:>9} {:>11}",
            "instance",
            "ready (s)",
            "1st poll (s)",
            "apply (s)",
            "CPU at rdy",
            "RSS rdy (MB)",
            "stmts/s",
            "calls/s",
            "take/renew/release/poll /s",
            "CPU %core",
            "runs",
            "RSS max(MB)"
        );
        for (i, inst) in r.instances.iter().enumerate() {
            let ready = inst.ready.as_ref();
            let get =
                |v: Option<&Value>, k: &str| v.and_then(|v| v[k].as_f64()).unwrap_or(f64::NAN);
            let ready_s = (get(ready, "ready_us") - inst.spawned_us as f64) / 1e6;
            let poll = ready.map(|r| &r["first_poll"]);
            let poll_s = (get(poll, "end_us") - get(poll, "start_us")) / 1e6;
            let apply_s = (get(ready, "ready_us") - get(poll, "end_us")) / 1e6;
            let stmts = r
                .window_statements
                .as_ref()
                .and_then(|(by_role, _)| by_role.get(&role(i)))
                .map_or(f64::NAN, |&n| n as f64 / secs);
            let calls = |k: &str| {
                let [open, close] = [0, 1].map(|m| inst.marks.get(m).map(|v| &v["calls"]));
                (get(close, k) - get(open, k)) / secs
            };
            let [take, renew, release, poll_rate] =
                ["takes", "renewals", "releases", "polls"].map(calls);
            let all_calls =
                take + renew + release + poll_rate + calls("clock_reads") + calls("other_controls");
            println!(
                "{:>8} {:>10.1} {:>12.2} {:>10.1} {:>10.1}s {:>12.0} | {:>10.2} {:>12.2} {:>27} {:>10.2} {:>9} {:>11.0}",
                i,
                ready_s,
                poll_s,
                apply_s,
                get(ready, "cpu_s"),
                get(ready, "max_rss_kb") / 1024.0,
                stmts,
                all_calls,
                format!("{take:.2}/{renew:.2}/{release:.2}/{poll_rate:.2}"),
                inst.cpu_window / secs * 100.0,
                v.runs_by_instance.get(i).copied().unwrap_or(0),
                inst.rss_window_kb as f64 / 1024.0,
            );
        }
        println!(
            "(ready = spawn until the first poll's rows all ran as schedules; 1st poll = its read; apply = from its answer to the last row applied;\n \
             CPU at rdy = process CPU by then; stmts/s = pg_stat_statements calls of the instance's role over the window, BEGIN/COMMIT included;\n \
             calls/s = its store calls; CPU %core = utime+stime over the window, of which the handlers' work ≈ runs × {} ms; RSS max = VmHWM)",
            WORK.as_millis()
        );
        if let Some(startup) = &r.startup_statements {
            let mut roles: Vec<_> = startup
                .iter()
                .filter(|(k, _)| k.starts_with("bench_instance_"))
                .collect();
            roles.sort();
            let text: Vec<String> = roles.iter().map(|(k, n)| format!("{k} {n}")).collect();
            println!("statements during start-up: {}", text.join(", "));
        }
        if let Some(commits) = r.commits {
            println!(
                "transactions committed in the database over the window (pg_stat_database.xact_commit): {commits} ({:.1}/s)",
                commits as f64 / secs
            );
        }
        if let Some((_, top)) = &r.window_statements {
            println!("the instances' statements over the window, most frequent first:");
            for (calls, ms, query) in top {
                println!(
                    "  {calls:>8} calls {:>9.3} ms mean  {query}",
                    ms / (*calls).max(1) as f64
                );
            }
        }
        println!(
            "\nticks due in the window: {} ({} daily, {} hourly, {} every-minute); ran {} ({:.4}); runs {}; duplicates {}; missed {}; runs of no expected tick {}; duplicates over the whole run {}",
            v.expected,
            v.expected_by_kind[0],
            v.expected_by_kind[1],
            v.expected_by_kind[2],
            v.ran,
            v.ran as f64 / v.expected.max(1) as f64,
            v.runs,
            v.duplicates,
            v.missed.len(),
            v.unexpected,
            v.duplicates_all,
        );
        if let Some((by_role, _)) = &r.window_statements {
            let total: i64 = by_role
                .iter()
                .filter(|(role, _)| role.starts_with("bench_instance_"))
                .map(|(_, calls)| *calls)
                .sum();
            println!(
                "statements per tick due (all instances, BEGIN/COMMIT included): {:.3}",
                total as f64 / v.expected.max(1) as f64
            );
        }
        for (label, late) in ["all", "daily", "hourly", "every-minute"]
            .iter()
            .zip(&v.late)
        {
            println!(
                "lateness ({label}): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms over {} runs",
                quantile(late, 0.5),
                quantile(late, 0.99),
                late.last().copied().unwrap_or(f64::NAN),
                late.len()
            );
        }
        if !v.missed.is_empty() {
            let shown: Vec<String> = v
                .missed
                .iter()
                .take(10)
                .map(|(job, tick)| {
                    format!(
                        "{} @ {}",
                        r.mix.name(u64::from(*job)),
                        DateTime::from_timestamp_micros(*tick)
                            .unwrap()
                            .format("%H:%M:%S")
                    )
                })
                .collect();
            println!("FINDING: missed ticks, first ones: {}", shown.join(", "));
        }
        let (st, st_secs) = &r.startup;
        println!(
            "during start-up (first spawn to last instance ready or the window, {st_secs:.1}s): ticks due {}, ran {}, missed {}, duplicates {}; lateness p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            st.expected,
            st.ran,
            st.missed.len(),
            st.duplicates,
            quantile(&st.late[0], 0.5),
            quantile(&st.late[0], 0.99),
            st.late[0].last().copied().unwrap_or(f64::NAN),
        );
        if v.duplicates > 0 {
            println!(
                "FINDING: {} ticks ran more than once in the window",
                v.duplicates
            );
        }
        for (i, inst) in r.instances.iter().enumerate() {
            if let Some(done) = &inst.done {
                println!(
                    "instance {i}: engine Stats over the whole run {}; schedules applied {}",
                    done["outcomes"], done["applied"],
                );
                for w in done["warnings"].as_array().into_iter().flatten() {
                    println!(
                        "  {} × {} (first:{})",
                        w["count"],
                        w["message"].as_str().unwrap_or_default(),
                        w["first"].as_str().unwrap_or_default()
                    );
                }
            } else {
                println!("FINDING: instance {i} did not report after its stop");
            }
        }
        println!("load average at the window's end: {}\n", r.load_at_end);
    }
}
