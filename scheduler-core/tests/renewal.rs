//! Renewal is driven by lease expiry: a failing take never holds it up.

use std::sync::Arc;
use std::time::Duration;

use scheduler_core::{
    BoxError, Idempotent, JobContext, LeaseName, MemoryStore, Outcome, Schedule, Scheduler,
};

/// Sleeps `work`, every `every`.
struct Sleeper {
    name: &'static str,
    every: Duration,
    work: Duration,
}

#[scheduler_core::async_trait]
impl Idempotent for Sleeper {
    fn name(&self) -> &str {
        self.name
    }
    fn schedule(&self) -> Schedule {
        Schedule::every(self.every)
    }
    async fn run(&self, _ctx: JobContext) -> Result<(), BoxError> {
        tokio::time::sleep(self.work).await;
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_failing_take_never_delays_the_renewal_of_a_running_lease() {
    let store = Arc::new(MemoryStore::new());
    // As if the job ran before: start-up catches up the tick before it.
    store.set_jobs_known(true);
    // ttl 2 s, renewals every 500 ms; the take's backoff grows to 10 s.
    let scheduler = Scheduler::builder(store.clone())
        .node_id("a")
        .lease_ttl(Duration::from_secs(2))
        .retry_backoff(Duration::from_secs(1), Duration::from_secs(10))
        .job(Sleeper {
            name: "long",
            every: Duration::from_secs(3600),
            work: Duration::from_secs(60),
        })
        .job(Sleeper {
            name: "brisk",
            every: Duration::from_secs(1),
            work: Duration::from_millis(10),
        })
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let stats = scheduler.stats();
    let long = LeaseName::new("long").unwrap_or_else(|e| panic!("{e}"));
    let watch = store.clone();
    let run = tokio::spawn(scheduler.run_until(tokio::time::sleep(Duration::from_secs(40))));
    // `long` starts on the next hour boundary: wait for it to hold its lease.
    while watch.row(&long).is_none() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let holder = watch.row(&long).map(|r| r.holder);
    // Every take fails from now on (`brisk` keeps asking, backing off up to 10 s).
    watch.set_failing_takes(true);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(stats.count("long", Outcome::LeaseLost), 0);
    let row = watch.row(&long).unwrap_or_else(|| panic!("no row"));
    assert_eq!(Some(row.holder), holder, "the lease changed hands");
    assert!(row.expires_at > watch.clock().now(), "the lease expired");
    watch.set_failing_takes(false);
    let _ = run.await;
}
