use scheduler_core::{BoxError, Idempotent, JobContext, Schedule, Scope, job};

#[job(cron = "0 */15 * * * *", tz = "Europe/Berlin", scope = "node")]
async fn uptime_checks(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

// UTC unless a zone is named; a year field is fine.
#[job(cron = "0 30 2 * * Mon-Fri 2030")]
async fn weekdays(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {
    assert_eq!(
        uptime_checks.schedule(),
        Schedule::cron("0 */15 * * * *").in_time_zone("Europe/Berlin")
    );
    assert_eq!(uptime_checks.scope(), Scope::Node);
    assert_eq!(
        weekdays.schedule(),
        Schedule::cron("0 30 2 * * Mon-Fri 2030")
    );
    assert_eq!(weekdays.scope(), Scope::Cluster);
}
