//! A memory store whose controls fail or hang on demand, and which notes releases
//! of a triggered run's lease before its end is recorded.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use scheduler_core::{ControlRequest, Controls, Outcome, Page, ScheduleRow, TriggerState};

/// The memory store `inner`, with faults.
#[derive(Debug)]
pub(crate) struct Faulty {
    pub(crate) inner: Arc<scheduler_core::MemoryStore>,
    /// How many `finish_trigger` calls of a holder still fail (a store outage at
    /// the end of a triggered run).
    pub(crate) failing_finishes: AtomicU32,
    /// claim_trigger never answers (a statement stuck on a lock of the control tables).
    pub(crate) hang_claims: bool,
    /// Releases of a lease whose triggered run was not yet recorded done.
    pub(crate) early: AtomicU32,
    /// Whether heartbeats fail (a store that refuses the instances table).
    pub(crate) failing_heartbeats: AtomicBool,
    /// Heartbeats asked for, failed or not.
    pub(crate) beats: AtomicU32,
    /// How long a first poll (`poll(None)`, every row read) takes to answer: a
    /// store holding millions of schedules.
    pub(crate) first_poll_takes: Duration,
    /// Rows the due reads returned.
    pub(crate) due_rows: std::sync::atomic::AtomicU64,
    /// The due read that fails (1: the first; 0: none), counting down to it.
    pub(crate) fail_due_read: AtomicU32,
    /// Rows the polls since a version returned (`poll_without_schedules` and
    /// `changed_schedules`): the changed rows an instance read.
    pub(crate) changed_rows: std::sync::atomic::AtomicU64,
}

impl Faulty {
    /// `inner` with no fault on.
    pub(crate) fn over(inner: Arc<scheduler_core::MemoryStore>) -> Self {
        Self {
            inner,
            failing_finishes: AtomicU32::new(0),
            hang_claims: false,
            early: AtomicU32::new(0),
            failing_heartbeats: AtomicBool::new(false),
            beats: AtomicU32::new(0),
            first_poll_takes: Duration::ZERO,
            due_rows: std::sync::atomic::AtomicU64::new(0),
            fail_due_read: AtomicU32::new(0),
            changed_rows: std::sync::atomic::AtomicU64::new(0),
        }
    }
}

