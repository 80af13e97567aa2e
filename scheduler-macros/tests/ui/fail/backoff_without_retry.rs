use scheduler_core::{BoxError, JobContext, job};

#[job(every = "1m", retry_backoff = "5s")]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {}
