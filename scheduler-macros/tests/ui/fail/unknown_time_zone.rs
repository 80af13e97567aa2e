use scheduler_core::{BoxError, JobContext, job};

#[job(cron = "0 0 3 * * *", tz = "Mars/Olympus")]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job(cron = "0 0 3 * * *", tz = "europe/berlin")]
async fn compact(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {}
