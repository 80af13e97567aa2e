//! One instance's view of the shared memory store, with that instance's faults: a
//! stalled process (nothing it sends goes out or comes back until it resumes), slow
//! calls, calls that fail before they reach the store, and calls that commit but
//! whose answer is lost. A dead incarnation's calls never reach the store.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use scheduler_core::{
    Advance, ControlRecord, ControlRequest, ControlSignal, ControlState, Controls, Error, Holder,
    Lease, LeaseKey, LeaseName, LeaseRow, MemoryStore, Outcome, Page, Release, Renewed, Result,
    RunRow, ScheduleRow, Store, TakeRequest, Taken, Tick, Trigger, TriggerId, Ttl,
};
use scheduler_core::{DueCursor, DueSchedule};
use tokio::sync::watch;

use crate::world::World;

/// A fault of one instance.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Fault {
    /// The process stops (its loop, its calls, its runs' work).
    Stall,
    /// Every call waits this many milliseconds first.
    Slow(u64),
    /// Every call fails before it reaches the store.
    Failing,
    /// Every call commits and its answer is lost.
    Losing,
}

/// The faults of one instance, set by the driver.
#[derive(Debug)]
pub(crate) struct Faults {
    /// The process is stopped (SIGSTOP, a long GC pause).
    pub(crate) stalled: watch::Sender<bool>,
    /// Milliseconds every call waits before it reaches the store.
    pub(crate) slow_ms: AtomicU64,
    /// Calls fail before they reach the store.
    pub(crate) failing: AtomicBool,
    /// Calls reach the store and commit, and their answer is lost.
    pub(crate) losing: AtomicBool,
    /// The incarnation died: its calls never reach the store.
    pub(crate) dead: AtomicBool,
}

impl Faults {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            stalled: watch::Sender::new(false),
            slow_ms: AtomicU64::new(0),
            failing: AtomicBool::new(false),
            losing: AtomicBool::new(false),
            dead: AtomicBool::new(false),
        })
    }

    /// Whether fault `kind` is on.
    pub(crate) fn is_on(&self, kind: Fault) -> bool {
        match kind {
            Fault::Stall => *self.stalled.borrow(),
            Fault::Slow(_) => self.slow_ms.load(Ordering::SeqCst) > 0,
            Fault::Failing => self.failing.load(Ordering::SeqCst),
            Fault::Losing => self.losing.load(Ordering::SeqCst),
        }
    }

    /// Waits while the process is stopped.
    pub(crate) async fn running(&self) {
        let mut rx = self.stalled.subscribe();
        let _ = rx.wait_for(|stalled| !stalled).await;
    }
}

/// The store as instance `inst` reaches it.
#[derive(Debug, Clone)]
pub(crate) struct SimStore {
    pub(crate) inner: Arc<MemoryStore>,
    pub(crate) inst: usize,
    /// Which start of the instance this is (a new one per start, in the cluster).
    pub(crate) incarnation: usize,
    pub(crate) faults: Arc<Faults>,
    pub(crate) world: Arc<Mutex<World>>,
}

impl SimStore {
    fn world(&self) -> std::sync::MutexGuard<'_, World> {
        crate::world::lock(&self.world)
    }

    /// Before a call reaches the store.
    async fn send(&self) -> Result<()> {
        if self.faults.dead.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        self.faults.running().await;
        let ms = self.faults.slow_ms.load(Ordering::SeqCst);
        if ms > 0 {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        if self.faults.dead.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        if self.faults.failing.load(Ordering::SeqCst) {
            return Err(Error::store(
                "simulated outage: the call never reached the store",
            ));
        }
        Ok(())
    }

    /// After the store answered `answer`: the answer comes back, once the process
    /// runs, unless it is lost.
    async fn answer<T>(&self, answer: Result<T>) -> Result<T> {
        self.faults.running().await;
        if self.faults.losing.load(Ordering::SeqCst) {
            return Err(Error::store("simulated outage: the answer was lost"));
        }
        answer
    }
}