#[scheduler_core::async_trait]
impl Controls for Faulty {
    async fn pause(
        &self,
        r: &ControlRequest,
    ) -> scheduler_core::Result<scheduler_core::ControlRecord> {
        self.inner.pause(r).await
    }
    async fn resume(
        &self,
        r: &ControlRequest,
        c: bool,
    ) -> scheduler_core::Result<scheduler_core::ControlRecord> {
        self.inner.resume(r, c).await
    }
    async fn trigger(&self, r: &ControlRequest) -> scheduler_core::Result<scheduler_core::Trigger> {
        self.inner.trigger(r).await
    }
    async fn trigger_status(
        &self,
        id: scheduler_core::TriggerId,
    ) -> scheduler_core::Result<Option<scheduler_core::Trigger>> {
        self.inner.trigger_status(id).await
    }
    async fn claim_trigger(
        &self,
        id: scheduler_core::TriggerId,
        lease: &scheduler_core::LeaseName,
        holder: &scheduler_core::Holder,
        ttl: scheduler_core::Ttl,
    ) -> scheduler_core::Result<Option<scheduler_core::Lease>> {
        if self.hang_claims {
            tokio::time::sleep(Duration::from_secs(3_600)).await;
        }
        self.inner.claim_trigger(id, lease, holder, ttl).await
    }
    async fn finish_trigger(
        &self,
        id: scheduler_core::TriggerId,
        holder: Option<&scheduler_core::Holder>,
        outcome: Outcome,
        error: Option<&str>,
    ) -> scheduler_core::Result<bool> {
        if holder.is_some()
            && self
                .failing_finishes
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        {
            return Err(scheduler_core::Error::store("told to fail"));
        }
        self.inner.finish_trigger(id, holder, outcome, error).await
    }
    async fn control_history(
        &self,
        j: Option<&str>,
        p: Page,
    ) -> scheduler_core::Result<Vec<scheduler_core::ControlRecord>> {
        self.inner.control_history(j, p).await
    }
    async fn poll(
        &self,
        since: Option<i64>,
    ) -> scheduler_core::Result<Option<scheduler_core::ControlState>> {
        if since.is_none() {
            tokio::time::sleep(self.first_poll_takes).await;
        }
        self.inner.poll(since).await
    }
    async fn poll_without_schedules(
        &self,
        since: Option<i64>,
    ) -> scheduler_core::Result<Option<scheduler_core::ControlState>> {
        let state = self.inner.poll_without_schedules(since).await?;
        let read = state.as_ref().map_or(0, |s| s.schedules.len());
        self.changed_rows.fetch_add(read as u64, Ordering::SeqCst);
        Ok(state)
    }
    async fn changed_schedules(
        &self,
        since: i64,
        upto: i64,
        names: &[String],
    ) -> scheduler_core::Result<Vec<ScheduleRow>> {
        let changed = self.inner.changed_schedules(since, upto, names).await?;
        self.changed_rows
            .fetch_add(changed.len() as u64, Ordering::SeqCst);
        Ok(changed)
    }
    async fn due_schedules(
        &self,
        handlers: &[String],
        until: DateTime<Utc>,
        after: Option<&scheduler_core::DueCursor>,
        limit: u32,
    ) -> scheduler_core::Result<Vec<scheduler_core::DueSchedule>> {
        let left = self.fail_due_read.load(Ordering::SeqCst);
        if left > 0 {
            self.fail_due_read.store(left - 1, Ordering::SeqCst);
            if left == 1 {
                return Err(scheduler_core::Error::Store {
                    cause: "the due read fails on purpose".into(),
                    failure: scheduler_core::StoreFailure::Other,
                });
            }
        }
        let due = self
            .inner
            .due_schedules(handlers, until, after, limit)
            .await?;
        self.due_rows.fetch_add(due.len() as u64, Ordering::SeqCst);
        Ok(due)
    }
    async fn advance_schedules(
        &self,
        advances: &[scheduler_core::Advance],
    ) -> scheduler_core::Result<u64> {
        self.inner.advance_schedules(advances).await
    }
    async fn put_schedule(
        &self,
        r: &ScheduleRow,
        b: &str,
        w: &str,
    ) -> scheduler_core::Result<scheduler_core::ControlRecord> {
        self.inner.put_schedule(r, b, w).await
    }
    async fn put_schedules(
        &self,
        r: &[ScheduleRow],
        b: &str,
        w: &str,
    ) -> scheduler_core::Result<Option<scheduler_core::ControlRecord>> {
        self.inner.put_schedules(r, b, w).await
    }
    async fn remove_schedule(
        &self,
        n: &str,
        b: &str,
        w: &str,
    ) -> scheduler_core::Result<Option<scheduler_core::ControlRecord>> {
        self.inner.remove_schedule(n, b, w).await
    }
    async fn schedules(&self) -> scheduler_core::Result<Vec<ScheduleRow>> {
        self.inner.schedules().await
    }
    async fn register_handlers(&self, node: &str, names: &[String]) -> scheduler_core::Result<()> {
        self.inner.register_handlers(node, names).await
    }
    async fn handlers(&self) -> scheduler_core::Result<Vec<String>> {
        self.inner.handlers().await
    }
    async fn register_jobs(&self, node: &str, names: &[String]) -> scheduler_core::Result<()> {
        self.inner.register_jobs(node, names).await
    }
    async fn jobs(&self) -> scheduler_core::Result<Vec<String>> {
        self.inner.jobs().await
    }
    async fn heartbeat(&self, beat: &scheduler_core::Heartbeat) -> scheduler_core::Result<()> {
        self.beats.fetch_add(1, Ordering::SeqCst);
        if self.failing_heartbeats.load(Ordering::SeqCst) {
            return Err(scheduler_core::Error::store("told to fail"));
        }
        self.inner.heartbeat(beat).await
    }
    async fn stopped(&self, node: &str) -> scheduler_core::Result<()> {
        self.inner.stopped(node).await
    }
    async fn instances(&self) -> scheduler_core::Result<Vec<scheduler_core::InstanceRow>> {
        self.inner.instances().await
    }
    async fn leases(&self) -> scheduler_core::Result<Vec<scheduler_core::LeaseRow>> {
        self.inner.leases().await
    }
    async fn runs(
        &self,
        j: Option<&str>,
        p: Page,
    ) -> scheduler_core::Result<Vec<scheduler_core::RunRow>> {
        self.inner.runs(j, p).await
    }
    async fn leases_listing(
        &self,
        q: &scheduler_core::ListQuery,
    ) -> scheduler_core::Result<scheduler_core::Listing<scheduler_core::LeaseRow>> {
        self.inner.leases_listing(q).await
    }
    async fn schedules_listing(
        &self,
        q: &scheduler_core::ListQuery,
    ) -> scheduler_core::Result<scheduler_core::Listing<scheduler_core::ScheduleRow>> {
        self.inner.schedules_listing(q).await
    }
    async fn runs_where(
        &self,
        q: &scheduler_core::RunQuery,
    ) -> scheduler_core::Result<Vec<scheduler_core::RunRow>> {
        self.inner.runs_where(q).await
    }
    async fn failing_jobs(&self) -> scheduler_core::Result<Vec<String>> {
        self.inner.failing_jobs().await
    }
}

#[scheduler_core::async_trait]
impl scheduler_core::Store for Faulty {
    async fn take(
        &self,
        r: &[scheduler_core::TakeRequest],
        ttl: scheduler_core::Ttl,
    ) -> scheduler_core::Result<scheduler_core::Taken> {
        self.inner.take(r, ttl).await
    }
    async fn renew(
        &self,
        l: &[scheduler_core::LeaseKey],
        ttl: scheduler_core::Ttl,
    ) -> scheduler_core::Result<Vec<scheduler_core::Renewed>> {
        self.inner.renew(l, ttl).await
    }
    async fn release(
        &self,
        l: &[scheduler_core::LeaseKey],
        how: scheduler_core::Release,
    ) -> scheduler_core::Result<Vec<scheduler_core::LeaseName>> {
        if let Some(state) = self.inner.poll(None).await? {
            for t in &state.triggers {
                if let TriggerState::Running { holder, .. } = &t.state
                    && l.iter().any(|k| k.holder == *holder)
                {
                    self.early.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
        self.inner.release(l, how).await
    }
    async fn now(&self) -> scheduler_core::Result<DateTime<Utc>> {
        self.inner.now().await
    }
    fn controls(&self) -> Option<&dyn Controls> {
        Some(self)
    }
}
