use scheduler_core::{BoxError, JobContext, job};

#[job(every = "1m", scope = "global")]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {}