#[async_trait]
impl Store for SimStore {
    async fn take(&self, requests: &[TakeRequest], ttl: Ttl) -> Result<Taken> {
        self.send().await?;
        let taken = self.inner.take(requests, ttl).await;
        let now = self.inner.clock().now();
        {
            let mut w = self.world();
            w.takes.push((self.inst, now, requests.len()));
            if let Ok(taken) = &taken {
                for lease in &taken.won {
                    w.granted(
                        self.inst,
                        lease.name.as_str(),
                        lease.holder.as_str(),
                        lease.token.get(),
                        lease.tick.at(),
                        now,
                    );
                }
            }
        }
        let taken = self.answer(taken).await;
        // A refusal the instance heard: it drops a tick refused at or after its
        // instant.
        if let Ok(taken) = &taken {
            let mut w = self.world();
            for name in &taken.paused {
                if let Some(r) = requests.iter().find(|r| r.name == *name)
                    && r.tick.at() <= now
                {
                    w.refused_paused.insert((
                        self.incarnation,
                        name.as_str().to_owned(),
                        r.tick.at(),
                    ));
                }
            }
        }
        taken
    }

    async fn renew(&self, leases: &[LeaseKey], ttl: Ttl) -> Result<Vec<Renewed>> {
        self.send().await?;
        let renewed = self.inner.renew(leases, ttl).await;
        self.answer(renewed).await
    }

    async fn release(&self, leases: &[LeaseKey], how: Release) -> Result<Vec<LeaseName>> {
        self.send().await?;
        let released = self.inner.release(leases, how).await;
        if let Ok(names) = &released {
            let now = self.inner.clock().now();
            let names: Vec<&str> = names.iter().map(LeaseName::as_str).collect();
            self.world()
                .note(now, format!("i{} released {names:?} {how:?}", self.inst));
        }
        self.answer(released).await
    }

    async fn now(&self) -> Result<DateTime<Utc>> {
        self.send().await?;
        let now = self.inner.now().await;
        self.answer(now).await
    }

    async fn create_missing(&self, names: &[LeaseName]) -> Result<Vec<LeaseName>> {
        self.send().await?;
        let created = self.inner.create_missing(names).await;
        self.answer(created).await
    }

    async fn request_cancel(&self, name: &LeaseName, newer: Tick) -> Result<bool> {
        self.send().await?;
        let holder = self.inner.row(name).map(|row| row.holder);
        let marked = self.inner.request_cancel(name, newer).await;
        if let (Ok(true), Some(holder)) = (&marked, holder) {
            let now = self.inner.clock().now();
            self.world()
                .asked_to_stop(self.inst, name.as_str(), holder.as_str(), newer.at(), now);
        }
        self.answer(marked).await
    }

    fn controls(&self) -> Option<&dyn Controls> {
        Some(self)
    }
}

