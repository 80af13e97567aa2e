//! The default dashboard reads of [`Controls`] (`paused`, `open_triggers`,
//! `schedule`, `schedules_page`, built from `poll` and `schedules`; the listings,
//! built from `leases`, `schedules` and `runs`) keep the rules the stores' own reads
//! keep: what a store that overrides none of them gets.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use scheduler_core::{
    ControlRecord, ControlRequest, ControlState, Controls, Holder, Lease, LeaseKey, LeaseName,
    LeaseRow, MemoryStore, Outcome, Page, Release, Renewed, Result, RunRow, ScheduleRow, Store,
    TakeRequest, Taken, Tick, Trigger, TriggerId, Ttl, async_trait, BoxError, RunRecord, RunRecorder,
};
use scheduler_store_tests::SharedStore;

/// The memory store through the required methods only: every dashboard read is the
/// trait's default. Its run history is a list (the memory store keeps none).
#[derive(Debug, Default)]
struct RequiredOnly(MemoryStore, Mutex<Vec<RunRow>>);

#[async_trait]
impl RunRecorder for RequiredOnly {
    async fn record(&self, run: &RunRecord) -> std::result::Result<(), BoxError> {
        let mut runs = self.1.lock().unwrap_or_else(|e| e.into_inner());
        let id = runs.len() as i64 + 1;
        runs.push(RunRow {
            id,
            job: run.job.clone(),
            tick: run.tick.at(),
            node: run.node.clone(),
            token: run.token.get(),
            started: run.started,
            finished: run.finished,
            outcome: run.outcome,
            error: run.error.clone(),
            attempt: run.attempt,
        });
        Ok(())
    }
}

#[async_trait]
impl Store for RequiredOnly {
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
    async fn request_cancel(&self, name: &LeaseName, newer: Tick) -> Result<bool> {
        self.0.request_cancel(name, newer).await
    }
    fn controls(&self) -> Option<&dyn Controls> {
        Some(self)
    }
}

#[async_trait]
impl Controls for RequiredOnly {
    async fn pause(&self, req: &ControlRequest) -> Result<ControlRecord> {
        self.0.pause(req).await
    }
    async fn resume(&self, req: &ControlRequest, catch_up: bool) -> Result<ControlRecord> {
        self.0.resume(req, catch_up).await
    }
    async fn trigger(&self, req: &ControlRequest) -> Result<Trigger> {
        self.0.trigger(req).await
    }
    async fn trigger_status(&self, id: TriggerId) -> Result<Option<Trigger>> {
        self.0.trigger_status(id).await
    }
    async fn claim_trigger(
        &self,
        id: TriggerId,
        lease: &LeaseName,
        holder: &Holder,
        ttl: Ttl,
    ) -> Result<Option<Lease>> {
        self.0.claim_trigger(id, lease, holder, ttl).await
    }
    async fn finish_trigger(
        &self,
        id: TriggerId,
        holder: Option<&Holder>,
        outcome: Outcome,
        error: Option<&str>,
    ) -> Result<bool> {
        self.0.finish_trigger(id, holder, outcome, error).await
    }
    async fn control_history(&self, job: Option<&str>, page: Page) -> Result<Vec<ControlRecord>> {
        self.0.control_history(job, page).await
    }
    async fn poll(&self, since: Option<i64>) -> Result<Option<ControlState>> {
        self.0.poll(since).await
    }
    async fn put_schedule(&self, row: &ScheduleRow, by: &str, why: &str) -> Result<ControlRecord> {
        self.0.put_schedule(row, by, why).await
    }
    async fn remove_schedule(
        &self,
        name: &str,
        by: &str,
        why: &str,
    ) -> Result<Option<ControlRecord>> {
        self.0.remove_schedule(name, by, why).await
    }
    async fn schedules(&self) -> Result<Vec<ScheduleRow>> {
        self.0.schedules().await
    }
    async fn register_handlers(&self, node: &str, names: &[String]) -> Result<()> {
        self.0.register_handlers(node, names).await
    }
    async fn handlers(&self) -> Result<Vec<String>> {
        self.0.handlers().await
    }
    async fn leases(&self) -> Result<Vec<LeaseRow>> {
        self.0.leases().await
    }
    async fn runs(&self, job: Option<&str>, page: Page) -> Result<Vec<RunRow>> {
        let runs = self.1.lock().unwrap_or_else(|e| e.into_inner());
        Ok(runs
            .iter()
            .rev()
            .filter(|r| job.is_none_or(|job| r.job == job))
            .filter(|r| page.before.is_none_or(|before| r.id < before))
            .take(page.limit as usize)
            .cloned()
            .collect())
    }
    async fn register_jobs(&self, node: &str, names: &[String]) -> Result<()> {
        self.0.register_jobs(node, names).await
    }
    async fn jobs(&self) -> Result<Vec<String>> {
        self.0.jobs().await
    }
}

#[tokio::test]
async fn the_default_reads_keep_the_rules() {
    let store: SharedStore = Arc::new(RequiredOnly::default());
    scheduler_store_tests::controls::reads_for_dashboards(&store, &store).await;
}

#[tokio::test]
async fn the_default_listings_keep_the_rules() {
    let store: SharedStore = Arc::new(RequiredOnly::default());
    scheduler_store_tests::listing::all(&store).await;
}

#[tokio::test]
async fn the_default_run_filters_keep_the_rules() {
    let required = Arc::new(RequiredOnly::default());
    let store: SharedStore = required.clone();
    scheduler_store_tests::listing::runs_where_and_failing_jobs(&store, &*required).await;
}
