//! Every policy key, and the scheduler `build()` accepts the jobs the macro accepts.

use std::time::Duration;

use scheduler_core::{
    BoxError, CatchUp, Idempotent, JobContext, MemoryStore, Overlap, Policy, Scheduler, job,
};

#[job(
    every = "1h",
    jitter = "1m",
    catch_up = "all",
    catch_up_window = "6h",
    catch_up_max = 3,
    overlap = "buffer_one",
    retry = 2,
    retry_backoff = "10s",
    timeout = "5m"
)]
async fn report(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

// Just below the limits: jitter and backoff under the shortest gap (15 minutes).
#[job(
    cron = "0 */15 * * * *",
    tz = "Europe/Berlin",
    jitter = "14m59s",
    catch_up = "skip",
    retry = 1,
    retry_backoff = "14m59s",
    timeout = "1ms"
)]
async fn poll(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

// The default backoff (1s) fits a period over a second.
#[job(every = "1s500ms", retry = 3, overlap = "skip", catch_up = "latest")]
async fn ping(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {
    assert_eq!(report.catch_up(), Some(Duration::from_secs(6 * 3600)));
    assert_eq!(
        report.policy(),
        Policy::default()
            .catch_up(CatchUp::All { max: 3 })
            .overlap(Overlap::BufferOne)
            .retry(2, Duration::from_secs(10))
            .timeout(Duration::from_secs(300))
    );
    assert_eq!(
        poll.policy(),
        Policy::default()
            .catch_up(CatchUp::Skip)
            .retry(1, Duration::from_secs(899))
            .timeout(Duration::from_millis(1))
    );
    assert_eq!(
        ping.policy(),
        Policy::default()
            .catch_up(CatchUp::Latest)
            .overlap(Overlap::Skip)
            .retry(3, Duration::from_secs(1))
    );
    let built = Scheduler::builder(MemoryStore::new())
        .job(report)
        .job(poll)
        .job(ping)
        .build();
    assert!(built.is_ok(), "{:?}", built.err());
}