/// The controls as the instance reaches them: what the runtime calls goes through
/// the instance's faults; what only operators call goes straight to the store.
#[async_trait]
impl Controls for SimStore {
    async fn pause(&self, r: &ControlRequest) -> Result<ControlRecord> {
        self.inner.pause(r).await
    }
    async fn resume(&self, r: &ControlRequest, catch_up: bool) -> Result<ControlRecord> {
        self.inner.resume(r, catch_up).await
    }
    async fn trigger(&self, r: &ControlRequest) -> Result<Trigger> {
        self.inner.trigger(r).await
    }
    async fn trigger_status(&self, id: TriggerId) -> Result<Option<Trigger>> {
        self.inner.trigger_status(id).await
    }
    async fn claim_trigger(
        &self,
        id: TriggerId,
        lease: &LeaseName,
        holder: &Holder,
        ttl: Ttl,
    ) -> Result<Option<Lease>> {
        self.send().await?;
        let claimed = self.inner.claim_trigger(id, lease, holder, ttl).await;
        if let Ok(Some(l)) = &claimed {
            let now = self.inner.clock().now();
            if let Ok(Some(t)) = self.inner.trigger_status(id).await {
                self.world().claims.insert(
                    (l.name.as_str().to_owned(), l.holder.as_str().to_owned()),
                    t.requested_at,
                );
            }
            self.world().granted(
                self.inst,
                l.name.as_str(),
                l.holder.as_str(),
                l.token.get(),
                l.tick.at(),
                now,
            );
        }
        self.answer(claimed).await
    }
    async fn finish_trigger(
        &self,
        id: TriggerId,
        holder: Option<&Holder>,
        outcome: Outcome,
        error: Option<&str>,
    ) -> Result<bool> {
        self.send().await?;
        let done = self.inner.finish_trigger(id, holder, outcome, error).await;
        self.answer(done).await
    }
    async fn control_history(&self, job: Option<&str>, page: Page) -> Result<Vec<ControlRecord>> {
        self.inner.control_history(job, page).await
    }
    async fn poll(&self, since: Option<i64>) -> Result<Option<ControlState>> {
        self.send().await?;
        let state = self.inner.poll(since).await;
        self.answer(state).await
    }
    async fn poll_without_schedules(&self, since: Option<i64>) -> Result<Option<ControlState>> {
        self.send().await?;
        let state = self.inner.poll_without_schedules(since).await;
        self.answer(state).await
    }
    async fn changed_schedules(
        &self,
        since: i64,
        upto: i64,
        names: &[String],
    ) -> Result<Vec<ScheduleRow>> {
        self.send().await?;
        let changed = self.inner.changed_schedules(since, upto, names).await;
        self.answer(changed).await
    }
    async fn due_schedules(
        &self,
        handlers: &[String],
        until: DateTime<Utc>,
        after: Option<&DueCursor>,
        limit: u32,
    ) -> Result<Vec<DueSchedule>> {
        self.send().await?;
        let due = self
            .inner
            .due_schedules(handlers, until, after, limit)
            .await;
        self.answer(due).await
    }
    async fn advance_schedules(&self, advances: &[Advance]) -> Result<u64> {
        self.send().await?;
        let moved = self.inner.advance_schedules(advances).await;
        self.answer(moved).await
    }
    async fn schedule(&self, name: &str) -> Result<Option<ScheduleRow>> {
        self.send().await?;
        let row = self.inner.schedule(name).await;
        self.answer(row).await
    }
    async fn put_schedule(&self, row: &ScheduleRow, by: &str, why: &str) -> Result<ControlRecord> {
        self.inner.put_schedule(row, by, why).await
    }
    async fn put_schedules(
        &self,
        rows: &[ScheduleRow],
        by: &str,
        why: &str,
    ) -> Result<Option<ControlRecord>> {
        self.inner.put_schedules(rows, by, why).await
    }
    async fn remove_schedule(
        &self,
        name: &str,
        by: &str,
        why: &str,
    ) -> Result<Option<ControlRecord>> {
        self.inner.remove_schedule(name, by, why).await
    }
    async fn schedules(&self) -> Result<Vec<ScheduleRow>> {
        self.send().await?;
        let rows = self.inner.schedules().await;
        self.answer(rows).await
    }
    async fn register_handlers(&self, node: &str, names: &[String]) -> Result<()> {
        self.send().await?;
        let done = self.inner.register_handlers(node, names).await;
        self.answer(done).await
    }
    async fn handlers(&self) -> Result<Vec<String>> {
        self.inner.handlers().await
    }
    async fn heartbeat(&self, beat: &scheduler_core::Heartbeat) -> Result<()> {
        self.inner.heartbeat(beat).await
    }
    async fn stopped(&self, node: &str) -> Result<()> {
        self.inner.stopped(node).await
    }
    async fn instances(&self) -> Result<Vec<scheduler_core::InstanceRow>> {
        self.inner.instances().await
    }
    async fn leases(&self) -> Result<Vec<LeaseRow>> {
        self.inner.leases().await
    }
    async fn runs(&self, job: Option<&str>, page: Page) -> Result<Vec<RunRow>> {
        self.inner.runs(job, page).await
    }
    async fn leases_listing(
        &self,
        q: &scheduler_core::ListQuery,
    ) -> Result<scheduler_core::Listing<scheduler_core::LeaseRow>> {
        self.inner.leases_listing(q).await
    }
    async fn schedules_listing(
        &self,
        q: &scheduler_core::ListQuery,
    ) -> Result<scheduler_core::Listing<scheduler_core::ScheduleRow>> {
        self.inner.schedules_listing(q).await
    }
    async fn runs_where(
        &self,
        q: &scheduler_core::RunQuery,
    ) -> Result<Vec<scheduler_core::RunRow>> {
        self.inner.runs_where(q).await
    }
    async fn failing_jobs(&self) -> Result<Vec<String>> {
        self.inner.failing_jobs().await
    }
    fn watch(&self) -> Option<watch::Receiver<ControlSignal>> {
        self.inner.watch()
    }
}
