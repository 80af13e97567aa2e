//! What the runtime tests share: [`Probe`], a configurable job that records its runs
//! in a [`Log`], on a [`MemoryStore`] whose clock advances with paused tokio time.
#![allow(dead_code)] // Each test binary uses its own part.

pub(crate) mod faulty;
#[allow(unused_imports)] // Used by the tests of controls only.
pub(crate) use faulty::Faulty;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use scheduler_core::{
    BoxError, Duplicate, Idempotent, JobContext, MemoryStore, Schedule, Scheduler, Scope,
};

pub(crate) type Log = Arc<Mutex<Vec<Run>>>;

#[derive(Debug, Clone)]
pub(crate) struct Run {
    pub(crate) job: String,
    pub(crate) tick: DateTime<Utc>,
    pub(crate) started: DateTime<Utc>,
    pub(crate) node: String,
    pub(crate) holder: String,
    pub(crate) cancelled: bool,
    /// When the work ended (finished, or saw its cancellation), store clock.
    pub(crate) ended: DateTime<Utc>,
}

/// A configurable test job that records its runs.
#[derive(Clone)]
pub(crate) struct Probe {
    pub(crate) name: &'static str,
    pub(crate) every: Duration,
    pub(crate) scope: Scope,
    pub(crate) duplicate: Duplicate,
    pub(crate) jitter: Duration,
    pub(crate) catch_up: Option<Duration>,
    pub(crate) work: Duration,
    pub(crate) panic: bool,
    pub(crate) store: Arc<MemoryStore>,
    pub(crate) log: Log,
}

impl Probe {
    pub(crate) fn new(name: &'static str, store: &Arc<MemoryStore>, log: &Log) -> Self {
        Self {
            name,
            every: Duration::from_secs(1),
            scope: Scope::Cluster,
            duplicate: Duplicate::Harmless,
            jitter: Duration::ZERO,
            catch_up: None,
            work: Duration::from_millis(10),
            panic: false,
            store: store.clone(),
            log: log.clone(),
        }
    }
}

#[scheduler_core::async_trait]
impl Idempotent for Probe {
    fn name(&self) -> &str {
        self.name
    }
    fn schedule(&self) -> Schedule {
        Schedule::every(self.every)
    }
    fn scope(&self) -> Scope {
        self.scope
    }
    fn duplicate(&self) -> Duplicate {
        self.duplicate
    }
    fn jitter(&self) -> Duration {
        self.jitter
    }
    fn catch_up(&self) -> Option<Duration> {
        self.catch_up
    }
    async fn run(&self, ctx: JobContext) -> Result<(), BoxError> {
        // The store's clock, read directly: a clock read through the store may be told
        // to stall.
        let started = self.store.clock().now();
        if self.panic {
            panic!("probe told to panic");
        }
        let cancelled = tokio::select! {
            () = tokio::time::sleep(self.work) => false,
            () = ctx.cancellation().cancelled() => true,
        };
        let ended = self.store.clock().now();
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Run {
                job: self.name.to_owned(),
                tick: ctx.tick().at(),
                started,
                node: ctx.node().to_owned(),
                holder: ctx.holder().to_string(),
                cancelled,
                ended,
            });
        if cancelled {
            Err("cancelled".into())
        } else {
            Ok(())
        }
    }
}

pub(crate) fn runs(log: &Log, job: &str) -> Vec<Run> {
    log.lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|r| r.job == job)
        .cloned()
        .collect()
}

/// A store on which every job ran before ([`MemoryStore::set_jobs_known`]): start-up
/// catches up the tick before it, a run at once that many tests script from.
pub(crate) fn store() -> Arc<MemoryStore> {
    let store = MemoryStore::new();
    store.set_jobs_known(true);
    Arc::new(store)
}

pub(crate) fn builder(store: &Arc<MemoryStore>) -> scheduler_core::SchedulerBuilder {
    Scheduler::builder(store.clone())
        .node_id("node-a")
        .lease_ttl(Duration::from_secs(4))
}

/// Sleeps (paused time: at once) until the store's clock is half a second past a
/// whole second. A scheduler started in the last milliseconds of a second runs the
/// tick at that second late, at start-up (catch-up), and that run may still hold the
/// lease when the next tick comes due a few milliseconds later: that tick is then
/// skipped as overlapping — correct, but not what a test of "every tick in turn"
/// is about.
pub(crate) async fn mid_second(store: &MemoryStore) {
    let now = store.clock().now();
    let into = i64::from(now.timestamp_subsec_millis());
    let wait = (500 - into).rem_euclid(1000);
    tokio::time::sleep(Duration::from_millis(u64::try_from(wait).unwrap_or(0))).await;
}
