//! Lines pasted from a crontab are read as crontab reads them, by `#[job]` and by
//! `build()` alike: 5 fields, weekday numbers, shorthands, `L` and `#`.

use scheduler_core::{BoxError, Idempotent, JobContext, MemoryStore, Scheduler, job};

#[job(cron = "0 9 * * 1-5", tz = "Europe/Berlin")]
async fn weekdays(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job(cron = "0 0 1,15 * SUN")]
async fn first_fifteenth_and_sundays(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job(cron = "0 0 L * *")]
async fn month_end(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job(cron = "0 0 * * FRI#2")]
async fn second_friday(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job(cron = "@daily")]
async fn daily(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {
    for job in [
        &weekdays as &dyn Idempotent,
        &first_fifteenth_and_sundays,
        &month_end,
        &second_friday,
        &daily,
    ] {
        assert_eq!(job.schedule().validate(), Ok(()), "{}", job.name());
    }
    let built = Scheduler::builder(MemoryStore::new())
        .job(weekdays)
        .job(first_fifteenth_and_sundays)
        .job(month_end)
        .job(second_friday)
        .job(daily)
        .build();
    assert!(built.is_ok(), "{:?}", built.err());
}
