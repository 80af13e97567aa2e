//! A panicking job is reported as failed and releases its lease; the other jobs go
//! on.
//!
//! On the in-memory store, on paused tokio time.

mod support;

use std::time::Duration;

use scheduler_core::Outcome;
use support::{Log, Probe, builder, runs, store};

#[tokio::test(start_paused = true)]
async fn a_panicking_job_is_reported_and_the_others_go_on() {
    let (store, log) = (store(), Log::default());
    let mut bad = Probe::new("bad", &store, &log);
    bad.panic = true;
    let scheduler = builder(&store)
        .job(bad)
        .job(Probe::new("good", &store, &log))
        .build()
        .expect("build");
    let stats = scheduler.stats();
    scheduler
        .run_until(tokio::time::sleep(Duration::from_millis(5_500)))
        .await;
    assert!(stats.count("bad", Outcome::Failed) >= 4);
    assert!(runs(&log, "good").len() >= 5);
    // The panicked runs released their leases: every tick was attempted afresh.
    assert!(stats.count("bad", Outcome::HeldElsewhere) == 0);
}

/// Collects the runs' error texts.
#[derive(Debug, Default)]
struct Errors(std::sync::Mutex<Vec<String>>);

#[scheduler_core::async_trait]
impl scheduler_core::RunRecorder for Errors {
    async fn record(
        &self,
        run: &scheduler_core::RunRecord,
    ) -> Result<(), scheduler_core::BoxError> {
        if let Some(error) = &run.error {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(error.clone());
        }
        Ok(())
    }
}

/// A job whose error has causes.
struct Chained;

#[derive(Debug)]
struct Outer(std::io::Error);

impl std::fmt::Display for Outer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("syncing invoices failed")
    }
}

impl std::error::Error for Outer {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

#[scheduler_core::async_trait]
impl scheduler_core::Idempotent for Chained {
    fn name(&self) -> &str {
        "chained"
    }
    fn schedule(&self) -> scheduler_core::Schedule {
        scheduler_core::Schedule::every(Duration::from_secs(1))
    }
    async fn run(&self, _ctx: scheduler_core::JobContext) -> Result<(), scheduler_core::BoxError> {
        Err(Outer(std::io::Error::other(
            "connection reset by the invoicing API",
        ))
        .into())
    }
}

/// What a failed run reports (its log line, its history row) is the error's whole
/// chain, and a panic's message.
#[tokio::test(start_paused = true)]
async fn a_failed_run_reports_its_error_chain_and_a_panic_its_message() {
    let (store, log) = (store(), Log::default());
    let mut bad = Probe::new("bad", &store, &log);
    bad.panic = true;
    let errors = std::sync::Arc::new(Errors::default());
    let scheduler = builder(&store)
        .job(bad)
        .job(Chained)
        .record_runs(errors.clone())
        .build()
        .expect("build");
    scheduler
        .run_until(tokio::time::sleep(Duration::from_millis(2_500)))
        .await;
    let errors = errors.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert!(
        errors.contains(&"the job panicked: probe told to panic".to_owned()),
        "{errors:?}"
    );
    assert!(
        errors
            .contains(&"syncing invoices failed: connection reset by the invoicing API".to_owned()),
        "{errors:?}"
    );
}
