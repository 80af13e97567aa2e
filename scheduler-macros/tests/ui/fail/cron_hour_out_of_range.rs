use scheduler_core::{BoxError, JobContext, job};

#[job(cron = "*/15 * * * *")]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {}
