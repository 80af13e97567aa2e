use scheduler_core::{BoxError, JobContext, job};

#[job(every = "1m", catch_up = "5")]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {}
