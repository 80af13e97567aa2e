use scheduler_core::{BoxError, JobContext, job};

#[job(every = "30s", cron = "0 */15 * * * *")]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {}
