use scheduler_core::{BoxError, JobContext, job};

#[job(cron = "0 0 24 * * *")]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {}
