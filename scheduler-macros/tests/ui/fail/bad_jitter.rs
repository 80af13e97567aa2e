use scheduler_core::{BoxError, JobContext, job};

#[job(every = "1m", jitter = "1.5s")]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {}
