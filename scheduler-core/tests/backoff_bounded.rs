//! No store retry waits longer than a quarter of the lease ttl, whatever backoff cap
//! the app configured: once the store answers again, the instance is back at work
//! well within one lease's life.
//!
//! On the in-memory store, on paused tokio time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use scheduler_core::{BoxError, Idempotent, JobContext, MemoryStore, Outcome, Schedule, Scheduler};
use tokio::time::Instant;

struct Every {
    runs: Arc<Mutex<Vec<Instant>>>,
}

#[scheduler_core::async_trait]
impl Idempotent for Every {
    fn name(&self) -> &str {
        "every-second"
    }
    fn schedule(&self) -> Schedule {
        Schedule::every(Duration::from_secs(1))
    }
    async fn run(&self, _ctx: JobContext) -> Result<(), BoxError> {
        self.runs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Instant::now());
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn after_an_outage_the_first_retry_comes_within_a_quarter_ttl() {
    let store = Arc::new(MemoryStore::new());
    let runs = Arc::new(Mutex::new(Vec::new()));
    // A 2 s ttl, but a backoff cap of a minute.
    let scheduler = Scheduler::builder(store.clone())
        .node_id("a")
        .lease_ttl(Duration::from_secs(2))
        .retry_backoff(Duration::from_millis(100), Duration::from_secs(60))
        .job(Every { runs: runs.clone() })
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let stats = scheduler.stats();
    let outage = async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        store.set_failing(true);
        // Long enough for an uncapped backoff to grow far past the ttl.
        tokio::time::sleep(Duration::from_secs(120)).await;
        store.set_failing(false);
        Instant::now()
    };
    let (_, recovered) = tokio::join!(
        scheduler.run_until(tokio::time::sleep(Duration::from_secs(130))),
        outage
    );
    let runs = runs.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let first_after = runs
        .iter()
        .find(|at| **at >= recovered)
        .unwrap_or_else(|| panic!("nothing ran after the store recovered"));
    // A retry within 500 ms (a quarter ttl), then the next tick within a second.
    let waited = *first_after - recovered;
    assert!(
        waited <= Duration::from_millis(1_500),
        "back at work {waited:?} after the store answered again"
    );
    assert!(stats.count("every-second", Outcome::Succeeded) >= 5);
}
