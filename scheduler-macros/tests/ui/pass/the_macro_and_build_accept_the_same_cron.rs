//! What `#[job]` accepts, `Schedule::validate` (and so `build()`) accepts too: an
//! expression that fires every second, or on all seconds but one, is a schedule.

use scheduler_core::{BoxError, Idempotent, JobContext, MemoryStore, Scheduler, job};

#[job(cron = "* * * * * *")]
async fn every_second(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job(cron = "0-58 * * * * *")]
async fn almost_every_second(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job(cron = "* * 0-2 * * *", tz = "Europe/Berlin")]
async fn nightly_window(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {
    for job in [
        &every_second as &dyn Idempotent,
        &almost_every_second,
        &nightly_window,
    ] {
        assert_eq!(job.schedule().validate(), Ok(()), "{}", job.name());
    }
    let built = Scheduler::builder(MemoryStore::new())
        .job(every_second)
        .job(almost_every_second)
        .job(nightly_window)
        .build();
    assert!(built.is_ok(), "{:?}", built.err());
}
